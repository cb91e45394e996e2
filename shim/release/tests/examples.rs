//! The example releases under bundles/ (built by bundles/build.sh from PyPI, run by
//! scripts/setup.d/30-release.sh): they verify with the build's test key, inspect shows their
//! declarations, and the rootfs's own Python imports the server after verified extraction.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::*;
use germline_release::{keys, release};
use std::process::Command;

fn example(name: &str) -> Option<(std::path::PathBuf, keys::PublicKey)> {
    let out = repo_root().join("bundles/out");
    let image = out.join(name).join("image");
    if !have(
        &image.join("index.json"),
        &format!("example release {name} (bundles/build.sh)"),
    ) {
        return None;
    }
    Some((
        image,
        keys::load_public_key(&out.join("keys/cosign.pub")).unwrap(),
    ))
}

fn check(name: &str, module: &str) -> germline_release::release::Verified {
    let (image, key) = example(name).expect("example");
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("bundle");
    let v = release::verify_image(&image, &key, Some(&dest)).expect("example release verifies");
    assert_eq!(v.manifest.name, name);
    let again = release::verify_bundle_dir(&dest, &key).expect("extracted bundle verifies");
    assert_eq!(again.rootfs_digest, v.rootfs_digest);
    assert!(
        v.file_bytes > 20 << 20,
        "a Python runtime is in the rootfs ({} bytes)",
        v.file_bytes
    );
    let is_root = std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
    });
    if is_root {
        let (ok, out, err) = run(Command::new("chroot").arg(dest.join("rootfs")).args([
            "/usr/bin/python3",
            "-c",
            &format!("import {module}; print('ok')"),
        ]));
        assert!(
            ok && out.trim() == "ok",
            "the release's own Python could not import {module}: {err}"
        );
    } else if required() {
        panic!("root needed for the chroot smoke test");
    }
    v
}

#[test]
fn mcp_server_time_example_verifies_and_runs() {
    if example("mcp-server-time").is_none() {
        return;
    }
    let v = check("mcp-server-time", "mcp_server_time.server");
    assert_eq!(
        v.manifest.tools["get_current_time"]
            .destinations
            .hosts
            .as_deref(),
        Some(&[][..])
    );
    assert!(v.manifest.deterministic);
}

#[test]
fn mcp_server_fetch_example_verifies_and_runs() {
    if example("mcp-server-fetch").is_none() {
        return;
    }
    let v = check("mcp-server-fetch", "mcp_server_fetch.server");
    assert_eq!(
        v.manifest.tools["fetch"]
            .destinations
            .host_of_argument
            .as_deref(),
        Some("url")
    );
    assert!(!v.manifest.deterministic);
}

/// The verified, extracted OCI bundle runs under runc as it is (config.json from `pack`), and the
/// MCP server inside answers `initialize` and a `tools/call` over stdio.
#[test]
fn mcp_server_time_runs_under_runc_from_the_verified_bundle() {
    use std::io::{BufRead, Write};
    let Some((image, key)) = example("mcp-server-time") else {
        return;
    };
    let have_runc = Command::new("runc")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have_runc {
        assert!(!required(), "runc not found (run scripts/setup.sh)");
        eprintln!("SKIP: runc not found");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("bundle");
    release::verify_image(&image, &key, Some(&dest)).unwrap();
    let id = format!("germline-release-test-{}", std::process::id());
    let mut child = Command::new("runc")
        .args(["run", "--bundle"])
        .arg(&dest)
        .arg(&id)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let wait_for = |id: u64| -> serde_json::Value {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let line = rx
                .recv_timeout(left)
                .unwrap_or_else(|e| panic!("no answer to request {id}: {e}"));
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) {
                if v["id"] == id {
                    return v;
                }
            }
        }
    };
    let send = |stdin: &mut std::process::ChildStdin, v: serde_json::Value| {
        writeln!(stdin, "{v}").unwrap();
        stdin.flush().unwrap();
    };
    send(
        &mut stdin,
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "germline-test", "version": "1"}}}),
    );
    let init = wait_for(1);
    assert_eq!(
        init["result"]["serverInfo"]["version"], "2026.10.19",
        "{init}"
    );
    send(
        &mut stdin,
        serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    send(
        &mut stdin,
        serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "get_current_time", "arguments": {"timezone": "UTC"}}}),
    );
    let call = wait_for(2);
    drop(stdin);
    let _ = child.kill();
    let _ = child.wait();
    let _ = Command::new("runc").args(["delete", "-f", &id]).output();
    assert_eq!(call["result"]["isError"], false, "{call}");
    assert_eq!(
        call["result"]["structuredContent"]["timezone"], "UTC",
        "{call}"
    );
}
