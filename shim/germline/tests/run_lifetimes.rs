//! Germline lifetimes (policy `[lifetimes]`, docs/operations.md) with the real MCP client SDK
//! as the agent: each lifetime answers mcp-server-time's compatibility calls as the
//! unprotected server does; `single-shot` starts a fresh germline per call, `session` keeps
//! one, and neither leaves a process behind when the session ends. `long-lived` is served by
//! `germline serve` and refused by `germline run`.

mod run_common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use run_common::*;
use serde_json::{json, Value};

fn current() -> Value {
    json!({"tool": "get_current_time", "arguments": {"timezone": "Europe/Paris"}})
}

fn convert() -> Value {
    json!({"tool": "convert_time", "arguments": {"source_timezone": "UTC", "time": "09:30",
                                                "target_timezone": "America/New_York"}})
}

/// A call's text with mcp-server-time's clock fields masked.
fn masked(r: &Value) -> String {
    let t = text(r);
    let mut out = format!("ok={} ", r["ok"]);
    for line in t.lines() {
        if line.trim_start().starts_with("\"datetime\"") {
            out.push_str("<clock>\n");
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

fn plain(w: &World) -> Vec<String> {
    let py = agent_python().display().to_string();
    run_agent(
        w.path(),
        &json!([current(), convert()]),
        &[
            py,
            "-m".into(),
            "mcp_server_time".into(),
            "--local-timezone".into(),
            "UTC".into(),
        ],
    )
    .iter()
    .map(masked)
    .collect()
}

/// One `germline run` session of `lifetime`: calls, a process snapshot after each pair.
fn session(w: &World, lifetime: &str) -> (Vec<String>, Vec<i32>, Vec<i32>) {
    let policy = w.policy(
        9,
        &format!("\n[lifetimes]\n\"mcp-server-time\" = \"{lifetime}\"\n"),
    );
    let (a, b) = (
        w.path().join(format!("{lifetime}-a")),
        w.path().join(format!("{lifetime}-b")),
    );
    let script = json!([current(), convert(), {"wait_file": a}, current(), convert(),
                        {"wait_file": b}]);
    let run = AgentRun::start(
        w.path(),
        &script,
        &run_cmd(&policy, "germline", "mcp-server-time", w.path(), &[]),
    );
    let mut out = vec![run.next(), run.next()];
    // The idle work after a call (a fresh single-shot germline) runs as soon as the answer
    // is out; give it time to finish before the snapshot.
    std::thread::sleep(Duration::from_secs(3));
    let first = descendants(run.pid());
    std::fs::write(&a, "").expect("turn a");
    out.push(run.next());
    out.push(run.next());
    std::thread::sleep(Duration::from_secs(3));
    let second = descendants(run.pid());
    std::fs::write(&b, "").expect("turn b");
    assert!(run.finish(), "the agent failed");
    (out.iter().map(masked).collect(), first, second)
}

#[test]
fn single_shot_and_session_answer_as_the_server_and_leave_nothing() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let reference = plain(&w);
    let mut seen = Vec::new();
    for lifetime in ["single-shot", "session"] {
        let (calls, first, second) = session(&w, lifetime);
        assert_eq!(calls[..2], reference[..], "{lifetime}");
        assert_eq!(calls[2..], reference[..], "{lifetime}");
        assert!(!first.is_empty() && !second.is_empty());
        // After the session: nothing it started is left.
        for p in first.iter().chain(&second) {
            assert!(
                wait_gone(*p),
                "{lifetime}: process {p} outlived the session"
            );
        }
        seen.push((lifetime, first == second));
    }
    // single-shot: the germline of the first calls is gone and a fresh one runs; session:
    // the same processes serve every call.
    assert_eq!(seen, vec![("single-shot", false), ("session", true)]);
}

#[test]
fn long_lived_is_served_by_germline_serve_and_refused_by_run() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let policy = w.policy(9, "\n[lifetimes]\n\"mcp-server-time\" = \"long-lived\"\n");
    let cmd = run_cmd(&policy, "germline", "mcp-server-time", w.path(), &[]);
    let out = Command::new(&cmd[0])
        .args(&cmd[1..])
        .stdin(Stdio::null())
        .output()
        .expect("germline run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("long-lived") && err.contains("germline serve"),
        "{err}"
    );

    let metrics = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").to_string()
    };
    let mut serve = Command::new(germline())
        .args(["serve", "--metrics-listen", metrics.as_str(), "--policy"])
        .arg(&policy)
        .arg("--key")
        .arg(key())
        .args(["--listen", "127.0.0.1:0", "--no-auth", "--state-dir"])
        .arg(w.path().join("serve-state"))
        .arg(bundle("mcp-server-time"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("germline serve");
    let err = serve.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut url = None;
    while url.is_none() {
        let line = rx
            .recv_timeout(Duration::from_secs(120))
            .expect("germline serve came up");
        if let Some(rest) = line.strip_prefix("germline serve: http://") {
            url = rest
                .split_whitespace()
                .next()
                .map(|u| format!("http://{u}"));
        }
    }
    let url = url.expect("url");
    // Two agent sessions, one after the other, on the one long-lived germline.
    let mut firsts = Vec::new();
    for _ in 0..2 {
        let out = Command::new(agent_python())
            .arg(root().join("tests/run/serve_client.py"))
            .args([url.as_str(), "-", "2"])
            .output()
            .expect("serve client");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).expect("json");
        firsts.push(
            v["first"]["content"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        );
    }
    // The serve process's metrics count the four calls of both sessions on one germline.
    let text = {
        use std::io::{Read, Write};
        let mut c = std::net::TcpStream::connect(&metrics).expect("metrics");
        c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .expect("write");
        let mut t = String::new();
        c.read_to_string(&mut t).expect("read");
        t
    };
    assert!(
        text.lines().any(|l| l.starts_with("germline_calls_total{")
            && l.contains("outcome=\"ok\"")
            && l.ends_with(" 4")),
        "{text}"
    );
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(serve.id() as i32, libc::SIGTERM) };
    let status = serve.wait().expect("serve ended");
    assert!(status.success(), "{status}");
    for f in &firsts {
        assert!(f.contains("\"timezone\": \"UTC\""), "{f}");
    }
}
