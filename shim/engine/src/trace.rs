//! OpenTelemetry traces (issue 11, issue 31, docs/operations.md "Traces"): one trace per
//! `tools/call`, built with the OpenTelemetry SDK and sent by `opentelemetry-otlp`'s OTLP
//! exporters (`http/protobuf` by default, `http/json` or `grpc` on request) through a batch span
//! processor, whose own thread exports: a slow or absent collector never slows a call.
//!
//! Configured as every OpenTelemetry SDK is: `OTEL_EXPORTER_OTLP_ENDPOINT` (`/v1/traces` is
//! added), `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (used as is), `OTEL_EXPORTER_OTLP_HEADERS`,
//! `OTEL_EXPORTER_OTLP_PROTOCOL`, `OTEL_EXPORTER_OTLP_TIMEOUT` and `OTEL_SERVICE_NAME` are read
//! by the exporter and SDK themselves; `OTEL_EXPORTER_OTLP_CERTIFICATE` (a PEM CA file) by
//! [`Client`], our HTTP client, since the crate (0.33) leaves TLS settings to the program. `--otlp-endpoint URL`
//! overrides the endpoint variables (`URL/v1/traces`, as before). Tracing is on only when one
//! of the three names an endpoint.
//!
//! The HTTP client is ours (about 80 lines over hyper 1, tokio and tokio-rustls, the stack
//! the broker and `mcp::http` already build) rather than the crate's reqwest feature: one
//! HTTP and TLS stack in the binary, not two. `grpc` is the crate's tonic exporter (tonic is
//! in the tree through the containerd shim), run on a runtime of its own ([`OnRuntime`]).
//!
//! The call's root span is a child of the agent's W3C `traceparent` (the request's
//! `params._meta.traceparent`, and `tracestate`) when it sent one; the SDK's default
//! parent-based sampler then follows the agent's sampled flag.
//!
//! Spans carry only the release's `name@version`, the mode, the tool name (declared in the
//! signed manifest), group indices, counts, verdicts, declared hosts and times: never an
//! item, an argument or anything a copy sent.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{TraceContextExt, Tracer as _, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_http::{HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use opentelemetry_sdk::Resource;

use crate::error::{RunError, TraceError};
use crate::observe::{CallObserver, CallView, RuntimeView};
use crate::runtime::Outcome;

/// A collector's answer larger than this is an error (it should be a few bytes).
const MAX_ANSWER: usize = 1 << 20;
/// One export's connect, TLS handshake, request and answer, at most.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The OTLP trace pipeline of a process: provider (with its batch processor and exporter)
/// and the tracer the calls' spans are made with.
pub struct Tracer {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    endpoint: String,
}

impl std::fmt::Debug for Tracer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracer")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// `--otlp-endpoint`'s URL -> the traces URL (`URL/v1/traces`), http or https only.
fn override_url(url: &str) -> Result<String, TraceError> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or_else(|| TraceError::Scheme(url.to_string()))?;
    let auth = rest.split('/').next().unwrap_or_default();
    if auth.is_empty() {
        return Err(TraceError::Authority(url.to_string()));
    }
    Ok(format!("{}/v1/traces", url.trim_end_matches('/')))
}

impl Tracer {
    /// The tracer the flag and the environment ask for: `None` when neither names an
    /// endpoint (or `OTEL_SDK_DISABLED=true`, or `OTEL_TRACES_EXPORTER=none` without the flag).
    pub fn start(otlp_endpoint: Option<&str>) -> Result<Option<Tracer>, TraceError> {
        if env("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        if otlp_endpoint.is_none()
            && env("OTEL_TRACES_EXPORTER").is_some_and(|v| v.trim() == "none")
        {
            return Ok(None);
        }
        let from_env = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .map(|e| e.trim().to_string())
            .or_else(|| {
                env("OTEL_EXPORTER_OTLP_ENDPOINT")
                    .map(|e| format!("{}/v1/traces", e.trim().trim_end_matches('/')))
            });
        let endpoint = match (otlp_endpoint, from_env) {
            (Some(url), _) => override_url(url)?,
            (None, Some(e)) => e,
            (None, None) => return Ok(None),
        };
        let protocol = env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            .or_else(|| env("OTEL_EXPORTER_OTLP_PROTOCOL"))
            .unwrap_or_else(|| "http/protobuf".into());
        // Set explicitly: with both encodings built in, the crate's own default is JSON, and
        // the specification's default is protobuf.
        let protocol = match protocol.trim() {
            "http/protobuf" => opentelemetry_otlp::Protocol::HttpBinary,
            "http/json" => opentelemetry_otlp::Protocol::HttpJson,
            "grpc" => {
                // gRPC has no path: the flag's URL is used as given.
                let endpoint = match otlp_endpoint {
                    Some(url) => {
                        override_url(url)?;
                        Some(url.to_string())
                    }
                    None => None,
                };
                let exporter = OnRuntime::grpc(endpoint)?;
                return Ok(Some(Tracer::with_exporter(exporter, "grpc".into())));
            }
            other => return Err(TraceError::Protocol(other.to_string())),
        };
        let client = Client::new(tls_config()?)?;
        let mut b = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(protocol)
            .with_http_client(client);
        if otlp_endpoint.is_some() {
            // Programmatic endpoints are used as given, over the variables.
            b = b.with_endpoint(endpoint.clone());
        }
        let exporter = b.build().map_err(|e| TraceError::Exporter(e.to_string()))?;
        Ok(Some(Tracer::with_exporter(exporter, endpoint)))
    }

    fn with_exporter(
        exporter: impl opentelemetry_sdk::trace::SpanExporter + 'static,
        endpoint: String,
    ) -> Tracer {
        // The SDK's resource reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES; without
        // either naming the service, it is "germline" (not the SDK's "unknown_service").
        let named = env("OTEL_SERVICE_NAME").is_some()
            || env("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|a| {
                a.split(',')
                    .any(|kv| kv.trim().starts_with("service.name="))
            });
        let mut resource = Resource::builder();
        if !named {
            resource = resource.with_service_name("germline");
        }
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource.build())
            .build();
        let tracer = provider.tracer("germline");
        Tracer {
            provider,
            tracer,
            endpoint,
        }
    }

    /// Exports what the batch holds now (at a session's end), waiting for the collector.
    pub fn flush(&self) {
        if let Err(e) = self.provider.force_flush() {
            eprintln!("germline: OTLP export to {} failed: {e}", self.endpoint);
        }
    }
}

/// The TLS client configuration for an `https` collector: the CA file in
/// `OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE` or `OTEL_EXPORTER_OTLP_CERTIFICATE` (alone, as the
/// specification's "trusted certificate" and Go's SDK take it), else the system's roots.
fn ca_file() -> Option<String> {
    env("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE").or_else(|| env("OTEL_EXPORTER_OTLP_CERTIFICATE"))
}

fn tls_config() -> Result<Arc<rustls::ClientConfig>, TraceError> {
    let mut roots = rustls::RootCertStore::empty();
    if let Some(path) = ca_file() {
        germline_broker::ca::add_pem_roots(&mut roots, std::path::Path::new(&path))
            .map_err(|why| TraceError::Certificate(path.clone(), why))?;
    } else {
        let found = rustls_native_certs::load_native_certs();
        roots.add_parsable_certificates(found.certs);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| TraceError::Tls(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// The gRPC exporter (tonic), run on a one-worker tokio runtime of its own: tonic needs a
/// tokio reactor, and the batch processor's thread awaits exports with a plain executor, so
/// each export is spawned on the runtime and awaited through its join handle.
#[derive(Debug)]
struct OnRuntime {
    inner: Arc<opentelemetry_otlp::SpanExporter>,
    rt: tokio::runtime::Runtime,
}

impl OnRuntime {
    /// The endpoint (the flag's, else the crate reads `OTEL_EXPORTER_OTLP_*`), headers and
    /// timeout are the crate's; TLS is ours to give: the CA file, else the system's roots,
    /// for an `https` endpoint.
    fn grpc(endpoint: Option<String>) -> Result<OnRuntime, TraceError> {
        use opentelemetry_otlp::tonic_types::transport::{Certificate, ClientTlsConfig};
        use opentelemetry_otlp::WithTonicConfig;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("germline-otlp")
            .enable_all()
            .build()
            .map_err(TraceError::Thread)?;
        let https = endpoint
            .clone()
            .or_else(|| env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
            .or_else(|| env("OTEL_EXPORTER_OTLP_ENDPOINT"))
            .is_some_and(|e| e.trim().starts_with("https://"));
        let mut b = opentelemetry_otlp::SpanExporter::builder().with_tonic();
        if let Some(e) = endpoint {
            b = b.with_endpoint(e);
        }
        if https {
            let tls = match ca_file() {
                Some(path) => {
                    let pem = std::fs::read(&path)
                        .map_err(|e| TraceError::Certificate(path.clone(), e.to_string()))?;
                    ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem))
                }
                None => ClientTlsConfig::new().with_native_roots(),
            };
            b = b.with_tls_config(tls);
        }
        // The channel is made (lazily) inside the runtime, as tonic requires.
        let inner = {
            let _in = rt.enter();
            b.build().map_err(|e| TraceError::Exporter(e.to_string()))?
        };
        Ok(OnRuntime {
            inner: Arc::new(inner),
            rt,
        })
    }
}

impl opentelemetry_sdk::trace::SpanExporter for OnRuntime {
    async fn export(
        &self,
        batch: Vec<opentelemetry_sdk::trace::SpanData>,
    ) -> opentelemetry_sdk::error::OTelSdkResult {
        let inner = self.inner.clone();
        match self
            .rt
            .spawn(async move { inner.export(batch).await })
            .await
        {
            Ok(r) => r,
            Err(e) => Err(opentelemetry_sdk::error::OTelSdkError::InternalFailure(
                e.to_string(),
            )),
        }
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> opentelemetry_sdk::error::OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        // Called once, by the provider's builder, before any export shares the exporter.
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.set_resource(resource);
        }
    }
}

/// The exporter's HTTP client: one HTTP/1.1 connection per export (a batch), over TLS for
/// `https`, on a one-worker tokio runtime of its own. The exporter awaits it from the batch
/// processor's thread (a plain executor), so the request runs on the runtime and is awaited
/// through its join handle.
#[derive(Debug)]
pub struct Client {
    rt: tokio::runtime::Runtime,
    tls: Arc<rustls::ClientConfig>,
}

impl Client {
    fn new(tls: Arc<rustls::ClientConfig>) -> Result<Client, TraceError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("germline-otlp")
            .enable_all()
            .build()
            .map_err(TraceError::Thread)?;
        Ok(Client { rt, tls })
    }
}

#[async_trait::async_trait]
impl HttpClient for Client {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let tls = self.tls.clone();
        let job = self.rt.spawn(async move {
            match tokio::time::timeout(EXPORT_TIMEOUT, send(tls, request)).await {
                Ok(r) => r,
                Err(_) => Err(format!("no answer in {EXPORT_TIMEOUT:?}").into()),
            }
        });
        job.await?
    }
}

async fn send(
    tls: Arc<rustls::ClientConfig>,
    request: Request<Bytes>,
) -> Result<Response<Bytes>, HttpError> {
    let uri = request.uri().clone();
    let https = match uri.scheme_str() {
        Some("https") => true,
        Some("http") => false,
        other => return Err(format!("OTLP endpoint scheme {other:?}: http or https").into()),
    };
    let host = uri
        .host()
        .ok_or("OTLP endpoint without a host")?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    let authority = uri
        .authority()
        .map(|a| a.as_str().to_string())
        .unwrap_or_else(|| host.clone());
    let (mut parts, body) = request.into_parts();
    // Origin form on the wire, the authority in Host.
    parts.uri = uri.path_and_query().map_or("/", |p| p.as_str()).parse()?;
    parts
        .headers
        .insert(hyper::header::HOST, authority.parse()?);
    let request = hyper::Request::from_parts(parts, Full::new(body));
    let tcp = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
    if https {
        let name = rustls::pki_types::ServerName::try_from(host)?;
        let stream = tokio_rustls::TlsConnector::from(tls)
            .connect(name, tcp)
            .await?;
        exchange(TokioIo::new(stream), request).await
    } else {
        exchange(TokioIo::new(tcp), request).await
    }
}

async fn exchange<I>(
    io: I,
    request: hyper::Request<Full<Bytes>>,
) -> Result<Response<Bytes>, HttpError>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io).await?;
    tokio::spawn(conn);
    let answer = sender.send_request(request).await?;
    let (parts, body) = answer.into_parts();
    let body = Limited::new(body, MAX_ANSWER).collect().await?.to_bytes();
    Ok(Response::from_parts(parts, body))
}

fn time(nanos: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(nanos)
}

fn nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// One span of a call's trace, before it is made: parents come before their children.
struct Rec {
    name: &'static str,
    parent: Option<usize>,
    start: u64,
    end: u64,
    attrs: Vec<KeyValue>,
}

struct Builder {
    spans: Vec<Rec>,
}

impl Builder {
    fn span(
        &mut self,
        name: &'static str,
        parent: Option<usize>,
        start: u64,
        us: u64,
        attrs: Vec<KeyValue>,
    ) -> usize {
        self.spans.push(Rec {
            name,
            parent,
            start,
            end: start + us * 1000,
            attrs,
        });
        self.spans.len() - 1
    }

    /// Makes the spans, the first under `root` (the agent's context, or none).
    fn emit(self, t: &Tracer, root: &Context) {
        let mut made: Vec<(Context, u64)> = Vec::with_capacity(self.spans.len());
        for r in self.spans {
            let parent = match r.parent.and_then(|p| made.get(p)) {
                Some((cx, _)) => cx.clone(),
                None => root.clone(),
            };
            let span = t
                .tracer
                .span_builder(r.name)
                .with_start_time(time(r.start))
                .with_attributes(r.attrs)
                .start_with_context(&t.tracer, &parent);
            made.push((Context::new().with_span(span), r.end));
        }
        for (cx, end) in made {
            cx.span().end_with_timestamp(time(end));
        }
    }
}

/// The agent's W3C trace context, as the W3C propagator reads it (an invalid one is none).
fn agent_context(call: &CallView<'_>) -> Context {
    let mut carrier = HashMap::new();
    if let Some(tp) = call.traceparent {
        carrier.insert("traceparent".to_string(), tp.to_string());
    }
    if let Some(ts) = call.tracestate {
        carrier.insert("tracestate".to_string(), ts.to_string());
    }
    TraceContextPropagator::new().extract(&carrier)
}

/// Traces observe a runtime's calls: one trace per finished call; the batch is flushed when
/// the runtime stops (the session's end).
impl CallObserver for Arc<Tracer> {
    fn after_call(&mut self, rt: &RuntimeView<'_>, call: &CallView<'_>) {
        let b = trace_call(rt, call.tool, call.started, call.result);
        b.emit(self, &agent_context(call));
    }

    fn stopped(&mut self) {
        self.flush();
    }
}

/// The spans of one finished call of `rt` that started at `start` (wall clock).
fn trace_call(
    rt: &RuntimeView<'_>,
    tool: &str,
    start: SystemTime,
    r: &Result<Outcome, RunError>,
) -> Builder {
    let mut b = Builder { spans: Vec::new() };
    let t0 = nanos(start);
    let total_us = nanos(SystemTime::now()).saturating_sub(t0) / 1000;
    let outcome = match r {
        Ok(_) => "ok",
        Err(e) => e.outcome(),
    };
    let mut attrs = vec![
        KeyValue::new("germline.release", rt.release.label()),
        KeyValue::new("germline.mode", rt.mode.name()),
        KeyValue::new("mcp.tool", tool.to_string()),
        KeyValue::new("germline.outcome", outcome),
    ];
    if let Err(RunError::Limit(hit)) = r {
        attrs.push(KeyValue::new("germline.limit", hit.name));
    }
    let root = b.span("tools/call", None, t0, total_us, attrs);
    if let Ok(o) = r {
        // Phases are consecutive durations: plan, then per copy fork (its checks inside),
        // broker, copy (mounts, deliver, mcp, teardown), broker.end_copy.
        let mut at = t0;
        let mut copy: Option<usize> = None;
        let mut copies: Vec<usize> = Vec::new();
        let mut group = 0i64;
        let mut sub = t0;
        for (i, (name, us)) in o.phases.iter().enumerate() {
            let us = *us;
            match *name {
                "plan" => {
                    b.span("plan", Some(root), at, us, vec![]);
                    at += us * 1000;
                }
                "fork" => {
                    let id = b.span(
                        "copy",
                        Some(root),
                        at,
                        0,
                        vec![KeyValue::new("germline.group", group)],
                    );
                    group += 1;
                    copies.push(id);
                    b.span("fork", Some(id), at, us, vec![]);
                    // The fork's own laps (germline_sandbox's `fork_phases`, absent for a
                    // pool copy): the germline's checks before the fork, the copy confining
                    // itself, the copy's checks from outside after it. Without them the
                    // checks span covers the fork and says it was not timed apart.
                    let laps: Vec<(&str, u64)> = o
                        .phases
                        .iter()
                        .skip(i + 1)
                        .take_while(|(n, _)| *n != "fork")
                        .filter(|(n, _)| n.starts_with("fork."))
                        .map(|(n, u)| (*n, *u))
                        .collect();
                    let lap_at = |name: &str| {
                        let mut t = at;
                        for (n, u) in &laps {
                            if *n == name {
                                return Some((t, *u));
                            }
                            t += u * 1000;
                        }
                        None
                    };
                    let timed = lap_at("fork.copy_checks");
                    let (cstart, cus) = timed.unwrap_or((at, us));
                    b.span(
                        "checks",
                        Some(id),
                        cstart,
                        cus.min(us),
                        vec![
                            KeyValue::new("germline.checks", "passed"),
                            KeyValue::new("germline.checks.timed_apart", timed.is_some()),
                        ],
                    );
                    if let Some((t, u)) = lap_at("fork.germline_checks") {
                        b.span("checks.germline", Some(id), t, u, vec![]);
                    }
                    if let Some((t, u)) = lap_at("fork.confine") {
                        b.span("confinement.self", Some(id), t, u, vec![]);
                    }
                    copy = Some(id);
                    at += us * 1000;
                }
                "broker" => {
                    if let Some(id) = copy {
                        b.span("confinement.broker", Some(id), at, us, vec![]);
                    }
                    at += us * 1000;
                }
                "copy" => {
                    sub = at;
                    at += us * 1000;
                }
                "copy.mounts" | "copy.deliver" | "copy.init" | "copy.mcp" | "copy.teardown" => {
                    let span = match *name {
                        "copy.mounts" => "confinement.mounts",
                        "copy.deliver" => "deliver",
                        "copy.init" => "initialize",
                        "copy.mcp" => "run",
                        _ => "teardown",
                    };
                    if let Some(id) = copy {
                        b.span(span, Some(id), sub, us, vec![]);
                    }
                    sub += us * 1000;
                }
                "broker.end_copy" => {
                    if let Some(id) = copy.take() {
                        b.span("broker.end_copy", Some(id), at, us, vec![]);
                        at += us * 1000;
                        // The copy span ends with its broker record.
                        if let Some(s) = b.spans.get_mut(id) {
                            s.end = at;
                        }
                    }
                }
                _ => {}
            }
        }
        // The broker's requests, on the wall clock (both processes share CLOCK_MONOTONIC).
        let mono_now = germline_broker::control::mono_ns_of(std::time::Instant::now());
        let wall_now = nanos(SystemTime::now());
        for (g, r) in rt.last_requests {
            let Some(parent) = copies.get(*g) else {
                continue;
            };
            let start = wall_now.saturating_sub(mono_now.saturating_sub(r.start_mono_ns));
            b.span(
                "broker.request",
                Some(*parent),
                start,
                r.us,
                vec![
                    KeyValue::new("germline.host", r.host.clone()),
                    KeyValue::new("germline.verdict", r.verdict.clone()),
                ],
            );
        }
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_names_a_collector_root_and_says_what_was_expected() {
        assert_eq!(
            override_url("http://127.0.0.1:4318").expect("plain"),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            override_url("https://collector:4318/otlp/").expect("prefix"),
            "https://collector:4318/otlp/v1/traces"
        );
        assert!(override_url("ftp://c:4318").is_err());
        assert!(override_url("https:///x").is_err());
    }
}
