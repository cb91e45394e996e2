#!/usr/bin/env bash
# tags: test
# Issue 28: germline-evidence-node (bundles/evidence-node, the twin-input fixture in Node) in
# bundles/out/germline-evidence-node, for shim/germline/tests/run_evidence_node.rs
# (bundles/build-evidence-node.sh). Needs node, npm and the example keys (30-release.sh).
# Idempotent. As root (pack --from npm: probes the server).
set -euo pipefail
root="${GERMLINE_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}"
[ "$(id -u)" = 0 ] || { echo "evidence-node: skipped (not root: pack --from npm: probes the server in the sandbox)"; exit 0; }
"$root/bundles/build-evidence-node.sh"
