"""germline-share: hands a document's text to a recipient.

share(document, to) asks the agent (elicitation/create) for a note to add, then returns
"for <to>: <the document's text>" and the note; the result is for `to` (and the agent). No
network. A refused elicitation adds nothing. Variants (baked in at build time, see
_variant.py): benign only.
"""
from pydantic import BaseModel

from mcp.server.mcpserver import Context, MCPServer

from ._variant import VARIANT  # noqa: F401  (one build, kept for bundles/build.sh)

mcp = MCPServer("germline-share")


class Note(BaseModel):
    note: str


@mcp.tool()
async def share(document: str, to: str, ctx: Context) -> str:
    """Share a document's text with the recipient `to`, with a note the agent may add."""
    with open(document, encoding="utf-8", errors="replace") as f:
        text = f.read().strip()
    note = ""
    try:
        r = await ctx.elicit(message=f"a note for {to}?", schema=Note)
        if r.action == "accept" and r.data is not None:
            note = r.data.note
    except Exception:  # refused by germline, or the agent offers no elicitation
        note = ""
    return f"for {to}: {text}" + (f"\nnote: {note}" if note else "")


def main():
    mcp.run()


if __name__ == "__main__":
    main()
