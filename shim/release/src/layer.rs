//! Reading image layers safely. One function walks a layer's tar stream and either only checks
//! and digests it (before anything is extracted), or extracts it into a fresh directory while
//! checking it again, or applies it over a staging rootfs (packing from a foreign OCI image,
//! with whiteouts). Refused in every mode: `..` components, special files, and writing through
//! a symlink; in the strict modes also absolute paths, absolute or escaping symlink targets,
//! hard links to anything but an earlier regular file, duplicates and whiteouts.

use sha2::{Digest as _, Sha256};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::digest::{check_symlink, is_excluded, Entry, Tree};
use crate::error::{printable, printable_bytes, Error, Result};
use crate::manifest::{GERMLINE_DIR, MANIFEST_PATH, SIGNATURE_PATH};
use crate::untrusted::Limits;

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

/// The most one file under `.germline/` may hold (the manifest, its signature).
pub const MAX_GERMLINE_FILE: u64 = 4 << 20;

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
    printable_bytes(b)
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

/// Which maximum the bounded reader holds the uncompressed stream to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cap {
    /// `Limits::bytes`.
    Total,
    /// `Limits::unsigned_bytes`, until the signed manifest has been verified.
    Unsigned,
}

/// Bytes read so far and the current maximum, shared by the bounded reader (inside the tar
/// parser) and the walk (which lifts the cap once the signature verifies).
struct Meter {
    read: Cell<u64>,
    cap: Cell<u64>,
    which: Cell<Cap>,
    tripped: Cell<bool>,
}

/// Reads at most `meter.cap` bytes; one byte more fails the read and marks the meter.
struct Bounded<'m, R> {
    inner: R,
    meter: &'m Meter,
}
impl<R: Read> Read for Bounded<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let read = self.meter.read.get();
        let room = self.meter.cap.get().saturating_sub(read);
        // With no room left, read one byte to tell the end of the stream from excess.
        let want = usize::try_from(room.clamp(1, buf.len() as u64)).unwrap_or(1);
        let n = self.inner.read(&mut buf[..want])?;
        if room == 0 && n > 0 {
            self.meter.tripped.set(true);
            return Err(std::io::Error::other("image limit reached"));
        }
        self.meter.read.set(read + n as u64);
        Ok(n)
    }
}

/// What extension headers (GNU long names, PAX records) said about the next entry.
#[derive(Debug, Default)]
struct Ext {
    long_name: Option<Vec<u8>>,
    long_link: Option<Vec<u8>>,
    pax: bool,
    pax_path: Option<Vec<u8>>,
    pax_link: Option<Vec<u8>>,
    pax_size: Option<u64>,
}

impl Ext {
    fn pending(&self) -> bool {
        self.long_name.is_some() || self.long_link.is_some() || self.pax
    }
}

/// Called once the layer's `.germline/manifest.json` and its signature have both been read,
/// with their bytes; an error refuses the layer before anything more of it is decompressed.
pub type Gate<'g> = &'g mut dyn FnMut(&[u8], &[u8]) -> Result<()>;

/// [`scan_with`] under the default limits and no signature gate.
pub fn scan<R: Read>(reader: R, layer: &str, mode: Mode<'_>) -> Result<Scan> {
    scan_with(reader, layer, mode, &Limits::default(), None)
}

/// Walks one layer. `layer` names it in errors. Every byte of the uncompressed stream passes
/// through a reader bounded by `limits.bytes` (and, while `gate` has not yet passed, by
/// `limits.unsigned_bytes`); each tar header counts against `limits.entries`; paths, link
/// targets, GNU long names and PAX records are bounded by `limits.path` before they are read.
/// Extension headers are parsed here (the tar crate's raw mode), so that nothing reads an
/// unbounded long name into memory.
pub fn scan_with<R: Read>(
    reader: R,
    layer: &str,
    mode: Mode<'_>,
    limits: &Limits,
    mut gate: Option<Gate<'_>>,
) -> Result<Scan> {
    let strict = !matches!(mode, Mode::Apply(_));
    // Entry names and parser messages come from the image: printable only.
    let lerr = |entry: &[u8], message: String| {
        if entry.is_empty() {
            return Error::Layer {
                layer: layer.into(),
                message: printable(&message),
            };
        }
        Error::LayerEntry {
            layer: layer.into(),
            entry: printable_bytes(entry),
            message: printable(&message),
        }
    };
    let meter = Meter {
        read: Cell::new(0),
        cap: Cell::new(limits.bytes),
        which: Cell::new(Cap::Total),
        tripped: Cell::new(false),
    };
    if gate.is_some() && limits.unsigned_bytes < limits.bytes {
        meter.cap.set(limits.unsigned_bytes);
        meter.which.set(Cap::Unsigned);
    }
    let limit_err = |message: String| Error::Layer {
        layer: layer.into(),
        message,
    };
    let tripped = || {
        let cap = meter.cap.get();
        limit_err(match meter.which.get() {
            Cap::Total => format!(
                "the uncompressed layer is larger than the limit of {cap} bytes \
                 (--max-image-bytes): decompression stopped there"
            ),
            Cap::Unsigned => format!(
                "no signed manifest ({MANIFEST_PATH} and {SIGNATURE_PATH}) in the first {cap} \
                 uncompressed bytes of the layer (--max-image-unsigned-bytes): decompression \
                 stopped before more of an unverified layer was read (`germline release pack` \
                 writes them first)"
            ),
        })
    };
    // An I/O error from the stream: the limit it hit, or what the tar parser said, printable.
    let fail = |entry: &[u8], e: std::io::Error, what: &str| {
        if meter.tripped.get() {
            tripped()
        } else {
            lerr(entry, format!("{what}: {}", printable(&e.to_string())))
        }
    };
    let mut hr = HashingReader {
        inner: Bounded {
            inner: reader,
            meter: &meter,
        },
        hash: Sha256::new(),
    };
    let mut out = Scan::default();
    // Every path seen (germline files included), for parent and duplicate checks; it becomes
    // the tree at the end.
    let mut seen: BTreeMap<Vec<u8>, Entry> = BTreeMap::new();
    let mut dirs: Vec<(PathBuf, u32)> = Vec::new();
    let mut headers = 0u64;
    let mut path_total = 0u64;
    let mut ext = Ext::default();
    {
        let mut archive = tar::Archive::new(&mut hr);
        let entries = archive
            .entries()
            .map_err(|e| fail(b"", e, "not a tar stream"))?
            .raw(true);
        for ent in entries {
            let mut ent = ent.map_err(|e| fail(b"", e, "corrupt or truncated tar stream"))?;
            headers += 1;
            if headers > limits.entries {
                return Err(limit_err(format!(
                    "more than {} tar headers (--max-image-entries)",
                    limits.entries
                )));
            }
            let ty = ent.header().entry_type();
            let hname = ent.header().path_bytes().into_owned();
            let hsize = ent
                .header()
                .entry_size()
                .map_err(|e| fail(&hname, e, "bad size field"))?;
            match ty {
                tar::EntryType::GNULongName | tar::EntryType::GNULongLink => {
                    let long_name = ty == tar::EntryType::GNULongName;
                    let what = if long_name {
                        "GNU long name"
                    } else {
                        "GNU long link name"
                    };
                    // GNU tar stores the name with its terminating NUL.
                    if hsize > limits.path.saturating_add(1) {
                        return Err(lerr(
                            &hname,
                            format!(
                                "{what} of {hsize} bytes is longer than the limit of {} bytes \
                                 (--max-image-path)",
                                limits.path
                            ),
                        ));
                    }
                    let slot = if long_name {
                        &mut ext.long_name
                    } else {
                        &mut ext.long_link
                    };
                    if slot.is_some() {
                        return Err(lerr(&hname, format!("two {what} headers for one entry")));
                    }
                    let mut v = Vec::with_capacity(usize::try_from(hsize).unwrap_or(0));
                    ent.read_to_end(&mut v).map_err(|e| fail(&hname, e, what))?;
                    if v.len() as u64 != hsize {
                        return Err(lerr(&hname, format!("{what}: truncated")));
                    }
                    if v.last() == Some(&0) {
                        v.pop();
                    }
                    *slot = Some(v);
                    continue;
                }
                tar::EntryType::XHeader | tar::EntryType::XGlobalHeader => {
                    if hsize > limits.pax() {
                        return Err(lerr(
                            &hname,
                            format!(
                                "PAX extended header of {hsize} bytes is larger than the limit \
                                 of {} bytes (twice --max-image-path, plus 64 KiB)",
                                limits.pax()
                            ),
                        ));
                    }
                    if ty == tar::EntryType::XGlobalHeader {
                        continue; // skipped, through the bounded reader
                    }
                    if ext.pax {
                        return Err(lerr(&hname, "two PAX headers for one entry".into()));
                    }
                    let mut v = Vec::with_capacity(usize::try_from(hsize).unwrap_or(0));
                    ent.read_to_end(&mut v)
                        .map_err(|e| fail(&hname, e, "PAX header"))?;
                    for rec in tar::PaxExtensions::new(&v) {
                        let rec = rec.map_err(|e| {
                            lerr(
                                &hname,
                                format!("malformed PAX record: {}", printable(&e.to_string())),
                            )
                        })?;
                        match rec.key_bytes() {
                            b"path" => ext.pax_path = Some(rec.value_bytes().to_vec()),
                            b"linkpath" => ext.pax_link = Some(rec.value_bytes().to_vec()),
                            b"size" => {
                                let n = std::str::from_utf8(rec.value_bytes())
                                    .ok()
                                    .and_then(|s| s.parse::<u64>().ok())
                                    .ok_or_else(|| {
                                        lerr(&hname, "PAX `size` record is not a number".into())
                                    })?;
                                ext.pax_size = Some(n);
                            }
                            _ => {}
                        }
                    }
                    ext.pax = true;
                    continue;
                }
                tar::EntryType::GNUSparse => {
                    return Err(lerr(
                        &hname,
                        "GNU sparse entry: not supported in an image layer".into(),
                    ))
                }
                _ => {}
            }
            let e = std::mem::take(&mut ext);
            if e.long_name.is_some() && e.pax_path.is_some() {
                return Err(lerr(
                    &hname,
                    "both a GNU long name and a PAX `path` record: ambiguous, refused".into(),
                ));
            }
            if e.long_link.is_some() && e.pax_link.is_some() {
                return Err(lerr(
                    &hname,
                    "both a GNU long link name and a PAX `linkpath` record: ambiguous, refused"
                        .into(),
                ));
            }
            if let Some(ps) = e.pax_size {
                if ps != hsize {
                    return Err(lerr(
                        &hname,
                        format!(
                            "PAX `size` record {ps} disagrees with the header's size {hsize} \
                             (parsers would disagree on where the next entry starts)"
                        ),
                    ));
                }
            }
            let raw = e.long_name.or(e.pax_path).unwrap_or(hname);
            let link = match e.long_link.or(e.pax_link) {
                Some(l) => l,
                None => ent
                    .header()
                    .link_name_bytes()
                    .map(|c| c.into_owned())
                    .unwrap_or_default(),
            };
            for (what, b) in [("path", &raw), ("link target", &link)] {
                if b.len() as u64 > limits.path {
                    return Err(lerr(
                        &raw[..raw.len().min(256)],
                        format!(
                            "{what} of {} bytes is longer than the limit of {} bytes \
                             (--max-image-path)",
                            b.len(),
                            limits.path
                        ),
                    ));
                }
            }
            path_total += (raw.len() + link.len()) as u64;
            if path_total > limits.path_total {
                return Err(limit_err(format!(
                    "its paths and link targets together exceed the limit of {} bytes \
                     (--max-image-path-total)",
                    limits.path_total
                )));
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
                        let n = ent.read(&mut buf).map_err(|e| fail(&raw, e, "truncated file data"))?;
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
                        // The signature is checked as soon as the manifest and it are both
                        // in hand; only then is the cap on unverified bytes lifted.
                        if let (Some(g), Some(m), Some(sig)) = (
                            gate.as_mut(),
                            out.germline.get(MANIFEST_PATH.as_bytes()),
                            out.germline.get(SIGNATURE_PATH.as_bytes()),
                        ) {
                            g(m, sig)?;
                            gate = None;
                            meter.cap.set(limits.bytes);
                            meter.which.set(Cap::Total);
                        }
                    }
                    Entry::File { mode: mode_bits, size, sha256: h.finalize().into() }
                }
                tar::EntryType::Symlink => {
                    let target = link.clone();
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
                    let raw_target = link.clone();
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
            }
            seen.insert(rel, entry);
        }
        if ext.pending() {
            return Err(lerr(
                b"",
                "extension header (GNU long name or PAX) at the end of the layer, with no entry \
                 after it"
                    .into(),
            ));
        }
        // Drain the padding after the end-of-archive marker so the diff_id covers the stream.
    }
    std::io::copy(&mut hr, &mut std::io::sink()).map_err(|e| fail(b"", e, "reading layer"))?;
    // Directory modes last, deepest first, so a read-only directory does not block its children.
    for (d, m) in dirs.iter().rev() {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(*m))
            .map_err(|e| Error::io(d, e))?;
    }
    out.diff_id = format!("sha256:{}", hex::encode(hr.hash.finalize()));
    // The tree is what was seen outside `.germline/`: one map, so each path is held once.
    seen.retain(|k, _| !is_excluded(k));
    out.tree.entries = seen;
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

    /// A tar stream of `(type, name, data)` headers, written raw (no builder checks).
    fn tar_of(entries: &[(u8, &[u8], &[u8])]) -> Vec<u8> {
        let mut out = Vec::new();
        for (ty, name, data) in entries {
            let mut h = tar::Header::new_gnu();
            if let Some(g) = h.as_gnu_mut() {
                g.name[..name.len()].copy_from_slice(name);
            }
            h.set_entry_type(tar::EntryType::new(*ty));
            h.set_size(data.len() as u64);
            h.set_mode(if *ty == b'5' { 0o755 } else { 0o644 });
            h.set_cksum();
            out.extend_from_slice(h.as_bytes());
            out.extend_from_slice(data);
            out.resize(out.len().div_ceil(512) * 512, 0);
        }
        out.resize(out.len() + 1024, 0);
        out
    }

    fn pax(records: &[(&str, &str)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (k, v) in records {
            // "<len> <key>=<value>\n", where len counts itself.
            let body = format!(" {k}={v}\n");
            let mut len = body.len() + 1;
            while format!("{len}").len() + body.len() != len {
                len += 1;
            }
            out.extend_from_slice(format!("{len}{body}").as_bytes());
        }
        out
    }

    fn check(t: &[u8], limits: &Limits) -> std::result::Result<Scan, String> {
        scan_with(t, "L", Mode::Check, limits, None).map_err(|e| e.to_string())
    }

    #[test]
    #[allow(clippy::unwrap_used)]
    fn limits_hold_before_memory_is_spent() {
        let l = Limits {
            entries: 3,
            path: 16,
            path_total: 40,
            bytes: 8192,
            unsigned_bytes: 1024,
            json: 1024,
        };
        // Within every limit.
        let ok = tar_of(&[(b'5', b"usr", b""), (b'0', b"usr/a", b"hi")]);
        assert!(check(&ok, &l).is_ok());
        // Entries: the fourth header.
        let t = tar_of(&[
            (b'5', b"a", b""),
            (b'5', b"b", b""),
            (b'5', b"c", b""),
            (b'5', b"d", b""),
        ]);
        assert!(check(&t, &l)
            .unwrap_err()
            .contains("more than 3 tar headers (--max-image-entries)"));
        // A GNU long name over the limit, and one within it that is used.
        let long = vec![b'x'; 40];
        let t = tar_of(&[(b'L', b"././@LongLink", &long), (b'0', b"short", b"")]);
        assert!(check(&t, &l)
            .unwrap_err()
            .contains("GNU long name of 40 bytes"));
        let t = tar_of(&[
            (b'L', b"././@LongLink", b"long-name\0"),
            (b'0', b"short", b""),
        ]);
        let s = check(&t, &l).unwrap();
        assert!(
            s.tree.entries.contains_key(&b"long-name"[..]),
            "{:?}",
            s.tree.entries.keys()
        );
        // A PAX path over the limit, a PAX size that disagrees, both kinds of long name.
        let p = pax(&[("path", "a-path-longer-than-sixteen")]);
        let t = tar_of(&[(b'x', b"pax", &p), (b'0', b"short", b"")]);
        assert!(check(&t, &l)
            .unwrap_err()
            .contains("path of 26 bytes is longer than the limit of 16"));
        let p = pax(&[("size", "5")]);
        let t = tar_of(&[(b'x', b"pax", &p), (b'0', b"short", b"")]);
        assert!(check(&t, &l)
            .unwrap_err()
            .contains("PAX `size` record 5 disagrees"));
        let p = pax(&[("path", "b")]);
        let t = tar_of(&[
            (b'L', b"././@LongLink", b"a\0"),
            (b'x', b"pax", &p),
            (b'0', b"c", b""),
        ]);
        assert!(check(&t, &l).unwrap_err().contains("ambiguous"));
        // A PAX header larger than its limit is refused from its header alone.
        let big = vec![b'9'; usize::try_from(l.pax()).unwrap_or(0) + 1];
        let t = tar_of(&[(b'x', b"pax", &big), (b'0', b"c", b"")]);
        assert!(check(
            &t,
            &Limits {
                bytes: 1 << 30,
                ..l
            }
        )
        .unwrap_err()
        .contains("PAX extended header of"));
        // Paths together.
        let t = tar_of(&[
            (b'5', b"aaaaaaaaaaaaaaa", b""),
            (b'5', b"bbbbbbbbbbbbbbb", b""),
            (b'5', b"ccccccccccccccc", b""),
        ]);
        assert!(check(&t, &l)
            .unwrap_err()
            .contains("(--max-image-path-total)"));
        // Uncompressed bytes: a file larger than the limit stops at it.
        let t = tar_of(&[(b'0', b"big", &[0u8; 9000])]);
        assert!(check(&t, &l)
            .unwrap_err()
            .contains("larger than the limit of 8192 bytes (--max-image-bytes)"));
        // A dangling extension header, a sparse entry.
        let t = tar_of(&[(b'L', b"././@LongLink", b"a\0")]);
        assert!(check(&t, &l)
            .unwrap_err()
            .contains("with no entry after it"));
        let t = tar_of(&[(b'S', b"sparse", b"")]);
        assert!(check(&t, &l).unwrap_err().contains("GNU sparse"));
    }

    #[test]
    #[allow(clippy::unwrap_used)]
    fn the_gate_runs_before_the_rest_and_caps_unverified_bytes() {
        let l = Limits {
            unsigned_bytes: 4096,
            ..Limits::default()
        };
        let germline = [
            (b'5', &b".germline"[..], &b""[..]),
            (b'0', b".germline/manifest.json", b"{}"),
            (b'0', b".germline/manifest.sigstore.json", b"sig"),
        ];
        // Refused by the gate: nothing after the germline files is read.
        let mut t = tar_of(&germline);
        t.truncate(t.len() - 1024);
        t.extend(tar_of(&[(b'0', b"after", &[7u8; 100_000])]));
        let mut calls = 0;
        let mut gate = |m: &[u8], s: &[u8]| -> Result<()> {
            calls += 1;
            assert_eq!((m, s), (&b"{}"[..], &b"sig"[..]));
            Err(Error::Usage("bad signature".into()))
        };
        let e = scan_with(&t[..], "L", Mode::Check, &l, Some(&mut gate)).unwrap_err();
        assert_eq!((e.to_string().as_str(), calls), ("bad signature", 1));
        // Passed: the cap on unverified bytes is lifted.
        let mut ok = |_: &[u8], _: &[u8]| -> Result<()> { Ok(()) };
        assert!(scan_with(&t[..], "L", Mode::Check, &l, Some(&mut ok)).is_ok());
        // Never passed: the stream stops at the cap.
        let t = tar_of(&[
            (b'0', b"first", &[7u8; 100_000]),
            germline[0],
            germline[1],
            germline[2],
        ]);
        let mut never = |_: &[u8], _: &[u8]| -> Result<()> { Ok(()) };
        let e = scan_with(&t[..], "L", Mode::Check, &l, Some(&mut never)).unwrap_err();
        assert!(
            e.to_string()
                .contains("in the first 4096 uncompressed bytes"),
            "{e}"
        );
        // Without a gate the same stream is read to its end.
        assert!(check(&t, &l).is_ok());
    }

    /// Attacker bytes: a valid layer with random bytes overwritten (headers included, so sizes,
    /// types, names and checksums go wrong in every way), read under small limits. Every
    /// outcome is Ok or an error whose text is printable; nothing reads past the limits.
    #[test]
    fn random_corruptions_end_in_printable_errors_within_the_limits() {
        let l = Limits {
            entries: 64,
            path: 256,
            path_total: 4096,
            bytes: 64 << 10,
            unsigned_bytes: 64 << 10,
            json: 4096,
        };
        let p = pax(&[("path", "usr/p\u{1b}x"), ("linkpath", "a")]);
        let base = tar_of(&[
            (b'5', b"usr", b""),
            (b'L', b"././@LongLink", b"usr/long-name\0"),
            (b'0', b"x", b"data"),
            (b'x', b"pax", &p),
            (b'2', b"usr/l", b""),
            (b'0', b"usr/f", &[1u8; 3000]),
        ]);
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let (mut ok, mut refused) = (0, 0);
        for _ in 0..3000 {
            let mut t = base.clone();
            for _ in 0..1 + next() % 8 {
                let at = usize::try_from(next() % t.len() as u64).unwrap_or(0);
                t[at] = (next() & 0xff) as u8;
            }
            match scan_with(&t[..], "L", Mode::Check, &l, None) {
                Ok(_) => ok += 1,
                Err(e) => {
                    let text = e.to_string();
                    assert!(!text.chars().any(|c| c.is_control()), "{text:?}");
                    refused += 1;
                }
            }
        }
        // Both outcomes occur: the corruption reaches the parser and the checks.
        assert!(ok > 0 && refused > 0, "ok {ok}, refused {refused}");
    }
}
