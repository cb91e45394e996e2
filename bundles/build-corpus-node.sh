#!/usr/bin/env bash
# Builds the Node corpus (issue 28; bundles/corpus-node/releases.py lists it) into
# bundles/out/corpus-node/<id>/bundle: for each release, `npm pack` of bundles/corpus-node with
# its version and variant (a Trojan also ships hidden.js), then one `germline release pack
# --from npm:corpus-docs-node@VERSION --npm-tarball TGZ` with the documents server's declared
# destinations, signed with the example test key, as a publisher of an unpublished package
# would. Its one dependency, @modelcontextprotocol/sdk, comes from npm (or the pack cache).
#   usage: bundles/build-corpus-node.sh [id...]   (default: every release)
# As root (pack --from npm: spawns the server once in the sandbox). Idempotent: a release
# already built from the same sources, script, npm pack recipe and Node version is kept.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
out="${GERMLINE_BUNDLES_OUT:-$here/out}/corpus-node"
keys="${GERMLINE_BUNDLES_OUT:-$here/out}/keys"
export CARGO_TARGET_DIR="$("$root/scripts/target-dir")"
germline="${GERMLINE_BIN:-$CARGO_TARGET_DIR/debug/germline}"
export COSIGN_PASSWORD="${COSIGN_PASSWORD:-germline-example-test-key}"
src="$here/corpus-node"
command -v node >/dev/null && command -v npm >/dev/null \
    || { echo "corpus-node: node and npm are required (scripts/setup.d/30-release.sh)" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "corpus-node: runs as root (pack --from npm: probes the server in the sandbox)" >&2; exit 1; }
[ -f "$keys/cosign.key" ] || { echo "corpus-node: $keys missing (run bundles/build.sh first)" >&2; exit 1; }
[ -n "${GERMLINE_BIN:-}" ] || (cd "$root" && cargo build -q -p germline)
wanted=("$@")
mkdir -p "$out"
stamp_of() {
    (cat "$src"/package.json "$src"/*.js "$0" "$root"/shim/pack/src/npm/*.rs; echo "$1"; node --version) \
        | sha256sum | cut -c1-16
}
python3 "$src/releases.py" list | while IFS=$'\t' read -r id variant version; do
    if [ ${#wanted[@]} -gt 0 ] && [[ " ${wanted[*]} " != *" $id "* ]]; then continue; fi
    dest="$out/$id"
    stamp="$(stamp_of "$id $variant $version")"
    if [ -f "$dest/stamp" ] && [ "$(cat "$dest/stamp")" = "$stamp" ] && [ -d "$dest/bundle" ]; then
        echo "corpus-node: $id already built"
        continue
    fi
    rm -rf "$dest"; mkdir -p "$dest"
    work="$(mktemp -d "$out/.work-$id.XXXXXX")"
    chmod 755 "$work"  # the probe's sandbox enters it (mktemp makes it 0700)
    mkdir "$work/pkg"
    cp "$src/server.js" "$src/corpus.js" "$work/pkg/"
    [ "$variant" = benign ] || cp "$src/hidden.js" "$work/pkg/"
    printf '{"variant": "%s"}\n' "$variant" > "$work/pkg/variant.json"
    node -e 'const p = require(process.argv[1]); p.version = process.argv[2];
             require("fs").writeFileSync(process.argv[3], JSON.stringify(p, null, 2) + "\n")' \
        "$src/package.json" "$version" "$work/pkg/package.json"
    (cd "$work/pkg" && npm pack --silent --pack-destination "$work" >/dev/null)
    "$germline" release pack --json --from "npm:corpus-docs-node@$version" \
        --npm-tarball "$work/corpus-docs-node-$version.tgz" \
        --destination ocr_pdf=ocr.example --destination ocr_annotate=ocr.example \
        --destination post_blog=blog.example --key "$keys/cosign.key" \
        --manifest "$dest/manifest.json" --out "$dest/bundle" > "$dest/pack.json"
    echo "$stamp" > "$dest/stamp"
    rm -rf "$work"
    echo "corpus-node: built $id ($variant $version)"
done
# The releases share Node (~100 MB) and the SDK file for file: one inode each on disk (the rootfs
# is read-only at run time and its digest is of contents, so nothing a release is checked on
# changes).
if command -v hardlink >/dev/null; then hardlink -q -t "$out" >/dev/null 2>&1 || true; fi
