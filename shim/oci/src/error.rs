//! The runtime's one error type. Its texts are what `germline-runtime` prints (and writes to
//! `--log`, where podman and conmon read them), so each variant's message is part of the
//! runtime's contract: a variant carrying an underlying error shows it after a colon, as
//! runc's messages do, and keeps it as its `source`.

use std::path::{Path, PathBuf};

/// Everything a runtime command can fail on.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An I/O error on a file or directory.
    #[error("{}: {source}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// An operation on a path failed (`bind mount DIR: ...`, `cannot exec FILE: ...`).
    #[error("{op} {}: {source}", .path.display())]
    Op {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// An operation on no path failed (`exec fifo: ...`, `own executable: ...`).
    #[error("{op}: {source}")]
    Sys {
        op: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: NUL in path", .0.display())]
    NulInPath(PathBuf),
    #[error("{}: {}", .path.display(), .source.to_string().trim())]
    Toml {
        path: PathBuf,
        #[source]
        source: toml::de::Error,
    },
    #[error("{}: {source}", .path.display())]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("{file}: not JSON: {source}")]
    NotJson {
        file: String,
        #[source]
        source: serde_json::Error,
    },
    /// Writing JSON out (the state file, `state`'s output).
    #[error("{0}")]
    Encode(#[source] serde_json::Error),
    #[error("{}: larger than 4 MiB", .0.display())]
    TooLarge(PathBuf),
    /// A field of a configuration file (`config.json`, the node configuration).
    #[error("{file}: field `{field}`: {message}")]
    Field {
        file: String,
        field: &'static str,
        message: String,
    },
    #[error("{file}: annotation `{name}`: {message}")]
    Annotation {
        file: String,
        name: &'static str,
        message: String,
    },
    #[error("invalid container id {0:?}: expected letters, digits, '_', '.', '-', '+'")]
    InvalidId(String),
    #[error("container \"{0}\" does not exist")]
    NoSuchContainer(String),
    #[error("container with id \"{0}\" already exists")]
    AlreadyExists(String),
    #[error("container \"{0}\" is not running")]
    NotRunning(String),
    #[error("container \"{0}\" has already been started")]
    AlreadyStarted(String),
    #[error("container \"{0}\" is not running: its process exited")]
    ProcessExited(String),
    #[error("container \"{0}\" exited before it started")]
    ExitedBeforeStart(String),
    #[error("container \"{0}\" did not take the start within 10 s")]
    StartTimeout(String),
    #[error("cannot delete container \"{id}\" that is not stopped: {status}")]
    NotStopped { id: String, status: &'static str },
    #[error("container \"{id}\": pid {pid} did not die")]
    DidNotDie { id: String, pid: i32 },
    #[error("the container's process exited at once")]
    ExitedAtOnce,
    #[error("refusing to signal pid {0}")]
    BadPid(i32),
    #[error("signal {sig} to pid {pid}: {source}")]
    Signal {
        sig: i32,
        pid: i32,
        #[source]
        source: std::io::Error,
    },
    #[error("unknown signal {0:?}")]
    UnknownSignal(String),
    #[error(
        "network namespace {}: not a network namespace file (config.json \
         linux.namespaces[network].path)",
        .0.display()
    )]
    NotNetns(PathBuf),
    #[error(
        "the container's network namespace has no IPv4 address besides loopback for \
         dev.germline.mcp/listen 0.0.0.0:PORT (name an address, or give the pod a network)"
    )]
    NoAddress,
    #[error(
        "exec is not supported: a germline container runs only its signed release, whose \
         code runs in copies forked per call"
    )]
    ExecUnsupported,
    #[error(
        "a terminal (-t) is not supported: germline serves MCP on the container's plain \
         stdio; run with -i and without -t"
    )]
    Terminal,
    #[error("{command} is not supported: {reason}")]
    Unsupported {
        command: &'static str,
        reason: &'static str,
    },
    #[error("invalid format {0:?}: expected table or json")]
    Format(String),
    #[error("building the OCI {what}: {source}")]
    OciSpec {
        what: &'static str,
        #[source]
        source: oci_spec::OciSpecError,
    },
    #[error("{}: exists; remove it first (spec writes a new config.json)", .0.display())]
    ConfigExists(PathBuf),
    #[error("ps printed no header with a PID column (ps options {0:?})")]
    PsHeader(Vec<String>),
    #[error("hook {0:?}: only the precreate stage is supported")]
    HookStage(String),
    #[error("runc {0}")]
    Runc(std::process::ExitStatus),
    #[error(
        "bundle {} is not a germline release: its rootfs {} has no .germline/manifest.json \
         (set non_germline = \"runc\" in {} to hand such bundles to runc)",
        .bundle.display(), .rootfs.display(), .config.display()
    )]
    NotRelease {
        bundle: PathBuf,
        rootfs: PathBuf,
        config: PathBuf,
    },
    #[error(
        "{} is not a germline release (no .germline/manifest.json), and this hook requires \
         one (--require-release)",
        .0.display()
    )]
    ReleaseRequired(PathBuf),
    #[error("config.json on stdin is larger than 4 MiB")]
    StdinTooLarge,
    #[error("cannot unmount {}", .0.display())]
    CannotUnmount(PathBuf),
    /// An error of the precreate hook's decision.
    #[error("precreate hook: {0}")]
    Hook(#[source] Box<Error>),
    /// The hook refused, and could not say so in the configuration it writes back.
    #[error("{0} (and config.json has no `root` to mark refused)")]
    NoRootToMark(#[source] Box<Error>),
    #[error("{refusal} (and writing config.json: {source})")]
    MarkRefused {
        refusal: Box<Error>,
        #[source]
        source: serde_json::Error,
    },
    #[error("refused by the precreate hook: {0}")]
    RefusedByHook(String),
    #[error("refused (overrides = \"refuse\" in {}): {}", .config.display(), .ignored.join("; "))]
    Overrides {
        config: PathBuf,
        ignored: Vec<String>,
    },
    #[error("node policy (`policy` in {}): {source}", .config.display())]
    Policy {
        config: PathBuf,
        #[source]
        source: Box<germline_policy::policy::PolicyError>,
    },
    #[error(
        "release refused: {} has {layers} image layers; a germline release image has exactly one",
        .rootfs.display()
    )]
    ImageLayers { rootfs: PathBuf, layers: usize },
    #[error(
        "release refused: no pinned publisher key (put one in /etc/germline/keys/*.pub or set \
         `keys` in {})",
        .0.display()
    )]
    NoKey(PathBuf),
    #[error("pinned key {}: {source}", .path.display())]
    PinnedKey {
        path: PathBuf,
        #[source]
        source: Box<germline_release::error::Error>,
    },
    /// No pinned key verified the release (the first key's reason).
    #[error("release refused: {0}")]
    NotVerified(#[source] Box<germline_release::error::Error>),
    /// The node's trust metadata refused the release `release` (`NAME VERSION`).
    #[error("release refused: {release}: {source}")]
    Refused {
        release: String,
        #[source]
        source: Box<Error>,
    },
    #[error(
        "incomplete trust metadata on this node: {} exists but {} does not (`[tuf]` in {})",
        .present.display(), .missing.display(), .config.display()
    )]
    IncompleteTrust {
        present: PathBuf,
        missing: PathBuf,
        config: PathBuf,
    },
    #[error(
        "no trust metadata on this node: neither {} nor {} exists (install the publishers' \
         TUF repository and pinned root there, or set `[tuf] repo`/`root` in {}; `[tuf] \
         required = false` runs releases checked against the pinned keys and the rollback \
         state only)",
        .metadata.display(), .root.display(), .config.display()
    )]
    NoTrust {
        metadata: PathBuf,
        root: PathBuf,
        config: PathBuf,
    },
    /// The release crate's rollback refusal ([`germline_release::error::Error::Rollback`]),
    /// told as the node sees it.
    #[error("{}", rollback_text(.0))]
    Rollback(#[source] Box<germline_release::error::Error>),
    /// The release crate refused (the rollback state).
    #[error("{0}")]
    Release(#[source] Box<germline_release::error::Error>),
    /// The TUF chain from the pinned root refused.
    #[error("{source} (pinned root {})", .root.display())]
    Tuf {
        root: PathBuf,
        #[source]
        source: Box<germline_release::error::Error>,
    },
}

/// A rollback refusal names the release, the version the image carries, the version this node
/// already accepted and the state file that records it.
fn rollback_text(e: &germline_release::error::Error) -> String {
    match e {
        germline_release::error::Error::Rollback {
            name,
            offered,
            seen,
            state,
        } => format!(
            "rollback: the image carries {name} {offered}, older than {name} {seen}, which this \
             node already accepted (rollback state {})",
            state.display()
        ),
        e => e.to_string(),
    }
}

/// The result type of this crate.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// An I/O error on `path`, for `map_err` (the path is copied only on error).
    pub fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Self + '_ {
        move |source| Error::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    /// `op` on `path` failed with `source`.
    pub fn op(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Op {
            op,
            path: path.into(),
            source,
        }
    }

    /// `op` failed with `source`.
    pub fn sys(op: &'static str) -> impl FnOnce(std::io::Error) -> Self {
        move |source| Error::Sys { op, source }
    }

    /// This error, as the precreate hook reports it.
    pub fn hook(self) -> Self {
        Error::Hook(Box::new(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The composed texts podman, containerd and the engine tests see are the ones the runtime
    /// printed when its errors were strings.
    #[test]
    fn wrapped_errors_keep_the_runtime_texts() {
        let rollback = Error::Refused {
            release: "mcp-server-time 2026.10.20".into(),
            source: Box::new(Error::Rollback(Box::new(
                germline_release::error::Error::Rollback {
                    name: "mcp-server-time".into(),
                    offered: "2026.10.20".into(),
                    seen: "2026.11.01".into(),
                    state: "/var/lib/germline/release-state".into(),
                },
            ))),
        };
        assert_eq!(
            rollback.hook().to_string(),
            "precreate hook: release refused: mcp-server-time 2026.10.20: rollback: the image \
             carries mcp-server-time 2026.10.20, older than mcp-server-time 2026.11.01, which \
             this node already accepted (rollback state /var/lib/germline/release-state)"
        );
        let lock = Error::Refused {
            release: "t 1".into(),
            source: Box::new(Error::op(
                "locking",
                "/s/lock",
                std::io::Error::from_raw_os_error(libc::EACCES),
            )),
        };
        assert_eq!(
            lock.to_string(),
            "release refused: t 1: locking /s/lock: Permission denied (os error 13)"
        );
        let fifo = Error::sys("exec fifo")(std::io::Error::from_raw_os_error(libc::ENOENT));
        assert_eq!(
            fifo.to_string(),
            "exec fifo: No such file or directory (os error 2)"
        );
        let unmarked = Error::NoRootToMark(Box::new(Error::StdinTooLarge.hook()));
        assert_eq!(
            unmarked.to_string(),
            "precreate hook: config.json on stdin is larger than 4 MiB (and config.json has no \
             `root` to mark refused)"
        );
        let refused = Error::Overrides {
            config: "/etc/germline/runtime.toml".into(),
            ignored: vec!["a".into(), "b".into()],
        };
        assert_eq!(
            refused.to_string(),
            "refused (overrides = \"refuse\" in /etc/germline/runtime.toml): a; b"
        );
    }

    #[test]
    fn an_underlying_error_is_the_source() {
        use std::error::Error as _;
        let e = Error::io(Path::new("/x"))(std::io::Error::from_raw_os_error(libc::ENOENT)).hook();
        let inner = e.source().expect("the hook's error");
        let io = inner.source().expect("the io error");
        assert!(io.downcast_ref::<std::io::Error>().is_some(), "{io:?}");
    }
}
