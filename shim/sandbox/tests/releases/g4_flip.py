# G4, read right after each refreeze: SIGCHLD is ignored whenever the shim could look before
# a fork, and caught from the moment the germline forks a copy (its os.fork is wrapped), so a
# copy that dies during the call leaves its exit status to the germline's handler.
import os
import signal
import testlib

STATUSES = []
_fork = os.fork


def on_child(_sig, _frame):
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        STATUSES.append(os.waitstatus_to_exitcode(status))


def fork_and_catch():
    pid = _fork()
    if pid != 0:
        signal.signal(signal.SIGCHLD, on_child)
    return pid


os.fork = fork_and_catch
testlib.INIT["stash"] = lambda text: os._exit(ord(text[0]) if text else 0)
testlib.INIT["peek"] = lambda: ",".join(str(s) for s in STATUSES)


def main():
    testlib.run()
