//! Items delivered at their own absolute paths (`/home/alice/invoice.pdf`): readable by the
//! copy under its Landlock layers, empty outside its view, present in that copy's mount
//! namespace only (not in the germline, not in a live pool copy, not in a later copy).

mod common;

use std::path::Path;

use serde_json::json;

use germline_sandbox::spec::DEFAULT_PYTHON_ROOTFS;
use germline_sandbox::{Error, Germline, Item};

/// The rootfs as the setup script now builds it: an empty /home to mount on.
fn home() {
    let d = Path::new(DEFAULT_PYTHON_ROOTFS).join("home");
    if !d.is_dir() {
        std::fs::create_dir_all(&d).expect("mkdir home");
    }
}

fn items() -> Vec<Item> {
    vec![
        Item::named("invoice.pdf", b"INVOICE 42".to_vec(), true).at("/home/alice/invoice.pdf"),
        Item::named("salary.xlsx", b"SALARY SECRET".to_vec(), false)
            .at("/home/alice/hr/salary.xlsx"),
        Item::named("q3.txt", b"Q3 REPORT".to_vec(), true).at("/tmp/report/q3.txt"),
        Item::named("notes.txt", b"NOTES".to_vec(), true),
    ]
}

#[test]
fn items_at_their_own_paths_only_in_their_copy() {
    if !common::can_run() {
        return;
    }
    home();
    let mut opts = common::opts("item-paths");
    opts.pool = 1;
    let mut g = Germline::start(common::test_release("plain"), opts).expect("start");
    common::wait_pool_ready(&mut g);
    let pool_pid = g.pool_pids()[0];
    // The pool copy is handed out; the pool is refilled only after the call.
    let mut copy = g.copy().expect("copy");
    g.refill_pool().expect("refill");
    let live_pool = g.pool_pids()[0];
    assert_ne!(live_pool, pool_pid);
    let items = items();
    g.prepare_copy_items(&mut copy, &items).expect("prepare");
    copy.deliver_items(&items).expect("deliver");
    let seen_from = |pid: i32, p: &str| Path::new(&format!("/proc/{pid}/root{p}")).exists();
    assert!(seen_from(copy.pid(), "/home/alice/invoice.pdf"));
    for other in [g.pid(), live_pool] {
        assert!(
            !seen_from(other, "/home/alice") && !seen_from(other, "/tmp/report"),
            "process {other} sees the copy's items"
        );
    }
    let files = [
        "/home/alice/invoice.pdf",
        "/home/alice/hr/salary.xlsx",
        "/tmp/report/q3.txt",
        "/run/items/invoice.pdf",
        "/run/items/notes.txt",
    ];
    let r = copy
        .mcp_call("read_files", json!({"paths": files}))
        .map(|v| common::json_of(&common::text(&v)))
        .expect("read");
    assert_eq!(r["/home/alice/invoice.pdf"], "INVOICE 42", "{r}");
    assert_eq!(
        r["/home/alice/hr/salary.xlsx"], "",
        "outside the view: empty"
    );
    assert_eq!(r["/tmp/report/q3.txt"], "Q3 REPORT", "{r}");
    assert_eq!(r["/run/items/invoice.pdf"], "INVOICE 42", "{r}");
    assert_eq!(r["/run/items/notes.txt"], "NOTES", "{r}");
    let dirs = copy
        .mcp_call("list_dirs", json!({"paths": ["/home", "/home/alice"]}))
        .map(|v| common::json_of(&common::text(&v)))
        .expect("list");
    assert_eq!(dirs["/home"], json!(["alice"]), "{dirs}");
    assert_eq!(dirs["/home/alice"], json!(["hr", "invoice.pdf"]), "{dirs}");
    let w = copy
        .mcp_call("plant_all", json!({"secret": "x"}))
        .map(|v| common::json_of(&common::text(&v)))
        .expect("plant");
    assert_ne!(w["/tmp/plant"], "ok", "{w}");
    copy.finish(Ok(json!(null))).expect("finish");

    // A later copy of the same germline finds nothing at those paths.
    let later = common::json_of(
        &common::call_text(&mut g, "read_files", json!({"paths": files})).expect("later"),
    );
    for f in &files[..3] {
        assert_eq!(later[*f], "ENOENT", "{f}: {later}");
    }
    g.stop().expect("stop");
}

/// Mechanism off: without the germline's Landlock rules on the item store, the same items are
/// mounted at the same paths but the copy cannot read them (a mount made after the rules is
/// covered by none), while /run/items still works.
#[test]
fn without_the_item_store_rules_landlock_denies_the_paths() {
    if !common::can_run() {
        return;
    }
    home();
    let mut opts = common::opts("item-paths-off");
    opts.ablation.no_item_rules = true;
    let mut g = Germline::start(common::test_release("plain"), opts).expect("start");
    let paths = ["/home/alice/invoice.pdf", "/run/items/invoice.pdf"];
    let r = common::json_of(&common::text(
        &g.call_items(&items(), "read_files", json!({"paths": paths}))
            .expect("call"),
    ));
    g.stop().expect("stop");
    assert_eq!(r["/home/alice/invoice.pdf"], "EACCES", "{r}");
    assert_eq!(r["/run/items/invoice.pdf"], "INVOICE 42", "{r}");
}

#[test]
fn item_paths_that_would_hide_the_rootfs_are_refused() {
    if !common::can_run() {
        return;
    }
    home();
    let mut g =
        Germline::start(common::test_release("plain"), common::opts("item-refuse")).expect("start");
    for (path, why) in [
        ("/usr/lib/x.pdf", "readable path"),
        ("/etc/x.pdf", "readable path"),
        ("/x.pdf", "only /"),
        ("home/alice/x.pdf", "absolute"),
        ("/home/../etc/x.pdf", "absolute plain path"),
        ("/run/items/x.pdf", "shim's mounts"),
    ] {
        let item = Item::named("x.pdf", b"X".to_vec(), true).at(path);
        match g.call_items(&[item], "echo", json!({"text": "hi"})) {
            Err(Error::Spec(e)) => assert!(e.contains(why), "{path}: {e}"),
            other => panic!("{path} accepted: {other:?}"),
        }
    }
    // The germline still serves.
    assert_eq!(
        common::call_text(&mut g, "echo", json!({"text": "hi"})).expect("call"),
        "hi"
    );
    g.stop().expect("stop");
}
