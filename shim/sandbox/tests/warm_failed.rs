//! A warm call that fails is skipped, as before (a warm call is an optimisation), but no
//! longer silently: the forked germline reports each failure to the shim, which says it on
//! stderr and counts it (`Status::warm_failed`, `germline status`); the spawned pool counts
//! its launches' failures (`PoolStatus::warm_failed`) and says the first. Stop 39 found
//! mcp-server-git's warm calls failing for days, unseen. Real releases: the sandbox's Python
//! test release on the real bootstrap, and server-everything (Node) on the real launcher.

mod common;

use std::time::{Duration, Instant};

use germline_sandbox::spawn::{SpawnOptions, SpawnPool};
use germline_sandbox::Germline;
use serde_json::json;

#[test]
fn a_germlines_failing_warm_calls_are_reported_and_the_others_still_run() {
    if !common::can_run() {
        return;
    }
    let mut spec = common::test_release("plain");
    spec.warm = true;
    spec.warm_calls = vec![
        // A missing argument: the SDK answers a tool error (`isError`).
        json!({"tool": "echo", "arguments": {}}),
        json!({"tool": "no_such_tool", "arguments": {}}),
        // Still run after the two failures: the copy's own call then counts 2.
        json!({"tool": "count", "arguments": {}}),
    ];
    let mut g = Germline::start(spec, common::opts("warmfail")).expect("start");
    assert!(g.warmed(), "the warming session ran");
    assert_eq!(g.warm_failed(), 2, "{:?}", g.warm_failures());
    assert_eq!(g.status().warm_failed, 2);
    let f = g.warm_failures().to_vec();
    assert!(
        f[0].starts_with("'echo': ") && f[0].contains("text"),
        "{f:?}"
    );
    assert!(f[1].starts_with("'no_such_tool': "), "{f:?}");
    assert_eq!(
        common::call_text(&mut g, "count", json!({})).expect("call"),
        "2",
        "the warm call after the failed ones ran"
    );
    g.stop().expect("stop");

    // Warm calls that work report nothing.
    let mut spec = common::test_release("plain");
    spec.warm = true;
    spec.warm_calls = vec![json!({"tool": "count", "arguments": {}})];
    let g = Germline::start(spec, common::opts("warmok")).expect("start");
    assert_eq!(g.warm_failed(), 0, "{:?}", g.warm_failures());
}

#[test]
fn a_spawned_pools_failing_warm_calls_are_counted_and_its_copies_still_serve() {
    if !common::can_run() || !common::node::node_ready() {
        return;
    }
    let mut spec = common::node::spec();
    // server-everything's echo without its message (a tool error, `isError`) and a tool it
    // does not have (a JSON-RPC error answer, which failed every launch before): on every
    // launch.
    spec.warm_calls = vec![
        json!({"tool": "echo", "arguments": {}}),
        json!({"tool": "no_such_tool", "arguments": {}}),
    ];
    let mut opts = SpawnOptions::new(&common::id("warmfailspawn"));
    opts.min = 1;
    opts.max = 1;
    let mut pool = SpawnPool::start(spec, opts).expect("start the pool");
    let end = Instant::now() + Duration::from_secs(60);
    while pool.ready_pids().is_empty() {
        pool.refill_one().expect("idle step");
        assert!(Instant::now() < end, "not pooled: {:?}", pool.status());
    }
    let st = pool.status();
    assert!(st.warm_failed >= 2, "both, on each launch: {st:?}");
    assert_eq!(
        st.refill_failed, 0,
        "a failed warm call fails no launch: {st:?}"
    );
    let mut c = pool
        .take(&json!({}), Instant::now() + Duration::from_secs(30))
        .expect("take");
    let r = c
        .mcp_call_relayed("echo", json!({"message": "x"}), None, &mut |_| None)
        .expect("echo");
    assert_eq!(common::text(&r), "Echo: x");
    pool.retire(c, Ok(json!({}))).expect("retire");
    let _ = pool.stop();
}
