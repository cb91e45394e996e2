//! The baselines' directory items (`ToolProcess::put_dirs`, docs/security-matrix.md, "Directory
//! items"): under `germline run --mode sig-pin` the real mcp-server-git, driven by the official
//! client SDK (tests/run/agent.py), gets a repository passed as an argument bound once per
//! tool process at `/run/items/dir<n>`, reused by later calls on the same directory (cached by
//! device and inode), and a second directory gets a second bind. Counted from outside, in the
//! tool process's own mount table (`/proc/<pid>/mountinfo`), between the agent's steps.

mod run_common;

use std::path::{Path, PathBuf};
use std::process::Command;

use run_common::*;
use serde_json::json;

fn git(repo: &Path, args: &[&str]) {
    let out = Command::new("/usr/bin/git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .output()
        .expect("git");
    assert!(out.status.success(), "git {args:?}: {out:?}");
}

/// A repository with one commit on `branch` and one untracked file named `untracked`.
fn repository(at: &Path, branch: &str, untracked: &str) {
    std::fs::create_dir_all(at).expect("mkdir");
    git(at, &["init", "-q", "-b", branch]);
    git(at, &["config", "user.name", "Alice"]);
    git(at, &["config", "user.email", "alice@example.com"]);
    std::fs::write(at.join("README"), "hello\n").expect("write");
    git(at, &["add", "."]);
    git(at, &["commit", "-q", "-m", "first"]);
    std::fs::write(at.join(untracked), "x\n").expect("write");
}

/// The tool process among `germline run`'s descendants: the one whose mount table has
/// `/run/items/dir0`.
fn tool_process(agent: i32) -> i32 {
    let found: Vec<i32> = descendants(agent)
        .into_iter()
        .filter(|p| dir_binds(*p).iter().any(|m| m.0 == "/run/items/dir0"))
        .collect();
    assert_eq!(found.len(), 1, "one tool process binds dir0: {found:?}");
    found[0]
}

/// The process's mounts: (mount point, root of the mount in its filesystem), all of them.
fn mounts(pid: i32) -> Vec<(String, String)> {
    std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            Some((f.get(4)?.to_string(), f.get(3)?.to_string()))
        })
        .collect()
}

fn dir_binds(pid: i32) -> Vec<(String, String)> {
    mounts(pid)
        .into_iter()
        .filter(|(at, _)| at.starts_with("/run/items/dir"))
        .collect()
}

#[test]
fn a_baseline_binds_a_directory_once_per_process_and_a_second_directory_once_more() {
    if !can_run() {
        return;
    }
    if !bundle("mcp-server-git").exists() {
        assert!(
            std::env::var_os("GERMLINE_REQUIRE_ROOT_TESTS").is_none(),
            "bundles/out/mcp-server-git missing (scripts/setup.d/65-servers.sh)"
        );
        return;
    }
    let d = tempfile::Builder::new()
        .prefix("germline-putdirs-")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let (a, b): (PathBuf, PathBuf) = (d.path().join("repo-a"), d.path().join("repo-b"));
    repository(&a, "main", "only-in-a.txt");
    repository(&b, "other", "only-in-b.txt");
    let policy = d.path().join("policy.toml");
    std::fs::write(
        &policy,
        format!(
            r#"[labels]
finance = "invoices"

[[item]]
path = "{d}/**"
label = []

[[argument]]
tool = "git_*"
name = "*"
label = []

[consumers]
agent = ["finance"]
"#,
            d = d.path().display()
        ),
    )
    .expect("policy");
    let status = |p: &Path| json!({"tool": "git_status", "arguments": {"repo_path": p.display().to_string()}});
    let turn = |n: u32| d.path().join(format!("turn{n}"));
    const N: usize = 5;
    let script = json!([
        status(&a),
        {"wait_file": turn(1).display().to_string()},
        {"tool": "git_status", "arguments": {"repo_path": a.display().to_string()}, "repeat": N - 1},
        {"wait_file": turn(2).display().to_string()},
        status(&b),
        {"wait_file": turn(3).display().to_string()},
    ]);
    let run = AgentRun::start(
        d.path(),
        &script,
        &run_cmd(&policy, "sig-pin", "mcp-server-git", d.path(), &[]),
    );
    let first = run.next();
    let t = text(&first);
    assert!(
        t.contains("On branch main") && t.contains("only-in-a.txt"),
        "{first}"
    );
    // After one call: one bind, of repo-a.
    let pid = tool_process(run.pid());
    let after_one = mounts(pid).len();
    let binds = dir_binds(pid);
    assert_eq!(binds.len(), 1, "{binds:?}");
    assert!(binds[0].1.ends_with("/repo-a"), "{binds:?}");

    // After N calls on the same directory: the same process, the same mount table.
    std::fs::write(turn(1), "").expect("turn");
    for _ in 1..N {
        let r = run.next();
        assert!(text(&r).contains("only-in-a.txt"), "{r}");
    }
    assert_eq!(
        tool_process(run.pid()),
        pid,
        "the same tool process served every call"
    );
    assert_eq!(
        mounts(pid).len(),
        after_one,
        "the mount table grew with calls on one directory: {:?}",
        dir_binds(pid)
    );
    assert_eq!(dir_binds(pid).len(), 1);

    // A second, distinct directory: a second bind, at dir1, of repo-b.
    std::fs::write(turn(2), "").expect("turn");
    let r = run.next();
    let t = text(&r);
    assert!(
        t.contains("On branch other") && t.contains("only-in-b.txt") && !t.contains("only-in-a"),
        "{r}"
    );
    assert_eq!(mounts(pid).len(), after_one + 1);
    let binds = dir_binds(pid);
    assert_eq!(binds.len(), 2, "{binds:?}");
    assert!(
        binds
            .iter()
            .any(|(at, root)| at == "/run/items/dir1" && root.ends_with("/repo-b")),
        "{binds:?}"
    );
    std::fs::write(turn(3), "").expect("turn");
    assert!(run.finish(), "the agent ended well");
}
