//! `germline daemon`: MCP clients that run as an ordinary user (Claude Desktop, VS Code,
//! Cursor) start `germline run`, which then asks this root service for its session over a
//! unix socket (docs/daemon.md says why a daemon and not a rootless mode).
//!
//! The protocol, one `SOCK_SEQPACKET` connection per session:
//! 1. the client sends one [`Request`] (JSON) with its stdin, stdout and stderr attached as
//!    `SCM_RIGHTS`;
//! 2. the daemon learns who the client is from the kernel (`SO_PEERCRED`, `SO_PEERGROUPS`),
//!    never from the request, which carries no identity at all;
//! 3. it answers [`Reply::Started`] and runs `germline run --as-user UID:GID:GROUPS ...` as
//!    root, with the client's descriptors as the session's standard streams (the MCP stdio)
//!    and the user's own state directory; every file the user named is opened with the
//!    user's permissions ([`germline_sys::user`]);
//! 4. when the session ends it answers [`Reply::Exited`] with its exit status, which the
//!    client exits with; if the connection closes first (the client died), it stops the
//!    session (SIGTERM, then SIGKILL).

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Args;
use nix::sys::socket::{
    self, sockopt, AddressFamily, Backlog, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag,
    SockType, UnixAddr,
};
use serde::{Deserialize, Serialize};

use germline_sys::paths;
use germline_sys::user::FsCreds;

use crate::cli::RunArgs;

/// Largest message either side sends (a request is a few hundred bytes).
pub const MAX_MESSAGE: usize = 64 << 10;
/// How long a session has to stop after SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(20);
/// How long a connection may wait before its request, in milliseconds.
const REQUEST_WAIT_MS: i32 = 10_000;
/// Most pre-forked copies a user may ask for.
const MAX_POOL: usize = 16;
/// Most probe and control re-runs per trigger a user may ask for.
const MAX_PROBE_TRIES: usize = 64;

/// What a client asks for. It carries no identity: who asks is the kernel's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "request", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Request {
    /// A `germline run` session on the attached stdin, stdout and stderr.
    Run(Box<RunRequest>),
    /// `germline status` of the asking user's own sessions.
    Status,
}

/// The options of `germline run` a user may set through the daemon. Options that would make
/// root write where the user says (`--state-dir`, `--evidence`, `--audit`, `--outbox`),
/// trust a socket the user names (`--broker`), listen or connect as root
/// (`--metrics-listen`, `--otlp-endpoint`), or run the release outside the sandbox (the
/// baseline modes) have no field here: a request cannot carry them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunRequest {
    /// Absolute paths (the client resolves relative ones against its working directory).
    pub release: PathBuf,
    pub policy: PathBuf,
    pub key: PathBuf,
    /// `germline` or `nosplit`.
    pub mode: String,
    pub pool: usize,
    pub copy_cpus: Vec<usize>,
    pub germline_restart_window: u64,
    pub witness_key: String,
    pub probe_tries: usize,
    pub no_evidence: bool,
    pub image_limits: ImageLimits,
}

/// `--max-image-*` (docs/release.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImageLimits {
    pub entries: u64,
    pub path: u64,
    pub path_total: u64,
    pub bytes: u64,
    pub unsigned_bytes: u64,
    pub json: u64,
}

/// What the daemon answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Reply {
    /// The session runs as this process (of the daemon's).
    Started { session: u32 },
    /// The session ended with this exit status (128 + N: killed by signal N).
    Exited { code: i32 },
    /// The request was refused; nothing ran.
    Refused { reason: String },
    /// The asking user's sessions, as `germline status --json` shows them.
    Status { sessions: Vec<serde_json::Value> },
}

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("germline run as a user takes no {flag}: {why} (docs/daemon.md)")]
    Option {
        flag: &'static str,
        why: &'static str,
    },
    #[error(
        "cannot reach germline daemon at {}: {source}; as a user, `germline run` asks the \
         system service for its session: start it with `systemctl enable --now \
         germline-daemon.socket` (docs/daemon.md)", socket.display()
    )]
    Unreachable { socket: PathBuf, source: nix::Error },
    #[error("germline daemon at {}: {what}: {source}", socket.display())]
    Io {
        socket: PathBuf,
        what: &'static str,
        source: nix::Error,
    },
    #[error("germline daemon refused the session: {0}")]
    Refused(String),
    #[error("germline daemon at {}: {0}", socket.display())]
    Protocol { socket: PathBuf, what: String },
    #[error("{what}: {source}")]
    Setup {
        what: String,
        source: std::io::Error,
    },
    #[error("germline daemon must run as root: it runs the sessions (docs/daemon.md)")]
    NotRoot,
}

impl DaemonError {
    /// Whether the error came before any session could have read the client's stdio (a
    /// refused option, no daemon, a refusal of the request), so the client may be answered.
    pub fn before_any_session(&self) -> bool {
        matches!(
            self,
            Self::Option { .. } | Self::Unreachable { .. } | Self::Refused(_) | Self::Setup { .. }
        )
    }
}

// ------------------------------------------------------------------------------------------
// The client: `germline run` started by a user.

/// Whether `germline run` asks the daemon: when it is not root, or when `--daemon` names one.
pub fn wanted(a: &RunArgs) -> bool {
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    a.daemon.is_some() || unsafe { libc::geteuid() } != 0
}

/// The daemon's socket: `--daemon`, else [`default_socket`].
pub fn socket_of(a: &RunArgs) -> PathBuf {
    a.daemon.clone().unwrap_or_else(default_socket)
}

/// `$GERMLINE_DAEMON_SOCKET`, else the system one. Empty counts as unset (a client config's
/// `"env": {"GERMLINE_DAEMON_SOCKET": ""}`): connecting to "" would fail with a bare ENOENT.
pub fn default_socket() -> PathBuf {
    std::env::var_os(paths::DAEMON_SOCKET_ENV)
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from(paths::DAEMON_SOCKET), PathBuf::from)
}

/// The request for `a`, or the option the daemon does not take.
pub fn request_of(a: &RunArgs) -> Result<RunRequest, DaemonError> {
    let no = |flag, why| Err(DaemonError::Option { flag, why });
    if a.broker.broker.is_some() {
        return no(
            "--broker",
            "each session of the daemon starts a broker of its own",
        );
    }
    if a.broker.state_dir != Path::new(paths::BROKER_STATE) {
        return no(
            "--state-dir",
            "the daemon keeps each user's state in a directory of their own",
        );
    }
    if a.broker.audit.is_some() {
        return no("--audit", "the daemon would write it as root");
    }
    if a.evidence.evidence.is_some() {
        return no(
            "--evidence",
            "witness records stay in the user's own state directory",
        );
    }
    if a.outbox.is_some() {
        return no("--outbox", "the daemon would write it as root");
    }
    if a.telemetry.metrics_listen.is_some() {
        return no(
            "--metrics-listen",
            "the daemon would listen as root; use `germline serve --metrics-listen` for metrics",
        );
    }
    if a.telemetry.otlp_endpoint.is_some() {
        return no(
            "--otlp-endpoint",
            "the daemon would connect as root to where the user says, and its sessions \
             export no traces; use `germline serve --otlp-endpoint` for traces",
        );
    }
    if a.as_user.is_some() {
        return no(
            "--as-user",
            "only the daemon sets it, from the kernel's answer",
        );
    }
    let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let l = &a.image_limits;
    Ok(RunRequest {
        release: abs(&a.release),
        policy: abs(&a.policy),
        key: abs(&a.key),
        mode: a.mode.name().to_string(),
        pool: a.pool,
        copy_cpus: a.copy_cpus.clone(),
        germline_restart_window: a.germline_restart_window,
        witness_key: a.evidence.witness_key.clone(),
        probe_tries: a.evidence.probe_tries,
        no_evidence: a.evidence.no_evidence,
        image_limits: ImageLimits {
            entries: l.max_image_entries,
            path: l.max_image_path,
            path_total: l.max_image_path_total,
            bytes: l.max_image_bytes,
            unsigned_bytes: l.max_image_unsigned_bytes,
            json: l.max_image_json,
        },
    })
}

/// `germline run` through the daemon: sends the request with this process's standard
/// streams and waits for the session's exit status, which it returns.
pub fn client(a: &RunArgs) -> Result<i32, DaemonError> {
    let sent = request_of(a)
        .and_then(|req| exchange(&socket_of(a), &Request::Run(Box::new(req)), &[0, 1, 2]));
    match sent {
        Ok(Reply::Exited { code }) => Ok(code),
        Ok(other) => Err(DaemonError::Protocol {
            socket: socket_of(a),
            what: format!("an answer to a run request that does not end it: {other:?}"),
        }),
        Err(e) => {
            // No session ever had the client's stdio: tell the MCP client why, as a root
            // `germline run` that cannot start does (docs/run.md), not only "Connection
            // closed". After a lost connection the session may have read stdin: say nothing.
            if e.before_any_session() {
                if let Ok(sigfd) = crate::stdio::stop_signals() {
                    crate::stdio::refuse_start(&e.to_string(), sigfd);
                }
            }
            Err(e)
        }
    }
}

/// Whether `germline status` asks the daemon (the caller is not root).
pub fn status_wanted() -> bool {
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    euid != 0
}

/// `germline status` as a user: their own sessions, from the daemon
/// (`$GERMLINE_DAEMON_SOCKET`, else the system one).
pub fn status_client(json_out: bool) -> Result<(), DaemonError> {
    let sock = default_socket();
    match exchange(&sock, &Request::Status, &[])? {
        Reply::Status { sessions } if json_out => {
            println!(
                "{}",
                serde_json::to_string_pretty(&sessions).unwrap_or_default()
            );
            Ok(())
        }
        Reply::Status { sessions } => {
            print!("{}", germline_engine::status::render(&sessions));
            Ok(())
        }
        other => Err(DaemonError::Protocol {
            socket: sock,
            what: format!("not an answer to a status request: {other:?}"),
        }),
    }
}

/// Sends `req` with `fds` attached and returns the daemon's final answer (a refusal is an
/// error; [`Reply::Started`] is passed over).
fn exchange(sock: &Path, req: &Request, fds: &[RawFd]) -> Result<Reply, DaemonError> {
    let sock = sock.to_path_buf();
    let fd = connect(&sock).map_err(|source| DaemonError::Unreachable {
        socket: sock.clone(),
        source,
    })?;
    let io = |what| {
        let socket = sock.clone();
        move |source| DaemonError::Io {
            socket,
            what,
            source,
        }
    };
    let body = serde_json::to_vec(req).map_err(|e| DaemonError::Protocol {
        socket: sock.clone(),
        what: e.to_string(),
    })?;
    let rights = [ControlMessage::ScmRights(fds)];
    socket::sendmsg::<()>(
        fd.as_raw_fd(),
        &[IoSlice::new(&body)],
        if fds.is_empty() { &[] } else { &rights },
        MsgFlags::MSG_NOSIGNAL,
        None,
    )
    .map_err(io("send the request"))?;
    let mut buf = vec![0u8; MAX_MESSAGE];
    loop {
        let n = socket::recv(fd.as_raw_fd(), &mut buf, MsgFlags::empty())
            .map_err(io("read its answer"))?;
        if n == 0 {
            return Err(DaemonError::Protocol {
                socket: sock.clone(),
                what: "it closed the connection without the session's exit status".into(),
            });
        }
        let reply: Reply =
            serde_json::from_slice(&buf[..n]).map_err(|e| DaemonError::Protocol {
                socket: sock.clone(),
                what: format!("its answer is not a reply: {e}"),
            })?;
        match reply {
            Reply::Started { .. } => continue,
            Reply::Refused { reason } => return Err(DaemonError::Refused(reason)),
            done => return Ok(done),
        }
    }
}

fn seqpacket() -> nix::Result<OwnedFd> {
    socket::socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
}

fn connect(path: &Path) -> nix::Result<OwnedFd> {
    let fd = seqpacket()?;
    socket::connect(fd.as_raw_fd(), &UnixAddr::new(path)?)?;
    Ok(fd)
}

// ------------------------------------------------------------------------------------------
// The daemon.

#[derive(Debug, Args, Clone)]
pub struct DaemonArgs {
    /// The socket to listen on (ignored when systemd passes one: LISTEN_FDS).
    #[arg(long, default_value = paths::DAEMON_SOCKET)]
    pub socket: PathBuf,
    /// Only members of this group may connect (socket mode 0660); default: every local
    /// user (0666). Each is served as the user the kernel says they are.
    #[arg(long, value_name = "GROUP")]
    pub group: Option<String>,
    /// Most sessions one user may run at once.
    #[arg(long, default_value_t = 16)]
    pub max_sessions_per_user: usize,
}

/// The client as the kernel reports it at `connect` time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub pid: i32,
    pub creds: FsCreds,
}

/// The connecting process's uid, gid and pid (`SO_PEERCRED`) and supplementary groups
/// (`SO_PEERGROUPS`), as the kernel recorded them when it connected.
pub fn peer_of(conn: &OwnedFd) -> std::io::Result<Peer> {
    let c = socket::getsockopt(conn, sockopt::PeerCredentials)?;
    let mut groups = vec![0u32; 64];
    loop {
        let mut len = (groups.len() * std::mem::size_of::<libc::gid_t>()) as libc::socklen_t;
        // SAFETY: `groups` is a live buffer of `len` bytes; the kernel writes at most `len`
        // bytes and sets `len` to what it wrote, or to what it needs on ERANGE.
        let r = unsafe {
            libc::getsockopt(
                conn.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &mut len,
            )
        };
        let n = len as usize / std::mem::size_of::<libc::gid_t>();
        if r == 0 {
            groups.truncate(n);
            break;
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ERANGE) && n > groups.len() && n <= 65536 {
            groups.resize(n, 0);
            continue;
        }
        return Err(e);
    }
    Ok(Peer {
        pid: c.pid(),
        creds: FsCreds {
            uid: c.uid(),
            gid: c.gid(),
            groups,
        },
    })
}

/// Checks a request's values; `Err` is the reason told to the client.
pub fn check(req: &RunRequest) -> Result<(), String> {
    for (name, p) in [
        ("release", &req.release),
        ("policy", &req.policy),
        ("key", &req.key),
    ] {
        if !p.is_absolute() {
            return Err(format!("the {name} path {} is not absolute", p.display()));
        }
    }
    if !matches!(req.mode.as_str(), "germline" | "nosplit") {
        return Err(format!(
            "mode {:?}: only germline and nosplit run through the daemon (the baseline modes \
             run the release outside the sandbox)",
            req.mode
        ));
    }
    if req.pool > MAX_POOL {
        return Err(format!(
            "a pool of {} copies (at most {MAX_POOL})",
            req.pool
        ));
    }
    if req.probe_tries > MAX_PROBE_TRIES {
        return Err(format!(
            "{} probe tries (at most {MAX_PROBE_TRIES})",
            req.probe_tries
        ));
    }
    let plain = !req.witness_key.is_empty()
        && !req.witness_key.starts_with('.')
        && req
            .witness_key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if !plain {
        return Err(format!(
            "witness key name {:?}: letters, digits, `-`, `_` and `.` only",
            req.witness_key
        ));
    }
    if req.copy_cpus.iter().any(|&c| c >= 4096) {
        return Err("a CPU number of 4096 or more".into());
    }
    Ok(())
}

/// The `germline` arguments of the session the daemon runs for `peer`: what the request
/// asks, plus the user's identity and state directory, which only the daemon decides.
pub fn session_args(peer: &Peer, req: &RunRequest) -> Vec<OsString> {
    let state = paths::user_state_dir(peer.creds.uid);
    let l = &req.image_limits;
    let mut v: Vec<OsString> = vec![
        "run".into(),
        "--as-user".into(),
        peer.creds.to_string().into(),
        "--state-dir".into(),
        state.into(),
        "--policy".into(),
        req.policy.clone().into(),
        "--key".into(),
        req.key.clone().into(),
        "--mode".into(),
        req.mode.clone().into(),
        "--pool".into(),
        req.pool.to_string().into(),
        "--germline-restart-window".into(),
        req.germline_restart_window.to_string().into(),
        "--witness-key".into(),
        req.witness_key.clone().into(),
        "--probe-tries".into(),
        req.probe_tries.to_string().into(),
    ];
    if req.no_evidence {
        v.push("--no-evidence".into());
    }
    if !req.copy_cpus.is_empty() {
        let cpus: Vec<String> = req.copy_cpus.iter().map(usize::to_string).collect();
        v.push("--copy-cpus".into());
        v.push(cpus.join(",").into());
    }
    for (flag, n) in [
        ("--max-image-entries", l.entries),
        ("--max-image-path", l.path),
        ("--max-image-path-total", l.path_total),
        ("--max-image-bytes", l.bytes),
        ("--max-image-unsigned-bytes", l.unsigned_bytes),
        ("--max-image-json", l.json),
    ] {
        v.push(flag.into());
        v.push(n.to_string().into());
    }
    v.push("--".into());
    v.push(req.release.clone().into());
    v
}

/// The sessions running, by the pid of their `germline run`: whose they are.
type Sessions = Arc<Mutex<HashMap<u32, u32>>>;

/// `germline daemon`.
pub fn run(a: &DaemonArgs) -> Result<(), DaemonError> {
    // SAFETY: geteuid(2) has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Err(DaemonError::NotRoot);
    }
    let setup = |what: String| move |source| DaemonError::Setup { what, source };
    // Before any thread: every thread inherits the blocked stop signals, read by signalfd.
    let sigfd = crate::stdio::stop_signals().map_err(setup("signals".into()))?;
    // SAFETY: signalfd returned a descriptor this process owns and nothing else closes.
    let sigfd = unsafe { OwnedFd::from_raw_fd(sigfd) };
    let exe = std::env::current_exe().map_err(setup("own executable".into()))?;
    std::env::set_current_dir("/").map_err(setup("chdir /".into()))?;
    for dir in [paths::RUN_DIR, paths::USERS_STATE] {
        private_dir(
            Path::new(dir),
            if dir == paths::RUN_DIR { 0o755 } else { 0o700 },
        )
        .map_err(setup(dir.to_string()))?;
    }
    let (listener, made) = match systemd_socket().map_err(setup("LISTEN_FDS".into()))? {
        Some(fd) => (fd, None),
        None => (
            listen(&a.socket, a.group.as_deref())
                .map_err(setup(format!("listen on {}", a.socket.display())))?,
            Some(a.socket.clone()),
        ),
    };
    eprintln!(
        "germline daemon: listening on {}",
        made.as_deref()
            .map_or("the socket systemd passed".into(), |p| p
                .display()
                .to_string())
    );
    let sessions: Sessions = Arc::default();
    let mut handlers = Vec::new();
    loop {
        let mut fds = [
            libc::pollfd {
                fd: listener.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: sigfd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: fds is a valid array of two pollfd for the duration of the call.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(DaemonError::Setup {
                what: "poll".into(),
                source: e,
            });
        }
        if fds[1].revents != 0 {
            break;
        }
        if fds[0].revents == 0 {
            continue;
        }
        let conn = match socket::accept4(listener.as_raw_fd(), SockFlag::SOCK_CLOEXEC) {
            // SAFETY: accept4 returned a new descriptor that only this value owns.
            Ok(fd) => unsafe { OwnedFd::from_raw_fd(fd) },
            Err(e) => {
                eprintln!("germline daemon: accept: {e}");
                continue;
            }
        };
        let (exe, sessions, max) = (exe.clone(), sessions.clone(), a.max_sessions_per_user);
        handlers.retain(|h: &std::thread::JoinHandle<()>| !h.is_finished());
        match std::thread::Builder::new()
            .name("germline-daemon-conn".into())
            .spawn(move || serve_conn(&conn, &exe, &sessions, max))
        {
            Ok(h) => handlers.push(h),
            Err(e) => eprintln!("germline daemon: cannot start a connection's thread: {e}"),
        }
    }
    // Stopping: every session is told to stop as its client's death would, then awaited.
    eprintln!("germline daemon: stopping its sessions");
    let pids: Vec<u32> = sessions
        .lock()
        .map(|s| s.keys().copied().collect())
        .unwrap_or_default();
    for pid in pids {
        // SAFETY: kill(2) of a session child this daemon started and has not reaped (its
        // connection's thread removes it from the table before reaping it).
        unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    }
    for h in handlers {
        let _ = h.join();
    }
    if let Some(p) = made {
        let _ = std::fs::remove_file(p);
    }
    Ok(())
}

/// `dir` exists, owned by root, with `mode`.
fn private_dir(dir: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir)?;
    std::os::unix::fs::chown(dir, Some(0), Some(0))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
}

/// The listening socket systemd passed (socket activation: `LISTEN_PID` is this process and
/// `LISTEN_FDS` is 1, the socket being descriptor 3), made close-on-exec so no session
/// inherits it.
fn systemd_socket() -> std::io::Result<Option<OwnedFd>> {
    let ours = std::env::var("LISTEN_PID")
        .ok()
        .and_then(|p| p.parse::<u32>().ok())
        == Some(std::process::id());
    let n = std::env::var("LISTEN_FDS")
        .ok()
        .and_then(|n| n.parse::<u32>().ok());
    if !ours || n.is_none() {
        return Ok(None);
    }
    if n != Some(1) {
        return Err(std::io::Error::other(format!(
            "systemd passed {} sockets; the unit passes one (config/germline-daemon.socket)",
            n.unwrap_or(0)
        )));
    }
    std::env::remove_var("LISTEN_PID");
    std::env::remove_var("LISTEN_FDS");
    std::env::remove_var("LISTEN_FDNAMES");
    // SAFETY: systemd's protocol hands this process descriptor 3 (SD_LISTEN_FDS_START);
    // nothing else in this process has claimed it before this one call.
    let fd = unsafe { OwnedFd::from_raw_fd(3) };
    // SAFETY: fcntl on a descriptor this process owns.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let ty = socket::getsockopt(&fd, sockopt::SockType)?;
    if ty != SockType::SeqPacket {
        return Err(std::io::Error::other(
            "the socket systemd passed is not SOCK_SEQPACKET (ListenSequentialPacket=)",
        ));
    }
    Ok(Some(fd))
}

/// A listening `SOCK_SEQPACKET` socket at `path`, any stale one replaced; mode 0666, or 0660
/// and owned by `group`.
fn listen(path: &Path, group: Option<&str>) -> std::io::Result<OwnedFd> {
    use std::os::unix::fs::PermissionsExt;
    let gid = match group {
        Some(g) => Some(
            nix::unistd::Group::from_name(g)?
                .ok_or_else(|| std::io::Error::other(format!("no group {g:?}")))?
                .gid
                .as_raw(),
        ),
        None => None,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let _ = std::fs::remove_file(path);
    let fd = seqpacket()?;
    socket::bind(fd.as_raw_fd(), &UnixAddr::new(path)?)?;
    std::os::unix::fs::chown(path, Some(0), gid)?;
    let mode = if gid.is_some() { 0o660 } else { 0o666 };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    socket::listen(&fd, Backlog::new(64)?)?;
    Ok(fd)
}

/// Sends one reply (errors ignored: a client that is gone needs no answer).
fn reply(conn: &OwnedFd, r: &Reply) {
    if let Ok(body) = serde_json::to_vec(r) {
        let _ = socket::send(conn.as_raw_fd(), &body, MsgFlags::MSG_NOSIGNAL);
    }
}

/// One request and its descriptors, each descriptor owned as soon as it is received.
fn receive(conn: &OwnedFd) -> Result<(Vec<u8>, Vec<OwnedFd>), String> {
    // A client that connects and sends nothing holds a thread only this long (and a stopping
    // daemon waits at most this long for it).
    let mut pfd = libc::pollfd {
        fd: conn.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: pfd is one valid pollfd for the duration of the call.
    if unsafe { libc::poll(&mut pfd, 1, REQUEST_WAIT_MS) } <= 0 {
        return Err(format!(
            "no request within {} s of connecting",
            REQUEST_WAIT_MS / 1000
        ));
    }
    let mut buf = vec![0u8; MAX_MESSAGE];
    let mut cmsg = nix::cmsg_space!([RawFd; 3]);
    let mut iov = [IoSliceMut::new(&mut buf)];
    let msg = socket::recvmsg::<()>(
        conn.as_raw_fd(),
        &mut iov,
        Some(&mut cmsg),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )
    .map_err(|e| format!("cannot read the request: {e}"))?;
    let (bytes, flags) = (msg.bytes, msg.flags);
    let mut fds = Vec::new();
    if let Ok(cmsgs) = msg.cmsgs() {
        for c in cmsgs {
            if let ControlMessageOwned::ScmRights(raw) = c {
                // SAFETY: each descriptor was just installed in this process by recvmsg and
                // is owned by nothing else.
                fds.extend(
                    raw.into_iter()
                        .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                );
            }
        }
    }
    if flags.intersects(MsgFlags::MSG_TRUNC | MsgFlags::MSG_CTRUNC) {
        return Err(format!(
            "the request is over {MAX_MESSAGE} bytes or carries more than three descriptors"
        ));
    }
    if bytes == 0 {
        return Err("an empty request".into());
    }
    buf.truncate(bytes);
    Ok((buf, fds))
}

/// Serves one connection: one request, one session, its exit status.
fn serve_conn(conn: &OwnedFd, exe: &Path, sessions: &Sessions, max: usize) {
    let peer = match peer_of(conn) {
        Ok(p) => p,
        Err(e) => {
            reply(
                conn,
                &Reply::Refused {
                    reason: format!("cannot tell who is asking (SO_PEERCRED): {e}"),
                },
            );
            return;
        }
    };
    let refuse = |reason: String| {
        eprintln!(
            "germline daemon: refused uid {} (pid {}): {reason}",
            peer.creds.uid, peer.pid
        );
        reply(conn, &Reply::Refused { reason });
    };
    let (body, fds) = match receive(conn) {
        Ok(r) => r,
        Err(e) => return refuse(e),
    };
    let req = match serde_json::from_slice::<Request>(&body) {
        Ok(Request::Run(r)) => *r,
        Ok(Request::Status) => {
            let sessions = own_sessions(sessions, peer.creds.uid);
            return reply(conn, &Reply::Status { sessions });
        }
        Err(e) => return refuse(format!("the request is not one the daemon takes: {e}")),
    };
    if let Err(e) = check(&req) {
        return refuse(e);
    }
    let Ok([stdin, stdout, stderr]) = <[OwnedFd; 3]>::try_from(fds) else {
        return refuse("send exactly three descriptors: stdin, stdout and stderr".into());
    };
    let child = {
        let Ok(mut running) = sessions.lock() else {
            return refuse("the daemon's session table is poisoned".into());
        };
        let mine = running.values().filter(|&&u| u == peer.creds.uid).count();
        if mine >= max {
            return refuse(format!(
                "uid {} runs {mine} sessions already (at most {max})",
                peer.creds.uid
            ));
        }
        let state = paths::user_state_dir(peer.creds.uid);
        if let Err(e) = private_dir(&state, 0o700) {
            return refuse(format!("cannot make {}: {e}", state.display()));
        }
        match spawn_session(exe, &session_args(&peer, &req), [stdin, stdout, stderr]) {
            Ok(c) => {
                running.insert(c.id(), peer.creds.uid);
                c
            }
            Err(e) => return refuse(format!("cannot start the session: {e}")),
        }
    };
    let pid = child.id();
    eprintln!(
        "germline daemon: session {pid} for uid {} (pid {}): {}",
        peer.creds.uid,
        peer.pid,
        req.release.display()
    );
    reply(conn, &Reply::Started { session: pid });
    let code = watch(conn, child, sessions);
    eprintln!("germline daemon: session {pid} ended with status {code}");
    reply(conn, &Reply::Exited { code });
}

/// The state files (`germline status`) of the sessions this daemon runs for `uid`: never
/// another user's, nor a root `germline run`'s.
fn own_sessions(sessions: &Sessions, uid: u32) -> Vec<serde_json::Value> {
    let mine: Vec<u64> = sessions
        .lock()
        .map(|s| {
            s.iter()
                .filter(|(_, &u)| u == uid)
                .map(|(&pid, _)| u64::from(pid))
                .collect()
        })
        .unwrap_or_default();
    germline_engine::status::collect(Path::new(paths::STATUS_DIR))
        .into_iter()
        .filter(|row| row["pid"].as_u64().is_some_and(|p| mine.contains(&p)))
        .collect()
}

fn spawn_session(exe: &Path, args: &[OsString], stdio: [OwnedFd; 3]) -> std::io::Result<Child> {
    let [stdin, stdout, stderr] = stdio;
    let mut cmd = Command::new(exe);
    cmd.args(args)
        // Nothing of the daemon's environment (its secrets, e.g. COSIGN_PASSWORD) and
        // nothing of the client's reaches the session.
        .env_clear()
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        .current_dir("/")
        .stdin(Stdio::from(stdin))
        .stdout(Stdio::from(stdout))
        .stderr(Stdio::from(stderr));
    // SAFETY: runs in the forked child before exec; sigprocmask and prctl are
    // async-signal-safe and use only the child's own stack.
    unsafe {
        cmd.pre_exec(|| {
            // The daemon blocks its stop signals (signalfd) and the mask survives exec; the
            // session ends on SIGTERM if the daemon's thread that waits for it goes.
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            if libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut()) != 0
                || libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn()
}

/// Waits for the session to end, stopping it if the client's connection closes first; its
/// exit status (128 + N if signal N ended it).
fn watch(conn: &OwnedFd, mut child: Child, sessions: &Sessions) -> i32 {
    let pid = child.id();
    // SAFETY: pidfd_open(2) of our own unreaped child; the result is a new descriptor.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    let pidfd = (pidfd >= 0).then(|| {
        // SAFETY: pidfd_open returned a new descriptor that only this value owns.
        unsafe { OwnedFd::from_raw_fd(pidfd as RawFd) }
    });
    let mut deadline: Option<Instant> = None;
    loop {
        let mut fds = [
            libc::pollfd {
                fd: pidfd.as_ref().map_or(-1, |f| f.as_fd().as_raw_fd()),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                // Once the session is being stopped the connection needs no more watching.
                fd: if deadline.is_some() {
                    -1
                } else {
                    conn.as_raw_fd()
                },
                events: libc::POLLIN | libc::POLLRDHUP,
                revents: 0,
            },
        ];
        // Without a pidfd (Linux before 5.3) the child is polled every 100 ms.
        let ms = if pidfd.is_none() { 100 } else { 1000 };
        // SAFETY: fds is a valid array of two pollfd for the duration of the call.
        unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) };
        if let Ok(Some(status)) = child.try_wait() {
            if let Ok(mut s) = sessions.lock() {
                s.remove(&pid);
            }
            return status
                .code()
                .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
        }
        if deadline.is_none() && fds[1].revents != 0 {
            // The client died or broke the protocol: end its session as its stdin closing
            // would, with a signal (its stdin may still be open in the MCP client).
            eprintln!("germline daemon: session {pid}'s client is gone: stopping it");
            // SAFETY: kill(2) of our own child, not yet reaped (try_wait above said so).
            unsafe { libc::kill(pid as i32, libc::SIGTERM) };
            deadline = Some(Instant::now() + STOP_GRACE);
        }
        if deadline.is_some_and(|d| Instant::now() > d) {
            eprintln!("germline daemon: session {pid} did not stop in time: killing it");
            let _ = child.kill();
            deadline = Some(Instant::now() + Duration::from_secs(3600));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `germline run ARGS` as a user would type it.
    fn run_args(extra: &[&str]) -> RunArgs {
        #[derive(Debug, clap::Parser)]
        struct Run {
            #[command(flatten)]
            a: RunArgs,
        }
        let mut argv = vec!["run", "--policy", "p.toml", "--key", "k.pub"];
        argv.extend_from_slice(extra);
        argv.push("release");
        <Run as clap::Parser>::try_parse_from(argv)
            .expect("parses")
            .a
    }

    /// The options the daemon cannot take as root for a user are refused before anything is
    /// sent, each by its own name and with what to do instead; the others make a request.
    #[test]
    fn options_root_would_act_on_are_refused_by_name() {
        for (flag, value, says) in [
            ("--outbox", "/tmp/o", "write it as root"),
            (
                "--metrics-listen",
                "127.0.0.1:9464",
                "germline serve --metrics-listen",
            ),
            (
                "--otlp-endpoint",
                "http://127.0.0.1:4318",
                "germline serve --otlp-endpoint",
            ),
            ("--audit", "/tmp/a", "write it as root"),
            ("--evidence", "/tmp/e", "state directory"),
        ] {
            let e = request_of(&run_args(&[flag, value])).expect_err(flag);
            assert!(e.before_any_session(), "{flag}");
            let m = e.to_string();
            assert!(
                m.starts_with(&format!("germline run as a user takes no {flag}: ")),
                "{m}"
            );
            assert!(m.contains(says) && m.contains("docs/daemon.md"), "{m}");
        }
        let r = request_of(&run_args(&["--pool", "2"])).expect("a request");
        assert_eq!(r.pool, 2);
        assert!(r.release.is_absolute() && r.policy.is_absolute());
    }

    /// An empty `GERMLINE_DAEMON_SOCKET` (a client config's `"env"` left blank) is unset.
    #[test]
    fn an_empty_socket_variable_counts_as_unset() {
        let a = run_args(&[]);
        std::env::set_var(paths::DAEMON_SOCKET_ENV, "");
        assert_eq!(socket_of(&a), PathBuf::from(paths::DAEMON_SOCKET));
        assert_eq!(default_socket(), PathBuf::from(paths::DAEMON_SOCKET));
        std::env::set_var(paths::DAEMON_SOCKET_ENV, "/tmp/other.sock");
        assert_eq!(socket_of(&a), PathBuf::from("/tmp/other.sock"));
        std::env::remove_var(paths::DAEMON_SOCKET_ENV);
        assert_eq!(socket_of(&a), PathBuf::from(paths::DAEMON_SOCKET));
    }

    fn request() -> RunRequest {
        RunRequest {
            release: "/r".into(),
            policy: "/p".into(),
            key: "/k".into(),
            mode: "germline".into(),
            pool: 0,
            copy_cpus: vec![],
            germline_restart_window: 60,
            witness_key: "deployment".into(),
            probe_tries: 3,
            no_evidence: false,
            image_limits: ImageLimits {
                entries: 1,
                path: 2,
                path_total: 3,
                bytes: 4,
                unsigned_bytes: 5,
                json: 6,
            },
        }
    }

    /// The identity and the state directory come from the peer, never from the request; a
    /// request naming either is not a request.
    #[test]
    fn identity_and_state_are_the_peers() {
        let peer = Peer {
            pid: 7,
            creds: FsCreds {
                uid: 1234,
                gid: 99,
                groups: vec![5, 6],
            },
        };
        let args: Vec<String> = session_args(&peer, &request())
            .into_iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let after = |flag: &str| {
            let i = args.iter().position(|a| a == flag).expect(flag);
            args[i + 1].clone()
        };
        assert_eq!(after("--as-user"), "1234:99:5,6");
        assert_eq!(after("--state-dir"), "/var/lib/germline/users/1234");
        assert_eq!(args.last().map(String::as_str), Some("/r"));
        assert_eq!(args[args.len() - 2], "--");
        let mut v = serde_json::to_value(Request::Run(Box::new(request()))).expect("json");
        v["uid"] = 0.into();
        let e = serde_json::from_value::<Request>(v).expect_err("uid refused");
        assert!(e.to_string().contains("unknown field `uid`"), "{e}");
        let mut v = serde_json::to_value(Request::Run(Box::new(request()))).expect("json");
        v["state_dir"] = "/tmp/x".into();
        assert!(serde_json::from_value::<Request>(v).is_err());
    }

    #[test]
    fn values_a_user_may_not_ask_for_are_refused() {
        assert_eq!(check(&request()), Ok(()));
        let bad = [
            RunRequest {
                mode: "sig-pin".into(),
                ..request()
            },
            RunRequest {
                policy: "relative.toml".into(),
                ..request()
            },
            RunRequest {
                witness_key: "../../etc/x".into(),
                ..request()
            },
            RunRequest {
                pool: MAX_POOL + 1,
                ..request()
            },
        ];
        for r in bad {
            assert!(check(&r).is_err(), "{r:?}");
        }
    }
}
