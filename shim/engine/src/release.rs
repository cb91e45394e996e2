//! Loading the release `germline run` serves: verified against the pinned key before anything
//! of it runs, or refused.

use std::path::{Path, PathBuf};

use germline_release::keys::PublicKey;
use germline_release::manifest::Manifest;
use germline_release::untrusted::Limits;

use crate::error::ReleaseError;

/// The refusal of the release at `path`.
fn refused(path: &Path) -> impl FnOnce(germline_release::Error) -> ReleaseError + '_ {
    move |source| ReleaseError::Refused {
        path: path.to_path_buf(),
        source: Box::new(source),
    }
}

/// A verified release, ready to launch. Cloned for each germline `germline serve` starts
/// (one per agent session under the `session` lifetime); the clones share the extracted tree.
#[derive(Debug, Clone)]
pub struct Release {
    pub manifest: Manifest,
    /// The release's identity for slots, records and dampening: the rootfs tree digest.
    pub digest: String,
    pub rootfs: PathBuf,
    /// Holds an image layout's extracted bundle for as long as the release runs.
    _extracted: Option<std::sync::Arc<tempfile::TempDir>>,
}

impl Release {
    /// Verifies `path` (an unpacked bundle with `rootfs/`, or an OCI image layout, which is
    /// extracted after verification) against the publisher key in `key`.
    pub fn load(path: &Path, key: &Path) -> Result<Release, ReleaseError> {
        Release::load_with(path, key, &Limits::default())
    }

    /// [`Release::load`], reading an image layout under `limits` (`--max-image-*`).
    pub fn load_with(path: &Path, key: &Path, limits: &Limits) -> Result<Release, ReleaseError> {
        let pem = std::fs::read(key).map_err(|source| ReleaseError::Key {
            path: key.to_path_buf(),
            source,
        })?;
        let key = PublicKey::from_pem(&pem, &key.display().to_string())
            .map_err(|e| ReleaseError::PublicKey(Box::new(e)))?;
        let (verified, rootfs, extracted) = if germline_release::release::is_image_layout(path) {
            let tmp = tempfile::Builder::new()
                .prefix("germline-release-")
                .tempdir_in(std::env::temp_dir())
                .map_err(ReleaseError::TempDir)?;
            let dest = tmp.path().join("bundle");
            let v = germline_release::release::verify_path_with(path, &key, Some(&dest), limits)
                .map_err(refused(path))?;
            (v, dest.join("rootfs"), Some(tmp))
        } else {
            let v = germline_release::release::verify_path_with(path, &key, None, limits)
                .map_err(refused(path))?;
            (v, path.join("rootfs"), None)
        };
        Ok(Release {
            digest: verified.rootfs_digest.clone(),
            manifest: verified.manifest,
            rootfs,
            _extracted: extracted.map(std::sync::Arc::new),
        })
    }

    /// `name@version`, for messages.
    pub fn label(&self) -> String {
        format!("{}@{}", self.manifest.name, self.manifest.version)
    }
}

#[cfg(test)]
impl Release {
    /// A release that was never verified and has no rootfs, for unit tests of the pipeline
    /// that run on fakes (nothing is started from it).
    pub(crate) fn unverified_for_tests(manifest: Manifest) -> Release {
        Release {
            manifest,
            digest: "sha256:unverified-test-release".into(),
            rootfs: PathBuf::from("/nonexistent"),
            _extracted: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_key_keeps_its_text_and_its_io_source() {
        let dir = tempfile::tempdir().expect("tempdir");
        let key = dir.path().join("absent.pub");
        let e = Release::load(dir.path(), &key).expect_err("no key");
        let text = e.to_string();
        assert!(
            text.starts_with(&format!("key {}: ", key.display())),
            "{text}"
        );
        let source = std::error::Error::source(&e).expect("a source");
        let io = source
            .downcast_ref::<std::io::Error>()
            .expect("an io error");
        assert_eq!(io.kind(), std::io::ErrorKind::NotFound);
    }
}
