#!/usr/bin/env bash
# tags: demo test
# germline run (issue 6): the agent's side of the tests and the demo. A venv with the official
# MCP client SDK (`mcp` from PyPI) and the unprotected servers the compatibility tests compare
# against (mcp-server-time, mcp-server-fetch, the same versions as bundles/*/manifest.json); for
# the demo alone (GERMLINE_SETUP_ONLY=demo) the SDK only, or whatever venv is there.
# Idempotent: a stamp records the requirement set.
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
venv="${GERMLINE_AGENT_VENV:-/var/tmp/germline-venv-agent}"
py=/usr/bin/python3.11
[ -x "$py" ] || py="$(command -v python3)"
ver() { "$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["version"])' "$1"; }
reqs="mcp mcp-server-time==$(ver "$here/bundles/mcp-server-time/manifest.json") mcp-server-fetch==$(ver "$here/bundles/mcp-server-fetch/manifest.json")"
# The demo's agent needs the SDK only (the unprotected servers are for the tests): any venv
# this step made will do.
if [ "${GERMLINE_SETUP_ONLY:-}" = demo ]; then
    if compgen -G "$venv/.germline-agent-*" >/dev/null; then
        echo "agent venv: present ($venv)"
        exit 0
    fi
    reqs="mcp"
fi
stamp="$venv/.germline-agent-$(echo "$reqs" | sha256sum | cut -c1-12)"
if [ -e "$stamp" ]; then
    echo "agent venv: up to date ($venv)"
    exit 0
fi
rm -rf "$venv"
"$py" -m venv "$venv"
# shellcheck disable=SC2086
"$venv/bin/pip" install -q --disable-pip-version-check $reqs
touch "$stamp"
echo "agent venv: $venv ($reqs)"
