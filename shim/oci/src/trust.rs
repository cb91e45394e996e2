//! The node's trust in a release: the pinned publisher keys, then the node's TUF metadata and
//! rollback state (`[tuf]` in the node configuration). Both `create` and the precreate hook
//! decide with these.

use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::config::Config;
use crate::error::{Error, Result};

/// Verifies the release at `dir` (`dir/rootfs`) under one of the pinned keys.
pub fn verify(
    dir: &Path,
    keys: &[PathBuf],
    cfg: &Config,
) -> Result<(PathBuf, germline_release::release::Verified)> {
    let mut first = None;
    for k in keys {
        let key =
            germline_release::keys::load_public_key(k).map_err(|source| Error::PinnedKey {
                path: k.clone(),
                source: Box::new(source),
            })?;
        match germline_release::release::verify_bundle_dir(dir, &key) {
            Ok(v) => return Ok((k.clone(), v)),
            Err(e) => {
                first.get_or_insert(e);
            }
        }
    }
    // No key at all, or none verified it (the first key's reason).
    Err(first.map_or_else(
        || Error::NoKey(cfg.source.clone()),
        |e| Error::NotVerified(Box::new(e)),
    ))
}

/// What the node's trust metadata established about a verified release.
#[derive(Debug)]
pub enum Trust {
    /// Checked against the node's TUF repository and the rollback state.
    Tuf(germline_release::tuf::TufChecked),
    /// No metadata on the node and `[tuf] required = false`: the signed version was checked
    /// against the rollback state only (the highest version seen before, if any).
    StateOnly(Option<String>),
}

/// Checks a release the pinned keys verified against the node's trust metadata (`[tuf]` in
/// the node configuration): the TUF chain from the pinned root (signatures, thresholds,
/// expiry, metadata-version rollback), the release's target (length, sha256, contents), and
/// the rollback state (a version older than one accepted on this node is refused), which it
/// updates. The release crate's checks, as `germline release verify --tuf-repo` does them.
pub fn check_trust(cfg: &Config, v: &germline_release::release::Verified) -> Result<Trust> {
    let m = &v.manifest;
    check_metadata(cfg, v).map_err(|e| Error::Refused {
        release: format!("{} {}", m.name, m.version),
        source: Box::new(e),
    })
}

/// [`check_trust`]'s checks; an error is the reason the release is refused.
fn check_metadata(cfg: &Config, v: &germline_release::release::Verified) -> Result<Trust> {
    let t = &cfg.tuf;
    let m = &v.manifest;
    let metadata = t.repo.join("metadata");
    let (have_repo, have_root) = (metadata.is_dir(), t.root.is_file());
    if have_repo != have_root {
        let (missing, present) = if have_repo {
            (t.root.clone(), metadata)
        } else {
            (metadata, t.root.clone())
        };
        return Err(Error::IncompleteTrust {
            present,
            missing,
            config: cfg.source.clone(),
        });
    }
    std::fs::create_dir_all(&t.state).map_err(|e| Error::op("rollback state", &t.state, e))?;
    // One check at a time per node: the state is read, compared and rewritten.
    let lock_path = t.state.join("lock");
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&lock_path)
        .map_err(Error::io(&lock_path))?;
    // Released when `lock` is dropped.
    germline_sys::sys::flock(lock.as_raw_fd(), libc::LOCK_EX)
        .map_err(|e| Error::op("locking", &lock_path, e))?;
    if !have_repo {
        if t.required {
            return Err(Error::NoTrust {
                metadata,
                root: t.root.clone(),
                config: cfg.source.clone(),
            });
        }
        let before = germline_release::tuf::check_rollback(&t.state, m).map_err(refusal)?;
        return Ok(Trust::StateOnly(before));
    }
    germline_release::tuf::check_release(&t.repo, &t.root, &t.state, &v.manifest_bytes, m)
        .map(Trust::Tuf)
        .map_err(|e| match e {
            e @ germline_release::error::Error::Rollback { .. } => refusal(e),
            source => Error::Tuf {
                root: t.root.clone(),
                source: Box::new(source),
            },
        })
}

/// The release crate's refusal of the rollback state: a rollback, or another reason.
fn refusal(e: germline_release::error::Error) -> Error {
    match e {
        e @ germline_release::error::Error::Rollback { .. } => Error::Rollback(Box::new(e)),
        e => Error::Release(Box::new(e)),
    }
}

/// One log line for what `check_trust` established.
pub fn trust_note(cfg: &Config, t: &Trust) -> String {
    match t {
        Trust::Tuf(c) => format!(
            "trust metadata {}: target {} (targets v{}, timestamp v{}), highest version seen \
             before: {}",
            cfg.tuf.repo.display(),
            c.target,
            c.targets_version,
            c.timestamp_version,
            c.highest_seen_before.as_deref().unwrap_or("none")
        ),
        Trust::StateOnly(b) => format!(
            "no trust metadata on this node ([tuf] required = false in {}): expiry and targets \
             not checked; rollback state {} (highest version seen before: {})",
            cfg.source.display(),
            cfg.tuf.state.display(),
            b.as_deref().unwrap_or("none")
        ),
    }
}
