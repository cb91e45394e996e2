#!/usr/bin/env bash
# tags: test
# germline release pack --from npm: (issue 28), for shim/germline/tests/pack_npm.rs: packs
# @modelcontextprotocol/server-sequential-thinking (a popular reference server that needs no
# network) with the host's Node and the example key into bundles/out/npm-server-sequential-thinking
# {bundle, manifest.json (the draft), pack.json}, made by `pack --from npm:` itself, so CI builds
# it the way a publisher would. It also fills the pack cache (/var/tmp/germline-pack: npm's
# cache and a lock per spec), from which the test packs the same spec again offline.
# As root (pack spawns the server once in the sandbox). Idempotent: a release already packed by
# the same script, npm pack recipe (shim/pack/src/npm) and Node is kept.
set -euo pipefail
root="${GERMLINE_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}"
export CARGO_TARGET_DIR="$("$root/scripts/target-dir")"
export COSIGN_PASSWORD="${COSIGN_PASSWORD:-germline-example-test-key}"
[ "$(id -u)" = 0 ] || { echo "pack-npm: skipped (not root)"; exit 0; }
command -v node >/dev/null && command -v npm >/dev/null \
    || { echo "pack-npm: node and npm are required (scripts/setup.d/30-release.sh)" >&2; exit 1; }
out="${GERMLINE_BUNDLES_OUT:-$root/bundles/out}"
[ -f "$out/keys/cosign.key" ] || { echo "pack-npm: $out/keys missing (run scripts/setup.d/30-release.sh)" >&2; exit 1; }
(cd "$root" && cargo build -q -p germline)
germline="$CARGO_TARGET_DIR/debug/germline"
stamp="$( (cat "$0" "$root"/shim/pack/src/npm/*.rs; node --version) | sha256sum | cut -c1-16)"
spec="npm:@modelcontextprotocol/server-sequential-thinking@2026.8.31"
dest="$out/npm-server-sequential-thinking"
if [ -f "$dest/stamp" ] && [ "$(cat "$dest/stamp")" = "$stamp" ]; then
    echo "pack-npm: $spec already packed"
    exit 0
fi
rm -rf "$dest"; mkdir -p "$dest"
t0=$(date +%s)
"$germline" release pack --json --from "$spec" --key "$out/keys/cosign.key" \
    --out "$dest/bundle" --manifest "$dest/manifest.json" > "$dest/pack.json"
echo "$stamp" > "$dest/stamp"
echo "pack-npm: $spec ($(( $(date +%s) - t0 )) s): $(grep -o '"rootfs_digest": *"[^"]*"' "$dest/pack.json")"
