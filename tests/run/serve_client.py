"""The agent of `germline serve`'s tests: the official MCP Python SDK's Streamable HTTP client.

usage: serve_client.py URL TOKEN_FILE CALLS
Initializes, lists the tools, calls `get_current_time` (timezone UTC) CALLS times, closes the
session (DELETE), and prints one JSON object: the server's name, the tool names, the first
call's result, every call's latency and the initialize's in milliseconds, and the wall-clock
seconds when the first call was sent and the last answered (calls_t0, calls_t1). TOKEN_FILE `-` sends no token."""
import asyncio, json, sys, time

from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError


async def main(url, token_file, calls):
    headers = {}
    if token_file != "-":
        headers["Authorization"] = "Bearer " + open(token_file).read().strip()
    async with create_mcp_http_client(headers=headers) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                t = time.perf_counter()
                init = await session.initialize()
                init_ms = (time.perf_counter() - t) * 1000
                tools = await session.list_tools()
                first, latencies = None, []
                calls_t0 = time.time()
                for _ in range(calls):
                    t = time.perf_counter()
                    r = await session.call_tool("get_current_time", {"timezone": "UTC"})
                    latencies.append((time.perf_counter() - t) * 1000)
                    if first is None:
                        first = r.model_dump(by_alias=True, mode="json", exclude_none=True)
                calls_t1 = time.time()
                try:
                    await session.call_tool("no_such_tool", {})
                    unknown = None
                except MCPError as e:
                    unknown = e.error.message
    print(json.dumps({
        "server": init.server_info.name,
        "protocol": init.protocol_version,
        "tools": sorted(t.name for t in tools.tools),
        "first": first,
        "unknown_tool_error": unknown,
        "latency_ms": latencies,
        "initialize_ms": init_ms,
        "calls_t0": calls_t0,
        "calls_t1": calls_t1,
    }))


asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
