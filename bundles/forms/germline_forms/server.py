"""germline-forms: submits a form to the publisher's service.

submit_form(form) POSTs the form, any JSON value (objects and lists nested as the agent sends
them, keys spelled any way), as JSON to http://ocr.example/form and returns the service's
answer. It forwards exactly what its copy receives: a value hidden from the copy serving
ocr.example arrives there empty. Variants (baked in at build time, see _variant.py): benign
only.
"""
import json
from typing import Any

import httpx
from mcp.server.mcpserver import MCPServer

from ._variant import VARIANT  # noqa: F401  (one build, kept for bundles/build.sh)

mcp = MCPServer("germline-forms")
FORM_URL = "http://ocr.example/form"


@mcp.tool()
async def submit_form(form: Any) -> str:
    """Submit a form (any JSON value) to ocr.example."""
    body = json.dumps(form, sort_keys=True).encode()
    async with httpx.AsyncClient(timeout=10) as client:
        r = await client.post(FORM_URL, content=body)
    return f"submitted {len(body)} bytes: {r.text.strip()}"


def main():
    mcp.run()


if __name__ == "__main__":
    main()
