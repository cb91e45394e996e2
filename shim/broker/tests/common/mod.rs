//! Test harness for the broker: real HTTP(S) sinks on loopback that record every byte, test
//! network namespaces standing in for copies' namespaces, and a plain HTTP client that talks
//! to a copy's proxy from inside its namespace.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use germline_broker::{Broker, BrokerConfig};
use germline_policy::call::LabelRules;
use germline_policy::plan::{plan, ItemMeta, Member, PlanInput, PlanMode};
use germline_policy::{Label, Policy};

/// Root is needed for network namespaces. Under scripts/test.sh a missing privilege fails.
pub fn require_root() -> bool {
    // SAFETY: geteuid(2) cannot fail and takes no arguments.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    assert!(
        std::env::var_os("GERMLINE_REQUIRE_ROOT_TESTS").is_none(),
        "this test needs root"
    );
    eprintln!("skipping: needs root");
    false
}

/// One request as a sink received it.
#[derive(Debug, Clone)]
pub struct Received {
    pub raw: Vec<u8>,
    pub head: String,
    pub body: Vec<u8>,
}

pub type Handler = Arc<dyn Fn(&Received) -> (u16, Vec<(String, String)>, Vec<u8>) + Send + Sync>;

/// An HTTP sink on loopback that records every request. Stops when dropped.
pub struct Sink {
    pub addr: SocketAddr,
    pub got: Arc<Mutex<Vec<Received>>>,
    stop: Arc<AtomicBool>,
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(self.addr);
    }
}

impl Sink {
    pub fn ok() -> Self {
        Self::with(Arc::new(|_r: &Received| (200, vec![], b"sink-ok".to_vec())))
    }

    pub fn with(handler: Handler) -> Self {
        Self::start(handler, None)
    }

    pub fn tls(handler: Handler, cfg: Arc<rustls::ServerConfig>) -> Self {
        Self::start(handler, Some(cfg))
    }

    fn start(handler: Handler, tls: Option<Arc<rustls::ServerConfig>>) -> Self {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind sink");
        let addr = l.local_addr().expect("addr");
        let got = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (g, s) = (got.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in l.incoming() {
                if s.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (g, h, tls) = (g.clone(), handler.clone(), tls.clone());
                std::thread::spawn(move || {
                    let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
                    match tls {
                        None => serve_one(conn, &g, &h),
                        Some(cfg) => {
                            let Ok(sc) = rustls::ServerConnection::new(cfg) else {
                                return;
                            };
                            let stream = rustls::StreamOwned::new(sc, conn);
                            serve_one(stream, &g, &h);
                        }
                    }
                });
            }
        });
        Self { addr, got, stop }
    }

    pub fn requests(&self) -> Vec<Received> {
        self.got.lock().map(|g| g.clone()).unwrap_or_default()
    }

    pub fn count(&self) -> usize {
        self.requests().len()
    }

    pub fn all_bytes(&self) -> Vec<u8> {
        self.requests().into_iter().flat_map(|r| r.raw).collect()
    }
}

fn content_length(head: &str) -> usize {
    head.lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().to_string())
        })
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn serve_one<S: Read + Write>(stream: S, got: &Mutex<Vec<Received>>, h: &Handler) {
    let mut r = BufReader::new(stream);
    let mut head = String::new();
    loop {
        let mut line = String::new();
        match r.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        head.push_str(&line);
        if line == "\r\n" {
            break;
        }
    }
    let len = content_length(&head);
    let mut body = vec![0; len];
    if r.read_exact(&mut body).is_err() {
        return;
    }
    let mut raw = head.clone().into_bytes();
    raw.extend_from_slice(&body);
    let rec = Received { raw, head, body };
    if let Ok(mut g) = got.lock() {
        g.push(rec.clone());
    }
    let (status, headers, rbody) = h(&rec);
    let mut out = format!(
        "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n",
        rbody.len()
    );
    for (n, v) in headers {
        out.push_str(&format!("{n}: {v}\r\n"));
    }
    out.push_str("\r\n");
    let s = r.get_mut();
    let _ = s.write_all(out.as_bytes());
    let _ = s.write_all(&rbody);
    let _ = s.flush();
}

/// A network namespace of our own, standing in for a copy's: empty but for `lo`.
pub struct TestNetns {
    pub fd: OwnedFd,
}

impl TestNetns {
    pub fn new() -> Self {
        let fd = std::thread::spawn(|| {
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).expect("unshare netns");
            let f = std::fs::File::open("/proc/thread-self/ns/net").expect("open ns");
            OwnedFd::from(f)
        })
        .join()
        .expect("netns thread");
        Self { fd }
    }

    /// Runs `f` on a thread inside this namespace.
    pub fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let fd = self.fd.try_clone().expect("dup ns");
        std::thread::spawn(move || {
            nix::sched::setns(fd.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
            f()
        })
        .join()
        .expect("copy thread")
    }
}

/// A response as the copy sees it.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub head: String,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn germline(&self) -> Option<String> {
        self.head.lines().find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("x-germline:")
                .map(|v| v.trim().to_string())
        })
    }
}

pub fn read_response<R: Read>(s: R) -> std::io::Result<Resp> {
    let mut r = BufReader::new(s);
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        head.push_str(&line);
        if line == "\r\n" {
            break;
        }
    }
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let len = content_length(&head);
    let mut body = vec![0; len];
    r.read_exact(&mut body)?;
    Ok(Resp { status, head, body })
}

/// Sends one raw request to `proxy` (from the calling thread's namespace).
pub fn raw(proxy: SocketAddr, req: &[u8]) -> std::io::Result<Resp> {
    let mut s = TcpStream::connect(proxy)?;
    s.set_read_timeout(Some(Duration::from_secs(15)))?;
    s.write_all(req)?;
    read_response(s)
}

/// An absolute-URI proxy request.
pub fn http(
    proxy: SocketAddr,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> std::io::Result<Resp> {
    let host = url
        .split("//")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .unwrap_or("");
    let mut req = format!(
        "{method} {url} HTTP/1.1\r\nhost: {host}\r\ncontent-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    for (n, v) in headers {
        req.push_str(&format!("{n}: {v}\r\n"));
    }
    req.push_str("\r\n");
    let mut bytes = req.into_bytes();
    bytes.extend_from_slice(body);
    raw(proxy, &bytes)
}

/// HTTPS through the proxy: CONNECT `target`, TLS with `sni` trusting `ca_pem`, then one
/// request with `host_header`.
pub fn https(
    proxy: SocketAddr,
    target: &str,
    sni: &str,
    host_header: &str,
    ca_pem: &str,
    path: &str,
    body: &[u8],
) -> std::io::Result<Resp> {
    let mut s = TcpStream::connect(proxy)?;
    s.set_read_timeout(Some(Duration::from_secs(15)))?;
    s.write_all(format!("CONNECT {target} HTTP/1.1\r\nhost: {target}\r\n\r\n").as_bytes())?;
    let mut r = BufReader::new(s.try_clone()?);
    let mut status = String::new();
    r.read_line(&mut status)?;
    loop {
        let mut line = String::new();
        r.read_line(&mut line)?;
        if line == "\r\n" || line.is_empty() {
            break;
        }
    }
    if !status.contains(" 200") {
        let code = status
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        return Ok(Resp {
            status: code,
            head: status,
            body: vec![],
        });
    }
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pemfile::certs(&mut ca_pem.as_bytes()) {
        roots
            .add(c.map_err(std::io::Error::other)?)
            .map_err(std::io::Error::other)?;
    }
    let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(std::io::Error::other)?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name =
        rustls::pki_types::ServerName::try_from(sni.to_string()).map_err(std::io::Error::other)?;
    let conn = rustls::ClientConnection::new(Arc::new(cfg), name).map_err(std::io::Error::other)?;
    let mut tls = rustls::StreamOwned::new(conn, s);
    let req = format!("POST {path} HTTP/1.1\r\nhost: {host_header}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n", body.len());
    tls.write_all(req.as_bytes())?;
    tls.write_all(body)?;
    tls.flush()?;
    read_response(tls)
}

/// A test CA and a server certificate for `names`, for HTTPS sinks.
pub fn test_tls(dir: &Path, names: &[&str]) -> (PathBuf, Arc<rustls::ServerConfig>) {
    let ca_key = rcgen::KeyPair::generate().expect("key");
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "test upstream CA");
    let ca_cert = ca.self_signed(&ca_key).expect("ca");
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let key = rcgen::KeyPair::generate().expect("key");
    let leaf =
        rcgen::CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .expect("leaf")
            .signed_by(&key, &issuer)
            .expect("sign");
    let path = dir.join("upstream-ca.pem");
    std::fs::write(&path, ca_cert.pem()).expect("write ca");
    let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_no_client_auth()
    .with_single_cert(
        vec![leaf.der().clone()],
        rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
    )
    .expect("server cfg");
    (path, Arc::new(cfg))
}

/// A policy with `[destinations]`, `[pins]` and anything else in `extra`.
pub fn policy(
    dir: &Path,
    destinations: &[(&str, &[&str], Option<SocketAddr>)],
    extra: &str,
) -> Arc<Policy> {
    let mut t = String::from(
        "[labels]\nhr = \"\"\nfinance = \"\"\nboard = \"\"\nprojx = \"\"\n\n[destinations]\n",
    );
    for (h, c, _) in destinations {
        t.push_str(&format!("\"{h}\" = {c:?}\n"));
    }
    t.push_str("\n[pins]\n");
    for (h, _, pin) in destinations {
        if let Some(a) = pin {
            t.push_str(&format!("\"{h}\" = \"{a}\"\n"));
        }
    }
    t.push_str(extra);
    let path = dir.join("policy.toml");
    std::fs::write(&path, &t).expect("write policy");
    Arc::new(Policy::load(&path).unwrap_or_else(|e| panic!("{e}\n{t}")))
}

/// The Fig. 2c world's one destination: ocr.example, cleared for finance, pinned at `sink`.
pub fn ocr_policy(dir: &Path, sink: &Sink) -> Arc<Policy> {
    policy(dir, &[("ocr.example", &["finance"], Some(sink.addr))], "")
}

pub struct World {
    pub dir: tempfile::TempDir,
    pub broker: Broker,
}

pub fn broker(
    dir: tempfile::TempDir,
    policy: Arc<Policy>,
    tweak: impl FnOnce(&mut BrokerConfig),
) -> World {
    let mut cfg = BrokerConfig::new(policy, &dir.path().join("state"));
    cfg.audit_log = Some(dir.path().join("audit.jsonl"));
    cfg.native_roots = false;
    tweak(&mut cfg);
    let broker = Broker::start(cfg).expect("broker");
    World { dir, broker }
}

impl World {
    pub fn audit(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("audit.jsonl")).unwrap_or_default()
    }
}

pub fn m(name: &str, c: &[&str]) -> Member {
    Member {
        name: name.into(),
        clearance: Label::of(c),
    }
}

pub fn item(name: &str, l: &[&str]) -> ItemMeta {
    ItemMeta {
        name: name.into(),
        label: Label::of(l),
    }
}

/// Plans a call and registers it with the broker.
pub fn begin(
    w: &World,
    items: &[ItemMeta],
    hosts: &[Member],
    consumers: &[Member],
    mode: PlanMode,
    rules: LabelRules,
) -> (u64, germline_policy::Plan) {
    let p = plan(
        PlanInput {
            items,
            hosts,
            consumers,
        },
        mode,
    )
    .expect("plan");
    let (id, _) = w
        .broker
        .begin_call("sha256:test-release", "", p.clone(), hosts, rules, false)
        .expect("begin");
    (id, p)
}

/// Runs one copy of group `g`: a fresh namespace, the broker's endpoint inside it, and
/// `body` run inside the namespace with the proxy address.
pub fn copy<T: Send + 'static>(
    w: &World,
    call: u64,
    g: usize,
    deadline: Duration,
    body: impl FnOnce(SocketAddr) -> T + Send + 'static,
) -> (T, germline_policy::call::CopyOutcome) {
    let ns = TestNetns::new();
    let addr = w
        .broker
        .start_copy(call, g, ns.fd.as_fd(), Instant::now() + deadline)
        .expect("start copy");
    let out = ns.run(move || body(addr));
    let (outcome, _) = w.broker.end_copy(call, g).expect("end copy");
    (out, outcome)
}
