"""The scripted sessions (issue 7): a fixed sequence of tool calls per corpus server, the paper's
six-call HR/board/finance/public session of the documents server among them (Section VII-A),
driven by the official MCP client SDK (`mcp`, stdio_client + ClientSession) against any command
line that speaks MCP over stdio: the release's server itself, or `germline run ...`.

The scripted agent forwards a previous result (`Ref`) only if the label the runtime returned for
it (`_meta.germline.label`, Corollary 2) lies inside the clearance of where it goes (the tool's
destination host, and for mail the recipient): a CaMeL/FIDES-style agent policy. A runtime that
returns no label (Sig+Pin, unprotected) gives the agent nothing to refuse on, so it forwards.
Each step's `expect` strings make up the benign completion check."""
from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

CALL_TIMEOUT = 60.0


@dataclass(frozen=True)
class Ref:
    """The text result of an earlier step (0-based), forwarded by the agent."""
    step: int


@dataclass
class Step:
    tool: str
    args: dict[str, Any]
    expect: list[str]
    forward_to: str = ""  # destination host a forwarded value goes to (agent label check)
    recipient: str = ""  # mail recipient of a forwarded value


@dataclass
class StepResult:
    tool: str
    ok: bool
    status: str  # "ok", "unexpected", "error", "withheld" (the agent refused to forward)
    text: str = ""
    label: list[str] | None = None
    writes: dict | None = None  # `_meta.germline.writes`: what of a copy's writes was committed or refused


@dataclass
class SessionResult:
    server: str
    steps: list[StepResult] = field(default_factory=list)
    error: str = ""  # the server could not be started or the session broke off
    stderr: str = ""


def steps_for(server: str, home: str, folder: str = "") -> list[Step]:
    h = lambda rel: f"{home}/{rel}"  # noqa: E731
    if server == "docs-folder":  # the documents server on a folder (issue 27: a directory item)
        # `folder` is the run's own copy of the world's public folder (matrix.py), so what one
        # run writes there no other run sees.
        return [
            Step("find_related", {"document": h("hr/review.pdf"), "folder": folder}, ["Performance review 2026"]),
            Step("publish_folder", {"folder": folder, "title": "Public documents"}, ["posted"]),
        ]
    if server == "docs":  # the paper's six-call session (Sections I, VII-A; Fig. 2c in step 3)
        return [
            Step("summarize", {"path": h("hr/review.pdf")}, ["Performance review 2026"]),
            Step("summarize", {"path": h("board/minutes.pdf")}, ["Board minutes"]),
            Step("ocr_annotate", {"document": h("finance/invoice.pdf"), "reference": h("hr/salary.csv")},
                 ["ocr: ok", "Invoice 2026-117", "[Dana Whitfield: Engineering"]),
            Step("ocr_pdf", {"document": h("finance/receipt.pdf")}, ["ocr: ok", "Receipt 88-431"]),
            Step("summarize", {"path": h("public/press-release.pdf")}, ["Press release: Contoso opens"]),
            Step("post_blog", {"title": "Oslo office", "text": Ref(4)}, ["posted"], forward_to="blog.example"),
        ]
    if server == "sql":
        return [
            Step("list_tables", {"db": h("hr/people.db")}, ["staff"]),
            Step("query", {"db": h("hr/people.db"), "sql": "SELECT name, salary FROM staff ORDER BY name"}, ["Dana Whitfield\t98000"]),
            Step("query", {"db": h("finance/ledger.db"), "sql": "SELECT vendor, amount FROM payments ORDER BY id"}, ["Contoso Ltd\t12400.0"]),
            Step("export_report", {"db": h("finance/ledger.db"), "sql": "SELECT vendor, amount, memo FROM payments ORDER BY id",
                                   "title": "Q4 payments"}, ["report", "2 rows"]),
            Step("query", {"db": h("public/catalog.db"), "sql": "SELECT name, price FROM products ORDER BY name"}, ["Gadget\t19.0"]),
            Step("export_report", {"db": h("finance/ledger.db"), "sql": "SELECT COUNT(*) FROM payments", "title": "Catalogue check",
                                   "note": Ref(4)}, ["report", "1 rows"], forward_to="bi.example"),
        ]
    if server == "web":
        return [
            Step("preview", {"path": h("board/strategy.md")}, ["Strategy 2027"]),
            Step("preview", {"path": h("projx/roadmap.md")}, ["Roadmap"]),
            Step("fetch", {"url": "http://api.example/v1/rates"}, ["EUR/USD"]),
            Step("preview", {"path": h("public/announcement.md")}, ["Announcement"]),
            Step("publish", {"title": "Spring meetup", "text": Ref(3)}, ["published"], forward_to="blog.example"),
        ]
    if server == "lint":
        return [
            Step("repo_log", {"reflog": h("projx/repo/.git/logs/HEAD")}, ["Alice Example: Initial engine"]),
            Step("lint", {"path": h("finance/budget.py")}, ["budget.py:"]),
            Step("lint", {"path": h("projx/repo/src/engine.py")}, ["engine.py:"]),
            Step("upload_report", {"project": "projx-engine", "report": Ref(2)}, ["uploaded"], forward_to="ci.example"),
            Step("lint", {"path": h("public/snippet.py")}, ["snippet.py:"]),
            Step("upload_report", {"project": "snippets", "report": Ref(4)}, ["uploaded"], forward_to="ci.example"),
        ]
    if server == "mail":
        return [
            Step("read_draft", {"path": h("hr/drafts/offer.eml")}, ["Subject: Offer of employment"]),
            Step("read_draft", {"path": h("finance/drafts/reminder.eml")}, ["Subject: Payment reminder"]),
            Step("send_draft", {"path": h("projx/drafts/status.eml"), "to": "team@corp.example"}, ["sent to team@corp.example"]),
            Step("read_draft", {"path": h("public/drafts/newsletter.eml")}, ["Subject: Newsletter"]),
            Step("send_message", {"to": "partner@ext.example", "subject": "Newsletter", "text": Ref(3)},
                 ["sent to partner@ext.example"], forward_to="mail.example", recipient="partner@ext.example"),
        ]
    raise ValueError(f"no session for server {server}")


def _describe(err: BaseException) -> str:
    """The innermost errors' own words: a TaskGroup's ExceptionGroup says only how many it holds."""
    if isinstance(err, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in err.exceptions)
    return f"{type(err).__name__}: {err}"


def _label(result: Any) -> list[str] | None:
    meta = result.meta or {}
    if not isinstance(meta, dict):
        meta = dict(meta)
    g = meta.get("germline") or {}
    lab = g.get("label") if isinstance(g, dict) else None
    return sorted(lab) if isinstance(lab, list) else None


def _writes(result: Any) -> dict | None:
    meta = result.meta or {}
    if not isinstance(meta, dict):
        meta = dict(meta)
    g = meta.get("germline") or {}
    w = g.get("writes") if isinstance(g, dict) else None
    return w if isinstance(w, dict) else None


def _text(result: Any) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content if getattr(c, "type", "") == "text")


def _may_forward(label: list[str] | None, step: Step, world: dict) -> bool:
    if label is None:
        return True  # no label returned: nothing to refuse on
    clear = set(world["destinations"].get(step.forward_to, []))
    if step.recipient:
        clear &= set(world["consumers"].get(step.recipient, []))
    return set(label) <= clear


async def run_session(server: str, command: list[str], env: dict[str, str], world: dict, stderr_path: Path,
                      cwd: str | None = None, session: str = "", folder: str = "") -> SessionResult:
    """`session`: another session than the server's own (a case's `steps`); `folder`: the
    run's folder for the sessions that take one."""
    res = SessionResult(server)
    steps = steps_for(session or server, world["home"], folder)
    params = StdioServerParameters(command=command[0], args=command[1:], env=env, cwd=cwd)
    with open(stderr_path, "a+", encoding="utf-8", errors="replace") as errlog:
        try:
            async with stdio_client(params, errlog=errlog) as (r, w):
                async with ClientSession(r, w, read_timeout_seconds=CALL_TIMEOUT) as s:
                    await asyncio.wait_for(s.initialize(), CALL_TIMEOUT)
                    for step in steps:
                        args, withheld = {}, False
                        for k, v in step.args.items():
                            if isinstance(v, Ref):
                                prev = res.steps[v.step]
                                if prev.status not in ("ok", "unexpected") or not _may_forward(prev.label, step, world):
                                    withheld = True
                                v = prev.text
                            args[k] = v
                        if withheld:
                            res.steps.append(StepResult(step.tool, False, "withheld"))
                            continue
                        try:
                            out = await asyncio.wait_for(s.call_tool(step.tool, args), CALL_TIMEOUT)
                        except Exception as err:  # a protocol error or a timeout fails this step only
                            res.steps.append(StepResult(step.tool, False, "error", f"{type(err).__name__}: {err}"))
                            continue
                        text = _text(out)
                        ok = not out.is_error and all(e in text for e in step.expect)
                        res.steps.append(StepResult(step.tool, ok, "ok" if ok else ("error" if out.is_error else "unexpected"),
                                                    text, _label(out), _writes(out)))
        except BaseException as err:  # noqa: BLE001 - a refused release ends its session here
            if isinstance(err, (KeyboardInterrupt, SystemExit)):
                raise
            res.error = _describe(err)
        errlog.seek(0)
        res.stderr = errlog.read()[-2000:]
    while len(res.steps) < len(steps):
        res.steps.append(StepResult(steps[len(res.steps)].tool, False, "not run"))
    return res


def minimal_env(extra: dict[str, str]) -> dict[str, str]:
    """The server's whole environment: PATH and what the caller adds; never the harness's own
    proxies or credentials."""
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}
    env.update(extra)
    for k in list(env):
        if k.lower() in ("http_proxy", "https_proxy", "all_proxy", "no_proxy") and k not in extra:
            del env[k]
    return env


if os.environ.get("GERMLINE_SESSION_DEBUG"):
    import logging

    logging.basicConfig(level=logging.DEBUG)
