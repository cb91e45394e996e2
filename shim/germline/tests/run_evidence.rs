//! The evidence layer through `germline run` with the real MCP client SDK as the agent and a
//! loopback sink as ocr.example (issue 10): twin inputs on vs off, probe replay's verdicts,
//! signed witness records verified offline, and dampening end to end.

mod run_common;

use std::collections::BTreeSet;
use std::path::Path;

use run_common::*;
use serde_json::{json, Value};

const RELEASE: &str = "germline-evidence";

fn call(w: &World, tool: &str) -> Value {
    json!({"tool": tool, "arguments": {
        "invoice": w.invoice.display().to_string(),
        "salary_sheet": w.salary.display().to_string()}})
}

/// `germline run` for the evidence fixture, with `env` set in its environment (the agent
/// SDK starts servers with a fixed environment of its own).
fn cmd(policy: &Path, dir: &Path, release: &str, env: &[&str], extra: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = ["/usr/bin/env".to_string()]
        .into_iter()
        .chain(env.iter().map(|s| s.to_string()))
        .collect();
    v.extend(run_cmd(policy, "germline", release, dir, extra));
    v
}

fn fresh_audit(dir: &Path, release: &str) {
    let _ = std::fs::remove_file(dir.join(format!("audit-germline-{release}.jsonl")));
}

/// Calls of the audit log that raised at least one trigger.
fn calls_with_triggers(log: &[Value]) -> usize {
    log.iter()
        .filter(|e| e["event"] == "trigger")
        .map(|e| e["call"].as_u64().unwrap_or(0))
        .collect::<BTreeSet<_>>()
        .len()
}

#[test]
fn twin_inputs_make_copies_agree_and_without_them_every_call_trips() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let sink = Sink::start(w.path(), "ocr");
    let policy = w.policy(sink.port, "");
    let mut s = call(&w, "stamp");
    s["repeat"] = json!(20);
    let mut seen = Vec::new();
    for twin in ["on", "off"] {
        sink.clear();
        fresh_audit(w.path(), RELEASE);
        let env = format!("GERMLINE_TWIN={twin}");
        let out = run_agent(
            w.path(),
            &json!([s]),
            &cmd(&policy, w.path(), RELEASE, &[&env], &[]),
        );
        assert_eq!(out.len(), 20);
        assert!(
            out.iter().all(|r| r["ok"] == json!(true)),
            "{twin}: {out:?}"
        );
        let log = audit(w.path(), "germline", RELEASE);
        let calls = log.iter().filter(|e| e["event"] == "call").count();
        // Every call's stamp reached ocr.example once, from the copy that serves it, and the
        // stamps differ from call to call (twin inputs are fresh per call, not a constant).
        let bodies = sink.bodies();
        let stamps: BTreeSet<&String> = bodies.iter().collect();
        assert!(bodies.iter().all(|b| b.contains("nonce")), "{bodies:?}");
        seen.push((
            twin,
            calls,
            calls_with_triggers(&log),
            bodies.len(),
            stamps.len(),
        ));
    }
    // The reference (twin inputs off): both copies read their own clocks and entropy, so the
    // agent's copy's request differs from the delivered one in every call.
    assert_eq!(
        seen,
        vec![("on", 20, 0, 20, 20), ("off", 20, 20, 20, 20)],
        "(twin, calls, calls with a trigger, delivered, distinct)"
    );
}
