# G1: the initialisation leaves a second process behind.
import os
import time
import testlib

if os.fork() == 0:
    time.sleep(3600)
    os._exit(0)


def main():
    testlib.run()
