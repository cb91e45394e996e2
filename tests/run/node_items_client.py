"""One session of the official MCP client SDK (`mcp` from PyPI) with the Node documents server
(bundles/corpus-node, issue 28), whose tools read the files their arguments name: a markdown
file, a PDF, two files in one call (ocr_annotate), a folder (a directory item), then a file
that does not exist. Prints one
JSON object with the texts that came back and the labels germline returned, for the comparison
of `germline run --mode germline` (spawned copies, items as files) with the unprotected server:

    python3 node_items_client.py HOME -- COMMAND [ARGS...]
"""
import json
import sys

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def texts(result):
    return [getattr(c, "text", None) for c in result.content]


def label(result):
    meta = result.meta or {}
    return ((meta.get("germline") or {}).get("label"))


async def main(argv):
    home = argv[1]
    cmd = argv[argv.index("--") + 1:]
    params = StdioServerParameters(command=cmd[0], args=cmd[1:], env={"HOME": home})
    out = {"texts": {}, "labels": {}, "errors": {}}
    calls = {
        "md": ("summarize", {"path": f"{home}/hr/review.md"}),
        "pdf": ("summarize", {"path": f"{home}/board/minutes.pdf"}),
        "both": ("ocr_annotate", {"document": f"{home}/board/minutes.pdf", "reference": f"{home}/hr/staff.csv"}),
        "folder": ("summarize_folder", {"path": f"{home}/board/notes"}),
        "missing": ("summarize", {"path": f"{home}/hr/absent.md"}),
    }
    async with stdio_client(params) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize()
            for key, (tool, args) in calls.items():
                res = await s.call_tool(tool, args)
                out["texts"][key] = texts(res)
                out["labels"][key] = label(res)
                out["errors"][key] = bool(res.is_error)
    print(json.dumps(out))


anyio.run(main, sys.argv)
