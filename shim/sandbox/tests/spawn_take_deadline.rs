//! A call that takes the refill's launch in flight waits for it until the call's own deadline
//! at most, then fails closed (`Error::NotReady`), the launch staying in flight and joining the
//! pool at the next idle steps; a launch in flight that fails its start or checks is counted
//! (`PoolStatus::refill_failed`) and logged before the call spawns its own copy (docs/sandbox.md,
//! "The pool of spawned copies", **A call takes**). Real Node server (server-everything,
//! bundles/out/node-everything), real launcher, checks and cgroups.

mod common;

use std::time::{Duration, Instant};

use germline_sandbox::spawn::{SpawnOptions, SpawnPool};
use germline_sandbox::Error;
use serde_json::json;

use common::node::{node_ready, spec};

/// Takes the only waiting copy, uses and retires it, then runs idle steps until a refill
/// launch is in flight and its process is in its cgroup; returns that process's pids.
fn drain_then_launch(pool: &mut SpawnPool) -> Vec<i32> {
    let mut c = pool
        .take(&json!({}), Instant::now() + Duration::from_secs(30))
        .expect("take the waiting copy");
    let r = c
        .mcp_call_relayed("echo", json!({"message": "x"}), None, &mut |_| None)
        .expect("echo");
    assert_eq!(common::text(&r), "Echo: x");
    pool.retire(c, Ok(json!({}))).expect("retire");
    let end = Instant::now() + Duration::from_secs(10);
    while pool.refill_in_flight().is_none() {
        pool.refill_one().expect("idle step");
        assert!(Instant::now() < end, "no launch: {:?}", pool.status());
    }
    assert!(pool.ready_pids().is_empty(), "{:?}", pool.status());
    while pool.in_flight_pids().is_empty() {
        assert!(
            Instant::now() < end,
            "the launch's process never joined its cgroup"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    pool.in_flight_pids()
}

#[test]
fn a_call_waits_for_the_launch_in_flight_until_its_own_deadline_and_a_failed_launch_is_counted() {
    if !common::can_run() || !node_ready() {
        return;
    }
    let mut opts = SpawnOptions::new(&common::id("takedl"));
    opts.min = 1;
    opts.max = 1;
    let mut pool = SpawnPool::start(spec(), opts).expect("start the pool");

    // 1. A call with a deadline shorter than the launch (a Node launch, handshake and warm
    // call take hundreds of milliseconds; this one began a moment ago) fails closed at its
    // deadline instead of waiting for the launch's 60 s init deadline.
    drain_then_launch(&mut pool);
    let t0 = Instant::now();
    let r = pool.take(&json!({}), Instant::now() + Duration::from_millis(5));
    let waited = t0.elapsed();
    match r {
        Err(Error::NotReady(why)) => assert!(why.contains("in flight"), "{why}"),
        Err(e) => panic!("not the not-ready error: {e}"),
        Ok(c) => panic!(
            "the call waited {waited:?} for the launch in flight, past its 5 ms deadline (pid {})",
            c.pid()
        ),
    }
    assert!(waited < Duration::from_secs(1), "waited {waited:?}");
    assert!(
        pool.refill_in_flight().is_some(),
        "the launch stays in flight after the call gave up"
    );
    // The idle steps pool it; nothing was spawned on a call's path.
    let end = Instant::now() + Duration::from_secs(60);
    while pool.ready_pids().is_empty() {
        pool.refill_one().expect("idle step");
        assert!(Instant::now() < end, "not pooled: {:?}", pool.status());
    }
    let st = pool.status();
    assert_eq!((st.on_call_path, st.refill_failed), (0, 0), "{st:?}");

    // 2. A launch in flight that dies before the call takes it (its process killed): the call
    // spawns its own copy, and the failure is counted (and logged on stderr), not silent.
    let pids = drain_then_launch(&mut pool);
    for p in &pids {
        let ok = std::process::Command::new("kill")
            .args(["-9", &p.to_string()])
            .status()
            .expect("run kill")
            .success();
        assert!(ok, "kill -9 {p}");
    }
    let mut c = pool
        .take(&json!({}), Instant::now() + Duration::from_secs(30))
        .expect("take: a copy of its own");
    assert!(!pids.contains(&c.pid()), "not the killed launch");
    let r = c
        .mcp_call_relayed("echo", json!({"message": "own"}), None, &mut |_| None)
        .expect("echo");
    assert_eq!(common::text(&r), "Echo: own");
    pool.retire(c, Ok(json!({}))).expect("retire");
    let st = pool.status();
    assert_eq!(st.refill_failed, 1, "the failed launch is counted: {st:?}");
    assert_eq!(st.on_call_path, 1, "{st:?}");
    assert_eq!(st.from_refill_in_flight, 0, "{st:?}");
    pool.stop();
}
