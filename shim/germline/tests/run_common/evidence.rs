//! Shared parts of the evidence tests (run_evidence.rs for the Python fixture,
//! run_evidence_node.rs for the Node one): the fixtures' calls, `germline run` with an
//! environment, the audit's triggers, `germline witness list|verify`, and the twin-inputs
//! on/off run both fixtures go through.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::{json, Value};

use super::*;

/// A call of a fixture tool on the world's invoice (finance) and salary sheet (hr).
pub fn call(w: &World, tool: &str) -> Value {
    json!({"tool": tool, "arguments": {
        "invoice": w.invoice.display().to_string(),
        "salary_sheet": w.salary.display().to_string()}})
}

/// `germline run` for an evidence fixture, with `env` set in its environment (the agent
/// SDK starts servers with a fixed environment of its own).
pub fn cmd(policy: &Path, dir: &Path, release: &str, env: &[&str], extra: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = ["/usr/bin/env".to_string()]
        .into_iter()
        .chain(env.iter().map(|s| s.to_string()))
        .collect();
    v.extend(run_cmd(policy, "germline", release, dir, extra));
    v
}

pub fn fresh_audit(dir: &Path, release: &str) {
    let _ = std::fs::remove_file(dir.join(format!("audit-germline-{release}.jsonl")));
}

/// Calls of the audit log that raised at least one trigger.
pub fn calls_with_triggers(log: &[Value]) -> usize {
    log.iter()
        .filter(|e| e["event"] == "trigger")
        .map(|e| e["call"].as_u64().unwrap_or(0))
        .collect::<BTreeSet<_>>()
        .len()
}

/// `germline witness list` of an evidence directory.
pub fn witness_list(evidence: &Path) -> Value {
    let out = std::process::Command::new(germline())
        .args(["witness", "list", "--json", "--evidence"])
        .arg(evidence)
        .output()
        .expect("germline witness list");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("list JSON")
}

/// `germline witness verify` of `rec` (its items beside `items_of`) in a process of its own.
pub fn verify(rec: &Path, items_of: &Path, release: &str, evidence: &Path) -> std::process::Output {
    std::process::Command::new(germline())
        .args(["witness", "verify", "--json"])
        .arg(rec)
        .arg("--release")
        .arg(bundle(release))
        .arg("--key")
        .arg(key())
        .arg("--witness-key")
        .arg(evidence.join("keys/deployment.pub"))
        .arg("--items")
        .arg(items_of.with_extension("items"))
        .output()
        .expect("germline witness verify")
}

/// (tool, verdict) of every record, in the order they were written.
pub fn verdicts(list: &Value) -> Vec<(String, String)> {
    list["witnesses"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|r| {
                    (
                        r["tool"].as_str().unwrap_or("?").to_string(),
                        r["verdict"].as_str().unwrap_or("?").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `n` calls of `release`'s `stamp` (the invoice stamped with clocks and nonces, sent to
/// ocr.example) with twin inputs on (evidence on) and off (the reference, evidence off: its
/// triggers would all be re-run and dampened), each in a `germline run` of its own with
/// `extra` arguments. For each: (twin, calls, calls with a trigger, requests delivered,
/// distinct bodies). With twin inputs on, no witness record is written.
pub fn stamp_twin_on_off(
    w: &World,
    sink: &Sink,
    release: &str,
    n: usize,
    extra: &[&str],
) -> Vec<(&'static str, usize, usize, usize, usize)> {
    let policy = w.policy(sink.port, "");
    let mut s = call(w, "stamp");
    s["repeat"] = json!(n);
    let mut seen = Vec::new();
    for twin in ["on", "off"] {
        sink.clear();
        fresh_audit(w.path(), release);
        let env = format!("GERMLINE_TWIN={twin}");
        let evidence = w.path().join(format!("evidence-{twin}"));
        let ev = evidence.display().to_string();
        let mut args: Vec<&str> = if twin == "on" {
            vec!["--evidence", &ev, "--probe-tries", "2"]
        } else {
            vec!["--no-evidence"]
        };
        args.extend_from_slice(extra);
        let out = run_agent(
            w.path(),
            &json!([s]),
            &cmd(&policy, w.path(), release, &[&env], &args),
        );
        if twin == "on" {
            // No trigger, so no witness record and no dampening event.
            assert_eq!(verdicts(&witness_list(&evidence)), vec![]);
        }
        assert_eq!(out.len(), n);
        assert!(
            out.iter().all(|r| r["ok"] == json!(true)),
            "{twin}: {out:?}"
        );
        let log = audit(w.path(), "germline", release);
        let calls = log
            .iter()
            .filter(|e| e["event"] == "call" && e["replay"] == json!(false))
            .count();
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
    seen
}
