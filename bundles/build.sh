#!/usr/bin/env bash
# Builds the example releases with a Python runtime in their rootfs, taken from the host's
# Debian python3.11 (interpreter, stdlib, and the shared libraries ldd finds), signs them with a
# test key made here, and writes bundles/out/<name>/{bundle,image}. No binary is committed:
# everything under bundles/out is made by this script.
#  - A PyPI server (no `source` file: mcp-server-time, mcp-server-fetch) is built by
#    `germline release pack --from pypi:NAME==VERSION` (issue 27), the command a publisher uses:
#    it makes the rootfs, lists the tools in a germline and drafts a manifest; the reviewed
#    manifest here then replaces the draft (`pack --manifest M --from-image DRAFT`), as the
#    review step of docs/release.md says. Needs root (the probe runs a germline).
#  - A release of this repository's own sources (a `source` file: the germline-* examples and
#    their Trojan builds) is not on PyPI, which is all `pack --from` takes: the rootfs is made
#    here, as pack makes it, and packed with `pack --rootfs`.
#   usage: bundles/build.sh [name...]     (default: every bundles/*/manifest.json)
#   GERMLINE_BUNDLES_OUT=DIR builds into DIR instead of bundles/out (to try a change).
# Idempotent (skips a release already built from the same manifest).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
out="${GERMLINE_BUNDLES_OUT:-$here/out}"
export CARGO_TARGET_DIR="$("$root/scripts/target-dir")"  # one per clone (scripts/target-dir)
venv="${GERMLINE_RELEASE_VENV:-/var/tmp/germline-venv-release}"
# A prebuilt germline may be named (GERMLINE_BIN) to spare a build, as bundles/build-corpus.sh.
germline="${GERMLINE_BIN:-$CARGO_TARGET_DIR/debug/germline}"
export COSIGN_PASSWORD="${COSIGN_PASSWORD:-germline-example-test-key}"
PY=/usr/bin/python3.11
[ -x "$PY" ] || { echo "bundles: $PY (Debian's python3.11) is required" >&2; exit 1; }
[ -x "$venv/bin/pip" ] || { echo "bundles: venv $venv missing (run scripts/setup.d/30-release.sh)" >&2; exit 1; }
if [ -z "${GERMLINE_BIN:-}" ]; then (cd "$root" && cargo build -q -p germline); fi

mkdir -p "$out/keys"
if [ ! -f "$out/keys/cosign.key" ]; then
    "$germline" keygen --dir "$out/keys" >/dev/null
fi

# copy_with_libs and make_runtime: the Python runtime every release here shares.
. "$here/lib.sh"

names=("$@")
if [ ${#names[@]} -eq 0 ]; then
    for m in "$here"/*/manifest.json; do names+=("$(basename "$(dirname "$m")")"); done
fi
for name in "${names[@]}"; do
    manifest="$here/$name/manifest.json"
    version="$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["version"])' "$manifest")"
    stamp="$(cat "$manifest" "$here/build.sh" "$here/lib.sh" | sha256sum | cut -c1-16)"
    if [ -f "$here/$name/source" ]; then
        read -r srcdir _ < "$here/$name/source"
        stamp="$( (cat "$here/$name/source"; echo "$stamp"; find "$here/$srcdir" -type f -not -path '*/__pycache__/*' \
            -not -path '*.egg-info*' -not -path '*/build/*' | sort | xargs cat) | sha256sum | cut -c1-16)"
    fi
    dest="$out/$name"
    if [ -f "$dest/stamp" ] && [ "$(cat "$dest/stamp")" = "$stamp" ] && [ -d "$dest/image" ]; then
        echo "bundles: $name $version already built"
        [ -n "${shared_rootfs:-}" ] || shared_rootfs="$dest/bundle/rootfs"
        continue
    fi
    rm -rf "$dest"; mkdir -p "$dest"
    work="$(mktemp -d "$out/.work-$name.XXXXXX")"
    trap 'rm -rf "$work"' EXIT
    if [ ! -f "$here/$name/source" ]; then
        # From PyPI, through pack: the draft (unsigned), then the reviewed manifest over its image.
        # The probe's germline runs as an unprivileged user, which must reach the draft's rootfs
        # (mktemp makes the work directory 0700).
        chmod 755 "$work"
        "$germline" release pack --json --from "pypi:$name==$version" --out "$work/draft" \
            --image "$work/draft-image" --manifest "$work/draft.json" > "$work/draft-pack.json"
        "$germline" release pack --json --manifest "$manifest" --from-image "$work/draft-image" \
            --key "$out/keys/cosign.key" --out "$dest/bundle" --image "$dest/image" > "$dest/pack.json"
        cp "$work/draft.json" "$dest/draft-manifest.json"
    else
        rootfs="$work/rootfs"
        make_runtime "$rootfs"
        # A release of our own sources: `source` names the folder under bundles/ and the variant
        # baked into it (benign, or the hidden code of a Trojan build).
        read -r srcdir variant < "$here/$name/source"
        cp -r "$here/$srcdir" "$work/src"
        pkg="$(find "$work/src" -maxdepth 2 -name _variant.py -printf '%h\n' | head -1)"
        echo "VARIANT = \"${variant:-benign}\"" > "$pkg/_variant.py"
        "$venv/bin/pip" install -q --no-compile --disable-pip-version-check \
            --target "$rootfs/usr/lib/python3/dist-packages" "$work/src"
        # Bytecode for the installed packages, as a plain `pip install` would leave: the rootfs is
        # read-only at run time, so without it every fresh process compiles ~750 modules again.
        # checked-hash .pyc files are reproducible (no mtimes; file names as the rootfs sees them)
        # and Python checks each against its signed source, so what runs is what a reviewer reads.
        "$PY" -m compileall -q -j 0 --invalidation-mode checked-hash -s "$rootfs/usr/lib/python3" \
            -p /usr/lib/python3 "$rootfs/usr/lib/python3/dist-packages" >/dev/null
        # Extension modules of the installed packages need their libraries too.
        mapfile -t sos < <(find "$rootfs/usr/lib/python3/dist-packages" -name '*.so')
        [ ${#sos[@]} -gt 0 ] && copy_with_libs "$rootfs" "${sos[@]}"
        module="$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["initialisation"]["imports"][0])' "$manifest")"
        if [ "$(id -u)" = 0 ]; then  # smoke test: the rootfs's own Python imports the server
            chroot "$rootfs" /usr/bin/python3 -c "import $module; print('import ok: $module')"
        fi
        "$germline" release pack --json --manifest "$manifest" --rootfs "$rootfs" --key "$out/keys/cosign.key" \
            --out "$dest/bundle" --image "$dest/image" > "$dest/pack.json"
    fi
    "$germline" release verify --json --key "$out/keys/cosign.pub" "$dest/image" > "$dest/verify.json"
    echo "$stamp" > "$dest/stamp"
    rm -rf "$work"; trap - EXIT
    # The releases share their Python runtime byte for byte: link the new rootfs's identical
    # files to the first built one's, as soon as it is made, so the examples take ~40 MB each
    # on disk instead of ~160 MB (a CI machine once ran out of space while packing). The rootfs
    # is mounted read-only at run time, and its digest is of its contents, so links change
    # nothing a release is checked on.
    if [ -z "${shared_rootfs:-}" ]; then shared_rootfs="$dest/bundle/rootfs"
    elif command -v hardlink >/dev/null; then
        hardlink -q -t -m -O "$shared_rootfs" "$dest/bundle/rootfs" >/dev/null 2>&1 || true
    fi
    echo "bundles: built $name $version: $(grep -o '"rootfs_digest": "[^"]*"' "$dest/pack.json")"
done
