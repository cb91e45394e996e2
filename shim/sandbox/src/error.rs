//! The crate's one error type.

/// Everything that can go wrong when creating, checking or running a germline and its copies.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A system call, a /proc read or a cgroup file write that failed (germline-sys's error,
    /// its text unchanged).
    #[error(transparent)]
    Host(#[from] germline_sys::Error),
    #[error("the germline failed while starting ({step}): {source}")]
    Start {
        step: &'static str,
        source: std::io::Error,
    },
    #[error("the germline's initialisation failed: {0}")]
    Init(String),
    #[error("release refused: {0}")]
    Refused(String),
    /// The germline process is gone (killed, crashed, or its keeper died): not a refusal of
    /// the release, a fresh germline may be started (docs/sandbox.md, "When a germline dies").
    #[error("{0}")]
    GermlineDied(String),
    #[error("copy refused before it got data: {0}")]
    CopyRefused(String),
    #[error("the copy passed its deadline and was killed with its descendants")]
    Deadline,
    /// No copy was ready for the call by its deadline (a spawned copy still starting); the
    /// call fails closed, nothing ran with its data.
    #[error("no copy was ready by the call's deadline: {0}")]
    NotReady(String),
    #[error("the copy exceeded its memory limit and was killed")]
    MemoryLimit,
    #[error("the copy crashed or closed its channel: {0}")]
    Crashed(String),
    #[error("the copy sent a malformed message: {0}")]
    Malformed(String),
    #[error("protocol: {0}")]
    Protocol(String),
    /// The copy answered a request with a JSON-RPC error object (kept whole, so that the
    /// agent's own copy's error can reach the agent unchanged: docs/run.md, "Errors").
    #[error("protocol: {method} failed: {error}")]
    Server {
        method: String,
        error: serde_json::Value,
    },
    /// The agent cancelled the request (`notifications/cancelled`) while the copy ran.
    #[error("the agent cancelled the request")]
    Cancelled,
    #[error("invalid launch spec: {0}")]
    Spec(String),
}

impl Error {
    /// Wraps an I/O error with the step that failed.
    pub fn sys(step: impl Into<String>, source: std::io::Error) -> Error {
        Error::Host(germline_sys::Error::sys(step, source))
    }
}

/// The crate's result type.
pub type Result<T> = std::result::Result<T, Error>;
