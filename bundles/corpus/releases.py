#!/usr/bin/env python3
"""The corpus's releases: five servers, each a flow-compliant 1.0.0 and signed updates carrying
hidden code (SPEC.md "The attack variants"; paper Section VII-A: 51 attack cases; issue 27 adds statefile and writeback, a 52nd and a 53rd).

One source of truth for bundles/build-corpus.sh (what to build) and tests/security (what to
run). Manifests are written from here, one per release, each with its own version: the update
for variant i is 1.<i+1>.0. A Trojan keeps the benign release's declarations exactly: the
signed manifest is honest about destinations, the hidden code is not.

    releases.py list                 tab-separated: id server module variant baked fastpdfx
    releases.py manifest ID          the manifest JSON of one release
    releases.py cases                the attack cases and benign sessions as JSON
"""
from __future__ import annotations

import json
import sys

VARIANTS = ["pool", "smuggle", "direct", "filesteal", "dormant", "trigger", "launder",
            "launder_text", "xtool", "dep", "init_read", "init_thread", "hijack", "evasive",
            "capsule", "statefile", "writeback"]
# Variants run on every server (15 runs each over 5 servers and 3 trials in the paper) ...
EVERY_SERVER = ["pool", "smuggle", "direct", "filesteal", "dormant", "trigger", "launder",
                "launder_text", "evasive"]
# ... and those run on the documents server only (3 runs each). xtool is one case of two
# cooperating releases: the documents server drops, the web server ships.
DOCS_ONLY = ["capsule", "dep", "hijack", "init_read", "init_thread", "xtool", "statefile", "writeback"]
# statefile's update declares a state path (issue 27, docs/policy.md "State in files"), a cache
# its entry passes by a flag: the one declaration a Trojan adds, and an honest-looking one.
STATE_FLAG, STATE_PATH = "--cache", "/run/state/fastpdfx.cache"
# writeback drives the documents server's folder session (tests/security/sessions.py,
# "docs-folder"): its tools take a directory, a fresh copy of the world's public folder per run.
FOLDER_SESSION = {"writeback": {"docs": "docs-folder"}}

H = lambda *hosts: {"destinations": {"hosts": list(hosts)}}  # noqa: E731
SERVERS = {
    "docs": {"module": "corpus_docs", "tools": {
        "summarize": H(), "ocr_pdf": H("ocr.example"), "ocr_annotate": H("ocr.example"),
        "post_blog": H("blog.example"), "find_related": H(), "publish_folder": H("blog.example")}},
    "sql": {"module": "corpus_sql", "tools": {
        "list_tables": H(), "query": H(), "export_report": H("bi.example")}},
    "web": {"module": "corpus_web", "tools": {
        "fetch": {"destinations": {"host_of_argument": "url"}}, "preview": H(),
        "publish": H("blog.example")}},
    "lint": {"module": "corpus_lint", "tools": {
        "lint": H(), "repo_log": H(), "upload_report": H("ci.example")}},
    "mail": {"module": "corpus_mail", "tools": {
        "read_draft": H(), "send_draft": H("mail.example"), "send_message": H("mail.example")}},
}


def variants_of(server: str) -> list[str]:
    out = list(EVERY_SERVER)
    if server == "docs":
        out += DOCS_ONLY
    if server == "web":
        out += ["xtool"]
    return sorted(out, key=VARIANTS.index)


def releases() -> list[dict]:
    out = []
    for server, spec in SERVERS.items():
        for variant in ["benign"] + variants_of(server):
            version = "1.0.0" if variant == "benign" else f"1.{VARIANTS.index(variant) + 1}.0"
            out.append({
                "id": f"{server}-{variant}", "server": server, "module": spec["module"],
                "variant": variant, "version": version, "name": f"corpus-{server}",
                # dep changes nothing but its dependency: its own code is the benign code
                "baked": "benign" if variant == "dep" else variant,
                "fastpdfx": "1.0.1" if variant == "dep" else "1.0.0",
            })
    return out


def manifest(rel: dict) -> dict:
    spec = SERVERS[rel["server"]]
    state = rel["variant"] == "statefile"
    return {
        "schema": "germline.release.manifest/v1",
        "name": rel["name"],
        "version": rel["version"],
        "language": "python",
        "entry": ["/usr/bin/python3", "-m", spec["module"]] + ([STATE_FLAG, STATE_PATH] if state else []),
        **({"state": [{"path": STATE_PATH, "kind": "file", "arg": STATE_FLAG}]} if state else {}),
        "initialisation": {"imports": [f"{spec['module']}.server"], "warm": False},
        "tools": spec["tools"],
        "readable_paths": ["/usr", "/etc/ssl", "/etc/python3.11"],
        "scratch_mb": 16,
        "deterministic": True,
    }


def cases() -> list[dict]:
    """Attack cases (53) and the benign session per server (5). A case names the releases it
    runs side by side, one per server, and the sessions it drives, in order; `steps` names
    another session than the server's own for a server (writeback's folder session)."""
    out = [{"case": f"{s}-benign", "variant": "benign", "releases": {s: f"{s}-benign"}, "sessions": [s]}
           for s in SERVERS]
    for variant in VARIANTS:
        if variant == "xtool":
            out.append({"case": "xtool", "variant": "xtool", "sessions": ["docs", "web"],
                        "releases": {"docs": "docs-xtool", "web": "web-xtool"}})
            continue
        for s in SERVERS:
            if variant in variants_of(s):
                out.append({"case": f"{s}-{variant}", "variant": variant, "releases": {s: f"{s}-{variant}"}, "sessions": [s],
                            **({"steps": FOLDER_SESSION[variant]} if variant in FOLDER_SESSION else {})})
    return out


def main(argv: list[str]) -> int:
    if argv[:1] == ["list"]:
        for r in releases():
            print("\t".join([r["id"], r["server"], r["module"], r["variant"], r["baked"], r["fastpdfx"]]))
        return 0
    if argv[:1] == ["manifest"] and len(argv) == 2:
        rel = next((r for r in releases() if r["id"] == argv[1]), None)
        if rel is None:
            print(f"releases.py: no release {argv[1]}", file=sys.stderr)
            return 2
        print(json.dumps(manifest(rel), indent=2))
        return 0
    if argv[:1] == ["cases"]:
        print(json.dumps(cases(), indent=1))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
