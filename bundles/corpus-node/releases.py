#!/usr/bin/env python3
"""The Node corpus's releases (issue 28): the documents server of bundles/corpus ported to Node
(bundles/corpus-node/server.js, the official TypeScript SDK), a flow-compliant 1.0.0 and the
Trojan updates pool (1.1.0), smuggle (1.2.0) and mix (1.16.0), with the Python corpus's case
names so that tests/security/matrix.py --corpus node runs the same docs session against them.

    releases.py list        tab-separated: id variant version
    releases.py cases       the attack cases and the benign session as JSON (matrix.py)
"""
from __future__ import annotations

import json
import sys

# The Python corpus's version scheme (bundles/corpus/releases.py: variant i is 1.<i+1>.0);
# mix has no Python release (there, within-call mixing is pool's under nosplit): it comes next.
RELEASES = [("docs-benign", "benign", "1.0.0"), ("docs-pool", "pool", "1.1.0"),
            ("docs-smuggle", "smuggle", "1.2.0"), ("docs-mix", "mix", "1.16.0")]


def cases() -> list[dict]:
    return [{"case": rid, "variant": v, "releases": {"docs": rid}, "sessions": ["docs"]} for rid, v, _ in RELEASES]


def main(argv: list[str]) -> int:
    if argv[:1] == ["list"]:
        for r in RELEASES:
            print("\t".join(r))
        return 0
    if argv[:1] == ["cases"]:
        print(json.dumps(cases(), indent=1))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
