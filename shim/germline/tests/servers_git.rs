//! The real mcp-server-git from PyPI (issue 27) through `germline run --mode germline` and the
//! official client SDK (tests/run/agent.py), against the same release's code run unprotected
//! on the same calls: status, log, diff, show and branch on a repository passed as an
//! argument, by its absolute path and relatively to the deployer's `[workdirs]` directory.
//!
//! The agent is cleared for finance only; the repository's `hr/` and a symlink out of it to an
//! hr file are not in its view, so they are absent from its copy: git's status lacks exactly
//! their "Untracked files" lines, and every other answer is identical. Writes (`git_add`)
//! are refused today (docs/servers.md says why).

mod run_common;

use std::path::Path;
use std::process::Command;

use run_common::*;
use serde_json::{json, Value};

fn git(repo: &Path, args: &[&str]) {
    let out = Command::new("/usr/bin/git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .env("GIT_AUTHOR_DATE", "2026-11-30T12:00:00Z")
        .env("GIT_COMMITTER_DATE", "2026-11-30T12:00:00Z")
        .output()
        .expect("git");
    assert!(out.status.success(), "git {args:?}: {out:?}");
}

/// A small repository: two commits, a branch, an unstaged change, an untracked hr file and a
/// symlink out to an hr file outside the repository.
fn repository(d: &Path) -> std::path::PathBuf {
    let repo = d.join("repo");
    std::fs::create_dir_all(repo.join("src")).expect("mkdir");
    std::fs::create_dir_all(d.join("hr")).expect("mkdir");
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["config", "user.name", "Alice"]);
    git(&repo, &["config", "user.email", "alice@example.com"]);
    std::fs::write(repo.join("README"), "hello\n").expect("write");
    std::fs::write(repo.join("src/main.rs"), "fn main() {}\n").expect("write");
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-q", "-m", "first"]);
    std::fs::write(repo.join("README"), "hello\nmore\n").expect("write");
    git(&repo, &["commit", "-q", "-am", "second"]);
    git(&repo, &["branch", "feature"]);
    std::fs::write(
        repo.join("src/main.rs"),
        "fn main() { println!(\"hi\"); }\n",
    )
    .expect("write");
    std::fs::create_dir_all(repo.join("hr")).expect("mkdir");
    std::fs::write(repo.join("hr/salary.csv"), "alice,CANARY-HR\n").expect("write");
    std::fs::write(d.join("hr/secret.txt"), "CANARY-HR outside\n").expect("write");
    std::os::unix::fs::symlink(d.join("hr/secret.txt"), repo.join("leak.txt")).expect("ln");
    repo
}

fn policy(d: &Path, repo: &Path) -> std::path::PathBuf {
    let text = format!(
        r#"[labels]
hr = "personnel records"
finance = "invoices"

[[item]]
path = "{repo}/**"
label = []

[[item]]
path = "{repo}/hr/**"
label = ["hr"]

[[item]]
path = "{d}/hr/**"
label = ["hr"]

[[argument]]
tool = "git_*"
name = "*"
label = []

[consumers]
agent = ["finance"]

[workdirs]
"mcp-server-git" = "{repo}"
"#,
        repo = repo.display(),
        d = d.display()
    );
    let p = d.join("policy.toml");
    std::fs::write(&p, text).expect("policy");
    p
}

fn answer(r: &Value) -> String {
    format!("ok={} {}", r["ok"], text(r))
}

#[test]
fn git_reads_a_repository_passed_as_an_argument_as_unprotected() {
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
    // Below /tmp: the release's rootfs has an empty /tmp for the tree's mount, none of /var.
    let d = tempfile::Builder::new()
        .prefix("germline-git-")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let repo = repository(d.path());
    let policy = policy(d.path(), &repo);
    let r = repo.display().to_string();
    let reads = json!([
        {"tool": "git_status", "arguments": {"repo_path": r}},
        {"tool": "git_log", "arguments": {"repo_path": r}},
        {"tool": "git_diff_unstaged", "arguments": {"repo_path": r}},
        {"tool": "git_diff", "arguments": {"repo_path": r, "target": "HEAD~1"}},
        {"tool": "git_show", "arguments": {"repo_path": r, "revision": "HEAD"}},
        {"tool": "git_branch", "arguments": {"repo_path": r, "branch_type": "local"}},
        // Relative: resolved against [workdirs] under germline, the cwd unprotected.
        {"tool": "git_status", "arguments": {"repo_path": "."}},
    ]);
    let mut script = reads.as_array().cloned().expect("steps");
    script.push(json!({"tool": "git_add", "arguments": {"repo_path": r, "files": ["README"]}}));
    let germ = run_agent(
        d.path(),
        &Value::Array(script),
        &run_cmd(&policy, "germline", "mcp-server-git", d.path(), &[]),
    );
    // Unprotected: the release's own code and git, on the host, in the repository.
    let rootfs = bundle("mcp-server-git").join("rootfs");
    let plain = run_agent(
        d.path(),
        &reads,
        &[
            "env".into(),
            "-C".into(),
            r.clone(),
            "PYTHONDONTWRITEBYTECODE=1".into(),
            format!(
                "PYTHONPATH={}",
                rootfs.join("usr/lib/python3/dist-packages").display()
            ),
            "GIT_PYTHON_GIT_EXECUTABLE=/usr/bin/git".into(),
            "/usr/bin/python3.11".into(),
            "-m".into(),
            "mcp_server_git".into(),
        ],
    );
    assert_eq!(germ.len(), 8, "{germ:?}");
    assert_eq!(plain.len(), 7, "{plain:?}");
    let g: Vec<String> = germ.iter().map(answer).collect();
    let p: Vec<String> = plain.iter().map(answer).collect();
    // Status: unprotected lists the untracked hr/ and leak.txt; in the agent's copy they are
    // absent (hr/ is labelled hr, the symlink is never followed nor copied), and nothing else
    // differs.
    let untracked = "Untracked files:\n  (use \"git add <file>...\" to include in what will be \
                     committed)\n\thr/\n\tleak.txt\n\n";
    for i in [0, 6] {
        assert!(p[i].contains(untracked), "unprotected status: {}", p[i]);
        assert_eq!(g[i], p[i].replace(untracked, ""), "status (call {i})");
        assert!(g[i].contains("modified:   src/main.rs"), "{}", g[i]);
    }
    for i in 1..6 {
        assert_eq!(g[i], p[i], "call {i} ({})", reads[i]["tool"]);
        assert!(g[i].starts_with("ok=true"), "{}", g[i]);
    }
    assert!(g[1].contains("Message: second") && g[1].contains("Message: first"));
    assert!(
        g[5].contains("feature") && g[5].contains("* main"),
        "{}",
        g[5]
    );
    assert!(!g.concat().contains("CANARY-HR"));
    // Writes are not built yet, and git_add is refused before it could write: its file name
    // `README` names an existing file under [workdirs], so it is a file item, which a copy gets
    // at /run/items (as every file argument today), outside the repository's tree. (Were it
    // let through, the read-only tree would refuse git's index lock.)
    let add = &g[7];
    assert!(
        add.starts_with("ok=false")
            && add.contains("/run/items/")
            && add.contains("is outside the repository"),
        "git_add: {add}"
    );
    let staged = Command::new("/usr/bin/git")
        .args(["-C", &r, "diff", "--cached", "--name-only"])
        .output()
        .expect("git");
    assert!(staged.stdout.is_empty(), "nothing staged on the host");
}
