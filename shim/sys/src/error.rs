//! The crate's one error type. `germline-sandbox` wraps it whole (`Error::Host`, transparent),
//! so a message reads as it did before the crates were split.

/// A system call, a /proc read or a cgroup file write that failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{step}: {source}")]
    Sys {
        step: String,
        source: std::io::Error,
    },
    #[error("cgroup: {0}")]
    Cgroup(String),
}

impl Error {
    /// Wraps an I/O error with the step that failed.
    pub fn sys(step: impl Into<String>, source: std::io::Error) -> Error {
        Error::Sys {
            step: step.into(),
            source,
        }
    }
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, Error>;
