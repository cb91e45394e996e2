#!/usr/bin/env bash
# The main job: set up, build, and run the scripted session (README): a benign OCR tool and a
# signed Trojan update of it, each under sig-pin and under germline, with the real MCP client
# SDK as the agent; prints what the OCR sink received.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$(dirname "$here")"
t0=$SECONDS
# Only what the demo needs (the test command installs everything): the Rust build, the two
# example releases it runs, and the agent's MCP SDK.
bash scripts/setup.sh --only demo
export CARGO_TARGET_DIR="$("$here/target-dir")"  # one per clone (scripts/target-dir)
# The debug build the example releases were packed with (bundles/build.sh) and the tests use:
# a release build from nothing takes as long again on a small machine, for a session of a few
# calls.
cargo build -q -p germline
germline="$CARGO_TARGET_DIR/debug/germline"
echo "== set up and built in $((SECONDS - t0)) s"
work="$(mktemp -d /var/tmp/germline-demo.XXXXXX)"
trap 'rm -rf "$work"' EXIT
echo "== Plan for the paper's Fig. 2c call (what germline forks, from public metadata only)"
"$germline" plan --policy config/policy.example.toml --call config/call.fig2c.json
echo
"${GERMLINE_AGENT_VENV:-/var/tmp/germline-venv-agent}/bin/python" tests/run/demo.py \
    --germline "$germline" --bundles bundles/out \
    --key bundles/out/keys/cosign.pub --work "$work"
