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

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path};

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

/// The directories one slot's tree writes have made (or found and chowned) so far: each is
/// checked and chowned once per copy, not once per file below it. The slot is the shim's own
/// (mounted nowhere until the writes are done), so nothing else changes it meanwhile.
#[derive(Debug, Default)]
pub(crate) struct Made(std::collections::HashSet<std::path::PathBuf>);

/// Makes `rel` (a directory below `base`) and every directory on the way, each owned by the
/// copy's root. Nothing on the way may be a symlink (the shim made all of it).
fn dirs(base: &Path, rel: &Path, made: &mut Made) -> Result<()> {
    let mut cur = base.to_path_buf();
    for c in rel.components() {
        let Component::Normal(c) = c else {
            return Err(Error::Spec(format!(
                "tree entry {}: not a plain path",
                rel.display()
            )));
        };
        cur.push(c);
        if made.0.contains(&cur) {
            continue;
        }
        match std::fs::symlink_metadata(&cur) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(Error::Spec(format!(
                    "tree entry {}: {} is not a directory",
                    rel.display(),
                    cur.display()
                )))
            }
            Err(_) => std::fs::create_dir(&cur)
                .map_err(|e| Error::sys(format!("tree: mkdir {}", rel.display()), e))?,
        }
        std::os::unix::fs::lchown(&cur, Some(HOST_ID), Some(HOST_ID))
            .map_err(|e| Error::sys(format!("tree: chown {}", rel.display()), e))?;
        made.0.insert(cur.clone());
    }
    Ok(())
}

/// Writes `entry` at `rel` below the slot directory `base` (see the module comment);
/// `writable`: the file keeps its owner's write bit (issue 27: the copy's own layer). `made`:
/// the directories this slot's earlier writes made.
pub(crate) fn write(
    base: &Path,
    rel: &str,
    entry: &TreeEntry,
    writable: bool,
    made: &mut Made,
) -> Result<()> {
    let rel = Path::new(rel);
    match entry {
        TreeEntry::Dir { .. } => dirs(base, rel, made),
        TreeEntry::File {
            contents,
            mode,
            mtime,
            ..
        } => {
            if let Some(parent) = rel.parent() {
                dirs(base, parent, made)?;
            }
            let path = base.join(rel);
            let what = |step: &str| format!("tree: {step} {}", rel.display());
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o444 | (mode & if writable { 0o755 } else { 0o555 }))
                .custom_flags(libc::O_NOFOLLOW)
                .open(&path)
                .map_err(|e| Error::sys(what("create"), e))?;
            f.write_all(contents)
                .map_err(|e| Error::sys(what("write"), e))?;
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
