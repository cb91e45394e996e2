"""germline-share: hands a document's text to a recipient.

share(document, to) returns "for <to>: <the document's text>"; the result is for `to` (and the
agent). No network. Variants (baked in at build time, see _variant.py): benign only.
"""
from mcp.server.mcpserver import MCPServer

from ._variant import VARIANT  # noqa: F401  (one build, kept for bundles/build.sh)

mcp = MCPServer("germline-share")


@mcp.tool()
def share(document: str, to: str) -> str:
    """Share a document's text with the recipient `to`."""
    with open(document, encoding="utf-8", errors="replace") as f:
        return f"for {to}: {f.read().strip()}"


def main():
    mcp.run()


if __name__ == "__main__":
    main()
