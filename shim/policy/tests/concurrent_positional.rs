//! The hold rule (issue 30, docs/design/30-performance.md): with concurrent copies, every
//! copy gets exactly the verdicts, label and triggers the sequential run (A1) gives it.
//!
//! Random plans of 2-4 groups (Plan itself forms them from random items, hosts and a few
//! consumers), a random script of requests per group (to its own hosts and to the other
//! groups', with digests from a small set so that positions often match), run once in group
//! order and once in a random interleaving under the hold rule. Deliveries take a step of
//! their own (the upstream's reply arrives later than the verdict), and a copy ends only when
//! `try_finish` lets it. At every step some group can move (no deadlock).

use std::collections::BTreeMap;

use germline_policy::call::{
    CallContext, CallRecords, CopyOutcome, CopyTracker, Digest, LabelRules, Verdict,
};
use germline_policy::plan::{plan, ItemMeta, Member, PlanInput, PlanMode};
use germline_policy::Label;
use proptest::prelude::*;

const TAGS: [&str; 3] = ["t0", "t1", "t2"];

fn label(bits: u8) -> Label {
    Label::of((0..3).filter(|i| bits & (1 << i) != 0).map(|i| TAGS[i]))
}

/// A reply as the test records it: who delivered it and at which of its requests.
type Reply = (usize, usize);

/// A verdict with its replayed reply copied out (the borrowed one cannot outlive a step).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Deliver,
    Replay(Reply),
    Placeholder,
    Deny,
}

#[derive(Debug, Clone)]
struct Case {
    items: Vec<ItemMeta>,
    hosts: Vec<Member>,
    consumers: Vec<Member>,
    /// Per group (by index modulo the plan's groups): (host index, digest byte) requests.
    scripts: Vec<Vec<(usize, u8)>>,
    /// Which live group moves next (modulo the live groups), then group order.
    schedule: Vec<usize>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::collection::vec(1u8..8, 1..=4),
        prop::collection::vec(0u8..8, 2..=5),
        prop::collection::vec(1u8..8, 1..=3),
        prop::collection::vec(prop::collection::vec((0usize..8, 0u8..2), 0..=5), 4),
        prop::collection::vec(0usize..64, 0..=80),
    )
        .prop_map(|(i, h, c, scripts, schedule)| Case {
            items: i
                .iter()
                .enumerate()
                .map(|(k, &b)| ItemMeta {
                    name: format!("item{k}"),
                    label: label(b),
                })
                .collect(),
            hosts: h
                .iter()
                .enumerate()
                .map(|(k, &b)| Member {
                    name: format!("h{k}.example"),
                    clearance: label(b),
                })
                .collect(),
            consumers: c
                .iter()
                .enumerate()
                .map(|(k, &b)| Member {
                    name: format!("consumer{k}"),
                    clearance: label(b),
                })
                .collect(),
            scripts,
            schedule,
        })
}

/// Group `g`'s requests: host names (one in eight undeclared) and digests.
fn script(c: &Case, g: usize) -> Vec<(String, Digest)> {
    c.scripts[g]
        .iter()
        .map(|&(h, d)| {
            let host = c
                .hosts
                .get(h)
                .map_or_else(|| "undeclared.example".to_string(), |m| m.name.clone());
            (host, [d; 32])
        })
        .collect()
}

type Run = Vec<(Vec<Seen>, CopyOutcome)>;

fn seen(v: Verdict<'_, Reply>) -> Option<Seen> {
    match v {
        Verdict::Deliver => Some(Seen::Deliver),
        Verdict::Replay(r) => Some(Seen::Replay(*r)),
        Verdict::Placeholder => Some(Seen::Placeholder),
        Verdict::Deny => Some(Seen::Deny),
        Verdict::Wait => None,
    }
}

/// A1: group 0's copy runs to its end, then group 1's, and so on.
fn sequential(cx: &CallContext, scripts: &[Vec<(String, Digest)>]) -> Run {
    let mut records: CallRecords<Reply> = CallRecords::default();
    let mut out = Vec::new();
    for (g, script) in scripts.iter().enumerate() {
        let mut t = CopyTracker::start(cx, g, &Label::public());
        let mut verdicts = Vec::new();
        for (i, (host, q)) in script.iter().enumerate() {
            let v = seen(t.request(cx, &records, host, q)).expect("sequential copies never wait");
            if v == Seen::Deliver {
                t.delivered(cx, &mut records, host, *q, (g, i));
            }
            verdicts.push(v);
        }
        out.push((verdicts, t.finish(cx, &records)));
    }
    out
}

/// One copy's progress in the concurrent run.
struct Live {
    tracker: Option<CopyTracker>,
    next: usize,
    /// A delivered request whose reply has not come back yet.
    in_flight: Option<(String, Digest, usize)>,
    verdicts: Vec<Seen>,
    outcome: Option<CopyOutcome>,
}

/// Tries one step of group `g`; returns whether it moved.
fn step(
    cx: &CallContext,
    records: &mut CallRecords<Reply>,
    script: &[(String, Digest)],
    g: usize,
    c: &mut Live,
) -> bool {
    let Some(mut t) = c.tracker.take() else {
        return false;
    };
    let moved = if let Some((host, q, i)) = c.in_flight.take() {
        t.delivered(cx, records, &host, q, (g, i));
        true
    } else if let Some((host, q)) = script.get(c.next) {
        match seen(t.request(cx, records, host, q)) {
            None => false,
            Some(v) => {
                if v == Seen::Deliver {
                    c.in_flight = Some((host.clone(), *q, c.next));
                }
                c.verdicts.push(v);
                c.next += 1;
                true
            }
        }
    } else {
        match t.try_finish(cx, records) {
            Ok(o) => {
                c.outcome = Some(o);
                records.end_group(g);
                return true;
            }
            Err(back) => {
                t = *back;
                false
            }
        }
    };
    c.tracker = Some(t);
    moved
}

fn concurrent(cx: &CallContext, scripts: &[Vec<(String, Digest)>], schedule: &[usize]) -> Run {
    let n = scripts.len();
    let mut records: CallRecords<Reply> = CallRecords::concurrent(n);
    let mut live: Vec<Live> = (0..n)
        .map(|g| Live {
            tracker: Some(CopyTracker::start(cx, g, &Label::public())),
            next: 0,
            in_flight: None,
            verdicts: Vec::new(),
            outcome: None,
        })
        .collect();
    let mut choices = schedule.iter();
    loop {
        let running: Vec<usize> = (0..n).filter(|&g| live[g].tracker.is_some()).collect();
        if running.is_empty() {
            break;
        }
        let first = choices.next().map_or(0, |k| k % running.len());
        // The chosen group moves if it can; else the next one that can (a held copy waits).
        let moved = (0..running.len())
            .map(|k| running[(first + k) % running.len()])
            .any(|g| step(cx, &mut records, &scripts[g], g, &mut live[g]));
        assert!(moved, "no group could move: a deadlock");
    }
    live.into_iter()
        .map(|c| (c.verdicts, c.outcome.expect("every copy ended")))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn the_hold_rule_gives_every_copy_its_sequential_verdicts_label_and_triggers(c in case()) {
        let p = plan(
            PlanInput { items: &c.items, hosts: &c.hosts, consumers: &c.consumers },
            PlanMode::Split,
        );
        let Ok(p) = p else { return Ok(()) };
        let n = p.groups.len();
        prop_assume!((2..=4).contains(&n));
        let Ok(cx) = CallContext::new(p, &c.hosts, LabelRules::default()) else {
            return Ok(());
        };
        let scripts: Vec<_> = (0..n).map(|g| script(&c, g)).collect();
        let seq = sequential(&cx, &scripts);
        let conc = concurrent(&cx, &scripts, &c.schedule);
        for (g, (s, k)) in seq.iter().zip(&conc).enumerate() {
            prop_assert_eq!(&s.0, &k.0, "group {}'s verdicts", g);
            prop_assert_eq!(&s.1, &k.1, "group {}'s outcome (label, triggers, requests)", g);
        }
    }
}

/// The cases the property needs to be worth anything occur: a later group's request replayed
/// from an earlier group's record, and a held request (so the rule is exercised, not vacuous).
#[test]
fn a_later_groups_request_is_held_until_the_earlier_group_delivered_it() {
    let items = [
        ItemMeta {
            name: "invoice".into(),
            label: Label::of(["finance"]),
        },
        ItemMeta {
            name: "salary".into(),
            label: Label::of(["hr"]),
        },
    ];
    let hosts = [Member {
        name: "ocr.example".into(),
        clearance: Label::of(["finance"]),
    }];
    let consumers = [Member {
        name: "agent".into(),
        clearance: Label::of(["finance", "hr"]),
    }];
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
    let cx = CallContext::new(p, &hosts, LabelRules::default()).expect("cx");
    let mut rec: CallRecords<Reply> = CallRecords::concurrent(2);
    let mut ocr = CopyTracker::start(&cx, 0, &Label::public());
    let mut agent = CopyTracker::start(&cx, 1, &Label::public());
    let q = [1; 32];
    // The agent's copy asks first: the OCR copy has not made that request yet.
    assert_eq!(agent.request(&cx, &rec, "ocr.example", &q), Verdict::Wait);
    assert_eq!(ocr.request(&cx, &rec, "ocr.example", &q), Verdict::Deliver);
    assert_eq!(agent.request(&cx, &rec, "ocr.example", &q), Verdict::Wait);
    ocr.delivered(&cx, &mut rec, "ocr.example", q, (0, 0));
    assert_eq!(
        agent.request(&cx, &rec, "ocr.example", &q),
        Verdict::Replay(&(0, 0))
    );
    // A second request at position 2 waits until the OCR group ended, then is a placeholder.
    assert_eq!(agent.request(&cx, &rec, "ocr.example", &q), Verdict::Wait);
    let agent = agent.try_finish(&cx, &rec).expect_err("group 0 still runs");
    let o = ocr
        .try_finish(&cx, &rec)
        .expect("group 0 has no earlier group");
    assert!(o.triggers.is_empty());
    rec.end_group(0);
    let mut agent = *agent;
    assert_eq!(
        agent.request(&cx, &rec, "ocr.example", &q),
        Verdict::Placeholder
    );
    let out = agent.try_finish(&cx, &rec).expect("group 0 ended");
    assert_eq!(out.triggers.len(), 1, "{:?}", out.triggers);
    let contacted: BTreeMap<String, usize> = [("ocr.example".to_string(), 2)].into();
    assert_eq!(out.contacted, contacted);
}
