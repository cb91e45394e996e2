//! Lemma 1 and Eq. (2): slot labels and the match bit (paper Table VI, regression rows), each
//! with the mechanism switched on and off.

use germline_policy::call::{CallContext, CallRecords, CopyTracker, LabelRules, Verdict};
use germline_policy::plan::{plan, ItemMeta, Member, PlanInput, PlanMode};
use germline_policy::slots::{SlotKey, SlotStore};
use germline_policy::Label;
use proptest::prelude::*;

const RELEASE: &str = "sha256:notes-1.0.0";

fn agent() -> Member {
    Member {
        name: "agent".into(),
        clearance: Label::of(["hr", "finance"]),
    }
}

/// Runs one call with only the agent as consumer: the copy receives its horizon's slot,
/// writes `write` (if any) with its label, and returns its output label.
fn agent_call(
    store: &mut SlotStore,
    items: &[ItemMeta],
    write: Option<&[u8]>,
    rules: LabelRules,
) -> Label {
    let consumers = [agent()];
    let p = plan(
        PlanInput {
            items,
            hosts: &[],
            consumers: &consumers,
        },
        PlanMode::Split,
    )
    .expect("plan");
    assert_eq!(p.groups.len(), 1);
    let cx = CallContext::new(p.clone(), &[], rules).expect("context");
    let key = SlotKey {
        release: RELEASE.into(),
        user: String::new(),
        horizon: p.groups[0].horizon.clone(),
    };
    let slot = store.snapshot(&key).expect("snapshot");
    let copy = CopyTracker::start(&cx, 0, &slot.label());
    if let Some(v) = write {
        store.write(&key, "stash", v, copy.label()).expect("write");
    }
    copy.finish(&cx, &CallRecords::<()>::default()).label
}

/// An HR item written by call 1 and recalled by a later public-only call of the same horizon
/// comes back labelled {hr}; a public-only control keeps ∅. With slot labels off the recalled
/// value is labelled ∅: a public sink would receive HR data.
#[test]
fn recalled_hr_entry_keeps_its_label_across_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("slots.db");
    let salary = [ItemMeta {
        name: "salary.xlsx".into(),
        label: Label::of(["hr"]),
    }];

    for (rules, want) in [
        (LabelRules::default(), Label::of(["hr"])),
        (
            LabelRules {
                slot_label: false,
                ..LabelRules::default()
            },
            Label::public(),
        ),
    ] {
        let _ = std::fs::remove_file(&db);
        {
            let mut store = SlotStore::open(&db).expect("open");
            let l1 = agent_call(&mut store, &salary, Some(b"salary of alice: 123456"), rules);
            assert_eq!(l1, Label::of(["hr"]));
        }
        // A new process: the slot survives in the store on disk.
        let mut store = SlotStore::open(&db).expect("reopen");
        let l2 = agent_call(&mut store, &[], None, rules);
        assert_eq!(l2, want, "slot_label={}", rules.slot_label);
    }

    // Control: the same public-only call with an empty slot.
    let mut fresh = SlotStore::in_memory().expect("store");
    assert_eq!(
        agent_call(&mut fresh, &[], None, LabelRules::default()),
        Label::public()
    );
}

/// Match bit (Remark after Corollary 2): a copy whose request to an admissible host with a
/// non-empty record mismatches gets the placeholder, and its label still includes c(e); with
/// the bit switched off its label misses c(e) although the outcome told it something about
/// the host's record. Public items only, so the view does not already cover c(e).
#[test]
fn mismatched_copy_label_includes_the_host_clearance() {
    let public_items = [ItemMeta {
        name: "readme".into(),
        label: Label::public(),
    }];
    let consumers_apart = [Member {
        name: "blog".into(),
        clearance: Label::of(["hr"]),
    }];
    let hosts2 = [
        Member {
            name: "ocr.example".into(),
            clearance: Label::of(["finance"]),
        },
        Member {
            name: "log.example".into(),
            clearance: Label::of(["finance", "hr"]),
        },
    ];
    let p = plan(
        PlanInput {
            items: &public_items,
            hosts: &hosts2,
            consumers: &consumers_apart,
        },
        PlanMode::Split,
    )
    .expect("plan");
    let ocr_g = p.group_of_host("ocr.example").expect("ocr group");
    let log_g = p.group_of_host("log.example").expect("log group");
    // Two parts of one view: the OCR host is admissible for the log host's group.
    for (rules, want_finance) in [
        (LabelRules::default(), true),
        (
            LabelRules {
                match_bit: false,
                ..LabelRules::default()
            },
            false,
        ),
    ] {
        let cx = CallContext::new(p.clone(), &hosts2, rules).expect("cx");
        let mut rec = CallRecords::default();
        let (first, second) = if ocr_g < log_g {
            (ocr_g, log_g)
        } else {
            (log_g, ocr_g)
        };
        assert_eq!(first, ocr_g, "tie order puts the smaller clearance first");
        let mut ocr = CopyTracker::start(&cx, first, &Label::public());
        ocr.delivered(&cx, &mut rec, "ocr.example", [1; 32], ());
        ocr.finish(&cx, &rec);
        let mut log = CopyTracker::start(&cx, second, &Label::public());
        assert_eq!(
            log.request(&cx, &rec, "ocr.example", &[7; 32]),
            Verdict::Placeholder
        );
        let l = log.finish(&cx, &rec).label;
        assert_eq!(
            l.contains("finance"),
            want_finance,
            "match_bit={}",
            rules.match_bit
        );
    }
}

/// One random call: item labels, host clearances, consumer clearances (as tag bit sets) and
/// the copies' requests as (host index, digest byte).
type RandomCall = (Vec<u8>, Vec<u8>, Vec<u8>, Vec<(u8, u8)>);

#[derive(Debug, Clone)]
struct Scenario {
    calls: Vec<RandomCall>,
}

fn scenario() -> impl Strategy<Value = Scenario> {
    let call = (
        prop::collection::vec(0u8..8, 0..=4),
        prop::collection::vec(0u8..8, 1..=4),
        prop::collection::vec(0u8..8, 1..=2),
        prop::collection::vec((0u8..4, 0u8..3), 0..=6),
    );
    prop::collection::vec(call, 1..=5).prop_map(|calls| Scenario { calls })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Lemma 1 / Corollary 2 over random sessions: every copy's label lies inside its horizon
    /// when it writes its slot, and inside every consumer's clearance when it returns.
    #[test]
    fn labels_stay_inside_horizons(s in scenario()) {
        let tags = ["hr", "finance", "board"];
        let lab = |b: u8| Label::of((0..3).filter(|i| b & (1 << i) != 0).map(|i| tags[i]));
        let mut store = SlotStore::in_memory().expect("store");
        for (items, hosts, consumers, requests) in &s.calls {
            let items: Vec<ItemMeta> = items.iter().enumerate()
                .map(|(i, &b)| ItemMeta { name: format!("x{i}"), label: lab(b) }).collect();
            let hosts: Vec<Member> = hosts.iter().enumerate()
                .map(|(i, &b)| Member { name: format!("h{i}"), clearance: lab(b) }).collect();
            let consumers: Vec<Member> = consumers.iter().enumerate()
                .map(|(i, &b)| Member { name: format!("u{i}"), clearance: lab(b) }).collect();
            let p = plan(PlanInput { items: &items, hosts: &hosts, consumers: &consumers }, PlanMode::Split).expect("plan");
            let cx = CallContext::new(p.clone(), &hosts, LabelRules::default()).expect("cx");
            let mut rec = CallRecords::default();
            for (g, group) in p.groups.iter().enumerate() {
                let key = SlotKey { release: RELEASE.into(), user: String::new(), horizon: group.horizon.clone() };
                let slot = store.snapshot(&key).expect("snapshot");
                let mut copy = CopyTracker::start(&cx, g, &slot.label());
                for &(h, d) in requests {
                    let host = format!("h{}", usize::from(h) % hosts.len());
                    let q = [d; 32];
                    if copy.request(&cx, &rec, &host, &q) == Verdict::Deliver {
                        copy.delivered(&cx, &mut rec, &host, q, ());
                    }
                    prop_assert!(copy.label().flows_to(&group.horizon), "L {} outside κ {}", copy.label(), group.horizon);
                    store.write(&key, &format!("k{g}"), b"v", copy.label()).expect("Lemma 1: write inside horizon");
                }
                let out = copy.finish(&cx, &rec);
                for u in &group.consumers {
                    let c = &consumers.iter().find(|m| &m.name == u).expect("consumer").clearance;
                    prop_assert!(out.label.flows_to(c));
                }
            }
        }
    }
}
