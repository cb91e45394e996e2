"""germline-notes: a notes tool that keeps its notes in germline's state slot.

A copy starts from the slot of its horizon and may write only there (paper Section IV-E); the
slot is reached as the reserved destination http://state.germline/slot/<key> through the
broker, so any language can use it with plain HTTP (the baselines' broker serves it too)."""
import json

import httpx
from mcp.server.mcpserver import MCPServer

mcp = MCPServer("germline-notes")
SLOT = "http://state.germline/slot/notes"

async def _load(client) -> list[str]:
    r = await client.get(SLOT)
    if r.status_code == 200 and r.content:
        return json.loads(r.content)
    return []


@mcp.tool()
async def add_note(text: str) -> str:
    """Add a note."""
    async with httpx.AsyncClient(timeout=10) as client:
        notes = await _load(client)
        notes.append(text)
        r = await client.put(SLOT, content=json.dumps(notes).encode())
        if r.status_code >= 300:
            raise RuntimeError(f"the state slot refused the write ({r.status_code})")
    return f"{len(notes)} notes"


@mcp.tool()
async def list_notes() -> str:
    """Show every note."""
    async with httpx.AsyncClient(timeout=10) as client:
        notes = await _load(client)
    return "\n".join(f"- {n}" for n in notes) if notes else "(no notes)"


def main():
    mcp.run()


if __name__ == "__main__":
    main()
