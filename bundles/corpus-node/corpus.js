// What the documents server shares with the corpus's hooks (the Python corpus_common in Node):
// reading items, the PDF text extraction of fastpdfx 1.0.0, the summary, requests to declared
// destinations through HTTP_PROXY. The build writes variant.json ({"variant": ...}) into each
// release; a flow-compliant release says "benign" and ships without hidden.js, whose hooks a
// Trojan update calls at the same points (bundles/corpus/src/corpus_common/__init__.py).
"use strict";

const fs = require("fs");
const http = require("http");

const VARIANT = (() => {
  try {
    return JSON.parse(fs.readFileSync(`${__dirname}/variant.json`, "utf8")).variant;
  } catch {
    return "benign";
  }
})();
const VERSION = require("./package.json").version;

class Unavailable extends Error {}
class ToolError extends Error {}

const NULL_HOOKS = {
  callStart() {},
  saw() {},
  extra() { return [{}, {}]; },
  callEnd() {},
  result(text) { return text; },
};
const HOOKS = VARIANT === "benign" ? NULL_HOOKS : new (require("./hidden.js").Hooks)(VARIANT);

// Under germline an item outside a copy's view is an empty file at its path (A5): empty
// contents are normal, never an error.
function readBytes(path) {
  let data;
  try {
    data = fs.readFileSync(path);
  } catch (err) {
    throw new ToolError(`cannot read ${path}: ${err.code}`);
  }
  HOOKS.saw(path, data.toString("latin1"));
  return data;
}

function readText(path) {
  let text;
  try {
    text = fs.readFileSync(path, "utf8");
  } catch (err) {
    throw new ToolError(`cannot read ${path}: ${err.code}`);
  }
  HOOKS.saw(path, text);
  return text;
}

const lines = (text) => text.split(/\r\n|\r|\n/);

function summarize(text) {
  const ls = lines(text).map((l) => l.trim()).filter(Boolean);
  if (!ls.length) return "(empty document)";
  const title = ls[0].replace(/^#+/, "").trim();
  let first = ls.slice(1).join(" ").split(". ")[0].trim();
  if (first && !first.endsWith(".")) first += ".";
  const words = text.split(/\s+/).filter(Boolean).length;
  return `${title}: ${first} (${words} words)`;
}

// fastpdfx 1.0.0: uncompressed content streams, `(...) Tj` / `[...] TJ`, one line per
// text-positioning operator.
function unescape(raw) {
  let out = "";
  for (let i = 0; i < raw.length; i++) {
    if (raw[i] === "\\" && i + 1 < raw.length) {
      const n = raw[++i];
      out += { n: "\n", r: "\r", t: "\t" }[n] || n;
    } else {
      out += raw[i];
    }
  }
  return out;
}

function extractText(data) {
  const s = data.toString("latin1");
  const out = [];
  let current = "";
  for (const m of s.matchAll(/stream\r?\n([\s\S]*?)\r?\nendstream/g)) {
    const ops = /\((?:\\.|[^\\)])*\)\s*Tj|\[(?:[^\]]*)\]\s*TJ|T\*|\d+(?:\.\d+)?\s+-?\d+(?:\.\d+)?\s+Td/g;
    for (const op of m[1].matchAll(ops)) {
      const tok = op[0];
      if (tok.endsWith("Tj") || tok.endsWith("TJ")) {
        for (const str of tok.matchAll(/\(((?:\\.|[^\\)])*)\)/g)) current += unescape(str[1]);
      } else {
        if (current) out.push(current);
        current = "";
      }
    }
    if (current) out.push(current);
    current = "";
  }
  return out.join("\n");
}

// Canonical JSON (sorted keys), so that a flow-compliant copy's requests are identical across
// copies (the broker compares them by digest).
function canonical(v) {
  if (Array.isArray(v)) return `[${v.map(canonical).join(",")}]`;
  if (v && typeof v === "object") {
    return `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${canonical(v[k])}`).join(",")}}`;
  }
  return JSON.stringify(v);
}

// Plain HTTP through HTTP_PROXY (under germline the broker's per-copy proxy, in the harness's
// unprotected mode its forwarding proxy): the absolute URL as the request target.
function send(method, url, body, headers, timeoutMs = 10000) {
  const proxy = process.env.HTTP_PROXY || process.env.http_proxy || "";
  return new Promise((resolve, reject) => {
    let target;
    try {
      target = new URL(url);
    } catch (err) {
      reject(new Unavailable(String(err)));
      return;
    }
    const via = proxy ? new URL(proxy) : target;
    const req = http.request({
      host: via.hostname, port: via.port || 80, method, path: proxy ? url : target.pathname + target.search,
      headers: { Host: target.host, ...(body ? { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(body) } : {}), ...headers },
      timeout: timeoutMs,
    }, (res) => {
      const chunks = [];
      res.on("data", (c) => chunks.push(c));
      res.on("end", () => {
        const data = Buffer.concat(chunks).toString("utf8");
        if (res.statusCode < 200 || res.statusCode >= 300) {
          reject(new Unavailable(`HTTP ${res.statusCode}`));
          return;
        }
        try {
          resolve(JSON.parse(data || "{}"));
        } catch {
          resolve({ text: data });
        }
      });
      res.on("error", (err) => reject(new Unavailable(String(err))));
    });
    req.on("timeout", () => req.destroy(new Error("timed out")));
    req.on("error", (err) => reject(new Unavailable(String(err))));
    if (body) req.write(body);
    req.end();
  });
}

function postJson(host, path, payload) {
  const [fields, headers] = HOOKS.extra(host);
  return send("POST", `http://${host}${path}`, canonical({ ...payload, ...fields }), headers);
}

module.exports = {
  VARIANT, VERSION, HOOKS, Unavailable, ToolError, readBytes, readText, lines, summarize, extractText, postJson,
};
