//! The rootfs tree digest (`germline-tree-v1`): one sha256 over every path under the rootfs,
//! in byte order, with its type, permission bits, and the sha256 of a file's contents or a
//! symlink's target. Ownership and times are not part of it (packing writes uid 0 and mtime 0).
//! `.germline/` (the manifest and its signature) is excluded: the manifest pins this digest.
//!
//! The same digest is computed from a directory (an unpacked OCI bundle, as podman and
//! containerd hand it over) and from a layer's tar stream (before extraction), so both are
//! checked against the one signed pin.

use sha2::{Digest as _, Sha256};
use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::error::{Error, Result};
use crate::manifest::GERMLINE_DIR;

/// The algorithm name recorded in the manifest.
pub const ALGORITHM: &str = "germline-tree-v1";

/// One entry of the tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    Dir {
        mode: u32,
    },
    File {
        mode: u32,
        size: u64,
        sha256: [u8; 32],
    },
    Symlink {
        target: Vec<u8>,
    },
}

/// An ordered tree of entries keyed by their path relative to the rootfs (no leading `/`).
#[derive(Debug, Default, Clone)]
pub struct Tree {
    pub entries: BTreeMap<Vec<u8>, Entry>,
}

impl Tree {
    /// `sha256:<hex>` over the entries, in path order.
    pub fn digest(&self) -> String {
        let mut h = Sha256::new();
        h.update(ALGORITHM.as_bytes());
        h.update([0u8]);
        for (path, entry) in &self.entries {
            let (tag, mode) = match entry {
                Entry::Dir { mode } => (b'd', *mode),
                Entry::File { mode, .. } => (b'f', *mode),
                Entry::Symlink { .. } => (b'l', 0o777),
            };
            h.update([tag]);
            h.update((mode & 0o7777).to_be_bytes());
            h.update((path.len() as u64).to_be_bytes());
            h.update(path);
            match entry {
                Entry::Dir { .. } => {}
                Entry::File { size, sha256, .. } => {
                    h.update(size.to_be_bytes());
                    h.update(sha256);
                }
                Entry::Symlink { target } => {
                    h.update((target.len() as u64).to_be_bytes());
                    h.update(target);
                }
            }
        }
        format!("sha256:{}", hex::encode(h.finalize()))
    }

    /// Total bytes of regular files.
    pub fn file_bytes(&self) -> u64 {
        self.entries
            .values()
            .map(|e| match e {
                Entry::File { size, .. } => *size,
                _ => 0,
            })
            .sum()
    }
}

/// True for `.germline` and everything below it.
pub fn is_excluded(rel: &[u8]) -> bool {
    let g = GERMLINE_DIR.as_bytes();
    rel == g || (rel.starts_with(g) && rel.get(g.len()) == Some(&b'/'))
}

/// A symlink must stay inside the rootfs: a relative target that, resolved from the link's own
/// directory, never climbs above the root. Absolute targets are refused because the host (the
/// shim bind-mounting CA files over rootfs paths, say) would resolve them against its own root.
pub fn check_symlink(rel: &[u8], target: &[u8]) -> std::result::Result<(), String> {
    if target.is_empty() {
        return Err("empty symlink target".into());
    }
    if target.starts_with(b"/") {
        return Err(format!(
            "absolute symlink target {:?} (germline releases use relative links inside the rootfs)",
            String::from_utf8_lossy(target)
        ));
    }
    let mut depth: i64 = rel.split(|b| *b == b'/').filter(|c| !c.is_empty()).count() as i64 - 1;
    for c in target.split(|b| *b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => {
                depth -= 1;
                if depth < 0 {
                    return Err(format!(
                        "symlink target {:?} escapes the rootfs",
                        String::from_utf8_lossy(target)
                    ));
                }
            }
            _ => depth += 1,
        }
    }
    Ok(())
}

/// Hashes a file's contents: mmap for large files, one buffered read for small ones. The file
/// is opened without following a symlink or blocking on a FIFO, and must be a regular file on
/// the descriptor (crate::untrusted): the walk saw a regular file, but it may have been swapped.
pub fn hash_file(path: &Path) -> Result<(u64, [u8; 32])> {
    let (mut f, len) = crate::untrusted::open_regular(path)?;
    let mut h = Sha256::new();
    if len >= 1 << 20 {
        // SAFETY: the map is read-only and private; the rootfs is not written while it is
        // verified (a concurrent writer could only change what we hash, which then fails the
        // digest comparison; it cannot make us read outside the mapping, whose length is fixed).
        let map = unsafe { memmap2::Mmap::map(&f) }.map_err(|e| Error::io(path, e))?;
        h.update(&map[..]);
        return Ok((map.len() as u64, h.finalize().into()));
    }
    let mut buf = Vec::with_capacity(len as usize);
    (&mut f)
        .take(len)
        .read_to_end(&mut buf)
        .map_err(|e| Error::io(path, e))?;
    h.update(&buf);
    Ok((buf.len() as u64, h.finalize().into()))
}

/// Walks `root` (not following symlinks) and digests it, hashing files on all cores.
/// Refuses special files and escaping symlinks, naming the path.
pub fn tree_of_dir(root: &Path) -> Result<Tree> {
    let mut tree = Tree::default();
    let mut files: Vec<(Vec<u8>, PathBuf, u32)> = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let rd = std::fs::read_dir(&dir).map_err(|e| Error::io(&dir, e))?;
        for ent in rd {
            let ent = ent.map_err(|e| Error::io(&dir, e))?;
            let path = ent.path();
            let rel = path
                .strip_prefix(root)
                .map_err(|_| Error::Rootfs {
                    path: path.clone(),
                    message: "outside the rootfs".into(),
                })?
                .as_os_str()
                .as_bytes()
                .to_vec();
            if is_excluded(&rel) {
                continue;
            }
            let md = std::fs::symlink_metadata(&path).map_err(|e| Error::io(&path, e))?;
            let ft = md.file_type();
            let mode = md.permissions().mode() & 0o7777;
            if ft.is_dir() {
                tree.entries.insert(rel, Entry::Dir { mode });
                stack.push(path);
            } else if ft.is_symlink() {
                let target = std::fs::read_link(&path).map_err(|e| Error::io(&path, e))?;
                let target = target.as_os_str().as_bytes().to_vec();
                check_symlink(&rel, &target).map_err(|message| Error::Rootfs {
                    path: path.clone(),
                    message,
                })?;
                tree.entries.insert(rel, Entry::Symlink { target });
            } else if ft.is_file() {
                files.push((rel, path, mode));
            } else {
                return Err(Error::Rootfs {
                    path,
                    message: "special file (device, fifo or socket) in a release rootfs".into(),
                });
            }
        }
    }
    let hashed = hash_parallel(&files)?;
    for ((rel, _, mode), (size, sha256)) in files.into_iter().zip(hashed) {
        tree.entries.insert(rel, Entry::File { mode, size, sha256 });
    }
    Ok(tree)
}

/// (size, sha256) of one file.
type FileHash = (u64, [u8; 32]);

fn hash_parallel(files: &[(Vec<u8>, PathBuf, u32)]) -> Result<Vec<FileHash>> {
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(files.len().max(1));
    let next = AtomicUsize::new(0);
    let out: Mutex<Vec<Option<FileHash>>> = Mutex::new(vec![None; files.len()]);
    let first_err: Mutex<Option<Error>> = Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some((_, path, _)) = files.get(i) else {
                    break;
                };
                match hash_file(path) {
                    Ok(r) => {
                        if let Ok(mut o) = out.lock() {
                            o[i] = Some(r);
                        }
                    }
                    Err(e) => {
                        if let Ok(mut fe) = first_err.lock() {
                            fe.get_or_insert(e);
                        }
                        // Stop the other workers early.
                        next.store(files.len(), Ordering::Relaxed);
                        break;
                    }
                }
            });
        }
    });
    if let Some(e) = first_err.into_inner().ok().flatten() {
        return Err(e);
    }
    let out = out
        .into_inner()
        .map_err(|_| Error::Usage("hash worker panicked".into()))?;
    out.into_iter()
        .zip(files)
        .map(|(r, (_, p, _))| {
            r.ok_or_else(|| Error::Rootfs {
                path: p.clone(),
                message: "not hashed".into(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symlink_rules() {
        assert!(check_symlink(b"usr/bin/python3", b"python3.11").is_ok());
        assert!(check_symlink(b"lib", b"usr/lib").is_ok());
        assert!(check_symlink(b"etc/x", b"../usr/lib/x").is_ok());
        assert!(check_symlink(b"etc/x", b"../../etc/shadow")
            .expect_err("escape")
            .contains("escapes"));
        assert!(check_symlink(b"etc/x", b"/etc/shadow")
            .expect_err("abs")
            .contains("absolute"));
    }

    #[test]
    fn digest_covers_mode_content_and_links_but_not_germline_dir() -> Result<()> {
        let d = tempfile::tempdir().map_err(|e| Error::io("tmp", e))?;
        let r = d.path();
        std::fs::create_dir_all(r.join("a/.germline")).map_err(|e| Error::io(r, e))?;
        std::fs::create_dir_all(r.join(".germline")).map_err(|e| Error::io(r, e))?;
        std::fs::write(r.join("a/f"), b"hello").map_err(|e| Error::io(r, e))?;
        std::os::unix::fs::symlink("f", r.join("a/l")).map_err(|e| Error::io(r, e))?;
        let d0 = tree_of_dir(r)?.digest();
        std::fs::write(r.join(".germline/manifest.json"), b"{}").map_err(|e| Error::io(r, e))?;
        assert_eq!(d0, tree_of_dir(r)?.digest(), ".germline is excluded");
        std::fs::write(r.join("a/.germline/x"), b"").map_err(|e| Error::io(r, e))?;
        let d1 = tree_of_dir(r)?.digest();
        assert_ne!(d0, d1, "only the top-level .germline is excluded");
        std::fs::write(r.join("a/f"), b"hellp").map_err(|e| Error::io(r, e))?;
        let d2 = tree_of_dir(r)?.digest();
        assert_ne!(d1, d2);
        std::fs::set_permissions(r.join("a/f"), std::fs::Permissions::from_mode(0o755))
            .map_err(|e| Error::io(r, e))?;
        assert_ne!(d2, tree_of_dir(r)?.digest());
        Ok(())
    }
}
