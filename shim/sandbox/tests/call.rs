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
