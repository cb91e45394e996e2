//! Issue 28: a native-binary MCP server made with the official Rust SDK (rmcp;
//! tests/native/rmcp-server, packed as bundles/out/native-rmcp by scripts/setup.d/65-native.sh)
//! through `germline run --mode germline` with spawned copies, driven by the official Python
//! client SDK (tests/run/native_client.py), against the same binary run unprotected on the same
//! calls; and the policy's `[pool]` for spawned copies: its memory cap bounds the pool.

mod run_common;

use std::path::{Path, PathBuf};
use std::process::Command;

use run_common::*;
use serde_json::Value;

const RELEASE: &str = "native-rmcp";
/// The file of the release's rootfs its read-file tool is asked for.
const FILE: &str = "/usr/share/germline-native/hello.txt";

fn native_ready() -> bool {
    let ok = bundle(RELEASE).join("rootfs/usr/bin/rmcp-server").exists();
    assert!(
        ok || std::env::var_os("GERMLINE_REQUIRE_ROOT_TESTS").is_none(),
        "needs {} (scripts/setup.d/65-native.sh)",
        bundle(RELEASE).display()
    );
    ok
}

/// One session of native_client.py with `server` reading `file`: its JSON summary and the
/// server's stderr (the client passes it through), or the client's stderr.
fn session(file: &str, server: &[String]) -> Result<(Value, String), String> {
    session_settling(file, 0.0, server)
}

/// [`session`], pausing `settle` seconds after the last call before it ends.
fn session_settling(file: &str, settle: f64, server: &[String]) -> Result<(Value, String), String> {
    let out = Command::new(agent_python())
        .arg(root().join("tests/run/native_client.py"))
        .arg(file)
        .arg(settle.to_string())
        .arg("--")
        .args(server)
        .output()
        .expect("client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    match stdout
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
    {
        Some(v) if out.status.success() => Ok((v, stderr)),
        _ => Err(stderr),
    }
}

fn policy(dir: &Path, pool: &str) -> PathBuf {
    let p = dir.join("policy.toml");
    std::fs::write(
        &p,
        format!(
            "[labels]\nhr = \"personnel records\"\n\n[[argument]]\ntool = \"*\"\nname = \"*\"\n\
             label = []\n{pool}"
        ),
    )
    .expect("policy");
    p
}

fn run(dir: &Path, pool: &str, extra: &[&str]) -> Vec<String> {
    let mut v = vec![
        germline().display().to_string(),
        "run".into(),
        "--policy".into(),
        policy(dir, pool).display().to_string(),
        "--key".into(),
        key().display().to_string(),
        "--mode".into(),
        "germline".into(),
        "--state-dir".into(),
        dir.join("state").display().to_string(),
    ];
    v.extend(extra.iter().map(|s| s.to_string()));
    v.push(bundle(RELEASE).display().to_string());
    v
}

/// The pool's figures the runtime wrote to stderr when it stopped.
fn pool_status(stderr: &str) -> Value {
    stderr
        .lines()
        .find_map(|l| l.strip_prefix("germline: spawn pool "))
        .and_then(|j| serde_json::from_str(j).ok())
        .unwrap_or_else(|| panic!("no spawn pool line in:\n{stderr}"))
}

#[test]
fn the_rmcp_server_answers_through_spawned_copies_as_unprotected() {
    if !can_run() || !native_ready() {
        return;
    }
    let dir = tempfile::tempdir_in("/var/tmp").expect("tempdir");
    let (germ, stderr) = session(FILE, &run(dir.path(), "\n[pool]\nmin = 1\nmax = 2\n", &[]))
        .unwrap_or_else(|e| panic!("germline session failed: {e}"));
    let binary = bundle(RELEASE).join("rootfs/usr/bin/rmcp-server");
    let host_file = bundle(RELEASE)
        .join("rootfs")
        .join(FILE.trim_start_matches('/'));
    let (plain, _) = session(
        &host_file.display().to_string(),
        &[binary.display().to_string()],
    )
    .unwrap_or_else(|e| panic!("unprotected session failed: {e}"));
    for k in [
        "server",
        "tools",
        "schemas",
        "echo",
        "add",
        "echo2",
        "read",
        "bad_is_error",
        "missing",
    ] {
        assert_eq!(germ[k], plain[k], "{k} differs under germline");
    }
    // What was compared is what the calls should give, not two equal failures.
    assert_eq!(germ["echo"][0], "Echo: hello from the agent");
    assert_eq!(germ["add"][0], "19 + 23 = 42");
    assert_eq!(germ["read"][0], "a file of the native release's rootfs\n");
    assert_eq!(germ["bad_is_error"], true);
    // The copies were spawned (the server has threads: it could not be forked) and pooled.
    let st = pool_status(&stderr);
    assert!(st["spawned"].as_u64().unwrap_or(0) >= 4, "{st}");
    assert!(st["refill_per_s"].as_f64().unwrap_or(0.0) > 0.0, "{st}");
    assert!(
        st["pooled_copy_private_kb"].as_u64().unwrap_or(0) > 0,
        "{st}"
    );
    eprintln!(
        "echo: germline {:.0} ms, unprotected {:.0} ms; pool {st}",
        germ["echo_ms"].as_f64().unwrap_or(0.0),
        plain["echo_ms"].as_f64().unwrap_or(0.0),
    );
}

#[test]
fn the_memory_cap_bounds_the_pool() {
    if !can_run() || !native_ready() {
        return;
    }
    // `--pool 4` asks for four waiting copies. Under a cap far above what they hold, four wait
    // at once (between calls: the session's end may come before the last refill); under a cap
    // of one copy and a half (measured by the first run), fewer do, and what waits together
    // never holds more than the cap.
    let dir = tempfile::tempdir_in("/var/tmp").expect("tempdir");
    let (_, stderr) = session_settling(
        FILE,
        2.0,
        &run(dir.path(), "\n[pool]\nmemory_mb = 4096\n", &["--pool", "4"]),
    )
    .unwrap_or_else(|e| panic!("uncapped session failed: {e}"));
    let free = pool_status(&stderr);
    assert_eq!(free["peak_ready"], 4, "{free}");
    let per_copy_kb = free["pooled_copy_private_kb"].as_u64().unwrap_or(0);
    assert!(per_copy_kb > 0, "{free}");
    let cap_mb = (per_copy_kb * 3 / 2).div_ceil(1024);
    let (_, stderr) = session_settling(
        FILE,
        2.0,
        &run(
            dir.path(),
            &format!("\n[pool]\nmemory_mb = {cap_mb}\n"),
            &["--pool", "4"],
        ),
    )
    .unwrap_or_else(|e| panic!("capped session failed: {e}"));
    let capped = pool_status(&stderr);
    let ready = capped["peak_ready"].as_u64().unwrap_or(99);
    let held = capped["peak_ready_private_bytes"]
        .as_u64()
        .unwrap_or(u64::MAX);
    assert!(
        ready < 4 && held <= cap_mb << 20,
        "cap {cap_mb} MiB ({per_copy_kb} kB per copy): {capped}"
    );
    eprintln!("uncapped {free}\ncapped at {cap_mb} MiB: {capped}");
}

/// A release whose signed manifest names a language this germline does not know (a newer
/// packer's, say) is refused at start with the reason, and the client gets it as a JSON-RPC
/// error. `germline release pack` would not write such a manifest, so the test packs the
/// native release's rootfs under a good one, then edits the language in the copy's manifest
/// and signs it again with the same key (`germline release sign --release`).
#[test]
fn a_release_in_an_unknown_language_is_refused_to_the_client() {
    if !can_run() || !native_ready() {
        return;
    }
    let dir = tempfile::tempdir_in("/var/tmp").expect("tempdir");
    let out = dir.path().join("ruby-bundle");
    let manifest = root().join("bundles/native/rmcp/manifest.json");
    let env = ("COSIGN_PASSWORD", "germline-example-test-key");
    let signing_key = root().join("bundles/out/keys/cosign.key");
    let st = Command::new(germline())
        .args(["release", "pack", "--manifest"])
        .arg(&manifest)
        .arg("--rootfs")
        .arg(bundle(RELEASE).join("rootfs"))
        .arg("--key")
        .arg(&signing_key)
        .arg("--out")
        .arg(&out)
        .env(env.0, env.1)
        .output()
        .expect("pack");
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let signed = out.join("rootfs/.germline/manifest.json");
    let text = std::fs::read_to_string(&signed).expect("manifest");
    let mut m: Value = serde_json::from_str(&text).expect("json");
    m["language"] = "ruby".into();
    std::fs::write(&signed, m.to_string()).expect("edit");
    let st = Command::new(germline())
        .args(["release", "sign", "--key"])
        .arg(&signing_key)
        .arg("--release")
        .arg(&out)
        .env(env.0, env.1)
        .output()
        .expect("sign");
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let mut cmd = run(dir.path(), "", &[]);
    *cmd.last_mut().expect("release") = out.display().to_string();
    let err = session(FILE, &cmd).expect_err("refused");
    assert!(
        err.contains("MCPError") && err.contains("ruby"),
        "the client should get a JSON-RPC error naming the language:\n{err}"
    );
}
