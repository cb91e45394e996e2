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
    #[error("layer {layer}: {message}")]
    Layer { layer: String, message: String },
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
    /// An I/O error on `path` (also used by the `germline release` commands).
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}

/// `s` with every control or otherwise non-printable character escaped (`\u{1b}`, `\r`, ...),
/// so that text taken from an untrusted image (entry names, a tar parser's message quoting a
/// header field) can never drive the terminal that shows the error. Quotes and backslashes
/// are kept as they are: only what would not print is escaped.
pub fn printable(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        let esc = c.escape_debug();
        // `escape_debug` escapes quotes and backslashes too; those print fine.
        if esc.len() > 1 && !matches!(c, '"' | '\'' | '\\') {
            out.extend(esc);
        } else {
            out.push(c);
        }
    }
    out
}

/// Bytes from an untrusted image as printable text: valid UTF-8 through [`printable`],
/// anything else byte by byte (`\xff`).
pub fn printable_bytes(b: &[u8]) -> String {
    match std::str::from_utf8(b) {
        Ok(s) => printable(s),
        Err(_) => b.escape_ascii().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printable_escapes_what_would_not_print() {
        assert_eq!(printable("usr/bin/python3"), "usr/bin/python3");
        assert_eq!(printable("caf\u{e9} \"q\" \\"), "caf\u{e9} \"q\" \\");
        assert_eq!(
            printable("a\u{1b}[2Jb\r\n\u{7}"),
            "a\\u{1b}[2Jb\\r\\n\\u{7}"
        );
        assert_eq!(printable("x\u{202e}y"), "x\\u{202e}y");
        assert_eq!(printable_bytes(b"a\xff\x1b"), "a\\xff\\x1b");
        assert!(printable_bytes(b"\x1b]0;t\x07\x00")
            .chars()
            .all(|c| !c.is_control()));
    }
}
