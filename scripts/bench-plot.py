"""Plots of `germline bench` (docs/performance.md): python bench-plot.py bench.json OUTDIR."""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

doc = json.load(open(sys.argv[1]))
out = sys.argv[2]
runtimes = ["sig-pin", "confined-ifc", "fresh-ifc", "germline", "germline+pool"]
cases = []
for r in doc["latency"]:
    if r["case"] not in cases:
        cases.append(r["case"])

# (a) per-call latency, log scale, P50 bars with whiskers to P99
fig, ax = plt.subplots(figsize=(9, 4))
w = 0.16
for i, rt in enumerate(runtimes):
    rows = [next(r for r in doc["latency"] if r["case"] == c and r["runtime"] == rt) for c in cases]
    p50 = [r["p50_ms"] for r in rows]
    err = [max(r["p99_ms"] - r["p50_ms"], 0) for r in rows]
    xs = [k + (i - 2) * w for k in range(len(cases))]
    ax.bar(xs, p50, w, label=rt, yerr=[[0] * len(err), err], capsize=2)
ax.set_yscale("log")
ax.set_xticks(range(len(cases)))
ax.set_xticklabels([c + (" (3)" if c == "summarize_many" else " (1)") for c in cases])
ax.set_ylabel("ms per call (P50, whisker to P99)")
ax.set_title("(a) Per-call latency")
ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig(f"{out}/latency.png", dpi=120)

# (b) latency against copies per call
sc = doc["scaling"]
fig, ax = plt.subplots(figsize=(4.5, 3.5))
xs = [r["copies"] for r in sc["copies"]]
ax.plot(xs, [r["p50_ms"] for r in sc["copies"]], "o-", label="P50")
ax.plot(xs, [r["p99_ms"] for r in sc["copies"]], "x--", label="P99")
ax.plot(xs, [sc["intercept_ms"] + sc["slope_ms_per_copy"] * x for x in xs], ":",
        label=f"fit {sc['slope_ms_per_copy']:.1f} ms/copy")
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
