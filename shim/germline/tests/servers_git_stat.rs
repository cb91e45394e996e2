//! A read-only `git_status` under germline writes nothing back (issue 27; docs/servers.md
//! "Servers that cache stat data").
//!
//! Each copy sees a directory item as files written anew into its own item-store slot: the
//! host's contents, modes and modification times, but new inodes, ctimes and device. With
//! git's default stat check every entry of `.git/index` then looked changed, so every call,
//! even `git status`, re-hashed the tree and rewrote `.git/index`, and the engine committed
//! that index back to the host on every call (about a fifth of a pooled call's time). The
//! release's rootfs now carries a system gitconfig (`core.checkStat = minimal`,
//! `core.trustctime = false`, written by bundles/servers/mcp-server-git/rootfs-hook), so git
//! compares only what the view keeps: size and modification time.
//!
//! Here a pooled session (`--pool 2`) runs `git_status` three times on an unchanged
//! repository whose index is not racy: each answer is the unprotected server's, no call's
//! `_meta.germline.writes` commits anything, and the host's `.git/index` keeps its bytes and
//! its modification time. A release without the gitconfig fails it (every call commits
//! `.git/index`). The shipped manifest declares `git_status` read-only (its copies cannot
//! write at all), so the test runs the release repacked with `git_status` writable, as any
//! tool that writes is: what it shows is the gitconfig's, which every writing tool's call
//! (`git_add`, `git_commit`) relies on.

mod run_common;

use std::path::Path;
use std::time::{Duration, SystemTime};

use run_common::git::*;
use run_common::*;
use serde_json::json;

/// Sets `path`'s modification time to `t`.
fn set_mtime(path: &Path, t: SystemTime) {
    let f = std::fs::File::options()
        .write(true)
        .open(path)
        .expect("open");
    f.set_times(std::fs::FileTimes::new().set_modified(t))
        .expect("set times");
}

fn sha256(path: &Path) -> String {
    let out = std::process::Command::new("sha256sum")
        .arg(path)
        .output()
        .expect("sha256sum");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout)
        .split(' ')
        .next()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn a_pooled_git_status_on_an_unchanged_repository_commits_nothing() {
    if !ready() {
        return;
    }
    let gitconfig = bundle("mcp-server-git").join("rootfs/etc/gitconfig");
    let text = std::fs::read_to_string(&gitconfig).unwrap_or_default();
    assert!(
        text.contains("checkStat = minimal") && text.contains("trustctime = false"),
        "{}: the release's system gitconfig (rootfs-hook): {text:?}",
        gitconfig.display()
    );

    let d = tmp("germline-gitstat-");
    let repo = d.path().join("repo");
    std::fs::create_dir_all(repo.join("src")).expect("mkdir");
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["config", "user.name", "Alice"]);
    git(&repo, &["config", "user.email", "alice@example.com"]);
    std::fs::write(repo.join("README"), "hello\n").expect("write");
    std::fs::write(repo.join("src/main.rs"), "fn main() {}\n").expect("write");
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-q", "-m", "first"]);
    // An unstaged change and an untracked file, so the status has something to say.
    std::fs::write(repo.join("README"), "hello\nmore\n").expect("write");
    std::fs::write(repo.join("notes.txt"), "todo\n").expect("write");
    // The files a minute old, then the host's own status refreshes the index: its entries'
    // times are then older than the index (not racily clean), as in any repository not
    // written in the last second.
    let old = SystemTime::now() - Duration::from_secs(60);
    for f in ["README", "src/main.rs", "notes.txt"] {
        set_mtime(&repo.join(f), old);
    }
    git(&repo, &["status", "--porcelain"]);
    let policy = policy(d.path(), &repo, r#"["finance"]"#, "", "");
    let r = repo.display().to_string();
    let script = json!([
        {"tool": "git_status", "arguments": {"repo_path": r}},
        {"tool": "git_status", "arguments": {"repo_path": r}},
        {"tool": "git_status", "arguments": {"repo_path": r}},
    ]);
    let plain = run_agent(d.path(), &script, &unprotected(&r));
    let index = repo.join(".git/index");
    let (before, mtime_before) = (
        sha256(&index),
        std::fs::metadata(&index)
            .and_then(|m| m.modified())
            .expect("mtime"),
    );
    let writable = d.path().join("writable");
    std::fs::create_dir_all(&writable).expect("mkdir");
    let bundle = repacked(&writable, |m| {
        if let Some(t) = m["tools"]["git_status"].as_object_mut() {
            t.remove("read_only");
        }
    });
    let germ = run_agent(
        d.path(),
        &script,
        &with_bundle(
            run_cmd(
                &policy,
                "germline",
                "mcp-server-git",
                d.path(),
                &["--pool", "2"],
            ),
            &bundle,
        ),
    );
    assert_eq!(germ.len(), 3, "{germ:?}");
    assert_eq!(plain.len(), 3, "{plain:?}");
    for (i, (g, p)) in germ.iter().zip(&plain).enumerate() {
        assert_eq!(answer(g), answer(p), "call {i}");
        assert!(answer(g).contains("modified:   README"), "{}", answer(g));
        let writes = &g["meta"]["germline"]["writes"];
        let committed = writes["committed"].as_array().map_or(0, Vec::len);
        assert!(
            committed == 0 && writes.get("refused").is_none(),
            "call {i}: a read-only git_status on an unchanged repository wrote back: {writes}"
        );
        assert_eq!(g["meta"]["germline"]["mode"], json!("germline"), "{g}");
    }
    assert_eq!(
        sha256(&index),
        before,
        "the host's .git/index was rewritten"
    );
    assert_eq!(
        std::fs::metadata(&index)
            .and_then(|m| m.modified())
            .expect("mtime"),
        mtime_before,
        "the host's .git/index was replaced"
    );
}
