//! Concurrent copies (issue 30, opt-in) through the real broker, real sinks and real network
//! namespaces: the hold rule keeps a later group's request until the earlier group's request
//! at that position is known, so each copy gets the verdicts and triggers of the sequential
//! run (the cases of tripwire.rs's `sequence_comparison`), and a later copy's end waits for
//! the earlier ones'.

mod common;

use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use common::*;
use germline_policy::call::{LabelRules, TriggerKind};
use germline_policy::plan::{plan, PlanInput, PlanMode};

const DL: Duration = Duration::from_secs(10);
/// How long group 0's copy waits before it starts: group 1's requests arrive first.
const LATE: Duration = Duration::from_millis(400);

/// The Fig. 2c world (tripwire.rs), registered as a concurrent call.
fn fig2c_concurrent() -> (World, Sink, u64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let sink = Sink::ok();
    let p = ocr_policy(dir.path(), &sink);
    let w = broker(dir, p, |_| {});
    let items = [item("invoice", &["finance"]), item("salary", &["hr"])];
    let hosts = [m("ocr.example", &["finance"])];
    let consumers = [m("agent", &["finance", "hr"])];
    let p = plan(
        PlanInput {
            items: &items,
            hosts: &hosts,
            consumers: &consumers,
        },
        PlanMode::Split,
    )
    .expect("plan");
    assert_eq!(p.groups.len(), 2);
    assert_eq!(p.groups[0].hosts, ["ocr.example"]);
    let (call, _) = w
        .broker
        .begin_concurrent_call("sha256:test-release", "", p, &hosts, LabelRules::default())
        .expect("begin");
    (w, sink, call)
}

/// Each response with the time it came back, from `t0`.
fn post_timed(proxy: std::net::SocketAddr, bodies: &[&str], t0: Instant) -> Vec<(Resp, Duration)> {
    bodies
        .iter()
        .map(|b| {
            let r = http(proxy, "POST", "http://ocr.example/ocr", &[], b.as_bytes()).expect("post");
            (r, t0.elapsed())
        })
        .collect()
}

#[test]
fn the_hold_rule_gives_the_sequential_verdicts_and_triggers_over_sockets() {
    if !require_root() {
        return;
    }
    let ocr_seq: &[&str] = &["invoice-page-1", "invoice-page-2"];
    let cases: [(&str, &[&str], usize); 4] = [
        ("compliant", &["invoice-page-1", "invoice-page-2"], 0),
        (
            "adds",
            &["invoice-page-1", "invoice-page-2", "SALARY-CANARY"],
            1,
        ),
        ("omits", &["invoice-page-1"], 1),
        ("reorders", &["invoice-page-2", "invoice-page-1"], 1),
    ];
    for (name, full, want) in cases {
        let (w, sink, call) = fig2c_concurrent();
        let t0 = Instant::now();
        let ((resps, out1), out0) = std::thread::scope(|s| {
            let w = &w;
            // Group 1 (the agent's full-view copy) starts at once; group 0 (OCR) later.
            let agent = s.spawn(move || {
                let ns = TestNetns::new();
                let addr = w
                    .broker
                    .start_copy(call, 1, ns.fd.as_fd(), Instant::now() + DL)
                    .expect("start 1");
                let full = full.to_vec();
                let resps = ns.run(move || post_timed(addr, &full, t0));
                let (out, _) = w.broker.end_copy(call, 1).expect("end 1");
                (resps, (out, t0.elapsed()))
            });
            let ocr = s.spawn(move || {
                std::thread::sleep(LATE);
                let ns = TestNetns::new();
                let addr = w
                    .broker
                    .start_copy(call, 0, ns.fd.as_fd(), Instant::now() + DL)
                    .expect("start 0");
                let resps = ns.run(move || post_timed(addr, ocr_seq, t0));
                assert!(resps
                    .iter()
                    .all(|(r, _)| r.status == 200 && r.body == b"sink-ok"));
                let (out, _) = w.broker.end_copy(call, 0).expect("end 0");
                (out, t0.elapsed())
            });
            (
                agent.join().expect("agent thread"),
                ocr.join().expect("ocr thread"),
            )
        });
        let ((out1, _), (out0, _)) = (out1, out0);
        assert!(out0.triggers.is_empty(), "{name}: {:?}", out0.triggers);
        assert_eq!(out1.triggers.len(), want, "{name}: {:?}", out1.triggers);
        // The agent's copy asked first, yet its first answer waited for the OCR copy.
        assert!(
            resps[0].1 >= LATE,
            "{name}: answered after {:?}, before the OCR copy started",
            resps[0].1
        );
        if want == 0 {
            assert!(
                resps
                    .iter()
                    .all(|(r, _)| r.status == 200 && r.body == b"sink-ok"),
                "{name}: replayed"
            );
        }
        if name == "omits" {
            assert_eq!(
                out1.triggers[0].kind,
                TriggerKind::Absent {
                    sent: 1,
                    recorded: 2
                },
                "{name}"
            );
        }
        assert_eq!(
            sink.count(),
            2,
            "{name}: only the OCR copy's requests are delivered"
        );
        assert!(
            !String::from_utf8_lossy(&sink.all_bytes()).contains("SALARY-CANARY"),
            "{name}"
        );
        let audit = w.audit();
        let end_at = |g: usize| {
            audit
                .lines()
                .position(|l| l.contains("copy_end") && l.contains(&format!("\"group\":{g}")))
        };
        let (e0, e1) = (end_at(0), end_at(1));
        assert!(e0.is_some() && e1.is_some(), "{name}: {audit}");
        // Group 1's end waited for group 0's (its `absent` trigger needs the final record).
        assert!(e0 < e1, "{name}: copy ends out of group order");
    }
}

/// A group whose copy never starts (the shim failed before it) does not hold the later
/// groups for ever: `end_call` ends it, which releases the held request (answered with a
/// placeholder, or cut as the copy ends), and nothing is delivered.
#[test]
fn end_call_releases_copies_held_on_a_group_that_never_started() {
    if !require_root() {
        return;
    }
    let (w, sink, call) = fig2c_concurrent();
    let ns = TestNetns::new();
    let addr = w
        .broker
        .start_copy(call, 1, ns.fd.as_fd(), Instant::now() + DL)
        .expect("start 1");
    let t0 = Instant::now();
    let (resp, rec) = std::thread::scope(|s| {
        let held = s.spawn(move || {
            ns.run(move || {
                let r = http(
                    addr,
                    "POST",
                    "http://ocr.example/ocr",
                    &[],
                    b"invoice-page-1",
                );
                (r.ok(), t0.elapsed())
            })
        });
        std::thread::sleep(Duration::from_millis(300));
        let rec = w.broker.end_call(call).expect("end call");
        (held.join().expect("held"), rec)
    });
    // Held until end_call, well within the copy's deadline.
    assert!(resp.1 >= Duration::from_millis(300), "{:?}", resp.1);
    assert!(resp.1 < DL, "{:?}", resp.1);
    assert!(resp.0.is_none_or(|r| r.body != b"sink-ok"));
    assert_eq!(sink.count(), 0);
    assert!(rec.copies.contains_key(&1));
}
