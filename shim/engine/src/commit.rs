//! The atomic, crash-safe commit of one copy's writes to a host directory (issue 27,
//! docs/policy.md "Writes").
//!
//! A commit of [`Op`]s below a root directory:
//! 1. **check**: every target is as the copy's view had it (a file with the expected hash, or
//!    absent); one that changed since refuses the whole commit before anything is written;
//! 2. **intent** (`<journal dir>/<id>.intent`, fsynced): names the staging directory, so a
//!    commit killed before its journal is complete is undone at the next start;
//! 3. **stage**: each new contents is written into `<root>/.germline-commit-<id>/` (the same
//!    filesystem as the targets, so a rename moves it), each file and the directory fsynced;
//! 4. **journal** (`<id>.journal`, written under a temporary name, fsynced, renamed): from
//!    here the commit is decided, and a process killed later is rolled forward at start;
//! 5. **apply**: new directories made, staged files renamed over their targets, deletions,
//!    each parent directory fsynced;
//! 6. the staging directory, journal and intent are removed.
//!
//! So after [`recover`] a commit is wholly applied or not at all (`tests/commit_crash.rs` kills
//! a committer after each [`Step`]). Every path below the root is opened from the root's
//! descriptor with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`: a symlink on the host (even one
//! swapped in after the check) never carries a write out of the directory item.
//!
//! A whole directory cannot be swapped atomically for an arbitrary host tree; what is atomic
//! is the decision (the journal's rename), and [`recover`] completes a decided commit.

use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{openat2, renameat, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{mkdirat, Mode};
use nix::unistd::{unlinkat, UnlinkatFlags};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// What a target must be before the commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expected {
    /// Nothing there.
    Absent,
    /// A regular file whose contents have this sha256 (hex).
    Sha256(String),
}

/// One change, at a path relative to the commit's root (plain components only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// A new directory (must be absent).
    MkDir { rel: String },
    /// The file's new contents and permission bits.
    Write {
        rel: String,
        contents: Vec<u8>,
        mode: u32,
        expected: Expected,
    },
    /// The file is removed.
    Delete { rel: String, expected: Expected },
}

impl Op {
    pub fn rel(&self) -> &str {
        match self {
            Op::MkDir { rel } | Op::Write { rel, .. } | Op::Delete { rel, .. } => rel,
        }
    }
}

/// A step of [`commit_with`], after which a test may kill the committer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Intent,
    Staged,
    Journaled,
    /// One staged file renamed over its target.
    RenamedOne,
    Applied,
    Done,
}

#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    #[error("the host changed since the copy's view was taken: {}", .0.join(", "))]
    Changed(Vec<String>),
    #[error("{0:?} is not a plain relative path")]
    BadPath(String),
    #[error("commit: {what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> CommitError {
    let what = what.into();
    move |source| CommitError::Io { what, source }
}

fn errno(what: impl Into<String>) -> impl FnOnce(Errno) -> CommitError {
    let what = what.into();
    move |e| CommitError::Io {
        what,
        source: std::io::Error::from(e),
    }
}

/// What a decided commit does, written before it does it.
#[derive(Debug, Serialize, Deserialize)]
struct Journal {
    root: PathBuf,
    /// The staging directory's name below the root.
    staging: String,
    mkdirs: Vec<String>,
    /// (staged file name, target).
    renames: Vec<(String, String)>,
    deletes: Vec<String>,
}

fn plain(rel: &str) -> Result<(), CommitError> {
    let ok = !rel.is_empty()
        && Path::new(rel)
            .components()
            .all(|c| matches!(c, Component::Normal(_)))
        && !rel.contains("//")
        && !rel.ends_with('/');
    if ok {
        Ok(())
    } else {
        Err(CommitError::BadPath(rel.to_string()))
    }
}

fn how(flags: OFlag) -> OpenHow {
    OpenHow::new().flags(flags | OFlag::O_CLOEXEC).resolve(
        ResolveFlag::RESOLVE_BENEATH
            | ResolveFlag::RESOLVE_NO_SYMLINKS
            | ResolveFlag::RESOLVE_NO_MAGICLINKS,
    )
}

/// The root directory, reached from `/` without following any symlink.
fn open_root(root: &Path) -> Result<OwnedFd, CommitError> {
    let rel = root
        .strip_prefix("/")
        .map_err(|_| CommitError::BadPath(root.display().to_string()))?;
    let slash = std::fs::File::open("/").map_err(io("open /"))?;
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW;
    if rel.as_os_str().is_empty() {
        return Ok(OwnedFd::from(slash));
    }
    openat2(slash.as_fd(), rel, how(flags)).map_err(errno(format!("open {}", root.display())))
}

/// The directory `rel`'s parent names below `root`, and `rel`'s last component.
fn parent_of<'a>(root: &OwnedFd, rel: &'a str) -> Result<(OwnedFd, &'a str), CommitError> {
    plain(rel)?;
    let (dir, leaf) = match rel.rsplit_once('/') {
        Some((d, l)) => (d, l),
        None => (".", rel),
    };
    let fd = openat2(
        root.as_fd(),
        dir,
        how(OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW),
    )
    .map_err(errno(format!("open the directory of {rel}")))?;
    Ok((fd, leaf))
}

/// The sha256 of the regular file at `rel` (`None`: absent), never following a symlink.
fn current(root: &OwnedFd, rel: &str) -> Result<Option<Result<String, String>>, CommitError> {
    plain(rel)?;
    match openat2(
        root.as_fd(),
        rel,
        how(OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK),
    ) {
        Ok(fd) => {
            let mut f = std::fs::File::from(fd);
            let md = f.metadata().map_err(io(format!("stat {rel}")))?;
            if !md.is_file() {
                return Ok(Some(Err("not a regular file".into())));
            }
            let mut h = Sha256::new();
            std::io::copy(&mut f, &mut h).map_err(io(format!("read {rel}")))?;
            Ok(Some(Ok(hex::encode(h.finalize()))))
        }
        Err(Errno::ENOENT) => Ok(None),
        // A symlink (or one on the way), a directory where a file was: changed.
        Err(Errno::ELOOP) | Err(Errno::EXDEV) => Ok(Some(Err("a symbolic link".into()))),
        Err(e) => Err(errno(format!("open {rel}"))(e)),
    }
}

/// The targets that are not as `ops` expect.
fn changed(root: &OwnedFd, ops: &[Op]) -> Result<Vec<String>, CommitError> {
    let mut out = Vec::new();
    for op in ops {
        let (rel, want) = match op {
            // A directory already there (one the copy could not see, being empty or holding
            // nothing of its view) is left as it is; anything else there is a change.
            Op::MkDir { rel } => {
                plain(rel)?;
                match openat2(
                    root.as_fd(),
                    rel.as_str(),
                    how(OFlag::O_PATH | OFlag::O_NOFOLLOW),
                ) {
                    Err(Errno::ENOENT) => {}
                    Ok(fd) => {
                        let st = nix::sys::stat::fstat(fd.as_fd())
                            .map_err(errno(format!("stat {rel}")))?;
                        if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
                            out.push(format!("{rel} (now not a directory)"));
                        }
                    }
                    Err(Errno::ELOOP) | Err(Errno::EXDEV) => {
                        out.push(format!("{rel} (now a symbolic link)"))
                    }
                    Err(e) => return Err(errno(format!("open {rel}"))(e)),
                }
                continue;
            }
            Op::Write { rel, expected, .. } | Op::Delete { rel, expected } => (rel, expected),
        };
        let now = current(root, rel)?;
        let same = match (want, &now) {
            (Expected::Absent, None) => true,
            (Expected::Sha256(h), Some(Ok(g))) => h == g,
            _ => false,
        };
        if !same {
            let what = match now {
                None => "now absent".to_string(),
                Some(Ok(_)) => "now a file of other contents".to_string(),
                Some(Err(why)) => format!("now {why}"),
            };
            out.push(format!("{rel} ({what})"));
        }
    }
    Ok(out)
}

fn fsync_dir(fd: &OwnedFd, what: &str) -> Result<(), CommitError> {
    nix::unistd::fsync(fd.as_fd()).map_err(errno(format!("fsync {what}")))
}

/// Writes `name` in `dir` durably (a temporary name, fsync, rename, fsync of `dir`); `lock`:
/// the file is locked (`flock`) before it gets its name, and the lock is held while the
/// returned descriptor is.
fn write_synced(
    dir: &Path,
    name: &str,
    bytes: &[u8],
    lock: bool,
) -> Result<std::fs::File, CommitError> {
    let tmp = dir.join(format!("{name}.tmp"));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io(format!("create {}", tmp.display())))?;
    if lock {
        f.lock().map_err(io(format!("lock {}", tmp.display())))?;
    }
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .map_err(io(format!("write {}", tmp.display())))?;
    std::fs::rename(&tmp, dir.join(name)).map_err(io(format!("rename {}", tmp.display())))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(format!("fsync {}", dir.display())))?;
    Ok(f)
}

/// Commits `ops` below `root`, journalled in `journal_dir`. Returns once the commit is applied
/// and durable; a commit of renames alone is cleaned up on a thread ([`commit_cleaning_later`]).
pub fn commit(journal_dir: &Path, root: &Path, ops: &[Op]) -> Result<(), CommitError> {
    commit_cleaning_later(journal_dir, root, ops).map(|_| ())
}

/// Cleanups of applied commits still running on their threads ([`commit_cleaning_later`]).
static CLEANUPS: std::sync::Mutex<Vec<std::thread::JoinHandle<()>>> =
    std::sync::Mutex::new(Vec::new());

/// Waits until every cleanup [`commit_cleaning_later`] left to a thread is done. Every commit
/// waits for them before it checks its targets, so commits are cleaned up in the order they
/// were made, as when each cleaned up before it returned.
pub fn wait_for_cleanups() {
    let pending = match CLEANUPS.lock() {
        Ok(mut p) => std::mem::take(&mut *p),
        Err(poisoned) => std::mem::take(&mut *poisoned.into_inner()),
    };
    for h in pending {
        let _ = h.join();
    }
}

/// [`commit_with`] without steps, except that the last step (removing the staging directory,
/// the journal and the intent, three fsyncs' worth) runs on a thread after the commit returns
/// when the journal holds renames only: the commit is then applied and durable, and a crash
/// before the cleanup ends leaves a decided journal whose roll-forward at start changes nothing
/// (every staged file was renamed away, and the intent stays locked while the thread runs).
/// A commit that deletes files or makes directories is cleaned up before it returns, as a
/// roll-forward would repeat those on a host that may have changed since. Returns whether the
/// cleanup was left to a thread.
pub fn commit_cleaning_later(
    journal_dir: &Path,
    root: &Path,
    ops: &[Op],
) -> Result<bool, CommitError> {
    let mut later = true;
    commit_steps(journal_dir, root, ops, &mut |_| {}, &mut later)?;
    Ok(later)
}

/// [`commit`], calling `at` after each [`Step`], cleaning up before it returns.
pub fn commit_with(
    journal_dir: &Path,
    root: &Path,
    ops: &[Op],
    at: &mut dyn FnMut(Step),
) -> Result<(), CommitError> {
    commit_steps(journal_dir, root, ops, at, &mut false)
}

/// The commit; `later`: the cleanup may be left to a thread (see [`commit_cleaning_later`]),
/// set to whether it was.
fn commit_steps(
    journal_dir: &Path,
    root: &Path,
    ops: &[Op],
    at: &mut dyn FnMut(Step),
    later: &mut bool,
) -> Result<(), CommitError> {
    wait_for_cleanups();
    let may_defer = std::mem::replace(later, false);
    for op in ops {
        plain(op.rel())?;
    }
    let rootfd = open_root(root)?;
    let bad = changed(&rootfd, ops)?;
    if !bad.is_empty() {
        return Err(CommitError::Changed(bad));
    }
    if ops.is_empty() {
        return Ok(());
    }
    std::fs::create_dir_all(journal_dir).map_err(io("make the journal directory"))?;
    std::fs::set_permissions(journal_dir, std::fs::Permissions::from_mode(0o700))
        .map_err(io("chmod the journal directory"))?;
    let id = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    );
    let staging = format!(".germline-commit-{id}");
    let intent = serde_json::json!({"root": root, "staging": staging}).to_string();
    // Locked until this commit ends: recovery (another runtime starting meanwhile) leaves a
    // commit whose intent is locked alone, as its committer is alive.
    let held = write_synced(
        journal_dir,
        &format!("{id}.intent"),
        intent.as_bytes(),
        true,
    )?;
    at(Step::Intent);
    mkdirat(
        rootfd.as_fd(),
        staging.as_str(),
        Mode::from_bits_truncate(0o700),
    )
    .map_err(errno("make the staging directory"))?;
    let stagefd = openat2(
        rootfd.as_fd(),
        staging.as_str(),
        how(OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW),
    )
    .map_err(errno("open the staging directory"))?;
    let stage_path = PathBuf::from(format!("/proc/self/fd/{}", stagefd.as_raw_fd()));
    let mut journal = Journal {
        root: root.to_path_buf(),
        staging,
        mkdirs: Vec::new(),
        renames: Vec::new(),
        deletes: Vec::new(),
    };
    let mut mkdirs: Vec<&str> = Vec::new();
    for (n, op) in ops.iter().enumerate() {
        match op {
            Op::MkDir { rel } => mkdirs.push(rel),
            Op::Delete { rel, .. } => journal.deletes.push(rel.clone()),
            Op::Write {
                rel,
                contents,
                mode,
                ..
            } => {
                let name = n.to_string();
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .custom_flags(libc::O_NOFOLLOW)
                    .open(stage_path.join(&name))
                    .map_err(io(format!("stage {rel}")))?;
                f.write_all(contents).map_err(io(format!("stage {rel}")))?;
                // Owner and group of the directory it goes into; no set-id bits.
                let (parent, _) = parent_of(&rootfd, rel).or_else(|_| {
                    Ok::<_, CommitError>((rootfd.try_clone().map_err(io("dup"))?, ""))
                })?;
                let pm = nix::sys::stat::fstat(parent.as_fd())
                    .map_err(errno(format!("stat the directory of {rel}")))?;
                std::os::unix::fs::fchown(&f, Some(pm.st_uid), Some(pm.st_gid))
                    .map_err(io(format!("chown {rel}")))?;
                f.set_permissions(std::fs::Permissions::from_mode(mode & 0o777))
                    .and_then(|()| f.sync_all())
                    .map_err(io(format!("stage {rel}")))?;
                journal.renames.push((name, rel.clone()));
            }
        }
    }
    // Parents before children.
    mkdirs.sort_by_key(|r| (r.matches('/').count(), r.to_string()));
    journal.mkdirs = mkdirs.into_iter().map(str::to_string).collect();
    fsync_dir(&stagefd, "the staging directory")?;
    at(Step::Staged);
    let text = serde_json::to_vec(&journal).map_err(|e| io("journal")(e.into()))?;
    write_synced(journal_dir, &format!("{id}.journal"), &text, false)?;
    at(Step::Journaled);
    apply(&journal, false, at)?;
    at(Step::Applied);
    if may_defer && journal.mkdirs.is_empty() && journal.deletes.is_empty() {
        clean_up_later(journal_dir, id, journal, held);
        *later = true;
    } else {
        finish(journal_dir, &id, &journal)?;
        drop(held);
    }
    at(Step::Done);
    Ok(())
}

/// [`finish`] on a thread, the intent's lock (`held`) kept until it is done; a failure leaves
/// the decided journal to [`recover`] at the next start.
fn clean_up_later(journal_dir: &Path, id: String, journal: Journal, held: std::fs::File) {
    let dir = journal_dir.to_path_buf();
    let spawned = std::thread::Builder::new()
        .name("commit-cleanup".into())
        .spawn(move || {
            let _ = finish(&dir, &id, &journal);
            drop(held);
        });
    match (spawned, CLEANUPS.lock()) {
        (Ok(h), Ok(mut p)) => p.push(h),
        (Ok(h), Err(poisoned)) => poisoned.into_inner().push(h),
        // No thread: the journal stays, decided, and is rolled forward (a no-op) at start.
        (Err(_), _) => {}
    }
}

/// Does what a decided journal says; each step may already have been done (roll forward).
/// `rolling`: a recovery's roll-forward, where a missing staging directory means every rename
/// was done (it is removed only after them); in the commit itself it is an error.
fn apply(j: &Journal, rolling: bool, at: &mut dyn FnMut(Step)) -> Result<(), CommitError> {
    let rootfd = open_root(&j.root)?;
    let mut dirty: Vec<OwnedFd> = Vec::new();
    for rel in &j.mkdirs {
        let (parent, leaf) = parent_of(&rootfd, rel)?;
        match mkdirat(parent.as_fd(), leaf, Mode::from_bits_truncate(0o755)) {
            Ok(()) | Err(Errno::EEXIST) => {}
            Err(e) => return Err(errno(format!("mkdir {rel}"))(e)),
        }
        dirty.push(parent);
    }
    let stagefd = match openat2(
        rootfd.as_fd(),
        j.staging.as_str(),
        how(OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW),
    ) {
        Ok(fd) => Some(fd),
        // Every rename done and the staging directory removed: nothing left to move.
        Err(Errno::ENOENT) if rolling => None,
        Err(e) => return Err(errno("open the staging directory")(e)),
    };
    for (name, rel) in &j.renames {
        let (parent, leaf) = match (parent_of(&rootfd, rel), &stagefd) {
            (Ok(p), _) => p,
            // Every rename done before a kill, and the directory gone since: nothing to sync.
            (Err(_), None) => continue,
            (Err(e), Some(_)) => return Err(e),
        };
        if let Some(stagefd) = &stagefd {
            match renameat(stagefd.as_fd(), name.as_str(), parent.as_fd(), leaf) {
                Ok(()) => at(Step::RenamedOne),
                // Renamed before a kill.
                Err(Errno::ENOENT) => {}
                Err(e) => return Err(errno(format!("rename over {rel}"))(e)),
            }
        }
        // Also when every rename was done before a kill: they are made durable here.
        dirty.push(parent);
    }
    for rel in &j.deletes {
        let (parent, leaf) = parent_of(&rootfd, rel)?;
        match unlinkat(parent.as_fd(), leaf, UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => {}
            Err(e) => return Err(errno(format!("remove {rel}"))(e)),
        }
        dirty.push(parent);
    }
    fsync_each_once(&dirty).map(|_| ())
}

/// fsyncs each directory of `dirs` once (several targets in one directory, or a directory
/// reached by two spellings, cost one fsync). The root is among them whenever an applied
/// change is directly in it (its entries are the only ones a root fsync makes durable), so
/// it gets no fsync of its own: the staging directory's removal from it is made durable by
/// [`remove_staging`].
fn fsync_each_once(dirs: &[OwnedFd]) -> Result<usize, CommitError> {
    let mut done: Vec<(u64, u64)> = Vec::new();
    for d in dirs {
        let st = nix::sys::stat::fstat(d.as_fd()).map_err(errno("stat a target directory"))?;
        let id = (st.st_dev, st.st_ino);
        if !done.contains(&id) {
            fsync_dir(d, "a target directory")?;
            done.push(id);
        }
    }
    Ok(done.len())
}

/// Removes the staging directory, then the journal and intent.
fn finish(journal_dir: &Path, id: &str, j: &Journal) -> Result<(), CommitError> {
    remove_staging(&j.root, &j.staging)?;
    for ext in ["journal", "intent"] {
        match std::fs::remove_file(journal_dir.join(format!("{id}.{ext}"))) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(format!("remove {id}.{ext}"))(e)),
        }
    }
    std::fs::File::open(journal_dir)
        .and_then(|d| d.sync_all())
        .map_err(io("fsync the journal directory"))
}

fn remove_staging(root: &Path, staging: &str) -> Result<(), CommitError> {
    if !staging.starts_with(".germline-commit-") || staging.contains('/') {
        return Err(CommitError::BadPath(staging.to_string()));
    }
    let rootfd = match open_root(root) {
        Ok(fd) => fd,
        // The directory is gone: so is its staging directory.
        Err(CommitError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Ok(())
        }
        Err(e) => return Err(e),
    };
    let p = PathBuf::from(format!("/proc/self/fd/{}", rootfd.as_raw_fd())).join(staging);
    // remove_dir_all removes a symlink itself, never what it names.
    match std::fs::remove_dir_all(&p) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(format!("remove {staging}"))(e)),
    }
    fsync_dir(&rootfd, "the root")
}

/// What [`recover`] did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    /// Decided commits completed.
    pub rolled_forward: usize,
    /// Undecided commits undone.
    pub removed: usize,
}

/// At start: completes every commit whose journal is complete and undoes every other one
/// (its staging directory removed, the targets untouched).
pub fn recover(journal_dir: &Path) -> Result<Recovered, CommitError> {
    let mut out = Recovered::default();
    let entries = match std::fs::read_dir(journal_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(io("list the journal directory")(e)),
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    for name in names.iter().filter(|n| n.ends_with(".intent.tmp")) {
        // An intent killed before it got its name (its committer touched nothing else yet);
        // locked while its committer lives.
        let p = journal_dir.join(name);
        if let Ok(f) = std::fs::File::open(&p) {
            if f.try_lock().is_ok() {
                let _ = std::fs::remove_file(&p);
            }
        }
    }
    for name in &names {
        let Some(id) = name.strip_suffix(".intent") else {
            continue;
        };
        // A commit whose committer is alive (it holds the intent's lock) is not ours.
        let ipath = journal_dir.join(name);
        let held = std::fs::File::open(&ipath).map_err(io(format!("open {}", ipath.display())))?;
        match held.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => continue,
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(io(format!("lock {}", ipath.display()))(e))
            }
        }
        let _ = std::fs::remove_file(journal_dir.join(format!("{id}.journal.tmp")));
        let jpath = journal_dir.join(format!("{id}.journal"));
        if jpath.exists() {
            let text = std::fs::read(&jpath).map_err(io(format!("read {}", jpath.display())))?;
            let j: Journal = serde_json::from_slice(&text)
                .map_err(|e| io(format!("parse {}", jpath.display()))(e.into()))?;
            apply(&j, true, &mut |_| {})?;
            finish(journal_dir, id, &j)?;
            out.rolled_forward += 1;
        } else {
            let text = std::fs::read(&ipath).map_err(io(format!("read {}", ipath.display())))?;
            let v: serde_json::Value = serde_json::from_slice(&text)
                .map_err(|e| io(format!("parse {}", ipath.display()))(e.into()))?;
            if let (Some(root), Some(staging)) = (v["root"].as_str(), v["staging"].as_str()) {
                remove_staging(Path::new(root), staging)?;
            }
            std::fs::remove_file(&ipath).map_err(io(format!("remove {}", ipath.display())))?;
            out.removed += 1;
        }
    }
    Ok(out)
}

/// The sha256 (hex) of `bytes`, as [`Expected::Sha256`] wants it.
pub fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A directory reached twice (two targets in it, or the root as `.` and by its path) is
    /// fsynced once; distinct directories each once.
    #[test]
    fn each_dirty_directory_is_synced_once() {
        let d = tempfile::tempdir().expect("tmp");
        std::fs::create_dir_all(d.path().join(".git/refs")).expect("mkdir");
        let root = open_root(d.path()).expect("root");
        let dirs = vec![
            parent_of(&root, ".git/index").expect("p").0,
            parent_of(&root, "README").expect("p").0,
            parent_of(&root, ".git/HEAD").expect("p").0,
            root.try_clone().expect("dup"),
            parent_of(&root, ".git/refs/main").expect("p").0,
            parent_of(&root, "src").expect("p").0,
        ];
        assert_eq!(fsync_each_once(&dirs).expect("sync"), 3);
        assert_eq!(fsync_each_once(&[]).expect("sync"), 0);
    }

    fn staging_dirs(root: &Path) -> Vec<String> {
        std::fs::read_dir(root)
            .expect("ls")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".germline-commit-"))
            .collect()
    }

    fn journal_files(j: &Path) -> Vec<String> {
        std::fs::read_dir(j)
            .map(|es| {
                es.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// A commit of renames alone (git's refreshed index) is applied when it returns and left
    /// to a thread to clean up; one that deletes or makes a directory is cleaned up before it
    /// returns. Either way nothing is left once the cleanups are done, and the next commit
    /// waits for them.
    #[test]
    fn a_rename_only_commit_is_cleaned_up_after_it_returns() {
        let d = tempfile::tempdir().expect("tmp");
        let root = d.path().join("repo");
        let j = d.path().join("journal");
        std::fs::create_dir_all(root.join(".git")).expect("mkdir");
        std::fs::write(root.join(".git/index"), b"v1").expect("write");
        std::fs::write(root.join("gone"), b"g").expect("write");
        let write = |from: &[u8], to: &[u8]| Op::Write {
            rel: ".git/index".into(),
            contents: to.to_vec(),
            mode: 0o644,
            expected: Expected::Sha256(sha256(from)),
        };
        let later = commit_cleaning_later(&j, &root, &[write(b"v1", b"v2")]).expect("commit");
        assert!(later, "renames alone: cleaned up on a thread");
        assert_eq!(std::fs::read(root.join(".git/index")).expect("read"), b"v2");
        wait_for_cleanups();
        assert_eq!(staging_dirs(&root), Vec::<String>::new());
        assert_eq!(journal_files(&j), Vec::<String>::new());
        // Back to back: the second waits for the first's cleanup, and both apply.
        assert!(commit_cleaning_later(&j, &root, &[write(b"v2", b"v3")]).expect("commit"));
        assert!(commit_cleaning_later(&j, &root, &[write(b"v3", b"v4")]).expect("commit"));
        assert_eq!(std::fs::read(root.join(".git/index")).expect("read"), b"v4");
        for ops in [
            vec![Op::Delete {
                rel: "gone".into(),
                expected: Expected::Sha256(sha256(b"g")),
            }],
            vec![Op::MkDir { rel: "new".into() }],
        ] {
            let later = commit_cleaning_later(&j, &root, &ops).expect("commit");
            assert!(!later, "{ops:?}: cleaned up before it returns");
            assert_eq!(staging_dirs(&root), Vec::<String>::new(), "{ops:?}");
            assert_eq!(journal_files(&j), Vec::<String>::new(), "{ops:?}");
        }
        assert!(!root.join("gone").exists() && root.join("new").is_dir());
    }
}
