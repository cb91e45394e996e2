//! Why a call failed: [`RunError`], and the typed causes inside it. The sandbox's, the
//! broker's and the call metadata's own errors are kept as sources, not flattened into
//! strings, and each displays exactly the text the shim printed before (the fixed outcome
//! names and JSON-RPC codes are chosen by the `RunError` variant, never by its cause).

use std::path::PathBuf;

use germline_broker::control::ControlError;

use crate::callmeta::CallMetaError;

/// Why a call failed; `Agent` texts reach the agent, the others are the shim's own.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Bad input from the agent: unknown tool, bad arguments, an unlabelled path.
    #[error("{0}")]
    Invalid(#[source] CallMetaError),
    /// The agent's own copy failed (crash, deadline, malformed output, an MCP error).
    #[error("the tool failed: {0}")]
    Tool(#[source] ToolFailure),
    /// The broker is down or refused.
    #[error("the broker is unavailable: {0}")]
    Broker(#[source] BrokerFailure),
    /// The germline or a copy was refused, or could not be started.
    #[error("{0}")]
    Sandbox(#[source] SandboxFailure),
    /// Dampening refuses the release until its penalty decays (docs/evidence.md).
    #[error("{0}")]
    Suppressed(String),
    /// A `[limits]` value of the policy refused this call (crate::limits).
    #[error("{0}")]
    Limit(#[source] crate::limits::LimitHit),
    /// A flow the manifest declares would carry an item to a host not cleared for it
    /// (crate::flows): refused before any copy runs, nothing held against the release.
    #[error("{0}")]
    Flow(Box<crate::flows::FlowRefusal>),
    /// The agent cancelled the call (`notifications/cancelled`): its copies were killed, and
    /// the agent gets no answer for it.
    #[error("the agent cancelled the request")]
    Cancelled,
}

impl RunError {
    /// The outcome name of a failed call, for metrics, traces and `germline status` (a fixed
    /// set: never the error's own text).
    pub fn outcome(&self) -> &'static str {
        match self {
            RunError::Invalid(_) => "invalid",
            RunError::Tool(_) => "tool_failed",
            RunError::Broker(_) => "broker_failed",
            RunError::Sandbox(_) => "sandbox_failed",
            RunError::Suppressed(_) => "suppressed",
            RunError::Limit(_) => "limit",
            RunError::Flow(_) => "flow_refused",
            RunError::Cancelled => "cancelled",
        }
    }

    /// The JSON-RPC error object the server itself answered with, when the copy that failed
    /// is the one serving the agent (or the baseline's process): the agent gets it unchanged
    /// (docs/run.md, "Errors the agent sees"). `None` for every failure of germline's own.
    pub fn server_error(&self) -> Option<&serde_json::Value> {
        match self {
            RunError::Tool(ToolFailure::Copy(germline_sandbox::Error::Server {
                error, ..
            }))
            | RunError::Tool(ToolFailure::Server(error)) => {
                let ok = error.get("code").is_some_and(|c| c.is_i64())
                    && error.get("message").is_some_and(|m| m.is_string());
                ok.then_some(error)
            }
            _ => None,
        }
    }
}

pub(crate) fn limit(e: crate::limits::LimitHit) -> RunError {
    RunError::Limit(e)
}

/// A failure of the sandbox side told in the shim's own words.
pub(crate) fn said(text: String) -> RunError {
    RunError::Sandbox(SandboxFailure::Said(text))
}

/// The broker's control channel failed or the broker answered with an error.
pub(crate) fn broker_failed(e: germline_broker::control::ControlError) -> RunError {
    RunError::Broker(BrokerFailure::Control(e))
}

/// Why the germline, a copy or a baseline process failed or was refused.
#[derive(Debug, thiserror::Error)]
pub enum SandboxFailure {
    /// The sandbox's own error (a copy refused at its checks, a fork that failed, ...).
    #[error(transparent)]
    Sandbox(#[from] germline_sandbox::Error),
    /// The copy's network namespace, for the broker, could not be opened.
    #[error("the copy's network namespace: {0}")]
    CopyNetns(#[source] std::io::Error),
    /// The baseline process's network namespace, for the broker, could not be opened.
    #[error("the process's network namespace: {0}")]
    ProcessNetns(#[source] std::io::Error),
    /// A probe and control re-run gave no verdict (crate::evidence).
    #[error(transparent)]
    Classify(#[from] germline_policy::witness::ClassifyError),
    /// A baseline's tool process could not be started.
    #[error(transparent)]
    Process(#[from] ProcessError),
    /// Told in the shim's own words (a germline that died or keeps dying, a baseline process
    /// that did not start, a state the runtime cannot be in).
    #[error("{0}")]
    Said(String),
}

/// Why the broker could not serve the call.
#[derive(Debug, thiserror::Error)]
pub enum BrokerFailure {
    /// The broker's control channel failed, or the broker answered with an error.
    #[error(transparent)]
    Control(#[from] ControlError),
    /// The broker refused the call (its reason, as it said it).
    #[error("{0}")]
    Refused(String),
    /// A broker whose connection broke could not be reached (or started) again.
    #[error("{0}")]
    Unreachable(#[source] SidecarError),
}

/// Why the agent's own copy (or the baseline's process) failed.
#[derive(Debug, thiserror::Error)]
pub enum ToolFailure {
    /// The sandbox's error about the copy (it died, missed its deadline, answered badly).
    #[error(transparent)]
    Copy(#[from] germline_sandbox::Error),
    /// A `CallToolResult` that is not an object (malformed).
    #[error("the tool's result is not an object")]
    NotAnObject,
    /// Told in the shim's own words, or the baseline process's failure as it was told.
    #[error("{0}")]
    Said(String),
    /// The baseline's process answered with this JSON-RPC error object.
    #[error("the tool process answered with an error: {0}")]
    Server(serde_json::Value),
}

impl ToolFailure {
    /// A copy's answer as a recipient's result records it: its failure in words.
    pub(crate) fn delivered(
        r: &Result<serde_json::Value, ToolFailure>,
    ) -> Result<serde_json::Value, String> {
        match r {
            Ok(v) => Ok(v.clone()),
            Err(e) => Err(e.to_string()),
        }
    }
}

impl From<String> for ToolFailure {
    fn from(text: String) -> ToolFailure {
        ToolFailure::Said(text)
    }
}

/// Why the broker sidecar could not be reached or started ([`crate::sidecar::Sidecar`]).
#[derive(Debug, thiserror::Error)]
pub enum SidecarError {
    /// No broker answers at the socket.
    #[error("the broker at {} is not reachable: {source}", socket.display())]
    Unreachable {
        socket: std::path::PathBuf,
        #[source]
        source: ControlError,
    },
    /// The session's directory for the broker's socket could not be made.
    #[error("{}: {source}", dir.display())]
    RunDir {
        dir: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// This executable, which the broker is started from, could not be found.
    #[error("own executable: {0}")]
    OwnExe(#[source] std::io::Error),
    #[error("cannot start the broker: {0}")]
    Spawn(#[source] std::io::Error),
    /// The broker exited before it answered (what it wrote to stderr).
    #[error("the broker exited ({status}): {stderr}")]
    Exited {
        status: std::process::ExitStatus,
        stderr: String,
    },
    #[error("the broker did not come up within 20 s")]
    NotUp,
}

/// Why a release was refused or could not be loaded ([`crate::release::Release::load_with`]).
#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    /// The publisher key file could not be read.
    #[error("key {}: {source}", path.display())]
    Key {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The publisher key is not a usable public key.
    #[error(transparent)]
    PublicKey(Box<germline_release::Error>),
    /// The directory an image layout is extracted to could not be made.
    #[error("temporary directory: {0}")]
    TempDir(#[source] std::io::Error),
    /// Verification refused the release (printable, whatever the image put into it).
    #[error("{}", germline_release::error::printable(&format!("release {} refused: {source}", path.display())))]
    Refused {
        path: PathBuf,
        #[source]
        source: Box<germline_release::Error>,
    },
}

/// Why a runtime could not start ([`crate::builder::RuntimeBuilder::build`]).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("the broker's CA certificate: {0}")]
    BrokerCa(#[source] ControlError),
    #[error("CA bundles for the copies: {0}")]
    CopyTrust(#[source] germline_broker::ca::CaError),
    /// A CA bundle or its directory could not be made readable to the copies.
    #[error("{}: {source}", path.display())]
    Permissions {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the broker's copy proxy address: {0}")]
    CopyProxy(#[source] ControlError),
    #[error("{release}: the manifest's entry is empty")]
    EmptyEntry { release: String },
    /// A release whose copies can neither be forked nor spawned (issue 28).
    #[error("{release}: {reason}")]
    NoExecution { release: String, reason: String },
    /// The release's state in files could not be opened (issue 27).
    #[error("{release}: state in files: {source}")]
    State {
        release: String,
        #[source]
        source: crate::state::StateError,
    },
    #[error("{release}: the spawned copies did not start: {source}")]
    Spawn {
        release: String,
        #[source]
        source: germline_sandbox::Error,
    },
    #[error("{release}: the germline did not start: {source}")]
    Germline {
        release: String,
        #[source]
        source: germline_sandbox::Error,
    },
    /// The host proxy listener of an unconfined baseline.
    #[error("proxy listener: {0}")]
    ProxyListener(#[source] std::io::Error),
    /// The baseline's persistent process could not be started.
    #[error(transparent)]
    Process(#[from] ProcessError),
    /// The baseline's persistent process failed its MCP handshake (as the process module
    /// tells it).
    #[error("{release}: initialisation failed: {reason}")]
    Init { release: String, reason: String },
    #[error("--copy-cpus {cpus:?}: sched_setaffinity: {source}")]
    Affinity {
        cpus: Vec<usize>,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Launcher(#[from] LauncherError),
    /// The state file for `germline status`.
    #[error(transparent)]
    Status(#[from] StatusError),
}

/// Why the launcher thread could not run a job ([`crate::launcher::Launcher`]).
#[derive(Debug, thiserror::Error)]
pub enum LauncherError {
    #[error("launcher thread: {0}")]
    Thread(#[source] std::io::Error),
    #[error("the launcher is gone")]
    Gone,
    #[error("the launcher thread has stopped")]
    Stopped,
    #[error("the launcher thread failed")]
    Failed,
}

/// Why a baseline's tool process could not be started ([`crate::process::ToolProcess::start`]).
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    #[error("rootfs {}: {source}", path.display())]
    Rootfs {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the rootfs lacks the directory /{0}")]
    MissingDir(&'static str),
    #[error("{}: NUL in path", .0.display())]
    NulInPath(PathBuf),
    #[error("shared temporary directory {}: not a directory", .0.display())]
    SharedTmp(PathBuf),
    #[error("state directory {}: not a directory", .0.display())]
    StateDir(PathBuf),
    #[error("Landlock: {0}")]
    Landlock(#[source] std::io::Error),
    #[error("the manifest has no entry")]
    NoEntry,
    #[error("cannot start {argv}: {source}")]
    Spawn {
        argv: String,
        #[source]
        source: std::io::Error,
    },
    /// The started process's stdin or stdout pipe is missing.
    #[error("no {0}")]
    NoPipe(&'static str),
    #[error("pid out of range")]
    Pid,
}

/// Why the state file for `germline status` could not be started ([`crate::status`]).
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// Its directory could not be made.
    #[error("{}: {source}", dir.display())]
    Dir {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Why the evidence layer could not open, record, read or check a witness record
/// ([`crate::evidence`]).
#[derive(Debug, thiserror::Error)]
pub enum EvidenceError {
    #[error("--probe-tries: at least 1 try is needed")]
    NoTries,
    #[error("--witness-key {0:?}: a key name is letters, digits, '-' or '_'")]
    KeyName(String),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The deployment key could not be made or loaded.
    #[error("witness key {}: {source}", path.display())]
    WitnessKey {
        path: PathBuf,
        #[source]
        source: Box<germline_release::Error>,
    },
    /// The deployment key's public half given to `germline witness verify`.
    #[error("--witness-key {}: {source}", path.display())]
    PublicKey {
        path: PathBuf,
        #[source]
        source: Box<germline_release::Error>,
    },
    /// The key's fingerprint, for a record.
    #[error(transparent)]
    Fingerprint(Box<germline_release::Error>),
    /// The dampening ledger `Evidence::open` loads.
    #[error("{}: not a dampening ledger (expected the JSON germline writes): {source}", path.display())]
    Ledger {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// The dampening ledger `germline witness list` reads.
    #[error("{}: {source}", path.display())]
    LedgerJson {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// A pending job's file (`<dir>/pending/*.json`) is not what germline writes.
    #[error("{}: not a pending evidence job (expected the JSON germline writes): {source}", path.display())]
    Pending {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// A record or its metadata could not be serialised.
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error("evidence is not enabled")]
    Disabled,
    #[error("witness record {} refused: {why}", path.display())]
    Refused {
        path: PathBuf,
        #[source]
        why: RecordRefusal,
    },
    #[error("the record's metadata: {0}")]
    Metadata(#[source] serde_json::Error),
    #[error(
        "item {name:?} (argument {arg}): {}: {source} (--items names a directory of the items by SHA-256)",
        path.display()
    )]
    Item {
        name: String,
        arg: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("item {name:?}: {} does not hash to the record's digest {sha256}", path.display())]
    ItemDigest {
        name: String,
        path: PathBuf,
        sha256: String,
    },
    #[error("item {name:?}: the record's arguments hold no value at {arg}")]
    ItemArg { name: String, arg: String },
    #[error(transparent)]
    Release(#[from] ReleaseError),
    #[error("--release {}: its digest {digest} is not the record's release {recorded}", path.display())]
    ReleaseDigest {
        path: PathBuf,
        digest: String,
        recorded: String,
    },
    #[error("temporary directory: {0}")]
    TempDir(#[source] std::io::Error),
    #[error("re-run: {0}")]
    Rerun(#[source] Box<RunError>),
}

impl EvidenceError {
    /// `path` failed with `source`.
    pub(crate) fn io(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> Self + '_ {
        move |source| EvidenceError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Why a witness record file was refused ([`crate::evidence::read_signed`]).
#[derive(Debug, thiserror::Error)]
pub enum RecordRefusal {
    #[error("not UTF-8")]
    NotUtf8,
    #[error("expected two lines: the record's JSON and its hex signature")]
    Lines,
    #[error("line 2: the signature must be lowercase hex")]
    SignatureCase,
    #[error("line 2: the signature is not hex")]
    SignatureHex,
    /// The key's own reason, if it gave one.
    #[error("the signature does not verify with the given key{}", if .0.is_empty() { String::new() } else { format!(" ({})", .0) })]
    Signature(String),
    #[error("line 1: {0}")]
    Json(#[source] serde_json::Error),
    #[error("version {found} (this germline reads {reads})")]
    Version { found: u32, reads: u32 },
}

/// Why the metrics endpoint could not be served ([`crate::metrics::serve`]).
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("--metrics-listen {addr}: {source}")]
    Listen {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("metrics thread: {0}")]
    Thread(#[source] std::io::Error),
}

/// Why the OTLP exporter could not start ([`crate::trace::Tracer::start`]).
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("--otlp-endpoint {0:?}: expected http://HOST:PORT or https://HOST:PORT")]
    Scheme(String),
    #[error("--otlp-endpoint {0:?}: expected http(s)://HOST:PORT")]
    Authority(String),
    #[error("OTLP thread: {0}")]
    Thread(#[source] std::io::Error),
    #[error("OTEL_EXPORTER_OTLP_PROTOCOL={0:?}: expected http/protobuf, http/json or grpc")]
    Protocol(String),
    #[error("OTEL_EXPORTER_OTLP_CERTIFICATE {0:?}: {1}")]
    Certificate(String, String),
    #[error("OTLP TLS: {0}")]
    Tls(String),
    #[error("OTLP exporter: {0}")]
    Exporter(String),
}
