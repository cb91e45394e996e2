#!/usr/bin/env python3
"""Concurrent agent sessions on one release (issue 11, docs/operations.md): do they serve
better taking turns on one shared germline (one `germline serve`, lifetime `long-lived`: one
germline for the one user), or with a germline each (one `germline serve`, lifetime `session`:
a germline per agent session; and, for comparison, one `germline serve` per session)? A
benchmark, not a test: it prints figures and writes JSON; nothing is asserted.

    scripts/bench-sessions.py [--sessions K] [--calls N] [--out FILE]

Needs root, bundles/out (bundles/build.sh) and the agent venv (scripts/setup.d/60-run.sh).
Each session is the official MCP SDK's Streamable HTTP client (tests/run/serve_client.py)
calling `get_current_time` N times; all K sessions start together."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = subprocess.run([os.path.join(ROOT, "scripts", "target-dir")], capture_output=True, text=True, check=True).stdout.strip()
GERMLINE = os.path.join(TARGET, "debug", "germline")
AGENT = os.path.join(os.environ.get("GERMLINE_AGENT_VENV", "/var/tmp/germline-venv-agent"), "bin", "python")
BUNDLE = os.path.join(ROOT, "bundles/out/mcp-server-time/bundle")
KEY = os.path.join(ROOT, "bundles/out/keys/cosign.pub")
POLICY = """[labels]
hr = "HR"

[consumers]
agent = ["hr"]

[[argument]]
tool = "*"
name = "*"
label = []
"""


def start_serve(tmp, name, extra=""):
    policy = os.path.join(tmp, f"policy-{name}.toml")
    with open(policy, "w") as f:
        f.write(POLICY + extra)
    p = subprocess.Popen(
        [GERMLINE, "serve", "--policy", policy, "--key", KEY, "--listen", "127.0.0.1:0",
         "--no-auth", "--state-dir", os.path.join(tmp, f"state-{name}"), BUNDLE],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline:
        line = p.stderr.readline()
        if not line:
            break
        if line.startswith("germline serve: http://"):
            threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
            return p, "http://" + line.split()[2].split("http://")[1]
    p.kill()
    raise SystemExit(f"germline serve did not come up ({name})")


def stop(p):
    p.terminate()
    try:
        p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()


def sessions(urls, calls):
    """Runs one client per URL at once; returns every call's latency (ms), the wall time and
    every initialize's time (ms: under `session` it starts the session's germline)."""
    out, inits, threads = [], [], []
    lock = threading.Lock()

    def one(url):
        r = subprocess.run([AGENT, os.path.join(ROOT, "tests/run/serve_client.py"), url, "-",
                            str(calls)], capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            raise SystemExit(f"client failed: {r.stderr[-400:]}")
        with lock:
            v = json.loads(r.stdout)
            out.extend(v["latency_ms"])
            inits.append(v["initialize_ms"])

    t0 = time.perf_counter()
    for u in urls:
        t = threading.Thread(target=one, args=(u,))
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    return out, (time.perf_counter() - t0, inits)


def summary(lat, timing):
    wall, inits = timing
    lat = sorted(lat)
    # Calls per second once the sessions are initialized (the slowest initialize is taken off
    # the wall time: the sessions start together).
    calls_wall = max(wall - max(inits) / 1000, 1e-3)
    return {"calls": len(lat), "p50_ms": round(statistics.median(lat), 2),
            "p95_ms": round(lat[int(0.95 * (len(lat) - 1))], 2), "wall_s": round(wall, 2),
            "calls_per_s": round(len(lat) / wall, 2),
            "initialize_max_ms": round(max(inits), 1),
            "calls_per_s_after_initialize": round(len(lat) / calls_wall, 2)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=3)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--out", default=os.path.join(ROOT, "docs/performance/sessions.json"))
    a = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root")
    with tempfile.TemporaryDirectory(prefix="germline-bench-sessions-") as tmp:
        shared, url = start_serve(tmp, "shared", '\n[lifetimes]\n"mcp-server-time" = "long-lived"\n')
        try:
            lat, wall = sessions([url] * a.sessions, a.calls)
            turns = summary(lat, wall)
        finally:
            stop(shared)
        native, url = start_serve(tmp, "native", '\n[lifetimes]\n"mcp-server-time" = "session"\n')
        try:
            lat, wall = sessions([url] * a.sessions, a.calls)
            per_session = summary(lat, wall)
        finally:
            stop(native)
        own = [start_serve(tmp, f"own{i}") for i in range(a.sessions)]
        try:
            lat, wall = sessions([u for _, u in own], a.calls)
            each = summary(lat, wall)
        finally:
            for p, _ in own:
                stop(p)
        # One session: the default lifetime against a fresh germline per call.
        single = {}
        for life in ["session", "single-shot"]:
            p, u = start_serve(tmp, life, f'\n[lifetimes]\n"mcp-server-time" = "{life}"\n')
            try:
                lat, wall = sessions([u], a.calls)
                single[life] = summary(lat, wall)
            finally:
                stop(p)
    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    result = {"sessions": a.sessions, "calls_per_session": a.calls, "cores": os.cpu_count(),
              "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
              "uptime_at_end": uptime,
              "take_turns_one_germline": turns, "own_germline_per_session": per_session,
              "own_serve_each": each,
              "one_session_by_lifetime": single}
    print(f"{a.sessions} concurrent sessions x {a.calls} get_current_time calls ({os.cpu_count()} cores, load {os.getloadavg()[0]:.1f})")
    print(f"  uptime: {uptime}")
    for name, s in [("take turns (long-lived)", turns),
                    ("own germline (session)", per_session),
                    ("own germline serve each", each)]:
        print(f"  {name:26s} p50 {s['p50_ms']:8.2f} ms  p95 {s['p95_ms']:8.2f} ms  "
              f"{s['calls_per_s']:6.2f} calls/s  wall {s['wall_s']:.1f} s  "
              f"initialize max {s['initialize_max_ms']:.0f} ms  "
              f"{s['calls_per_s_after_initialize']:6.2f} calls/s after it")
    print(f"1 session x {a.calls} calls, by lifetime")
    for name, s in single.items():
        print(f"  {name:26s} p50 {s['p50_ms']:8.2f} ms  p95 {s['p95_ms']:8.2f} ms  "
              f"{s['calls_per_s']:6.2f} calls/s  wall {s['wall_s']:.1f} s")
    with open(a.out, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    sys.exit(main())
