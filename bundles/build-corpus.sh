#!/usr/bin/env bash
# Builds the attack corpus (issue 7): every release listed by bundles/corpus/releases.py, each a
# signed OCI runtime bundle bundles/out/corpus/<id>/bundle (no image layout: the matrix runs the
# unpacked bundle). Each rootfs is Debian's python3.11 (bundles/lib.sh) + the official `mcp` SDK
# from the wheelhouse of scripts/setup.d/50-corpus.sh + the server's package with its variant
# baked in (`corpus_common/_variant.py`; benign releases ship without `hidden.py`) + for the
# documents server its dependency fastpdfx (1.0.1, the compromised bump, only in `dep`).
# Signed with the same test key as the examples (bundles/out/keys).
#   usage: bundles/build-corpus.sh [id...]      (default: all; ids as in `releases.py list`)
#   GERMLINE_CORPUS_OUT=DIR builds into DIR instead of bundles/out/corpus.
# Idempotent: skips a release built from the same sources. Identical files of different
# bundles are hard-linked afterwards (the bundles are read-only inputs; the tree digest does not
# cover inode identity), which keeps ~58 releases at the size of a few.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
src="$here/corpus"
out="${GERMLINE_CORPUS_OUT:-$here/out/corpus}"  # another directory to try a change without touching the built corpus
keys="$here/out/keys"
export CARGO_TARGET_DIR="$("$root/scripts/target-dir")"  # one per clone (scripts/target-dir)
wheels="${GERMLINE_CORPUS_WHEELS:-/var/tmp/germline-corpus-wheels}"
venv="${GERMLINE_CORPUS_VENV:-/var/tmp/germline-venv-corpus}"
export COSIGN_PASSWORD="${COSIGN_PASSWORD:-germline-example-test-key}"
PY=/usr/bin/python3.11
[ -x "$PY" ] || { echo "corpus: $PY (Debian's python3.11) is required" >&2; exit 1; }
[ -x "$venv/bin/pip" ] || { echo "corpus: venv $venv missing (run scripts/setup.d/50-corpus.sh)" >&2; exit 1; }
[ -f "$wheels/.germline-requirements" ] || { echo "corpus: wheelhouse $wheels missing (run scripts/setup.d/50-corpus.sh)" >&2; exit 1; }
# A prebuilt germline may be named (GERMLINE_BIN) to spare a build; else build it.
germline="${GERMLINE_BIN:-$CARGO_TARGET_DIR/debug/germline}"
if [ -z "${GERMLINE_BIN:-}" ]; then (cd "$root" && cargo build -q -p germline); fi
source "$here/lib.sh"

mkdir -p "$out" "$keys"
[ -f "$keys/cosign.key" ] || "$germline" keygen --dir "$keys" >/dev/null

# Everything a release is built from; a change anywhere rebuilds every release.
sources="$( (cd "$here" && find corpus lib.sh build-corpus.sh -type f ! -name '*.pyc' | LC_ALL=C sort | xargs sha256sum; cat "$wheels/.germline-requirements") | sha256sum | cut -c1-16)"

base="$out/.base-$sources"
if [ ! -d "$base" ]; then
    rm -rf "$out"/.base-*
    tmp="$(mktemp -d "$out/.work-base.XXXXXX")"
    make_runtime "$tmp/rootfs"
    "$venv/bin/pip" install -q --no-compile --disable-pip-version-check --no-index --find-links "$wheels" \
        --target "$tmp/rootfs/usr/lib/python3/dist-packages" -r "$src/requirements.txt"
    rm -rf "$tmp/rootfs/usr/lib/python3/dist-packages/bin"
    mapfile -t sos < <(find "$tmp/rootfs/usr/lib/python3/dist-packages" -name '*.so')
    [ ${#sos[@]} -gt 0 ] && copy_with_libs "$tmp/rootfs" "${sos[@]}"
    mv "$tmp/rootfs" "$base"; rm -rf "$tmp"
fi

ids=("$@")
if [ ${#ids[@]} -eq 0 ]; then mapfile -t ids < <("$PY" "$src/releases.py" list | cut -f1); fi
built=0
for id in "${ids[@]}"; do
    line="$("$PY" "$src/releases.py" list | awk -F'\t' -v id="$id" '$1 == id')"
    [ -n "$line" ] || { echo "corpus: unknown release $id" >&2; exit 2; }
    IFS=$'\t' read -r _ server module variant baked fastpdfx <<<"$line"
    dest="$out/$id"
    if [ -f "$dest/stamp" ] && [ "$(cat "$dest/stamp")" = "$sources" ] && [ -d "$dest/bundle" ]; then
        continue
    fi
    rm -rf "$dest"; mkdir -p "$dest"
    work="$(mktemp -d "$out/.work-$id.XXXXXX")"
    trap 'rm -rf "$work"' EXIT
    rootfs="$work/rootfs"
    cp -al "$base" "$rootfs"
    site="$rootfs/usr/lib/python3/dist-packages"
    cp -r "$src/src/corpus_common" "$src/src/$module" "$site/"
    find "$site/corpus_common" "$site/$module" -name '__pycache__' -prune -exec rm -rf {} +
    [ "$baked" = benign ] && rm -f "$site/corpus_common/hidden.py"
    printf '# Written by bundles/build-corpus.sh.\nSERVER = "%s"\nVARIANT = "%s"\n' "$server" "$baked" > "$site/corpus_common/_variant.py"
    if [ "$server" = docs ]; then cp -r "$src/deps/fastpdfx-$fastpdfx/fastpdfx" "$site/"; fi
    "$PY" "$src/releases.py" manifest "$id" > "$dest/manifest.json"
    if [ "$(id -u)" = 0 ]; then  # smoke test: the rootfs's own Python imports the server
        env -i PATH=/usr/sbin:/usr/bin HOME=/nonexistent chroot "$rootfs" /usr/bin/python3 -B -c "import $module.server" \
            || { echo "corpus: $id does not import in its own rootfs" >&2; exit 1; }
    fi
    "$germline" release pack --json --manifest "$dest/manifest.json" --rootfs "$rootfs" --key "$keys/cosign.key" \
        --out "$dest/bundle" > "$dest/pack.json"
    "$germline" release verify --json --key "$keys/cosign.pub" "$dest/bundle" > "$dest/verify.json"
    echo "$sources" > "$dest/stamp"
    rm -rf "$work"; trap - EXIT
    # Link the packed rootfs's files that equal the base's as soon as it is made (pack copies
    # them): ~40 releases of ~120 MB each filled a CI machine's disk before the final pass below.
    command -v hardlink >/dev/null && { hardlink -q -t -m -O "$base" "$dest/bundle/rootfs" >/dev/null 2>&1 || true; }
    built=$((built + 1))
    echo "corpus: built $id ($(grep -o '"version": "[^"]*"' "$dest/manifest.json"))"
done
if [ "$built" -gt 0 ] && command -v hardlink >/dev/null; then hardlink -q -t "$out" >/dev/null 2>&1 || true; fi
echo "corpus: ${#ids[@]} releases ready in $out ($built built now)"
