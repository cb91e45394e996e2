//! `germline broker serve` as its own process: the shim's client reaches it over the control
//! socket and a copy's request goes through it to a sink.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::fd::{AsFd, OwnedFd};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use germline_broker::control::{BeginCall, BrokerClient};
use germline_policy::call::LabelRules;
use germline_policy::plan::{Member, PlanMode};
use germline_policy::Label;

/// Kills the daemon even when an assertion fails.
struct Daemon(std::process::Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn broker_serve_process() {
    // SAFETY: geteuid(2) cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        assert!(
            std::env::var_os("GERMLINE_REQUIRE_ROOT_TESTS").is_none(),
            "needs root"
        );
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let sink = TcpListener::bind("127.0.0.1:0").expect("sink");
    let sink_addr = sink.local_addr().expect("addr");
    let received = std::thread::spawn(move || {
        let (mut s, _) = sink.accept().expect("accept");
        let mut buf = vec![0; 4096];
        let n = s.read(&mut buf).expect("read");
        let _ =
            s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\nconnection: close\r\n\r\ndone");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    });
    let policy = dir.path().join("policy.toml");
    std::fs::write(
        &policy,
        format!("[labels]\nfinance = \"\"\n[destinations]\n\"ocr.example\" = [\"finance\"]\n[pins]\n\"ocr.example\" = \"{sink_addr}\"\n"),
    )
    .expect("policy");
    let sock = dir.path().join("run/broker.sock");
    let audit = dir.path().join("audit.jsonl");
    let _daemon = Daemon(
        Command::new(env!("CARGO_BIN_EXE_germline"))
            .arg("broker")
            .arg("serve")
            .arg("--policy")
            .arg(&policy)
            .arg("--socket")
            .arg(&sock)
            .arg("--state")
            .arg(dir.path().join("state"))
            .arg("--audit")
            .arg(&audit)
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn broker"),
    );
    let t0 = Instant::now();
    let client = loop {
        match BrokerClient::connect(&sock) {
            Ok(c) => break c,
            Err(e) if t0.elapsed() > Duration::from_secs(10) => {
                panic!("broker never listened: {e}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    let ocr = Member {
        name: "ocr.example".into(),
        clearance: Label::of(["finance"]),
    };
    let (call, _, plan) = client
        .begin_call(BeginCall {
            release: "sha256:daemon".into(),
            user: String::new(),
            items: vec![],
            hosts: vec![ocr],
            consumers: vec![],
            mode: PlanMode::Split,
            rules: LabelRules::default(),
            open: false,
            replay: None,
            concurrent: false,
        })
        .expect("begin");
    assert_eq!(plan.groups.len(), 1);
    let ns: OwnedFd = std::thread::spawn(|| {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).expect("unshare");
        OwnedFd::from(std::fs::File::open("/proc/thread-self/ns/net").expect("ns"))
    })
    .join()
    .expect("ns thread");
    let proxy = client
        .start_copy(
            call,
            0,
            ns.as_fd(),
            Instant::now() + Duration::from_secs(10),
        )
        .expect("start copy");
    let ns2 = ns.try_clone().expect("dup");
    let answer = std::thread::spawn(move || {
        nix::sched::setns(ns2.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
        let mut s = std::net::TcpStream::connect(proxy.as_str()).expect("connect proxy in the copy's netns");
        s.write_all(b"POST http://ocr.example/ocr HTTP/1.1\r\nhost: ocr.example\r\ncontent-length: 7\r\nconnection: close\r\n\r\ninvoice")
            .expect("write");
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    })
    .join()
    .expect("copy thread");
    assert!(
        answer.starts_with("HTTP/1.1 200") && answer.ends_with("done"),
        "{answer}"
    );
    let (out, _) = client.end_copy(call, 0).expect("end copy");
    assert_eq!(out.label, Label::of(["finance"]));
    assert!(received.join().expect("sink").ends_with("invoice"));
    client.end_call(call).expect("end call");
    let log = std::fs::read_to_string(&audit).expect("audit");
    assert!(
        log.contains("\"verdict\":\"delivered\"") && log.contains("\"host\":\"ocr.example\""),
        "{log}"
    );
}
