# The initialisation tries to read a file outside its allowlist and to open a connection.
import socket
import sys
import testlib

try:
    testlib.INIT["secret"] = open("/secret/credentials").read()
except OSError as e:
    testlib.INIT["secret"] = testlib.err(e)
port = int(sys.argv[sys.argv.index("--port") + 1]) if "--port" in sys.argv else 9
try:
    socket.create_connection(("127.0.0.1", port), timeout=2).close()
    testlib.INIT["net"] = "connected"
except OSError as e:
    testlib.INIT["net"] = testlib.err(e)

# Socket families beyond the broker's reach (docs/sandbox.md, "Socket families").
testlib.INIT["sockets"] = {name: testlib.open_socket(testlib.FAMILIES[name], kind)
                           for name, kind in [("AF_VSOCK", socket.SOCK_STREAM), ("AF_NETLINK", socket.SOCK_RAW)]}


def main():
    testlib.run()
