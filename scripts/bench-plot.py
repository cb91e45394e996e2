"""Plots of `germline bench` (docs/performance.md): python bench-plot.py bench.json OUTDIR."""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

doc = json.load(open(sys.argv[1]))
out = sys.argv[2]
# In the order the benchmark ran them (germline+concurrent only in documents that have it).
runtimes = []
cases = []
for r in doc["latency"]:
    if r["case"] not in cases:
        cases.append(r["case"])
    if r["runtime"] not in runtimes:
        runtimes.append(r["runtime"])

# (a) per-call latency, log scale, P50 bars with whiskers to P99
fig, ax = plt.subplots(figsize=(9, 4))
w = 0.8 / len(runtimes)
for i, rt in enumerate(runtimes):
    rows = [next(r for r in doc["latency"] if r["case"] == c and r["runtime"] == rt) for c in cases]
    p50 = [r["p50_ms"] for r in rows]
    err = [max(r["p99_ms"] - r["p50_ms"], 0) for r in rows]
    xs = [k + (i - (len(runtimes) - 1) / 2) * w for k in range(len(cases))]
    ax.bar(xs, p50, w, label=rt, yerr=[[0] * len(err), err], capsize=2)
ax.set_yscale("log")
ax.set_xticks(range(len(cases)))
ax.set_xticklabels([c + (" (3)" if c == "summarize_many" else " (1)") for c in cases])
ax.set_ylabel("ms per call (P50, whisker to P99)")
ax.set_title("(a) Per-call latency")
ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig(f"{out}/latency.png", dpi=120)

# (b) latency against copies per call, per germline runtime (older documents: one series)
fig, ax = plt.subplots(figsize=(5.5, 4))
for sc in doc.get("scaling_runtimes") or [doc["scaling"]]:
    name = sc.get("runtime", "germline")
    xs = [r["copies"] for r in sc["copies"]]
    line, = ax.plot(xs, [r["p50_ms"] for r in sc["copies"]], "o-",
                    label=f"{name} P50 ({sc['slope_ms_per_copy']:.1f} ms/copy)")
    ax.plot(xs, [r["p99_ms"] for r in sc["copies"]], "x--", color=line.get_color(), alpha=0.5)
ax.set_xlabel("copies per call")
ax.set_ylabel("ms")
ax.set_title("(b) Scaling")
ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig(f"{out}/scaling.png", dpi=120)

# (c) memory against resident germlines
m = doc["memory"]
fig, ax = plt.subplots(figsize=(4.5, 3.5))
rg = m["resident_germlines"]
ax.plot([r["germlines"] for r in rg], [r["pss_kb"] / 1024 for r in rg], "o-", label="PSS")
ax.plot([r["germlines"] for r in rg], [r["private_kb"] / 1024 for r in rg], "x--", label="private")
ax.axhline(m["idle_server"]["pss_kb"] / 1024, color="grey", ls=":", label="idle server PSS")
ax.set_xlabel("resident germlines (mcp-server-time)")
ax.set_ylabel("MB")
ax.set_title("(c) Memory")
ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig(f"{out}/memory.png", dpi=120)
