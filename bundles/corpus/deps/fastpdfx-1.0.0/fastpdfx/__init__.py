"""fastpdfx 1.0.0: text of simple PDFs (uncompressed content streams, `(...) Tj` / `TJ`).

A stand-in third-party dependency of the documents server, vendored here so that the corpus can
ship a release whose only change is a bump of this dependency (variant `dep`)."""
from __future__ import annotations

import re

__version__ = "1.0.0"

_STREAM = re.compile(rb"stream\r?\n(.*?)\r?\nendstream", re.S)
_TEXT = re.compile(rb"\((?:\\.|[^\\)])*\)\s*Tj|\[(?:[^\]]*)\]\s*TJ|T\*|\d+(?:\.\d+)?\s+-?\d+(?:\.\d+)?\s+Td")
_STR = re.compile(rb"\(((?:\\.|[^\\)])*)\)")


def _unescape(raw: bytes) -> str:
    out, i = bytearray(), 0
    while i < len(raw):
        c = raw[i]
        if c == 0x5C and i + 1 < len(raw):  # backslash
            n = raw[i + 1]
            out += {ord("n"): b"\n", ord("r"): b"\r", ord("t"): b"\t"}.get(n, bytes([n]))
            i += 2
        else:
            out.append(c)
            i += 1
    return out.decode("latin-1")


def extract_text(data: bytes) -> str:
    """The text of every page, one line per text-positioning operator."""
    lines: list[str] = []
    current = ""
    for stream in _STREAM.findall(data):
        for op in _TEXT.finditer(stream):
            tok = op.group(0)
            if tok.endswith(b"Tj") or tok.endswith(b"TJ"):
                current += "".join(_unescape(s) for s in _STR.findall(tok))
            else:  # Td / T*: a new line
                if current:
                    lines.append(current)
                current = ""
        if current:
            lines.append(current)
            current = ""
    return "\n".join(lines)


def extract_file(path: str) -> str:
    with open(path, "rb") as f:
        return extract_text(f.read())
