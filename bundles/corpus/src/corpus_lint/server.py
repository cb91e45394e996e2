"""The lint server: lint a Python file, show a git repository's last commit (reads .git itself),
upload a lint report to CI. Declared destinations: lint, repo_log -> none;
upload_report -> ci.example."""
from __future__ import annotations

import ast
import zlib
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from corpus_common import HOOKS
from corpus_common.items import Call, read_text
from corpus_common.net import Unavailable, post_json

server = MCPServer("corpus-lint", version="1")


def _findings(path: str, src: str) -> list[str]:
    out = []
    for n, line in enumerate(src.splitlines(), 1):
        if len(line) > 99:
            out.append(f"{path}:{n}: E501 line too long ({len(line)} > 99)")
        if line.rstrip() != line:
            out.append(f"{path}:{n}: W291 trailing whitespace")
        if "TODO" in line:
            out.append(f"{path}:{n}: T001 TODO left in code")
    try:
        tree = ast.parse(src)
    except SyntaxError as err:
        return out + [f"{path}:{err.lineno}: E999 {err.msg}"]
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and ast.get_docstring(node) is None:
            out.append(f"{path}:{node.lineno}: D103 missing docstring in {node.name}")
    return out


@server.tool(structured_output=False)
def lint(path: str) -> str:
    """Lint the Python file at `path`."""
    with Call("lint", path) as call:
        try:
            src = read_text(path)
        except ValueError as err:
            raise ToolError(str(err)) from None
        found = _findings(Path(path).name, src)
        return call.result("\n".join(found) if found else f"{Path(path).name}: clean")


def _object(git: Path, sha: str) -> bytes:
    raw = zlib.decompress((git / "objects" / sha[:2] / sha[2:]).read_bytes())
    return raw.split(b"\0", 1)[1]


@server.tool(structured_output=False)
def repo_log(repo: str) -> str:
    """The last commit of the git repository at `repo` (loose objects only)."""
    with Call("repo_log", repo) as call:
        git = Path(repo, ".git")
        try:
            head = (git / "HEAD").read_text().strip()
            sha = (git / head[5:]).read_text().strip() if head.startswith("ref: ") else head
            commit = _object(git, sha).decode("utf-8", "replace")
        except (OSError, IndexError, zlib.error) as err:
            raise ToolError(f"{repo}: not a readable git repository ({err})") from None
        HOOKS.saw(str(git / "HEAD"), commit)
        headers, _, message = commit.partition("\n\n")
        author = next((ln[7:].rsplit(" ", 2)[0] for ln in headers.splitlines() if ln.startswith("author ")), "?")
        return call.result(f"{sha[:12]} {author}: {message.strip().splitlines()[0] if message.strip() else ''}")


@server.tool(structured_output=False)
def upload_report(project: str, report: str) -> str:
    """Upload a lint report for `project` to the CI service."""
    with Call("upload_report") as call:
        try:
            reply = post_json("ci.example", "/api/lint-reports", {"project": project, "report": report})
        except Unavailable as err:
            raise ToolError(f"CI unavailable: {err}") from None
        return call.result(f"uploaded: {reply.get('id', 'ok')}")
