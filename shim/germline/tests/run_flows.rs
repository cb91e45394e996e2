//! Declared flows and evidence that blames only the release (issue 25, items 6 and 7), through
//! `germline run --mode germline` with the official MCP client SDK as the agent and a loopback
//! sink as ocr.example. Fixture releases (bundles/forward): `germline-forward`, whose manifest
//! declares `ocr_pdf`'s flow `file -> ocr.example`, and `germline-forward-plain`, the same code
//! with no flow declared (the mechanism off: what 88bfd6b did to every release).

mod run_common;

use std::collections::BTreeSet;
use std::path::Path;

use run_common::*;
use serde_json::{json, Value};

const FLOWS: &str = "germline-forward";
const PLAIN: &str = "germline-forward-plain";
/// session::FLOW_REFUSED
const FLOW_REFUSED: i64 = -32003;
/// session::RUNTIME_FAILED (a suppressed release)
const RUNTIME_FAILED: i64 = -32001;

fn ready() -> bool {
    can_run() && {
        let built = bundle(FLOWS).exists() && bundle(PLAIN).exists();
        assert!(
            built || std::env::var_os("GERMLINE_REQUIRE_ROOT_TESTS").is_none(),
            "bundles/out/{FLOWS} and {PLAIN} missing: run bundles/build.sh {FLOWS} {PLAIN}"
        );
        built
    }
}

fn ocr(file: &Path) -> Value {
    json!({"tool": "ocr_pdf", "arguments": {"file": file.display().to_string()}})
}

fn notes(file: &Path, notes: &Path) -> Value {
    json!({"tool": "ocr_pdf_notes", "arguments": {
        "file": file.display().to_string(), "notes": notes.display().to_string()}})
}

fn egress(kind: &str) -> Value {
    json!({"tool": "egress", "arguments": {"kind": kind}})
}

fn evidence_args(ev: &Path) -> Vec<String> {
    vec![
        "--evidence".into(),
        ev.display().to_string(),
        "--probe-tries".into(),
        "2".into(),
    ]
}

fn session(w: &World, policy: &Path, release: &str, script: Value, extra: &[String]) -> Vec<Value> {
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    run_agent(
        w.path(),
        &script,
        &run_cmd(policy, "germline", release, w.path(), &extra),
    )
}

/// `germline witness list` of an evidence directory.
fn witness_list(evidence: &Path) -> Value {
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

/// (penalty, suppressed, last verdict) of the one release in the ledger; zero if it has none.
fn dampening(evidence: &Path) -> (f64, bool, String) {
    let list = witness_list(evidence);
    let Some(st) = list["dampening"]
        .as_object()
        .and_then(|m| m.values().next())
    else {
        return (0.0, false, String::new());
    };
    (
        st["penalty"].as_f64().unwrap_or(-1.0),
        st["suppressed"] == json!(true),
        st["last"].as_str().unwrap_or_default().to_string(),
    )
}

fn code(r: &Value) -> Option<i64> {
    r["code"].as_i64()
}

fn error(r: &Value) -> &str {
    r["error"].as_str().unwrap_or_default()
}

/// Item 6: many agent calls that hand the benign forwarding tool an hr file are each refused
/// with FLOW_REFUSED, naming the item, its label and the host; the release's penalty stays 0,
/// nothing is witnessed, nothing reaches the broker, and finance calls keep working, also
/// after a restart. The same tool without the declared flow (mechanism off) is suppressed by
/// one such call, and stays suppressed across a restart: the reproduction of item 6.
#[test]
fn a_benign_forwarding_tool_with_a_declared_flow_is_never_suppressed_by_agent_calls() {
    if !ready() {
        return;
    }
    let w = World::new();
    let sink = Sink::start(w.path(), "ocr");
    let policy = w.policy(sink.port, "");
    let ev = w.path().join("evidence-on");
    let mut hr = ocr(&w.salary);
    hr["repeat"] = json!(12);
    let out = session(
        &w,
        &policy,
        FLOWS,
        json!([hr, ocr(&w.invoice), ocr(&w.payslip), ocr(&w.invoice)]),
        &evidence_args(&ev),
    );
    assert_eq!(out.len(), 15, "{out:?}");
    for (i, r) in out.iter().enumerate() {
        if i == 12 || i == 14 {
            assert_eq!(r["ok"], json!(true), "call {i}: {r}");
            assert!(text(r).contains("ocr:"), "call {i}: {r}");
            continue;
        }
        let item = if i == 13 { &w.payslip } else { &w.salary };
        let e = error(r);
        assert_eq!(
            (r["ok"].clone(), code(r)),
            (json!(false), Some(FLOW_REFUSED)),
            "call {i}: {r}"
        );
        assert!(
            e.contains(&item.display().to_string())
                && e.contains("{hr}")
                && e.contains("ocr.example")
                && e.contains("{finance}"),
            "call {i}: {e}"
        );
    }
    // Only the two finance calls reached ocr.example, and no hr byte did.
    let bodies = sink.bodies();
    assert_eq!(bodies.len(), 2, "{bodies:?}");
    assert!(bodies.iter().all(|b| b.contains("INVOICE")), "{bodies:?}");
    assert!(!bodies.iter().any(|b| b.contains(&w.canary_hr)));
    // Nothing against the release: no trigger, no witness, no penalty, and the refused calls
    // never reached the broker (two calls planned).
    let log = audit(w.path(), "germline", FLOWS);
    assert_eq!(log.iter().filter(|e| e["event"] == "trigger").count(), 0);
    let calls = log.iter().filter(|e| e["event"] == "call").count();
    assert_eq!(calls, 2, "{log:?}");
    assert_eq!(witness_list(&ev)["witnesses"], json!([]));
    assert_eq!(dampening(&ev), (0.0, false, String::new()));
    // After a restart, finance calls work and an hr call is refused again.
    let out = session(
        &w,
        &policy,
        FLOWS,
        json!([ocr(&w.invoice), ocr(&w.salary), ocr(&w.invoice)]),
        &evidence_args(&ev),
    );
    let got: Vec<(bool, Option<i64>)> = out
        .iter()
        .map(|r| (r["ok"] == json!(true), code(r)))
        .collect();
    assert_eq!(
        got,
        [(true, None), (false, Some(FLOW_REFUSED)), (true, None)],
        "{out:?}"
    );
    assert_eq!(dampening(&ev).0, 0.0);

    // Mechanism off: the same code, no flow declared. One hr call is an item witness of a
    // release that declares determinism: penalty 2000, suppressed, and the next finance call
    // is refused, also after a restart.
    let ev_off = w.path().join("evidence-off");
    let out = session(
        &w,
        &policy,
        PLAIN,
        json!([ocr(&w.salary), ocr(&w.invoice)]),
        &evidence_args(&ev_off),
    );
    assert_eq!(out[0]["ok"], json!(true), "{out:?}");
    assert_eq!(code(&out[1]), Some(RUNTIME_FAILED), "{out:?}");
    assert!(
        error(&out[1]).contains("suppressed by dampening"),
        "{out:?}"
    );
    let (penalty, suppressed, last) = dampening(&ev_off);
    // (2000, decayed once by the refused attempt's admission)
    assert!(penalty > 1900.0 && suppressed, "{penalty} {suppressed}");
    assert_eq!(last, "item_witness");
    let out = session(
        &w,
        &policy,
        PLAIN,
        json!([ocr(&w.invoice)]),
        &evidence_args(&ev_off),
    );
    assert_eq!(code(&out[0]), Some(RUNTIME_FAILED), "{out:?}");
    assert!(!sink.bodies().iter().any(|b| b.contains(&w.canary_hr)));
}

/// What the release does not declare is still evidence: `ocr_pdf_notes` declares only its
/// `file` flow but also sends `notes`. An hr `file` is refused (declared flow); a finance file
/// with hr notes runs, trips, is an item witness, and the release is suppressed.
#[test]
fn a_trojan_whose_flow_is_undeclared_is_still_suppressed() {
    if !ready() {
        return;
    }
    let w = World::new();
    let sink = Sink::start(w.path(), "ocr");
    let policy = w.policy(sink.port, "");
    let ev = w.path().join("evidence");
    let out = session(
        &w,
        &policy,
        FLOWS,
        json!([
            notes(&w.salary, &w.invoice),
            notes(&w.invoice, &w.salary),
            ocr(&w.invoice)
        ]),
        &evidence_args(&ev),
    );
    let got: Vec<(bool, Option<i64>)> = out
        .iter()
        .map(|r| (r["ok"] == json!(true), code(r)))
        .collect();
    assert_eq!(
        got,
        [
            (false, Some(FLOW_REFUSED)),
            (true, None),
            (false, Some(RUNTIME_FAILED))
        ],
        "{out:?}"
    );
    assert!(
        error(&out[2]).contains("suppressed by dampening"),
        "{out:?}"
    );
    let list = witness_list(&ev);
    let v: Vec<(String, String)> = list["witnesses"]
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
        .unwrap_or_default();
    assert_eq!(
        v,
        [("ocr_pdf_notes".to_string(), "item_witness".to_string())],
        "{list}"
    );
    // Prevention held throughout: the hr notes never reached ocr.example.
    assert!(!sink.bodies().iter().any(|b| b.contains(&w.canary_hr)));
}

/// Item 7: each kind of request the broker denies (an undeclared host, an IP literal, a Host
/// header, a TLS SNI or an inner Host naming another host, a redirect to an undeclared host) is
/// a trigger with its reason and a denied request line in the audit log, with the names the
/// copy chose as digests only. The release-chosen ones are weighed (one unverified event per
/// call), a redirect is not; with `--no-evidence` they are recorded and not weighed.
#[test]
fn broker_denials_are_triggers_with_their_reason_and_weighed_evidence() {
    if !ready() {
        return;
    }
    let w = World::new();
    let sink = Sink::start_args(
        w.path(),
        "ocr",
        &[
            "--redirect".into(),
            "/redirect=http://elsewhere.example/landing".into(),
        ],
    );
    // `kind` is public: one group serves the agent and ocr.example, and delivers.
    let policy = w.policy(
        sink.port,
        "[[argument]]\ntool = \"egress\"\nname = \"kind\"\nlabel = []\n",
    );
    let kinds = [
        ("undeclared", "undeclared_host"),
        ("ip_literal", "ip_literal"),
        ("host_mismatch", "host_mismatch"),
        ("sni_mismatch", "sni_mismatch"),
        ("inner_host", "inner_host_mismatch"),
        ("redirect", "redirect"),
    ];
    let ev = w.path().join("evidence");
    let script: Vec<Value> = kinds.iter().map(|(k, _)| egress(k)).collect();
    let out = session(&w, &policy, FLOWS, json!(script), &evidence_args(&ev));
    assert!(out.iter().all(|r| r["ok"] == json!(true)), "{out:?}");
    let log = audit(w.path(), "germline", FLOWS);
    let calls: Vec<u64> = log
        .iter()
        .filter(|e| e["event"] == "call" && e["replay"] == json!(false))
        .filter_map(|e| e["call"].as_u64())
        .collect();
    assert_eq!(calls.len(), kinds.len(), "{log:?}");
    for (call, (kind, reason)) in calls.iter().zip(kinds) {
        let of_call = |event: &str| -> BTreeSet<String> {
            log.iter()
                .filter(|e| e["event"] == event && e["call"] == json!(call))
                .filter_map(|e| e["kind"]["denied"]["reason"].as_str().map(str::to_string))
                .collect()
        };
        assert_eq!(
            of_call("trigger"),
            BTreeSet::from([reason.to_string()]),
            "{kind}: {out:?}\n{:?}",
            log.iter()
                .filter(|e| e["call"] == json!(call))
                .collect::<Vec<_>>()
        );
        let denied: BTreeSet<String> = log
            .iter()
            .filter(|e| e["call"] == json!(call) && e["verdict"] == "denied")
            .filter_map(|e| e["reason"].as_str().map(str::to_string))
            .collect();
        assert_eq!(denied, BTreeSet::from([reason.to_string()]), "{kind}");
    }
    let text = std::fs::read_to_string(w.path().join(format!("audit-germline-{FLOWS}.jsonl")))
        .expect("audit");
    for name in [
        "exfil.example",
        "203.0.113.7",
        "other.example",
        "elsewhere.example",
    ] {
        assert!(!text.contains(name), "{name} in the audit log");
    }
    // Weighed: five release-chosen denials, one unverified event each; no re-run, no record.
    let (penalty, suppressed, last) = dampening(&ev);
    assert!(
        penalty > 4.0 * 250.0 && penalty < 5.0 * 250.0 + 1.0 && !suppressed,
        "{penalty}"
    );
    assert_eq!(last, "broker_denial");
    assert_eq!(witness_list(&ev)["witnesses"], json!([]));
    // A redirect is the destination's choice: recorded, never weighed.
    let ev2 = w.path().join("evidence-redirect");
    let mut r = egress("redirect");
    r["repeat"] = json!(3);
    let out = session(&w, &policy, FLOWS, json!([r]), &evidence_args(&ev2));
    assert!(out.iter().all(|r| r["ok"] == json!(true)), "{out:?}");
    assert_eq!(dampening(&ev2).0, 0.0);
    // Evidence off: still recorded as triggers, nothing weighed (no ledger written).
    let ev3 = w.path().join("evidence-unused");
    let before = audit(w.path(), "germline", FLOWS)
        .iter()
        .filter(|e| e["event"] == "trigger")
        .count();
    let out = session(
        &w,
        &policy,
        FLOWS,
        json!([egress("undeclared")]),
        &["--no-evidence".into()],
    );
    assert!(out.iter().all(|r| r["ok"] == json!(true)), "{out:?}");
    let after = audit(w.path(), "germline", FLOWS)
        .iter()
        .filter(|e| e["event"] == "trigger")
        .count();
    assert_eq!(after, before + 1);
    assert!(!ev3.exists());
}
