#!/usr/bin/env bash
# tags: demo test
# germline-sandbox: a small Python rootfs for the test germlines (issue 4); for the demo
# (GERMLINE_SETUP_ONLY=demo) only the cgroup flag below.
# Builds /var/tmp/germline-sandbox/rootfs-python: Debian's python3 with its stdlib and the shared
# libraries it links, plus the official `mcp` SDK and `mcp-server-time` from PyPI under /app/site.
# Idempotent: a stamp file records what was built; delete the folder to rebuild.
set -euo pipefail

# Moving a task between cgroups waits for an RCU grace period (~10-15 ms here) unless the
# kernel is told to favour dynamic cgroup changes; a copy moves to its own cgroup at every fork.
# The flag is global and only costs a little on fork/exit. cgroup v2 (or the v2 mount of a
# hybrid layout) accepts it; not persistent across reboots.
for m in /sys/fs/cgroup/unified /sys/fs/cgroup; do
    if [ "$(stat -f -c %T "$m" 2>/dev/null)" = cgroup2fs ]; then
        grep -q " $m cgroup2 .*favordynmods" /proc/mounts || mount -o remount,favordynmods "$m" 2>/dev/null \
            || echo "sandbox: could not set favordynmods on $m (copies fork ~10 ms slower)"
        break
    fi
done

# The demo runs the example releases, not the test germlines' rootfs.
[ "${GERMLINE_SETUP_ONLY:-}" = demo ] && exit 0

base=/var/tmp/germline-sandbox
root="$base/rootfs-python"
stamp="$root/.germline-rootfs-v2"
[ -e "$stamp" ] && { echo "sandbox rootfs: up to date ($root)"; exit 0; }

if ! [ -x /usr/bin/python3.11 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3
fi
# Any CPython 3.11 with pip installs the same cp311 wheels (here: the pyenv one, else Debian's).
pip_python="$(command -v python3)"
if ! "$pip_python" -m pip --version >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-pip
    pip_python=/usr/bin/python3
fi

rm -rf "$root.tmp"
mkdir -p "$root.tmp"/{usr/bin,usr/lib,usr/share,etc,app/site,app/releases,proc,dev,tmp,run}
cp -a /usr/bin/python3.11 "$root.tmp/usr/bin/"
ln -s python3.11 "$root.tmp/usr/bin/python3"
# The standard library without its test suite and without Debian's dist-packages.
tar -C / --exclude=usr/lib/python3.11/test --exclude='__pycache__' -cf - usr/lib/python3.11 | tar -C "$root.tmp" -xf -
"$pip_python" -m pip install -q --no-compile --target "$root.tmp/app/site" mcp mcp-server-time
[ -d /usr/share/zoneinfo ] && cp -a /usr/share/zoneinfo "$root.tmp/usr/share/"
# Debian's CA bundle, as a Debian image has it (the shim mounts a copy with the deployment CA
# over it; the rootfs itself is never changed).
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
    mkdir -p "$root.tmp/etc/ssl/certs"
    cp /etc/ssl/certs/ca-certificates.crt "$root.tmp/etc/ssl/certs/"
fi
# Empty directories where items delivered at their own paths are mounted (/home/alice/...).
mkdir -p "$root.tmp"/{home,mnt,srv}
printf 'root:x:0:0:root:/:/bin/false\nnobody:x:65534:65534:nobody:/:/bin/false\n' > "$root.tmp/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' > "$root.tmp/etc/group"
echo UTC > "$root.tmp/etc/timezone"
# Shared libraries of the interpreter and of every extension module, at their own paths.
find "$root.tmp" -name '*.so*' -type f -print0 | xargs -0 -r ldd 2>/dev/null \
    | awk '/=>/ {print $3}' | sort -u > "$base/libs.txt" || true
ldd /usr/bin/python3.11 | awk '/=>/ {print $3} $1 ~ /^\// {print $1}' >> "$base/libs.txt"
sort -u "$base/libs.txt" | while read -r lib; do
    [ -e "$lib" ] || continue
    cp --parents -L "$lib" "$root.tmp/"
done
# /lib64 and /lib are symlinks into /usr on Debian 12; keep the same layout.
for l in lib lib64; do
    if [ -L "/$l" ] && ! [ -e "$root.tmp/$l" ]; then ln -s "$(readlink "/$l")" "$root.tmp/$l"; fi
done
# Pre-compile bytecode so the read-only germline never needs to write .pyc files.
/usr/bin/python3.11 -m compileall -q -j 2 "$root.tmp/usr/lib/python3.11" "$root.tmp/app/site" >/dev/null || true
chmod -R a+rX "$root.tmp"
touch "$root.tmp/.germline-rootfs-v2"
rm -rf "$root"
mv "$root.tmp" "$root"
echo "sandbox rootfs: built $root ($(du -sh "$root" | cut -f1))"
