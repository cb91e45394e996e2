"""Errors, ping and cancellation as an MCP client sees them (issue 29), on the official client
SDK (`mcp` from PyPI) over stdio. The same script runs against the unprotected server and
against `germline run`, so a test can compare the two on the same calls:

    python3 proto_client.py errors -- COMMAND [ARGS...]
    python3 proto_client.py ping TOOL ARGS_JSON --after S --pings N -- COMMAND [ARGS...]
    python3 proto_client.py cancel TOOL ARGS_JSON --after S --quiet S --next TOOL2 ARGS2_JSON
                                   [--go-file PATH] -- COMMAND [ARGS...]
    python3 proto_client.py cancel-queued TOOL ARGS_JSON --after S --next TOOL2 ARGS2_JSON
                                   -- COMMAND [ARGS...]

Every output line is one JSON object:
  errors: {"req": NAME, "ok": bool, "code": int|null, "message": str|null, "data": ...} per
          request (the server's answer as the SDK raised it), after one with the resources
          capability `initialize` announced (in "data");
  ping:   {"pings_ms": [...], "call_ms": float, "call_ok": bool, "call_done_before_pings": bool}
          (N pings sent one after the other, starting S s into the call);
  cancel: {"cancel_monotonic": T, "request_id": ID} just before the SDK's caller-cancel sends
          `notifications/cancelled` (T is CLOCK_MONOTONIC in seconds, as a test reads it), then
          {"late": [...messages for that id, --quiet S and the next call's answer later],
           "next_ms": float, "next_ok": bool, "next_text": [...]}.
          With --go-file the cancel waits (at most 60 s) for PATH to exist instead of --after.
  cancel-queued (same arguments): TOOL2 is called S s into TOOL's call and cancelled 0.3 s
          later, while it waits for its turn: {"first_ok", "second_answered", "late": [...
          messages for its id, up to the answer of one more TOOL2 call], "after_ok"}.
The messages the server sends are observed on the transport's stream, before the SDK's
session reads them (a tap), so that an answer the SDK would drop is still seen.
"""
import argparse
import json
import os
import sys
import time

import anyio
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
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


def error_of(e):
    err = getattr(e, "error", None)
    return {
        "ok": False,
        "code": getattr(err, "code", None),
        "message": getattr(err, "message", str(e)),
        "data": getattr(err, "data", None),
    }


async def errors(s, init):
    caps = init.capabilities.model_dump(by_alias=True, mode="json", exclude_none=True)
    dump({"req": "initialize: resources capability", "ok": True, "code": None, "message": None,
          "data": caps.get("resources")})

    async def raw(method, params):
        req = types.Request[dict, str](method=method, params=params)
        return await s.send_request(req, types.EmptyResult)

    requests = [
        ("logging/setLevel", lambda: s.set_logging_level("info")),
        ("prompts/get unknown", lambda: s.get_prompt("no-such-prompt")),
        ("resources/read unknown", lambda: s.read_resource("file:///no/such/resource")),
        ("unknown method", lambda: raw("germline-test/no-such-method", {})),
        ("tools/call missing argument", lambda: s.call_tool("summarize", {})),
        ("tools/call bad argument type", lambda: s.call_tool("summarize", {"text": {"a": 1}})),
        ("tools/call ok", lambda: s.call_tool("summarize", {"text": "one two three"})),
        # germline answers this itself (its own -32602, before any copy runs).
        ("tools/call unknown tool", lambda: s.call_tool("no_such_tool", {})),
    ]
    for name, send in requests:
        out = {"req": name}
        try:
            r = await send()
            out.update(ok=True, code=None, message=None, data=None,
                       is_error=bool(getattr(r, "is_error", False)))
        except MCPError as e:
            out.update(error_of(e))
        dump(out)


async def ping(s, a):
    done = {}

    async def call():
        t0 = time.perf_counter()
        try:
            r = await s.call_tool(a.tool, json.loads(a.args))
            done["ok"] = not bool(getattr(r, "is_error", False))
        except MCPError as e:
            done["ok"] = False
            done["error"] = str(e)
        done["ms"] = (time.perf_counter() - t0) * 1000

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        await anyio.sleep(a.after)
        pings = []
        for _ in range(a.pings):
            t0 = time.perf_counter()
            await s.send_ping()
            pings.append((time.perf_counter() - t0) * 1000)
        before = "ms" in done
    dump({"pings_ms": pings, "call_ms": done.get("ms"), "call_ok": done.get("ok"),
          "call_done_before_pings": before, "call_error": done.get("error")})


async def cancel(s, a, seen):
    ids = {}
    scope = anyio.CancelScope()

    async def call():
        with scope:
            await s.call_tool(a.tool, json.loads(a.args))
            ids["answered"] = True

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        if a.go_file:
            for _ in range(600):
                if os.path.exists(a.go_file):
                    break
                await anyio.sleep(0.1)
        else:
            await anyio.sleep(a.after)
        # The id of the call: the last request the SDK wrote (the tap saw it go out).
        rid = [m["id"] for m in seen["out"] if m.get("method") == "tools/call"][-1]
        t = time.monotonic()
        dump({"cancel_monotonic": t, "request_id": rid, "answered_before": "answered" in ids})
        scope.cancel()
    await anyio.sleep(a.quiet)
    sent = [m for m in seen["out"] if m.get("method") == "notifications/cancelled"]
    t0 = time.perf_counter()
    try:
        r = await s.call_tool(a.next, json.loads(a.next_args))
        nxt = {"next_ok": not bool(getattr(r, "is_error", False)),
               "next_text": [c.text for c in r.content if getattr(c, "type", "") == "text"]}
    except MCPError as e:
        nxt = {"next_ok": False, "next_text": [str(e)]}
    next_ms = (time.perf_counter() - t0) * 1000
    # Anything for the cancelled id, up to the next call's answer (a server that served the
    # cancelled call to its end would have answered it before the next one).
    late = [m for m in seen["in"] if m.get("id") == rid]
    dump({"late": late, "cancel_sent": sent, "next_ms": next_ms, **nxt})


async def cancel_queued(s, a, seen):
    """A call sent while another runs, cancelled before its turn: no answer for it, ever."""
    done = {}
    scope = anyio.CancelScope()

    async def first():
        r = await s.call_tool(a.tool, json.loads(a.args))
        done["first_ok"] = not bool(getattr(r, "is_error", False))

    async def second():
        with scope:
            await s.call_tool(a.next, json.loads(a.next_args))
            done["second_answered"] = True

    async with anyio.create_task_group() as tg:
        tg.start_soon(first)
        await anyio.sleep(a.after)
        tg.start_soon(second)
        await anyio.sleep(0.3)
        rid = [m["id"] for m in seen["out"] if m.get("method") == "tools/call"][-1]
        scope.cancel()
    # One more call: every answer the server was going to give has been given before it.
    r = await s.call_tool(a.next, json.loads(a.next_args))
    dump({"first_ok": done.get("first_ok"), "second_answered": "second_answered" in done,
          "late": [m for m in seen["in"] if m.get("id") == rid],
          "after_ok": not bool(getattr(r, "is_error", False))})


async def main():
    argv = sys.argv[1:]
    if "--" not in argv:
        raise SystemExit(__doc__)
    cut = argv.index("--")
    ours, server = argv[:cut], argv[cut + 1:]
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["errors", "ping", "cancel", "cancel-queued"])
    ap.add_argument("tool", nargs="?")
    ap.add_argument("args", nargs="?", default="{}")
    ap.add_argument("--after", type=float, default=1.0)
    ap.add_argument("--pings", type=int, default=5)
    ap.add_argument("--quiet", type=float, default=3.0)
    ap.add_argument("--next", default="summarize")
    ap.add_argument("--next-args", default='{"text": "after the cancel"}')
    ap.add_argument("--go-file")
    a = ap.parse_args(ours)
    seen = {"in": [], "out": []}
    params = StdioServerParameters(command=server[0], args=server[1:])
    async with stdio_client(params) as (read, write):
        # Taps on both directions: what the server sent and what the SDK wrote, as JSON.
        in_tx, in_rx = anyio.create_memory_object_stream(100)
        out_tx, out_rx = anyio.create_memory_object_stream(100)

        async def tap_in():
            async with in_tx:
                async for m in read:
                    seen["in"].append(as_dict(m))
                    await in_tx.send(m)

        async def tap_out():
            async with out_rx:
                async for m in out_rx:
                    seen["out"].append(as_dict(m))
                    await write.send(m)

        async with anyio.create_task_group() as tg:
            tg.start_soon(tap_in)
            tg.start_soon(tap_out)
            async with ClientSession(in_rx, out_tx, read_timeout_seconds=60) as s:
                init = await s.initialize()
                if a.what == "errors":
                    await errors(s, init)
                elif a.what == "ping":
                    await ping(s, a)
                elif a.what == "cancel-queued":
                    await cancel_queued(s, a, seen)
                else:
                    await cancel(s, a, seen)
            tg.cancel_scope.cancel()


if __name__ == "__main__":
    anyio.run(main)
