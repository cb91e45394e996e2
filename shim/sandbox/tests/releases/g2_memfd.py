# G2: the initialisation holds a memfd sealed against writes, so judged by its open mode or
# its seals it would look read-only; G2 judges it by where it lives (not the rootfs).
import fcntl
import os
import testlib

fd = os.memfd_create("stash", os.MFD_ALLOW_SEALING)
os.write(fd, b"shared")
fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SHRINK)


def main():
    testlib.run()
