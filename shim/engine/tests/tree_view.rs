//! Directory items, probed from inside a real copy (issue 27): the engine turns a directory
//! argument into its labelled files (callmeta, treeitem), hands one copy the entries of its
//! view, and the sandbox mounts them at their host paths. A copy of the sandbox's test release
//! then tries to read every file it may not see, by every spelling we can think of: its path,
//! `dir/../dir/secret`, the names of symlinks inside the tree that point out of it, and a hard
//! link that a public rule covers. None may yield a byte of the secret, and the copy owns
//! what it sees (git's "dubious ownership" check), read-only.

#[path = "../../sandbox/tests/common/mod.rs"]
mod common;

use std::os::unix::fs::{symlink, MetadataExt};
use std::path::Path;

use germline_engine::callmeta::{self, ItemKind};
use germline_engine::treeitem;
use germline_policy::{Label, Policy};
use germline_release::manifest::{Destinations, Tool};
use germline_sandbox::{Germline, TreeEntry};
use serde_json::json;

const SECRET: &str = "CANARY-HR-7f3a";

fn tool() -> Tool {
    Tool {
        destinations: Destinations {
            hosts: Some(vec![]),
            host_of_argument: None,
        },
        consumers: None,
        flows: Vec::new(),
        read_only: false,
    }
}

/// The world: `<d>/repo` (public) with `hr/` inside it (hr), and `<d>/hr-outside/` (hr).
fn world(d: &Path) -> Policy {
    let repo = d.join("repo");
    for (f, c) in [
        ("repo/README", "hello\n".to_string()),
        ("repo/bin/run.sh", "#!/bin/sh\n".to_string()),
        ("repo/hr/salary.csv", format!("alice,{SECRET}\n")),
        ("hr-outside/secret.txt", format!("{SECRET} outside\n")),
    ] {
        let p = d.join(f);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(&p, c).expect("write");
    }
    std::fs::set_permissions(
        repo.join("bin/run.sh"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    // Links out of the tree: to a file, to a directory, and a hard link to the hr file.
    symlink(d.join("hr-outside/secret.txt"), repo.join("leak.txt")).expect("ln");
    symlink("../hr-outside", repo.join("leakdir")).expect("ln");
    std::fs::hard_link(d.join("hr-outside/secret.txt"), repo.join("notes.txt")).expect("ln");
    let text = format!(
        r#"[labels]
hr = "hr"
finance = "finance"

[[item]]
path = "{d}/repo/**"
label = []

[[item]]
path = "{d}/repo/hr/**"
label = ["hr"]

[[item]]
path = "{d}/hr-outside/**"
label = ["hr"]
"#,
        d = d.display()
    );
    Policy::parse(Path::new("policy.toml"), &text).expect("policy")
}

#[test]
fn a_copy_sees_exactly_its_view_of_a_directory() {
    if !common::can_run() {
        return;
    }
    // Below /tmp: the test rootfs has an empty /tmp to mount the tree's slot on.
    let d = tempfile::Builder::new()
        .prefix("germline-tree-")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let policy = world(d.path());
    let repo = d.path().join("repo");
    // Spelled through `..`: the item is the directory the kernel reaches.
    let spelled = format!("{}/../../repo", repo.join("bin").display());
    let meta = callmeta::build(
        &policy,
        "list_dirs",
        &tool(),
        &json!({ "dir": spelled }),
        None,
        &["agent".to_string()],
    )
    .expect("meta");
    let files: Vec<(String, Label)> = meta
        .items
        .iter()
        .filter(|i| matches!(i.kind, ItemKind::TreeFile { .. }))
        .map(|i| (i.name.clone(), i.label.clone()))
        .collect();
    let at = |f: &str| repo.join(f).display().to_string();
    assert_eq!(
        files,
        vec![
            (at("README"), Label::public()),
            (at("bin/run.sh"), Label::public()),
            (at("hr/salary.csv"), Label::of(["hr"])),
            // A hard link has no name to trust: the default label (every tag).
            (at("notes.txt"), Label::of(["finance", "hr"])),
        ],
        "symlinks are left out, every regular file is labelled"
    );
    // The copy's arguments name the directory where the copy finds it.
    let view = Label::of(["finance"]);
    let in_view = |i: &callmeta::ArgItem| i.label.flows_to(&view);
    let args = meta
        .arguments_for(&in_view, "/run/items")
        .expect("arguments");
    assert_eq!(args["dir"], repo.display().to_string());
    let entries = treeitem::view_entries(&meta.items, &in_view);
    let paths: Vec<&str> = entries.iter().map(TreeEntry::path).collect();
    assert_eq!(
        paths,
        [repo.display().to_string(), at("README"), at("bin/run.sh")]
    );

    let mut opts = common::opts("tree-view");
    opts.pool = 1;
    let mut g = Germline::start(common::test_release("plain"), opts).expect("start");
    let mut copy = g.copy().expect("copy");
    g.prepare_copy_view(&mut copy, &[], &entries, true)
        .expect("prepare");
    copy.deliver_items(&[]).expect("deliver");

    // Owned by the copy's root (the host id mapped to it), read-only, x bit kept.
    let host = |p: &str| format!("/proc/{}/root{p}", copy.pid());
    for p in [repo.display().to_string(), at("README"), at("bin")] {
        let m = std::fs::symlink_metadata(host(&p)).expect("stat in the copy");
        assert_eq!(
            (m.uid(), m.gid()),
            (
                germline_sandbox::germline::HOST_ID,
                germline_sandbox::germline::HOST_ID
            ),
            "{p}"
        );
    }
    let m = std::fs::metadata(host(&at("bin/run.sh"))).expect("stat");
    assert_eq!(m.mode() & 0o777, 0o555);
    let want_mtime = std::fs::metadata(repo.join("README"))
        .expect("stat")
        .mtime();
    let m = std::fs::metadata(host(&at("README"))).expect("stat");
    assert_eq!(
        m.mtime(),
        want_mtime,
        "git's index compares modification times"
    );

    let r = copy
        .mcp_call(
            "list_dirs",
            json!({"paths": [repo.display().to_string(), at("bin"), at("hr")]}),
        )
        .map(|v| common::json_of(&common::text(&v)))
        .expect("list");
    assert_eq!(
        r[repo.display().to_string()],
        json!(["README", "bin"]),
        "{r}"
    );
    assert_eq!(r[at("bin")], json!(["run.sh"]), "{r}");
    assert_eq!(
        r[at("hr")],
        "ENOENT",
        "hr/ holds nothing visible: absent: {r}"
    );

    let tries: Vec<String> = [
        "hr/salary.csv",
        "bin/../hr/salary.csv",
        "./hr//salary.csv",
        "notes.txt",
        "leak.txt",
        "leakdir/secret.txt",
        "../hr-outside/secret.txt",
        "bin/../../repo/hr/salary.csv",
    ]
    .iter()
    .map(|f| format!("{}/{f}", repo.display()))
    .chain([
        d.path().join("hr-outside/secret.txt").display().to_string(),
        "/run/items/salary.csv".to_string(),
    ])
    .collect();
    let r = copy
        .mcp_call("read_files", json!({ "paths": tries }))
        .map(|v| common::json_of(&common::text(&v)))
        .expect("read");
    for t in &tries {
        let got = &r[t];
        assert_eq!(
            got, "ENOENT",
            "{t}: must be absent from the copy, got {got}"
        );
    }
    assert!(!r.to_string().contains(SECRET), "{r}");
    let r = copy
        .mcp_call("read_files", json!({"paths": [at("README")]}))
        .map(|v| common::json_of(&common::text(&v)))
        .expect("read");
    assert_eq!(r[at("README")], "hello\n");
    copy.kill();
    let _ = g.stop();
}

/// A pool copy's directory view is bound by the calling thread itself (branch git41: no
/// forked helper): it joins the copy's mount namespace for the bind and comes back. After
/// each pooled copy the thread is in its own mount namespace again, with its own root and
/// working directory. Between copies the germline writes the last view ahead into a slot of
/// its own (`ItemStore::write_ahead`): a copy whose view is exactly that one gets that slot,
/// and a copy whose view differs in one file's contents only gets its own view, never the
/// one written ahead.
#[test]
fn the_calling_thread_binds_a_pool_copys_view_and_comes_back() {
    if !common::can_run() {
        return;
    }
    let d = tempfile::Builder::new()
        .prefix("germline-tree-bind-")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let repo = d.path().join("repo");
    let file = repo.join("view.txt").display().to_string();
    let cwd = tempfile::tempdir().expect("cwd");
    std::env::set_current_dir(cwd.path()).expect("chdir");
    let here = || {
        ["ns/mnt", "root", "cwd"].map(|l| {
            std::fs::read_link(format!("/proc/thread-self/{l}"))
                .expect("readlink")
                .display()
                .to_string()
        })
    };
    let before = here();
    assert_eq!(before[2], cwd.path().display().to_string());
    let mut opts = common::opts("tree-bind");
    opts.pool = 1;
    let mut g = Germline::start(common::test_release("plain"), opts).expect("start");
    // (contents, how many copies had a view written ahead once this one has its view)
    for (round, (contents, ahead)) in [("first", 0), ("second", 0), ("second", 1), ("first", 1)]
        .into_iter()
        .enumerate()
    {
        let entries = [
            TreeEntry::Dir {
                path: repo.display().to_string(),
            },
            TreeEntry::File {
                path: file.clone(),
                contents: format!("{contents}\n").into_bytes(),
                mode: 0o644,
                mtime: (1_700_000_000, 0),
            },
        ];
        // Taken from the pool only once ready (else forked, with every mount made by a
        // helper): a pool copy has its base mounts, and gets binds alone at its call.
        let t = std::time::Instant::now();
        while !g
            .pool_states()
            .contains(&germline_sandbox::PoolState::Ready)
        {
            assert!(t.elapsed().as_secs() < 20, "{round}: no pool copy ready");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let mut copy = g.copy().expect("copy");
        assert!(
            matches!(copy.pool_state(), germline_sandbox::PoolState::Ready),
            "a pool copy"
        );
        g.prepare_copy_view(&mut copy, &[], &entries, true)
            .expect("prepare");
        assert_eq!(here(), before, "{round}: the thread came back");
        assert_eq!(g.trees_ahead(), (ahead, None), "{round}");
        copy.deliver_items(&[]).expect("deliver");
        let r = copy
            .mcp_call("list_dirs", json!({"paths": [repo.display().to_string()]}))
            .map(|v| common::json_of(&common::text(&v)))
            .expect("list");
        assert_eq!(r[repo.display().to_string()], json!(["view.txt"]), "{r}");
        let r = copy
            .mcp_call("read_files", json!({"paths": [file]}))
            .map(|v| common::json_of(&common::text(&v)))
            .expect("read");
        assert_eq!(r[&file], format!("{contents}\n"), "{round}: {r}");
        copy.kill();
        g.refill_pool().expect("refill");
    }
    let _ = g.stop();
    std::env::set_current_dir("/").expect("chdir /");
}
