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
elif mode == "seccomp_sockets":
    # The copy layer the shim sends, minus its socket family allowlist (the test hands over
    # that program: the bytes are deterministic, so an attacker knows them too).
    real = bootstrap.install_seccomp
    bootstrap.install_seccomp = lambda _hex: real(os.environ["HIJACK_FILTER"])
elif mode == "reaper_socket":
    # The reaper keeps a descriptor of the copy socket (the tool's death would then never
    # close the channel).
    real_main = bootstrap.copy_main

    def copy_main(sock_fd, cmd):
        copy_main.kept = os.dup(sock_fd)
        real_main(sock_fd, cmd)

    def reaper(tool):
        os.closerange(3, copy_main.kept)
        os.closerange(copy_main.kept + 1, 1 << 20)
        os.waitpid(tool, 0)
        os._exit(0)

    bootstrap.copy_main, bootstrap.reaper = copy_main, reaper
elif mode == "reaper_extra":
    # A third process in the copy, forked by the reaper before the tool says ready.
    real_reaper = bootstrap.reaper

    def reaper(tool):
        if os.fork() == 0:
            os.closerange(3, 1 << 20)
            import time
            time.sleep(3600)
        real_reaper(tool)

    bootstrap.reaper = reaper
elif mode == "fork_twice":
    # The germline answers each fork command with two children: the copy and a process of
    # its own, which would hold the germline's memory outside every copy's limits.
    germline_pid = os.getpid()
    real_fork = os.fork

    def fork():
        if os.getpid() == germline_pid:
            if real_fork() == 0:
                os.closerange(3, 1 << 20)
                import time
                time.sleep(3600)
                os._exit(0)
        return real_fork()

    os.fork = fork


def main():
    testlib.run()
