//! The audit log: JSON lines, one event per call, request, slot access and copy end.
//!
//! Only declared host names, digests and sizes appear. An undeclared or malformed request's
//! host, path and body are copy-controlled text that could carry a secret, so they appear only
//! as a SHA-256 digest. Credentials never appear.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

#[derive(Debug)]
pub struct Audit {
    out: Mutex<Option<std::fs::File>>,
    path: Option<PathBuf>,
}

impl Audit {
    /// Appends to `path`, or logs nowhere with `None`.
    pub fn open(path: Option<&Path>) -> std::io::Result<Self> {
        let out = match path {
            Some(p) => Some(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)?,
            ),
            None => None,
        };
        Ok(Self {
            out: Mutex::new(out),
            path: path.map(Path::to_path_buf),
        })
    }

    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Writes one event; `fields` must hold only declared names, digests, sizes and verdicts.
    /// It is built only when a log is configured (and outside the lock), so an unlogged hot
    /// path pays nothing.
    pub fn event(&self, kind: &str, fields: impl FnOnce() -> Value) {
        if self.path.is_none() {
            return;
        }
        let mut fields = fields();
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        if let Value::Object(m) = &mut fields {
            m.insert("ts".into(), json!(ts));
            m.insert("event".into(), json!(kind));
        }
        let mut line = fields.to_string();
        line.push('\n');
        let Ok(mut guard) = self.out.lock() else {
            return;
        };
        if let Some(f) = guard.as_mut() {
            // One write(2) per line with O_APPEND: lines never interleave.
            let _ = f.write_all(line.as_bytes());
        }
    }
}

/// Hex SHA-256 of copy-controlled text, for the log.
pub fn digest_hex(data: &[u8]) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(data))
}
