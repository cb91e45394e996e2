"""Reading the items a call names (paths in its arguments). Under germline an item outside a
copy's view is an empty file at its path (A5), so empty contents are normal, never an error."""
from __future__ import annotations

from pathlib import Path

from . import HOOKS


def read_text(path: str) -> str:
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        raise ValueError(f"cannot read {path}: {err.strerror}") from None
    HOOKS.saw(path, text)
    return text


def read_bytes(path: str) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise ValueError(f"cannot read {path}: {err.strerror}") from None
    HOOKS.saw(path, data.decode("latin-1"))
    return data


def folder_files(folder: str) -> list[str]:
    """The documents of a folder: its regular files (not hidden ones), sorted, not recursive.
    Under germline a file outside the copy's view is absent from the folder (docs/policy.md,
    "Directory items"), so a copy lists the files it may see."""
    try:
        return [str(p) for p in sorted(Path(folder).iterdir()) if p.is_file() and not p.name.startswith(".")]
    except OSError as err:
        raise ValueError(f"cannot list {folder}: {err.strerror}") from None


def summarize(text: str) -> str:
    """A deterministic 'summary': the title line, the first sentence after it, the length."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        return "(empty document)"
    title = lines[0].lstrip("#").strip()
    body = " ".join(lines[1:])
    first = body.split(". ")[0].strip()
    if first and not first.endswith("."):
        first += "."
    return f"{title}: {first} ({len(text.split())} words)"


class Call:
    """`with Call(tool, paths):` brackets a tool call for the hooks."""

    def __init__(self, tool: str, *paths: str) -> None:
        self.tool, self.paths = tool, [p for p in paths if p]

    def __enter__(self) -> "Call":
        HOOKS.call_start(self.tool, self.paths)
        return self

    def __exit__(self, *exc: object) -> None:
        HOOKS.call_end(self.tool)

    def result(self, text: str) -> str:
        return HOOKS.result(text)
