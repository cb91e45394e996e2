//! Reading image layers safely. One function walks a layer's tar stream and either only checks
//! and digests it (before anything is extracted), or extracts it into a fresh directory while
//! checking it again, or applies it over a staging rootfs (packing from a foreign OCI image,
//! with whiteouts). Refused in every mode: `..` components, special files, and writing through
//! a symlink; in the strict modes also absolute paths, absolute or escaping symlink targets,
//! hard links to anything but an earlier regular file, duplicates and whiteouts.

use sha2::{Digest as _, Sha256};
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::digest::{check_symlink, is_excluded, Entry, Tree};
use crate::error::{Error, Result};
use crate::manifest::GERMLINE_DIR;

/// What to do with the entries.
#[derive(Debug, Clone, Copy)]
pub enum Mode<'a> {
    /// Check and digest only.
    Check,
    /// Check, digest and write into `root`, a fresh empty directory.
    Extract(&'a Path),
    /// Lenient application of a foreign image's layer over `root` (whiteouts honoured,
    /// absolute symlinks kept: packing normalises them afterwards).
    Apply(&'a Path),
}

/// The result of a pass over a layer.
#[derive(Debug, Default)]
pub struct Scan {
    /// The tree (without `.germline/`), for the rootfs digest.
    pub tree: Tree,
    /// Regular files under `.germline/`, by path, with their contents.
    pub germline: BTreeMap<Vec<u8>, Vec<u8>>,
    /// `sha256:` of the uncompressed tar stream (the OCI diff_id).
    pub diff_id: String,
}

const MAX_GERMLINE_FILE: u64 = 4 << 20;

struct HashingReader<R> {
    inner: R,
    hash: Sha256,
}
impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hash.update(&buf[..n]);
        Ok(n)
    }
}

/// Normalises an entry's path: strips `./` and trailing `/`; refuses `..`, NUL and (strict)
/// absolute paths.
fn entry_path(raw: &[u8], strict: bool) -> std::result::Result<Vec<u8>, String> {
    if raw.contains(&0) {
        return Err("NUL byte in path".into());
    }
    let mut p = raw;
    if p.starts_with(b"/") {
        if strict {
            return Err("absolute path in a layer (path traversal)".into());
        }
        while p.starts_with(b"/") {
            p = &p[1..];
        }
    }
    let mut out: Vec<&[u8]> = Vec::new();
    for c in p.split(|b| *b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => return Err("`..` component in path (path traversal)".into()),
            c => out.push(c),
        }
    }
    Ok(out.join(&b'/'))
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Every proper prefix of `rel` must be a real directory under `root` (never a symlink), so
/// that nothing is written outside `root`.
fn check_parents_on_disk(root: &Path, rel: &[u8]) -> std::result::Result<(), String> {
    let comps: Vec<&[u8]> = rel.split(|b| *b == b'/').collect();
    let mut cur = root.to_path_buf();
    for c in &comps[..comps.len().saturating_sub(1)] {
        cur.push(OsStr::from_bytes(c));
        match std::fs::symlink_metadata(&cur) {
            Ok(md) if md.file_type().is_dir() => {}
            Ok(md) if md.file_type().is_symlink() => {
                return Err(format!(
                    "parent `{}` is a symlink: refusing to write through it",
                    cur.display()
                ))
            }
            Ok(_) => return Err(format!("parent `{}` is not a directory", cur.display())),
            Err(e) => return Err(format!("parent `{}`: {e}", cur.display())),
        }
    }
    Ok(())
}

/// Walks one layer. `layer` names it in errors.
pub fn scan<R: Read>(reader: R, layer: &str, mode: Mode<'_>) -> Result<Scan> {
    let strict = !matches!(mode, Mode::Apply(_));
    let lerr = |entry: &[u8], message: String| Error::LayerEntry {
        layer: layer.into(),
        entry: lossy(entry),
        message,
    };
    let mut hr = HashingReader {
        inner: reader,
        hash: Sha256::new(),
    };
    let mut out = Scan::default();
    // Every path seen (germline files included), for parent and duplicate checks.
    let mut seen: BTreeMap<Vec<u8>, Entry> = BTreeMap::new();
    let mut dirs: Vec<(PathBuf, u32)> = Vec::new();
    {
        let mut archive = tar::Archive::new(&mut hr);
        let entries = archive
            .entries()
            .map_err(|e| lerr(b"", format!("not a tar stream: {e}")))?;
        for ent in entries {
            let mut ent =
                ent.map_err(|e| lerr(b"", format!("corrupt or truncated tar stream: {e}")))?;
            let raw = ent.path_bytes().into_owned();
            let ty = ent.header().entry_type();
            if matches!(ty, tar::EntryType::XGlobalHeader | tar::EntryType::XHeader) {
                continue;
            }
            let rel = entry_path(&raw, strict).map_err(|m| lerr(&raw, m))?;
            if rel.is_empty() {
                if ty.is_dir() {
                    continue; // the layer's root itself
                }
                return Err(lerr(&raw, "empty path".into()));
            }
            let mode_bits = ent
                .header()
                .mode()
                .map_err(|e| lerr(&raw, format!("bad mode: {e}")))?
                & 0o7777;
            let base = rel.rsplit(|b| *b == b'/').next().unwrap_or(&rel);
            // Whiteouts (OCI image spec, layer changesets).
            if base.starts_with(b".wh.") {
                let Mode::Apply(root) = mode else {
                    return Err(lerr(
                        &raw,
                        "whiteout in a germline release layer (expected exactly one flat layer)"
                            .into(),
                    ));
                };
                check_parents_on_disk(root, &rel).map_err(|m| lerr(&raw, m))?;
                let dir = match rel.iter().rposition(|b| *b == b'/') {
                    Some(i) => root.join(OsStr::from_bytes(&rel[..i])),
                    None => root.to_path_buf(),
                };
                if base == b".wh..wh..opq" {
                    if let Ok(rd) = std::fs::read_dir(&dir) {
                        for e in rd.flatten() {
                            remove_any(&e.path())?;
                        }
                    }
                } else {
                    remove_any(&dir.join(OsStr::from_bytes(&base[4..])))?;
                }
                continue;
            }
            if strict && seen.contains_key(&rel) {
                return Err(lerr(&raw, "duplicate entry".into()));
            }
            // Parents must be directories declared earlier (strict) and real directories on disk.
            if strict {
                let mut i = 0;
                while let Some(off) = rel[i..].iter().position(|b| *b == b'/') {
                    let parent = &rel[..i + off];
                    match seen.get(parent) {
                        Some(Entry::Dir { .. }) => {}
                        Some(_) => {
                            return Err(lerr(
                                &raw,
                                format!(
                                "parent `{}` is not a directory (path traversal through a link)",
                                lossy(parent)
                            ),
                            ))
                        }
                        None => {
                            return Err(lerr(
                                &raw,
                                format!(
                                    "parent `{}` is not a directory entry earlier in the layer",
                                    lossy(parent)
                                ),
                            ))
                        }
                    }
                    i += off + 1;
                }
            }
            let target_root = match mode {
                Mode::Check => None,
                Mode::Extract(r) | Mode::Apply(r) => Some(r),
            };
            let dest = target_root.map(|r| r.join(OsStr::from_bytes(&rel)));
            if let (Some(root), Some(dest)) = (target_root, &dest) {
                if !strict {
                    std::fs::create_dir_all(dest.parent().unwrap_or(root))
                        .map_err(|e| Error::io(dest, e))?;
                }
                check_parents_on_disk(root, &rel).map_err(|m| lerr(&raw, m))?;
                if !strict {
                    if let Ok(md) = std::fs::symlink_metadata(dest) {
                        if !(md.is_dir() && ty.is_dir()) {
                            remove_any(dest)?;
                        }
                    }
                }
            }
            let in_germline = rel.as_slice() == GERMLINE_DIR.as_bytes() || is_excluded(&rel);
            let entry = match ty {
                tar::EntryType::Directory => {
                    if let Some(dest) = &dest {
                        match std::fs::create_dir(dest) {
                            Ok(()) => {}
                            Err(e) if !strict && e.kind() == std::io::ErrorKind::AlreadyExists => {}
                            Err(e) => return Err(Error::io(dest, e)),
                        }
                        std::fs::set_permissions(dest, std::fs::Permissions::from_mode(0o700)).map_err(|e| Error::io(dest, e))?;
                        dirs.push((dest.clone(), mode_bits));
                    }
                    Entry::Dir { mode: mode_bits }
                }
                tar::EntryType::Regular | tar::EntryType::Continuous => {
                    let size = ent.header().size().map_err(|e| lerr(&raw, format!("bad size: {e}")))?;
                    let mut h = Sha256::new();
                    let mut keep = if in_germline && rel.as_slice() != GERMLINE_DIR.as_bytes() {
                        if size > MAX_GERMLINE_FILE {
                            return Err(lerr(&raw, format!("larger than {MAX_GERMLINE_FILE} bytes")));
                        }
                        Some(Vec::with_capacity(size as usize))
                    } else {
                        None
                    };
                    let mut file = match &dest {
                        Some(d) => Some(
                            std::fs::OpenOptions::new().write(true).create_new(true).open(d).map_err(|e| Error::io(d, e))?,
                        ),
                        None => None,
                    };
                    let mut buf = vec![0u8; 256 << 10];
                    let mut total = 0u64;
                    loop {
                        let n = ent.read(&mut buf).map_err(|e| lerr(&raw, format!("truncated file data: {e}")))?;
                        if n == 0 {
                            break;
                        }
                        total += n as u64;
                        h.update(&buf[..n]);
                        if let Some(k) = keep.as_mut() {
                            k.extend_from_slice(&buf[..n]);
                        }
                        if let (Some(f), Some(d)) = (file.as_mut(), &dest) {
                            f.write_all(&buf[..n]).map_err(|e| Error::io(d, e))?;
                        }
                    }
                    if total != size {
                        return Err(lerr(&raw, format!("truncated: {total} of {size} bytes")));
                    }
                    if let (Some(f), Some(d)) = (file, &dest) {
                        f.set_permissions(std::fs::Permissions::from_mode(mode_bits)).map_err(|e| Error::io(d, e))?;
                    }
                    if let Some(k) = keep {
                        out.germline.insert(rel.clone(), k);
                    }
                    Entry::File { mode: mode_bits, size, sha256: h.finalize().into() }
                }
                tar::EntryType::Symlink => {
                    let target = ent.link_name_bytes().map(|c| c.into_owned()).unwrap_or_default();
                    if strict {
                        check_symlink(&rel, &target).map_err(|m| lerr(&raw, m))?;
                    } else if target.is_empty() {
                        return Err(lerr(&raw, "empty symlink target".into()));
                    }
                    if let Some(dest) = &dest {
                        std::os::unix::fs::symlink(OsStr::from_bytes(&target), dest).map_err(|e| Error::io(dest, e))?;
                    }
                    Entry::Symlink { target }
                }
                tar::EntryType::Link => {
                    let raw_target = ent.link_name_bytes().map(|c| c.into_owned()).unwrap_or_default();
                    let target = entry_path(&raw_target, strict).map_err(|m| lerr(&raw, format!("hard link target: {m}")))?;
                    let linked = match seen.get(&target) {
                        Some(e @ Entry::File { .. }) => e.clone(),
                        _ if !strict => {
                            // A foreign image may link to a file of an earlier layer.
                            let root = target_root.ok_or_else(|| lerr(&raw, "hard link outside a root".into()))?;
                            let t = root.join(OsStr::from_bytes(&target));
                            check_parents_on_disk(root, &target).map_err(|m| lerr(&raw, m))?;
                            let md = std::fs::symlink_metadata(&t).map_err(|e| Error::io(&t, e))?;
                            if !md.is_file() {
                                return Err(lerr(&raw, "hard link to something other than a regular file".into()));
                            }
                            let (size, sha256) = crate::digest::hash_file(&t)?;
                            Entry::File { mode: md.permissions().mode() & 0o7777, size, sha256 }
                        }
                        _ => return Err(lerr(&raw, format!("hard link to `{}`, which is not an earlier regular file of this layer", lossy(&target)))),
                    };
                    if let (Some(root), Some(dest)) = (target_root, &dest) {
                        check_parents_on_disk(root, &target).map_err(|m| lerr(&raw, m))?;
                        std::fs::hard_link(root.join(OsStr::from_bytes(&target)), dest).map_err(|e| Error::io(dest, e))?;
                    }
                    linked
                }
                other => {
                    return Err(lerr(&raw, format!("unsupported entry type {other:?} (devices, fifos and sockets are not allowed)")))
                }
            };
            if in_germline {
                let ok = match &entry {
                    Entry::Dir { .. } => rel.as_slice() == GERMLINE_DIR.as_bytes(),
                    Entry::File { .. } => rel.as_slice() != GERMLINE_DIR.as_bytes(),
                    Entry::Symlink { .. } => false,
                };
                if !ok && strict {
                    return Err(lerr(
                        &raw,
                        "only regular files may live in .germline/".into(),
                    ));
                }
            } else {
                out.tree.entries.insert(rel.clone(), entry.clone());
            }
            seen.insert(rel, entry);
        }
        // Drain the padding after the end-of-archive marker so the diff_id covers the stream.
    }
    std::io::copy(&mut hr, &mut std::io::sink())
        .map_err(|e| lerr(b"", format!("reading layer: {e}")))?;
    // Directory modes last, deepest first, so a read-only directory does not block its children.
    for (d, m) in dirs.iter().rev() {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(*m))
            .map_err(|e| Error::io(d, e))?;
    }
    out.diff_id = format!("sha256:{}", hex::encode(hr.hash.finalize()));
    Ok(out)
}

fn remove_any(p: &Path) -> Result<()> {
    match std::fs::symlink_metadata(p) {
        Ok(md) if md.is_dir() => std::fs::remove_dir_all(p).map_err(|e| Error::io(p, e)),
        Ok(_) => std::fs::remove_file(p).map_err(|e| Error::io(p, e)),
        Err(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_paths() {
        assert_eq!(
            entry_path(b"./usr/bin/", true).as_deref(),
            Ok(&b"usr/bin"[..])
        );
        assert!(entry_path(b"../etc/passwd", true).is_err());
        assert!(entry_path(b"usr/../../x", true).is_err());
        assert!(entry_path(b"/etc/passwd", true).is_err());
        assert_eq!(
            entry_path(b"/etc/passwd", false).as_deref(),
            Ok(&b"etc/passwd"[..])
        );
    }
}
