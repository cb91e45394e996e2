//! Twin inputs for spawned Node copies through `germline run` (issue 28; docs/evidence.md,
//! "Twin inputs"): the real germline-evidence-node release (bundles/evidence-node, the
//! official TypeScript SDK, packed from npm) under the real MCP client SDK as the agent, with
//! a loopback sink as ocr.example. With twin inputs on, a flow-compliant tool that stamps its
//! requests with clocks and nonces makes its copies agree, and a Trojan's trigger re-runs to
//! the same stamps, so it verifies as an item witness; off (the reference), every call trips
//! and the same trigger is unverified nondeterminism. Reading /dev/urandom as a file stays
//! outside the twin inputs either way.

mod run_common;

use run_common::evidence::*;
use run_common::*;
use serde_json::{json, Value};

const RELEASE: &str = "germline-evidence-node";

/// Spawned copies, two kept ready (each call forms two groups).
const POOL: &[&str] = &["--pool", "2"];

#[test]
fn node_copies_with_twin_inputs_agree_and_without_them_every_call_trips() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let sink = Sink::start(w.path(), "ocr");
    let seen = stamp_twin_on_off(&w, &sink, RELEASE, 6, POOL);
    assert_eq!(
        seen,
        vec![("on", 6, 0, 6, 6), ("off", 6, 6, 6, 6)],
        "(twin, calls, calls with a trigger, delivered, distinct)"
    );
}

/// One `added` (a Trojan: a second stamped request when it sees the salary sheet), one
/// `jitter` (flow-compliant, but bytes from /dev/urandom read as a file) and one `stamp`, with
/// evidence on, twin inputs on and off: the verdicts of their witness records (`stamp` trips
/// only without twin inputs).
#[test]
fn a_node_trojans_trigger_verifies_as_an_item_witness_only_with_twin_inputs() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let sink = Sink::start(w.path(), "ocr");
    let policy = w.policy(sink.port, "");
    let invoice_only = json!({"tool": "stamp", "arguments": {
        "invoice": w.invoice.display().to_string()}});
    let mut got = Vec::new();
    for twin in ["on", "off"] {
        fresh_audit(w.path(), RELEASE);
        let evidence = w.path().join(format!("evidence-{twin}"));
        let ev = evidence.display().to_string();
        let mut args = vec!["--evidence", ev.as_str(), "--probe-tries", "2"];
        args.extend_from_slice(POOL);
        let out = run_agent(
            w.path(),
            // A last call of one group (the invoice alone: nothing to compare, no trigger), so
            // that the re-runs before it run before the agent ends the session (they would be
            // left pending: docs/evidence.md).
            &json!([
                call(&w, "added"),
                call(&w, "jitter"),
                call(&w, "stamp"),
                invoice_only
            ]),
            &cmd(
                &policy,
                w.path(),
                RELEASE,
                &[&format!("GERMLINE_TWIN={twin}")],
                &args,
            ),
        );
        assert!(out.iter().all(|r| r["ok"] == json!(true)), "{out:?}");
        // Re-runs deliver nothing: ocr.example got the invoice of each call once.
        let log = audit(w.path(), "germline", RELEASE);
        let delivered = log
            .iter()
            .filter(|e| e["event"] == "request" && e["verdict"] == "delivered")
            .count();
        assert_eq!(delivered, 4, "{log:?}");
        let list = witness_list(&evidence);
        got.push((twin, verdicts(&list)));
        if twin == "on" {
            // The record verifies offline: `germline witness verify` re-runs it with the
            // recorded twin inputs and reaches the same verdict.
            let rec =
                std::path::PathBuf::from(list["witnesses"][0]["path"].as_str().expect("a record"));
            let o = verify(&rec, &rec, RELEASE, &evidence);
            let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
            assert_eq!(
                (v["verdict"].clone(), v["agrees"].clone()),
                (json!("item_witness"), json!(true)),
                "{}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
    }
    let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    };
    assert_eq!(
        got,
        vec![
            (
                "on",
                pairs(&[
                    ("added", "item_witness"),
                    ("jitter", "unverified_nondeterminism")
                ])
            ),
            (
                "off",
                pairs(&[
                    ("added", "unverified_nondeterminism"),
                    ("jitter", "unverified_nondeterminism"),
                    ("stamp", "unverified_nondeterminism")
                ])
            ),
        ]
    );
}
