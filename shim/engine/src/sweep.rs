//! Leftovers of `germline run` and `germline serve` processes that died without stopping
//! (SIGKILL, a crash, the OOM killer): their germlines' cgroups (`germline/run-PID-*` in every
//! hierarchy) with the frozen germline and any copy still in them, and their directories under
//! `/run/germline` (`session-PID`, `serve-PID`, `ca-PID-*`). Every name carries its owner's
//! PID; [`sweep`] removes only what belongs to a PID that is no longer running, so it never
//! touches a live session (a PID reused since leaves its predecessor's leftovers for a later
//! sweep). `germline run` and `germline serve` sweep at start; `germline gc` sweeps on demand.

use std::path::{Path, PathBuf};

use germline_sandbox::cgroup::Cgroup;
use germline_sys::paths::{
    self, CA_PREFIX, RUN_CGROUP_PREFIX, RUN_DIR, SERVE_PREFIX, SESSION_PREFIX,
};

/// What one sweep removed.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Swept {
    /// Germline cgroups (relative paths, e.g. `germline/run-123-0-germline`).
    pub cgroups: Vec<String>,
    /// Processes that were still in them (killed).
    pub processes: usize,
    /// Directories under [`RUN_DIR`].
    pub dirs: Vec<PathBuf>,
    /// What could not be removed, with the reason.
    pub failed: Vec<String>,
}

impl Swept {
    pub fn is_empty(&self) -> bool {
        self.cgroups.is_empty() && self.dirs.is_empty() && self.failed.is_empty()
    }
}

/// The owner PID a leftover's name carries: `run-PID-…` (cgroups), `session-PID`,
/// `serve-PID`, `ca-PID-…` (run directories). `None` for names of anything else.
pub fn owner(name: &str) -> Option<i32> {
    let rest = [RUN_CGROUP_PREFIX, SESSION_PREFIX, SERVE_PREFIX, CA_PREFIX]
        .iter()
        .find_map(|p| name.strip_prefix(p))?;
    let digits: &str = rest.split('-').next()?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // The whole name must be ours: `session-PID` and `serve-PID` have nothing after the PID.
    let exact = name.starts_with(SESSION_PREFIX) || name.starts_with(SERVE_PREFIX);
    if exact && rest.len() != digits.len() {
        return None;
    }
    digits.parse().ok().filter(|&p: &i32| p > 1)
}

/// Whether a process with this PID runs (a zombie waiting for its parent does not).
pub fn alive(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return Path::new(&format!("/proc/{pid}")).exists();
    };
    // `pid (comm) S ...`: the state follows the last `)` (comm may hold anything).
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next());
    !matches!(state, Some("Z" | "X"))
}

/// Removes every leftover of a dead owner (never this process's own).
pub fn sweep() -> Swept {
    sweep_with(&alive, std::process::id() as i32)
}

fn sweep_with(alive: &dyn Fn(i32) -> bool, me: i32) -> Swept {
    let mut out = Swept::default();
    let dead = |name: &str| owner(name).is_some_and(|p| p != me && !alive(p));
    for rel in Cgroup::children(paths::CGROUP_PARENT) {
        let name = rel.rsplit('/').next().unwrap_or_default();
        if !name.starts_with(RUN_CGROUP_PREFIX) || !dead(name) {
            continue;
        }
        let Some(keepers) = orphaned_keepers(&rel, alive) else {
            continue;
        };
        for k in keepers {
            // SAFETY: kill(2) on a pid checked to be an orphaned germline keeper.
            if unsafe { libc::kill(k, libc::SIGKILL) } == 0 {
                out.processes += 1;
            }
        }
        // The germline's own group, its copies' and its probe's; a frozen task is thawed
        // first so that SIGKILL takes effect.
        for child in Cgroup::children(&rel) {
            match Cgroup::create(&child) {
                Ok(cg) => {
                    let _ = cg.set_frozen(false);
                    out.processes += cg.procs().map_or(0, |p| p.len());
                    if let Err(e) = cg.destroy() {
                        out.failed.push(format!("cgroup {child}: {e}"));
                    }
                }
                Err(e) => out.failed.push(format!("cgroup {child}: {e}")),
            }
        }
        Cgroup::remove_parent(&rel);
        if Cgroup::children(&rel).is_empty() {
            out.cgroups.push(rel);
        }
    }
    if let Ok(rd) = std::fs::read_dir(RUN_DIR) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !dead(&name) || !e.path().is_dir() {
                continue;
            }
            match std::fs::remove_dir_all(e.path()) {
                Ok(()) => out.dirs.push(e.path()),
                Err(err) => out.failed.push(format!("{}: {err}", e.path().display())),
            }
        }
    }
    out
}

/// The parent PID of `pid` (from `/proc/PID/status`).
fn parent_of(pid: i32) -> Option<i32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("PPid:"))
        .and_then(|v| v.trim().parse().ok())
}

/// The keepers of a run's germline (the parents of the processes in its `init` group), or
/// `None` if one still has a live parent other than init: a second guard, for an owner in
/// another PID namespace (whose PID means nothing here). A keeper whose owner is gone was
/// reparented to init.
fn orphaned_keepers(rel: &str, alive: &dyn Fn(i32) -> bool) -> Option<Vec<i32>> {
    let init = Cgroup::create(&format!("{rel}/init")).ok()?;
    let mut keepers = Vec::new();
    for k in init
        .procs()
        .unwrap_or_default()
        .into_iter()
        .filter_map(parent_of)
    {
        if k <= 1 || keepers.contains(&k) {
            continue;
        }
        if parent_of(k).is_some_and(|pp| pp > 1 && alive(pp)) {
            return None;
        }
        // Only a keeper is ever killed here: a fork of a germline executable.
        let exe = std::fs::read_link(format!("/proc/{k}/exe")).unwrap_or_default();
        if exe
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("germline"))
        {
            keepers.push(k);
        }
    }
    Some(keepers)
}

/// `germline gc`: sweeps; what it removed, or an error holding the sweep when something stayed.
pub fn gc() -> Result<Swept, GcError> {
    let s = sweep();
    if s.failed.is_empty() {
        Ok(s)
    } else {
        Err(GcError::NotRemoved(s))
    }
}

/// Why `germline gc` failed.
#[derive(Debug, thiserror::Error)]
pub enum GcError {
    /// Something could not be removed: the whole sweep, its `failed` list saying what and why
    /// (the command still reports what was removed).
    #[error("could not remove: {}", .0.failed.join("; "))]
    NotRemoved(Swept),
}

/// The sweep at the start of `run` and `serve`: what it removed goes to stderr, never stdout
/// (stdout is the agent's channel).
pub fn at_start(command: &str) {
    let s = sweep();
    if !s.is_empty() {
        eprintln!(
            "germline {command}: removed leftovers of stopped sessions: {} cgroups ({} processes), \
             {} directories{}",
            s.cgroups.len(),
            s.processes,
            s.dirs.len(),
            if s.failed.is_empty() {
                String::new()
            } else {
                format!("; could not remove: {}", s.failed.join("; "))
            }
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_are_read_only_from_our_own_names() {
        assert_eq!(owner("run-4242-0-germline"), Some(4242));
        assert_eq!(owner("ca-4242-1-nosplit"), Some(4242));
        assert_eq!(owner("session-77"), Some(77));
        assert_eq!(owner("serve-77"), Some(77));
        for other in [
            "broker.sock",
            "session-77x",
            "session-",
            "serve-77-a",
            "run-x-0",
            "run-1-0",
            "ca--1",
            "copy-3",
            "eval-12",
        ] {
            assert_eq!(owner(other), None, "{other}");
        }
    }

    #[test]
    fn live_owners_and_this_process_are_never_swept() {
        let tag = std::process::id();
        let base = PathBuf::from(RUN_DIR);
        if std::fs::create_dir_all(&base).is_err() {
            return; // not root: nothing to test here
        }
        // Two made-up owners above any real PID: one counts as alive, the other as dead.
        let (live, dead) = (
            99_999_000 + (tag % 900) as i32 * 2,
            99_999_001 + (tag % 900) as i32 * 2,
        );
        let live_dir = base.join(format!("session-{live}"));
        let dead_dir = base.join(format!("ca-{dead}-0-germline"));
        let mine = base.join(format!("serve-{tag}"));
        for d in [&live_dir, &dead_dir, &mine] {
            std::fs::create_dir_all(d).expect("mkdir");
        }
        let s = sweep_with(&|p| p == live || alive(p), tag as i32);
        let gone: Vec<bool> = [&live_dir, &dead_dir, &mine]
            .iter()
            .map(|d| !d.exists())
            .collect();
        for d in [&live_dir, &mine] {
            let _ = std::fs::remove_dir_all(d);
        }
        assert_eq!(gone, [false, true, false]);
        assert!(s.dirs.contains(&dead_dir), "{s:?}");
    }
}
