"""The agent of the conformance test's SSE check: the official MCP Python SDK's Streamable HTTP
client against bundles/everything (unprotected, or under `germline serve`).

usage: stream_client.py URL
Calls test_tool_with_logging, test_tool_with_progress (with a progress token), test_sampling
and test_elicitation, answering the server's sampling and elicitation requests, and prints one
JSON object of what arrived during the calls and their results (ping's time too)."""
import asyncio, json, sys, time

from mcp import types
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client


def same_keys(t):
    """The server prints the elicited object as it received it; germline hands a copy the
    agent's answer with its keys sorted (serde_json's map): JSON-equal, so compared as JSON."""
    head, sep, obj = t.partition("content=")
    return head + sep + json.dumps(json.loads(obj), sort_keys=True) if sep else t


async def main(url):
    logs, progress, asked = [], [], []

    async def on_log(params):
        logs.append(params.data)

    async def on_sample(ctx, params):
        asked.append("sampling:" + params.messages[0].content.text)
        return types.CreateMessageResult(
            role="assistant", model="test", content=types.TextContent(type="text", text="sampled")
        )

    async def on_elicit(ctx, params):
        asked.append("elicitation:" + params.message)
        return types.ElicitResult(action="accept", content={"username": "u", "email": "e@x"})

    async def on_progress(p, total, message):
        progress.append([p, total])

    async with streamable_http_client(url) as (read, write):
        async with ClientSession(
            read, write, logging_callback=on_log, sampling_callback=on_sample, elicitation_callback=on_elicit
        ) as s:
            await s.initialize()
            text = lambda r: [c.text for c in r.content if c.type == "text"]
            out = {
                "logging": text(await s.call_tool("test_tool_with_logging", {})),
                "progress": text(await s.call_tool("test_tool_with_progress", {}, progress_callback=on_progress)),
                "sampling": text(await s.call_tool("test_sampling", {"prompt": "hi"})),
                "elicitation": [same_keys(t) for t in text(await s.call_tool("test_elicitation", {"message": "who?"}))],
            }
            t = time.perf_counter()
            await s.send_ping()
            ping_ms = (time.perf_counter() - t) * 1000
    print(json.dumps({"results": out, "logs": logs, "progress": progress, "asked": asked, "ping_ms": ping_ms}))


asyncio.run(main(sys.argv[1]))
