#!/usr/bin/env bash
# tags: test
# Issue 29's conformance test (shim/germline/tests/conformance.rs, docs/conformance.md): the
# official MCP conformance suite, @modelcontextprotocol/conformance, pinned with the Node.js it
# runs on in tests/conformance/package-lock.json. Node 22 comes from npm as the package `node`
# (a binary shipped inside a registry package): the suite imports fs.globSync, which Debian's
# Node 20 does not have (it fails at load with "does not provide an export named 'globSync'").
# The reference server the suite runs against, bundles/germline-everything, is built by
# 30-release.sh with the other releases; unprotected, it runs from the agent venv (60-run.sh).
# Idempotent: a copy of the lock file in node_modules records what was installed.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
dir="$root/tests/conformance"
if [ -f "$dir/node_modules/.package-lock.json" ] && cmp -s "$dir/package-lock.json" "$dir/node_modules/.germline-lock"; then
    echo "conformance suite: up to date ($dir/node_modules)"
    exit 0
fi
command -v npm >/dev/null || { echo "conformance: npm is missing (scripts/setup.d/30-release.sh installs it)" >&2; exit 1; }
(cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
"$dir/node_modules/.bin/node" --version >/dev/null
cp "$dir/package-lock.json" "$dir/node_modules/.germline-lock"
echo "conformance suite: $dir/node_modules ($("$dir/node_modules/.bin/node" --version))"
