"""One agent session on `germline serve`, step by step, with the official MCP Python SDK's
Streamable HTTP client (the lifetime tests act between its steps).

usage: serve_steps.py URL TOKEN_FILE STEPS.json
TOKEN_FILE `-` sends no token. Steps (a JSON array):
    {"tool": NAME, "arguments": {...}}  a tools/call
    {"touch": PATH}                     creates PATH (tells the test where the session is)
    {"wait_file": PATH}                 waits, at most 120 s, until PATH exists
    {"initialize_ms": true}             prints {"initialize_ms": MS}, the initialize's time
    {"sample": {"asked": PATH, "gate": PATH}}
                                        from now on a sampling request of the server creates
                                        `asked`, waits (at most 120 s) until `gate` exists and
                                        answers "sampled" (the hub test holds a call open)
After the last step the session is closed (the SDK sends DELETE) and `{"closed": true}` is
printed. Each call prints one JSON line as it ends: {"tool", "ok", "text": [...], "t0", "t1"}
(t0/t1: wall-clock seconds when the call was sent and answered), or {"tool", "ok": false,
"error"} when the call failed with an MCP or HTTP error."""
import asyncio, json, os, sys, time

from mcp import types
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def dump(obj):
    print(json.dumps(obj), flush=True)


async def main(url, token_file, steps_path):
    steps = json.load(open(steps_path))
    headers = {}
    if token_file != "-":
        headers["Authorization"] = "Bearer " + open(token_file).read().strip()
    sample = {}

    async def wait_for(path):
        for _ in range(1200):
            if os.path.exists(path):
                return
            await asyncio.sleep(0.1)
        raise SystemExit(f"timed out waiting for {path}")

    async def on_sample(ctx, params):
        if sample:
            open(sample["asked"], "w").close()
            await wait_for(sample["gate"])
        return types.CreateMessageResult(
            role="assistant", model="test", content=types.TextContent(type="text", text="sampled"))

    async with create_mcp_http_client(headers=headers) as http:
        async with streamable_http_client(url, http_client=http) as (read, write, *_):
            async with ClientSession(read, write, sampling_callback=on_sample) as session:
                t = time.perf_counter()
                await session.initialize()
                init_ms = (time.perf_counter() - t) * 1000
                for step in steps:
                    if "initialize_ms" in step:
                        dump({"initialize_ms": init_ms})
                    elif "sample" in step:
                        sample.update(step["sample"])
                    elif "touch" in step:
                        open(step["touch"], "w").close()
                    elif "wait_file" in step:
                        for _ in range(1200):
                            if os.path.exists(step["wait_file"]):
                                break
                            await asyncio.sleep(0.1)
                        else:
                            raise SystemExit(f"timed out waiting for {step['wait_file']}")
                    else:
                        t0 = time.time()
                        try:
                            r = await session.call_tool(step["tool"], step.get("arguments", {}))
                        except Exception as e:  # an MCP or HTTP error: the test reads it
                            dump({"tool": step["tool"], "ok": False, "text": [], "error": str(e)})
                            continue
                        dump({"tool": step["tool"], "ok": not bool(getattr(r, "is_error", getattr(r, "isError", False))),
                              "text": [c.text for c in r.content if c.type == "text"],
                              "t0": t0, "t1": time.time()})
    dump({"closed": True})


asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
