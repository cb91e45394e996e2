"""How the matrix starts a release under each runtime: the one place that knows command lines.

`germline run --policy POLICY.toml --key PUB.pem --mode MODE RELEASE` (issue 6) runs every
runtime but `unprotected`; until it lands only `unprotected` works: the release's own server,
started directly with the Python of its rootfs, no confinement, its egress through the harness's
plain forwarding proxy (HTTP_PROXY, which the sinks' forwarder routes by host name), so the
harness can show that it sees leaks. The harness's own proxy variables never reach a server."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

# The paper's runtimes (Section VII-A), as `germline run --mode` names them, in Fig. 3's order.
GERMLINE_MODES = ["sig-pin", "sig-ifc", "confined-ifc", "fresh-ifc", "nosplit", "germline"]
MODES = ["unprotected"] + GERMLINE_MODES
TITLES = {"unprotected": "Unprotected", "sig-pin": "Sig+Pin", "sig-ifc": "Sig+IFC", "confined-ifc": "Confined+IFC",
          "fresh-ifc": "Fresh+IFC", "nosplit": "Germline-NoSplit", "germline": "Germline"}


@dataclass
class Launch:
    command: list[str]
    env: dict[str, str]
    cwd: str | None = None


def launch(mode: str, bundle: Path, *, policy: Path, key: Path, home: str, tmpdir: Path,
           forwarder: tuple[str, int] | None, germline: str) -> Launch:
    """The command line and environment that serve `bundle` over stdio under `mode`."""
    if mode == "unprotected":
        manifest = json.loads((bundle / "rootfs" / ".germline" / "manifest.json").read_text())
        entry = list(manifest["entry"])
        entry[0] = str(bundle / "rootfs" / entry[0].lstrip("/"))  # the rootfs's own interpreter
        if entry[0].endswith("/python3"):
            entry[0] += ".11"  # a real file (python3 is a link the host would resolve the same way)
        # A Node entry names its script by its path in the rootfs (/app/node_modules/...).
        entry[1:] = [str(bundle / "rootfs" / a.lstrip("/")) if a.startswith("/app/") else a for a in entry[1:]]
        # Declared state (issue 27) passed by a flag: the server keeps it on its own disk, a
        # directory of the run's (never the host's /run/state).
        disk = tmpdir.parent / "disk"
        for st in manifest.get("state", []):
            if st.get("arg") in entry[:-1]:
                at = disk / Path(st["path"]).name
                disk.mkdir(exist_ok=True)
                at.mkdir(exist_ok=True) if st.get("kind") == "dir" else at.touch()
                entry[entry.index(st["arg"]) + 1] = str(at)
        proxy = "http://%s:%d" % forwarder if forwarder else ""
        env = {"HOME": home, "TMPDIR": str(tmpdir), "PYTHONDONTWRITEBYTECODE": "1",  # never write into the bundle
               "HTTP_PROXY": proxy, "http_proxy": proxy, "NO_PROXY": "", "no_proxy": ""}
        return Launch(entry, env, cwd=str(tmpdir))
    if mode in GERMLINE_MODES:
        # >>> PLUG-IN POINT for issue 6: this is the whole contract with `germline run`.
        # --no-evidence: the matrix measures prevention by the copies alone; dampening would
        # refuse a Trojan's later calls (the evidence layer has its own tests, run_evidence).
        # --state-dir: the broker's slots and the state in files (issue 27) are the run's own, as
        # its world is: a trial never starts from what an earlier run kept (the default is the
        # host's /var/lib/germline/broker). Beside TMPDIR, which the baselines share as /tmp.
        return Launch([germline, "run", "--policy", str(policy), "--key", str(key), "--mode", mode,
                       "--no-evidence", "--state-dir", str(tmpdir.parent / "state"), str(bundle)],
                      {"HOME": home, "TMPDIR": str(tmpdir)}, cwd=str(tmpdir))
    raise ValueError(f"unknown runtime {mode!r}; known: {', '.join(MODES)}")


def available(mode: str, germline: str) -> str | None:
    """Why `mode` cannot run here, or None."""
    if mode == "unprotected":
        return None
    if not os.access(germline, os.X_OK):
        return f"{germline} not found (build it, or pass --germline)"
    import subprocess

    try:
        out = subprocess.run([germline, "run", "--help"], capture_output=True, text=True, timeout=20)
    except OSError as err:
        return f"{germline}: {err}"
    if out.returncode != 0 or "--mode" not in out.stdout + out.stderr:
        return f"`{germline} run --mode` is not there yet (issue 6)"
    return None


def check_policy(policy: Path, germline: str) -> str | None:
    """`germline policy check` on a run's policy, before the first run of a germline mode: a
    policy the runtime refuses would otherwise show up as 52 refused runs."""
    import subprocess

    out = subprocess.run([germline, "policy", "check", str(policy)], capture_output=True, text=True, timeout=30)
    return None if out.returncode == 0 else (out.stderr or out.stdout).strip()
