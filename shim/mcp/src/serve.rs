//! `germline serve`: signed releases behind one MCP Streamable HTTP endpoint, with a bearer
//! token by default (or one per user, `--users`), localhost origins only, one shared broker
//! sidecar, and germlines (or baseline processes) per release as its policy lifetime says:
//! one per agent session (`session`, `single-shot`) or per user (`long-lived`), see
//! [`crate::router`]. Stops cleanly on SIGINT, SIGTERM or SIGHUP.

use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use germline_policy::Policy;

use crate::error::Error;
use crate::http::{Bearer, Http, HttpConfig, MCP_PATH};
use crate::router::{describe, tool_owners, Router};
use crate::session::Session;
use germline_engine::builder::RuntimeBuilder;
use germline_engine::hub::GermlineHub;
use germline_engine::release::Release;
use germline_engine::runtime::Mode;
use germline_engine::sidecar::{Sidecar, SidecarConfig};
use germline_policy::limits::Lifetime;

#[derive(Debug, Args, Clone)]
pub struct ServeArgs {
    /// The deployer's policy: labels, clearances, destinations, argument rules.
    #[arg(long)]
    pub policy: PathBuf,
    /// Address to listen on (keep it on loopback: only localhost Host and Origin are served).
    #[arg(long, default_value = "127.0.0.1:8765")]
    pub listen: SocketAddr,
    /// The publisher's pinned public key (cosign `PUBLIC KEY` PEM); every release must verify
    /// against it.
    #[arg(long)]
    pub key: PathBuf,
    /// Which runtime serves the calls: germline execution, or a baseline for comparison.
    #[arg(long, value_enum, default_value = "germline")]
    pub mode: Mode,
    /// Read the bearer token from this file instead of generating one (its sessions are the
    /// user who runs `germline serve`).
    #[arg(long, conflicts_with_all = ["no_auth", "users"])]
    pub token_file: Option<PathBuf>,
    /// Bearer tokens of several users: one `USER TOKEN` pair a line (`#` comments). The user
    /// keys `long-lived` germlines and every lifetime's state slots (docs/operations.md).
    #[arg(long, conflicts_with = "no_auth")]
    pub users: Option<PathBuf>,
    /// An agent session unused this many seconds ends, and with it its germlines.
    #[arg(long, value_name = "SECS", default_value_t = crate::http::IDLE_TIMEOUT.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..))]
    pub session_idle_timeout: u64,
    /// Most live agent sessions (each with germlines of its own under the `session`
    /// lifetime); the least recently used one ends when a new one would exceed it.
    #[arg(long, default_value_t = crate::http::MAX_SESSIONS,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_sessions: usize,
    /// Serve without a bearer token (any local process may then call the tools).
    #[arg(long)]
    pub no_auth: bool,
    /// Accept bearer JWTs of this OAuth 2.1 authorization server (its `iss`), besides the
    /// static tokens; needs `--oauth-jwks` (docs/run.md, "OAuth").
    #[arg(
        long,
        value_name = "URL",
        requires = "oauth_jwks",
        conflicts_with = "no_auth"
    )]
    pub oauth_issuer: Option<String>,
    /// The issuer's public keys: a JWKS file (`{"keys": [...]}`) or URL (`https://`, or
    /// `http://` on loopback), read at start and again every `--oauth-jwks-refresh`.
    #[arg(long, value_name = "FILE|URL", requires = "oauth_issuer")]
    pub oauth_jwks: Option<String>,
    /// Seconds between reads of the JWKS (the issuer's key rotation).
    #[arg(long, value_name = "SECS", default_value_t = 300,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub oauth_jwks_refresh: u64,
    /// This server's resource URI, the audience (`aud`) a JWT must name; by default
    /// `http://LISTEN/mcp`.
    #[arg(long, value_name = "URL", requires = "oauth_issuer")]
    pub oauth_resource: Option<String>,
    /// The JWT claim whose value is the session's user.
    #[arg(long, value_name = "CLAIM", default_value = "sub")]
    pub oauth_user_claim: String,
    /// Host names or addresses a request's `Host` may name besides localhost (comma
    /// separated, no wildcard): a Kubernetes Service's or an Ingress's name (docs/run.md).
    #[arg(long, value_delimiter = ',', value_parser = crate::allow::parse_host)]
    pub allowed_hosts: Vec<String>,
    /// Browser origins (`https://host[:port]`, comma separated, no wildcard) allowed in an
    /// `Origin` header besides localhost ones.
    #[arg(long, value_delimiter = ',', value_parser = crate::allow::parse_origin)]
    pub allowed_origins: Vec<String>,
    /// Most bytes of one request body.
    #[arg(long, default_value_t = 4 << 20)]
    pub max_body: usize,
    /// Most open connections. Past it a new connection closes the least recently used idle
    /// one; if every one is busy, it is answered 503 (`/health` still 200) and closed.
    #[arg(long, default_value_t = crate::http::MAX_CONNECTIONS,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_connections: usize,
    /// Most open connections from one client address (IPv4-mapped IPv6 counts as IPv4), as
    /// `--max-connections` does for all.
    #[arg(long, default_value_t = crate::http::MAX_CONNECTIONS_PER_CLIENT,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_connections_per_client: usize,
    /// A new connection that has not sent a whole request's headers within this many
    /// seconds is closed.
    #[arg(long, value_name = "SECS", default_value_t = crate::http::HEADER_TIMEOUT.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub header_timeout: u64,
    /// A connection idle this many seconds after its last response is closed.
    #[arg(long, value_name = "SECS", default_value_t = crate::http::KEEPALIVE_TIMEOUT.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub keepalive_timeout: u64,
    /// A request body that has not arrived whole within this many seconds is refused (408).
    #[arg(long, value_name = "SECS", default_value_t = crate::http::BODY_TIMEOUT.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub body_timeout: u64,
    #[command(flatten)]
    pub broker: crate::cli::BrokerArgs,
    /// Pre-forked, checked, data-free copies to keep ready per release (germline, nosplit).
    #[arg(long, default_value_t = 0)]
    pub pool: usize,
    /// Which agent sessions of a release (lifetime `session`) share one germline: each user's
    /// (the default), every user's (`all`: the PID counter channel then crosses users,
    /// docs/sandbox.md), or none (`off`: a germline per session, as before issue 30).
    #[arg(long, value_enum, default_value = "user")]
    pub share_germlines: ShareGermlines,
    #[command(flatten)]
    pub evidence: crate::cli::EvidenceArgs,
    /// The maxima an image layout release is read under (docs/release.md).
    #[command(flatten)]
    pub image_limits: germline_release::untrusted::LimitArgs,
    #[command(flatten)]
    pub telemetry: crate::cli::TelemetryArgs,
    /// Where results for the recipients a tool's manifest names go (docs/run.md).
    #[arg(long)]
    pub outbox: Option<PathBuf>,
    /// The signed releases (unpacked bundles with rootfs/, or OCI image layouts). Their tool
    /// names must be distinct.
    #[arg(required = true, num_args = 1..)]
    pub releases: Vec<PathBuf>,
}

/// Which sessions share a germline (`--share-germlines`, docs/performance.md "Sessions share
/// a germline").
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ShareGermlines {
    /// The sessions of one release and one user.
    User,
    /// The sessions of one release, whatever their user.
    All,
    /// None: each session starts a germline of its own.
    Off,
}

/// The bearer token, and the file it was generated into (removed at the end).
#[derive(Debug)]
struct Token {
    value: String,
    generated: Option<PathBuf>,
}

impl Drop for Token {
    fn drop(&mut self) {
        if let Some(p) = self.generated.take() {
            let _ = std::fs::remove_file(&p);
            if let Some(d) = p.parent() {
                let _ = std::fs::remove_dir(d);
            }
        }
    }
}

/// Shortest token accepted from a file.
pub(crate) const MIN_TOKEN: usize = 16;

/// A secret file's text, with a warning if others may read it.
fn read_secret(what: &'static str, path: &Path) -> Result<String, Error> {
    let meta = std::fs::metadata(path).map_err(|source| Error::Secret {
        what,
        path: path.to_path_buf(),
        source,
    })?;
    if meta.permissions().mode() & 0o077 != 0 {
        eprintln!(
            "germline serve: warning: {} is readable by others (chmod 600 it)",
            path.display()
        );
    }
    std::fs::read_to_string(path).map_err(|source| Error::Secret {
        what,
        path: path.to_path_buf(),
        source,
    })
}

fn token_ok(t: &str) -> bool {
    t.len() >= MIN_TOKEN && t.bytes().all(|b| b.is_ascii_graphic())
}

fn read_token(path: &Path) -> Result<Token, Error> {
    let value = read_secret("token", path)?.trim().to_string();
    if !token_ok(&value) {
        return Err(Error::Token(path.to_path_buf()));
    }
    Ok(Token {
        value,
        generated: None,
    })
}

/// A user name of `--users`: letters, digits, `.`, `_`, `-`, `@`, at most 64.
pub(crate) fn user_ok(u: &str) -> bool {
    !u.is_empty()
        && u.len() <= 64
        && u.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-@".contains(&b))
}

/// The `--users` file's text: one `USER TOKEN` pair a line, `#` comments, blank lines.
pub fn parse_users(path: &Path, text: &str) -> Result<Vec<Bearer>, Error> {
    let mut out: Vec<Bearer> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let wrong = |message: String| Error::Users {
            at: format!("{}:{}", path.display(), n + 1),
            message,
        };
        let words: Vec<&str> = line.split_whitespace().collect();
        let [user, token] = words[..] else {
            return Err(wrong(format!(
                "expected `USER TOKEN` (two words), found {} words",
                words.len()
            )));
        };
        if !user_ok(user) {
            return Err(wrong(
                "the user name must be 1 to 64 letters, digits, '.', '_', '-' or '@'".into(),
            ));
        }
        if !token_ok(token) {
            return Err(wrong(format!(
                "the token needs at least {MIN_TOKEN} printable characters"
            )));
        }
        if out.iter().any(|b| b.token == token) {
            return Err(wrong("this token is already given to a user".into()));
        }
        out.push(Bearer {
            token: token.to_string(),
            user: user.to_string(),
        });
    }
    if out.is_empty() {
        return Err(Error::Users {
            at: path.display().to_string(),
            message: "no `USER TOKEN` line (nobody could call)".into(),
        });
    }
    Ok(out)
}

/// The user of sessions without a users file: who runs `germline serve`.
pub fn default_user() -> String {
    std::env::var("USER")
        .ok()
        .filter(|u| user_ok(u))
        .unwrap_or_else(|| "root".into())
}

/// A fresh 256-bit token in a 0600 file of a 0700 directory of its own.
fn generate_token() -> Result<Token, Error> {
    let dir = germline_sys::paths::serve_dir(std::process::id());
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| Error::Io { path, source }
    };
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).map_err(io(&dir))?;
    let path = dir.join("token");
    let _ = std::fs::remove_file(&path);
    let value = germline_engine::ids::random_hex(32)?;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .map_err(io(&path))?;
    let token = Token {
        value,
        generated: Some(path.clone()),
    };
    writeln!(f, "{}", token.value).map_err(io(&path))?;
    Ok(token)
}

/// Reads stop signals from the signalfd on a thread of its own; returns the signal's number.
fn watch_signals(sigfd: i32, stop: tokio::sync::watch::Sender<bool>) {
    std::thread::spawn(move || {
        let mut info = [0u8; 128];
        let signo = loop {
            // SAFETY: `info` is a writable buffer of the size of one signalfd_siginfo.
            let r = unsafe { libc::read(sigfd, info.as_mut_ptr().cast(), info.len()) };
            if r >= 4 {
                break u32::from_ne_bytes([info[0], info[1], info[2], info[3]]);
            }
            if r < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            break 0;
        };
        eprintln!("germline serve: signal {signo}, stopping");
        let _ = stop.send(true);
    });
}

/// `germline serve`.
pub fn run(a: &ServeArgs) -> Result<(), Error> {
    // Before any thread starts, so that every thread (tokio's included) inherits the mask.
    let sigfd = crate::stdio::stop_signals().map_err(Error::sys("signals"))?;
    let listener = std::net::TcpListener::bind(a.listen).map_err(|source| Error::Listen {
        addr: a.listen,
        source,
    })?;
    let local = listener.local_addr().map_err(Error::sys("listener"))?;
    if !local.ip().is_loopback() {
        eprintln!(
            "germline serve: warning: listening on {local}, not loopback; only requests naming \
             localhost or {} are served",
            local.ip()
        );
    }
    germline_engine::sweep::at_start("serve");
    let outbox = a
        .outbox
        .as_deref()
        .map(crate::cli::check_outbox)
        .transpose()?;
    let policy = Arc::new(Policy::load(&a.policy)?);
    germline_engine::limits::check_pool(policy.limits(), a.pool)?;
    // Every release is verified before anything of any of them runs.
    let mut releases = Vec::new();
    for path in &a.releases {
        releases.push(Release::load_with(path, &a.key, &a.image_limits.limits())?);
    }
    let owners = tool_owners(&releases.iter().map(describe).collect::<Vec<_>>())?;
    let token = if a.no_auth || a.users.is_some() {
        None
    } else if let Some(f) = &a.token_file {
        Some(read_token(f)?)
    } else {
        Some(generate_token()?)
    };
    let oauth = match (&a.oauth_issuer, &a.oauth_jwks) {
        (Some(issuer), Some(jwks)) => {
            let resource = a
                .oauth_resource
                .clone()
                .unwrap_or_else(|| format!("http://{local}{MCP_PATH}"));
            let o = crate::oauth::OAuth::load(issuer, &resource, &a.oauth_user_claim, jwks)
                .map_err(Error::OAuth)?;
            let o = Arc::new(o);
            o.refresh_every(std::time::Duration::from_secs(a.oauth_jwks_refresh));
            Some(o)
        }
        _ => None,
    };
    let mut broker = a.broker.start(&a.policy)?;
    let metrics = match a.telemetry.metrics_listen {
        Some(addr) => {
            let m = Arc::new(germline_engine::metrics::Metrics::new());
            let local = germline_engine::metrics::serve(addr, m.clone())?;
            eprintln!("germline serve: metrics at http://{local}/metrics");
            Some(m)
        }
        None => None,
    };
    let tracer = a.telemetry.tracer()?;
    let policy_path = a.policy.clone();
    let state_dir = a.broker.state_dir.clone();
    let broker_socket = broker.socket().to_path_buf();
    let mut described = Vec::new();
    for release in &releases {
        if let Some(m) = &metrics {
            m.add_release(
                &release.digest,
                &release.label(),
                broker.socket().to_path_buf(),
            );
        }
        described.push((
            release.label(),
            release.digest.clone(),
            policy.lifetime(&release.manifest.name),
        ));
    }
    // The status page's data (`/status`), told by every runtime as metrics are.
    let board = Arc::new(crate::status_page::Board::new(a.mode.name(), &described));
    let fboard = board.clone();
    let (mode, pool, evidence) = (a.mode, a.pool, a.evidence.clone());
    let fpolicy = policy.clone();
    // Lives until every germline is stopped (after `router.stop()` below).
    let launcher = Arc::new(germline_engine::launcher::Launcher::start()?);
    let flauncher = launcher.clone();
    // Germlines shared by sessions (issue 30): one per release and user by default, started
    // on a thread of its own at the key's first session, stopped with its last.
    let hubs = Arc::new(germline_engine::hub::Hubs::new());
    let share = a.share_germlines;
    // Starts one runtime (germline or baseline process) of a release for a user: at a
    // session's `initialize` under `session` and `single-shot`, at a user's first need under
    // `long-lived` (docs/operations.md).
    let factory = move |i: usize, user: &str| -> Result<Session, Error> {
        let release = releases.get(i).cloned().ok_or(Error::NoRelease(i))?;
        // Each runtime has its own connection to the one broker (never the sidecar's owner).
        let client = Sidecar::start(&SidecarConfig {
            existing: Some(broker_socket.clone()),
            policy: policy_path.clone(),
            state_dir: state_dir.clone(),
            audit: None,
            read_as: None,
        })?;
        let shared = share != ShareGermlines::Off
            && matches!(mode, Mode::Germline | Mode::Nosplit)
            && fpolicy.lifetime(&release.manifest.name) == Lifetime::Session
            && germline_engine::hub::forks(&release);
        let hub = if shared {
            let who = if share == ShareGermlines::All {
                ""
            } else {
                user
            };
            Some(hubs.get_or_start((i, who.to_string()), || {
                let opts = germline_engine::hub::HubOptions {
                    pool,
                    reaper: fpolicy.copy_reaper(),
                    mode: mode.name(),
                    // The policy's pool memory cap, as for a session's own germline.
                    memory_cap_bytes: Some(
                        fpolicy
                            .spawn_pool(&release.manifest.name)
                            .unwrap_or_default()
                            .memory_bytes,
                    ),
                };
                GermlineHub::start(&release, &client, &opts)
            })?)
        } else {
            None
        };
        let builder = RuntimeBuilder::new(mode, release, client);
        let builder = match hub {
            Some(h) => builder.hub(h),
            None => builder.launcher(flauncher.clone()),
        };
        let runtime = builder
            .policy(&fpolicy)
            .pool(pool)
            // The user keys the broker's state slots (release, user, horizon).
            .user(user)
            .evidence(crate::cli::evidence_for(&evidence, &state_dir, &fpolicy)?)
            .metrics(metrics.clone())
            .tracer(tracer.clone())
            .outbox(outbox.clone())
            .status("serve")
            .observer(Box::new(fboard.observer(i, user)))
            .build()?;
        Ok(Session::new(runtime, fpolicy.clone()))
    };
    let router = Arc::new(Router::new(described, owners, a.mode, Box::new(factory)));
    let tokens = if let Some(f) = &a.users {
        Some(parse_users(f, &read_secret("users", f)?)?)
    } else {
        token.as_ref().map(|t| {
            vec![Bearer {
                token: t.value.clone(),
                user: default_user(),
            }]
        })
    };
    // Without a users file every session is one user's: start its long-lived germlines now,
    // so that one that cannot start is reported before anything is served.
    if a.users.is_none() {
        if let Err(e) = router.warm(&default_user()) {
            router.stop();
            return Err(e.into());
        }
    }
    let http = Http::new(
        HttpConfig {
            tokens,
            anonymous_user: default_user(),
            oauth: oauth.clone(),
            max_sessions: a.max_sessions,
            idle_timeout: std::time::Duration::from_secs(a.session_idle_timeout),
            extra_hosts: crate::http::extra_hosts_for(local.ip())
                .into_iter()
                .chain(a.allowed_hosts.iter().cloned())
                .collect(),
            allowed_origins: a.allowed_origins.clone(),
            max_body: a.max_body,
            conns: crate::http::ConnLimits {
                max_total: a.max_connections,
                max_per_client: a.max_connections_per_client,
                header_timeout: std::time::Duration::from_secs(a.header_timeout),
                keepalive_timeout: std::time::Duration::from_secs(a.keepalive_timeout),
                body_timeout: std::time::Duration::from_secs(a.body_timeout),
            },
        },
        router.clone(),
    );
    let http = Arc::new(http.with_status(board));
    let labels: Vec<String> = router.releases.iter().map(|r| r.label.clone()).collect();
    eprintln!(
        "germline serve: http://{local}{MCP_PATH} serving {} in mode {}, broker {}",
        labels.join(", "),
        a.mode.name(),
        broker.socket().display()
    );
    eprintln!("germline serve: status page at http://{local}/status (same token)");
    match (&token, &a.users) {
        (
            Some(Token {
                generated: Some(p), ..
            }),
            _,
        ) => eprintln!("germline serve: bearer token in {}", p.display()),
        (Some(_), _) => eprintln!("germline serve: bearer token from {:?}", a.token_file),
        (None, Some(f)) => eprintln!("germline serve: bearer tokens of users in {}", f.display()),
        (None, None) => {
            eprintln!("germline serve: warning: --no-auth, any local process may call")
        }
    }
    if let Some(o) = &oauth {
        eprintln!(
            "germline serve: bearer JWTs of {} for {} (user: claim {}), metadata at {}",
            o.issuer,
            o.resource,
            o.user_claim,
            o.metadata_url()
        );
    }
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let served = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(Error::sys("tokio"))
        .and_then(|rt| {
            listener
                .set_nonblocking(true)
                .map_err(Error::sys("listener"))?;
            let r = rt.block_on(async {
                let l =
                    tokio::net::TcpListener::from_std(listener).map_err(Error::sys("listener"))?;
                watch_signals(sigfd, stop_tx);
                crate::http::serve(l, http, stop_rx).await;
                Ok::<(), Error>(())
            });
            // Blocking calls still running finish (their copies have deadlines) or are left.
            rt.shutdown_timeout(std::time::Duration::from_secs(5));
            r
        });
    router.stop();
    broker.stop();
    eprintln!("germline serve: stopped after {} calls", router.calls());
    drop(token);
    served
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_users_file_maps_tokens_to_users_or_says_which_line_is_wrong() {
        let p = Path::new("users.txt");
        let ok = parse_users(
            p,
            "# who may call\nalice 0123456789abcdef0123\n\nbob   fedcba9876543210fedc\nalice aaaaaaaaaaaaaaaaaaaa\n",
        )
        .expect("valid");
        let users: Vec<&str> = ok.iter().map(|b| b.user.as_str()).collect();
        assert_eq!(users, ["alice", "bob", "alice"]);
        for (text, want) in [
            ("alice\n", "users.txt:1: expected `USER TOKEN`"),
            ("a b c\n", "users.txt:1: expected `USER TOKEN`"),
            ("al/ice 0123456789abcdef\n", "users.txt:1: the user name"),
            ("alice short\n", "users.txt:1: the token needs at least 16"),
            (
                "alice 0123456789abcdef\nbob 0123456789abcdef\n",
                "users.txt:2: this token is already given",
            ),
            ("# nobody\n", "no `USER TOKEN` line"),
        ] {
            let e = parse_users(p, text).expect_err(text);
            assert!(e.to_string().contains(want), "{text:?}: {e}");
        }
    }
}
