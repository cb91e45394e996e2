//! MCP Streamable HTTP (revision 2025-06-18) in front of a [`Router`]: one endpoint (`/mcp`),
//! a POST carries one JSON-RPC message, a request is answered with `application/json`, a
//! notification or response with 202; GET is 405 (germline never sends the agent a request
//! outside a call); `Mcp-Session-Id` is issued at `initialize` and required after; DELETE
//! ends a session. `GET /health` needs no token.
//!
//! Every request first passes the DNS-rebinding guard (its `Host` and any `Origin` must be
//! localhost), then, except `/health`, the bearer token (compared in constant time).

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::{json, Value};
use subtle::ConstantTimeEq;

use crate::router::Router;
use crate::session::{INTERNAL_ERROR, INVALID_REQUEST, PARSE_ERROR};

/// The endpoint's path.
pub const MCP_PATH: &str = "/mcp";
/// Protocol revisions a client may name in `MCP-Protocol-Version` (those an `initialize`
/// handshake can negotiate); any other value is refused with 400, as the spec asks.
pub const PROTOCOL_VERSIONS: &[&str] = &["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];
/// Most live HTTP sessions; the least recently used one ends when a new one would exceed it.
pub const MAX_SESSIONS: usize = 1024;
/// Most open connections; further ones are closed at once.
pub const MAX_CONNECTIONS: usize = 256;
/// How long a client may take to send a request's headers, and then its body.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
const BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long requests in flight may run on after a stop signal.
const GRACE: Duration = Duration::from_secs(30);

/// What the HTTP layer enforces.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// The bearer token; `None` with `--no-auth`.
    pub token: Option<String>,
    /// Host names and addresses (lower case, IPv6 in brackets) a `Host` header may name,
    /// besides the loopback names.
    pub extra_hosts: Vec<String>,
    /// Most bytes of a request body.
    pub max_body: usize,
}

/// The live HTTP sessions: id -> last use.
#[derive(Debug, Default)]
struct Sessions(HashMap<String, Instant>);

impl Sessions {
    fn open(&mut self) -> Result<String, String> {
        if self.0.len() >= MAX_SESSIONS {
            if let Some(oldest) = self
                .0
                .iter()
                .min_by_key(|(_, t)| **t)
                .map(|(k, _)| k.clone())
            {
                self.0.remove(&oldest);
            }
        }
        let id = random_hex(16)?;
        self.0.insert(id.clone(), Instant::now());
        Ok(id)
    }

    fn touch(&mut self, id: &str) -> bool {
        match self.0.get_mut(id) {
            Some(t) => {
                *t = Instant::now();
                true
            }
            None => false,
        }
    }
}

/// The HTTP front of a [`Router`].
#[derive(Debug)]
pub struct Http {
    cfg: HttpConfig,
    router: Arc<Router>,
    sessions: Mutex<Sessions>,
    health: Value,
}

type Resp = Response<Full<Bytes>>;

/// `n` bytes from the kernel's CSPRNG, hex-encoded (tokens and session ids).
pub fn random_hex(n: usize) -> Result<String, String> {
    let mut buf = vec![0u8; n];
    let mut got = 0;
    while got < n {
        // SAFETY: the pointer and length describe the unfilled tail of `buf`, which we own.
        let r = unsafe { libc::getrandom(buf[got..].as_mut_ptr().cast(), n - got, 0) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(format!("getrandom: {e}"));
        }
        got += r as usize;
    }
    Ok(hex::encode(buf))
}

/// The host part of a `Host` header or an authority (`name`, `name:port`, `[v6]:port`),
/// lower-cased, IPv6 in brackets.
pub fn host_of(authority: &str) -> Option<String> {
    let a = authority.trim();
    if a.is_empty() {
        return None;
    }
    if let Some(rest) = a.strip_prefix('[') {
        let end = rest.find(']')?;
        let tail = &rest[end + 1..];
        if !(tail.is_empty() || tail.strip_prefix(':').is_some_and(is_port)) {
            return None;
        }
        return Some(format!("[{}]", rest[..end].to_ascii_lowercase()));
    }
    let (name, port) = match a.rsplit_once(':') {
        Some((n, p)) => (n, Some(p)),
        None => (a, None),
    };
    if port.is_some_and(|p| !is_port(p)) || name.is_empty() || name.contains(':') {
        return None;
    }
    Some(name.to_ascii_lowercase())
}

fn is_port(p: &str) -> bool {
    !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit())
}

/// localhost, 127.0.0.1 or [::1].
pub fn is_loopback_name(host: &str) -> bool {
    matches!(host, "localhost" | "127.0.0.1" | "[::1]")
}

/// Whether an `Origin` header names a localhost origin (`null` and anything else: no).
pub fn origin_allowed(origin: &str) -> bool {
    let Ok(u) = url::Url::parse(origin) else {
        return false;
    };
    if !matches!(u.scheme(), "http" | "https") {
        return false;
    }
    match u.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(a)) => a.is_loopback() && a.octets() == [127, 0, 0, 1],
        Some(url::Host::Ipv6(a)) => a.is_loopback(),
        None => false,
    }
}

/// Whether an `Authorization` header carries `Bearer <token>` (constant time in the token).
pub fn bearer_ok(header: Option<&HeaderValue>, token: &str) -> bool {
    let Some(v) = header.and_then(|h| h.to_str().ok()) else {
        return false;
    };
    let Some((scheme, given)) = v.trim().split_once(' ') else {
        return false;
    };
    scheme.eq_ignore_ascii_case("bearer")
        && bool::from(given.trim().as_bytes().ct_eq(token.as_bytes()))
}

/// The `Host` values a listener at `ip` accepts besides the loopback names: its own address,
/// if it is a specific one.
pub fn extra_hosts_for(ip: IpAddr) -> Vec<String> {
    if ip.is_unspecified() || ip.is_loopback() {
        return vec![];
    }
    match ip {
        IpAddr::V4(a) => vec![a.to_string()],
        IpAddr::V6(a) => vec![format!("[{a}]")],
    }
}

fn json_response(status: StatusCode, v: &Value) -> Resp {
    let mut r = Response::new(Full::new(Bytes::from(v.to_string())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// An HTTP-level refusal, as a JSON-RPC error so that MCP clients show its message.
fn refuse(status: StatusCode, id: &Value, code: i64, message: &str) -> Resp {
    json_response(status, &crate::session::error(id, code, message))
}

fn empty(status: StatusCode) -> Resp {
    let mut r = Response::new(Full::new(Bytes::new()));
    *r.status_mut() = status;
    r
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

impl Http {
    pub fn new(cfg: HttpConfig, router: Arc<Router>) -> Http {
        let releases: Vec<Value> = router
            .releases
            .iter()
            .map(|r| json!({"release": r.label, "digest": r.digest}))
            .collect();
        let health = json!({
            "status": "ok",
            "mode": router.mode.name(),
            "releases": releases,
            "endpoint": MCP_PATH,
            "auth": if cfg.token.is_some() { "bearer" } else { "none" },
        });
        Http {
            cfg,
            router,
            sessions: Mutex::new(Sessions::default()),
            health,
        }
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, Sessions> {
        self.sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// DNS-rebinding protection (`Some`: the refusal): a browser page whose name was rebound to 127.0.0.1 sends its
    /// own name in `Host` (and in `Origin` on cross-origin requests).
    fn guard(&self, h: &HeaderMap) -> Option<Resp> {
        let host = header(h, "host").and_then(host_of);
        let Some(host) = host else {
            return Some(refuse(
                StatusCode::BAD_REQUEST,
                &Value::Null,
                INVALID_REQUEST,
                "germline: a Host header is required",
            ));
        };
        if !is_loopback_name(&host) && !self.cfg.extra_hosts.contains(&host) {
            return Some(refuse(
                StatusCode::FORBIDDEN,
                &Value::Null,
                INVALID_REQUEST,
                "germline: this Host is not allowed (only localhost names)",
            ));
        }
        if let Some(o) = h.get("origin") {
            if !o.to_str().is_ok_and(origin_allowed) {
                return Some(refuse(
                    StatusCode::FORBIDDEN,
                    &Value::Null,
                    INVALID_REQUEST,
                    "germline: this Origin is not allowed (only localhost origins)",
                ));
            }
        }
        None
    }

    /// The bearer token (`Some`: the refusal).
    fn authorize(&self, h: &HeaderMap) -> Option<Resp> {
        let Some(token) = &self.cfg.token else {
            return None;
        };
        if bearer_ok(h.get("authorization"), token) {
            return None;
        }
        let mut r = refuse(
            StatusCode::UNAUTHORIZED,
            &Value::Null,
            INVALID_REQUEST,
            "germline: a bearer token is required (Authorization: Bearer <token from the \
             file germline serve printed>)",
        );
        let challenge = if h.contains_key("authorization") {
            "Bearer realm=\"germline\", error=\"invalid_token\""
        } else {
            "Bearer realm=\"germline\""
        };
        r.headers_mut().insert(
            hyper::header::WWW_AUTHENTICATE,
            HeaderValue::from_static(challenge),
        );
        Some(r)
    }

    /// Answers one HTTP request.
    pub async fn respond(self: Arc<Self>, req: Request<Incoming>) -> Resp {
        if let Some(r) = self.guard(req.headers()) {
            return r;
        }
        let path = req.uri().path();
        if path == "/health" {
            return match *req.method() {
                Method::GET | Method::HEAD => json_response(StatusCode::OK, &self.health),
                _ => with_allow(empty(StatusCode::METHOD_NOT_ALLOWED), "GET"),
            };
        }
        if path != MCP_PATH {
            return refuse(
                StatusCode::NOT_FOUND,
                &Value::Null,
                INVALID_REQUEST,
                &format!("germline: no such endpoint (MCP is at {MCP_PATH})"),
            );
        }
        if let Some(r) = self.authorize(req.headers()) {
            return r;
        }
        if let Some(v) = header(req.headers(), "mcp-protocol-version") {
            if !PROTOCOL_VERSIONS.contains(&v) {
                return refuse(
                    StatusCode::BAD_REQUEST,
                    &Value::Null,
                    INVALID_REQUEST,
                    &format!(
                        "germline: unsupported MCP-Protocol-Version {v:?} (supported: {})",
                        PROTOCOL_VERSIONS.join(", ")
                    ),
                );
            }
        }
        match *req.method() {
            Method::POST => self.post(req).await,
            Method::DELETE => self.delete(req.headers()),
            // No server-initiated stream: during a call only the agent group's copy may talk
            // to the agent, and its answer travels on the call's own POST.
            _ => with_allow(empty(StatusCode::METHOD_NOT_ALLOWED), "POST, DELETE"),
        }
    }

    fn delete(&self, h: &HeaderMap) -> Resp {
        let Some(id) = header(h, "mcp-session-id") else {
            return refuse(
                StatusCode::BAD_REQUEST,
                &Value::Null,
                INVALID_REQUEST,
                "germline: DELETE needs the Mcp-Session-Id header",
            );
        };
        if self.sessions().0.remove(id).is_some() {
            empty(StatusCode::NO_CONTENT)
        } else {
            refuse(
                StatusCode::NOT_FOUND,
                &Value::Null,
                INVALID_REQUEST,
                "germline: unknown session",
            )
        }
    }

    async fn post(self: Arc<Self>, req: Request<Incoming>) -> Resp {
        let ct = header(req.headers(), "content-type").unwrap_or_default();
        if !ct
            .trim_start()
            .to_ascii_lowercase()
            .starts_with("application/json")
        {
            return refuse(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                &Value::Null,
                INVALID_REQUEST,
                "germline: a POST must carry Content-Type: application/json",
            );
        }
        let too_big = || {
            refuse(
                StatusCode::PAYLOAD_TOO_LARGE,
                &Value::Null,
                INVALID_REQUEST,
                &format!(
                    "germline: the body is larger than {} bytes",
                    self.cfg.max_body
                ),
            )
        };
        let declared = header(req.headers(), "content-length").and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > self.cfg.max_body as u64) {
            return too_big();
        }
        let session = header(req.headers(), "mcp-session-id").map(str::to_string);
        let body = Limited::new(req.into_body(), self.cfg.max_body);
        let bytes = match tokio::time::timeout(BODY_TIMEOUT, body.collect()).await {
            Err(_) => {
                return refuse(
                    StatusCode::REQUEST_TIMEOUT,
                    &Value::Null,
                    INVALID_REQUEST,
                    "germline: the body did not arrive in time",
                )
            }
            Ok(Err(e))
                if e.downcast_ref::<http_body_util::LengthLimitError>()
                    .is_some() =>
            {
                return too_big()
            }
            Ok(Err(e)) => {
                return refuse(
                    StatusCode::BAD_REQUEST,
                    &Value::Null,
                    INVALID_REQUEST,
                    &format!("germline: reading the body: {e}"),
                )
            }
            Ok(Ok(b)) => b.to_bytes(),
        };
        let msg: Value = match serde_json::from_slice(&bytes) {
            Ok(v) => v,
            Err(e) => {
                return refuse(
                    StatusCode::BAD_REQUEST,
                    &Value::Null,
                    PARSE_ERROR,
                    &format!("parse error: {e}"),
                )
            }
        };
        let Some(obj) = msg.as_object() else {
            let what = if msg.is_array() {
                "germline: a POST carries one JSON-RPC message (batches are not part of MCP \
                 2025-06-18)"
            } else {
                "germline: a JSON-RPC message must be an object"
            };
            return refuse(StatusCode::BAD_REQUEST, &Value::Null, INVALID_REQUEST, what);
        };
        let id = obj.get("id").cloned();
        let method = obj
            .get("method")
            .and_then(Value::as_str)
            .map(str::to_string);
        if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            return refuse(
                StatusCode::BAD_REQUEST,
                &id.unwrap_or(Value::Null),
                INVALID_REQUEST,
                "expected \"jsonrpc\": \"2.0\"",
            );
        }
        let is_request = method.is_some() && id.is_some();
        let is_reply = method.is_none()
            && id.is_some()
            && (obj.contains_key("result") || obj.contains_key("error"));
        if !is_request && !is_reply && method.is_none() {
            return refuse(
                StatusCode::BAD_REQUEST,
                &id.unwrap_or(Value::Null),
                INVALID_REQUEST,
                "not a JSON-RPC request, notification or response",
            );
        }
        if is_request && method.as_deref() == Some("initialize") {
            let answer = self.dispatch(msg).await;
            if answer.get("result").is_none() {
                return json_response(StatusCode::OK, &answer);
            }
            let sid = match self.sessions().open() {
                Ok(s) => s,
                Err(e) => {
                    return refuse(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        &id.unwrap_or(Value::Null),
                        INTERNAL_ERROR,
                        &format!("germline: no session id: {e}"),
                    )
                }
            };
            let mut r = json_response(StatusCode::OK, &answer);
            if let Ok(v) = HeaderValue::from_str(&sid) {
                r.headers_mut().insert("mcp-session-id", v);
            }
            return r;
        }
        let id_or_null = id.clone().unwrap_or(Value::Null);
        match session {
            None => {
                return refuse(
                    StatusCode::BAD_REQUEST,
                    &id_or_null,
                    INVALID_REQUEST,
                    "germline: the Mcp-Session-Id header is required (send initialize first)",
                )
            }
            Some(s) if !self.sessions().touch(&s) => {
                return refuse(
                    StatusCode::NOT_FOUND,
                    &id_or_null,
                    INVALID_REQUEST,
                    "germline: unknown or ended session: initialize again",
                )
            }
            Some(_) => {}
        }
        if !is_request {
            // Notifications (initialized, cancelled) and replies: nothing to answer. A call in
            // flight cannot be cancelled (its copies run to their deadline, then go).
            return empty(StatusCode::ACCEPTED);
        }
        let answer = self.dispatch(msg).await;
        json_response(StatusCode::OK, &answer)
    }

    /// Runs the router on a blocking thread (the runtime forks and waits for copies).
    async fn dispatch(&self, msg: Value) -> Value {
        let id = msg.get("id").cloned().unwrap_or(Value::Null);
        let router = self.router.clone();
        let after = self.router.clone();
        match tokio::task::spawn_blocking(move || router.handle(msg)).await {
            Ok(v) => {
                // Refill pools off the answer's path.
                tokio::task::spawn_blocking(move || after.idle());
                v
            }
            Err(e) => crate::session::error(&id, INTERNAL_ERROR, format!("germline: {e}")),
        }
    }
}

fn with_allow(mut r: Resp, allow: &'static str) -> Resp {
    r.headers_mut()
        .insert(hyper::header::ALLOW, HeaderValue::from_static(allow));
    r
}

/// Serves connections on `listener` until `stop` changes (or its sender is gone), then lets
/// requests in flight finish (up to 30 s) and returns.
pub async fn serve(
    listener: tokio::net::TcpListener,
    http: Arc<Http>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut conns = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            r = listener.accept() => {
                while conns.try_join_next().is_some() {}
                let stream = match r {
                    Ok((s, _)) => s,
                    Err(e) => {
                        // Out of descriptors or a reset connection: keep serving the others.
                        eprintln!("germline serve: accept: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                if conns.len() >= MAX_CONNECTIONS {
                    drop(stream);
                    continue;
                }
                let http = http.clone();
                let mut stop = stop.clone();
                conns.spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        let h = http.clone();
                        async move { Ok::<_, Infallible>(h.respond(req).await) }
                    });
                    let conn = hyper::server::conn::http1::Builder::new()
                        .timer(TokioTimer::new())
                        .header_read_timeout(HEADER_TIMEOUT)
                        .serve_connection(TokioIo::new(stream), svc);
                    tokio::pin!(conn);
                    tokio::select! {
                        _ = conn.as_mut() => {}
                        _ = stop.changed() => {
                            conn.as_mut().graceful_shutdown();
                            let _ = conn.await;
                        }
                    }
                });
            }
            _ = stop.changed() => break,
        }
    }
    drop(listener);
    let drain = async { while conns.join_next().await.is_some() {} };
    if tokio::time::timeout(GRACE, drain).await.is_err() {
        conns.abort_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_headers_parse_with_and_without_ports() {
        assert_eq!(host_of("localhost:8765").as_deref(), Some("localhost"));
        assert_eq!(host_of("LOCALHOST").as_deref(), Some("localhost"));
        assert_eq!(host_of("127.0.0.1:1").as_deref(), Some("127.0.0.1"));
        assert_eq!(host_of("[::1]:8765").as_deref(), Some("[::1]"));
        assert_eq!(host_of("[::1]").as_deref(), Some("[::1]"));
        assert_eq!(host_of("evil.example:80").as_deref(), Some("evil.example"));
        for bad in ["", ":80", "a:b", "::1", "[::1]x", "[::1]:", "host:123456"] {
            assert_eq!(host_of(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn only_localhost_origins_pass() {
        for good in [
            "http://localhost:3000",
            "https://localhost",
            "http://127.0.0.1:8765",
            "http://[::1]:9",
        ] {
            assert!(origin_allowed(good), "{good}");
        }
        for bad in [
            "null",
            "http://evil.example",
            "http://localhost.evil.example",
            "http://127.0.0.2",
            "http://0.0.0.0",
            "file://localhost",
            "http://[::2]",
            "localhost",
            "",
        ] {
            assert!(!origin_allowed(bad), "{bad}");
        }
    }

    #[test]
    fn the_bearer_token_must_match_exactly() {
        let t = "0123456789abcdef";
        let h = |s: &str| HeaderValue::from_str(s).expect("header");
        assert!(bearer_ok(Some(&h("Bearer 0123456789abcdef")), t));
        assert!(bearer_ok(Some(&h("bearer 0123456789abcdef")), t));
        assert!(!bearer_ok(None, t));
        assert!(!bearer_ok(Some(&h("Bearer 0123456789abcde")), t));
        assert!(!bearer_ok(Some(&h("Bearer 0123456789abcdeF")), t));
        assert!(!bearer_ok(Some(&h("Basic 0123456789abcdef")), t));
        assert!(!bearer_ok(Some(&h("Bearer")), t));
        assert!(!bearer_ok(Some(&h("Bearer ")), ""));
    }

    #[test]
    fn a_specific_listen_address_is_an_allowed_host() {
        assert!(extra_hosts_for("0.0.0.0".parse().expect("ip")).is_empty());
        assert!(extra_hosts_for("127.0.0.1".parse().expect("ip")).is_empty());
        assert_eq!(
            extra_hosts_for("10.1.2.3".parse().expect("ip")),
            vec!["10.1.2.3"]
        );
        assert_eq!(
            extra_hosts_for("fd00::1".parse().expect("ip")),
            vec!["[fd00::1]"]
        );
    }

    #[test]
    fn session_ids_are_random_and_the_table_is_bounded() {
        let mut s = Sessions::default();
        let a = s.open().expect("id");
        assert_eq!(a.len(), 32);
        assert!(s.touch(&a));
        assert!(!s.touch("nope"));
        for _ in 0..MAX_SESSIONS + 5 {
            s.open().expect("id");
        }
        assert_eq!(s.0.len(), MAX_SESSIONS);
        assert!(!s.touch(&a), "the least recently used session ended first");
    }
}
