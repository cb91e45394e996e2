#!/usr/bin/env bash
# tags: test
# The real mcp-server-sqlite from PyPI, packed with its database as a declared state path
# (issue 27, "State between calls"), for shim/germline/tests/servers_sqlite.rs:
#   germline release pack --from pypi:mcp-server-sqlite --with 'mcp<2' --state=--db-path=db.sqlite
# into bundles/out/pypi-mcp-server-sqlite/{bundle, manifest.json, pack.json}. `--with 'mcp<2'`:
# the server's own code uses the 1.x SDK's decorators (`Server.list_resources`), which mcp 2.x
# removed, and it does not pin it, so pip alone would install a pair that fails unprotected too.
# As root (pack runs the server once in a germline). Idempotent: a release packed by the same
# script is kept; pack's cache (scripts/setup.d/65-pack.sh) makes a repeated pack offline.
set -euo pipefail
root="${GERMLINE_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}"
export CARGO_TARGET_DIR="$("$root/scripts/target-dir")"
export COSIGN_PASSWORD="${COSIGN_PASSWORD:-germline-example-test-key}"
[ "$(id -u)" = 0 ] || { echo "pack-sqlite: skipped (not root)"; exit 0; }
if ! { [ -x /usr/bin/python3.11 ] && /usr/bin/python3.11 -m pip --version >/dev/null 2>&1; }; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3.11 python3-pip
fi
out="$root/bundles/out"
[ -f "$out/keys/cosign.key" ] || { echo "pack-sqlite: $out/keys missing (run scripts/setup.d/30-release.sh)" >&2; exit 1; }
(cd "$root" && cargo build -q -p germline)
germline="$CARGO_TARGET_DIR/debug/germline"
stamp="$(sha256sum < "$0" | cut -c1-16)"
dest="$out/pypi-mcp-server-sqlite"
if [ -f "$dest/stamp" ] && [ "$(cat "$dest/stamp")" = "$stamp" ]; then
    echo "pack-sqlite: already packed"
    exit 0
fi
rm -rf "$dest"; mkdir -p "$dest"
t0=$(date +%s)
"$germline" release pack --json --from pypi:mcp-server-sqlite --with 'mcp<2' \
    --state=--db-path=db.sqlite --key "$out/keys/cosign.key" \
    --out "$dest/bundle" --manifest "$dest/manifest.json" > "$dest/pack.json"
echo "$stamp" > "$dest/stamp"
echo "pack-sqlite: mcp-server-sqlite ($(( $(date +%s) - t0 )) s)"
