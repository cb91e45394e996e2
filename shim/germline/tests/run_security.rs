//! `germline run` against Trojan builds of the example office server, with the real MCP client
//! SDK as the agent: each property is shown with the mechanism on (`germline`) and off (a
//! baseline), as the paper's Tables VI and XII compare them.

mod run_common;

use run_common::*;
use serde_json::{json, Value};

fn annotate(w: &World) -> Value {
    json!({"tool": "ocr_annotate", "arguments": {
        "invoice": w.invoice.display().to_string(),
        "salary_sheet": w.salary.display().to_string()}})
}

#[test]
fn fig2c_two_copies_only_copy_one_reaches_ocr() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let sink = Sink::start(w.path(), "ocr");
    let policy = w.policy(sink.port, "");
    let out = run_agent(
        w.path(),
        &json!([annotate(&w)]),
        &run_cmd(&policy, "germline", "germline-office", w.path(), &[]),
    );
    assert_eq!(out.len(), 1);
    assert!(out[0]["ok"].as_bool().unwrap_or(false), "{}", out[0]);
    let meta = &out[0]["meta"]["germline"];
    assert_eq!(meta["copies"], json!(2), "{meta}");
    assert_eq!(meta["label"], json!(["finance", "hr"]));
    // The agent's result holds the salary total: its copy saw the salary sheet.
    assert!(
        text(&out[0]).contains("salary total: 91235"),
        "{}",
        text(&out[0])
    );
    // Exactly one request reached ocr.example: copy 1's, with the invoice only.
    let bodies = sink.bodies();
    assert_eq!(bodies.len(), 1, "{bodies:?}");
    assert!(bodies[0].contains("INVOICE 2026-117"));
    assert!(!bodies[0].contains(&w.canary_hr));
    // The audit log: group 0 delivered, group 1's identical request was replayed, not sent.
    let log = audit(w.path(), "germline", "germline-office");
    let req: Vec<&Value> = log.iter().filter(|e| e["event"] == "request").collect();
    assert_eq!(req.len(), 2, "{req:?}");
    assert_eq!(
        (req[0]["group"].clone(), req[0]["verdict"].clone()),
        (json!(0), json!("delivered"))
    );
    assert_eq!(
        (req[1]["group"].clone(), req[1]["verdict"].clone()),
        (json!(1), json!("replayed"))
    );
    assert!(log.iter().all(|e| e["event"] != "trigger"));
}

#[test]
fn pool_trojan_leaks_under_sig_pin_and_not_under_germline() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let sink = Sink::start(w.path(), "ocr");
    let policy = w.policy(sink.port, "");
    let script = json!([annotate(&w), annotate(&w), annotate(&w)]);
    let mut leaked = Vec::new();
    let mut outputs = Vec::new();
    for mode in ["sig-pin", "sig-ifc", "germline"] {
        sink.clear();
        let out = run_agent(
            w.path(),
            &script,
            &run_cmd(&policy, mode, "germline-office-pool", w.path(), &[]),
        );
        assert!(
            out.iter().all(|r| r["ok"] == json!(true)),
            "{mode}: {out:?}"
        );
        let n = sink
            .bodies()
            .iter()
            .filter(|b| b.contains(&w.canary_hr))
            .count();
        leaked.push((mode, n));
        outputs.push(out.iter().map(text).collect::<Vec<_>>());
    }
    // sig-pin and sig-ifc: the stash from call 1 rides on calls 2 and 3 to ocr.example.
    assert_eq!(
        leaked,
        vec![("sig-pin", 2), ("sig-ifc", 2), ("germline", 0)]
    );
    // The agent's answers do not depend on the stash in any mode.
    assert_eq!(outputs[0][0], outputs[2][0]);
}

#[test]
fn mixing_within_a_call_leaks_under_nosplit_and_trips_under_germline() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let sink = Sink::start(w.path(), "ocr");
    let policy = w.policy(sink.port, "");
    let mut seen = Vec::new();
    for mode in ["nosplit", "germline"] {
        sink.clear();
        let out = run_agent(
            w.path(),
            &json!([annotate(&w)]),
            &run_cmd(&policy, mode, "germline-office-mix", w.path(), &[]),
        );
        assert_eq!(out[0]["ok"], json!(true), "{mode}: {}", out[0]);
        let leaks = sink
            .bodies()
            .iter()
            .filter(|b| b.contains(&w.canary_hr))
            .count();
        let log = audit(w.path(), mode, "germline-office-mix");
        let triggers = log.iter().filter(|e| e["event"] == "trigger").count();
        let placeholders = log
            .iter()
            .filter(|e| e["event"] == "request" && e["verdict"] == "placeholder")
            .count();
        seen.push((mode, leaks, triggers, placeholders));
    }
    // NoSplit: one copy holds both items and its request carries the salary sheet out.
    // Germline: copy 2's differing request is compared with copy 1's, never delivered.
    assert_eq!(seen, vec![("nosplit", 1, 0, 0), ("germline", 0, 1, 1)]);
}

#[test]
fn inline_hr_value_never_reaches_a_sink_not_cleared_for_hr() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let sink = Sink::start(w.path(), "ocr");
    // Inline values of ocr_text are labelled hr by the deployer's rule.
    let policy = w.policy(
        sink.port,
        "\n[[argument]]\ntool = \"ocr_text\"\nname = \"text\"\nlabel = [\"hr\"]\n\
         \n[[argument]]\ntool = \"summarize\"\nname = \"text\"\nlabel = []\n",
    );
    let call =
        json!({"tool": "ocr_text", "arguments": {"text": format!("review of {}", w.canary_hr)}});
    // ... and a public-by-rule value raised to hr by the call's own _meta.
    let raised = json!({"tool": "summarize", "arguments": {"text": w.canary_hr.clone()},
                        "meta": {"germline/labels": {"text": ["hr"]}}});
    let mut leaks = Vec::new();
    for mode in ["sig-pin", "germline"] {
        sink.clear();
        let out = run_agent(
            w.path(),
            &json!([call, raised]),
            // --no-evidence: ocr_text's request carries its hr argument only in the agent's
            // copy, a genuine item witness that would suppress this declared-deterministic
            // release before the second call; this test is about labels (docs/evidence.md).
            &run_cmd(
                &policy,
                mode,
                "germline-office",
                w.path(),
                &["--no-evidence"],
            ),
        );
        assert!(
            out.iter().all(|r| r["ok"] == json!(true)),
            "{mode}: {out:?}"
        );
        if mode == "germline" {
            assert_eq!(out[1]["meta"]["germline"]["label"], json!(["hr"]));
        }
        leaks.push(
            sink.bodies()
                .iter()
                .filter(|b| b.contains(&w.canary_hr))
                .count(),
        );
    }
    assert_eq!(leaks, vec![1, 0]);
}

#[test]
fn other_copies_never_talk_to_the_agent() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let sink = Sink::start(w.path(), "ocr");
    let policy = w.policy(sink.port, "");
    let mut step = annotate(&w);
    step["progress"] = json!(true);
    step["wait_logs"] = json!(true);
    let mut got = Vec::new();
    for mode in ["sig-pin", "germline"] {
        let out = run_agent(
            w.path(),
            &json!([step]),
            &run_cmd(&policy, mode, "germline-office-notify", w.path(), &[]),
        );
        let r = &out[0];
        let all = format!("{} {} {} {}", r["logs"], r["progress"], r["error"], text(r));
        got.push((
            mode,
            r["ok"].as_bool().unwrap_or(false),
            all.contains("salary-present"),
            all.contains("salary-absent"),
            r["meta"]["germline"]["notice"].as_str().map(str::to_string),
        ));
    }
    // sig-pin: the process's log and progress reach the agent (the channel works). Germline:
    // the agent's own copy (it sees the salary sheet) still talks to the agent; the ocr copy
    // (no salary sheet) logs, reports progress and fails with the invoice in its error text,
    // and none of its words arrive, only a fixed notice.
    assert_eq!(got[0], ("sig-pin", true, true, false, None));
    assert_eq!(
        got[1],
        (
            "germline",
            true,
            true,
            false,
            Some("a copy serving another destination of this call failed".to_string())
        )
    );
}

/// Sampling relay (issue 6), mechanism on vs off. The agent answers every sampling request
/// with a canary of its own; the Trojan build adds whatever it is told to its OCR request.
/// Under `sig-pin` the answer reaches ocr.example in both calls. Under `germline`, in the
/// Fig. 2c call only the agent's copy (no host) may ask, and its log arrives before it asks
/// (live, not buffered); in `ocr_text` the agent shares its copy with ocr.example (cleared for
/// finance only), so the answer is not admissible and the agent is never asked.
#[test]
fn sampling_answers_reach_only_the_agents_copy_where_admissible() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let sink = Sink::start(w.path(), "ocr");
    let policy = w.policy(
        sink.port,
        "\n[[argument]]\ntool = \"ocr_text\"\nname = \"text\"\nlabel = []\n",
    );
    let canary = format!("CANARY-AGENT-{:016x}", rand_u64());
    let mut fig2c = annotate(&w);
    fig2c["sample_reply"] = json!(canary);
    let inline =
        json!({"tool": "ocr_text", "arguments": {"text": "scan 1"}, "sample_reply": canary});
    let mut got = Vec::new();
    for mode in ["sig-pin", "germline"] {
        sink.clear();
        let out = run_agent(
            w.path(),
            &json!([fig2c, inline]),
            &run_cmd(&policy, mode, "germline-office-relay", w.path(), &[]),
        );
        assert_eq!(out.len(), 2, "{mode}: {out:?}");
        assert!(
            out.iter().all(|r| r["ok"] == json!(true)),
            "{mode}: {out:?}"
        );
        let leaked = sink.bodies().iter().filter(|b| b.contains(&canary)).count();
        let asked: Vec<usize> = out
            .iter()
            .map(|r| r["sampled"].as_array().map_or(0, Vec::len))
            .collect();
        got.push((mode, leaked, asked));
        if mode == "germline" {
            // The agent's copy asked, with the salary sheet in view, after its log had
            // already reached the agent; the ocr copy's log never did.
            assert_eq!(out[0]["sampled"], json!(["annotate (salary-present)"]));
            let before = out[0]["logs_at_sampling"][0].to_string();
            assert!(before.contains("salary-present: asking"), "{before}");
            assert!(!out[0]["logs"].to_string().contains("salary-absent"));
            assert!(text(&out[0]).contains(&format!("sampled: {canary}")));
            assert_eq!(
                out[0]["meta"]["germline"]["label"],
                json!(["finance", "hr"])
            );
            // The broker labelled the agent's copy before the answer entered it (its slot
            // writes after it carry the agent's clearance), and only that copy.
            let log = audit(w.path(), "germline", "germline-office-relay");
            let raised: Vec<&Value> = log.iter().filter(|e| e["event"] == "copy_raised").collect();
            assert_eq!(raised.len(), 1, "{raised:?}");
            assert_eq!(raised[0]["label"], json!(["finance", "hr"]));
            // ocr_text: the copy was told why, and the agent's clearance labels nothing.
            let t = text(&out[1]);
            assert!(t.contains("not admissible") && !t.contains(&canary), "{t}");
        }
    }
    assert_eq!(
        got,
        vec![("sig-pin", 2, vec![1, 1]), ("germline", 0, vec![1, 0])]
    );
}

/// A recipient the manifest names (`share`'s `to`) is a consumer in Plan and gets its own
/// group's result through the outbox. Bob is cleared for finance only, the document is HR's:
/// under `sig-pin` Bob receives the HR canary; under `nosplit` his one copy saw it too, so its
/// result's label exceeds his clearance and it is withheld; under `germline` his copy saw the
/// document empty and he receives that, while the agent gets the full text. The tool also
/// elicits a note from the agent (a canary of the agent's): `sig-pin` relays it and Bob gets
/// it; under `nosplit` the agent shares its copy with Bob, so the answer is not admissible and
/// the agent is never asked; under `germline` only the agent's own copy asks, and Bob's copy's
/// request is refused.
#[test]
fn a_recipient_named_by_the_manifest_gets_its_own_groups_result() {
    if !can_run() || !bundle("germline-share").exists() {
        assert!(
            std::env::var_os("GERMLINE_REQUIRE_ROOT_TESTS").is_none(),
            "needs bundles/out/germline-share (bundles/build.sh)"
        );
        return;
    }
    let w = World::new();
    let sink = Sink::start(w.path(), "ocr");
    let bob = "bob@example.org";
    let policy = w.policy(
        sink.port,
        &format!(
            "\"{bob}\" = [\"finance\"]\n\n[[argument]]\ntool = \"share\"\nname = \"to\"\nlabel = []\n"
        ),
    );
    let note = format!("CANARY-NOTE-{:016x}", rand_u64());
    let call = json!({"tool": "share", "arguments": {
        "document": w.payslip.display().to_string(), "to": bob},
        "elicit_reply": {"note": note}});
    let mut got = Vec::new();
    for mode in ["sig-pin", "nosplit", "germline"] {
        let outbox = w.path().join(format!("outbox-{mode}"));
        std::fs::create_dir_all(&outbox).expect("mkdir");
        let o = outbox.display().to_string();
        let out = run_agent(
            w.path(),
            &json!([call]),
            &run_cmd(&policy, mode, "germline-share", w.path(), &["--outbox", &o]),
        );
        assert!(out[0]["ok"] == json!(true), "{mode}: {out:?}");
        // The agent always gets the whole document.
        assert!(
            text(&out[0]).contains(&w.canary_hr),
            "{mode}: {}",
            text(&out[0])
        );
        let status = out[0]["meta"]["germline"]["recipients"][bob]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let got_bob =
            std::fs::read_to_string(outbox.join(format!("{bob}.jsonl"))).unwrap_or_default();
        got.push((
            mode,
            status.split(':').next().unwrap_or_default().to_string(),
            got_bob.lines().count(),
            got_bob.contains(&w.canary_hr),
            out[0]["elicited"].as_array().map_or(0, Vec::len),
            got_bob.contains(&note),
            text(&out[0]).contains(&note),
        ));
        if mode == "germline" {
            let line: Value = serde_json::from_str(got_bob.trim()).expect("one JSON line");
            assert_eq!(line["label"], json!([]), "{line}");
            assert!(
                line["result"].to_string().contains(&format!("for {bob}: ")),
                "{line}"
            );
            assert_eq!(out[0]["meta"]["germline"]["copies"], json!(2));
        }
    }
    assert_eq!(
        got,
        vec![
            ("sig-pin", "delivered".to_string(), 1, true, 1, true, true),
            ("nosplit", "withheld".to_string(), 0, false, 0, false, false),
            (
                "germline",
                "delivered".to_string(),
                1,
                false,
                1,
                false,
                true
            ),
        ]
    );
}
