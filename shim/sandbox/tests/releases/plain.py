# A well-behaved release built on MCPServer.
import testlib


def main():
    testlib.run()
