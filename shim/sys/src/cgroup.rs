//! cgroup v1 (this machine: a hybrid layout) and cgroup v2: one group for the germline, one per
//! copy, as siblings under the release's group so that freezing the germline never freezes a
//! copy and a copy's limits never count the germline.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

const ROOT: &str = "/sys/fs/cgroup";
/// v1 controllers we use; `pids` is the one whose cgroup.procs we read.
const V1_CONTROLLERS: [&str; 4] = ["pids", "memory", "freezer", "cpu"];

/// Which cgroup layout the machine has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

/// Detects the layout: v2 if /sys/fs/cgroup is a cgroup2 mount, else v1 (legacy or hybrid).
pub fn version() -> Version {
    if Path::new(ROOT).join("cgroup.controllers").exists() {
        Version::V2
    } else {
        Version::V1
    }
}

/// The freezer file of a cgroup directory and the value that freezes (`true`) or thaws it.
fn freezer(version: Version, frozen: bool) -> (&'static str, &'static str) {
    match version {
        Version::V1 => ("freezer.state", if frozen { "FROZEN" } else { "THAWED" }),
        Version::V2 => ("cgroup.freeze", if frozen { "1" } else { "0" }),
    }
}

/// The layout of the freezer a cgroup directory has, if any (v1: only the freezer
/// hierarchy's directories have one; v2: every non-root directory).
fn freezer_in(dir: &Path) -> Option<Version> {
    [Version::V1, Version::V2]
        .into_iter()
        .find(|v| dir.join(freezer(*v, true).0).exists())
}

/// The ids (pids or tids) listed in `dir/file`; none if it cannot be read.
fn listed(dir: &Path, file: &str) -> Vec<i32> {
    parse_ids(&fs::read_to_string(dir.join(file)).unwrap_or_default())
}

/// The ids of a `cgroup.procs`, `cgroup.threads` or `tasks` file, one a line; a line that is
/// not a number is skipped.
pub fn parse_ids(text: &str) -> Vec<i32> {
    text.lines().filter_map(|l| l.trim().parse().ok()).collect()
}

/// Sends SIGKILL to every id listed in `dir/file` (best effort: one already gone is skipped).
/// A reader in another pid namespace sees 0 for a task it cannot name: never signalled
/// (`kill(0)` would reach our own process group).
fn kill_listed(dir: &Path, file: &str) {
    for p in listed(dir, file).into_iter().filter(|p| *p > 0) {
        let _ = crate::sys::kill(p, libc::SIGKILL);
    }
}

/// One cgroup, present in every hierarchy we use.
#[derive(Debug)]
pub struct Cgroup {
    version: Version,
    /// Relative path under each hierarchy root, e.g. `germline/<id>/init`.
    rel: String,
    dirs: Vec<PathBuf>,
}

fn write(path: &Path, value: &str) -> Result<()> {
    fs::write(path, value)
        .map_err(|e| Error::Cgroup(format!("write {value:?} to {}: {e}", path.display())))
}

fn read(path: &Path) -> Result<String> {
    fs::read_to_string(path).map_err(|e| Error::Cgroup(format!("read {}: {e}", path.display())))
}

impl Cgroup {
    /// Creates `rel` (and its parents) in every hierarchy.
    pub fn create(rel: &str) -> Result<Cgroup> {
        let version = version();
        let dirs: Vec<PathBuf> = match version {
            Version::V1 => V1_CONTROLLERS
                .iter()
                .map(|c| Path::new(ROOT).join(c).join(rel))
                .collect(),
            Version::V2 => vec![Path::new(ROOT).join(rel)],
        };
        if version == Version::V2 {
            // Enable the controllers down the path so that limits can be set on `rel`.
            let mut cur = PathBuf::from(ROOT);
            for part in Path::new(rel)
                .parent()
                .into_iter()
                .flat_map(|p| p.components())
            {
                let ctl = cur.join("cgroup.subtree_control");
                let _ = fs::write(&ctl, "+memory +pids +cpu");
                cur = cur.join(part);
                fs::create_dir_all(&cur)
                    .map_err(|e| Error::Cgroup(format!("mkdir {}: {e}", cur.display())))?;
            }
            let _ = fs::write(cur.join("cgroup.subtree_control"), "+memory +pids +cpu");
        }
        for d in &dirs {
            fs::create_dir_all(d)
                .map_err(|e| Error::Cgroup(format!("mkdir {}: {e}", d.display())))?;
        }
        Ok(Cgroup {
            version,
            rel: rel.to_string(),
            dirs,
        })
    }

    /// Creates `rel` below the cgroup2 mount `root` and uses the v2 interface on it, whatever
    /// [`version`] detects. For the v2 test on this hybrid machine (its cgroup2 mount is
    /// /sys/fs/cgroup/unified, see docs/sandbox.md): production code uses [`Cgroup::create`].
    pub fn create_v2_at(root: &Path, rel: &str) -> Result<Cgroup> {
        let mut cur = root.to_path_buf();
        for part in Path::new(rel).components() {
            // Best effort, as in `create`: a controller bound to a v1 hierarchy is refused.
            let _ = fs::write(cur.join("cgroup.subtree_control"), "+memory +pids +cpu");
            cur = cur.join(part);
            fs::create_dir_all(&cur)
                .map_err(|e| Error::Cgroup(format!("mkdir {}: {e}", cur.display())))?;
        }
        Ok(Cgroup {
            version: Version::V2,
            rel: rel.to_string(),
            dirs: vec![cur],
        })
    }

    /// The path relative to the hierarchy roots (what /proc/PID/cgroup shows).
    pub fn rel(&self) -> &str {
        &self.rel
    }

    /// The layout in use.
    pub fn version(&self) -> Version {
        self.version
    }

    fn dir(&self, controller: &str) -> &Path {
        match self.version {
            Version::V2 => &self.dirs[0],
            Version::V1 => {
                let i = V1_CONTROLLERS
                    .iter()
                    .position(|c| *c == controller)
                    .unwrap_or(0);
                &self.dirs[i]
            }
        }
    }

    /// Sets memory, pids and CPU limits. Swap is limited too so that the memory limit bites.
    pub fn set_limits(&self, memory: u64, pids: u64, cpu_percent: u64) -> Result<()> {
        let period = 100_000u64;
        let quota = (period * cpu_percent / 100).max(1000);
        match self.version {
            Version::V1 => {
                write(
                    &self.dir("memory").join("memory.limit_in_bytes"),
                    &memory.to_string(),
                )?;
                let memsw = self.dir("memory").join("memory.memsw.limit_in_bytes");
                if memsw.exists() {
                    write(&memsw, &memory.to_string())?;
                }
                write(&self.dir("pids").join("pids.max"), &pids.to_string())?;
                write(
                    &self.dir("cpu").join("cpu.cfs_period_us"),
                    &period.to_string(),
                )?;
                write(
                    &self.dir("cpu").join("cpu.cfs_quota_us"),
                    &quota.to_string(),
                )?;
            }
            Version::V2 => {
                let d = self.dir("");
                write(&d.join("memory.max"), &memory.to_string())?;
                let _ = fs::write(d.join("memory.swap.max"), "0");
                write(&d.join("pids.max"), &pids.to_string())?;
                write(&d.join("cpu.max"), &format!("{quota} {period}"))?;
            }
        }
        Ok(())
    }

    /// Moves a process (host pid) into this cgroup in every hierarchy.
    pub fn add(&self, pid: i32) -> Result<()> {
        for d in &self.dirs {
            write(&d.join("cgroup.procs"), &pid.to_string())?;
        }
        Ok(())
    }

    /// Processes in the cgroup (host pids).
    pub fn procs(&self) -> Result<Vec<i32>> {
        let s = read(&self.dir("pids").join("cgroup.procs"))?;
        Ok(parse_ids(&s))
    }

    /// Threads in the cgroup (v1 `tasks`, v2 `cgroup.threads`).
    pub fn threads(&self) -> Result<Vec<i32>> {
        let f = match self.version {
            Version::V1 => "tasks",
            Version::V2 => "cgroup.threads",
        };
        let s = read(&self.dir("pids").join(f))?;
        Ok(parse_ids(&s))
    }

    /// Asks the kernel to freeze (true) or thaw (false) without waiting for it.
    pub fn request_frozen(&self, frozen: bool) -> Result<()> {
        let (file, value) = freezer(self.version, frozen);
        write(&self.dir("freezer").join(file), value)
    }

    /// Freezes (true) or thaws (false) every task and waits until the kernel says it is done.
    pub fn set_frozen(&self, frozen: bool) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(5);
        match self.version {
            Version::V1 => {
                let (file, want) = freezer(Version::V1, frozen);
                let f = self.dir("freezer").join(file);
                write(&f, want)?;
                while read(&f)?.trim() != want {
                    if Instant::now() > deadline {
                        return Err(Error::Cgroup(format!(
                            "{} did not become {want}",
                            f.display()
                        )));
                    }
                    write(&f, want)?;
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
            Version::V2 => {
                let d = self.dir("");
                let (file, value) = freezer(Version::V2, frozen);
                write(&d.join(file), value)?;
                let want = if frozen { "frozen 1" } else { "frozen 0" };
                while !read(&d.join("cgroup.events"))?.lines().any(|l| l == want) {
                    if Instant::now() > deadline {
                        return Err(Error::Cgroup(format!(
                            "{} did not reach {want}",
                            d.display()
                        )));
                    }
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
        }
        Ok(())
    }

    /// Whether the cgroup is frozen now.
    pub fn is_frozen(&self) -> bool {
        match self.version {
            Version::V1 => read(&self.dir("freezer").join("freezer.state"))
                .map(|s| s.trim() == "FROZEN")
                .unwrap_or(false),
            Version::V2 => read(&self.dir("").join("cgroup.events"))
                .map(|s| s.lines().any(|l| l == "frozen 1"))
                .unwrap_or(false),
        }
    }

    /// How many times the kernel's OOM killer killed a task of this cgroup.
    pub fn oom_kills(&self) -> u64 {
        let (file, key) = match self.version {
            Version::V1 => (self.dir("memory").join("memory.oom_control"), "oom_kill"),
            Version::V2 => (self.dir("").join("memory.events"), "oom_kill"),
        };
        read(&file)
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix(key).and_then(|v| v.trim().parse().ok()))
            })
            .unwrap_or(0)
    }

    /// Kills every task (v2: cgroup.kill; v1: freeze, SIGKILL each, thaw) and waits until empty.
    pub fn kill_all(&self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(5);
        if self.version == Version::V2 && self.dir("").join("cgroup.kill").exists() {
            write(&self.dir("").join("cgroup.kill"), "1")?;
        }
        loop {
            let procs = self.procs()?;
            if procs.is_empty() {
                return Ok(());
            }
            if self.version == Version::V1 {
                self.kill_frozen_v1();
            }
            if Instant::now() > deadline {
                return Err(Error::Cgroup(format!(
                    "{} still has tasks {procs:?}",
                    self.rel
                )));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Sends SIGKILL to every task and returns without waiting for them to exit (v2:
    /// `cgroup.kill`; v1: freeze, SIGKILL each thread, thaw). No task of the group runs user
    /// code again; the kernel finishes their exit (unmapping memory) on its own time.
    pub fn kill_now(&self) -> Result<()> {
        if self.version == Version::V2 && self.dir("").join("cgroup.kill").exists() {
            return write(&self.dir("").join("cgroup.kill"), "1");
        }
        if self.version == Version::V1 {
            self.kill_frozen_v1();
        } else {
            kill_listed(self.dir("pids"), "cgroup.procs");
        }
        Ok(())
    }

    /// v1 has no `cgroup.kill`: freeze, SIGKILL every thread, thaw (a frozen task dies only
    /// once thawed, and a frozen one cannot fork meanwhile).
    fn kill_frozen_v1(&self) {
        let _ = self.set_frozen(true);
        kill_listed(self.dir("pids"), "tasks");
        let _ = self.set_frozen(false);
    }

    /// Removes the cgroup if its last task is gone: `Ok(false)` while a task is still exiting
    /// (nothing waits here).
    pub fn try_remove(&self) -> Result<bool> {
        if self.procs().is_ok_and(|p| !p.is_empty()) {
            return Ok(false);
        }
        // The hierarchy [`Cgroup::children`] lists (v1: pids) goes last, so that a cgroup
        // left half-removed (a busy hierarchy, then the shim killed) is still found and swept
        // by the next run (sweep.rs).
        let listed = Path::new(ROOT).join("pids");
        let (last, first): (Vec<&PathBuf>, Vec<&PathBuf>) =
            self.dirs.iter().partition(|d| d.starts_with(&listed));
        for d in first.into_iter().chain(last) {
            match fs::remove_dir(d) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => return Ok(false),
                Err(e) => return Err(Error::Cgroup(format!("rmdir {}: {e}", d.display()))),
            }
        }
        Ok(true)
    }

    /// Moves this handle out, leaving one that names no directory (for a killed copy whose
    /// cgroup is removed later, by germline-sandbox's `Corpse`).
    pub fn take(&mut self) -> Cgroup {
        std::mem::replace(
            self,
            Cgroup {
                version: self.version,
                rel: self.rel.clone(),
                dirs: Vec::new(),
            },
        )
    }

    /// Kills what is left and removes the cgroup from every hierarchy.
    pub fn destroy(&self) -> Result<()> {
        let r = self.kill_all();
        if let Some((d, e)) = destroy_trees(&self.dirs, Duration::from_secs(1))
            .into_iter()
            .next()
        {
            return Err(Error::Cgroup(format!("rmdir {}: {e}", d.display())));
        }
        r
    }

    /// Relative paths of the child groups of `rel`.
    pub fn children(rel: &str) -> Vec<String> {
        let dir = match version() {
            Version::V1 => Path::new(ROOT).join("pids").join(rel),
            Version::V2 => Path::new(ROOT).join(rel),
        };
        let Ok(entries) = fs::read_dir(dir) else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter(|e| e.path().is_dir())
            .filter_map(|e| e.file_name().to_str().map(|n| format!("{rel}/{n}")))
            .collect()
    }

    /// Removes an (empty) parent group below the cgroup2 mount `root` (the v2 test).
    pub fn remove_parent_v2_at(root: &Path, rel: &str) {
        let _ = fs::remove_dir(root.join(rel));
    }

    /// Removes an (empty) parent group such as `germline/<id>` from every hierarchy.
    pub fn remove_parent(rel: &str) {
        let dirs: Vec<PathBuf> = match version() {
            Version::V1 => V1_CONTROLLERS
                .iter()
                .map(|c| Path::new(ROOT).join(c).join(rel))
                .collect(),
            Version::V2 => vec![Path::new(ROOT).join(rel)],
        };
        for d in dirs {
            let _ = fs::remove_dir(d);
        }
    }
}

// --- cgroups we did not make: an engine's (`linux.cgroupsPath`) and a killed run's ---

/// The directories of cgroup `rel` in every mounted hierarchy (v1: one per controller mount,
/// whatever the controllers; v2: one).
pub fn dirs_of(rel: &str) -> Vec<PathBuf> {
    let rel = rel.trim_start_matches('/');
    let root = Path::new(ROOT);
    if version() == Version::V2 {
        return vec![root.join(rel)];
    }
    let mut v: Vec<PathBuf> = fs::read_dir(root)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
                // The hybrid layout's cgroup2 mount: engines (and crun) do not use it here.
                .filter(|e| e.file_name() != "unified")
                .map(|e| e.path().join(rel))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// A cgroupfs-style `linux.cgroupsPath` we may create: absolute or relative, plain
/// components only (the systemd `slice:prefix:name` form is not one).
pub fn is_plain_path(p: &str) -> bool {
    !p.contains(':')
        && !p.trim_matches('/').is_empty()
        && p.split('/')
            .all(|c| c != ".." && c != "." && !c.contains('\0'))
}

/// Creates cgroup `rel` in every hierarchy and moves `pid` into it (best effort per
/// hierarchy: a controller that refuses is skipped). Returns the directories made.
pub fn join(rel: &str, pid: i32) -> Vec<PathBuf> {
    let mut made = Vec::new();
    for d in dirs_of(rel) {
        if fs::create_dir_all(&d).is_err() {
            continue;
        }
        if fs::write(d.join("cgroup.procs"), pid.to_string()).is_ok() {
            made.push(d);
        } else {
            let _ = fs::remove_dir(&d);
        }
    }
    made
}

/// Every directory at and below `dir`, deepest first.
fn subtree(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        if let Ok(rd) = fs::read_dir(&d) {
            for e in rd.flatten() {
                if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                    stack.push(e.path());
                }
            }
        }
        out.push(d);
    }
    out.reverse();
    out
}

/// Every process listed in the cgroup subtrees `dirs` (`cgroup.procs`; a directory already
/// gone lists none). The same process may appear once per hierarchy.
pub fn procs_in_trees(dirs: &[PathBuf]) -> Vec<i32> {
    dirs.iter()
        .flat_map(|d| subtree(d))
        .flat_map(|s| listed(&s, "cgroup.procs"))
        .collect()
}

/// Freezes (`true`) or thaws the cgroup directories that have a freezer. Whether any did.
pub fn freeze_dirs(dirs: &[PathBuf], frozen: bool) -> bool {
    let mut any = false;
    for d in dirs {
        if let Some(v) = freezer_in(d) {
            let (file, value) = freezer(v, frozen);
            any |= fs::write(d.join(file), value).is_ok();
        }
    }
    any
}

/// Kills every process in the cgroup subtrees `dirs` and removes the cgroups, deepest first:
/// frozen ones are thawed first (a frozen task does not die), then, until `limit` has passed,
/// each listed process gets SIGKILL and each cgroup is removed once empty. Returns what could
/// not be removed, with the last error (none for a directory that is already gone).
pub fn destroy_trees(dirs: &[PathBuf], limit: Duration) -> Vec<(PathBuf, io::Error)> {
    for d in dirs {
        freeze_dirs(&subtree(d), false);
    }
    let t = Instant::now();
    let mut left = Vec::new();
    loop {
        left.clear();
        for d in dirs {
            for s in subtree(d) {
                kill_listed(&s, "cgroup.procs");
                match fs::remove_dir(&s) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => left.push((s, e)),
                }
            }
        }
        if left.is_empty() || t.elapsed() > limit {
            return left;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The cgroups `germline run` with pid `pid` made for its germlines (`germline/run-PID-*` in
/// every hierarchy): what is left if it was killed before it could stop them.
pub fn germline_run_cgroups(pid: u32) -> Vec<PathBuf> {
    let prefix = crate::paths::run_cgroup_prefix(pid);
    dirs_of(crate::paths::CGROUP_PARENT)
        .into_iter()
        .flat_map(|d| {
            fs::read_dir(&d)
                .map(|rd| {
                    rd.flatten()
                        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                        .map(|e| e.path())
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_cgroup_procs_gives_its_ids() {
        // Recorded from a germline that left a second process (germline-sandbox's fixtures).
        let p = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../sandbox/tests/fixtures/proc/g1_process/cgroup.procs"
        );
        let text = fs::read_to_string(p).expect("fixture");
        assert_eq!(parse_ids(&text), [17428, 17558]);
        assert_eq!(
            parse_ids(" 7 \nx\n\n8\n"),
            [7, 8],
            "trimmed; others skipped"
        );
    }

    #[test]
    fn cgroup_paths_with_dots_or_systemd_form_are_not_plain() {
        assert!(is_plain_path("/libpod_parent/libpod-abc"));
        assert!(is_plain_path("k8s/pod1/c1"));
        assert!(!is_plain_path("/libpod_parent/../../etc"));
        assert!(!is_plain_path("machine.slice:libpod:abc"));
        assert!(!is_plain_path("/"));
    }

    #[test]
    fn a_subtree_lists_children_before_their_parent() {
        let t = std::env::temp_dir().join(format!("germline-sys-subtree-{}", std::process::id()));
        fs::create_dir_all(t.join("a/b")).expect("mkdir");
        fs::create_dir_all(t.join("c")).expect("mkdir");
        let s = subtree(&t);
        let at = |p: &Path| s.iter().position(|x| x == p).expect("listed");
        assert_eq!(s.len(), 4);
        assert!(at(&t.join("a/b")) < at(&t.join("a")));
        assert!(at(&t.join("a")) < at(&t));
        assert!(at(&t.join("c")) < at(&t));
        fs::remove_dir_all(&t).expect("cleanup");
    }
}
