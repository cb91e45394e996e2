#!/usr/bin/env bash
# tags: test
# Issue 28: the Node release of the spawned-copy tests, bundles/out/node-everything
# (@modelcontextprotocol/server-everything from npm with the host's Node.js, signed with the
# example test key; bundles/build-node.sh). Needs node and npm (30-release.sh installs them) and
# the example keys (bundles/build.sh, also 30-release.sh). Idempotent: build-node.sh skips a
# release already built from the same manifest, script and Node version.
set -euo pipefail
root="${GERMLINE_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}"
"$root/bundles/build-node.sh"
