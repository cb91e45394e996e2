//! State in files is crash-safe (issue 27): a committer killed with SIGKILL at any step of a
//! commit (the generation staged, a file written, everything synced, renamed, durable, the
//! pointer written) leaves the horizon at the previous state or at the new one, complete,
//! never a mix; the next start sweeps what the kill left, and the same commit run again ends
//! at the new state.
//!
//! The committer is this same test binary re-run with `GERMLINE_STATE_COMMITTER` set: its test
//! `state_committer_child` does what the runtime and the broker do for one commit (write the
//! generation with `FileState::store_with`, then point the slot entry `@files` at it with
//! `SlotStore::write`, the broker's own call) and kills itself at the step it is given.

use std::path::Path;
use std::process::Command;

use germline_broker::FILES_KEY;
use germline_engine::state::{FileState, Step};
use germline_policy::slots::{SlotKey, SlotStore};
use germline_policy::Label;
use germline_release::manifest::{StateKind, StatePath};
use germline_sandbox::StateFiles;

const RELEASE: &str = "sha256:crash";

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

fn key() -> SlotKey {
    SlotKey {
        release: RELEASE.into(),
        user: "alice".into(),
        horizon: Label::of(["finance"]),
    }
}

/// State number `n`: a database of 1 MiB whose every byte depends on `n`, and a file in a
/// subdirectory, so a torn mix of two states cannot pass for either.
fn state(n: u8) -> StateFiles {
    let db: Vec<u8> = (0..(1u32 << 20))
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(n))
        .collect();
    StateFiles {
        files: vec![
            ("cache/x/page".into(), vec![n; 4096]),
            ("db.sqlite".into(), db),
        ],
        dirs: vec!["cache".into(), "cache/x".into()],
        skipped: vec![],
    }
}

fn steps() -> Vec<(&'static str, Option<Step>)> {
    vec![
        ("staged", Some(Step::Staged)),
        ("file-written", Some(Step::FileWritten)),
        ("synced", Some(Step::Synced)),
        ("renamed", Some(Step::Renamed)),
        ("durable", Some(Step::Durable)),
        ("pointer", None),
    ]
}

fn kill_self() -> ! {
    // SAFETY: kill(2) on our own pid with SIGKILL; no memory is touched.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
    unreachable!("SIGKILL is not caught")
}

#[test]
fn state_committer_child() {
    let Ok(dir) = std::env::var("GERMLINE_STATE_COMMITTER") else {
        return;
    };
    let at = std::env::var("GERMLINE_STATE_KILL_AT").unwrap_or_default();
    let dir = Path::new(&dir);
    let st = FileState::open(dir, RELEASE, "alice", &decl()).expect("open");
    let mut slots = SlotStore::open(&dir.join("slots.db")).expect("slots");
    // The new state (2) over the previous one (1), committed by the parent before.
    let g = st
        .store_with(&state(2), &mut |s| {
            let name = steps()
                .into_iter()
                .find(|(_, x)| *x == Some(s))
                .map(|(n, _)| n)
                .unwrap_or_default();
            if name == at {
                kill_self();
            }
        })
        .expect("store");
    slots
        .write(&key(), FILES_KEY, g.as_bytes(), &Label::of(["finance"]))
        .expect("pointer");
    if at == "pointer" {
        kill_self();
    }
}

/// The horizon's state as a fresh runtime and broker read it.
fn current(dir: &Path) -> StateFiles {
    let st = FileState::open(dir, RELEASE, "alice", &decl()).expect("reopen");
    let slots = SlotStore::open(&dir.join("slots.db")).expect("slots");
    let slot = slots.snapshot(&key()).expect("snapshot");
    let g = slot
        .entries
        .get(FILES_KEY)
        .map(|e| String::from_utf8(e.value.clone()).expect("utf-8"));
    st.load(g.as_deref())
        .expect("the pointer names a complete generation")
}

#[test]
fn a_commit_killed_at_any_step_leaves_the_old_state_or_the_new_one() {
    for (name, _) in steps() {
        let d = tempfile::tempdir().expect("tmp");
        let dir = d.path();
        {
            let st = FileState::open(dir, RELEASE, "alice", &decl()).expect("open");
            let mut slots = SlotStore::open(&dir.join("slots.db")).expect("slots");
            let g = st.store(&state(1)).expect("first");
            slots
                .write(&key(), FILES_KEY, g.as_bytes(), &Label::of(["finance"]))
                .expect("first pointer");
        }
        let out = Command::new(std::env::current_exe().expect("exe"))
            .args(["state_committer_child", "--exact", "--nocapture"])
            .env("GERMLINE_STATE_COMMITTER", dir)
            .env("GERMLINE_STATE_KILL_AT", name)
            .output()
            .expect("committer");
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&out.status),
            Some(libc::SIGKILL),
            "the committer was killed at {name}: {out:?}"
        );
        let now = current(dir);
        let want = if name == "pointer" {
            state(2)
        } else {
            state(1)
        };
        assert_eq!(
            now.files, want.files,
            "killed at {name}: the state is not the old or the new one"
        );
        assert_eq!(now.dirs, want.dirs, "killed at {name}");
        // What the kill left is swept by the next open: no temporary directory remains.
        let root = std::fs::read_dir(dir.join("files/sha256-crash"))
            .expect("release dir")
            .filter_map(Result::ok)
            .find(|e| e.file_name().to_string_lossy().starts_with("u-"))
            .expect("user dir")
            .path();
        let tmp: Vec<String> = std::fs::read_dir(&root)
            .expect("user dir")
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".tmp-"))
            .collect();
        assert!(tmp.is_empty(), "killed at {name}: left {tmp:?}");
        // The same commit again, to its end: whatever the kill left does not stand in for
        // the new generation.
        let out = Command::new(std::env::current_exe().expect("exe"))
            .args(["state_committer_child", "--exact", "--nocapture"])
            .env("GERMLINE_STATE_COMMITTER", dir)
            .env("GERMLINE_STATE_KILL_AT", "none")
            .output()
            .expect("committer");
        assert!(out.status.success(), "retry after {name}: {out:?}");
        let now = current(dir);
        assert_eq!(now.files, state(2).files, "retry after {name}");
    }
}
