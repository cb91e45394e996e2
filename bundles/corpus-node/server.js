#!/usr/bin/env node
// The documents server (bundles/corpus/src/corpus_docs/server.py) in Node with the official
// TypeScript SDK: summarise a document, OCR an invoice at the OCR service (with local
// annotations from a reference file: the paper's Fig. 2c call), post to the public blog.
// Declared destinations (manifest): summarize -> none; ocr_pdf, ocr_annotate -> ocr.example;
// post_blog -> blog.example. The same tools, arguments and texts as the Python server, so the
// matrix's scripted session (tests/security/sessions.py, "docs") drives either.
"use strict";

const { Server } = require("@modelcontextprotocol/sdk/server/index.js");
const { StdioServerTransport } = require("@modelcontextprotocol/sdk/server/stdio.js");
const { CallToolRequestSchema, ListToolsRequestSchema } = require("@modelcontextprotocol/sdk/types.js");
const fs = require("fs");
const corpus = require("./corpus.js");

const str = (description) => ({ type: "string", description });
const TOOLS = [
  { name: "summarize", description: "Summarise a document (PDF, text or markdown) at `path`.",
    inputSchema: { type: "object", properties: { path: str("the document") }, required: ["path"] } },
  { name: "ocr_pdf", description: "OCR a scanned PDF at the OCR service and return its text.",
    inputSchema: { type: "object", properties: { document: str("the PDF") }, required: ["document"] } },
  { name: "ocr_annotate",
    description: "OCR `document` at the OCR service and annotate each line that names an entry of the local `reference` file (a CSV whose first column is a name).",
    inputSchema: { type: "object", properties: { document: str("the PDF"), reference: str("the CSV") },
      required: ["document", "reference"] } },
  // Not in the Python server: a directory argument, for the tests of directory items in
  // spawned copies (shim/germline/tests/servers_node_items.rs); the matrix's session never calls it.
  { name: "summarize_folder", description: "Summarise each text or markdown file of the folder at `path`.",
    inputSchema: { type: "object", properties: { path: str("the folder") }, required: ["path"] } },
  { name: "post_blog", description: "Publish a post on the public blog.",
    inputSchema: { type: "object", properties: { title: str("title"), text: str("body") }, required: ["title", "text"] } },
];

function textOf(path) {
  return path.endsWith(".pdf") ? corpus.extractText(corpus.readBytes(path)) : corpus.readText(path);
}

async function ocr(path) {
  const data = corpus.readBytes(path);
  const text = corpus.extractText(data);
  let status;
  try {
    const reply = await corpus.postJson("ocr.example", "/v1/ocr",
      { document: data.toString("base64"), name: path.split("/").pop() });
    status = `ocr: ${reply.status || "ok"}`;
  } catch (err) {
    if (!(err instanceof corpus.Unavailable)) throw err;
    status = "ocr: unavailable";
  }
  return [text, status];
}

const handlers = {
  summarize: async ({ path }) => corpus.summarize(textOf(path)),
  ocr_pdf: async ({ document }) => {
    const [text, status] = await ocr(document);
    return `${status}\n${text}`;
  },
  ocr_annotate: async ({ document, reference }) => {
    // The reference is read first, as Fig. 2c's tool does: both items are in hand when the
    // OCR request goes out, so a Trojan can mix them into it (within-call mixing).
    const ref = corpus.readText(reference);
    const [text, status] = await ocr(document);
    const names = new Map();
    for (const row of corpus.lines(ref).slice(1)) {
      const cols = row.split(",").map((c) => c.trim());
      if (cols.length && cols[0]) names.set(cols[0], cols.slice(1).join(", "));
    }
    const out = corpus.lines(text).map((line) => {
      const notes = [...names].filter(([n]) => line.includes(n)).map(([n, v]) => `${n}: ${v}`);
      return line + (notes.length ? `   [${notes.join("; ")}]` : "");
    });
    return `${status}\n` + out.join("\n");
  },
  summarize_folder: async ({ path }) => {
    let names;
    try {
      names = fs.readdirSync(path, { withFileTypes: true }).filter((e) => e.isFile()).map((e) => e.name).sort();
    } catch (err) {
      throw new corpus.ToolError(`cannot list ${path}: ${err.code}`);
    }
    return names.map((n) => `${n}: ${corpus.summarize(corpus.readText(`${path}/${n}`))}`).join("\n");
  },
  post_blog: async ({ title, text }) => {
    try {
      const reply = await corpus.postJson("blog.example", "/api/posts", { title, body: text });
      return `posted: ${reply.id || "ok"}`;
    } catch (err) {
      if (err instanceof corpus.Unavailable) throw new corpus.ToolError(`blog unavailable: ${err.message}`);
      throw err;
    }
  },
};

const PATHS = { summarize: ["path"], summarize_folder: ["path"], ocr_pdf: ["document"], ocr_annotate: ["document", "reference"], post_blog: [] };

const server = new Server({ name: "corpus-docs", version: corpus.VERSION }, { capabilities: { tools: {} } });
server.setRequestHandler(ListToolsRequestSchema, async () => ({ tools: TOOLS }));
server.setRequestHandler(CallToolRequestSchema, async (req) => {
  const tool = req.params.name;
  const args = req.params.arguments || {};
  const handler = handlers[tool];
  if (!handler) return { isError: true, content: [{ type: "text", text: `unknown tool ${tool}` }] };
  corpus.HOOKS.callStart(tool, PATHS[tool].map((k) => args[k]).filter(Boolean));
  try {
    const text = corpus.HOOKS.result(await handler(args));
    return { content: [{ type: "text", text }] };
  } catch (err) {
    if (err instanceof corpus.ToolError) return { isError: true, content: [{ type: "text", text: err.message }] };
    throw err;
  } finally {
    corpus.HOOKS.callEnd(tool);
  }
});

server.connect(new StdioServerTransport());
