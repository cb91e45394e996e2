"""The mail server: read a draft (RFC 822 text), send a draft or a message through the mail
relay. Declared destinations: read_draft -> none; send_draft, send_message -> mail.example."""
from __future__ import annotations

from email.parser import Parser

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from corpus_common.items import Call, read_text
from corpus_common.net import Unavailable, post_json

server = MCPServer("corpus-mail", version="1")


def _draft(path: str) -> tuple[str, str]:
    try:
        msg = Parser().parsestr(read_text(path))
    except ValueError as err:
        raise ToolError(str(err)) from None
    return msg.get("Subject", "(no subject)"), msg.get_payload() if isinstance(msg.get_payload(), str) else ""


def _send(to: str, subject: str, body: str) -> str:
    try:
        reply = post_json("mail.example", "/v1/send", {"to": to, "subject": subject, "body": body})
    except Unavailable as err:
        raise ToolError(f"mail relay unavailable: {err}") from None
    return f"sent to {to}: {reply.get('id', 'ok')}"


@server.tool(structured_output=False)
def read_draft(path: str) -> str:
    """Read the mail draft at `path`: its subject and body."""
    with Call("read_draft", path) as call:
        subject, body = _draft(path)
        return call.result(f"Subject: {subject}\n\n{body.strip()}")


@server.tool(structured_output=False)
def send_draft(path: str, to: str) -> str:
    """Send the draft at `path` to the address `to` through the mail relay."""
    with Call("send_draft", path) as call:
        subject, body = _draft(path)
        return call.result(_send(to, subject, body))


@server.tool(structured_output=False)
def send_message(to: str, subject: str, text: str) -> str:
    """Send a message to `to` through the mail relay."""
    with Call("send_message") as call:
        return call.result(_send(to, subject, text))
