"""One session of the official MCP client SDK (`mcp` from PyPI) with server-everything
(issue 28): echo, get-sum, a long-running operation with progress, the resource list and one
resource read, then a failing call. Prints one JSON object with what came back, for the
comparison of `germline run --mode germline` with the unprotected server:

    python3 node_client.py -- COMMAND [ARGS...]
"""
import json
import sys
import time

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def texts(result):
    return [getattr(c, "text", None) for c in result.content]


async def main(argv):
    cmd = argv[argv.index("--") + 1:]
    params = StdioServerParameters(command=cmd[0], args=cmd[1:])
    out = {}
    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w) as s:
            init = await s.initialize()
            out["server"] = init.server_info.name
            tools = await s.list_tools()
            out["tools"] = sorted(t.name for t in tools.tools)
            t0 = time.monotonic()
            out["echo"] = texts(await s.call_tool("echo", {"message": "hello from the agent"}))
            out["echo_ms"] = (time.monotonic() - t0) * 1000
            out["sum"] = texts(await s.call_tool("get-sum", {"a": 19, "b": 23}))
            progress = []

            async def on_progress(p, total, message):
                progress.append([p, total])

            long = await s.call_tool("trigger-long-running-operation",
                                     {"duration": 0.3, "steps": 3},
                                     progress_callback=on_progress)
            out["long"] = texts(long)
            out["progress"] = progress
            res = await s.list_resources()
            uris = [str(x.uri) for x in res.resources]
            out["resources"] = uris[:3]
            read = await s.read_resource(uris[0])
            out["read"] = [getattr(c, "text", None) for c in read.contents]
            bad = await s.call_tool("get-sum", {"a": "not a number"})
            out["bad_is_error"] = bool(bad.is_error)
    print(json.dumps(out))


anyio.run(main, sys.argv)
