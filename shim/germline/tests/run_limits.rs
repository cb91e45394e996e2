//! The policy's `[limits]` under `germline run` with the real MCP client SDK as the agent:
//! each limit, once hit, refuses the call with an MCP error naming the limit and its policy
//! value, and the next call within the limit succeeds (docs/operations.md).

mod run_common;

use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Command, Stdio};

use run_common::*;
use serde_json::{json, Value};

fn now_utc() -> Value {
    json!({"tool": "get_current_time", "arguments": {"timezone": "UTC"}})
}

fn error(r: &Value) -> String {
    r["error"].as_str().unwrap_or_default().to_string()
}

#[test]
fn call_rate_is_a_token_bucket_per_session() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let policy = w.policy(9, "\n[limits]\ncalls_per_second = 0.2\ncall_burst = 2\n");
    let out = run_agent(
        w.path(),
        &json!([now_utc(), now_utc(), now_utc(), {"sleep": 5.5}, now_utc()]),
        &run_cmd(&policy, "germline", "mcp-server-time", w.path(), &[]),
    );
    let ok: Vec<bool> = out.iter().map(|r| r["ok"] == json!(true)).collect();
    assert_eq!(ok, vec![true, true, false, true], "{out:?}");
    let e = error(&out[2]);
    assert!(
        e.contains("limit \"calls_per_second\" reached")
            && e.contains("limits.calls_per_second = 0.2"),
        "{e}"
    );
}

#[test]
fn item_bytes_per_copy_refuses_a_big_view_and_serves_a_small_one() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let policy = w.policy(9, "\n[limits]\nitem_bytes_per_copy = 64\n");
    let big = json!({"tool": "ocr_annotate", "arguments": {
        "invoice": w.invoice.display().to_string(),
        "salary_sheet": w.salary.display().to_string()}});
    let small = json!({"tool": "summarize", "arguments": {"text": "short"}});
    let out = run_agent(
        w.path(),
        &json!([big, small]),
        &run_cmd(&policy, "germline", "germline-office", w.path(), &[]),
    );
    assert_eq!(out.len(), 2);
    let e = error(&out[0]);
    assert!(
        e.contains("limit \"item_bytes_per_copy\" reached")
            && e.contains("limits.item_bytes_per_copy = 64"),
        "{e}"
    );
    // The error says how big the view was, never what it held.
    assert!(!e.contains(&w.canary_hr), "{e}");
    assert_eq!(out[1]["ok"], json!(true), "{}", out[1]);
}

/// Holds the slot file `path` as another germline on the node holding a live copy would.
fn hold(path: &Path) -> std::fs::File {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .expect("slot file");
    // SAFETY: flock(2) on a descriptor we own.
    let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    assert_eq!(r, 0, "slot {} should be free between calls", path.display());
    f
}

/// `copies_per_node` / `copies_per_release` = 1: a call succeeds, then (the one slot held
/// elsewhere on the node) is refused, then succeeds again once the slot is free.
fn live_copies(limit: &str, slot_prefix: &str) {
    let w = World::new();
    let node_dir = w.path().join("limits");
    let policy = w.policy(
        9,
        &format!(
            "\n[limits]\n{limit} = 1\nnode_dir = \"{}\"\n",
            node_dir.display()
        ),
    );
    let (a, b) = (w.path().join("turn-a"), w.path().join("turn-b"));
    let script = json!([now_utc(), {"wait_file": a}, now_utc(), {"wait_file": b}, now_utc()]);
    let run = AgentRun::start(
        w.path(),
        &script,
        &run_cmd(&policy, "germline", "mcp-server-time", w.path(), &[]),
    );
    let first = run.next();
    assert_eq!(first["ok"], json!(true), "{first}");
    // The first copy made the slot file; hold it while the second call runs.
    let slot = std::fs::read_dir(&node_dir)
        .expect("slot dir")
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            let n = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            n.starts_with(slot_prefix) && n.ends_with("-0.lock")
        })
        .expect("the slot file");
    let held = hold(&slot);
    std::fs::write(&a, "").expect("turn a");
    let second = run.next();
    drop(held);
    std::fs::write(&b, "").expect("turn b");
    let third = run.next();
    assert!(run.finish(), "the agent failed");
    let e = error(&second);
    assert_eq!(second["ok"], json!(false), "{second}");
    assert!(
        e.contains(&format!("limit \"{limit}\" reached"))
            && e.contains(&format!("limits.{limit} = 1")),
        "{e}"
    );
    assert_eq!(third["ok"], json!(true), "{third}");
}

#[test]
fn copies_per_node_counts_every_germline_on_the_node() {
    if !can_run() {
        return;
    }
    live_copies("copies_per_node", "node-");
}

#[test]
fn copies_per_release_counts_copies_of_one_release() {
    if !can_run() {
        return;
    }
    live_copies("copies_per_release", "release-");
}

#[test]
fn pool_beyond_pool_max_is_refused_at_start_and_within_it_serves() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let policy = w.policy(9, "\n[limits]\npool_max = 1\n");
    let cmd = run_cmd(
        &policy,
        "germline",
        "mcp-server-time",
        w.path(),
        &["--pool", "2"],
    );
    let out = Command::new(&cmd[0])
        .args(&cmd[1..])
        .stdin(Stdio::null())
        .output()
        .expect("germline run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("--pool 2") && err.contains("limits.pool_max = 1"),
        "{err}"
    );
    let out = run_agent(
        w.path(),
        &json!([now_utc()]),
        &run_cmd(
            &policy,
            "germline",
            "mcp-server-time",
            w.path(),
            &["--pool", "1"],
        ),
    );
    assert_eq!(out[0]["ok"], json!(true), "{}", out[0]);
}
