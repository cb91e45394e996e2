//! The errors of `germline run` and `germline serve`, as `germline` prints them. The engine's
//! errors are wrapped typed, with their sources (`#[from]`).

use std::net::SocketAddr;
use std::path::PathBuf;

/// Everything `germline run` or `germline serve` can fail on before or after serving.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The deployer's policy does not load.
    #[error(transparent)]
    Policy(#[from] germline_policy::PolicyError),
    /// A release's runtime could not start, or its session has ended.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// The broker could not be started or reached.
    #[error(transparent)]
    Broker(#[from] germline_engine::error::SidecarError),
    /// The release was refused or could not be loaded.
    #[error(transparent)]
    Release(#[from] germline_engine::error::ReleaseError),
    /// A release's runtime (its germline or baseline process) could not start.
    #[error(transparent)]
    Start(#[from] germline_engine::error::StartError),
    /// The thread germlines are started on.
    #[error(transparent)]
    Launcher(#[from] germline_engine::error::LauncherError),
    /// The evidence layer could not open.
    #[error(transparent)]
    Evidence(#[from] germline_engine::error::EvidenceError),
    /// `--pool` is above the policy's `[limits] pool_max`.
    #[error(transparent)]
    Pool(#[from] germline_engine::limits::PoolTooLarge),
    /// The metrics endpoint could not be served.
    #[error(transparent)]
    Metrics(#[from] germline_engine::error::MetricsError),
    /// The OTLP exporter could not start.
    #[error(transparent)]
    Trace(#[from] germline_engine::error::TraceError),
    /// A bearer token or session id could not be drawn.
    #[error(transparent)]
    Random(#[from] germline_engine::ids::RandomError),
    /// Two releases `germline serve` was given declare one tool.
    #[error(
        "two releases declare the tool {tool:?}: {first} and {second}; an agent could not tell \
         which one it calls (serve them from separate endpoints)"
    )]
    ToolClash {
        tool: String,
        first: String,
        second: String,
    },
    /// A policy of a session `germline daemon` runs for a user asks for what root would do
    /// in the user's name (docs/daemon.md).
    #[error("{policy}: {what}, which a session of germline daemon does not take (docs/daemon.md)", policy = .policy.display())]
    UserPolicy { policy: PathBuf, what: String },
    /// A user's release lies below a directory others may not search: the germline's keeper,
    /// an unprivileged host user, could not bind its rootfs (docs/daemon.md).
    #[error(
        "the release's rootfs {} cannot be reached by the germline's unprivileged host user: \
         others may not search {} (add o+x, e.g. chmod o+x on each directory on the way), or \
         give an image layout, which is extracted where it can (docs/daemon.md)",
        .rootfs.display(), .dir.display()
    )]
    RootfsHidden { rootfs: PathBuf, dir: PathBuf },
    /// A session asked for a release index the router does not have (a bug of the router).
    #[error("no release {0}")]
    NoRelease(usize),
    /// A secret file (`token`, `users`) could not be read.
    #[error("{what} {}: {source}", .path.display())]
    Secret {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: {source}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A system facility failed (`signals`, `listener`, `tokio`).
    #[error("{what}: {source}")]
    Sys {
        what: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "token {}: needs at least {} printable characters and no spaces",
        .0.display(), crate::serve::MIN_TOKEN
    )]
    Token(PathBuf),
    /// `--oauth-issuer`/`--oauth-jwks`: the JWKS cannot serve.
    #[error("oauth: {0}")]
    OAuth(String),
    /// A line of the `--users` file (`FILE:LINE`), or the whole file.
    #[error("users {at}: {message}")]
    Users { at: String, message: String },
    #[error(
        "--outbox {}: expected an existing directory for the recipients' results",
        .0.display()
    )]
    Outbox(PathBuf),
    #[error(
        "{release}: the policy's lifetimes.{name:?} = \"long-lived\" needs `germline serve`, \
         whose germline outlives agent sessions; `germline run` is one session"
    )]
    LongLived { release: String, name: String },
}

impl Error {
    /// `what` failed with `source`.
    pub fn sys(what: &'static str) -> impl FnOnce(std::io::Error) -> Self {
        move |source| Error::Sys { what, source }
    }
}

/// Why a request could not reach its release's runtime.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The agent session is unknown or has ended (a JSON-RPC invalid request).
    #[error("germline: unknown or ended session: initialize again")]
    Ended,
    /// The runtime could not start (a runtime failure).
    #[error("germline: {0}")]
    Start(#[source] Box<Error>),
}
