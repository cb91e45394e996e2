"""One session of the official MCP client SDK (`mcp` from PyPI) with the native rmcp server
(issue 28, tests/native/rmcp-server): the tool list, echo, add, read-file of a file of the
release, a call the server refuses (add with a string) and one to a tool it does not have.
Prints one JSON object with what came back, for the comparison of `germline run --mode
germline` with the unprotected binary:

    python3 native_client.py FILE [SETTLE_SECONDS] -- COMMAND [ARGS...]

SETTLE_SECONDS: a pause before the session ends (the time a pool of spawned copies takes to
refill between calls, for the test of its memory cap).
"""
import json
import sys
import time

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError


def texts(result):
    return [getattr(c, "text", None) for c in result.content]


async def main(argv):
    path = argv[1]
    dash = argv.index("--")
    settle = float(argv[2]) if dash > 2 else 0.0
    cmd = argv[dash + 1:]
    params = StdioServerParameters(command=cmd[0], args=cmd[1:])
    out = {}
    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w) as s:
            init = await s.initialize()
            out["server"] = [init.server_info.name, init.server_info.version]
            tools = await s.list_tools()
            out["tools"] = sorted(t.name for t in tools.tools)
            out["schemas"] = {t.name: sorted(t.input_schema.get("required", [])) for t in tools.tools}
            t0 = time.monotonic()
            out["echo"] = texts(await s.call_tool("echo", {"message": "hello from the agent"}))
            out["echo_ms"] = (time.monotonic() - t0) * 1000
            out["add"] = texts(await s.call_tool("add", {"a": 19, "b": 23}))
            out["echo2"] = texts(await s.call_tool("echo", {"message": "a second copy"}))
            out["read"] = texts(await s.call_tool("read-file", {"path": path}))
            bad = await s.call_tool("add", {"a": "not a number", "b": 1})
            out["bad_is_error"] = bool(bad.is_error)
            try:
                missing = await s.call_tool("no-such-tool", {})
                out["missing"] = ["result", bool(missing.is_error)]
            except MCPError as e:
                out["missing"] = ["error", e.code]
            await anyio.sleep(settle)
    print(json.dumps(out))


anyio.run(main, sys.argv)
