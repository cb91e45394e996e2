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
        Ok(s.lines().filter_map(|l| l.trim().parse().ok()).collect())
    }

    /// Threads in the cgroup (v1 `tasks`, v2 `cgroup.threads`).
    pub fn threads(&self) -> Result<Vec<i32>> {
        let f = match self.version {
            Version::V1 => "tasks",
            Version::V2 => "cgroup.threads",
        };
        let s = read(&self.dir("pids").join(f))?;
        Ok(s.lines().filter_map(|l| l.trim().parse().ok()).collect())
    }

    /// Asks the kernel to freeze (true) or thaw (false) without waiting for it.
    pub fn request_frozen(&self, frozen: bool) -> Result<()> {
        match self.version {
            Version::V1 => write(
                &self.dir("freezer").join("freezer.state"),
                if frozen { "FROZEN" } else { "THAWED" },
            ),
            Version::V2 => write(
                &self.dir("").join("cgroup.freeze"),
                if frozen { "1" } else { "0" },
            ),
        }
    }

    /// Freezes (true) or thaws (false) every task and waits until the kernel says it is done.
    pub fn set_frozen(&self, frozen: bool) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(5);
        match self.version {
            Version::V1 => {
                let f = self.dir("freezer").join("freezer.state");
                let want = if frozen { "FROZEN" } else { "THAWED" };
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
                write(&d.join("cgroup.freeze"), if frozen { "1" } else { "0" })?;
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
                let _ = self.set_frozen(true);
                for p in self.threads().unwrap_or_default() {
                    let _ = crate::sys::kill(p, libc::SIGKILL);
                }
                let _ = self.set_frozen(false);
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
            let _ = self.set_frozen(true);
            for p in self.threads().unwrap_or_default() {
                let _ = crate::sys::kill(p, libc::SIGKILL);
            }
            let _ = self.set_frozen(false);
        } else {
            for p in self.procs().unwrap_or_default() {
                let _ = crate::sys::kill(p, libc::SIGKILL);
            }
        }
        Ok(())
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
        for d in &self.dirs {
            let mut tries = 0;
            while d.exists() {
                match fs::remove_dir(d) {
                    Ok(()) => break,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                    Err(e) => {
                        tries += 1;
                        if tries > 500 {
                            return Err(Error::Cgroup(format!("rmdir {}: {e}", d.display())));
                        }
                        std::thread::sleep(Duration::from_millis(2));
                    }
                }
            }
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
