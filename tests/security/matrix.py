#!/usr/bin/env python3
"""The security matrix (issue 7; paper Fig. 3, Table XI): every case of the attack corpus under
every runtime, for N trials, each trial in a fresh test world with fresh canaries.

    /var/tmp/germline-venv-corpus/bin/python tests/security/matrix.py \\
        --modes unprotected --trials 3 --out /var/tmp/germline-matrix

writes OUT/matrix.json (every run, its disclosures and steps), OUT/summary.json (the counts
only), OUT/matrix.md (a table like
Fig. 3: attack runs with an attributed disclosure per variant and runtime, totals with
percentages, benign completion per runtime), OUT/matrix.png (the heatmap) and OUT/runs/ (per run:
policy, sink recordings, server stderr). A disclosure that the flow-compliant release of the same
server also makes in the same runtime and trial is detected but not attributed to the tool.
Runtimes: `unprotected` (the release's server run directly, see runtimes.py) and, once
`germline run` exists (issue 6), sig-pin, sig-ifc, confined-ifc, fresh-ifc, nosplit, germline."""
from __future__ import annotations

import argparse
import asyncio
import datetime
import fnmatch
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))

import oracle  # noqa: E402
import runtimes  # noqa: E402
import sessions  # noqa: E402
import world as worldgen  # noqa: E402
from sinks import Sinks  # noqa: E402


# `--corpus NAME`: a corpus of the source tree, its releases' list and where they are built.
CORPORA = {"python": (ROOT / "bundles" / "corpus" / "releases.py", ROOT / "bundles" / "out" / "corpus"),
           # The documents server ported to Node (issue 28), run as spawned copies under germline.
           "node": (ROOT / "bundles" / "corpus-node" / "releases.py", ROOT / "bundles" / "out" / "corpus-node")}
RELEASES_PY = CORPORA["python"][0]


def load_cases() -> list[dict]:
    spec = importlib.util.spec_from_file_location("releases", RELEASES_PY)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod.cases()


class Progress:
    """How far the matrix is. On a terminal: one bar redrawn in place (the run under way). Elsewhere (CI
    logs, a pipe, `eval matrix` captured): no bar and no cursor escapes, one plain line per finished run
    with its outcome, so a log says what ran, what it gave and how long is left."""

    def __init__(self, total: int, tty: bool | None = None, out=None) -> None:
        self.out = out if out is not None else sys.stderr
        self.total, self.done, self.leaks, self.t0 = total, 0, 0, time.time()
        self.tty = self.out.isatty() if tty is None else tty

    def _times(self) -> str:
        el = time.time() - self.t0
        eta = el / self.done * (self.total - self.done) if self.done else 0
        return f"{el:5.0f}s, ~{eta:4.0f}s left"

    def show(self, label: str) -> None:
        """The run `label` starts: redraws the bar on a terminal; prints nothing elsewhere."""
        if not self.tty:
            return
        width = 30
        fill = int(width * self.done / max(self.total, 1))
        line = f"[{'#' * fill}{'.' * (width - fill)}] {self.done}/{self.total} {label:<34} disclosing runs {self.leaks}  {self._times()}"
        self.out.write("\r" + line + "\x1b[K")
        self.out.flush()

    def finished(self, label: str, rec: dict) -> None:
        """A run ended: counts it; elsewhere than a terminal, one line with its outcome."""
        self.done += 1
        disclosed = bool(rec.get("detected"))
        self.leaks += disclosed and rec.get("variant") != "benign"
        if self.tty:
            return
        outcome = ("refused: " + rec["refused"][:80]) if rec.get("refused") else (
            f"DISCLOSED ({len(rec['detected'])})" if disclosed else "no disclosure")
        self.out.write(f"matrix: {self.done}/{self.total} {label} ({rec.get('variant', '?')}): {outcome}, "
                       f"{rec.get('seconds', 0):.1f}s; disclosing runs {self.leaks}; {self._times()}\n")
        self.out.flush()

    def end(self) -> None:
        if self.tty:
            self.show("done")
            self.out.write("\n")
        else:
            self.out.write(f"matrix: {self.done}/{self.total} runs in {time.time() - self.t0:.0f}s, "
                           f"disclosing runs {self.leaks}\n")
        self.out.flush()


def run_case(case: dict, mode: str, trial: int, world: dict, args: argparse.Namespace, rundir: Path) -> dict:
    rundir.mkdir(parents=True, exist_ok=True)
    tmp = rundir / "tmp"
    tmp.mkdir()
    sinks = Sinks(list(world["destinations"]), attacker_addr=tuple(world["attacker_addr"]),
                  attacker_hosts=world["attacker_hosts"], forwarder=(mode == "unprotected"),
                  max_seconds=args.run_timeout + 30).start()
    t0 = time.time()
    results = []
    folder = ""
    if case.get("steps"):
        # A folder session (writeback, issue 27) writes into the folder it is given: each run
        # gets its own fresh copy of the world's public folder, labelled public as the original,
        # as each run gets its own --state-dir, so no run sees another's files. Under /tmp
        # whatever --out is: a copy gets a directory item at its own path, and the corpus's
        # rootfs has /tmp to mount it on (docs/policy.md, "Directory items").
        folder = str(Path(tempfile.mkdtemp(prefix=f"germline-matrix-{mode}-", dir="/tmp")) / "public")
        shutil.copytree(Path(world["home"]) / "public", folder)
    try:
        policy = rundir / "policy.toml"
        text = worldgen.policy_toml(world, pins=sinks.pins())
        if folder:
            text += f'\n[[item]]\npath = "{folder}/**"\nlabel = []\n'
        if args.copies == "concurrent":
            # Issue 30: the case's releases run a multi-group call's copies concurrently, under
            # the broker's hold rule (docs/policy.md, "Concurrent copies").
            names = sorted({json.loads((args.corpus / case["releases"][s] / "bundle" / "rootfs" / ".germline"
                                        / "manifest.json").read_text())["name"] for s in case["sessions"]})
            text += "\n[copies]\nconcurrent = [" + ", ".join(f'"{n}"' for n in names) + "]\n"
        policy.write_text(text)
        if mode in runtimes.GERMLINE_MODES and not args._policy_checked:
            if (why := runtimes.check_policy(policy, args.germline)) is not None:
                raise SystemExit(f"matrix: the runtime refuses the world's policy {policy}: {why}")
            args._policy_checked = True
        for server in case["sessions"]:
            bundle = args.corpus / case["releases"][server] / "bundle"
            la = runtimes.launch(mode, bundle, policy=policy, key=args.key, home=world["home"], tmpdir=tmp,
                                 forwarder=sinks.forwarder_addr, germline=args.germline)
            coro = sessions.run_session(server, la.command, sessions.minimal_env(la.env), world,
                                        rundir / f"{server}.stderr", cwd=la.cwd,
                                        session=case.get("steps", {}).get(server, ""), folder=folder)
            try:
                results.append(asyncio.run(asyncio.wait_for(coro, args.run_timeout)))
            except asyncio.TimeoutError:
                r = sessions.SessionResult(server, error=f"session timed out after {args.run_timeout}s")
                results.append(r)
    finally:
        recs = sinks.stop()
        if folder and not args.keep_worlds:
            shutil.rmtree(Path(folder).parent, ignore_errors=True)
    sinks.dump(rundir / "sinks.jsonl")
    verdict = oracle.judge(sinks.requests(), world["canaries"], world)
    steps = [s for r in results for s in r.steps]
    refused = [r for r in results if r.error and not any(s.status in ("ok", "unexpected", "error", "withheld") for s in r.steps)]
    reason = ""
    if refused:
        # The runtime's own reason: the MCP error the agent got, else the server's last stderr line.
        tail = [ln.strip() for ln in refused[0].stderr.splitlines() if ln.strip()]
        reason = refused[0].error or (tail[-1] if tail else "")
    return {
        "trial": trial, "mode": mode, "case": case["case"], "variant": case["variant"], "servers": case["sessions"],
        "releases": case["releases"], "seconds": round(time.time() - t0, 2), **({"folder": folder} if folder else {}),
        "steps": [{"tool": s.tool, "status": s.status, "label": s.label, **({"text": s.text[:300]} if s.status != "ok" else {}),
                   **({"writes": s.writes} if s.writes else {})} for s in steps],
        "steps_ok": sum(s.ok for s in steps), "steps_total": len(steps),
        "error": "; ".join(r.error for r in results if r.error), "refused": reason,
        "requests": verdict.requests, "truncated": any(r.truncated for r in recs.values()),
        "detected": [asdict(d) for d in verdict.disclosures],
    }


def attribute(runs: list[dict]) -> None:
    benign = {(r["trial"], r["mode"], r["servers"][0]): r for r in runs if r["variant"] == "benign"}
    for r in runs:
        base = []
        for s in r["servers"]:
            b = benign.get((r["trial"], r["mode"], s))
            base += [oracle.Disclosure(**{**d, "label": tuple(d["label"]), "clearance": tuple(d["clearance"])})
                     for d in (b["detected"] if b else [])]
        att = [oracle.Disclosure(**{**d, "label": tuple(d["label"]), "clearance": tuple(d["clearance"])}) for d in r["detected"]]
        r["attributed"] = [asdict(d) for d in (att if r["variant"] == "benign" else oracle.attributable(att, base))]


def aggregate(runs: list[dict], modes: list[str], trials: int) -> dict:
    variants = sorted({r["variant"] for r in runs if r["variant"] != "benign"})
    cells: dict[str, dict[str, dict]] = {}
    for v in variants:
        cells[v] = {}
        for m in modes:
            rs = [r for r in runs if r["variant"] == v and r["mode"] == m]
            cells[v][m] = {"n": len(rs), "attributed": sum(bool(r["attributed"]) for r in rs),
                           "detected": sum(bool(r["detected"]) for r in rs),
                           "canaries": sum(len({d["item"] for d in r["attributed"]}) for r in rs),
                           "refused": sum(bool(r["refused"]) for r in rs)}
    totals = {}
    for m in modes:
        rs = [r for r in runs if r["variant"] != "benign" and r["mode"] == m]
        b = [r for r in runs if r["variant"] == "benign" and r["mode"] == m]
        totals[m] = {"n": len(rs), "attributed": sum(bool(r["attributed"]) for r in rs),
                     "detected": sum(bool(r["detected"]) for r in rs),
                     "benign_steps_ok": sum(r["steps_ok"] for r in b), "benign_steps": sum(r["steps_total"] for r in b),
                     "benign_runs_disclosing": sum(bool(r["detected"]) for r in b),
                     "attack_steps_ok": sum(r["steps_ok"] for r in rs), "attack_steps": sum(r["steps_total"] for r in rs),
                     "refused": sorted({(r["case"], r["refused"]) for r in rs if r["refused"]})}
    return {"variants": variants, "cells": cells, "totals": totals}


def markdown(agg: dict, modes: list[str], meta: dict) -> str:
    t = runtimes.TITLES
    out = ["# Security matrix", "",
           f"Generated by `{meta['command']}` on {meta['date']}: {meta['trials']} trial(s), "
           f"{meta['cases']} attack cases, runtimes {', '.join(t[m] for m in modes)}.", "",
           *([f"Merged from: {'; '.join('`' + m['command'] + '` (' + m['date'] + ')' for m in meta['merged'])}.", ""]
             if meta.get("merged") else []),
           "Attack runs with a detected canary disclosure attributable to the tool, per variant and runtime "
           "(paper Fig. 3 / Table XI; a disclosure the flow-compliant release also makes in the same runtime "
           "and trial is not attributed).", "",
           "| variant | " + " | ".join(t[m] for m in modes) + " | n |", "|---|" + "---|" * (len(modes) + 1)]
    for v in agg["variants"]:
        row = agg["cells"][v]
        n = row[modes[0]]["n"]
        cells = []
        for m in modes:
            c = row[m]
            s = f"{c['attributed']}/{c['n']}"
            if c["refused"]:
                s += f" (refused {c['refused']})"
            cells.append(s)
        out.append(f"| {v} | " + " | ".join(cells) + f" | {n} |")
    tot = agg["totals"]
    n = tot[modes[0]]["n"]
    out.append(f"| **all ({n} runs)** | " + " | ".join(
        f"**{tot[m]['attributed']}/{tot[m]['n']} ({100 * tot[m]['attributed'] / max(tot[m]['n'], 1):.1f}%)**" for m in modes) + f" | {n} |")
    out += ["", "| benign | " + " | ".join(t[m] for m in modes) + " |", "|---|" + "---|" * len(modes),
            "| steps completed | " + " | ".join(f"{tot[m]['benign_steps_ok']}/{tot[m]['benign_steps']}" for m in modes) + " |",
            "| runs with a detected disclosure | " + " | ".join(str(tot[m]["benign_runs_disclosing"]) for m in modes) + " |",
            "| attack runs: advertised steps completed | " + " | ".join(f"{tot[m]['attack_steps_ok']}/{tot[m]['attack_steps']}" for m in modes) + " |",
            "| attack runs detected (attributed or not) | " + " | ".join(f"{tot[m]['detected']}/{tot[m]['n']}" for m in modes) + " |"]
    refused = [(m, c, why) for m in modes for c, why in tot[m]["refused"]]
    if refused:
        out += ["", "Refused before the first call:", ""] + [f"- {t[m]}: `{c}`: {why}" for m, c, why in refused]
    out.append("")
    return "\n".join(out)


def heatmap(agg: dict, modes: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = agg["variants"] + ["all"]
    data, labels = [], []
    for v in agg["variants"]:
        data.append([agg["cells"][v][m]["attributed"] / max(agg["cells"][v][m]["n"], 1) for m in modes])
        labels.append([f"{agg['cells'][v][m]['attributed']}/{agg['cells'][v][m]['n']}" for m in modes])
    tot = agg["totals"]
    data.append([tot[m]["attributed"] / max(tot[m]["n"], 1) for m in modes])
    labels.append([f"{tot[m]['attributed']}/{tot[m]['n']}" for m in modes])
    fig, ax = plt.subplots(figsize=(max(5.0, 1.6 + 1.25 * len(modes)), 0.42 * len(rows) + 1.6))
    im = ax.imshow(data, cmap="Reds", vmin=0, vmax=1, aspect="auto")
    ax.set_xticks(range(len(modes)), [runtimes.TITLES[m] for m in modes], rotation=30, ha="right")
    ax.set_yticks(range(len(rows)), rows)
    for i, row in enumerate(labels):
        for j, s in enumerate(row):
            ax.text(j, i, s, ha="center", va="center", fontsize=8, color="white" if data[i][j] > 0.6 else "black")
    ax.axhline(len(rows) - 1.5, color="black", lw=0.8)
    fig.colorbar(im, ax=ax, fraction=0.04, label="attack runs disclosing")
    ax.set_title("Security matrix\nattack runs with an attributed canary disclosure", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def write_outputs(out: Path, runs: list[dict], meta: dict) -> None:
    attribute(runs)
    agg = aggregate(runs, meta["modes"], meta["trials"])
    (out / "matrix.json").write_text(json.dumps({"meta": meta, "summary": agg, "runs": runs}, indent=1, default=list))
    (out / "summary.json").write_text(json.dumps({"meta": meta, "summary": agg}, indent=1, default=list))
    (out / "matrix.md").write_text(markdown(agg, meta["modes"], meta))
    heatmap(agg, meta["modes"], out / "matrix.png")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--modes", default="unprotected", help="comma-separated: " + ", ".join(runtimes.MODES) + ", or all")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("/var/tmp/germline-matrix"))
    ap.add_argument("--cases", default="*", help="comma-separated globs over case names (docs-pool, xtool, docs-*,xtool, ...); benign cases always run")
    ap.add_argument("--benign", choices=("all", "needed"), default="all",
                    help="which benign sessions run: all five servers', or only those of the servers the chosen "
                         "cases use (each attack run is attributed against its servers' benign runs of the same mode)")
    # GERMLINE_CORPUS_OUT: where bundles/build-corpus.sh builds the Python corpus (to try a
    # corpus change without rebuilding bundles/out/corpus).
    built = Path(os.environ.get("GERMLINE_CORPUS_OUT") or ROOT / "bundles" / "out" / "corpus")
    ap.add_argument("--corpus", default="python",
                    help="python (bundles/out/corpus, or $GERMLINE_CORPUS_OUT), node (bundles/out/corpus-node: the "
                         "documents server in Node, issue 28), or a directory of releases built from "
                         "bundles/corpus/releases.py")
    ap.add_argument("--key", type=Path, default=ROOT / "bundles" / "out" / "keys" / "cosign.pub")
    target = __import__("subprocess").run([str(ROOT / "scripts" / "target-dir")], capture_output=True, text=True, check=True).stdout.strip()
    ap.add_argument("--germline", default=str(Path(target) / "debug" / "germline"))
    ap.add_argument("--run-timeout", type=float, default=300, help="seconds per run (all sessions of a case)")
    ap.add_argument("--copies", choices=("sequential", "concurrent"), default="sequential",
                    help="concurrent: the policy opts every case's releases into concurrent copies "
                         "([copies] concurrent, issue 30); the default runs them one at a time (A1)")
    ap.add_argument("--keep-worlds", action="store_true", help="keep the per-trial worlds and run folders")
    ap.add_argument("--report", action="store_true", help="only re-render OUT's tables and heatmap from OUT/matrix.json")
    ap.add_argument("--first-trial", type=int, default=1,
                    help="number of the first trial (to run the trials of one matrix as separate invocations)")
    ap.add_argument("--merge", type=Path, nargs="+", metavar="DIR",
                    help="only combine the matrix.json of each DIR (distinct trials, the same cases) into OUT")
    a = ap.parse_args()
    if a.report:
        saved = json.loads((a.out / "matrix.json").read_text())
        write_outputs(a.out, saved["runs"], saved["meta"])
        return 0
    if a.merge:
        return merge(a.out, a.merge)
    a._policy_checked = False
    global RELEASES_PY
    if a.corpus == "python":
        a.corpus = built
    elif a.corpus in CORPORA:
        RELEASES_PY, a.corpus = CORPORA[a.corpus]
    else:
        a.corpus = Path(a.corpus)
    modes = runtimes.MODES if a.modes == "all" else [m.strip() for m in a.modes.split(",") if m.strip()]
    for m in modes:
        if m not in runtimes.MODES:
            ap.error(f"unknown runtime {m}")
        if (why := runtimes.available(m, a.germline)) is not None:
            ap.error(f"runtime {m}: {why}")
    chosen = [c for c in load_cases() if c["variant"] != "benign" and any(fnmatch.fnmatch(c["case"], g) for g in a.cases.split(","))]
    used = {s for c in chosen for s in c["sessions"]}
    benign = [c for c in load_cases() if c["variant"] == "benign" and (a.benign == "all" or set(c["sessions"]) <= used)]
    cases = benign + chosen
    needed = sorted({rid for c in cases for rid in c["releases"].values()})
    if a.corpus.resolve() == built.resolve():
        # Setup builds only the releases the test suite runs; build (or refresh) what these
        # cases need, with the runtime under test as the packer. Idempotent and quick when built.
        env = {**os.environ, "GERMLINE_BIN": a.germline}
        if subprocess.run(["bash", str(ROOT / "bundles" / "build-corpus.sh"), *needed], env=env).returncode != 0:
            ap.error(f"bundles/build-corpus.sh could not build {', '.join(needed[:6])}...")
    missing = [rid for rid in needed if not (a.corpus / rid / "bundle").is_dir()]
    if missing:
        build = "bundles/build-corpus-node.sh" if RELEASES_PY == CORPORA["node"][0] else "bundles/build-corpus.sh"
        ap.error(f"releases not built in {a.corpus}: {', '.join(missing[:6])}... (run {build})")
    if a.out.exists():
        shutil.rmtree(a.out / "runs", ignore_errors=True)
        shutil.rmtree(a.out / "worlds", ignore_errors=True)
    a.out.mkdir(parents=True, exist_ok=True)
    runs: list[dict] = []
    prog = Progress(a.trials * len(modes) * len(cases))
    with open(a.out / "runs.jsonl", "w") as log:
        for trial in range(a.first_trial, a.first_trial + a.trials):
            world = worldgen.generate(a.out / "worlds" / f"t{trial}")
            for mode in modes:
                for case in cases:
                    label = f"t{trial} {mode} {case['case']}"
                    prog.show(label)
                    rec = run_case(case, mode, trial, world, a, a.out / "runs" / f"t{trial}" / mode / case["case"])
                    runs.append(rec)
                    log.write(json.dumps(rec) + "\n")
                    log.flush()
                    prog.finished(label, rec)
        prog.end()
    meta = {"command": "tests/security/matrix.py " + " ".join(sys.argv[1:]), "trials": a.trials,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "cases": len([c for c in cases if c["variant"] != "benign"]), "modes": modes,
            "copies": a.copies}
    write_outputs(a.out, runs, meta)
    if not a.keep_worlds:
        shutil.rmtree(a.out / "worlds", ignore_errors=True)
        for p in [*(a.out / "runs").glob("*/*/*/tmp"), *(a.out / "runs").glob("*/*/*/state"),
                  *(a.out / "runs").glob("*/*/*/disk")]:
            shutil.rmtree(p, ignore_errors=True)
    print((a.out / "matrix.md").read_text())
    print(f"matrix: {a.out}/matrix.json, matrix.md, matrix.png")
    return 0


def merge(out: Path, dirs: list[Path]) -> int:
    """One matrix from several invocations' results: each must hold trials the others do not, over
    the same runtimes and cases (attribution compares runs within one trial, so it is unchanged)."""
    runs: list[dict] = []
    metas = []
    seen: dict[int, Path] = {}
    for d in dirs:
        f = d / "matrix.json"
        try:
            saved = json.loads(f.read_text())
        except (OSError, ValueError) as err:
            raise SystemExit(f"matrix: --merge: {f}: {err}")
        for t in sorted({r["trial"] for r in saved["runs"]}):
            if t in seen:
                raise SystemExit(f"matrix: --merge: trial {t} is in both {seen[t]} and {d} (use --first-trial)")
            seen[t] = d
        if metas and saved["meta"]["cases"] != metas[0]["cases"]:
            raise SystemExit(f"matrix: --merge: {f} has other cases than {dirs[0]}/matrix.json")
        metas.append(saved["meta"])
        runs += saved["runs"]
    # Runtimes may differ between the parts (a cell's n says how many runs it holds).
    modes = [m for m in runtimes.MODES if any(m in meta["modes"] for meta in metas)]
    meta = dict(metas[0], modes=modes, trials=len(seen), date=metas[-1]["date"],
                command="tests/security/matrix.py " + " ".join(sys.argv[1:]),
                merged=[{"dir": str(d), "command": m["command"], "date": m["date"]} for d, m in zip(dirs, metas)])
    out.mkdir(parents=True, exist_ok=True)
    write_outputs(out, runs, meta)
    print((out / "matrix.md").read_text())
    print(f"matrix: {out}/matrix.json, matrix.md, matrix.png (merged from {len(dirs)} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
