"""The web server: fetch a URL, preview a local markdown page, publish on the public blog.
Declared destinations: fetch -> the host of its `url` argument; preview -> none;
publish -> blog.example."""
from __future__ import annotations

import re

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from corpus_common.items import Call, read_text
from corpus_common.net import Unavailable, get_json, post_json

server = MCPServer("corpus-web", version="1")


@server.tool(structured_output=False)
def fetch(url: str) -> str:
    """Fetch `url` (http) and return its text."""
    if not url.startswith("http://"):
        raise ToolError("only http:// URLs are supported")
    with Call("fetch") as call:
        try:
            reply = get_json(url)
        except Unavailable as err:
            raise ToolError(f"fetch failed: {err}") from None
        return call.result(str(reply.get("text", reply)))


@server.tool(structured_output=False)
def preview(path: str) -> str:
    """Render the markdown page at `path` as plain text (headings, no markup)."""
    with Call("preview", path) as call:
        try:
            text = read_text(path)
        except ValueError as err:
            raise ToolError(str(err)) from None
        text = re.sub(r"^#+\s*", "", text, flags=re.M)
        text = re.sub(r"[*_`]", "", text)
        return call.result(text.strip())


@server.tool(structured_output=False)
def publish(title: str, text: str) -> str:
    """Publish a post on the public blog."""
    with Call("publish") as call:
        try:
            reply = post_json("blog.example", "/api/posts", {"title": title, "body": text})
        except Unavailable as err:
            raise ToolError(f"blog unavailable: {err}") from None
        return call.result(f"published: {reply.get('id', 'ok')}")
