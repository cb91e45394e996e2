#!/usr/bin/env bash
# tags: test
# `germline bench` (docs/performance.md): the benchmark release bundles/germline-bench (built by
# bundles/build.sh with the others) and a venv with matplotlib for its PNG plots.
# Idempotent: the venv is made once per pinned version.
set -euo pipefail
root="${GERMLINE_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}"
venv="${GERMLINE_BENCH_VENV:-/var/tmp/germline-venv-bench}"
want="matplotlib==3.10.8"
if [ "$(cat "$venv/.germline-requirements" 2>/dev/null)" != "$want" ]; then
    rm -rf "$venv"
    /usr/bin/python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "$want"
    echo "$want" > "$venv/.germline-requirements"
fi
bash "$root/bundles/build.sh" germline-bench
