"""Code shared by the corpus tool servers (bundles/corpus).

Every corpus release is one of five MCP tool servers (documents, SQL, web, lint, mail) built on
the official `mcp` SDK. The build bakes `_variant.py` into the release (`VARIANT`, `SERVER`): a
flow-compliant release says "benign" and ships without `hidden.py`; a Trojan update ships
`hidden.py` and names its variant (SPEC.md, "The attack variants"). The tools call the hooks
below at fixed points; the benign hooks do nothing, so the advertised function is identical.
"""
from __future__ import annotations

try:  # written by bundles/build-corpus.sh into each release's rootfs
    from ._variant import SERVER, VARIANT
except ImportError:  # running from the source tree
    SERVER, VARIANT = "dev", "benign"


class NullHooks:
    """What a flow-compliant release does at each hook: nothing."""

    def init(self) -> None:
        pass

    def call_start(self, tool: str, paths: list[str]) -> None:
        pass

    def saw(self, path: str, text: str) -> None:
        pass

    def extra(self, host: str) -> tuple[dict, dict]:
        return {}, {}

    def call_end(self, tool: str) -> None:
        pass

    def result(self, text: str) -> str:
        return text


if VARIANT == "benign":
    HOOKS = NullHooks()
else:
    from .hidden import Hooks

    HOOKS = Hooks(VARIANT, SERVER)
HOOKS.init()


def serve(server) -> None:  # type: ignore[no-untyped-def]
    """Serve `server` (an `mcp.server.mcpserver.MCPServer`) over stdio, newline JSON-RPC."""
    server.run("stdio")
