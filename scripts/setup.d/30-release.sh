#!/usr/bin/env bash
# Release component (shim/release): what its interop tests and example bundles need.
#  - Node.js + npm and the pinned npm packages @sigstore/verify, @sigstore/sign (tests/interop/node)
#  - Debian's python3.11 and a venv with python-tuf, PyNaCl, cryptography (tests/interop/python)
#  - skopeo (reads and copies our OCI image layouts) and runc (runs an example bundle) for the tests
#  - the example releases bundles/out/{mcp-server-time,mcp-server-fetch} (bundles/build.sh, from PyPI)
# Idempotent: each part is skipped when its inputs have not changed.
set -euo pipefail
root="${GERMLINE_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}"
need=()
command -v node >/dev/null || need+=(nodejs)
command -v npm >/dev/null || need+=(npm)
[ -x /usr/bin/python3.11 ] || need+=(python3.11)
/usr/bin/python3 -c 'import ensurepip' 2>/dev/null || need+=(python3-venv)
[ -f /etc/ssl/certs/ca-certificates.crt ] || need+=(ca-certificates)
[ -e /usr/share/zoneinfo/UTC ] || need+=(tzdata)
command -v chroot >/dev/null || need+=(coreutils)
command -v skopeo >/dev/null || need+=(skopeo)
command -v runc >/dev/null || need+=(runc)
if [ ${#need[@]} -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi

node_dir="$root/tests/interop/node"
if [ ! -f "$node_dir/node_modules/.package-lock.json" ] || ! cmp -s "$node_dir/package-lock.json" "$node_dir/node_modules/.germline-lock"; then
    (cd "$node_dir" && npm ci --no-audit --no-fund --loglevel=error)
    cp "$node_dir/package-lock.json" "$node_dir/node_modules/.germline-lock"
fi

venv="${GERMLINE_RELEASE_VENV:-/var/tmp/germline-venv-release}"
req="$root/tests/interop/python/requirements.txt"
if ! cmp -s "$req" "$venv/.germline-requirements" 2>/dev/null; then
    rm -rf "$venv"
    /usr/bin/python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check -r "$req"
    cp "$req" "$venv/.germline-requirements"
fi

bash "$root/bundles/build.sh"
