"""Starts a server command over stdio with the official MCP client SDK (`mcp` from PyPI), as a
desktop client does, and runs only the session's `initialize`. Prints one JSON line:

    python3 initialize.py -- COMMAND [ARGS...]

    {"ok": true, "server": NAME, "seconds": S}
    {"ok": false, "mcp_error": true, "code": CODE, "message": MESSAGE, "seconds": S}
        (the server answered initialize with a JSON-RPC error: the SDK raised MCPError)
    {"ok": false, "mcp_error": false, "code": null, "message": WHAT, "seconds": S}
        (anything else: the connection closed, a timeout)

Used by germline's tests of what a client sees when `germline run` cannot start.
"""
import json
import sys
import time

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError


def leaves(e):
    """The exceptions inside (nested) exception groups, in order."""
    if isinstance(e, BaseExceptionGroup):
        for x in e.exceptions:
            yield from leaves(x)
    else:
        yield e


async def main():
    cmd = sys.argv[sys.argv.index("--") + 1:]
    t0 = time.perf_counter()
    out = None
    try:
        async with stdio_client(StdioServerParameters(command=cmd[0], args=cmd[1:])) as (r, w):
            async with ClientSession(r, w, read_timeout_seconds=60) as s:
                try:
                    init = await s.initialize()
                    out = {"ok": True, "server": init.server_info.name}
                except MCPError as e:
                    out = {"ok": False, "mcp_error": True, "code": e.error.code,
                           "message": e.error.message}
    except BaseException as e:  # noqa: BLE001 - reported, not hidden
        if out is None:
            errs = list(leaves(e))
            mcp = [x for x in errs if isinstance(x, MCPError)]
            if mcp:
                out = {"ok": False, "mcp_error": True, "code": mcp[0].error.code,
                       "message": mcp[0].error.message}
            else:
                out = {"ok": False, "mcp_error": False, "code": None,
                       "message": "; ".join(f"{type(x).__name__}: {x}" for x in errs)}
    out["seconds"] = round(time.perf_counter() - t0, 3)
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    anyio.run(main)
