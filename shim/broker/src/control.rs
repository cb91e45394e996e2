//! The shim <-> broker control channel (issue 5): a `SOCK_SEQPACKET` unix socket in a
//! root-only directory, one JSON message per packet, the peer checked with `SO_PEERCRED`, and a
//! copy's network namespace passed as a descriptor (`SCM_RIGHTS`), never as a path that could
//! name another process by the time it is opened.

use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use germline_policy::call::{CopyOutcome, LabelRules};
use germline_policy::plan::{plan, ItemMeta, Member, Plan, PlanInput, PlanMode};
use germline_policy::Label;
use nix::sys::socket::{
    self, sockopt, AddressFamily, Backlog, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag,
    SockType, UnixAddr,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::{Broker, CallRecord, RequestEvent, Twin};

/// The largest control message either side takes (a call's record holds its delivered
/// replies, hex encoded; a re-run's request holds its transcript the same way).
pub const MAX_MESSAGE: usize = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("control socket {}: {source}", path.display())]
    Socket { path: PathBuf, source: nix::Error },
    #[error("control socket directory {}: {source}", path.display())]
    Dir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("control channel: {0}")]
    Io(nix::Error),
    #[error("control channel closed")]
    Closed,
    #[error("control message is not valid JSON: {0}")]
    Json(serde_json::Error),
    #[error("broker refused: {0}")]
    Refused(String),
}

/// One request from the shim.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// Plans the call (the broker runs Plan itself from the same public inputs) and registers it.
    BeginCall(BeginCall),
    /// Starts a copy's endpoint; the packet carries the copy's netns descriptor.
    StartCopy {
        call: u64,
        group: usize,
        deadline_mono_ns: u64,
        /// The packet carries a listening TCP socket the shim made (a baseline process in the
        /// host's network namespace) instead of a network namespace.
        #[serde(default)]
        listener: bool,
    },
    EndCopy {
        call: u64,
        group: usize,
    },
    /// Binds a pool copy's endpoint before any call; the packet carries the copy's netns
    /// descriptor. A later [`Request::StartCopy`] naming the same namespace takes it
    /// (crate::prepared).
    PrepareCopy,
    /// Closes the endpoint prepared for a pool copy the shim dropped unused; the packet
    /// carries the copy's netns descriptor, as for [`Request::PrepareCopy`] (crate::prepared).
    ForgetCopy,
    /// Raises a running copy's label (an input the shim handed it during the call).
    RaiseCopy {
        call: u64,
        group: usize,
        label: Label,
    },
    EndCall {
        call: u64,
    },
    /// [`Request::EndCopy`] of the call's last copy, then [`Request::EndCall`], in one round
    /// trip (issue 30: the shim asks for both back to back when nothing of the call needs
    /// the broker in between). The call is ended whether or not the copy's end succeeded, as
    /// the shim's `end_call` after a failed `end_copy` would.
    EndLastCopy {
        call: u64,
        group: usize,
    },
    CaCert,
    /// The file-state generation a running copy starts from (issue 27).
    CopyFiles {
        call: u64,
        group: usize,
    },
    /// Points an ended copy's horizon at a new file-state generation, with its label.
    CommitFiles {
        call: u64,
        group: usize,
        generation: String,
    },
    /// Where copies' proxies listen inside their namespaces (`127.0.0.1:PORT`).
    CopyProxy,
    /// Counters for metrics: requests by release, declared host (or `undeclared`), verdict.
    Stats,
}

/// A call's public inputs: Plan's inputs plus the release digest and user.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BeginCall {
    pub release: String,
    #[serde(default)]
    pub user: String,
    pub items: Vec<ItemMeta>,
    pub hosts: Vec<Member>,
    pub consumers: Vec<Member>,
    #[serde(default)]
    pub mode: PlanMode,
    #[serde(default)]
    pub rules: LabelRules,
    /// Baselines only (`sig-pin`, `sig-ifc`): deliver every request, to any host.
    #[serde(default)]
    pub open: bool,
    /// A probe or control re-run of the evidence layer (nothing is delivered).
    #[serde(default)]
    pub replay: Option<germline_policy::witness::ReplaySpec>,
    /// The release runs this call's copies concurrently (issue 30, opt-in): the broker holds
    /// requests by the hold rule ([`crate::Broker::begin_concurrent_call`]). Ignored for an
    /// open call or a re-run.
    #[serde(default)]
    pub concurrent: bool,
}

/// The broker's answer to one [`Request`], one variant per request (the asker knows which
/// request it sent, so the variant is not named on the wire). A packet carries the answer's
/// fields with `"ok": true`, or a refusal `{"ok": false, "error": "..."}` ([`encode_reply`],
/// [`decode_reply`]).
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum Response {
    /// To [`Request::BeginCall`].
    CallBegun(CallBegun),
    /// To [`Request::StartCopy`]: the copy's endpoint.
    CopyStarted(ProxyAddr),
    /// To [`Request::EndCopy`].
    CopyEnded(CopyEnded),
    /// To [`Request::RaiseCopy`].
    CopyRaised(CopyRaised),
    /// To [`Request::PrepareCopy`].
    CopyPrepared(CopyPrepared),
    /// To [`Request::ForgetCopy`].
    CopyForgotten(CopyForgotten),
    /// To [`Request::EndCall`].
    CallEnded(CallEnded),
    /// To [`Request::EndLastCopy`].
    LastCopyEnded(LastCopyEnded),
    /// To [`Request::CaCert`].
    CaCert(CaCert),
    /// To [`Request::CopyProxy`]: where every copy's endpoint listens.
    CopyProxy(ProxyAddr),
    /// To [`Request::Stats`].
    Stats(StatsRows),
    /// To [`Request::CopyFiles`].
    CopyFiles(FilesAt),
    /// To [`Request::CommitFiles`].
    FilesCommitted(FilesCommitted),
}

/// A copy's starting file-state generation (none: the release's initial state).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilesAt {
    pub generation: Option<String>,
}

/// A committed file-state generation and the label it was stored with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilesCommitted {
    pub label: Label,
}

/// A registered call: its id, its twin inputs and the plan the broker ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallBegun {
    pub call: u64,
    pub twin: Twin,
    pub plan: Plan,
}

/// A proxy endpoint, `127.0.0.1:PORT` inside a copy's network namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProxyAddr {
    pub proxy: std::net::SocketAddr,
}

/// A finished copy: its outcome and its request events (for its trace).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CopyEnded {
    pub outcome: CopyOutcome,
    /// Absent from a broker older than the request events.
    #[serde(default)]
    pub requests: Vec<RequestEvent>,
}

/// A copy's label was raised (nothing more to say).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CopyRaised {}

/// A pool copy's endpoint was bound ahead (nothing more to say).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CopyPrepared {}

/// A prepared endpoint forgotten: whether one was there, and how many still wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CopyForgotten {
    pub forgotten: bool,
    pub prepared: usize,
}

/// A finished call's record, for the evidence layer (replies carry hex bodies on the wire).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallEnded {
    pub record: CallRecord,
}

/// A call's last copy and the call itself ended ([`Request::EndLastCopy`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastCopyEnded {
    pub outcome: CopyOutcome,
    #[serde(default)]
    pub requests: Vec<RequestEvent>,
    pub record: CallRecord,
}

/// The deployment CA certificate (PEM).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaCert {
    pub pem: String,
}

/// Requests by (release digest, host label, verdict) with their counts
/// ([`crate::Stats::verdict_rows`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatsRows {
    pub requests: Vec<(String, String, String, u64)>,
    /// Pool copies' endpoints prepared and not yet taken or forgotten (crate::prepared);
    /// absent from a broker older than `forget_copy`.
    #[serde(default)]
    pub prepared: usize,
}

/// An answer on the wire: its fields and `"ok": true`.
#[derive(Serialize)]
struct Answered<'a> {
    ok: bool,
    #[serde(flatten)]
    answer: &'a Response,
}

/// A refusal on the wire.
#[derive(Serialize)]
struct Refusal<'a> {
    ok: bool,
    error: &'a str,
}

/// What every reply says whatever it answers: whether it was answered, and if not, why.
#[derive(Deserialize)]
struct Status {
    #[serde(default)]
    ok: bool,
    #[serde(default)]
    error: Option<String>,
}

fn refusal(error: &str) -> String {
    // A struct of a bool and a string always serialises.
    serde_json::to_string(&Refusal { ok: false, error }).unwrap_or_default()
}

/// The packet that answers one request: the answer, or its refusal. An answer larger than the
/// peer takes is replaced by a refusal that says so (the session goes on; only this request
/// fails).
pub fn encode_reply(reply: &Result<Response, String>) -> String {
    let answer = match reply {
        Ok(answer) => answer,
        Err(e) => return refusal(e),
    };
    match serde_json::to_string(&Answered { ok: true, answer }) {
        Ok(text) if text.len() > MAX_MESSAGE => refusal(&format!(
            "reply of {} bytes exceeds the control channel's {MAX_MESSAGE}-byte message limit",
            text.len()
        )),
        Ok(text) => text,
        Err(e) => refusal(&format!("reply not encodable: {e}")),
    }
}

/// Reads the broker's reply to a request whose answer is a `T`. A refusal, or valid JSON that
/// is not a reply at all, is [`ControlError::Refused`] (with the broker's reason, or `unknown
/// error`); an answer whose fields do not make a `T` is [`ControlError::Json`].
pub fn decode_reply<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ControlError> {
    let status = match serde_json::from_slice::<Status>(bytes) {
        Ok(s) => s,
        Err(e) if e.is_data() => Status {
            ok: false,
            error: None,
        },
        Err(e) => return Err(ControlError::Json(e)),
    };
    if !status.ok {
        return Err(ControlError::Refused(
            status.error.unwrap_or_else(|| "unknown error".into()),
        ));
    }
    serde_json::from_slice(bytes).map_err(ControlError::Json)
}

fn monotonic_ns() -> u64 {
    match nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC) {
        Ok(t) => (t.tv_sec() as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(t.tv_nsec() as u64),
        Err(_) => 0,
    }
}

/// The `Instant` of an absolute CLOCK_MONOTONIC time (both processes share that clock).
pub fn instant_of(mono_ns: u64) -> Instant {
    let now = monotonic_ns();
    let now_i = Instant::now();
    if mono_ns >= now {
        now_i + Duration::from_nanos(mono_ns - now)
    } else {
        now_i
            .checked_sub(Duration::from_nanos(now - mono_ns))
            .unwrap_or(now_i)
    }
}

/// CLOCK_MONOTONIC nanoseconds of an `Instant`, for sending a deadline.
pub fn mono_ns_of(at: Instant) -> u64 {
    let now = monotonic_ns();
    let now_i = Instant::now();
    match at.checked_duration_since(now_i) {
        Some(d) => now.saturating_add(d.as_nanos() as u64),
        None => now.saturating_sub(now_i.duration_since(at).as_nanos() as u64),
    }
}

fn seqpacket() -> nix::Result<OwnedFd> {
    let fd = socket::socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC,
        None,
    )?;
    widen(&fd);
    Ok(fd)
}

/// A unix `SOCK_SEQPACKET` message must fit the sender's send buffer, which starts at
/// `net.core.wmem_default` (212992 bytes on stock Linux): without this, a call whose record
/// exceeds about 208 KiB (about 104 KiB of delivered replies, hex encoded) could not be sent
/// and the broker closed the connection. The kernel doubles the value it is given, so
/// `MAX_MESSAGE` leaves room for the message and its overhead. `SO_SNDBUFFORCE` (root)
/// ignores `net.core.wmem_max`; a caller without the capability gets what `SO_SNDBUF` allows.
fn widen(fd: &OwnedFd) {
    if socket::setsockopt(fd, sockopt::SndBufForce, &MAX_MESSAGE).is_err() {
        let _ = socket::setsockopt(fd, sockopt::SndBuf, &MAX_MESSAGE);
    }
}

fn send_text(fd: RawFd, bytes: &str, pass: Option<BorrowedFd<'_>>) -> Result<(), ControlError> {
    let raw = pass.map(|f| [f.as_raw_fd()]);
    let cmsgs: Vec<ControlMessage<'_>> = raw
        .as_ref()
        .map(|r| ControlMessage::ScmRights(r))
        .into_iter()
        .collect();
    socket::sendmsg::<()>(
        fd,
        &[IoSlice::new(bytes.as_bytes())],
        &cmsgs,
        MsgFlags::MSG_NOSIGNAL,
        None,
    )
    .map_err(ControlError::Io)?;
    Ok(())
}

fn recv(fd: RawFd) -> Result<(Vec<u8>, Option<OwnedFd>), ControlError> {
    let mut buf = Vec::new();
    let (n, passed) = recv_into(fd, &mut buf)?;
    buf.truncate(n);
    Ok((buf, passed))
}

/// Receives one message into `buf` (grown to [`MAX_MESSAGE`] once, then reused: a fresh
/// zeroed megabyte per message cost ~40 us, and a call's round trips receive six, issue 30);
/// returns its length and the descriptor it carried.
fn recv_into(fd: RawFd, buf: &mut Vec<u8>) -> Result<(usize, Option<OwnedFd>), ControlError> {
    recv_flags(fd, buf, MsgFlags::empty())
}

/// [`recv_into`], first polling without blocking for up to `spin` ([`BrokerClient::set_spin`]):
/// a reply that comes within it is read without this thread going to sleep and being woken.
fn recv_spinning(
    fd: RawFd,
    buf: &mut Vec<u8>,
    spin: Duration,
) -> Result<(usize, Option<OwnedFd>), ControlError> {
    if !spin.is_zero() {
        let until = Instant::now() + spin;
        loop {
            match recv_flags(fd, buf, MsgFlags::MSG_DONTWAIT) {
                // Yielding, not spinning: a broker thread waiting for this CPU gets it.
                Err(ControlError::Io(nix::Error::EAGAIN)) if Instant::now() < until => {
                    std::thread::yield_now();
                }
                Err(ControlError::Io(nix::Error::EAGAIN)) => break,
                other => return other,
            }
        }
    }
    recv_into(fd, buf)
}

fn recv_flags(
    fd: RawFd,
    buf: &mut Vec<u8>,
    flags: MsgFlags,
) -> Result<(usize, Option<OwnedFd>), ControlError> {
    if buf.len() < MAX_MESSAGE {
        buf.resize(MAX_MESSAGE, 0);
    }
    let mut cmsg = nix::cmsg_space!([RawFd; 2]);
    let mut iov = [IoSliceMut::new(&mut buf[..])];
    let msg = socket::recvmsg::<()>(
        fd,
        &mut iov,
        Some(&mut cmsg),
        MsgFlags::MSG_CMSG_CLOEXEC | flags,
    )
    .map_err(ControlError::Io)?;
    let n = msg.bytes;
    if msg.flags.contains(MsgFlags::MSG_TRUNC) || msg.flags.contains(MsgFlags::MSG_CTRUNC) {
        return Err(ControlError::Refused("control message truncated".into()));
    }
    let mut passed = None;
    for c in msg.cmsgs().map_err(ControlError::Io)? {
        if let ControlMessageOwned::ScmRights(fds) = c {
            for f in fds {
                // SAFETY: SCM_RIGHTS just installed this descriptor in our table; we take
                // sole ownership (extra ones are closed when dropped here).
                let owned = unsafe { OwnedFd::from_raw_fd(f) };
                if passed.is_none() {
                    passed = Some(owned);
                }
            }
        }
    }
    if n == 0 {
        return Err(ControlError::Closed);
    }
    Ok((n, passed))
}

/// Serves the control socket at `path` until the process ends. The directory is created 0700.
pub fn serve(broker: Arc<Broker>, path: &Path) -> Result<(), ControlError> {
    let listener = bind(path)?;
    loop {
        let conn = match socket::accept(listener.as_raw_fd()) {
            Ok(fd) => {
                // SAFETY: accept(2) returned a new descriptor that nothing else owns.
                unsafe { OwnedFd::from_raw_fd(fd) }
            }
            Err(nix::Error::EINTR) => continue,
            Err(e) => {
                return Err(ControlError::Socket {
                    path: path.to_path_buf(),
                    source: e,
                })
            }
        };
        let b = broker.clone();
        std::thread::spawn(move || connection(&b, conn));
    }
}

/// Creates the listening socket (its directory 0700, root-only).
pub fn bind(path: &Path) -> Result<OwnedFd, ControlError> {
    if let Some(dir) = path.parent() {
        let e = |source| ControlError::Dir {
            path: dir.to_path_buf(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(e)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(e)?;
    }
    let _ = std::fs::remove_file(path);
    socket_at(path, |fd, addr| {
        socket::bind(fd.as_raw_fd(), addr)?;
        socket::listen(fd, Backlog::new(64)?)
    })
}

/// A seqpacket socket for `path`, made ready by `ready` (bound and listening, or connected).
fn socket_at(
    path: &Path,
    ready: impl FnOnce(&OwnedFd, &UnixAddr) -> nix::Result<()>,
) -> Result<OwnedFd, ControlError> {
    let se = |source| ControlError::Socket {
        path: path.to_path_buf(),
        source,
    };
    let fd = seqpacket().map_err(se)?;
    let addr = UnixAddr::new(path).map_err(se)?;
    ready(&fd, &addr).map_err(se)?;
    Ok(fd)
}

/// Handles one accepted connection (also usable by a caller that accepts itself).
pub fn connection(broker: &Broker, conn: OwnedFd) {
    // An accepted socket starts from the default send buffer, whatever the listener's.
    widen(&conn);
    let me = nix::unistd::geteuid().as_raw();
    match socket::getsockopt(&conn, sockopt::PeerCredentials) {
        Ok(c) if c.uid() == 0 || c.uid() == me => {}
        Ok(c) => {
            let _ = send_text(
                conn.as_raw_fd(),
                &encode_reply(&Err(format!("peer uid {} refused", c.uid()))),
                None,
            );
            // Take the peer's first message before closing, so it reads the refusal rather
            // than a reset; never wait long for it.
            let _ = socket::setsockopt(
                &conn,
                sockopt::ReceiveTimeout,
                &nix::sys::time::TimeVal::new(1, 0),
            );
            let _ = recv(conn.as_raw_fd());
            return;
        }
        Err(_) => return,
    }
    // One receive buffer for the connection's life.
    let mut buf = Vec::new();
    loop {
        let (n, passed) = match recv_into(conn.as_raw_fd(), &mut buf) {
            Ok(x) => x,
            Err(ControlError::Refused(e)) => {
                let _ = send_text(conn.as_raw_fd(), &encode_reply(&Err(e)), None);
                continue;
            }
            Err(_) => return,
        };
        let reply = match serde_json::from_slice::<Request>(&buf[..n]) {
            Ok(req) => handle(broker, req, passed),
            Err(e) => Err(format!("malformed request: {e}")),
        };
        // A reply larger than the peer takes is answered with the reason, not dropped with
        // the connection (encode_reply).
        if send_text(conn.as_raw_fd(), &encode_reply(&reply), None).is_err() {
            return;
        }
        // A copy's listener is bound on this thread (crate::netns); one that could not go
        // back to the broker's own namespace ends here, with its connection.
        if crate::netns::thread_stranded() {
            return;
        }
    }
}

fn handle(broker: &Broker, req: Request, passed: Option<OwnedFd>) -> Result<Response, String> {
    match req {
        Request::BeginCall(c) => {
            let input = PlanInput {
                items: &c.items,
                hosts: &c.hosts,
                consumers: &c.consumers,
            };
            let p = plan(input, c.mode).map_err(|e| e.to_string())?;
            let (call, twin) = match c.replay {
                Some(r) => broker.begin_replay(&c.release, &c.user, p.clone(), &c.hosts, r),
                None if c.concurrent && !c.open => {
                    broker.begin_concurrent_call(&c.release, &c.user, p.clone(), &c.hosts, c.rules)
                }
                None => {
                    broker.begin_call(&c.release, &c.user, p.clone(), &c.hosts, c.rules, c.open)
                }
            }
            .map_err(|e| e.to_string())?;
            Ok(Response::CallBegun(CallBegun {
                call,
                twin,
                plan: p,
            }))
        }
        Request::StartCopy {
            call,
            group,
            deadline_mono_ns,
            listener,
        } => {
            let fd = passed.ok_or("start_copy needs the copy's network namespace descriptor")?;
            let addr = if listener {
                let l = std::net::TcpListener::from(fd);
                l.set_nonblocking(true).map_err(|e| e.to_string())?;
                broker.start_copy_on(call, group, l, instant_of(deadline_mono_ns))
            } else {
                broker.start_copy(call, group, fd.as_fd(), instant_of(deadline_mono_ns))
            }
            .map_err(|e| e.to_string())?;
            Ok(Response::CopyStarted(ProxyAddr { proxy: addr }))
        }
        Request::PrepareCopy => {
            let fd = passed.ok_or("prepare_copy needs the copy's network namespace descriptor")?;
            broker.prepare_copy(fd.as_fd()).map_err(|e| e.to_string())?;
            Ok(Response::CopyPrepared(CopyPrepared {}))
        }
        Request::ForgetCopy => {
            let fd = passed.ok_or("forget_copy needs the copy's network namespace descriptor")?;
            let forgotten = broker.forget_copy(fd.as_fd()).map_err(|e| e.to_string())?;
            Ok(Response::CopyForgotten(CopyForgotten {
                forgotten,
                prepared: broker.prepared_endpoints(),
            }))
        }
        Request::EndCopy { call, group } => {
            let (out, requests) = broker.end_copy(call, group).map_err(|e| e.to_string())?;
            Ok(Response::CopyEnded(CopyEnded {
                outcome: out,
                requests,
            }))
        }
        Request::RaiseCopy { call, group, label } => {
            broker
                .raise_copy(call, group, &label)
                .map_err(|e| e.to_string())?;
            Ok(Response::CopyRaised(CopyRaised {}))
        }
        Request::CopyFiles { call, group } => {
            let generation = broker.copy_files(call, group).map_err(|e| e.to_string())?;
            Ok(Response::CopyFiles(FilesAt { generation }))
        }
        Request::CommitFiles {
            call,
            group,
            generation,
        } => {
            let label = broker
                .commit_files(call, group, &generation)
                .map_err(|e| e.to_string())?;
            Ok(Response::FilesCommitted(FilesCommitted { label }))
        }
        Request::EndCall { call } => {
            let rec = broker.end_call(call).map_err(|e| e.to_string())?;
            Ok(Response::CallEnded(CallEnded { record: rec }))
        }
        Request::EndLastCopy { call, group } => {
            let copy = broker.end_copy(call, group);
            // Ended even when the copy's end failed: nothing of the call may stay pending.
            let record = broker.end_call(call);
            let (outcome, requests) = copy.map_err(|e| e.to_string())?;
            let record = record.map_err(|e| e.to_string())?;
            Ok(Response::LastCopyEnded(LastCopyEnded {
                outcome,
                requests,
                record,
            }))
        }
        Request::CaCert => Ok(Response::CaCert(CaCert {
            pem: broker.ca_cert_pem().to_string(),
        })),
        Request::CopyProxy => Ok(Response::CopyProxy(ProxyAddr {
            proxy: broker.copy_proxy_addr(),
        })),
        Request::Stats => Ok(Response::Stats(StatsRows {
            requests: broker.stats().verdict_rows(),
            prepared: broker.prepared_endpoints(),
        })),
    }
}

/// The shim's side of the channel.
#[derive(Debug)]
pub struct BrokerClient {
    fd: OwnedFd,
    /// The receive buffer, reused by every reply ([`recv_into`]).
    buf: std::sync::Mutex<Vec<u8>>,
    /// How long a request polls for its reply before sleeping ([`BrokerClient::set_spin`]).
    spin: Duration,
}

/// What [`BrokerClient::set_spin`] starts at: `GERMLINE_BROKER_SPIN_US` microseconds (a
/// measurement knob, docs/performance.md), else none.
fn default_spin() -> Duration {
    std::env::var("GERMLINE_BROKER_SPIN_US")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(Duration::ZERO, Duration::from_micros)
}

impl BrokerClient {
    pub fn connect(path: &Path) -> Result<Self, ControlError> {
        let fd = socket_at(path, |fd, addr| socket::connect(fd.as_raw_fd(), addr))?;
        Ok(Self {
            fd,
            buf: std::sync::Mutex::new(Vec::new()),
            spin: default_spin(),
        })
    }

    /// How long each request polls for its reply before it sleeps in `recvmsg` (zero: it
    /// sleeps at once). The broker answers most requests within tens of microseconds, less
    /// than a sleeping thread takes to be woken and scheduled again on an idle CPU (a virtual
    /// one above all): polling that long saves the wake-up and costs at most `spin` of CPU
    /// per request (docs/performance.md, "The broker's round trips").
    pub fn set_spin(&mut self, spin: Duration) {
        self.spin = spin;
    }

    /// Sends `req` (with `pass` as `SCM_RIGHTS`) and reads its answer, a `T`.
    fn call<T: DeserializeOwned>(
        &self,
        req: &Request,
        pass: Option<BorrowedFd<'_>>,
    ) -> Result<T, ControlError> {
        let text = serde_json::to_string(req).map_err(ControlError::Json)?;
        // Held from the send to the reply: a request and its answer are one exchange.
        let mut buf = match self.buf.lock() {
            Ok(b) => b,
            Err(poisoned) => poisoned.into_inner(),
        };
        send_text(self.fd.as_raw_fd(), &text, pass)?;
        let (n, _) = recv_spinning(self.fd.as_raw_fd(), &mut buf, self.spin)?;
        decode_reply(&buf[..n])
    }

    pub fn begin_call(&self, call: BeginCall) -> Result<(u64, Twin, Plan), ControlError> {
        let r: CallBegun = self.call(&Request::BeginCall(call), None)?;
        Ok((r.call, r.twin, r.plan))
    }

    pub fn start_copy(
        &self,
        call: u64,
        group: usize,
        netns: BorrowedFd<'_>,
        deadline: Instant,
    ) -> Result<String, ControlError> {
        self.start(call, group, netns, deadline, false)
    }

    /// Like [`BrokerClient::start_copy`] on a listening TCP socket the shim made (a baseline
    /// process that lives in the host's network namespace).
    pub fn start_copy_on(
        &self,
        call: u64,
        group: usize,
        listener: BorrowedFd<'_>,
        deadline: Instant,
    ) -> Result<String, ControlError> {
        self.start(call, group, listener, deadline, true)
    }

    /// `start_copy` with `pass` (a netns, or a listener if `listener`) as `SCM_RIGHTS`.
    fn start(
        &self,
        call: u64,
        group: usize,
        pass: BorrowedFd<'_>,
        deadline: Instant,
        listener: bool,
    ) -> Result<String, ControlError> {
        let req = Request::StartCopy {
            call,
            group,
            deadline_mono_ns: mono_ns_of(deadline),
            listener,
        };
        let r: ProxyAddr = self.call(&req, Some(pass))?;
        Ok(r.proxy.to_string())
    }

    /// Binds a pool copy's endpoint in its network namespace `netns` before any call
    /// (crate::prepared); the `start_copy` that names the same namespace takes it.
    pub fn prepare_copy(&self, netns: BorrowedFd<'_>) -> Result<(), ControlError> {
        self.call::<CopyPrepared>(&Request::PrepareCopy, Some(netns))
            .map(drop)
    }

    /// Closes the endpoint prepared in `netns` for a pool copy the shim dropped unused
    /// (crate::prepared): whether one was there, and how many still wait.
    pub fn forget_copy(&self, netns: BorrowedFd<'_>) -> Result<CopyForgotten, ControlError> {
        self.call(&Request::ForgetCopy, Some(netns))
    }

    /// Pool copies' endpoints the broker holds prepared (taken by no call, forgotten by no
    /// shim), from its `stats` answer.
    pub fn prepared_endpoints(&self) -> Result<usize, ControlError> {
        let r: StatsRows = self.call(&Request::Stats, None)?;
        Ok(r.prepared)
    }

    /// Ends a copy: its outcome (label, triggers) and its request events (for its trace).
    pub fn end_copy(
        &self,
        call: u64,
        group: usize,
    ) -> Result<(CopyOutcome, Vec<RequestEvent>), ControlError> {
        let r: CopyEnded = self.call(&Request::EndCopy { call, group }, None)?;
        Ok((r.outcome, r.requests))
    }

    /// Raises copy `group`'s label by `label` before the shim hands it an input of that label.
    pub fn raise_copy(&self, call: u64, group: usize, label: &Label) -> Result<(), ControlError> {
        let req = Request::RaiseCopy {
            call,
            group,
            label: label.clone(),
        };
        self.call::<CopyRaised>(&req, None).map(drop)
    }

    /// The file-state generation copy `group` starts from.
    pub fn copy_files(&self, call: u64, group: usize) -> Result<Option<String>, ControlError> {
        let r: FilesAt = self.call(&Request::CopyFiles { call, group }, None)?;
        Ok(r.generation)
    }

    /// Commits file-state `generation` for ended copy `group`; the label it was stored with.
    pub fn commit_files(
        &self,
        call: u64,
        group: usize,
        generation: &str,
    ) -> Result<Label, ControlError> {
        let req = Request::CommitFiles {
            call,
            group,
            generation: generation.to_string(),
        };
        let r: FilesCommitted = self.call(&req, None)?;
        Ok(r.label)
    }

    /// The call's record.
    pub fn end_call(&self, call: u64) -> Result<CallRecord, ControlError> {
        let r: CallEnded = self.call(&Request::EndCall { call }, None)?;
        Ok(r.record)
    }

    /// Requests by (release digest, host label, verdict) with their counts.
    /// `end_copy` of the call's last copy, then `end_call`, in one round trip
    /// ([`Request::EndLastCopy`]). The call is ended even if the copy's end is refused.
    #[allow(clippy::type_complexity)]
    pub fn end_last_copy(
        &self,
        call: u64,
        group: usize,
    ) -> Result<(CopyOutcome, Vec<RequestEvent>, CallRecord), ControlError> {
        let r: LastCopyEnded = self.call(&Request::EndLastCopy { call, group }, None)?;
        Ok((r.outcome, r.requests, r.record))
    }

    pub fn stats(&self) -> Result<Vec<(String, String, String, u64)>, ControlError> {
        let r: StatsRows = self.call(&Request::Stats, None)?;
        Ok(r.requests)
    }

    /// The broker's copy proxy address ([`Broker::copy_proxy_addr`]).
    pub fn copy_proxy(&self) -> Result<std::net::SocketAddr, ControlError> {
        let r: ProxyAddr = self.call(&Request::CopyProxy, None)?;
        Ok(r.proxy)
    }

    pub fn ca_cert(&self) -> Result<String, ControlError> {
        let r: CaCert = self.call(&Request::CaCert, None)?;
        Ok(r.pem)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use germline_policy::call::{Trigger, TriggerKind};
    use serde_json::{json, Value};

    use super::*;
    use crate::{CopyRecord, Reply};

    fn member(name: &str, c: &[&str]) -> Member {
        Member {
            name: name.into(),
            clearance: Label::of(c),
        }
    }

    fn two_group_plan() -> Plan {
        let items = [
            ItemMeta {
                name: "invoice".into(),
                label: Label::of(["finance"]),
            },
            ItemMeta {
                name: "salary".into(),
                label: Label::of(["hr"]),
            },
        ];
        let hosts = [member("ocr.example", &["finance"])];
        let consumers = [member("agent", &["finance", "hr"])];
        let input = PlanInput {
            items: &items,
            hosts: &hosts,
            consumers: &consumers,
        };
        plan(input, PlanMode::Split).expect("plan")
    }

    fn outcome() -> CopyOutcome {
        CopyOutcome {
            label: Label::of(["finance"]),
            triggers: vec![Trigger {
                group: 0,
                host: "ocr.example".into(),
                kind: TriggerKind::Absent {
                    sent: 0,
                    recorded: 1,
                },
            }],
            contacted: BTreeMap::from([("mail.example".to_string(), 2)]),
            requests: BTreeMap::from([("mail.example".to_string(), vec!["ab".to_string()])]),
        }
    }

    fn event() -> RequestEvent {
        RequestEvent {
            host: "ocr.example".into(),
            verdict: "delivered".into(),
            start_mono_ns: 7,
            us: 12,
        }
    }

    fn record() -> CallRecord {
        CallRecord {
            call: 3,
            release: "sha256:r".into(),
            twin: Twin {
                time_ns: 1_700_000_000_000_000_000,
                seed: 9,
            },
            delivered: BTreeMap::from([(
                "ocr.example".to_string(),
                vec![(
                    "d1".to_string(),
                    Reply {
                        status: 200,
                        headers: vec![("content-type".into(), "text/plain".into())],
                        body: bytes::Bytes::from_static(b"ok"),
                    },
                )],
            )]),
            copies: BTreeMap::from([(
                0,
                CopyRecord {
                    horizon: Label::of(["finance"]),
                    slot_snapshot: BTreeMap::from([(
                        "k".to_string(),
                        ("d2".to_string(), Label::of(["hr"])),
                    )]),
                    slot_values: BTreeMap::from([("k".to_string(), "0aff".to_string())]),
                    outcome: Some(outcome()),
                    triggers: outcome().triggers,
                },
            )]),
        }
    }

    fn wire(r: &Result<Response, String>) -> Value {
        serde_json::from_str(&encode_reply(r)).expect("a reply is JSON")
    }

    /// Each answer is the object the broker sent before its replies were typed (built here
    /// the old way, `json!` plus `"ok": true`), so either side may be the older one.
    #[test]
    fn answers_keep_their_wire_format() {
        let p = two_group_plan();
        let twin = Twin {
            time_ns: 1_700_000_000_000_000_000,
            seed: 42,
        };
        let addr: std::net::SocketAddr = "127.0.0.1:20001".parse().expect("addr");
        let cases: Vec<(Response, Value)> = vec![
            (
                Response::CallBegun(CallBegun {
                    call: 5,
                    twin,
                    plan: p.clone(),
                }),
                json!({"call": 5, "twin": twin, "plan": p}),
            ),
            (
                Response::CopyStarted(ProxyAddr { proxy: addr }),
                json!({"proxy": addr.to_string()}),
            ),
            (
                Response::CopyEnded(CopyEnded {
                    outcome: outcome(),
                    requests: vec![event()],
                }),
                json!({"outcome": outcome(), "requests": [event()]}),
            ),
            (Response::CopyRaised(CopyRaised {}), json!({})),
            (
                Response::CallEnded(CallEnded { record: record() }),
                json!({"record": record()}),
            ),
            (
                Response::LastCopyEnded(LastCopyEnded {
                    outcome: outcome(),
                    requests: vec![event()],
                    record: record(),
                }),
                json!({"outcome": outcome(), "requests": [event()], "record": record()}),
            ),
            (
                Response::CaCert(CaCert {
                    pem: "-----BEGIN CERTIFICATE-----\n".into(),
                }),
                json!({"pem": "-----BEGIN CERTIFICATE-----\n"}),
            ),
            (
                Response::CopyProxy(ProxyAddr { proxy: addr }),
                json!({"proxy": "127.0.0.1:20001"}),
            ),
            (
                Response::Stats(StatsRows {
                    requests: vec![(
                        "sha256:r".into(),
                        "ocr.example".into(),
                        "delivered".into(),
                        4,
                    )],
                    prepared: 2,
                }),
                json!({"requests": [["sha256:r", "ocr.example", "delivered", 4]], "prepared": 2}),
            ),
            (
                Response::CopyForgotten(CopyForgotten {
                    forgotten: true,
                    prepared: 1,
                }),
                json!({"forgotten": true, "prepared": 1}),
            ),
        ];
        for (answer, mut old) in cases {
            if let Value::Object(m) = &mut old {
                m.insert("ok".into(), json!(true));
            }
            assert_eq!(wire(&Ok(answer)), old);
        }
        assert_eq!(
            wire(&Err("no live copy 0 of call 3".into())),
            json!({"ok": false, "error": "no live copy 0 of call 3"})
        );
    }

    fn round_trip<T: DeserializeOwned>(answer: Response) -> T {
        decode_reply(encode_reply(&Ok(answer)).as_bytes()).expect("decodes")
    }

    #[test]
    fn answers_round_trip() {
        let p = two_group_plan();
        let twin = Twin {
            time_ns: 1_700_000_000_000_000_000,
            seed: 42,
        };
        let begun = CallBegun {
            call: 5,
            twin,
            plan: p,
        };
        assert_eq!(
            round_trip::<CallBegun>(Response::CallBegun(begun.clone())),
            begun
        );
        let addr = ProxyAddr {
            proxy: "[::1]:20002".parse().expect("addr"),
        };
        assert_eq!(round_trip::<ProxyAddr>(Response::CopyStarted(addr)), addr);
        assert_eq!(round_trip::<ProxyAddr>(Response::CopyProxy(addr)), addr);
        let ended = CopyEnded {
            outcome: outcome(),
            requests: vec![event()],
        };
        assert_eq!(
            round_trip::<CopyEnded>(Response::CopyEnded(ended.clone())),
            ended
        );
        assert_eq!(
            round_trip::<CopyRaised>(Response::CopyRaised(CopyRaised {})),
            CopyRaised {}
        );
        let rec: CallEnded = round_trip(Response::CallEnded(CallEnded { record: record() }));
        assert_eq!(rec.record, record());
        let last: LastCopyEnded = round_trip(Response::LastCopyEnded(LastCopyEnded {
            outcome: outcome(),
            requests: vec![event()],
            record: record(),
        }));
        assert_eq!(
            (last.outcome, last.requests, last.record),
            (outcome(), vec![event()], record())
        );
        let pem = CaCert {
            pem: "-----BEGIN CERTIFICATE-----\nMII\n".into(),
        };
        assert_eq!(round_trip::<CaCert>(Response::CaCert(pem.clone())), pem);
        let rows = StatsRows {
            requests: vec![("sha256:r".into(), "undeclared".into(), "denied".into(), 1)],
            prepared: 3,
        };
        assert_eq!(round_trip::<StatsRows>(Response::Stats(rows.clone())), rows);
        // A broker older than `forget_copy` sends no count: none.
        let old: StatsRows =
            decode_reply(br#"{"ok":true,"requests":[]}"#).expect("an older broker's stats");
        assert_eq!(old.prepared, 0);
        let f = CopyForgotten {
            forgotten: false,
            prepared: 0,
        };
        assert_eq!(round_trip::<CopyForgotten>(Response::CopyForgotten(f)), f);
    }

    /// The record as the broker wrote it while the client still read it as loose JSON
    /// (written out here by hand: integer group keys as strings, the twin's clock as a bare
    /// number, a reply as `[digest, {status, headers, body in hex}]`) reads into the record
    /// types, and writing them again gives the same bytes.
    #[test]
    fn a_call_record_reads_back_to_the_bytes_the_broker_wrote() {
        let old = concat!(
            r#"{"ok":true,"record":{"call":3,"release":"sha256:r","#,
            r#""twin":{"time_ns":1700000000000000000,"seed":9},"#,
            r#""delivered":{"ocr.example":[["d1",{"status":200,"#,
            r#""headers":[["content-type","text/plain"]],"body":"6f6b"}]]},"#,
            r#""copies":{"0":{"horizon":["finance"],"slot_snapshot":{"k":["d2",["hr"]]},"#,
            r#""slot_values":{"k":"0aff"},"outcome":{"label":["finance"],"#,
            r#""triggers":[{"group":0,"host":"ocr.example","kind":{"absent":{"sent":0,"recorded":1}}}],"#,
            r#""contacted":{"mail.example":2},"requests":{"mail.example":["ab"]}},"#,
            r#""triggers":[{"group":0,"host":"ocr.example","kind":{"absent":{"sent":0,"recorded":1}}}]}}}}"#,
        );
        let read: CallEnded = decode_reply(old.as_bytes()).expect("the record reads");
        assert_eq!(read.record, record());
        assert_eq!(
            read.record.delivered["ocr.example"][0].1.body.as_ref(),
            b"ok"
        );
        assert_eq!(encode_reply(&Ok(Response::CallEnded(read))), old);
        // A body that is not hex is not a record.
        let bad = old.replace(r#""body":"6f6b""#, r#""body":"6f6""#);
        let err = decode_reply::<CallEnded>(bad.as_bytes()).expect_err("odd hex");
        assert!(matches!(err, ControlError::Json(_)), "{err:?}");
    }

    #[test]
    fn refusals_come_back_as_refused_with_their_reason() {
        let e =
            decode_reply::<CaCert>(encode_reply(&Err("peer uid 65534 refused".into())).as_bytes())
                .expect_err("refused");
        assert!(
            matches!(&e, ControlError::Refused(m) if m == "peer uid 65534 refused"),
            "{e:?}"
        );
        assert_eq!(e.to_string(), "broker refused: peer uid 65534 refused");
    }

    /// An answer past the message limit is refused with its size, not sent (the peer would
    /// get a truncated packet, or the send would fail and close the connection).
    #[test]
    fn an_answer_past_the_message_limit_is_refused_with_the_reason() {
        let big = Response::CaCert(CaCert {
            pem: "A".repeat(MAX_MESSAGE),
        });
        let text = encode_reply(&Ok(big));
        assert!(text.len() <= MAX_MESSAGE, "{}", text.len());
        match decode_reply::<CaCert>(text.as_bytes()) {
            Err(ControlError::Refused(m)) => assert!(
                m.starts_with(&format!(
                    "reply of {} bytes exceeds",
                    MAX_MESSAGE + r#"{"ok":true,"pem":""}"#.len()
                )) && m.ends_with("1048576-byte message limit"),
                "{m}"
            ),
            other => panic!("{other:?}"),
        }
        // One that fits goes through whole.
        let fits = CaCert {
            pem: "A".repeat(MAX_MESSAGE - 100),
        };
        assert_eq!(round_trip::<CaCert>(Response::CaCert(fits.clone())), fits);
    }

    #[test]
    fn malformed_replies_are_errors_of_their_kind() {
        let refused = |bytes: &[u8]| match decode_reply::<CaCert>(bytes) {
            Err(ControlError::Refused(m)) => m,
            other => panic!("{}: {other:?}", String::from_utf8_lossy(bytes)),
        };
        // Valid JSON that is not an answer: refused, as the broker never sends it.
        assert_eq!(refused(br#"{"ok": false}"#), "unknown error");
        assert_eq!(refused(br#"{}"#), "unknown error");
        assert_eq!(refused(br#"[1, 2]"#), "unknown error");
        assert_eq!(refused(br#""ok""#), "unknown error");
        assert_eq!(refused(br#"{"ok": "yes", "pem": "x"}"#), "unknown error");
        assert_eq!(refused(br#"{"ok": false, "error": "gone"}"#), "gone");
        // Not JSON at all, or cut short: a JSON error.
        for bytes in [
            &b"not json"[..],
            b"{\"ok\": true, \"pem\": \"x",
            b"",
            b"\xff\xfe",
        ] {
            assert!(
                matches!(decode_reply::<CaCert>(bytes), Err(ControlError::Json(_))),
                "{}",
                String::from_utf8_lossy(bytes)
            );
        }
        // Answered, but not with the fields of the answer asked for: a JSON error.
        let json_err = |bytes: &[u8], what: &str| {
            let r = match what {
                "begun" => decode_reply::<CallBegun>(bytes).map(drop),
                "proxy" => decode_reply::<ProxyAddr>(bytes).map(drop),
                "ended" => decode_reply::<CopyEnded>(bytes).map(drop),
                _ => decode_reply::<StatsRows>(bytes).map(drop),
            };
            assert!(
                matches!(r, Err(ControlError::Json(_))),
                "{what}: {}: {r:?}",
                String::from_utf8_lossy(bytes)
            );
        };
        json_err(br#"{"ok": true}"#, "begun");
        json_err(br#"{"ok": true, "call": -1, "twin": {"time_ns": 1, "seed": 2}, "plan": {"groups": []}}"#, "begun");
        json_err(br#"{"ok": true, "proxy": "not an address"}"#, "proxy");
        json_err(br#"{"ok": true, "proxy": 20001}"#, "proxy");
        json_err(br#"{"ok": true, "requests": []}"#, "ended");
        json_err(
            br#"{"ok": true, "requests": [["r", "h", "v", "four"]]}"#,
            "stats",
        );
        // An older broker's `end_copy` without request events still reads.
        let ended: CopyEnded = decode_reply(
            format!(
                r#"{{"ok": true, "outcome": {}}}"#,
                serde_json::to_string(&outcome()).expect("outcome")
            )
            .as_bytes(),
        )
        .expect("without requests");
        assert_eq!(ended.outcome, outcome());
        assert!(ended.requests.is_empty());
    }

    #[test]
    fn requests_round_trip_and_malformed_ones_are_refused() {
        let reqs = vec![
            Request::BeginCall(BeginCall {
                release: "sha256:r".into(),
                user: "u".into(),
                items: vec![ItemMeta {
                    name: "invoice".into(),
                    label: Label::of(["finance"]),
                }],
                hosts: vec![member("ocr.example", &["finance"])],
                consumers: vec![member("agent", &["finance"])],
                mode: PlanMode::Split,
                rules: LabelRules::default(),
                open: false,
                replay: None,
                concurrent: false,
            }),
            Request::StartCopy {
                call: 1,
                group: 0,
                deadline_mono_ns: 99,
                listener: true,
            },
            Request::EndCopy { call: 1, group: 0 },
            Request::RaiseCopy {
                call: 1,
                group: 1,
                label: Label::of(["hr"]),
            },
            Request::EndCall { call: 1 },
            Request::CaCert,
            Request::CopyProxy,
            Request::Stats,
            Request::PrepareCopy,
            Request::ForgetCopy,
        ];
        for r in &reqs {
            let text = serde_json::to_string(r).expect("encode");
            let back: Request = serde_json::from_str(&text).expect("decode");
            assert_eq!(serde_json::to_string(&back).expect("encode"), text);
        }
        assert_eq!(
            serde_json::to_value(&reqs[2]).expect("encode"),
            json!({"op": "end_copy", "call": 1, "group": 0})
        );
        assert_eq!(
            serde_json::to_value(Request::PrepareCopy).expect("encode"),
            json!({"op": "prepare_copy"})
        );
        assert_eq!(
            serde_json::to_value(Request::ForgetCopy).expect("encode"),
            json!({"op": "forget_copy"})
        );
        let start: Request = serde_json::from_str(
            r#"{"op": "start_copy", "call": 1, "group": 0, "deadline_mono_ns": 5}"#,
        )
        .expect("listener defaults to false");
        assert!(matches!(
            start,
            Request::StartCopy {
                listener: false,
                ..
            }
        ));
        for bad in [
            r#"{"op": "end_copy", "call": 1}"#,
            r#"{"op": "end_copy", "call": 1, "group": 0, "extra": 1}"#,
            r#"{"op": "drop_tables"}"#,
            r#"{"call": 1, "group": 0}"#,
            r#"{"op": "end_call", "call": "1"}"#,
            r#"{"op": "begin_call", "release": "r", "items": [], "hosts": [], "consumers": [], "smuggled": true}"#,
            "[]",
        ] {
            assert!(serde_json::from_str::<Request>(bad).is_err(), "{bad}");
        }
    }
}
