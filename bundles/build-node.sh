#!/usr/bin/env bash
# Builds the Node releases of issue 28 from npm: a rootfs with the host's Node.js (the `node`
# binary and the shared libraries ldd finds) and `npm install` of the package the manifest
# names, signed with the example test key (bundles/build.sh makes it), into
# bundles/out/<name>/{bundle,image}. No binary is committed.
#   usage: bundles/build-node.sh [dir...]   (default: every bundles/node/*/manifest.json)
# Each bundles/node/<dir>/manifest.json names the release; its `version` is the npm version of
# @modelcontextprotocol/<dir> (the one package these releases pack so far). Idempotent: skips a
# release already built from the same manifest, script and Node version.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
out="$here/out"
export CARGO_TARGET_DIR="$("$root/scripts/target-dir")"
germline="$CARGO_TARGET_DIR/debug/germline"
export COSIGN_PASSWORD="${COSIGN_PASSWORD:-germline-example-test-key}"
node="$(command -v node)" || { echo "bundles: node is required (scripts/setup.d/30-release.sh)" >&2; exit 1; }
npm="$(command -v npm)" || { echo "bundles: npm is required" >&2; exit 1; }
[ -f "$out/keys/cosign.key" ] || { echo "bundles: $out/keys missing (run bundles/build.sh first)" >&2; exit 1; }
(cd "$root" && cargo build -q -p germline)

source "$here/lib.sh"  # copy_with_libs

dirs=("$@")
if [ ${#dirs[@]} -eq 0 ]; then
    for m in "$here"/node/*/manifest.json; do dirs+=("$(basename "$(dirname "$m")")"); done
fi
for dir in "${dirs[@]}"; do
    manifest="$here/node/$dir/manifest.json"
    name="$(node -e 'console.log(require(process.argv[1]).name)' "$manifest")"
    version="$(node -e 'console.log(require(process.argv[1]).version)' "$manifest")"
    stamp="$( (cat "$manifest" "$here/build-node.sh" "$here/lib.sh"; "$node" --version) | sha256sum | cut -c1-16)"
    dest="$out/$name"
    if [ -f "$dest/stamp" ] && [ "$(cat "$dest/stamp")" = "$stamp" ] && [ -d "$dest/image" ]; then
        echo "bundles: $name $version already built"
        continue
    fi
    rm -rf "$dest"; mkdir -p "$dest"
    work="$(mktemp -d "$out/.work-$name.XXXXXX")"
    trap 'rm -rf "$work"' EXIT
    rootfs="$work/rootfs"
    # /dev, /proc, /run and /tmp are the mount points of the copies (empty, signed).
    mkdir -p "$rootfs"/usr/{bin,lib,lib64} "$rootfs"/etc/ssl/certs "$rootfs"/{dev,proc,run,tmp,app}
    ln -s usr/bin "$rootfs/bin"; ln -s usr/lib "$rootfs/lib"; ln -s usr/lib64 "$rootfs/lib64"
    cp -L "$node" "$rootfs/usr/bin/node"
    copy_with_libs "$rootfs" "$node"
    [ -e "$rootfs/usr/lib64/ld-linux-x86-64.so.2" ] || cp -L /lib64/ld-linux-x86-64.so.2 "$rootfs/usr/lib64/ld-linux-x86-64.so.2"
    cp -L /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/ca-certificates.crt"
    printf 'root:x:0:0:root:/:/bin/false\nnobody:x:65534:65534:nobody:/:/bin/false\n' > "$rootfs/etc/passwd"
    # The package and its dependencies exactly as npm resolves them today (no lockfile is
    # committed: the rootfs digest in pack.json pins what was built).
    "$npm" install --prefix "$rootfs/app" --no-audit --no-fund --omit=dev --loglevel=error \
        "@modelcontextprotocol/$dir@$version" >/dev/null
    rm -rf "$rootfs/app/package-lock.json" "$rootfs/app/node_modules/.package-lock.json"
    if [ "$(id -u)" = 0 ]; then  # smoke test: the rootfs's own Node loads the server's modules
        chroot "$rootfs" /usr/bin/node -e "import('/app/node_modules/@modelcontextprotocol/$dir/package.json', {with: {type: 'json'}}).then(() => console.log('node ok: $dir'))"
    fi
    "$germline" release pack --json --manifest "$manifest" --rootfs "$rootfs" --key "$out/keys/cosign.key" \
        --out "$dest/bundle" --image "$dest/image" > "$dest/pack.json"
    "$germline" release verify --json --key "$out/keys/cosign.pub" "$dest/image" > "$dest/verify.json"
    echo "$stamp" > "$dest/stamp"
    rm -rf "$work"; trap - EXIT
    echo "bundles: built $name $version: $(grep -o '"rootfs_digest": "[^"]*"' "$dest/pack.json")"
done
