#!/usr/bin/env bash
# Builds the releases of popular PyPI MCP servers that need more than Python in their rootfs
# (issue 27), with the command a publisher uses: `germline release pack --from pypi:NAME==VERSION`
# and its flags for the publisher's own steps (docs/release.md, "Packing from PyPI"):
#  - bundles/servers/<name>/manifest.json: the PyPI package and version, and the reviewed
#    manifest packed over the draft's image (`pack --manifest M --from-image DRAFT`), as
#    bundles/build.sh does for its PyPI examples;
#  - host-tools: host programs the server runs by absolute path (mcp-server-git runs Debian's
#    /usr/bin/git), one `--include` each (copied to the same path with the libraries ldd names);
#  - rootfs-hook: `--rootfs-hook`, run with the rootfs as its argument once the packages are in,
#    before the probe, digest and signature (mcp-server-git's writes the public repository its
#    warm calls read);
#  - germline-owned: one `--germline-owned` each, the paths owned by the germline's root (host
#    id 2100000) in the bundle written: git refuses a repository another user owns ("dubious
#    ownership"). Ownership is not part of the signed digest (docs/release.md).
# Writes bundles/out/<name>/{bundle,image}, signed with the examples' test key (bundles/out/keys).
# Needs root (pack runs the server once in a germline, and chowns).
#   usage: bundles/build-servers.sh [name...]     (default: every bundles/servers/*/manifest.json)
# GERMLINE_SERVERS_SUFFIX=S writes bundles/out/<name>S instead (a trial build beside the release).
# Idempotent: skips a release already built from the same inputs (the stamp covers the manifest,
# this script, host-tools and the host programs it names, the hook with its mode, germline-owned).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
out="$here/out"
export CARGO_TARGET_DIR="$("$root/scripts/target-dir")"  # one per clone (scripts/target-dir)
germline="${GERMLINE_BIN:-$CARGO_TARGET_DIR/debug/germline}"
export COSIGN_PASSWORD="${COSIGN_PASSWORD:-germline-example-test-key}"
PY=/usr/bin/python3.11
[ -x "$PY" ] || { echo "servers: $PY (Debian's python3.11) is required" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "servers: needs root (pack runs each server once in a germline and chowns its germline-owned paths)" >&2; exit 1; }
if [ -z "${GERMLINE_BIN:-}" ]; then (cd "$root" && cargo build -q -p germline); fi

mkdir -p "$out/keys"
[ -f "$out/keys/cosign.key" ] || "$germline" keygen --dir "$out/keys" >/dev/null

names=("$@")
if [ ${#names[@]} -eq 0 ]; then
    for m in "$here"/servers/*/manifest.json; do names+=("$(basename "$(dirname "$m")")"); done
fi
for name in "${names[@]}"; do
    src="$here/servers/$name"
    manifest="$src/manifest.json"
    version="$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["version"])' "$manifest")"
    tools=(); owned=()
    [ -f "$src/host-tools" ] && mapfile -t tools < <(grep -v '^\s*\(#\|$\)' "$src/host-tools")
    [ -f "$src/germline-owned" ] && mapfile -t owned < <(grep -v '^\s*\(#\|$\)' "$src/germline-owned")
    stamp="$( (cat "$manifest" "$here/build-servers.sh"; cat "$src/host-tools" 2>/dev/null || true
        cat "$src/rootfs-hook" "$src/germline-owned" 2>/dev/null || true
        [ -f "$src/rootfs-hook" ] && stat -c %a "$src/rootfs-hook"
        for t in "${tools[@]}"; do sha256sum "$t"; done) | sha256sum | cut -c1-16)"
    dest="$out/$name${GERMLINE_SERVERS_SUFFIX:-}"
    if [ -f "$dest/stamp" ] && [ "$(cat "$dest/stamp")" = "$stamp" ] && [ -d "$dest/image" ]; then
        echo "servers: $name $version already built"
        continue
    fi
    rm -rf "$dest"; mkdir -p "$dest"
    work="$(mktemp -d "$out/.work-$name.XXXXXX")"
    trap 'rm -rf "$work"' EXIT
    # The probe's germline runs as an unprivileged user, which must reach the draft's rootfs
    # (mktemp makes the work directory 0700).
    chmod 755 "$work"
    from=(--from "pypi:$name==$version")
    for t in "${tools[@]}"; do from+=(--include "$t"); done
    [ -f "$src/rootfs-hook" ] && from+=(--rootfs-hook "$src/rootfs-hook")
    own=()
    for p in "${owned[@]}"; do own+=(--germline-owned "$p"); done
    # The draft (unsigned: its probe lists the tools, with the hook's files in), then the
    # reviewed manifest over its image, signed, with the germline-owned paths.
    "$germline" release pack --json "${from[@]}" --out "$work/draft" --image "$work/draft-image" \
        --manifest "$work/draft.json" > "$work/draft-pack.json"
    "$germline" release pack --json --manifest "$manifest" --from-image "$work/draft-image" "${own[@]}" \
        --key "$out/keys/cosign.key" --out "$dest/bundle" --image "$dest/image" > "$dest/pack.json"
    cp "$work/draft.json" "$dest/draft-manifest.json"
    "$germline" release verify --json --key "$out/keys/cosign.pub" "$dest/image" > "$dest/verify.json"
    echo "$stamp" > "$dest/stamp"
    rm -rf "$work"; trap - EXIT
    # Share the Python runtime's files with an example's rootfs, as bundles/build.sh does (the
    # example's inodes are kept, -O; their contents are never written).
    shared="$out/mcp-server-time/bundle/rootfs"
    if [ -d "$shared" ] && command -v hardlink >/dev/null; then
        hardlink -q -t -m -O "$shared" "$dest/bundle/rootfs" >/dev/null 2>&1 || true
    fi
    echo "servers: built $name $version: $(grep -o '"rootfs_digest": "[^"]*"' "$dest/pack.json")"
done
