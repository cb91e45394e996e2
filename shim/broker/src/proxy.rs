//! HTTP handling for one copy's endpoint: absolute-URI HTTP and CONNECT (with TLS terminated
//! by the deployment CA), the positional rule, delivery, and the state pseudo-destination.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use germline_policy::call::{DenialReason, Digest, Verdict};
use germline_policy::policy::CredentialPlace;
use http::header::{HeaderName, HeaderValue, HOST};
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::json;
use sha2::Digest as _;
use tokio::net::TcpStream;

use crate::audit::digest_hex;
use crate::resolve::{self, ResolveError};
use crate::{CopyEnv, Inner, Reply, STATE_HOST};

type Resp = Response<Full<Bytes>>;

/// Headers that describe one hop, never forwarded and never part of a request's digest.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "proxy-connection",
    "keep-alive",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "proxy-authorization",
    "proxy-authenticate",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scheme {
    Http,
    Https,
}

impl Scheme {
    fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}

/// A fixed answer: the body never depends on anything the copy sent.
fn fixed(status: StatusCode, kind: &'static str, text: &'static str) -> Resp {
    let mut r = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    *r.status_mut() = status;
    r.headers_mut()
        .insert("x-germline", HeaderValue::from_static(kind));
    r.headers_mut()
        .insert("content-type", HeaderValue::from_static("text/plain"));
    r
}

fn placeholder() -> Resp {
    fixed(
        StatusCode::SERVICE_UNAVAILABLE,
        "placeholder",
        "germline: placeholder\n",
    )
}

fn denied() -> Resp {
    fixed(
        StatusCode::FORBIDDEN,
        "denied",
        "germline: destination not declared for this call\n",
    )
}

fn malformed() -> Resp {
    fixed(
        StatusCode::BAD_REQUEST,
        "malformed",
        "germline: malformed proxy request\n",
    )
}

async fn cancelled(env: &CopyEnv) {
    let mut rx = env.cancel.clone();
    tokio::select! {
        _ = rx.changed() => {}
        _ = tokio::time::sleep_until(env.deadline) => {}
    }
}

/// Accepts the copy's connections until the copy ends or its deadline passes.
pub(crate) async fn serve_copy(
    inner: Arc<Inner>,
    env: Arc<CopyEnv>,
    listener: tokio::net::TcpListener,
) {
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = cancelled(&env) => break,
            r = listener.accept() => {
                let Ok((stream, _)) = r else { continue };
                let _ = stream.set_nodelay(true);
                tasks.spawn(connection(inner.clone(), env.clone(), stream));
            }
        }
    }
    // Dropping the set aborts every connection and tunnel of this copy.
    tasks.abort_all();
}

async fn connection(inner: Arc<Inner>, env: Arc<CopyEnv>, stream: TcpStream) {
    let svc = {
        let (inner, env) = (inner.clone(), env.clone());
        service_fn(move |req| handle(inner.clone(), env.clone(), req))
    };
    let conn = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(stream), svc)
        .with_upgrades();
    tokio::select! {
        _ = conn => {}
        _ = cancelled(&env) => {}
    }
}

/// Counts a request's verdict (metrics) and keeps it for the copy's trace. The host is
/// counted as a declared host or `undeclared`; never call with the copy's lock held.
fn note(inner: &Inner, env: &CopyEnv, host: &str, verdict: &'static str, t0: std::time::Instant) {
    let policy = &inner.cfg.policy;
    let host = inner.stats.count(policy, &env.call.release, host, verdict);
    if let Ok(mut m) = env.call.lock() {
        if let Some(c) = m.copies.get_mut(&env.group) {
            if c.requests.len() < crate::MAX_REQUEST_EVENTS {
                c.requests.push(crate::RequestEvent {
                    host,
                    verdict: verdict.to_string(),
                    start_mono_ns: crate::control::mono_ns_of(t0),
                    us: t0.elapsed().as_micros() as u64,
                });
            }
        }
    }
}

fn record_malformed(inner: &Inner, env: &CopyEnv, what: &str, raw: &[u8]) -> Resp {
    inner.stats.malformed.fetch_add(1, Ordering::Relaxed);
    note(inner, env, "", "malformed", std::time::Instant::now());
    inner.audit.event("request", || {
        json!({"call": env.call.id, "group": env.group, "release": env.call.release,
               "verdict": "malformed", "reason": what, "digest": digest_hex(raw)})
    });
    malformed()
}

/// A denied request: counted, logged (the name as a digest only) and recorded as a trigger of
/// the copy with its reason (issue 25 item 7), except in a probe or control re-run, which is
/// evidence about a trigger already recorded. `target` is the declared host the request was
/// made to, if any; `name` what the copy asked for.
fn record_denied(
    inner: &Inner,
    env: &CopyEnv,
    target: Option<&str>,
    name: &str,
    reason: DenialReason,
) -> Resp {
    inner.stats.denied.fetch_add(1, Ordering::Relaxed);
    note(inner, env, name, "denied", std::time::Instant::now());
    let name_digest = digest_hex(name.as_bytes());
    let mut reason = reason;
    if env.call.replay.is_none() {
        if let Ok(mut m) = env.call.lock() {
            if let Some(copy) = m.copies.get_mut(&env.group) {
                reason =
                    copy.tracker
                        .denied(&env.call.cx, target, name, name_digest.clone(), reason);
            }
        }
    }
    inner.audit.event("request", || {
        json!({"call": env.call.id, "group": env.group, "release": env.call.release,
               "verdict": "denied", "reason": reason, "why": reason.name(),
               "host_digest": name_digest})
    });
    denied()
}

/// Why a name was refused before any lookup: an IP literal (or `localhost`), or undeclared.
fn name_denial(host: &str) -> DenialReason {
    match resolve::check_name(host) {
        Err(resolve::ResolveError::IpLiteral | resolve::ResolveError::Localhost) => {
            DenialReason::IpLiteral
        }
        _ => DenialReason::UndeclaredHost,
    }
}

/// Notes the host a redirect the copy is answered with names, so that the copy's request to
/// it, if undeclared, is denied as a redirect (the destination chose it, not the release).
fn note_redirect(env: &CopyEnv, reply: &Reply) {
    if !matches!(reply.status, 301 | 302 | 303 | 307 | 308) || env.call.replay.is_some() {
        return;
    }
    let Some(loc) = reply
        .headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("location"))
        .and_then(|(_, v)| v.parse::<http::Uri>().ok())
    else {
        return;
    };
    let Some(h) = loc.host() else { return };
    if let Ok(mut m) = env.call.lock() {
        if let Some(copy) = m.copies.get_mut(&env.group) {
            copy.tracker.redirected_to(&env.call.cx, h);
        }
    }
}

/// The host part of a `Host` header value, lowercased, without a port.
fn host_header(v: &HeaderValue) -> Option<String> {
    let s = v.to_str().ok()?;
    let auth: http::uri::Authority = s.parse().ok()?;
    Some(auth.host().to_ascii_lowercase())
}

async fn handle(
    inner: Arc<Inner>,
    env: Arc<CopyEnv>,
    req: Request<Incoming>,
) -> Result<Resp, Infallible> {
    if req.method() == Method::CONNECT {
        return Ok(connect(inner, env, req));
    }
    let uri = req.uri().clone();
    let (Some(scheme), Some(auth)) = (uri.scheme_str(), uri.authority()) else {
        return Ok(record_malformed(
            &inner,
            &env,
            "not an absolute-URI proxy request",
            uri.to_string().as_bytes(),
        ));
    };
    if scheme != "http" {
        return Ok(record_malformed(
            &inner,
            &env,
            "absolute URI with a scheme other than http",
            uri.to_string().as_bytes(),
        ));
    }
    let host = auth.host().to_ascii_lowercase();
    let port = auth.port_u16().unwrap_or(80);
    if let Some(h) = req.headers().get(HOST) {
        let named = host_header(h);
        if named.as_deref() != Some(host.as_str()) {
            return Ok(record_denied(
                &inner,
                &env,
                Some(&host),
                named.as_deref().unwrap_or_default(),
                DenialReason::HostMismatch,
            ));
        }
    }
    if host == STATE_HOST {
        return Ok(state(&inner, &env, req).await);
    }
    Ok(exchange(&inner, &env, Scheme::Http, host, port, req).await)
}

/// CONNECT to a declared host: answer 200, then terminate TLS with a certificate for exactly
/// that host and serve HTTP inside.
fn connect(inner: Arc<Inner>, env: Arc<CopyEnv>, req: Request<Incoming>) -> Resp {
    let Some(auth) = req.uri().authority().cloned() else {
        return record_malformed(
            &inner,
            &env,
            "CONNECT without host:port",
            req.uri().to_string().as_bytes(),
        );
    };
    let host = auth.host().to_ascii_lowercase();
    let port = auth.port_u16().unwrap_or(443);
    if resolve::check_name(&host).is_err() || !(env.call.open || env.call.cx.is_declared(&host)) {
        let reason = name_denial(&host);
        return record_denied(&inner, &env, None, &host, reason);
    }
    let env2 = env.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = tunnel(inner, env2.clone(), req, host, port) => {}
            _ = cancelled(&env2) => {}
        }
    });
    Response::new(Full::new(Bytes::new()))
}

async fn tunnel(
    inner: Arc<Inner>,
    env: Arc<CopyEnv>,
    req: Request<Incoming>,
    host: String,
    port: u16,
) {
    let Ok(upgraded) = hyper::upgrade::on(req).await else {
        return;
    };
    let acceptor = tokio_rustls::LazyConfigAcceptor::new(
        rustls::server::Acceptor::default(),
        TokioIo::new(upgraded),
    );
    let Ok(start) = acceptor.await else {
        record_malformed(&inner, &env, "TLS handshake failed", host.as_bytes());
        return;
    };
    if let Some(sni) = start.client_hello().server_name() {
        if !sni.eq_ignore_ascii_case(&host) {
            record_denied(&inner, &env, Some(&host), sni, DenialReason::SniMismatch);
            return;
        }
    }
    let Ok(cfg) = inner.ca.server_config(&host) else {
        return;
    };
    let Ok(tls) = start.into_stream(cfg).await else {
        return;
    };
    let svc = {
        let (inner, env, host) = (inner.clone(), env.clone(), host.clone());
        service_fn(move |req: Request<Incoming>| {
            let (inner, env, host) = (inner.clone(), env.clone(), host.clone());
            async move {
                // Inside the tunnel the destination is the CONNECT target and nothing else.
                let named = match (req.uri().host(), req.headers().get(HOST)) {
                    (Some(h), _) => Some(h.to_ascii_lowercase()),
                    (None, Some(h)) => host_header(h),
                    (None, None) => Some(host.clone()),
                };
                if named.as_deref() != Some(host.as_str()) {
                    return Ok::<_, Infallible>(record_denied(
                        &inner,
                        &env,
                        Some(&host),
                        named.as_deref().unwrap_or(""),
                        DenialReason::InnerHostMismatch,
                    ));
                }
                Ok(exchange(&inner, &env, Scheme::Https, host, port, req).await)
            }
        })
    };
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(tls), svc)
        .await;
}

/// SHA-256 over the request as the destination would see it, less hop-by-hop headers.
fn request_digest(
    method: &Method,
    scheme: Scheme,
    host: &str,
    port: u16,
    path: &str,
    headers: &http::HeaderMap,
    body: &[u8],
) -> Digest {
    let mut h = sha2::Sha256::new();
    for part in [
        method.as_str(),
        scheme.as_str(),
        host,
        &port.to_string(),
        path,
    ] {
        h.update(part.as_bytes());
        h.update([0]);
    }
    let mut hs: Vec<(&str, &[u8])> = headers
        .iter()
        .filter(|(n, _)| {
            *n != HOST && !HOP_BY_HOP.contains(&n.as_str()) && *n != http::header::CONTENT_LENGTH
        })
        .map(|(n, v)| (n.as_str(), v.as_bytes()))
        .collect();
    hs.sort();
    for (n, v) in hs {
        h.update(n.as_bytes());
        h.update([0]);
        h.update(v);
        h.update([0]);
    }
    h.update((body.len() as u64).to_le_bytes());
    h.update(body);
    h.finalize().into()
}

enum Decision {
    /// A probe or control re-run: the transcript's reply at this position, if any.
    Probe(Option<Arc<Reply>>),
    Deliver,
    Replay(Arc<Reply>),
    Placeholder,
    Deny,
}

async fn exchange(
    inner: &Inner,
    env: &CopyEnv,
    scheme: Scheme,
    host: String,
    port: u16,
    req: Request<Incoming>,
) -> Resp {
    let t0 = std::time::Instant::now();
    let (parts, body) = req.into_parts();
    let body = match Limited::new(body, inner.cfg.max_body).collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            return record_malformed(
                inner,
                env,
                "request body unreadable or too large",
                host.as_bytes(),
            )
        }
    };
    if resolve::check_name(&host).is_err() || !(env.call.open || env.call.cx.is_declared(&host)) {
        return record_denied(inner, env, None, &host, name_denial(&host));
    }
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    let digest = request_digest(
        &parts.method,
        scheme,
        &host,
        port,
        &path,
        &parts.headers,
        &body,
    );
    let decision = if let Some(rp) = &env.call.replay {
        let Ok(mut m) = env.call.lock() else {
            return placeholder();
        };
        let Some(copy) = m.copies.get_mut(&env.group) else {
            return placeholder();
        };
        let position = copy.tracker.note(&host, &digest);
        let reply = (host == rp.host)
            .then(|| rp.replies.get(position - 1).cloned())
            .flatten();
        Decision::Probe(reply)
    } else if env.call.open {
        Decision::Deliver
    } else {
        loop {
            // Registered before the records are read, so a delivery or an end between the
            // read and the wait is not missed.
            let woken = env.call.notify.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            {
                let Ok(mut m) = env.call.lock() else {
                    return placeholder();
                };
                let m = &mut *m;
                let Some(copy) = m.copies.get_mut(&env.group) else {
                    return placeholder();
                };
                match copy
                    .tracker
                    .request(&env.call.cx, &m.records, &host, &digest)
                {
                    Verdict::Deliver => break Decision::Deliver,
                    Verdict::Replay(r) => break Decision::Replay(r.clone()),
                    Verdict::Placeholder => break Decision::Placeholder,
                    Verdict::Deny => break Decision::Deny,
                    Verdict::Wait => {}
                }
            }
            // The hold rule (concurrent copies): the earlier group's answer at this position
            // is not known yet. Wait for its record to grow or for it to end, never past this
            // copy's end or deadline (the lock is not held while waiting).
            tokio::select! {
                _ = &mut woken => {}
                _ = cancelled(env) => return placeholder(),
            }
        }
    };
    let log = |verdict: &str, status: Option<u16>| {
        inner.audit.event("request", || json!({"call": env.call.id, "group": env.group, "release": env.call.release, "host": host,
                   "verdict": verdict, "digest": hex::encode(digest), "bytes": body.len(), "status": status}),
        );
    };
    match decision {
        Decision::Probe(Some(r)) => {
            log("probe-replayed", Some(r.status));
            respond(&r)
        }
        Decision::Probe(None) => {
            log("probe-placeholder", None);
            placeholder()
        }
        Decision::Deny => record_denied(inner, env, None, &host, DenialReason::UndeclaredHost),
        Decision::Placeholder => {
            inner.stats.placeholders.fetch_add(1, Ordering::Relaxed);
            note(inner, env, &host, "placeholder", t0);
            log("placeholder", None);
            placeholder()
        }
        Decision::Replay(r) => {
            inner.stats.replayed.fetch_add(1, Ordering::Relaxed);
            note(inner, env, &host, "replayed", t0);
            note_redirect(env, &r);
            log("replayed", Some(r.status));
            respond(&r)
        }
        Decision::Deliver => {
            let until = std::cmp::min(
                tokio::time::Instant::now() + inner.cfg.request_timeout,
                env.deadline,
            );
            let mut verdict = "delivered";
            let mut resolve_denied = false;
            let reply = match tokio::time::timeout_at(
                until,
                deliver(inner, scheme, &host, port, &parts, &path, body.clone()),
            )
            .await
            {
                Ok(Ok(r)) => r,
                // A declared name that resolves only to internal addresses, or not at all, is
                // refused like an undeclared one, with the same fixed answer.
                Ok(Err(UpstreamError::Resolve(e))) => {
                    verdict = "denied";
                    inner.stats.denied.fetch_add(1, Ordering::Relaxed);
                    resolve_denied = true;
                    inner.audit.event("resolve", || json!({"call": env.call.id, "group": env.group, "host": host, "refused": e.to_string()}),
                    );
                    Reply {
                        status: 403,
                        headers: vec![("x-germline".into(), "denied".into())],
                        body: Bytes::from_static(
                            b"germline: destination not declared for this call\n",
                        ),
                    }
                }
                // A failure is recorded like a reply so that positions stay aligned; its text
                // is fixed.
                Ok(Err(e)) => Reply {
                    status: 502,
                    headers: vec![("x-germline".into(), format!("upstream-{}", e.kind()))],
                    body: Bytes::from_static(b"germline: upstream failed\n"),
                },
                Err(_) => Reply {
                    status: 504,
                    headers: vec![("x-germline".into(), "upstream-timeout".into())],
                    body: Bytes::from_static(b"germline: upstream timed out\n"),
                },
            };
            let reply = Arc::new(reply);
            if let Ok(mut m) = env.call.lock() {
                let m = &mut *m;
                if let Some(copy) = m.copies.get_mut(&env.group) {
                    copy.tracker.delivered(
                        &env.call.cx,
                        &mut m.records,
                        &host,
                        digest,
                        reply.clone(),
                    );
                }
            }
            env.call.wake();
            note_redirect(env, &reply);
            if verdict == "delivered" {
                inner.stats.delivered.fetch_add(1, Ordering::Relaxed);
                note(inner, env, &host, "delivered", t0);
            } else if resolve_denied {
                note(inner, env, &host, "denied", t0);
            }
            log(verdict, Some(reply.status));
            respond(&reply)
        }
    }
}

fn respond(r: &Reply) -> Resp {
    let mut resp = Response::new(Full::new(r.body.clone()));
    *resp.status_mut() = StatusCode::from_u16(r.status).unwrap_or(StatusCode::BAD_GATEWAY);
    for (n, v) in &r.headers {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(n.as_bytes()),
            HeaderValue::from_str(v),
        ) {
            resp.headers_mut().append(n, v);
        }
    }
    resp
}

#[derive(Debug)]
enum UpstreamError {
    Resolve(ResolveError),
    Connect,
    Tls,
    Http,
    TooLarge,
}

impl UpstreamError {
    fn kind(&self) -> &'static str {
        match self {
            UpstreamError::Resolve(ResolveError::Internal) => "internal-address",
            UpstreamError::Resolve(_) => "resolve",
            UpstreamError::Connect => "connect",
            UpstreamError::Tls => "tls",
            UpstreamError::Http => "http",
            UpstreamError::TooLarge => "too-large",
        }
    }
}

/// Issues the request itself to the address resolved now, adding the host's credential.
async fn deliver(
    inner: &Inner,
    scheme: Scheme,
    host: &str,
    port: u16,
    parts: &http::request::Parts,
    path: &str,
    body: Bytes,
) -> Result<Reply, UpstreamError> {
    let mut target = (scheme, host.to_string(), port, path.to_string());
    let mut method = parts.method.clone();
    let mut body = body;
    let mut hops = 0;
    loop {
        let (scheme, host, port, path) = &target;
        let reply = send_once(
            inner,
            *scheme,
            host,
            *port,
            &method,
            parts,
            path,
            body.clone(),
        )
        .await?;
        // germline never follows redirects: the copy gets the 3xx as it came. The reference
        // mode below is what an ordinary forwarding proxy would do.
        let redirect = matches!(reply.status, 301 | 302 | 303 | 307 | 308);
        if !(inner.cfg.follow_redirects && redirect && hops < 5) {
            return Ok(reply);
        }
        let Some(loc) = reply
            .headers
            .iter()
            .find(|(n, _)| n == "location")
            .map(|(_, v)| v.clone())
        else {
            return Ok(reply);
        };
        let Ok(uri) = loc.parse::<http::Uri>() else {
            return Ok(reply);
        };
        let (Some(h), Some(s)) = (uri.host(), uri.scheme_str()) else {
            return Ok(reply);
        };
        let s = if s == "https" {
            Scheme::Https
        } else {
            Scheme::Http
        };
        let p = uri
            .port_u16()
            .unwrap_or(if s == Scheme::Https { 443 } else { 80 });
        if reply.status == 303
            || (reply.status != 307 && reply.status != 308 && method == Method::POST)
        {
            method = Method::GET;
            body = Bytes::new();
        }
        target = (
            s,
            h.to_ascii_lowercase(),
            p,
            uri.path_and_query().map_or("/", |x| x.as_str()).to_string(),
        );
        hops += 1;
    }
}

#[allow(clippy::too_many_arguments)]
async fn send_once(
    inner: &Inner,
    scheme: Scheme,
    host: &str,
    port: u16,
    method: &Method,
    parts: &http::request::Parts,
    path: &str,
    body: Bytes,
) -> Result<Reply, UpstreamError> {
    let pin = inner.cfg.policy.pin(host);
    if pin.is_none() {
        inner.stats.dns_lookups.fetch_add(1, Ordering::Relaxed);
    }
    let addr: SocketAddr = resolve::resolve(host, port, pin)
        .await
        .map_err(UpstreamError::Resolve)?;
    let tcp = TcpStream::connect(addr)
        .await
        .map_err(|_| UpstreamError::Connect)?;
    let _ = tcp.set_nodelay(true);

    let mut path = path.to_string();
    let mut req = Request::builder().method(method.clone());
    let credential = inner.credentials.get(host);
    if let Some(c) = credential {
        if let CredentialPlace::Query(name) = &c.place {
            let sep = if path.contains('?') { '&' } else { '?' };
            path = format!("{path}{sep}{}={}", urlencode(name), urlencode(&c.value));
        }
    }
    req = req.uri(path);
    for (n, v) in &parts.headers {
        if n == HOST || HOP_BY_HOP.contains(&n.as_str()) {
            continue;
        }
        req = req.header(n, v);
    }
    let authority =
        if (scheme == Scheme::Http && port == 80) || (scheme == Scheme::Https && port == 443) {
            host.to_string()
        } else {
            format!("{host}:{port}")
        };
    req = req.header(HOST, authority);
    let mut req = req.body(Full::new(body)).map_err(|_| UpstreamError::Http)?;
    if let Some(c) = credential {
        if let CredentialPlace::Header(name) = &c.place {
            let n = HeaderName::from_bytes(name.as_bytes()).map_err(|_| UpstreamError::Http)?;
            let v = HeaderValue::from_str(&c.value).map_err(|_| UpstreamError::Http)?;
            req.headers_mut().insert(n, v);
        }
    }

    let resp = match scheme {
        Scheme::Http => send(TokioIo::new(tcp), req).await?,
        Scheme::Https => {
            let name = rustls::pki_types::ServerName::try_from(host.to_string())
                .map_err(|_| UpstreamError::Tls)?;
            let tls = tokio_rustls::TlsConnector::from(inner.upstream_tls.clone())
                .connect(name, tcp)
                .await
                .map_err(|_| UpstreamError::Tls)?;
            send(TokioIo::new(tls), req).await?
        }
    };
    let (rparts, rbody) = resp.into_parts();
    let body = Limited::new(rbody, inner.cfg.max_body)
        .collect()
        .await
        .map_err(|_| UpstreamError::TooLarge)?
        .to_bytes();
    let headers = rparts
        .headers
        .iter()
        .filter(|(n, _)| !HOP_BY_HOP.contains(&n.as_str()) && *n != http::header::CONTENT_LENGTH)
        .filter_map(|(n, v)| Some((n.as_str().to_string(), v.to_str().ok()?.to_string())))
        .collect();
    Ok(Reply {
        status: rparts.status.as_u16(),
        headers,
        body,
    })
}

async fn send<T>(
    io: TokioIo<T>,
    req: Request<Full<Bytes>>,
) -> Result<Response<Incoming>, UpstreamError>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|_| UpstreamError::Http)?;
    tokio::spawn(conn);
    sender
        .send_request(req)
        .await
        .map_err(|_| UpstreamError::Http)
}

fn urlencode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The state pseudo-destination: `GET /slot` lists keys (a JSON list), `GET /slot/KEY` reads, `PUT
/// /slot/KEY` writes with the copy's current label, `GET /twin` returns the twin inputs. A
/// copy only ever reaches the slot of its own horizon.
async fn state(inner: &Inner, env: &CopyEnv, req: Request<Incoming>) -> Resp {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let body = match Limited::new(req.into_body(), inner.cfg.max_body)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            return record_malformed(
                inner,
                env,
                "slot body unreadable or too large",
                path.as_bytes(),
            )
        }
    };
    let json_resp = |v: serde_json::Value| {
        let mut r = Response::new(Full::new(Bytes::from(v.to_string())));
        r.headers_mut()
            .insert("content-type", HeaderValue::from_static("application/json"));
        r
    };
    if path == "/twin" && method == Method::GET {
        let t = env.call.twin;
        return json_resp(json!({"time_ns": t.time_ns.to_string(), "seed": t.seed}));
    }
    let key = path.strip_prefix("/slot/").map(str::to_string);
    // Concurrent copies: the copy's slot snapshot is taken once the earlier groups of its
    // horizon ended (what it holds when the copy starts sequentially); its reads and writes
    // wait for that, never past the copy's end or deadline.
    loop {
        let woken = env.call.notify.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let settled = match env.call.lock() {
            Ok(mut m) => crate::settle_snapshot(inner, &env.call, &mut m, env.group),
            Err(_) => return placeholder(),
        };
        match settled {
            Ok(true) => break,
            Ok(false) => {}
            Err(_) => return placeholder(),
        }
        tokio::select! {
            _ = &mut woken => {}
            _ = cancelled(env) => return placeholder(),
        }
    }
    let Ok(mut guard) = env.call.lock() else {
        return placeholder();
    };
    let m = &mut *guard;
    let Some(copy) = m.copies.get_mut(&env.group) else {
        return placeholder();
    };
    let answer = match (method, path.as_str(), key) {
        // Reads serve the snapshot taken when the copy started, never the copy's own writes
        // of this call (SPEC.md: a copy "receives the whole slot of its horizon at start and
        // may write only to it"). So a request can depend on the slot only through what the
        // horizon held before the call, and a divergence it causes is a state divergence
        // (docs/evidence.md).
        (Method::GET, "/slot", _) => {
            let keys: Vec<&String> = copy.snapshot.entries.keys().collect();
            // A JSON list of strings: the form the corpus's slot-using Trojans parse
            // (docs/security-matrix.md, "What `germline run` must provide").
            Some(json_resp(json!(keys)))
        }
        (Method::GET, _, Some(k)) => {
            let v = copy.snapshot.entries.get(&k).map(|e| e.value.clone());
            inner.audit.event("slot_read", || json!({"call": env.call.id, "group": env.group, "key_digest": digest_hex(k.as_bytes())}));
            Some(match v {
                Some(v) => Response::new(Full::new(Bytes::from(v))),
                None => fixed(
                    StatusCode::NOT_FOUND,
                    "slot-miss",
                    "germline: no such slot key\n",
                ),
            })
        }
        // A re-run's writes go nowhere (nothing reads them back within a call either).
        (Method::PUT, _, Some(k)) if valid_key(&k) && env.call.replay.is_some() => {
            Some(fixed(StatusCode::NO_CONTENT, "slot-written", ""))
        }
        (Method::PUT, _, Some(k)) if valid_key(&k) => {
            let label = copy.tracker.label().clone();
            let res = inner
                .slots()
                .map(|mut s| s.write(&copy.slot_key, &k, &body, &label));
            Some(match res {
                Ok(Ok(())) => {
                    inner.audit.event("slot_write", || json!({"call": env.call.id, "group": env.group, "key_digest": digest_hex(k.as_bytes()), "bytes": body.len(), "label": label}),
                    );
                    fixed(StatusCode::NO_CONTENT, "slot-written", "")
                }
                _ => fixed(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "slot-refused",
                    "germline: slot write refused\n",
                ),
            })
        }
        _ => None,
    };
    // The copy's lock is released before a malformed request is noted (note takes it).
    drop(guard);
    answer.unwrap_or_else(|| record_malformed(inner, env, "unknown state request", path.as_bytes()))
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 128
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}
