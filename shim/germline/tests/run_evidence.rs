//! The evidence layer through `germline run` with the real MCP client SDK as the agent and a
//! loopback sink as ocr.example (issue 10): twin inputs on vs off, probe replay's verdicts,
//! signed witness records verified offline, and dampening end to end.

mod run_common;

use std::path::Path;

use run_common::evidence::*;
use run_common::*;
use serde_json::{json, Value};

const RELEASE: &str = "germline-evidence";

#[test]
fn twin_inputs_make_copies_agree_and_without_them_every_call_trips() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let sink = Sink::start(w.path(), "ocr");
    let seen = stamp_twin_on_off(&w, &sink, RELEASE, 20, &[]);
    // The reference (twin inputs off): both copies read their own clocks and entropy, so the
    // agent's copy's request differs from the delivered one in every call.
    assert_eq!(
        seen,
        vec![("on", 20, 0, 20, 20), ("off", 20, 20, 20, 20)],
        "(twin, calls, calls with a trigger, delivered, distinct)"
    );
}

#[test]
fn probe_replay_tells_item_witnesses_from_state_divergence_and_nondeterminism() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let sink = Sink::start(w.path(), "ocr");
    let policy = w.policy(sink.port, "");
    let evidence = w.path().join("evidence");
    let ev = evidence.display().to_string();
    let invoice_only = json!({"tool": "count", "arguments": {
        "invoice": w.invoice.display().to_string()}});
    // count: the first call forms one copy (horizon {finance}) and counts 1 there; the second
    // call's copies start from different counters (their horizons differ): one trigger.
    let script = json!([
        invoice_only,
        call(&w, "count"),
        call(&w, "added"),
        call(&w, "omitted"),
        call(&w, "duplicated"),
        call(&w, "reordered"),
        call(&w, "jitter"),
        call(&w, "stamp"),
    ]);
    fresh_audit(w.path(), RELEASE);
    let out = run_agent(
        w.path(),
        &script,
        &cmd(
            &policy,
            w.path(),
            RELEASE,
            &[],
            &["--evidence", &ev, "--probe-tries", "3"],
        ),
    );
    assert!(out.iter().all(|r| r["ok"] == json!(true)), "{out:?}");
    let log = audit(w.path(), "germline", RELEASE);
    let online: Vec<&Value> = log
        .iter()
        .filter(|e| e["event"] == "call" && e["replay"] == json!(false))
        .collect();
    assert_eq!(online.len(), 8);
    // Re-runs deliver nothing: every delivered request is an online one.
    let delivered_in_replays = log
        .iter()
        .filter(|e| e["event"] == "request" && e["verdict"] == "delivered")
        .filter(|e| {
            log.iter().any(|c| {
                c["event"] == "call" && c["call"] == e["call"] && c["replay"] == json!(true)
            })
        })
        .count();
    assert_eq!(delivered_in_replays, 0);
    let list = witness_list(&evidence);
    let v = verdicts(&list);
    let expect: Vec<(String, String)> = [
        ("count", "state_or_response_divergence"),
        ("added", "item_witness"),
        ("omitted", "item_witness"),
        ("duplicated", "item_witness"),
        ("reordered", "item_witness"),
        ("jitter", "unverified_nondeterminism"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(v, expect, "{list}");
    // The state divergence verifies offline too (the probe gets the group's slot snapshot).
    let count = std::path::PathBuf::from(list["witnesses"][0]["path"].as_str().expect("path"));
    let o = verify(&count, &count, RELEASE, &evidence);
    let got: Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
    assert_eq!(
        (got["verdict"].clone(), got["agrees"].clone()),
        (json!("state_or_response_divergence"), json!(true)),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // stamp (flow-compliant, twin inputs on) raised no trigger, so it left no record.
    // The ledger: six unverified-weight events (the release does not declare determinism).
    let rel = list["dampening"].as_object().expect("dampening");
    assert_eq!(rel.len(), 1, "{list}");
    let st = rel.values().next().expect("one release");
    assert_eq!(st["suppressed"], json!(false), "{st}");
    assert_eq!(st["admitted"], json!(8), "{st}");
}

#[test]
fn always_diverging_release_is_suppressed_after_9_calls_and_usable_after_76_more_attempts() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let sink = Sink::start(w.path(), "ocr");
    let policy = w.policy(sink.port, "");
    let ev = w.path().join("evidence").display().to_string();
    let mut s = call(&w, "jitter");
    s["repeat"] = json!(9 + 76 + 1);
    let out = run_agent(
        w.path(),
        &json!([s]),
        &cmd(
            &policy,
            w.path(),
            RELEASE,
            &[],
            &["--evidence", &ev, "--probe-tries", "2"],
        ),
    );
    let ok: Vec<bool> = out.iter().map(|r| r["ok"] == json!(true)).collect();
    let first_refused = ok.iter().position(|o| !o);
    let refused = ok.iter().filter(|o| !**o).count();
    assert_eq!(
        (ok.len(), first_refused, refused, ok.last().copied()),
        (86, Some(9), 76, Some(true)),
        "{ok:?}"
    );
    let why = out[9]["error"].as_str().unwrap_or_default();
    assert!(
        why.contains("suppressed by dampening") && why.contains("unverified nondeterminism"),
        "{why}"
    );
    // Refused calls never reach a copy: nothing was sent for them.
    assert_eq!(sink.bodies().len(), 10);
}

#[test]
fn declared_release_witness_suppresses_at_once_and_verifies_offline_but_not_altered() {
    if !can_run() {
        return;
    }
    let release = "germline-evidence-det";
    let w = World::new();
    let sink = Sink::start(w.path(), "ocr");
    let policy = w.policy(sink.port, "");
    let evidence = w.path().join("evidence");
    let ev = evidence.display().to_string();
    let out = run_agent(
        w.path(),
        &json!([call(&w, "added"), call(&w, "stamp")]),
        &cmd(
            &policy,
            w.path(),
            release,
            &[],
            &["--evidence", &ev, "--probe-tries", "3"],
        ),
    );
    assert_eq!(out[0]["ok"], json!(true), "{}", out[0]);
    assert_eq!(out[1]["ok"], json!(false), "{}", out[1]);
    let why = out[1]["error"].as_str().unwrap_or_default();
    assert!(
        why.contains("suppressed") && why.contains("item witness"),
        "{why}"
    );
    let list = witness_list(&evidence);
    assert_eq!(
        verdicts(&list),
        vec![("added".to_string(), "item_witness".to_string())]
    );
    let record = std::path::PathBuf::from(list["witnesses"][0]["path"].as_str().expect("path"));
    let verify = |rec: &Path| verify(rec, &record, release, &evidence);
    let o = verify(&record);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|_| {
        panic!("verify: {}", String::from_utf8_lossy(&o.stderr));
    });
    assert!(
        o.status.success(),
        "{v} {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(
        (v["verdict"].clone(), v["agrees"].clone()),
        (json!("item_witness"), json!(true)),
        "{v}"
    );
    // One byte changed, in the record and in the signature: refused before any re-run.
    let bytes = std::fs::read(&record).expect("record");
    let sig_at = bytes.iter().position(|&b| b == b'\n').expect("two lines") + 5;
    let digit_at = bytes
        .windows(12)
        .position(|x| x == b"\"twin_seed\":")
        .expect("twin_seed")
        + 12;
    for at in [digit_at, sig_at] {
        let mut b = bytes.clone();
        b[at] = if b[at] == b'1' { b'2' } else { b'1' };
        let altered = w.path().join("altered.json");
        std::fs::write(&altered, &b).expect("write");
        let o = verify(&altered);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "byte {at}: {err}");
        assert!(err.contains("refused"), "byte {at}: {err}");
    }
}

#[test]
fn noise_trojans_disclose_nothing_and_every_trigger_verifies_as_an_item_witness() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let sink = Sink::start(w.path(), "ocr");
    // Dampening out of the way: this test counts verdicts over 20 calls.
    let policy = w.policy(sink.port, "\n[dampening]\nsuppress_at = 1e12\n");
    let evidence = w.path().join("evidence");
    let ev = evidence.display().to_string();
    let tools = ["noise_urandom", "noise_perf", "noise_clock"];
    let script: Vec<Value> = (0..20).map(|i| call(&w, tools[i % 3])).collect();
    fresh_audit(w.path(), RELEASE);
    let server = cmd(
        &policy,
        w.path(),
        RELEASE,
        &[],
        &["--evidence", &ev, "--probe-tries", "2"],
    );
    let out = run_agent(w.path(), &json!(script), &server);
    assert!(out.iter().all(|r| r["ok"] == json!(true)), "{out:?}");
    // The SDK kills its server 2-4 s after closing stdin: the last call's re-runs may still be
    // pending then (on disk, never lost); the next session of the release settles them.
    // Every call tripped (the audit log's record of each call), before its evidence is counted:
    // a missing witness then tells a lost job from a call that did not trip.
    let log = audit(w.path(), "germline", RELEASE);
    let tripped: Vec<&Value> = log
        .iter()
        .filter(|e| e["event"] == "trigger")
        .map(|e| &e["call"])
        .collect();
    assert_eq!(
        calls_with_triggers(&log),
        20,
        "calls that tripped: {tripped:?}"
    );
    let list = witness_list(&evidence);
    let pending = list["pending"].as_array().map_or(0, Vec::len);
    assert_eq!(verdicts(&list).len() + pending, 20, "{list}");
    settle_pending(&server);
    assert_eq!(witness_list(&evidence)["pending"], json!([]));
    // Only copy 1's requests (invoice only) were delivered, one per call.
    let bodies = sink.bodies();
    assert_eq!(bodies.len(), 20);
    assert!(
        bodies
            .iter()
            .all(|b| b.contains("INVOICE") && !b.contains(&w.canary_hr) && !b.contains("91234")),
        "{bodies:?}"
    );
    let v = verdicts(&witness_list(&evidence));
    let expect: Vec<(String, String)> = (0..20)
        .map(|i| (tools[i % 3].to_string(), "item_witness".to_string()))
        .collect();
    assert_eq!(v, expect);
}

/// (tool, destination, verdict) of one record as `germline witness verify` found it.
type Verified = (String, String, String);

/// The corpus harness's Python (tests/security: the official MCP SDK, world, sinks, oracle).
fn corpus_python() -> std::path::PathBuf {
    std::path::PathBuf::from(
        std::env::var("GERMLINE_CORPUS_VENV")
            .unwrap_or_else(|_| "/var/tmp/germline-venv-corpus".into()),
    )
    .join("bin/python")
}

/// The matrix's scripted documents session for each corpus `case`, with the evidence layer on
/// (`--probe-tries 2`) or off (`--no-evidence`), and copies under a reaper or not (the
/// policy's `[copies] reaper`): one JSON line per case from tests/security/evidence_sessions.py.
fn evidence_sessions(out: &Path, cases: &[&str], on: bool, reaper: bool) -> Vec<Value> {
    let mut cmd = std::process::Command::new(corpus_python());
    cmd.arg(root().join("tests/security/evidence_sessions.py"))
        .arg("--germline")
        .arg(germline())
        .arg("--key")
        .arg(key())
        .arg("--corpus")
        .arg(root().join("bundles/out/corpus"))
        .arg("--out")
        .arg(out)
        .args(["--probe-tries", "2"])
        .args(["--reaper", if reaper { "on" } else { "off" }]);
    if !on {
        cmd.arg("--no-evidence");
    }
    let o = cmd.args(cases).output().expect("evidence_sessions.py");
    assert!(
        o.status.success(),
        "evidence_sessions.py: {}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Paper Section VII-E (Table VI's first row) with this repository's corpus: the matrix's
/// scripted documents session under `pool`, `launder`, `evasive` and `capsule`, copies under a
/// reaper (the tool is PID 2) and with the broker's drawn proxy port. As in the paper, `pool`
/// and `evasive` each raise one trigger that verifies as an item witness and `capsule` one that
/// verifies as a state divergence (a copy reads only its slot's snapshot); `launder` raises
/// none (why: at `expect` below, and docs/evidence.md). Each trigger is verified twice: by
/// probe replay right after the call, and by `germline witness verify` on the stored, signed
/// record in a process of its own. With the layer off the same sessions raise the same
/// triggers and leave no record; neither discloses. With the reaper off, `evasive` recognises
/// every copy as one (PID 1) and raises nothing.
#[test]
fn matrix_triggers_verify_offline_pool_evasive_item_witnesses_capsule_state_launder_none() {
    if !can_run() {
        return;
    }
    let corpus = root().join("bundles/out/corpus");
    assert!(
        corpus_python().exists() && corpus.join("docs-capsule/bundle").is_dir(),
        "the corpus and its harness are not set up: {} (scripts/setup.d/50-corpus.sh)",
        corpus.display()
    );
    let cases = ["docs-pool", "docs-launder", "docs-evasive", "docs-capsule"];
    let tmp = tempfile::tempdir().expect("tempdir");
    let on = evidence_sessions(&tmp.path().join("on"), &cases, true, true);
    let off = evidence_sessions(&tmp.path().join("off"), &cases, false, true);
    assert_eq!((on.len(), off.len()), (cases.len(), cases.len()));
    let mut seen = Vec::new();
    for (r, r_off) in on.iter().zip(&off) {
        let case = r["case"].as_str().unwrap_or("?").to_string();
        // Prevention first: nothing disclosed either way, and the session ran to its end.
        for x in [r, r_off] {
            assert_eq!(x["error"], json!(""), "{case}: {x}");
            assert_eq!(x["disclosures"], json!([]), "{case} disclosed: {x}");
        }
        let triggers = |x: &Value| x["triggers"].as_array().map_or(0, Vec::len);
        let records = r["witnesses"]["witnesses"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        // Off: the tripwire fires the same, but nothing is re-run or recorded.
        assert_eq!(triggers(r_off), triggers(r), "{case}: {r_off}");
        assert_eq!(
            r_off["witnesses"]["witnesses"],
            json!([]),
            "{case}: {r_off}"
        );
        assert_eq!(r_off["verdicts"], json!([]), "{case}: {r_off}");
        assert!(
            !Path::new(r_off["evidence"].as_str().unwrap_or("/")).exists(),
            "{case}: --no-evidence made an evidence directory"
        );
        // On: one record per trigger, each verifying offline with its recorded verdict.
        assert_eq!(records.len(), triggers(r), "{case}: {r}");
        let evidence = std::path::PathBuf::from(r["evidence"].as_str().expect("evidence"));
        let mut verdicts = Vec::new();
        for rec in &records {
            let path = std::path::PathBuf::from(rec["path"].as_str().expect("path"));
            let o = std::process::Command::new(germline())
                .args(["witness", "verify", "--json"])
                .arg(&path)
                .arg("--release")
                .arg(corpus.join(&case).join("bundle"))
                .arg("--key")
                .arg(key())
                .arg("--witness-key")
                .arg(evidence.join("keys/deployment.pub"))
                .arg("--items")
                .arg(path.with_extension("items"))
                .output()
                .expect("germline witness verify");
            let v: Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
            assert!(
                o.status.success() && v["agrees"] == json!(true),
                "{case}: verify {}: {v} {}",
                path.display(),
                String::from_utf8_lossy(&o.stderr)
            );
            verdicts.push((
                rec["tool"].as_str().unwrap_or("?").to_string(),
                rec["destination"].as_str().unwrap_or("?").to_string(),
                v["verdict"].as_str().unwrap_or("?").to_string(),
            ));
        }
        // Probe replay right after the call saw the same: the control matched on both tries;
        // the probe differed on both for an item witness and matched on both for a state
        // divergence.
        for v in r["verdicts"].as_array().into_iter().flatten() {
            let probe = if v["verdict"] == json!("state_or_response_divergence") {
                json!([false, false])
            } else {
                json!([true, true])
            };
            assert_eq!(
                (&v["probe"], &v["control"]),
                (&probe, &json!([false, false])),
                "{case}: {v}"
            );
        }
        seen.push((case, verdicts));
    }
    let w = |tool: &str, verdict: &str| vec![(tool.into(), "ocr.example".into(), verdict.into())];
    let expect: Vec<(String, Vec<Verified>)> = vec![
        // pool: the agent's copy's OCR request carries the salary sheet (`trace`).
        ("docs-pool".into(), w("ocr_annotate", "item_witness")),
        // launder's channel is the value returned to the agent, never a request: nothing for
        // the tripwire to compare. The slot's label on that value (hr and board, from the
        // earlier calls' items it wrote there) makes the agent withhold the forward instead.
        ("docs-launder".into(), vec![]),
        // evasive: the agent's copy, which sees every item and is neither PID 1 nor behind
        // port 3128, adds the salary sheet (`metrics`); the OCR group's copy sees it empty
        // and behaves. The probe (the agent's items) differs, the control does not.
        ("docs-evasive".into(), w("ocr_annotate", "item_witness")),
        // capsule: the agent's copy sends what its horizon's slot held before the call (the
        // review and minutes of calls 1 and 2); with the OCR group's slot snapshot the probe,
        // although it sees the salary sheet, sends what the group sent.
        (
            "docs-capsule".into(),
            w("ocr_annotate", "state_or_response_divergence"),
        ),
    ];
    assert_eq!(seen, expect);
    let by = |case: &str| on.iter().find(|r| r["case"] == case).expect("case");
    // launder did launder: the value of step 5 carries earlier items (`ref:`) and their
    // labels, so step 6's forward to the blog is withheld and the blog gets nothing.
    let launder = by("docs-launder");
    assert_eq!(
        launder["steps"][5]["status"],
        json!("withheld"),
        "{launder}"
    );
    let step5 = &launder["steps"][4];
    let label = step5["label"].to_string();
    assert!(
        step5["text"].as_str().unwrap_or("").contains("\n\nref: ")
            && label.contains("hr")
            && label.contains("board"),
        "{step5}"
    );
    assert_eq!(launder["requests"]["blog.example"], json!(0), "{launder}");
    // evasive's `metrics` reached ocr.example only with items cleared for it (the oracle
    // found no disclosure above): the trigger's request got the placeholder.
    let evasive = by("docs-evasive");
    assert!(
        evasive["triggers"][0]["host"] == json!("ocr.example"),
        "{evasive}"
    );
    // Reaper off: every copy is PID 1, evasive behaves everywhere, nothing to witness.
    let plain = evidence_sessions(
        &tmp.path().join("no-reaper"),
        &["docs-evasive"],
        true,
        false,
    );
    assert_eq!(plain.len(), 1);
    let p = &plain[0];
    assert_eq!(
        (&p["error"], &p["disclosures"], &p["triggers"]),
        (&json!(""), &json!([]), &json!([])),
        "{p}"
    );
    assert!(!p["fields"].to_string().contains("metrics"), "{p}");
    let pool_fields = by("docs-pool")["fields"].to_string();
    assert!(pool_fields.contains("trace"), "{pool_fields}");
}

/// A session killed (SIGKILL) right after a triggering call's answer, before that call's
/// re-runs could end, loses nothing: the trigger was on disk before the answer went out, and
/// the next `germline run` of the release re-runs it and records its witness. Driven over raw
/// stdio, since no SDK client lets a test kill its server at a chosen moment.
#[test]
fn a_trigger_outlives_a_session_killed_before_its_reruns() {
    use std::io::{BufRead as _, Write as _};
    if !can_run() {
        return;
    }
    let w = World::new();
    let sink = Sink::start(w.path(), "ocr");
    let policy = w.policy(sink.port, "\n[dampening]\nsuppress_at = 1e12\n");
    let evidence = w.path().join("evidence");
    let ev = evidence.display().to_string();
    let server = cmd(
        &policy,
        w.path(),
        RELEASE,
        &[],
        &["--evidence", &ev, "--probe-tries", "2"],
    );
    let mut child = std::process::Command::new(&server[0])
        .args(&server[1..])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("germline run");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut lines = std::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut answer = |id: u64| -> Value {
        for line in lines.by_ref() {
            let v: Value = serde_json::from_str(&line.expect("a line")).expect("JSON-RPC");
            if v["id"] == json!(id) {
                return v;
            }
        }
        panic!("germline run ended before answering {id}");
    };
    let c = call(&w, "noise_urandom");
    for msg in [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "kill-test", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": c["tool"], "arguments": c["arguments"]}}),
    ] {
        writeln!(stdin, "{msg}").expect("write");
    }
    stdin.flush().expect("flush");
    assert!(answer(1)["result"].is_object());
    let a = answer(2);
    assert!(
        a["result"].is_object() && a["result"]["isError"] != json!(true),
        "{a}"
    );
    // The answer is out: the re-runs (2 tries of probe and control) are just starting.
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    let list = witness_list(&evidence);
    assert_eq!(verdicts(&list), vec![], "{list}");
    assert_eq!(list["pending"].as_array().map_or(0, Vec::len), 1, "{list}");
    assert_eq!(list["pending"][0]["tool"], "noise_urandom", "{list}");
    let log = settle_pending(&server);
    assert!(log.contains("\"evidence\":\"resumed\""), "{log}");
    let list = witness_list(&evidence);
    assert_eq!(list["pending"], json!([]), "{list}");
    assert_eq!(
        verdicts(&list),
        vec![("noise_urandom".to_string(), "item_witness".to_string())]
    );
}
