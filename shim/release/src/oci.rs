//! OCI formats: the runtime bundle (`config.json` + `rootfs/`) and the image layout
//! (`oci-layout`, `index.json`, `blobs/sha256/`) with one deterministic gzip'd tar layer
//! (sorted entries, uid/gid 0, mtime 0, no user names).

use flate2::write::GzEncoder;
use serde_json::json;
use sha2::{Digest as _, Sha256};
use std::ffi::OsStr;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::manifest::Manifest;
use crate::untrusted::{open_in, read_at_most, too_large, Limits};

pub const MT_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const MT_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const MT_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
pub const MT_LAYER_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
pub const MT_LAYER_TAR: &str = "application/vnd.oci.image.layer.v1.tar";
/// Annotation carrying the signed rootfs digest (informative; the signed manifest decides).
pub const ANN_ROOTFS: &str = "dev.germline.rootfs.digest";
const DEFAULT_PATH: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The OCI runtime `config.json` for a release. Engines rewrite it; germline takes the
/// germline's process from the signed manifest, never from this file (DESIGN.md).
pub fn runtime_config(m: &Manifest) -> serde_json::Value {
    json!({
        "ociVersion": "1.0.2",
        "process": {
            "terminal": false,
            "user": {"uid": 0, "gid": 0},
            "args": m.entry,
            "env": [DEFAULT_PATH],
            "cwd": "/",
            "noNewPrivileges": true,
            "capabilities": {"bounding": [], "effective": [], "permitted": []}
        },
        "root": {"path": "rootfs", "readonly": true},
        "hostname": m.name,
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
            {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", format!("size={}m", m.scratch_mb.max(1))]}
        ],
        "annotations": {
            "org.opencontainers.image.title": m.name,
            "org.opencontainers.image.version": m.version,
            ANN_ROOTFS: m.rootfs.as_ref().map(|p| p.digest.clone()).unwrap_or_default()
        },
        "linux": {
            "namespaces": [{"type": "pid"}, {"type": "network"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}],
            "maskedPaths": ["/proc/kcore", "/proc/keys", "/proc/timer_list"],
            "readonlyPaths": ["/proc/sys", "/proc/sysrq-trigger"]
        }
    })
}

/// Every path under `root` (including `.germline/`), `.germline/` first, each group sorted by
/// bytes: parents come first.
fn sorted_paths(root: &Path) -> Result<Vec<(Vec<u8>, PathBuf)>> {
    let mut out: Vec<(Vec<u8>, PathBuf)> = walk(root)?
        .into_iter()
        .map(|(rel, p, _)| (rel, p))
        .collect();
    // `.germline/` (the manifest and its signature) first, so that a verifier checks the
    // signature before it decompresses the rest of the layer (docs/release.md); then by bytes.
    out.sort_by(|a, b| {
        (!crate::digest::is_excluded(&a.0), &a.0).cmp(&(!crate::digest::is_excluded(&b.0), &b.0))
    });
    Ok(out)
}

/// Every entry under `root` (directories walked, links not followed, in no particular order):
/// its path relative to `root` as bytes, its path, and its type.
pub(crate) fn walk(root: &Path) -> Result<Vec<(Vec<u8>, PathBuf, std::fs::FileType)>> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for ent in std::fs::read_dir(&dir).map_err(|e| Error::io(&dir, e))? {
            let ent = ent.map_err(|e| Error::io(&dir, e))?;
            let p = ent.path();
            let rel = p
                .strip_prefix(root)
                .map_err(|_| Error::Usage("walk".into()))?
                .as_os_str()
                .as_bytes()
                .to_vec();
            let ft = ent.file_type().map_err(|e| Error::io(&p, e))?;
            if ft.is_dir() {
                stack.push(p.clone());
            }
            out.push((rel, p, ft));
        }
    }
    Ok(out)
}

struct HashingWriter<W> {
    inner: W,
    hash: Sha256,
    len: u64,
}
impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hash.update(&buf[..n]);
        self.len += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// A content descriptor.
#[derive(Debug, Clone)]
pub struct Descriptor {
    pub digest: String,
    pub size: u64,
}

fn write_blob(blobs: &Path, bytes: &[u8]) -> Result<Descriptor> {
    let hexd = hex::encode(Sha256::digest(bytes));
    let p = blobs.join(&hexd);
    std::fs::write(&p, bytes).map_err(|e| Error::io(&p, e))?;
    Ok(Descriptor {
        digest: format!("sha256:{hexd}"),
        size: bytes.len() as u64,
    })
}

/// Writes a deterministic gzip'd tar of `rootfs` into `blobs/`; returns (layer, diff_id).
pub fn write_layer(rootfs: &Path, blobs: &Path) -> Result<(Descriptor, String)> {
    let tmp = blobs.join(".layer.tmp");
    let f = File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
    let outer = HashingWriter {
        inner: BufWriter::new(f),
        hash: Sha256::new(),
        len: 0,
    };
    let gz = GzEncoder::new(outer, flate2::Compression::new(6));
    let inner = HashingWriter {
        inner: gz,
        hash: Sha256::new(),
        len: 0,
    };
    let mut b = tar::Builder::new(inner);
    for (rel, p) in sorted_paths(rootfs)? {
        let md = std::fs::symlink_metadata(&p).map_err(|e| Error::io(&p, e))?;
        let mut h = tar::Header::new_gnu();
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(0);
        h.set_mode(md.permissions().mode() & 0o7777);
        let name = Path::new(OsStr::from_bytes(&rel));
        let io = |e| Error::io(&p, e);
        if md.is_dir() {
            h.set_entry_type(tar::EntryType::Directory);
            h.set_size(0);
            b.append_data(&mut h, name, std::io::empty()).map_err(io)?;
        } else if md.file_type().is_symlink() {
            let target = std::fs::read_link(&p).map_err(io)?;
            h.set_entry_type(tar::EntryType::Symlink);
            h.set_size(0);
            b.append_link(&mut h, name, &target).map_err(io)?;
        } else if md.is_file() {
            h.set_entry_type(tar::EntryType::Regular);
            h.set_size(md.len());
            let f = File::open(&p).map_err(io)?;
            b.append_data(&mut h, name, BufReader::new(f).take(md.len()))
                .map_err(io)?;
        } else {
            return Err(Error::Rootfs {
                path: p,
                message: "special file in a release rootfs".into(),
            });
        }
    }
    let inner = b.into_inner().map_err(|e| Error::io(&tmp, e))?;
    let diff_id = format!("sha256:{}", hex::encode(inner.hash.finalize()));
    let mut outer = inner.inner.finish().map_err(|e| Error::io(&tmp, e))?;
    outer.flush().map_err(|e| Error::io(&tmp, e))?;
    let digest = hex::encode(outer.hash.finalize());
    let size = outer.len;
    let fin = blobs.join(&digest);
    std::fs::rename(&tmp, &fin).map_err(|e| Error::io(&fin, e))?;
    Ok((
        Descriptor {
            digest: format!("sha256:{digest}"),
            size,
        },
        diff_id,
    ))
}

/// Whether `s` is an OCI tag (distribution-spec; image-spec's `org.opencontainers.image.ref.name`
/// for a tag): `[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}`.
pub fn is_tag(s: &str) -> bool {
    let ok = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && ok(b[0])
        && b[1..].iter().all(|&c| ok(c) || c == b'.' || c == b'-')
}

/// The image ref name (an OCI tag) under which a release version is written into an image
/// layout. SemVer's `+` (build metadata) is not allowed in a tag, so it becomes `_` (Helm's
/// convention for OCI tags); SemVer never uses `_`, so [`version_of_ref`] undoes it. A version
/// that cannot be a tag (more than 128 characters once mapped) is an error, as a message for
/// the caller to attach to the manifest's field `version`.
pub fn ref_name_of(version: &str) -> std::result::Result<String, String> {
    let tag = version.replace('+', "_");
    if is_tag(&tag) {
        return Ok(tag);
    }
    let n = tag.chars().count();
    Err(if n > 128 {
        format!(
            "{version:?} cannot be an OCI image tag (the image ref name): {n} characters, at most 128"
        )
    } else {
        format!(
            "{version:?} cannot be an OCI image tag (the image ref name): expected \
             [a-zA-Z0-9_][a-zA-Z0-9._-]{{0,127}} once `+` is written `_`"
        )
    })
}

/// The release version an image ref name stands for: a tag [`ref_name_of`] wrote (`0.2.1_g1`),
/// or the version itself, as germline wrote ref names before they were tags (`0.2.1+g1`).
pub fn version_of_ref(name: &str) -> String {
    name.replace('_', "+")
}

/// Writes an OCI image layout of a packed rootfs (its `.germline/` included) into `out`, with
/// oci-spec's image types. Every document is written with its keys sorted and no spaces, as
/// germline wrote them before it used those types (the bytes, hence the digests, are the same:
/// tests::the_layout_is_byte_for_byte_what_it_was). The index names the manifest by
/// [`ref_name_of`] the release version.
pub fn write_image_layout(rootfs: &Path, m: &Manifest, out: &Path) -> Result<Descriptor> {
    use oci_spec::image as spec;
    let ref_name = ref_name_of(&m.version).map_err(|message| Error::Manifest {
        file: "release manifest".into(),
        field: "version".into(),
        message,
    })?;
    let blobs = out.join("blobs/sha256");
    std::fs::create_dir_all(&blobs).map_err(|e| Error::io(&blobs, e))?;
    let (layer, diff_id) = write_layer(rootfs, &blobs)?;
    let rootfs_digest = m
        .rootfs
        .as_ref()
        .map(|p| p.digest.clone())
        .unwrap_or_default();
    let labels: std::collections::HashMap<String, String> = [
        (spec::ANNOTATION_TITLE, m.name.as_str()),
        (spec::ANNOTATION_VERSION, m.version.as_str()),
        (ANN_ROOTFS, rootfs_digest.as_str()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let config = spec::ImageConfigurationBuilder::default()
        .architecture(spec::Arch::Amd64)
        .os(spec::Os::Linux)
        .config(
            spec::ConfigBuilder::default()
                .env(vec![DEFAULT_PATH.to_string()])
                .entrypoint(m.entry.clone())
                .working_dir("/")
                .labels(labels.clone())
                .build()
                .map_err(oci_err)?,
        )
        .rootfs(
            spec::RootFsBuilder::default()
                .typ("layers")
                .diff_ids(vec![diff_id])
                .build()
                .map_err(oci_err)?,
        )
        .history(vec![spec::HistoryBuilder::default()
            .created_by("germline release pack")
            .build()
            .map_err(oci_err)?])
        .build()
        .map_err(oci_err)?;
    let config = write_blob(&blobs, &to_vec(&config)?)?;
    let manifest = spec::ImageManifestBuilder::default()
        .schema_version(2u32)
        .media_type(spec::MediaType::ImageManifest)
        .config(descriptor_of(spec::MediaType::ImageConfig, &config, None)?)
        .layers(vec![descriptor_of(
            spec::MediaType::ImageLayerGzip,
            &layer,
            None,
        )?])
        .annotations(labels)
        .build()
        .map_err(oci_err)?;
    let mdesc = write_blob(&blobs, &to_vec(&manifest)?)?;
    let refs = [(spec::ANNOTATION_REF_NAME.to_string(), ref_name)].into();
    let index = spec::ImageIndexBuilder::default()
        .schema_version(2u32)
        .media_type(spec::MediaType::ImageIndex)
        .manifests(vec![descriptor_of(
            spec::MediaType::ImageManifest,
            &mdesc,
            Some(refs),
        )?])
        .build()
        .map_err(oci_err)?;
    let write = |name: &str, bytes: Vec<u8>| {
        let p = out.join(name);
        std::fs::write(&p, bytes).map_err(|e| Error::io(&p, e))
    };
    write("index.json", to_vec(&index)?)?;
    let layout = spec::OciLayoutBuilder::default()
        .image_layout_version("1.0.0")
        .build()
        .map_err(oci_err)?;
    write("oci-layout", to_vec(&layout)?)?;
    Ok(mdesc)
}

fn oci_err(e: oci_spec::OciSpecError) -> Error {
    Error::Usage(format!("building an OCI image document: {e}"))
}

/// An oci-spec descriptor of a blob germline wrote.
fn descriptor_of(
    media_type: oci_spec::image::MediaType,
    d: &Descriptor,
    annotations: Option<std::collections::HashMap<String, String>>,
) -> Result<oci_spec::image::Descriptor> {
    let digest: oci_spec::image::Digest = d.digest.parse().map_err(oci_err)?;
    let mut b = oci_spec::image::DescriptorBuilder::default()
        .media_type(media_type)
        .digest(digest)
        .size(d.size);
    if let Some(a) = annotations {
        b = b.annotations(a);
    }
    b.build().map_err(oci_err)
}

/// Compact JSON with every object's keys sorted (through `serde_json::Value`, whose maps are
/// ordered), whatever order a type declares its fields in.
fn to_vec<T: serde::Serialize>(v: &T) -> Result<Vec<u8>> {
    serde_json::to_value(v)
        .and_then(|v| serde_json::to_vec(&v))
        .map_err(|e| Error::Usage(e.to_string()))
}

/// An image layout opened for reading: every blob is checked against its digest and size,
/// and every read is bounded (crate::untrusted).
#[derive(Debug)]
pub struct Image {
    pub layout: PathBuf,
    pub manifest: serde_json::Value,
    pub config: serde_json::Value,
    /// (media type, descriptor) of each layer, in order.
    pub layers: Vec<(String, Descriptor)>,
    pub limits: Limits,
}

impl Image {
    fn err(&self, message: String) -> Error {
        Error::Image {
            layout: self.layout.clone(),
            message,
        }
    }

    /// [`Image::open_with`] under the default limits.
    pub fn open(layout: &Path) -> Result<Image> {
        Image::open_with(layout, &Limits::default())
    }

    /// Reads index.json, the (first) manifest and the config, checking digests and sizes.
    /// Each is opened only as a regular file and read only up to `limits.json` (index.json)
    /// or its descriptor's size.
    pub fn open_with(layout: &Path, limits: &Limits) -> Result<Image> {
        let ierr = |message: String| Error::Image {
            layout: layout.to_path_buf(),
            message,
        };
        let idx_path = layout.join("index.json");
        let (f, size) = open_in(layout, &["index.json"])?;
        if size > limits.json {
            return Err(too_large(&idx_path, limits.json, "--max-image-json"));
        }
        let idx_bytes = read_at_most(f, &idx_path, limits.json, "--max-image-json")?;
        let mut node: serde_json::Value = serde_json::from_slice(&idx_bytes)
            .map_err(|e| ierr(format!("index.json: not valid JSON: {e}")))?;
        // Follow nested indexes (podman and skopeo may write one per platform).
        for _ in 0..4 {
            let first = node
                .get("manifests")
                .and_then(|m| m.get(0))
                .ok_or_else(|| {
                    ierr("index: field `manifests`: expected at least one descriptor".into())
                })?
                .clone();
            let (mt, desc) =
                descriptor(&first).map_err(|m| ierr(format!("index: manifests[0]: {m}")))?;
            let bytes = read_json_blob(layout, &desc, limits)?;
            let v: serde_json::Value = serde_json::from_slice(&bytes)
                .map_err(|e| ierr(format!("blob {}: not valid JSON: {e}", desc.digest)))?;
            if mt == MT_INDEX || v.get("manifests").is_some() {
                node = v;
                continue;
            }
            let config_desc = v
                .get("config")
                .ok_or_else(|| ierr("manifest: missing field `config`".into()))?;
            let (_, cdesc) =
                descriptor(config_desc).map_err(|m| ierr(format!("manifest: config: {m}")))?;
            let config: serde_json::Value =
                serde_json::from_slice(&read_json_blob(layout, &cdesc, limits)?)
                    .map_err(|e| ierr(format!("config blob: not valid JSON: {e}")))?;
            let mut layers = Vec::new();
            for (i, l) in v
                .get("layers")
                .and_then(|l| l.as_array())
                .ok_or_else(|| ierr("manifest: missing field `layers`".into()))?
                .iter()
                .enumerate()
            {
                layers
                    .push(descriptor(l).map_err(|m| ierr(format!("manifest: layers[{i}]: {m}")))?);
            }
            return Ok(Image {
                layout: layout.to_path_buf(),
                manifest: v,
                config,
                layers,
                limits: *limits,
            });
        }
        Err(ierr("index nesting deeper than 4".into()))
    }

    pub fn blob_path(&self, d: &Descriptor) -> Result<PathBuf> {
        blob_path(&self.layout, d)
    }

    /// Opens a blob (a regular file, never through a symlink) whose size on disk must be its
    /// descriptor's.
    fn open_blob(&self, d: &Descriptor) -> Result<File> {
        open_blob(&self.layout, d)
    }

    /// Checks a layer blob's size and sha256 (streamed), before anything reads its contents.
    pub fn check_blob(&self, d: &Descriptor) -> Result<()> {
        let mut f = self.open_blob(d)?;
        self.hash_blob(&mut f, d)
    }

    /// Hashes exactly the descriptor's size of `f` from where it stands and compares.
    fn hash_blob(&self, f: &mut File, d: &Descriptor) -> Result<()> {
        let p = self.blob_path(d)?;
        let mut h = Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut total = 0u64;
        let mut r = f.take(d.size.saturating_add(1));
        loop {
            let n = r.read(&mut buf).map_err(|e| Error::io(&p, e))?;
            if n == 0 {
                break;
            }
            total += n as u64;
            h.update(&buf[..n]);
        }
        let actual = format!("sha256:{}", hex::encode(h.finalize()));
        if total != d.size || actual != d.digest {
            return Err(Error::BlobMismatch {
                layout: self.layout.clone(),
                digest: d.digest.clone(),
                expected: format!("{} ({} bytes)", d.digest, d.size),
                actual: format!("{actual} ({total} bytes)"),
            });
        }
        Ok(())
    }

    /// Opens a layer blob once, checks its size and sha256 against the descriptor, and returns
    /// a reader of its uncompressed tar stream from the same descriptor (so the file checked
    /// is the file read). The compressed stream is read only up to the descriptor's size; the
    /// uncompressed one is bounded by the scan (crate::layer).
    pub fn open_layer(&self, mt: &str, d: &Descriptor) -> Result<Box<dyn Read>> {
        let mut f = self.open_blob(d)?;
        self.hash_blob(&mut f, d)?;
        let p = self.blob_path(d)?;
        f.seek(SeekFrom::Start(0)).map_err(|e| Error::io(&p, e))?;
        self.decoder(mt, d, f)
    }

    /// A reader of a layer's uncompressed tar stream (the blob is not checked here: use
    /// [`Image::open_layer`] to check and read it in one).
    pub fn layer_reader(&self, mt: &str, d: &Descriptor) -> Result<Box<dyn Read>> {
        let f = self.open_blob(d)?;
        self.decoder(mt, d, f)
    }

    fn decoder(&self, mt: &str, d: &Descriptor, f: File) -> Result<Box<dyn Read>> {
        let f = BufReader::with_capacity(1 << 20, f.take(d.size));
        match mt {
            MT_LAYER_GZIP | "application/vnd.docker.image.rootfs.diff.tar.gzip" => Ok(Box::new(flate2::read::GzDecoder::new(f))),
            MT_LAYER_TAR | "application/vnd.docker.image.rootfs.diff.tar" => Ok(Box::new(f)),
            other => Err(self.err(format!("layer {}: unsupported media type {other:?} (expected {MT_LAYER_GZIP} or {MT_LAYER_TAR})", d.digest))),
        }
    }

    /// The config's `rootfs.diff_ids`.
    pub fn diff_ids(&self) -> Vec<String> {
        self.config
            .pointer("/rootfs/diff_ids")
            .and_then(|v| v.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    }
}

fn descriptor(v: &serde_json::Value) -> std::result::Result<(String, Descriptor), String> {
    let mt = v
        .get("mediaType")
        .and_then(|m| m.as_str())
        .unwrap_or("")
        .to_string();
    let digest = v
        .get("digest")
        .and_then(|d| d.as_str())
        .ok_or("missing field `digest`")?
        .to_string();
    if !crate::manifest::is_sha256_digest(&digest) {
        return Err(format!(
            "field `digest`: expected sha256:<64 hex>, found {digest:?}"
        ));
    }
    let size = v
        .get("size")
        .and_then(|s| s.as_u64())
        .ok_or("missing field `size`")?;
    Ok((mt, Descriptor { digest, size }))
}

fn blob_path(layout: &Path, d: &Descriptor) -> Result<PathBuf> {
    let hexd = d
        .digest
        .strip_prefix("sha256:")
        .ok_or_else(|| Error::Image {
            layout: layout.to_path_buf(),
            message: format!("unsupported digest {}", d.digest),
        })?;
    Ok(layout.join("blobs/sha256").join(hexd))
}

/// Opens `blobs/sha256/<hex>` under the layout (never through a symlink, only a regular file)
/// and checks that its size is the descriptor's before anything reads it.
fn open_blob(layout: &Path, d: &Descriptor) -> Result<File> {
    let p = blob_path(layout, d)?;
    let hexd = d.digest.strip_prefix("sha256:").unwrap_or_default();
    let (f, size) = open_in(layout, &["blobs", "sha256", hexd])?;
    if size != d.size {
        return Err(Error::BlobMismatch {
            layout: layout.to_path_buf(),
            digest: format!("{} ({})", d.digest, p.display()),
            expected: format!("{} bytes (its descriptor's size)", d.size),
            actual: format!("{size} bytes on disk: refused before reading it"),
        });
    }
    Ok(f)
}

fn read_json_blob(layout: &Path, d: &Descriptor, limits: &Limits) -> Result<Vec<u8>> {
    if d.size > limits.json {
        return Err(Error::Image {
            layout: layout.to_path_buf(),
            message: format!(
                "blob {}: its descriptor's size {} is larger than the limit of {} bytes for JSON (--max-image-json)",
                d.digest, d.size, limits.json
            ),
        });
    }
    let p = blob_path(layout, d)?;
    let f = open_blob(layout, d)?;
    let bytes = read_at_most(f, &p, d.size, "its descriptor's size")?;
    let actual = format!("sha256:{}", hex::encode(Sha256::digest(&bytes)));
    if bytes.len() as u64 != d.size || actual != d.digest {
        return Err(Error::BlobMismatch {
            layout: layout.to_path_buf(),
            digest: d.digest.clone(),
            expected: format!("{} ({} bytes)", d.digest, d.size),
            actual: format!("{actual} ({} bytes)", bytes.len()),
        });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(version: &str) -> Manifest {
        let v = serde_json::json!({
            "schema": crate::manifest::SCHEMA, "name": "mcp-server-demo", "version": version,
            "language": "python", "entry": ["python3", "-m", "demo"],
            "initialisation": {"imports": [], "warm": false},
            "tools": {"t": {"destinations": {"hosts": []}}},
            "readable_paths": ["/usr"], "deterministic": true,
            "rootfs": {"digest": format!("sha256:{}", "ab".repeat(32)), "algorithm": crate::digest::ALGORITHM}
        });
        Manifest::parse(&serde_json::to_vec(&v).expect("json"), "m.json").expect("manifest")
    }

    /// A fixed rootfs's layout, as (index.json, manifest digest, oci-layout).
    fn layout_of(version: &str) -> (String, String, String) {
        let d = tempfile::tempdir().expect("tempdir");
        let rootfs = d.path().join("rootfs");
        std::fs::create_dir_all(rootfs.join("usr/bin")).expect("mkdir");
        std::fs::write(rootfs.join("usr/bin/demo"), b"#!/bin/sh\n").expect("write");
        std::fs::set_permissions(
            rootfs.join("usr/bin"),
            std::fs::Permissions::from_mode(0o755),
        )
        .expect("chmod");
        std::fs::set_permissions(rootfs.join("usr"), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        std::fs::set_permissions(&rootfs, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        std::fs::set_permissions(
            rootfs.join("usr/bin/demo"),
            std::fs::Permissions::from_mode(0o755),
        )
        .expect("chmod");
        let out = d.path().join("image");
        let desc = write_image_layout(&rootfs, &manifest(version), &out).expect("layout");
        let index = std::fs::read_to_string(out.join("index.json")).expect("index");
        let layout = std::fs::read_to_string(out.join("oci-layout")).expect("oci-layout");
        (index, desc.digest, layout)
    }

    /// The image manifest, config and index are the bytes germline wrote before they were
    /// built with oci-spec's types (pinned here from that code): digests of packed releases
    /// do not change.
    #[test]
    fn the_layout_is_byte_for_byte_what_it_was() {
        let (index, digest, layout) = layout_of("1.4.0");
        assert_eq!(
            digest,
            "sha256:846422ce12e8749824a7355c81c9bc8f20bdff703dd546d92b25fdbc2bff0160"
        );
        assert_eq!(
            index,
            r#"{"manifests":[{"annotations":{"org.opencontainers.image.ref.name":"1.4.0"},"digest":"sha256:846422ce12e8749824a7355c81c9bc8f20bdff703dd546d92b25fdbc2bff0160","mediaType":"application/vnd.oci.image.manifest.v1+json","size":614}],"mediaType":"application/vnd.oci.image.index.v1+json","schemaVersion":2}"#
        );
        assert_eq!(layout, r#"{"imageLayoutVersion":"1.0.0"}"#);
    }
}
