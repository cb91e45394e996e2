#!/usr/bin/env bash
# tags: test
# Issue 28: the Node release of the spawned-copy tests, bundles/out/node-everything
# (@modelcontextprotocol/server-everything from npm with the host's Node.js, signed with the
# example test key; bundles/build-node.sh). Needs node and npm (30-release.sh installs them) and
# the example keys (bundles/build.sh, also 30-release.sh). Idempotent: build-node.sh skips a
# release already built from the same manifest, script, pack recipe and Node version. As root
# (build-node.sh packs with `germline release pack --from npm:`, which spawns the server once).
set -euo pipefail
root="${GERMLINE_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}"
[ "$(id -u)" = 0 ] || { echo "node: skipped (not root: pack --from npm: probes the server in the sandbox)"; exit 0; }
"$root/bundles/build-node.sh"
