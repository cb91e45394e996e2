"""Ping and cancellation over Streamable HTTP (issue 29), on the official MCP Python SDK client.
The same script runs against bundles/everything unprotected and under `germline serve`.

usage: cancel_client.py URL
A long call: `test_sampling`, whose server waits for the agent's sampling answer; this client
never gives it (a tap takes the server's `sampling/createMessage` off the stream before the
SDK's session sees it), so the call runs until it is cancelled. Once the request has arrived:
a `ping` (timed), then the SDK's caller-cancel (which sends `notifications/cancelled`), then
--quiet seconds, then `test_simple_text` (timed). Prints one JSON line first,
{"cancel_monotonic": T, "request_id": ID, "answered_before": bool} (T: CLOCK_MONOTONIC in
seconds, as the test reads it), then {"ping_ms", "cancel_sent": [...], "late": [messages for
the cancelled id, up to the next call's answer], "next_ms", "next_ok", "next_text"}.
"""
import argparse
import json
import sys
import time

import anyio
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError


def dump(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def as_dict(message):
    """A transport message as the JSON object it was on the wire."""
    m = getattr(message, "message", message)
    m = getattr(m, "root", m)
    try:
        return m.model_dump(by_alias=True, mode="json", exclude_none=True)
    except Exception:  # an exception the transport put on the stream
        return {"exception": str(m)}


async def run(s, a, seen, asked):
    ids = {}
    scope = anyio.CancelScope()

    async def call():
        with scope:
            await s.call_tool("test_sampling", {"prompt": "never answered"})
            ids["answered"] = True

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        with anyio.fail_after(60):
            await asked.wait()
        t0 = time.perf_counter()
        await s.send_ping()
        ping_ms = (time.perf_counter() - t0) * 1000
        await anyio.sleep(0.2)
        rid = [m["id"] for m in seen["out"] if m.get("method") == "tools/call"][-1]
        dump({"cancel_monotonic": time.monotonic(), "request_id": rid,
              "answered_before": "answered" in ids})
        scope.cancel()
    await anyio.sleep(a.quiet)
    sent = [m for m in seen["out"] if m.get("method") == "notifications/cancelled"]
    t0 = time.perf_counter()
    try:
        r = await s.call_tool("test_simple_text", {})
        nxt = {"next_ok": not bool(getattr(r, "is_error", False)),
               "next_text": [c.text for c in r.content if getattr(c, "type", "") == "text"]}
    except MCPError as e:
        nxt = {"next_ok": False, "next_text": [str(e)]}
    next_ms = (time.perf_counter() - t0) * 1000
    late = [m for m in seen["in"] if m.get("id") == rid]
    dump({"ping_ms": ping_ms, "cancel_sent": sent, "late": late, "next_ms": next_ms, **nxt})


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--quiet", type=float, default=2.0)
    a = ap.parse_args()
    seen = {"in": [], "out": []}
    asked = anyio.Event()
    async with streamable_http_client(a.url) as (read, write):
        in_tx, in_rx = anyio.create_memory_object_stream(100)
        out_tx, out_rx = anyio.create_memory_object_stream(100)

        async def tap_in():
            async with in_tx:
                async for m in read:
                    d = as_dict(m)
                    seen["in"].append(d)
                    if d.get("method") == "sampling/createMessage":
                        asked.set()  # kept from the session: the server waits on
                        continue
                    await in_tx.send(m)

        async def tap_out():
            async with out_rx:
                async for m in out_rx:
                    seen["out"].append(as_dict(m))
                    await write.send(m)

        async with anyio.create_task_group() as tg:
            tg.start_soon(tap_in)
            tg.start_soon(tap_out)
            async def never(ctx, params):  # declares sampling; the tap keeps requests away
                raise RuntimeError("not reached")

            async with ClientSession(in_rx, out_tx, read_timeout_seconds=60,
                                     sampling_callback=never) as s:
                await s.initialize()
                await run(s, a, seen, asked)
            tg.cancel_scope.cancel()


anyio.run(main)
