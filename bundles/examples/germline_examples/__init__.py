"""Example MCP servers on the official `mcp` SDK (MCPServer, FastMCP before 2.x) for germline's demo and tests.

`bundles/build.sh` writes `_variant.py` when it packs a release: `benign` is the flow-compliant
build; the other variants carry hidden code (docs/run.md lists them)."""
