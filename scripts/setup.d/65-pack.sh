#!/usr/bin/env bash
# tags: test
# germline release pack --from pypi: (issue 27), for shim/germline/tests/pack_pypi.rs:
#  - fills the pack cache (/var/tmp/germline-pack: pip's cache, wheels, a lock per requirement
#    set), so that the test's own pack of mcp-server-time installs offline;
#  - packs, with the example key, the two servers the test runs on other SDK generations:
#    bundles/out/pypi-mcp-server-calculator (mcp 1.x) and bundles/out/pypi-sequential-thinking-mcp
#    (fastmcp), each {bundle, manifest.json, pack.json}. They are made by `pack --from` itself,
#    so CI builds them the way a publisher would.
# As root (pack runs each server once in a germline). Idempotent: a release already packed by
# the same script is kept; the cache makes a repeated pack offline.
set -euo pipefail
root="${GERMLINE_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}"
export CARGO_TARGET_DIR="$("$root/scripts/target-dir")"
export COSIGN_PASSWORD="${COSIGN_PASSWORD:-germline-example-test-key}"
[ "$(id -u)" = 0 ] || { echo "pack: skipped (not root)"; exit 0; }
if ! { [ -x /usr/bin/python3.11 ] && /usr/bin/python3.11 -m pip --version >/dev/null 2>&1; }; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3.11 python3-pip
fi
out="$root/bundles/out"
[ -f "$out/keys/cosign.key" ] || { echo "pack: $out/keys missing (run scripts/setup.d/30-release.sh)" >&2; exit 1; }
(cd "$root" && cargo build -q -p germline)
germline="$CARGO_TARGET_DIR/debug/germline"
stamp="$(sha256sum < "$0" | cut -c1-16)"
for server in mcp-server-time mcp-server-calculator sequential-thinking-mcp; do
    dest="$out/pypi-$server"
    if [ -f "$dest/stamp" ] && [ "$(cat "$dest/stamp")" = "$stamp" ]; then
        echo "pack: $server already packed"
        continue
    fi
    rm -rf "$dest"; mkdir -p "$dest"
    t0=$(date +%s)
    "$germline" release pack --json --from "pypi:$server" --key "$out/keys/cosign.key" \
        --out "$dest/bundle" --manifest "$dest/manifest.json" > "$dest/pack.json"
    echo "$stamp" > "$dest/stamp"
    echo "pack: $server ($(( $(date +%s) - t0 )) s)"
done
# The test packs mcp-server-time itself (from the warm cache); its release here is not needed.
rm -rf "$out/pypi-mcp-server-time/bundle"
