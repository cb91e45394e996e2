//! The real mcp-server-git from PyPI (issue 27) through `germline run --mode germline` and the
//! official client SDK (tests/run/agent.py), against the same release's code run unprotected
//! on the same calls: status, log, diff, show and branch on a repository passed as an
//! argument, by its absolute path and relatively to the deployer's `[workdirs]` directory.
//!
//! The agent is cleared for finance only; the repository's `hr/` and a symlink out of it to an
//! hr file are not in its view, so they are absent from its copy: git's status lacks exactly
//! their "Untracked files" lines, and every other answer is identical.
//!
//! Writes: `git_add` then `git_commit` write into the agent's copy's own layer of the
//! repository, and that copy's writes are committed to the host repository (docs/policy.md
//! "Writes"): the commit is then in the host's history, with the same tree, message and author
//! as the unprotected server's same calls make in a twin repository.

mod run_common;

use std::path::{Path, PathBuf};
use std::process::Command;

use run_common::git::*;
use run_common::*;
use serde_json::{json, Value};

/// The shared small repository (run_common::git), plus a branch and a symlink out of it to
/// an hr file outside the repository.
fn repository(d: &Path) -> PathBuf {
    let repo = run_common::git::repository(d);
    git(&repo, &["branch", "feature"]);
    std::fs::create_dir_all(d.join("hr")).expect("mkdir");
    std::fs::write(d.join("hr/secret.txt"), "CANARY-HR outside\n").expect("write");
    std::os::unix::fs::symlink(d.join("hr/secret.txt"), repo.join("leak.txt")).expect("ln");
    repo
}

/// The policy, with the agent's clearance `agent` (a TOML array): the hr file outside the
/// repository labelled hr, and the repository as the release's `[workdirs]` directory.
fn policy_for(d: &Path, repo: &Path, agent: &str) -> PathBuf {
    policy(
        d,
        repo,
        agent,
        &format!(
            "\n[[item]]\npath = \"{}/hr/**\"\nlabel = [\"hr\"]\n",
            d.display()
        ),
        &format!(
            "\n[workdirs]\n\"mcp-server-git\" = \"{}\"\n",
            repo.display()
        ),
    )
}

#[test]
fn git_reads_a_repository_passed_as_an_argument_as_unprotected() {
    if !ready() {
        return;
    }
    let d = tmp("germline-git-");
    let repo = repository(d.path());
    let policy = policy_for(d.path(), &repo, r#"["finance"]"#);
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
    let writes = |r: &str| {
        json!([
            {"tool": "git_add", "arguments": {"repo_path": r, "files": ["src/main.rs"]}},
            {"tool": "git_commit", "arguments": {"repo_path": r, "message": "third"}},
        ])
    };
    // The reads first (the germline's commit comes later), then the same writes in a twin
    // repository.
    let plain = run_agent(d.path(), &reads, &unprotected(&r));
    let twin_dir = tmp("germline-git-twin-");
    let twin = repository(twin_dir.path());
    let t = twin.display().to_string();
    let plain_w = run_agent(twin_dir.path(), &writes(&t), &unprotected(&t));
    let mut script = reads.as_array().cloned().expect("steps");
    script.extend(writes(&r).as_array().cloned().expect("steps"));
    let germ = run_agent(
        d.path(),
        &Value::Array(script),
        &run_cmd(&policy, "germline", "mcp-server-git", d.path(), &[]),
    );
    assert_eq!(germ.len(), 9, "{germ:?}");
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
    // Writes: the same answers as unprotected (the commit's hash aside: the copy's clock is
    // not the host's), and the commit is in the host repository, as unprotected it is in the
    // twin: same tree, message, author and parent.
    let pw: Vec<String> = plain_w.iter().map(answer).collect();
    assert_eq!(g[7], pw[0], "git_add");
    assert!(g[7].starts_with("ok=true"), "{}", g[7]);
    let (gh, ph) = (hash_of(&g[8]), hash_of(&pw[1]));
    assert_eq!(
        g[8].replace(&gh, "H"),
        pw[1].replace(&ph, "H"),
        "git_commit"
    );
    assert!(
        g[8].starts_with("ok=true") && gh.len() == 40,
        "{} (git_add: {})",
        g[8],
        germ[7]["meta"]
    );
    // What each call's copy wrote and was committed: git_add the index, git_commit the
    // objects and the branch.
    for (i, path) in [(7, ".git/index"), (8, ".git/refs/heads/main")] {
        let meta = &germ[i]["meta"]["germline"]["writes"];
        assert!(
            meta["committed"]
                .as_array()
                .is_some_and(|c| c.iter().any(|p| p.as_str() == Some(&format!("{r}/{path}")))),
            "call {i}: _meta.germline.writes: {meta}"
        );
    }
    let show = |repo: &str, what: &str| {
        let out = Command::new("/usr/bin/git")
            .args(["-C", repo, "log", "-1", &format!("--format={what}")])
            .output()
            .expect("git");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(show(&r, "%H"), gh, "the host's HEAD is the copy's commit");
    assert_eq!(show(&t, "%H"), ph);
    for what in ["%T", "%P", "%s", "%an <%ae>"] {
        assert_eq!(show(&r, what), show(&t, what), "{what}");
    }
    assert_eq!(show(&r, "%s"), "third");
    // The host repository is sound, and holds nothing of the staging or journal.
    let fsck = Command::new("/usr/bin/git")
        .args(["-C", &r, "fsck", "--strict"])
        .output()
        .expect("git");
    assert!(fsck.status.success(), "{fsck:?}");
    let staged = Command::new("/usr/bin/git")
        .args(["-C", &r, "status", "--porcelain"])
        .output()
        .expect("git");
    let status = String::from_utf8_lossy(&staged.stdout);
    assert!(
        !status.contains("src/main.rs") && status.contains("?? hr/"),
        "{status}"
    );
    assert!(!status.contains(".germline-commit"), "{status}");
}

/// A write never carries an item to a path labelled below it (docs/policy.md "Writes"): an
/// agent cleared for hr sees `hr/salary.csv`, so its copy's label is `hr`; staging that file
/// writes its contents into `.git/index` and `.git/objects`, labelled public by the rules, so
/// the whole commit is refused, the answer says which paths and why, and the host repository
/// is untouched.
#[test]
fn git_add_of_an_hr_file_into_a_public_repository_is_refused() {
    if !ready() {
        return;
    }
    let d = tmp("germline-git-hr-");
    let repo = repository(d.path());
    let policy = policy_for(d.path(), &repo, r#"["finance", "hr"]"#);
    let r = repo.display().to_string();
    let index = std::fs::read(repo.join(".git/index")).expect("index");
    let objects = |repo: &Path| {
        let out = Command::new("/usr/bin/git")
            .args(["-C"])
            .arg(repo)
            .args(["count-objects", "-v"])
            .output()
            .expect("git");
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let before = objects(&repo);
    let germ = run_agent(
        d.path(),
        &json!([
            {"tool": "git_add", "arguments": {"repo_path": r, "files": ["hr/salary.csv"]}},
        ]),
        &run_cmd(&policy, "germline", "mcp-server-git", d.path(), &[]),
    );
    assert_eq!(germ.len(), 1, "{germ:?}");
    // git itself succeeded in the copy; its writes were not committed.
    assert!(
        answer(&germ[0]).starts_with("ok=true"),
        "{}",
        answer(&germ[0])
    );
    let w = &germ[0]["meta"]["germline"]["writes"];
    assert_eq!(germ[0]["meta"]["germline"]["label"], json!(["hr"]), "{w}");
    assert_eq!(w["committed"], json!([]), "{w}");
    let refused = w["refused"].as_array().expect("refused paths");
    assert!(
        refused
            .iter()
            .any(|x| x["path"] == json!(format!("{r}/.git/index"))
                && x["why"].as_str().is_some_and(|y| y.contains("hr"))),
        "{w}"
    );
    assert_eq!(
        std::fs::read(repo.join(".git/index")).expect("index"),
        index,
        "the host's index is untouched"
    );
    assert_eq!(objects(&repo), before, "no object reached the host");
}
