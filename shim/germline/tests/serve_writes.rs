//! Writes under `germline serve` with a shared germline (issue 30's hub, the default
//! `--share-germlines user`; docs/policy.md "Writes", "Under `germline serve`"): the real
//! mcp-server-git, driven by the official client SDK over streamable HTTP
//! (tests/run/agent.py --url), writes into a declared workspace, and the same commit rule as
//! `germline run` applies: the workspace's consumer is cleared for finance only while the
//! agent is cleared for hr too, so every call runs two copies and only the workspace group's
//! copy's writes reach the host repository. A second session of the same user (the same
//! shared germline) sees the commit and commits on top of it.

mod run_common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use run_common::*;
use serde_json::{json, Value};

fn git(repo: &Path, args: &[&str]) -> String {
    let out = Command::new("/usr/bin/git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .output()
        .expect("git");
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// One commit, an unstaged change to `src/main.rs` and an untracked hr file.
fn repository(d: &Path) -> PathBuf {
    let repo = d.join("repo");
    std::fs::create_dir_all(repo.join("src")).expect("mkdir");
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["config", "user.name", "Alice"]);
    git(&repo, &["config", "user.email", "alice@example.com"]);
    std::fs::write(repo.join("src/main.rs"), "fn main() {}\n").expect("write");
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-q", "-m", "first"]);
    std::fs::write(repo.join("src/main.rs"), "fn main() { x() }\n").expect("write");
    std::fs::create_dir_all(repo.join("hr")).expect("mkdir");
    std::fs::write(repo.join("hr/salary.csv"), "alice,CANARY-HR\n").expect("write");
    repo
}

struct Serve {
    child: Child,
    url: String,
    token: PathBuf,
}

impl Drop for Serve {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

fn serve(d: &Path, policy: &Path) -> Serve {
    let mut child = Command::new(germline())
        .arg("serve")
        .arg("--policy")
        .arg(policy)
        .arg("--key")
        .arg(key())
        .arg("--listen")
        .arg("127.0.0.1:0")
        .arg("--state-dir")
        .arg(d.join("state"))
        .arg(bundle("mcp-server-git"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("germline serve");
    let err = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            eprintln!("[serve] {line}");
            let _ = tx.send(line);
        }
    });
    let (mut url, mut token) = (None, None);
    let t0 = Instant::now();
    while url.is_none() || token.is_none() {
        let line = rx
            .recv_timeout(Duration::from_secs(120).saturating_sub(t0.elapsed()))
            .expect("germline serve came up");
        if let Some(rest) = line.strip_prefix("germline serve: http://") {
            url = rest.split(' ').next().map(|u| format!("http://{u}"));
        }
        if let Some(p) = line.strip_prefix("germline serve: bearer token in ") {
            token = Some(PathBuf::from(p.trim()));
        }
    }
    Serve {
        child,
        url: url.expect("url"),
        token: token.expect("token"),
    }
}

/// One agent session over streamable HTTP: the tool lines.
fn session(d: &Path, s: &Serve, script: &Value) -> Vec<Value> {
    let sp = d.join(format!("script-{:x}.json", rand_u64()));
    std::fs::write(&sp, script.to_string()).expect("script");
    let out = Command::new(agent_python())
        .arg(root().join("tests/run/agent.py"))
        .arg(&sp)
        .arg("--url")
        .arg(&s.url)
        .arg(&s.token)
        .output()
        .expect("agent");
    assert!(
        out.status.success(),
        "agent: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l.get("tool").is_some())
        .collect()
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
fn a_shared_germlines_sessions_commit_into_a_declared_workspace_as_run_does() {
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
    // Below /tmp: the release's rootfs has an empty /tmp for the tree's mount.
    let d = tempfile::Builder::new()
        .prefix("germline-serve-w-")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let repo = repository(d.path());
    let r = repo.display().to_string();
    let policy = d.path().join("policy.toml");
    std::fs::write(
        &policy,
        format!(
            r#"[labels]
hr = "personnel records"
finance = "invoices"

[[item]]
path = "{r}/**"
label = []

[[item]]
path = "{r}/hr/**"
label = ["hr"]

[[argument]]
tool = "git_*"
name = "*"
label = []

[consumers]
agent = ["hr", "finance"]
reviewer = ["finance"]

[workspaces."mcp-server-git"]
"{r}" = {{ consumer = "reviewer" }}
"#
        ),
    )
    .expect("policy");
    let s = serve(d.path(), &policy);
    let first = session(
        d.path(),
        &s,
        &json!([
            {"tool": "git_add", "arguments": {"repo_path": r, "files": ["src/main.rs"]}},
            {"tool": "git_commit", "arguments": {"repo_path": r, "message": "third"}},
        ]),
    );
    assert_eq!(first.len(), 2, "{first:?}");
    for c in &first {
        assert_eq!(c["ok"], true, "{c}");
        assert_eq!(
            c["meta"]["germline"]["copies"], 2,
            "two groups: {}",
            c["meta"]
        );
        // The workspace's copy committed for it; the agent is cleared above the workspace,
        // so it is told which paths.
        assert_eq!(
            c["meta"]["germline"]["writes"]["for"],
            json!([format!("workspace:{r}")]),
            "{}",
            c["meta"]
        );
    }
    assert!(
        committed(&first[1]).contains(&format!("{r}/.git/refs/heads/main")),
        "{}",
        first[1]["meta"]
    );
    assert_eq!(git(&repo, &["log", "-1", "--format=%s"]), "third");
    assert_eq!(
        git(&repo, &["show", "HEAD:src/main.rs"]),
        "fn main() { x() }"
    );
    assert_eq!(git(&repo, &["fsck", "--strict"]), "");
    // The hr file was in neither commit nor index: the workspace's copy never saw it.
    assert!(!git(&repo, &["ls-files"]).contains("hr/"));

    // A second session (the same user's shared germline): it sees the commit, and its own
    // commit lands on top of it.
    std::fs::write(repo.join("NOTES"), "n\n").expect("write");
    let second = session(
        d.path(),
        &s,
        &json!([
            {"tool": "git_log", "arguments": {"repo_path": r}},
            {"tool": "git_add", "arguments": {"repo_path": r, "files": ["NOTES"]}},
            {"tool": "git_commit", "arguments": {"repo_path": r, "message": "fourth"}},
        ]),
    );
    assert_eq!(second.len(), 3, "{second:?}");
    assert!(text(&second[0]).contains("Message: third"), "{}", second[0]);
    assert_eq!(second[2]["ok"], true, "{}", second[2]);
    assert_eq!(git(&repo, &["log", "--format=%s"]), "fourth\nthird\nfirst");
}
