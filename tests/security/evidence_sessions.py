#!/usr/bin/env python3
"""The matrix's sessions with the evidence layer on (issue 10): each named corpus release runs
its server's scripted session (sessions.py, the same calls the matrix makes) under
`germline run --mode germline --evidence DIR`, in one test world (world.py) with loopback sinks
(sinks.py, no attacker sink: none of the releases run here talks to it, and its fixed address
belongs to the matrix). Dampening is moved out of the way in the policy, so every call of the
session runs and each trigger is classified.

    python evidence_sessions.py --germline BIN --key PUB --corpus DIR --out DIR \\
        [--probe-tries N] [--no-evidence] [--reaper on|off] CASE...
        (CASE: a directory of DIR, e.g. docs-pool)

With --no-evidence the same sessions run with the layer off (`germline run --no-evidence`):
the tripwire still logs its triggers, but nothing is re-run, recorded or dampened (the
reference of the on/off comparison).

Prints one JSON line per case: the steps (status, label), the oracle's disclosures, the
requests each sink got and their JSON fields, the audit log's triggers (call, host), and `germline witness list`."""
from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import oracle  # noqa: E402
import sessions  # noqa: E402
import world as worldgen  # noqa: E402
from sinks import Sinks  # noqa: E402

SESSION_TIMEOUT = 300.0


def body_fields(raw: bytes) -> list[str]:
    """The top-level JSON fields of a recorded HTTP request's body (the corpus posts JSON)."""
    _, _, body = raw.partition(b"\r\n\r\n")
    try:
        v = json.loads(body)
    except ValueError:
        return []
    return sorted(v) if isinstance(v, dict) else []


def run_case(case: str, w: dict, a: argparse.Namespace) -> dict:
    rundir = a.out / case
    (rundir / "tmp").mkdir(parents=True)
    server = case.split("-", 1)[0]
    evidence, audit = rundir / "evidence", rundir / "audit.jsonl"
    sinks = Sinks(list(w["destinations"]), attacker_addr=None, max_seconds=SESSION_TIMEOUT + 30).start()
    try:
        policy = rundir / "policy.toml"
        # Dampening out of the way: a verified witness of a release that declares determinism
        # (the corpus does) would refuse every later call of the session.
        # The copies' reaper (docs/sandbox.md, "The tool is PID 2") as asked: off, the tool is
        # PID 1 of its copy's namespace, which `evasive` recognises.
        policy.write_text(worldgen.policy_toml(w, pins=sinks.pins()) + "\n[dampening]\nsuppress_at = 1e12\n"
                          + f"\n[copies]\nreaper = {'true' if a.reaper == 'on' else 'false'}\n")
        layer = ["--no-evidence"] if a.no_evidence else ["--evidence", str(evidence), "--probe-tries", str(a.probe_tries)]
        cmd = [a.germline, "run", "--policy", str(policy), "--key", str(a.key), "--mode", "germline",
               "--state-dir", str(rundir / "state"), "--audit", str(audit), *layer, str(a.corpus / case / "bundle")]
        env = sessions.minimal_env({"HOME": w["home"], "TMPDIR": str(rundir / "tmp")})
        coro = sessions.run_session(server, cmd, env, w, rundir / "stderr.log", cwd=str(rundir / "tmp"))
        res = asyncio.run(asyncio.wait_for(coro, SESSION_TIMEOUT))
        if not a.no_evidence:
            # The SDK kills its server 2-4 s after closing stdin, which can be before the last
            # call's re-runs end; they stay pending on disk, and a session of the release that
            # makes no call settles them (docs/evidence.md, "Pending jobs survive their session").
            with open(rundir / "stderr.log", "a") as err:
                subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                               env=env, cwd=str(rundir / "tmp"), timeout=SESSION_TIMEOUT, check=True)
    finally:
        sinks.stop()
    reqs = sinks.requests()
    verdict = oracle.judge(reqs, w["canaries"], w)
    log = [json.loads(ln) for ln in audit.read_text().splitlines() if ln.strip()] if audit.exists() else []
    # The runtime's own account of each classified trigger (one JSON line on stderr).
    verdicts = []
    for ln in (rundir / "stderr.log").read_text(errors="replace").splitlines():
        try:
            e = json.loads(ln)
        except ValueError:
            continue
        if isinstance(e, dict) and e.get("evidence") in ("verdict", "rerun failed"):
            verdicts.append(e)
    listing = subprocess.run([a.germline, "witness", "list", "--json", "--evidence", str(evidence)],
                             capture_output=True, text=True, timeout=60)
    return {
        "case": case, "error": res.error,
        "steps": [{"tool": s.tool, "status": s.status, "label": s.label, "text": s.text[:2000]} for s in res.steps],
        "requests": {h: len(r) for h, r in reqs.items()},
        "fields": {h: [body_fields(raw) for raw in r] for h, r in reqs.items() if r},
        "disclosures": [d.__dict__ for d in verdict.disclosures],
        "triggers": [{k: e.get(k) for k in ("call", "group", "host", "kind")} for e in log if e.get("event") == "trigger"],
        "verdicts": verdicts,
        "evidence": str(evidence),
        "witnesses": json.loads(listing.stdout) if listing.returncode == 0 else {"error": listing.stderr},
        "stderr": str(rundir / "stderr.log"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--germline", required=True)
    ap.add_argument("--key", type=Path, required=True)
    ap.add_argument("--corpus", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--probe-tries", type=int, default=2)
    ap.add_argument("--no-evidence", action="store_true", help="the layer off (the reference)")
    ap.add_argument("--reaper", choices=("on", "off"), default="on",
                    help="copies run the tool as PID 2 under a reaper (the policy's [copies] reaper)")
    ap.add_argument("cases", nargs="+")
    a = ap.parse_args()
    a.key, a.corpus, a.out = a.key.resolve(), a.corpus.resolve(), a.out.resolve()
    a.out.mkdir(parents=True, exist_ok=True)
    w = worldgen.generate(a.out / "world")
    for case in a.cases:
        print(json.dumps(run_case(case, w, a)), flush=True)


if __name__ == "__main__":
    main()
