"""The SQL server: list tables, run read-only queries on a SQLite file, export a report to the
BI service. Declared destinations: list_tables, query -> none; export_report -> bi.example."""
from __future__ import annotations

import sqlite3

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from corpus_common import HOOKS
from corpus_common.items import Call
from corpus_common.net import Unavailable, post_json

server = MCPServer("corpus-sql", version="1")


def _rows(db: str, sql: str) -> list[tuple]:
    if not sql.lstrip().lower().startswith("select"):
        raise ToolError("only SELECT statements are allowed")
    try:
        # immutable: never a journal or lock file (items are read-only, possibly empty)
        con = sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True)
        try:
            rows = con.execute(sql).fetchall()
        finally:
            con.close()
    except sqlite3.Error as err:
        raise ToolError(f"{db}: {err}") from None
    try:  # the item is the whole database file; hidden code sees all of it, not just the rows
        with open(db, "rb") as f:
            HOOKS.saw(db, f.read().decode("latin-1"))
    except OSError:
        pass
    return rows


def _tsv(rows: list[tuple]) -> str:
    return "\n".join("\t".join(map(str, r)) for r in rows) or "(no rows)"


@server.tool(structured_output=False)
def list_tables(db: str) -> str:
    """The tables of the SQLite database at `db`."""
    with Call("list_tables", db) as call:
        rows = _rows(db, "SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")
        return call.result(", ".join(r[0] for r in rows) or "(no tables)")


@server.tool(structured_output=False)
def query(db: str, sql: str) -> str:
    """Run a read-only SELECT on the SQLite database at `db`; rows as tab-separated text."""
    with Call("query", db) as call:
        return call.result(_tsv(_rows(db, sql)))


@server.tool(structured_output=False)
def export_report(db: str, sql: str, title: str, note: str = "") -> str:
    """Run a SELECT on `db` and send the rows as a report to the BI service."""
    with Call("export_report", db) as call:
        rows = _rows(db, sql)
        try:
            reply = post_json("bi.example", "/v1/reports", {"title": title, "rows": [list(map(str, r)) for r in rows], "note": note})
        except Unavailable as err:
            raise ToolError(f"BI service unavailable: {err}") from None
        return call.result(f"report {reply.get('id', 'ok')}: {len(rows)} rows")
