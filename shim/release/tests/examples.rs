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
