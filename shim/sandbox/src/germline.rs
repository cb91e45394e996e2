//! A release's germline: started from a rootfs and a [`LaunchSpec`], checked (G1-G3) before
//! every fork, frozen whenever it is not forking, and the source of confined copies.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{json, Value};

use crate::cgroup::Cgroup;
use crate::checks::snapshot::GermlineSnapshot;
use crate::checks::{self, CopyExpect, GermlineFacts, Role};
use crate::copy::{Copy, Corpse, Item, PoolState};
use crate::error::{Error, Result};
use crate::itemview;
use crate::landlock;
use crate::launch::{self, Prepared};
use crate::mounts::ItemStore;
use crate::procfs::{self, Namespaces};
use crate::protocol::{self, FromCopy, FromGermline, LandlockLayer, ToCopy, ToGermline};
use crate::seccomp::{Program, SocketFamilies};
use crate::spec::{Execution, Language, LaunchSpec};
use crate::sys;
use crate::tree::TreeEntry;

/// The Python bootstrap, run with `python3 -c` so that it never has to exist in the rootfs.
/// The Python bootstrap: the twin-input shim (`germline_twin.py`) followed by the bootstrap.
pub const PYTHON_BOOTSTRAP: &str = concat!(
    include_str!("../bootstrap/python/germline_twin.py"),
    include_str!("../bootstrap/python/germline_bootstrap.py")
);

/// Size limit of a germline's item store (a tmpfs: only what is written counts).
const ITEM_STORE_BYTES: u64 = 1 << 30;
/// Killed copies whose exit may overlap the next calls before one is waited for.
const MAX_DYING: usize = 4;
/// The deepest a pool grows for multi-group calls ([`Germline::want_depth`]).
pub const MAX_POOL: usize = 8;
/// Calls after the last multi-group call for which the pool stays deep enough for its groups
/// ([`Germline::want_depth`]); then it returns to `Options::pool`.
pub const DEEP_CALLS: u64 = 32;

/// Host uid and gid that root inside every germline's user namespace maps to.
pub const HOST_ID: u32 = 2_100_000;

/// Switches that turn one mechanism off, for the tests that compare off and on (Table XII).
/// Only with the cargo feature `ablation`: a build without it has neither this type nor the
/// code paths it switches (see `ablated!`).
#[cfg(feature = "ablation")]
#[derive(Debug, Clone, Default)]
pub struct Ablation {
    /// Skip the outside checks on copies (never in production).
    pub skip_copy_checks: bool,
    /// Skip G1-G3 (never in production).
    pub skip_germline_checks: bool,
    /// No Landlock ruleset on the germline.
    pub no_landlock: bool,
    /// Copies share the germline's PID namespace (O3 off).
    pub no_pid_namespace: bool,
    /// Kill only the copy's own process at the end, not what is left in its cgroup.
    pub no_cgroup_sweep: bool,
    /// No Landlock rules on the item store's directories (items at their own paths are then
    /// mounted but unreadable).
    pub no_item_rules: bool,
    /// Neither seccomp layer (the germline's, the copy's) restricts socket families: copies
    /// may open `AF_VSOCK`, `AF_NETLINK` and the rest (docs/sandbox.md, "Socket families").
    pub any_socket_family: bool,
}

/// Whether the ablation switch `$field` of `$opts` is on: the constant `false` without the
/// feature `ablation`, so what it guards is compiled out of production builds.
macro_rules! ablated {
    ($opts:expr, $field:ident) => {{
        #[cfg(feature = "ablation")]
        let on = $opts.ablation.$field;
        #[cfg(not(feature = "ablation"))]
        let on = false;
        on
    }};
}

impl Options {
    /// The socket families the seccomp layers allow.
    fn socket_families(&self) -> SocketFamilies {
        if ablated!(self, any_socket_family) {
            SocketFamilies::Any
        } else {
            SocketFamilies::Allowlist
        }
    }
}

/// Options of a germline beyond its launch spec.
#[derive(Debug, Clone)]
pub struct Options {
    /// A name unique on this host (cgroup names derive from it).
    pub id: String,
    /// Pre-forked, checked, data-free copies to keep ready.
    pub pool: usize,
    /// Ablations for tests (only with the feature `ablation`).
    #[cfg(feature = "ablation")]
    pub ablation: Ablation,
    /// Bootstrap source (tests substitute a tampered one to show that the checks catch it).
    pub bootstrap: String,
    /// CPUs of the germline and so of its copies (empty: inherited from the shim).
    pub cpus: Vec<usize>,
    /// Copies run the tool as PID 2 under a reaper as PID 1 (docs/sandbox.md, "The tool is
    /// PID 2"): the tool cannot tell a copy by `getpid() == 1`. One more fork per copy.
    pub reaper: bool,
    /// The most copies the pool grows to for multi-group calls: the policy's `[limits]
    /// pool_max` (None: [`MAX_POOL`], which also bounds it).
    pub pool_max: Option<usize>,
    /// The most private memory the pool's waiting copies may hold together (bytes; the
    /// policy's `[pool] memory_mb`, as for a spawned pool; None: no cap). The refill forks no
    /// copy that would take them past it ([`Germline::refill_one`]).
    pub memory_cap_bytes: Option<u64>,
}

impl Options {
    /// Defaults for `id`.
    pub fn new(id: &str) -> Options {
        Options {
            id: id.to_string(),
            pool: 0,
            #[cfg(feature = "ablation")]
            ablation: Ablation::default(),
            bootstrap: PYTHON_BOOTSTRAP.to_string(),
            cpus: Vec::new(),
            reaper: false,
            pool_max: None,
            memory_cap_bytes: None,
        }
    }
}

/// A live germline.
#[derive(Debug)]
pub struct Germline {
    pub spec: LaunchSpec,
    opts: Options,
    keeper: i32,
    pid: i32,
    /// A pidfd of the germline: readable once it exited ([`Germline::death`]).
    pidfd: Option<OwnedFd>,
    /// The keeper's wait status, once reaped (it exits when the germline does).
    keeper_status: Option<i32>,
    /// How the germline died, once [`Germline::death`] found it gone.
    died: Option<String>,
    ctl: OwnedFd,
    facts: GermlineFacts,
    ns: Namespaces,
    base_rel: String,
    cgroup: Cgroup,
    copies_made: u64,
    /// Host pids of the copies this germline forked that may still live (each found by the
    /// shim itself, [`Germline::unmoved_children`]); pruned at each fork.
    forked: Vec<i32>,
    pool: VecDeque<Copy>,
    /// Whether the pool's waiting copies were asked to freeze for the call that took a copy
    /// ([`Germline::pause_pool`]); they are thawed between calls.
    pool_paused: bool,
    /// The pool copy [`Germline::call_begins`] left running (the ready one the call takes
    /// next), by pid.
    spared: Option<i32>,
    /// Pool copies to keep: `Options::pool`, raised to the groups of a multi-group call
    /// ([`Germline::want_depth`]) so that every group's copy can come from the pool.
    depth: usize,
    /// Calls begun so far, and the call count until which the pool stays deep for the last
    /// multi-group call's groups ([`Germline::want_depth`]).
    calls_begun: u64,
    deep_until: u64,
    /// Copies handed out since the last call began or the pool was last refilled: the first
    /// must be a ready pool copy ([`Germline::copy_for`]).
    taken_in_call: usize,
    /// The client capabilities a pool copy's `initialize` announces
    /// ([`Germline::set_pool_capabilities`]: the agent's, as its group's copy last had them).
    pool_caps: Value,
    /// Killed copies whose exit the kernel is still completing ([`Germline::retire`]).
    dying: Vec<Corpse>,
    /// Sub-phases of the last [`Germline::copy`] in microseconds (empty: from the pool).
    fork_phases: Vec<(&'static str, u64)>,
    warm: bool,
    copy_landlock: LandlockLayer,
    /// The private store of items delivered at their own paths (mounts.rs).
    items: std::sync::Arc<ItemStore>,
    /// Why the last directory view written ahead failed ([`Germline::trees_ahead`]).
    ahead_failed: Option<String>,
    /// The canonical rootfs on the host.
    rootfs: std::path::PathBuf,
    stopped: bool,
    /// Set once the release failed a check: it stays refused.
    refused: Option<String>,
    /// G1-G3 as [`Germline::prepare_fork`] read them between calls, while the germline was
    /// frozen; cleared whenever it is thawed. A frozen germline runs no instruction, and only
    /// this shim writes its cgroup, so what they read cannot have changed until the next thaw.
    checked_frozen: Option<Vec<String>>,
    /// The next copy's cgroup, made with its limits between calls ([`Germline::prepare_fork`]).
    spare_cgroup: Option<Cgroup>,
    /// Copy cgroups made (their names' numbers; a spare one is made before its copy).
    cgroups_made: u64,
    /// Offered pool copies dropped unused, for the broker to forget (crate::offered).
    dropped_endpoints: crate::offered::DroppedEndpoints,
    /// Refills the memory cap held back ([`Options::memory_cap_bytes`]), and the waiting
    /// copies' private memory as last measured for it.
    cap_held: u64,
    pool_private_bytes: u64,
    /// The manifest's warm calls that failed in the warming session, `'tool': why` (as the
    /// germline says).
    warm_failed: Vec<String>,
}

/// What `germline status` shows.
#[derive(Debug, Serialize)]
pub struct Status {
    pub id: String,
    pub pid: i32,
    pub frozen: bool,
    pub warm: bool,
    /// The manifest's warm calls that failed in the warming session: skipped (a warm call is
    /// an optimisation), each said on the germline's stderr.
    pub warm_failed: u64,
    pub checks: Vec<String>,
    /// The pool's memory cap (bytes; None: none), the waiting copies' private memory as last
    /// measured for it, and the refills it held back (a copy not forked because it would not
    /// fit).
    pub pool_memory_cap_bytes: Option<u64>,
    pub pool_private_bytes: u64,
    pub pool_cap_held: u64,
    pub pool: usize,
    pub copies_made: u64,
    pub refused: Option<String>,
}

impl Germline {
    /// Creates the germline container and runs the release's initialisation up to its fork
    /// point. Fails with [`Error::Refused`] for runtimes that can never pass G1.
    pub fn start(spec: LaunchSpec, opts: Options) -> Result<Germline> {
        if spec.language != Language::Python || spec.execution == Execution::Spawn {
            return Err(Error::Refused(format!(
                "a {:?} release with {:?} execution has no germline: only Python forks (other \
                 runtimes start threads before any fork point, so their germline could never \
                 pass G1); its copies are spawned (germline_sandbox::spawn::SpawnPool)",
                spec.language, spec.execution
            )));
        }
        let base_rel = germline_sys::paths::germline_cgroup(&opts.id);
        let cgroup = Cgroup::create(&format!("{base_rel}/init"))?;
        let cpus = opts.cpus.clone();
        match Self::start_in(spec, opts, base_rel.clone(), cgroup) {
            Ok(g) if cpus.is_empty() => Ok(g),
            Ok(mut g) => match sys::set_affinity(g.pid, &cpus) {
                Ok(()) => Ok(g),
                Err(e) => {
                    let _ = g.stop();
                    Err(Error::sys(format!("pin the germline to CPUs {cpus:?}"), e))
                }
            },
            Err(e) => {
                Cgroup::remove_parent(&base_rel);
                Err(e)
            }
        }
    }

    fn start_in(
        spec: LaunchSpec,
        opts: Options,
        base_rel: String,
        cgroup: Cgroup,
    ) -> Result<Germline> {
        let fail = |e: Error, cg: &Cgroup| {
            let _ = cg.destroy();
            e
        };
        let config = json!({"path": spec.module_path, "entry": spec.entry, "warm": spec.warm,
            "warm_calls": spec.warm_calls, "twin": spec.twin_forked});
        let argv = vec![
            spec.interpreter.clone(),
            "-I".into(),
            "-B".into(),
            "-c".into(),
            opts.bootstrap.clone(),
            config.to_string(),
        ];
        let mut env = vec![
            "PATH=/usr/bin:/bin".to_string(),
            "HOME=/".into(),
            "LANG=C.UTF-8".into(),
            "TZ=UTC".into(),
            // Numeric libraries pinned to one thread: their pools would fail G1.
            "OMP_NUM_THREADS=1".into(),
            "OPENBLAS_NUM_THREADS=1".into(),
            "MKL_NUM_THREADS=1".into(),
            "NUMEXPR_NUM_THREADS=1".into(),
            "PYTHONDONTWRITEBYTECODE=1".into(),
        ];
        env.extend(spec.env.iter().cloned());
        let items = ItemStore::new(ITEM_STORE_BYTES).map_err(|e| fail(e, &cgroup))?;
        // Directory views written ahead between calls (`refill_pool`, `refill_one`).
        items.set_ahead(true);
        let slot_fds = if ablated!(opts, no_item_rules) {
            vec![]
        } else {
            items.slot_fds()
        };
        let prepared =
            Prepared::new(&spec, &argv, &env, &slot_fds).map_err(|e| fail(e, &cgroup))?;
        let rootfs = spec
            .rootfs
            .canonicalize()
            .map_err(|e| fail(Error::sys("canonicalize the rootfs", e), &cgroup))?;
        #[cfg(feature = "ablation")]
        let prepared = {
            let mut prepared = prepared;
            if opts.ablation.no_landlock {
                prepared.without_landlock();
            }
            if opts.ablation.any_socket_family {
                prepared.set_filter(&Program::germline_with(SocketFamilies::Any));
            }
            prepared
        };
        cgroup
            .set_limits(
                spec.limits.memory_bytes.saturating_mul(4),
                spec.limits.pids,
                100,
            )
            .map_err(|e| fail(e.into(), &cgroup))?;
        let started = launch::start(&prepared, HOST_ID, HOST_ID, &|pid| Ok(cgroup.add(pid)?))
            .map_err(|e| fail(e, &cgroup))?;
        let mut g = Germline {
            dropped_endpoints: Default::default(),
            warm_failed: Vec::new(),
            cap_held: 0,
            pool_private_bytes: 0,
            keeper: started.keeper,
            pid: started.pid,
            // Opened while the germline is known alive (it has not answered yet, so it has not
            // exited: a dead one would fail `recv_ctl` below). Without pidfds (Linux < 5.3)
            // death is read from the keeper and /proc instead.
            pidfd: sys::pidfd_open(started.pid).ok(),
            keeper_status: None,
            died: None,
            facts: GermlineFacts {
                pid: started.pid,
                ctl_inode: started.ctl_inode,
                rootfs_mnt_id: 0,
                rootfs_dev: (0, 0),
                devnull_mnt_ids: vec![],
                extra_mounts: vec![],
            },
            ctl: started.ctl,
            ns: Namespaces::default(),
            base_rel,
            cgroup,
            copies_made: 0,
            forked: Vec::new(),
            pool: VecDeque::new(),
            pool_paused: false,
            spared: None,
            depth: opts.pool,
            calls_begun: 0,
            deep_until: 0,
            taken_in_call: 0,
            pool_caps: json!({}),
            dying: Vec::new(),
            fork_phases: Vec::new(),
            warm: false,
            copy_landlock: LandlockLayer::default(),
            items,
            ahead_failed: None,
            rootfs,
            stopped: false,
            refused: None,
            checked_frozen: None,
            spare_cgroup: None,
            cgroups_made: 0,
            spec,
            opts,
        };
        // From here on, dropping `g` kills and removes everything.
        let extra_targets: Vec<String> = g
            .spec
            .extra_mounts
            .iter()
            .map(|m| format!("/{}", m.target.trim_start_matches('/')))
            .collect();
        g.facts = GermlineFacts::read(g.pid, started.ctl_inode, &extra_targets)?;
        g.ns = Namespaces::of(g.pid)?;
        g.copy_landlock = g.copy_landlock_config();
        let deadline = Instant::now() + Duration::from_millis(g.spec.limits.init_timeout_ms);
        let msg = g.recv_ctl(deadline)?;
        match protocol::known::<FromGermline>(&msg) {
            Some(FromGermline::Ready { warm, warm_failed }) => {
                g.warm = warm;
                // Skipped, not fatal (a warm call is an optimisation), but never silent: the
                // germline's stderr is /dev/null, so the shim says each (stop 39 found
                // mcp-server-git's failing unseen for days).
                for why in &warm_failed {
                    eprintln!(
                        "germline: {}: warm call {why} (failed in the germline's warming \
                         session; skipped)",
                        g.opts.id
                    );
                }
                g.warm_failed = warm_failed;
            }
            Some(FromGermline::Error { reason }) => {
                return Err(Error::Init(reason.unwrap_or_else(|| "?".into())));
            }
            _ => return Err(Error::Protocol(format!("unexpected first message {msg}"))),
        }
        g.cgroup.set_frozen(true)?;
        g.refill_pool()?;
        Ok(g)
    }

    fn copy_landlock_config(&self) -> LandlockLayer {
        // The copy's own layer scopes signals and abstract sockets to its own domain (so
        // siblings and the germline are out of reach) and confines writes and TCP. It leaves
        // reading and executing to the germline's layer, installed by the shim and inherited:
        // that layer covers the item directories mounted into the copy later (mounts.rs),
        // which no rule the copy could make before its mounts exist would.
        let abi = landlock::abi();
        // Writable directory items (issue 27) sit in the item store's directories, which no
        // rule of this layer can name: it leaves their write rights to the germline's layer,
        // which grants them there (by descriptor), on /run and on /dev/null only.
        // REFER is the exception: every layer denies it unless one of its own rules grants
        // it (git renames objects into their directories), so this layer grants it on `/`,
        // the only ancestor of a slot's mount point it can name (a covered mount point's own
        // rule would be skipped: docs/sandbox.md). REFER alone allows no write: the germline's
        // layer still decides where files may be made and removed.
        let tree_rights = if self.spec.writable_trees {
            landlock::TREE_WRITE & !landlock::REFER
        } else {
            0
        };
        let handled = landlock::all_fs_rights(abi) & !landlock::READ & !tree_rights;
        let mut rules = vec![("/dev/null".to_string(), landlock::READ_WRITE_FILE)];
        if self.spec.writable_trees {
            rules.push(("/".to_string(), landlock::REFER));
        }
        // As in the germline's layer: /run holds the mount points of items, scratch and state.
        if self.spec.scratch || self.spec.state_bytes > 0 {
            rules.push(("/run".to_string(), handled));
        }
        // A rule must grant some handled right (Landlock refuses an empty one): /dev/null's
        // read and write are left to the germline's layer when this one handles neither.
        rules.retain(|(_, rights)| rights & handled != 0);
        LandlockLayer {
            fs: handled,
            net: 3,
            scoped: 3,
            rules,
            ports: self.spec.egress_port.into_iter().collect(),
        }
    }

    /// Host pids of the pool's copies.
    pub fn pool_pids(&self) -> Vec<i32> {
        self.pool.iter().map(Copy::pid).collect()
    }

    /// Host pids of every live copy (pool included).
    pub fn copy_pids(&self) -> Vec<i32> {
        self.live_children()
    }

    /// Host pid of the germline process.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// What the shim knows of the germline independently of it (G1-G3 judge against it).
    pub fn facts(&self) -> &GermlineFacts {
        &self.facts
    }

    /// The germline's namespaces.
    pub fn namespaces(&self) -> &Namespaces {
        &self.ns
    }

    /// Whether the synthetic warming session ran.
    pub fn warmed(&self) -> bool {
        self.warm
    }

    /// How many of the manifest's warm calls failed in the warming session (skipped, each
    /// said on the germline's stderr).
    pub fn warm_failed(&self) -> u64 {
        self.warm_failed.len() as u64
    }

    /// Refills the pool's memory cap held back ([`Options::memory_cap_bytes`]).
    pub fn pool_cap_held(&self) -> u64 {
        self.cap_held
    }

    /// Those failed warm calls, each `'tool': why`.
    pub fn warm_failures(&self) -> &[String] {
        &self.warm_failed
    }

    /// Copies in the pool.
    pub fn pool_len(&self) -> usize {
        self.pool.len()
    }

    /// The cgroup of the germline.
    pub fn cgroup(&self) -> &Cgroup {
        &self.cgroup
    }

    fn recv_ctl(&self, deadline: Instant) -> Result<Value> {
        let left = deadline.saturating_duration_since(Instant::now());
        let ms = i32::try_from(left.as_millis()).unwrap_or(i32::MAX);
        if !sys::poll_readable(self.ctl.as_raw_fd(), ms)
            .map_err(|e| Error::sys("poll control socket", e))?
        {
            return Err(Error::Protocol(
                "the germline did not answer in time".into(),
            ));
        }
        let mut buf = vec![0u8; 1 << 16];
        let n = sys::recv(self.ctl.as_raw_fd(), &mut buf)
            .map_err(|e| Error::sys("recv control socket", e))?;
        if n == 0 {
            return Err(Error::Init("the germline exited".into()));
        }
        protocol::decode(&buf[..n]).map_err(|e| Error::Protocol(e.to_string()))
    }

    /// Whether the germline process is gone, and if so how it ended, e.g. `the germline (pid
    /// 4250) died: killed by signal 9 (SIGKILL)`. Waits up to `wait` for an exit that is
    /// under way (a germline that is PID 1 of its namespace exits only after every copy in
    /// it is gone). Cheap when it is alive: one `waitpid(WNOHANG)` on the keeper and one
    /// `poll` of the germline's pidfd.
    ///
    /// Under cgroup v1's freezer a frozen germline that was sent SIGKILL dies only when it is
    /// thawed, i.e. at its next fork; until then it is not gone (and it forks nothing).
    pub fn death(&mut self, wait: Duration) -> Option<String> {
        if let Some(d) = &self.died {
            return Some(d.clone());
        }
        if self.stopped {
            return None;
        }
        let ms = i32::try_from(wait.as_millis()).unwrap_or(i32::MAX);
        let gone = self.reap_keeper()
            || match &self.pidfd {
                Some(fd) => sys::poll_readable(fd.as_raw_fd(), ms).unwrap_or(false),
                None => {
                    let t = Instant::now();
                    loop {
                        if !procfs::alive(self.pid) {
                            break true;
                        }
                        if t.elapsed() >= wait {
                            break false;
                        }
                        std::thread::sleep(Duration::from_millis(2));
                    }
                }
            };
        // An exiting germline that is PID 1 of its namespace waits for every process in it
        // before it becomes a zombie, and under cgroup v1 a frozen pool copy never dies: it is
        // gone all the same once it is exiting (it forks nothing more).
        let gone = gone || (!wait.is_zero() && exiting(self.pid));
        if !gone {
            return None;
        }
        // The keeper waits for the germline and exits with its status: give it a moment.
        let t = Instant::now();
        while !self.reap_keeper() && t.elapsed() < Duration::from_millis(300) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let d = describe_death(self.pid, self.keeper, self.keeper_status);
        self.died = Some(d.clone());
        Some(d)
    }

    /// Reaps the keeper if it exited (never blocks); true once it has.
    fn reap_keeper(&mut self) -> bool {
        if self.keeper_status.is_some() {
            return true;
        }
        match sys::waitpid(self.keeper, libc::WNOHANG) {
            Ok((pid, st)) if pid == self.keeper => {
                self.keeper_status = Some(st);
                true
            }
            _ => false,
        }
    }

    /// G1-G3, read from outside. Empty: the germline may fork.
    pub fn check(&self) -> Vec<String> {
        checks::rules::germline(&self.facts, &GermlineSnapshot::read(self.pid, &self.cgroup))
    }

    /// The germline's children still in its own cgroup: after a fork, the new copy (every
    /// earlier copy was moved to a cgroup of its own, and G1 found the germline alone in its
    /// cgroup before the fork). Read from `cgroup.procs`, a snapshot of the group, not from
    /// `/proc/PID/task/*/children`: that list is built one entry per lock, and a sibling
    /// that exits during the read (the last copy, killed at `SCHED_IDLE`) shifts the rest, so
    /// a live copy can be missing from it (fs/proc/array.c says as much). Diffing two such
    /// reads once showed a pool copy as a second new child and refused a benign release.
    fn unmoved_children(&self) -> Result<Vec<i32>> {
        let mut out = Vec::new();
        for pid in self.cgroup.procs()? {
            if pid == self.pid {
                continue;
            }
            // A copy's own child (a copy forking before the shim moves it) is not the
            // germline's child: G1 refuses it at the next fork, still in the germline's group.
            let parent = procfs::status(pid)
                .ok()
                .and_then(|st| st.get("PPid").and_then(|v| v.parse::<i32>().ok()));
            if parent == Some(self.pid) && procfs::alive(pid) {
                out.push(pid);
            }
        }
        Ok(out)
    }

    /// Host pids of the germline's live children (its copies): the copies it forked, as the
    /// shim found each, that are still alive. Not `/proc/G/task/G/children`, which can skip a
    /// live child ([`Germline::unmoved_children`]): a copy missing here would be left out of
    /// the next copy's namespace comparison. The germline forks nothing else: it runs only
    /// for a fork command, and a command that leaves two children refuses the release.
    fn live_children(&self) -> Vec<i32> {
        self.forked
            .iter()
            .copied()
            .filter(|k| procfs::alive(*k))
            .collect()
    }

    /// Processes of this germline's user namespace other than the germline and its pool: what a
    /// finished call left behind (O3).
    pub fn stray_processes(&self) -> Vec<i32> {
        let keep: Vec<i32> = std::iter::once(self.pid)
            .chain(self.pool.iter().map(Copy::pid))
            .chain(self.pool.iter().filter_map(Copy::tool_pid))
            .collect();
        let mut out = Vec::new();
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return out;
        };
        for e in dir.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                continue;
            };
            if keep.contains(&pid) || pid == self.keeper || !procfs::alive(pid) {
                continue;
            }
            if Namespaces::of(pid).is_ok_and(|ns| ns.user == self.ns.user) {
                out.push(pid);
            }
        }
        out
    }

    /// Status for `germline status`.
    pub fn status(&self) -> Status {
        Status {
            id: self.opts.id.clone(),
            pid: self.pid,
            frozen: self.cgroup.is_frozen(),
            warm: self.warm,
            warm_failed: self.warm_failed.len() as u64,
            checks: self.check(),
            pool_memory_cap_bytes: self.opts.memory_cap_bytes,
            pool_private_bytes: self.pool_private_bytes,
            pool_cap_held: self.cap_held,
            pool: self.pool.len(),
            copies_made: self.copies_made,
            refused: self.refused.clone(),
        }
    }

    /// Forks pool copies up to the configured size. Only between calls: no copy holds data.
    pub fn refill_pool(&mut self) -> Result<()> {
        self.kill_retired();
        self.pause_pool(false);
        self.taken_in_call = 0;
        self.trim_pool();
        while self.pool.len() < self.depth && self.fits_one_more() {
            let c = self.fork_copy_with(true)?;
            self.pool.push_back(c);
        }
        self.write_ahead();
        self.prepare_fork()
    }

    /// Between calls, once the pool is refilled: the last directory view a copy got,
    /// written into a free item store slot for the next copy with exactly that view
    /// (`ItemStore::write_ahead`). A failure only means the next such copy has its view
    /// written on the call's path, as without it: not an error of the refill.
    fn write_ahead(&mut self) {
        if let Err(e) = self.items.write_ahead() {
            self.ahead_failed = Some(e.to_string());
        }
    }

    /// How many copies were given a directory view written ahead, and why the last write
    /// ahead failed, if one did.
    pub fn trees_ahead(&self) -> (u64, Option<&str>) {
        (self.items.taken_ahead(), self.ahead_failed.as_deref())
    }

    /// Whether one more pool copy fits under the memory cap: the waiting copies' private
    /// memory (`Private_Clean` + `Private_Dirty` of each copy's processes: what a forked copy
    /// holds beyond the pages it still shares with its germline) plus one more of their mean
    /// size. The first copy always fits (nothing measured yet), as in a spawned pool. Read
    /// only when a copy would be forked, between calls.
    fn fits_one_more(&mut self) -> bool {
        let Some(cap) = self.opts.memory_cap_bytes else {
            return true;
        };
        if self.pool.is_empty() {
            self.pool_private_bytes = 0;
            return true;
        }
        let held: u64 = self.pool.iter().filter_map(Copy::private_memory).sum();
        self.pool_private_bytes = held;
        let per_copy = held / self.pool.len() as u64;
        if held.saturating_add(per_copy) > cap {
            self.cap_held += 1;
            return false;
        }
        true
    }

    /// Forks one pool copy if the pool is short; `Ok(true)` while it still is (so a caller
    /// can stop between forks when a call arrives).
    pub fn refill_one(&mut self) -> Result<bool> {
        self.kill_retired();
        self.pause_pool(false);
        self.taken_in_call = 0;
        self.trim_pool();
        // Held back by the memory cap: the pool stays as deep as fits, until a call takes one.
        let fits = self.pool.len() < self.depth && self.fits_one_more();
        if fits {
            let c = self.fork_copy_with(true)?;
            self.pool.push_back(c);
        }
        let more = fits && self.pool.len() < self.depth;
        if !more {
            self.write_ahead();
            self.prepare_fork()?;
        }
        Ok(more)
    }

    /// A call begins: the pool's waiting copies but the first ready one (the one the call
    /// takes next) are frozen from now on, so that a refill's warming does not compete with
    /// the call's own work (the broker's Plan, item reads, a fork on the call's path when no
    /// copy is ready). The ready one is left running: thawing it again when it is handed out
    /// would cost the call more than it saves.
    pub fn call_begins(&mut self) {
        self.taken_in_call = 0;
        self.calls_begun += 1;
        if self.calls_begun > self.deep_until {
            // No multi-group call for DEEP_CALLS calls: back to the configured depth.
            self.depth = self.opts.pool;
        }
        if self.pool_paused {
            return;
        }
        self.pool_paused = true;
        let ready = self
            .pool
            .iter_mut()
            .position(|c| c.pool_state() == PoolState::Ready);
        self.spared = ready.map(|i| self.pool[i].pid());
        for (i, c) in self.pool.iter().enumerate() {
            if Some(i) != ready {
                let _ = c.cgroup().request_frozen(true);
            }
        }
    }

    /// A call of `groups` groups came: from the next refill on, the pool keeps at least that
    /// many copies, so that every group's copy comes from it and none is forked on a later
    /// multi-group call's path. The depth is the largest group count of the multi-group calls
    /// among the last [`DEEP_CALLS`] calls, bounded by `Options::pool_max` (the policy's
    /// `[limits] pool_max`) and [`MAX_POOL`]; after that many calls without one it returns to
    /// `Options::pool`. Only a germline with a pool grows it.
    pub fn want_depth(&mut self, groups: usize) {
        if self.opts.pool == 0 {
            return;
        }
        let cap = self
            .opts
            .pool_max
            .map_or(MAX_POOL, |m| m.min(MAX_POOL))
            .max(self.opts.pool);
        self.depth = self.depth.max(groups.min(cap));
        self.deep_until = self.calls_begun + DEEP_CALLS;
    }

    /// Between calls, a pool deeper than its depth (it returned to `Options::pool`) gives its
    /// extra copies back: the newest first, thawed, then killed (they never held data).
    fn trim_pool(&mut self) {
        while self.pool.len() > self.depth {
            let Some(c) = self.pool.pop_back() else {
                break;
            };
            // v1's freezer keeps a frozen task from dying: thawed before it is killed.
            let _ = c.cgroup().request_frozen(false);
            let _ = self.retire(c, Ok(Value::Null));
        }
    }

    /// The network namespaces of ready pool copies not offered before (each once), for the
    /// broker to bind their endpoints before their call (`germline_broker::prepared`). Only a
    /// copy in a network namespace of its own, neither the shim's nor the germline's, is
    /// offered: a listener is bound where it is offered.
    pub fn endpoints_to_prepare(&mut self) -> Vec<std::fs::File> {
        let germline_net = self.ns.net;
        // The shim's own namespaces, read once and only when a copy is to be offered: this
        // runs after every call's idle steps, most often with nothing to offer.
        let mut shim: Option<Option<Namespaces>> = None;
        let mut out = Vec::new();
        for c in self.pool.iter_mut() {
            if c.offered.is_some() || c.pool_state() != PoolState::Ready {
                continue;
            }
            let Ok(ns) = Namespaces::of(c.pid()) else {
                continue;
            };
            let shim = shim.get_or_insert_with(|| Namespaces::of(std::process::id() as i32).ok());
            if ns.net == germline_net || shim.as_ref().is_some_and(|s| s.net == ns.net) {
                continue;
            }
            if let Some((f, offered)) = self.dropped_endpoints.offer(c.pid()) {
                c.offered = Some(offered);
                out.push(f);
            }
        }
        out
    }

    /// The network namespaces of pool copies offered ([`Germline::endpoints_to_prepare`])
    /// and dropped since without a call (retired for other client capabilities, trimmed,
    /// dead when handed out, stopped), each once, for the broker to forget their endpoints
    /// (crate::offered).
    pub fn endpoints_to_forget(&mut self) -> Vec<std::fs::File> {
        self.dropped_endpoints.drain()
    }

    /// The pool's target depth ([`Germline::want_depth`]).
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// The state of each pool copy, front first (never blocks).
    pub fn pool_states(&mut self) -> Vec<PoolState> {
        self.pool.iter_mut().map(Copy::pool_state).collect()
    }

    /// Freezes (`true`) or thaws the pool's waiting copies, without waiting for the kernel.
    /// A call freezes them when it begins ([`Germline::call_begins`], all but the next) or
    /// when it takes its copy, and they are thawed between calls: what a
    /// pool copy does while it waits (its warming session, its handshake) runs at
    /// `SCHED_IDLE`, but on a 2-CPU machine its page faults and kernel work still delay the
    /// call's own copy; frozen, it does none of that. Only speed depends on this: a copy still
    /// frozen is thawed when it is handed out, and one whose cgroup write fails merely keeps
    /// running at `SCHED_IDLE`.
    fn pause_pool(&mut self, paused: bool) {
        if self.pool_paused == paused {
            return;
        }
        self.pool_paused = paused;
        self.spared = None;
        for c in &self.pool {
            let _ = c.cgroup().request_frozen(paused);
        }
    }

    /// Between calls, the work of the next fork that needs no call: G1-G3 on the frozen
    /// germline (kept until it is thawed) and the next copy's cgroup with its limits.
    pub fn prepare_fork(&mut self) -> Result<()> {
        if self.stopped || self.refused.is_some() {
            return Ok(());
        }
        if self.checked_frozen.is_none()
            && !ablated!(self.opts, skip_germline_checks)
            && self.cgroup.is_frozen()
        {
            self.checked_frozen = Some(self.check());
        }
        if self.spare_cgroup.is_none() {
            self.spare_cgroup = Some(self.new_copy_cgroup()?);
        }
        Ok(())
    }

    /// A cgroup for the next copy, with the release's limits.
    fn new_copy_cgroup(&mut self) -> Result<Cgroup> {
        let n = self.cgroups_made;
        self.cgroups_made += 1;
        let cg = Cgroup::create(&format!("{}/copy-{n}", self.base_rel))?;
        if let Err(e) = cg.set_limits(
            self.spec.limits.memory_bytes,
            self.spec.limits.pids,
            self.spec.limits.cpu_percent,
        ) {
            let _ = cg.destroy();
            return Err(e.into());
        }
        Ok(cg)
    }

    /// Ends a call's copy ([`Copy::retire`]): the copy is killed now, its cgroup and item
    /// directories are released by [`Germline::reap`] once the kernel has finished its exit.
    pub fn retire(&mut self, copy: Copy, result: Result<Value>) -> Result<Value> {
        let (result, corpse) = copy.retire(result);
        if let Some(c) = corpse {
            self.dying.push(c);
        }
        // Bounded: a backlog (calls faster than exits) waits for the oldest here.
        while self.dying.len() > MAX_DYING {
            let c = self.dying.remove(0);
            let _ = c.reap();
        }
        result
    }

    /// Kills the retired copies still frozen ([`Copy::retire`]): between calls, once the
    /// last answer is out (their exit then runs there, not on the next call's way).
    pub fn kill_retired(&mut self) {
        for c in &mut self.dying {
            c.kill();
        }
    }

    /// Kills the retired copies still frozen and releases those whose last task is gone;
    /// never waits. Called between calls and before each fork.
    pub fn reap(&mut self) {
        self.dying.retain_mut(|c| !c.try_reap());
    }

    /// Whether a copy killed less than `within` ago is still exiting (a caller between calls
    /// may wait a little so that its [`Germline::reap`] falls there, not on the next call).
    pub fn exiting_since(&self, within: Duration) -> bool {
        self.dying.iter().any(|c| c.age() < within)
    }

    /// Waits until every killed copy is gone and released (bounded per copy).
    pub fn reap_all(&mut self) -> Result<()> {
        let mut r = Ok(());
        for c in self.dying.drain(..) {
            if let Err(e) = c.reap() {
                r = Err(e);
            }
        }
        r
    }

    /// A checked, data-free copy: from the pool if one is ready, else freshly forked. Its
    /// MCP `initialize` is on its way, announcing no client capabilities.
    pub fn copy(&mut self) -> Result<Copy> {
        self.copy_for(&json!({}))
    }

    /// The client capabilities a pool copy's `initialize` announces from now on (the agent's
    /// relayed ones, for the agent's group's copies, the most common).
    pub fn set_pool_capabilities(&mut self, caps: &Value) {
        if &self.pool_caps != caps {
            self.pool_caps = caps.clone();
        }
    }

    /// Like [`Germline::copy`], for a copy whose `initialize` announces the client
    /// capabilities `caps`. A pool copy made its handshake while it waited, with
    /// [`Germline::set_pool_capabilities`]'s; one that announced others is retired unused.
    ///
    /// The first copy of a call comes from the pool only if one is [`PoolState::Ready`] (it
    /// answered its handshake, so its warming session is over): a copy still warming would
    /// make the call wait behind that session, which back to back cost more than a fork
    /// (docs/performance.md). With none ready the copy is forked on the call's path, as without
    /// a pool, and the waiting ones stay frozen until the call ends. Later copies of the same
    /// call (taken ahead for the later groups of a multi-group call, data-free until their
    /// turn) take a warming one too: it finishes while the earlier groups run, where a fork
    /// would be on the call's path now.
    pub fn copy_for(&mut self, caps: &Value) -> Result<Copy> {
        self.reap();
        self.fork_phases.clear();
        let spared = self.spared.take();
        let mut i = 0;
        while i < self.pool.len() {
            if !self.pool[i].initialized_with().is_some_and(|v| v != caps) {
                i += 1;
                continue;
            }
            if let Some(c) = self.pool.remove(i) {
                // v1's freezer keeps a frozen task from dying: thawed before it is killed.
                if self.pool_paused && Some(c.pid()) != spared {
                    let _ = c.cgroup().request_frozen(false);
                }
                let _ = self.retire(c, Ok(Value::Null));
            }
        }
        let first = self.taken_in_call == 0;
        self.taken_in_call += 1;
        while let Some(i) = self
            .pool
            .iter_mut()
            .position(|c| !first || c.pool_state() == PoolState::Ready)
        {
            let Some(mut c) = self.pool.remove(i) else {
                break;
            };
            if self.pool_paused && Some(c.pid()) != spared {
                // Taken by a later copy of the same call, or by a call with no pause before it.
                let _ = c.cgroup().request_frozen(false);
            }
            // A pool copy's deadline starts when it is handed out for a call.
            c.restart_deadline(self.spec.limits.deadline());
            let handed = (|| {
                for p in std::iter::once(c.pid()).chain(c.tool_pid()) {
                    sys::set_sched_idle(p, false)
                        .map_err(|e| Error::sys("sched_setscheduler(SCHED_OTHER)", e))?;
                }
                c.set_client_capabilities(caps.clone());
                c.begin_initialize()
            })();
            if handed.is_err() {
                // A pool copy that died while it waited (it crashed, or its germline died and
                // took it along) holds no data: discard it, and fork a fresh, checked one.
                let _ = self.retire(c, Ok(Value::Null));
                continue;
            }
            self.pause_pool(true);
            // Its call's start_copy takes the endpoint prepared for it.
            if let Some(o) = c.offered.take() {
                o.taken();
            }
            return Ok(c);
        }
        // Empty, or nothing ready: forked on the call's path, the pool frozen meanwhile.
        self.pause_pool(true);
        let r = self.fork_copy().and_then(|mut c| {
            c.set_client_capabilities(caps.clone());
            c.begin_initialize()?;
            Ok(c)
        });
        self.unless_dead(r)
    }

    /// Forks one copy, confines it and checks it from outside (issue 4, items 3 and 4). A
    /// release whose germline or copy fails a check is refused from then on.
    pub fn fork_copy(&mut self) -> Result<Copy> {
        self.fork_copy_with(false)
    }

    /// [`Germline::fork_copy`]; a `pool` copy, once checked, is sent its MCP `initialize`
    /// (public) and, if the germline is warmed, is first asked to run the germline's synthetic
    /// session on public data once more while it waits for a call, so the pages a call
    /// touches are copied (copy-on-write) before the call, not during it. The shim does not
    /// wait for either: a call that comes sooner is read by the copy when they are done.
    fn fork_copy_with(&mut self, pool: bool) -> Result<Copy> {
        if let Some(reason) = &self.refused {
            return Err(Error::Refused(reason.clone()));
        }
        let r = self.fork_and_check().and_then(|mut c| {
            if pool {
                // What a pool copy does while it waits (its warming session, its handshake)
                // runs only when no call wants the CPU: SCHED_IDLE until it is handed out.
                for p in std::iter::once(c.pid()).chain(c.tool_pid()) {
                    sys::set_sched_idle(p, true)
                        .map_err(|e| Error::sys("sched_setscheduler(SCHED_IDLE)", e))?;
                }
                // The mounts that need no data, made now rather than on the call's path.
                self.mount_base(&mut c)?;
                if self.warm {
                    c.request_prewarm()?;
                }
                // The handshake is public: made while the copy waits for a call. Its answer
                // marks the copy ready (Copy::pool_state).
                c.set_client_capabilities(self.pool_caps.clone());
                c.begin_initialize()?;
                c.set_warming();
            }
            Ok(c)
        });
        self.unless_dead(r)
    }

    /// `r`, unless it failed because the germline is gone: then [`Error::GermlineDied`],
    /// which does not refuse the release (a fresh germline may be started and checked again).
    /// A germline that is alive and failed a check is refused from then on.
    fn unless_dead<T>(&mut self, r: Result<T>) -> Result<T> {
        let Err(e) = r else { return r };
        // Only on a failure: wait briefly for an exit under way (the copies die first).
        if let Some(d) = self.death(Duration::from_millis(100)) {
            return Err(Error::GermlineDied(d));
        }
        if let Error::Refused(reason) = &e {
            self.refused = Some(reason.clone());
        }
        Err(e)
    }

    /// Where the last [`Germline::copy`] spent its time, in microseconds: the germline's
    /// checks (G1-G3), the copy's cgroup, the fork itself, the copy confining itself
    /// (namespaces, capabilities, Landlock, seccomp), its outside checks and refreezing the
    /// germline. Empty when the copy came from the pool.
    pub fn fork_phases(&self) -> &[(&'static str, u64)] {
        &self.fork_phases
    }

    /// The seccomp layer each copy is told to install and is checked for.
    fn copy_filter(&self) -> Program {
        Program::copy_with(self.opts.socket_families())
    }

    fn fork_and_check(&mut self) -> Result<Copy> {
        let mut mark = Instant::now();
        let mut phases: Vec<(&'static str, u64)> = Vec::with_capacity(6);
        let mut lap = |name: &'static str, phases: &mut Vec<(&'static str, u64)>| {
            let now = Instant::now();
            phases.push((name, now.duration_since(mark).as_micros() as u64));
            mark = now;
        };
        if !ablated!(self.opts, skip_germline_checks) {
            // Read between calls if the germline has stayed frozen since; else now.
            let bad = match self.checked_frozen.take() {
                Some(bad) => bad,
                None => self.check(),
            };
            if !bad.is_empty() {
                return Err(Error::Refused(bad.join("; ")));
            }
        }
        let (shim_end, copy_end) =
            sys::socketpair(libc::SOCK_STREAM).map_err(|e| Error::sys("socketpair", e))?;
        let socket_inode = launch::socket_inode(&copy_end, "stat copy socket")?;
        lap("fork.germline_checks", &mut phases);
        self.copies_made += 1;
        let cg = match self.spare_cgroup.take() {
            Some(cg) => cg,
            None => self.new_copy_cgroup()?,
        };
        lap("fork.cgroup", &mut phases);
        let fork_at = Instant::now();
        let deadline = fork_at + self.spec.limits.deadline();
        let cmd = protocol::encode(&ToGermline::Fork {
            seccomp: self.copy_filter().to_hex(),
            landlock: self.copy_landlock.clone(),
            pidns: !ablated!(self.opts, no_pid_namespace),
            reaper: self.opts.reaper,
        });
        // What the germline and the copy say of their own steps (CLOCK_MONOTONIC), for the
        // time breakdown only: nothing here is trusted or checked.
        let mut said: Vec<u64> = Vec::new();
        let r = (|| -> Result<i32> {
            self.checked_frozen = None;
            self.cgroup.set_frozen(false)?;
            said.push(sys::monotonic_ns());
            sys::send_with_fds(self.ctl.as_raw_fd(), &cmd, &[copy_end.as_raw_fd()])
                .map_err(|e| Error::sys("send fork command", e))?;
            let reply = self.recv_ctl(Instant::now() + Duration::from_secs(10))?;
            let Some(FromGermline::Forked { t }) = protocol::known(&reply) else {
                return Err(Error::Refused(format!(
                    "the germline did not fork: {reply}"
                )));
            };
            said.extend(reported_times(t, 3));
            said.push(sys::monotonic_ns());
            // The copy is the germline's new child; find it ourselves (trust nothing it says).
            let new = self.unmoved_children()?;
            let [pid] = new[..] else {
                return Err(Error::Refused(format!(
                    "expected one new child of the germline, found {new:?}"
                )));
            };
            cg.add(pid)?;
            if self.opts.reaper {
                // The copy is in its own cgroup: it may fork the tool now (docs/sandbox.md).
                sys::send_with_fds(
                    shim_end.as_raw_fd(),
                    &protocol::encode_line(&ToCopy::Go),
                    &[],
                )
                .map_err(|e| Error::sys("send go", e))?;
            }
            // Start freezing the germline now; it completes while the copy confines itself
            // and is confirmed before the copy is declared ready for data.
            self.cgroup.request_frozen(true)?;
            said.push(sys::monotonic_ns());
            Ok(pid)
        })();
        drop(copy_end);
        let pid = match r {
            Ok(pid) => {
                self.forked.retain(|k| procfs::alive(*k));
                self.forked.push(pid);
                pid
            }
            Err(e) => {
                // A copy that died at once may have said why (untrusted, for the report only).
                let mut probe = Copy::new(
                    0,
                    shim_end,
                    Cgroup::create(&format!("{}/probe", self.base_rel))?,
                    fork_at,
                    Instant::now() + Duration::from_millis(200),
                );
                let said = match probe.recv_json().ok().as_ref().and_then(protocol::known) {
                    Some(FromCopy::Error { reason }) => reason,
                    _ => None,
                };
                let _ = probe.cgroup().destroy();
                let e = match said {
                    Some(s) => Error::Refused(format!("{e}; the copy said: {s}")),
                    None => e,
                };
                let _ = cg.destroy();
                // Whatever the germline forked for this command is of no use now: killed
                // before the germline is frozen again (v1's freezer would keep it alive).
                let strays = self.unmoved_children().unwrap_or_default();
                for p in &strays {
                    let _ = sys::kill(*p, libc::SIGKILL);
                }
                let t = Instant::now();
                while strays.iter().any(|p| procfs::alive(*p))
                    && t.elapsed() < Duration::from_millis(500)
                {
                    std::thread::sleep(Duration::from_millis(1));
                }
                let _ = self.cgroup.set_frozen(true);
                return Err(e);
            }
        };
        lap("fork.fork", &mut phases);
        let mut copy = Copy::new(pid, shim_end, cg, fork_at, deadline);
        #[cfg(feature = "ablation")]
        copy.set_sweep(!self.opts.ablation.no_cgroup_sweep);
        let r = (|| -> Result<()> {
            let ready = copy.recv_json()?;
            let Some(FromCopy::Ready { t }) = protocol::known(&ready) else {
                return Err(Error::CopyRefused(format!("expected ready, got {ready}")));
            };
            lap("fork.confine", &mut phases);
            said.extend(reported_times(t, 5));
            if self.opts.reaper {
                copy.set_tool(Some(reaped_tool(pid, copy.cgroup())?));
            }
            if !ablated!(self.opts, skip_copy_checks) {
                // The namespaces of every other live copy, read now (inode numbers of dead
                // namespaces are reused, so remembered ones would be wrong).
                let others: Vec<Namespaces> = self
                    .live_children()
                    .into_iter()
                    .filter(|k| *k != pid)
                    .filter_map(|k| Namespaces::of(k).ok())
                    .collect();
                // PTRACE_SECCOMP_GET_FILTER numbers the programs from the first installed.
                let sockets = self.opts.socket_families();
                let filters = [Program::germline_with(sockets), self.copy_filter()];
                let expect = |pid, role| CopyExpect {
                    pid,
                    role,
                    socket_inode,
                    germline: &self.facts,
                    germline_ns: &self.ns,
                    others: &others,
                    cgroup_rel: copy.cgroup().rel(),
                    filters: &filters,
                };
                let (ns, mut bad) = match copy.tool_pid() {
                    None => checks::copy(&expect(pid, Role::Sole)),
                    Some(tool) => {
                        let (ns, mut bad) = checks::copy(&expect(pid, Role::Reaper));
                        bad.extend(checks::copy(&expect(tool, Role::Tool { parent: pid })).1);
                        (ns, bad)
                    }
                };
                bad.dedup();
                if !bad.is_empty() {
                    return Err(Error::CopyRefused(bad.join("; ")));
                }
                copy.set_namespaces(ns);
                // checks::copy found it PID 1 of a PID namespace no other copy shares.
                copy.set_own_pidns(!ablated!(self.opts, no_pid_namespace));
            }
            lap("fork.copy_checks", &mut phases);
            Ok(())
        })();
        if let Err(e) = r {
            copy.kill();
            return Err(match e {
                Error::CopyRefused(s) => Error::Refused(format!("a copy failed its checks: {s}")),
                other => other,
            });
        }
        if let Err(e) = self.cgroup.set_frozen(true) {
            copy.kill();
            return Err(e.into());
        }
        // G4 right after the refreeze: the disposition it reads holds until the next thaw,
        // so for every copy that dies meanwhile, this one included (checks::rules::g4).
        if !ablated!(self.opts, skip_germline_checks) {
            let bad = match procfs::status(self.pid) {
                Ok(st) => checks::rules::g4(&st),
                Err(e) => vec![format!("G4: cannot read the germline's status: {e}")],
            };
            if !bad.is_empty() {
                copy.kill();
                return Err(Error::Refused(bad.join("; ")));
            }
        }
        lap("fork.freeze", &mut phases);
        // [shim send, germline received, before fork, after fork, shim got reply, shim added it
        // to its cgroup, copy start, unshared, capabilities dropped, Landlock, seccomp]: the
        // steps inside fork.fork and fork.confine, as reported.
        if let [send, got, before, after, reply, added, start, unshared, caps, landlock, seccomp] =
            said[..]
        {
            let us = |a: u64, b: u64| b.saturating_sub(a) / 1000;
            phases.extend([
                ("fork.fork.to_germline", us(send, got)),
                ("fork.fork.os_fork", us(before, after)),
                ("fork.fork.reply", us(after, reply)),
                ("fork.fork.cgroup_add", us(reply, added)),
                ("fork.confine.scheduled", us(before, start)),
                ("fork.confine.unshare", us(start, unshared)),
                ("fork.confine.capabilities", us(unshared, caps)),
                ("fork.confine.landlock", us(caps, landlock)),
                ("fork.confine.seccomp", us(landlock, seccomp)),
            ]);
        }
        self.fork_phases = phases;
        copy.mark_ready();
        Ok(copy)
    }

    /// The copy's procfs, scratch and an empty `/run/items` ([`itemview::mount_base`]), for a
    /// pool copy before its call; [`Germline::prepare_copy_items`] then only writes the items.
    fn mount_base(&self, copy: &mut Copy) -> Result<()> {
        copy.set_items_dir(itemview::mount_base(&self.spec, copy.pid())?);
        Ok(())
    }

    /// Every process of the live copies: each copy's PID 1 and, under a reaper, its tool.
    pub fn copy_processes(&self) -> Vec<i32> {
        self.live_children()
            .into_iter()
            .flat_map(|k| std::iter::once(k).chain(procfs::children(k)))
            .collect()
    }

    /// Mounts the copy's private procfs, scratch and items, then delivers the items.
    pub fn prepare_copy(&self, copy: &mut Copy, items: &[(String, Vec<u8>, bool)]) -> Result<()> {
        let items: Vec<Item> = items.iter().map(Item::from).collect();
        self.prepare_copy_items(copy, &items)
    }

    /// Like [`Germline::prepare_copy`], for [`Item`]s: each is at `/run/items/<name>` and,
    /// if it names a path, at that path too, readable under the copy's Landlock and mounted in
    /// this copy's mount namespace only (items outside the view as empty files, A5).
    pub fn prepare_copy_items(&self, copy: &mut Copy, items: &[Item]) -> Result<()> {
        self.prepare_copy_view(copy, items, &[], false)
    }

    /// Like [`Germline::prepare_copy_items`], with the entries of directory items in this
    /// copy's view, each at its own path only (not under `/run/items`), owned by the copy's
    /// root (tree.rs). The caller passes only what the copy may see: what is not passed is
    /// absent from the copy. `writable`: the copy may write into its directory items, in a
    /// layer of its own, if the release's copies get writable ones at all
    /// ([`LaunchSpec::writable_trees`](crate::LaunchSpec)); false for a tool its publisher
    /// declares read-only.
    pub fn prepare_copy_view(
        &self,
        copy: &mut Copy,
        items: &[Item],
        tree: &[TreeEntry],
        writable: bool,
    ) -> Result<()> {
        let mut held = Vec::new();
        let r = itemview::mount_view(
            &itemview::Target {
                spec: &self.spec,
                rootfs: &self.rootfs,
                store: &self.items,
                pid: copy.pid(),
                items_dir: copy.items_dir(),
                writable: self.spec.writable_trees && writable,
            },
            items,
            tree,
            &mut held,
        );
        // The copy holds its slots until it is dead.
        for (lease, tree_at) in held {
            copy.hold(lease, tree_at);
        }
        r
    }

    /// One call: a checked copy, its mounts and items, the MCP request, the answer. The copy is
    /// killed afterwards with all its descendants, whatever happened.
    pub fn call(
        &mut self,
        items: &[(String, Vec<u8>, bool)],
        tool: &str,
        arguments: Value,
    ) -> Result<Value> {
        let items: Vec<Item> = items.iter().map(Item::from).collect();
        self.call_items(&items, tool, arguments)
    }

    /// Like [`Germline::call`], for [`Item`]s (some at their own paths).
    pub fn call_items(&mut self, items: &[Item], tool: &str, arguments: Value) -> Result<Value> {
        let mut copy = self.copy()?;
        let result = (|| {
            self.prepare_copy_items(&mut copy, items)?;
            copy.deliver_items(items)?;
            copy.mcp_call(tool, arguments)
        })();
        let result = copy.finish(result);
        self.refill_pool()?;
        result
    }

    /// Stops the germline: kills its copies, the germline and its keeper, removes its cgroups.
    pub fn stop(&mut self) -> Result<()> {
        if self.stopped {
            return Ok(());
        }
        self.stopped = true;
        self.checked_frozen = None;
        if let Some(cg) = self.spare_cgroup.take() {
            let _ = cg.destroy();
        }
        // A frozen task dies of SIGKILL under cgroup v2, not under v1's freezer: thaw first.
        self.pause_pool(false);
        while let Some(mut c) = self.pool.pop_front() {
            c.kill();
        }
        let _ = self.reap_all();
        let _ = sys::kill(self.pid, libc::SIGKILL);
        let _ = self.cgroup.set_frozen(false);
        let r = self.cgroup.destroy();
        // Whatever an ablated run left behind in copy cgroups goes too.
        for rel in Cgroup::children(&self.base_rel) {
            if let Ok(cg) = Cgroup::create(&rel) {
                let _ = cg.destroy();
            }
        }
        if self.keeper_status.is_none() {
            let _ = sys::kill(self.keeper, libc::SIGKILL);
            let _ = sys::waitpid(self.keeper, 0);
        }
        Cgroup::remove_parent(&self.base_rel);
        Ok(r?)
    }
}

/// How a germline ended, from its keeper's wait status: the keeper exits with the germline's
/// exit code, or 128 + the signal that killed it (launch.rs), and a keeper that is killed
/// takes the germline with it (`PR_SET_PDEATHSIG`).
fn describe_death(pid: i32, keeper: i32, keeper_status: Option<i32>) -> String {
    let how = match keeper_status {
        Some(st) if libc::WIFSIGNALED(st) => {
            let sig = libc::WTERMSIG(st);
            format!(
                "its keeper process (pid {keeper}) was killed by signal {sig} ({}), and the \
                 germline with it",
                signal_name(sig)
            )
        }
        Some(st) if libc::WIFEXITED(st) => match libc::WEXITSTATUS(st) {
            code @ 129..=191 => {
                let sig = code - 128;
                format!("killed by signal {sig} ({})", signal_name(sig))
            }
            255 => "it ended in a way its keeper could not tell".into(),
            code => format!("it exited with status {code}"),
        },
        _ => "it exited (how is not known: its keeper has not reported yet)".into(),
    };
    format!("the germline (pid {pid}) died: {how}")
}

/// Whether `pid` is exiting: `PF_EXITING` (0x4) in the flags of `/proc/PID/stat` (field 9).
fn exiting(pid: i32) -> bool {
    const PF_EXITING: u64 = 0x4;
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return true;
    };
    // `pid (comm) state ppid pgrp session tty_nr tpgid flags ...`: comm may hold anything.
    stat.rsplit_once(") ")
        .and_then(|(_, rest)| rest.split(' ').nth(6))
        .and_then(|f| f.parse::<u64>().ok())
        .is_some_and(|f| f & PF_EXITING != 0)
}

/// The name of a signal number, for messages.
fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGTERM => "SIGTERM",
        libc::SIGSYS => "SIGSYS",
        libc::SIGXCPU => "SIGXCPU",
        _ => "another signal",
    }
}

/// The `n` CLOCK_MONOTONIC readings a germline or copy put in its message's `t` (untrusted:
/// for the time breakdown only); none unless it sent exactly `n` numbers.
fn reported_times(t: Vec<u64>, n: usize) -> Vec<u64> {
    if t.len() == n {
        t
    } else {
        Vec::new()
    }
}

impl Drop for Germline {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// The tool under the reaper `pid` (docs/sandbox.md, "The tool is PID 2"): the reaper's only
/// child, and with it the only processes of the copy's cgroup. Anything else refuses the copy.
fn reaped_tool(pid: i32, cgroup: &Cgroup) -> Result<i32> {
    let kids = procfs::children(pid);
    let [tool] = kids[..] else {
        return Err(Error::CopyRefused(format!(
            "the copy's reaper {pid} has children {kids:?}, not one tool"
        )));
    };
    let mut procs = cgroup.procs()?;
    procs.sort_unstable();
    let mut want = vec![pid, tool];
    want.sort_unstable();
    if procs != want {
        return Err(Error::CopyRefused(format!(
            "the copy's cgroup holds processes {procs:?}, not only its reaper {pid} and tool {tool}"
        )));
    }
    Ok(tool)
}
