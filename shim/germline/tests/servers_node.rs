//! Issue 28: a Node server from npm (`@modelcontextprotocol/server-everything`, built by
//! bundles/build-node.sh) through `germline run --mode germline` with spawned copies, driven by
//! the official Python client SDK (tests/run/node_client.py), against the unprotected server
//! on the same calls; and the refusal of a release that can neither fork nor spawn, which the
//! client receives as a JSON-RPC error.

mod run_common;

use std::path::Path;
use std::process::Command;

use run_common::*;
use serde_json::Value;

const RELEASE: &str = "node-everything";

fn node_ready() -> bool {
    let ok = bundle(RELEASE).exists() && Path::new("/usr/bin/node").exists();
    assert!(
        ok || std::env::var_os("GERMLINE_REQUIRE_ROOT_TESTS").is_none(),
        "needs {} (bundles/build-node.sh, scripts/setup.d/65-node.sh)",
        bundle(RELEASE).display()
    );
    ok
}

/// One session of node_client.py with `server`: its JSON summary, or the client's stderr.
fn session(server: &[String]) -> Result<Value, String> {
    let out = Command::new(agent_python())
        .arg(root().join("tests/run/node_client.py"))
        .arg("--")
        .args(server)
        .output()
        .expect("client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    match stdout
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
    {
        Some(v) if out.status.success() => Ok(v),
        _ => Err(String::from_utf8_lossy(&out.stderr).into_owned()),
    }
}

fn policy(dir: &Path) -> std::path::PathBuf {
    let p = dir.join("policy.toml");
    std::fs::write(
        &p,
        "[labels]\nhr = \"personnel records\"\n\n[[argument]]\ntool = \"*\"\nname = \"*\"\nlabel = []\n",
    )
    .expect("policy");
    p
}

fn run(dir: &Path, release: &Path, extra: &[&str]) -> Vec<String> {
    let mut v = vec![
        germline().display().to_string(),
        "run".into(),
        "--policy".into(),
        policy(dir).display().to_string(),
        "--key".into(),
        key().display().to_string(),
        "--mode".into(),
        "germline".into(),
        "--state-dir".into(),
        dir.join("state").display().to_string(),
    ];
    v.extend(extra.iter().map(|s| s.to_string()));
    v.push(release.display().to_string());
    v
}

#[test]
fn server_everything_answers_through_spawned_copies_as_unprotected() {
    if !can_run() || !node_ready() {
        return;
    }
    let dir = tempfile::tempdir_in("/var/tmp").expect("tempdir");
    let germ = session(&run(dir.path(), &bundle(RELEASE), &["--pool", "1"]))
        .unwrap_or_else(|e| panic!("germline session failed: {e}"));
    let entry = bundle(RELEASE)
        .join("rootfs/app/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let plain = session(&[
        "/usr/bin/node".into(),
        entry.display().to_string(),
        "stdio".into(),
    ])
    .unwrap_or_else(|e| panic!("unprotected session failed: {e}"));
    for k in [
        "server",
        "tools",
        "echo",
        "sum",
        "long",
        "progress",
        "resources",
        "read",
        "bad_is_error",
    ] {
        assert_eq!(germ[k], plain[k], "{k} differs under germline");
    }
    // What was compared is what the calls should give, not two equal failures.
    assert_eq!(germ["echo"][0], "Echo: hello from the agent");
    assert_eq!(germ["sum"][0], "The sum of 19 and 23 is 42.");
    assert_eq!(germ["progress"].as_array().map(Vec::len), Some(3));
    assert_eq!(germ["bad_is_error"], true);
    eprintln!(
        "echo: germline {:.0} ms, unprotected {:.0} ms",
        germ["echo_ms"].as_f64().unwrap_or(0.0),
        plain["echo_ms"].as_f64().unwrap_or(0.0),
    );
}

/// A signed release in `dir` from a manifest and a rootfs with nothing but the mount points.
fn pack(dir: &Path, name: &str, language: &str, execution: Option<&str>) -> std::path::PathBuf {
    let rootfs = dir.join(format!("{name}-rootfs"));
    for d in ["usr/bin", "dev", "proc", "run", "tmp"] {
        std::fs::create_dir_all(rootfs.join(d)).expect("mkdir");
    }
    let mut m = serde_json::json!({
        "schema": "germline.release.manifest/v1", "name": name, "version": "1.0.0",
        "language": language, "entry": ["/usr/bin/missing-server"],
        "initialisation": {"imports": [], "warm": false},
        "tools": {"echo": {"destinations": {"hosts": []}}},
        "readable_paths": ["/usr"], "deterministic": false
    });
    if let Some(e) = execution {
        m["execution"] = e.into();
    }
    let mp = dir.join(format!("{name}.json"));
    std::fs::write(&mp, m.to_string()).expect("manifest");
    let out = dir.join(format!("{name}-bundle"));
    let st = Command::new(germline())
        .args(["release", "pack", "--manifest"])
        .arg(&mp)
        .arg("--rootfs")
        .arg(&rootfs)
        .arg("--key")
        .arg(root().join("bundles/out/keys/cosign.key"))
        .arg("--out")
        .arg(&out)
        .env("COSIGN_PASSWORD", "germline-example-test-key")
        .output()
        .expect("pack");
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    out
}

#[test]
fn a_release_that_can_neither_fork_nor_spawn_is_refused_to_the_client() {
    if !can_run() {
        return;
    }
    let dir = tempfile::tempdir_in("/var/tmp").expect("tempdir");
    // A Node release that asks to fork; a native one whose entry is not in its rootfs.
    let cases = [
        (
            pack(dir.path(), "node-fork", "node", Some("fork")),
            "cannot be forked",
        ),
        (pack(dir.path(), "native-missing", "binary", None), "execve"),
    ];
    for (release, why) in cases {
        let err = session(&run(dir.path(), &release, &[])).expect_err("refused");
        assert!(
            err.contains("MCPError") && err.contains("could not start") && err.contains(why),
            "{}: the client should get a JSON-RPC error saying {why:?}:\n{err}",
            release.display()
        );
    }
}
