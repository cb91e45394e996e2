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
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::{Broker, Twin};

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
    /// Raises a running copy's label (an input the shim handed it during the call).
    RaiseCopy {
        call: u64,
        group: usize,
        label: Label,
    },
    EndCall {
        call: u64,
    },
    CaCert,
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

fn send(fd: RawFd, v: &Value, pass: Option<BorrowedFd<'_>>) -> Result<(), ControlError> {
    send_text(fd, &v.to_string(), pass)
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
    let mut buf = vec![0u8; MAX_MESSAGE];
    let mut cmsg = nix::cmsg_space!([RawFd; 2]);
    let mut iov = [IoSliceMut::new(&mut buf)];
    let msg = socket::recvmsg::<()>(fd, &mut iov, Some(&mut cmsg), MsgFlags::MSG_CMSG_CLOEXEC)
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
    buf.truncate(n);
    Ok((buf, passed))
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
    let se = |source| ControlError::Socket {
        path: path.to_path_buf(),
        source,
    };
    let fd = seqpacket().map_err(se)?;
    let addr = UnixAddr::new(path).map_err(se)?;
    socket::bind(fd.as_raw_fd(), &addr).map_err(se)?;
    socket::listen(&fd, Backlog::new(64).map_err(se)?).map_err(se)?;
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
            let _ = send(
                conn.as_raw_fd(),
                &json!({"ok": false, "error": format!("peer uid {} refused", c.uid())}),
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
    loop {
        let (bytes, passed) = match recv(conn.as_raw_fd()) {
            Ok(x) => x,
            Err(ControlError::Refused(e)) => {
                let _ = send(conn.as_raw_fd(), &json!({"ok": false, "error": e}), None);
                continue;
            }
            Err(_) => return,
        };
        let reply = match serde_json::from_slice::<Request>(&bytes) {
            Ok(req) => handle(broker, req, passed),
            Err(e) => Err(format!("malformed request: {e}")),
        };
        let v = match reply {
            Ok(mut v) => {
                if let Value::Object(m) = &mut v {
                    m.insert("ok".into(), json!(true));
                }
                v
            }
            Err(e) => json!({"ok": false, "error": e}),
        };
        // A reply larger than the peer takes is answered with the reason, not dropped with
        // the connection (the session goes on; only this request fails).
        let mut text = v.to_string();
        if text.len() > MAX_MESSAGE {
            text = json!({"ok": false, "error": format!(
                "reply of {} bytes exceeds the control channel's {MAX_MESSAGE}-byte message limit",
                text.len())})
            .to_string();
        }
        if send_text(conn.as_raw_fd(), &text, None).is_err() {
            return;
        }
    }
}

fn handle(broker: &Broker, req: Request, passed: Option<OwnedFd>) -> Result<Value, String> {
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
                None => broker.begin_call_with(
                    &c.release,
                    &c.user,
                    p.clone(),
                    &c.hosts,
                    c.rules,
                    c.open,
                ),
            }
            .map_err(|e| e.to_string())?;
            Ok(json!({"call": call, "twin": twin, "plan": p}))
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
            Ok(json!({"proxy": addr.to_string()}))
        }
        Request::EndCopy { call, group } => {
            let (out, requests) = broker
                .end_copy_with_requests(call, group)
                .map_err(|e| e.to_string())?;
            Ok(json!({"outcome": out, "requests": requests}))
        }
        Request::RaiseCopy { call, group, label } => {
            broker
                .raise_copy(call, group, &label)
                .map_err(|e| e.to_string())?;
            Ok(json!({}))
        }
        Request::EndCall { call } => {
            let rec = broker.end_call(call).map_err(|e| e.to_string())?;
            Ok(json!({"record": rec}))
        }
        Request::CaCert => Ok(json!({"pem": broker.ca_cert_pem()})),
        Request::CopyProxy => Ok(json!({"proxy": broker.copy_proxy_addr().to_string()})),
        Request::Stats => Ok(json!({"requests": broker.stats().verdict_rows()})),
    }
}

/// The shim's side of the channel.
#[derive(Debug)]
pub struct BrokerClient {
    fd: OwnedFd,
}

impl BrokerClient {
    pub fn connect(path: &Path) -> Result<Self, ControlError> {
        let se = |source| ControlError::Socket {
            path: path.to_path_buf(),
            source,
        };
        let fd = seqpacket().map_err(se)?;
        let addr = UnixAddr::new(path).map_err(se)?;
        socket::connect(fd.as_raw_fd(), &addr).map_err(se)?;
        Ok(Self { fd })
    }

    fn call(&self, req: &Request, pass: Option<BorrowedFd<'_>>) -> Result<Value, ControlError> {
        send(
            self.fd.as_raw_fd(),
            &serde_json::to_value(req).map_err(ControlError::Json)?,
            pass,
        )?;
        let (bytes, _) = recv(self.fd.as_raw_fd())?;
        let v: Value = serde_json::from_slice(&bytes).map_err(ControlError::Json)?;
        if v["ok"] == json!(true) {
            Ok(v)
        } else {
            Err(ControlError::Refused(
                v["error"].as_str().unwrap_or("unknown error").to_string(),
            ))
        }
    }

    pub fn begin_call(&self, call: BeginCall) -> Result<(u64, Twin, Plan), ControlError> {
        let req = Request::BeginCall(call);
        let v = self.call(&req, None)?;
        let call = v["call"]
            .as_u64()
            .ok_or_else(|| ControlError::Refused("no call id".into()))?;
        let twin = serde_json::from_value(v["twin"].clone()).map_err(ControlError::Json)?;
        let plan = serde_json::from_value(v["plan"].clone()).map_err(ControlError::Json)?;
        Ok((call, twin, plan))
    }

    pub fn start_copy(
        &self,
        call: u64,
        group: usize,
        netns: BorrowedFd<'_>,
        deadline: Instant,
    ) -> Result<String, ControlError> {
        let req = Request::StartCopy {
            call,
            group,
            deadline_mono_ns: mono_ns_of(deadline),
            listener: false,
        };
        let v = self.call(&req, Some(netns))?;
        Ok(v["proxy"].as_str().unwrap_or_default().to_string())
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
        let req = Request::StartCopy {
            call,
            group,
            deadline_mono_ns: mono_ns_of(deadline),
            listener: true,
        };
        let v = self.call(&req, Some(listener))?;
        Ok(v["proxy"].as_str().unwrap_or_default().to_string())
    }

    pub fn end_copy(&self, call: u64, group: usize) -> Result<CopyOutcome, ControlError> {
        self.end_copy_with_requests(call, group).map(|(o, _)| o)
    }

    /// [`BrokerClient::end_copy`], with the copy's request events (for its trace).
    pub fn end_copy_with_requests(
        &self,
        call: u64,
        group: usize,
    ) -> Result<(CopyOutcome, Vec<crate::RequestEvent>), ControlError> {
        let v = self.call(&Request::EndCopy { call, group }, None)?;
        let outcome = serde_json::from_value(v["outcome"].clone()).map_err(ControlError::Json)?;
        let requests = match v.get("requests") {
            Some(r) => serde_json::from_value(r.clone()).map_err(ControlError::Json)?,
            None => Vec::new(),
        };
        Ok((outcome, requests))
    }

    /// Raises copy `group`'s label by `label` before the shim hands it an input of that label.
    pub fn raise_copy(&self, call: u64, group: usize, label: &Label) -> Result<(), ControlError> {
        self.call(
            &Request::RaiseCopy {
                call,
                group,
                label: label.clone(),
            },
            None,
        )
        .map(drop)
    }

    /// The call's record as JSON (replies carry hex bodies).
    pub fn end_call(&self, call: u64) -> Result<Value, ControlError> {
        let v = self.call(&Request::EndCall { call }, None)?;
        Ok(v["record"].clone())
    }

    /// Requests by (release digest, host label, verdict) with their counts.
    pub fn stats(&self) -> Result<Vec<(String, String, String, u64)>, ControlError> {
        let v = self.call(&Request::Stats, None)?;
        serde_json::from_value(v["requests"].clone()).map_err(ControlError::Json)
    }

    /// The broker's copy proxy address ([`Broker::copy_proxy_addr`]).
    pub fn copy_proxy(&self) -> Result<std::net::SocketAddr, ControlError> {
        let v = self.call(&Request::CopyProxy, None)?;
        v["proxy"]
            .as_str()
            .and_then(|a| a.parse().ok())
            .ok_or_else(|| ControlError::Refused(format!("no copy proxy address in {v}")))
    }

    pub fn ca_cert(&self) -> Result<String, ControlError> {
        let v = self.call(&Request::CaCert, None)?;
        Ok(v["pem"].as_str().unwrap_or_default().to_string())
    }
}
