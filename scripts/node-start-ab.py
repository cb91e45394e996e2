#!/usr/bin/env python3
"""Interleaved A/B of an unprotected Node MCP server's start (issue 28, "Faster spawns"):
the time from exec to the answer of `initialize` (with --echo: to the answer of a following
`echo` call, as a spawned copy's warm call), and the process's user+sys CPU time up to then
(getrusage of the child, killed at the answer). Prints figures, asserts nothing.

usage: scripts/node-start-ab.py --entry 'dist/index.js stdio' [--runs 20] [--echo] \
           NAME=NODE[,ENV=VALUE...][,--node-flag...] ...
e.g.   scripts/node-start-ab.py --entry "$APP/server-everything/dist/index.js stdio" --echo \
           node20=/usr/bin/node node22=$N22 node22-cache=$N22,NODE_COMPILE_CACHE=/var/tmp/cc
A compile cache is filled by a run that exits on its own (V8's cache is written at exit):
    echo '{"jsonrpc":"2.0","id":1,"method":"initialize",...}' | NODE_COMPILE_CACHE=DIR node ENTRY
"""
import argparse
import json
import os
import shlex
import signal
import statistics
import subprocess
import time

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "ab", "version": "0"}}}
ECHO = [{"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
         "params": {"name": "echo", "arguments": {"message": "warm"}}}]


def answer(p, rid):
    while True:
        line = p.stdout.readline()
        if not line:
            raise SystemExit(f"{p.args[0]}: closed its output before answering request {rid}")
        try:
            if json.loads(line).get("id") == rid:
                return
        except ValueError:
            continue


def one(node, env, flags, entry, echo):
    e = {k: v for k, v in os.environ.items() if k != "NODE_COMPILE_CACHE"}
    e.update(env)
    t0 = time.perf_counter()
    p = subprocess.Popen([node, *flags, *entry], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, env=e)
    p.stdin.write((json.dumps(INIT) + "\n").encode())
    p.stdin.flush()
    answer(p, 1)
    if echo:
        p.stdin.write("".join(json.dumps(m) + "\n" for m in ECHO).encode())
        p.stdin.flush()
        answer(p, 2)
    wall = (time.perf_counter() - t0) * 1000
    os.kill(p.pid, signal.SIGKILL)
    _, _, ru = os.wait4(p.pid, 0)
    p.returncode = -signal.SIGKILL
    return wall, (ru.ru_utime + ru.ru_stime) * 1000


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--entry", required=True, help="the server's script and arguments")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--echo", action="store_true", help="time to the answer of an echo call")
    ap.add_argument("variants", nargs="+")
    a = ap.parse_args()
    variants = []
    for spec in a.variants:
        name, rest = spec.split("=", 1)
        node, *parts = rest.split(",")
        env = dict(x.split("=", 1) for x in parts if not x.startswith("-"))
        flags = [x for x in parts if x.startswith("-")]
        variants.append((name, node, env, flags))
    res = {v[0]: [] for v in variants}
    load = os.getloadavg()
    for _ in range(a.runs):
        for name, node, env, flags in variants:
            res[name].append(one(node, env, flags, shlex.split(a.entry), a.echo))
    print(f"exec -> {'echo' if a.echo else 'initialize'} answer, {a.runs} interleaved runs; "
          f"load {load[0]:.2f} at start, {os.getloadavg()[0]:.2f} at end")
    for name, r in res.items():
        w = [x[0] for x in r]
        c = [x[1] for x in r]
        print(f"{name:20s} wall median {statistics.median(w):7.1f} ms (min {min(w):6.1f}) | "
              f"user+sys CPU median {statistics.median(c):6.1f} ms (min {min(c):6.1f})")


if __name__ == "__main__":
    main()
