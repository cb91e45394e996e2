#!/usr/bin/env bash
# tags: test
# Popular PyPI MCP servers that need host programs in their rootfs (issue 27), for
# shim/germline/tests/servers_git.rs:
#  - Debian's git (/usr/bin/git: mcp-server-git's GitPython runs it; the release carries it)
#  - the releases bundles/out/<name> of bundles/servers/*/ (bundles/build-servers.sh: `germline
#    release pack --from pypi:` with the host's python3.11 -m pip, as root)
# Idempotent: build-servers.sh skips a release built from the same inputs.
set -euo pipefail
root="${GERMLINE_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}"
need=()
[ -x /usr/bin/git ] || need+=(git)
[ -x /usr/bin/python3.11 ] || need+=(python3.11)
/usr/bin/python3.11 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
if [ ${#need[@]} -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi
bash "$root/bundles/build-servers.sh"
