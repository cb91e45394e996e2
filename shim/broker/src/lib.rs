//! germline's broker: the only part of germline with network access (paper Sections IV-C to
//! IV-E, VI "Broker"; Algorithm 1 lines 12-28; A3, A6, O4).
//!
//! For each copy the broker serves an HTTP proxy endpoint inside the copy's own network
//! namespace. Every request is answered by the positional rule of the policy core
//! ([`germline_policy::call`]): delivered if the copy serves its destination, replayed or
//! answered with the placeholder if it is a declared host of another group, denied otherwise.
//! HTTPS is terminated with a per-deployment CA so that comparison works on contents. The
//! broker resolves declared names itself, never follows redirects, adds credentials only to
//! requests it delivers, keeps each copy's label `L`, serves its horizon's state slot, and
//! writes an audit log of declared names, digests and sizes.
//!
//! Module map: [`netns`] (listeners in a copy's namespace), [`resolve`] (names), [`ca`] (TLS
//! interception), [`proxy`] (HTTP handling), [`audit`] (JSON lines).

pub mod audit;
pub mod bench;
pub mod ca;
pub mod control;
pub mod netns;
pub mod prepared;
pub mod proxy;
pub mod resolve;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use germline_policy::call::{
    CallContext, CallRecords, CopyOutcome, CopyTracker, LabelRules, Trigger,
};
use germline_policy::policy::{CredentialPlace, CredentialSource};
use germline_policy::slots::{Slot, SlotKey, SlotStore};
use germline_policy::{Label, Member, Plan, Policy};
use serde::Serialize;
use serde_json::json;
use tokio::sync::watch;

use crate::audit::Audit;
use crate::ca::DeploymentCa;

/// The reserved pseudo-destination through which copies reach their state slot and twin
/// inputs (DESIGN "Egress": any language can use it with plain HTTP). The policy refuses it
/// (and every other name under `germline`) as a destination.
pub const STATE_HOST: &str = germline_policy::names::STATE_HOST;

/// The range a broker draws its copies' proxy port from when the deployer fixes none
/// ([`BrokerConfig::copy_port`]): above the registered ports, below Linux's ephemeral range,
/// so neither a well-known proxy port (3128, 8080) nor one a tool could guess.
pub const COPY_PORTS: std::ops::Range<u16> = 20000..32000;

/// A copy's proxy address inside its own network namespace on `port`.
pub fn copy_proxy_addr(port: u16) -> SocketAddr {
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), port)
}

#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error("cannot start the broker's runtime: {0}")]
    Runtime(std::io::Error),
    #[error(transparent)]
    Ca(#[from] ca::CaError),
    #[error("audit log {}: {source}", path.display())]
    Audit {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Slots(#[from] germline_policy::slots::SlotError),
    #[error("credential for {host:?}: {reason}")]
    Credential { host: String, reason: String },
    #[error("upstream trust root {}: {reason}", path.display())]
    UpstreamRoot { path: PathBuf, reason: String },
    #[error(transparent)]
    Plan(#[from] germline_policy::call::CallError),
    #[error(transparent)]
    Netns(#[from] netns::NetnsError),
    #[error("cannot serve the copy's listener: {0}")]
    Listener(std::io::Error),
    #[error("no call {0}")]
    NoCall(u64),
    #[error("call {call} has no group {group}")]
    NoGroup { call: u64, group: usize },
    #[error("call {call}: group {group}'s copy already started")]
    CopyExists { call: u64, group: usize },
    #[error("call {call}: group {group} has no live copy")]
    NoCopy { call: u64, group: usize },
    #[error("broker state lock poisoned")]
    Poisoned,
    /// Concurrent copies: an earlier group did not end before this copy's deadline (and a
    /// grace), so its outcome or slot snapshot is not known; the call fails closed.
    #[error("call {call}: group {group} waited past its deadline for an earlier group to end")]
    Held { call: u64, group: usize },
    #[error("replay spec: {0}")]
    Replay(String),
    /// A file-state commit the broker refuses (issue 27).
    #[error("file state: {0}")]
    FileState(String),
    #[error("the copies' proxy port {}: {why}", path.display())]
    CopyPort { path: PathBuf, why: String },
}

/// How the broker is set up. Everything here comes from the deployer, never from a release.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    pub policy: Arc<Policy>,
    /// Holds the deployment CA (created 0700 on first start).
    pub state_dir: PathBuf,
    /// JSON-lines audit log; `None` logs nowhere.
    pub audit_log: Option<PathBuf>,
    /// The slot store; `None` keeps slots in memory.
    pub slots: Option<PathBuf>,
    /// Trust the host's CA store for upstream TLS.
    pub native_roots: bool,
    /// Extra PEM CA files trusted for upstream TLS (tests use one for their HTTPS sink).
    pub extra_roots: Vec<PathBuf>,
    /// A broker request times out after this or at the copy's deadline, whichever is first.
    pub request_timeout: Duration,
    /// Largest request or reply body the broker buffers.
    pub max_body: usize,
    /// Reference behaviour only: follow redirects as an ordinary proxy would. germline never
    /// does; tests switch it on to show what that would leak.
    pub follow_redirects: bool,
    /// Worker threads of the broker's runtime.
    pub workers: usize,
    /// The port of every copy's proxy inside the copy's own namespace (`127.0.0.1:PORT`, also
    /// in the copy's `HTTP_PROXY`). 0: the deployment's, drawn from [`COPY_PORTS`] on the
    /// broker's first start and kept in `<state_dir>/copy-port`, so a tool cannot recognise a
    /// germline copy by a fixed, well-known proxy port (docs/broker.md).
    pub copy_port: u16,
    /// Read the policy's credential files with this user's permissions (`germline daemon`'s
    /// sessions, docs/daemon.md); `None`: with the broker's own.
    pub read_as: Option<germline_sys::user::FsCreds>,
}

impl BrokerConfig {
    pub fn new(policy: Arc<Policy>, state_dir: &Path) -> Self {
        Self {
            policy,
            state_dir: state_dir.to_path_buf(),
            audit_log: None,
            slots: None,
            native_roots: true,
            extra_roots: Vec::new(),
            request_timeout: Duration::from_secs(10),
            max_body: 16 << 20,
            follow_redirects: false,
            workers: 2,
            copy_port: 0,
            read_as: None,
        }
    }
}

/// Twin inputs `τ = (t, s)` of a call (A4): chosen without reading item contents.
#[derive(Debug, Clone, Copy, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct Twin {
    /// Frozen wall clock, nanoseconds since the Unix epoch.
    pub time_ns: u128,
    pub seed: u64,
}

/// A reply as the broker recorded it, for replay and for the evidence layer. On the wire (a
/// [`CallRecord`] over the control socket) its body is hex.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    #[serde(serialize_with = "ser_hex", deserialize_with = "de_hex")]
    pub body: Bytes,
}

fn ser_hex<S: serde::Serializer>(b: &Bytes, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&hex::encode(b))
}

/// The body's hex straight into its bytes: the text is read in place where the reader can
/// lend it (no escapes in hex), so decoding makes one copy of a body, the bytes.
fn de_hex<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Bytes, D::Error> {
    struct HexBody;
    impl serde::de::Visitor<'_> for HexBody {
        type Value = Bytes;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a body in hex")
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Bytes, E> {
            hex::decode(v).map(Bytes::from).map_err(E::custom)
        }
    }
    d.deserialize_str(HexBody)
}

/// Counters a test or metrics endpoint can read.
#[derive(Debug, Default)]
pub struct Stats {
    /// Name lookups actually sent to the system resolver.
    pub dns_lookups: AtomicU64,
    pub delivered: AtomicU64,
    pub replayed: AtomicU64,
    pub placeholders: AtomicU64,
    pub denied: AtomicU64,
    pub malformed: AtomicU64,
    /// Requests by (release digest, host, verdict), for metrics (docs/operations.md). The
    /// host is one the policy declares, or `undeclared`: never a name a copy made up.
    pub by_verdict: Mutex<BTreeMap<(String, String, &'static str), u64>>,
}

impl Stats {
    /// Counts one request of `release` to `host` with `verdict`.
    /// Counts one request of `release` to `host` with `verdict`; returns the host's label.
    pub(crate) fn count(
        &self,
        policy: &Policy,
        release: &str,
        host: &str,
        verdict: &'static str,
    ) -> String {
        let host = if policy.hosts().any(|h| h == host) {
            host
        } else {
            "undeclared"
        };
        if let Ok(mut m) = self.by_verdict.lock() {
            *m.entry((release.to_string(), host.to_string(), verdict))
                .or_insert(0) += 1;
        }
        host.to_string()
    }

    /// [`Stats::by_verdict`] as `[release, host, verdict, count]` rows.
    pub fn verdict_rows(&self) -> Vec<(String, String, String, u64)> {
        self.by_verdict
            .lock()
            .map(|m| {
                m.iter()
                    .map(|((r, h, v), n)| (r.clone(), h.clone(), v.to_string(), *n))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// What a call leaves for the evidence layer (issue 5, item 7): the answer to the control
/// socket's `end_call`, written and read as these types.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct CallRecord {
    pub call: u64,
    pub release: String,
    pub twin: Twin,
    /// `Rel[e]`: delivered (request digest, reply) per host, in order.
    pub delivered: BTreeMap<String, Vec<(String, Reply)>>,
    /// Per group: its slot snapshot at start (key -> (value digest, label)) and its outcome.
    pub copies: BTreeMap<usize, CopyRecord>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct CopyRecord {
    pub horizon: Label,
    pub slot_snapshot: BTreeMap<String, (String, Label)>,
    /// The snapshot's values (hex), for the evidence layer's probe (a witness record holds
    /// them at the clearance of its contents).
    pub slot_values: BTreeMap<String, String>,
    pub outcome: Option<CopyOutcome>,
    pub triggers: Vec<Trigger>,
}

pub(crate) struct Credential {
    place: CredentialPlace,
    value: String,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credential({:?}, <redacted>)", self.place)
    }
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) cfg: BrokerConfig,
    pub(crate) ca: DeploymentCa,
    pub(crate) audit: Audit,
    pub(crate) stats: Stats,
    pub(crate) upstream_tls: Arc<rustls::ClientConfig>,
    pub(crate) credentials: HashMap<String, Credential>,
    slots: Mutex<SlotStore>,
    calls: Mutex<HashMap<u64, Arc<CallState>>>,
    next_call: AtomicU64,
}

#[derive(Debug)]
pub(crate) struct CallState {
    pub(crate) id: u64,
    pub(crate) release: String,
    user: String,
    pub(crate) cx: CallContext,
    pub(crate) twin: Twin,
    /// Reference behaviour of the `sig-pin` and `sig-ifc` baselines: every request is
    /// delivered, to any host, as an ordinary forward proxy would. germline never sets it.
    pub(crate) open: bool,
    /// A probe or control re-run (evidence layer): nothing is delivered.
    pub(crate) replay: Option<Replay>,
    pub(crate) m: Mutex<CallMut>,
    /// The release runs this call's copies concurrently (issue 30, opt-in): the hold rule
    /// applies ([`CallRecords::concurrent`]).
    pub(crate) concurrent: bool,
    /// Woken by every delivered request and every ended copy: the proxy's held requests and
    /// deferred slot snapshots wait on it.
    pub(crate) notify: tokio::sync::Notify,
    /// The same for the control side: `end_copy` and `copy_files` of a later group wait on it.
    cv: std::sync::Condvar,
}

/// A re-run's destination, its transcript `T(d)` and the slot snapshot it starts from.
#[derive(Debug)]
pub(crate) struct Replay {
    pub(crate) host: String,
    pub(crate) replies: Vec<Arc<Reply>>,
    pub(crate) slot: Slot,
}

impl Replay {
    fn from_spec(spec: &germline_policy::witness::ReplaySpec) -> Result<Self, BrokerError> {
        let bad = |what: String| BrokerError::Replay(what);
        let replies = spec
            .transcript
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let body = hex::decode(&e.reply_body_hex)
                    .map_err(|err| bad(format!("transcript[{i}].reply_body_hex: {err}")))?;
                Ok(Arc::new(Reply {
                    status: e.reply_status,
                    headers: vec![("x-germline".into(), "probe-replay".into())],
                    body: Bytes::from(body),
                }))
            })
            .collect::<Result<Vec<_>, BrokerError>>()?;
        let mut slot = Slot::default();
        for (k, v) in &spec.slot {
            let value = hex::decode(v).map_err(|err| bad(format!("slot[{k:?}]: {err}")))?;
            slot.entries.insert(
                k.clone(),
                germline_policy::slots::SlotEntry {
                    value,
                    label: Label::public(),
                },
            );
        }
        Ok(Self {
            host: spec.host.clone(),
            replies,
            slot,
        })
    }
}

#[derive(Debug, Default)]
pub(crate) struct CallMut {
    pub(crate) records: CallRecords<Arc<Reply>>,
    pub(crate) copies: HashMap<usize, CopyMut>,
    done: BTreeMap<usize, CopyRecord>,
}

#[derive(Debug)]
pub(crate) struct CopyMut {
    pub(crate) tracker: CopyTracker,
    pub(crate) slot_key: SlotKey,
    /// The horizon's slot when the copy started: every read of the call is served from it.
    /// With concurrent copies, taken once every earlier group of the horizon ended (what the
    /// slot holds when the copy starts sequentially); until then `snapshot_pending`.
    pub(crate) snapshot: Slot,
    pub(crate) snapshot_pending: bool,
    /// The copy's deadline: the longest a control call of it waits for an earlier group.
    deadline: Instant,
    cancel: watch::Sender<()>,
    /// The copy's requests, for its trace (at most [`MAX_REQUEST_EVENTS`]).
    pub(crate) requests: Vec<RequestEvent>,
}

/// The slot entry that names a horizon's current file-state generation (issue 27). A copy
/// cannot write it: `@` is not a character of the keys the state endpoint takes.
pub const FILES_KEY: &str = "@files";

/// Most request events kept per copy (a copy cannot grow the broker's memory with them).
pub const MAX_REQUEST_EVENTS: usize = 256;

/// One request of a copy as traces show it: no URL, header or body, and the host only as a
/// declared host or `undeclared` (docs/operations.md).
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct RequestEvent {
    pub host: String,
    pub verdict: String,
    /// CLOCK_MONOTONIC nanoseconds at which the broker received it.
    pub start_mono_ns: u64,
    /// Microseconds until its verdict (and, if delivered, the upstream's reply).
    pub us: u64,
}

/// Per-copy context the proxy tasks hold.
#[derive(Debug)]
pub(crate) struct CopyEnv {
    pub(crate) call: Arc<CallState>,
    pub(crate) group: usize,
    pub(crate) deadline: tokio::time::Instant,
    pub(crate) cancel: watch::Receiver<()>,
}

impl CallState {
    pub(crate) fn lock(&self) -> Result<MutexGuard<'_, CallMut>, BrokerError> {
        self.m.lock().map_err(|_| BrokerError::Poisoned)
    }

    /// Wakes whatever the hold rule keeps waiting (call with the lock released).
    pub(crate) fn wake(&self) {
        if self.concurrent {
            self.notify.notify_waiters();
            self.cv.notify_all();
        }
    }

    /// Blocks until `ready` holds of the call's state, or fails with [`BrokerError::Held`]
    /// once `until` passes.
    fn wait_until(
        &self,
        group: usize,
        until: Instant,
        mut ready: impl FnMut(&CallMut) -> bool,
    ) -> Result<MutexGuard<'_, CallMut>, BrokerError> {
        let mut m = self.lock()?;
        loop {
            if ready(&m) {
                return Ok(m);
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(BrokerError::Held {
                    call: self.id,
                    group,
                });
            }
            m = self
                .cv
                .wait_timeout(m, left)
                .map_err(|_| BrokerError::Poisoned)?
                .0;
        }
    }

    /// Whether every earlier group of `group`'s horizon ended: its slot snapshot then holds
    /// what the sequential run would have written.
    fn horizon_settled(&self, m: &CallMut, group: usize) -> bool {
        let groups = &self.cx.plan().groups;
        let Some(hz) = groups.get(group).map(|g| &g.horizon) else {
            return true;
        };
        (0..group).all(|h| groups[h].horizon != *hz || !m.records.pending(h))
    }
}

/// How long past its own deadline a copy's `end_copy` waits for an earlier group's end (the
/// earlier copy's teardown after its deadline).
const HELD_GRACE: Duration = Duration::from_secs(10);

/// Takes copy `group`'s deferred slot snapshot (concurrent copies) if the earlier groups of
/// its horizon ended, joining its label as the copy's start would have. Returns whether the
/// copy has its snapshot (always, for a sequential call or a copy that is not live).
pub(crate) fn settle_snapshot(
    inner: &Inner,
    state: &CallState,
    m: &mut CallMut,
    group: usize,
) -> Result<bool, BrokerError> {
    let settled = state.horizon_settled(m, group);
    let Some(copy) = m.copies.get_mut(&group) else {
        return Ok(true);
    };
    if !copy.snapshot_pending {
        return Ok(true);
    }
    if !settled {
        return Ok(false);
    }
    let snapshot = inner.slots()?.snapshot(&copy.slot_key)?;
    copy.tracker.join_slot_label(&state.cx, &snapshot.label());
    copy.snapshot = snapshot;
    copy.snapshot_pending = false;
    Ok(true)
}

impl Inner {
    pub(crate) fn slots(&self) -> Result<MutexGuard<'_, SlotStore>, BrokerError> {
        self.slots.lock().map_err(|_| BrokerError::Poisoned)
    }
}

/// The broker: owns its runtime; every method may be called from plain threads.
#[derive(Debug)]
pub struct Broker {
    inner: Arc<Inner>,
    rt: tokio::runtime::Runtime,
    /// Pool copies' listeners bound ahead of their call (prepared.rs).
    prepared: prepared::PreparedEndpoints,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn upstream_tls(cfg: &BrokerConfig) -> Result<rustls::ClientConfig, BrokerError> {
    let mut roots = rustls::RootCertStore::empty();
    if cfg.native_roots {
        for c in rustls_native_certs::load_native_certs().certs {
            let _ = roots.add(c);
        }
    }
    for path in &cfg.extra_roots {
        let bad = |reason: String| BrokerError::UpstreamRoot {
            path: path.clone(),
            reason,
        };
        ca::add_pem_roots(&mut roots, path).map_err(bad)?;
    }
    let mut c = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(ca::CaError::from)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    c.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(c)
}

/// A credential file's value, read with `read_as`'s permissions when given.
fn read_credential_file(
    path: &Path,
    read_as: Option<&germline_sys::user::FsCreds>,
) -> std::io::Result<String> {
    match read_as {
        Some(c) => c.run(|| std::fs::read_to_string(path))?,
        None => std::fs::read_to_string(path),
    }
}

fn load_credentials(
    policy: &Policy,
    read_as: Option<&germline_sys::user::FsCreds>,
) -> Result<HashMap<String, Credential>, BrokerError> {
    let mut out = HashMap::new();
    for (host, c) in policy.credentials() {
        let err = |reason: String| BrokerError::Credential {
            host: host.clone(),
            reason,
        };
        let value = match &c.source {
            CredentialSource::Inline(v) => v.clone(),
            // Empty counts as unset, as the OTEL_* variables and most tools take it: a
            // `NAME=` left in a unit file or an engine's `-e NAME=` is a forgotten value,
            // and would otherwise be refused as a malformed header value.
            CredentialSource::Env(name) => std::env::var(name)
                .ok()
                .filter(|v| !v.is_empty())
                .ok_or_else(|| {
                    err(format!(
                        "environment variable {name} is not set (or is empty), and the \
                         policy's value_env names it"
                    ))
                })?,
            CredentialSource::File(p) => read_credential_file(p, read_as)
                .map_err(|e| err(format!("cannot read {}: {e}", p.display())))?
                .trim_end_matches(['\n', '\r'])
                .to_string(),
        };
        // The policy checked an inline value when it was loaded; one from the environment
        // or a file meets the same rule here, once, rather than failing every delivery.
        germline_policy::names::check_credential_value(&value).map_err(err)?;
        out.insert(
            host.clone(),
            Credential {
                place: c.place.clone(),
                value,
            },
        );
    }
    Ok(out)
}

/// The deployment's copy proxy port: drawn from [`COPY_PORTS`] on the first start and kept
/// in `<state>/copy-port`, so a broker restarted under running germlines (the sidecar is
/// started again after a crash) listens where their copies' `HTTP_PROXY` and Landlock rule
/// point.
fn deployment_copy_port(state_dir: &Path) -> Result<u16, BrokerError> {
    let path = state_dir.join("copy-port");
    let bad = |why: String| BrokerError::CopyPort {
        path: path.clone(),
        why,
    };
    let span = u64::from(COPY_PORTS.end - COPY_PORTS.start);
    // The remainder is below `span`, itself a u16.
    let drawn = COPY_PORTS.start + (random_seed() % span) as u16;
    // The first of two brokers starting at once writes it; the other reads that.
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
    {
        std::io::Write::write_all(&mut f, format!("{drawn}\n").as_bytes())
            .map_err(|e| bad(e.to_string()))?;
        return Ok(drawn);
    }
    let text = std::fs::read_to_string(&path).map_err(|e| bad(e.to_string()))?;
    match text.trim().parse::<u16>() {
        Ok(p) if p != 0 => Ok(p),
        _ => Err(bad(format!(
            "expected a port number, found {:?}",
            text.trim()
        ))),
    }
}

fn random_seed() -> u64 {
    let mut b = [0u8; 8];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        let _ = std::io::Read::read_exact(&mut f, &mut b);
    }
    u64::from_le_bytes(b)
}

impl Broker {
    pub fn start(cfg: BrokerConfig) -> Result<Self, BrokerError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(cfg.workers.max(1))
            .thread_name("germline-broker")
            .enable_all()
            .build()
            .map_err(BrokerError::Runtime)?;
        let ca = DeploymentCa::load_or_create(&cfg.state_dir.join("ca"), provider())?;
        let mut cfg = cfg;
        if cfg.copy_port == 0 {
            cfg.copy_port = deployment_copy_port(&cfg.state_dir)?;
        }
        let audit = Audit::open(cfg.audit_log.as_deref()).map_err(|source| BrokerError::Audit {
            path: cfg.audit_log.clone().unwrap_or_default(),
            source,
        })?;
        let slots = match &cfg.slots {
            Some(p) => SlotStore::open(p)?,
            None => SlotStore::in_memory()?,
        };
        let inner = Inner {
            upstream_tls: Arc::new(upstream_tls(&cfg)?),
            credentials: load_credentials(&cfg.policy, cfg.read_as.as_ref())?,
            cfg,
            ca,
            audit,
            stats: Stats::default(),
            slots: Mutex::new(slots),
            calls: Mutex::new(HashMap::new()),
            next_call: AtomicU64::new(1),
        };
        Ok(Self {
            inner: Arc::new(inner),
            rt,
            prepared: prepared::PreparedEndpoints::default(),
        })
    }

    /// Where every copy's proxy listens inside the copy's own network namespace (the
    /// copy's `HTTP_PROXY`, and the one port its Landlock layer lets it connect to).
    pub fn copy_proxy_addr(&self) -> SocketAddr {
        copy_proxy_addr(self.inner.cfg.copy_port)
    }

    /// The deployment CA certificate copies must trust (PEM).
    pub fn ca_cert_pem(&self) -> &str {
        self.inner.ca.cert_pem()
    }

    pub fn ca_cert_path(&self) -> &Path {
        self.inner.ca.cert_path()
    }

    pub fn stats(&self) -> &Stats {
        &self.inner.stats
    }

    /// Registers a call: its release digest, user, plan and declared hosts with clearances.
    /// `open`: as an open forward proxy (the baselines' reference behaviour: every request is
    /// delivered, to any host; labels still accumulate).
    pub fn begin_call(
        &self,
        release: &str,
        user: &str,
        plan: Plan,
        hosts: &[Member],
        rules: LabelRules,
        open: bool,
    ) -> Result<(u64, Twin), BrokerError> {
        self.begin(release, user, plan, hosts, rules, (open, false))
    }

    /// Like [`Broker::begin_call`] (never open) for a release whose copies run concurrently
    /// (issue 30, opt-in per release): requests, labels, triggers and slot snapshots follow
    /// the hold rule, so each copy gets what it would get had the copies run one at a time.
    pub fn begin_concurrent_call(
        &self,
        release: &str,
        user: &str,
        plan: Plan,
        hosts: &[Member],
        rules: LabelRules,
    ) -> Result<(u64, Twin), BrokerError> {
        self.begin(release, user, plan, hosts, rules, (false, true))
    }

    /// [`Broker::begin_call`] and [`Broker::begin_concurrent_call`]: fresh twin inputs, then
    /// the call registered with its `(open, concurrent)` flags.
    fn begin(
        &self,
        release: &str,
        user: &str,
        plan: Plan,
        hosts: &[Member],
        rules: LabelRules,
        flags: (bool, bool),
    ) -> Result<(u64, Twin), BrokerError> {
        let cx = CallContext::new(plan, hosts, rules)?;
        let time_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let twin = Twin {
            time_ns,
            seed: random_seed(),
        };
        self.register(release, user, (cx, hosts), twin, flags, None)
    }

    /// Registers a probe or control re-run (evidence layer, issue 10): the twin inputs, the
    /// destination's transcript and the slot snapshot come from `spec`; no request of it is
    /// delivered and no slot write of it is stored.
    pub fn begin_replay(
        &self,
        release: &str,
        user: &str,
        plan: Plan,
        hosts: &[Member],
        spec: germline_policy::witness::ReplaySpec,
    ) -> Result<(u64, Twin), BrokerError> {
        let cx = CallContext::new(plan, hosts, LabelRules::default())?;
        let replay = Replay::from_spec(&spec)?;
        let twin = Twin {
            time_ns: u128::from(spec.twin_time_ns),
            seed: spec.twin_seed,
        };
        self.register(
            release,
            user,
            (cx, hosts),
            twin,
            (false, false),
            Some(replay),
        )
    }

    fn register(
        &self,
        release: &str,
        user: &str,
        (cx, hosts): (CallContext, &[Member]),
        twin: Twin,
        (open, concurrent): (bool, bool),
        replay: Option<Replay>,
    ) -> Result<(u64, Twin), BrokerError> {
        let id = self.inner.next_call.fetch_add(1, Ordering::Relaxed);
        let groups = cx.plan().groups.len();
        let hosts: Vec<&String> = hosts.iter().map(|h| &h.name).collect();
        let probe = replay.is_some();
        let state = Arc::new(CallState {
            id,
            release: release.to_string(),
            user: user.to_string(),
            cx,
            twin,
            open,
            replay,
            m: Mutex::new(CallMut {
                records: if concurrent {
                    CallRecords::concurrent(groups)
                } else {
                    CallRecords::default()
                },
                ..CallMut::default()
            }),
            concurrent,
            notify: tokio::sync::Notify::new(),
            cv: std::sync::Condvar::new(),
        });
        self.inner
            .calls
            .lock()
            .map_err(|_| BrokerError::Poisoned)?
            .insert(id, state);
        self.inner.audit.event("call", || json!({"call": id, "release": release, "groups": groups, "open": open, "replay": probe, "concurrent": concurrent, "hosts": hosts}),
        );
        Ok((id, twin))
    }

    fn call(&self, id: u64) -> Result<Arc<CallState>, BrokerError> {
        self.inner
            .calls
            .lock()
            .map_err(|_| BrokerError::Poisoned)?
            .get(&id)
            .cloned()
            .ok_or(BrokerError::NoCall(id))
    }

    /// Starts serving group `group`'s copy inside the network namespace `netns`, until
    /// `deadline` (absolute, monotonic, fixed at the copy's fork). Returns the address the
    /// copy's `HTTP_PROXY` names inside its namespace.
    pub fn start_copy(
        &self,
        call: u64,
        group: usize,
        netns: BorrowedFd<'_>,
        deadline: Instant,
    ) -> Result<SocketAddr, BrokerError> {
        // Prepared while the copy waited in its pool (prepared.rs), else bound now.
        let listener = match self.prepared.take(netns)? {
            Some(l) => l,
            None => netns::listener_in(netns, self.copy_proxy_addr())?,
        };
        self.start_copy_on(call, group, listener, deadline)
    }

    /// Binds the endpoint of a pool copy in its network namespace `netns` before any call
    /// (lo up, bind, `SIOCGSKNS`), for the `start_copy` that later names the same namespace
    /// (prepared.rs says what it may and may not carry).
    pub fn prepare_copy(&self, netns: BorrowedFd<'_>) -> Result<(), BrokerError> {
        self.prepared.prepare(netns, self.copy_proxy_addr())?;
        Ok(())
    }

    /// Closes the endpoint prepared in `netns` (a pool copy the shim dropped unused), so that
    /// it no longer pins that namespace; `true` if one was prepared (prepared.rs).
    pub fn forget_copy(&self, netns: BorrowedFd<'_>) -> Result<bool, BrokerError> {
        Ok(self.prepared.forget(netns)?)
    }

    /// Endpoints prepared and not yet taken by a call.
    pub fn prepared_endpoints(&self) -> usize {
        self.prepared.len()
    }

    /// Like [`Broker::start_copy`] with a listener the caller created (and checked).
    pub fn start_copy_on(
        &self,
        call: u64,
        group: usize,
        listener: std::net::TcpListener,
        deadline: Instant,
    ) -> Result<SocketAddr, BrokerError> {
        let state = self.call(call)?;
        let g = state
            .cx
            .plan()
            .groups
            .get(group)
            .ok_or(BrokerError::NoGroup { call, group })?;
        let slot_key = SlotKey {
            release: state.release.clone(),
            user: state.user.clone(),
            horizon: g.horizon.clone(),
        };
        let (tx, rx) = watch::channel(());
        {
            let mut m = state.lock()?;
            if m.copies.contains_key(&group) || m.done.contains_key(&group) {
                return Err(BrokerError::CopyExists { call, group });
            }
            // Concurrent copies: while an earlier group of this horizon runs, the snapshot
            // waits (settle_snapshot) for what it leaves in the slot.
            let snapshot_pending = state.replay.is_none() && !state.horizon_settled(&m, group);
            let snapshot = match &state.replay {
                Some(r) => r.slot.clone(),
                None if snapshot_pending => Slot::default(),
                None => self.inner.slots()?.snapshot(&slot_key)?,
            };
            let tracker = CopyTracker::start(&state.cx, group, &snapshot.label());
            m.copies.insert(
                group,
                CopyMut {
                    tracker,
                    slot_key,
                    snapshot,
                    snapshot_pending,
                    deadline,
                    cancel: tx,
                    requests: Vec::new(),
                },
            );
        }
        let local = listener.local_addr().map_err(BrokerError::Listener)?;
        let _guard = self.rt.enter();
        let listener =
            tokio::net::TcpListener::from_std(listener).map_err(BrokerError::Listener)?;
        let env = Arc::new(CopyEnv {
            call: state,
            group,
            deadline: deadline.into(),
            cancel: rx,
        });
        self.inner
            .audit
            .event("copy_start", || json!({"call": call, "group": group}));
        self.rt
            .spawn(proxy::serve_copy(self.inner.clone(), env, listener));
        Ok(local)
    }

    /// Raises a running copy's label: the shim is about to hand it an input of label `l` (the
    /// agent's answer to a relayed request), so its later slot writes and its output carry it.
    pub fn raise_copy(&self, call: u64, group: usize, l: &Label) -> Result<(), BrokerError> {
        let state = self.call(call)?;
        let mut m = state.lock()?;
        let copy = m
            .copies
            .get_mut(&group)
            .ok_or(BrokerError::NoCopy { call, group })?;
        copy.tracker.raise(l);
        let label = copy.tracker.label().clone();
        drop(m);
        self.inner.audit.event(
            "copy_raised",
            || json!({"call": call, "group": group, "label": label}),
        );
        Ok(())
    }

    /// The generation of file state (issue 27) copy `group` starts from: its horizon's
    /// [`FILES_KEY`] when the copy started (a re-run's: the recorded snapshot's); `None`:
    /// the release's initial state.
    pub fn copy_files(&self, call: u64, group: usize) -> Result<Option<String>, BrokerError> {
        let state = self.call(call)?;
        let until = self.copy_deadline(&state, group)?;
        let mut m = state.wait_until(group, until, |m| state.horizon_settled(m, group))?;
        settle_snapshot(&self.inner, &state, &mut m, group)?;
        let copy = m
            .copies
            .get(&group)
            .ok_or(BrokerError::NoCopy { call, group })?;
        Ok(copy
            .snapshot
            .entries
            .get(FILES_KEY)
            .map(|e| String::from_utf8_lossy(&e.value).into_owned()))
    }

    /// Points the horizon of ended copy `group` at file-state `generation` (a sha256, hex),
    /// stored with the copy's output label `ℓ(g)` as any slot write: refused if that label is
    /// not within the horizon ([`SlotStore::write`]), and for a probe or control re-run,
    /// whose writes go nowhere. Two copies of one call at one horizon: the later commits last
    /// and wins (as for key-value slots).
    pub fn commit_files(
        &self,
        call: u64,
        group: usize,
        generation: &str,
    ) -> Result<Label, BrokerError> {
        if generation.len() != 64 || !generation.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(BrokerError::FileState(format!(
                "generation {generation:?} is not a sha256 in hex"
            )));
        }
        let state = self.call(call)?;
        if state.replay.is_some() {
            return Err(BrokerError::FileState(
                "a probe or control re-run commits no state".into(),
            ));
        }
        let (label, horizon) = {
            let m = state.lock()?;
            let not_ended = || {
                BrokerError::FileState(format!(
                    "call {call}: group {group}'s copy has not ended (a copy commits after its end, with its final label)"
                ))
            };
            let rec = m.done.get(&group).ok_or_else(not_ended)?;
            let label = rec
                .outcome
                .as_ref()
                .map(|o| o.label.clone())
                .ok_or_else(not_ended)?;
            (label, rec.horizon.clone())
        };
        let key = SlotKey {
            release: state.release.clone(),
            user: state.user.clone(),
            horizon,
        };
        self.inner
            .slots()?
            .write(&key, FILES_KEY, generation.as_bytes(), &label)?;
        self.inner.audit.event(
            "state_commit",
            || json!({"call": call, "group": group, "generation": generation, "label": label}),
        );
        Ok(label)
    }

    /// Ends a copy: closes its endpoint (cutting anything in flight) and returns its output
    /// label `ℓ(g)` and triggers, with the copy's request events (for its trace).
    ///
    /// With concurrent copies it first waits for every earlier group to end (their records
    /// are final only then), at most until the copy's deadline and [`HELD_GRACE`].
    pub fn end_copy(
        &self,
        call: u64,
        group: usize,
    ) -> Result<(CopyOutcome, Vec<RequestEvent>), BrokerError> {
        let state = self.call(call)?;
        let until = self.copy_deadline(&state, group)? + HELD_GRACE;
        let mut m = state.wait_until(group, until, |m| m.records.earlier_ended(group))?;
        settle_snapshot(&self.inner, &state, &mut m, group)?;
        let copy = m
            .copies
            .remove(&group)
            .ok_or(BrokerError::NoCopy { call, group })?;
        drop(copy.cancel);
        let outcome = copy.tracker.finish(&state.cx, &m.records);
        m.records.end_group(group);
        let snapshot = copy
            .snapshot
            .entries
            .iter()
            .map(|(k, e)| (k.clone(), (audit::digest_hex(&e.value), e.label.clone())))
            .collect();
        for t in &outcome.triggers {
            let policy = &self.inner.cfg.policy;
            self.inner
                .stats
                .count(policy, &state.release, &t.host, "trigger");
            self.inner.audit.event("trigger", || json!({"call": call, "group": group, "host": t.host, "release": state.release, "kind": t.kind}),
            );
        }
        self.inner.audit.event("copy_end", || json!({"call": call, "group": group, "label": outcome.label, "triggers": outcome.triggers.len()}),
        );
        m.done.insert(
            group,
            CopyRecord {
                horizon: copy.slot_key.horizon.clone(),
                slot_values: copy
                    .snapshot
                    .entries
                    .iter()
                    .map(|(k, e)| (k.clone(), hex::encode(&e.value)))
                    .collect(),
                slot_snapshot: snapshot,
                triggers: outcome.triggers.clone(),
                outcome: Some(outcome.clone()),
            },
        );
        drop(m);
        state.wake();
        Ok((outcome, copy.requests))
    }

    fn copy_deadline(&self, state: &CallState, group: usize) -> Result<Instant, BrokerError> {
        let m = state.lock()?;
        m.copies
            .get(&group)
            .map(|c| c.deadline)
            .ok_or(BrokerError::NoCopy {
                call: state.id,
                group,
            })
    }

    /// Ends a call (ending any copy still live) and returns its record.
    pub fn end_call(&self, call: u64) -> Result<CallRecord, BrokerError> {
        let state = self.call(call)?;
        let live: BTreeSet<usize> = {
            let mut m = state.lock()?;
            // Concurrent copies: a group whose copy never started never will; the later
            // groups' copies stop waiting for it (it delivered nothing).
            for g in 0..state.cx.plan().groups.len() {
                if !m.copies.contains_key(&g) && !m.done.contains_key(&g) {
                    m.records.end_group(g);
                }
            }
            m.copies.keys().copied().collect()
        };
        state.wake();
        // In group order: a later group's end waits for the earlier ones'.
        for g in live {
            self.end_copy(call, g)?;
        }
        self.inner
            .calls
            .lock()
            .map_err(|_| BrokerError::Poisoned)?
            .remove(&call);
        let m = state.lock()?;
        let mut delivered = BTreeMap::new();
        for h in state.cx.plan().groups.iter().flat_map(|g| g.hosts.iter()) {
            let rel = m.records.record(h);
            if !rel.is_empty() {
                delivered.insert(
                    h.clone(),
                    rel.iter()
                        .map(|(d, r)| (hex::encode(d), Reply::clone(r)))
                        .collect::<Vec<_>>(),
                );
            }
        }
        self.inner.audit.event(
            "call_end",
            || json!({"call": call, "release": state.release}),
        );
        let mut copies = m.done.clone();
        // Slot values serve only the probe of a trigger (the evidence layer): a call without
        // one does not carry every slot's contents back over the control socket.
        // (A broker denial is weighed as it stands: it needs no probe.)
        if copies
            .values()
            .all(|c| c.triggers.iter().all(|t| t.kind.is_denial()))
        {
            for c in copies.values_mut() {
                c.slot_values.clear();
            }
        }
        Ok(CallRecord {
            call,
            release: state.release.clone(),
            twin: state.twin,
            delivered,
            copies,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_are_counted_under_declared_hosts_or_undeclared() {
        let policy = Policy::parse(
            Path::new("p.toml"),
            "[labels]\nhr = \"x\"\n[destinations]\n\"ocr.example\" = []\n",
        )
        .expect("policy");
        let s = Stats::default();
        assert_eq!(
            s.count(&policy, "sha256:r", "ocr.example", "delivered"),
            "ocr.example"
        );
        // A host a copy made up (here carrying a secret) is never kept as a label.
        let secret = "canary-hr-0123456789abcdef.leak.example";
        assert_eq!(s.count(&policy, "sha256:r", secret, "denied"), "undeclared");
        assert_eq!(s.count(&policy, "sha256:r", "", "malformed"), "undeclared");
        let rows = s.verdict_rows();
        assert!(
            rows.iter().all(|(_, h, _, _)| !h.contains("canary")),
            "{rows:?}"
        );
        assert!(rows.contains(&("sha256:r".into(), "undeclared".into(), "denied".into(), 1)));
    }

    /// A credential read from a file meets the rule the policy applies to an inline value:
    /// refused at start, host named, value never printed (issue 25 item 9).
    #[test]
    fn credential_files_with_control_characters_are_refused_at_start() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("key");
        let policy = |contents: &str| {
            std::fs::write(&file, contents).expect("key");
            let text = format!(
                "[labels]\nhr = \"x\"\n[destinations]\n\"ocr.example\" = []\n\
                 [credentials.\"ocr.example\"]\nheader = \"X-Api-Key\"\nvalue_file = \"{}\"\n",
                file.display()
            );
            Policy::parse(Path::new("p.toml"), &text).expect("policy")
        };
        for bad in [
            "sec\0ret\n",
            "sec\rret",
            "secret\nX-Evil: 1\n",
            "\n",
            " secret",
        ] {
            let e = load_credentials(&policy(bad), None)
                .expect_err(bad)
                .to_string();
            assert!(
                e.contains("\"ocr.example\"") && e.contains("expected"),
                "{e}"
            );
            assert!(!e.contains("sec"), "the value is printed: {e}");
        }
        let ok = load_credentials(&policy("secret\r\n"), None).expect("good");
        assert_eq!(ok["ocr.example"].value, "secret");
    }

    /// `value_env`: a variable set to the empty string is unset, and says so; a set one is
    /// the credential.
    #[test]
    fn an_empty_credential_variable_counts_as_unset() {
        let name = "GERMLINE_TEST_EMPTY_CREDENTIAL";
        let policy = Policy::parse(
            Path::new("p.toml"),
            &format!(
                "[labels]\nhr = \"x\"\n[destinations]\n\"ocr.example\" = []\n\
                 [credentials.\"ocr.example\"]\nheader = \"X-Api-Key\"\nvalue_env = \"{name}\"\n"
            ),
        )
        .expect("policy");
        for unset in [None, Some("")] {
            match unset {
                None => std::env::remove_var(name),
                Some(v) => std::env::set_var(name, v),
            }
            let e = load_credentials(&policy, None)
                .expect_err("no value")
                .to_string();
            assert!(
                e.contains(&format!("environment variable {name} is not set")),
                "{unset:?}: {e}"
            );
        }
        std::env::set_var(name, "k3y");
        let ok = load_credentials(&policy, None).expect("set");
        assert_eq!(ok["ocr.example"].value, "k3y");
        std::env::remove_var(name);
    }

    /// A broker of a `germline daemon` session reads credential files as the session's user:
    /// a file that user cannot read is refused even though root (the broker) could, so a
    /// file swapped in after the session checked the policy is not read for them.
    #[test]
    fn credential_files_are_read_with_the_users_permissions() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            assert!(
                std::env::var_os("GERMLINE_REQUIRE_ROOT_TESTS").is_none(),
                "needs root"
            );
            return;
        }
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        let file = dir.path().join("key");
        std::fs::write(&file, "root-only-secret\n").expect("key");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let text = format!(
            "[labels]\nhr = \"x\"\n[destinations]\n\"ocr.example\" = []\n\
             [credentials.\"ocr.example\"]\nheader = \"X-Api-Key\"\nvalue_file = \"{}\"\n",
            file.display()
        );
        let policy = Policy::parse(Path::new("p.toml"), &text).expect("policy");
        let nobody = germline_sys::user::FsCreds {
            uid: 65534,
            gid: 65534,
            groups: vec![],
        };
        let e = load_credentials(&policy, Some(&nobody))
            .expect_err("not the user's to read")
            .to_string();
        assert!(
            e.contains("cannot read") && e.contains("Permission denied"),
            "{e}"
        );
        assert!(!e.contains("root-only-secret"), "{e}");
        let ok = load_credentials(&policy, None).expect("the broker's own");
        assert_eq!(ok["ocr.example"].value, "root-only-secret");
    }

    #[test]
    fn the_copy_port_is_drawn_once_per_deployment_and_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = deployment_copy_port(dir.path()).expect("draw");
        assert!(COPY_PORTS.contains(&p), "{p}");
        assert_ne!(p, 3128);
        // A restarted broker of the same deployment listens on the same port.
        assert_eq!(deployment_copy_port(dir.path()).expect("again"), p);
        // Another deployment draws its own (1 in 12000 to collide: try a few).
        let others: Vec<u16> = (0..4)
            .map(|_| {
                let d = tempfile::tempdir().expect("tempdir");
                deployment_copy_port(d.path()).expect("draw")
            })
            .collect();
        assert!(others.iter().any(|o| *o != p), "{p} {others:?}");
        std::fs::write(dir.path().join("copy-port"), "squid\n").expect("write");
        let e = deployment_copy_port(dir.path()).expect_err("garbage");
        assert!(e.to_string().contains("expected a port number"), "{e}");
    }
}
