#!/usr/bin/env bash
# Builds germline-evidence-node (bundles/evidence-node: the evidence layer's twin-input
# fixture in Node, issue 28) into bundles/out/germline-evidence-node/{bundle,manifest.json}:
# `npm pack` of the package, then `germline release pack --from npm:... --npm-tarball` with its
# one declared destination, signed with the example test key, as a publisher of an unpublished
# package would (the same recipe as bundles/build-corpus-node.sh). As root (pack probes the
# server in the sandbox). Idempotent: kept when built from the same sources, script, npm pack
# recipe and Node version.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
out="${GERMLINE_BUNDLES_OUT:-$here/out}"
dest="$out/germline-evidence-node"
export CARGO_TARGET_DIR="$("$root/scripts/target-dir")"
germline="${GERMLINE_BIN:-$CARGO_TARGET_DIR/debug/germline}"
export COSIGN_PASSWORD="${COSIGN_PASSWORD:-germline-example-test-key}"
src="$here/evidence-node"
command -v node >/dev/null && command -v npm >/dev/null \
    || { echo "evidence-node: node and npm are required (scripts/setup.d/30-release.sh)" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "evidence-node: runs as root (pack --from npm: probes the server in the sandbox)" >&2; exit 1; }
[ -f "$out/keys/cosign.key" ] || { echo "evidence-node: $out/keys missing (run bundles/build.sh first)" >&2; exit 1; }
[ -n "${GERMLINE_BIN:-}" ] || (cd "$root" && cargo build -q -p germline)
stamp="$( (cat "$src"/package.json "$src"/*.js "$0" "$root"/shim/pack/src/npm/*.rs; node --version) | sha256sum | cut -c1-16)"
if [ -f "$dest/stamp" ] && [ "$(cat "$dest/stamp")" = "$stamp" ] && [ -d "$dest/bundle" ]; then
    echo "evidence-node: already built"
    exit 0
fi
rm -rf "$dest"; mkdir -p "$dest"
work="$(mktemp -d "$out/.work-evidence-node.XXXXXX")"
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"  # the probe's sandbox enters it (mktemp makes it 0700)
cp -r "$src" "$work/pkg"
version="$(node -p 'require(process.argv[1]).version' "$src/package.json")"
(cd "$work/pkg" && npm pack --silent --pack-destination "$work" >/dev/null)
"$germline" release pack --json --from "npm:germline-evidence-node@$version" \
    --npm-tarball "$work/germline-evidence-node-$version.tgz" \
    --destination stamp=ocr.example --destination added=ocr.example --destination jitter=ocr.example \
    --key "$out/keys/cosign.key" --manifest "$dest/manifest.json" --out "$dest/bundle" > "$dest/pack.json"
echo "$stamp" > "$dest/stamp"
echo "evidence-node: built germline-evidence-node $version"
