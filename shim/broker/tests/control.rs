//! The shim's control channel to the broker: a root-only SOCK_SEQPACKET socket, the peer
//! checked with SO_PEERCRED, the copy's namespace passed as a descriptor.

mod common;

use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use germline_broker::control::{self, BeginCall, BrokerClient};
use germline_broker::{Broker, BrokerConfig};
use germline_policy::call::LabelRules;
use germline_policy::plan::{ItemMeta, PlanMode};
use germline_policy::{Label, Policy};

/// Serves the control socket `listener` for `broker` on a thread, a thread per connection, as
/// `germline broker serve` does.
fn serve(broker: &Arc<Broker>, listener: std::os::fd::OwnedFd) {
    let b = broker.clone();
    std::thread::spawn(move || {
        while let Ok(fd) = nix::sys::socket::accept(std::os::fd::AsRawFd::as_raw_fd(&listener)) {
            // SAFETY: accept returned a fresh descriptor owned by nobody else.
            let conn = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
            let b = b.clone();
            std::thread::spawn(move || control::connection(&b, conn));
        }
    });
}

/// A broker for `p` (its state under `dir`) serving its control socket `dir/run/broker.sock`,
/// and a client connected to that socket.
fn control_broker(dir: &Path, p: Arc<Policy>) -> (Arc<Broker>, PathBuf, BrokerClient) {
    let broker = Arc::new(Broker::start(BrokerConfig::new(p, &dir.join("state"))).expect("broker"));
    let sock = dir.join("run/broker.sock");
    let listener = control::bind(&sock).expect("bind");
    serve(&broker, listener);
    let c = BrokerClient::connect(&sock).expect("connect");
    (broker, sock, c)
}

/// The control request that begins a call on `items` with ocr.example (finance) as its one
/// host and the agent cleared for `agent`.
fn ocr_call(items: Vec<ItemMeta>, agent: &[&str]) -> BeginCall {
    BeginCall {
        release: "sha256:r".into(),
        user: String::new(),
        items,
        hosts: vec![m("ocr.example", &["finance"])],
        consumers: vec![m("agent", agent)],
        mode: PlanMode::Split,
        rules: LabelRules::default(),
        open: false,
        replay: None,
        concurrent: false,
    }
}

/// Starts copy 0 of `call` in a fresh network namespace and posts the invoice to ocr.example
/// through the broker's endpoint there (prepared before the start, and taken by it); the
/// answer must be 200.
fn post_invoice(broker: &Broker, c: &BrokerClient, call: u64) {
    let ns = TestNetns::new();
    // The copy's endpoint prepared while it waited (germline_broker::prepared), then taken
    // by its start.
    c.prepare_copy(ns.fd.as_fd()).expect("prepare");
    assert_eq!(broker.prepared_endpoints(), 1);
    let proxy = c
        .start_copy(
            call,
            0,
            ns.fd.as_fd(),
            Instant::now() + Duration::from_secs(10),
        )
        .expect("start");
    assert_eq!(broker.prepared_endpoints(), 0, "the start took it");
    let addr = proxy.parse().expect("addr");
    let r = ns.run(move || {
        http(addr, "POST", "http://ocr.example/ocr", &[], b"invoice").expect("request")
    });
    assert_eq!(r.status, 200);
}

#[test]
fn a_call_through_the_control_socket() {
    if !require_root() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let sink = Sink::ok();
    let p = ocr_policy(dir.path(), &sink);
    let (broker, sock, c) = control_broker(dir.path(), p);
    let mode = std::fs::metadata(dir.path().join("run"))
        .expect("dir")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o700, "the socket's directory is root-only");

    assert!(c.ca_cert().expect("ca").contains("BEGIN CERTIFICATE"));
    let (call, _twin, plan) = c
        .begin_call(ocr_call(
            vec![item("invoice", &["finance"]), item("salary", &["hr"])],
            &["finance", "hr"],
        ))
        .expect("begin");
    assert_eq!(plan.groups.len(), 2);
    post_invoice(&broker, &c, call);
    let (out, _) = c.end_copy(call, 0).expect("end copy");
    assert_eq!(out.label, Label::of(["finance"]));
    // A copy's namespace is required, and a malformed request is answered without closing.
    let err = c.end_copy(call, 0).expect_err("no live copy");
    assert!(err.to_string().contains("no live copy"), "{err}");
    let rec = c.end_call(call).expect("record");
    assert_eq!(rec.delivered.get("ocr.example").map(Vec::len), Some(1));
    assert_eq!(sink.count(), 1);

    // A peer that is neither root nor the broker's user is refused, even if it reaches the
    // socket (here the test opens the directory to let it try).
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::set_permissions(
        dir.path().join("run"),
        std::fs::Permissions::from_mode(0o755),
    )
    .expect("chmod");
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let exe = std::env::current_exe().expect("exe");
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["--exact", "peer_child", "--nocapture"])
        .env("GERMLINE_PEER_SOCKET", &sock);
    // SAFETY: setuid(2) is async-signal-safe; it runs in the child between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setgid(65534) != 0 || libc::setuid(65534) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let o = cmd.output().expect("run peer");
    let text =
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    assert!(
        text.contains("PEER-RESULT: refused: broker refused: peer uid 65534 refused"),
        "{text}"
    );
}

/// Runs as uid 65534 under the test above; does nothing otherwise.
#[test]
fn peer_child() {
    let Some(sock) = std::env::var_os("GERMLINE_PEER_SOCKET") else {
        return;
    };
    let r = BrokerClient::connect(std::path::Path::new(&sock)).and_then(|c| c.ca_cert());
    match r {
        Ok(_) => println!("PEER-RESULT: accepted"),
        Err(e) => println!("PEER-RESULT: refused: {e}"),
    }
}

/// A call's record carries its delivered replies (hex encoded) back over the control socket.
/// A unix SEQPACKET message must fit the sender's send buffer, 212992 bytes at Linux's default
/// `wmem_default`: the reference below shows a record of a 300 KB reply does not fit a socket
/// left at the default, and the broker's widened sockets carry it whole. A record past the
/// channel's 1 MiB limit is refused with the reason and the connection stays usable.
#[test]
fn records_past_the_default_socket_buffer_come_back_and_past_the_limit_are_refused() {
    if !require_root() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let size = Arc::new(std::sync::atomic::AtomicUsize::new(300_000));
    let sz = size.clone();
    let sink = Sink::with(Arc::new(move |_r: &Received| {
        let n = sz.load(std::sync::atomic::Ordering::Relaxed);
        (200, vec![], vec![b'r'; n])
    }));
    let p = ocr_policy(dir.path(), &sink);
    let (broker, _sock, c) = control_broker(dir.path(), p);
    let one_call = |c: &BrokerClient| {
        let (call, _twin, _plan) = c
            .begin_call(ocr_call(vec![item("invoice", &["finance"])], &["finance"]))
            .expect("begin");
        post_invoice(&broker, c, call);
        c.end_copy(call, 0).expect("end copy");
        c.end_call(call)
    };
    let rec = one_call(&c).expect("a record of a 300 KB reply");
    let body = rec
        .delivered
        .get("ocr.example")
        .and_then(|d| d.first())
        .expect("the reply")
        .1
        .body
        .len();
    assert_eq!(body, 300_000, "the whole reply");
    // The reference: the same record on a SEQPACKET pair left at the default buffer size.
    let (a, _b) = nix::sys::socket::socketpair(
        nix::sys::socket::AddressFamily::Unix,
        nix::sys::socket::SockType::SeqPacket,
        None,
        nix::sys::socket::SockFlag::SOCK_CLOEXEC,
    )
    .expect("socketpair");
    let text = serde_json::to_string(&rec).expect("a record is JSON");
    let default = nix::sys::socket::send(
        std::os::fd::AsRawFd::as_raw_fd(&a),
        text.as_bytes(),
        nix::sys::socket::MsgFlags::empty(),
    );
    let wmem: usize = std::fs::read_to_string("/proc/sys/net/core/wmem_default")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    if wmem < text.len() {
        assert_eq!(default, Err(nix::errno::Errno::EMSGSIZE), "{wmem}");
    }
    // Past the limit: refused with the reason, and the same connection serves the next call.
    size.store(600_000, std::sync::atomic::Ordering::Relaxed);
    let err = one_call(&c).expect_err("a record past 1 MiB");
    assert!(err.to_string().contains("message limit"), "{err}");
    size.store(10, std::sync::atomic::Ordering::Relaxed);
    assert!(one_call(&c).is_ok());
    assert_eq!(sink.count(), 3);
}

/// A client that polls for its replies before sleeping (`BrokerClient::set_spin`, branch
/// node40): a whole call goes through as with a sleeping client, refusals included, and a
/// reply slower than the poll is still read (the client then sleeps for it).
#[test]
fn a_polling_client_gets_every_reply() {
    if !require_root() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let sink = Sink::ok();
    let p = ocr_policy(dir.path(), &sink);
    let (broker, sock, _) = control_broker(dir.path(), p);
    for spin in [Duration::from_millis(50), Duration::from_nanos(1)] {
        let mut c = BrokerClient::connect(&sock).expect("connect");
        c.set_spin(spin);
        assert_eq!(c.copy_proxy().expect("proxy"), broker.copy_proxy_addr());
        let (call, _, _) = c
            .begin_call(ocr_call(vec![item("invoice", &["finance"])], &["finance"]))
            .expect("begin");
        post_invoice(&broker, &c, call);
        let (out, _, rec) = c.end_last_copy(call, 0).expect("end last copy");
        assert_eq!(out.label, Label::of(["finance"]), "{spin:?}");
        assert_eq!(rec.delivered.get("ocr.example").map(Vec::len), Some(1));
        let err = c.end_call(call).expect_err("the call already ended");
        assert!(
            err.to_string().contains(&format!("no call {call}")),
            "{err}"
        );
    }
    assert_eq!(sink.count(), 2);
}

/// `end_last_copy` (issue 30): one round trip ends the call's last copy and the call, with the
/// same outcome and record as `end_copy` then `end_call`; the call is ended even when the
/// copy's end is refused, so nothing of it stays pending.
#[test]
fn the_last_copy_and_its_call_end_in_one_round_trip() {
    if !require_root() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let sink = Sink::ok();
    let p = ocr_policy(dir.path(), &sink);
    let (broker, _sock, c) = control_broker(dir.path(), p);
    let begin = || {
        c.begin_call(ocr_call(vec![item("invoice", &["finance"])], &["finance"]))
            .expect("begin")
    };
    let (call, _twin, plan) = begin();
    assert_eq!(plan.groups.len(), 1);
    post_invoice(&broker, &c, call);
    let (out, requests, rec) = c.end_last_copy(call, 0).expect("end last copy");
    assert_eq!(out.label, Label::of(["finance"]));
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_eq!(requests[0].host, "ocr.example");
    assert_eq!(rec.call, call);
    assert_eq!(rec.delivered.get("ocr.example").map(Vec::len), Some(1));
    assert!(rec.copies.contains_key(&0), "{rec:?}");
    assert_eq!(sink.count(), 1);
    // The call is over: a second end of it is refused.
    let again = c.end_call(call).expect_err("the call already ended");
    assert!(
        again.to_string().contains(&format!("no call {call}")),
        "{again}"
    );

    // A copy that was never started: its end is refused, and the call is ended all the same.
    let (call, _, _) = begin();
    let err = c.end_last_copy(call, 0).expect_err("no live copy");
    assert!(err.to_string().contains("no live copy"), "{err}");
    let again = c
        .end_call(call)
        .expect_err("the call was ended with the refusal");
    assert!(
        again.to_string().contains(&format!("no call {call}")),
        "{again}"
    );
}

/// A pool copy the shim drops unused is forgotten (`forget_copy`, germline_broker::prepared):
/// its prepared listener is closed (nothing listens in its namespace any more, so nothing pins
/// it), the broker's count (`stats`'s `prepared`) returns to zero, a second forget finds
/// nothing, and a later start naming that namespace binds its endpoint afresh and serves.
#[test]
fn a_forgotten_endpoint_is_closed_and_a_later_start_binds_afresh() {
    if !require_root() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let sink = Sink::ok();
    let p = ocr_policy(dir.path(), &sink);
    let (broker, _sock, c) = control_broker(dir.path(), p);
    let proxy = c.copy_proxy().expect("proxy");
    let ns = TestNetns::new();
    let other = TestNetns::new();
    c.prepare_copy(ns.fd.as_fd()).expect("prepare");
    c.prepare_copy(other.fd.as_fd()).expect("prepare another");
    assert_eq!(c.prepared_endpoints().expect("stats"), 2);
    assert!(
        ns.run(move || std::net::TcpStream::connect(proxy).is_ok()),
        "the prepared listener accepts in the copy's namespace"
    );
    let f = c.forget_copy(ns.fd.as_fd()).expect("forget");
    assert_eq!((f.forgotten, f.prepared), (true, 1), "only that copy's");
    assert_eq!(broker.prepared_endpoints(), 1);
    assert!(
        ns.run(move || std::net::TcpStream::connect(proxy).is_err()),
        "the forgotten listener is closed: nothing listens in that namespace"
    );
    let again = c.forget_copy(ns.fd.as_fd()).expect("forget again");
    assert_eq!((again.forgotten, again.prepared), (false, 1));
    let f = c.forget_copy(other.fd.as_fd()).expect("forget the other");
    assert_eq!((f.forgotten, f.prepared), (true, 0));
    assert_eq!(c.prepared_endpoints().expect("stats"), 0);
    // A start naming the forgotten copy's namespace binds its endpoint on the spot.
    let (call, _, _) = c
        .begin_call(ocr_call(vec![item("invoice", &["finance"])], &["finance"]))
        .expect("begin");
    let addr = c
        .start_copy(
            call,
            0,
            ns.fd.as_fd(),
            Instant::now() + Duration::from_secs(10),
        )
        .expect("start")
        .parse()
        .expect("addr");
    let r = ns.run(move || {
        http(addr, "POST", "http://ocr.example/ocr", &[], b"invoice").expect("request")
    });
    assert_eq!(r.status, 200);
    c.end_copy(call, 0).expect("end copy");
    c.end_call(call).expect("end call");
    assert_eq!(sink.count(), 1);
}
