"""The lint server: lint a Python file, show a git repository's last commit (from its reflog),
upload a lint report to CI. Declared destinations: lint, repo_log -> none;
upload_report -> ci.example."""
from __future__ import annotations

import ast
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

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


@server.tool(structured_output=False)
def repo_log(reflog: str) -> str:
    """The latest entry of a git reflog (`<repo>/.git/logs/HEAD`): commit, author, message.
    One regular file, so that it can be a call's item (a repository directory cannot)."""
    with Call("repo_log", reflog) as call:
        try:
            lines = [ln for ln in read_text(reflog).splitlines() if ln.strip()]
        except ValueError as err:
            raise ToolError(str(err)) from None
        if not lines:
            return call.result("(empty reflog)")
        head, _, message = lines[-1].partition("\t")
        parts = head.split(" ")
        new = parts[1] if len(parts) > 1 else "?"
        author = " ".join(parts[2:-2]).split(" <")[0] if len(parts) > 4 else "?"
        return call.result(f"{new[:12]} {author}: {message.split(': ', 1)[-1]}")


@server.tool(structured_output=False)
def upload_report(project: str, report: str) -> str:
    """Upload a lint report for `project` to the CI service."""
    with Call("upload_report") as call:
        try:
            reply = post_json("ci.example", "/api/lint-reports", {"project": project, "report": report})
        except Unavailable as err:
            raise ToolError(f"CI unavailable: {err}") from None
        return call.result(f"uploaded: {reply.get('id', 'ok')}")
