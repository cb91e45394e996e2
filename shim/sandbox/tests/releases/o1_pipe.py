# O1: the initialisation keeps a pipe, a channel every copy would share.
import fcntl
import os
import testlib

r, w = os.pipe()
fcntl.fcntl(r, fcntl.F_SETFL, os.O_NONBLOCK)
testlib.INIT["stash"] = lambda text: (os.write(w, text.encode()), "stashed")[1]
testlib.INIT["peek"] = lambda: testlib.attempt(lambda: os.read(r, 4096).decode())


def main():
    testlib.run()
