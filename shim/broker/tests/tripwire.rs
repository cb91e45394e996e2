//! Algorithm 1's request rules through the real broker, real sinks and real network
//! namespaces: sequence comparison, admissibility (O4), the match bit, and the existence bit
//! of Lemma 2 (declared-destination against lazy splitting).

mod common;

use std::time::Duration;

use common::*;
use germline_policy::call::{LabelRules, TriggerKind};
use germline_policy::plan::{ForkRule, PlanMode};
use germline_policy::Label;

const DL: Duration = Duration::from_secs(10);

/// The Fig. 2c world: invoice (finance) for ocr.example, salary sheet (hr); the agent may see
/// both. Group 0 is the OCR copy, group 1 the agent's full-view copy.
fn fig2c(rules: LabelRules, mode: PlanMode) -> (World, Sink, u64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let sink = Sink::ok();
    let p = ocr_policy(dir.path(), &sink);
    let w = broker(dir, p, |_| {});
    let (call, plan) = begin(
        &w,
        &[item("invoice", &["finance"]), item("salary", &["hr"])],
        &[m("ocr.example", &["finance"])],
        &[m("agent", &["finance", "hr"])],
        mode,
        rules,
    );
    if mode == PlanMode::Split {
        assert_eq!(plan.groups.len(), 2);
        assert_eq!(plan.groups[0].hosts, ["ocr.example"]);
    }
    (w, sink, call)
}

fn post_all(proxy: std::net::SocketAddr, bodies: &[&str]) -> Vec<Resp> {
    bodies
        .iter()
        .map(|b| http(proxy, "POST", "http://ocr.example/ocr", &[], b.as_bytes()).expect("request"))
        .collect()
}

/// Each deviation of the full-view copy raises exactly one trigger; a flow-compliant copy
/// that repeats an identical request raises none. The OCR sink only ever receives the OCR
/// copy's requests. With NoSplit (no comparison, one copy) the salary reaches the sink.
#[test]
fn sequence_comparison() {
    if !require_root() {
        return;
    }
    let ocr_seq = ["invoice-page-1", "invoice-page-2"];
    let cases: [(&str, &[&str], usize); 6] = [
        ("compliant", &["invoice-page-1", "invoice-page-2"], 0),
        (
            "adds",
            &["invoice-page-1", "invoice-page-2", "SALARY-CANARY"],
            1,
        ),
        ("omits", &["invoice-page-1"], 1),
        (
            "duplicates",
            &["invoice-page-1", "invoice-page-1", "invoice-page-2"],
            1,
        ),
        ("reorders", &["invoice-page-2", "invoice-page-1"], 1),
        (
            "mixes",
            &["invoice-page-1 SALARY-CANARY", "invoice-page-2"],
            1,
        ),
    ];
    for (name, full, want) in cases {
        let (w, sink, call) = fig2c(LabelRules::default(), PlanMode::Split);
        let (resps, out0) = copy(&w, call, 0, DL, move |p| post_all(p, &ocr_seq));
        assert!(
            resps
                .iter()
                .all(|r| r.status == 200 && r.body == b"sink-ok"),
            "{name}: OCR copy delivered"
        );
        assert!(out0.triggers.is_empty());
        let full: Vec<&'static str> = full.to_vec();
        let (resps, out1) = copy(&w, call, 1, DL, move |p| post_all(p, &full));
        assert_eq!(out1.triggers.len(), want, "{name}: {:?}", out1.triggers);
        if want == 0 {
            assert!(
                resps
                    .iter()
                    .all(|r| r.status == 200 && r.body == b"sink-ok"),
                "{name}: replayed"
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
        assert_eq!(
            audit.matches("\"event\":\"trigger\"").count(),
            want,
            "{name}"
        );
    }

    // A flow-compliant tool that repeats an identical request in both copies.
    let (w, _sink, call) = fig2c(LabelRules::default(), PlanMode::Split);
    copy(&w, call, 0, DL, |p| post_all(p, &["same", "same"]));
    let (_, out) = copy(&w, call, 1, DL, |p| post_all(p, &["same", "same"]));
    assert!(out.triggers.is_empty());

    // Off: one copy holding everything delivers the canary itself.
    let (w, sink, call) = fig2c(LabelRules::default(), PlanMode::NoSplit);
    let (resps, out) = copy(&w, call, 0, DL, |p| {
        post_all(p, &["invoice-page-1 SALARY-CANARY"])
    });
    assert_eq!(resps[0].status, 200);
    assert!(out.triggers.is_empty());
    assert!(String::from_utf8_lossy(&sink.all_bytes()).contains("SALARY-CANARY"));
}

/// O4: a finance-cleared consumer gets the placeholder, not the reply of a host it is not
/// cleared for, even when its request matches; with a host it is cleared for it gets the
/// recorded reply.
#[test]
fn admissibility() {
    if !require_root() {
        return;
    }
    for (mail_clearance, want_reply) in [(&["board"][..], false), (&[][..], true)] {
        let dir = tempfile::tempdir().expect("tempdir");
        let mail = Sink::with(std::sync::Arc::new(|_r: &Received| {
            (200, vec![], b"board minutes summary".to_vec())
        }));
        let ocr = Sink::ok();
        let p = policy(
            dir.path(),
            &[
                ("mail.example", mail_clearance, Some(mail.addr)),
                ("ocr.example", &["finance"], Some(ocr.addr)),
            ],
            "",
        );
        let w = broker(dir, p, |_| {});
        let hosts = [
            m("mail.example", mail_clearance),
            m("ocr.example", &["finance"]),
        ];
        // The invoice gives the accountant a larger view than the mail host, so the mail
        // host's group runs first and is comparable for the accountant's.
        let items = [item("invoice", &["finance"])];
        let (call, plan) = begin(
            &w,
            &items,
            &hosts,
            &[m("accountant", &["finance"])],
            PlanMode::Split,
            LabelRules::default(),
        );
        let g_mail = plan.group_of_host("mail.example").expect("mail group");
        let g_acc = plan
            .groups
            .iter()
            .position(|g| g.consumers == ["accountant"])
            .expect("accountant group");
        assert!(g_mail < g_acc, "{plan:?}");
        copy(&w, call, g_mail, DL, |p| {
            http(p, "GET", "http://mail.example/inbox", &[], b"").expect("get")
        });
        let (r, out) = copy(&w, call, g_acc, DL, |p| {
            http(p, "GET", "http://mail.example/inbox", &[], b"").expect("get")
        });
        if want_reply {
            assert_eq!(r.body, b"board minutes summary");
        } else {
            assert_eq!(r.germline().as_deref(), Some("placeholder"));
            assert!(
                !out.label.contains("board"),
                "an inadmissible host adds nothing: {}",
                out.label
            );
        }
        assert_eq!(mail.count(), 1);
    }
}

/// Match bit (Table VI): a copy whose request to an admissible host with a non-empty record
/// mismatches gets the placeholder and still has c(e) in its label; off, it does not.
#[test]
fn match_bit() {
    if !require_root() {
        return;
    }
    for (rules, want) in [
        (LabelRules::default(), Label::of(["finance"])),
        (
            LabelRules {
                match_bit: false,
                ..LabelRules::default()
            },
            Label::public(),
        ),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = Sink::ok();
        let b = Sink::ok();
        let p = policy(
            dir.path(),
            &[
                ("a.example", &["finance"], Some(a.addr)),
                ("b.example", &["finance", "hr"], Some(b.addr)),
            ],
            "",
        );
        let w = broker(dir, p, |_| {});
        let hosts = [
            m("a.example", &["finance"]),
            m("b.example", &["finance", "hr"]),
        ];
        let (call, plan) = begin(&w, &[], &hosts, &[], PlanMode::Split, rules);
        let (ga, gb) = (
            plan.group_of_host("a.example").expect("a"),
            plan.group_of_host("b.example").expect("b"),
        );
        assert!(ga < gb);
        copy(&w, call, ga, DL, |p| {
            http(p, "GET", "http://a.example/x", &[], b"").expect("get")
        });
        let (r, out) = copy(&w, call, gb, DL, |p| {
            http(p, "GET", "http://a.example/y", &[], b"").expect("get")
        });
        assert_eq!(r.germline().as_deref(), Some("placeholder"));
        assert_eq!(out.label, want, "match_bit={}", rules.match_bit);
        assert_eq!(out.triggers.len(), 1);
    }
}

/// Lemma 2: a release contacts the OCR host in call i only if bit i of a 64-bit secret is 1;
/// the copy that cannot see the secret falls back to sending. Under declared-destination
/// splitting the host receives the same thing every call (0 bits) and every secret-dependent
/// call raises a trigger; under lazy splitting it learns all 64 bits and nothing fires.
#[test]
fn existence_bit() {
    if !require_root() {
        return;
    }
    let secret: u64 = 0x9e37_79b9_7f4a_7c15 ^ 0x0123_4567_89ab_cdef;
    for mode in [PlanMode::Split, PlanMode::Lazy] {
        let dir = tempfile::tempdir().expect("tempdir");
        let sink = Sink::ok();
        let p = ocr_policy(dir.path(), &sink);
        let w = broker(dir, p, |_| {});
        let mut learned = 0u64;
        let mut triggers = 0;
        let mut dependent = 0;
        for i in 0..64 {
            let bit = secret >> i & 1 == 1;
            let before = sink.count();
            let (call, plan) = begin(
                &w,
                &[item("invoice", &["finance"]), item("secret", &["hr"])],
                &[m("ocr.example", &["finance"])],
                &[m("agent", &["finance", "hr"])],
                mode,
                LabelRules::default(),
            );
            let mut contacted = std::collections::BTreeSet::new();
            for (g, group) in plan.groups.iter().enumerate() {
                // Lazy: a group is forked only if its fork rule holds.
                if mode == PlanMode::Lazy && g > 0 {
                    if let ForkRule::IfContacted(hs) = &plan.fork_rules[g - 1] {
                        if !hs.iter().any(|h| contacted.contains(h)) {
                            continue;
                        }
                    }
                }
                let sees_secret = group.view.iter().any(|v| v == "secret");
                let sends = if sees_secret { bit } else { true };
                let (_, out) = copy(&w, call, g, DL, move |p| {
                    if sends {
                        let _ = http(p, "POST", "http://ocr.example/ocr", &[], b"invoice");
                    }
                });
                contacted.extend(out.contacted.keys().cloned());
                triggers += out.triggers.len();
            }
            w.broker.end_call(call).expect("end call");
            let received = sink.count() > before;
            if received {
                learned |= 1 << i;
            }
            dependent += usize::from(!bit);
        }
        match mode {
            PlanMode::Split => {
                assert_eq!(
                    learned,
                    u64::MAX,
                    "the host receives a request every call: 0 bits"
                );
                assert_eq!(
                    triggers, dependent,
                    "a trigger on every secret-dependent call"
                );
            }
            _ => {
                assert_eq!(learned, secret, "lazy splitting discloses every bit");
                assert_eq!(triggers, 0);
            }
        }
        eprintln!(
            "{mode:?}: host learned {} of 64 bits, {triggers} triggers",
            if mode == PlanMode::Split { 0 } else { 64 }
        );
    }
}

#[test]
fn absent_trigger_kind() {
    if !require_root() {
        return;
    }
    let (w, _sink, call) = fig2c(LabelRules::default(), PlanMode::Split);
    copy(&w, call, 0, DL, |p| post_all(p, &["a", "b"]));
    let (_, out) = copy(&w, call, 1, DL, |p| post_all(p, &["a"]));
    assert_eq!(
        out.triggers[0].kind,
        TriggerKind::Absent {
            sent: 1,
            recorded: 2
        }
    );
    let rec = w.broker.end_call(call).expect("record");
    assert_eq!(rec.delivered["ocr.example"].len(), 2);
    assert_eq!(rec.copies[&1].triggers.len(), 1);
}
