#!/usr/bin/env bash
# The security matrix in one command (issue 7, docs/security-matrix.md): set up the corpus and
# its harness, then run every case under the given runtimes.
#   bash scripts/security-matrix.sh [--update-docs] [matrix.py options...]
# Defaults: --modes all --trials 3 --out /var/tmp/germline-matrix. With --update-docs the
# result's matrix.md, matrix.png and summary.json are copied to docs/security-matrix/.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
export GERMLINE_ROOT="$root"
export CARGO_TARGET_DIR="$("$here/target-dir")"  # one per clone (scripts/target-dir)
update=0
args=()
for a in "$@"; do
    if [ "$a" = --update-docs ]; then update=1; else args+=("$a"); fi
done
bash "$here/setup.d/50-corpus.sh"
have() { local k="$1"; for a in "${args[@]}"; do [ "$a" = "$k" ] && return 0; done; return 1; }
# The Node corpus (issue 28) is built by its own step; 50-corpus.sh sets up the harness's venv.
if have node; then bash "$here/setup.d/67-corpus-node.sh"; fi
out=/var/tmp/germline-matrix
have --modes || args+=(--modes all)
have --trials || args+=(--trials 3)
if have --out; then
    for i in "${!args[@]}"; do [ "${args[$i]}" = --out ] && out="${args[$((i + 1))]}"; done
else
    args+=(--out "$out")
fi
"${GERMLINE_CORPUS_VENV:-/var/tmp/germline-venv-corpus}/bin/python" "$root/tests/security/matrix.py" "${args[@]}"
if [ "$update" = 1 ]; then
    mkdir -p "$root/docs/security-matrix"
    cp "$out/matrix.md" "$out/matrix.png" "$out/summary.json" "$root/docs/security-matrix/"
    echo "security matrix: docs/security-matrix/ updated"
fi
