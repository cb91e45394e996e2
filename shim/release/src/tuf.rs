//! TUF metadata with `tough`, offline. A germline TUF repository is a directory with
//! `metadata/` (N.root.json, N.targets.json, N.snapshot.json, timestamp.json: consistent
//! snapshots, as python-tuf writes them) and `targets/` (`<sha256>.<name>`). Each release is one
//! target, `<name>-<version>.manifest.json`, whose contents are the signed manifest's bytes (the
//! manifest pins the rootfs, so the chain reaches every file).
//!
//! Verification loads the repository from a pinned root (signatures, thresholds, expiry,
//! metadata-version rollback through tough's datastore), then checks the release's manifest
//! against its target (length, sha256, contents), then refuses a release version lower than
//! the highest already seen for that name (state kept beside the datastore).

use std::collections::{BTreeMap, HashMap};
use std::num::NonZeroU64;
use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};
use tough::editor::signed::SignedRole;
use tough::editor::RepositoryEditor;
use tough::key_source::{KeySource, LocalKeySource};
use tough::schema::{Hashes, KeyHolder, RoleKeys, RoleType, Root, Target};
use tough::{RepositoryLoader, TargetName};

use crate::error::{Error, Result};
use crate::manifest::Manifest;

fn terr(repo: &Path, message: impl std::fmt::Display) -> Error {
    Error::Tuf {
        repo: repo.display().to_string(),
        message: message.to_string(),
    }
}

/// Full error chain of a tough error (its top-level text alone often lacks the cause).
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(|e| Error::Usage(format!("starting the TUF runtime: {e}")))
}

/// The TUF target name of a release.
pub fn target_name(m: &Manifest) -> String {
    format!("{}-{}.manifest.json", m.name, m.version)
}

/// TUF's `expires` is `YYYY-MM-DDTHH:MM:SSZ`: python-tuf refuses fractional seconds, which
/// tough would otherwise write.
fn whole_seconds(t: jiff::Timestamp) -> Result<jiff::Timestamp> {
    jiff::Timestamp::from_second(t.as_second()).map_err(|e| Error::Usage(format!("expiry: {e}")))
}

fn nz(v: u64) -> Result<NonZeroU64> {
    NonZeroU64::new(v).ok_or_else(|| Error::Usage("version 0".into()))
}

/// Writes an unencrypted Ed25519 key as PKCS#8 DER (v1), the form tough's `LocalKeySource`
/// reads for Ed25519 (it reads PEM only for RSA), mode 0600.
pub fn generate_key(path: &Path) -> Result<()> {
    use ed25519_dalek::pkcs8::EncodePrivateKey as _;
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let k = ed25519_dalek::SigningKey::generate(&mut rand_core::OsRng);
    let kp = ed25519_dalek::pkcs8::KeypairBytes {
        secret_key: k.to_bytes(),
        public_key: None,
    };
    let pem = kp
        .to_pkcs8_der()
        .map_err(|e| Error::Usage(format!("encoding key: {e}")))?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| Error::io(path, e))?;
    f.write_all(pem.as_bytes()).map_err(|e| Error::io(path, e))
}

fn keys(path: &Path) -> Vec<Box<dyn KeySource>> {
    vec![Box::new(LocalKeySource {
        path: path.to_path_buf(),
    })]
}

fn latest_root(repo: &Path) -> Result<PathBuf> {
    let md = repo.join("metadata");
    let mut best: Option<(u64, PathBuf)> = None;
    for e in std::fs::read_dir(&md)
        .map_err(|e| Error::io(&md, e))?
        .flatten()
    {
        let n = e.file_name().to_string_lossy().into_owned();
        if let Some(v) = n
            .strip_suffix(".root.json")
            .and_then(|v| v.parse::<u64>().ok())
        {
            if best.as_ref().is_none_or(|(b, _)| v > *b) {
                best = Some((v, e.path()));
            }
        }
    }
    best.map(|(_, p)| p)
        .ok_or_else(|| terr(repo, "no N.root.json in metadata/"))
}

fn dir_url(p: &Path) -> Result<url::Url> {
    let abs = std::path::absolute(p).map_err(|e| Error::io(p, e))?;
    url::Url::from_directory_path(&abs)
        .map_err(|_| Error::Usage(format!("{}: not an absolute path", abs.display())))
}

/// `germline release tuf-init`: a new repository whose four top-level roles share one key
/// (`key`, generated if missing), version 1 of every role, no targets.
pub fn init(repo: &Path, key: &Path, expires: jiff::Timestamp) -> Result<()> {
    let expires = whole_seconds(expires)?;
    if !key.exists() {
        generate_key(key)?;
    }
    let md = repo.join("metadata");
    if md.exists() {
        return Err(Error::Usage(format!(
            "{} already exists; refusing to overwrite",
            md.display()
        )));
    }
    std::fs::create_dir_all(&md).map_err(|e| Error::io(&md, e))?;
    std::fs::create_dir_all(repo.join("targets")).map_err(|e| Error::io(repo, e))?;
    let rt = runtime()?;
    rt.block_on(async {
        let ks = keys(key);
        let sign = ks[0]
            .as_sign()
            .await
            .map_err(|e| terr(repo, format!("key {}: {}", key.display(), chain(&*e))))?;
        let tuf_key = sign.tuf_key();
        let keyid = tuf_key.key_id().map_err(|e| terr(repo, chain(&e)))?;
        let mut roles = HashMap::new();
        for r in [
            RoleType::Root,
            RoleType::Targets,
            RoleType::Snapshot,
            RoleType::Timestamp,
        ] {
            roles.insert(
                r,
                RoleKeys {
                    keyids: vec![keyid.clone()],
                    threshold: nz(1)?,
                    _extra: HashMap::new(),
                },
            );
        }
        let root = Root {
            spec_version: "1.0.31".into(),
            consistent_snapshot: true,
            version: nz(1)?,
            expires,
            keys: HashMap::from([(keyid, tuf_key)]),
            roles,
            _extra: HashMap::new(),
        };
        let holder = KeyHolder::Root(root.clone());
        let signed = SignedRole::new(root, &holder, &ks, &aws_lc_rs::rand::SystemRandom::new())
            .await
            .map_err(|e| terr(repo, chain(&e)))?;
        signed
            .write(&md, true)
            .await
            .map_err(|e| terr(repo, chain(&e)))?;
        let mut ed = RepositoryEditor::new(md.join("1.root.json"))
            .await
            .map_err(|e| terr(repo, chain(&e)))?;
        ed.targets_version(nz(1)?)
            .map_err(|e| terr(repo, chain(&e)))?;
        ed.targets_expires(expires)
            .map_err(|e| terr(repo, chain(&e)))?;
        ed.snapshot_version(nz(1)?)
            .snapshot_expires(expires)
            .timestamp_version(nz(1)?)
            .timestamp_expires(expires);
        let signed = ed.sign(&ks).await.map_err(|e| terr(repo, chain(&e)))?;
        signed.write(&md).await.map_err(|e| terr(repo, chain(&e)))
    })
}

/// `germline release publish`: adds (or replaces) the release's target and writes the next
/// version of targets, snapshot and timestamp, signed with `key`.
pub fn publish(
    repo: &Path,
    key: &Path,
    manifest_bytes: &[u8],
    m: &Manifest,
    expires: jiff::Timestamp,
    timestamp_expires: jiff::Timestamp,
) -> Result<String> {
    let (expires, timestamp_expires) = (whole_seconds(expires)?, whole_seconds(timestamp_expires)?);
    let md = repo.join("metadata");
    let root_path = latest_root(repo)?;
    let root_bytes = std::fs::read(&root_path).map_err(|e| Error::io(&root_path, e))?;
    let name = target_name(m);
    let rt = runtime()?;
    rt.block_on(async {
        // The publisher may be renewing expired metadata: read it without enforcing expiry
        // (signatures and versions are still checked); what it writes gets fresh expiries.
        let loaded =
            RepositoryLoader::new(&root_bytes, dir_url(&md)?, dir_url(&repo.join("targets"))?)
                .expiration_enforcement(tough::ExpirationEnforcement::Unsafe)
                .load()
                .await
                .map_err(|e| terr(repo, chain(&e)))?;
        let tv = loaded.targets().signed.version.get() + 1;
        let sv = loaded.snapshot().signed.version.get() + 1;
        let tsv = loaded.timestamp().signed.version.get() + 1;
        let mut ed = RepositoryEditor::from_repo(&root_path, loaded)
            .await
            .map_err(|e| terr(repo, chain(&e)))?;
        let sha = Sha256::digest(manifest_bytes).to_vec();
        let custom = HashMap::from([(
            "germline".to_string(),
            serde_json::json!({"name": m.name, "version": m.version,
                               "rootfs_digest": m.rootfs.as_ref().map(|p| p.digest.clone())}),
        )]);
        let target = Target {
            length: manifest_bytes.len() as u64,
            hashes: Hashes {
                sha256: sha.clone().into(),
                _extra: HashMap::new(),
            },
            custom,
            _extra: HashMap::new(),
        };
        let tn = TargetName::new(name.clone()).map_err(|e| terr(repo, chain(&e)))?;
        ed.add_target(tn, target)
            .map_err(|e| terr(repo, chain(&e)))?;
        ed.targets_version(nz(tv)?)
            .map_err(|e| terr(repo, chain(&e)))?;
        ed.targets_expires(expires)
            .map_err(|e| terr(repo, chain(&e)))?;
        ed.snapshot_version(nz(sv)?)
            .snapshot_expires(expires)
            .timestamp_version(nz(tsv)?)
            .timestamp_expires(timestamp_expires);
        let signed = ed.sign(&keys(key)).await.map_err(|e| {
            terr(
                repo,
                format!(
                    "signing with {}: {} (is it a key the root trusts?)",
                    key.display(),
                    chain(&e)
                ),
            )
        })?;
        let tfile = repo
            .join("targets")
            .join(format!("{}.{name}", hex::encode(&sha)));
        std::fs::write(&tfile, manifest_bytes).map_err(|e| Error::io(&tfile, e))?;
        signed.write(&md).await.map_err(|e| terr(repo, chain(&e)))?;
        Ok(name)
    })
}

/// What a TUF check established.
#[derive(Debug, Clone)]
pub struct TufChecked {
    pub target: String,
    pub targets_version: u64,
    pub timestamp_version: u64,
    pub highest_seen_before: Option<String>,
}

/// Checks a verified release's manifest against a TUF repository loaded from `trusted_root`,
/// then the rollback state in `state` (created if missing), which it updates on success.
pub fn check_release(
    repo: &Path,
    trusted_root: &Path,
    state: &Path,
    manifest_bytes: &[u8],
    m: &Manifest,
) -> Result<TufChecked> {
    let root_bytes = std::fs::read(trusted_root).map_err(|e| Error::io(trusted_root, e))?;
    std::fs::create_dir_all(state).map_err(|e| Error::io(state, e))?;
    // One datastore per pinned root, so repositories do not share rollback state.
    let datastore = state
        .join("tuf-datastore")
        .join(&hex::encode(Sha256::digest(&root_bytes))[..16]);
    std::fs::create_dir_all(&datastore).map_err(|e| Error::io(&datastore, e))?;
    let name = target_name(m);
    let rt = runtime()?;
    let (tv, tsv) = rt.block_on(async {
        let loaded = RepositoryLoader::new(&root_bytes, dir_url(&repo.join("metadata"))?, dir_url(&repo.join("targets"))?)
            .datastore(&datastore)
            .load()
            .await
            .map_err(|e| terr(repo, chain(&e)))?;
        let tn = TargetName::new(name.clone()).map_err(|e| terr(repo, chain(&e)))?;
        let target = loaded
            .targets()
            .signed
            .targets
            .get(&tn)
            .ok_or_else(|| terr(repo, format!("release {} {} is not a target (expected target `{name}`)", m.name, m.version)))?;
        if target.length != manifest_bytes.len() as u64 {
            return Err(terr(repo, format!("target `{name}`: length mismatch: metadata says {} bytes, the release manifest has {}", target.length, manifest_bytes.len())));
        }
        let want: &[u8] = &target.hashes.sha256;
        let have = Sha256::digest(manifest_bytes);
        if want != have.as_slice() {
            return Err(terr(repo, format!("target `{name}`: sha256 mismatch: metadata says {}, the release manifest has {}", hex::encode(want), hex::encode(have))));
        }
        // The repository's own copy must be the same bytes (tough checks length and hash).
        let stream = loaded
            .read_target(&tn)
            .await
            .map_err(|e| terr(repo, chain(&e)))?
            .ok_or_else(|| terr(repo, format!("target `{name}` vanished")))?;
        let bytes = tough::IntoVec::into_vec(stream).await.map_err(|e| terr(repo, chain(&e)))?;
        if bytes != manifest_bytes {
            return Err(terr(repo, format!("target `{name}`: repository copy differs from the release manifest")));
        }
        Ok((loaded.targets().signed.version.get(), loaded.timestamp().signed.version.get()))
    })?;
    let seen_before = check_rollback(state, m)?;
    Ok(TufChecked {
        target: name,
        targets_version: tv,
        timestamp_version: tsv,
        highest_seen_before: seen_before,
    })
}

/// SemVer 2.0 precedence (§11): major, minor, patch numerically, then a pre-release is lower
/// than its release and pre-release identifiers compare one by one. Build metadata has no
/// precedence (§10): `0.2.1` and `0.2.1+g1` are the same version for the rollback check, and
/// neither is a rollback of the other. (The semver crate's `Ord` also orders build metadata,
/// to be a total order consistent with `Eq`; it is not the rollback order.)
pub fn precedence(a: &semver::Version, b: &semver::Version) -> std::cmp::Ordering {
    a.cmp_precedence(b)
}

/// Refuses a version lower in SemVer precedence ([`precedence`]) than the highest seen for
/// this name; records a higher one. A version equal in precedence to the one recorded (the
/// same version, with other build metadata or none) is accepted and leaves the record as it
/// was.
pub fn check_rollback(state: &Path, m: &Manifest) -> Result<Option<String>> {
    let path = state.join("seen-versions.json");
    let mut seen: BTreeMap<String, String> = match std::fs::read(&path) {
        Ok(b) => serde_json::from_slice(&b).map_err(|e| Error::Json {
            file: path.display().to_string(),
            what: "rollback state",
            message: e.to_string(),
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
        Err(e) => return Err(Error::io(&path, e)),
    };
    let offered = m.semver()?;
    let before = seen.get(&m.name).cloned();
    if let Some(s) = &before {
        let sv = semver::Version::parse(s).map_err(|e| Error::Json {
            file: path.display().to_string(),
            what: "rollback state",
            message: e.to_string(),
        })?;
        match precedence(&offered, &sv) {
            std::cmp::Ordering::Less => {
                return Err(Error::Rollback {
                    name: m.name.clone(),
                    offered: m.version.clone(),
                    seen: s.clone(),
                    state: path,
                })
            }
            std::cmp::Ordering::Equal => return Ok(before),
            std::cmp::Ordering::Greater => {}
        }
    }
    seen.insert(m.name.clone(), m.version.clone());
    let tmp = state.join(".seen-versions.json.tmp");
    let bytes = serde_json::to_vec_pretty(&seen).map_err(|e| Error::Usage(e.to_string()))?;
    std::fs::write(&tmp, bytes).map_err(|e| Error::io(&tmp, e))?;
    std::fs::rename(&tmp, &path).map_err(|e| Error::io(&path, e))?;
    Ok(before)
}
