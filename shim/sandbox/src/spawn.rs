//! Spawned copies (issue 28): for releases that cannot fork (Node, native binaries, Python
//! that asks for it), each copy is a fresh process the shim's launcher starts from the
//! verified rootfs, in namespaces, a cgroup, Landlock and seccomp of its own, with the MCP
//! handshake and the manifest's warm calls made before any call's data exists. It is checked
//! from outside ([`crate::checks::spawn_rules`]), waits frozen in a pool, serves exactly one
//! group of one call and is destroyed after. docs/sandbox.md, "Spawned copies: what replaces
//! G1", says why this is data-free without G1.
//!
//! [`SpawnPool`] is the copy source, [`Spawned`] one copy; the engine uses them through the
//! same `CopySource` seam as the germline's forked copies.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{json, Value};

use crate::cancel::Cancel;
use crate::cgroup::Cgroup;
use crate::checks::{self, snapshot::CopySnapshot, CopyExpect, GermlineFacts, Role};
use crate::copy::{client_error, CopyChannel};
use crate::error::{Error, Result};
use crate::itemview;
use crate::launch::Prepared;
use crate::mcp_client::{Channel, Session};
use crate::mounts::{ItemStore, ItemsDir, SlotLease};
use crate::pool_depth::{DepthBounds, PoolDepth};
use crate::procfs::{self, Namespaces};
use crate::seccomp::Program;
use crate::spec::{Execution, LaunchSpec};
use crate::sys;

mod items;
mod reaper;
mod refill;

use reaper::Reaper;
use refill::{Launched, Launcher, Refiller, Waited};

/// How long one idle step waits for the refill thread's launch in flight before it returns,
/// so that the transport looks for the agent's next request between steps.
const IDLE_WAIT: Duration = Duration::from_millis(2);

/// At most this many retired copies wait to be reaped (in the pool or on the reaper thread); a
/// take that finds more waits for the reaper (calls faster than exits).
const MAX_DYING: usize = 4;

/// How long after a retire the idle steps wait (a millisecond per step) for the copy's exit, so
/// that it is reaped between calls rather than at the next call.
const EXIT_WAIT: Duration = Duration::from_millis(100);

/// Size limit of a pool's item store (a tmpfs: only what is written counts).
const ITEM_STORE_BYTES: u64 = 1 << 30;

/// The pool's settings (the deployer's policy: `[pool]`, or `germline run --pool N` as a
/// fixed depth; issue 28).
#[derive(Debug, Clone)]
pub struct SpawnOptions {
    /// Names the pool's cgroups (unique per runtime on this host).
    pub id: String,
    /// Copies kept ready between calls: between `min` and `max` as the call rate asks
    /// ([`PoolDepth`]); 0 and 0: every copy is spawned on the call's path.
    pub min: usize,
    pub max: usize,
    /// The most private memory the waiting copies may hold together; the pool stops refilling
    /// at this figure whatever `min` says.
    pub memory_cap_bytes: u64,
}

impl SpawnOptions {
    /// No pool (every copy spawned when asked for), under the policy's default memory cap.
    pub fn new(id: &str) -> SpawnOptions {
        SpawnOptions {
            id: id.to_string(),
            min: 0,
            max: 0,
            memory_cap_bytes: 512 << 20,
        }
    }

    fn bounds(&self) -> DepthBounds {
        DepthBounds {
            min: self.min,
            max: self.max,
            memory_cap_bytes: self.memory_cap_bytes,
        }
    }
}

/// What `germline status` and the bench show of the pool.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PoolStatus {
    pub ready: usize,
    /// The depth the pool aims at now ([`PoolDepth::target`]).
    pub target: usize,
    pub min: usize,
    pub max: usize,
    pub spawned: u64,
    /// Mean time from launch to a checked, initialised copy, milliseconds.
    pub mean_spawn_ms: f64,
    /// Copies the refill made per second of its own work (one launch at a time, on the refill
    /// thread, time frozen not counted); None before it made one.
    pub refill_per_s: Option<f64>,
    /// Mean private memory of a copy as it entered the pool (kB): its anonymous memory
    /// ([`Spawned::dirty_memory`]), what one more pooled copy costs.
    pub pooled_copy_private_kb: u64,
    /// The most copies that waited at once, and the most private memory they held together
    /// (measured as each joined the pool).
    pub peak_ready: usize,
    pub peak_ready_private_bytes: u64,
    /// Private memory of the waiting copies (bytes, their anonymous memory:
    /// [`Spawned::dirty_memory`]).
    pub ready_private_bytes: u64,
    pub memory_cap_bytes: u64,
    pub refused: Option<String>,
    /// Copies spawned on a call's path (no ready copy and no refill in flight to wait for).
    pub on_call_path: u64,
    /// Calls' copies that were the refill's launch in flight, waited for instead of spawning
    /// another.
    pub from_refill_in_flight: u64,
    /// Times a call took a ready copy while a refill launch was in flight, which then waited
    /// frozen until no copy held data.
    pub refill_held: u64,
    /// Refill launches that failed their start (handshake, warm calls) or their checks and
    /// were dropped; each is also logged on stderr (`germline: spawn pool: a refill launch
    /// failed ...`).
    pub refill_failed: u64,
    /// The manifest's warm calls that failed in launches (an error answer, or a result the
    /// tool marked `isError`), summed over launches: skipped, as a warm call is an
    /// optimisation; the first is said on stderr (`germline: spawn pool: warm call ...`).
    #[serde(default)]
    pub warm_failed: u64,
    /// Retired copies not reaped yet (frozen, or killed and exiting).
    pub dying: usize,
}

/// One spawned copy: dropping it kills it and removes its cgroup.
#[derive(Debug)]
pub struct Spawned {
    keeper: i32,
    pid: i32,
    cgroup: Cgroup,
    chan: CopyChannel,
    mcp: Session,
    ns: Namespaces,
    /// The server's answer to the shim's `initialize` (public: made before any data).
    init_result: Option<Value>,
    spawn_time: Duration,
    dead: bool,
    /// The copy's `/run/items`, mounted before it joined the pool (items.rs).
    items_dir: Option<ItemsDir>,
    /// Item store slots mounted in the copy, freed once it is dead.
    leases: Vec<SlotLease>,
    /// Retired (frozen, then killed) at this instant; reaped later by the pool.
    retired_at: Option<Instant>,
    killed: bool,
    /// The keeper's wait status, once it was waited for.
    keeper_status: Option<i32>,
    /// Its network namespace while offered to the broker, which prepares its endpoint
    /// ([`SpawnPool::endpoints_to_prepare`]); listed for the broker to forget if the copy is
    /// dropped before a call takes it (crate::offered).
    offered: Option<crate::offered::Offered>,
    /// Waiting at the head of the pool, thawed between calls so that the call that takes it
    /// does not thaw it on its path ([`SpawnPool::thaw_next`]).
    thawed_ahead: bool,
    /// Its launch takes the twin line off its stdin ([`LaunchSpec::twin_line`]).
    twin_line: bool,
    /// The call's twin inputs `(time_ns, seed)`, written as the twin line before its
    /// `tools/call` ([`Spawned::set_twin`]).
    twin: Option<(u128, u64)>,
}

impl Spawned {
    /// Host pid of the copy (PID 1 of its own PID namespace).
    pub fn pid(&self) -> i32 {
        self.pid
    }

    pub fn namespaces(&self) -> &Namespaces {
        &self.ns
    }

    pub fn cgroup(&self) -> &Cgroup {
        &self.cgroup
    }

    /// From launch to checked and initialised.
    pub fn spawn_time(&self) -> Duration {
        self.spawn_time
    }

    /// The server's `initialize` result, if this copy made the shim's handshake.
    pub fn init_result(&self) -> Option<&Value> {
        self.init_result.as_ref()
    }

    pub fn deadline(&self) -> Instant {
        self.chan.deadline()
    }

    /// The copy's one deadline, from the moment it is handed data.
    pub fn set_deadline(&mut self, deadline: Instant) {
        self.chan.set_deadline(deadline);
    }

    pub fn set_cancel(&mut self, cancel: Option<Arc<Cancel>>) {
        self.chan.set_cancel(cancel);
    }

    /// Private memory of every process of the copy (bytes).
    pub fn private_memory(&self) -> Option<u64> {
        germline_sys::procfs::private_memory(self.cgroup.procs().ok()?)
    }

    /// What this copy costs beside the other copies of its rootfs (bytes): its anonymous
    /// memory (`germline_sys::procfs::anonymous_memory`). The pool's memory cap counts this:
    /// the rootfs's file pages are shared by every copy, and a copy alone counts them as its
    /// own only until a second one maps them (a just-installed 3.6 MB static binary: 3.1 MB
    /// "private" for the first copy, 0.36 MB once a second one ran).
    pub fn dirty_memory(&self) -> Option<u64> {
        germline_sys::procfs::anonymous_memory(self.cgroup.procs().ok()?)
    }

    /// A request with every message the copy sends meanwhile handed to `handler` (see
    /// `Copy::request_relayed`).
    pub fn request_relayed(
        &mut self,
        method: &str,
        params: Value,
        handler: &mut dyn FnMut(&Value) -> Option<Value>,
    ) -> Result<Value> {
        self.mcp
            .request_relayed(&mut self.chan, method, params, handler)
            .map_err(client_error)
    }

    /// The call's twin inputs (docs/evidence.md, "Twin inputs"): kept for the call's
    /// `tools/call`, before which they are written on the copy's stdin as one line, where its
    /// launch takes that line off the stream ([`LaunchSpec::twin_line`]); ignored otherwise
    /// (the copy reads the real clocks and entropy).
    pub fn set_twin(&mut self, twin: Option<(u128, u64)>) {
        self.twin = twin.filter(|_| self.twin_line);
    }

    /// The `tools/call` of one group of one call.
    pub fn mcp_call_relayed(
        &mut self,
        tool: &str,
        arguments: Value,
        meta: Option<Value>,
        handler: &mut dyn FnMut(&Value) -> Option<Value>,
    ) -> Result<Value> {
        if let Some((time_ns, seed)) = self.twin.take() {
            // Strings: a JSON number loses a u64 seed's low bits in JavaScript.
            let line = format!(
                "{}{}\n",
                crate::spec::NODE_TWIN_LINE,
                json!({"time_ns": time_ns.to_string(), "seed": seed.to_string()})
            );
            self.chan.send_line(line.as_bytes())?;
        }
        let params = Session::tools_call_params(tool, arguments, meta);
        self.request_relayed("tools/call", params, handler)
    }

    /// A data-free request (`tools/list`, `resources/read`, ...); `initialize` is made with the
    /// agent's parameters on a copy spawned without the shim's handshake.
    pub fn mcp_call_method(&mut self, method: &str, params: Value) -> Result<Value> {
        if method == "initialize" {
            return self
                .mcp
                .handshake(&mut self.chan, params)
                .map_err(client_error);
        }
        self.request_relayed(method, params, &mut |_| None)
    }

    /// Kills every process of the copy (its cgroup, then its keeper) and removes the cgroup,
    /// waiting for all of it.
    pub fn kill(&mut self) {
        if self.dead {
            return;
        }
        self.dead = true;
        let _ = self.cgroup.set_frozen(false);
        let _ = self.cgroup.kill_now();
        let _ = sys::kill(self.keeper, libc::SIGKILL);
        if self.keeper_status.is_none() {
            let _ = sys::waitpid(self.keeper, 0);
        }
        let _ = self.cgroup.destroy();
        self.leases.clear();
    }

    /// The real reason of a broken channel (memory limit, deadline) where the kernel says so.
    fn reason(&self, result: Result<Value>) -> Result<Value> {
        match result {
            Err(_) if self.cgroup.oom_kills() > 0 => Err(Error::MemoryLimit),
            Err(Error::Crashed(_)) if Instant::now() >= self.chan.deadline() => {
                Err(Error::Deadline)
            }
            other => other,
        }
    }

    /// Ends the copy's one use: kills it, and turns a broken channel into the real reason
    /// (memory limit, deadline) where the kernel says so.
    pub fn finish(mut self, result: Result<Value>) -> Result<Value> {
        let result = self.reason(result);
        self.kill();
        result
    }

    /// Ends the copy's one use without waiting for its exit: the copy is frozen now (asked of
    /// the kernel, not waited for: it runs nothing more once the freeze lands, and whatever it
    /// does before goes nowhere, since the broker ends its endpoint before the answer), and
    /// killed and reaped later by [`Spawned::kill_retired`] and [`Spawned::try_reap`]
    /// (docs/sandbox.md, "The pool of spawned copies", **The retire**).
    fn retire_later(&mut self, result: Result<Value>) -> Result<Value> {
        let result = self.reason(result);
        if self.cgroup.request_frozen(true).is_err() {
            // No freezer: killed now, its exit reaped later all the same.
            self.kill_retired();
        }
        self.retired_at = Some(Instant::now());
        result
    }

    /// A retired copy killed: SIGKILL to its PID 1 (every task of its PID namespace dies with
    /// it), then thawed (a frozen task cannot die under cgroup v1). Not its keeper: the keeper
    /// reaps it and exits (launch.rs); killed first, it would leave the copy's zombie to
    /// whatever reaps orphans.
    fn kill_retired(&mut self) {
        if self.killed {
            return;
        }
        self.killed = true;
        let _ = sys::kill(self.pid, libc::SIGKILL);
        let _ = self.cgroup.request_frozen(false);
        self.retired_at = Some(Instant::now());
    }

    /// Releases a killed copy whose every task is gone (its keeper waited for, its cgroup
    /// removed, its item slots freed); `false` while one is still exiting. Never waits. One
    /// that outlives a second is killed again through its cgroup.
    fn try_reap(&mut self) -> bool {
        self.kill_retired();
        if self.keeper_status.is_none() {
            if let Ok((pid, st)) = sys::waitpid(self.keeper, libc::WNOHANG) {
                if pid == self.keeper {
                    self.keeper_status = Some(st);
                }
            }
        }
        if self.keeper_status.is_some() && self.cgroup.try_remove().is_ok_and(|gone| gone) {
            self.dead = true;
            self.leases.clear();
            return true;
        }
        if self
            .retired_at
            .is_some_and(|t| t.elapsed() > Duration::from_secs(1))
        {
            let _ = self.cgroup.kill_now();
            let _ = sys::kill(self.keeper, libc::SIGKILL);
        }
        false
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A refill launch in flight on the refill thread.
#[derive(Debug)]
struct Pending {
    /// A second handle on the copy's cgroup: to freeze it while a copy of a call holds data,
    /// and to read its processes for the checks of other copies.
    cgroup: Cgroup,
    caps: Value,
    started: Instant,
    frozen_since: Option<Instant>,
    /// Time it spent frozen: not part of its spawn time.
    frozen_for: Duration,
}

impl Pending {
    fn freeze(&mut self) {
        if self.frozen_since.is_none() && self.cgroup.set_frozen(true).is_ok() {
            self.frozen_since = Some(Instant::now());
        }
    }

    fn thaw(&mut self) {
        if let Some(t) = self.frozen_since {
            // A thaw that fails leaves it frozen: its handshake then fails at its deadline,
            // and the pool drops it.
            if self.cgroup.set_frozen(false).is_ok() {
                self.frozen_for += t.elapsed();
                self.frozen_since = None;
            }
        }
    }

    /// From its launch to now, less the time it was frozen.
    fn spawn_time(&self) -> Duration {
        self.started.elapsed().saturating_sub(self.frozen_for)
    }
}

/// The source of spawned copies of one release.
#[derive(Debug)]
pub struct SpawnPool {
    spec: LaunchSpec,
    opts: SpawnOptions,
    launcher: Arc<Launcher>,
    base_rel: String,
    ready: VecDeque<Spawned>,
    /// The client capabilities the pool's copies announce.
    caps: Value,
    made: u64,
    spawn_total: Duration,
    shim_ns: Namespaces,
    refused: Option<String>,
    /// Namespaces of the copies handed out and not yet retired.
    live: Vec<(i32, Namespaces)>,
    stopped: bool,
    /// The store of items at their own paths (directory items); its slots are in every
    /// copy's Landlock layer (mounts.rs, [`ItemStore`]).
    items: Arc<ItemStore>,
    /// The canonical rootfs on the host.
    rootfs: std::path::PathBuf,
    depth: PoolDepth,
    /// Copies the refill made, and the time it spent making them.
    refilled: u64,
    refill_time: Duration,
    peak_ready: usize,
    peak_ready_bytes: u64,
    /// The refill thread (started at the first refill) and its launch in flight.
    refiller: Option<Refiller>,
    refiller_gone: bool,
    pending: Option<Pending>,
    /// Copies retired and not yet handed to the reaper (frozen).
    dying: Vec<Spawned>,
    /// The thread that kills and reaps retired copies (started at the first hand-over).
    reaper: Option<Reaper>,
    reaper_gone: bool,
    /// The laps of the last take (`germline bench`'s breakdown, through `fork_phases`).
    take_laps: Vec<(&'static str, u64)>,
    on_call_path: u64,
    from_refill_in_flight: u64,
    refill_held: u64,
    refill_failed: u64,
    /// Offered copies dropped unused, for the broker to forget (crate::offered).
    dropped_endpoints: crate::offered::DroppedEndpoints,
    /// Rung by the transport when the agent's next request is queued: an idle step's wait
    /// for the launch in flight returns then ([`SpawnPool::set_doorbell`]).
    bell: Option<Arc<germline_sys::doorbell::Doorbell>>,
}

impl SpawnPool {
    /// Prepares the launch of `spec`'s entry as spawned copies, spawns one to prove the release
    /// starts (refused with the reason otherwise), and fills the pool.
    pub fn start(spec: LaunchSpec, opts: SpawnOptions) -> Result<SpawnPool> {
        if spec.execution != Execution::Spawn {
            return Err(Error::Spec(
                "a spawn pool needs a launch spec with execution = spawn".into(),
            ));
        }
        let mut argv = vec![spec.interpreter.clone()];
        argv.extend(spec.entry.iter().cloned());
        let env = spec.env.clone();
        let items = ItemStore::new(ITEM_STORE_BYTES)?;
        let rootfs = spec
            .rootfs
            .canonicalize()
            .map_err(|e| Error::sys("canonicalize the rootfs", e))?;
        let mut prepared = Prepared::new(&spec, &argv, &env, &items.slot_fds())?;
        prepared.for_spawned_copy();
        let launcher = Arc::new(Launcher {
            prepared,
            warm_calls: spec.warm_calls.clone(),
            init_timeout: Duration::from_millis(spec.limits.init_timeout_ms),
            warm_failed: Default::default(),
            twin_line: spec.twin_line,
        });
        let base_rel = germline_sys::paths::germline_cgroup(&opts.id);
        let depth = PoolDepth::new(opts.bounds());
        let mut pool = SpawnPool {
            dropped_endpoints: Default::default(),
            spec,
            opts,
            launcher,
            base_rel,
            ready: VecDeque::new(),
            caps: json!({}),
            made: 0,
            spawn_total: Duration::ZERO,
            shim_ns: Namespaces::of(std::process::id() as i32)?,
            refused: None,
            live: Vec::new(),
            stopped: false,
            items,
            rootfs,
            depth,
            refilled: 0,
            refill_time: Duration::ZERO,
            peak_ready: 0,
            peak_ready_bytes: 0,
            refiller: None,
            refiller_gone: false,
            pending: None,
            dying: Vec::new(),
            reaper: None,
            reaper_gone: false,
            take_laps: Vec::new(),
            on_call_path: 0,
            from_refill_in_flight: 0,
            refill_held: 0,
            refill_failed: 0,
            bell: None,
        };
        // The release must start at all: a first copy, checked, kept in the pool.
        match pool.spawn(true) {
            Ok(c) => {
                let bytes = c.dirty_memory();
                pool.depth.spawned(c.spawn_time, bytes);
                pool.ready.push_back(c);
                pool.peak_ready = 1;
                pool.peak_ready_bytes = bytes.unwrap_or(0);
            }
            Err(e) => {
                Cgroup::remove_parent(&pool.base_rel);
                return Err(Error::Refused(format!(
                    "its spawned copy did not start: {e}"
                )));
            }
        }
        Ok(pool)
    }

    pub fn spec(&self) -> &LaunchSpec {
        &self.spec
    }

    /// The next copy's cgroup, made and limited.
    fn new_cgroup(&mut self) -> Result<Cgroup> {
        self.made += 1;
        let cgroup = Cgroup::create(&format!("{}/s{}", self.base_rel, self.made))?;
        let l = &self.spec.limits;
        if let Err(e) = cgroup.set_limits(l.memory_bytes, l.pids, l.cpu_percent) {
            let _ = cgroup.destroy();
            return Err(e.into());
        }
        Ok(cgroup)
    }

    /// Spawns one copy on this thread: launched, in its own cgroup from its first
    /// instruction, initialised with the shim's handshake (`handshake`) and the manifest's
    /// warm calls, then checked.
    pub fn spawn(&mut self, handshake: bool) -> Result<Spawned> {
        let t0 = Instant::now();
        let cgroup = self.new_cgroup()?;
        let launched = self.launcher.launch(cgroup, &self.caps, handshake);
        self.admit(launched, t0.elapsed())
    }

    /// A launched copy checked from outside, given its `/run/items` and frozen: ready to be
    /// pooled or handed out. `took`: its spawn time so far.
    fn admit(&mut self, launched: Launched, took: Duration) -> Result<Spawned> {
        let t0 = Instant::now();
        let (mut copy, socket_inode) = launched?;
        let bad = self.check(&copy, socket_inode)?;
        if !bad.is_empty() {
            return Err(Error::CopyRefused(bad.join("; ")));
        }
        copy.ns = Namespaces::of(copy.pid)?;
        // Checked first: the mounts are the shim's own, made from outside (items.rs).
        copy.items_dir = Some(itemview::mount_base(&self.spec, copy.pid)?);
        copy.cgroup.set_frozen(true)?;
        copy.spawn_time = took + t0.elapsed();
        self.spawn_total += copy.spawn_time;
        Ok(copy)
    }

    /// The checks of every process of the copy's cgroup (docs/sandbox.md).
    fn check(&self, copy: &Spawned, socket_inode: u64) -> Result<Vec<String>> {
        let facts = GermlineFacts::read(copy.pid, socket_inode, &self.extra_targets())?;
        // A refill launch in flight (on the refill thread) counts as another copy.
        let in_flight: Vec<i32> = self
            .pending
            .as_ref()
            .and_then(|p| p.cgroup.procs().ok())
            .unwrap_or_default()
            .into_iter()
            .filter(|p| *p != copy.pid)
            .collect();
        let others: Vec<Namespaces> = self
            .live
            .iter()
            .map(|(_, n)| n.clone())
            .chain(self.ready.iter().map(|c| c.ns.clone()))
            .chain(in_flight.iter().filter_map(|p| Namespaces::of(*p).ok()))
            // Retired copies not killed yet (frozen, alive): once killed, their namespaces go
            // with their exit, and a namespace's inode number can be reused by a new copy's.
            .chain(
                self.dying
                    .iter()
                    .filter(|c| !c.killed)
                    .map(|c| c.ns.clone()),
            )
            .collect();
        let mut foreign: HashSet<u64> = HashSet::new();
        let outside = std::iter::once(std::process::id() as i32)
            .chain(self.live.iter().map(|(p, _)| *p))
            .chain(self.ready.iter().map(Spawned::pid))
            .chain(in_flight.iter().copied())
            .chain(self.dying.iter().filter(|c| !c.killed).map(Spawned::pid));
        for pid in outside {
            foreign.extend(procfs::fds(pid).unwrap_or_default().iter().map(|f| f.ino));
        }
        // The copy socket's other end is the shim's: it is the one object both hold.
        foreign.remove(&socket_inode);
        let filters = [Program::germline(), Program::copy()];
        let procs = copy.cgroup.procs()?;
        if procs != [copy.pid] {
            return Ok(vec![format!(
                "the copy's cgroup holds processes {procs:?}, not only the copy {}",
                copy.pid
            )]);
        }
        let x = CopyExpect {
            pid: copy.pid,
            role: Role::Sole,
            socket_inode,
            germline: &facts,
            germline_ns: &self.shim_ns,
            others: &others,
            cgroup_rel: copy.cgroup.rel(),
            filters: &filters,
        };
        let snap = CopySnapshot::read(copy.pid, Role::Sole);
        Ok(checks::spawn_rules::spawned(&x, &snap, &foreign))
    }

    fn extra_targets(&self) -> Vec<String> {
        self.spec
            .extra_mounts
            .iter()
            .map(|m| format!("/{}", m.target.trim_start_matches('/')))
            .collect()
    }

    /// The client capabilities pool copies announce from now on; waiting copies that announced
    /// others are replaced, and a refill launch in flight that announces others is dropped
    /// when it ends.
    pub fn set_capabilities(&mut self, caps: &Value) {
        if &self.caps != caps {
            self.caps = caps.clone();
            self.ready.clear();
        }
    }

    /// A ready copy announcing `caps`, thawed, with the copy deadline `deadline` from now on.
    ///
    /// The rule (docs/sandbox.md, "The pool of spawned copies"): a waiting copy if there is
    /// one; else the refill's launch in flight, waited for, if it announces `caps` and no
    /// copy holds data (the call waits less than a spawn of its own); else one spawned now.
    /// A refill launch still in flight is then frozen until no copy holds data.
    pub fn take(&mut self, caps: &Value, deadline: Instant) -> Result<Spawned> {
        if let Some(r) = &self.refused {
            return Err(Error::Refused(r.clone()));
        }
        self.take_laps.clear();
        let mut t = Instant::now();
        self.set_capabilities(caps);
        // Retired copies still frozen (calls back to back: no idle step ran since) go to the
        // reaper thread, which kills and reaps them beside this call; nothing here waits.
        self.reap_dying();
        self.lap("take.reap", &mut t);
        let mut copy = match self.ready.pop_front() {
            Some(mut c) => {
                // Its call's start_copy takes the endpoint prepared for it.
                if let Some(o) = c.offered.take() {
                    o.taken();
                }
                c
            }
            None => match self.take_in_flight(deadline)? {
                Some(c) => c,
                None => {
                    self.on_call_path += 1;
                    self.spawn(true)?
                }
            },
        };
        self.lap("take.copy", &mut t);
        // From here a copy of the call holds data: a launch in flight may not run beside it.
        if let Some(p) = &mut self.pending {
            if p.frozen_since.is_none() {
                self.refill_held += 1;
            }
            p.freeze();
        }
        self.lap("take.hold_refill", &mut t);
        // Thawed between calls if it waited at the head (thaw_next); else thawed now, asked of
        // the kernel and not waited for: its next input is the call's request on its socket,
        // which it reads once it runs (a copy still frozen for a moment only answers later).
        if !std::mem::take(&mut copy.thawed_ahead) {
            copy.cgroup.request_frozen(false)?;
        }
        copy.set_deadline(deadline);
        self.live.push((copy.pid, copy.ns.clone()));
        self.lap("take.thaw", &mut t);
        Ok(copy)
    }

    /// One lap of the take, from `t` to now (then `t` is now).
    fn lap(&mut self, name: &'static str, t: &mut Instant) {
        let now = Instant::now();
        let us = u64::try_from(now.duration_since(*t).as_micros()).unwrap_or(u64::MAX);
        self.take_laps.push((name, us));
        *t = now;
    }

    /// The laps of the last [`SpawnPool::take`]: the hand-over of retired copies, the copy
    /// (popped, the launch in flight waited for, or spawned), the launch in flight frozen, the
    /// copy thawed.
    pub fn take_phases(&self) -> &[(&'static str, u64)] {
        &self.take_laps
    }

    /// The network namespaces of waiting copies not offered before (each once), for the
    /// broker to bind their endpoints before their call (`germline_broker::prepared`): a
    /// waiting copy is frozen, holds no data, and its endpoint depends on nothing of a call.
    pub fn endpoints_to_prepare(&mut self) -> Vec<std::fs::File> {
        self.ready
            .iter_mut()
            .filter(|c| c.offered.is_none())
            .filter_map(|c| {
                let (ns, offered) = self.dropped_endpoints.offer(c.pid)?;
                c.offered = Some(offered);
                Some(ns)
            })
            .collect()
    }

    /// The network namespaces of copies offered ([`SpawnPool::endpoints_to_prepare`]) and
    /// dropped since without a call (replaced, trimmed, stopped), each once, for the broker
    /// to forget their endpoints (crate::offered).
    pub fn endpoints_to_forget(&mut self) -> Vec<std::fs::File> {
        self.dropped_endpoints.drain()
    }

    /// The refill's launch in flight, for a call that found no waiting copy: thawed and waited
    /// for, if it announces the pool's capabilities and no copy holds data; waited for until
    /// the call's `deadline` at most (docs/sandbox.md, **A call takes**). Past it, the call
    /// fails with [`Error::NotReady`] and the launch stays in flight, pooled at a next idle
    /// step. A launch that failed its start or its checks is counted and logged
    /// ([`PoolStatus::refill_failed`]), and the call spawns its own copy.
    fn take_in_flight(&mut self, deadline: Instant) -> Result<Option<Spawned>> {
        if !self.live.is_empty() || self.pending.as_ref().is_none_or(|p| p.caps != self.caps) {
            return Ok(None);
        }
        let (Some(p), Some(r)) = (self.pending.as_mut(), self.refiller.as_ref()) else {
            return Ok(None);
        };
        p.thaw();
        let launched = match r.wait(Some(deadline.saturating_duration_since(Instant::now()))) {
            Waited::Done(l) => *l,
            Waited::Running => {
                // Still thawed: no copy holds data, since this call's take failed.
                return Err(Error::NotReady(format!(
                    "the pool's refill launch in flight (started {} ms ago) had not finished \
                     its start by the call's deadline; it stays in flight and joins the pool",
                    p.started.elapsed().as_millis()
                )));
            }
            Waited::Gone => {
                self.refiller_gone = true;
                self.pending = None;
                return Ok(None);
            }
        };
        let Some(p) = self.pending.take() else {
            return Ok(None);
        };
        let c = match self.admit(launched, p.spawn_time()) {
            Ok(c) => c,
            Err(e) => {
                self.launch_failed(&e, "a call spawns its own copy");
                return Ok(None);
            }
        };
        self.depth.spawned(c.spawn_time, c.dirty_memory());
        self.refilled += 1;
        self.refill_time += c.spawn_time;
        self.from_refill_in_flight += 1;
        Ok(Some(c))
    }

    /// A refill launch that failed its start or its checks, dropped (killed): counted in
    /// [`PoolStatus::refill_failed`] and logged, so that an operator sees it (its copies are
    /// then spawned on calls' paths, which is slower, not wrong).
    fn launch_failed(&mut self, e: &Error, then: &str) {
        self.refill_failed += 1;
        eprintln!(
            "germline: spawn pool: a refill launch failed and was dropped ({} so far): {e}; {then}",
            self.refill_failed
        );
    }

    /// A copy that made no handshake, for the agent's own `initialize`.
    pub fn take_fresh(&mut self, deadline: Instant) -> Result<Spawned> {
        // This copy will hold data: no waiting copy runs beside it.
        self.refreeze_ahead();
        let mut copy = self.spawn(false)?;
        copy.cgroup.set_frozen(false)?;
        copy.set_deadline(deadline);
        self.live.push((copy.pid, copy.ns.clone()));
        Ok(copy)
    }

    /// Ends a copy's one use: frozen now, killed and reaped off the call's path (between
    /// calls, or at the next call's take without waiting); docs/sandbox.md, **The retire**.
    pub fn retire(&mut self, mut copy: Spawned, result: Result<Value>) -> Result<Value> {
        let pid = copy.pid;
        self.live.retain(|(p, _)| *p != pid);
        let result = copy.retire_later(result);
        self.dying.push(copy);
        // Bounded: a backlog (calls faster than exits) waits for the oldest here.
        while self.dying.len() > MAX_DYING {
            drop(self.dying.remove(0));
        }
        result
    }

    /// Hands the retired copies to the reaper thread, which kills them and releases each once
    /// its every task is gone. Without the thread (it could not start, or died), they are
    /// killed and those already gone released here, never waiting. A reaper with more than
    /// [`MAX_DYING`] still exiting is waited for (calls faster than exits).
    fn reap_dying(&mut self) {
        if self.dying.is_empty() {
            return;
        }
        if self.reaper.is_none() && !self.reaper_gone {
            match Reaper::start() {
                Ok(r) => self.reaper = Some(r),
                Err(_) => self.reaper_gone = true,
            }
        }
        let mut kept = Vec::new();
        for c in std::mem::take(&mut self.dying) {
            let Some(r) = &self.reaper else {
                kept.push(c);
                continue;
            };
            if let Some(c) = r.hand(c) {
                self.reaper_gone = true;
                kept.push(c);
            }
        }
        if self.reaper_gone {
            // A thread that is gone is joined (it ended); the copies are reaped here.
            self.reaper = None;
        }
        kept.retain_mut(|c| !c.try_reap());
        self.dying = kept;
        if let Some(r) = &self.reaper {
            let end = Instant::now() + Duration::from_secs(5);
            while r.busy() > MAX_DYING && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }

    /// The transport's doorbell (germline_sys::doorbell): an idle step waiting for the launch
    /// in flight returns as soon as it rings (the agent's request waits for no timer), and the
    /// launch's end wakes that wait (a refill thread started later pokes it).
    pub fn set_doorbell(&mut self, bell: Arc<germline_sys::doorbell::Doorbell>) {
        self.bell = Some(bell);
    }

    /// Between calls (no copy of a call holds data): the copy the next call takes, the head of
    /// the pool, is thawed now, off the call's path (docs/sandbox.md, **Thawed ahead**). Only
    /// that one: every other waiting copy stays frozen, and the call takes this one first, so
    /// no waiting copy runs while a copy of a call holds data. A thaw that fails leaves it to
    /// the take.
    fn thaw_next(&mut self) {
        if !self.live.is_empty() {
            return;
        }
        if let Some(c) = self.ready.front_mut() {
            if !c.thawed_ahead && c.cgroup.request_frozen(false).is_ok() {
                c.thawed_ahead = true;
            }
        }
    }

    /// A copy is about to hold data other than by a take of the head: any copy thawed ahead
    /// is frozen again first (asked of the kernel; it runs nothing once that lands, and it
    /// holds no data of any call, so the moment before is no one's).
    fn refreeze_ahead(&mut self) {
        for c in self.ready.iter_mut().filter(|c| c.thawed_ahead) {
            if c.cgroup.set_frozen(true).is_ok() {
                c.thawed_ahead = false;
            }
        }
    }

    /// Whether the copy the next call takes was thawed ahead (for tests and status).
    pub fn next_thawed_ahead(&self) -> bool {
        self.ready.front().is_some_and(|c| c.thawed_ahead)
    }

    /// Retired copies not reaped yet, here or on the reaper thread.
    fn dying_count(&self) -> usize {
        self.dying.len() + self.reaper.as_ref().map_or(0, Reaper::busy)
    }

    /// A call begins (its copies are taken next): the pool's call rate counts it.
    pub fn call_begins(&mut self) {
        self.depth.call_begins(Instant::now());
    }

    /// A call's group took a copy (the pool's groups per call count it).
    pub fn group_taken(&mut self) {
        self.depth.group_taken();
    }

    /// Between calls (the runtime's idle steps, when no copy holds data): one step towards the
    /// depth [`PoolDepth::target`] asks for now. A launch in flight is thawed and waited for
    /// a moment ([`IDLE_WAIT`]), then checked and pooled once it ends; otherwise one launch is
    /// started on the refill thread when below the target (and returns at once), or the
    /// youngest waiting copy is killed when above it (calls slowed down, or copies measured
    /// bigger than the memory cap leaves room for). `Ok(true)` while more steps are due.
    pub fn refill_one(&mut self) -> Result<bool> {
        if self.refused.is_some() {
            return Ok(false);
        }
        self.thaw_next();
        if self.live.is_empty() {
            // Between calls: the last call's copies are killed here, after its answer went out.
            self.reap_dying();
            // Copies handed to the reaper thread exit beside the refill's launch: waiting for
            // them here would hold the launch back, and calls back to back (the agent's next
            // request comes within the wait) would then never find a launch in flight, each
            // spawning its own copy on its path. Only copies this thread reaps are waited for.
            if self
                .dying
                .iter()
                .any(|c| c.retired_at.is_some_and(|t| t.elapsed() < EXIT_WAIT))
            {
                // Still exiting: wait a little, a millisecond per step (the transport looks
                // for the agent's next request between steps), so that it is reaped here.
                std::thread::sleep(Duration::from_millis(1));
                return Ok(true);
            }
        }
        if self.pending.is_some() {
            return self.collect();
        }
        let target = self.depth.target(Instant::now());
        if self.ready.len() > target {
            // Dropping a copy kills it and removes its cgroup.
            drop(self.ready.pop_back());
            return Ok(self.ready.len() > target);
        }
        if self.ready.len() == target {
            return Ok(false);
        }
        // The cap on what is measured now, not only on the average: one more copy must fit.
        let held: u64 = self.ready.iter().filter_map(Spawned::dirty_memory).sum();
        let per_copy = self.depth.copy_bytes().unwrap_or(0);
        if held + per_copy > self.opts.memory_cap_bytes {
            return Ok(false);
        }
        if self.refiller.is_none() && !self.refiller_gone {
            self.refiller = Some(Refiller::start(self.launcher.clone(), self.bell.clone())?);
        }
        let cgroup = self.new_cgroup()?;
        let freezer = Cgroup::create(cgroup.rel())?;
        match self.refiller.as_ref() {
            Some(r) if r.send(cgroup, self.caps.clone()) => {
                self.pending = Some(Pending {
                    cgroup: freezer,
                    caps: self.caps.clone(),
                    started: Instant::now(),
                    frozen_since: None,
                    frozen_for: Duration::ZERO,
                });
                Ok(true)
            }
            _ => {
                // No refill thread: spawn here, between calls, as before it existed.
                self.refiller_gone = true;
                let _ = freezer.destroy();
                let c = self.spawn(true)?;
                self.pool_refilled(c, held)
            }
        }
    }

    /// The idle step with a launch in flight: thawed (no copy holds data between calls),
    /// waited for [`IDLE_WAIT`], then admitted to the pool once it ends.
    fn collect(&mut self) -> Result<bool> {
        if !self.live.is_empty() {
            return Ok(false);
        }
        if let Some(p) = &mut self.pending {
            p.thaw();
        }
        let Some(r) = &self.refiller else {
            self.pending = None;
            return Ok(true);
        };
        let waited = match &self.bell {
            // Looked at after the generation is read: a launch that ends in between pokes it.
            Some(b) => {
                let g = b.generation();
                match r.wait(Some(Duration::ZERO)) {
                    Waited::Running if !b.sleep_since(g, IDLE_WAIT) => r.wait(Some(Duration::ZERO)),
                    w => w,
                }
            }
            None => r.wait(Some(IDLE_WAIT)),
        };
        let launched = match waited {
            Waited::Running => return Ok(true),
            Waited::Gone => {
                self.refiller_gone = true;
                self.pending = None;
                return Ok(true);
            }
            Waited::Done(l) => *l,
        };
        let Some(p) = self.pending.take() else {
            return Ok(true);
        };
        if p.caps != self.caps {
            // Announces capabilities no call wants any more: dropped (killed).
            drop(launched);
            return Ok(true);
        }
        let c = match self.admit(launched, p.spawn_time()) {
            Ok(c) => c,
            Err(e) => {
                self.launch_failed(&e, "the next idle step launches another");
                return Err(e);
            }
        };
        let held: u64 = self.ready.iter().filter_map(Spawned::dirty_memory).sum();
        self.pool_refilled(c, held)?;
        Ok(true)
    }

    /// A refill copy `c` joins the pool (the waiting copies hold `held` bytes), unless it is
    /// bigger than the memory cap leaves room for.
    fn pool_refilled(&mut self, c: Spawned, held: u64) -> Result<bool> {
        let bytes = c.dirty_memory();
        self.depth.spawned(c.spawn_time, bytes);
        self.refilled += 1;
        self.refill_time += c.spawn_time;
        if bytes.is_some_and(|b| held + b > self.opts.memory_cap_bytes) {
            // Bigger than measured before: over the cap, it does not join the pool.
            return Ok(false);
        }
        self.ready.push_back(c);
        self.peak_ready = self.peak_ready.max(self.ready.len());
        self.peak_ready_bytes = self.peak_ready_bytes.max(held + bytes.unwrap_or(0));
        Ok(self.ready.len() < self.depth.target(Instant::now()))
    }

    /// Whether a refill launch is in flight, and whether the kernel has its cgroup frozen now.
    pub fn refill_in_flight(&self) -> Option<bool> {
        self.pending.as_ref().map(|p| p.cgroup.is_frozen())
    }

    /// Host pids of the refill launch in flight (empty before its keeper added it).
    pub fn in_flight_pids(&self) -> Vec<i32> {
        self.pending
            .as_ref()
            .and_then(|p| p.cgroup.procs().ok())
            .unwrap_or_default()
    }

    pub fn status(&self) -> PoolStatus {
        PoolStatus {
            ready: self.ready.len(),
            target: self.depth.target(Instant::now()),
            min: self.opts.min,
            max: self.opts.max,
            spawned: self.made,
            mean_spawn_ms: if self.made == 0 {
                0.0
            } else {
                self.spawn_total.as_secs_f64() * 1000.0 / self.made as f64
            },
            refill_per_s: (!self.refill_time.is_zero())
                .then(|| self.refilled as f64 / self.refill_time.as_secs_f64()),
            pooled_copy_private_kb: self.depth.copy_bytes().unwrap_or(0) >> 10,
            peak_ready: self.peak_ready,
            peak_ready_private_bytes: self.peak_ready_bytes,
            ready_private_bytes: self.ready.iter().filter_map(Spawned::dirty_memory).sum(),
            memory_cap_bytes: self.opts.memory_cap_bytes,
            refused: self.refused.clone(),
            on_call_path: self.on_call_path,
            from_refill_in_flight: self.from_refill_in_flight,
            refill_held: self.refill_held,
            refill_failed: self.refill_failed,
            warm_failed: self
                .launcher
                .warm_failed
                .load(std::sync::atomic::Ordering::Relaxed),
            dying: self.dying_count(),
        }
    }

    /// Host pids of the waiting copies.
    pub fn ready_pids(&self) -> Vec<i32> {
        self.ready.iter().map(Spawned::pid).collect()
    }

    /// Kills every waiting copy and the launch in flight, ends the refill thread and removes
    /// the pool's cgroups; the pool's status as it was, the first time only.
    pub fn stop(&mut self) -> Option<PoolStatus> {
        let st = (!self.stopped).then(|| self.status());
        self.stopped = true;
        self.ready.clear();
        // Dropping a retired copy kills it and waits for it; so does the reaper (joined).
        self.dying.clear();
        self.reaper = None;
        if let Some(p) = self.pending.take() {
            // Its handshake then fails at once; the thread hands the copy back to be dropped.
            let _ = p.cgroup.set_frozen(false);
            let _ = p.cgroup.kill_now();
        }
        // Joins the thread (Refiller's Drop), which kills what it still holds.
        self.refiller = None;
        Cgroup::remove_parent(&self.base_rel);
        st
    }
}

impl Drop for SpawnPool {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}
