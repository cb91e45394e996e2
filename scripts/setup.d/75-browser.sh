#!/usr/bin/env bash
# tags: test
# Issue 31's tests:
#  - Debian's headless Chromium: the status page test (shim/germline/tests/status_page.rs)
#    renders `germline serve`'s /status in it and reads the DOM over DevTools;
#  - systemd-socket-activate (package systemd): the daemon test starts `germline daemon` as
#    systemd's socket activation would (LISTEN_FDS);
#  - useradd and setpriv: the daemon test runs the client side as unprivileged users.
# Idempotent: installs only what is missing.
set -euo pipefail
need=()
[ -x /usr/bin/chromium ] || need+=(chromium)
command -v systemd-socket-activate >/dev/null || need+=(systemd)
command -v useradd >/dev/null || need+=(passwd)
command -v setpriv >/dev/null || need+=(util-linux)
if [ ${#need[@]} -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi
