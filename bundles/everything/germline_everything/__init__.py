"""The conformance suite's server scenarios as one MCP server (server.py)."""
