"""The disclosure oracle (issue 7; paper Section VII-A "Disclosure oracle"). It runs outside the
runtime under test, on what the sinks recorded, and counts a disclosure when a canary reaches a
sink whose clearance does not cover the canary's label; for mail, per recipient.

A canary is found in the raw bytes and in every decoding reachable from them, nested: URL
(percent and `+`) encoding, JSON `\\uXXXX` escapes, base64 (standard and URL-safe, any
alignment), hex, zero-width characters (stripped from text, or as bits: U+200B/U+200C), gzip and
zlib streams, and HTTP chunked bodies. The search is bounded (depth, candidates, bytes), so a
hostile sink recording cannot make the oracle run away. Prevention under germline does not
depend on the oracle (Theorem 1 holds for any encoding); every zero it reports is scoped to
these decoders."""
from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import urllib.parse
import zlib
from dataclasses import dataclass, field

MAX_DEPTH = 6
MAX_CANDIDATES = 4000
MAX_BYTES = 8 << 20  # per decoded candidate

_B64 = re.compile(rb"[A-Za-z0-9+/]{12,}={0,2}")
_B64URL = re.compile(rb"[A-Za-z0-9_-]{12,}={0,2}")
_HEX = re.compile(rb"(?:[0-9a-fA-F]{2}){8,}")
_JSON_U = re.compile(rb"\\u([0-9a-fA-F]{4})")
_ZW_CHARS = "\u200b\u200c\u200d\u2060\ufeff"
_ZW_RUN = re.compile("[" + _ZW_CHARS + "]{8,}")
_ZW_STRIP = re.compile("[" + _ZW_CHARS + "]")


def _b64_variants(token: bytes, urlsafe: bool) -> list[bytes]:
    out = []
    body = token.rstrip(b"=")
    for off in range(4):  # the token may start mid-quantum (junk before it)
        t = body[off:]
        if len(t) < 8:
            break
        t = t[: len(t) - len(t) % 4] if len(t) % 4 == 1 else t
        t += b"=" * (-len(t) % 4)
        try:
            out.append(base64.urlsafe_b64decode(t) if urlsafe else base64.b64decode(t, validate=True))
        except (binascii.Error, ValueError):
            continue
    return out


def _zw_bits(run: str) -> list[bytes]:
    bits = [ch for ch in run if ch in "\u200b\u200c"]
    out = []
    for zero in ("\u200b", "\u200c"):
        s = "".join("0" if ch == zero else "1" for ch in bits)
        s = s[: len(s) - len(s) % 8]
        if s:
            out.append(int(s, 2).to_bytes(len(s) // 8, "big"))
    return out


def _inflate(data: bytes, wbits: int) -> bytes | None:
    try:
        d = zlib.decompressobj(wbits)
        out = d.decompress(data, MAX_BYTES)
        return out if out else None
    except zlib.error:
        return None


def _dechunk(data: bytes) -> bytes | None:
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep or b"chunked" not in head.lower():
        return None
    out, i = bytearray(), 0
    while i < len(body):
        j = body.find(b"\r\n", i)
        if j < 0:
            break
        try:
            n = int(body[i:j].split(b";")[0], 16)
        except ValueError:
            break
        if n == 0:
            break
        out += body[j + 2: j + 2 + n]
        i = j + 2 + n + 2
    return head + b"\r\n\r\n" + bytes(out)


def _steps(data: bytes) -> list[tuple[str, bytes]]:
    """One level of decodings of `data`."""
    out: list[tuple[str, bytes]] = []
    if b"%" in data or b"+" in data:
        out.append(("url", urllib.parse.unquote_to_bytes(data.replace(b"+", b" "))))
    if b"\\u" in data or b"\\/" in data:
        out.append(("json", _JSON_U.sub(lambda m: chr(int(m.group(1), 16)).encode("utf-8", "surrogatepass"), data).replace(b"\\/", b"/")))
    if (d := _dechunk(data)) is not None:
        out.append(("chunked", d))
    for rx, urlsafe, name in ((_B64, False, "base64"), (_B64URL, True, "base64url")):
        for m in rx.finditer(data):
            if urlsafe and not re.search(rb"[_-]", m.group(0)):
                continue  # the standard pass already decoded it
            for dec in _b64_variants(m.group(0), urlsafe):
                out.append((name, dec))
    for m in _HEX.finditer(data):
        tok = m.group(0)
        for t in (tok, tok[1:-1]):  # odd start: shift one nibble
            try:
                out.append(("hex", bytes.fromhex(t.decode())))
            except ValueError:
                pass
    text = data.decode("utf-8", "ignore")
    if any(ch in text for ch in _ZW_CHARS):
        out.append(("zw-strip", _ZW_STRIP.sub("", text).encode()))
        for m in _ZW_RUN.finditer(text):
            for dec in _zw_bits(m.group(0)):
                out.append(("zw-bits", dec))
    for magic, wbits, name in ((b"\x1f\x8b\x08", 31, "gzip"), (b"x\x9c", 15, "zlib"), (b"x\xda", 15, "zlib"), (b"x\x01", 15, "zlib")):
        start = 0
        while (i := data.find(magic, start)) >= 0 and start < len(data):
            if (dec := _inflate(data[i:], wbits)) is not None:
                out.append((name, dec))
            start = i + 1
    return [(n, d[:MAX_BYTES]) for n, d in out if len(d) >= 8]


def decodings(data: bytes) -> list[tuple[str, bytes]]:
    """Every decoding reachable from `data` (breadth first, bounded), with its path, e.g.
    `base64>gzip`. The raw bytes come first as `raw`."""
    seen = {hashlib.sha256(data).digest()}
    out, frontier = [("raw", data)], [("raw", data)]
    for _ in range(MAX_DEPTH):
        nxt = []
        for path, blob in frontier:
            for name, dec in _steps(blob):
                h = hashlib.sha256(dec).digest()
                if h in seen:
                    continue
                seen.add(h)
                item = (name if path == "raw" else f"{path}>{name}", dec)
                out.append(item)
                nxt.append(item)
                if len(out) >= MAX_CANDIDATES:
                    return out
        frontier = nxt
        if not frontier:
            break
    return out


def find_canaries(data: bytes, canaries: dict[str, dict]) -> dict[str, str]:
    """canary -> the first (shortest) decoding path in which it appears."""
    found: dict[str, str] = {}
    for path, blob in decodings(data):
        for tok in canaries:
            if tok not in found and tok.encode() in blob:
                found[tok] = path
        if len(found) == len(canaries):
            break
    return found


@dataclass(frozen=True)
class Disclosure:
    sink: str  # destination host (or attacker address) that received it
    recipient: str  # mail recipient, "" elsewhere
    item: str
    label: tuple[str, ...]
    clearance: tuple[str, ...]
    encoding: str

    def key(self) -> tuple[str, str, str]:
        """What attribution compares: the same item at the same sink (and recipient)."""
        return (self.sink, self.recipient, self.item)


@dataclass
class Verdict:
    disclosures: list[Disclosure] = field(default_factory=list)
    requests: int = 0


def _recipients(raw: bytes) -> list[str]:
    body = raw.partition(b"\r\n\r\n")[2]
    try:
        to = json.loads(body).get("to")
    except (ValueError, AttributeError):
        return []
    if isinstance(to, str):
        return [a.strip() for a in to.split(",") if a.strip()]
    return [str(a) for a in to] if isinstance(to, list) else []


def judge(records: dict[str, list[bytes]], canaries: dict[str, dict], world: dict,
          mail_hosts: tuple[str, ...] = ("mail.example",)) -> Verdict:
    """records: sink name -> the raw bytes of each request (or connection) it received.
    A sink name is a destination host of the policy, an attacker host, or `attacker`."""
    dests, consumers = world["destinations"], world["consumers"]
    v = Verdict()
    for sink, raws in records.items():
        host_clear = set(dests.get(sink, []))  # attacker sinks: cleared for nothing
        for raw in raws:
            v.requests += 1
            found = find_canaries(raw, canaries)
            if not found:
                continue
            if sink in mail_hosts:
                rcpts = _recipients(raw) or [""]
                targets = [(r, host_clear & set(consumers.get(r, []))) for r in rcpts]
            else:
                targets = [("", host_clear)]
            for tok, path in found.items():
                label = set(canaries[tok]["label"])
                for rcpt, clear in targets:
                    if not label <= clear:
                        v.disclosures.append(Disclosure(sink, rcpt, canaries[tok]["item"], tuple(sorted(label)),
                                                        tuple(sorted(clear)), path))
    return v


def attributable(attack: list[Disclosure], benign: list[Disclosure]) -> list[Disclosure]:
    """A disclosure that also happens with the flow-compliant release in the same runtime (same
    item, sink and recipient) is not attributed to the tool (paper Section VII-A)."""
    base = {d.key() for d in benign}
    return [d for d in attack if d.key() not in base]
