//! State in files (issue 27): what a release declares under `state` in its manifest, kept per
//! (release, user, horizon) as the broker's slots are (docs/policy.md "State in files").
//!
//! * **Generations** hold the contents: `<state dir>/files/<release>/<user>/gen-<sha256>/`,
//!   named by the hash of what they hold, written in full and fsynced under a temporary name,
//!   then renamed into place (so a generation that has its final name is complete).
//! * **The pointer** to a horizon's current generation is the slot entry
//!   [`germline_broker::FILES_KEY`], written by the broker in one SQLite transaction with the
//!   writing copy's label, as every slot write. So `ℓ(σ)` covers file state, a copy of the
//!   horizon starts with that label, and a write whose label is not within the horizon is
//!   refused.
//!
//! A commit is: generation (steps [`Step::Staged`] to [`Step::Renamed`]), then pointer. A
//! process killed at any point leaves the pointer at the old generation or at the new one,
//! which is complete by then: never a mix (`tests/state_crash.rs` kills a committer at each
//! step). What a kill leaves behind is a temporary directory, removed by [`FileState::open`],
//! or a complete generation nothing points at.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use germline_release::manifest::{StateKind, StatePath};
use germline_sandbox::StateFiles;
use sha2::{Digest, Sha256};

/// Size of each copy's state tmpfs: the most state a copy can leave.
pub const STATE_TMPFS_BYTES: u64 = 64 << 20;

/// A step of [`FileState::store_with`], after which a test may kill the committer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The temporary directory exists.
    Staged,
    /// One file is written (not yet synced).
    FileWritten,
    /// Every file and directory is fsynced.
    Synced,
    /// The temporary directory has its final name.
    Renamed,
    /// The parent directory is fsynced: the generation is durable.
    Durable,
}

/// Why file state could not be read or kept.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("file state {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("file state generation {0:?} is not a sha256 in hex")]
    BadName(String),
    #[error("file state generation {name} holds contents of hash {found} (changed on disk)")]
    Corrupt { name: String, found: String },
    #[error("file state generation {0} is missing")]
    Missing(String),
    #[error("file state: the pointers to generations cannot be read: {0}")]
    Pointers(String),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StateError + '_ {
    move |source| StateError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The file state of one release and user.
#[derive(Debug)]
pub struct FileState {
    /// `<state dir>/files/<release>/<user>`: the generations.
    root: PathBuf,
    /// The release's initial state (each file empty, each directory empty), which the
    /// germline sees read-only at `/run/state`.
    initial: PathBuf,
    decls: Vec<(String, bool)>,
}

fn safe_component(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect()
}

impl FileState {
    /// The state of `release` (its digest) for `user` under `state_dir`, for the declared
    /// `paths`. Creates the initial state and removes temporary directories a killed commit
    /// left.
    pub fn open(
        state_dir: &Path,
        release: &str,
        user: &str,
        paths: &[StatePath],
    ) -> Result<FileState, StateError> {
        let base = state_dir.join("files").join(safe_component(release));
        let root = base.join(user_dir(user));
        let initial = base.join("initial");
        let decls: Vec<(String, bool)> = paths
            .iter()
            .map(|p| (p.name().to_string(), p.kind == StateKind::Dir))
            .collect();
        std::fs::create_dir_all(&root).map_err(io(&root))?;
        // Made (again) at each start: empty files and directories, the declaration's only.
        // Never removed first: another runtime of the same release may have it bound in its
        // germline right now (its files are the same, empty, whoever wrote them).
        germline_sandbox::statedir::initial_state(&initial, &decls).map_err(|e| {
            StateError::Io {
                path: initial.clone(),
                source: std::io::Error::other(e.to_string()),
            }
        })?;
        // Generations are the host root's alone. (The keeper opens `initial` as root, so the
        // directories above it need not be traversable by the germline's user.)
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700))
            .map_err(io(&root))?;
        let st = FileState {
            root,
            initial,
            decls,
        };
        // Only while no other runtime commits (one may be writing its temporary directory).
        if let Ok(_held) = st.lock(libc::LOCK_EX | libc::LOCK_NB) {
            for e in std::fs::read_dir(&st.root).map_err(io(&st.root))? {
                let e = e.map_err(io(&st.root))?;
                if e.file_name().to_string_lossy().starts_with(".tmp-") {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        Ok(st)
    }

    /// The host directory the germline sees at `/run/state`.
    pub fn initial_dir(&self) -> &Path {
        &self.initial
    }

    /// The release's initial state as files.
    pub fn initial(&self) -> StateFiles {
        let mut s = StateFiles::default();
        for (name, is_dir) in &self.decls {
            if *is_dir {
                s.dirs.push(name.clone());
            } else {
                s.files.push((name.clone(), Vec::new()));
            }
        }
        s.files.sort();
        s.dirs.sort();
        s
    }

    /// The generation's directory.
    pub fn path_of(&self, generation: &str) -> Result<PathBuf, StateError> {
        if generation.len() != 64 || !generation.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(StateError::BadName(generation.to_string()));
        }
        Ok(self.root.join(format!("gen-{generation}")))
    }

    /// The contents of `generation` (`None`: the initial state), checked against its name.
    pub fn load(&self, generation: Option<&str>) -> Result<StateFiles, StateError> {
        let Some(g) = generation else {
            return Ok(self.initial());
        };
        let dir = self.path_of(g)?;
        if !dir.is_dir() {
            return Err(StateError::Missing(g.to_string()));
        }
        let mut s = StateFiles::default();
        walk(&dir, "", &mut s)?;
        s.files.sort();
        s.dirs.sort();
        let found = hash(&s);
        if found != g {
            return Err(StateError::Corrupt {
                name: g.to_string(),
                found,
            });
        }
        Ok(s)
    }

    /// Writes `state` as a generation (durable when this returns); its name.
    pub fn store(&self, state: &StateFiles) -> Result<String, StateError> {
        self.store_with(state, &mut |_| {})
    }

    /// [`FileState::store`], calling `at` after each [`Step`].
    pub fn store_with(
        &self,
        state: &StateFiles,
        at: &mut dyn FnMut(Step),
    ) -> Result<String, StateError> {
        let name = hash(state);
        let dest = self.path_of(&name)?;
        if dest.is_dir() {
            // Content-addressed: a generation with its final name is complete and synced.
            return Ok(name);
        }
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let tmp = self
            .root
            .join(format!(".tmp-{name}-{}-{nanos}", std::process::id()));
        std::fs::create_dir(&tmp).map_err(io(&tmp))?;
        at(Step::Staged);
        let mut dirs = vec![tmp.clone()];
        for d in &state.dirs {
            let p = tmp.join(d);
            std::fs::create_dir_all(&p).map_err(io(&p))?;
            dirs.push(p);
        }
        for (rel, contents) in &state.files {
            let p = tmp.join(rel);
            if let Some(parent) = p.parent() {
                std::fs::create_dir_all(parent).map_err(io(parent))?;
            }
            let mut f = std::fs::File::create(&p).map_err(io(&p))?;
            f.write_all(contents).map_err(io(&p))?;
            at(Step::FileWritten);
            f.sync_all().map_err(io(&p))?;
        }
        // Deepest first, so every entry is on disk before its parent is synced.
        dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
        for d in &dirs {
            sync_dir(d)?;
        }
        at(Step::Synced);
        if let Err(e) = std::fs::rename(&tmp, &dest) {
            let _ = std::fs::remove_dir_all(&tmp);
            // Another committer made the same generation meanwhile.
            if !dest.is_dir() {
                return Err(io(&dest)(e));
            }
        }
        at(Step::Renamed);
        sync_dir(&self.root)?;
        at(Step::Durable);
        Ok(name)
    }

    /// A shared lock on this release's and user's generations, held by whoever may still
    /// name a generation no pointer holds yet or any more: a commit from [`FileState::store`]
    /// to the broker's pointer write, a copy from its start (the broker's snapshot names the
    /// generation) to [`FileState::load`]. [`FileState::sweep`] takes it exclusively. Dropped
    /// with the returned file (or when the process dies: flock(2)).
    pub fn shared(&self) -> Result<std::fs::File, StateError> {
        self.lock(libc::LOCK_SH)
    }

    fn lock(&self, how: libc::c_int) -> Result<std::fs::File, StateError> {
        use std::os::fd::AsRawFd;
        let path = self.root.join(".lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io(&path))?;
        // SAFETY: flock(2) on a descriptor we own for the duration of the call.
        let r = unsafe { libc::flock(file.as_raw_fd(), how) };
        if r != 0 {
            return Err(io(&path)(std::io::Error::last_os_error()));
        }
        Ok(file)
    }

    /// Removes the generations nothing points at: every `gen-*` whose name is not in what
    /// `live` returns (read while the exclusive lock is held, so no commit is between its
    /// generation and its pointer and no copy between its snapshot and its load) and whose
    /// directory is older than `grace` (a probe or control re-run of the evidence layer may
    /// still start from a generation its call's snapshot named: docs/policy.md). `None`:
    /// another runtime holds the lock (a commit or a copy's start under way), nothing done;
    /// the next start sweeps.
    pub fn sweep(
        &self,
        live: impl FnOnce() -> Result<std::collections::BTreeSet<String>, String>,
        grace: std::time::Duration,
    ) -> Result<Option<Vec<String>>, StateError> {
        let _held = match self.lock(libc::LOCK_EX | libc::LOCK_NB) {
            Ok(f) => f,
            Err(StateError::Io { source, .. })
                if source.raw_os_error() == Some(libc::EWOULDBLOCK) =>
            {
                return Ok(None)
            }
            Err(e) => return Err(e),
        };
        let live = live().map_err(StateError::Pointers)?;
        let now = std::time::SystemTime::now();
        let mut removed = Vec::new();
        for g in self.generations()? {
            if live.contains(&g) {
                continue;
            }
            let dir = self.path_of(&g)?;
            let age = std::fs::symlink_metadata(&dir)
                .and_then(|m| m.modified())
                .map(|t| now.duration_since(t).unwrap_or_default())
                .map_err(io(&dir))?;
            if age < grace {
                continue;
            }
            std::fs::remove_dir_all(&dir).map_err(io(&dir))?;
            removed.push(g);
        }
        if !removed.is_empty() {
            sync_dir(&self.root)?;
        }
        Ok(Some(removed))
    }

    /// [`FileState::sweep`] with the pointers of the broker's slot store at `slots` (every
    /// horizon's [`germline_broker::FILES_KEY`] of `release` and `user`). Nothing is removed
    /// if the store cannot be read.
    pub fn sweep_unreferenced(
        &self,
        slots: &Path,
        release: &str,
        user: &str,
        grace: std::time::Duration,
    ) -> Result<Option<Vec<String>>, StateError> {
        self.sweep(|| live_pointers(slots, release, user), grace)
    }

    /// Every generation on disk (for tests and sweeping).
    pub fn generations(&self) -> Result<Vec<String>, StateError> {
        let mut v = Vec::new();
        for e in std::fs::read_dir(&self.root).map_err(io(&self.root))? {
            let e = e.map_err(io(&self.root))?;
            if let Some(g) = e.file_name().to_string_lossy().strip_prefix("gen-") {
                v.push(g.to_string());
            }
        }
        v.sort();
        Ok(v)
    }
}

/// How old an unreferenced generation must be before a sweep removes it: an evidence re-run
/// of a recent call may still start from it (its call's snapshot named it).
pub const SWEEP_GRACE: std::time::Duration = std::time::Duration::from_secs(3600);

/// The generations the slot store at `slots` points at for `release` and `user`, any horizon.
/// A store that does not exist points at nothing only if no broker ever wrote one; it is an
/// error here, so a sweep never runs against a store it cannot see.
pub fn live_pointers(
    slots: &Path,
    release: &str,
    user: &str,
) -> Result<std::collections::BTreeSet<String>, String> {
    if !slots.is_file() {
        return Err(format!("no slot store at {}", slots.display()));
    }
    let store = germline_policy::slots::SlotStore::open(slots).map_err(|e| e.to_string())?;
    let mut live = std::collections::BTreeSet::new();
    for key in store.slots_of(release).map_err(|e| e.to_string())? {
        if key.user != user {
            continue;
        }
        if let Some(e) = store
            .get(&key, germline_broker::FILES_KEY)
            .map_err(|e| e.to_string())?
        {
            live.insert(String::from_utf8_lossy(&e.value).into_owned());
        }
    }
    Ok(live)
}

/// The directory a baseline (`sig-pin`, `sig-ifc`, `confined-ifc`, `fresh-ifc`) keeps
/// `release`'s state in for `user`: `<state dir>/baseline/<release>/u-<hash of user>/`, bound
/// read-write at `/run/state` of its process, one directory whatever the call's horizon. This
/// is what the unprotected server does with its own disk, so a baseline column of the security
/// matrix shows what a state path carries when nothing labels it. Each declared path is made
/// (an empty file, an empty directory) where it is missing; what is there is kept, so state
/// survives a restart as on disk. Not a generation, never swept.
pub fn baseline_dir(
    state_dir: &Path,
    release: &str,
    user: &str,
    paths: &[StatePath],
) -> Result<PathBuf, StateError> {
    let dir = state_dir
        .join("baseline")
        .join(safe_component(release))
        .join(user_dir(user));
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).map_err(io(&dir))?;
    for p in paths {
        let at = dir.join(p.name());
        let made = match p.kind {
            StateKind::Dir => std::fs::create_dir(&at),
            StateKind::File => std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&at)
                .map(drop),
        };
        match made {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io(&at)(e)),
        }
    }
    Ok(dir)
}

fn user_dir(user: &str) -> String {
    // A user name is anything: its hash names its directory.
    format!("u-{}", &hex::encode(Sha256::digest(user.as_bytes()))[..16])
}

fn sync_dir(d: &Path) -> Result<(), StateError> {
    std::fs::File::open(d)
        .and_then(|f| f.sync_all())
        .map_err(io(d))
}

fn walk(base: &Path, rel: &str, out: &mut StateFiles) -> Result<(), StateError> {
    let dir = if rel.is_empty() {
        base.to_path_buf()
    } else {
        base.join(rel)
    };
    for e in std::fs::read_dir(&dir).map_err(io(&dir))? {
        let e = e.map_err(io(&dir))?;
        let name = e.file_name().to_string_lossy().into_owned();
        let child = if rel.is_empty() {
            name
        } else {
            format!("{rel}/{name}")
        };
        let t = e.file_type().map_err(io(&dir))?;
        if t.is_dir() {
            out.dirs.push(child.clone());
            walk(base, &child, out)?;
        } else if t.is_file() {
            let p = base.join(&child);
            out.files.push((child, std::fs::read(&p).map_err(io(&p))?));
        }
    }
    Ok(())
}

/// The name of a state: sha256 over its directories and files in order (paths and sizes
/// framed, so no two states share an encoding).
pub fn hash(state: &StateFiles) -> String {
    let mut h = Sha256::new();
    for d in &state.dirs {
        h.update(b"d");
        h.update((d.len() as u64).to_le_bytes());
        h.update(d.as_bytes());
    }
    for (p, c) in &state.files {
        h.update(b"f");
        h.update((p.len() as u64).to_le_bytes());
        h.update(p.as_bytes());
        h.update((c.len() as u64).to_le_bytes());
        h.update(c);
    }
    hex::encode(h.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decl() -> Vec<StatePath> {
        vec![
            StatePath {
                path: "/run/state/db.sqlite".into(),
                kind: StateKind::File,
                arg: None,
            },
            StatePath {
                path: "/run/state/cache".into(),
                kind: StateKind::Dir,
                arg: None,
            },
        ]
    }

    #[test]
    fn a_generation_round_trips_and_is_named_by_its_contents() {
        let d = tempfile::tempdir().expect("tmp");
        let st = FileState::open(d.path(), "sha256:ab", "alice", &decl()).expect("open");
        let init = st.load(None).expect("initial");
        assert_eq!(init.files, vec![("db.sqlite".to_string(), vec![])]);
        assert_eq!(init.dirs, vec!["cache".to_string()]);
        assert!(st.initial_dir().join("db.sqlite").is_file());
        let mut s = init.clone();
        s.files[0].1 = b"rows".to_vec();
        s.files.push(("cache/x/y".into(), b"z".to_vec()));
        s.dirs.push("cache/x".into());
        s.files.sort();
        s.dirs.sort();
        let g = st.store(&s).expect("store");
        assert_eq!(g, hash(&s));
        assert_ne!(g, hash(&init));
        assert_eq!(st.load(Some(&g)).expect("load"), s);
        // The same contents again: the same generation, nothing new on disk.
        assert_eq!(st.store(&s).expect("again"), g);
        assert_eq!(st.generations().expect("list"), vec![g.clone()]);
        // A generation changed on disk is refused, not served.
        std::fs::write(st.path_of(&g).expect("path").join("db.sqlite"), b"tampered")
            .expect("write");
        let e = st.load(Some(&g)).expect_err("corrupt");
        assert!(matches!(e, StateError::Corrupt { .. }), "{e}");
        assert!(matches!(
            st.load(Some("../etc")),
            Err(StateError::BadName(_))
        ));
    }

    #[test]
    fn hash_frames_paths_and_contents() {
        let a = StateFiles {
            files: vec![("ab".into(), b"c".to_vec())],
            ..Default::default()
        };
        let b = StateFiles {
            files: vec![("a".into(), b"bc".to_vec())],
            ..Default::default()
        };
        assert_ne!(hash(&a), hash(&b));
    }
}
