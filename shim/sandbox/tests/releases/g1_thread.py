# G1: the initialisation starts a thread that never ends.
import threading
import time
import testlib

threading.Thread(target=lambda: time.sleep(3600), daemon=True).start()


def main():
    testlib.run()
