//! Traces by the book (issue 31, docs/operations.md "Telemetry"): `germline run`, configured
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

impl Receiver {
    fn start(dir: &std::path::Path) -> Receiver {
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
