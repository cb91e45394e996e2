"""A scripted MCP agent on the official client SDK (`mcp` from PyPI), for germline's tests,
demo and benchmarks. It starts the server command over stdio, runs the steps of a JSON script
and prints one JSON line per call:

    python3 agent.py SCRIPT.json -- COMMAND [ARGS...]
    python3 agent.py SCRIPT.json --url URL [TOKEN_FILE]   (Streamable HTTP, e.g. germline serve)

A script is a list of steps:
    {"tool": NAME, "arguments": {...}, "repeat": N, "meta": {...}, "progress": true}
    {"list_tools": true}
    {"raw": "a line written to the server as is"}   (only as the first steps: before initialize)
    {"sleep": SECONDS}
    {"wait_file": PATH}      (waits, at most 60 s, until PATH exists: the test's turn)
    {"fetch": URL}           (an HTTP GET, e.g. a metrics scrape: {"step": i, "fetch": URL, "body": ...})
A step may carry "sample_reply": TEXT: the agent then offers sampling, and answers every
sampling/createMessage of that call with TEXT.
Each output line: {"step": i, "ok": bool, "text": [...], "structured": ..., "meta": ...,
"error": str|null, "code": the JSON-RPC error code (after an error), "logs": [...], "progress": [...], "ms": float}, and with "sample_reply":
"sampled": [the prompts asked], "logs_at_sampling": [the log messages received before each
sampling request arrived]. "elicit_reply": {...} likewise offers elicitation and accepts every
elicitation/create of that call with that content; the output then has "elicited": [messages].
"""
import json
import os
import sys
import time
import urllib.request

import anyio
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from contextlib import asynccontextmanager


@asynccontextmanager
async def http_transport(url, token_file):
    headers = {}
    if token_file:
        with open(token_file) as f:
            headers["Authorization"] = "Bearer " + f.read().strip()
    async with create_mcp_http_client(headers=headers) as http:
        async with streamable_http_client(url, http_client=http) as streams:
            yield streams[0], streams[1]


def dump(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


async def main():
    script_path = sys.argv[1]
    if sys.argv[2] == "--url":
        transport = http_transport(sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else None)
    elif sys.argv[2] == "--":
        transport = stdio_client(StdioServerParameters(command=sys.argv[3], args=sys.argv[4:]))
    else:
        raise SystemExit("usage: agent.py SCRIPT.json (-- COMMAND [ARGS...] | --url URL [TOKEN_FILE])")
    with open(script_path) as f:
        steps = json.load(f)
    logs = []
    sampling = {"reply": None, "asked": [], "logs_at": [], "elicit": None, "elicited": []}

    async def on_log(params):
        logs.append(params.data if hasattr(params, "data") else str(params))

    async def on_sample(context, params):
        prompt = " ".join(getattr(m.content, "text", "") for m in params.messages)
        sampling["asked"].append(prompt)
        sampling["logs_at"].append([str(x) for x in logs])
        return types.CreateMessageResult(
            role="assistant", model="scripted",
            content=types.TextContent(type="text", text=sampling["reply"] or ""))

    async def on_elicit(context, params):
        sampling["elicited"].append(getattr(params, "message", ""))
        return types.ElicitResult(action="accept", content=sampling["elicit"] or {})

    extra = {}
    if any("sample_reply" in st for st in steps):
        extra["sampling_callback"] = on_sample
    if any("elicit_reply" in st for st in steps):
        extra["elicitation_callback"] = on_elicit
    async with transport as (read, write):
        async with ClientSession(read, write, logging_callback=on_log, read_timeout_seconds=60, **extra) as s:
            init = await s.initialize()
            dump({"step": "initialize", "ok": True, "server": init.server_info.name})
            for i, step in enumerate(steps):
                if "sleep" in step:
                    await anyio.sleep(float(step["sleep"]))
                    continue
                if "wait_file" in step:
                    for _ in range(600):
                        if os.path.exists(step["wait_file"]):
                            break
                        await anyio.sleep(0.1)
                    continue
                if "fetch" in step:
                    with urllib.request.urlopen(step["fetch"], timeout=10) as r:
                        body = r.read().decode()
                    dump({"step": i, "ok": True, "fetch": step["fetch"], "body": body})
                    continue
                if step.get("list_tools"):
                    t = await s.list_tools()
                    dump({"step": i, "ok": True, "tools": sorted(x.name for x in t.tools)})
                    continue
                for _ in range(int(step.get("repeat", 1))):
                    logs.clear()
                    progress = []
                    sampling.update(reply=step.get("sample_reply"), asked=[], logs_at=[],
                                    elicit=step.get("elicit_reply"), elicited=[])

                    async def on_progress(p, total, message):
                        progress.append(message or str(p))

                    t0 = time.perf_counter()
                    out = {"step": i, "tool": step["tool"]}
                    try:
                        r = await s.call_tool(
                            step["tool"], step.get("arguments", {}),
                            progress_callback=on_progress if step.get("progress") else None,
                            meta=step.get("meta"),
                        )
                        out["ok"] = not bool(getattr(r, "is_error", False))
                        out["text"] = [c.text for c in r.content if getattr(c, "type", "") == "text"]
                        out["structured"] = getattr(r, "structured_content", None)
                        meta = getattr(r, "meta", None)
                        out["meta"] = meta if isinstance(meta, dict) else (meta.model_dump() if meta else None)
                        out["error"] = None
                    except Exception as e:  # an MCP error: the call failed, the session goes on
                        out.update(ok=False, text=[], structured=None, meta=None, error=str(e),
                                   code=getattr(getattr(e, "error", None), "code", None))
                    await anyio.sleep(0.05) if step.get("progress") or step.get("wait_logs") else None
                    out["ms"] = (time.perf_counter() - t0) * 1000
                    out["logs"] = [str(x) for x in logs]
                    out["progress"] = list(progress)
                    if "sample_reply" in step:
                        out["sampled"] = list(sampling["asked"])
                        out["logs_at_sampling"] = list(sampling["logs_at"])
                    if "elicit_reply" in step:
                        out["elicited"] = list(sampling["elicited"])
                    dump(out)


if __name__ == "__main__":
    anyio.run(main)
