//! The forked pool honours the pool memory cap a spawned pool has (`[pool] memory_mb`,
//! `Options::memory_cap_bytes`): the refill forks no copy that would take the waiting copies'
//! private memory past it, and counts each refill it held back (`Status::pool_cap_held`). Since
//! stop 39 the pool deepens to a call's group count within `[limits] pool_max`, with no bound on
//! memory until this. Real Python test release, real forks.

mod common;

use germline_sandbox::Germline;

#[test]
fn the_memory_cap_bounds_a_forked_pools_depth_and_the_hold_is_counted() {
    if !common::can_run() {
        return;
    }
    // A cap below one copy's private memory: the first copy fits (nothing measured yet, as in
    // a spawned pool), the second does not.
    let mut o = common::opts("capsmall");
    o.pool = 3;
    o.memory_cap_bytes = Some(1);
    let mut g = Germline::start(common::test_release("plain"), o).expect("start");
    assert_eq!(g.pool_len(), 1, "{:?}", g.status());
    let st = g.status();
    assert!(st.pool_cap_held >= 1, "{st:?}");
    assert!(st.pool_private_bytes > 1, "{st:?}");
    assert_eq!(st.pool_memory_cap_bytes, Some(1));
    // An idle step holds back again, and says there is no more to do.
    let held = st.pool_cap_held;
    assert!(
        !g.refill_one().expect("idle step"),
        "held back: nothing more"
    );
    assert_eq!(g.pool_len(), 1);
    assert_eq!(g.status().pool_cap_held, held + 1);
    g.stop().expect("stop");

    // A cap with room: the pool fills to its depth, nothing held.
    let mut o = common::opts("capbig");
    o.pool = 3;
    o.memory_cap_bytes = Some(1 << 30);
    let mut g = Germline::start(common::test_release("plain"), o).expect("start");
    assert_eq!(g.pool_len(), 3, "{:?}", g.status());
    assert_eq!(g.status().pool_cap_held, 0);
    g.stop().expect("stop");
}
