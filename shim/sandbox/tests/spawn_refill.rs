//! The spawn pool's refill yields to a call (issue 28; docs/sandbox.md, "The pool of spawned
//! copies", **When the refill runs**): a refill step starts a launch on the refill thread and
//! returns; a call that arrives meanwhile takes a waiting copy if there is one (the launch in
//! flight then waits, frozen, while that copy holds data), else the launch in flight itself,
//! and never spawns a copy of its own while one is on its way. Real Node server
//! (server-everything, bundles/out/node-everything), real launcher, checks and cgroups.

mod common;

use std::time::{Duration, Instant};

use germline_sandbox::spawn::{SpawnOptions, SpawnPool};
use serde_json::json;

use common::node::{node_ready, spec};

/// Idle steps until the pool is at its depth (bounded).
fn fill(pool: &mut SpawnPool) {
    let end = Instant::now() + Duration::from_secs(120);
    while pool.refill_one().expect("refill") {
        assert!(
            Instant::now() < end,
            "the pool did not fill: {:?}",
            pool.status()
        );
    }
}

fn echo(copy: &mut germline_sandbox::spawn::Spawned, m: &str) -> String {
    let r = copy
        .mcp_call_relayed("echo", json!({"message": m}), None, &mut |_| None)
        .expect("echo");
    common::text(&r)
}

#[test]
fn a_call_during_a_refill_takes_a_waiting_copy_or_the_launch_in_flight_never_its_own_spawn() {
    if !common::can_run() || !node_ready() {
        return;
    }
    let mut opts = SpawnOptions::new(&common::id("refill"));
    opts.min = 2;
    opts.max = 2;
    let mut pool = SpawnPool::start(spec(), opts).expect("start the pool");
    let caps = json!({});
    let deadline = || Instant::now() + Duration::from_secs(30);
    fill(&mut pool);
    assert_eq!(pool.ready_pids().len(), 2, "{:?}", pool.status());

    // A first call takes a waiting copy; after it, the idle steps reap it, then one starts a
    // launch on the refill thread and returns at once, with the launch still in flight (a Node
    // spawn takes hundreds of milliseconds; a step waits 2 ms at most).
    let mut c = pool.take(&caps, deadline()).expect("take");
    let r = echo(&mut c, "one");
    assert_eq!(r, "Echo: one");
    pool.retire(c, Ok(json!({}))).expect("retire");
    // The first step hands the retired copy to the reaper thread and starts the launch: the
    // copy exits beside the launch, so calls back to back still find a launch in flight.
    let end = Instant::now() + Duration::from_secs(5);
    while pool.refill_in_flight().is_none() {
        assert!(
            pool.refill_one().expect("refill step"),
            "more steps are due"
        );
        assert!(
            Instant::now() < end,
            "no launch started: {:?}",
            pool.status()
        );
    }
    // The reaper thread reaps the retired copy by itself, with no more steps.
    let end = Instant::now() + Duration::from_secs(5);
    while pool.status().dying > 0 {
        assert!(
            Instant::now() < end,
            "the retired copy was not reaped: {:?}",
            pool.status()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        pool.refill_in_flight(),
        Some(false),
        "a launch in flight, running"
    );
    let made = pool.status().spawned;

    // A call arriving now is served by the waiting copy, not by the launch in flight; the launch
    // waits frozen while the call's copy holds data.
    let waiting = pool.ready_pids();
    assert_eq!(waiting.len(), 1);
    let mut c = pool.take(&caps, deadline()).expect("take during a refill");
    assert_eq!(c.pid(), waiting[0], "the call got the waiting copy");
    assert_eq!(
        pool.refill_in_flight(),
        Some(true),
        "the launch in flight is frozen while a copy of the call holds data"
    );
    assert_eq!(echo(&mut c, "two"), "Echo: two");
    pool.retire(c, Ok(json!({}))).expect("retire");

    // The next call finds no waiting copy: it gets the launch in flight (thawed and waited
    // for), not a spawn of its own.
    assert!(pool.ready_pids().is_empty());
    // (Its process joins its cgroup as the launcher on the refill thread starts it, frozen or
    // not: wait for it to be there.)
    let end = Instant::now() + Duration::from_secs(10);
    while pool.in_flight_pids().is_empty() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(5));
    }
    let in_flight = pool.in_flight_pids();
    assert_eq!(in_flight.len(), 1, "the launch in flight is one process");
    let mut c = pool
        .take(&caps, deadline())
        .expect("take the launch in flight");
    assert_eq!(
        vec![c.pid()],
        in_flight,
        "the call got the launch in flight"
    );
    assert_eq!(echo(&mut c, "three"), "Echo: three");
    pool.retire(c, Ok(json!({}))).expect("retire");

    let st = pool.status();
    assert_eq!(
        st.spawned, made,
        "no copy was spawned on a call's path: {st:?}"
    );
    assert_eq!(st.on_call_path, 0, "{st:?}");
    assert_eq!(st.from_refill_in_flight, 1, "{st:?}");
    assert_eq!(st.refill_held, 1, "{st:?}");
    assert_eq!(pool.refill_in_flight(), None);

    // With neither a waiting copy nor a launch in flight, the call spawns its own (pool 0).
    let c = pool
        .take(&caps, deadline())
        .expect("take with an empty pool");
    pool.retire(c, Ok(json!({}))).expect("retire");
    assert_eq!(pool.status().on_call_path, 1);
    // The refill fills the pool again in the background, and stopping it ends the thread.
    fill(&mut pool);
    assert_eq!(pool.ready_pids().len(), 2);
    assert!(pool.refill_one().is_ok());
    let st = pool.stop().expect("status");
    assert_eq!(st.ready, 2);
}

/// The retire is off the call's path (docs/sandbox.md, **The retire**): `retire` freezes the
/// copy and returns without waiting for its exit; the copy runs nothing more; the idle steps
/// kill and reap it (its cgroup removed, its keeper waited for).
#[test]
fn a_retired_copy_is_frozen_at_once_and_reaped_between_calls() {
    if !common::can_run() || !node_ready() {
        return;
    }
    let mut opts = SpawnOptions::new(&common::id("retire"));
    opts.min = 1;
    opts.max = 1;
    let mut pool = SpawnPool::start(spec(), opts).expect("start the pool");
    let mut c = pool
        .take(&json!({}), Instant::now() + Duration::from_secs(30))
        .expect("take");
    assert_eq!(echo(&mut c, "once"), "Echo: once");
    let pid = c.pid();
    let cgroup_dirs = germline_sandbox::cgroup::dirs_of(c.cgroup().rel());
    assert!(cgroup_dirs.iter().any(|d| d.exists()));
    pool.retire(c, Ok(json!({}))).expect("retire");
    // Not waited for: still there, frozen (asked of the kernel; it lands within moments).
    assert_eq!(pool.status().dying, 1);
    assert!(std::path::Path::new(&format!("/proc/{pid}")).exists());
    let end = Instant::now() + Duration::from_secs(5);
    while !frozen_or_gone(pid) {
        assert!(
            Instant::now() < end,
            "the retired copy {pid} was not frozen"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    // The idle steps kill and reap it.
    let end = Instant::now() + Duration::from_secs(10);
    while pool.status().dying > 0 {
        pool.refill_one().expect("idle step");
        assert!(Instant::now() < end, "not reaped: {:?}", pool.status());
    }
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "{pid} is gone"
    );
    assert!(
        cgroup_dirs.iter().all(|d| !d.exists()),
        "its cgroup is removed: {cgroup_dirs:?}"
    );
    pool.stop();
}

/// Whether `pid` is frozen by its cgroup's freezer (or already gone).
fn frozen_or_gone(pid: i32) -> bool {
    let Ok(cg) = std::fs::read_to_string(format!("/proc/{pid}/cgroup")) else {
        return true;
    };
    // v2 (unified line "0::/path") or v1's freezer line.
    for line in cg.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, ctl, path) = (parts.next(), parts.next(), parts.next());
        let (Some(ctl), Some(path)) = (ctl, path) else {
            continue;
        };
        if ctl == "freezer" {
            let state =
                std::fs::read_to_string(format!("/sys/fs/cgroup/freezer{path}/freezer.state"))
                    .unwrap_or_default();
            return state.trim() == "FROZEN";
        }
        if ctl.is_empty()
            && germline_sandbox::cgroup::version() == germline_sandbox::cgroup::Version::V2
        {
            let ev = std::fs::read_to_string(format!("/sys/fs/cgroup{path}/cgroup.events"))
                .unwrap_or_default();
            return ev.lines().any(|l| l == "frozen 1");
        }
    }
    false
}

/// Back to back (no idle step between an answer and the next call), the next take hands the
/// retired copy to the pool's reaper thread and returns; the thread kills it, waits for its
/// keeper and removes its cgroup with no idle step and no later take (docs/sandbox.md, **The
/// retire**; before the thread the take sent the kill and a later step reaped it).
#[test]
fn back_to_back_a_retired_copy_is_reaped_by_the_reaper_thread_not_the_take() {
    if !common::can_run() || !node_ready() {
        return;
    }
    let mut opts = SpawnOptions::new(&common::id("reaper"));
    opts.min = 1;
    opts.max = 1;
    let mut pool = SpawnPool::start(spec(), opts).expect("start the pool");
    let deadline = || Instant::now() + Duration::from_secs(30);
    let mut c = pool.take(&json!({}), deadline()).expect("take");
    assert_eq!(echo(&mut c, "first"), "Echo: first");
    let pid = c.pid();
    let cgroup_dirs = germline_sandbox::cgroup::dirs_of(c.cgroup().rel());
    pool.retire(c, Ok(json!({}))).expect("retire");
    // The next call at once: no idle step ran, so the pool is empty and this spawns.
    let mut c = pool
        .take(&json!({}), deadline())
        .expect("take back to back");
    assert_ne!(c.pid(), pid);
    let end = Instant::now() + Duration::from_secs(10);
    while std::path::Path::new(&format!("/proc/{pid}")).exists()
        || cgroup_dirs.iter().any(|d| d.exists())
    {
        assert!(
            Instant::now() < end,
            "the retired copy {pid} was not reaped off the call's thread: {:?}",
            pool.status()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let end = Instant::now() + Duration::from_secs(5);
    while pool.status().dying > 0 {
        assert!(Instant::now() < end, "{:?}", pool.status());
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(echo(&mut c, "second"), "Echo: second");
    pool.retire(c, Ok(json!({}))).expect("retire");
    pool.stop();
}

/// Calls a moment apart (an agent's next request comes while the last copy still exits): the
/// first idle step after a call starts the refill's launch at once, beside the retired copy's
/// exit on the reaper thread, so the next call takes that launch in flight rather than
/// spawning a copy of its own on its path. (Waiting for the exit before launching left every
/// call of a back-to-back session to spawn its own copy.)
#[test]
fn one_idle_step_between_calls_starts_the_launch_the_next_call_takes() {
    if !common::can_run() || !node_ready() {
        return;
    }
    let mut opts = SpawnOptions::new(&common::id("step"));
    opts.min = 1;
    opts.max = 1;
    let mut pool = SpawnPool::start(spec(), opts).expect("start the pool");
    let deadline = || Instant::now() + Duration::from_secs(30);
    fill(&mut pool);
    for round in 0..3 {
        let before = pool.status();
        let mut c = pool.take(&json!({}), deadline()).expect("take");
        assert_eq!(echo(&mut c, "hi"), "Echo: hi");
        pool.retire(c, Ok(json!({}))).expect("retire");
        // One step, as the transport runs between the answer and the agent's next request.
        let _ = pool.refill_one().expect("idle step");
        assert!(
            pool.refill_in_flight().is_some(),
            "round {round}: the step after the call started no launch: {:?}",
            pool.status()
        );
        let after = pool.status();
        assert_eq!(
            after.on_call_path, before.on_call_path,
            "round {round}: a copy was spawned on a call's path: {after:?}"
        );
    }
    // The next call takes the launch in flight.
    let made = pool.status().from_refill_in_flight;
    let mut c = pool.take(&json!({}), deadline()).expect("take");
    assert_eq!(echo(&mut c, "last"), "Echo: last");
    let st = pool.status();
    assert_eq!(st.from_refill_in_flight, made + 1, "{st:?}");
    assert_eq!(st.on_call_path, 0, "{st:?}");
    pool.retire(c, Ok(json!({}))).expect("retire");
    pool.stop();
}

/// Waits (bounded) until `pid`'s freezer says frozen (`want`) or thawed; `pid` must be alive.
fn wait_frozen(pid: i32, want: bool, what: &str) {
    let end = Instant::now() + Duration::from_secs(5);
    loop {
        assert!(
            std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "{what}: {pid} is gone"
        );
        if frozen_or_gone(pid) == want {
            return;
        }
        assert!(Instant::now() < end, "{what}: {pid} frozen is not {want}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Thawed ahead (docs/sandbox.md, **Thawed ahead**): between calls the copy the next call
/// takes, and only that one, is thawed, so its take thaws nothing on the call's path; every
/// other waiting copy stays frozen while a copy of the call holds data; a copy that is to hold
/// data otherwise (`take_fresh`) first freezes the one thawed ahead again.
#[test]
fn the_next_copy_is_thawed_between_calls_and_only_that_one() {
    if !common::can_run() || !node_ready() {
        return;
    }
    let mut opts = SpawnOptions::new(&common::id("ahead"));
    opts.min = 2;
    opts.max = 2;
    let mut pool = SpawnPool::start(spec(), opts).expect("start the pool");
    let deadline = || Instant::now() + Duration::from_secs(30);
    fill(&mut pool);
    let waiting = pool.ready_pids();
    assert_eq!(waiting.len(), 2, "{:?}", pool.status());
    assert!(pool.next_thawed_ahead(), "the idle steps thawed the head");
    wait_frozen(waiting[0], false, "the head, thawed ahead");
    wait_frozen(waiting[1], true, "the other waiting copy");

    let mut c = pool.take(&json!({}), deadline()).expect("take");
    assert_eq!(c.pid(), waiting[0], "the call takes the copy thawed ahead");
    assert!(!pool.next_thawed_ahead());
    assert_eq!(echo(&mut c, "one"), "Echo: one");
    // While the call's copy holds data, the copy still waiting stays frozen.
    wait_frozen(waiting[1], true, "waiting beside a call");
    pool.retire(c, Ok(json!({}))).expect("retire");

    // The next idle step thaws the new head.
    let _ = pool.refill_one().expect("idle step");
    assert!(pool.next_thawed_ahead());
    wait_frozen(waiting[1], false, "the new head, thawed ahead");
    // A copy that will hold data and is not the head: the head is frozen again first.
    let f = pool.take_fresh(deadline()).expect("take a fresh copy");
    assert!(!pool.next_thawed_ahead());
    wait_frozen(waiting[1], true, "the head, while a fresh copy holds data");
    pool.retire(f, Ok(json!({}))).expect("retire");
    // And thawed again between calls; its call gets it.
    let _ = pool.refill_one().expect("idle step");
    assert!(pool.next_thawed_ahead());
    let mut c = pool.take(&json!({}), deadline()).expect("take");
    assert_eq!(c.pid(), waiting[1]);
    assert_eq!(echo(&mut c, "two"), "Echo: two");
    pool.retire(c, Ok(json!({}))).expect("retire");
    pool.stop();
}

/// The transport's doorbell (`germline_sys::doorbell`, `SpawnPool::set_doorbell`): an idle
/// step that waits for the launch in flight returns as soon as the bell rings (the agent's
/// request is queued) and at once while it stays rung, instead of at the end of its 2 ms
/// wait; cleared, the steps wait again and the launch's end (poked by the refill thread)
/// still pools it.
#[test]
fn a_rung_doorbell_ends_the_idle_steps_wait_for_the_launch_in_flight() {
    if !common::can_run() || !node_ready() {
        return;
    }
    let mut opts = SpawnOptions::new(&common::id("bell"));
    opts.min = 1;
    opts.max = 1;
    let mut pool = SpawnPool::start(spec(), opts).expect("start the pool");
    let bell = std::sync::Arc::new(germline_sys::doorbell::Doorbell::default());
    pool.set_doorbell(bell.clone());
    fill(&mut pool);
    let mut c = pool
        .take(&json!({}), Instant::now() + Duration::from_secs(30))
        .expect("take");
    assert_eq!(echo(&mut c, "one"), "Echo: one");
    pool.retire(c, Ok(json!({}))).expect("retire");
    let end = Instant::now() + Duration::from_secs(5);
    while pool.refill_in_flight().is_none() {
        assert!(pool.refill_one().expect("idle step"), "more steps are due");
        assert!(Instant::now() < end, "no launch started");
    }
    // A Node launch takes hundreds of milliseconds: 100 steps each waiting 2 ms would take
    // 200 ms; rung, none of them waits.
    bell.ring();
    let t0 = Instant::now();
    for _ in 0..100 {
        let _ = pool.refill_one().expect("idle step");
    }
    let took = t0.elapsed();
    assert!(
        took < Duration::from_millis(100),
        "rung, 100 idle steps took {took:?}"
    );
    // Cleared: the steps wait for the launch, whose end wakes them; it joins the pool.
    bell.clear();
    fill(&mut pool);
    assert_eq!(pool.ready_pids().len(), 1, "{:?}", pool.status());
    assert_eq!(pool.refill_in_flight(), None);
    pool.stop();
}
