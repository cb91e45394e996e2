#!/usr/bin/env bash
# The whole test suite, from nothing: set up, build, lint, run every test (root tests included).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$(dirname "$here")"
bash scripts/setup.sh
export CARGO_TARGET_DIR="$("$here/target-dir")"  # one per clone (scripts/target-dir)
export GERMLINE_REQUIRE_ROOT_TESTS=1   # tests that need root fail instead of skipping
echo "== lint"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
echo "== test"
set +e
cargo test --workspace --no-fail-fast 2>&1 | tee "$CARGO_TARGET_DIR/test.log"
status=${PIPESTATUS[0]}
echo "== security harness (oracle and sinks)"
"${GERMLINE_CORPUS_VENV:-/var/tmp/germline-venv-corpus}/bin/python" -m unittest discover -s tests/security -p 'test_*.py' 2>&1 \
    | tee "$CARGO_TARGET_DIR/test-oracle.log"
oracle=${PIPESTATUS[0]}
[ "$oracle" = 0 ] || status=1
# One closing line over every test binary (cargo prints one per binary, the last often a
# doc-test run with nothing in it).
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i; if ($(i+1) ~ /^ignored/) s += $i } }
     END { printf "tests: %d passed, %d failed, %d skipped (cargo)\n", p, f, s }' "$CARGO_TARGET_DIR/test.log"
echo "oracle tests: $(tail -n 3 "$CARGO_TARGET_DIR/test-oracle.log" | tr '\n' ' ')"
exit "$status"
