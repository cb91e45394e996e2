//! One germline shared by many sessions (issue 30, docs/design/30-performance.md "Sessions
//! share a germline"): a [`GermlineHub`] owns a release's germline on a thread of its own and
//! hands out checked, data-free copies over a channel; [`HubSource`] is the pipeline's
//! [`CopySource`] of one session's [`crate::runtime::Runtime`], which keeps its own broker
//! connection, user (so its state slots), evidence, limiter and observers.
//!
//! Why a thread of its own: the kernel kills a germline when the *thread* that forked it ends
//! (`PR_SET_PDEATHSIG`, [`crate::launcher`]), so the hub's thread is that germline's launcher
//! for as long as the hub lives, restarts included; and hubs of different releases or users
//! start in parallel instead of one after another on the one launcher thread (8 concurrent
//! `initialize`s under `serve` took 49.7 s that way).
//!
//! Only the hub's thread touches the [`Germline`]: forks, pool refills, mounts of a copy's
//! items and retirements are asks on its channel; the copy itself (its socket, its MCP
//! session) travels with the ask and back, so the call's data phase runs on the session's own
//! thread, in parallel with other sessions' copies. The germline forks while other copies hold
//! data (docs/sandbox.md, "The freeze rule under a hub" says what holds and what remains).
//!
//! [`Hubs`] keys hubs by (release, user) by default; `germline serve --share-germlines
//! all` keys them by release only (the PID counter channel then crosses users). A hub lives
//! as long as a session holds it: the last session's end stops its germline.

use std::collections::HashMap;
use std::fs::File;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use germline_sandbox::{Copy, Germline, Options, TreeEntry};
use serde_json::{json, Value};

use crate::error::StartError;
use crate::pipeline::{CopySource, SourcedCopy};
use crate::release::Release;
use crate::runtime::{copy_trust, launch_spec, next_runtime_number, MAX_RESTARTS};
use crate::sidecar::{DirGuard, Sidecar};

type SandboxResult<T> = Result<T, germline_sandbox::Error>;
type Files = Vec<(String, Vec<u8>, bool)>;
/// A copy and the laps of its fork (none for a pool copy).
type Taken = (Copy, Vec<(&'static str, u64)>);

/// What a session asks of its hub.
enum Ask {
    /// A checked, data-free copy: from the pool, announcing `caps` (`fresh`: forked now, its
    /// handshake not begun, for the agent's own `initialize`).
    Take {
        caps: Value,
        fresh: bool,
        reply: Sender<SandboxResult<Taken>>,
    },
    /// The copy's mounts of its items (the germline's item store and rootfs are the hub's).
    Prepare {
        copy: Box<Copy>,
        files: Files,
        tree: Vec<TreeEntry>,
        writable: bool,
        reply: Sender<(Box<Copy>, SandboxResult<()>)>,
    },
    /// The copy's end, after its answer.
    Retire {
        copy: Box<Copy>,
        result: SandboxResult<Value>,
        reply: Sender<SandboxResult<Value>>,
    },
    CallBegins,
    Capabilities(Value),
}

/// How a hub's germline is started.
#[derive(Debug, Clone)]
pub struct HubOptions {
    /// Pre-forked copies to keep ready (shared by the hub's sessions).
    pub pool: usize,
    /// Copies run the tool under a reaper (`[copies] reaper`).
    pub reaper: bool,
    /// The mode's name, in the germline's id (`germline`, `nosplit`).
    pub mode: &'static str,
    /// The pool's memory cap (`[pool] memory_mb`; `Options::memory_cap_bytes`).
    pub memory_cap_bytes: Option<u64>,
}

/// One release's germline, shared by the sessions that hold it.
#[derive(Debug)]
pub struct GermlineHub {
    tx: Mutex<Option<Sender<Ask>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// The germline's pid (a restarted germline's once it runs).
    pid: Arc<AtomicI32>,
    reaper: bool,
    label: String,
    /// The copies' CA bundles: removed once the germline is stopped (the hub's drop).
    _ca_dir: DirGuard,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Nothing of a call is kept under these locks: a panicked holder left nothing half done.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn gone() -> germline_sandbox::Error {
    germline_sandbox::Error::GermlineDied("the shared germline's hub has stopped".into())
}

impl GermlineHub {
    /// Starts `release`'s germline on a new thread (which stays its launcher) and waits until
    /// it runs, checked; `broker` gives the copies' CA and proxy (any connection to the one
    /// broker).
    pub fn start(
        release: &Release,
        broker: &Sidecar,
        opts: &HubOptions,
    ) -> Result<Arc<GermlineHub>, StartError> {
        let n = next_runtime_number();
        let ca_dir = germline_sys::paths::ca_dir(std::process::id(), n, opts.mode);
        let guard = DirGuard::new(ca_dir.clone());
        let trust = copy_trust(release, broker, None, &ca_dir)?;
        let proxy = broker.client.copy_proxy().map_err(StartError::CopyProxy)?;
        // Its copies write into their own layers of directory items (`writable_trees`, as
        // `launch_spec` gives every germline): each session's runtime reads back the layer of
        // the copy whose group holds the workspace and commits it, as `germline run` does
        // (docs/policy.md "Writes", "Under `germline serve`").
        let spec = launch_spec(release, &trust, proxy)?;
        let id = germline_sys::paths::run_germline_id(std::process::id(), n, opts.mode);
        let mut gopts = Options::new(&id);
        gopts.pool = opts.pool;
        gopts.reaper = opts.reaper;
        gopts.memory_cap_bytes = opts.memory_cap_bytes;
        let label = release.label();
        let pid = Arc::new(AtomicI32::new(0));
        let (tx, rx) = channel::<Ask>();
        let (up_tx, up_rx) = channel::<Result<(), germline_sandbox::Error>>();
        let tpid = pid.clone();
        let tlabel = label.clone();
        let thread = std::thread::Builder::new()
            .name("germline-hub".into())
            .spawn(move || {
                let g = match Germline::start(spec.clone(), gopts.clone()) {
                    Ok(g) => g,
                    Err(e) => {
                        let _ = up_tx.send(Err(e));
                        return;
                    }
                };
                tpid.store(g.pid(), Ordering::Relaxed);
                let _ = up_tx.send(Ok(()));
                Serving {
                    g,
                    spec,
                    opts: gopts,
                    generation: 0,
                    restarts: Vec::new(),
                    pid: tpid,
                    label: tlabel,
                }
                .serve(rx);
            })
            .map_err(|e| StartError::Launcher(crate::error::LauncherError::Thread(e)))?;
        let started = up_rx.recv().unwrap_or_else(|_| {
            Err(germline_sandbox::Error::Init(
                "the hub's thread ended before its germline started".into(),
            ))
        });
        if let Err(source) = started {
            let _ = thread.join();
            return Err(StartError::Germline {
                release: label,
                source,
            });
        }
        Ok(Arc::new(GermlineHub {
            tx: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
            pid,
            reaper: opts.reaper,
            label,
            _ca_dir: guard,
        }))
    }

    /// The germline's pid (the same for every session of this hub).
    pub fn pid(&self) -> i32 {
        self.pid.load(Ordering::Relaxed)
    }

    /// The release this hub serves (`name@version`).
    pub fn label(&self) -> &str {
        &self.label
    }

    /// Whether copies run the tool under a reaper.
    pub fn reaper(&self) -> bool {
        self.reaper
    }

    fn send(&self, ask: Ask) -> SandboxResult<()> {
        let tx = lock(&self.tx);
        match tx.as_ref() {
            Some(tx) => tx.send(ask).map_err(|_| gone()),
            None => Err(gone()),
        }
    }

    /// Sends the ask `make` builds around a reply channel, and waits for the reply.
    fn ask<T>(&self, make: impl FnOnce(Sender<T>) -> Ask) -> SandboxResult<T> {
        let (reply, answer) = channel();
        self.send(make(reply))?;
        answer.recv().map_err(|_| gone())
    }
}

impl Drop for GermlineHub {
    /// The last session let go: the thread stops the germline (its copies, cgroups, mounts)
    /// and ends; the CA directory goes after it.
    fn drop(&mut self) {
        lock(&self.tx).take();
        if let Some(t) = lock(&self.thread).take() {
            let _ = t.join();
        }
    }
}

/// The hub's thread: the germline and what restarts it.
struct Serving {
    g: Germline,
    spec: germline_sandbox::LaunchSpec,
    opts: Options,
    generation: u32,
    restarts: Vec<Instant>,
    pid: Arc<AtomicI32>,
    label: String,
}

/// How long the hub waits for the next ask before it refills its pool: a session's retire is
/// followed by its answer going out, which a refill's fork should not delay.
const IDLE_AFTER: Duration = Duration::from_millis(2);
/// How often an idle hub reaps copies that finished exiting.
const REAP_EVERY: Duration = Duration::from_millis(100);
/// The window [`MAX_RESTARTS`] restarts of a dying germline count in.
const RESTART_WINDOW: Duration = Duration::from_secs(60);

impl Serving {
    fn serve(mut self, rx: Receiver<Ask>) {
        // Pool refills and the between-calls work of the next fork (G1-G3 on the frozen
        // germline, the spare cgroup) are due after each copy handed out or retired.
        let mut idle_due = true;
        loop {
            let ask = match rx.recv_timeout(if idle_due { IDLE_AFTER } else { REAP_EVERY }) {
                Ok(a) => a,
                Err(RecvTimeoutError::Timeout) => {
                    if idle_due {
                        idle_due = self.idle_step();
                    } else {
                        self.g.reap();
                    }
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => break,
            };
            idle_due = true;
            self.answer(ask);
            // Asks that queued meanwhile first, then idle work.
            loop {
                match rx.try_recv() {
                    Ok(a) => self.answer(a),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        let _ = self.g.stop();
                        return;
                    }
                }
            }
        }
        let _ = self.g.stop();
    }

    /// One step of idle work: `true` while more is due.
    fn idle_step(&mut self) -> bool {
        if self.g.death(Duration::ZERO).is_some() {
            return false;
        }
        let more = self.g.refill_one().unwrap_or(false);
        self.g.reap();
        more
    }

    fn answer(&mut self, ask: Ask) {
        match ask {
            Ask::Take { caps, fresh, reply } => {
                let r = self.ensure_alive().and_then(|()| {
                    let c = if fresh {
                        self.g.fork_copy()
                    } else {
                        self.g.copy_for(&caps)
                    }?;
                    Ok((c, self.g.fork_phases().to_vec()))
                });
                let _ = reply.send(r);
            }
            Ask::Prepare {
                mut copy,
                files,
                tree,
                writable,
                reply,
            } => {
                let items: Vec<germline_sandbox::Item> =
                    files.iter().map(germline_sandbox::Item::from).collect();
                let r = self.g.prepare_copy_view(&mut copy, &items, &tree, writable);
                let _ = reply.send((copy, r));
            }
            Ask::Retire {
                copy,
                result,
                reply,
            } => {
                let _ = reply.send(self.g.retire(*copy, result));
            }
            Ask::CallBegins => self.g.call_begins(),
            Ask::Capabilities(caps) => self.g.set_pool_capabilities(&caps),
        }
    }

    /// A germline that died is started again here (this thread stays its launcher), at most
    /// [`MAX_RESTARTS`] times within a minute; the copies of other sessions it took along
    /// failed their calls with it.
    fn ensure_alive(&mut self) -> SandboxResult<()> {
        let Some(death) = self.g.death(Duration::ZERO) else {
            return Ok(());
        };
        let now = Instant::now();
        self.restarts
            .retain(|t| now.duration_since(*t) < RESTART_WINDOW);
        if self.restarts.len() >= MAX_RESTARTS {
            return Err(germline_sandbox::Error::GermlineDied(format!(
                "{}: the shared germline died again after {} restarts within {} s (last: \
                 {death}); find what kills it (the OOM killer in `dmesg`, a crash of the \
                 release at its fork) and restart germline serve",
                self.label,
                self.restarts.len(),
                RESTART_WINDOW.as_secs()
            )));
        }
        self.restarts.push(now);
        eprintln!(
            "germline: {}: {death}; starting a fresh shared germline (restart {} of at most {})",
            self.label,
            self.restarts.len(),
            MAX_RESTARTS
        );
        let _ = self.g.stop();
        self.generation += 1;
        let mut opts = self.opts.clone();
        opts.id = format!("{}-g{}", self.opts.id, self.generation);
        self.g = Germline::start(self.spec.clone(), opts)?;
        self.pid.store(self.g.pid(), Ordering::Relaxed);
        Ok(())
    }
}

/// A session's [`CopySource`]: every step that needs the germline is an ask to the hub.
#[derive(Debug)]
pub struct HubSource {
    hub: Option<Arc<GermlineHub>>,
    phases: Vec<(&'static str, u64)>,
}

impl HubSource {
    pub fn new(hub: Arc<GermlineHub>) -> HubSource {
        HubSource {
            hub: Some(hub),
            phases: Vec::new(),
        }
    }

    fn hub(&self) -> SandboxResult<&GermlineHub> {
        self.hub.as_deref().ok_or_else(gone)
    }

    /// The germline's pid.
    pub fn pid(&self) -> Option<i32> {
        self.hub.as_ref().map(|h| h.pid())
    }

    /// Whether the hub's copies run the tool under a reaper.
    pub fn reaper(&self) -> bool {
        self.hub.as_ref().is_some_and(|h| h.reaper())
    }

    /// A copy for a request that carries no data: `fresh` (no handshake made yet) for the
    /// agent's own `initialize`, else one announcing no client capabilities.
    pub fn passthrough_copy(&mut self, fresh: bool) -> SandboxResult<HubCopy> {
        let (c, _) = self.hub()?.ask(|reply| Ask::Take {
            caps: json!({}),
            fresh,
            reply,
        })??;
        Ok(HubCopy(Some(c)))
    }

    /// Lets go of the hub: the last session's release stops the shared germline.
    pub fn release(&mut self) {
        self.hub.take();
    }
}

/// A copy handed out by a hub. Its mounts are made on the hub's thread, so the copy travels
/// there and back; this holds its place meanwhile (empty only if the hub stopped with it).
#[derive(Debug)]
pub struct HubCopy(Option<Copy>);

impl HubCopy {
    /// The copy (an error if a hub that stopped kept it).
    pub fn copy(&mut self) -> SandboxResult<&mut Copy> {
        self.0.as_mut().ok_or_else(gone)
    }
}

impl SourcedCopy for HubCopy {
    fn netns(&self) -> std::io::Result<File> {
        match &self.0 {
            Some(c) => c.netns(),
            None => Err(std::io::Error::other("the copy was lost with its hub")),
        }
    }
    fn deadline(&self) -> Instant {
        self.0.as_ref().map_or_else(Instant::now, |c| c.deadline())
    }
    fn set_twin(&mut self, twin: Option<(u128, u64)>) {
        if let Some(c) = &mut self.0 {
            c.set_twin(twin)
        }
    }
    fn kill(&mut self) {
        if let Some(c) = &mut self.0 {
            SourcedCopy::kill(c)
        }
    }
    fn deliver(&mut self, files: &[(String, Vec<u8>, bool)]) -> SandboxResult<()> {
        SourcedCopy::deliver(self.copy()?, files)
    }
    fn initialize(&mut self) -> SandboxResult<()> {
        SourcedCopy::initialize(self.copy()?)
    }
    fn mcp_call_relayed(
        &mut self,
        tool: &str,
        arguments: Value,
        meta: Option<Value>,
        handler: &mut dyn FnMut(&Value) -> Option<Value>,
    ) -> SandboxResult<Value> {
        SourcedCopy::mcp_call_relayed(self.copy()?, tool, arguments, meta, handler)
    }
    fn set_cancel(&mut self, cancel: Option<Arc<crate::relay::Cancel>>) {
        if let Some(c) = &mut self.0 {
            SourcedCopy::set_cancel(c, cancel)
        }
    }
    fn tree_layer(&self, dir: &str) -> SandboxResult<Option<germline_sandbox::TreeLayer>> {
        match &self.0 {
            Some(c) => c.tree_layer(dir),
            None => Ok(None),
        }
    }
}

impl CopySource for HubSource {
    type Copy = HubCopy;
    fn call_begins(&mut self) {
        if let Ok(h) = self.hub() {
            let _ = h.send(Ask::CallBegins);
        }
    }
    fn set_pool_capabilities(&mut self, caps: &Value) {
        if let Ok(h) = self.hub() {
            let _ = h.send(Ask::Capabilities(caps.clone()));
        }
    }
    fn copy_for(&mut self, caps: &Value) -> SandboxResult<HubCopy> {
        let (c, phases) = self.hub()?.ask(|reply| Ask::Take {
            caps: caps.clone(),
            fresh: false,
            reply,
        })??;
        self.phases = phases;
        Ok(HubCopy(Some(c)))
    }
    fn fork_phases(&self) -> &[(&'static str, u64)] {
        &self.phases
    }
    fn prepare_copy(
        &mut self,
        copy: &mut HubCopy,
        files: &[(String, Vec<u8>, bool)],
    ) -> SandboxResult<()> {
        self.prepare_copy_view(copy, files, &[], false)
    }
    fn prepare_copy_view(
        &mut self,
        copy: &mut HubCopy,
        files: &[(String, Vec<u8>, bool)],
        tree: &[TreeEntry],
        writable: bool,
    ) -> SandboxResult<()> {
        let hub = self.hub.clone().ok_or_else(gone)?;
        let taken = copy.0.take().ok_or_else(gone)?;
        let (back, r) = hub.ask(|reply| Ask::Prepare {
            copy: Box::new(taken),
            files: files.to_vec(),
            tree: tree.to_vec(),
            writable,
            reply,
        })?;
        copy.0 = Some(*back);
        r
    }
    fn retire(&mut self, copy: HubCopy, result: SandboxResult<Value>) -> SandboxResult<Value> {
        let Some(mut copy) = copy.0 else {
            return result;
        };
        let Some(h) = self.hub.as_deref() else {
            SourcedCopy::kill(&mut copy);
            return result;
        };
        let (reply, answer) = channel();
        match h.send(Ask::Retire {
            copy: Box::new(copy),
            result,
            reply,
        }) {
            Ok(()) => answer.recv().unwrap_or_else(|_| Err(gone())),
            Err(e) => Err(e),
        }
    }
}

/// Whether `release`'s sessions can share a germline: its copies are forked (a Python
/// release); spawned copies (issue 28) have no germline to share.
pub fn forks(release: &Release) -> bool {
    crate::runtime::execution_of(&release.manifest)
        .is_ok_and(|(_, e)| e == germline_sandbox::Execution::Fork)
}

/// The key of a shared germline: a release (its index under `serve`) and the user whose
/// sessions share it (empty: every user's, `--share-germlines all`).
pub type HubKey = (usize, String);

/// The running hubs of `germline serve`, by key. A hub is started at its key's first session
/// (sessions of the same key wait for it; other keys start theirs in parallel) and stops
/// when its last session ends.
#[derive(Debug, Default)]
pub struct Hubs {
    slots: Mutex<HashMap<HubKey, Arc<Mutex<Weak<GermlineHub>>>>>,
}

impl Hubs {
    pub fn new() -> Hubs {
        Hubs::default()
    }

    /// The hub of `key`, started by `start` if none runs.
    pub fn get_or_start<E>(
        &self,
        key: HubKey,
        start: impl FnOnce() -> Result<Arc<GermlineHub>, E>,
    ) -> Result<Arc<GermlineHub>, E> {
        let slot = lock(&self.slots).entry(key).or_default().clone();
        let mut weak = lock(&slot);
        if let Some(h) = weak.upgrade() {
            return Ok(h);
        }
        let h = start()?;
        *weak = Arc::downgrade(&h);
        Ok(h)
    }

    /// The pids of the running hubs' germlines, by key (for reports and tests).
    pub fn running(&self) -> Vec<(HubKey, i32)> {
        lock(&self.slots)
            .iter()
            .filter_map(|(k, s)| lock(s).upgrade().map(|h| (k.clone(), h.pid())))
            .collect()
    }
}
