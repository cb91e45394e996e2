//! mcp-server-git's warm calls (issue 27, docs/performance.md "Issue 27: warm git calls"): the
//! signed release ships a public repository in its rootfs (bundles/servers/mcp-server-git/
//! rootfs-hook) and its manifest declares `git_status`, `git_diff_unstaged` and `git_log` on it
//! as `initialisation.warm_calls`, so GitPython's and the SDK's first-call work runs once in
//! the germline, before its fork point, instead of in every copy.
//!
//! What is checked, with the real release and real parts: the manifest inside the verified
//! release declares the warm calls, `git_status` among them and rerun in pool copies
//! (`in_pool`), each on a repository in the signed rootfs; each warm call answers without an
//! error in a copy, whose root is the germline's read-only root (git cannot write the index
//! there, and the repository must be owned by the germline's root or git refuses it), exactly
//! as the release's code run unprotected on the host answers it on a copy of that repository.
//! A warm call that fails is skipped silently by the bootstrap, so this is what shows they do
//! their work. Then a `git_status` of a host repository through the warmed release answers as
//! unprotected.
//!
//! `GERMLINE_GIT_RELEASE=mcp-server-git-warm` runs it (and the other git tests) on a trial build
//! under bundles/out (run_common::bundle).

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

fn answer(r: &Value) -> String {
    format!("ok={} {}", r["ok"], text(r))
}

#[test]
fn warm_calls_on_the_shipped_repository_answer_in_a_copy_as_unprotected() {
    if !can_run() {
        return;
    }
    let name = "mcp-server-git";
    if !bundle(name).exists() {
        assert!(
            std::env::var_os("GERMLINE_REQUIRE_ROOT_TESTS").is_none(),
            "bundles/out/{name} missing (scripts/setup.d/65-servers.sh)"
        );
        return;
    }
    // The release verifies, and the manifest it signs declares the warm calls.
    let out = Command::new(germline())
        .args(["release", "verify", "--json", "--key"])
        .arg(key())
        .arg(bundle(name))
        .output()
        .expect("verify");
    assert!(out.status.success(), "verify: {out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).expect("verify JSON");
    assert_eq!(v["verified"], json!(true), "{v}");
    let rootfs = bundle(name).join("rootfs");
    let manifest: Value = serde_json::from_str(
        &std::fs::read_to_string(rootfs.join(".germline/manifest.json")).expect("manifest"),
    )
    .expect("manifest JSON");
    let init = &manifest["initialisation"];
    assert_eq!(init["warm"], json!(true), "{init}");
    let warm = init["warm_calls"].as_array().cloned().unwrap_or_default();
    let tools: Vec<&str> = warm.iter().filter_map(|w| w["tool"].as_str()).collect();
    assert!(tools.contains(&"git_status"), "warm calls {tools:?}");
    assert!(
        warm.iter()
            .any(|w| w["tool"] == "git_status" && w["in_pool"] == json!(true)),
        "git_status reruns in pool copies: {warm:?}"
    );
    for w in &warm {
        let p = w["arguments"]["repo_path"].as_str().expect("repo_path");
        assert!(
            p.starts_with("/usr/"),
            "{p}: under the rootfs's readable /usr"
        );
        let head = rootfs.join(p.trim_start_matches('/')).join(".git/HEAD");
        assert!(
            head.is_file(),
            "{}: a repository in the signed rootfs",
            head.display()
        );
    }

    // A host repository too, for the call a user makes after the warming.
    let d = tempfile::Builder::new()
        .prefix("germline-gitwarm-")
        .tempdir_in("/tmp")
        .expect("tempdir");
    let repo = d.path().join("repo");
    std::fs::create_dir_all(repo.join("src")).expect("mkdir");
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["config", "user.name", "Alice"]);
    git(&repo, &["config", "user.email", "alice@example.com"]);
    std::fs::write(repo.join("README"), "hello\n").expect("write");
    std::fs::write(repo.join("src/main.rs"), "fn main() {}\n").expect("write");
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-q", "-m", "first"]);
    std::fs::write(repo.join("README"), "hello\nmore\n").expect("write");
    let policy = d.path().join("policy.toml");
    std::fs::write(
        &policy,
        format!(
            r#"[labels]
finance = "invoices"

[[item]]
path = "{repo}/**"
label = []

[[argument]]
tool = "git_*"
name = "*"
label = []

[consumers]
agent = ["finance"]
"#,
            repo = repo.display()
        ),
    )
    .expect("policy");
    let host = repo.display().to_string();
    let mut script = warm.clone();
    script.push(json!({"tool": "git_status", "arguments": {"repo_path": host}}));
    let script = Value::Array(script);
    // Unprotected: the release's own code and the host's git, on a host copy of the shipped
    // repository (owned by the host's root, as git wants of its caller) at the same calls.
    let shipped = d.path().join("shipped");
    let cp = Command::new("cp")
        .arg("-r")
        .arg(rootfs.join("usr/share/germline-warm/repo"))
        .arg(&shipped)
        .status()
        .expect("cp");
    assert!(cp.success());
    let mut plain_script = script.clone();
    for w in plain_script.as_array_mut().expect("steps").iter_mut() {
        if w["arguments"]["repo_path"].as_str() != Some(host.as_str()) {
            w["arguments"]["repo_path"] = json!(shipped.display().to_string());
        }
    }
    let unprotected = vec![
        "env".to_string(),
        "PYTHONDONTWRITEBYTECODE=1".into(),
        format!(
            "PYTHONPATH={}",
            rootfs.join("usr/lib/python3/dist-packages").display()
        ),
        "GIT_PYTHON_GIT_EXECUTABLE=/usr/bin/git".into(),
        "/usr/bin/python3.11".into(),
        "-m".into(),
        "mcp_server_git".into(),
    ];
    let plain = run_agent(d.path(), &plain_script, &unprotected);
    // The germline with a pool of 1, so a pool copy (which reruns the `in_pool` warm calls
    // while it waits) answers too.
    let germ = run_agent(
        d.path(),
        &script,
        &run_cmd(&policy, "germline", name, d.path(), &["--pool", "1"]),
    );
    assert_eq!(plain.len(), warm.len() + 1, "{plain:?}");
    assert_eq!(germ.len(), warm.len() + 1, "{germ:?}");
    for (i, (g, p)) in germ.iter().zip(&plain).enumerate() {
        let (g, p) = (answer(g), answer(p));
        assert!(
            g.starts_with("ok=true") && !g.contains("rror"),
            "call {i}: {g}"
        );
        assert_eq!(g, p, "call {i} ({})", script[i]);
    }
    // The shipped repository's unstaged change, read in a copy's read-only root.
    assert!(
        answer(&germ[0]).contains("modified:   README"),
        "{}",
        answer(&germ[0])
    );
    assert!(
        answer(&germ[warm.len()]).contains("modified:   README"),
        "{}",
        answer(&germ[warm.len()])
    );
}
