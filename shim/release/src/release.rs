//! Packing and verifying releases. Verification order (docs/release.md): read the manifest and
//! its sigstore bundle from `.germline/` (never through a symlink); verify the bundle with the
//! pinned key (hint, digest, signature); only then parse the manifest strictly; then compare the
//! rootfs tree digest with the signed pin. For an image layout this happens on the layer's tar
//! stream before anything is written; extraction then goes into a temporary directory beside
//! the destination, is checked again, and is renamed into place only if it matches.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::bundle;
use crate::digest::{self, check_symlink};
use crate::error::{Error, Result};
use crate::keys::{PublicKey, SigningKey};
use crate::layer::{self, Mode};
use crate::manifest::{Manifest, RootfsPin, GERMLINE_DIR, MANIFEST_PATH, SIGNATURE_PATH};
use crate::oci::{self, Image};
use crate::untrusted::{self, Limits};

/// Where the release's files come from.
#[derive(Debug, Clone)]
pub enum Source {
    /// A directory holding the rootfs.
    RootfsDir(PathBuf),
    /// An OCI image layout (e.g. `podman save --format oci-dir`, `skopeo copy ... oci:DIR`),
    /// whose layers are flattened.
    ImageLayout(PathBuf),
}

/// What `pack` made.
#[derive(Debug)]
pub struct Packed {
    pub manifest: Manifest,
    pub rootfs_digest: String,
    pub image_manifest: Option<oci::Descriptor>,
    pub signed: bool,
}

/// A verified release.
#[derive(Debug)]
pub struct Verified {
    pub manifest: Manifest,
    pub manifest_bytes: Vec<u8>,
    pub signature: bundle::Verified,
    pub rootfs_digest: String,
    pub file_bytes: u64,
}

fn sibling_tmp(dest: &Path) -> Result<tempfile::TempDir> {
    let parent = match dest.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&parent).map_err(|e| Error::io(&parent, e))?;
    let name = dest
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    tempfile::Builder::new()
        .prefix(&format!(".{name}.partial-"))
        .tempdir_in(&parent)
        .map_err(|e| Error::io(&parent, e))
}

/// Renames a finished temporary directory into place, removing it if the rename fails.
fn commit_dir(tmp: tempfile::TempDir, dest: &Path) -> Result<()> {
    let kept = tmp.keep();
    std::fs::rename(&kept, dest).map_err(|e| {
        let _ = std::fs::remove_dir_all(&kept);
        Error::io(dest, e)
    })
}

fn refuse_existing(dest: &Path) -> Result<()> {
    if std::fs::symlink_metadata(dest).is_ok() {
        return Err(Error::Usage(format!(
            "{} already exists; refusing to overwrite",
            dest.display()
        )));
    }
    Ok(())
}

/// `germline release pack`: stages the rootfs into `bundle_out/rootfs` (absolute symlinks made
/// relative), pins its digest in the manifest, signs the manifest with `key` (if given), writes
/// `config.json`, and optionally an image layout at `image_out`. Nothing is left behind on error.
pub fn pack(
    manifest_path: &Path,
    source: &Source,
    key: Option<&SigningKey>,
    bundle_out: &Path,
    image_out: Option<&Path>,
) -> Result<Packed> {
    pack_with(
        manifest_path,
        source,
        key,
        bundle_out,
        image_out,
        &Limits::default(),
    )
}

/// [`pack`], reading a source image layout under `limits`.
pub fn pack_with(
    manifest_path: &Path,
    source: &Source,
    key: Option<&SigningKey>,
    bundle_out: &Path,
    image_out: Option<&Path>,
    limits: &Limits,
) -> Result<Packed> {
    let mbytes = std::fs::read(manifest_path).map_err(|e| Error::io(manifest_path, e))?;
    let mut manifest = Manifest::parse(&mbytes, &manifest_path.display().to_string())?;
    refuse_existing(bundle_out)?;
    if let Some(i) = image_out {
        refuse_existing(i)?;
        // The image's ref name is the version as an OCI tag: refuse before any work.
        oci::ref_name_of(&manifest.version).map_err(|message| Error::Manifest {
            file: manifest_path.display().to_string(),
            field: "version".into(),
            message,
        })?;
    }
    let tmp = sibling_tmp(bundle_out)?;
    let rootfs = tmp.path().join("rootfs");
    std::fs::create_dir(&rootfs).map_err(|e| Error::io(&rootfs, e))?;
    match source {
        Source::RootfsDir(src) => copy_tree(src, &rootfs)?,
        Source::ImageLayout(layout) => {
            let img = Image::open_with(layout, limits)?;
            for (mt, d) in &img.layers {
                layer::scan_with(
                    img.open_layer(mt, d)?,
                    &d.digest,
                    Mode::Apply(&rootfs),
                    limits,
                    None,
                )?;
            }
            let g = rootfs.join(GERMLINE_DIR);
            if std::fs::symlink_metadata(&g).is_ok() {
                std::fs::remove_dir_all(&g).map_err(|e| Error::io(&g, e))?;
            }
            normalise_symlinks(&rootfs)?;
        }
    }
    let tree = digest::tree_of_dir(&rootfs)?;
    let rootfs_digest = tree.digest();
    manifest.rootfs = Some(RootfsPin {
        digest: rootfs_digest.clone(),
        algorithm: digest::ALGORITHM.into(),
    });
    let g = rootfs.join(GERMLINE_DIR);
    std::fs::create_dir(&g).map_err(|e| Error::io(&g, e))?;
    std::fs::set_permissions(&g, std::fs::Permissions::from_mode(0o755))
        .map_err(|e| Error::io(&g, e))?;
    let bytes = manifest.to_bytes()?;
    let mp = rootfs.join(MANIFEST_PATH);
    std::fs::write(&mp, &bytes).map_err(|e| Error::io(&mp, e))?;
    if let Some(k) = key {
        let sp = rootfs.join(SIGNATURE_PATH);
        std::fs::write(&sp, bundle::sign(k, &bytes)?).map_err(|e| Error::io(&sp, e))?;
    }
    for f in [&mp, &rootfs.join(SIGNATURE_PATH)] {
        if f.exists() {
            std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o644))
                .map_err(|e| Error::io(f, e))?;
        }
    }
    let cfg = tmp.path().join("config.json");
    let cfg_bytes = serde_json::to_vec_pretty(&oci::runtime_config(&manifest))
        .map_err(|e| Error::Usage(e.to_string()))?;
    std::fs::write(&cfg, cfg_bytes).map_err(|e| Error::io(&cfg, e))?;
    let image_manifest = match image_out {
        Some(out) => {
            let itmp = sibling_tmp(out)?;
            let d = oci::write_image_layout(&rootfs, &manifest, itmp.path())?;
            commit_dir(itmp, out)?;
            Some(d)
        }
        None => None,
    };
    commit_dir(tmp, bundle_out)?;
    Ok(Packed {
        manifest,
        rootfs_digest,
        image_manifest,
        signed: key.is_some(),
    })
}

/// Re-signs the manifest of an unpacked bundle in place (a publisher may instead run
/// `cosign sign-blob --key K --bundle DIR/rootfs/.germline/manifest.sigstore.json --tlog-upload=false DIR/rootfs/.germline/manifest.json`).
pub fn sign_bundle_dir(dir: &Path, key: &SigningKey) -> Result<()> {
    let rootfs = dir.join("rootfs");
    let (bytes, _) = read_germline_files(&rootfs, false)?;
    let sp = rootfs.join(SIGNATURE_PATH);
    std::fs::write(&sp, bundle::sign(key, &bytes)?).map_err(|e| Error::io(&sp, e))
}

/// Reads `.germline/manifest.json` and (if `need_sig`) the signature, refusing symlinks.
fn read_germline_files(rootfs: &Path, need_sig: bool) -> Result<(Vec<u8>, Option<Vec<u8>>)> {
    // Opened without following a symlink and without blocking on a FIFO, checked on the
    // descriptor, and read only up to the limit every germline file has in a layer.
    let regular = |p: &Path, name: &str, what: &str| -> Result<Option<Vec<u8>>> {
        match std::fs::symlink_metadata(p) {
            Ok(md) if md.is_file() => {}
            Ok(_) => {
                return Err(Error::Rootfs {
                    path: p.to_path_buf(),
                    message: format!("{what} must be a regular file (not a symlink or directory)"),
                })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io(p, e)),
        }
        let (f, _) = untrusted::open_in(rootfs, &[GERMLINE_DIR, name]).map_err(|e| match e {
            Error::Rootfs { path, message } => Error::Rootfs {
                path,
                message: format!("{what} must be a regular file: {message}"),
            },
            e => e,
        })?;
        untrusted::read_at_most(
            f,
            p,
            layer::MAX_GERMLINE_FILE,
            "the most a .germline file may hold",
        )
        .map(Some)
    };
    let g = rootfs.join(GERMLINE_DIR);
    match std::fs::symlink_metadata(&g) {
        Ok(md) if md.is_dir() => {}
        Ok(_) => {
            return Err(Error::Rootfs {
                path: g,
                message: "must be a directory".into(),
            })
        }
        Err(e) => {
            return Err(Error::Rootfs {
                path: g,
                message: format!("missing: not a germline release ({e})"),
            })
        }
    }
    let mp = rootfs.join(MANIFEST_PATH);
    let m = regular(&mp, "manifest.json", "the manifest")?.ok_or_else(|| Error::Rootfs {
        path: mp.clone(),
        message: "missing manifest".into(),
    })?;
    let sp = rootfs.join(SIGNATURE_PATH);
    let s = regular(&sp, "manifest.sigstore.json", "the signature")?;
    if need_sig && s.is_none() {
        return Err(Error::Rootfs {
            path: sp,
            message: "missing signature: unsigned manifest refused".into(),
        });
    }
    Ok((m, s))
}

/// Verifies the signature over the manifest bytes, then parses the manifest.
pub fn verify_signed_manifest(
    mbytes: &[u8],
    sig: Option<&[u8]>,
    key: &PublicKey,
    where_: &str,
) -> Result<(Manifest, bundle::Verified)> {
    let sig_file = format!("{where_}/{SIGNATURE_PATH}");
    let sig = sig.ok_or_else(|| Error::Rootfs {
        path: PathBuf::from(&sig_file),
        message: "missing signature: unsigned manifest refused".into(),
    })?;
    let v = bundle::verify(sig, mbytes, key, &sig_file)?;
    let manifest = Manifest::parse(mbytes, &format!("{where_}/{MANIFEST_PATH}"))?;
    if manifest.rootfs.is_none() {
        return Err(Error::Manifest {
            file: format!("{where_}/{MANIFEST_PATH}"),
            field: "rootfs".into(),
            message: "missing: a release manifest must pin its rootfs digest".into(),
        });
    }
    Ok((manifest, v))
}

fn pinned(m: &Manifest) -> String {
    m.rootfs
        .as_ref()
        .map(|p| p.digest.clone())
        .unwrap_or_default()
}

/// Verifies an unpacked OCI bundle (`dir/rootfs`), as podman and containerd hand it over.
pub fn verify_bundle_dir(dir: &Path, key: &PublicKey) -> Result<Verified> {
    let rootfs = dir.join("rootfs");
    let (mbytes, sig) = read_germline_files(&rootfs, false)?;
    let (manifest, signature) =
        verify_signed_manifest(&mbytes, sig.as_deref(), key, &rootfs.display().to_string())?;
    let tree = digest::tree_of_dir(&rootfs)?;
    let actual = tree.digest();
    if actual != pinned(&manifest) {
        return Err(Error::RootfsDigest {
            root: rootfs,
            expected: pinned(&manifest),
            actual,
        });
    }
    Ok(Verified {
        manifest,
        manifest_bytes: mbytes,
        signature,
        rootfs_digest: actual,
        file_bytes: tree.file_bytes(),
    })
}

/// Verifies an OCI image layout before extraction and, if `extract_to` is given, extracts it
/// there as an OCI bundle (`config.json` + `rootfs/`), atomically. Default limits.
pub fn verify_image(layout: &Path, key: &PublicKey, extract_to: Option<&Path>) -> Result<Verified> {
    verify_image_with(layout, key, extract_to, &Limits::default())
}

/// [`verify_image`] under `limits`. The order of checks (docs/release.md): index.json, the
/// image manifest and config (regular files, bounded, digests); the layer blob's size and
/// sha256 (before decompressing it); then the layer's tar stream, in which the signature over
/// `.germline/manifest.json` is verified as soon as it and its signature have been read, with
/// at most `limits.unsigned_bytes` decompressed before that; then the rest of the layer under
/// `limits`, the diff_id, and the tree digest against the signed pin.
pub fn verify_image_with(
    layout: &Path,
    key: &PublicKey,
    extract_to: Option<&Path>,
    limits: &Limits,
) -> Result<Verified> {
    if let Some(d) = extract_to {
        refuse_existing(d)?;
    }
    let img = Image::open_with(layout, limits)?;
    let [(mt, ldesc)] = img.layers.as_slice() else {
        return Err(Error::Image {
            layout: layout.to_path_buf(),
            message: format!(
                "expected exactly one layer in a germline release image, found {}",
                img.layers.len()
            ),
        });
    };
    let where_ = format!("{} layer {}", layout.display(), ldesc.digest);
    let mut signed: Option<(Manifest, bundle::Verified)> = None;
    let mut gate = |m: &[u8], sig: &[u8]| -> Result<()> {
        signed = Some(verify_signed_manifest(m, Some(sig), key, &where_)?);
        Ok(())
    };
    let scan = layer::scan_with(
        img.open_layer(mt, ldesc)?,
        &ldesc.digest,
        Mode::Check,
        limits,
        Some(&mut gate),
    )?;
    if img.diff_ids() != [scan.diff_id.clone()] {
        return Err(Error::Image {
            layout: layout.to_path_buf(),
            message: format!(
                "config rootfs.diff_ids {:?} does not match the layer's uncompressed digest {}",
                img.diff_ids(),
                scan.diff_id
            ),
        });
    }
    let mbytes = scan
        .germline
        .get(MANIFEST_PATH.as_bytes())
        .ok_or_else(|| Error::Rootfs {
            path: PathBuf::from(&where_),
            message: format!("missing {MANIFEST_PATH}: not a germline release"),
        })?;
    let sig = scan.germline.get(SIGNATURE_PATH.as_bytes());
    let (manifest, signature) = match signed {
        Some(v) => v,
        // Never gated (no signature in the layer): this names what is missing.
        None => verify_signed_manifest(mbytes, sig.map(|s| s.as_slice()), key, &where_)?,
    };
    let actual = scan.tree.digest();
    if actual != pinned(&manifest) {
        return Err(Error::RootfsDigest {
            root: PathBuf::from(&where_),
            expected: pinned(&manifest),
            actual,
        });
    }
    if let Some(dest) = extract_to {
        let tmp = sibling_tmp(dest)?;
        let rootfs = tmp.path().join("rootfs");
        std::fs::create_dir(&rootfs).map_err(|e| Error::io(&rootfs, e))?;
        // The blob may have changed since it was checked: extraction checks everything again
        // (the blob's digest, the same manifest before the limit on unverified bytes, every
        // entry) and the result must match the signed pin before it is renamed into place.
        let mut same = |m: &[u8], _sig: &[u8]| -> Result<()> {
            if m == mbytes.as_slice() {
                Ok(())
            } else {
                Err(Error::Rootfs {
                    path: PathBuf::from(&where_),
                    message: format!("{MANIFEST_PATH} changed during extraction"),
                })
            }
        };
        let again = layer::scan_with(
            img.open_layer(mt, ldesc)?,
            &ldesc.digest,
            Mode::Extract(&rootfs),
            limits,
            Some(&mut same),
        )?;
        let digest2 = again.tree.digest();
        if digest2 != actual || again.germline.get(MANIFEST_PATH.as_bytes()) != Some(mbytes) {
            return Err(Error::RootfsDigest {
                root: rootfs,
                expected: actual,
                actual: digest2,
            });
        }
        std::fs::set_permissions(&rootfs, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| Error::io(&rootfs, e))?;
        let cfg = tmp.path().join("config.json");
        let cfg_bytes = serde_json::to_vec_pretty(&oci::runtime_config(&manifest))
            .map_err(|e| Error::Usage(e.to_string()))?;
        std::fs::write(&cfg, cfg_bytes).map_err(|e| Error::io(&cfg, e))?;
        commit_dir(tmp, dest)?;
    }
    Ok(Verified {
        manifest,
        manifest_bytes: mbytes.clone(),
        signature,
        rootfs_digest: actual,
        file_bytes: scan.tree.file_bytes(),
    })
}

/// Verifies whichever `path` is: an image layout (has `index.json`) or a bundle (has `rootfs/`).
pub fn verify_path(path: &Path, key: &PublicKey, extract_to: Option<&Path>) -> Result<Verified> {
    verify_path_with(path, key, extract_to, &Limits::default())
}

/// True if `path` is an image layout: it has an `index.json` entry of any type (a symlink or
/// FIFO there is refused when it is opened, not taken for a bundle).
pub fn is_image_layout(path: &Path) -> bool {
    std::fs::symlink_metadata(path.join("index.json")).is_ok()
}

/// [`verify_path`], reading an image layout under `limits`.
pub fn verify_path_with(
    path: &Path,
    key: &PublicKey,
    extract_to: Option<&Path>,
    limits: &Limits,
) -> Result<Verified> {
    if is_image_layout(path) {
        verify_image_with(path, key, extract_to, limits)
    } else if path.join("rootfs").is_dir() {
        if extract_to.is_some() {
            return Err(Error::Usage(
                "--extract-to needs an image layout, not an unpacked bundle".into(),
            ));
        }
        verify_bundle_dir(path, key)
    } else {
        Err(Error::Usage(format!(
            "{}: neither an OCI image layout (index.json) nor an OCI bundle (rootfs/)",
            path.display()
        )))
    }
}

/// Reads a release's manifest without a key (for `inspect`): (manifest, signed?, publisher key
/// fingerprint named by the bundle's hint). Image layers are still read with every check.
pub fn read_unverified(path: &Path) -> Result<(Manifest, bool, Option<String>)> {
    read_unverified_with(path, &Limits::default())
}

/// [`read_unverified`], reading an image layout under `limits`.
pub fn read_unverified_with(
    path: &Path,
    limits: &Limits,
) -> Result<(Manifest, bool, Option<String>)> {
    let (mbytes, sig, where_) = if is_image_layout(path) {
        let img = Image::open_with(path, limits)?;
        let [(mt, d)] = img.layers.as_slice() else {
            return Err(Error::Image {
                layout: path.to_path_buf(),
                message: format!("expected exactly one layer, found {}", img.layers.len()),
            });
        };
        let scan = layer::scan_with(img.open_layer(mt, d)?, &d.digest, Mode::Check, limits, None)?;
        let m = scan
            .germline
            .get(MANIFEST_PATH.as_bytes())
            .cloned()
            .ok_or_else(|| Error::Rootfs {
                path: path.to_path_buf(),
                message: format!("missing {MANIFEST_PATH}"),
            })?;
        (
            m,
            scan.germline.get(SIGNATURE_PATH.as_bytes()).cloned(),
            path.display().to_string(),
        )
    } else {
        let rootfs = path.join("rootfs");
        let (m, s) = read_germline_files(&rootfs, false)?;
        (m, s, rootfs.display().to_string())
    };
    let manifest = Manifest::parse(&mbytes, &format!("{where_}/{MANIFEST_PATH}"))?;
    let fp = sig.as_deref().and_then(bundle::hint_fingerprint);
    Ok((manifest, sig.is_some(), fp))
}

/// Copies a rootfs, making absolute symlinks relative and refusing special files.
fn copy_tree(src: &Path, dst: &Path) -> Result<()> {
    let md = std::fs::metadata(src).map_err(|e| Error::io(src, e))?;
    if !md.is_dir() {
        return Err(Error::Rootfs {
            path: src.to_path_buf(),
            message: "expected a directory".into(),
        });
    }
    let mut dirs = vec![(dst.to_path_buf(), 0o755)];
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let from = src.join(&rel);
        for ent in std::fs::read_dir(&from).map_err(|e| Error::io(&from, e))? {
            let ent = ent.map_err(|e| Error::io(&from, e))?;
            let r = rel.join(ent.file_name());
            if r.as_os_str().as_bytes() == GERMLINE_DIR.as_bytes() {
                continue; // ours is written by pack
            }
            let s = src.join(&r);
            let d = dst.join(&r);
            let md = std::fs::symlink_metadata(&s).map_err(|e| Error::io(&s, e))?;
            let ft = md.file_type();
            if ft.is_dir() {
                std::fs::create_dir(&d).map_err(|e| Error::io(&d, e))?;
                dirs.push((d, md.permissions().mode() & 0o7777));
                stack.push(r);
            } else if ft.is_symlink() {
                let t = std::fs::read_link(&s).map_err(|e| Error::io(&s, e))?;
                let t = relative_target(r.as_os_str().as_bytes(), t.as_os_str().as_bytes());
                check_symlink(r.as_os_str().as_bytes(), &t).map_err(|message| Error::Rootfs {
                    path: s.clone(),
                    message,
                })?;
                std::os::unix::fs::symlink(OsStr::from_bytes(&t), &d)
                    .map_err(|e| Error::io(&d, e))?;
            } else if ft.is_file() {
                std::fs::copy(&s, &d).map_err(|e| Error::io(&s, e))?;
            } else {
                return Err(Error::Rootfs {
                    path: s,
                    message: "special file (device, fifo or socket) in a release rootfs".into(),
                });
            }
        }
    }
    for (d, m) in dirs.iter().rev() {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(*m))
            .map_err(|e| Error::io(d, e))?;
    }
    Ok(())
}

/// `/usr/lib/x` seen from `etc/a/link` is `../../usr/lib/x`.
fn relative_target(rel: &[u8], target: &[u8]) -> Vec<u8> {
    if !target.starts_with(b"/") {
        return target.to_vec();
    }
    let depth = rel
        .split(|b| *b == b'/')
        .filter(|c| !c.is_empty())
        .count()
        .saturating_sub(1);
    let stripped: Vec<&[u8]> = target
        .split(|b| *b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
        .collect();
    let mut out: Vec<u8> = Vec::new();
    for _ in 0..depth {
        out.extend_from_slice(b"../");
    }
    out.extend_from_slice(&stripped.join(&b'/'));
    if out.is_empty() {
        out.push(b'.');
    }
    out
}

/// Rewrites absolute symlinks under `root` as relative ones, refusing escaping ones.
fn normalise_symlinks(root: &Path) -> Result<()> {
    for (rel, p, ft) in crate::oci::walk(root)? {
        if !ft.is_symlink() {
            continue;
        }
        let t = std::fs::read_link(&p).map_err(|e| Error::io(&p, e))?;
        let t = t.as_os_str().as_bytes();
        if t.starts_with(b"/") {
            let nt = relative_target(&rel, t);
            std::fs::remove_file(&p).map_err(|e| Error::io(&p, e))?;
            std::os::unix::fs::symlink(OsStr::from_bytes(&nt), &p).map_err(|e| Error::io(&p, e))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_links_become_relative() {
        assert_eq!(
            relative_target(b"etc/a/link", b"/usr/lib/x"),
            b"../../usr/lib/x".to_vec()
        );
        assert_eq!(relative_target(b"bin", b"/usr/bin"), b"usr/bin".to_vec());
        assert_eq!(relative_target(b"etc/x", b"y"), b"y".to_vec());
        assert_eq!(relative_target(b"root", b"/"), b".".to_vec());
    }
}
