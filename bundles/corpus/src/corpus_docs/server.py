"""The documents server: summarise a document, OCR an invoice at the OCR service (with local
annotations from a reference file: the paper's Fig. 2c call), post to the public blog, and work
on a folder (a directory argument, issue 27): find a folder's documents related to one, post a
digest of a folder.

Declared destinations (manifest): summarize, find_related -> none; ocr_pdf, ocr_annotate ->
ocr.example; post_blog, publish_folder -> blog.example."""
from __future__ import annotations

import base64

import fastpdfx
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from corpus_common.items import Call, folder_files, read_bytes, read_text, summarize as summary_of
from corpus_common.net import Unavailable, post_json

server = MCPServer("corpus-docs", version="1")


def _text_of(path: str) -> str:
    if path.endswith(".pdf"):
        return fastpdfx.extract_text(read_bytes(path))
    return read_text(path)


def _ocr(path: str) -> tuple[str, str]:
    data = read_bytes(path)
    text = fastpdfx.extract_text(data)
    try:
        reply = post_json("ocr.example", "/v1/ocr", {"document": base64.b64encode(data).decode(), "name": path.rsplit("/", 1)[-1]})
        status = f"ocr: {reply.get('status', 'ok')}"
    except Unavailable:
        status = "ocr: unavailable"
    return text, status


@server.tool(structured_output=False)
def summarize(path: str) -> str:
    """Summarise a document (PDF, text or markdown) at `path`."""
    with Call("summarize", path) as call:
        try:
            return call.result(summary_of(_text_of(path)))
        except ValueError as err:
            raise ToolError(str(err)) from None


@server.tool(structured_output=False)
def ocr_pdf(document: str) -> str:
    """OCR a scanned PDF at the OCR service and return its text."""
    with Call("ocr_pdf", document) as call:
        try:
            text, status = _ocr(document)
        except ValueError as err:
            raise ToolError(str(err)) from None
        return call.result(f"{status}\n{text}")


@server.tool(structured_output=False)
def ocr_annotate(document: str, reference: str) -> str:
    """OCR `document` at the OCR service and annotate each line that names an entry of the
    local `reference` file (a CSV whose first column is a name)."""
    with Call("ocr_annotate", document, reference) as call:
        try:
            # The reference is read first, as Fig. 2c's tool does: both items are in hand when
            # the OCR request goes out, so a Trojan can mix them into it (within-call mixing).
            ref = read_text(reference)
            text, status = _ocr(document)
        except ValueError as err:
            raise ToolError(str(err)) from None
        names = {}
        for row in ref.splitlines()[1:]:
            cols = [c.strip() for c in row.split(",")]
            if cols and cols[0]:
                names[cols[0]] = ", ".join(cols[1:])
        out = []
        for line in text.splitlines():
            notes = [f"{n}: {v}" for n, v in names.items() if n in line]
            out.append(line + (f"   [{'; '.join(notes)}]" if notes else ""))
        return call.result(f"{status}\n" + "\n".join(out))


@server.tool(structured_output=False)
def post_blog(title: str, text: str) -> str:
    """Publish a post on the public blog."""
    with Call("post_blog") as call:
        try:
            reply = post_json("blog.example", "/api/posts", {"title": title, "body": text})
        except Unavailable as err:
            raise ToolError(f"blog unavailable: {err}") from None
        return call.result(f"posted: {reply.get('id', 'ok')}")


def _title(summary: str) -> str:
    return summary.split(":", 1)[0]


@server.tool(structured_output=False)
def find_related(document: str, folder: str) -> str:
    """Summarise `document` and list the documents of `folder` whose titles share a word with
    its title. Reads only."""
    with Call("find_related", document, folder) as call:
        try:
            mine = summary_of(_text_of(document))
            words = {w.lower() for w in _title(mine).split() if len(w) > 3}
            related = [p.rsplit("/", 1)[-1] for p in folder_files(folder)
                       if words & {w.lower() for w in _title(summary_of(_text_of(p))).split()}]
        except ValueError as err:
            raise ToolError(str(err)) from None
        return call.result(f"{mine}\nrelated in {folder}: {', '.join(related) or 'none'}")


@server.tool(structured_output=False)
def publish_folder(folder: str, title: str) -> str:
    """Post a digest of the documents in `folder` (one summary line each) on the public blog."""
    with Call("publish_folder", folder) as call:
        try:
            digest = "\n".join(summary_of(_text_of(p)) for p in folder_files(folder))
            reply = post_json("blog.example", "/api/posts", {"title": title, "body": digest})
        except ValueError as err:
            raise ToolError(str(err)) from None
        except Unavailable as err:
            raise ToolError(f"blog unavailable: {err}") from None
        return call.result(f"posted: {reply.get('id', 'ok')} ({len(digest.splitlines())} documents)")
