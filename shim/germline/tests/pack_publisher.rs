//! The publisher's own steps of `germline release pack --from` (issue 27/28; docs/release.md,
//! "The publisher's steps"): `--rootfs-hook SCRIPT` and `--germline-owned PATH`, on a real pack
//! of mcp-server-time from PyPI (offline from the cache scripts/setup.d/65-pack.sh fills, as
//! tests/pack_pypi.rs packs it):
//! - what the hook writes is in the rootfs, pinned by its digest and signed (changing it in the
//!   bundle makes `germline release verify` refuse), and the germline-owned path is owned by
//!   the germline's root, which the digest does not cover (chowning it back verifies the same);
//! - a hook that fails stops the pack with its path, exit status and stderr, and no release
//!   (bundle, image, draft work directory) is left;
//! - a germline-owned path outside the rootfs is refused naming the flag and the path: lexically
//!   (`..`) before anything runs, and through a symbolic link the hook made; and a pack with
//!   `--germline-owned` not run as root is refused before it starts.

mod run_common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use run_common::*;
use serde_json::Value;

const PASSWORD: &str = "germline-example-test-key";
/// The host id the germline's root maps to (germline_sandbox::germline::HOST_ID).
const HOST_ID: u32 = 2_100_000;

/// A directory the probe's unprivileged germline can reach (tempfile makes 0700).
fn workdir() -> tempfile::TempDir {
    let d = tempfile::Builder::new()
        .prefix("germline-pack-publisher-")
        .tempdir_in("/var/tmp")
        .expect("tempdir");
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    d
}

/// An executable script at `dir/name`.
fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\nset -e\n{body}\n")).expect("write hook");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    p
}

/// `germline release pack --json --from pypi:mcp-server-time --key ... --out OUT --image
/// OUT.image` with `extra`.
fn pack(out: &Path, extra: &[&str]) -> Output {
    Command::new(germline())
        .args([
            "release",
            "pack",
            "--json",
            "--from",
            "pypi:mcp-server-time",
        ])
        .args(extra)
        .arg("--key")
        .arg(root().join("bundles/out/keys/cosign.key"))
        .arg("--out")
        .arg(out)
        .arg("--image")
        .arg(out.with_extension("image"))
        .env("COSIGN_PASSWORD", PASSWORD)
        .output()
        .expect("germline release pack")
}

fn verify(release: &Path) -> Output {
    Command::new(germline())
        .args(["release", "verify", "--json", "--key"])
        .arg(key())
        .arg(release)
        .output()
        .expect("germline release verify")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Nothing of a refused pack is left beside `out`: no bundle, image or work directory.
fn nothing_left(out: &Path) {
    assert!(!out.exists(), "{} left by a failed pack", out.display());
    assert!(!out.with_extension("image").exists());
    let parent = out.parent().expect("parent");
    let left: Vec<_> = std::fs::read_dir(parent)
        .expect("read_dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".germline-pack-") || n.starts_with('.'))
        .collect();
    assert!(left.is_empty(), "left in {}: {left:?}", parent.display());
}

#[test]
fn the_hooks_files_are_signed_and_the_germline_owned_paths_are_the_germlines() {
    if !can_run() {
        return;
    }
    let d = workdir();
    let hook = script(
        d.path(),
        "hook",
        "mkdir -p \"$1/usr/share/hooked/sub\"\nprintf 'public %s\\n' warm > \"$1/usr/share/hooked/sub/file\"\necho 'the hook ran' >&2",
    );
    let out = d.path().join("release");
    let o = pack(
        &out,
        &[
            "--rootfs-hook",
            &hook.to_string_lossy(),
            "--germline-owned",
            "/usr/share/hooked",
        ],
    );
    assert!(o.status.success(), "pack: {}\n{}", o.status, stderr(&o));
    // Not a terminal: the result only; the hook's own output is kept back.
    assert!(o.stderr.is_empty(), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).expect("pack prints JSON");
    assert_eq!(v["signed"], true, "{v}");
    assert!(v["seconds"]["hook"].is_number(), "{v}");
    assert!(v["seconds"]["owned"].is_number(), "{v}");
    assert_eq!(v["germline_owned"][0], "/usr/share/hooked", "{v}");

    let file = out.join("rootfs/usr/share/hooked/sub/file");
    assert_eq!(
        std::fs::read_to_string(&file).expect("the hook's file"),
        "public warm\n"
    );
    // Owned by the germline's root, recursively, and nothing beside it.
    for p in [
        "usr/share/hooked",
        "usr/share/hooked/sub",
        "usr/share/hooked/sub/file",
    ] {
        let md = std::fs::symlink_metadata(out.join("rootfs").join(p)).expect("stat");
        assert_eq!((md.uid(), md.gid()), (HOST_ID, HOST_ID), "{p}");
    }
    let md = std::fs::symlink_metadata(out.join("rootfs/usr/share")).expect("stat");
    assert_eq!(md.uid(), 0, "/usr/share is not germline-owned");

    // Signed and pinned: both the bundle and the image verify with the same digest...
    let image = out.with_extension("image");
    for r in [&out, &image] {
        let vo = verify(r);
        assert!(
            vo.status.success(),
            "verify {}: {}",
            r.display(),
            stderr(&vo)
        );
        let vv: Value = serde_json::from_slice(&vo.stdout).expect("verify prints JSON");
        assert_eq!(vv["rootfs_digest"], v["rootfs_digest"], "{vv}");
    }
    // ...ownership is not in the digest: the bundle chowned back to root verifies the same...
    std::os::unix::fs::lchown(&file, Some(0), Some(0)).expect("chown");
    let vo = verify(&out);
    assert!(vo.status.success(), "{}", stderr(&vo));
    // ...and the hook's bytes are: one changed, the release is refused.
    std::fs::write(&file, "public warm!\n").expect("write");
    let vo = verify(&out);
    assert!(!vo.status.success(), "a changed hook file still verifies");
    assert!(stderr(&vo).contains("digest"), "{}", stderr(&vo));
}

#[test]
fn a_failing_hook_stops_the_pack_and_leaves_no_release() {
    if !can_run() {
        return;
    }
    let d = workdir();
    let hooks = d.path().join("hooks");
    std::fs::create_dir(&hooks).expect("mkdir");
    let hook = script(
        &hooks,
        "failing-hook",
        "echo 'starting' >&2\necho 'cannot write the repository' >&2\nexit 3",
    );
    let out = d.path().join("out/release");
    std::fs::create_dir(d.path().join("out")).expect("mkdir");
    std::fs::set_permissions(d.path().join("out"), std::fs::Permissions::from_mode(0o755))
        .expect("chmod");
    let o = pack(&out, &["--rootfs-hook", &hook.to_string_lossy()]);
    assert!(!o.status.success(), "a failing hook packed");
    let e: Value = serde_json::from_slice(&o.stderr).expect("a JSON error");
    let msg = e["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(msg.contains("--rootfs-hook"), "{e}");
    assert!(msg.contains(&hook.display().to_string()), "{e}");
    assert!(msg.contains("exit status: 3"), "{e}");
    assert!(msg.contains("cannot write the repository"), "{e}");
    nothing_left(&out);
}

#[test]
fn a_germline_owned_path_outside_the_rootfs_is_refused() {
    if !can_run() {
        return;
    }
    let d = workdir();
    let out = d.path().join("release");
    // Lexically, before anything runs.
    for bad in ["/usr/../../etc", "etc/passwd"] {
        let o = pack(&out, &["--germline-owned", bad]);
        assert!(!o.status.success(), "{bad} accepted");
        let e = stderr(&o);
        assert!(
            e.contains("--germline-owned") && e.contains(bad),
            "{bad}: {e}"
        );
        nothing_left(&out);
    }
    // Not root: refused before anything runs, with what to do.
    let o = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(germline())
        .args(["release", "pack", "--from", "pypi:mcp-server-time"])
        .args(["--germline-owned", "/usr/share/x", "--out"])
        .arg(&out)
        .output()
        .expect("setpriv");
    let e = stderr(&o);
    if e.starts_with("setpriv:") {
        // The test binary's directory is not reachable by uid 65534 here.
        eprintln!("not-root case not run: {e}");
    } else {
        assert!(
            !o.status.success(),
            "packed as uid 65534 with --germline-owned"
        );
        assert!(
            e.contains("--germline-owned /usr/share/x") && e.contains("needs root"),
            "{e}"
        );
        nothing_left(&out);
    }
    // Through a symbolic link the hook made to a host directory: refused after the hook, before
    // the release.
    let hook = script(d.path(), "hook", "ln -s /etc \"$1/usr/share/host-etc\"");
    let o = pack(
        &out,
        &[
            "--rootfs-hook",
            &hook.to_string_lossy(),
            "--germline-owned",
            "/usr/share/host-etc/passwd",
        ],
    );
    assert!(!o.status.success(), "a path through a link accepted");
    let e = stderr(&o);
    assert!(
        e.contains("--germline-owned /usr/share/host-etc/passwd")
            && e.contains("/usr/share/host-etc is a symbolic link"),
        "{e}"
    );
    // The host's file kept its owner.
    assert_eq!(
        std::fs::metadata("/etc/passwd").expect("stat").uid(),
        0,
        "/etc/passwd was chowned"
    );
    std::fs::remove_file(&hook).expect("rm");
    nothing_left(&out);
}
