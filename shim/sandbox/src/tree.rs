//! Directory items in a copy (issue 27): the entries of a directory the agent named, written
//! at their own host paths into an item store slot (mounts.rs, [`crate::mounts::ItemStore`])
//! that is bound read-only in that copy's mount namespace only.
//!
//! The engine hands over only what the copy may see: the directories it names and the files
//! in the copy's view. The others are **absent**, not empty: their names were never written
//! by the agent, and a name (`layoff-alice.txt`) can disclose what the file holds
//! (docs/policy.md, "Directory items").
//!
//! Everything written here is owned by [`crate::germline::HOST_ID`], the host id mapped to
//! the copy's root, so tools that check who owns what they read (git's "dubious ownership")
//! find it their own. Without `LaunchSpec::writable_trees` ownership gives no way to write:
//! the bind is read-only (`EROFS` for writes, `chmod` and `chown` alike) and no Landlock layer
//! grants a write right there. With it, the slot is bound read-write and is the copy's own
//! layer of the directory (issue 27; read back through `Copy::tree_layer`).

use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use crate::error::{Error, Result};
use crate::germline::HOST_ID;

/// One entry of a directory item in a copy's view, at its absolute path inside the copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TreeEntry {
    /// A directory the agent named: present in every copy, even with nothing visible in it.
    Dir { path: String },
    /// A file of it the copy may see, with its permission bits (the write bits are dropped)
    /// and its modification time `(seconds, nanoseconds)`.
    File {
        path: String,
        contents: Vec<u8>,
        mode: u32,
        mtime: (i64, i64),
    },
}

impl TreeEntry {
    pub fn path(&self) -> &str {
        match self {
            TreeEntry::Dir { path } | TreeEntry::File { path, .. } => path,
        }
    }

    /// The bytes it takes.
    pub fn len(&self) -> usize {
        match self {
            TreeEntry::Dir { .. } => 0,
            TreeEntry::File { contents, .. } => contents.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The directories one slot's tree writes have made (or found and chowned) so far, each kept
/// open: each is checked and chowned once per copy, not once per file below it, and every
/// later entry is made from its parent's descriptor (`mkdirat`/`openat`), so no path is walked
/// again, through `/proc/self/fd` or otherwise. The slot is the shim's own (mounted nowhere
/// until the writes are done), so nothing else changes it meanwhile.
#[derive(Debug, Default)]
pub(crate) struct Made(std::collections::HashMap<PathBuf, OwnedFd>);

/// Most directory descriptors one slot's writes keep open at once (see [`dirs`]).
const MAX_OPEN_DIRS: usize = 256;

/// Opens the directory `name` below `parent`, never following a symlink.
fn open_dir_at(parent: RawFd, name: &CStr) -> std::io::Result<OwnedFd> {
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: `name` is NUL-terminated and outlives the call; a bad `parent` gives EBADF.
    let fd = unsafe { libc::openat(parent, name.as_ptr(), flags) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: openat succeeded, so the descriptor is fresh and ours.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Makes `rel` (a directory below the slot `base`) and every directory on the way, each owned
/// by the copy's root; the descriptor of `rel` (`base` itself for an empty `rel`). Nothing on
/// the way may be a symlink (the shim made all of it; `O_NOFOLLOW | O_DIRECTORY` refuses one).
fn dirs(base: RawFd, rel: &Path, made: &mut Made) -> Result<RawFd> {
    // Bounded descriptors: a tree of many directories (up to MAX_TREE_FILES' worth) must not
    // exhaust the shim's open files. Cleared only here, before any descriptor of the map is
    // in use, so at most MAX_OPEN_DIRS plus one path's depth are open at once; a directory
    // met again after a clear is found (EEXIST), reopened and chowned again, which is
    // idempotent.
    if made.0.len() >= MAX_OPEN_DIRS {
        made.0.clear();
    }
    let mut cur = PathBuf::new();
    let mut parent = base;
    for c in rel.components() {
        let Component::Normal(c) = c else {
            return Err(Error::Spec(format!(
                "tree entry {}: not a plain path",
                rel.display()
            )));
        };
        cur.push(c);
        if let Some(fd) = made.0.get(&cur) {
            parent = fd.as_raw_fd();
            continue;
        }
        let name = CString::new(c.as_bytes())
            .map_err(|_| Error::Spec(format!("tree entry {}: NUL byte", rel.display())))?;
        // SAFETY: `name` is NUL-terminated and outlives the call; a bad `parent` gives EBADF.
        if unsafe { libc::mkdirat(parent, name.as_ptr(), 0o777) } < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EEXIST) {
                return Err(Error::sys(format!("tree: mkdir {}", rel.display()), e));
            }
        }
        let fd = open_dir_at(parent, &name).map_err(|e| {
            Error::Spec(format!(
                "tree entry {}: {} is not a directory ({e})",
                rel.display(),
                cur.display()
            ))
        })?;
        std::os::unix::fs::fchown(&fd, Some(HOST_ID), Some(HOST_ID))
            .map_err(|e| Error::sys(format!("tree: chown {}", rel.display()), e))?;
        parent = fd.as_raw_fd();
        made.0.insert(cur.clone(), fd);
    }
    Ok(parent)
}

/// Writes `entry` at `rel` below the slot directory `base` (its descriptor; see the module
/// comment); `writable`: the file keeps its owner's write bit (issue 27: the copy's own
/// layer). `made`: the directories this slot's earlier writes made.
pub(crate) fn write(
    base: RawFd,
    rel: &str,
    entry: &TreeEntry,
    writable: bool,
    made: &mut Made,
) -> Result<()> {
    let rel = Path::new(rel);
    match entry {
        TreeEntry::Dir { .. } => dirs(base, rel, made).map(|_| ()),
        TreeEntry::File {
            contents,
            mode,
            mtime,
            ..
        } => {
            let what = |step: &str| format!("tree: {step} {}", rel.display());
            let (Some(parent), Some(name)) = (rel.parent(), rel.file_name()) else {
                return Err(Error::Spec(what("no file name in")));
            };
            let dir = dirs(base, parent, made)?;
            let name =
                CString::new(name.as_bytes()).map_err(|_| Error::Spec(what("NUL byte in")))?;
            let perm = 0o444 | (mode & if writable { 0o755 } else { 0o555 });
            let fd = germline_sys::sys::create_new_at(dir, &name, perm)
                .map_err(|e| Error::sys(what("create"), e))?;
            germline_sys::sys::write_all_raw(fd.as_raw_fd(), contents)
                .map_err(|e| Error::sys(what("write"), e))?;
            let f = std::fs::File::from(fd);
            let secs = u64::try_from(mtime.0).unwrap_or(0);
            let nanos = u32::try_from(mtime.1).unwrap_or(0).min(999_999_999);
            let t = std::time::UNIX_EPOCH + std::time::Duration::new(secs, nanos);
            f.set_times(std::fs::FileTimes::new().set_modified(t).set_accessed(t))
                .map_err(|e| Error::sys(what("set the times of"), e))?;
            std::os::unix::fs::fchown(&f, Some(HOST_ID), Some(HOST_ID))
                .map_err(|e| Error::sys(what("chown"), e))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    /// Root only (the entries are chowned to HOST_ID); a run that requires root tests fails
    /// instead of skipping.
    fn root() -> bool {
        // SAFETY: geteuid has no preconditions.
        let is_root = unsafe { libc::geteuid() } == 0;
        assert!(
            is_root || std::env::var_os("GERMLINE_REQUIRE_ROOT_TESTS").is_none(),
            "tree tests need root"
        );
        is_root
    }

    fn file(path: &str, contents: &str, mode: u32, mtime: (i64, i64)) -> TreeEntry {
        TreeEntry::File {
            path: path.into(),
            contents: contents.as_bytes().to_vec(),
            mode,
            mtime,
        }
    }

    /// More directories than the descriptors kept open: every file lands with its contents,
    /// mode (write bits as asked), mtime and owner, and every directory is the copy's root's.
    #[test]
    fn many_directories_are_written_from_descriptors_with_bounded_fds() {
        if !root() {
            return;
        }
        let d = tempfile::tempdir().expect("tempdir");
        let base = std::fs::File::open(d.path()).expect("open");
        let mut made = Made::default();
        let n = MAX_OPEN_DIRS + 44;
        for i in 0..n {
            let rel = format!("a/d{i:03}/f");
            let e = file(
                &rel,
                &format!("{i}\n"),
                0o755,
                (1_700_000_000, 123 + i as i64),
            );
            write(base.as_raw_fd(), &rel, &e, false, &mut made).expect("write");
            assert!(
                made.0.len() <= MAX_OPEN_DIRS + MAX_DEPTH_IN_TEST,
                "{}",
                made.0.len()
            );
        }
        // A directory met again after the descriptors were dropped.
        let e = file("a/d000/g", "again\n", 0o644, (5, 0));
        write(base.as_raw_fd(), "a/d000/g", &e, true, &mut made).expect("write again");
        for i in 0..n {
            let p = d.path().join(format!("a/d{i:03}/f"));
            let m = std::fs::symlink_metadata(&p).expect("stat");
            assert_eq!(std::fs::read_to_string(&p).expect("read"), format!("{i}\n"));
            assert_eq!(m.permissions().mode() & 0o7777, 0o555, "{}", p.display());
            assert_eq!((m.mtime(), m.mtime_nsec()), (1_700_000_000, 123 + i as i64));
            assert_eq!((m.uid(), m.gid()), (HOST_ID, HOST_ID));
            let dm = std::fs::symlink_metadata(p.parent().expect("parent")).expect("stat");
            assert!(dm.is_dir() && dm.uid() == HOST_ID);
        }
        let g = std::fs::symlink_metadata(d.path().join("a/d000/g")).expect("stat");
        assert_eq!(g.permissions().mode() & 0o7777, 0o644);
    }

    /// A symlink where a directory of the tree goes is never followed: the write fails and
    /// nothing appears where it points.
    #[test]
    fn a_symlink_on_the_way_is_refused() {
        if !root() {
            return;
        }
        let d = tempfile::tempdir().expect("tempdir");
        let out = tempfile::tempdir().expect("tempdir");
        std::os::unix::fs::symlink(out.path(), d.path().join("link")).expect("ln");
        std::os::unix::fs::symlink(out.path().join("x"), d.path().join("f")).expect("ln");
        let base = std::fs::File::open(d.path()).expect("open");
        let mut made = Made::default();
        let e = file("link/x", "no\n", 0o644, (1, 0));
        assert!(write(base.as_raw_fd(), "link/x", &e, true, &mut made).is_err());
        let e = file("f", "no\n", 0o644, (1, 0));
        assert!(write(base.as_raw_fd(), "f", &e, true, &mut made).is_err());
        assert_eq!(std::fs::read_dir(out.path()).expect("ls").count(), 0);
    }

    const MAX_DEPTH_IN_TEST: usize = 2;
}
