"""germline-bench: the paper's cost cases (Section VII-F, Table VII) as one MCP server.

  noop            returns at once: the floor of a call
  stats           summary statistics of a CSV table (a file item)
  summarize       an extractive summary of a text document (a file item)
  summarize_many  the same over three documents of different labels; its declared hosts make
                  Plan form three groups (three copies)
  fanout1..5      a trivial tool whose declared hosts make Plan form 1..5 groups (scaling)

Every tool reports how long its own body ran (`work_us`), so the benchmark can tell the tool's
own work from the MCP SDK's framing around it. No tool makes a request anywhere.
"""
import csv
import io
import json
import re
import statistics
import time
from collections import Counter

from mcp.server.mcpserver import MCPServer

from ._variant import VARIANT  # noqa: F401  (one build only: benign)

mcp = MCPServer("germline-bench")

STOP = frozenset(
    "a an and are as at be by for from has have in is it its of on or that the this to was were "
    "will with not but they their there which".split()
)


def _read(path: str) -> str:
    if not path:
        return ""
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def _answer(t0: int, **fields) -> str:
    fields["work_us"] = (time.perf_counter_ns() - t0) // 1000
    return json.dumps(fields, sort_keys=True)


def _summary(text: str, sentences: int = 3) -> dict:
    parts = [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if s.strip()]
    words = [w for w in re.findall(r"[a-z']+", text.lower()) if w not in STOP]
    freq = Counter(words)
    scored = sorted(
        range(len(parts)),
        key=lambda i: -sum(freq[w] for w in re.findall(r"[a-z']+", parts[i].lower())) / (1 + len(parts[i])),
    )
    keep = sorted(scored[:sentences])
    return {
        "sentences": len(parts),
        "words": len(words),
        "top_terms": [w for w, _ in freq.most_common(5)],
        "summary": " ".join(parts[i] for i in keep),
    }


@mcp.tool()
def noop() -> str:
    """Do nothing (the cost floor of a call)."""
    t0 = time.perf_counter_ns()
    return _answer(t0, ok=True)


@mcp.tool()
def stats(table: str) -> str:
    """Summary statistics (count, mean, median, stdev, min, max) of each numeric column of a CSV."""
    t0 = time.perf_counter_ns()
    rows = list(csv.reader(io.StringIO(_read(table))))
    out = {}
    if rows:
        header, body = rows[0], rows[1:]
        for c, name in enumerate(header):
            vals = []
            for r in body:
                try:
                    vals.append(float(r[c]))
                except (IndexError, ValueError):
                    pass
            if len(vals) >= 2:
                out[name] = {
                    "count": len(vals),
                    "mean": statistics.fmean(vals),
                    "median": statistics.median(vals),
                    "stdev": statistics.stdev(vals),
                    "min": min(vals),
                    "max": max(vals),
                }
    return _answer(t0, columns=out)


@mcp.tool()
def summarize(document: str) -> str:
    """An extractive summary of a text document."""
    t0 = time.perf_counter_ns()
    return _answer(t0, **_summary(_read(document)))


@mcp.tool()
def summarize_many(document: str, finance_doc: str, projx_doc: str) -> str:
    """Summaries of three documents (declared hosts b1 and b2: three copies under germline)."""
    t0 = time.perf_counter_ns()
    docs = {"document": document, "finance_doc": finance_doc, "projx_doc": projx_doc}
    return _answer(t0, **{k: _summary(_read(p)) for k, p in docs.items()})


def _fanout(t0: int, a1: str, a2: str, a3: str, a4: str) -> str:
    return _answer(t0, lengths=[len(a1), len(a2), len(a3), len(a4)])


@mcp.tool()
def fanout1(a1: str = "", a2: str = "", a3: str = "", a4: str = "") -> str:
    """No declared host: one copy."""
    return _fanout(time.perf_counter_ns(), a1, a2, a3, a4)


@mcp.tool()
def fanout2(a1: str = "", a2: str = "", a3: str = "", a4: str = "") -> str:
    """Declared host b1: two copies."""
    return _fanout(time.perf_counter_ns(), a1, a2, a3, a4)


@mcp.tool()
def fanout3(a1: str = "", a2: str = "", a3: str = "", a4: str = "") -> str:
    """Declared hosts b1, b2: three copies."""
    return _fanout(time.perf_counter_ns(), a1, a2, a3, a4)


@mcp.tool()
def fanout4(a1: str = "", a2: str = "", a3: str = "", a4: str = "") -> str:
    """Declared hosts b1-b3: four copies."""
    return _fanout(time.perf_counter_ns(), a1, a2, a3, a4)


@mcp.tool()
def fanout5(a1: str = "", a2: str = "", a3: str = "", a4: str = "") -> str:
    """Declared hosts b1-b4: five copies."""
    return _fanout(time.perf_counter_ns(), a1, a2, a3, a4)


def main():
    mcp.run()


if __name__ == "__main__":
    main()
