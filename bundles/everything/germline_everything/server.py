"""germline-everything: each server scenario of the MCP conformance suite
(@modelcontextprotocol/conformance) as one tool server, written from the scenarios' own
descriptions (`conformance list`, and each scenario's text).

The conformance test (shim/germline/tests/conformance.rs, docs/conformance.md) runs the suite
against it twice on the same calls: unprotected (`python -m germline_everything.server --http
PORT`, the SDK's own Streamable HTTP transport), and as a signed release behind `germline
serve` (stdio, the release's entry point).
"""
import argparse
import asyncio
import base64
import json
import struct
import zlib

from mcp import types
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.prompts.base import UserMessage

mcp = MCPServer("germline-everything", version="1.0.0")


def _png() -> bytes:
    """A 1x1 red pixel PNG, made here (no binary file in the package)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00\xff\x00\x00")
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")


def _wav() -> bytes:
    """A tenth of a second of 8 kHz 8-bit mono silence."""
    samples = b"\x80" * 800
    fmt = struct.pack("<HHIIHH", 1, 1, 8000, 8000, 1, 8)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(samples)) + samples
    return b"RIFF" + struct.pack("<I", len(body)) + body


PNG = base64.b64encode(_png()).decode()
WAV = base64.b64encode(_wav()).decode()


def _image() -> types.ImageContent:
    return types.ImageContent(type="image", data=PNG, mime_type="image/png")


@mcp.tool(description="Returns a simple text response")
def test_simple_text() -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(type="text", text="This is a simple text response for testing.")]
    )


@mcp.tool(description="Returns a 1x1 PNG image")
def test_image_content() -> types.CallToolResult:
    return types.CallToolResult(content=[_image()])


@mcp.tool(description="Returns a short WAV clip")
def test_audio_content() -> types.CallToolResult:
    return types.CallToolResult(content=[types.AudioContent(type="audio", data=WAV, mime_type="audio/wav")])


@mcp.tool(description="Returns an embedded text resource")
def test_embedded_resource() -> types.CallToolResult:
    res = types.TextResourceContents(
        uri="test://embedded-resource", mime_type="text/plain", text="This is an embedded resource content."
    )
    return types.CallToolResult(content=[types.EmbeddedResource(type="resource", resource=res)])


@mcp.tool(description="Returns text, an image and an embedded resource")
def test_multiple_content_types() -> types.CallToolResult:
    res = types.TextResourceContents(
        uri="test://mixed-content-resource",
        mime_type="application/json",
        text=json.dumps({"test": "data", "value": 123}, separators=(",", ":")),
    )
    return types.CallToolResult(
        content=[
            types.TextContent(type="text", text="Multiple content types test:"),
            _image(),
            types.EmbeddedResource(type="resource", resource=res),
        ]
    )


LEVELS = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]
STATE = {"level": "debug", "subscribed": set()}


async def _log(ctx: Context, level: str, text: str) -> None:
    """A log notification, unless logging/setLevel asked for a higher level."""
    if LEVELS.index(level) >= LEVELS.index(STATE["level"]):
        await ctx.log(level, text)


@mcp.tool(description="Sends three info log messages while it runs")
async def test_tool_with_logging(ctx: Context) -> str:
    await _log(ctx, "info", "Tool execution started")
    await asyncio.sleep(0.05)
    await _log(ctx, "info", "Tool processing data")
    await asyncio.sleep(0.05)
    await _log(ctx, "info", "Tool execution completed")
    return "Tool with logging executed successfully"


@mcp.tool(description="Reports progress 0, 50 and 100 of 100")
async def test_tool_with_progress(ctx: Context) -> str:
    for step in (0, 50, 100):
        await ctx.report_progress(step, 100)
        if step < 100:
            await asyncio.sleep(0.05)
    return "Tool with progress executed successfully"


@mcp.tool(description="Always fails")
def test_error_handling() -> str:
    raise ToolError("This tool intentionally returns an error for testing")


@mcp.tool(description="Asks the client to sample a message")
async def test_sampling(prompt: str, ctx: Context) -> str:
    r = await ctx.session.create_message(
        messages=[types.SamplingMessage(role="user", content=types.TextContent(type="text", text=prompt))],
        max_tokens=100,
        related_request_id=ctx.request_id,
    )
    return f"LLM response: {getattr(r.content, 'text', '')}"


async def _elicit(ctx: Context, message: str, schema: dict) -> types.ElicitResult:
    return await ctx.session.elicit_form(message, schema, related_request_id=ctx.request_id)


@mcp.tool(description="Asks the client for a username and an email")
async def test_elicitation(message: str, ctx: Context) -> str:
    schema = {
        "type": "object",
        "properties": {
            "username": {"type": "string", "description": "User's response"},
            "email": {"type": "string", "description": "User's email address"},
        },
        "required": ["username", "email"],
    }
    r = await _elicit(ctx, message, schema)
    return f"User response: action={r.action}, content={json.dumps(r.content)}"


@mcp.tool(description="Elicitation with a default for each primitive type (SEP-1034)")
async def test_elicitation_sep1034_defaults(ctx: Context) -> str:
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "default": "John Doe"},
            "age": {"type": "integer", "default": 30},
            "score": {"type": "number", "default": 95.5},
            "status": {"type": "string", "enum": ["active", "inactive", "pending"], "default": "active"},
            "verified": {"type": "boolean", "default": True},
        },
    }
    r = await _elicit(ctx, "Please review your details", schema)
    return f"Elicitation completed: action={r.action}, content={json.dumps(r.content)}"


@mcp.tool(description="Elicitation with the five enum forms (SEP-1330)")
async def test_elicitation_sep1330_enums(ctx: Context) -> str:
    schema = {
        "type": "object",
        "properties": {
            "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
            "titledSingle": {
                "type": "string",
                "oneOf": [
                    {"const": "value1", "title": "First Option"},
                    {"const": "value2", "title": "Second Option"},
                    {"const": "value3", "title": "Third Option"},
                ],
            },
            "legacyEnum": {
                "type": "string",
                "enum": ["opt1", "opt2", "opt3"],
                "enumNames": ["Option One", "Option Two", "Option Three"],
            },
            "untitledMulti": {"type": "array", "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
            "titledMulti": {
                "type": "array",
                "items": {
                    "anyOf": [
                        {"const": "value1", "title": "First Choice"},
                        {"const": "value2", "title": "Second Choice"},
                        {"const": "value3", "title": "Third Choice"},
                    ]
                },
            },
        },
    }
    r = await _elicit(ctx, "Please pick some options", schema)
    return f"Elicitation completed: action={r.action}, content={json.dumps(r.content)}"


SCHEMA_2020_12 = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {"type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}
    },
    "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
    "additionalProperties": False,
}


def json_schema_2020_12_tool(name: str = "", address: dict | None = None) -> str:
    return json.dumps({"name": name, "address": address})


mcp.add_tool(json_schema_2020_12_tool, description="Tool with JSON Schema 2020-12 features")
# The listing must carry the schema's own keywords ($schema, $defs, additionalProperties):
# the SDK derives a schema from the signature, which is replaced by the one the scenario gives.
mcp._tool_manager.get_tool("json_schema_2020_12_tool").parameters = SCHEMA_2020_12


@mcp.resource("test://static-text", name="static-text", description="A static text resource", mime_type="text/plain")
def static_text() -> str:
    return "This is the content of the static text resource."


@mcp.resource("test://static-binary", name="static-binary", description="A static PNG", mime_type="image/png")
def static_binary() -> bytes:
    return _png()


@mcp.resource(
    "test://template/{id}/data",
    name="template-data",
    description="Data for an id",
    mime_type="application/json",
)
def template_data(id: str) -> str:
    return json.dumps({"id": id, "templateTest": True, "data": f"Data for ID: {id}"}, separators=(",", ":"))


@mcp.prompt(description="A prompt without arguments")
def test_simple_prompt() -> list[UserMessage]:
    return [UserMessage("This is a simple prompt for testing.")]


@mcp.prompt(description="A prompt with two arguments")
def test_prompt_with_arguments(arg1: str, arg2: str) -> list[UserMessage]:
    return [UserMessage(f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'")]


@mcp.prompt(description="A prompt that embeds a resource")
def test_prompt_with_embedded_resource(resourceUri: str) -> list[UserMessage]:
    res = types.TextResourceContents(uri=resourceUri, mime_type="text/plain", text="Embedded resource content for testing.")
    return [
        UserMessage(types.EmbeddedResource(type="resource", resource=res)),
        UserMessage("Please process the embedded resource above."),
    ]


@mcp.prompt(description="A prompt with an image")
def test_prompt_with_image() -> list[UserMessage]:
    return [UserMessage(_image()), UserMessage("Please analyze the image above.")]


@mcp.completion()
async def complete(ref, argument, context):
    words = ["paris", "park", "party"]
    return types.Completion(values=[w for w in words if w.startswith(argument.value)], total=None, has_more=False)


async def set_level(ctx, params: types.SetLevelRequestParams) -> types.EmptyResult:
    STATE["level"] = params.level
    return types.EmptyResult()


async def subscribe(ctx, params: types.SubscribeRequestParams) -> types.EmptyResult:
    STATE["subscribed"].add(str(params.uri))
    return types.EmptyResult()


async def unsubscribe(ctx, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
    STATE["subscribed"].discard(str(params.uri))
    return types.EmptyResult()


# Registering the handlers is what makes the SDK advertise `logging` and `resources.subscribe`.
mcp._lowlevel_server.add_request_handler("logging/setLevel", types.SetLevelRequestParams, set_level)
mcp._lowlevel_server.add_request_handler("resources/subscribe", types.SubscribeRequestParams, subscribe)
mcp._lowlevel_server.add_request_handler("resources/unsubscribe", types.UnsubscribeRequestParams, unsubscribe)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--http", type=int, help="serve Streamable HTTP on 127.0.0.1:PORT (default: stdio)")
    a = p.parse_args()
    if a.http is None:
        mcp.run()
    else:
        mcp.run("streamable-http", host="127.0.0.1", port=a.http)


if __name__ == "__main__":
    main()
