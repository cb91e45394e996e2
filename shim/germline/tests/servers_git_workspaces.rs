//! Workspaces (issue 27, docs/policy.md "Writes"): the real mcp-server-git from PyPI through
//! `germline run --mode germline` and the official client SDK (tests/run/agent.py), against
//! the same release's code run unprotected on the same calls.
//!
//! * A repository declared in `[workspaces]` for a consumer cleared for finance only, while
//!   the agent is cleared for hr too: Plan puts the workspace's consumer in a group of its own
//!   (its view lacks `hr/`), so every call runs two copies and only the workspace group's
//!   copy's writes reach the host. `git_add` + `git_commit` of a public file: the commit is
//!   the unprotected server's (same tree, message, author, parent). `git_add` of the hr file:
//!   the agent's copy staged it, and that staging is never committed.
//! * A repository declared for the agent that no argument names as an item (the tool gets a
//!   relative path, which without `[workdirs]` stays a plain string): the copies still have
//!   it, at its path, and the commit lands as unprotected; a repository that is not declared
//!   (and exists on the host) is not in the copy at all.

mod run_common;

use std::path::{Path, PathBuf};
use std::process::Command;

use run_common::git::*;
use run_common::*;
use serde_json::{json, Value};

/// The policy over the shared repository (run_common::git): `agent` is the agent's clearance,
/// `workspace` the repository's `[workspaces]` entry (none: not declared), and a reviewer
/// cleared for finance.
fn policy(d: &Path, repo: &Path, agent: &str, workspace: Option<&str>) -> PathBuf {
    let mut consumers = String::from("reviewer = [\"finance\"]\n");
    if let Some(w) = workspace {
        consumers.push_str(&format!(
            "\n[workspaces.\"mcp-server-git\"]\n\"{}\" = {w}\n",
            repo.display()
        ));
    }
    run_common::git::policy(d, repo, agent, "", &consumers)
}

fn committed(r: &Value) -> Vec<String> {
    r["meta"]["germline"]["writes"]["committed"]
        .as_array()
        .map(|c| {
            c.iter()
                .filter_map(|p| p.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn writes_commit_for_the_workspace_consumer_plan_places() {
    if !ready() {
        return;
    }
    let d = tmp("germline-ws-");
    let repo = repository(d.path());
    let r = repo.display().to_string();
    let policy = policy(
        d.path(),
        &repo,
        r#"["finance", "hr"]"#,
        Some(r#"{ consumer = "reviewer" }"#),
    );
    let public = |r: &str| {
        json!([
            {"tool": "git_add", "arguments": {"repo_path": r, "files": ["src/main.rs"]}},
            {"tool": "git_commit", "arguments": {"repo_path": r, "message": "third"}},
        ])
    };
    let mut script = public(&r).as_array().cloned().expect("steps");
    script.push(
        json!({"tool": "git_add", "arguments": {"repo_path": r, "files": ["hr/salary.csv"]}}),
    );
    let germ = run_agent(
        d.path(),
        &Value::Array(script),
        &run_cmd(&policy, "germline", "mcp-server-git", d.path(), &[]),
    );
    assert_eq!(germ.len(), 3, "{germ:?}");
    let twin_dir = tmp("germline-ws-twin-");
    let twin = repository(twin_dir.path());
    let t = twin.display().to_string();
    let plain = run_agent(twin_dir.path(), &public(&t), &unprotected(&t));
    assert_eq!(plain.len(), 2, "{plain:?}");
    let (g, p): (Vec<String>, Vec<String>) = (
        germ.iter().map(answer).collect(),
        plain.iter().map(answer).collect(),
    );
    // Two copies each call: the agent's (it sees hr/) and the workspace's (it does not).
    for x in &germ {
        assert_eq!(x["meta"]["germline"]["copies"], json!(2), "{}", x["meta"]);
    }
    // The public file: the same answers as unprotected, committed by the workspace's copy.
    assert_eq!(g[0], p[0], "git_add");
    let (gh, ph) = (hash_of(&g[1]), hash_of(&p[1]));
    assert_eq!(g[1].replace(&gh, "H"), p[1].replace(&ph, "H"), "git_commit");
    let ws = format!("workspace:{r}");
    for (i, path) in [(0, ".git/index"), (1, ".git/refs/heads/main")] {
        let w = &germ[i]["meta"]["germline"]["writes"];
        assert!(
            committed(&germ[i]).contains(&format!("{r}/{path}")),
            "call {i}: the workspace group's copy's writes commit: {w}"
        );
        assert_eq!(w["for"], json!([ws]), "{w}");
    }
    assert_eq!(
        git(&repo, &["log", "-1", "--format=%H"]),
        gh,
        "the host's HEAD"
    );
    for what in ["%T", "%P", "%s", "%an <%ae>"] {
        let f = format!("--format={what}");
        assert_eq!(
            git(&repo, &["log", "-1", &f]),
            git(&twin, &["log", "-1", &f]),
            "{what}"
        );
    }
    // The hr file: the agent's copy saw and staged it (its answer says so); the workspace's
    // copy never saw it, so nothing of it is committed and the host's index lacks it.
    assert!(g[2].starts_with("ok=true"), "{}", g[2]);
    assert!(
        !committed(&germ[2]).iter().any(|p| p.contains(".git/index")),
        "{}",
        germ[2]["meta"]
    );
    assert_eq!(
        git(&repo, &["ls-files", "hr"]),
        "",
        "hr/salary.csv was never staged"
    );
    assert!(
        git(&repo, &["status", "--porcelain"]).contains("?? hr/"),
        "the hr file stays untracked on the host"
    );
    let objects = git(&repo, &["rev-list", "--objects", "--all"]);
    let blob = git(&repo, &["hash-object", "hr/salary.csv"]);
    assert!(
        !objects.contains(&blob),
        "no object of the hr file reached the host"
    );
    let fsck = Command::new("/usr/bin/git")
        .args(["-C", &r, "fsck", "--strict"])
        .output()
        .expect("git");
    assert!(fsck.status.success(), "{fsck:?}");
}

#[test]
fn a_declared_workspace_no_argument_names_is_written_as_unprotected() {
    if !ready() {
        return;
    }
    let d = tmp("germline-wsd-");
    let repo = repository(d.path());
    // Relative to the copy's working directory `/`: a plain string, not an item.
    let rel = |p: &Path| p.display().to_string().trim_start_matches('/').to_string();
    let calls = |r: &str| {
        json!([
            {"tool": "git_add", "arguments": {"repo_path": r, "files": ["src/main.rs"]}},
            {"tool": "git_commit", "arguments": {"repo_path": r, "message": "third"}},
        ])
    };
    let twin_dir = tmp("germline-wsd-twin-");
    let twin = repository(twin_dir.path());
    let declared = policy(d.path(), &repo, r#"["finance"]"#, Some("{}"));
    // After the writes, a repository that exists on the host but is not declared (the twin):
    // the copy has no such directory, so the declaration is what gives it the first one.
    let mut script = calls(&rel(&repo)).as_array().cloned().expect("steps");
    script.push(json!({"tool": "git_status", "arguments": {"repo_path": rel(&twin)}}));
    let germ = run_agent(
        d.path(),
        &Value::Array(script),
        &run_cmd(&declared, "germline", "mcp-server-git", d.path(), &[]),
    );
    let plain = run_agent(twin_dir.path(), &calls(&rel(&twin)), &unprotected("/"));
    assert_eq!((germ.len(), plain.len()), (3, 2), "{germ:?} {plain:?}");
    let (g, p): (Vec<String>, Vec<String>) = (
        germ.iter().map(answer).collect(),
        plain.iter().map(answer).collect(),
    );
    assert_eq!(g[0], p[0], "git_add");
    let (gh, ph) = (hash_of(&g[1]), hash_of(&p[1]));
    assert_eq!(g[1].replace(&gh, "H"), p[1].replace(&ph, "H"), "git_commit");
    assert!(g[1].starts_with("ok=true") && gh.len() == 40, "{}", g[1]);
    let r = repo.display().to_string();
    assert!(
        committed(&germ[1]).contains(&format!("{r}/.git/refs/heads/main")),
        "{}",
        germ[1]["meta"]
    );
    assert_eq!(git(&repo, &["log", "-1", "--format=%H"]), gh);
    for what in ["%T", "%P", "%s"] {
        let f = format!("--format={what}");
        assert_eq!(
            git(&repo, &["log", "-1", &f]),
            git(&twin, &["log", "-1", &f]),
            "{what}"
        );
    }
    assert!(!g[2].starts_with("ok=true"), "undeclared: {}", g[2]);
}

/// A tool its publisher declares read-only (the manifest's `read_only`, MCP's `readOnlyHint`
/// that pack drafts) gets its directory items read-only: mcp-server-git's `git_add` declared
/// so fails with git's own "Read-only file system" and nothing reaches the host, while the
/// shipped release (whose `git_add` is not read-only) stages the file as unprotected. The
/// shipped `git_status` is read-only: it answers as unprotected and no write of its copy is
/// read back.
#[test]
fn a_tool_declared_read_only_gets_its_directory_read_only() {
    if !ready() {
        return;
    }
    let d = tmp("germline-ro-");
    let calls = |r: &str| {
        json!([
            {"tool": "git_add", "arguments": {"repo_path": r, "files": ["src/main.rs"]}},
            {"tool": "git_status", "arguments": {"repo_path": r}},
        ])
    };
    let staged = |repo: &Path| git(repo, &["diff", "--cached", "--name-only"]);
    // The shipped release: git_add writes (committed for the agent's workspace).
    let shipped_dir = d.path().join("shipped");
    std::fs::create_dir_all(&shipped_dir).expect("mkdir");
    let repo = repository(&shipped_dir);
    let r = repo.display().to_string();
    // Cleared for finance only, the agent's copy does not see hr/: its writes are public and
    // commit to the agent's workspace, the repository (docs/policy.md "Writes").
    let pol = policy(&shipped_dir, &repo, r#"["finance"]"#, None);
    let germ = run_agent(
        &shipped_dir,
        &calls(&r),
        &run_cmd(&pol, "germline", "mcp-server-git", &shipped_dir, &[]),
    );
    let twin_dir = tmp("germline-ro-twin-");
    let twin = repository(twin_dir.path());
    let t = twin.display().to_string();
    let plain = run_agent(twin_dir.path(), &calls(&t), &unprotected(&t));
    assert_eq!((germ.len(), plain.len()), (2, 2), "{germ:?} {plain:?}");
    let (g, p): (Vec<String>, Vec<String>) = (
        germ.iter().map(answer).collect(),
        plain.iter().map(answer).collect(),
    );
    assert_eq!(
        g[0], p[0],
        "the shipped release's git_add answers as unprotected"
    );
    // The agent is not cleared for hr: its view of the repository lacks hr/ (untracked on
    // the unprotected server), and the rest of the status is the same.
    let untracked = "Untracked files:\n  (use \"git add <file>...\" to include in what will be \
                     committed)\n\thr/\n";
    assert!(p[1].contains(untracked), "{}", p[1]);
    assert_eq!(g[1].trim_end(), p[1].replace(untracked, "").trim_end());
    assert!(
        committed(&germ[0]).contains(&format!("{r}/.git/index")),
        "git_add's copy's writes commit: {}",
        germ[0]["meta"]
    );
    assert_eq!(staged(&repo), "src/main.rs");
    assert_eq!(
        germ[1]["meta"]["germline"].get("writes"),
        None,
        "git_status is read-only: nothing of its copy is read back: {}",
        germ[1]["meta"]
    );

    // The same calls, git_add declared read-only: git cannot take its index lock.
    let ro_dir = d.path().join("read-only");
    std::fs::create_dir_all(&ro_dir).expect("mkdir");
    let repo = repository(&ro_dir);
    let r = repo.display().to_string();
    let index = std::fs::read(repo.join(".git/index")).expect("index");
    let pol = policy(&ro_dir, &repo, r#"["finance"]"#, None);
    let bundle = repacked(&ro_dir, |m| {
        m["tools"]["git_add"]["read_only"] = json!(true)
    });
    let cmd = with_bundle(
        run_cmd(&pol, "germline", "mcp-server-git", &ro_dir, &[]),
        &bundle,
    );
    let germ = run_agent(&ro_dir, &calls(&r), &cmd);
    assert_eq!(germ.len(), 2, "{germ:?}");
    let g0 = answer(&germ[0]);
    assert!(
        !g0.starts_with("ok=true") && g0.contains("Read-only file system"),
        "{g0}"
    );
    assert!(committed(&germ[0]).is_empty(), "{}", germ[0]["meta"]);
    assert_eq!(staged(&repo), "", "nothing was staged on the host");
    assert_eq!(
        std::fs::read(repo.join(".git/index")).expect("index"),
        index,
        "the host's index is untouched"
    );
    // git_status sees the unstaged change, as the unprotected server would before any add.
    assert!(
        answer(&germ[1]).contains("modified:   src/main.rs"),
        "{}",
        answer(&germ[1])
    );
}
