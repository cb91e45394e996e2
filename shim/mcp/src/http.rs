//! MCP Streamable HTTP (revision 2025-06-18) in front of a [`Router`]: one endpoint (`/mcp`),
//! a POST carries one JSON-RPC message, a request is answered with `application/json`, a
//! notification or response with 202; GET is 405 (germline never sends the agent a request
//! outside a call); `Mcp-Session-Id` is issued at `initialize` and required after; DELETE
//! ends a session. `GET /health` needs no token.
//!
//! Every request first passes the DNS-rebinding guard (its `Host` and any `Origin` must be
//! localhost), then, except `/health`, the bearer token (compared in constant time).
//!
//! `GET /status` and `GET /status.json` ([`crate::status_page`]) take the same token; since a
//! browser cannot send a bearer header when it navigates, the page also takes a login cookie,
//! which `POST /status/login` (a form with the token, never a URL) sets: HttpOnly,
//! SameSite=Strict, for the page's path only, stored here as a digest.

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

use crate::conns::{self, AtCap, Busy, Slot, Tracked};
use crate::jsonrpc::{self, Kind};
use crate::router::{Caller, Router};
use crate::session::{INTERNAL_ERROR, INVALID_REQUEST};
use crate::sse::{Out, SseLink, Streams};
use crate::status_page::{Board, SessionRow};
use germline_engine::ids::random_hex;

/// The endpoint's path.
pub const MCP_PATH: &str = "/mcp";
/// Protocol revisions a client may name in `MCP-Protocol-Version` (those an `initialize`
/// handshake can negotiate); any other value is refused with 400, as the spec asks.
pub const PROTOCOL_VERSIONS: &[&str] = &["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];
/// Most live HTTP sessions by default (`--max-sessions`); the least recently used one ends
/// when a new one would exceed it. Under the `session` lifetime each has its own germline.
pub const MAX_SESSIONS: usize = 64;
/// How long a session may stay unused before it ends by default (`--session-idle-timeout`).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(600);
/// Most open connections by default (`--max-connections`), and from one client address
/// (`--max-connections-per-client`). A new connection past either closes the least recently
/// used idle one (no request in progress); if none is idle it is answered by the overflow
/// service ([`OVERFLOW`]): `/health` as usual, anything else 503.
pub const MAX_CONNECTIONS: usize = 256;
pub const MAX_CONNECTIONS_PER_CLIENT: usize = 64;
/// How long a new connection may take to send its first request's headers
/// (`--header-timeout`), how long a connection may stay idle between requests
/// (`--keepalive-timeout`), and how long a request's body may take (`--body-timeout`).
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(30);
pub const BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// Connections answered past the caps at once (one request each, then closed); more are
/// closed unanswered.
pub const OVERFLOW: usize = 32;
/// How long an overflow connection may take to send its request.
const OVERFLOW_TIMEOUT: Duration = Duration::from_secs(2);
/// How long requests in flight may run on after a stop signal.
const GRACE: Duration = Duration::from_secs(30);

/// A bearer token and the user it names (the user keys `long-lived` germlines and slots).
#[derive(Clone)]
pub struct Bearer {
    pub token: String,
    pub user: String,
}

impl std::fmt::Debug for Bearer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bearer")
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

/// What the HTTP layer enforces.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// The accepted bearer tokens; `None` with `--no-auth`.
    pub tokens: Option<Vec<Bearer>>,
    /// The user of every session with `--no-auth`.
    pub anonymous_user: String,
    /// Bearer JWTs of an OAuth issuer, accepted besides the static tokens (`--oauth-*`).
    pub oauth: Option<Arc<crate::oauth::OAuth>>,
    /// Most live sessions, and how long one may stay unused.
    pub max_sessions: usize,
    pub idle_timeout: Duration,
    /// Host names and addresses (lower case, IPv6 in brackets) a `Host` header may name,
    /// besides the loopback names.
    pub extra_hosts: Vec<String>,
    /// `Origin` values allowed besides localhost ones (`--allowed-origins`, normalised by
    /// [`crate::allow::parse_origin`]).
    pub allowed_origins: Vec<String>,
    /// Most bytes of a request body.
    pub max_body: usize,
    /// Connection caps and timeouts.
    pub conns: ConnLimits,
}

/// Caps on connections and their timeouts (docs/operations.md).
#[derive(Debug, Clone)]
pub struct ConnLimits {
    pub max_total: usize,
    pub max_per_client: usize,
    pub header_timeout: Duration,
    pub keepalive_timeout: Duration,
    pub body_timeout: Duration,
}

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits {
            max_total: MAX_CONNECTIONS,
            max_per_client: MAX_CONNECTIONS_PER_CLIENT,
            header_timeout: HEADER_TIMEOUT,
            keepalive_timeout: KEEPALIVE_TIMEOUT,
            body_timeout: BODY_TIMEOUT,
        }
    }
}

/// One live HTTP session.
#[derive(Debug)]
struct Open {
    last: Instant,
    user: String,
    /// Requests of it being answered now (it does not time out meanwhile).
    busy: u32,
    /// When it started, and its `tools/call` requests (for the status page).
    opened: Instant,
    calls: u64,
}

/// The live HTTP sessions by id.
#[derive(Debug)]
struct Sessions {
    open: HashMap<String, Open>,
    max: usize,
}

impl Sessions {
    fn new(max: usize) -> Sessions {
        Sessions {
            open: HashMap::new(),
            max: max.max(1),
        }
    }

    /// A new session of `user`, and the least recently used one it ended to stay in bounds.
    fn open(
        &mut self,
        user: &str,
    ) -> Result<(String, Option<String>), germline_engine::ids::RandomError> {
        let mut evicted = None;
        if self.open.len() >= self.max {
            if let Some(oldest) = self
                .open
                .iter()
                .min_by_key(|(_, o)| (o.busy > 0, o.last))
                .map(|(k, _)| k.clone())
            {
                self.open.remove(&oldest);
                evicted = Some(oldest);
            }
        }
        let id = random_hex(16)?;
        self.open.insert(
            id.clone(),
            Open {
                last: Instant::now(),
                user: user.to_string(),
                busy: 0,
                opened: Instant::now(),
                calls: 0,
            },
        );
        Ok((id, evicted))
    }

    /// Whether `id` is a live session of `user` (a session is bound to its user's token).
    fn touch(&mut self, id: &str, user: &str) -> bool {
        match self.open.get_mut(id) {
            Some(o) if o.user == user => {
                o.last = Instant::now();
                true
            }
            _ => false,
        }
    }

    fn busy(&mut self, id: &str, by: i32) {
        if let Some(o) = self.open.get_mut(id) {
            o.busy = o.busy.saturating_add_signed(by);
            o.last = Instant::now();
        }
    }

    fn remove(&mut self, id: &str, user: &str) -> bool {
        if self.open.get(id).is_some_and(|o| o.user == user) {
            self.open.remove(id);
            true
        } else {
            false
        }
    }

    fn called(&mut self, id: &str) {
        if let Some(o) = self.open.get_mut(id) {
            o.calls += 1;
        }
    }

    /// The live sessions as the status page shows them.
    fn rows(&self, now: Instant) -> Vec<SessionRow> {
        self.open
            .iter()
            .map(|(id, o)| SessionRow {
                id: id.clone(),
                user: o.user.clone(),
                age_secs: now.saturating_duration_since(o.opened).as_secs(),
                idle_secs: now.saturating_duration_since(o.last).as_secs(),
                busy: o.busy,
                calls: o.calls,
            })
            .collect()
    }

    /// Ends the sessions unused for `timeout` (none while one of its requests runs).
    fn expire(&mut self, now: Instant, timeout: Duration) -> Vec<String> {
        let old: Vec<String> = self
            .open
            .iter()
            .filter(|(_, o)| o.busy == 0 && now.saturating_duration_since(o.last) >= timeout)
            .map(|(k, _)| k.clone())
            .collect();
        for k in &old {
            self.open.remove(k);
        }
        old
    }
}

/// The status page's login cookie.
pub const STATUS_COOKIE: &str = "germline_status";
/// How long a status page login lasts.
pub const STATUS_LOGIN_LIFE: Duration = Duration::from_secs(12 * 3600);
/// Most status page logins kept (the oldest goes first).
const STATUS_LOGINS: usize = 64;

/// Status page logins: the SHA-256 of each cookie value, its user and when it expires. Only
/// digests are kept, so a lookup's timing tells nothing of a valid cookie.
#[derive(Debug, Default)]
struct Logins(HashMap<[u8; 32], (String, Instant)>);

fn digest(v: &str) -> [u8; 32] {
    use sha2::Digest as _;
    sha2::Sha256::digest(v.as_bytes()).into()
}

impl Logins {
    fn add(&mut self, cookie: &str, user: &str, now: Instant) {
        self.0.retain(|_, (_, until)| *until > now);
        if self.0.len() >= STATUS_LOGINS {
            if let Some(k) = self.0.iter().min_by_key(|(_, (_, t))| *t).map(|(k, _)| *k) {
                self.0.remove(&k);
            }
        }
        self.0
            .insert(digest(cookie), (user.to_string(), now + STATUS_LOGIN_LIFE));
    }

    fn user(&self, cookie: &str, now: Instant) -> Option<String> {
        match self.0.get(&digest(cookie)) {
            Some((u, until)) if *until > now => Some(u.clone()),
            _ => None,
        }
    }
}

/// The value of cookie `name` in a request's `Cookie` headers.
fn cookie<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get_all(hyper::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.trim())
}

/// The HTTP front of a [`Router`].
#[derive(Debug)]
pub struct Http {
    cfg: HttpConfig,
    router: Arc<Router>,
    sessions: Mutex<Sessions>,
    conns: conns::Table,
    health: Value,
    /// The status page's data (`/status`), if served.
    board: Option<Arc<Board>>,
    logins: Mutex<Logins>,
    /// Calls answered on SSE streams: their cancellations and their requests to the agent.
    streams: Arc<Streams>,
}

/// A `tools/call` to answer on an SSE stream: [`Http::post`] leaves it in its response's
/// extensions, [`Http::finish`] starts it (every other answer stays one buffer).
#[derive(Debug, Clone)]
struct StreamCall {
    caller: Caller,
    msg: Value,
    raw: Vec<jsonrpc::RawId>,
}

type Resp = Response<Full<Bytes>>;

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
    bearer_user(
        header,
        &[Bearer {
            token: token.to_string(),
            user: String::new(),
        }],
    )
    .is_some()
}

/// The user whose token an `Authorization: Bearer <token>` header carries. Every token is
/// compared, each in constant time, so the time does not tell which one matched.
pub fn bearer_user<'a>(header: Option<&HeaderValue>, tokens: &'a [Bearer]) -> Option<&'a str> {
    let v = header.and_then(|h| h.to_str().ok())?;
    let (scheme, given) = v.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    token_user(given.trim(), tokens)
}

/// The user of a token given as is (the status page's login form), in constant time as
/// [`bearer_user`].
pub fn token_user<'a>(given: &str, tokens: &'a [Bearer]) -> Option<&'a str> {
    let given = given.as_bytes();
    let mut found = None;
    for b in tokens {
        if bool::from(given.ct_eq(b.token.as_bytes())) && found.is_none() {
            found = Some(b.user.as_str());
        }
    }
    found
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
    text_response(status, v.to_string())
}

/// A JSON body already rendered (ids as the client wrote them, [`jsonrpc::render`]).
fn text_response(status: StatusCode, text: String) -> Resp {
    let mut r = Response::new(Full::new(Bytes::from(text)));
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

/// Whether a `Content-Type` is `application/json`, with any parameters (`; charset=utf-8`).
pub fn is_json(v: Option<&HeaderValue>) -> bool {
    let Some(v) = v.and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let media = v.split(';').next().unwrap_or_default().trim();
    media.eq_ignore_ascii_case("application/json")
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
            "auth": if cfg.tokens.is_some() { "bearer" } else { "none" },
        });
        Http {
            sessions: Mutex::new(Sessions::new(cfg.max_sessions)),
            conns: Arc::new(Mutex::new(conns::Conns::new(cfg.conns.clone()))),
            cfg,
            router,
            health,
            board: None,
            logins: Mutex::new(Logins::default()),
            streams: Arc::new(Streams::default()),
        }
    }

    /// The body of `r`: its own buffer, or the events of the call [`Http::post`] left in it.
    pub fn finish(self: &Arc<Self>, mut r: Resp) -> Response<Out> {
        match r.extensions_mut().remove::<StreamCall>() {
            None => r.map(Out::Full),
            Some(call) => self.stream(call),
        }
    }

    /// Runs `call` on a blocking thread with an [`SseLink`]: what the agent group's copy sends
    /// goes out as it comes, then the answer, and the stream ends. A cancelled call ends its
    /// stream without an answer.
    fn stream(self: &Arc<Self>, call: StreamCall) -> Response<Out> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let StreamCall { caller, msg, raw } = call;
        let id = msg.get("id").cloned().unwrap_or(Value::Null);
        let cancel = self.streams.start(&caller.session, &id);
        let mut link = SseLink {
            session: caller.session.clone(),
            tx: tx.clone(),
            streams: self.streams.clone(),
            cancel,
        };
        let http = self.clone();
        tokio::spawn(async move {
            http.sessions().busy(&caller.session, 1);
            let router = http.router.clone();
            let c = caller.clone();
            let answer = tokio::task::spawn_blocking(move || router.call_with(&c, msg, &mut link))
                .await
                .unwrap_or_else(|e| {
                    Some(crate::session::error(
                        &id,
                        INTERNAL_ERROR,
                        format!("germline: {e}"),
                    ))
                });
            http.streams.finish(&caller.session, &id);
            http.sessions().busy(&caller.session, -1);
            if let Some(a) = answer {
                let _ = tx.send(crate::sse::event(&jsonrpc::render(&a, &raw)));
            }
            drop(tx);
            let router = http.router.clone();
            tokio::task::spawn_blocking(move || router.idle(&caller));
        });
        let mut r = Response::new(Out::Events(rx));
        let h = r.headers_mut();
        h.insert(
            hyper::header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        h.insert(
            hyper::header::CACHE_CONTROL,
            HeaderValue::from_static("no-cache"),
        );
        r
    }

    /// Serves the status page from `board` (`/status`, `/status.json`).
    pub fn with_status(mut self, board: Arc<Board>) -> Http {
        self.board = Some(board);
        self
    }

    fn logins(&self) -> std::sync::MutexGuard<'_, Logins> {
        self.logins
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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
                "germline: this Host is not allowed (localhost names and --allowed-hosts)",
            ));
        }
        if let Some(o) = h.get("origin") {
            let listed = |v: &str| crate::allow::origin_listed(v, &self.cfg.allowed_origins);
            if !o.to_str().is_ok_and(|v| origin_allowed(v) || listed(v)) {
                return Some(refuse(
                    StatusCode::FORBIDDEN,
                    &Value::Null,
                    INVALID_REQUEST,
                    "germline: this Origin is not allowed (localhost origins and --allowed-origins)",
                ));
            }
        }
        None
    }

    /// The bearer token's user, or the refusal: a static token first, then (with
    /// `--oauth-*`) a JWT of the issuer.
    fn authorize(&self, h: &HeaderMap) -> Result<String, Box<Resp>> {
        let oauth = self.cfg.oauth.as_deref();
        let tokens = match &self.cfg.tokens {
            None if oauth.is_none() => return Ok(self.cfg.anonymous_user.clone()),
            None => &[][..],
            Some(t) => &t[..],
        };
        let header = h.get("authorization");
        if let Some(user) = bearer_user(header, tokens) {
            return Ok(user.to_string());
        }
        let mut why = None;
        let given = header.and_then(|v| v.to_str().ok());
        let jwt = given
            .and_then(|v| v.trim().split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, t)| t.trim());
        if let Some(o) = oauth {
            if let Some(jwt) = jwt {
                match o.user(jwt) {
                    Ok(user) => return Ok(user),
                    Err(crate::oauth::Refused(w)) => why = Some(w),
                }
            }
        }
        let mut r = refuse(
            StatusCode::UNAUTHORIZED,
            &Value::Null,
            INVALID_REQUEST,
            &match &why {
                Some(w) => format!("germline: the bearer token is refused: {w}"),
                None => "germline: a bearer token is required (Authorization: Bearer <token from \
                         the file germline serve printed, or of the OAuth issuer>)"
                    .to_string(),
            },
        );
        let mut challenge = String::from("Bearer realm=\"germline\"");
        if h.contains_key("authorization") {
            challenge.push_str(", error=\"invalid_token\"");
        }
        if let Some(o) = oauth {
            // RFC 9728 section 5.1: where a client finds the authorization server.
            challenge.push_str(&format!(", resource_metadata=\"{}\"", o.metadata_url()));
        }
        if let Ok(v) = HeaderValue::from_str(&challenge) {
            r.headers_mut().insert(hyper::header::WWW_AUTHENTICATE, v);
        }
        Err(Box::new(r))
    }

    /// Answers one HTTP request.
    pub async fn respond(self: Arc<Self>, req: Request<Incoming>) -> Resp {
        if let Some(r) = refuse_target(&req) {
            return r;
        }
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
        if let Some(o) = &self.cfg.oauth {
            // The metadata needs no token: a client reads it to learn where to get one.
            if path == crate::oauth::METADATA_PATH
                || path == format!("{}{MCP_PATH}", crate::oauth::METADATA_PATH)
            {
                return match *req.method() {
                    Method::GET | Method::HEAD => json_response(StatusCode::OK, &o.metadata()),
                    _ => with_allow(empty(StatusCode::METHOD_NOT_ALLOWED), "GET"),
                };
            }
        }
        if self.board.is_some() && path.starts_with("/status") {
            return self.status(req).await;
        }
        if path != MCP_PATH {
            return refuse(
                StatusCode::NOT_FOUND,
                &Value::Null,
                INVALID_REQUEST,
                &format!("germline: no such endpoint (MCP is at {MCP_PATH})"),
            );
        }
        let user = match self.authorize(req.headers()) {
            Ok(u) => u,
            Err(r) => return *r,
        };
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
            Method::POST => self.post(req, user).await,
            Method::DELETE => self.delete(req.headers(), &user).await,
            // No server-initiated stream: during a call only the agent group's copy may talk
            // to the agent, and its answer travels on the call's own POST.
            _ => with_allow(empty(StatusCode::METHOD_NOT_ALLOWED), "POST, DELETE"),
        }
    }

    async fn delete(&self, h: &HeaderMap, user: &str) -> Resp {
        let Some(id) = header(h, "mcp-session-id") else {
            return refuse(
                StatusCode::BAD_REQUEST,
                &Value::Null,
                INVALID_REQUEST,
                "germline: DELETE needs the Mcp-Session-Id header",
            );
        };
        let removed = self.sessions().remove(id, user);
        if removed {
            // Answered once the session's germlines are gone (a call in flight ends first).
            self.end(id.to_string()).await;
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

    /// Stops the runtimes of an ended session (on a blocking thread: it waits for them).
    async fn end(&self, session: String) {
        let router = self.router.clone();
        let _ = tokio::task::spawn_blocking(move || router.end(&session)).await;
    }

    async fn post(self: Arc<Self>, req: Request<Incoming>, user: String) -> Resp {
        if !is_json(req.headers().get(hyper::header::CONTENT_TYPE)) {
            return refuse(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                &Value::Null,
                INVALID_REQUEST,
                "germline: a POST must carry Content-Type: application/json (parameters such \
                 as `; charset=utf-8` may follow)",
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
        let req_accept = header(req.headers(), "accept").map(str::to_string);
        let body = Limited::new(req.into_body(), self.cfg.max_body);
        let bytes = match tokio::time::timeout(self.cfg.conns.body_timeout, body.collect()).await {
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
                // With its id where a shallow scan reads one (too deep a nesting), so that the
                // client's request ends now rather than at its own timeout.
                let why = crate::session::parse_error_text(&e);
                return text_response(
                    StatusCode::BAD_REQUEST,
                    crate::session::parse_error(&bytes, &why),
                );
            }
        };
        // Ids that serde_json does not read exactly go back as the client wrote them.
        let raw = jsonrpc::raw_ids_if_needed(&msg, &bytes);
        let answer =
            |status: StatusCode, v: &Value| text_response(status, jsonrpc::render(v, &raw));
        let Some(obj) = msg.as_object() else {
            let what = if msg.is_array() {
                "germline: a POST carries one JSON-RPC message (batches are not part of MCP \
                 2025-06-18)"
            } else {
                "germline: a JSON-RPC message must be an object"
            };
            return refuse(StatusCode::BAD_REQUEST, &Value::Null, INVALID_REQUEST, what);
        };
        let (is_request, method) = match jsonrpc::classify(obj) {
            Ok(Kind::Request { method, .. }) => (true, Some(method.to_string())),
            Ok(Kind::Notification { method }) => (false, Some(method.to_string())),
            Ok(Kind::Response) => (false, None),
            Err(e) => return answer(StatusCode::BAD_REQUEST, &e),
        };
        let id = obj.get("id").cloned();
        if is_request && method.as_deref() == Some("initialize") {
            let opened = self.sessions().open(&user);
            let (sid, evicted) = match opened {
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
            if let Some(old) = evicted {
                self.end(old).await;
            }
            let caller = Caller {
                session: sid.clone(),
                user,
            };
            self.router.open(&caller);
            self.sessions().busy(&sid, 1);
            let reply = self.dispatch(&caller, msg).await;
            self.sessions().busy(&sid, -1);
            if reply.get("result").is_none() {
                // No session: whatever its initialize started stops again.
                self.sessions().remove(&sid, &caller.user);
                self.end(sid).await;
                return answer(StatusCode::OK, &reply);
            }
            let mut r = answer(StatusCode::OK, &reply);
            if let Ok(v) = HeaderValue::from_str(&sid) {
                r.headers_mut().insert("mcp-session-id", v);
            }
            return r;
        }
        let id_or_null = id.clone().unwrap_or(Value::Null);
        let sid =
            match session {
                None => return answer(
                    StatusCode::BAD_REQUEST,
                    &crate::session::error(
                        &id_or_null,
                        INVALID_REQUEST,
                        "germline: the Mcp-Session-Id header is required (send initialize first)",
                    ),
                ),
                Some(s) if !self.sessions().touch(&s, &user) => {
                    return answer(
                        StatusCode::NOT_FOUND,
                        &crate::session::error(
                            &id_or_null,
                            INVALID_REQUEST,
                            "germline: unknown or ended session: initialize again",
                        ),
                    )
                }
                Some(s) => s,
            };
        if is_request && method.as_deref() == Some("tools/call") {
            self.sessions().called(&sid);
        }
        if method.as_deref() == Some("notifications/cancelled") {
            // The call's copies are killed by its own thread (the session lock is its); no
            // answer goes out for it. A cancel for a call not in flight changes nothing.
            if let Some(rid) = obj.get("params").and_then(|p| p.get("requestId")) {
                self.streams.cancel(&sid, rid);
            }
        }
        if !is_request && method.is_none() {
            // The agent's answer to a request of a call's copy (sampling, elicitation).
            self.streams.answer(&sid, msg);
            return empty(StatusCode::ACCEPTED);
        }
        if !is_request {
            // Notifications (initialized, cancelled): nothing to answer.
            return empty(StatusCode::ACCEPTED);
        }
        if method.as_deref() == Some("ping") {
            // Answered here, without the session's lock, which a long call holds.
            return answer(
                StatusCode::OK,
                &json!({"jsonrpc": "2.0", "id": id_or_null, "result": {}}),
            );
        }
        let caller = Caller { session: sid, user };
        // A client that accepts SSE gets every answer on a stream, as the SDKs' own servers
        // send it; during a `tools/call` the agent group copy's messages go first.
        if accepts_events(req_accept.as_deref()) {
            let mut r = empty(StatusCode::OK);
            r.extensions_mut().insert(StreamCall { caller, msg, raw });
            return r;
        }
        self.sessions().busy(&caller.session, 1);
        let reply = self.dispatch(&caller, msg).await;
        self.sessions().busy(&caller.session, -1);
        answer(StatusCode::OK, &reply)
    }

    /// `/status`, `/status.json` and `/status/login` (after the Host and Origin guard).
    async fn status(&self, req: Request<Incoming>) -> Resp {
        let Some(board) = &self.board else {
            return empty(StatusCode::NOT_FOUND);
        };
        let path = req.uri().path().to_string();
        let method = req.method().clone();
        let allow = |allow: &'static str| with_allow(empty(StatusCode::METHOD_NOT_ALLOWED), allow);
        match (path.as_str(), &method) {
            ("/status/login", &Method::POST) => return self.status_login(req).await,
            ("/status/login", _) => return allow("POST"),
            ("/status" | "/status.json", &Method::GET | &Method::HEAD) => {}
            ("/status" | "/status.json", _) => return allow("GET"),
            _ => return empty(StatusCode::NOT_FOUND),
        }
        let h = req.headers();
        let by_cookie = if path == "/status" {
            cookie(h, STATUS_COOKIE).and_then(|c| self.logins().user(c, Instant::now()))
        } else {
            None
        };
        let user = match by_cookie.map(Ok).unwrap_or_else(|| self.authorize(h)) {
            Ok(u) => u,
            Err(r) if path == "/status" => {
                return crate::status_page::login_page(StatusCode::UNAUTHORIZED, false, &r)
            }
            Err(r) => return *r,
        };
        let rows = self.sessions().rows(Instant::now());
        let snap = board.snapshot(&user, &rows);
        if path == "/status.json" {
            let mut r = json_response(StatusCode::OK, &snap);
            crate::status_page::secure_headers(&mut r, None);
            return r;
        }
        crate::status_page::page(&snap)
    }

    /// The login form's POST: its `token` field, checked as a bearer token; a valid one sets
    /// the page's cookie and sends the browser to `/status`.
    async fn status_login(&self, req: Request<Incoming>) -> Resp {
        let form = req
            .headers()
            .get(hyper::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .is_some_and(|m| {
                m.trim()
                    .eq_ignore_ascii_case("application/x-www-form-urlencoded")
            });
        if !form {
            return empty(StatusCode::UNSUPPORTED_MEDIA_TYPE);
        }
        let body = Limited::new(req.into_body(), 4096);
        let bytes = match tokio::time::timeout(self.cfg.conns.body_timeout, body.collect()).await {
            Ok(Ok(b)) => b.to_bytes(),
            _ => return empty(StatusCode::BAD_REQUEST),
        };
        let given = url::form_urlencoded::parse(&bytes)
            .find(|(k, _)| k == "token")
            .map(|(_, v)| v.into_owned())
            .unwrap_or_default();
        let user = match &self.cfg.tokens {
            None => Some(self.cfg.anonymous_user.clone()),
            Some(t) => token_user(given.trim(), t).map(str::to_string),
        };
        let refused = empty(StatusCode::UNAUTHORIZED);
        let Some(user) = user else {
            return crate::status_page::login_page(StatusCode::UNAUTHORIZED, true, &refused);
        };
        let Ok(value) = random_hex(32) else {
            return empty(StatusCode::INTERNAL_SERVER_ERROR);
        };
        self.logins().add(&value, &user, Instant::now());
        let mut r = empty(StatusCode::SEE_OTHER);
        let set = format!(
            "{STATUS_COOKIE}={value}; Path=/status; HttpOnly; SameSite=Strict; Max-Age={}",
            STATUS_LOGIN_LIFE.as_secs()
        );
        if let Ok(v) = HeaderValue::from_str(&set) {
            r.headers_mut().insert(hyper::header::SET_COOKIE, v);
        }
        r.headers_mut()
            .insert(hyper::header::LOCATION, HeaderValue::from_static("/status"));
        crate::status_page::secure_headers(&mut r, None);
        r
    }

    /// Runs the router on a blocking thread (the runtime forks and waits for copies).
    async fn dispatch(&self, caller: &Caller, msg: Value) -> Value {
        let id = msg.get("id").cloned().unwrap_or(Value::Null);
        let router = self.router.clone();
        let after = self.router.clone();
        let (c, c2) = (caller.clone(), caller.clone());
        match tokio::task::spawn_blocking(move || router.handle(&c, msg)).await {
            Ok(v) => {
                // Refill pools off the answer's path.
                tokio::task::spawn_blocking(move || after.idle(&c2));
                v
            }
            Err(e) => crate::session::error(&id, INTERNAL_ERROR, format!("germline: {e}")),
        }
    }
}

/// Whether an `Accept` header names `text/event-stream` (the MCP clients send both it and
/// `application/json` on every POST; a client that names only JSON, or `*/*`, gets JSON).
fn accepts_events(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| {
        a.split(',').any(|t| {
            let t = t.split(';').next().unwrap_or_default().trim();
            t.eq_ignore_ascii_case("text/event-stream")
        })
    })
}

/// A request target other than a path (absolute-form `http://other.example/mcp`, or
/// authority-form): refused with 400, whatever host it names (RFC 9112 lets a server accept
/// absolute-form; germline serves only its own paths and checks only `Host`).
fn refuse_target<B>(req: &Request<B>) -> Option<Resp> {
    let uri = req.uri();
    if uri.scheme().is_none() && uri.authority().is_none() {
        return None;
    }
    Some(refuse(
        StatusCode::BAD_REQUEST,
        &Value::Null,
        INVALID_REQUEST,
        "germline: the request target must be a path (origin-form, e.g. `POST /mcp`); an \
         absolute URL or an authority is refused",
    ))
}

fn with_allow(mut r: Resp, allow: &'static str) -> Resp {
    r.headers_mut()
        .insert(hyper::header::ALLOW, HeaderValue::from_static(allow));
    r
}

/// The answer to a connection past the caps (after the Host guard): `/health` as usual,
/// anything else 503 naming the cap.
fn overflow_answer<B>(http: &Http, req: &Request<B>, why: AtCap) -> Resp {
    if let Some(r) = refuse_target(req).or_else(|| http.guard(req.headers())) {
        return r;
    }
    if req.uri().path() == "/health" && matches!(*req.method(), Method::GET | Method::HEAD) {
        return json_response(StatusCode::OK, &http.health);
    }
    let l = &http.cfg.conns;
    let what = match why {
        AtCap::Total => format!(
            "germline: too many connections: all {} (--max-connections) are busy; retry",
            l.max_total
        ),
        AtCap::Client => format!(
            "germline: too many connections from your address: all {} \
             (--max-connections-per-client) are busy; retry",
            l.max_per_client
        ),
    };
    let mut r = refuse(
        StatusCode::SERVICE_UNAVAILABLE,
        &Value::Null,
        INVALID_REQUEST,
        &what,
    );
    r.headers_mut()
        .insert(hyper::header::RETRY_AFTER, HeaderValue::from_static("1"));
    r
}

/// Serves one request on a connection past the caps, then closes it.
async fn overflow(http: Arc<Http>, stream: tokio::net::TcpStream, why: AtCap) {
    let svc = hyper::service::service_fn(move |req| {
        let r = overflow_answer(&http, &req, why);
        async move { Ok::<_, Infallible>(r) }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(OVERFLOW_TIMEOUT)
        .keep_alive(false)
        .serve_connection(TokioIo::new(stream), svc);
    let _ = tokio::time::timeout(OVERFLOW_TIMEOUT * 2, conn).await;
}

/// Serves one admitted connection until it ends, the table closes it, or `stop`.
async fn connection(
    http: Arc<Http>,
    stream: tokio::net::TcpStream,
    id: u64,
    slot: Arc<Slot>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let (h, s) = (http.clone(), slot.clone());
    let svc = hyper::service::service_fn(move |req| {
        let busy = Busy::new(h.conns.clone(), id, s.clone());
        let h = h.clone();
        async move {
            let r = h.clone().respond(req).await;
            let r = h.finish(r);
            Ok::<_, Infallible>(r.map(|b| Tracked::new(b, Some(busy))))
        }
    });
    let l = &http.cfg.conns;
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        // A backstop: the table closes idle connections first (conns.rs).
        .header_read_timeout(l.header_timeout.max(l.keepalive_timeout) + Duration::from_secs(1))
        .serve_connection(TokioIo::new(stream), svc);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => {}
        _ = slot.close.notified() => {
            // Idle too long, or room for a newcomer. A request that started meanwhile ends
            // first.
            if slot.is_busy() {
                conn.as_mut().graceful_shutdown();
                let _ = conn.await;
            }
        }
        _ = stop.changed() => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
    conns::lock(&http.conns).gone(id);
}

/// Serves connections on `listener` until `stop` changes (or its sender is gone), then lets
/// requests in flight finish (up to 30 s) and returns.
pub async fn serve(
    listener: tokio::net::TcpListener,
    http: Arc<Http>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut conns = tokio::task::JoinSet::new();
    let overflowing = Arc::new(tokio::sync::Semaphore::new(OVERFLOW));
    // Ends sessions left unused for the idle timeout (their germlines stop).
    let tick =
        (http.cfg.idle_timeout / 4).clamp(Duration::from_millis(200), Duration::from_secs(30));
    let mut reaper = tokio::time::interval(tick);
    reaper.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Closes connections idle past the header or keep-alive timeout.
    let mut idle = tokio::time::interval(conns::lock(&http.conns).tick());
    idle.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = reaper.tick() => {
                let old = http.sessions().expire(Instant::now(), http.cfg.idle_timeout);
                for sid in old {
                    let h = http.clone();
                    tokio::spawn(async move { h.end(sid).await });
                }
            }
            _ = idle.tick() => {
                conns::lock(&http.conns).expire(Instant::now());
            }
            r = listener.accept() => {
                while conns.try_join_next().is_some() {}
                let (stream, peer) = match r {
                    Ok(s) => s,
                    Err(e) => {
                        // Out of descriptors or a reset connection: keep serving the others.
                        eprintln!("germline serve: accept: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let admitted = conns::lock(&http.conns).admit(peer.ip(), Instant::now());
                match admitted {
                    Ok((id, slot)) => {
                        conns.spawn(connection(http.clone(), stream, id, slot, stop.clone()));
                    }
                    Err(why) => {
                        // Past the caps with every counted connection busy: answered (so
                        // /health stays up) by a few one-request connections, else closed.
                        if let Ok(permit) = overflowing.clone().try_acquire_owned() {
                            let h = http.clone();
                            conns.spawn(async move {
                                overflow(h, stream, why).await;
                                drop(permit);
                            });
                        }
                    }
                }
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
        let mut s = Sessions::new(MAX_SESSIONS);
        let (a, none) = s.open("alice").expect("id");
        assert_eq!(a.len(), 32);
        assert!(none.is_none());
        assert!(s.touch(&a, "alice"));
        assert!(!s.touch(&a, "bob"), "a session is bound to its user");
        assert!(!s.touch("nope", "alice"));
        let mut evicted = Vec::new();
        for _ in 0..MAX_SESSIONS + 5 {
            evicted.extend(s.open("alice").expect("id").1);
        }
        assert_eq!(s.open.len(), MAX_SESSIONS);
        assert_eq!(evicted.len(), 6);
        assert_eq!(evicted[0], a, "the least recently used session ended first");
        assert!(!s.touch(&a, "alice"));
    }

    #[test]
    fn idle_sessions_expire_unless_a_request_runs() {
        let mut s = Sessions::new(8);
        let (a, _) = s.open("alice").expect("id");
        let (b, _) = s.open("bob").expect("id");
        s.busy(&b, 1);
        let later = Instant::now() + Duration::from_secs(11);
        assert_eq!(s.expire(later, Duration::from_secs(10)), vec![a.clone()]);
        assert!(!s.touch(&a, "alice"));
        s.busy(&b, -1);
        assert!(s.expire(Instant::now(), Duration::from_secs(10)).is_empty());
        assert_eq!(
            s.expire(later + Duration::from_secs(11), Duration::from_secs(10)),
            vec![b.clone()]
        );
        assert!(!s.remove(&b, "bob"), "already gone");
    }

    #[test]
    fn status_logins_are_found_by_their_cookie_until_they_expire() {
        let mut l = Logins::default();
        let t0 = Instant::now();
        l.add("c0ffee", "alice", t0);
        assert_eq!(l.user("c0ffee", t0).as_deref(), Some("alice"));
        assert_eq!(l.user("c0ffeE", t0), None);
        assert_eq!(l.user("c0ffee", t0 + STATUS_LOGIN_LIFE), None, "expired");
        for i in 0..STATUS_LOGINS + 3 {
            l.add(
                &format!("k{i}"),
                "bob",
                t0 + Duration::from_secs(i as u64 + 1),
            );
        }
        assert_eq!(l.0.len(), STATUS_LOGINS, "bounded");
        assert_eq!(l.user("c0ffee", t0), None, "the oldest went first");
        let mut h = HeaderMap::new();
        h.append(
            hyper::header::COOKIE,
            HeaderValue::from_static("a=1; germline_status=xyz"),
        );
        assert_eq!(cookie(&h, STATUS_COOKIE), Some("xyz"));
        assert_eq!(cookie(&h, "germline"), None);
    }

    #[test]
    fn each_token_names_its_user() {
        let t = |token: &str, user: &str| Bearer {
            token: token.into(),
            user: user.into(),
        };
        let tokens = [t("aaaaaaaaaaaaaaaa", "alice"), t("bbbbbbbbbbbbbbbb", "bob")];
        let h = |s: &str| HeaderValue::from_str(s).expect("header");
        assert_eq!(
            bearer_user(Some(&h("Bearer bbbbbbbbbbbbbbbb")), &tokens),
            Some("bob")
        );
        assert_eq!(
            bearer_user(Some(&h("Bearer aaaaaaaaaaaaaaaa")), &tokens),
            Some("alice")
        );
        assert_eq!(
            bearer_user(Some(&h("Bearer aaaaaaaaaaaaaaab")), &tokens),
            None
        );
        assert_eq!(bearer_user(None, &tokens), None);
    }
}
