# G2: the initialisation holds a read-only descriptor of a file off the rootfs mount.
import os
import testlib

fd = os.open("/dev/zero", os.O_RDONLY)


def main():
    testlib.run()
