# The Python runtime of the releases bundles/build.sh and bundles/build-corpus.sh build: a
# minimal Debian python3.11 rootfs. Expects PY (the host's /usr/bin/python3.11). Both scripts
# include their stamps' hash of this file, so a change here rebuilds their releases.
copy_with_libs() { # copy an ELF file and every shared library it needs into the rootfs
    local rootfs="$1"; shift
    for f in "$@"; do
        ldd "$f" 2>/dev/null | awk '/=> \//{print $3} /^\s*\/lib/{print $1}' | while read -r lib; do
            local real; real="$(readlink -f "$lib")"
            local dest="$rootfs/usr${lib#/usr}"
            [ -e "$dest" ] && continue
            mkdir -p "$(dirname "$dest")"
            cp -L "$real" "$dest"
        done
    done
}

make_runtime() { # a minimal Debian python3.11 runtime
    local rootfs="$1"
    # /dev, /proc, /run and /tmp are the mount points of the germline and its copies (empty, signed).
    mkdir -p "$rootfs"/usr/{bin,lib,lib64} "$rootfs"/etc/ssl/certs "$rootfs"/{dev,proc,run,tmp} "$rootfs"/usr/lib/python3/dist-packages
    ln -s usr/bin "$rootfs/bin"; ln -s usr/lib "$rootfs/lib"; ln -s usr/lib64 "$rootfs/lib64"
    cp -L "$PY" "$rootfs/usr/bin/python3.11"
    ln -s python3.11 "$rootfs/usr/bin/python3"
    tar -C / --exclude='python3.11/test' --exclude='python3.11/idlelib' --exclude='python3.11/tkinter' \
        --exclude='python3.11/ensurepip' --exclude='python3.11/lib2to3' -cf - usr/lib/python3.11 \
        | tar -C "$rootfs" -xf -
    # The standard library's bytecode again, checked-hash (as the packages' below): Debian's
    # .pyc are checked against the source's mtime, which packing (mtime 0) and unpacking
    # change, so every process of the release would compile the standard library again.
    # Forced (-f): tar kept the mtimes here, so compileall would find Debian's up to date.
    "$PY" -m compileall -q -f -j 0 --invalidation-mode checked-hash -s "$rootfs/usr/lib/python3.11" \
        -p /usr/lib/python3.11 "$rootfs/usr/lib/python3.11" >/dev/null
    [ -d /etc/python3.11 ] && cp -rL /etc/python3.11 "$rootfs/etc/python3.11"
    cp -L /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/ca-certificates.crt"
    [ -d /usr/share/zoneinfo ] && mkdir -p "$rootfs/usr/share" && cp -r /usr/share/zoneinfo "$rootfs/usr/share/zoneinfo"
    copy_with_libs "$rootfs" "$PY" /usr/lib/python3.11/lib-dynload/*.so
    # ld.so at its ABI path
    mkdir -p "$rootfs/usr/lib64"
    [ -e "$rootfs/usr/lib64/ld-linux-x86-64.so.2" ] || cp -L /lib64/ld-linux-x86-64.so.2 "$rootfs/usr/lib64/ld-linux-x86-64.so.2"
}
