#!/usr/bin/env python3
"""Benchmark: time from `ctr run` to the first answered `tools/call`, under the germline shim
(`--runtime io.containerd.germline.v1`) and under containerd's runc shim
(`io.containerd.runc.v2`), interleaved in one run, with the real MCP client SDK as the agent.
It starts a containerd of its own (private root, state and socket; the shim's directory on its
PATH), imports the release's image from its OCI layout, and stops containerd at the end.

    python3 tests/engines/bench_ctr.py --bin target/debug --config RUNTIME.toml \\
        [--layout bundles/out/mcp-server-time/image] [--runs 5] [--out bench-ctr.json]

--bin is the directory holding containerd-shim-germline-v1, germline-runtime and germline.
Prints the figures and writes them as JSON; asserts nothing."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_podman import measure, summarize  # noqa: E402

ROOT = os.path.join(HERE, "..", "..")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--layout", default=os.path.join(ROOT, "bundles/out/mcp-server-time/image"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", default="bench-ctr.json")
    a = ap.parse_args()
    shim = os.path.join(os.path.abspath(a.bin), "containerd-shim-germline-v1")
    if not os.path.isfile(shim):
        raise SystemExit(f"{shim} is missing: cargo build -p germline-containerd-shim -p germline")
    py = os.path.join(os.environ.get("GERMLINE_AGENT_VENV", "/var/tmp/germline-venv-agent"), "bin", "python")
    tmp = tempfile.mkdtemp(prefix="germline-bench-ctr-", dir="/var/tmp")
    state = tempfile.mkdtemp(prefix="germline-bench-ctr-", dir="/run")
    sock = os.path.join(state, "c.sock")
    cfg = os.path.join(tmp, "containerd.toml")
    with open(cfg, "w") as f:
        f.write(f'version = 2\nroot = "{tmp}/root"\nstate = "{state}/state"\n[grpc]\n  address = "{sock}"\n')
    env = dict(os.environ, GERMLINE_RUNTIME_CONFIG=os.path.abspath(a.config),
               PATH=os.path.dirname(shim) + ":" + os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"))
    ctd = subprocess.Popen(["containerd", "--config", cfg], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ctr = ["ctr", "--address", sock, "-n", "germline-bench"]
    ref = "localhost/germline-bench/mcp-server-time:bench"
    res = {"runc-shim": [], "germline-shim": []}
    try:
        for _ in range(200):
            if os.path.exists(sock):
                break
            time.sleep(0.05)
        tar = os.path.join(tmp, "image.tar")
        subprocess.run([sys.executable, os.path.join(ROOT, "bundles/oci-archive.py"), a.layout, ref, tar], check=True)
        subprocess.run(ctr + ["images", "import", tar], check=True, stdout=subprocess.DEVNULL)
        with open(os.path.join(tmp, "script.json"), "w") as f:
            json.dump([{"tool": "get_current_time", "arguments": {"timezone": "UTC"}}], f)
        n = 0
        for _ in range(a.runs):
            for name, rt in (("runc-shim", "io.containerd.runc.v2"), ("germline-shim", "io.containerd.germline.v1")):
                n += 1
                cmd = ctr + ["run", "--rm", "--runtime", rt, ref, f"bench-{os.getpid()}-{n}"]
                res[name].append(measure(py, os.path.join(tmp, "script.json"), cmd, rt))
    finally:
        ctd.terminate()
        ctd.wait()
        shutil.rmtree(state, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)
    out = {"image": ref, "runs": a.runs, "results": {}}
    summarize(out, res, "ctr run", "germline-shim", "runc-shim")
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
