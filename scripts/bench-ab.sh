#!/usr/bin/env bash
# A/B of two germline builds with `germline run-bench`, interleaved (base, new, base, new ...)
# so that the machine's drift falls on both alike: ROUNDS rounds of gap 20 ms then back to back,
# sig-pin and germline with and without a pool of 2, on the official time server's release.
#   scripts/bench-ab.sh BASE_GERMLINE NEW_GERMLINE OUT_DIR [ROUNDS]
# Prints one line per run; each run's table and JSON are in OUT_DIR. Run on a quiet machine
# (never beside the test suite), from the repository's root, after scripts/setup.sh.
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 BASE_GERMLINE NEW_GERMLINE OUT_DIR [ROUNDS]" >&2; exit 2; }
base=$1 new=$2 out=$3 rounds=${4:-3}
cd "$(dirname "$0")/.."
mkdir -p "$out"
for round in $(seq 1 "$rounds"); do
    for gap in 20 0; do
        for v in base new; do
            if [ "$v" = base ]; then bin=$base; else bin=$new; fi
            "$bin" run-bench --quiet --policy config/policy.example.toml --key bundles/out/keys/cosign.pub \
                --modes sig-pin,germline --calls 100 --warmup 10 --pool 2 --gap-ms "$gap" \
                --state-dir "$out/state-$v" --out "$out/rb-$v-g$gap-r$round.json" \
                bundles/out/mcp-server-time/bundle > "$out/rb-$v-g$gap-r$round.txt" 2>&1
            echo "$v gap=$gap round=$round: $(grep -E '^(sig-pin|germline) +[0-9]' "$out/rb-$v-g$gap-r$round.txt" | awk '{printf "%s/%s %s ms  ", $1, $2, $3}')"
        done
    done
done
