//! The runtimes `germline run --mode` offers: germline execution and the paper's baselines
//! (Section VII, Table XI), all behind one [`Runtime`] so that the security matrix and the
//! benchmarks compare them on the same calls.
//!
//! | mode | process | network | items | output label |
//! |---|---|---|---|---|
//! | `sig-pin` | one persistent process | host, open proxy | all, every call | none |
//! | `sig-ifc` | one persistent process | host, open proxy | all | join of the call's items |
//! | `confined-ifc` | one persistent process, own netns, Landlock | broker allowlist | all | broker's `L` |
//! | `fresh-ifc` | a fresh confined process per call | broker allowlist | all | broker's `L` |
//! | `nosplit` | one germline copy per call | broker | all | broker's `L` |
//! | `germline` | one germline copy per Plan group | broker, positional rule | the group's view | broker's `L` of the agent's group |

use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use germline_broker::ca::CopyTrust;
use germline_policy::{Label, Plan, PlanMode};
use germline_sandbox::spawn::{SpawnOptions, SpawnPool};
use germline_sandbox::spec::BindMount;
use germline_sandbox::{Germline, LaunchSpec, Limits, Options};
use serde_json::{json, Value};

use crate::builder::RuntimeBuilder;
use crate::callmeta::CallMeta;
pub use crate::error::RunError;
use crate::error::{broker_failed, limit, said, SandboxFailure, StartError, ToolFailure};
use crate::hub::HubSource;
use crate::observe::{CallObserver, CallView, Observers, RuntimeView};
use crate::outbox::{self, Delivery};
use crate::pipeline::Stages;
use crate::process::{ProcessSpec, ToolProcess};
use crate::relay::{Agent, Buffered, CopyRelay};
use crate::release::Release;
use crate::sidecar::Sidecar;

/// Where items appear inside a copy or a baseline process.
pub const ITEMS_DIR: &str = "/run/items";
/// The consumer name of the agent.
pub const AGENT: &str = "agent";
/// What the agent is told when a copy outside its group fails: never the copy's own words.
pub const OTHER_COPY_FAILED: &str = "a copy serving another destination of this call failed";

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    SigPin,
    SigIfc,
    ConfinedIfc,
    FreshIfc,
    Nosplit,
    Germline,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::SigPin => "sig-pin",
            Mode::SigIfc => "sig-ifc",
            Mode::ConfinedIfc => "confined-ifc",
            Mode::FreshIfc => "fresh-ifc",
            Mode::Nosplit => "nosplit",
            Mode::Germline => "germline",
        }
    }

    pub const ALL: [Mode; 6] = [
        Mode::SigPin,
        Mode::SigIfc,
        Mode::ConfinedIfc,
        Mode::FreshIfc,
        Mode::Nosplit,
        Mode::Germline,
    ];
}

/// What one call returned to the agent.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The MCP `CallToolResult`, with `_meta.germline` added where the mode labels outputs.
    pub result: Value,
    pub label: Option<Label>,
    pub copies: usize,
    pub triggers: usize,
    /// Per-phase time of the call, microseconds (for `germline run-bench` and traces).
    pub phases: Vec<(&'static str, u64)>,
    /// Notifications for the agent (progress, log messages) from the agent's own copy only,
    /// in the order it sent them; the transport writes them before the result.
    pub notifications: Vec<Value>,
}

/// A germline that dies is started again, at most this many times within
/// [`RESTART_WINDOW`] (docs/sandbox.md, "When a germline dies").
pub const MAX_RESTARTS: usize = 3;
/// The window [`MAX_RESTARTS`] counts in, by default.
pub const RESTART_WINDOW: Duration = Duration::from_secs(60);
/// The wait before the n-th restart within the window (n = 1, 2, 3): a germline that keeps
/// dying is not restarted in a tight loop.
const RESTART_BACKOFF: [Duration; MAX_RESTARTS] = [
    Duration::ZERO,
    Duration::from_millis(500),
    Duration::from_millis(1000),
];

/// Whether copies get the call's twin inputs: on unless `GERMLINE_TWIN=off` (the reference
/// for the twin-input test, issue 10).
fn twin_inputs_on() -> bool {
    std::env::var("GERMLINE_TWIN").map_or(true, |v| v != "off")
}

enum Backend {
    Germline(Box<Germline>),
    /// Spawned copies (issue 28): Node, native binaries, Python that asks for it.
    Spawn(Box<SpawnPool>),
    Process(ToolProcess),
    /// `fresh-ifc`: started per call.
    Fresh,
    /// A germline shared with other sessions (`germline serve`, [`crate::hub`]).
    Hub(Box<HubSource>),
}

impl Backend {
    fn pid(&self) -> Option<i32> {
        match self {
            Backend::Germline(g) => Some(g.pid()),
            Backend::Process(p) => Some(p.pid),
            Backend::Hub(h) => h.pid(),
            Backend::Spawn(_) | Backend::Fresh => None,
        }
    }

    fn germline(&self) -> Option<&Germline> {
        match self {
            Backend::Germline(g) => Some(g),
            _ => None,
        }
    }
}

/// One agent session's runtime: the verified release, its germline or process, the broker.
pub struct Runtime {
    pub(crate) mode: Mode,
    pub(crate) release: Release,
    pub(crate) broker: Sidecar,
    backend: Backend,
    proc_spec: Option<ProcessSpec>,
    /// The host-side listener of an unconfined baseline process's proxy.
    host_proxy: Option<std::net::TcpListener>,
    limits: Limits,
    pub(crate) user: String,
    /// The CA bundles bind-mounted into the copies (removed at stop).
    ca_dir: PathBuf,
    /// Copies get the call's twin inputs (read once at start, not per call).
    twin_on: bool,
    /// Triggers awaiting probe replay, witness records, dampening (crate::evidence).
    pub(crate) evidence: crate::evidence::Evidence,
    /// The policy's `[limits]` (off until the caller sets them).
    pub(crate) limiter: crate::limits::Limiter,
    /// Where this runtime's metrics go (`--metrics-listen`; none by default): the pipeline
    /// counts per-copy events on it directly; whole calls reach it as an observer.
    pub(crate) metrics: Option<std::sync::Arc<crate::metrics::Metrics>>,
    /// What is told of each call and of idle work: metrics, traces (`--otlp-endpoint`), the
    /// state file `germline status` reads, in that order ([`crate::observe`]).
    pub(crate) observers: Observers,
    /// The last call's broker requests by group (verdicts, declared hosts; for its trace).
    pub(crate) last_requests: Vec<(usize, germline_broker::RequestEvent)>,
    /// How long the germline lives (policy `[lifetimes]`; docs/operations.md).
    pub(crate) lifetime: germline_policy::limits::Lifetime,
    /// What started the germline, to start a fresh one (`single-shot`), and how many were.
    launch: Option<(LaunchSpec, Options)>,
    generation: u32,
    /// A `single-shot` germline served a call: a fresh one is due before the next.
    fresh_due: bool,
    /// The germline died (how, [`Germline::death`]): a fresh one is due before the next use.
    germline_down: Option<String>,
    /// When germlines that died were restarted (or tried to be), within `restart_window`.
    restarts: Vec<Instant>,
    /// The window [`MAX_RESTARTS`] counts in (`--germline-restart-window`).
    pub(crate) restart_window: Duration,
    /// A copy of this call got data ([`Runtime::run_copy`]): a call whose germline died
    /// before that may be run again on a fresh one.
    data_sent: bool,
    /// Where results for the recipients a manifest names go ([`crate::outbox`]).
    pub(crate) outbox: Option<PathBuf>,
    /// The release's state in files (issue 27), when its manifest declares any.
    pub(crate) file_state: Option<crate::state::FileState>,
    /// Where commits of writes into directory items are journalled (issue 27,
    /// [`crate::writes`]); `None` for a baseline or a hub session's runtime.
    pub(crate) writes_journal: Option<PathBuf>,
    /// A multi-group call's copies run concurrently (`[copies] concurrent`, issue 30).
    pub(crate) concurrent_copies: bool,
    /// Where fresh germlines are forked (`germline serve`: a thread that outlives them,
    /// [`crate::launcher`]); the calling thread otherwise.
    pub(crate) launcher: Option<std::sync::Arc<crate::launcher::Launcher>>,
    /// Observers are told of a successful call after its answer went out
    /// ([`Runtime::observe_after_answer`]); the call they have not been told of yet.
    observe_after_answer: bool,
    deferred: Option<crate::observe::DeferredCall>,
    /// Rung by the transport when the agent's next request is queued
    /// ([`Runtime::set_doorbell`]).
    doorbell: Option<std::sync::Arc<germline_sys::doorbell::Doorbell>>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("mode", &self.mode)
            .field("release", &self.release.label())
            .finish_non_exhaustive()
    }
}

fn proxy_env(addr: &str) -> Vec<(String, String)> {
    let url = format!("http://{addr}");
    ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"]
        .into_iter()
        .map(|k| (k.to_string(), url.clone()))
        .chain([
            ("NO_PROXY".to_string(), String::new()),
            ("no_proxy".to_string(), String::new()),
        ])
        .collect()
}

fn base_env() -> Vec<(String, String)> {
    vec![
        ("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()),
        ("HOME".into(), "/tmp".into()),
        ("LANG".into(), "C.UTF-8".into()),
        ("PYTHONDONTWRITEBYTECODE".into(), "1".into()),
        ("PYTHONUNBUFFERED".into(), "1".into()),
        ("OMP_NUM_THREADS".into(), "1".into()),
        ("OPENBLAS_NUM_THREADS".into(), "1".into()),
        ("MKL_NUM_THREADS".into(), "1".into()),
    ]
}

/// The temporary directory of the user who started germline (`$TMPDIR` when it names a
/// directory, else `/tmp`). The baselines bind it at the tool's `/tmp`, as an ordinary
/// deployment shares it between all of the user's tools; copies never see it.
fn user_tmp_dir() -> PathBuf {
    std::env::var_os("TMPDIR")
        .map(PathBuf::from)
        .filter(|d| d.is_absolute() && d.is_dir())
        .unwrap_or_else(|| PathBuf::from("/tmp"))
}

/// Where a baseline keeps the release's declared state: one host directory of its own,
/// bound read-write at `/run/state` ([`crate::state::baseline_dir`]); `None` without state.
fn baseline_state(
    release: &Release,
    broker: &Sidecar,
    user: &str,
) -> Result<Option<PathBuf>, StartError> {
    if release.manifest.state.is_empty() {
        return Ok(None);
    }
    crate::state::baseline_dir(
        broker.state_dir(),
        &release.digest,
        user,
        &release.manifest.state,
    )
    .map(Some)
    .map_err(|source| StartError::State {
        release: release.label(),
        source,
    })
}

/// The sandbox's launch spec of a verified release. `proxy`: the broker's copy proxy
/// address ([`germline_broker::Broker::copy_proxy_addr`]), the copies' `HTTP_PROXY` and the
/// one port their Landlock layers let them connect to.
pub fn launch_spec(
    release: &Release,
    trust: &CopyTrust,
    proxy: std::net::SocketAddr,
) -> Result<LaunchSpec, StartError> {
    let m = &release.manifest;
    let (interpreter, entry) = m
        .entry
        .split_first()
        .ok_or_else(|| StartError::EmptyEntry {
            release: release.label(),
        })?;
    let mut env: Vec<String> = base_env()
        .into_iter()
        .chain(proxy_env(&proxy.to_string()))
        .chain(trust.env.iter().cloned())
        // A release that asks for scratch space gets it as its temporary directory: the
        // copy's private tmpfs, discarded with the copy (the rootfs's /tmp is read-only).
        .chain((m.scratch_mb > 0).then(|| ("TMPDIR".to_string(), "/run/scratch".to_string())))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    env.sort();
    let (language, execution) = execution_of(m).map_err(|reason| StartError::NoExecution {
        release: release.label(),
        reason,
    })?;
    Ok(LaunchSpec {
        rootfs: release.rootfs.clone(),
        interpreter: interpreter.clone(),
        entry: entry.to_vec(),
        env,
        workdir: "/".into(),
        module_path: vec![],
        readable_paths: m.readable_paths.clone(),
        language,
        execution,
        scratch: m.scratch_mb > 0,
        warm: m.initialisation.warm,
        warm_calls: m
            .initialisation
            .warm_calls
            .iter()
            .map(|w| serde_json::json!({"tool": w.tool, "arguments": w.arguments, "in_pool": w.in_pool}))
            .collect(),
        limits: Limits::default(),
        // The deployment CA, over the rootfs's CA bundles (the signed rootfs is not changed).
        extra_mounts: trust.mounts.iter().cloned().map(BindMount::from).collect(),
        egress_port: Some(proxy.port()),
        state_bytes: 0,
        writable_trees: true,
        twin_line: false,
        // Twin inputs on: a forked germline binds the twin's replacements before its fork
        // point, off every call's path (the reference runs get none).
        twin_forked: twin_inputs_on(),
    })
}

/// A number unique per runtime (and germline hub, [`crate::hub`]) of this process: with the
/// pid it names their germline's cgroup and CA directory (`germline serve` starts many).
pub(crate) fn next_runtime_number() -> u32 {
    static STARTED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// The CA bundles that add the broker's deployment CA, for every copy's TLS clients, written
/// into `ca_dir` (made readable to the germline's unprivileged user). A runtime's germline
/// and a hub's ([`crate::hub`]) bind them into their copies.
pub(crate) fn copy_trust(
    release: &Release,
    broker: &Sidecar,
    read_as: Option<&germline_sys::user::FsCreds>,
    ca_dir: &Path,
) -> Result<CopyTrust, StartError> {
    let pem = broker.client.ca_cert().map_err(StartError::BrokerCa)?;
    let _ = std::fs::remove_dir_all(ca_dir);
    // Read as the user a daemon session runs for (a symlink in their rootfs must not
    // make root read a file for them), written as root.
    let read = || germline_broker::ca::rootfs_bundles(&release.rootfs);
    let bundles = match read_as {
        Some(c) => c.run(read).unwrap_or_else(|source| {
            Err(germline_broker::ca::CaError::Io {
                path: release.rootfs.clone(),
                source,
            })
        }),
        None => read(),
    }
    .map_err(StartError::CopyTrust)?;
    let trust = germline_broker::ca::copy_trust_from(&bundles, &pem, ca_dir)
        .map_err(StartError::CopyTrust)?;
    let mut readable = vec![ca_dir.to_path_buf()];
    readable.extend(trust.mounts.iter().map(|(src, _)| src.clone()));
    for p in readable {
        let mode = if p.is_dir() { 0o755 } else { 0o644 };
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode))
            .map_err(|source| StartError::Permissions { path: p, source })?;
    }
    Ok(trust)
}

/// The sandbox's language and execution of a release (issue 28): Python forks unless its
/// manifest asks for `spawn`; Node and native binaries spawn; a non-Python release that asks
/// for `fork` is refused (only the Python bootstrap finds a fork point that passes G1).
pub fn execution_of(
    m: &germline_release::manifest::Manifest,
) -> Result<(germline_sandbox::Language, germline_sandbox::Execution), String> {
    use germline_release::manifest::{Execution as M, Language as L};
    use germline_sandbox::{Execution, Language};
    let language = match m.language {
        L::Python => Language::Python,
        L::Node => Language::Node,
        L::Native => Language::Native,
    };
    match (m.execution, language) {
        (None, l) => Ok((l, l.default_execution())),
        (Some(M::Spawn), l) => Ok((l, Execution::Spawn)),
        (Some(M::Fork), Language::Python) => Ok((language, Execution::Fork)),
        (Some(M::Fork), l) => Err(format!(
            "the manifest asks for forked copies of a {l:?} server, which cannot be forked (its \
             runtime starts threads before any fork point, so its germline would fail G1); the \
             publisher must set \"execution\": \"spawn\" (or leave it out) and sign again"
        )),
    }
}

/// The start of the stderr line with a spawn pool's final figures as JSON
/// (`germline_sandbox::spawn::PoolStatus`), written when a runtime with spawned copies stops.
pub const SPAWN_POOL_LINE: &str = "germline: spawn pool ";

/// The spawn pool's bounds: `--pool N` (N > 0) fixes the depth at N; otherwise the policy's
/// `[pool]` table lets it adapt between its `min` and `max`; neither: no pool, every copy is
/// spawned on the call's path. The memory cap is `[pool] memory_mb` (its default without one).
fn spawn_options(
    id: &str,
    pool: usize,
    policy: Option<germline_policy::pool::PoolSettings>,
) -> SpawnOptions {
    let settings = policy.unwrap_or_default();
    let (min, max) = match (pool, policy) {
        (n, _) if n > 0 => (n, n),
        (_, Some(p)) => (p.min, p.max),
        (_, None) => (0, 0),
    };
    let mut opts = SpawnOptions::new(id);
    opts.min = min;
    opts.max = max;
    opts.memory_cap_bytes = settings.memory_bytes;
    opts
}

/// The pipeline's stages of one call on `$source` (a germline or a spawn pool: the stages do
/// not know which) and this runtime's broker, evidence and limits.
macro_rules! stages_over {
    ($rt:expr, $source:expr) => {
        Stages {
            source: $source,
            broker: &mut $rt.broker,
            release: &$rt.release,
            user: &$rt.user,
            evidence: &mut $rt.evidence,
            limiter: &$rt.limiter,
            metrics: $rt.metrics.as_deref(),
            twin_on: $rt.twin_on,
            outbox: $rt.outbox.as_deref(),
            mode: $rt.mode,
            data_sent: &mut $rt.data_sent,
            last_requests: &mut $rt.last_requests,
            state: $rt.file_state.as_ref(),
            writes: $crate::pipeline::CallWrites {
                journal: $rt.writes_journal.clone(),
                summary: None,
            },
            concurrent: $rt.concurrent_copies,
        }
    };
}

/// The view of a runtime its observers are told through ([`crate::observe`]), borrowed field
/// by field, so that the runtime's observers can be borrowed mutably beside it.
macro_rules! view_of {
    ($rt:expr) => {
        RuntimeView {
            release: &$rt.release,
            mode: $rt.mode,
            lifetime: $rt.lifetime,
            pid: $rt.backend.pid(),
            germline: $rt.backend.germline(),
            evidence: &$rt.evidence,
            last_requests: &$rt.last_requests,
        }
    };
}

impl Runtime {
    /// Starts the release's germline (or the baseline's process) for one session, configured
    /// as `cfg` says ([`RuntimeBuilder::build`]).
    pub(crate) fn start(cfg: RuntimeBuilder) -> Result<Runtime, StartError> {
        let RuntimeBuilder {
            mode,
            release,
            broker,
            pool,
            spawn_pool,
            reaper,
            copy_cpus: _,
            user,
            evidence,
            limiter,
            lifetime,
            restart_window,
            metrics,
            tracer,
            outbox,
            launcher: runtime_launcher,
            status: _,
            read_as,
            observers: _,
            hub,
            concurrent_copies,
        } = cfg;
        let mut observers = Observers::default();
        if let Some(m) = &metrics {
            observers.push(Box::new(m.clone()));
        }
        if let Some(t) = tracer {
            observers.push(Box::new(t));
        }
        let limits = Limits::default();
        // A release with state in files keeps a germline per session: the hub's germline has
        // no initial-state mount and its copies no state tmpfs (issue 27's state is not yet
        // wired through the hub).
        let hub = hub.filter(|_| {
            matches!(mode, Mode::Germline | Mode::Nosplit) && release.manifest.state.is_empty()
        });
        // The parts that differ: a shared germline (`germline serve`) has no germline, CA
        // directory or proxy of this runtime's own; everything else is the session's.
        let writes_journal = matches!(mode, Mode::Germline | Mode::Nosplit)
            .then(|| crate::writes::journal_dir(broker.state_dir()));
        if let Some(j) = &writes_journal {
            // A commit killed midway is completed (its journal is complete) or undone.
            match crate::commit::recover(j) {
                Ok(r) if r != crate::commit::Recovered::default() => eprintln!(
                    "germline: writes: {} interrupted commits completed, {} undone",
                    r.rolled_forward, r.removed
                ),
                Ok(_) => {}
                Err(e) => eprintln!("germline: writes: recovery of {}: {e}", j.display()),
            }
        }
        let (backend, ca_dir, proc_spec, host_proxy, launch, file_state) = match hub {
            Some(hub) => (
                Backend::Hub(Box::new(HubSource::new(hub))),
                PathBuf::new(),
                None,
                None,
                None,
                None,
            ),
            None => {
                let n = next_runtime_number();
                // CA bundles that add the broker's deployment CA, for every copy's TLS clients. They
                // must be readable by the germline's unprivileged user: a 0755 directory of our own.
                let ca_dir = germline_sys::paths::ca_dir(std::process::id(), n, mode.name());
                // Removed on every error below (the germline not starting among them); kept once the
                // runtime exists, whose `stop` removes it.
                let ca_made = crate::sidecar::DirGuard::new(ca_dir.clone());
                let trust = copy_trust(&release, &broker, read_as.as_ref(), &ca_dir)?;
                let copy_proxy = broker.client.copy_proxy().map_err(StartError::CopyProxy)?;
                let mut host_proxy = None;
                let mut proc_spec = None;
                let mut launch = None;
                let mut file_state = None;
                let backend = match mode {
                    Mode::Germline | Mode::Nosplit => {
                        let mut spec = launch_spec(&release, &trust, copy_proxy)?;
                        if !release.manifest.state.is_empty() {
                            if spec.execution == germline_sandbox::Execution::Spawn {
                                return Err(StartError::NoExecution {
                                    release: release.label(),
                                    reason: "the manifest declares state paths, which only forked \
                                             copies keep (spawned copies have no state tmpfs yet)"
                                        .into(),
                                });
                            }
                            let st = crate::state::FileState::open(
                                broker.state_dir(),
                                &release.digest,
                                &user,
                                &release.manifest.state,
                            )
                            .map_err(|source| StartError::State {
                                release: release.label(),
                                source,
                            })?;
                            // Generations no horizon points at any more (docs/policy.md); a
                            // sweep that cannot run now is the next start's.
                            if let Err(e) = st.sweep_unreferenced(
                                &broker.state_dir().join("slots.db"),
                                &release.digest,
                                &user,
                                crate::state::SWEEP_GRACE,
                            ) {
                                eprintln!("germline run: state in files not swept: {e}");
                            }
                            // The germline sees the initial state read-only at /run/state; each copy
                            // gets its own tmpfs there, filled with its horizon's state.
                            spec.extra_mounts.push(BindMount {
                                source: st.initial_dir().to_path_buf(),
                                target: germline_sandbox::spec::STATE_DIR.into(),
                            });
                            spec.state_bytes = crate::state::STATE_TMPFS_BYTES;
                            file_state = Some(st);
                        }
                        let id = germline_sys::paths::run_germline_id(
                            std::process::id(),
                            n,
                            mode.name(),
                        );
                        if spec.execution == germline_sandbox::Execution::Spawn {
                            // Node copies get the call's twin inputs through the shim's
                            // preload (crate::twin_node); off for the reference runs.
                            if twin_inputs_on() {
                                crate::twin_node::install(&mut spec, &ca_dir)?;
                            }
                            let opts = spawn_options(&id, pool, spawn_pool);
                            let p = SpawnPool::start(spec, opts).map_err(|source| {
                                StartError::Spawn {
                                    release: release.label(),
                                    source,
                                }
                            })?;
                            Backend::Spawn(Box::new(p))
                        } else {
                            let mut opts = Options::new(&id);
                            opts.pool = pool;
                            // Multi-group calls deepen the pool up to the operator's bound.
                            opts.pool_max = limiter.limits().pool_max;
                            // The policy's pool memory cap, as for a spawned pool.
                            opts.memory_cap_bytes =
                                Some(spawn_pool.unwrap_or_default().memory_bytes);
                            opts.reaper = reaper;
                            launch = Some((spec.clone(), opts.clone()));
                            let g = Germline::start(spec, opts).map_err(|source| {
                                StartError::Germline {
                                    release: release.label(),
                                    source,
                                }
                            })?;
                            Backend::Germline(Box::new(g))
                        }
                    }
                    Mode::SigPin | Mode::SigIfc | Mode::ConfinedIfc | Mode::FreshIfc => {
                        let confined = matches!(mode, Mode::ConfinedIfc | Mode::FreshIfc);
                        let addr = if confined {
                            copy_proxy.to_string()
                        } else {
                            let l = std::net::TcpListener::bind("127.0.0.1:0")
                                .map_err(StartError::ProxyListener)?;
                            let a = l
                                .local_addr()
                                .map_err(StartError::ProxyListener)?
                                .to_string();
                            host_proxy = Some(l);
                            a
                        };
                        let spec = ProcessSpec {
                            rootfs: release.rootfs.clone(),
                            argv: release.manifest.entry.clone(),
                            env: base_env()
                                .into_iter()
                                .chain(proxy_env(&addr))
                                .chain(trust.env.iter().cloned())
                                .collect(),
                            binds: trust.mounts.clone(),
                            confined,
                            readable: release.manifest.readable_paths.clone(),
                            shared_tmp: Some(user_tmp_dir()),
                            proxy_port: copy_proxy.port(),
                            state: baseline_state(&release, &broker, &user)?,
                        };
                        proc_spec = Some(spec.clone());
                        if mode == Mode::FreshIfc {
                            Backend::Fresh
                        } else {
                            let mut p = ToolProcess::start(&spec)?;
                            p.ensure_initialized(
                                Instant::now() + Duration::from_millis(limits.init_timeout_ms),
                            )
                            .map_err(|reason| StartError::Init {
                                release: release.label(),
                                reason: reason.to_string(),
                            })?;
                            Backend::Process(p)
                        }
                    }
                };
                (
                    backend,
                    ca_made.keep(),
                    proc_spec,
                    host_proxy,
                    launch,
                    file_state,
                )
            }
        };
        Ok(Runtime {
            ca_dir,
            mode,
            release,
            broker,
            backend,
            proc_spec,
            host_proxy,
            limits,
            user,
            twin_on: twin_inputs_on(),
            evidence,
            limiter,
            metrics,
            observers,
            last_requests: Vec::new(),
            lifetime,
            launch,
            generation: 0,
            fresh_due: false,
            germline_down: None,
            restarts: Vec::new(),
            restart_window,
            data_sent: false,
            outbox,
            launcher: runtime_launcher,
            file_state,
            writes_journal,
            concurrent_copies,
            observe_after_answer: false,
            deferred: None,
            doorbell: None,
        })
    }

    /// The runtime this is: germline execution or a baseline.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The verified release this runtime serves.
    pub fn release(&self) -> &Release {
        &self.release
    }

    /// The broker sidecar this runtime talks to.
    pub fn broker(&self) -> &Sidecar {
        &self.broker
    }

    /// Pins the germline (and so every copy it forks, and every germline a single-shot
    /// lifetime starts later) or the baseline's persistent process to `cpus`; the shim and
    /// the broker keep their own affinity (`germline run --copy-cpus`, `germline bench --pin
    /// split`). A fresh-ifc process per call inherits the shim's.
    pub(crate) fn set_copy_cpus(&mut self, cpus: &[usize]) -> Result<(), StartError> {
        if let Some((_, opts)) = &mut self.launch {
            opts.cpus = cpus.to_vec();
        }
        // The pool's copies were forked before: pin them too.
        let copies = self
            .germline()
            .map(Germline::copy_processes)
            .unwrap_or_default();
        for pid in self.pid().into_iter().chain(copies) {
            germline_sandbox::sys::set_affinity(pid, cpus).map_err(|source| {
                StartError::Affinity {
                    cpus: cpus.to_vec(),
                    source,
                }
            })?;
        }
        Ok(())
    }

    /// Whether this runtime's copies run the tool as PID 2 under a reaper (`[copies] reaper`).
    pub fn copy_reaper(&self) -> bool {
        match &self.backend {
            Backend::Hub(h) => h.reaper(),
            _ => self.launch.as_ref().is_some_and(|(_, o)| o.reaper),
        }
    }

    /// Pid of the germline or the persistent process, for reports and cleanup checks.
    pub fn pid(&self) -> Option<i32> {
        self.backend.pid()
    }

    pub fn germline(&self) -> Option<&Germline> {
        self.backend.germline()
    }

    /// Tells every observer of this runtime, through a view of it ([`crate::observe`]).
    fn notify(&mut self, mut f: impl FnMut(&mut dyn CallObserver, &RuntimeView<'_>)) {
        if self.observers.is_empty() {
            return;
        }
        let view = view_of!(self);
        self.observers.each(|o| f(o, &view));
    }

    /// `f` on a view of this runtime, as its observers see it.
    pub(crate) fn observe_with<T>(&self, f: impl FnOnce(&RuntimeView<'_>) -> T) -> T {
        f(&view_of!(self))
    }

    /// The germline, to fork copies outside a call (`germline bench`'s memory of live copies).
    pub fn germline_mut(&mut self) -> Option<&mut Germline> {
        match &mut self.backend {
            Backend::Germline(g) => Some(g),
            _ => None,
        }
    }

    /// A request that carries no data (`tools/list`, `resources/*`, `prompts/*`), answered by
    /// a data-free copy (or the baseline's process).
    pub fn passthrough(&mut self, method: &str, params: Value) -> Result<Value, RunError> {
        self.ensure_germline().map_err(said)?;
        let deadline = Instant::now() + self.limits.deadline();
        match &mut self.backend {
            Backend::Germline(g) => {
                let _permit = self.limiter.admit_copy(0).map_err(limit)?;
                // The agent's own handshake goes to a copy that has made none (never a pool
                // copy: the agent's protocol version may differ from the shim's).
                let copy = if method == "initialize" {
                    g.fork_copy()
                } else {
                    g.copy()
                };
                let r = copy.and_then(|mut copy| {
                    let r = (|| {
                        g.prepare_copy(&mut copy, &[])?;
                        copy.deliver(&[])?;
                        copy.mcp_call_method(method, params)
                    })();
                    g.retire(copy, r)
                });
                r.map_err(|e| match g.death(Duration::from_millis(250)) {
                    Some(d) => {
                        let text = format!(
                            "{}: {d}; this request failed with it, and a fresh germline serves \
                             the next one",
                            self.release.label()
                        );
                        self.germline_down = Some(d);
                        said(text)
                    }
                    None => RunError::Tool(ToolFailure::Copy(e)),
                })
            }
            Backend::Hub(h) => {
                let _permit = self.limiter.admit_copy(0).map_err(limit)?;
                use crate::pipeline::{CopySource, SourcedCopy};
                // As for a germline of the runtime's own (above).
                let copy = h.passthrough_copy(method == "initialize");
                let r = copy.and_then(|mut copy| {
                    let r = (|| {
                        h.prepare_copy(&mut copy, &[])?;
                        copy.deliver(&[])?;
                        copy.copy()?.mcp_call_method(method, params)
                    })();
                    h.retire(copy, r)
                });
                r.map_err(|e| RunError::Tool(ToolFailure::Copy(e)))
            }
            Backend::Spawn(pool) => {
                let _permit = self.limiter.admit_copy(0).map_err(limit)?;
                // The agent's own handshake goes to a copy spawned without the shim's.
                let copy = if method == "initialize" {
                    pool.take_fresh(deadline)
                } else {
                    pool.take(&json!({}), deadline)
                };
                let copy = copy.map_err(|e| RunError::Sandbox(SandboxFailure::Sandbox(e)))?;
                let mut copy = copy;
                let r = copy.mcp_call_method(method, params);
                pool.retire(copy, r)
                    .map_err(|e| RunError::Tool(ToolFailure::Copy(e)))
            }
            Backend::Process(p) => {
                p.ensure_initialized(deadline).map_err(RunError::Tool)?;
                p.request(method, params, deadline).map_err(RunError::Tool)
            }
            Backend::Fresh => {
                let spec = self
                    .proc_spec
                    .as_ref()
                    .ok_or_else(|| said("no process spec".into()))?;
                let mut p = ToolProcess::start(spec).map_err(|e| RunError::Sandbox(e.into()))?;
                p.ensure_initialized(deadline).map_err(RunError::Tool)?;
                p.request(method, params, deadline).map_err(RunError::Tool)
            }
        }
    }

    fn begin(
        &mut self,
        meta: &CallMeta,
        mode: PlanMode,
        open: bool,
    ) -> Result<(u64, germline_broker::Twin, Plan), RunError> {
        crate::pipeline::begin(
            &mut self.broker,
            &self.release,
            &self.user,
            meta,
            mode,
            open,
            None,
        )
    }

    /// One `tools/call` without a live agent: notifications come back in the outcome,
    /// requests to the agent are refused.
    pub fn call(&mut self, meta: &CallMeta) -> Result<Outcome, RunError> {
        let mut link = Buffered::default();
        let mut agent = Agent {
            link: &mut link,
            capabilities: json!({}),
        };
        let mut out = self.call_with(meta, &mut agent)?;
        out.notifications = link.notifications;
        Ok(out)
    }

    /// One `tools/call`, talking to the agent during the call through `agent` (see
    /// [`crate::relay`]).
    pub fn call_with(
        &mut self,
        meta: &CallMeta,
        agent: &mut Agent<'_>,
    ) -> Result<Outcome, RunError> {
        // The last call's observers, if its front did not tell them after its answer.
        self.after_answer();
        let started = std::time::SystemTime::now();
        let t0 = Instant::now();
        self.last_requests.clear();
        let mut entered = 0;
        let r = self
            .limiter
            .admit_call()
            .map_err(limit)
            .and_then(|()| self.ensure_germline().map_err(said))
            .and_then(|()| self.relaunch_if_due().map_err(said))
            .map(|()| entered = crate::laps::micros(t0))
            .and_then(|()| match self.mode {
                Mode::Germline => self.call_germline_recovering(meta, PlanMode::Split, agent),
                Mode::Nosplit => self.call_germline_recovering(meta, PlanMode::NoSplit, agent),
                _ => self.call_process(meta, agent),
            });
        if self.lifetime == germline_policy::limits::Lifetime::SingleShot && self.launch.is_some() {
            self.fresh_due = true;
        }
        let call = CallView {
            tool: &meta.tool,
            started,
            result: &r,
            traceparent: meta.traceparent.as_deref(),
            tracestate: meta.tracestate.as_deref(),
        };
        let s = Instant::now();
        // A front that writes the answer itself tells the observers after it did
        // ([`Runtime::after_answer`]); a failed call's are told now (its error is not kept).
        match (&r, self.observe_after_answer) {
            (Ok(out), true) => self.deferred = Some(crate::observe::DeferredCall::of(&call, out)),
            _ => self.notify(|o, rt| o.after_call(rt, &call)),
        }
        let mut r = r;
        if let Ok(out) = &mut r {
            out.phases.extend([
                ("runtime.enter", entered),
                ("runtime.observers", crate::laps::micros(s)),
            ]);
        }
        r
    }

    /// Observers of a successful call are told after its answer went out, when the front
    /// calls [`Runtime::after_answer`] (`germline run`'s stdio loop): metrics, traces and the
    /// state file need not precede the answer, and nothing fail-closed is an observer (the
    /// broker's audit log is written by the broker, inside its round trips). Off by default:
    /// a caller that reads the observers right after [`Runtime::call_with`] sees them told.
    pub fn observe_after_answer(&mut self, on: bool) {
        self.observe_after_answer = on;
        if !on {
            self.after_answer();
        }
    }

    /// The transport's doorbell (`germline_sys::doorbell`): the idle steps' waits (a spawned
    /// pool's launch in flight, the forked germline's last copy still exiting) return as soon
    /// as it rings, so the agent's next request waits for no idle timer.
    pub fn set_doorbell(&mut self, bell: std::sync::Arc<germline_sys::doorbell::Doorbell>) {
        if let Backend::Spawn(pool) = &mut self.backend {
            pool.set_doorbell(bell.clone());
        }
        self.doorbell = Some(bell);
    }

    /// One more observer of this runtime's calls, told after those it has.
    pub fn add_observer(&mut self, o: Box<dyn CallObserver>) {
        self.observers.push(o);
    }

    /// Tells the observers of the last call, if they wait for its answer
    /// ([`Runtime::observe_after_answer`]); nothing otherwise. Also done before the next call
    /// and at stop, so no call goes untold.
    pub fn after_answer(&mut self) {
        let Some(d) = self.deferred.take() else {
            return;
        };
        let result = Ok(d.outcome);
        let call = CallView {
            tool: &d.tool,
            started: d.started,
            result: &result,
            traceparent: d.traceparent.as_deref(),
            tracestate: d.tracestate.as_deref(),
        };
        self.notify(|o, rt| o.after_call(rt, &call));
    }

    /// One call under germline execution ([`crate::pipeline`]), recovering from a germline
    /// that died: if it died before
    /// any copy of the call got data (found dead at the call's first fork: under cgroup v1 a
    /// frozen germline killed between calls dies only when thawed), the call runs once more on
    /// a fresh germline; if it died later, the call fails with an error naming the germline,
    /// its pid and how it ended, and a fresh germline serves the next call.
    fn call_germline_recovering(
        &mut self,
        meta: &CallMeta,
        plan_mode: PlanMode,
        agent_link: &mut Agent<'_>,
    ) -> Result<Outcome, RunError> {
        if let Backend::Spawn(pool) = &mut self.backend {
            // No germline to die: every copy is fresh, a failed spawn is the call's error.
            return stages_over!(self, pool.as_mut()).call(meta, plan_mode, agent_link);
        }
        if let Backend::Hub(h) = &mut self.backend {
            // The hub restarts a germline that died, before the next copy it hands out.
            return stages_over!(self, h.as_mut()).call(meta, plan_mode, agent_link);
        }
        let r = self
            .stages()
            .and_then(|mut s| s.call_sendable(meta, plan_mode, agent_link));
        let Some(death) = self.died_in(&r) else {
            return r;
        };
        if !self.data_sent {
            self.germline_down = Some(death);
            self.ensure_germline().map_err(said)?;
            let r = self
                .stages()
                .and_then(|mut s| s.call_sendable(meta, plan_mode, agent_link));
            let Some(death) = self.died_in(&r) else {
                return r;
            };
            return Err(self.died_during_call(death));
        }
        Err(self.died_during_call(death))
    }

    /// How the germline died, if `r` failed and the germline is gone (only failures are
    /// looked at: a call that succeeded pays nothing for this).
    fn died_in(&mut self, r: &Result<Outcome, RunError>) -> Option<String> {
        if !matches!(r, Err(RunError::Tool(_) | RunError::Sandbox(_))) {
            return None;
        }
        match &mut self.backend {
            // A germline that is PID 1 of its namespace exits after its copies: the copy's
            // failure may be seen first, so wait a little for the germline's own exit.
            Backend::Germline(g) => g.death(Duration::from_millis(250)),
            _ => None,
        }
    }

    /// The error of a call whose germline died during it; a fresh one is due.
    fn died_during_call(&mut self, death: String) -> RunError {
        let text = format!(
            "{}: {death} during this call, which failed with it; a fresh germline serves the \
             next call",
            self.release.label()
        );
        self.germline_down = Some(death);
        said(text)
    }

    /// Before a germline serves anything: if it died (found now, or by an earlier call),
    /// stops what is left of it and starts a fresh one from the same launch spec, checked as
    /// at start (initialisation, G1-G3 before its first fork, every copy's checks). Bounded:
    /// at most [`MAX_RESTARTS`] within `restart_window`, with a growing wait; beyond that
    /// the use is refused with why and what to do, until the window has passed.
    fn ensure_germline(&mut self) -> Result<(), String> {
        let Backend::Germline(g) = &mut self.backend else {
            return Ok(());
        };
        if self.germline_down.is_none() {
            // Cheap while alive: a waitpid(WNOHANG) and a poll of a pidfd.
            self.germline_down = g.death(Duration::ZERO);
        }
        let Some(death) = self.germline_down.clone() else {
            return Ok(());
        };
        let now = Instant::now();
        let window = self.restart_window;
        self.restarts.retain(|t| now.duration_since(*t) < window);
        if self.restarts.len() >= MAX_RESTARTS {
            let again = self
                .restarts
                .first()
                .map_or(window, |t| window.saturating_sub(now.duration_since(*t)));
            return Err(format!(
                "{}: the germline died again after {} restarts within {} s (last: {death}); it is \
                 not restarted again for {} s. Find what kills it (the OOM killer in `dmesg`, \
                 another process signalling it, a crash of the release at its fork), then \
                 restart germline; a call after {} s tries once more",
                self.release.label(),
                self.restarts.len(),
                window.as_secs(),
                again.as_secs() + 1,
                again.as_secs() + 1,
            ));
        }
        let wait = RESTART_BACKOFF.get(self.restarts.len()).copied();
        std::thread::sleep(wait.unwrap_or(Duration::from_secs(1)));
        self.restarts.push(Instant::now());
        eprintln!(
            "germline: {}: {death}; starting a fresh germline (restart {} of at most {} within {} s)",
            self.release.label(),
            self.restarts.len(),
            MAX_RESTARTS,
            window.as_secs()
        );
        self.start_fresh_germline("a fresh germline, after one died,")?;
        self.germline_down = None;
        Ok(())
    }

    /// The stages of one call under germline execution, on this runtime's germline and
    /// broker ([`crate::pipeline`]).
    fn stages(&mut self) -> Result<Stages<'_, Germline, Sidecar>, RunError> {
        let Backend::Germline(g) = &mut self.backend else {
            return Err(said("no germline".into()));
        };
        Ok(stages_over!(self, g.as_mut()))
    }

    fn call_process(
        &mut self,
        meta: &CallMeta,
        agent: &mut Agent<'_>,
    ) -> Result<Outcome, RunError> {
        let t0 = Instant::now();
        let open = matches!(self.mode, Mode::SigPin | Mode::SigIfc);
        let (call, _twin, plan) = self.begin(meta, PlanMode::NoSplit, open)?;
        let deadline = Instant::now() + self.limits.deadline();
        let mut fresh;
        let p: &mut ToolProcess = match &mut self.backend {
            Backend::Process(p) => p,
            Backend::Fresh => {
                let spec = self
                    .proc_spec
                    .as_ref()
                    .ok_or_else(|| said("no process spec".into()))?;
                fresh = ToolProcess::start(spec).map_err(|e| RunError::Sandbox(e.into()))?;
                &mut fresh
            }
            Backend::Germline(_) | Backend::Spawn(_) | Backend::Hub(_) => {
                return Err(said("no process".into()))
            }
        };
        if !p.alive() {
            let _ = self.broker.client.end_call(call);
            return Err(RunError::Tool(ToolFailure::Said(
                "the tool process has exited".into(),
            )));
        }
        let args = match meta.arguments_for(&|_| true, ITEMS_DIR) {
            Ok(a) => a,
            Err(e) => {
                let _ = self.broker.client.end_call(call);
                return Err(RunError::Invalid(e));
            }
        };
        let start = match &self.host_proxy {
            Some(l) => self
                .broker
                .client
                .start_copy_on(call, 0, l.as_fd(), deadline),
            None => match File::open(format!("/proc/{}/ns/net", p.pid)) {
                Ok(ns) => self.broker.client.start_copy(call, 0, ns.as_fd(), deadline),
                Err(e) => {
                    let _ = self.broker.client.end_call(call);
                    return Err(RunError::Sandbox(SandboxFailure::ProcessNetns(e)));
                }
            },
        };
        if let Err(e) = start {
            let _ = self.broker.client.end_call(call);
            return Err(broker_failed(e));
        }
        let files: Vec<(String, Vec<u8>)> = meta
            .items
            .iter()
            .filter_map(|i| i.file_name.clone().map(|f| (f, i.contents.clone())))
            .collect();
        let token = meta.progress_token.clone();
        let call_meta = token.clone().map(|t| json!({"progressToken": t}));
        // A baseline is one process serving the agent: it talks to the agent as the
        // unprotected server would, with no admissibility check.
        let client = &self.broker.client;
        let agent_clearance = agent_clearance_of(meta);
        let cancel = agent.cancel();
        p.set_cancel(cancel.clone());
        let mut relay = CopyRelay::new(agent, true, token, None, deadline).with_raise(move || {
            client
                .raise_copy(call, 0, &agent_clearance)
                .map_err(|e| e.to_string())
        });
        let mut args = args;
        let r = p
            .put_items(&files)
            .and_then(|()| p.put_dirs(meta, &mut args))
            .map_err(ToolFailure::Said)
            .and_then(|()| {
                p.mcp_call(&meta.tool, args, call_meta, deadline, &mut |m| {
                    relay.handle(m)
                })
            });
        p.set_cancel(None);
        let cancelled = cancel.as_ref().is_some_and(|c| c.fired());
        if cancelled {
            // As the unprotected server would be: the process is told, and stops (or not:
            // its late answer is skipped, the agent gets none).
            p.cancel_last();
        }
        let answered = relay.answered;
        let outcome = self.broker.client.end_copy(call, 0).map(|(o, _)| o);
        let _ = self.broker.client.end_call(call);
        if cancelled {
            return Err(RunError::Cancelled);
        }
        let outcome = outcome.map_err(broker_failed)?;
        let r = r.and_then(tool_result);
        let mut label = match self.mode {
            Mode::SigPin => None,
            // Sig+IFC labels by the call's own inputs only (it sees no state or egress).
            Mode::SigIfc => Some(meta.label_of_all()),
            _ => Some(outcome.label.clone()),
        };
        if let (Some(l), true) = (label.as_mut(), answered) {
            if let Some(c) = meta.consumers.iter().find(|c| c.name == AGENT) {
                l.join(&c.clearance);
            }
        }
        // One process serves every consumer: each recipient gets the same result.
        let deliveries: Vec<Delivery> = meta
            .consumers
            .iter()
            .filter(|c| c.name != AGENT)
            .map(|c| Delivery {
                consumer: c.name.clone(),
                result: ToolFailure::delivered(&r),
                label: label.clone(),
            })
            .collect();
        let mut result = r.map_err(RunError::Tool)?;
        let recipients = (!deliveries.is_empty()).then(|| {
            outbox::deliver_all(
                self.outbox.as_deref(),
                &meta.tool,
                deliveries,
                &meta.consumers,
            )
        });
        if let Some(l) = &label {
            let mut g = json!({"label": l, "copies": plan.groups.len(), "mode": self.mode.name()});
            if let Some(r) = &recipients {
                g["recipients"] = Value::Object(r.clone());
            }
            add_meta(&mut result, g);
        } else if let Some(r) = recipients {
            add_meta(&mut result, json!({"recipients": r}));
        }
        Ok(Outcome {
            result,
            label,
            copies: 1,
            triggers: outcome.triggers.len(),
            phases: {
                let mut laps = crate::laps::Laps::new();
                laps.lap("total", t0);
                laps.into_phases()
            },
            notifications: Vec::new(),
        })
    }

    /// Work off the call's critical path, after its answer went out: refill the pool of
    /// pre-forked, checked, data-free copies.
    pub fn idle(&mut self) {
        self.process_evidence();
        while self.idle_work(false) {}
        self.notify(|o, rt| o.after_idle(rt));
    }

    /// Runs every pending evidence job (off the agent's critical path): its re-runs through
    /// this runtime ([`crate::evidence::Replay`]), then its verdict into the evidence layer.
    pub fn process_evidence(&mut self) {
        while self.evidence_step() {}
    }

    /// Claims the pending evidence jobs of this release that an earlier runtime left (it
    /// ended before their re-runs); they run with this runtime's own
    /// ([`crate::evidence::Evidence::resume`]).
    pub fn resume_evidence(&mut self) -> usize {
        self.evidence.resume(&self.release.digest)
    }

    /// Runs one pending evidence job, if any: `true` if one ran. A transport that can tell a
    /// request is waiting stops between jobs.
    pub fn evidence_step(&mut self) -> bool {
        if let Some(mut job) = self.evidence.next_job() {
            job.reaper = self.copy_reaper();
            let tries = self.evidence.tries();
            let declared = self.release.manifest.deterministic;
            let t0 = Instant::now();
            let r = crate::evidence::rerun(self, &job, tries, declared);
            let label = self.release.label();
            self.evidence.settle(
                (&self.release.digest, &label, declared),
                &job,
                r,
                t0.elapsed(),
            );
            self.notify(|o, rt| o.after_verdict(rt));
            true
        } else {
            false
        }
    }

    /// One step of [`Runtime::idle`]: forks at most one pool copy; `true` while more are due.
    /// A transport that can tell a request is waiting stops between steps.
    pub fn idle_step(&mut self) -> bool {
        self.idle_work(true)
    }

    /// [`Runtime::idle_step`]; `wait_exits`: also wait (a millisecond per step, for at most
    /// 100 ms after its kill) for the last copy's exit, to remove its cgroup between calls.
    fn idle_work(&mut self, wait_exits: bool) -> bool {
        if self.germline_down.is_some() {
            // Off the call's path: the failed call's answer went out; an error (a germline
            // that keeps dying) shows at the next call.
            let _ = self.ensure_germline();
            self.notify(|o, rt| o.after_idle_step(rt));
            return false;
        }
        if self.fresh_due {
            // Off the call's path: the answer went out; an error shows at the next call.
            let _ = self.relaunch_if_due();
            self.notify(|o, rt| o.after_idle_step(rt));
            return false;
        }
        let more = match &mut self.backend {
            Backend::Germline(g) => {
                let more = g.refill_one().unwrap_or(false);
                g.reap();
                // The last call's copy is still exiting (at SCHED_IDLE): wait a little, a
                // millisecond per step (the transport checks for the agent's next request
                // between steps), so that its cgroup is removed here rather than at the next
                // call's fork.
                if wait_exits && !more && g.exiting_since(Duration::from_millis(100)) {
                    match &self.doorbell {
                        Some(b) => {
                            let _ = b.sleep(Duration::from_millis(1));
                        }
                        None => std::thread::sleep(Duration::from_millis(1)),
                    }
                    return true;
                }
                more
            }
            // Between calls only (no copy holds data): a spawn is timed by no data copy.
            Backend::Spawn(pool) => pool.refill_one().unwrap_or(false),
            _ => false,
        };
        if !more {
            self.prepare_endpoints();
            self.notify(|o, rt| o.after_idle_step(rt));
        }
        more
    }

    /// Between calls, once the pool is filled: the broker binds the endpoints of the copies
    /// that joined it (`germline_broker::prepared`), so that a call's `start_copy` only binds
    /// one to the call. A failure costs nothing but speed: that call's `start_copy` binds its
    /// endpoint itself, as without this.
    fn prepare_endpoints(&mut self) {
        self.forget_endpoints();
        let netns = match &mut self.backend {
            Backend::Germline(g) => crate::pipeline::CopySource::endpoints_to_prepare(&mut **g),
            Backend::Spawn(p) => crate::pipeline::CopySource::endpoints_to_prepare(&mut **p),
            _ => return,
        };
        for ns in netns {
            let _ = self
                .broker
                .client
                .prepare_copy(std::os::fd::AsFd::as_fd(&ns));
        }
    }

    /// The broker forgets the endpoints it prepared for pool copies that were dropped unused
    /// (`germline_sandbox::offered`): each would otherwise pin its copy's network namespace
    /// in the broker until evicted. Between calls and when the pool stops; a failure leaves
    /// the listener to the broker's eviction, as before.
    fn forget_endpoints(&mut self) {
        let netns = match &mut self.backend {
            Backend::Germline(g) => g.endpoints_to_forget(),
            Backend::Spawn(p) => p.endpoints_to_forget(),
            _ => return,
        };
        self.broker.forget(netns);
    }

    /// `single-shot`: stops the germline that served the last call and starts a fresh one.
    fn relaunch_if_due(&mut self) -> Result<(), String> {
        if !self.fresh_due {
            return Ok(());
        }
        self.start_fresh_germline("a fresh single-shot germline")?;
        self.fresh_due = false;
        Ok(())
    }

    /// Stops the germline (whatever is left of it) and starts a fresh one from the same
    /// launch spec and options; `what` names it in an error.
    fn start_fresh_germline(&mut self, what: &str) -> Result<(), String> {
        let (Backend::Germline(g), Some((spec, opts))) = (&mut self.backend, &self.launch) else {
            return Ok(());
        };
        let _ = g.stop();
        // The stopped germline's pool copies (the fresh one lists its own).
        self.broker.forget(g.endpoints_to_forget());
        self.generation += 1;
        let mut opts = opts.clone();
        opts.id = format!("{}-g{}", opts.id, self.generation);
        let spec = spec.clone();
        let started = match &self.launcher {
            Some(l) => l
                .run(move || Germline::start(spec, opts))
                .map_err(|e| e.to_string())?,
            None => Germline::start(spec, opts),
        };
        let fresh =
            started.map_err(|e| format!("{}: {what} did not start: {e}", self.release.label()))?;
        **g = fresh;
        Ok(())
    }

    /// Stops the germline or process (the broker stops with the [`Sidecar`]).
    pub fn stop(&mut self) {
        self.after_answer();
        self.observers.each(|o| o.stopped());
        // The last commits' cleanups (issue 27: their staging directories in the host's tree).
        crate::commit::wait_for_cleanups();
        match &mut self.backend {
            Backend::Germline(g) => {
                let _ = g.stop();
            }
            Backend::Spawn(pool) => {
                // The pool's figures (issue 28): what a spawn costs and what a waiting copy holds.
                if let Some(st) = pool.stop() {
                    eprintln!(
                        "germline: {}: spawned copies: {} made, {:.0} ms each from launch to \
                         checked (mean), {} waiting with {:.1} MiB private memory (cap {} MiB); \
                         refill {} copies/s, {} kB private per pooled copy",
                        self.release.label(),
                        st.spawned,
                        st.mean_spawn_ms,
                        st.ready,
                        st.ready_private_bytes as f64 / f64::from(1u32 << 20),
                        st.memory_cap_bytes >> 20,
                        st.refill_per_s
                            .map_or_else(|| "-".to_string(), |r| format!("{r:.1}")),
                        st.pooled_copy_private_kb,
                    );
                    // The same figures for programs (`germline run-bench` reads this line).
                    if let Ok(j) = serde_json::to_string(&st) {
                        eprintln!("{SPAWN_POOL_LINE}{j}");
                    }
                }
            }
            Backend::Process(p) => p.kill(),
            Backend::Fresh => {}
            // The last session's release stops the shared germline.
            Backend::Hub(h) => h.release(),
        }
        // The stopped pool's copies: a broker this session did not start outlives it.
        self.forget_endpoints();
        self.broker.stop();
        if !self.ca_dir.as_os_str().is_empty() {
            let _ = std::fs::remove_dir_all(&self.ca_dir);
        }
    }
}

/// Probe and control re-runs (crate::evidence) go through the pipeline's stages.
impl crate::evidence::Replay for Runtime {
    fn replay_copy(
        &mut self,
        job: &crate::evidence::Job,
        view: &[String],
    ) -> Result<Vec<String>, RunError> {
        if let Backend::Spawn(pool) = &mut self.backend {
            return stages_over!(self, pool.as_mut()).replay_copy(job, view);
        }
        if let Backend::Hub(h) = &mut self.backend {
            return stages_over!(self, h.as_mut()).replay_copy(job, view);
        }
        self.stages()?.replay_copy(job, view)
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The agent's clearance in this call (public if the call has no agent: nothing to raise).
pub(crate) fn agent_clearance_of(meta: &CallMeta) -> Label {
    meta.consumers
        .iter()
        .find(|c| c.name == AGENT)
        .map(|c| c.clearance.clone())
        .unwrap_or_else(Label::public)
}

/// A `CallToolResult` must be an object; anything else from a copy is malformed.
pub(crate) fn tool_result(v: Value) -> Result<Value, ToolFailure> {
    if v.is_object() {
        Ok(v)
    } else {
        Err(ToolFailure::NotAnObject)
    }
}

pub(crate) fn add_meta(result: &mut Value, germline: Value) {
    if let Some(obj) = result.as_object_mut() {
        let meta = obj.entry("_meta").or_insert_with(|| json!({}));
        if !meta.is_object() {
            *meta = json!({});
        }
        meta["germline"] = germline;
    }
}

/// Whether `path` looks like a release (for error messages before verification).
pub fn looks_like_release(path: &Path) -> bool {
    germline_release::release::is_image_layout(path) || path.join("rootfs").is_dir()
}

#[cfg(test)]
mod execution_tests {
    use super::execution_of;
    use germline_sandbox::{Execution, Language};

    fn manifest(language: &str, execution: Option<&str>) -> germline_release::manifest::Manifest {
        let mut v = serde_json::json!({
            "schema": germline_release::manifest::SCHEMA, "name": "m", "version": "1.0.0",
            "language": language, "entry": ["/usr/bin/x"],
            "initialisation": {"imports": [], "warm": false},
            "tools": {"t": {"destinations": {"hosts": []}}},
            "readable_paths": ["/usr"], "deterministic": false
        });
        if let Some(e) = execution {
            v["execution"] = e.into();
        }
        let bytes = serde_json::to_vec(&v).expect("json");
        germline_release::manifest::Manifest::parse(&bytes, "m.json").expect("manifest")
    }

    /// Issue 28's first bug: `launch_spec` said Python whatever the manifest said, so a Node
    /// release ran the Python bootstrap under `node`.
    #[test]
    fn the_manifest_language_decides_fork_or_spawn() {
        let cases = [
            ("python", None, Language::Python, Execution::Fork),
            ("python", Some("fork"), Language::Python, Execution::Fork),
            ("python", Some("spawn"), Language::Python, Execution::Spawn),
            ("node", None, Language::Node, Execution::Spawn),
            ("node", Some("spawn"), Language::Node, Execution::Spawn),
            ("native", None, Language::Native, Execution::Spawn),
            ("binary", None, Language::Native, Execution::Spawn),
        ];
        for (lang, exec, want_lang, want_exec) in cases {
            assert_eq!(
                execution_of(&manifest(lang, exec)),
                Ok((want_lang, want_exec)),
                "{lang} {exec:?}"
            );
        }
    }

    #[test]
    fn a_node_release_that_asks_to_fork_is_refused_with_why() {
        let e = execution_of(&manifest("node", Some("fork"))).expect_err("refused");
        assert!(
            e.contains("cannot be forked") && e.contains("\"spawn\""),
            "{e}"
        );
    }
}
