#!/usr/bin/env bash
# tags: test
# germline release pack --from pypi: (issue 27): fills the pack cache (/var/tmp/germline-pack:
# pip's cache, wheels, and a lock per requirement set) with the servers
# shim/germline/tests/pack_pypi.rs packs, so that the test's packs install offline and CI runs
# them for real in seconds. Each server is packed once here (as root: pack runs it in a
# germline to list its tools) and the release thrown away; only the cache is kept.
# Idempotent: a pack whose lock and wheels are present is offline and quick.
set -euo pipefail
root="${GERMLINE_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}"
export CARGO_TARGET_DIR="$("$root/scripts/target-dir")"
[ "$(id -u)" = 0 ] || { echo "pack cache: skipped (not root)"; exit 0; }
[ -x /usr/bin/python3.11 ] && /usr/bin/python3.11 -m pip --version >/dev/null 2>&1 || {
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3.11 python3-pip
}
(cd "$root" && cargo build -q -p germline)
germline="$CARGO_TARGET_DIR/debug/germline"
work="$(mktemp -d /var/tmp/germline-pack-setup.XXXXXX)"
trap 'rm -rf "$work"' EXIT
"$germline" keygen --dir "$work" >/dev/null 2>&1 </dev/null
# The servers of pack_pypi.rs: one per SDK generation (mcp 2.x, mcp 1.x, fastmcp).
for server in mcp-server-time mcp-server-calculator sequential-thinking-mcp; do
    t0=$(date +%s)
    "$germline" release pack --from "pypi:$server" --key "$work/cosign.key" --out "$work/$server" >/dev/null
    echo "pack cache: $server ($(( $(date +%s) - t0 )) s)"
    rm -rf "${work:?}/$server" "$work/$server.manifest.json"
done
