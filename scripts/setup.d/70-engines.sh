#!/usr/bin/env bash
# tags: test
# Container engines (issue 9): Debian's podman (with conmon, crun, netavark) and containerd
# (with ctr, and its CRI plugin), which the germline-runtime / containerd shim end-to-end tests
# drive for real.
# Idempotent: installs only what is missing.
set -euo pipefail
need=()
command -v podman >/dev/null || need+=(podman)
command -v conmon >/dev/null || need+=(conmon)
command -v runc >/dev/null || need+=(runc)
command -v containerd >/dev/null || need+=(containerd)
command -v ctr >/dev/null || need+=(containerd)
command -v skopeo >/dev/null || need+=(skopeo)
# nft and ip: the pod-network test makes its own network namespaces (veth pair) and puts a
# NetworkPolicy stand-in (an nft rule) in the pod's.
command -v nft >/dev/null || need+=(nftables)
command -v ip >/dev/null || need+=(iproute2)
# protoc: the k8s-cri crate (CRI client of shim/containerd-shim/tests/cri.rs) compiles its
# protos at build time.
command -v protoc >/dev/null || need+=(protobuf-compiler)
if [ ${#need[@]} -gt 0 ]; then
    apt-get update -qq
    # No recommends: buildah, dbus-user-session, fuse-overlayfs are for rootless use.
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${need[@]}" containernetworking-plugins
fi
