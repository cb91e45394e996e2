#!/usr/bin/env bash
# tags: test
# Issue 28: the Node corpus (the documents server ported to Node with the official TypeScript
# SDK, its flow-compliant release and the pool, smuggle and mix Trojans) in
# bundles/out/corpus-node, for shim/germline/tests/security_matrix_node.rs and
# `germline eval matrix --corpus node` (bundles/build-corpus-node.sh). Needs node, npm and the
# example keys (30-release.sh). Idempotent. As root (pack --from npm: probes the server).
set -euo pipefail
root="${GERMLINE_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}"
[ "$(id -u)" = 0 ] || { echo "corpus-node: skipped (not root: pack --from npm: probes the server in the sandbox)"; exit 0; }
"$root/bundles/build-corpus-node.sh"
