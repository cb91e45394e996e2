//! `germline run`: the command an MCP client starts.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use germline_policy::Policy;
use germline_sys::user::FsCreds;

use crate::error::Error;
use crate::session::Session;
use germline_engine::builder::RuntimeBuilder;
use germline_engine::error::SidecarError;
use germline_engine::release::Release;
use germline_engine::runtime::Mode;
use germline_engine::sidecar::{Sidecar, SidecarConfig};

#[derive(Debug, Args, Clone)]
pub struct RunArgs {
    /// The deployer's policy: labels, clearances, destinations, argument rules.
    #[arg(long)]
    pub policy: PathBuf,
    /// The publisher's pinned public key (cosign `PUBLIC KEY` PEM).
    #[arg(long)]
    pub key: PathBuf,
    /// Which runtime serves the calls: germline execution, or a baseline for comparison.
    #[arg(long, value_enum, default_value = "germline")]
    pub mode: Mode,
    #[command(flatten)]
    pub broker: BrokerArgs,
    /// Pre-forked, checked, data-free copies to keep ready (germline and nosplit modes). For a
    /// release served by spawned copies, N > 0 fixes the pool's depth at N; 0 leaves it to the
    /// policy's `[pool]` table (none: no pool).
    #[arg(long, default_value_t = 0)]
    pub pool: usize,
    /// CPUs (comma-separated numbers) for the germline and its copies, or the baseline
    /// mode's server process; the shim and broker keep theirs (default: inherited).
    #[arg(long, value_delimiter = ',', value_name = "CPU,...")]
    pub copy_cpus: Vec<usize>,
    /// A germline that dies is restarted at most 3 times within this many seconds; a fourth
    /// death within them is refused until they have passed (docs/sandbox.md).
    #[arg(long, default_value_t = 60, value_name = "SECS",
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub germline_restart_window: u64,
    #[command(flatten)]
    pub evidence: EvidenceArgs,
    /// The maxima an image layout release is read under (docs/release.md).
    #[command(flatten)]
    pub image_limits: germline_release::untrusted::LimitArgs,
    #[command(flatten)]
    pub telemetry: TelemetryArgs,
    /// Where results for the recipients a tool's manifest names go (`<recipient>.jsonl`,
    /// docs/run.md); without it they are not delivered.
    #[arg(long)]
    pub outbox: Option<PathBuf>,
    /// Ask this `germline daemon` socket for the session (the default when not root:
    /// $GERMLINE_DAEMON_SOCKET, else /run/germline/daemon.sock; docs/daemon.md).
    #[arg(long, value_name = "SOCKET")]
    pub daemon: Option<PathBuf>,
    /// Run for this user: every file the session opens because the user named it is opened
    /// with the user's permissions (set by `germline daemon` only, from SO_PEERCRED).
    #[arg(long, hide = true, value_name = "UID:GID:GROUPS")]
    pub as_user: Option<FsCreds>,
    /// The signed release: an unpacked bundle (with rootfs/) or an OCI image layout.
    pub release: PathBuf,
}

/// The broker a session uses: `run` and `serve` take the same options.
#[derive(Debug, Args, Clone)]
pub struct BrokerArgs {
    /// Use the broker already serving at this control socket instead of starting one.
    #[arg(long)]
    pub broker: Option<PathBuf>,
    /// Where a broker this command starts keeps its CA and slots.
    #[arg(long, default_value = germline_sys::paths::BROKER_STATE)]
    pub state_dir: PathBuf,
    /// The broker's audit log (JSON lines).
    #[arg(long)]
    pub audit: Option<PathBuf>,
}

impl BrokerArgs {
    /// The broker these options name, started (or connected to) under `policy`.
    pub fn start(&self, policy: &std::path::Path) -> Result<Sidecar, SidecarError> {
        self.start_as(policy, None)
    }

    /// The same, a started broker reading the policy and its credential files with
    /// `read_as`'s permissions.
    pub fn start_as(
        &self,
        policy: &std::path::Path,
        read_as: Option<FsCreds>,
    ) -> Result<Sidecar, SidecarError> {
        Sidecar::start(&SidecarConfig {
            existing: self.broker.clone(),
            policy: policy.to_path_buf(),
            state_dir: self.state_dir.clone(),
            audit: self.audit.clone(),
            read_as,
        })
    }
}

/// Metrics and traces, off by default (`run` and `serve` take the same options).
#[derive(Debug, Args, Clone, Default)]
pub struct TelemetryArgs {
    /// Serve Prometheus metrics at http://ADDR/metrics (off by default; docs/operations.md).
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// Send one OpenTelemetry trace per call by OTLP to this collector (`http(s)://HOST:PORT`;
    /// OTLP/HTTP adds `/v1/traces`), over `OTEL_EXPORTER_OTLP_ENDPOINT`; off unless one of them
    /// is set (docs/operations.md "Traces").
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
}

impl TelemetryArgs {
    /// The OTLP tracer `--otlp-endpoint` or the `OTEL_EXPORTER_OTLP_*` variables ask for, if any.
    pub fn tracer(
        &self,
    ) -> Result<Option<Arc<germline_engine::trace::Tracer>>, germline_engine::error::TraceError>
    {
        Ok(germline_engine::trace::Tracer::start(self.otlp_endpoint.as_deref())?.map(Arc::new))
    }
}

/// The evidence layer's options (docs/evidence.md).
#[derive(Debug, Args, Clone)]
pub struct EvidenceArgs {
    /// Witness records, their items, the deployment key and the dampening ledger
    /// (default: <state-dir>/evidence).
    #[arg(long)]
    pub evidence: Option<PathBuf>,
    /// The name of the deployment key that signs witness records (<evidence>/keys/NAME.key,
    /// made on first use; its password is COSIGN_PASSWORD, empty if unset).
    #[arg(long, default_value = "deployment")]
    pub witness_key: String,
    /// Probe and control re-runs per trigger.
    #[arg(long, default_value_t = germline_engine::evidence::DEFAULT_TRIES)]
    pub probe_tries: usize,
    /// No probe replay, witness records or dampening (benchmarks).
    #[arg(long)]
    pub no_evidence: bool,
}

impl Default for EvidenceArgs {
    /// In-process sessions (benchmarks): evidence off.
    fn default() -> Self {
        Self {
            evidence: None,
            witness_key: "deployment".into(),
            probe_tries: germline_engine::evidence::DEFAULT_TRIES,
            no_evidence: true,
        }
    }
}

/// The evidence layer a runtime gets from its options (disabled with `--no-evidence`).
pub fn evidence_for(
    e: &EvidenceArgs,
    state_dir: &std::path::Path,
    policy: &Policy,
) -> Result<germline_engine::evidence::Evidence, germline_engine::error::EvidenceError> {
    if e.no_evidence {
        return Ok(germline_engine::evidence::Evidence::disabled());
    }
    germline_engine::evidence::Evidence::open(germline_engine::evidence::EvidenceConfig {
        dir: e
            .evidence
            .clone()
            .unwrap_or_else(|| state_dir.join("evidence")),
        key_name: e.witness_key.clone(),
        tries: e.probe_tries,
        params: policy.dampening().clone(),
    })
}

/// Verifies the release, starts the broker (unless given) and the germline.
///
/// With `--as-user` (a session `germline daemon` runs for an unprivileged user), the policy,
/// the key, the release and everything they lead to are read with that user's permissions,
/// here and in the broker this starts (docs/daemon.md).
pub fn start_session(a: &RunArgs) -> Result<Session, Error> {
    let as_user = a.as_user.as_ref();
    let policy = Arc::new(read_as(as_user, || Policy::load(&a.policy))??);
    germline_engine::limits::check_pool(policy.limits(), a.pool)?;
    if as_user.is_some() {
        // The node-wide copy slots are lock files root makes: in the node's directory, never
        // one a user's policy names.
        let dir = &policy.limits().node_dir;
        if dir != std::path::Path::new(germline_policy::limits::DEFAULT_NODE_DIR) {
            return Err(Error::UserPolicy {
                policy: a.policy.clone(),
                what: format!("limits.node_dir = {:?}", dir.display().to_string()),
            });
        }
    }
    let limits = a.image_limits.limits();
    let release = read_as(as_user, || Release::load_with(&a.release, &a.key, &limits))??;
    if as_user.is_some() {
        // A user's release often lies in their home: say so plainly rather than let the
        // germline's keeper fail to bind it ("Permission denied").
        if let Some(dir) = read_as(as_user, || unsearchable_by_others(&release.rootfs))? {
            return Err(Error::RootfsHidden {
                rootfs: release.rootfs.clone(),
                dir,
            });
        }
    }
    let lifetime = policy.lifetime(&release.manifest.name);
    if lifetime == germline_policy::limits::Lifetime::LongLived {
        return Err(Error::LongLived {
            release: release.label(),
            name: release.manifest.name.clone(),
        });
    }
    let broker = a.broker.start_as(&a.policy, a.as_user.clone())?;
    let outbox = a.outbox.as_deref().map(check_outbox).transpose()?;
    let evidence = evidence_for(&a.evidence, &a.broker.state_dir, &policy)?;
    let metrics = match a.telemetry.metrics_listen {
        Some(addr) => {
            let m = Arc::new(germline_engine::metrics::Metrics::new());
            m.add_release(
                &release.digest,
                &release.label(),
                broker.socket().to_path_buf(),
            );
            let local = germline_engine::metrics::serve(addr, m.clone())?;
            eprintln!("germline run: metrics at http://{local}/metrics");
            Some(m)
        }
        None => None,
    };
    let tracer = a.telemetry.tracer()?;
    let runtime = RuntimeBuilder::new(a.mode, release, broker)
        .policy(&policy)
        .pool(a.pool)
        .copy_cpus(&a.copy_cpus)
        .outbox(outbox)
        .restart_window(Duration::from_secs(a.germline_restart_window))
        .evidence(evidence)
        .metrics(metrics)
        .tracer(tracer)
        .status("run")
        .read_as(a.as_user.clone());
    let runtime = match as_user {
        // The user whose calls these are keys the broker's slots.
        Some(c) => runtime.user(&user_name(c.uid)),
        None => runtime,
    }
    .build()?;
    let mut session = Session::new(runtime, policy);
    session.read_as = a.as_user.clone();
    Ok(session)
}

/// The first directory from `/` to `rootfs` (its symlinks resolved) that others may not
/// search, if any: the germline's keeper binds the rootfs as the germline's unprivileged host
/// user, for whom only the "others" permission bits count.
fn unsearchable_by_others(rootfs: &std::path::Path) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = rootfs.canonicalize().ok()?;
    path.ancestors()
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .find(|d| std::fs::metadata(d).is_ok_and(|m| m.permissions().mode() & 0o001 == 0))
        .map(std::path::Path::to_path_buf)
}

/// Runs `f` with `creds`'s file permissions (on a thread of its own), or as this process.
fn read_as<T: Send>(creds: Option<&FsCreds>, f: impl FnOnce() -> T + Send) -> Result<T, Error> {
    match creds {
        Some(c) => c
            .run(f)
            .map_err(Error::sys("take the user's file permissions")),
        None => Ok(f()),
    }
}

/// The login name of `uid`, or `uid-N` if it has none.
fn user_name(uid: u32) -> String {
    nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid))
        .ok()
        .flatten()
        .map_or_else(|| format!("uid-{uid}"), |u| u.name)
}

/// `--outbox DIR` must be an existing directory.
pub fn check_outbox(dir: &std::path::Path) -> Result<PathBuf, Error> {
    if dir.is_dir() {
        Ok(dir.to_path_buf())
    } else {
        Err(Error::Outbox(dir.to_path_buf()))
    }
}

/// `germline run`.
pub fn run(a: &RunArgs) -> Result<(), Error> {
    let sigfd = crate::stdio::stop_signals().map_err(Error::sys("signals"))?;
    germline_engine::sweep::at_start("run");
    let mut session = match start_session(a) {
        Ok(s) => s,
        Err(e) => {
            // The client learns why from its `initialize` (not only "Connection closed");
            // the exit status stays that of a failure to start (docs/run.md).
            crate::stdio::refuse_start(&e.to_string(), sigfd);
            return Err(e);
        }
    };
    eprintln!(
        "germline run: {} ({}) in mode {}, broker {}",
        session.runtime.release().label(),
        session.runtime.release().digest,
        session.runtime.mode().name(),
        session.runtime.broker().socket().display()
    );
    let why = crate::stdio::serve(&mut session, sigfd);
    session.runtime.stop();
    eprintln!("germline run: {why}; stopped after {} calls", session.calls);
    Ok(())
}
