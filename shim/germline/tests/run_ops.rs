//! Operating `germline run` (docs/operations.md): the Prometheus endpoint scraped during a
//! short session with the real MCP client SDK as the agent, its counters moving as the calls
//! did, and no canary in metrics or logs, even from a Trojan that puts one into undeclared
//! host names, URL paths, header names and error texts.

mod run_common;

use run_common::*;
use serde_json::{json, Value};

fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").to_string()
}

fn annotate(w: &World) -> Value {
    json!({"tool": "ocr_annotate", "arguments": {
        "invoice": w.invoice.display().to_string(),
        "salary_sheet": w.salary.display().to_string()}})
}

/// The value of the sample `name{labels}` (labels as written by the encoder), 0 if absent.
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

/// Runs `script` (with `{"fetch": METRICS}` steps) and returns every line and the stderr text.
fn session(
    w: &World,
    release: &str,
    policy: &std::path::Path,
    addr: &str,
    script: &Value,
) -> Vec<Value> {
    session_with(w, release, policy, addr, script, &[])
}

fn session_with(
    w: &World,
    release: &str,
    policy: &std::path::Path,
    addr: &str,
    script: &Value,
    extra: &[&str],
) -> Vec<Value> {
    let n = script.as_array().map_or(0, Vec::len);
    let mut args = vec!["--metrics-listen", addr];
    args.extend_from_slice(extra);
    let run = AgentRun::start(
        w.path(),
        script,
        &run_cmd(policy, "germline", release, w.path(), &args),
    );
    let out: Vec<Value> = (0..n).map(|_| run.next()).collect();
    let stderr = run.stderr.clone();
    assert!(run.finish(), "the agent failed");
    let mut out = out;
    out.push(json!({"stderr": std::fs::read_to_string(stderr).unwrap_or_default()}));
    out
}

#[test]
fn scrape_shows_the_calls_verdicts_copies_and_bytes() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let sink = Sink::start(w.path(), "ocr");
    let policy = w.policy(sink.port, "");
    let addr = free_addr();
    let scrape = json!({"fetch": format!("http://{addr}/metrics")});
    let out = session(
        &w,
        "germline-office-mix",
        &policy,
        &addr,
        &json!([scrape, annotate(&w), scrape]),
    );
    let (before, call, after) = (
        out[0]["body"].as_str().unwrap_or_default(),
        &out[1],
        out[2]["body"].as_str().unwrap_or_default(),
    );
    assert_eq!(call["ok"], json!(true), "{call}");
    let r = r#"release="germline-office@1.2.0""#;
    let verdict = |t: &str, host: &str, v: &str| {
        sample(
            t,
            &format!(r#"germline_broker_requests_total{{{r},host="{host}",verdict="{v}"}}"#),
        )
    };
    // Before the call nothing moved; after it: one call, two copies, and the mix Trojan's
    // request from the copy holding the salary sheet is a placeholder and a trigger, while
    // the sink got exactly the delivered requests (copy 1's invoice, no canary).
    assert_eq!(
        sample(
            before,
            &format!(r#"germline_calls_total{{{r},outcome="ok"}}"#)
        ),
        0.0
    );
    assert_eq!(verdict(before, "ocr.example", "placeholder"), 0.0);
    assert_eq!(
        sample(
            after,
            &format!(r#"germline_calls_total{{{r},outcome="ok"}}"#)
        ),
        1.0,
        "{after}"
    );
    assert_eq!(
        sample(after, &format!("germline_copies_per_call_sum{{{r}}}")),
        2.0
    );
    assert_eq!(
        sample(after, &format!("germline_fork_seconds_count{{{r}}}")),
        2.0
    );
    assert_eq!(
        sample(
            after,
            &format!("germline_copy_lifetime_seconds_count{{{r}}}")
        ),
        2.0
    );
    assert_eq!(verdict(after, "ocr.example", "placeholder"), 1.0, "{after}");
    assert_eq!(verdict(after, "ocr.example", "trigger"), 1.0, "{after}");
    let bodies = sink.bodies();
    assert_eq!(
        verdict(after, "ocr.example", "delivered"),
        bodies.len() as f64
    );
    assert!(bodies.iter().all(|b| !b.contains(&w.canary_hr)));
    // Items delivered: the invoice to the ocr copy, invoice and salary sheet to the agent's.
    let len = |p: &std::path::Path| std::fs::metadata(p).expect("item").len() as f64;
    assert_eq!(
        sample(
            after,
            &format!("germline_item_bytes_delivered_total{{{r}}}")
        ),
        2.0 * len(&w.invoice) + len(&w.salary)
    );
}

#[test]
fn no_canary_in_metrics_or_logs_from_a_trojan_that_names_it() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let sink = Sink::start(w.path(), "ocr");
    let policy = w.policy(sink.port, "");
    let addr = free_addr();
    let scrape = json!({"fetch": format!("http://{addr}/metrics")});
    let out = session(
        &w,
        "germline-office-names",
        &policy,
        &addr,
        &json!([scrape, annotate(&w), scrape]),
    );
    let needle = w
        .canary_hr
        .trim_start_matches("CANARY-HR-")
        .to_ascii_lowercase();
    // The Trojan did see and use the canary: its error text (to the agent, who is cleared
    // for hr) carries it.
    let call = &out[1];
    assert_eq!(call["ok"], json!(false), "{call}");
    assert!(text(call).to_ascii_lowercase().contains(&needle), "{call}");
    let metrics = out[2]["body"].as_str().unwrap_or_default().to_string();
    // Its request to a made-up host was counted, under the fixed label.
    assert!(
        metrics.contains(r#"host="undeclared",verdict="denied"} "#),
        "{metrics}"
    );
    let audit =
        std::fs::read_to_string(w.path().join("audit-germline-germline-office-names.jsonl"))
            .unwrap_or_default();
    assert!(!audit.is_empty());
    let stderr = out[3]["stderr"].as_str().unwrap_or_default();
    for (what, t) in [
        ("metrics", &metrics),
        ("audit log", &audit),
        ("stderr", &stderr.to_string()),
    ] {
        assert!(
            !t.to_ascii_lowercase().contains(&needle),
            "the canary is in the {what}:\n{t}"
        );
    }
    assert!(sink
        .bodies()
        .iter()
        .all(|b| !b.to_ascii_lowercase().contains(&needle)));
}

/// A stand-in OTLP/HTTP collector (`http/json`): accepts `POST /v1/traces` and keeps the JSON
/// bodies.
struct Collector {
    addr: String,
    bodies: std::sync::Arc<std::sync::Mutex<Vec<Value>>>,
}

impl Collector {
    fn start() -> Collector {
        use std::io::{BufRead, BufReader, Read, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr").to_string();
        let bodies = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let keep = bodies.clone();
        l.set_nonblocking(false).expect("blocking");
        std::thread::spawn(move || {
            for conn in l.incoming().flatten() {
                let _ = conn.set_read_timeout(Some(std::time::Duration::from_secs(5)));
                let mut r = BufReader::new(&conn);
                let mut len = 0usize;
                let mut path = String::new();
                let mut line = String::new();
                while r.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
                    if path.is_empty() {
                        path = line
                            .split_whitespace()
                            .nth(1)
                            .unwrap_or_default()
                            .to_string();
                    }
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        len = v.trim().parse().unwrap_or(0);
                    }
                    if line == "\r\n" {
                        break;
                    }
                    line.clear();
                }
                let mut body = vec![0u8; len];
                if r.read_exact(&mut body).is_ok() && path == "/v1/traces" {
                    if let Ok(v) = serde_json::from_slice::<Value>(&body) {
                        keep.lock().expect("lock").push(v);
                    }
                }
                let _ = (&conn).write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}");
            }
        });
        Collector { addr, bodies }
    }

    /// The value of attribute `key` of every span named `name` (`Null` where it has none).
    fn attr_values(&self, name: &str, key: &str) -> Vec<Value> {
        let mut out = Vec::new();
        for b in self.bodies.lock().expect("lock").iter() {
            for rs in b["resourceSpans"].as_array().into_iter().flatten() {
                for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
                    for sp in ss["spans"].as_array().into_iter().flatten() {
                        if sp["name"] != json!(name) {
                            continue;
                        }
                        let a = sp["attributes"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .find(|a| a["key"] == json!(key));
                        out.push(a.map_or(Value::Null, |a| a["value"].clone()));
                    }
                }
            }
        }
        out
    }

    /// The string values of attribute `key` of every span named `name` that has it.
    fn attrs(&self, name: &str, key: &str) -> Vec<String> {
        self.attr_values(name, key)
            .into_iter()
            .filter(|v| !v.is_null())
            .map(|v| v["stringValue"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    /// The boolean attribute `key` of every span named `name` (absent or not a bool: false).
    fn bool_attrs(&self, name: &str, key: &str) -> Vec<bool> {
        self.attr_values(name, key)
            .iter()
            .map(|v| v["boolValue"].as_bool().unwrap_or(false))
            .collect()
    }

    /// Every span received so far, as (trace id, span id, parent id, name).
    fn spans(&self) -> Vec<(String, String, String, String)> {
        let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
        let mut out = Vec::new();
        for b in self.bodies.lock().expect("lock").iter() {
            for rs in b["resourceSpans"].as_array().into_iter().flatten() {
                for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
                    for sp in ss["spans"].as_array().into_iter().flatten() {
                        out.push((
                            s(&sp["traceId"]),
                            s(&sp["spanId"]),
                            s(&sp["parentSpanId"]),
                            s(&sp["name"]),
                        ));
                    }
                }
            }
        }
        out
    }
}

#[test]
fn one_trace_per_call_with_plan_copy_and_phase_spans() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let sink = Sink::start(w.path(), "ocr");
    let policy = w.policy(sink.port, "");
    let collector = Collector::start();
    let endpoint = format!("http://{}", collector.addr);
    // OTLP/JSON over plain http, as a user asks for it: the standard protocol variable (the
    // default is http/protobuf; tests/otlp.rs covers it, over TLS) and the flag's endpoint.
    let mut cmd = vec![
        "/usr/bin/env".to_string(),
        "OTEL_EXPORTER_OTLP_PROTOCOL=http/json".to_string(),
    ];
    cmd.extend(run_cmd(
        &policy,
        "germline",
        "germline-office",
        w.path(),
        &["--otlp-endpoint", &endpoint],
    ));
    let out = run_agent(
        w.path(),
        &json!([annotate(&w), {"tool": "summarize", "arguments": {"text": "a b c"}}]),
        &cmd,
    );
    assert!(out.iter().all(|r| r["ok"] == json!(true)), "{out:?}");
    // The exporter runs on its own thread: wait (bounded) for both traces.
    let mut spans = Vec::new();
    for _ in 0..100 {
        spans = collector.spans();
        if spans.iter().filter(|s| s.3 == "tools/call").count() == 2 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let roots: Vec<_> = spans.iter().filter(|s| s.3 == "tools/call").collect();
    assert_eq!(roots.len(), 2, "{spans:?}");
    assert_ne!(roots[0].0, roots[1].0, "one trace per call");
    // The first call (two Plan groups): plan, two copies, each with fork, checks (the copy's
    // and the germline's), confinement (the copy's own, broker endpoint, mounts), run.
    let t = &roots[0].0;
    let of = |name: &str| spans.iter().filter(|s| &s.0 == t && s.3 == name).count();
    assert_eq!(
        (
            of("plan"),
            of("copy"),
            of("fork"),
            of("checks"),
            of("checks.germline"),
            of("confinement.self"),
            of("confinement.broker"),
            of("confinement.mounts"),
            of("run")
        ),
        (1, 2, 2, 2, 2, 2, 2, 2, 2),
        "{spans:?}"
    );
    // Each copy's checks passed (a copy failing them fails the call).
    let checks = collector.attrs("checks", "germline.checks");
    assert_eq!(
        checks.len(),
        spans.iter().filter(|s| s.3 == "fork").count(),
        "one checks span per fork: {spans:?}"
    );
    assert!(checks.iter().all(|c| c == "passed"), "{checks:?}");
    // Without a pool every copy is forked in the call, so its checks are timed apart.
    let apart = collector.bool_attrs("checks", "germline.checks.timed_apart");
    assert!(
        !apart.is_empty() && apart.iter().all(|b| *b),
        "checks timed apart: {apart:?}"
    );
    // Copy 1 (the invoice) reached ocr.example; copy 2's identical request was replayed.
    assert_eq!(of("broker.request"), 2, "{spans:?}");
    let verdicts = collector.attrs("broker.request", "germline.verdict");
    assert!(
        verdicts.contains(&"delivered".to_string()) && verdicts.contains(&"replayed".to_string()),
        "{verdicts:?}"
    );
    // Every span hangs off the call's root or a copy of the same trace.
    let ids: Vec<&String> = spans.iter().filter(|s| &s.0 == t).map(|s| &s.1).collect();
    for s in spans.iter().filter(|s| &s.0 == t && s.3 != "tools/call") {
        assert!(ids.contains(&&s.2), "orphan span {s:?}");
    }
    // No item contents in any span.
    let all = serde_json::to_string(&*collector.bodies.lock().expect("lock")).expect("json");
    assert!(
        !all.contains(&w.canary_hr) && !all.contains("INVOICE"),
        "{all}"
    );
}

fn status(json: bool) -> String {
    let mut cmd = std::process::Command::new(germline());
    cmd.arg("status");
    if json {
        cmd.arg("--json");
    }
    let out = cmd.output().expect("germline status");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

#[test]
fn status_shows_a_running_session_and_forgets_it_when_it_ends() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let sink = Sink::start(w.path(), "ocr");
    let policy = w.policy(sink.port, "\n[limits]\ncopies_per_release = 4\n");
    let turn = w.path().join("turn");
    let run = AgentRun::start(
        w.path(),
        &json!([annotate(&w), {"wait_file": turn}]),
        &run_cmd(&policy, "germline", "germline-office", w.path(), &[]),
    );
    let first = run.next();
    assert_eq!(first["ok"], json!(true), "{first}");
    // `germline run` is the agent's child. Children it forked and that did not exec (the
    // germline's keeper) show the same command line, and after the kernel's pids wrap around
    // one may have the lower pid: the run is the one whose parent is none of them.
    let runs: Vec<i32> = descendants(run.pid())
        .into_iter()
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/cmdline"))
                .map(|c| c.split('\0').nth(1) == Some("run"))
                .unwrap_or(false)
        })
        .collect();
    let parent = |p: i32| -> Option<i32> {
        let s = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
        s.rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    let run_pid = *runs
        .iter()
        .find(|p| parent(**p).is_some_and(|pp| !runs.contains(&pp)))
        .expect("the germline run process");
    // The run's state file is written on a thread of its own after the call (engine::status):
    // right after the answer it may still tell of no call. Read until it tells of one.
    let mut rows: Vec<Value> = Vec::new();
    let counted = eventually(|| {
        rows = serde_json::from_str(&status(true)).expect("status json");
        rows.iter()
            .any(|r| r["pid"] == json!(run_pid) && r["calls"].as_u64() >= Some(1))
    });
    assert!(
        counted,
        "no state of run {run_pid} after its call: {rows:?}"
    );
    let mine: Vec<&Value> = rows.iter().filter(|r| r["pid"] == json!(run_pid)).collect();
    assert_eq!(mine.len(), 1, "{rows:?}");
    let r = mine[0];
    assert_eq!(r["release"], json!("germline-office@1.0.0"), "{r}");
    assert_eq!(
        (r["mode"].clone(), r["lifetime"].clone(), r["calls"].clone()),
        (json!("germline"), json!("session"), json!(1))
    );
    assert_eq!(r["outcomes"]["ok"], json!(1));
    assert_eq!(r["limits"]["copies_per_release"], json!(4));
    let verdicts = r["verdicts"].as_array().cloned().unwrap_or_default();
    assert!(
        verdicts
            .iter()
            .any(|v| v["host"] == json!("ocr.example") && v["verdict"] == json!("delivered")),
        "{verdicts:?}"
    );
    let human = status(false);
    assert!(
        human.contains(&format!(
            "germline-office@1.0.0 (pid {run_pid}, germline run)"
        )),
        "{human}"
    );
    std::fs::write(&turn, "").expect("turn");
    assert!(run.finish());
    let rows: Vec<Value> = serde_json::from_str(&status(true)).expect("status json");
    assert!(rows.iter().all(|r| r["pid"] != json!(run_pid)), "{rows:?}");
}

/// Dampening state per release: the mix Trojan's trigger is re-run after the first answer,
/// its verdict raises the release's penalty, and a scrape after the second call shows it (and
/// the release suppressed exactly when that call was refused for it). With the evidence layer
/// off, the same session leaves the penalty at zero and both calls run.
#[test]
fn dampening_state_per_release_is_scraped() {
    if !can_run() {
        return;
    }
    let r = r#"release="germline-office@1.2.0""#;
    for evidence in [true, false] {
        let w = World::new();
        let sink = Sink::start(w.path(), "ocr");
        let policy = w.policy(sink.port, "");
        let addr = free_addr();
        let scrape = json!({"fetch": format!("http://{addr}/metrics")});
        let extra: &[&str] = if evidence { &[] } else { &["--no-evidence"] };
        let out = session_with(
            &w,
            "germline-office-mix",
            &policy,
            &addr,
            &json!([annotate(&w), annotate(&w), scrape]),
            extra,
        );
        let body = out[2]["body"].as_str().unwrap_or_default();
        assert_eq!(out[0]["ok"], json!(true), "{}", out[0]);
        let penalty = sample(body, &format!("germline_dampening_penalty{{{r}}}"));
        let suppressed = sample(body, &format!("germline_release_suppressed{{{r}}}"));
        let refused = sample(
            body,
            &format!(r#"germline_calls_total{{{r},outcome="suppressed"}}"#),
        );
        if evidence {
            assert!(penalty > 0.0, "no penalty after a verified trigger: {body}");
            let why = out[1]["error"].as_str().unwrap_or_default();
            let was_refused = why.contains("suppressed by dampening");
            assert_eq!(suppressed, f64::from(u8::from(was_refused)), "{body}");
            assert_eq!(refused, suppressed, "{body}");
        } else {
            assert_eq!(out[1]["ok"], json!(true), "{}", out[1]);
            assert_eq!((penalty, suppressed, refused), (0.0, 0.0, 0.0), "{body}");
        }
    }
}
