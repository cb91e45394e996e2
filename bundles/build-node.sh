#!/usr/bin/env bash
# Builds the Node releases of issue 28 from npm with `germline release pack --from npm:` (the
# host's Node.js and `npm install --omit=dev` of the package, its lockfile kept in the rootfs;
# docs/release.md, "Packing from npm"), then signs the reviewed manifest bundles/node/<dir>/
# manifest.json over that rootfs with the example test key (bundles/build.sh makes it), into
# bundles/out/<name>/{bundle,image}. No binary is committed.
#   usage: bundles/build-node.sh [dir...]   (default: every bundles/node/*/manifest.json)
# Each bundles/node/<dir>/manifest.json names the release; its `version` is the npm version of
# @modelcontextprotocol/<dir> (the one package these releases pack so far). Why two packs: the
# reviewed manifest carries what a draft cannot guess (the release's name, the warm call, the
# transport argument), and `pack --from-image` is how a publisher re-packs a reviewed draft.
# The draft's tools must be the reviewed manifest's (a new upstream tool stops the build).
# As root (pack --from npm: spawns the server once in the sandbox). Idempotent: skips a release
# already built from the same manifest, script, npm pack recipe (shim/pack/src/npm) and Node version.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
out="${GERMLINE_BUNDLES_OUT:-$here/out}"
export CARGO_TARGET_DIR="$("$root/scripts/target-dir")"
germline="$CARGO_TARGET_DIR/debug/germline"
export COSIGN_PASSWORD="${COSIGN_PASSWORD:-germline-example-test-key}"
node="$(command -v node)" || { echo "bundles: node is required (scripts/setup.d/30-release.sh)" >&2; exit 1; }
command -v npm >/dev/null || { echo "bundles: npm is required" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "bundles: build-node.sh runs as root (pack --from npm: probes the server in the sandbox)" >&2; exit 1; }
[ -f "$out/keys/cosign.key" ] || { echo "bundles: $out/keys missing (run bundles/build.sh first)" >&2; exit 1; }
(cd "$root" && cargo build -q -p germline)

dirs=("$@")
if [ ${#dirs[@]} -eq 0 ]; then
    for m in "$here"/node/*/manifest.json; do dirs+=("$(basename "$(dirname "$m")")"); done
fi
for dir in "${dirs[@]}"; do
    manifest="$here/node/$dir/manifest.json"
    name="$(node -e 'console.log(require(process.argv[1]).name)' "$manifest")"
    version="$(node -e 'console.log(require(process.argv[1]).version)' "$manifest")"
    stamp="$( (cat "$manifest" "$here/build-node.sh" "$root"/shim/pack/src/npm/*.rs; "$node" --version) | sha256sum | cut -c1-16)"
    dest="$out/$name"
    if [ -f "$dest/stamp" ] && [ "$(cat "$dest/stamp")" = "$stamp" ] && [ -d "$dest/image" ]; then
        echo "bundles: $name $version already built"
        continue
    fi
    rm -rf "$dest"; mkdir -p "$dest"
    work="$(mktemp -d "$out/.work-$name.XXXXXX")"
    chmod 755 "$work"  # the probe's sandbox enters it (mktemp makes it 0700)
    trap 'rm -rf "$work"' EXIT
    # The rootfs and a draft manifest, unsigned, as an image layout.
    "$germline" release pack --json --from "npm:@modelcontextprotocol/$dir@$version" \
        --manifest "$work/draft.json" --out "$work/draft" --image "$work/image" > "$work/draft-pack.json"
    node -e '
        const [draft, reviewed] = process.argv.slice(1).map(f => require(f));
        const d = Object.keys(draft.tools).sort().join(","), r = Object.keys(reviewed.tools).sort().join(",");
        if (d !== r) { console.error(`bundles: the package lists tools ${d}, the reviewed manifest ${r}`); process.exit(1); }
        if (draft.entry[1] !== reviewed.entry[1]) { console.error(`bundles: entry ${draft.entry[1]} vs ${reviewed.entry[1]}`); process.exit(1); }
    ' "$work/draft.json" "$manifest"
    "$germline" release pack --json --manifest "$manifest" --from-image "$work/image" --key "$out/keys/cosign.key" \
        --out "$dest/bundle" --image "$dest/image" > "$dest/pack.json"
    "$germline" release verify --json --key "$out/keys/cosign.pub" "$dest/image" > "$dest/verify.json"
    echo "$stamp" > "$dest/stamp"
    rm -rf "$work"; trap - EXIT
    echo "bundles: built $name $version: $(grep -o '"rootfs_digest": "[^"]*"' "$dest/pack.json")"
done
