#!/usr/bin/env bash
# Installs everything germline's demo and tests need on a fresh Debian machine, as root.
# Each component keeps its own step in scripts/setup.d/NN-name.sh; they run in name order and
# must be idempotent (a second run on the same machine is quick).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
export GERMLINE_ROOT="$(dirname "$here")"
# A target directory outside the clone spares rebuilds on the same machine.
export CARGO_TARGET_DIR="$("$here/target-dir")"  # one per clone (scripts/target-dir)
for step in "$here"/setup.d/*.sh; do
    [ -e "$step" ] || continue
    echo "== setup: $(basename "$step")"
    bash "$step"
done
