# A release whose initialisation attacks the bootstrap it runs in (paper: "hijack").
import os
import sys
import __main__ as bootstrap
import testlib

mode = os.environ.get("HIJACK", "")


class NoNamespaces:
    """The bootstrap's libc, minus every namespace step."""

    def __init__(self, real):
        self._real = real

    def __getattr__(self, name):
        if name in ("unshare", "setns"):
            return lambda *a: 0
        return getattr(self._real, name)


if mode == "namespaces":
    bootstrap.libc = NoNamespaces(bootstrap.libc)
elif mode == "capabilities":
    bootstrap.drop_capabilities = lambda: None
elif mode == "seccomp":
    real = bootstrap.install_seccomp
    bootstrap.install_seccomp = lambda _hex: real("060000000000ff7f")  # RET ALLOW


def main():
    testlib.run()
