#!/usr/bin/env python3
"""Benchmark: time from `podman run` to the first answered `tools/call`, under germline-runtime
and under runc, interleaved in one run, with the real MCP client SDK (tests/run/agent.py).

    python3 tests/engines/bench_podman.py --runtime PATH/germline-runtime --config RUNTIME.toml \
        --image localhost/germline/mcp-server-time:2026.10.19 [--runs 5] [--out bench-podman.json]

The agent's python is $GERMLINE_AGENT_VENV/bin/python (default /var/tmp/germline-venv-agent).
Prints the figures and writes them as JSON; asserts nothing."""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
AGENT = os.path.join(HERE, "..", "run", "agent.py")


def one(py, script, runtime, config, image):
    cmd = ["podman"]
    if runtime != "runc":
        cmd += ["--runtime-flag", f"config={config}"]
    cmd += ["run", "-i", "--rm", "--network", "none", "--ulimit", "nofile=20000:20000",
            "--ulimit", "nproc=32768:32768", "--runtime", runtime, image]
    return measure(py, script, cmd, runtime)


def measure(py, script, cmd, runtime):
    """(ms to the first answered tools/call, ms to the end of the session) of the agent
    speaking MCP to `cmd`."""
    t0 = time.perf_counter()
    p = subprocess.Popen([py, AGENT, script, "--"] + cmd, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    first = None
    for line in p.stdout:
        try:
            v = json.loads(line)
        except ValueError:
            continue
        if "tool" in v and first is None:
            if not v.get("ok"):
                raise SystemExit(f"{runtime}: the call failed: {v}")
            first = (time.perf_counter() - t0) * 1000
    p.wait()
    total = (time.perf_counter() - t0) * 1000
    if first is None:
        raise SystemExit(f"{runtime}: no answered tools/call")
    return first, total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runtime", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--image", required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", default="bench-podman.json")
    a = ap.parse_args()
    py = os.path.join(os.environ.get("GERMLINE_AGENT_VENV", "/var/tmp/germline-venv-agent"), "bin", "python")
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump([{"tool": "get_current_time", "arguments": {"timezone": "UTC"}}], f)
        script = f.name
    res = {"runc": [], "germline-runtime": []}
    try:
        for _ in range(a.runs):
            for name, rt in (("runc", "runc"), ("germline-runtime", a.runtime)):
                res[name].append(one(py, script, rt, a.config, a.image))
    finally:
        os.unlink(script)
    out = {"image": a.image, "runs": a.runs, "results": {}}
    summarize(out, res, "podman run", "germline-runtime", "runc")
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)


def summarize(out, res, what, germline, runc):
    """Prints the figures of `res` {name: [(first, total)]} and adds them to `out`."""
    for name, v in res.items():
        firsts = [x[0] for x in v]
        out["results"][name] = {
            "first_call_ms_median": round(statistics.median(firsts), 1),
            "first_call_ms_min": round(min(firsts), 1),
            "first_call_ms_max": round(max(firsts), 1),
            "session_ms_median": round(statistics.median(x[1] for x in v), 1),
            "first_call_ms": [round(x, 1) for x in firsts],
        }
        r = out["results"][name]
        print(f"{name:17s} {what} -> first tools/call answered: median {r['first_call_ms_median']} ms "
              f"(min {r['first_call_ms_min']}, max {r['first_call_ms_max']}); whole session {r['session_ms_median']} ms")
    g, r = out["results"][germline], out["results"][runc]
    out["ratio_germline_to_runc"] = round(g["first_call_ms_median"] / r["first_call_ms_median"], 2)
    print(f"{germline} / {runc}: {out['ratio_germline_to_runc']}x")


if __name__ == "__main__":
    main()
