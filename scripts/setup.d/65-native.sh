#!/usr/bin/env bash
# tags: test
# Issue 28: the native-binary release of the spawned-copy tests, bundles/out/native-rmcp: a
# small MCP server made with the official Rust SDK (rmcp from crates.io; tests/native/rmcp-server,
# a test-only crate with its own workspace and lockfile, so rmcp never enters the product's
# dependency graph), linked statically (glibc's static-pie: the rootfs needs no shared library,
# `ldd` says "statically linked"), in a rootfs of the binary, a text file its read-file tool is
# asked for, and the mount points, signed with the example key under the reviewed manifest
# bundles/native/rmcp/manifest.json (language "binary", the issue's word for "native").
# For shim/germline/tests/servers_native.rs. Needs the example keys (30-release.sh) and
# crates.io (the first time: the build's dependencies). Idempotent: a release already built from
# the same manifest, script, crate sources, lockfile and toolchain is kept.
set -euo pipefail
root="${GERMLINE_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}"
export CARGO_TARGET_DIR="$("$root/scripts/target-dir")"
export COSIGN_PASSWORD="${COSIGN_PASSWORD:-germline-example-test-key}"
out="${GERMLINE_BUNDLES_OUT:-$root/bundles/out}"
[ -f "$out/keys/cosign.key" ] || { echo "native: $out/keys missing (run scripts/setup.d/30-release.sh)" >&2; exit 1; }
crate="$root/tests/native/rmcp-server"
manifest="$root/bundles/native/rmcp/manifest.json"
target=x86_64-unknown-linux-gnu
stamp="$( (cat "$0" "$manifest" "$crate/Cargo.toml" "$crate/Cargo.lock" "$crate"/src/*.rs; rustc --version) | sha256sum | cut -c1-16)"
dest="$out/native-rmcp"
if [ -f "$dest/stamp" ] && [ "$(cat "$dest/stamp")" = "$stamp" ] && [ -d "$dest/bundle/rootfs" ]; then
    echo "native: native-rmcp already built"
    exit 0
fi
(cd "$root" && cargo build -q -p germline)
# --target: RUSTFLAGS then reach the binary only, not the build scripts and proc macros (which
# cannot be static).
(cd "$crate" && RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build -q --locked --release --target "$target")
bin="$CARGO_TARGET_DIR/$target/release/rmcp-server"
ldd "$bin" 2>&1 | grep -q "not a dynamic executable\|statically linked" \
    || { echo "native: $bin is not static: $(ldd "$bin" 2>&1)" >&2; exit 1; }
rm -rf "$dest"; mkdir -p "$dest"
work="$(mktemp -d "$out/.work-native-rmcp.XXXXXX")"
trap 'rm -rf "$work"' EXIT
rootfs="$work/rootfs"
mkdir -p "$rootfs"/{usr/bin,usr/share/germline-native,dev,proc,run,tmp,etc}
install -m 0755 "$bin" "$rootfs/usr/bin/rmcp-server"
echo "a file of the native release's rootfs" > "$rootfs/usr/share/germline-native/hello.txt"
chmod -R a+rX "$rootfs"
"$CARGO_TARGET_DIR/debug/germline" release pack --json --manifest "$manifest" --rootfs "$rootfs" \
    --key "$out/keys/cosign.key" --out "$dest/bundle" > "$dest/pack.json"
echo "$stamp" > "$dest/stamp"
rm -rf "$work"; trap - EXIT
echo "native: built native-rmcp: $(grep -o '"rootfs_digest": *"[^"]*"' "$dest/pack.json")"
