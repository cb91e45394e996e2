//! One flat error enum for the release component. Every variant names the file, field or
//! entry that failed and what was expected, because these messages are what a user sees when a
//! release is refused.

use std::path::PathBuf;

/// Everything that can go wrong while packing, signing, publishing or verifying a release.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{file}: field `{field}`: {message}")]
    Manifest {
        file: String,
        field: String,
        message: String,
    },
    #[error("{file}: not valid JSON for a {what}: {message}")]
    Json {
        file: String,
        what: &'static str,
        message: String,
    },
    #[error("{file}: {message}")]
    Key { file: String, message: String },
    #[error("wrong password for {file} (COSIGN_PASSWORD), or the key file is corrupt: secretbox authentication failed")]
    KeyPassword { file: String },
    #[error("{file}: field `{field}`: {message}")]
    Bundle {
        file: String,
        field: String,
        message: String,
    },
    #[error("{file}: signature does not verify with the pinned public key {fingerprint}{detail}")]
    BadSignature {
        file: String,
        fingerprint: String,
        detail: String,
    },
    #[error("rootfs digest mismatch: manifest pins {expected}, rootfs {root} has {actual}")]
    RootfsDigest {
        root: PathBuf,
        expected: String,
        actual: String,
    },
    #[error("{path}: {message}")]
    Rootfs { path: PathBuf, message: String },
    #[error("image layout {layout}: {message}")]
    Image { layout: PathBuf, message: String },
    #[error("image layout {layout}: blob {digest}: expected {expected}, found {actual}")]
    BlobMismatch {
        layout: PathBuf,
        digest: String,
        expected: String,
        actual: String,
    },
    #[error("layer {layer}: entry `{entry}`: {message}")]
    LayerEntry {
        layer: String,
        entry: String,
        message: String,
    },
    #[error("TUF repository {repo}: {message}")]
    Tuf { repo: String, message: String },
    #[error(
        "rollback refused: {name} {offered} is older than {seen}, already seen (state {state})"
    )]
    Rollback {
        name: String,
        offered: String,
        seen: String,
        state: PathBuf,
    },
    #[error("{0}")]
    Usage(String),
}

/// The result type of this crate.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}
