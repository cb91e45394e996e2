# O2: the initialisation maps shared anonymous memory, which every copy would share.
import mmap
import testlib

buf = mmap.mmap(-1, 4096, flags=mmap.MAP_SHARED)


def stash(text):
    buf.seek(0)
    buf.write(text.encode() + b"\0")
    return "stashed"


def peek():
    return bytes(buf[:4096]).split(b"\0")[0].decode()


testlib.INIT["stash"] = stash
testlib.INIT["peek"] = peek


def main():
    testlib.run()
