//! The status page of `germline serve` (issue 31): `GET /status` (HTML) and `GET /status.json`,
//! behind the same authentication as `/mcp` ([`crate::http`]). It shows the served releases,
//! the caller's live sessions, their recent calls with outcome and broker verdicts, triggers,
//! witness records and each release's dampening state, and refreshes itself every two seconds
//! (a `<meta http-equiv="refresh">`: no script, so its Content-Security-Policy allows none).
//!
//! What it shows is what `germline status` and `/metrics` may hold: names fixed by the signed
//! manifest (release, declared tools), the policy (users, labels, declared hosts or
//! `undeclared`) or this code (outcomes, verdicts), counts, times and digests. Never an
//! argument value, a result, an item's contents, a copy-made host name or a session id (a
//! session is shown by a digest of its id: the id is a credential). A tool name the manifest
//! does not declare is an agent's text, shown as `(undeclared)`. Everything else that a
//! publisher, a deployer or a user wrote is HTML-escaped ([`escape`]).
//!
//! The data comes from one [`CallObserver`] per runtime ([`Board::observer`]), told what
//! metrics and the `germline status` file are told.

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use germline_engine::observe::{CallObserver, CallView, RuntimeView};
use germline_policy::limits::Lifetime;
use germline_policy::witness::WitnessRecord;
use http_body_util::Full;
use hyper::header::HeaderValue;
use hyper::{Response, StatusCode};
use serde_json::{json, Value};

/// Recent calls and witness records kept (older ones drop off).
pub const RECENT: usize = 50;
/// Seconds between refreshes of the page.
pub const REFRESH_SECS: u32 = 2;

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// One served release's counters.
#[derive(Debug, Default)]
struct ReleaseRow {
    label: String,
    digest: String,
    lifetime: String,
    runtimes: u64,
    calls: u64,
    outcomes: BTreeMap<String, u64>,
    triggers: u64,
    pending: usize,
    dampening: Value,
}

/// One finished call, as the page shows it.
#[derive(Debug)]
struct CallRow {
    n: u64,
    at: u64,
    user: String,
    release: String,
    tool: String,
    outcome: &'static str,
    copies: usize,
    triggers: usize,
    /// The label of the call's outputs (none for a refused or failed call).
    label: Option<Vec<String>>,
    ms: f64,
    /// Broker requests by (declared host or `undeclared`, verdict).
    verdicts: BTreeMap<(String, String), u64>,
}

/// One witness record written by a runtime of this process.
#[derive(Debug)]
struct WitnessRow {
    at: u64,
    user: String,
    release: String,
    record: String,
    tool: String,
    destination: String,
    verdict: String,
    label: Vec<String>,
}

#[derive(Debug, Default)]
struct Inner {
    releases: Vec<ReleaseRow>,
    calls: VecDeque<CallRow>,
    witnesses: VecDeque<WitnessRow>,
    next_call: u64,
}

/// What the status page shows, kept current by the runtimes' observers.
#[derive(Debug)]
pub struct Board {
    mode: String,
    started: u64,
    inner: Mutex<Inner>,
}

/// One live session of the HTTP layer, as the page shows it (the id is given only to be
/// digested here).
#[derive(Debug, Clone)]
pub struct SessionRow {
    pub id: String,
    pub user: String,
    pub age_secs: u64,
    pub idle_secs: u64,
    pub busy: u32,
    pub calls: u64,
}

/// A session id's public name: the first 12 hex digits of its SHA-256 (the id itself is a
/// credential of its user's session).
pub fn session_tag(id: &str) -> String {
    use sha2::Digest as _;
    let d = sha2::Sha256::digest(id.as_bytes());
    hex::encode(&d[..6])
}

impl Board {
    /// The releases `germline serve` serves: (label, digest, lifetime) in the command line's
    /// order, the index [`Board::observer`] takes.
    pub fn new(mode: &str, releases: &[(String, String, Lifetime)]) -> Board {
        let releases = releases
            .iter()
            .map(|(label, digest, lifetime)| ReleaseRow {
                label: label.clone(),
                digest: digest.clone(),
                lifetime: lifetime.name().to_string(),
                dampening: Value::Null,
                ..ReleaseRow::default()
            })
            .collect();
        Board {
            mode: mode.to_string(),
            started: unix_now(),
            inner: Mutex::new(Inner {
                releases,
                ..Inner::default()
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The observer of one runtime of release `index` for `user` (counted live until dropped).
    pub fn observer(self: &Arc<Self>, index: usize, user: &str) -> BoardObserver {
        if let Some(r) = self.lock().releases.get_mut(index) {
            r.runtimes += 1;
        }
        BoardObserver {
            board: self.clone(),
            index,
            user: user.to_string(),
            witnesses_seen: 0,
        }
    }

    /// What `user` may see, as JSON (`/status.json`, and what [`render`] draws): every
    /// release's counters and dampening state; of sessions, calls and witnesses only the
    /// user's own.
    pub fn snapshot(&self, user: &str, sessions: &[SessionRow]) -> Value {
        let g = self.lock();
        let releases: Vec<Value> = g
            .releases
            .iter()
            .map(|r| {
                json!({
                    "release": r.label, "digest": r.digest, "lifetime": r.lifetime,
                    "runtimes": r.runtimes, "calls": r.calls, "outcomes": r.outcomes,
                    "triggers": r.triggers, "pending_reruns": r.pending,
                    "dampening": r.dampening,
                })
            })
            .collect();
        let sessions: Vec<Value> = sessions
            .iter()
            .filter(|s| s.user == user)
            .map(|s| {
                json!({
                    "session": session_tag(&s.id), "user": s.user, "age_secs": s.age_secs,
                    "idle_secs": s.idle_secs, "in_flight": s.busy, "calls": s.calls,
                })
            })
            .collect();
        let calls: Vec<Value> = g
            .calls
            .iter()
            .rev()
            .filter(|c| c.user == user)
            .map(|c| {
                let verdicts: Vec<Value> = c
                    .verdicts
                    .iter()
                    .map(|((host, verdict), n)| json!({"host": host, "verdict": verdict, "count": n}))
                    .collect();
                json!({
                    "n": c.n, "at_unix": c.at, "release": c.release, "tool": c.tool,
                    "outcome": c.outcome, "copies": c.copies, "triggers": c.triggers,
                    "label": c.label, "ms": (c.ms * 10.0).round() / 10.0, "verdicts": verdicts,
                })
            })
            .collect();
        let witnesses: Vec<Value> = g
            .witnesses
            .iter()
            .rev()
            .filter(|w| w.user == user)
            .map(|w| {
                json!({
                    "at_unix": w.at, "release": w.release, "record": w.record, "tool": w.tool,
                    "destination": w.destination, "verdict": w.verdict, "label": w.label,
                })
            })
            .collect();
        json!({
            "user": user,
            "mode": self.mode,
            "started_unix": self.started,
            "now_unix": unix_now(),
            "releases": releases,
            "sessions": sessions,
            "calls": calls,
            "witnesses": witnesses,
        })
    }
}

/// Tells the [`Board`] what one runtime does.
#[derive(Debug)]
pub struct BoardObserver {
    board: Arc<Board>,
    index: usize,
    user: String,
    /// Witness records of the runtime already on the board.
    witnesses_seen: usize,
}

impl Drop for BoardObserver {
    fn drop(&mut self) {
        if let Some(r) = self.board.lock().releases.get_mut(self.index) {
            r.runtimes = r.runtimes.saturating_sub(1);
        }
    }
}

/// The dampening state of the view's release, null while evidence is off (as `germline
/// status` shows it).
fn dampening(rt: &RuntimeView<'_>) -> Value {
    if !rt.evidence.enabled() {
        return Value::Null;
    }
    let st = rt.evidence.ledger.releases.get(&rt.release.digest);
    json!({
        "penalty": st.map_or(0.0, |s| s.penalty.value),
        "suppressed": st.is_some_and(|s| s.penalty.suppressed),
        "admitted": st.map_or(0, |s| s.admitted),
        "refused": st.map_or(0, |s| s.refused),
        "last": st.and_then(|s| s.last),
    })
}

/// A signed record's first line, read for the names it holds (the page never shows its
/// arguments, transcript or items).
fn witness_row(path: &Path, user: &str, release: &str) -> WitnessRow {
    let record = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("?")
        .to_string();
    let rec = std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str::<WitnessRecord>(t.lines().next().unwrap_or("")).ok());
    let (tool, destination, verdict, label) = match rec {
        Some(r) => (
            r.tool,
            r.destination,
            serde_json::to_value(r.verdict)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_else(|| "?".into()),
            r.label,
        ),
        None => ("?".into(), "?".into(), "unreadable".into(), vec![]),
    };
    WitnessRow {
        at: unix_now(),
        user: user.to_string(),
        release: release.to_string(),
        record,
        tool,
        destination,
        verdict,
        label,
    }
}

impl BoardObserver {
    /// The release's dampening state, pending re-runs and new witness records.
    fn refresh(&mut self, rt: &RuntimeView<'_>) {
        let written = &rt.evidence.written;
        let new: Vec<WitnessRow> = written
            .iter()
            .skip(self.witnesses_seen)
            .map(|p| witness_row(p, &self.user, &rt.release.label()))
            .collect();
        self.witnesses_seen = written.len();
        let mut g = self.board.lock();
        if let Some(r) = g.releases.get_mut(self.index) {
            r.dampening = dampening(rt);
            r.pending = rt.evidence.pending();
        }
        for w in new {
            if g.witnesses.len() >= RECENT {
                g.witnesses.pop_front();
            }
            g.witnesses.push_back(w);
        }
    }
}

impl CallObserver for BoardObserver {
    fn after_call(&mut self, rt: &RuntimeView<'_>, call: &CallView<'_>) {
        let outcome = match call.result {
            Ok(o) if o.result.get("isError") == Some(&Value::Bool(true)) => "tool_error",
            Ok(_) => "ok",
            Err(e) => e.outcome(),
        };
        let (copies, triggers, label) = match call.result {
            Ok(o) => (
                o.copies,
                o.triggers,
                Some(
                    o.label
                        .as_ref()
                        .map(|l| l.tags().map(str::to_string).collect())
                        .unwrap_or_default(),
                ),
            ),
            Err(_) => (0, 0, None),
        };
        let mut verdicts = BTreeMap::new();
        for (_, e) in rt.last_requests {
            *verdicts
                .entry((e.host.clone(), e.verdict.clone()))
                .or_insert(0) += 1;
        }
        // The agent names the tool: only a name the signed manifest declares is shown.
        let tool = if rt.release.manifest.tools.contains_key(call.tool) {
            call.tool.to_string()
        } else {
            "(undeclared)".to_string()
        };
        let ms = call
            .started
            .elapsed()
            .map(|d| d.as_secs_f64() * 1e3)
            .unwrap_or(0.0);
        {
            let mut g = self.board.lock();
            g.next_call += 1;
            let n = g.next_call;
            if let Some(r) = g.releases.get_mut(self.index) {
                r.calls += 1;
                *r.outcomes.entry(outcome.to_string()).or_insert(0) += 1;
                r.triggers += triggers as u64;
            }
            if g.calls.len() >= RECENT {
                g.calls.pop_front();
            }
            g.calls.push_back(CallRow {
                n,
                at: unix_now(),
                user: self.user.clone(),
                release: rt.release.label(),
                tool,
                outcome,
                copies,
                triggers,
                label,
                ms,
                verdicts,
            });
        }
        self.refresh(rt);
    }

    fn after_verdict(&mut self, rt: &RuntimeView<'_>) {
        self.refresh(rt);
    }

    fn after_idle_step(&mut self, rt: &RuntimeView<'_>) {
        self.refresh(rt);
    }

    fn after_idle(&mut self, rt: &RuntimeView<'_>) {
        self.refresh(rt);
    }
}

/// `s` as HTML text or a double-quoted attribute value.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A JSON value as escaped cell text (strings without quotes, null as `-`).
fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => escape(s),
        Value::Array(a) => escape(
            &a.iter()
                .map(|x| x.as_str().map_or_else(|| x.to_string(), str::to_string))
                .collect::<Vec<_>>()
                .join(", "),
        ),
        v => escape(&v.to_string()),
    }
}

/// `HH:MM:SS` (UTC) of a unix time.
fn clock(v: &Value) -> String {
    let t = v.as_u64().unwrap_or(0);
    format!("{:02}:{:02}:{:02}", (t / 3600) % 24, (t / 60) % 60, t % 60)
}

fn table(out: &mut String, id: &str, head: &[&str], rows: Vec<Vec<String>>, empty: &str) {
    out.push_str(&format!("<table id=\"{id}\"><thead><tr>"));
    for h in head {
        out.push_str(&format!("<th>{h}</th>"));
    }
    out.push_str("</tr></thead><tbody>");
    if rows.is_empty() {
        out.push_str(&format!(
            "<tr><td colspan=\"{}\" class=\"none\">{empty}</td></tr>",
            head.len()
        ));
    }
    for r in rows {
        out.push_str("<tr>");
        for c in r {
            out.push_str(&format!("<td>{c}</td>"));
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table>");
}

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}\
h1{font-size:1.3em;margin:0 0 .2em}h2{font-size:1.05em;margin:1.4em 0 .4em}\
.meta{color:#666}table{border-collapse:collapse;width:100%}\
th,td{border-bottom:1px solid #ddd;padding:.25em .6em;text-align:left;vertical-align:top}\
th{background:#f3f3f3;font-weight:600}td.none{color:#888;font-style:italic}\
.sup{color:#fff;background:#b00020;padding:0 .3em;border-radius:3px}\
code{font-size:.9em}footer{margin-top:2em;color:#666;font-size:.9em}";

/// The page's Content-Security-Policy: nothing but its own inline style (by the response's
/// nonce); no script, image, frame, form target or connection anywhere.
pub fn csp(nonce: &str) -> String {
    format!(
        "default-src 'none'; style-src 'nonce-{nonce}'; base-uri 'none'; form-action 'self'; \
         frame-ancestors 'none'"
    )
}

fn dampening_text(d: &Value) -> String {
    if d.is_null() {
        return "off (no --evidence)".into();
    }
    let mut s = String::new();
    if d["suppressed"] == true {
        s.push_str("<span class=\"sup\">SUPPRESSED</span> ");
    }
    s.push_str(&format!(
        "P {:.0}, {} admitted, {} refused, last {}",
        d["penalty"].as_f64().unwrap_or(0.0),
        cell(&d["admitted"]),
        cell(&d["refused"]),
        cell(&d["last"]),
    ));
    s
}

/// The page for a [`Board::snapshot`], styled by `nonce`'s inline style.
pub fn render(snap: &Value, nonce: &str) -> String {
    let mut o = String::new();
    o.push_str(&format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"{REFRESH_SECS}\">\
         <meta name=\"referrer\" content=\"same-origin\">\
         <title>germline serve: status</title><style nonce=\"{}\">{STYLE}</style></head><body>",
        escape(nonce)
    ));
    let up = snap["now_unix"]
        .as_u64()
        .unwrap_or(0)
        .saturating_sub(snap["started_unix"].as_u64().unwrap_or(0));
    o.push_str(&format!(
        "<h1>germline serve</h1><p class=\"meta\">user <b id=\"user\">{}</b> · mode {} · up {up} s · \
         at {} UTC · refreshed every {REFRESH_SECS} s</p>",
        cell(&snap["user"]),
        cell(&snap["mode"]),
        clock(&snap["now_unix"]),
    ));
    let list = |k: &str| snap[k].as_array().cloned().unwrap_or_default();
    o.push_str("<h2>Releases</h2>");
    let rows = list("releases")
        .iter()
        .map(|r| {
            let outcomes = r["outcomes"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| format!("{} {v}", escape(k)))
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default();
            vec![
                cell(&r["release"]),
                format!("<code>{}</code>", cell(&r["digest"])),
                cell(&r["lifetime"]),
                cell(&r["runtimes"]),
                cell(&r["calls"]),
                if outcomes.is_empty() {
                    "-".into()
                } else {
                    outcomes
                },
                cell(&r["triggers"]),
                cell(&r["pending_reruns"]),
                dampening_text(&r["dampening"]),
            ]
        })
        .collect();
    table(
        &mut o,
        "releases",
        &[
            "release",
            "digest",
            "lifetime",
            "runtimes",
            "calls",
            "outcomes",
            "triggers",
            "pending re-runs",
            "dampening",
        ],
        rows,
        "none",
    );
    o.push_str("<h2>Sessions</h2>");
    let rows = list("sessions")
        .iter()
        .map(|s| {
            vec![
                format!("<code>{}</code>", cell(&s["session"])),
                cell(&s["user"]),
                format!("{} s", cell(&s["age_secs"])),
                format!("{} s", cell(&s["idle_secs"])),
                cell(&s["in_flight"]),
                cell(&s["calls"]),
            ]
        })
        .collect();
    table(
        &mut o,
        "sessions",
        &["session", "user", "age", "idle", "in flight", "calls"],
        rows,
        "no live session",
    );
    o.push_str("<h2>Recent calls</h2>");
    let rows = list("calls")
        .iter()
        .map(|c| {
            let verdicts = c["verdicts"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|v| {
                            format!(
                                "{} {} {}",
                                cell(&v["host"]),
                                cell(&v["verdict"]),
                                cell(&v["count"])
                            )
                        })
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "-".into());
            vec![
                cell(&c["n"]),
                clock(&c["at_unix"]),
                cell(&c["release"]),
                cell(&c["tool"]),
                format!("<b>{}</b>", cell(&c["outcome"])),
                cell(&c["copies"]),
                cell(&c["triggers"]),
                if c["label"].as_array().is_some_and(|a| a.is_empty()) {
                    "public".into()
                } else {
                    cell(&c["label"])
                },
                verdicts,
                cell(&c["ms"]),
            ]
        })
        .collect();
    table(
        &mut o,
        "calls",
        &[
            "#",
            "at (UTC)",
            "release",
            "tool",
            "outcome",
            "copies",
            "triggers",
            "label",
            "broker verdicts",
            "ms",
        ],
        rows,
        "no call yet",
    );
    o.push_str("<h2>Witness records</h2>");
    let rows = list("witnesses")
        .iter()
        .map(|w| {
            vec![
                clock(&w["at_unix"]),
                cell(&w["release"]),
                cell(&w["tool"]),
                cell(&w["destination"]),
                format!("<b>{}</b>", cell(&w["verdict"])),
                cell(&w["label"]),
                format!("<code>{}</code>", cell(&w["record"])),
            ]
        })
        .collect();
    table(
        &mut o,
        "witnesses",
        &[
            "at (UTC)",
            "release",
            "tool",
            "destination",
            "verdict",
            "clearance",
            "record",
        ],
        rows,
        "none",
    );
    o.push_str(
        "<footer>Names, counts, outcomes, verdicts, timings and digests only: no argument \
         value, result or item content is ever shown here. Machine-readable: \
         <code>/status.json</code>.</footer></body></html>",
    );
    o
}

type Resp = Response<Full<Bytes>>;

/// Headers of every status answer: no caching, no sniffing, no framing, no referrer beyond
/// the page's own origin; with a
/// nonce, the HTML's Content-Security-Policy.
pub fn secure_headers(r: &mut Resp, nonce: Option<&str>) {
    let h = r.headers_mut();
    h.insert(
        hyper::header::CACHE_CONTROL,
        HeaderValue::from_static("no-store"),
    );
    h.insert(
        hyper::header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        hyper::header::X_FRAME_OPTIONS,
        HeaderValue::from_static("DENY"),
    );
    h.insert(
        hyper::header::REFERRER_POLICY,
        // Not `no-referrer`: with it Chromium sends the login form's POST with `Origin:
        // null`, which the Origin guard refuses; the page links nowhere else.
        HeaderValue::from_static("same-origin"),
    );
    if let Some(n) = nonce {
        if let Ok(v) = HeaderValue::from_str(&csp(n)) {
            h.insert(hyper::header::CONTENT_SECURITY_POLICY, v);
        }
    }
}

fn html(status: StatusCode, body: String, nonce: &str) -> Resp {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    secure_headers(&mut r, Some(nonce));
    r
}

/// A fresh nonce for one page's inline style (a fixed one if the system has no randomness:
/// the page has no script, so the nonce guards only its style).
fn nonce() -> String {
    germline_engine::ids::random_hex(16).unwrap_or_else(|_| "germline".into())
}

/// The page for `snap`.
pub fn page(snap: &Value) -> Resp {
    let n = nonce();
    html(StatusCode::OK, render(snap, &n), &n)
}

/// The login form (a 401 carries `refusal`'s `WWW-Authenticate`): the token is posted, never
/// put in a URL, and answered with the page's cookie.
pub fn login_page(status: StatusCode, wrong: bool, refusal: &Resp) -> Resp {
    let n = nonce();
    let body = format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"referrer\" content=\"same-origin\"><title>germline serve: sign in</title>\
         <style nonce=\"{n}\">{STYLE}</style></head><body><h1>germline serve</h1>\
         <p>The status page needs the bearer token of <code>germline serve</code> (the token \
         file it printed, or your line of <code>--users</code>).</p>{}\
         <form method=\"post\" action=\"/status/login\"><input type=\"password\" \
         name=\"token\" autocomplete=\"current-password\" required> \
         <button type=\"submit\">Sign in</button></form></body></html>",
        if wrong {
            "<p class=\"sup\">That token is not valid.</p>"
        } else {
            ""
        }
    );
    let mut r = html(status, body, &n);
    if let Some(v) = refusal.headers().get(hyper::header::WWW_AUTHENTICATE) {
        r.headers_mut()
            .insert(hyper::header::WWW_AUTHENTICATE, v.clone());
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn everything_written_by_someone_else_is_escaped() {
        assert_eq!(
            escape(r#"<script>alert('x')</script>&"q""#),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&quot;q&quot;"
        );
        let snap = json!({
            "user": "<b>eve</b>", "mode": "germline", "started_unix": 0, "now_unix": 3661,
            "releases": [{"release": "<img src=x onerror=alert(1)>@1", "digest": "sha256:\"x",
                          "lifetime": "session", "runtimes": 1, "calls": 1,
                          "outcomes": {"<ok>": 1}, "triggers": 0, "pending_reruns": 0,
                          "dampening": {"penalty": 2000.0, "suppressed": true, "admitted": 1,
                                        "refused": 0, "last": "<v>"}}],
            "sessions": [], "witnesses": [],
            "calls": [{"n": 1, "at_unix": 3661, "release": "r", "tool": "</td><script>",
                       "outcome": "ok", "copies": 1, "triggers": 0, "label": ["<hr>"],
                       "ms": 1.5, "verdicts": [{"host": "<h>", "verdict": "denied", "count": 1}]}],
        });
        let page = render(&snap, "n0nce");
        for raw in [
            "<b>eve", "<img", "<script", "<ok>", "<v>", "<hr>", "<h>", "\"x",
        ] {
            assert!(!page.contains(raw), "{raw} unescaped in {page}");
        }
        assert!(page.contains("&lt;/td&gt;&lt;script&gt;"), "{page}");
        assert!(page.contains("01:01:01"), "{page}");
        assert!(page.contains("SUPPRESSED"), "{page}");
        assert!(page.contains("<style nonce=\"n0nce\">"), "{page}");
    }

    #[test]
    fn a_user_sees_only_their_own_sessions_and_session_ids_only_as_digests() {
        let b = Arc::new(Board::new(
            "germline",
            &[("r@1".into(), "sha256:ab".into(), Lifetime::Session)],
        ));
        let o = b.observer(0, "alice");
        let id = "0123456789abcdef0123456789abcdef";
        let rows = vec![
            SessionRow {
                id: id.into(),
                user: "alice".into(),
                age_secs: 3,
                idle_secs: 1,
                busy: 0,
                calls: 2,
            },
            SessionRow {
                id: "ffffffffffffffffffffffffffffffff".into(),
                user: "bob".into(),
                age_secs: 3,
                idle_secs: 1,
                busy: 0,
                calls: 5,
            },
        ];
        let s = b.snapshot("alice", &rows);
        assert_eq!(s["sessions"].as_array().map(Vec::len), Some(1), "{s}");
        assert_eq!(s["sessions"][0]["session"], session_tag(id));
        assert_eq!(s["releases"][0]["runtimes"], 1);
        let text = s.to_string();
        assert!(!text.contains(id) && !text.contains("bob"), "{text}");
        drop(o);
        assert_eq!(b.snapshot("alice", &[])["releases"][0]["runtimes"], 0);
    }
}
