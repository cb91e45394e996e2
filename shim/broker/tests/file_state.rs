//! The pointer to a horizon's file state (issue 27, slot entry `@files`) through the real
//! broker: committed with the copy's output label, so the next copy of that horizon starts
//! with it; seen only at its own horizon; refused outside the horizon and for a probe or
//! control re-run, whose writes go nowhere.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::*;
use germline_broker::FILES_KEY;
use germline_policy::call::LabelRules;
use germline_policy::plan::{plan, PlanInput, PlanMode};
use germline_policy::witness::ReplaySpec;
use germline_policy::Label;

const RELEASE: &str = "sha256:test-release";

fn listener() -> std::net::TcpListener {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
    l.set_nonblocking(true).expect("nonblocking");
    l
}

/// One copy of the single group of a call whose items are `items` and whose agent is cleared
/// for `agent`: (call, the generation it starts from).
fn start(w: &World, items: &[(&str, &[&str])], agent: &[&str]) -> (u64, Option<String>) {
    let items: Vec<_> = items.iter().map(|(n, l)| item(n, l)).collect();
    let (call, p) = begin(
        w,
        &items,
        &[],
        &[m("agent", agent)],
        PlanMode::Split,
        LabelRules::default(),
    );
    assert_eq!(p.groups.len(), 1);
    w.broker
        .start_copy_on(
            call,
            0,
            listener(),
            Instant::now() + Duration::from_secs(10),
        )
        .expect("start copy");
    let at = w.broker.copy_files(call, 0).expect("copy files");
    (call, at)
}

#[test]
fn the_files_pointer_is_labelled_per_horizon_and_never_written_by_a_rerun() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = policy(dir.path(), &[], "");
    let w = broker(dir, p, |_| {});
    let g1 = "a".repeat(64);

    // A finance copy that saw a finance item commits: the pointer carries its label.
    let (call, at) = start(&w, &[("invoice", &["finance"])], &["finance"]);
    assert_eq!(at, None, "a fresh horizon starts from the initial state");
    let e = w
        .broker
        .commit_files(call, 0, &g1)
        .expect_err("only an ended copy commits");
    assert!(e.to_string().contains("has not ended"), "{e}");
    w.broker.end_copy(call, 0).expect("end");
    assert!(
        w.broker.commit_files(call, 0, "../x").is_err(),
        "not a sha256"
    );
    let label = w.broker.commit_files(call, 0, &g1).expect("commit");
    assert_eq!(label, Label::of(["finance"]));
    w.broker.end_call(call).expect("end call");
    assert!(w.audit().contains("\"event\":\"state_commit\""));

    // The next copy of that horizon starts from it, and with its label (ℓ(σ)) although it
    // holds no item itself.
    let (call, at) = start(&w, &[], &["finance"]);
    assert_eq!(at.as_deref(), Some(g1.as_str()));
    let (out, _) = w.broker.end_copy(call, 0).expect("end");
    assert_eq!(
        out.label,
        Label::of(["finance"]),
        "file state labels the copy"
    );
    w.broker.end_call(call).expect("end call");

    // Another clearance is another horizon: it does not see the finance state.
    let (call, at) = start(&w, &[], &["finance", "hr"]);
    assert_eq!(at, None);
    w.broker.end_copy(call, 0).expect("end");
    w.broker.end_call(call).expect("end call");

    // A copy whose label left its horizon (an hr input raised it) cannot commit there.
    let (call, _) = start(&w, &[], &["finance"]);
    w.broker
        .raise_copy(call, 0, &Label::of(["hr"]))
        .expect("raise");
    w.broker.end_copy(call, 0).expect("end");
    let e = w
        .broker
        .commit_files(call, 0, &"b".repeat(64))
        .expect_err("outside the horizon");
    assert!(e.to_string().contains("outside the slot's horizon"), "{e}");
    w.broker.end_call(call).expect("end call");

    // A probe re-run starts from the recorded snapshot and commits nothing.
    let items = [item("invoice", &["finance"])];
    let consumers = [m("agent", &["finance"])];
    let pl = plan(
        PlanInput {
            items: &items,
            hosts: &[],
            consumers: &consumers,
        },
        PlanMode::NoSplit,
    )
    .expect("plan");
    let spec = ReplaySpec {
        host: "ocr.example".into(),
        transcript: vec![],
        slot: BTreeMap::from([(FILES_KEY.to_string(), hex::encode("c".repeat(64)))]),
        twin_time_ns: 1,
        twin_seed: 2,
    };
    let (call, _) = w
        .broker
        .begin_replay(RELEASE, "", pl, &[], spec)
        .expect("replay");
    w.broker
        .start_copy_on(
            call,
            0,
            listener(),
            Instant::now() + Duration::from_secs(10),
        )
        .expect("start");
    assert_eq!(
        w.broker.copy_files(call, 0).expect("files").as_deref(),
        Some("c".repeat(64).as_str())
    );
    w.broker.end_copy(call, 0).expect("end");
    let e = w
        .broker
        .commit_files(call, 0, &"d".repeat(64))
        .expect_err("a re-run commits nothing");
    assert!(e.to_string().contains("re-run"), "{e}");
    w.broker.end_call(call).expect("end call");
    let (call, at) = start(&w, &[], &["finance"]);
    assert_eq!(at.as_deref(), Some(g1.as_str()), "still the first commit");
    w.broker.end_copy(call, 0).expect("end");
    w.broker.end_call(call).expect("end call");
}
