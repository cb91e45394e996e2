#!/usr/bin/env bash
# The main job: set up, build, and run the scripted session.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$(dirname "$here")"
bash scripts/setup.sh
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/germline-target}"
cargo build --release -p germline
exec "$CARGO_TARGET_DIR/release/germline" plan --policy config/policy.example.toml --call config/call.fig2c.json
