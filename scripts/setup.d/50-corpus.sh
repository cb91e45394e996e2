#!/usr/bin/env bash
# tags: test
# The security matrix (issue 7): the attack corpus and its harness.
#  - the harness venv /var/tmp/germline-venv-corpus (tests/security/requirements.txt): the official
#    `mcp` SDK (the scripted sessions are its stdio_client), matplotlib (heatmap), cryptography
#    (the sinks' test CA)
#  - the wheelhouse the corpus releases install `mcp` from (/var/tmp/germline-corpus-wheels)
#  - the signed corpus releases bundles/out/corpus/<server>-<variant>/bundle (bundles/build-corpus.sh):
#    those the test suite runs (every documents release, xtool's web half and each server's benign
#    release: 23 of 59), or those named as arguments, or `all`. `germline eval matrix` builds the
#    releases its chosen cases need itself (tests/security/matrix.py), so a full matrix never
#    runs on a partial corpus; the 36 others took ~150 s and ~1 GB of every CI run for nothing.
# Idempotent: the venv is rebuilt only when the requirements change; build-corpus.sh skips releases
# already built from the same sources.
set -euo pipefail
root="${GERMLINE_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}"
need=()
[ -x /usr/bin/python3.11 ] || need+=(python3.11)
/usr/bin/python3 -c 'import ensurepip' 2>/dev/null || need+=(python3-venv)
command -v hardlink >/dev/null || need+=(util-linux)
command -v git >/dev/null || need+=(git)
if [ ${#need[@]} -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi

venv="${GERMLINE_CORPUS_VENV:-/var/tmp/germline-venv-corpus}"
req="$root/tests/security/requirements.txt"
if ! cmp -s "$req" "$venv/.germline-requirements" 2>/dev/null; then
    rm -rf "$venv"
    /usr/bin/python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check -r "$req"
    cp "$req" "$venv/.germline-requirements"
fi

wheels="${GERMLINE_CORPUS_WHEELS:-/var/tmp/germline-corpus-wheels}"
wreq="$root/bundles/corpus/requirements.txt"
if ! cmp -s "$wreq" "$wheels/.germline-requirements" 2>/dev/null; then
    rm -rf "$wheels"; mkdir -p "$wheels"
    "$venv/bin/pip" download -q --disable-pip-version-check --only-binary=:all: \
        --python-version 3.11 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux_2_28_x86_64 --platform any -d "$wheels" -r "$wreq"
    cp "$wreq" "$wheels/.germline-requirements"
fi

if [ "${1:-}" = all ]; then
    ids=()
elif [ $# -gt 0 ]; then
    ids=("$@")
else
    mapfile -t ids < <(/usr/bin/python3 "$root/bundles/corpus/releases.py" list | cut -f1 | grep -E '^(docs-.*|.*-benign|web-xtool)$')
fi
bash "$root/bundles/build-corpus.sh" "${ids[@]}"
