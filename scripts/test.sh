#!/usr/bin/env bash
# The whole test suite, from nothing: set up, build, run every test (root tests included).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$(dirname "$here")"
bash scripts/setup.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/germline-target}"
export GERMLINE_REQUIRE_ROOT_TESTS=1   # tests that need root fail instead of skipping
cargo build --workspace --all-targets
cargo test --workspace --no-fail-fast 2>&1 | tee /var/tmp/germline-test.log
