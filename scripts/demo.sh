#!/usr/bin/env bash
# The main job: set up, build, and run the scripted session (README): a benign OCR tool and a
# signed Trojan update of it, each under sig-pin and under germline, with the real MCP client
# SDK as the agent; prints what the OCR sink received.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$(dirname "$here")"
bash scripts/setup.sh
export CARGO_TARGET_DIR="$("$here/target-dir")"  # one per clone (scripts/target-dir)
cargo build --release -q -p germline
work="$(mktemp -d /var/tmp/germline-demo.XXXXXX)"
trap 'rm -rf "$work"' EXIT
echo "== Plan for the paper's Fig. 2c call (what germline forks, from public metadata only)"
"$CARGO_TARGET_DIR/release/germline" plan --policy config/policy.example.toml --call config/call.fig2c.json
echo
"${GERMLINE_AGENT_VENV:-/var/tmp/germline-venv-agent}/bin/python" tests/run/demo.py \
    --germline "$CARGO_TARGET_DIR/release/germline" --bundles bundles/out \
    --key bundles/out/keys/cosign.pub --work "$work"
