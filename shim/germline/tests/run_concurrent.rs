//! Concurrent copies (issue 30, `[copies] concurrent`) through `germline run` with the real MCP
//! client SDK: Fig. 2c's two-copy call gets the same answer, label, single delivery and replay
//! as with copies one at a time (A1, the default), and its copies really overlap: both are
//! live in the broker before either ends, where by default the second starts only after the
//! first ended.

mod run_common;

use run_common::*;
use serde_json::{json, Value};

/// Audit events of the copies of the log's (one) call: (event, group), in log order.
fn copy_events(log: &[Value]) -> Vec<(String, u64)> {
    log.iter()
        .filter(|e| e["event"] == "copy_start" || e["event"] == "copy_end")
        .map(|e| {
            (
                e["event"].as_str().unwrap_or_default().to_string(),
                e["group"].as_u64().unwrap_or(u64::MAX),
            )
        })
        .collect()
}

#[test]
fn fig2c_copies_overlap_when_the_release_opts_in_and_not_by_default() {
    if !can_run() {
        return;
    }
    for concurrent in [false, true] {
        let w = World::new();
        let sink = Sink::start(w.path(), "ocr");
        let extra = if concurrent {
            "\n[copies]\nconcurrent = [\"germline-office\"]\n"
        } else {
            ""
        };
        let policy = w.policy(sink.port, extra);
        let call = json!({"tool": "ocr_annotate", "arguments": {
            "invoice": w.invoice.display().to_string(),
            "salary_sheet": w.salary.display().to_string()}});
        let out = run_agent(
            w.path(),
            &json!([call]),
            &run_cmd(&policy, "germline", "germline-office", w.path(), &[]),
        );
        let what = if concurrent { "concurrent" } else { "default" };
        assert_eq!(out.len(), 1);
        assert!(
            out[0]["ok"].as_bool().unwrap_or(false),
            "{what}: {}",
            out[0]
        );
        let meta = &out[0]["meta"]["germline"];
        assert_eq!(meta["copies"], json!(2), "{what}: {meta}");
        assert_eq!(meta["label"], json!(["finance", "hr"]), "{what}");
        assert!(
            text(&out[0]).contains("salary total: 91235"),
            "{what}: {}",
            text(&out[0])
        );
        // The same single delivery (the OCR copy's, invoice only) and the same replay.
        let bodies = sink.bodies();
        assert_eq!(bodies.len(), 1, "{what}: {bodies:?}");
        assert!(!bodies[0].contains(&w.canary_hr), "{what}");
        let log = audit(w.path(), "germline", "germline-office");
        let verdicts: Vec<(Value, Value)> = log
            .iter()
            .filter(|e| e["event"] == "request")
            .map(|e| (e["group"].clone(), e["verdict"].clone()))
            .collect();
        assert_eq!(
            verdicts,
            vec![
                (json!(0), json!("delivered")),
                (json!(1), json!("replayed"))
            ],
            "{what}"
        );
        assert!(log.iter().all(|e| e["event"] != "trigger"), "{what}");
        let ev = copy_events(&log);
        let first_end = ev.iter().position(|(e, _)| e == "copy_end");
        let start_1 = ev.iter().position(|(e, g)| e == "copy_start" && *g == 1);
        let (Some(first_end), Some(start_1)) = (first_end, start_1) else {
            panic!("{what}: no copy_start/copy_end in the audit log: {ev:?}");
        };
        if concurrent {
            assert!(
                start_1 < first_end,
                "{what}: group 1's copy started only after a copy ended: {ev:?}"
            );
            assert_eq!(meta["copies_ran"], json!("concurrent"), "{what}: {meta}");
            // The broker still ends them in group order.
            let ends: Vec<u64> = ev
                .iter()
                .filter(|(e, _)| e == "copy_end")
                .map(|(_, g)| *g)
                .collect();
            assert_eq!(ends, vec![0, 1], "{what}");
        } else {
            assert!(meta.get("copies_ran").is_none(), "{what}: {meta}");
            assert!(
                first_end < start_1,
                "{what}: copies overlapped by default: {ev:?}"
            );
        }
    }
}
