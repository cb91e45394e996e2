#!/usr/bin/env bash
# Installs what germline's demo and tests need on a fresh Debian machine, as root.
#   usage: scripts/setup.sh [--only demo]
# Each component keeps its own step in scripts/setup.d/NN-name.sh; they run in name order and
# must be idempotent (a second run on the same machine is quick). A step's `# tags:` line says
# which jobs need it: `demo` (scripts/demo.sh: the Rust build, the example releases it runs and
# the agent's SDK) and `test` (scripts/test.sh: everything). `--only demo` runs the demo's
# steps, and exports GERMLINE_SETUP_ONLY=demo so a step needed in part does only that part.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
only=""
while [ $# -gt 0 ]; do
    case "$1" in
        --only) only="${2:?setup: --only takes a tag: demo}"; shift 2 ;;
        --only=*) only="${1#--only=}"; shift ;;
        *) echo "setup: unknown argument $1 (usage: scripts/setup.sh [--only demo])" >&2; exit 2 ;;
    esac
done
case "$only" in
    ""|demo) ;;
    *) echo "setup: --only $only: the tags are demo (the whole setup is the default)" >&2; exit 2 ;;
esac
export GERMLINE_SETUP_ONLY="$only"
export GERMLINE_ROOT="$(dirname "$here")"
# A target directory outside the clone spares rebuilds on the same machine.
export CARGO_TARGET_DIR="$("$here/target-dir")"  # one per clone (scripts/target-dir)
for step in "$here"/setup.d/*.sh; do
    [ -e "$step" ] || continue
    tags="$(sed -n 's/^# tags: *//p' "$step" | head -1)"
    if [ -n "$only" ] && ! [[ " $tags " == *" $only "* ]]; then
        continue
    fi
    echo "== setup: $(basename "$step")"
    bash "$step"
done
