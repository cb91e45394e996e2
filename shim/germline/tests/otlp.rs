//! Traces by the book (issue 31, docs/operations.md "Traces"): `germline run`, configured
//! only by the standard `OTEL_*` variables as an MCP client's `env` block would set them,
//! exports OTLP/HTTP protobuf over TLS (a CA made here) with the configured header to a
//! receiver this test runs; the call's spans continue the trace the official MCP SDK client
//! sent in `params._meta.traceparent`, and no argument value is anywhere in the bytes.

mod run_common;

use std::io::{BufRead, BufReader, Read, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use prost::Message;
use run_common::*;
use serde_json::json;

/// One request the receiver got: its request line, headers (lower-cased names) and body.
#[derive(Clone)]
struct Got {
    line: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Got {
    /// The request without its body (for messages).
    fn head(&self) -> String {
        format!(
            "{} {:?} ({} bytes)",
            self.line,
            self.headers,
            self.body.len()
        )
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// An OTLP/HTTP receiver on loopback that speaks only TLS, with a certificate for
/// `127.0.0.1` from a CA made here (written to `ca.pem` in `dir`).
struct Receiver {
    port: u16,
    got: Arc<Mutex<Vec<Got>>>,
    ca: std::path::PathBuf,
}

/// A CA made here (written to `otlp-ca.pem` in `dir`) and a certificate it signed for
/// `127.0.0.1`, with its key.
fn test_ca(dir: &std::path::Path) -> (std::path::PathBuf, rcgen::Certificate, rcgen::KeyPair) {
    let ca_key = rcgen::KeyPair::generate().expect("key");
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "otlp test CA");
    let ca_cert = ca.self_signed(&ca_key).expect("ca");
    let issuer = rcgen::Issuer::new(ca, ca_key);
    let key = rcgen::KeyPair::generate().expect("key");
    let leaf = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
        .expect("leaf")
        .signed_by(&key, &issuer)
        .expect("sign");
    let ca_path = dir.join("otlp-ca.pem");
    std::fs::write(&ca_path, ca_cert.pem()).expect("write ca");
    (ca_path, leaf, key)
}

impl Receiver {
    fn start(dir: &std::path::Path) -> Receiver {
        let (ca_path, leaf, key) = test_ca(dir);
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
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = l.local_addr().expect("addr").port();
        let got = Arc::new(Mutex::new(Vec::new()));
        let keep = got.clone();
        std::thread::spawn(move || {
            for conn in l.incoming().flatten() {
                let (cfg, keep) = (cfg.clone(), keep.clone());
                std::thread::spawn(move || {
                    let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
                    let Ok(sc) = rustls::ServerConnection::new(cfg) else {
                        return;
                    };
                    let mut tls = rustls::StreamOwned::new(sc, conn);
                    let mut r = BufReader::new(&mut tls);
                    let mut line = String::new();
                    if r.read_line(&mut line).is_err() || line.is_empty() {
                        return;
                    }
                    let mut headers = Vec::new();
                    loop {
                        let mut h = String::new();
                        if r.read_line(&mut h).is_err() || h == "\r\n" || h.is_empty() {
                            break;
                        }
                        if let Some((n, v)) = h.split_once(':') {
                            headers.push((n.trim().to_ascii_lowercase(), v.trim().to_string()));
                        }
                    }
                    let len = headers
                        .iter()
                        .find(|(n, _)| n == "content-length")
                        .and_then(|(_, v)| v.parse().ok())
                        .unwrap_or(0usize);
                    let mut body = vec![0u8; len];
                    if r.read_exact(&mut body).is_err() {
                        return;
                    }
                    drop(r);
                    keep.lock().expect("lock").push(Got {
                        line: line.trim().to_string(),
                        headers,
                        body,
                    });
                    let _ = tls.write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\n\
                          Content-Length: 0\r\nConnection: close\r\n\r\n",
                    );
                    let _ = tls.flush();
                });
            }
        });
        Receiver {
            port,
            got,
            ca: ca_path,
        }
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn a_call_traced_over_tls_with_the_header_continuing_the_agents_trace() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let sink = Sink::start(w.path(), "ocr");
    let policy = w.policy(sink.port, "");
    let rx = Receiver::start(w.path());
    // The agent's trace: a fresh id, so a match cannot be a coincidence.
    let trace_id = format!("{:016x}{:016x}", rand_u64(), rand_u64());
    let parent_id = format!("{:016x}", rand_u64() | 1);
    let traceparent = format!("00-{trace_id}-{parent_id}-01");
    let canary = format!("argument-canary-{:016x}", rand_u64());
    // As a client config's `env` block sets them (the SDK passes the server no other
    // variables): the standard OTEL_* names only, no germline flag.
    let mut cmd = vec![
        "/usr/bin/env".to_string(),
        format!("OTEL_EXPORTER_OTLP_ENDPOINT=https://127.0.0.1:{}", rx.port),
        "OTEL_EXPORTER_OTLP_HEADERS=authorization=Bearer%20x".to_string(),
        format!("OTEL_EXPORTER_OTLP_CERTIFICATE={}", rx.ca.display()),
        "OTEL_SERVICE_NAME=germline-otlp-test".to_string(),
    ];
    cmd.extend(run_cmd(
        &policy,
        "germline",
        "germline-office",
        w.path(),
        &[],
    ));
    let out = run_agent(
        w.path(),
        &json!([{"tool": "summarize", "arguments": {"text": canary},
                 "meta": {"traceparent": traceparent}}]),
        &cmd,
    );
    assert!(out.iter().all(|r| r["ok"] == json!(true)), "{out:?}");
    // The session's end flushed the batch; allow the receiver's thread a moment.
    let mut got = Vec::new();
    for _ in 0..100 {
        got = rx.got.lock().expect("lock").clone();
        if !got.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!got.is_empty(), "no export reached the TLS receiver");
    let mut spans = Vec::new();
    for g in &got {
        assert!(g.line.starts_with("POST /v1/traces "), "{}", g.head());
        assert_eq!(g.header("authorization"), Some("Bearer x"), "{}", g.head());
        assert_eq!(
            g.header("content-type"),
            Some("application/x-protobuf"),
            "{}",
            g.head()
        );
        let all = String::from_utf8_lossy(&g.body);
        assert!(!all.contains(&canary), "an argument value in the export");
        let req = ExportTraceServiceRequest::decode(g.body.as_slice()).expect("protobuf");
        for rs in req.resource_spans {
            let service = rs
                .resource
                .iter()
                .flat_map(|r| r.attributes.iter())
                .find(|a| a.key == "service.name")
                .and_then(|a| a.value.as_ref()?.value.clone());
            assert_eq!(
                service,
                Some(Any::StringValue("germline-otlp-test".into())),
                "OTEL_SERVICE_NAME"
            );
            for ss in rs.scope_spans {
                spans.extend(ss.spans);
            }
        }
    }
    check_spans(&spans, &trace_id, &parent_id);
}

/// The call's spans: the names trace.rs emits, all in the agent's trace, the root the child
/// of the agent's span, the tool named.
fn check_spans(
    spans: &[opentelemetry_proto::tonic::trace::v1::Span],
    trace_id: &str,
    parent_id: &str,
) {
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    for want in ["tools/call", "plan", "copy", "fork", "checks", "run"] {
        assert!(names.contains(&want), "no {want} span: {names:?}");
    }
    // Every span is in the agent's trace; the call's root is the child of the agent's span.
    assert!(
        spans.iter().all(|s| hex(&s.trace_id) == trace_id),
        "trace ids: {:?}",
        spans.iter().map(|s| hex(&s.trace_id)).collect::<Vec<_>>()
    );
    let root = spans.iter().find(|s| s.name == "tools/call").expect("root");
    assert_eq!(hex(&root.parent_span_id), parent_id);
    let tool = root
        .attributes
        .iter()
        .find(|a| a.key == "mcp.tool")
        .and_then(|a| a.value.as_ref()?.value.clone());
    assert_eq!(tool, Some(Any::StringValue("summarize".into())));
}

/// The agent's trace context and a canary argument value, and the command line with the
/// given `OTEL_*` settings (set through `env`, as a client config's `env` block does).
struct Call {
    trace_id: String,
    parent_id: String,
    traceparent: String,
    canary: String,
}

impl Call {
    fn new() -> Call {
        let trace_id = format!("{:016x}{:016x}", rand_u64(), rand_u64());
        let parent_id = format!("{:016x}", rand_u64() | 1);
        Call {
            traceparent: format!("00-{trace_id}-{parent_id}-01"),
            trace_id,
            parent_id,
            canary: format!("argument-canary-{:016x}", rand_u64()),
        }
    }
}

/// The same over gRPC (`OTEL_EXPORTER_OTLP_PROTOCOL=grpc`): a tonic `TraceService` server
/// with TLS from the test CA receives the `ExportTraceServiceRequest` with the header.
#[test]
fn a_call_traced_over_grpc_with_tls_and_the_header() {
    use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
        TraceService, TraceServiceServer,
    };
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;

    type Kept = Arc<Mutex<Vec<(Option<String>, ExportTraceServiceRequest)>>>;
    struct Keep(Kept);
    #[tonic::async_trait]
    impl TraceService for Keep {
        async fn export(
            &self,
            req: tonic::Request<ExportTraceServiceRequest>,
        ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
            let auth = req
                .metadata()
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            self.0.lock().expect("lock").push((auth, req.into_inner()));
            Ok(tonic::Response::new(ExportTraceServiceResponse {
                partial_success: None,
            }))
        }
    }

    if !can_run() {
        return;
    }
    let w = World::new();
    let sink = Sink::start(w.path(), "ocr");
    let policy = w.policy(sink.port, "");
    let (ca, leaf, key) = test_ca(w.path());
    // tonic's server takes the process's default provider; with both of rustls's providers
    // in this test binary's features, name one.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let got: Kept = Arc::new(Mutex::new(Vec::new()));
    let keep = got.clone();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let l = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let port = l.local_addr().expect("addr").port();
    let identity = tonic::transport::Identity::from_pem(leaf.pem(), key.serialize_pem());
    rt.spawn(async move {
        let _ = tonic::transport::Server::builder()
            .tls_config(tonic::transport::ServerTlsConfig::new().identity(identity))
            .expect("tls")
            .add_service(TraceServiceServer::new(Keep(keep)))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(l))
            .await;
    });
    let c = Call::new();
    let mut cmd = vec![
        "/usr/bin/env".to_string(),
        "OTEL_EXPORTER_OTLP_PROTOCOL=grpc".to_string(),
        format!("OTEL_EXPORTER_OTLP_ENDPOINT=https://127.0.0.1:{port}"),
        "OTEL_EXPORTER_OTLP_HEADERS=authorization=Bearer%20x".to_string(),
        format!("OTEL_EXPORTER_OTLP_CERTIFICATE={}", ca.display()),
        "OTEL_SERVICE_NAME=germline-otlp-test".to_string(),
    ];
    cmd.extend(run_cmd(
        &policy,
        "germline",
        "germline-office",
        w.path(),
        &[],
    ));
    let out = run_agent(
        w.path(),
        &json!([{"tool": "summarize", "arguments": {"text": c.canary},
                 "meta": {"traceparent": c.traceparent}}]),
        &cmd,
    );
    assert!(out.iter().all(|r| r["ok"] == json!(true)), "{out:?}");
    let mut reqs = Vec::new();
    for _ in 0..100 {
        reqs = got.lock().expect("lock").clone();
        if !reqs.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!reqs.is_empty(), "no export reached the gRPC receiver");
    let mut spans = Vec::new();
    for (auth, req) in reqs {
        assert_eq!(auth.as_deref(), Some("Bearer x"));
        let bytes = req.encode_to_vec();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(&c.canary),
            "an argument value in the export"
        );
        for rs in req.resource_spans {
            let service = rs
                .resource
                .iter()
                .flat_map(|r| r.attributes.iter())
                .find(|a| a.key == "service.name")
                .and_then(|a| a.value.as_ref()?.value.clone());
            assert_eq!(service, Some(Any::StringValue("germline-otlp-test".into())));
            for ss in rs.scope_spans {
                spans.extend(ss.spans);
            }
        }
    }
    check_spans(&spans, &c.trace_id, &c.parent_id);
}
