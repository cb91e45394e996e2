//! Triggers whose re-runs are not settled yet, kept on disk so that a session ended before its
//! re-runs loses nothing.
//!
//! A call's triggers are re-run after its answer went out (docs/evidence.md). An MCP client
//! that ends a session closes the server's stdin and kills it a few seconds later (the Python
//! SDK: 2 s, then SIGTERM, 2 s, then SIGKILL); the re-runs of the last call can take longer
//! than that on a busy machine, and in memory they were lost: no witness, no verdict, no
//! dampening. So each job is written, before the call's answer goes out, as
//! `<dir>/pending/<stem>.json` (the record its witness will become, unsigned, with its items
//! under `<stem>.items/`), held under an exclusive `flock` by the runtime that queued it, and
//! removed once its verdict is recorded. A job whose runtime died is unlocked: the next
//! runtime of the same release claims it when it starts ([`super::Evidence::resume`]) and
//! re-runs it off the call path. A job whose re-runs fail stays for the next runtime.
//!
//! The lock, not the file's presence, says whether a job is owned: a claimer opens the file,
//! takes the lock without waiting, and then checks the path still names the file it locked (the
//! owner removes the file before it unlocks), so two runtimes never re-run one job and a
//! settled job is never re-run.

use std::fs::File;
use std::io::{Read as _, Write as _};
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::os::unix::io::AsRawFd as _;
use std::path::{Path, PathBuf};

use germline_policy::witness::WitnessRecord;
use serde::{Deserialize, Serialize};

use crate::error::EvidenceError;

/// The pending directory under an evidence directory.
pub(crate) fn dir(evidence: &Path) -> PathBuf {
    evidence.join("pending")
}

/// One pending job's file: the record its witness will be. `record.verdict` and
/// `record.tries` are not decided yet; a resumed job ignores them.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PendingFile {
    /// Seconds since the epoch when the trigger was queued.
    pub since: u64,
    pub record: WitnessRecord,
}

/// A job's pending file, held (locked) by this runtime until the job is settled.
#[derive(Debug)]
pub struct Claim {
    path: PathBuf,
    items: PathBuf,
    /// The locked descriptor: dropping it (or the process dying) releases the claim.
    _lock: File,
}

impl Claim {
    /// The pending file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The job is settled: its file and items go (the file first, while still locked: the
    /// lock goes with the last holder of the claim, so a claimer that opened the file before
    /// finds it gone once it gets the lock).
    pub fn settled(&self) -> Result<(), EvidenceError> {
        std::fs::remove_file(&self.path).map_err(EvidenceError::io(&self.path))?;
        match std::fs::remove_dir_all(&self.items) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(EvidenceError::io(&self.items)(e)),
        }
        Ok(())
    }
}

/// `flock(LOCK_EX | LOCK_NB)` on `f`: whether this descriptor now holds the lock.
fn try_lock(f: &File, path: &Path) -> Result<bool, EvidenceError> {
    loop {
        // SAFETY: flock(2) on a descriptor we own and keep open for the lock's lifetime.
        let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if r == 0 {
            return Ok(true);
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EWOULDBLOCK) => return Ok(false),
            Some(libc::EINTR) => continue,
            _ => return Err(EvidenceError::io(path)(e)),
        }
    }
}

/// Writes `file` as a new pending job named `stem` under `pdir`, with `items` (digest,
/// contents) beside it, and returns it claimed. The file appears under its name only once
/// whole and locked (written under a dot name, locked, then renamed).
pub(crate) fn write(
    pdir: &Path,
    stem: &str,
    file: &PendingFile,
    items: &[(String, &[u8])],
) -> Result<Claim, EvidenceError> {
    super::private_dir(pdir)?;
    let idir = pdir.join(format!("{stem}.items"));
    super::private_dir(&idir)?;
    for (sha, contents) in items {
        let p = idir.join(sha);
        std::fs::write(&p, contents).map_err(EvidenceError::io(&p))?;
    }
    let tmp = pdir.join(format!(".{stem}.json.tmp"));
    let mut f = std::fs::OpenOptions::new()
        .create_new(true)
        .write(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(EvidenceError::io(&tmp))?;
    if !try_lock(&f, &tmp)? {
        return Err(EvidenceError::io(&tmp)(std::io::Error::new(
            std::io::ErrorKind::WouldBlock,
            "a new pending file is locked by another descriptor",
        )));
    }
    let mut line = serde_json::to_vec(file)?;
    line.push(b'\n');
    f.write_all(&line).map_err(EvidenceError::io(&tmp))?;
    let path = pdir.join(format!("{stem}.json"));
    std::fs::rename(&tmp, &path).map_err(EvidenceError::io(&path))?;
    Ok(Claim {
        path,
        items: idir,
        _lock: f,
    })
}

/// The pending files under `pdir`, oldest name first (names start with the call's twin time).
pub(crate) fn list(pdir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(pdir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.extension().is_some_and(|x| x == "json")
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| !n.starts_with('.'))
        })
        .collect();
    out.sort();
    out
}

/// Reads a pending file (without claiming it).
pub(crate) fn read(path: &Path) -> Result<PendingFile, EvidenceError> {
    let text = std::fs::read(path).map_err(EvidenceError::io(path))?;
    parse(path, &text)
}

fn parse(path: &Path, text: &[u8]) -> Result<PendingFile, EvidenceError> {
    serde_json::from_slice(text).map_err(|source| EvidenceError::Pending {
        path: path.to_path_buf(),
        source,
    })
}

/// Claims the pending file at `path` if no live runtime holds it and it is `release`'s:
/// its contents and the claim. `None`: held by another runtime, settled meanwhile, or
/// another release's (left for that release's runtime).
pub(crate) fn claim(
    path: &Path,
    release: &str,
) -> Result<Option<(PendingFile, Claim)>, EvidenceError> {
    let mut f = match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(EvidenceError::io(path)(e)),
    };
    if !try_lock(&f, path)? {
        return Ok(None);
    }
    // Settled while we waited for nothing but the open: the owner removed the file before
    // it unlocked, so the path no longer names what we hold.
    let held = f.metadata().map_err(EvidenceError::io(path))?;
    match std::fs::metadata(path) {
        Ok(m) if m.ino() == held.ino() && m.dev() == held.dev() => {}
        Ok(_) => return Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(EvidenceError::io(path)(e)),
    }
    let mut text = Vec::new();
    f.read_to_end(&mut text).map_err(EvidenceError::io(path))?;
    let file = parse(path, &text)?;
    if file.record.release != release {
        return Ok(None);
    }
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let items = path.with_file_name(format!("{stem}.items"));
    Ok(Some((
        file,
        Claim {
            path: path.to_path_buf(),
            items,
            _lock: f,
        },
    )))
}
