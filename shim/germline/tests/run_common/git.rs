//! Shared parts of the mcp-server-git tests (servers_git.rs, servers_git_workspaces.rs): git
//! on the host, a small repository, the policy over it, and the release's own server run
//! unprotected as the reference.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use super::{bundle, can_run, germline, rand_u64, root, text};

/// Runs `git -C repo args` at a fixed date (so twins hash alike); its trimmed stdout.
pub fn git(repo: &Path, args: &[&str]) -> String {
    let out = Command::new("/usr/bin/git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .env("GIT_AUTHOR_DATE", "2026-11-30T12:00:00Z")
        .env("GIT_COMMITTER_DATE", "2026-11-30T12:00:00Z")
        .output()
        .expect("git");
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// `d/repo`: two commits, an unstaged change to `src/main.rs` and an untracked hr file
/// (`hr/salary.csv`).
pub fn repository(d: &Path) -> PathBuf {
    let repo = d.join("repo");
    std::fs::create_dir_all(repo.join("src")).expect("mkdir");
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["config", "user.name", "Alice"]);
    git(&repo, &["config", "user.email", "alice@example.com"]);
    std::fs::write(repo.join("README"), "hello\n").expect("write");
    std::fs::write(repo.join("src/main.rs"), "fn main() {}\n").expect("write");
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-q", "-m", "first"]);
    std::fs::write(repo.join("README"), "hello\nmore\n").expect("write");
    git(&repo, &["commit", "-q", "-am", "second"]);
    std::fs::write(
        repo.join("src/main.rs"),
        "fn main() { println!(\"hi\"); }\n",
    )
    .expect("write");
    std::fs::create_dir_all(repo.join("hr")).expect("mkdir");
    std::fs::write(repo.join("hr/salary.csv"), "alice,CANARY-HR\n").expect("write");
    repo
}

/// A policy over `repo` (public, its `hr/` labelled hr) for the git tools, written in `d`:
/// `agent` is the agent's clearance (a TOML array), `items` more `[[item]]` tables after the
/// repository's, `consumers` more lines of `[consumers]` and any tables after them.
pub fn policy(d: &Path, repo: &Path, agent: &str, items: &str, consumers: &str) -> PathBuf {
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
{items}
[[argument]]
tool = "git_*"
name = "*"
label = []

[consumers]
agent = {agent}
{consumers}"#,
        repo = repo.display(),
    );
    let p = d.join(format!("policy-{:x}.toml", rand_u64()));
    std::fs::write(&p, text).expect("policy");
    p
}

/// An answer as the tests compare it: its ok bit and its text.
pub fn answer(r: &Value) -> String {
    format!("ok={} {}", r["ok"], text(r))
}

/// The commit hash that ends a `git_commit` answer.
pub fn hash_of(a: &str) -> String {
    a.rsplit(' ')
        .next()
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}

/// A temporary directory below /tmp: the release's rootfs has an empty /tmp for the tree's
/// mount, none of /var.
pub fn tmp(prefix: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in("/tmp")
        .expect("tempdir")
}

/// The unprotected server: the release's own code and git, on the host, in `cwd`.
pub fn unprotected(cwd: &str) -> Vec<String> {
    let rootfs = bundle("mcp-server-git").join("rootfs");
    vec![
        "env".into(),
        "-C".into(),
        cwd.to_string(),
        "PYTHONDONTWRITEBYTECODE=1".into(),
        format!(
            "PYTHONPATH={}",
            rootfs.join("usr/lib/python3/dist-packages").display()
        ),
        "GIT_PYTHON_GIT_EXECUTABLE=/usr/bin/git".into(),
        "/usr/bin/python3.11".into(),
        "-m".into(),
        "mcp_server_git".into(),
    ]
}

/// True if the git tests can run: root, the example bundles and the mcp-server-git release
/// (which a run that requires root tests must have).
pub fn ready() -> bool {
    if !can_run() {
        return false;
    }
    if !bundle("mcp-server-git").exists() {
        assert!(
            std::env::var_os("GERMLINE_REQUIRE_ROOT_TESTS").is_none(),
            "bundles/out/mcp-server-git missing (scripts/setup.d/65-servers.sh)"
        );
        return false;
    }
    true
}

/// mcp-server-git's release repacked from its image with `edit` applied to its reviewed
/// manifest (bundles/servers), signed with the example key: the bundle's path (in `dir`).
pub fn repacked(dir: &Path, edit: impl FnOnce(&mut Value)) -> PathBuf {
    let src = root().join("bundles/servers/mcp-server-git/manifest.json");
    let mut m: Value =
        serde_json::from_str(&std::fs::read_to_string(src).expect("manifest")).expect("JSON");
    edit(&mut m);
    let mp = dir.join("manifest.json");
    std::fs::write(&mp, m.to_string()).expect("manifest");
    let out_dir = dir.join("bundle");
    let out = Command::new(germline())
        .args(["release", "pack", "--manifest"])
        .arg(&mp)
        .arg("--from-image")
        .arg(bundle("mcp-server-git").with_file_name("image"))
        .arg("--key")
        .arg(root().join("bundles/out/keys/cosign.key"))
        .arg("--out")
        .arg(&out_dir)
        .arg("--image")
        .arg(dir.join("image"))
        .env("COSIGN_PASSWORD", "germline-example-test-key")
        .output()
        .expect("germline release pack");
    assert!(out.status.success(), "pack: {out:?}");
    out_dir
}

/// A `run_common::run_cmd` command line with its release replaced by the bundle `at`.
pub fn with_bundle(mut cmd: Vec<String>, at: &Path) -> Vec<String> {
    if let Some(last) = cmd.last_mut() {
        *last = at.display().to_string();
    }
    cmd
}
