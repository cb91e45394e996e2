# A release on the SDK's low-level Server and stdio_server, run from asyncio (not anyio).
import asyncio

import mcp.server.stdio
import mcp_types as types
from mcp.server.lowlevel import Server


async def list_tools(ctx, params):
    schema = {"type": "object", "properties": {"text": {"type": "string"}}}
    return types.ListToolsResult(tools=[types.Tool(name="shout", description="upper-case", input_schema=schema)])


async def call_tool(ctx, params):
    text = (params.arguments or {}).get("text", "")
    return types.CallToolResult(content=[types.TextContent(type="text", text=text.upper())])


server = Server("lowlevel", on_list_tools=list_tools, on_call_tool=call_tool)


async def amain():
    async with mcp.server.stdio.stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def main():
    asyncio.run(amain())
