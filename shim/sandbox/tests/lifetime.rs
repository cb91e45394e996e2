//! Lifetimes: the absolute deadline (3 s here), the memory limit, malformed messages and
//! crashes; after each the copy is gone and the next call works.

mod common;

use std::time::{Duration, Instant};

use serde_json::json;

use germline_sandbox::{Error, Germline};

fn expect_then_recover(
    name: &str,
    tool: &str,
    args: serde_json::Value,
    want: fn(&Error) -> bool,
    deadline_ms: u64,
) -> Duration {
    let mut spec = common::test_release("plain");
    spec.limits.deadline_ms = deadline_ms;
    spec.limits.memory_bytes = 128 << 20;
    let mut g = Germline::start(spec, common::opts(name)).expect("start");
    let t = Instant::now();
    let r = g.call(&[], tool, args);
    let took = t.elapsed();
    match &r {
        Err(e) if want(e) => {}
        other => panic!("{name}: unexpected outcome {other:?}"),
    }
    assert!(
        g.stray_processes().is_empty(),
        "{name}: processes left {:?}",
        g.stray_processes()
    );
    assert_eq!(
        common::call_text(&mut g, "echo", json!({"text": "next"})).expect("the next call"),
        "next"
    );
    g.stop().expect("stop");
    took
}

fn deadline(e: &Error) -> bool {
    matches!(e, Error::Deadline)
}

#[test]
fn a_copy_that_never_finishes_is_killed_at_the_deadline() {
    if !common::can_run() {
        return;
    }
    let took = expect_then_recover("sleep", "sleep_forever", json!({}), deadline, 3000);
    assert!(
        took >= Duration::from_millis(2900) && took < Duration::from_millis(4500),
        "{took:?}"
    );
}

#[test]
fn a_copy_that_keeps_sending_messages_is_killed_at_the_deadline() {
    if !common::can_run() {
        return;
    }
    let took = expect_then_recover("chatter", "chatter", json!({}), deadline, 3000);
    assert!(
        took >= Duration::from_millis(2900) && took < Duration::from_millis(4500),
        "{took:?}"
    );
}

#[test]
fn a_copy_with_a_busy_child_is_killed_with_it_at_the_deadline() {
    if !common::can_run() {
        return;
    }
    let took = expect_then_recover("busy", "busy_child", json!({}), deadline, 3000);
    assert!(
        took >= Duration::from_millis(2900) && took < Duration::from_millis(4500),
        "{took:?}"
    );
}

#[test]
fn a_copy_past_its_memory_limit_is_killed_and_reported() {
    if !common::can_run() {
        return;
    }
    expect_then_recover(
        "hog",
        "hog",
        json!({"mb": 600}),
        |e| matches!(e, Error::MemoryLimit),
        20_000,
    );
}

#[test]
fn a_malformed_message_or_a_crash_ends_the_copy_and_the_next_call_works() {
    if !common::can_run() {
        return;
    }
    expect_then_recover(
        "garbage",
        "garbage",
        json!({}),
        |e| matches!(e, Error::Malformed(_)),
        20_000,
    );
    expect_then_recover(
        "crash",
        "crash",
        json!({}),
        |e| matches!(e, Error::Crashed(_)),
        20_000,
    );
}
