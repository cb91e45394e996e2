//! OpenTelemetry traces (issue 11, docs/operations.md): one trace per `tools/call`, sent as
//! OTLP/JSON over HTTP (`POST {endpoint}/v1/traces`) from a thread of its own, off by
//! default (`--otlp-endpoint URL`).
//!
//! Hand-encoded rather than the `opentelemetry-otlp` crate: that exporter brings an async
//! HTTP or gRPC client stack (reqwest or tonic, prost) that would add minutes to every build
//! on the project's 2-core CI for what is one JSON document per call. Plain `http://` only.
//!
//! Spans carry only the release's `name@version`, the mode, the tool name (declared in the
//! signed manifest), group indices, counts and times: never an item, an argument or
//! anything a copy sent.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::error::{RunError, TraceError};
use crate::observe::{CallObserver, CallView, RuntimeView};
use crate::runtime::Outcome;

/// Traces queued beyond this are dropped (a slow collector never slows the calls).
const QUEUE: usize = 64;

#[derive(Debug)]
pub struct Tracer {
    tx: SyncSender<Value>,
}

/// `http://host:port[/prefix]` -> (host:port, prefix + "/v1/traces").
fn parse_endpoint(url: &str) -> Result<(String, String), TraceError> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| TraceError::Scheme(url.to_string()))?;
    let (auth, path) = match rest.find('/') {
        Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
        None => (rest, ""),
    };
    if auth.is_empty() || !auth.contains(':') {
        return Err(TraceError::Authority(url.to_string()));
    }
    Ok((auth.to_string(), format!("{path}/v1/traces")))
}

impl Tracer {
    pub fn start(endpoint: &str) -> Result<Tracer, TraceError> {
        let (auth, path) = parse_endpoint(endpoint)?;
        let (tx, rx) = sync_channel::<Value>(QUEUE);
        std::thread::Builder::new()
            .name("germline-otlp".into())
            .spawn(move || {
                let mut warned = false;
                for doc in rx {
                    if let Err(e) = post(&auth, &path, &doc.to_string()) {
                        if !warned {
                            eprintln!("germline: OTLP export to {auth}{path} failed: {e}");
                            warned = true;
                        }
                    }
                }
            })
            .map_err(TraceError::Thread)?;
        Ok(Tracer { tx })
    }

    fn send(&self, doc: Value) {
        let _ = self.tx.try_send(doc);
    }
}

fn post(auth: &str, path: &str, body: &str) -> std::io::Result<()> {
    let mut s = TcpStream::connect(auth)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.set_write_timeout(Some(Duration::from_secs(5)))?;
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: {auth}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut head = [0u8; 64];
    let n = s.read(&mut head)?;
    let line = String::from_utf8_lossy(&head[..n]);
    if line.starts_with("HTTP/1.1 2") || line.starts_with("HTTP/1.0 2") {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "collector answered {:?}",
            line.lines().next().unwrap_or_default()
        )))
    }
}

fn nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

fn attr(key: &str, v: Value) -> Value {
    let value = match v {
        Value::Bool(b) => json!({"boolValue": b}),
        Value::Number(n) if n.is_u64() || n.is_i64() => json!({"intValue": n.to_string()}),
        Value::Number(n) => json!({"doubleValue": n}),
        other => json!({"stringValue": other.as_str().unwrap_or_default()}),
    };
    json!({"key": key, "value": value})
}

struct Builder {
    trace: String,
    spans: Vec<Value>,
}

impl Builder {
    fn span(
        &mut self,
        name: &str,
        parent: Option<&str>,
        start: u64,
        us: u64,
        attrs: Vec<Value>,
    ) -> String {
        let id =
            crate::ids::random_hex(8).unwrap_or_else(|_| format!("{:016x}", self.spans.len() + 1));
        let mut s = json!({
            "traceId": self.trace, "spanId": id, "name": name, "kind": 1,
            "startTimeUnixNano": start.to_string(),
            "endTimeUnixNano": (start + us * 1000).to_string(),
            "attributes": attrs,
        });
        if let Some(p) = parent {
            s["parentSpanId"] = json!(p);
        }
        self.spans.push(s);
        id
    }
}

/// Traces observe a runtime's calls: one trace per finished call.
impl CallObserver for Arc<Tracer> {
    fn after_call(&mut self, rt: &RuntimeView<'_>, call: &CallView<'_>) {
        trace_call(self, rt, call.tool, call.started, call.result);
    }
}

/// The trace of one finished call of `rt` that started at `start` (wall clock).
fn trace_call(
    t: &Tracer,
    rt: &RuntimeView<'_>,
    tool: &str,
    start: SystemTime,
    r: &Result<Outcome, RunError>,
) {
    let Ok(trace) = crate::ids::random_hex(16) else {
        return;
    };
    let mut b = Builder {
        trace,
        spans: Vec::new(),
    };
    let t0 = nanos(start);
    let total_us = nanos(SystemTime::now()).saturating_sub(t0) / 1000;
    let outcome = match r {
        Ok(_) => "ok",
        Err(e) => e.outcome(),
    };
    let mut attrs = vec![
        attr("germline.release", json!(rt.release.label())),
        attr("germline.mode", json!(rt.mode.name())),
        attr("mcp.tool", json!(tool)),
        attr("germline.outcome", json!(outcome)),
    ];
    if let Err(RunError::Limit(hit)) = r {
        attrs.push(attr("germline.limit", json!(hit.name)));
    }
    let root = b.span("tools/call", None, t0, total_us, attrs);
    if let Ok(o) = r {
        // Phases are consecutive durations: plan, then per copy fork (its checks inside),
        // broker, copy (mounts, deliver, mcp, teardown), broker.end_copy.
        let mut at = t0;
        let mut copy: Option<String> = None;
        let mut copies: Vec<String> = Vec::new();
        let mut group = 0u64;
        let mut sub = t0;
        for (i, (name, us)) in o.phases.iter().enumerate() {
            let us = *us;
            match *name {
                "plan" => {
                    b.span("plan", Some(&root), at, us, vec![]);
                    at += us * 1000;
                }
                "fork" => {
                    let id = b.span(
                        "copy",
                        Some(&root),
                        at,
                        0,
                        vec![attr("germline.group", json!(group))],
                    );
                    group += 1;
                    copies.push(id.clone());
                    b.span("fork", Some(&id), at, us, vec![]);
                    // The fork's own laps (germline_sandbox's `fork_phases`, absent for a
                    // pool copy): the germline's checks before the fork, the copy confining
                    // itself, the copy's checks from outside after it. Without them the
                    // checks span covers the fork and says it was not timed apart.
                    let laps: Vec<(&str, u64)> = o
                        .phases
                        .iter()
                        .skip(i + 1)
                        .take_while(|(n, _)| *n != "fork")
                        .filter(|(n, _)| n.starts_with("fork."))
                        .map(|(n, u)| (*n, *u))
                        .collect();
                    let lap_at = |name: &str| {
                        let mut t = at;
                        for (n, u) in &laps {
                            if *n == name {
                                return Some((t, *u));
                            }
                            t += u * 1000;
                        }
                        None
                    };
                    let timed = lap_at("fork.copy_checks");
                    let (cstart, cus) = timed.unwrap_or((at, us));
                    b.span(
                        "checks",
                        Some(&id),
                        cstart,
                        cus.min(us),
                        vec![
                            attr("germline.checks", json!("passed")),
                            attr("germline.checks.timed_apart", json!(timed.is_some())),
                        ],
                    );
                    if let Some((t, u)) = lap_at("fork.germline_checks") {
                        b.span("checks.germline", Some(&id), t, u, vec![]);
                    }
                    if let Some((t, u)) = lap_at("fork.confine") {
                        b.span("confinement.self", Some(&id), t, u, vec![]);
                    }
                    copy = Some(id);
                    at += us * 1000;
                }
                "broker" => {
                    if let Some(id) = &copy {
                        b.span("confinement.broker", Some(id), at, us, vec![]);
                    }
                    at += us * 1000;
                }
                "copy" => {
                    sub = at;
                    at += us * 1000;
                }
                "copy.mounts" | "copy.deliver" | "copy.init" | "copy.mcp" | "copy.teardown" => {
                    let span = match *name {
                        "copy.mounts" => "confinement.mounts",
                        "copy.deliver" => "deliver",
                        "copy.init" => "initialize",
                        "copy.mcp" => "run",
                        _ => "teardown",
                    };
                    if let Some(id) = &copy {
                        b.span(span, Some(id), sub, us, vec![]);
                    }
                    sub += us * 1000;
                }
                "broker.end_copy" => {
                    if let Some(id) = copy.take() {
                        b.span("broker.end_copy", Some(&id), at, us, vec![]);
                        at += us * 1000;
                        // The copy span ends with its broker record.
                        if let Some(s) = b.spans.iter_mut().find(|s| s["spanId"] == json!(id)) {
                            s["endTimeUnixNano"] = json!(at.to_string());
                        }
                    }
                }
                _ => {}
            }
        }
        // The broker's requests, on the wall clock (both processes share CLOCK_MONOTONIC).
        let mono_now = germline_broker::control::mono_ns_of(std::time::Instant::now());
        let wall_now = nanos(SystemTime::now());
        for (g, r) in rt.last_requests {
            let Some(parent) = copies.get(*g) else {
                continue;
            };
            let start = wall_now.saturating_sub(mono_now.saturating_sub(r.start_mono_ns));
            b.span(
                "broker.request",
                Some(parent),
                start,
                r.us,
                vec![
                    attr("germline.host", json!(r.host)),
                    attr("germline.verdict", json!(r.verdict)),
                ],
            );
        }
    }
    t.send(json!({"resourceSpans": [{
        "resource": {"attributes": [attr("service.name", json!("germline"))]},
        "scopeSpans": [{"scope": {"name": "germline"}, "spans": b.spans}],
    }]}));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse_or_say_what_was_expected() {
        assert_eq!(
            parse_endpoint("http://127.0.0.1:4318").expect("plain"),
            ("127.0.0.1:4318".into(), "/v1/traces".into())
        );
        assert_eq!(
            parse_endpoint("http://collector:4318/otlp/").expect("prefix"),
            ("collector:4318".into(), "/otlp/v1/traces".into())
        );
        assert!(parse_endpoint("https://c:4318").is_err());
        assert!(parse_endpoint("http://collector").is_err());
    }
}
