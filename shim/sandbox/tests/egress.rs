//! A real copy of a Python germline makes an HTTPS request through the real broker: the
//! deployment CA reaches the copy through `LaunchSpec::extra_mounts` (the bundles of
//! `germline_broker::ca::copy_trust` bind-mounted over the rootfs's CA paths), and the copy's
//! Python TLS clients verify the broker's intercepting certificate. Without the mounts, the
//! same copy fails verification (mechanism on vs off).

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use germline_broker::{Broker, BrokerConfig, COPY_PORTS};
use germline_policy::call::LabelRules;
use germline_policy::plan::{plan, Member, PlanInput, PlanMode};
use germline_policy::{Label, Policy};
use germline_sandbox::spec::{BindMount, DEFAULT_PYTHON_ROOTFS};
use germline_sandbox::{Germline, LaunchSpec};

const HOST: &str = "secure.example";

/// An HTTPS sink on loopback with its own test CA; records the request lines it receives.
struct Sink {
    addr: SocketAddr,
    got: Arc<Mutex<Vec<String>>>,
}

fn sink(dir: &Path) -> (Sink, PathBuf) {
    let ca_key = rcgen::KeyPair::generate().expect("key");
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "egress test upstream CA");
    let ca_cert = ca.self_signed(&ca_key).expect("ca");
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let key = rcgen::KeyPair::generate().expect("key");
    let leaf = rcgen::CertificateParams::new(vec![HOST.to_string()])
        .expect("leaf")
        .signed_by(&key, &issuer)
        .expect("sign");
    let ca_path = dir.join("upstream-ca.pem");
    std::fs::write(&ca_path, ca_cert.pem()).expect("write ca");
    let cfg = Arc::new(
        rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(
            vec![leaf.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .expect("server cfg"),
    );
    let l = TcpListener::bind("127.0.0.1:0").expect("bind sink");
    let addr = l.local_addr().expect("addr");
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = got.clone();
    std::thread::spawn(move || {
        for conn in l.incoming().flatten() {
            let (cfg, g) = (cfg.clone(), g.clone());
            std::thread::spawn(move || {
                let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
                let Ok(sc) = rustls::ServerConnection::new(cfg) else {
                    return;
                };
                let mut tls = rustls::StreamOwned::new(sc, conn);
                let mut r = BufReader::new(&mut tls);
                let mut first = String::new();
                if r.read_line(&mut first).is_err() {
                    return;
                }
                loop {
                    let mut line = String::new();
                    match r.read_line(&mut line) {
                        Ok(n) if n > 2 => {}
                        _ => break,
                    }
                }
                if let Ok(mut v) = g.lock() {
                    v.push(first.trim().to_string());
                }
                let body = b"hello from the sink";
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = tls.write_all(head.as_bytes());
                let _ = tls.write_all(body);
                let _ = tls.flush();
                let mut rest = [0u8; 64];
                let _ = tls.read(&mut rest);
            });
        }
    });
    (Sink { addr, got }, ca_path)
}

fn broker(dir: &Path, sink: &Sink, upstream_ca: PathBuf) -> Broker {
    let policy = format!(
        "[labels]\nfinance = \"\"\n\n[destinations]\n\"{HOST}\" = []\n\n[pins]\n\"{HOST}\" = \"{}\"\n",
        sink.addr
    );
    let path = dir.join("policy.toml");
    std::fs::write(&path, &policy).expect("write policy");
    let policy = Arc::new(Policy::load(&path).expect("policy"));
    let mut cfg = BrokerConfig::new(policy, &dir.join("state"));
    cfg.native_roots = false;
    cfg.extra_roots = vec![upstream_ca];
    Broker::start(cfg).expect("broker")
}

/// The rootfs as a Debian image has it: with Debian's CA bundle (copied from the host, like
/// the tests' other fixtures; the setup script adds it to new rootfs builds).
fn debian_bundle() {
    let certs = Path::new(DEFAULT_PYTHON_ROOTFS).join("etc/ssl/certs");
    let dst = certs.join("ca-certificates.crt");
    if dst.is_file() {
        return;
    }
    std::fs::create_dir_all(&certs).expect("mkdir certs");
    let tmp = certs.join(format!(".bundle.{}.tmp", std::process::id()));
    std::fs::copy("/etc/ssl/certs/ca-certificates.crt", &tmp).expect("copy the host bundle");
    std::fs::rename(&tmp, &dst).expect("install the bundle");
}

/// One call of group 0 in a fresh copy whose network namespace the broker serves.
fn fetch_in_copy(g: &mut Germline, b: &Broker, client: &str, url: &str) -> Value {
    let hosts = [Member {
        name: HOST.into(),
        clearance: Label::of::<[&str; 0], &str>([]),
    }];
    let consumers = [Member {
        name: "agent".into(),
        clearance: Label::of::<[&str; 0], &str>([]),
    }];
    let p = plan(
        PlanInput {
            items: &[],
            hosts: &hosts,
            consumers: &consumers,
        },
        PlanMode::Split,
    )
    .expect("plan");
    let (call, _) = b
        .begin_call(
            "sha256:egress-test",
            "",
            p,
            &hosts,
            LabelRules::default(),
            false,
        )
        .expect("begin call");
    let mut copy = g.copy().expect("copy");
    let netns = std::fs::File::open(format!("/proc/{}/ns/net", copy.pid())).expect("copy netns");
    let proxy = b
        .start_copy(call, 0, netns.as_fd(), copy.deadline())
        .expect("start copy");
    assert_eq!(proxy, b.copy_proxy_addr());
    let r = (|| {
        g.prepare_copy(&mut copy, &[])?;
        copy.deliver(&[])?;
        copy.mcp_call("fetch", json!({"url": url, "client": client}))
    })();
    let r = copy.finish(r).expect("call");
    let _ = b.end_copy(call, 0);
    let _ = b.end_call(call);
    common::json_of(&common::text(&r))
}

fn spec(b: &Broker, trust: &germline_broker::ca::CopyTrust, mounts: bool) -> LaunchSpec {
    let mut spec = common::test_release("plain");
    // The broker drew its copies' proxy port when it started: not 3128 or another fixed one.
    let proxy = b.copy_proxy_addr();
    assert!(COPY_PORTS.contains(&proxy.port()), "{proxy}");
    spec.egress_port = Some(proxy.port());
    spec.env.push(format!("HTTPS_PROXY=http://{proxy}"));
    spec.env
        .extend(trust.env.iter().map(|(k, v)| format!("{k}={v}")));
    if mounts {
        spec.extra_mounts = trust.mounts.iter().cloned().map(BindMount::from).collect();
    }
    spec
}

#[test]
fn a_copy_verifies_the_broker_certificate_only_with_the_ca_mounted() {
    if !common::can_run() {
        return;
    }
    debian_bundle();
    let dir = tempfile::tempdir().expect("tempdir");
    let (sink, upstream_ca) = sink(dir.path());
    let b = broker(dir.path(), &sink, upstream_ca);
    // Bundles in a folder the germline's unprivileged host user may read.
    let out = dir.path().join("trust");
    let trust =
        germline_broker::ca::copy_trust(Path::new(DEFAULT_PYTHON_ROOTFS), b.ca_cert_pem(), &out)
            .expect("copy trust");
    use std::os::unix::fs::PermissionsExt;
    for p in [dir.path(), out.as_path()] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    assert!(
        trust
            .mounts
            .iter()
            .any(|(_, t)| t == Path::new("etc/ssl/certs/ca-certificates.crt")),
        "{trust:?}"
    );
    let url = format!("https://{HOST}:{}/hello", sink.addr.port());

    // On: the bundles are mounted in the germline, so every copy trusts the deployment CA.
    // One more mount below /run, where the keeper makes the mount point in its own tmpfs.
    let mut on = spec(&b, &trust, true);
    on.extra_mounts.push(BindMount {
        source: out.join("germline-ca.pem"),
        target: "/run/germline/ca.pem".into(),
    });
    let mut g = Germline::start(on, common::opts("egress-on")).expect("start");
    assert_eq!(g.check(), Vec::<String>::new());
    let read = common::json_of(
        &common::call_text(
            &mut g,
            "read_files",
            json!({"paths": ["/run/germline/ca.pem", "/etc/ssl/certs/ca-certificates.crt"]}),
        )
        .expect("read"),
    );
    assert_eq!(read["/run/germline/ca.pem"], b.ca_cert_pem(), "{read}");
    assert!(
        read["/etc/ssl/certs/ca-certificates.crt"]
            .as_str()
            .is_some_and(|s| s.ends_with(b.ca_cert_pem())),
        "the Debian bundle ends with the deployment CA"
    );
    let on_urllib = fetch_in_copy(&mut g, &b, "urllib", &url);
    let on_httpx = fetch_in_copy(&mut g, &b, "httpx", &url);
    g.stop().expect("stop");
    assert_eq!(on_urllib["status"], 200, "urllib: {on_urllib}");
    assert_eq!(on_urllib["body"], "hello from the sink", "{on_urllib}");
    assert_eq!(on_httpx["status"], 200, "httpx2: {on_httpx}");
    assert_eq!(on_httpx["body"], "hello from the sink", "{on_httpx}");
    let reached = sink.got.lock().map(|v| v.len()).unwrap_or(0);
    assert_eq!(reached, 2, "both requests were delivered upstream");

    // Off: the same release and environment without the mounts: the rootfs's own bundle does
    // not hold the deployment CA, so both clients refuse the broker's certificate.
    let mut g =
        Germline::start(spec(&b, &trust, false), common::opts("egress-off")).expect("start");
    let off_urllib = fetch_in_copy(&mut g, &b, "urllib", &url);
    let off_httpx = fetch_in_copy(&mut g, &b, "httpx", &url);
    g.stop().expect("stop");
    for (who, r) in [("urllib", &off_urllib), ("httpx2", &off_httpx)] {
        let e = r["error"].as_str().unwrap_or_default();
        assert!(
            e.contains("CERTIFICATE_VERIFY_FAILED"),
            "{who} without the CA mount: {r}"
        );
    }
    let reached = sink.got.lock().map(|v| v.len()).unwrap_or(0);
    assert_eq!(reached, 2, "nothing more reached the sink");
}
