#!/usr/bin/env bash
# tags: demo test
# Release component (shim/release): what its interop tests and example bundles need.
#  - Node.js + npm and the pinned npm packages @sigstore/verify, @sigstore/sign (tests/interop/node)
#  - Debian's python3.11 and a venv with python-tuf, PyNaCl, cryptography (tests/interop/python)
#  - skopeo (reads and copies our OCI image layouts) and runc (runs an example bundle) for the tests
#  - the example releases bundles/out/{mcp-server-time,mcp-server-fetch} (bundles/build.sh, from PyPI
#    through `germline release pack --from pypi:`, as root), and the germline-* examples
# With GERMLINE_SETUP_ONLY=demo (scripts/setup.sh --only demo): only the venv and the two
# releases the demo runs (germline-office and its Trojan update germline-office-pool).
# Idempotent: each part is skipped when its inputs have not changed.
set -euo pipefail
root="${GERMLINE_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}"
demo=""
[ "${GERMLINE_SETUP_ONLY:-}" = demo ] && demo=1
need=()
if [ -z "$demo" ]; then
    command -v node >/dev/null || need+=(nodejs)
    command -v npm >/dev/null || need+=(npm)
    command -v skopeo >/dev/null || need+=(skopeo)
    command -v runc >/dev/null || need+=(runc)
    # bundles/build.sh packs the PyPI examples with `germline release pack --from pypi:`, whose
    # pip is the host python3.11's.
    /usr/bin/python3.11 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
fi
[ -x /usr/bin/python3.11 ] || need+=(python3.11)
/usr/bin/python3 -c 'import ensurepip' 2>/dev/null || need+=(python3-venv)
[ -f /etc/ssl/certs/ca-certificates.crt ] || need+=(ca-certificates)
[ -e /usr/share/zoneinfo/UTC ] || need+=(tzdata)
command -v chroot >/dev/null || need+=(coreutils)
if [ ${#need[@]} -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi

node_dir="$root/tests/interop/node"
if [ -z "$demo" ] && { [ ! -f "$node_dir/node_modules/.package-lock.json" ] || ! cmp -s "$node_dir/package-lock.json" "$node_dir/node_modules/.germline-lock"; }; then
    (cd "$node_dir" && npm ci --no-audit --no-fund --loglevel=error)
    cp "$node_dir/package-lock.json" "$node_dir/node_modules/.germline-lock"
fi

venv="${GERMLINE_RELEASE_VENV:-/var/tmp/germline-venv-release}"
req="$root/tests/interop/python/requirements.txt"
if [ -n "$demo" ] && [ -x "$venv/bin/pip" ]; then
    :  # the demo needs only the venv's pip (bundles/build.sh installs the releases with it)
elif [ -n "$demo" ]; then
    /usr/bin/python3 -m venv "$venv"
elif ! cmp -s "$req" "$venv/.germline-requirements" 2>/dev/null; then
    rm -rf "$venv"
    /usr/bin/python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check -r "$req"
    cp "$req" "$venv/.germline-requirements"
fi

if [ -n "$demo" ]; then
    bash "$root/bundles/build.sh" germline-office germline-office-pool
else
    bash "$root/bundles/build.sh"
fi
