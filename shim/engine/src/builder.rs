//! [`RuntimeBuilder`]: everything a [`Runtime`] is configured with, gathered before anything
//! forks. `germline run` and `germline serve` (and the offline re-run of a witness record)
//! build their runtimes through it, so the wiring of a runtime is written once: a runtime
//! is never seen half configured, and its fields are not public.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use germline_policy::limits::Lifetime;
use germline_policy::Policy;

use crate::error::StartError;
use crate::evidence::Evidence;
use crate::launcher::Launcher;
use crate::limits::Limiter;
use crate::metrics::Metrics;
use crate::observe::CallObserver;
use crate::release::Release;
use crate::runtime::{Mode, Runtime, RESTART_WINDOW};
use crate::sidecar::Sidecar;
use crate::status::StatusWriter;
use crate::trace::Tracer;

/// The configuration of one runtime; [`RuntimeBuilder::build`] starts it.
pub struct RuntimeBuilder {
    pub(crate) mode: Mode,
    pub(crate) release: Release,
    pub(crate) broker: Sidecar,
    pub(crate) pool: usize,
    /// The policy's `[pool]` for this release's spawned copies (None: no such table).
    pub(crate) spawn_pool: Option<germline_policy::pool::PoolSettings>,
    pub(crate) reaper: bool,
    pub(crate) copy_cpus: Vec<usize>,
    pub(crate) user: String,
    pub(crate) evidence: Evidence,
    pub(crate) limiter: Limiter,
    pub(crate) lifetime: Lifetime,
    pub(crate) restart_window: Duration,
    pub(crate) metrics: Option<Arc<Metrics>>,
    pub(crate) tracer: Option<Arc<Tracer>>,
    pub(crate) outbox: Option<PathBuf>,
    pub(crate) launcher: Option<Arc<Launcher>>,
    pub(crate) status: Option<&'static str>,
    pub(crate) read_as: Option<germline_sys::user::FsCreds>,
    /// Observers beyond metrics, traces and the status file, told after them.
    pub(crate) observers: Vec<Box<dyn CallObserver>>,
    /// A germline shared with other sessions (`germline serve`, [`crate::hub`]).
    pub(crate) hub: Option<Arc<crate::hub::GermlineHub>>,
    /// A multi-group call's copies run concurrently (`[copies] concurrent`, issue 30).
    pub(crate) concurrent_copies: bool,
}

impl std::fmt::Debug for RuntimeBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeBuilder")
            .field("mode", &self.mode)
            .field("release", &self.release.label())
            .finish_non_exhaustive()
    }
}

impl RuntimeBuilder {
    /// A runtime of `release` in `mode` talking to `broker`, with what `Runtime::start` had
    /// before the builder: no pool, no reaper, the user of `$USER`, evidence and `[limits]`
    /// off, a `session` lifetime, the default restart window, no metrics, traces, outbox or
    /// status file, germlines forked on the calling thread.
    pub fn new(mode: Mode, release: Release, broker: Sidecar) -> RuntimeBuilder {
        RuntimeBuilder {
            mode,
            release,
            broker,
            pool: 0,
            spawn_pool: None,
            reaper: false,
            copy_cpus: Vec::new(),
            user: std::env::var("USER").unwrap_or_else(|_| "root".into()),
            evidence: Evidence::disabled(),
            limiter: Limiter::off(),
            lifetime: Lifetime::default(),
            restart_window: RESTART_WINDOW,
            metrics: None,
            tracer: None,
            outbox: None,
            launcher: None,
            status: None,
            read_as: None,
            observers: Vec::new(),
            hub: None,
            concurrent_copies: false,
        }
    }

    /// What the deployer's policy says of this release's runtime: its `[limits]`, its
    /// lifetime, and whether copies run the tool under a reaper (`[copies] reaper`).
    pub fn policy(mut self, policy: &Policy) -> Self {
        self.limiter = Limiter::new(policy.limits(), &self.release.digest);
        self.lifetime = policy.lifetime(&self.release.manifest.name);
        self.reaper = policy.copy_reaper();
        self.spawn_pool = policy.spawn_pool(&self.release.manifest.name);
        self.concurrent_copies = policy.concurrent_copies(&self.release.manifest.name);
        self
    }

    /// Whether a multi-group call's copies run concurrently under the hold rule (set by
    /// [`Self::policy`] from `[copies] concurrent` too; docs/policy.md "Concurrent copies").
    pub fn concurrent_copies(mut self, on: bool) -> Self {
        self.concurrent_copies = on;
        self
    }

    /// Pre-forked, checked, data-free copies to keep ready.
    pub fn pool(mut self, pool: usize) -> Self {
        self.pool = pool;
        self
    }

    /// Whether copies run the tool as PID 2 under a reaper (set by [`Self::policy`] too).
    pub fn reaper(mut self, reaper: bool) -> Self {
        self.reaper = reaper;
        self
    }

    /// CPUs for the germline and its copies, or the baseline's persistent process (none:
    /// inherited).
    pub fn copy_cpus(mut self, cpus: &[usize]) -> Self {
        self.copy_cpus = cpus.to_vec();
        self
    }

    /// The user whose calls these are (it keys the broker's state slots).
    pub fn user(mut self, user: &str) -> Self {
        self.user = user.to_string();
        self
    }

    /// The evidence layer (crate::evidence).
    pub fn evidence(mut self, evidence: Evidence) -> Self {
        self.evidence = evidence;
        self
    }

    /// The window at most [`crate::runtime::MAX_RESTARTS`] restarts of a dead germline count
    /// in.
    pub fn restart_window(mut self, window: Duration) -> Self {
        self.restart_window = window;
        self
    }

    /// Where the runtime's metrics go.
    pub fn metrics(mut self, metrics: Option<Arc<Metrics>>) -> Self {
        self.metrics = metrics;
        self
    }

    /// Where the runtime's traces go.
    pub fn tracer(mut self, tracer: Option<Arc<Tracer>>) -> Self {
        self.tracer = tracer;
        self
    }

    /// Where results for the recipients a manifest names go.
    pub fn outbox(mut self, outbox: Option<PathBuf>) -> Self {
        self.outbox = outbox;
        self
    }

    /// Fork germlines (the first and every fresh one) on `launcher`'s thread, which outlives
    /// them ([`crate::launcher`]).
    pub fn launcher(mut self, launcher: Arc<Launcher>) -> Self {
        self.launcher = Some(launcher);
        self
    }

    /// Read what the release's rootfs holds for the copies (its CA bundles) with this user's
    /// permissions: a session `germline daemon` runs for an unprivileged user, whose rootfs
    /// must not make root read a file for them (docs/daemon.md).
    pub fn read_as(mut self, creds: Option<germline_sys::user::FsCreds>) -> Self {
        self.read_as = creds;
        self
    }

    /// Take copies from `hub`'s shared germline instead of starting one (germline and nosplit
    /// modes; the baselines ignore it). Slots, evidence, limits and observers stay this
    /// runtime's.
    pub fn hub(mut self, hub: Arc<crate::hub::GermlineHub>) -> Self {
        self.hub = Some(hub);
        self
    }

    /// Keep a state file for `germline status` (`command`: "run" or "serve").
    pub fn status(mut self, command: &'static str) -> Self {
        self.status = Some(command);
        self
    }

    /// One more observer of the runtime's calls (`germline serve`'s status page), told after
    /// metrics, traces and the status file.
    pub fn observer(mut self, o: Box<dyn CallObserver>) -> Self {
        self.observers.push(o);
        self
    }

    /// Starts the release's germline (or the baseline's process), on the launcher's thread
    /// if there is one, then pins it to its CPUs and writes its state file.
    pub fn build(mut self) -> Result<Runtime, StartError> {
        let cpus = std::mem::take(&mut self.copy_cpus);
        let status = self.status;
        let extra = std::mem::take(&mut self.observers);
        let mut runtime = match self.launcher.clone() {
            Some(l) => l.run(move || Runtime::start(self))??,
            None => Runtime::start(self)?,
        };
        if !cpus.is_empty() {
            runtime.set_copy_cpus(&cpus)?;
        }
        // Triggers an earlier runtime of this release queued but did not settle (it ended
        // first): re-run off the call path, like this runtime's own.
        runtime.resume_evidence();
        if let Some(command) = status {
            let writer = StatusWriter::start(&runtime, command)?;
            runtime.observers.push(Box::new(writer));
        }
        for o in extra {
            runtime.observers.push(o);
        }
        Ok(runtime)
    }
}
