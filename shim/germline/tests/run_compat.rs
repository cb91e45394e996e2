//! Compatibility of `germline run` with the real MCP client SDK as the agent: the official
//! servers return what they return unprotected, and the paper's two workflows (Section VII-D)
//! behave as without germline, with no trigger.

mod run_common;

use run_common::*;
use serde_json::{json, Value};

/// Equal, or a failure naming the first call that differs (not 200 calls of output).
fn assert_same(what: &str, a: &[String], b: &[String]) {
    assert_eq!(a.len(), b.len(), "{what}: {} vs {} calls", a.len(), b.len());
    if let Some(i) = (0..a.len()).find(|&i| a[i] != b[i]) {
        panic!(
            "{what}: call {i} differs:\n germline: {:?}\n plain:    {:?}",
            a[i], b[i]
        );
    }
}

fn calls(out: &[Value]) -> Vec<String> {
    out.iter()
        .map(|r| format!("ok={} {}", r["ok"], text(r)))
        .collect()
}

/// mcp-server-time (two of the file's longest runs: split from fetch's so that the test
/// threads run them side by side).
#[test]
fn time_matches_the_unprotected_server_over_200_calls() {
    if !can_run() {
        return;
    }
    let w = World::new();
    // The same policy as fetch's (its docs.example pinned to a live site).
    let site = Sink::start_with(w.path(), "www", None);
    let policy = w.policy(site.port, "");
    let n = 200;
    let time_script = json!([
        {"tool": "get_current_time", "arguments": {"timezone": "Europe/Paris"}, "repeat": n},
        {"tool": "convert_time", "arguments": {"source_timezone": "UTC", "time": "09:30",
                                               "target_timezone": "America/New_York"}, "repeat": n},
    ]);
    let germ = run_agent(
        w.path(),
        &time_script,
        &run_cmd(&policy, "germline", "mcp-server-time", w.path(), &[]),
    );
    let py = agent_python().display().to_string();
    let plain = run_agent(
        w.path(),
        &time_script,
        &[
            py.clone(),
            "-m".into(),
            "mcp_server_time".into(),
            "--local-timezone".into(),
            "UTC".into(),
        ],
    );
    assert_eq!(germ.len(), 2 * n);
    assert_eq!(plain.len(), 2 * n);
    let g: Vec<String> = calls(&germ).iter().map(|s| without_clock(s)).collect();
    let p: Vec<String> = calls(&plain).iter().map(|s| without_clock(s)).collect();
    assert_same("mcp-server-time", &g, &p);
    assert!(g.iter().all(|s| s.starts_with("ok=true")));
    // convert_time has no clock in it: byte for byte the same.
    assert_same("convert_time", &calls(&germ[n..]), &calls(&plain[n..]));
}

#[test]
fn fetch_matches_the_unprotected_server_over_200_calls() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let www = w.path().join("www");
    std::fs::create_dir_all(&www).expect("www");
    std::fs::write(
        www.join("page.html"),
        "<html><head><title>Notes</title></head><body><h1>Release notes</h1><p>germline fetch target, served locally.</p><ul><li>one</li><li>two</li></ul></body></html>",
    )
    .expect("page");
    let site = Sink::start_with(w.path(), "www", Some(&www));
    let policy = w.policy(site.port, "");
    let n = 200;

    // fetch: the destination is the host of the `url` argument (A5). Unprotected, the server
    // fetches the site directly; under germline only through the broker, by its declared name.
    let fetch = |url: &str| json!([{"tool": "fetch", "arguments": {"url": url}, "repeat": n}]);
    let germ = run_agent(
        w.path(),
        &fetch("http://docs.example/page.html"),
        &run_cmd(&policy, "germline", "mcp-server-fetch", w.path(), &[]),
    );
    let direct = format!("http://127.0.0.1:{}/page.html", site.port);
    let plain = run_agent(
        w.path(),
        &fetch(&direct),
        // The same release, unprotected: its own rootfs, chrooted, host network. (The PyPI
        // install in the agent venv would use the host's Node.js readability, which the
        // release's rootfs does not have, and render pages differently.) Unprotected, the
        // server refuses loopback targets unless told otherwise.
        &[
            // Python must not write bytecode into the signed rootfs.
            "env".into(),
            "PYTHONDONTWRITEBYTECODE=1".into(),
            "chroot".into(),
            bundle("mcp-server-fetch")
                .join("rootfs")
                .display()
                .to_string(),
            "/usr/bin/python3".into(),
            "-m".into(),
            "mcp_server_fetch".into(),
            "--allow-private-ips".into(),
        ],
    );
    let g: Vec<String> = calls(&germ)
        .iter()
        .map(|s| s.replace("http://docs.example/page.html", "URL"))
        .collect();
    let p: Vec<String> = calls(&plain)
        .iter()
        .map(|s| s.replace(&direct, "URL"))
        .collect();
    assert_eq!(g.len(), n);
    assert_same("mcp-server-fetch", &g, &p);
    assert!(g[0].contains("Release notes"), "{}", g[0]);
    assert!(g.iter().all(|s| s.starts_with("ok=true")));
}

#[test]
fn notes_keep_their_notes_through_slots() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let sink = Sink::start(w.path(), "none");
    let policy = w.policy(
        sink.port,
        "\n[[argument]]\ntool = \"add_note\"\nname = \"text\"\nlabel = []\n",
    );
    let script = json!([
        {"tool": "add_note", "arguments": {"text": "buy milk"}},
        {"tool": "add_note", "arguments": {"text": "call Bob about the offsite"}},
        {"tool": "list_notes", "arguments": {}},
    ]);
    let out = run_agent(
        w.path(),
        &script,
        &run_cmd(&policy, "germline", "germline-notes", w.path(), &[]),
    );
    assert_eq!(text(&out[1]), "2 notes");
    assert_eq!(text(&out[2]), "- buy milk\n- call Bob about the offsite");
    // Each call ran in a fresh copy: the notes survived only through the slot.
    let log = audit(w.path(), "germline", "germline-notes");
    assert_eq!(log.iter().filter(|e| e["event"] == "slot_write").count(), 2);
    assert!(log.iter().all(|e| e["event"] != "trigger"));
}

#[test]
fn payslip_workflow_is_identical_to_the_plain_server_with_no_trigger() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let sink = Sink::start(w.path(), "ocr");
    let policy = w.policy(sink.port, "");
    let script = json!([{"tool": "payslip", "arguments": {
        "invoice": w.invoice.display().to_string(),
        "payslip": w.payslip.display().to_string()}, "repeat": 3}]);
    let mut results = Vec::new();
    let mut received = Vec::new();
    for mode in ["sig-pin", "germline"] {
        sink.clear();
        let out = run_agent(
            w.path(),
            &script,
            &run_cmd(&policy, mode, "germline-office", w.path(), &[]),
        );
        results.push(calls(&out));
        received.push(sink.bodies());
    }
    assert_eq!(results[0], results[1]);
    assert!(
        results[1][0].contains(&w.canary_hr),
        "the agent gets the payslip"
    );
    assert_eq!(
        received[0], received[1],
        "ocr.example received the same requests"
    );
    assert!(received[1].iter().all(|b| !b.contains(&w.canary_hr)));
    let log = audit(w.path(), "germline", "germline-office");
    assert!(log.iter().all(|e| e["event"] != "trigger"));
}

#[test]
fn every_mode_serves_the_same_answers() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let sink = Sink::start(w.path(), "ocr");
    let policy = w.policy(sink.port, "");
    let script = json!([
        {"tool": "convert_time", "arguments": {"source_timezone": "UTC", "time": "23:15",
                                               "target_timezone": "Asia/Kolkata"}, "repeat": 2}]);
    let mut answers = Vec::new();
    for mode in [
        "sig-pin",
        "sig-ifc",
        "confined-ifc",
        "fresh-ifc",
        "nosplit",
        "germline",
    ] {
        let out = run_agent(
            w.path(),
            &script,
            &run_cmd(&policy, mode, "mcp-server-time", w.path(), &[]),
        );
        answers.push((mode, calls(&out)));
    }
    for (mode, a) in &answers[1..] {
        assert_eq!(a, &answers[0].1, "{mode} differs from sig-pin");
    }
}
