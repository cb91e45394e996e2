#!/usr/bin/env bash
# Builds the releases of popular PyPI MCP servers that need more than Python in their rootfs
# (issue 27): each bundles/servers/<name>/manifest.json names the PyPI package and version;
# bundles/servers/<name>/host-tools lists host programs the server runs by absolute path
# (mcp-server-git runs Debian's /usr/bin/git), copied to the same path from the host's Debian packages with the libraries ldd finds, as the Python
# runtime is (bundles/lib.sh). Writes bundles/out/<name>/{bundle,image}, signed with the
# examples' test key (bundles/out/keys). Kept apart from bundles/build.sh so its releases and
# stamps stay as they are; both become users of `germline release pack --from pypi:` (issue 27).
# bundles/servers/<name>/rootfs-hook, if present, runs with the rootfs as its argument after the
# host tools are in (mcp-server-git's makes the public repository its warm calls read).
#   usage: bundles/build-servers.sh [name...]     (default: every bundles/servers/*/manifest.json)
# GERMLINE_SERVERS_SUFFIX=S writes bundles/out/<name>S instead (a trial build beside the release).
# Idempotent: skips a release already built from the same inputs.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
out="$here/out"
export CARGO_TARGET_DIR="$("$root/scripts/target-dir")"  # one per clone (scripts/target-dir)
venv="${GERMLINE_RELEASE_VENV:-/var/tmp/germline-venv-release}"
germline="${GERMLINE_BIN:-$CARGO_TARGET_DIR/debug/germline}"
export COSIGN_PASSWORD="${COSIGN_PASSWORD:-germline-example-test-key}"
PY=/usr/bin/python3.11
[ -x "$PY" ] || { echo "servers: $PY (Debian's python3.11) is required" >&2; exit 1; }
[ -x "$venv/bin/pip" ] || { echo "servers: venv $venv missing (run scripts/setup.d/30-release.sh)" >&2; exit 1; }
if [ -z "${GERMLINE_BIN:-}" ]; then (cd "$root" && cargo build -q -p germline); fi
source "$here/lib.sh"

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
    tools=()
    [ -f "$src/host-tools" ] && mapfile -t tools < <(grep -v '^\s*\(#\|$\)' "$src/host-tools")
    stamp="$( (cat "$manifest" "$here/build-servers.sh" "$here/lib.sh"; cat "$src/host-tools" 2>/dev/null || true
        cat "$src/rootfs-hook" "$src/germline-owned" 2>/dev/null || true
        for t in "${tools[@]}"; do sha256sum "$t"; done) | sha256sum | cut -c1-16)"
    dest="$out/$name${GERMLINE_SERVERS_SUFFIX:-}"
    if [ -f "$dest/stamp" ] && [ "$(cat "$dest/stamp")" = "$stamp" ] && [ -d "$dest/image" ]; then
        echo "servers: $name $version already built"
        continue
    fi
    rm -rf "$dest"; mkdir -p "$dest"
    work="$(mktemp -d "$out/.work-$name.XXXXXX")"
    trap 'rm -rf "$work"' EXIT
    rootfs="$work/rootfs"
    make_runtime "$rootfs"
    "$venv/bin/pip" install -q --no-compile --disable-pip-version-check \
        --target "$rootfs/usr/lib/python3/dist-packages" "$name==$version"
    # Reproducible bytecode checked against its signed source, as bundles/build.sh does.
    "$PY" -m compileall -q -j 0 --invalidation-mode checked-hash -s "$rootfs/usr/lib/python3" \
        -p /usr/lib/python3 "$rootfs/usr/lib/python3/dist-packages" >/dev/null
    mapfile -t sos < <(find "$rootfs/usr/lib/python3/dist-packages" -name '*.so')
    [ ${#sos[@]} -gt 0 ] && copy_with_libs "$rootfs" "${sos[@]}"
    # The host programs the server runs, at their host paths (git's builtins need nothing else; its
    # helpers under /usr/lib/git-core, such as remote transports, are left out: no network).
    for t in "${tools[@]}"; do
        cp -L "$t" "$rootfs$t"
        copy_with_libs "$rootfs" "$t"
    done
    if [ -f "$src/rootfs-hook" ]; then bash "$src/rootfs-hook" "$rootfs"; fi
    module="$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["initialisation"]["imports"][0])' "$manifest")"
    if [ "$(id -u)" = 0 ]; then  # smoke test: the rootfs's own Python imports the server
        # (GitPython runs `git version` at import, and git needs a /dev/null this chroot lacks:
        # the copies have one. The tools themselves are run by the tests, in copies.)
        GIT_PYTHON_REFRESH=quiet chroot "$rootfs" /usr/bin/python3 -c "import $module; print('import ok: $module')"
    fi
    "$germline" release pack --json --manifest "$manifest" --rootfs "$rootfs" --key "$out/keys/cosign.key" \
        --out "$dest/bundle" --image "$dest/image" > "$dest/pack.json"
    "$germline" release verify --json --key "$out/keys/cosign.pub" "$dest/image" > "$dest/verify.json"
    # Paths of the rootfs the germline's root owns (host id 2100000, HOST_ID in
    # shim/sandbox/src/germline.rs), as a directory item is in a copy: git refuses a repository
    # another user owns ("dubious ownership"), and the warm calls' repository is read there.
    # Ownership is not part of the signed digest (packing copies as the packer, images carry uid
    # 0), so this comes after the pack; a release run from its image keeps uid 0 and its warm
    # calls answer an error, which the warming skips: the copies then start unwarmed.
    if [ -f "$src/germline-owned" ] && [ "$(id -u)" != 0 ]; then
        echo "servers: $name: not root, $src/germline-owned left to uid 0 (its warm calls will fail)" >&2
    elif [ -f "$src/germline-owned" ]; then
        grep -v '^\s*\(#\|$\)' "$src/germline-owned" | while read -r p; do
            chown -R 2100000:2100000 "$dest/bundle/rootfs$p"
        done
    fi
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
