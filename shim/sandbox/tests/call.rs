//! The thinnest end-to-end path: a real mcp-server-time germline, one copy, one MCP call.

mod common;

use serde_json::json;

use germline_sandbox::Germline;

#[test]
fn get_current_time_in_a_checked_copy() {
    if !common::can_run() {
        return;
    }
    let mut g =
        Germline::start(common::time_spec(), common::opts("time")).expect("start the germline");
    assert!(g.check().is_empty(), "G1-G3: {:?}", g.check());
    let r = g
        .call(&[], "get_current_time", json!({"timezone": "Europe/Paris"}))
        .expect("call");
    let t = common::text(&r);
    assert!(t.contains("Europe/Paris"), "{r}");
    // The next call works too, in a fresh copy.
    let r = g
        .call(&[], "get_current_time", json!({"timezone": "UTC"}))
        .expect("second call");
    assert!(common::text(&r).contains("UTC"), "{r}");
    g.stop().expect("stop");
}

#[test]
fn a_warmed_germline_still_passes_g1_to_g3_and_serves() {
    if !common::can_run() {
        return;
    }
    let mut spec = common::time_spec();
    spec.warm = true;
    let mut g = Germline::start(spec, common::opts("warm")).expect("start");
    assert!(g.warmed(), "the synthetic session ran");
    assert_eq!(g.check(), Vec::<String>::new());
    let r = g
        .call(
            &[],
            "get_current_time",
            json!({"timezone": "America/New_York"}),
        )
        .expect("call");
    assert!(common::text(&r).contains("America/New_York"), "{r}");
    g.stop().expect("stop");
}

/// The manifest's warm calls run in the germline's warming session, so every copy inherits
/// their effect (here a call counter: 1 before a copy's own call), and only with them on; a
/// pool copy (which reruns the warming session without them) answers as a fresh one does.
#[test]
fn warm_calls_run_once_in_the_germline_and_pool_copies_answer_like_fresh_ones() {
    if !common::can_run() {
        return;
    }
    for (warm_calls, pool, want) in [
        (vec![], 0, "1"),
        (vec![json!({"tool": "count", "arguments": {}})], 0, "2"),
        (vec![json!({"tool": "count", "arguments": {}})], 1, "2"),
        // Marked `in_pool`: a pool copy runs it again while it waits (a counter is exactly what
        // a publisher must not mark; here it shows that the rerun happens, and only in pool
        // copies).
        (
            vec![json!({"tool": "count", "arguments": {}, "in_pool": true})],
            0,
            "2",
        ),
        (
            vec![json!({"tool": "count", "arguments": {}, "in_pool": true})],
            1,
            "3",
        ),
    ] {
        let mut spec = common::test_release("plain");
        spec.warm = true;
        spec.warm_calls = warm_calls.clone();
        let mut o = common::opts("warmcalls");
        o.pool = pool;
        let mut g = Germline::start(spec, o).expect("start");
        assert!(g.warmed(), "the synthetic session ran");
        assert_eq!(
            g.check(),
            Vec::<String>::new(),
            "G1-G3 after the warm calls"
        );
        for i in 0..2 {
            common::wait_pool_ready(&mut g);
            let got = common::call_text(&mut g, "count", json!({})).expect("call");
            assert_eq!(
                got, want,
                "warm calls {warm_calls:?}, pool {pool}, call {i}: each copy starts from the germline's count"
            );
            if pool > 0 {
                g.refill_pool().expect("refill");
            }
        }
        g.stop().expect("stop");
    }
}

/// MCPServer runs a synchronous tool on a worker thread of the event loop that serves it. A
/// pool copy runs its `in_pool` warm calls on that same loop, before it reads its call, so
/// the call runs on the worker its warming started: no thread is started on the call's path.
/// A copy forked for the call starts one (its germline's warming loop, and its worker, ended
/// before the fork point).
#[test]
fn a_pool_copy_serves_its_call_on_the_worker_thread_its_warming_started() {
    if !common::can_run() {
        return;
    }
    for pool in [1, 0] {
        let mut spec = common::test_release("plain");
        spec.warm = true;
        spec.warm_calls = vec![json!({"tool": "worker", "arguments": {}, "in_pool": true})];
        let mut o = common::opts("worker");
        o.pool = pool;
        let mut g = Germline::start(spec, o).expect("start");
        common::wait_pool_ready(&mut g);
        let got = common::call_text(&mut g, "worker", json!({})).expect("call");
        let v: serde_json::Value = serde_json::from_str(&got).expect("JSON");
        let seen: Vec<u64> = v["seen"]
            .as_array()
            .expect("seen")
            .iter()
            .filter_map(serde_json::Value::as_u64)
            .collect();
        let now = v["now"].as_u64().expect("now");
        if pool > 0 {
            // The germline's warm call, then the pool copy's own.
            assert_eq!(seen.len(), 2, "{got}");
            assert_eq!(Some(&now), seen.last(), "pool copy: {got}");
        } else {
            assert_eq!(seen.len(), 1, "{got}");
            assert!(!seen.contains(&now), "fresh copy: {got}");
        }
        g.stop().expect("stop");
    }
}

#[test]
fn the_copy_gets_its_deadline_and_leaves_nothing_behind() {
    if !common::can_run() {
        return;
    }
    let mut g = Germline::start(common::time_spec(), common::opts("clean")).expect("start");
    let before = std::time::Instant::now();
    let c = g.copy().expect("copy");
    // Fixed at the fork: 30 s after an instant between `before` and now.
    let d = c.deadline() - before;
    let thirty = std::time::Duration::from_secs(30);
    assert!(d >= thirty && d <= thirty + before.elapsed(), "{d:?}");
    let pid = c.pid();
    drop(c);
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "the copy is gone"
    );
    assert!(g.stray_processes().is_empty());
    let id = g.status().id;
    g.stop().expect("stop");
    for h in ["pids", "memory", "freezer", "cpu"] {
        let p = format!("/sys/fs/cgroup/{h}/germline/{id}");
        if germline_sandbox::cgroup::version() == germline_sandbox::cgroup::Version::V1 {
            assert!(!std::path::Path::new(&p).exists(), "{p} is left");
        }
    }
}
