# A release whose pool copies stay warming until the test lets them go: in a copy (hostname
# "copy"), tools/list, which the warming session asks for, waits for /run/items/go (the test
# writes it through /proc/PID/root). The germline's own warming (another hostname) and calls
# are not held.
import os
import socket
import time

import testlib
from mcp.server.mcpserver import MCPServer

_list_tools = MCPServer.list_tools


async def list_tools(self):
    if socket.gethostname() == "copy":
        while not os.path.exists("/run/items/go"):
            time.sleep(0.005)
    return await _list_tools(self)


MCPServer.list_tools = list_tools


def main():
    testlib.run()
