//! Helpers shared by the release integration tests: fixtures, external tools, crafted layers.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use germline_release::keys::{Algorithm, SigningKey};
use germline_release::release::{self, Source};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// True if external tools are required (scripts/test.sh sets GERMLINE_REQUIRE_ROOT_TESTS=1):
/// a missing tool then fails the test instead of skipping it.
pub fn required() -> bool {
    std::env::var("GERMLINE_REQUIRE_ROOT_TESTS").is_ok_and(|v| v == "1")
}

/// Checks that `path` exists; panics if tools are required, else reports a skip.
pub fn have(path: &Path, what: &str) -> bool {
    if path.exists() {
        return true;
    }
    if required() {
        panic!(
            "{what} missing at {} (run scripts/setup.sh)",
            path.display()
        );
    }
    eprintln!(
        "SKIP: {what} missing at {} (run scripts/setup.sh)",
        path.display()
    );
    false
}

pub fn node_dir() -> PathBuf {
    repo_root().join("tests/interop/node")
}

pub fn node_ready() -> bool {
    let ok = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        if required() {
            panic!("node not found (run scripts/setup.sh)");
        }
        eprintln!("SKIP: node not found");
        return false;
    }
    have(
        &node_dir().join("node_modules/@sigstore/verify"),
        "@sigstore/verify",
    ) && have(
        &node_dir().join("node_modules/@sigstore/sign"),
        "@sigstore/sign",
    )
}

pub fn venv_python() -> PathBuf {
    std::env::var_os("GERMLINE_RELEASE_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/tmp/germline-venv-release"))
        .join("bin/python")
}

pub fn python_script(name: &str) -> PathBuf {
    repo_root().join("tests/interop/python").join(name)
}

/// Runs a command, returns (success, stdout, stderr).
pub fn run(cmd: &mut Command) -> (bool, String, String) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub fn manifest_json(version: &str) -> serde_json::Value {
    serde_json::json!({
        "schema": germline_release::manifest::SCHEMA,
        "name": "mcp-server-demo", "version": version, "language": "python",
        "entry": ["python3", "-m", "mcp_server_demo"],
        "initialisation": {"imports": ["mcp_server_demo.server"], "warm": true},
        "tools": {
            "fetch": {"destinations": {"host_of_argument": "url"}},
            "get_time": {"destinations": {"hosts": []}},
            "post": {"destinations": {"hosts": ["api.example.org"]}}
        },
        "readable_paths": ["/usr", "/etc/ssl"], "scratch_mb": 16, "deterministic": true
    })
}

/// A small rootfs: nested directories, an executable, a large-ish file, relative and absolute
/// symlinks (pack makes the latter relative).
pub fn make_rootfs(root: &Path, salt: &str) {
    for d in [
        "usr/bin",
        "usr/lib/python3/demo",
        "etc/ssl/certs",
        "var/empty",
    ] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::write(
        root.join("usr/bin/python3"),
        format!("#!/bin/sh\necho {salt}\n"),
    )
    .unwrap();
    std::fs::set_permissions(
        root.join("usr/bin/python3"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    std::fs::write(
        root.join("usr/lib/python3/demo/__init__.py"),
        "print('demo')\n",
    )
    .unwrap();
    let big: Vec<u8> = (0..3_000_000u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 24) as u8)
        .collect();
    std::fs::write(root.join("usr/lib/python3/demo/data.bin"), big).unwrap();
    std::fs::write(
        root.join("etc/ssl/certs/ca.pem"),
        "-----BEGIN CERTIFICATE-----\n",
    )
    .unwrap();
    std::fs::write(root.join("etc/hostname"), "demo\n").unwrap();
    std::os::unix::fs::symlink("python3", root.join("usr/bin/python")).unwrap();
    std::os::unix::fs::symlink("/etc/ssl/certs/ca.pem", root.join("etc/ssl/cert.pem")).unwrap();
}

pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub key: SigningKey,
}

impl Fixture {
    pub fn new() -> Fixture {
        Fixture {
            dir: tempfile::tempdir().unwrap(),
            key: SigningKey::generate(Algorithm::EcdsaP256),
        }
    }
    pub fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }
    /// Writes the key pair in cosign's formats under `name.key` / `name.pub`.
    pub fn write_keys(&self, name: &str, password: &str) -> (PathBuf, PathBuf) {
        let k = self.path(&format!("{name}.key"));
        let p = self.path(&format!("{name}.pub"));
        std::fs::write(&k, self.key.to_encrypted_pem(password.as_bytes()).unwrap()).unwrap();
        std::fs::write(&p, self.key.public().to_pem().unwrap()).unwrap();
        (k, p)
    }
    /// Packs a release `name` of `version` (signed unless `key` is None) into bundle `name` and
    /// image `name.oci`.
    pub fn pack(&self, name: &str, version: &str, signed: bool) -> (PathBuf, PathBuf) {
        let src = self.path(&format!("{name}.src"));
        make_rootfs(&src, &format!("{name}-{version}"));
        let m = self.path(&format!("{name}.manifest.json"));
        std::fs::write(&m, manifest_json(version).to_string()).unwrap();
        let b = self.path(name);
        let i = self.path(&format!("{name}.oci"));
        release::pack(
            &m,
            &Source::RootfsDir(src),
            signed.then_some(&self.key),
            &b,
            Some(&i),
        )
        .unwrap();
        (b, i)
    }
}

/// Entries present in `dir` whose name contains `part` (partial extractions would show here).
pub fn leftovers(dir: &Path, part: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(part))
        .collect()
}

/// One raw tar entry for crafted (malicious) layers.
pub enum Raw<'a> {
    Dir(&'a [u8]),
    File(&'a [u8], &'a [u8]),
    Symlink(&'a [u8], &'a [u8]),
    Hardlink(&'a [u8], &'a [u8]),
}

fn header(name: &[u8], ty: tar::EntryType, size: u64, mode: u32, link: &[u8]) -> tar::Header {
    let mut h = tar::Header::new_old();
    {
        let old = h.as_old_mut();
        old.name[..name.len()].copy_from_slice(name);
        old.linkname[..link.len()].copy_from_slice(link);
    }
    h.set_entry_type(ty);
    h.set_size(size);
    h.set_mode(mode);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    h.set_cksum();
    h
}

/// Writes a raw tar (no path sanitising: the tar crate's builder would refuse `..`).
pub fn raw_tar(entries: &[Raw<'_>]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for e in entries {
        match e {
            Raw::Dir(n) => b
                .append(
                    &header(n, tar::EntryType::Directory, 0, 0o755, b""),
                    std::io::empty(),
                )
                .unwrap(),
            Raw::File(n, d) => b
                .append(
                    &header(n, tar::EntryType::Regular, d.len() as u64, 0o644, b""),
                    *d,
                )
                .unwrap(),
            Raw::Symlink(n, t) => b
                .append(
                    &header(n, tar::EntryType::Symlink, 0, 0o777, t),
                    std::io::empty(),
                )
                .unwrap(),
            Raw::Hardlink(n, t) => b
                .append(
                    &header(n, tar::EntryType::Link, 0, 0o644, t),
                    std::io::empty(),
                )
                .unwrap(),
        }
    }
    b.into_inner().unwrap()
}

fn sha(b: &[u8]) -> String {
    use sha2::Digest as _;
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(b)))
}

/// Writes an image layout at `out` whose single layer is `tar` (gzip'd), with correct
/// digests everywhere, so that only the layer's entries are wrong.
pub fn craft_layout(out: &Path, tar_bytes: &[u8]) {
    use std::io::Write as _;
    let blobs = out.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(tar_bytes).unwrap();
    let layer = gz.finish().unwrap();
    let put = |b: &[u8]| {
        let d = sha(b);
        std::fs::write(blobs.join(d.trim_start_matches("sha256:")), b).unwrap();
        (d, b.len())
    };
    let (ld, ls) = put(&layer);
    let config = serde_json::json!({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": [sha(tar_bytes)]}}).to_string();
    let (cd, cs) = put(config.as_bytes());
    let manifest = serde_json::json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd, "size": cs},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": ld, "size": ls}]}).to_string();
    let (md, ms) = put(manifest.as_bytes());
    let index = serde_json::json!({"schemaVersion": 2, "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": md, "size": ms}]});
    std::fs::write(out.join("index.json"), index.to_string()).unwrap();
    std::fs::write(out.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
}
