//! Hostile image layouts against the real `germline release verify` (and `germline run`), each
//! in a child process whose peak RSS (`wait4`'s `ru_maxrss`), CPU time and wall time are
//! measured, with a wall-time bound that kills it so a hang fails the test instead of CI.
//! Every image is generated here, in a temporary directory (docs/release.md, "Untrusted
//! images"). Issue 25, item 4: each case ran out of memory, hung, or decompressed gigabytes
//! before checking a signature on 88bfd6b.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write as _;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use germline_release::keys::{Algorithm, SigningKey};
use germline_release::release::{self, Source};
use sha2::Digest as _;

/// A hang fails after this long.
const WALL_LIMIT: Duration = Duration::from_secs(60);
/// Address space of the child: an unbounded read fails fast here instead of taking the
/// machine's memory (the RSS assertions are what the tests check).
const CHILD_AS: u64 = 2 << 30;
/// What a hostile image may cost over a normal verify.
const EXTRA_RSS_KB: i64 = 64 << 10;

fn germline() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_germline"))
}

/// How a child ended, and what it cost.
#[derive(Debug)]
struct Outcome {
    /// Exit code, or None if it was killed by a signal (an abort, or our wall-time kill).
    code: Option<i32>,
    signal: Option<i32>,
    timed_out: bool,
    stderr: String,
    stderr_bytes: Vec<u8>,
    max_rss_kb: i64,
    cpu: Duration,
    wall: Duration,
}

impl Outcome {
    /// A refusal of `germline release verify`: exit 1, in time, with `needles` in its message.
    fn assert_refused(&self, what: &str, needles: &[&str]) {
        self.assert_exit(1, what, needles)
    }

    /// A refusal with exit code `code` (`germline run` exits 2 on an error).
    fn assert_exit(&self, code: i32, what: &str, needles: &[&str]) {
        assert!(
            !self.timed_out,
            "{what}: still running after {WALL_LIMIT:?} (killed): {self:?}"
        );
        assert_eq!(
            (self.code, self.signal),
            (Some(code), None),
            "{what}: expected a refusal (exit {code}), got {self:?}"
        );
        for n in needles {
            assert!(
                self.stderr.contains(n),
                "{what}: error does not say {n:?}: {}",
                self.stderr
            );
        }
        // Printable text: nothing but the final newline is a control character.
        let body = self.stderr.trim_end_matches('\n');
        assert!(
            !body.chars().any(|c| c.is_control()),
            "{what}: error holds non-printable bytes: {:?}",
            self.stderr_bytes
        );
    }
}

/// Runs `germline ARGS` under the address-space bound, killing it after [`WALL_LIMIT`].
// The child is reaped by wait4(2) (for its rusage), not by `Child::wait`.
#[allow(clippy::zombie_processes)]
fn measure(args: &[&std::ffi::OsStr]) -> Outcome {
    let dir = tempfile::tempdir().unwrap();
    let err_path = dir.path().join("stderr");
    let err = std::fs::File::create(&err_path).unwrap();
    let mut cmd = Command::new(germline());
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err);
    // SAFETY: only setrlimit(2), async-signal-safe, runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit {
                rlim_cur: CHILD_AS,
                rlim_max: CHILD_AS,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let t0 = Instant::now();
    let child = cmd.spawn().expect("spawn germline");
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value of this plain C struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let mut timed_out = false;
    loop {
        // SAFETY: `pid` is our child, not yet reaped; `status` and `ru` are valid for writes.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut ru) };
        assert!(r >= 0, "wait4: {}", std::io::Error::last_os_error());
        if r == pid {
            break;
        }
        if t0.elapsed() > WALL_LIMIT && !timed_out {
            timed_out = true;
            // SAFETY: kill(2) of our own child, which has not been reaped.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let wall = t0.elapsed();
    let stderr_bytes = std::fs::read(&err_path).unwrap();
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    let o = Outcome {
        code: libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)),
        signal: libc::WIFSIGNALED(status).then(|| libc::WTERMSIG(status)),
        timed_out,
        stderr: String::from_utf8_lossy(&stderr_bytes).into_owned(),
        stderr_bytes,
        max_rss_kb: ru.ru_maxrss,
        cpu: tv(ru.ru_utime) + tv(ru.ru_stime),
        wall,
    };
    eprintln!(
        "germline {:?}: peak RSS {} KiB, cpu {:.3} s, wall {:.3} s, exit {:?} signal {:?}\n  {}",
        args.last(),
        o.max_rss_kb,
        o.cpu.as_secs_f64(),
        o.wall.as_secs_f64(),
        o.code,
        o.signal,
        o.stderr.trim_end()
    );
    o
}

fn sha(b: &[u8]) -> String {
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(b)))
}

/// A signed release packed into an image layout, the key's public half, and its directory
/// (kept, for `/usr/bin/time -v germline release verify` by hand, if
/// `GERMLINE_KEEP_HOSTILE_IMAGES=DIR` is set).
struct Fixture {
    _tmp: Option<tempfile::TempDir>,
    dir: PathBuf,
    key: SigningKey,
    pubkey: PathBuf,
}

impl Fixture {
    fn new() -> Fixture {
        let (tmp, dir) = match std::env::var_os("GERMLINE_KEEP_HOSTILE_IMAGES") {
            Some(base) => {
                std::fs::create_dir_all(&base).unwrap();
                let t = tempfile::Builder::new()
                    .prefix("hostile-")
                    .tempdir_in(base)
                    .unwrap();
                (None, t.keep())
            }
            None => {
                let t = tempfile::tempdir().unwrap();
                let p = t.path().to_path_buf();
                (Some(t), p)
            }
        };
        let key = SigningKey::generate(Algorithm::EcdsaP256);
        let pubkey = dir.join("cosign.pub");
        std::fs::write(&pubkey, key.public().to_pem().unwrap()).unwrap();
        Fixture {
            _tmp: tmp,
            dir,
            key,
            pubkey,
        }
    }

    fn path(&self, p: &str) -> PathBuf {
        self.dir.join(p)
    }

    /// A small, valid, signed image layout at `name`.
    fn image(&self, name: &str) -> PathBuf {
        let src = self.path(&format!("{name}.src"));
        std::fs::create_dir_all(src.join("usr/bin")).unwrap();
        std::fs::write(src.join("usr/bin/tool"), b"#!/bin/sh\necho hi\n").unwrap();
        let m = self.path(&format!("{name}.manifest.json"));
        std::fs::write(&m, manifest_json().to_string()).unwrap();
        let img = self.path(name);
        release::pack(
            &m,
            &Source::RootfsDir(src),
            Some(&self.key),
            &self.path(&format!("{name}.bundle")),
            Some(&img),
        )
        .unwrap();
        img
    }

    fn verify(&self, image: &Path) -> Outcome {
        measure(&[
            "release".as_ref(),
            "verify".as_ref(),
            "--key".as_ref(),
            self.pubkey.as_os_str(),
            image.as_os_str(),
        ])
    }

    /// The peak RSS of verifying a normal image, for "extra" comparisons.
    fn baseline_rss(&self) -> i64 {
        let img = self.image("baseline");
        let o = self.verify(&img);
        assert_eq!(o.code, Some(0), "the normal image verifies: {o:?}");
        o.max_rss_kb
    }
}

fn manifest_json() -> serde_json::Value {
    serde_json::json!({
        "schema": germline_release::manifest::SCHEMA,
        "name": "hostile", "version": "1.0.0", "language": "native",
        "entry": ["/usr/bin/tool"], "initialisation": {"imports": []},
        "tools": {"noop": {"destinations": {"hosts": []}}},
        "readable_paths": ["/usr"], "deterministic": true
    })
}

/// The image manifest's descriptor in index.json: (digest, size).
fn manifest_desc(image: &Path) -> (String, u64) {
    let idx: serde_json::Value =
        serde_json::from_slice(&std::fs::read(image.join("index.json")).unwrap()).unwrap();
    let d = &idx["manifests"][0];
    (
        d["digest"].as_str().unwrap().to_string(),
        d["size"].as_u64().unwrap(),
    )
}

fn blob(image: &Path, digest: &str) -> PathBuf {
    image
        .join("blobs/sha256")
        .join(digest.trim_start_matches("sha256:"))
}

fn mkfifo(p: &Path) {
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: `c` is a NUL-terminated path valid for the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0, "mkfifo");
}

/// A tar header with raw fields (a builder would refuse some of them).
fn raw_header(name: &[u8], ty: u8, size: u64) -> [u8; 512] {
    let mut h = tar::Header::new_gnu();
    h.as_gnu_mut().unwrap().name[..name.len()].copy_from_slice(name);
    h.set_entry_type(tar::EntryType::new(ty));
    h.set_size(size);
    h.set_mode(0o644);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(0);
    h.set_cksum();
    *h.as_bytes()
}

/// A writer that gzips what it is given and remembers the uncompressed stream's digest.
struct LayerWriter {
    gz: flate2::write::GzEncoder<Vec<u8>>,
    diff: sha2::Sha256,
}

impl LayerWriter {
    fn new() -> LayerWriter {
        LayerWriter::with(flate2::Compression::fast())
    }
    fn with(level: flate2::Compression) -> LayerWriter {
        LayerWriter {
            gz: flate2::write::GzEncoder::new(Vec::new(), level),
            diff: sha2::Sha256::new(),
        }
    }
    fn put(&mut self, b: &[u8]) {
        self.gz.write_all(b).unwrap();
        self.diff.update(b);
    }
    /// `n` zero bytes, uncompressed (hashed only if `hash`: gigabytes cost seconds).
    fn zeros(&mut self, mut n: u64, hash: bool) {
        let z = vec![0u8; 1 << 20];
        while n > 0 {
            let k = n.min(z.len() as u64) as usize;
            self.gz.write_all(&z[..k]).unwrap();
            if hash {
                self.diff.update(&z[..k]);
            }
            n -= k as u64;
        }
    }
    /// A regular file entry with its data.
    fn file(&mut self, name: &[u8], data: &[u8]) {
        self.put(&raw_header(name, b'0', data.len() as u64));
        self.put(data);
        let pad = (512 - data.len() % 512) % 512;
        self.put(&vec![0u8; pad]);
    }
    fn dir(&mut self, name: &[u8]) {
        let mut h = raw_header(name, b'5', 0);
        // mode 0755, checksum again
        let mut hh = tar::Header::from_byte_slice(&h).clone();
        hh.set_mode(0o755);
        hh.set_cksum();
        h = *hh.as_bytes();
        self.put(&h);
    }
    fn finish(mut self) -> (Vec<u8>, String) {
        self.put(&[0u8; 1024]);
        let diff = format!("sha256:{}", hex::encode(self.diff.finalize()));
        (self.gz.finish().unwrap(), diff)
    }
}

/// Replaces the layer (and config, manifest, index) of `image` with `layer`: every digest
/// and size correct, so only the layer's contents are hostile.
fn replace_layer(image: &Path, layer: &[u8], diff_id: &str) {
    let blobs = image.join("blobs/sha256");
    for e in std::fs::read_dir(&blobs).unwrap() {
        std::fs::remove_file(e.unwrap().path()).unwrap();
    }
    let put = |b: &[u8]| {
        let d = sha(b);
        std::fs::write(blob(image, &d), b).unwrap();
        (d, b.len())
    };
    let (ld, ls) = put(layer);
    let config = serde_json::json!({"architecture": "amd64", "os": "linux",
        "rootfs": {"type": "layers", "diff_ids": [diff_id]}})
    .to_string();
    let (cd, cs) = put(config.as_bytes());
    let manifest = serde_json::json!({"schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd, "size": cs},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": ld, "size": ls}]})
    .to_string();
    let (md, ms) = put(manifest.as_bytes());
    let index = serde_json::json!({"schemaVersion": 2, "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": md, "size": ms}]});
    std::fs::write(image.join("index.json"), index.to_string()).unwrap();
}

/// The `.germline/` files of a packed bundle: (manifest, signature).
fn germline_files(f: &Fixture, name: &str) -> (Vec<u8>, Vec<u8>) {
    let b = f.path(&format!("{name}.bundle/rootfs/.germline"));
    (
        std::fs::read(b.join("manifest.json")).unwrap(),
        std::fs::read(b.join("manifest.sigstore.json")).unwrap(),
    )
}

#[test]
fn gnu_long_name_of_a_gigabyte_is_refused_at_its_header() {
    let f = Fixture::new();
    let base = f.baseline_rss();
    let img = f.image("longname");
    let mut w = LayerWriter::with(flate2::Compression::best());
    // One GNU long-name header announcing 1 GiB of name, and the gigabyte itself (zeros
    // compress about 1000:1, so the image stays about a megabyte).
    w.put(&raw_header(b"././@LongLink", b'L', 1 << 30));
    w.zeros(1 << 30, false);
    w.file(b"x", b"");
    let (layer, _) = w.finish();
    let size = layer.len();
    replace_layer(&img, &layer, &format!("sha256:{}", "0".repeat(64)));
    assert!(size < 2 << 20, "a small image: {size} bytes");
    eprintln!("the long-name image's layer: {size} bytes");
    let o = f.verify(&img);
    o.assert_refused(
        "GNU long name",
        &[
            "GNU long name of 1073741824 bytes",
            "limit of 4096 bytes (--max-image-path)",
            "layer sha256:",
        ],
    );
    assert!(
        o.max_rss_kb - base < EXTRA_RSS_KB,
        "a {size}-byte image cost {} KiB over a normal verify ({base} KiB)",
        o.max_rss_kb - base
    );
    // The limit is the flag's: a larger one lets the header through to the next check.
    let o = measure(&[
        "release".as_ref(),
        "verify".as_ref(),
        "--max-image-path".as_ref(),
        "64".as_ref(),
        "--key".as_ref(),
        f.pubkey.as_os_str(),
        img.as_os_str(),
    ]);
    o.assert_refused("GNU long name, --max-image-path 64", &["limit of 64 bytes"]);
}

#[test]
fn index_json_or_blob_symlinked_to_dev_zero_is_refused() {
    let f = Fixture::new();
    let base = f.baseline_rss();
    // index.json -> /dev/zero
    let img = f.image("zero-index");
    std::fs::remove_file(img.join("index.json")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", img.join("index.json")).unwrap();
    let o = f.verify(&img);
    o.assert_refused(
        "index.json -> /dev/zero",
        &["index.json: is a symbolic link: refused"],
    );
    assert!(o.max_rss_kb - base < EXTRA_RSS_KB, "{o:?}");
    // The image manifest's blob -> /dev/zero (its descriptor unchanged).
    let img = f.image("zero-blob");
    let (d, _) = manifest_desc(&img);
    std::fs::remove_file(blob(&img, &d)).unwrap();
    std::os::unix::fs::symlink("/dev/zero", blob(&img, &d)).unwrap();
    let o = f.verify(&img);
    o.assert_refused(
        "blob -> /dev/zero",
        &[
            d.trim_start_matches("sha256:"),
            "is a symbolic link: refused",
        ],
    );
    assert!(o.max_rss_kb - base < EXTRA_RSS_KB, "{o:?}");
}

#[test]
fn sparse_blob_larger_than_its_descriptor_is_refused_unread() {
    let f = Fixture::new();
    let base = f.baseline_rss();
    let img = f.image("sparse");
    let (d, size) = manifest_desc(&img);
    // The same first bytes, then a hole: 2 GiB on disk, `size` in the descriptor.
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(blob(&img, &d))
        .unwrap();
    file.set_len(2 << 30).unwrap();
    let o = f.verify(&img);
    o.assert_refused(
        "sparse blob",
        &[
            &format!("expected {size} bytes (its descriptor's size)"),
            "2147483648 bytes on disk: refused before reading it",
        ],
    );
    assert!(o.max_rss_kb - base < EXTRA_RSS_KB, "{o:?}");
}

#[test]
fn index_json_as_a_fifo_is_refused_without_blocking() {
    let f = Fixture::new();
    let img = f.image("fifo");
    std::fs::remove_file(img.join("index.json")).unwrap();
    mkfifo(&img.join("index.json"));
    let o = f.verify(&img);
    o.assert_refused("index.json FIFO", &["index.json: is a FIFO: refused"]);
    assert!(o.wall < Duration::from_secs(10), "{o:?}");
    // A blob as a FIFO too.
    let img = f.image("fifo-blob");
    let (d, _) = manifest_desc(&img);
    std::fs::remove_file(blob(&img, &d)).unwrap();
    mkfifo(&blob(&img, &d));
    let o = f.verify(&img);
    o.assert_refused("blob FIFO", &["is a FIFO: refused"]);
}

/// Two gigabytes of zeros after a manifest whose signature does not verify (signed by another
/// key), and after no manifest at all: refused having decompressed a few kilobytes, or at most
/// `--max-image-unsigned-bytes`, not two gigabytes.
#[test]
fn unsigned_giant_layer_is_refused_before_it_is_decompressed() {
    let f = Fixture::new();
    let img = f.image("giant");
    let other = Fixture::new();
    other.image("other");
    let (m, sig) = germline_files(&other, "other");
    let huge = 2u64 << 30;
    let zero_file = |w: &mut LayerWriter| {
        w.dir(b"usr");
        w.put(&raw_header(b"usr/zeros", b'0', huge));
        w.zeros(huge, false);
    };
    // (a) the manifest of another publisher, first, as pack writes it.
    let mut w = LayerWriter::new();
    w.dir(b".germline");
    w.file(b".germline/manifest.json", &m);
    w.file(b".germline/manifest.sigstore.json", &sig);
    zero_file(&mut w);
    let (layer, _) = w.finish();
    replace_layer(&img, &layer, &format!("sha256:{}", "0".repeat(64)));
    let o = f.verify(&img);
    o.assert_refused("wrong key", &["signature does not verify"]);
    // Decompressing and hashing 2 GiB takes seconds of CPU on any machine.
    assert!(o.cpu < Duration::from_secs(1), "{o:?}");
    // (b) no manifest: the zeros first.
    let img = f.image("giant2");
    let mut w = LayerWriter::new();
    zero_file(&mut w);
    let (layer, _) = w.finish();
    replace_layer(&img, &layer, &format!("sha256:{}", "0".repeat(64)));
    let o = f.verify(&img);
    o.assert_refused(
        "no manifest",
        &[
            "in the first 16777216 uncompressed bytes",
            "--max-image-unsigned-bytes",
        ],
    );
    assert!(o.cpu < Duration::from_secs(1), "{o:?}");
}

#[test]
fn garbage_tar_errors_are_printable() {
    let f = Fixture::new();
    let img = f.image("garbage");
    // A header whose name and numeric fields hold terminal escapes and a bell.
    let mut h = [0u8; 512];
    let name = b"\x1b[2J\x1b]0;pwned\x07/evil\r\xff";
    h[..name.len()].copy_from_slice(name);
    h[100..108].copy_from_slice(b"\x1b[31m\x07\x08\x00");
    h[124..136].copy_from_slice(b"\x1b[1m\x9b\x1b\x07zzzzz");
    h[148..156].copy_from_slice(b"\x1b[0m\x07\x0d\x0a\x00");
    let mut w = LayerWriter::new();
    w.put(&h);
    w.put(&[0u8; 1024]);
    let (layer, diff) = w.finish();
    replace_layer(&img, &layer, &diff);
    let o = f.verify(&img);
    o.assert_refused("garbage tar", &["layer sha256:"]);
    // A second variant: a valid checksum, so the parser gets as far as the name.
    let img = f.image("garbage2");
    let mut hh = tar::Header::new_gnu();
    hh.as_gnu_mut().unwrap().name[..name.len()].copy_from_slice(name);
    hh.set_entry_type(tar::EntryType::Regular);
    hh.set_size(0);
    hh.set_mode(0o644);
    hh.set_cksum();
    let mut w = LayerWriter::new();
    w.put(hh.as_bytes());
    let (layer, diff) = w.finish();
    replace_layer(&img, &layer, &diff);
    let o = f.verify(&img);
    o.assert_refused(
        "escape in an entry name",
        &["layer sha256:", "entry `\\x1b[2J"],
    );
}

/// `germline run` loads a release through the same bounded reader, with the same flags.
#[test]
fn germline_run_refuses_a_hostile_image_quickly() {
    let f = Fixture::new();
    let img = f.image("run-fifo");
    std::fs::remove_file(img.join("index.json")).unwrap();
    mkfifo(&img.join("index.json"));
    let policy = f.path("policy.toml");
    std::fs::write(&policy, "[labels]\n\n[consumers]\nagent = []\n").unwrap();
    let o = measure(&[
        "run".as_ref(),
        "--policy".as_ref(),
        policy.as_os_str(),
        "--key".as_ref(),
        f.pubkey.as_os_str(),
        img.as_os_str(),
    ]);
    o.assert_exit(
        2,
        "germline run, index.json FIFO",
        &["index.json: is a FIFO: refused"],
    );
    // And the limit flag is the one the run command was given.
    let img = f.image("run-json");
    let o = measure(&[
        "run".as_ref(),
        "--policy".as_ref(),
        policy.as_os_str(),
        "--key".as_ref(),
        f.pubkey.as_os_str(),
        "--max-image-json".as_ref(),
        "10".as_ref(),
        img.as_os_str(),
    ]);
    o.assert_exit(
        2,
        "germline run, --max-image-json 10",
        &["index.json: larger than the limit of 10 bytes (--max-image-json)"],
    );
}

/// Each maximum is the one its flag gives, on `verify` and `inspect`, and a normal image
/// verifies under the defaults.
#[test]
fn each_limit_is_its_flag() {
    let f = Fixture::new();
    let img = f.image("flags");
    let verify = |flag: &str, value: &str| {
        measure(&[
            "release".as_ref(),
            "verify".as_ref(),
            flag.as_ref(),
            value.as_ref(),
            "--key".as_ref(),
            f.pubkey.as_os_str(),
            img.as_os_str(),
        ])
    };
    assert_eq!(f.verify(&img).code, Some(0), "verifies under the defaults");
    for (flag, value, needle) in [
        (
            "--max-image-bytes",
            "2K",
            "larger than the limit of 2048 bytes (--max-image-bytes)",
        ),
        (
            "--max-image-entries",
            "2",
            "more than 2 tar headers (--max-image-entries)",
        ),
        (
            "--max-image-path",
            "8",
            "longer than the limit of 8 bytes (--max-image-path)",
        ),
        (
            "--max-image-path-total",
            "20",
            "exceed the limit of 20 bytes (--max-image-path-total)",
        ),
        (
            "--max-image-unsigned-bytes",
            "1024",
            "in the first 1024 uncompressed bytes of the layer (--max-image-unsigned-bytes)",
        ),
        (
            "--max-image-json",
            "100",
            "larger than the limit of 100 bytes (--max-image-json)",
        ),
    ] {
        verify(flag, value).assert_refused(flag, &[needle]);
    }
    let o = verify("--max-image-bytes", "8X");
    assert_eq!(o.code, Some(2), "a bad size is a usage error: {o:?}");
    assert!(o.stderr.contains("expected a byte count"), "{}", o.stderr);
    let o = measure(&[
        "release".as_ref(),
        "inspect".as_ref(),
        "--max-image-entries".as_ref(),
        "2".as_ref(),
        img.as_os_str(),
    ]);
    o.assert_refused(
        "inspect",
        &["more than 2 tar headers (--max-image-entries)"],
    );
}
