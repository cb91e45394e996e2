//! The commit of a copy's writes is all-or-nothing (issue 27, `engine::commit`): a committer
//! killed with SIGKILL after any step (intent written, files staged, journal complete, one
//! file renamed, all applied) leaves, once `commit::recover` has run as the next start does,
//! the host directory wholly as before or wholly as committed, with no staging directory or
//! journal left. A target changed since the copy's view refuses the commit before anything is
//! touched, and a symlink on the host never carries a write out of the directory.
//!
//! The committer is this test binary re-run with `GERMLINE_COMMITTER` set (its test
//! `committer_child`), killing itself at the step it is given.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use germline_engine::commit::{self, sha256, CommitError, Expected, Op, Step};

/// Every file below `root` (paths relative to it) with its size and sha256 (short enough to
/// read in a failure); directories as `dir/`.
fn tree(root: &Path) -> BTreeMap<String, String> {
    fn walk(root: &Path, rel: &str, out: &mut BTreeMap<String, String>) {
        for e in std::fs::read_dir(root.join(rel)).expect("list") {
            let e = e.expect("entry");
            let name = e.file_name().to_string_lossy().into_owned();
            let r = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            let t = e.file_type().expect("type");
            if t.is_dir() {
                out.insert(format!("{r}/"), String::new());
                walk(root, &r, out);
            } else {
                out.insert(
                    r.clone(),
                    digest(&std::fs::read(root.join(&r)).expect("read")),
                );
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, "", &mut out);
    out
}

fn digest(b: &[u8]) -> String {
    format!("{} bytes {}", b.len(), sha256(b))
}

/// The directory before the commit: `a` and `b` of 256 KiB each, `keep/c`.
fn before(root: &Path) {
    std::fs::create_dir_all(root.join("keep")).expect("mkdir");
    std::fs::write(root.join("a"), vec![1u8; 256 << 10]).expect("a");
    std::fs::write(root.join("b"), vec![2u8; 256 << 10]).expect("b");
    std::fs::write(root.join("keep/c"), b"c\n").expect("c");
}

/// `a` rewritten, `b` removed, `new/d` and `keep/e` created, `keep/c` untouched.
fn ops() -> Vec<Op> {
    vec![
        Op::MkDir { rel: "new".into() },
        Op::Write {
            rel: "a".into(),
            contents: vec![9u8; 300 << 10],
            mode: 0o644,
            expected: Expected::Sha256(sha256(&vec![1u8; 256 << 10])),
        },
        Op::Write {
            rel: "new/d".into(),
            contents: b"d\n".to_vec(),
            mode: 0o600,
            expected: Expected::Absent,
        },
        Op::Write {
            rel: "keep/e".into(),
            contents: vec![7u8; 4096],
            mode: 0o644,
            expected: Expected::Absent,
        },
        Op::Delete {
            rel: "b".into(),
            expected: Expected::Sha256(sha256(&vec![2u8; 256 << 10])),
        },
    ]
}

fn steps() -> [(&'static str, Step); 5] {
    [
        ("intent", Step::Intent),
        ("staged", Step::Staged),
        ("journaled", Step::Journaled),
        ("renamed-one", Step::RenamedOne),
        ("applied", Step::Applied),
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
fn committer_child() {
    let Ok(dir) = std::env::var("GERMLINE_COMMITTER") else {
        return;
    };
    let at = std::env::var("GERMLINE_COMMIT_KILL_AT").unwrap_or_default();
    let dir = Path::new(&dir);
    commit::commit_with(&dir.join("journal"), &dir.join("root"), &ops(), &mut |s| {
        if steps().iter().any(|(n, x)| *x == s && *n == at) {
            kill_self();
        }
    })
    .expect("commit");
}

#[test]
fn a_commit_killed_after_any_step_is_all_or_nothing_after_recovery() {
    let mut old = None;
    let mut new = None;
    for (name, _) in steps().into_iter().chain([("none", Step::Done)]) {
        let d = tempfile::tempdir().expect("tmp");
        let root = d.path().join("root");
        before(&root);
        let first = tree(&root);
        let out = Command::new(std::env::current_exe().expect("exe"))
            .args(["committer_child", "--exact", "--nocapture"])
            .env("GERMLINE_COMMITTER", d.path())
            .env("GERMLINE_COMMIT_KILL_AT", name)
            .output()
            .expect("committer");
        if name == "none" {
            assert!(out.status.success(), "{out:?}");
        } else {
            assert_eq!(
                std::os::unix::process::ExitStatusExt::signal(&out.status),
                Some(libc::SIGKILL),
                "the committer was killed after {name}: {out:?}"
            );
        }
        let r = commit::recover(&d.path().join("journal")).expect("recover");
        let now = tree(&root);
        let decided = matches!(name, "journaled" | "renamed-one" | "applied" | "none");
        if decided {
            let want = new.get_or_insert_with(|| now.clone());
            assert_eq!(&now, want, "killed after {name}: not the committed tree");
            assert_eq!(now["a"], digest(&vec![9u8; 300 << 10]));
            assert_eq!(now["new/d"], digest(b"d\n"));
            assert!(!now.contains_key("b"));
        } else {
            assert_eq!(now, first, "killed after {name}: not the tree before");
            old.get_or_insert(now.clone());
        }
        assert_eq!(
            (r.rolled_forward, r.removed),
            match name {
                "intent" | "staged" => (0, 1),
                "none" => (0, 0),
                _ => (1, 0),
            },
            "after {name}"
        );
        assert!(
            !now.keys().any(|k| k.starts_with(".germline-commit-")),
            "after {name}: staging left: {:?}",
            now.keys().collect::<Vec<_>>()
        );
        let left: Vec<_> = std::fs::read_dir(d.path().join("journal"))
            .map(|e| e.filter_map(Result::ok).map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "after {name}: journal left {left:?}");
    }
    assert_ne!(old, new, "the commit changed something");
}

#[test]
fn a_target_changed_since_the_view_refuses_before_any_change() {
    let d = tempfile::tempdir().expect("tmp");
    let root = d.path().join("root");
    before(&root);
    // Someone edited `b` on the host during the call.
    std::fs::write(root.join("b"), b"edited\n").expect("edit");
    let first = tree(&root);
    let e = commit::commit(&d.path().join("journal"), &root, &ops()).expect_err("refused");
    assert!(
        matches!(&e, CommitError::Changed(p) if p.len() == 1 && p[0].starts_with("b ")),
        "{e}"
    );
    assert_eq!(tree(&root), first, "nothing was written");
}

#[test]
fn a_symlink_on_the_host_never_carries_a_write_out() {
    let d = tempfile::tempdir().expect("tmp");
    let root = d.path().join("root");
    before(&root);
    let outside = d.path().join("outside");
    std::fs::create_dir_all(&outside).expect("mkdir");
    // The copy made `keep/e`; on the host `keep` is now a symlink to a directory outside.
    std::fs::remove_dir_all(root.join("keep")).expect("rm");
    std::os::unix::fs::symlink(&outside, root.join("keep")).expect("ln");
    let e = commit::commit(&d.path().join("journal"), &root, &ops()).expect_err("refused");
    assert!(matches!(&e, CommitError::Changed(_)), "{e}");
    assert!(std::fs::read_dir(&outside).expect("ls").next().is_none());
    assert!(root.join("b").exists(), "nothing was applied");
}

/// Recovery run while another commit is under way (a second runtime starting) leaves that
/// commit alone: its committer holds the intent's lock. The commit then completes.
#[test]
fn recovery_leaves_a_live_commit_alone() {
    let d = tempfile::tempdir().expect("tmp");
    let root = d.path().join("root");
    before(&root);
    let journal = d.path().join("journal");
    let mut seen = Vec::new();
    commit::commit_with(&journal, &root, &ops(), &mut |s| {
        if matches!(s, Step::Staged | Step::Journaled) {
            let r = commit::recover(&journal).expect("recover");
            seen.push((s, r.rolled_forward, r.removed));
        }
    })
    .expect("commit");
    assert_eq!(seen, vec![(Step::Staged, 0, 0), (Step::Journaled, 0, 0)]);
    let now = tree(&root);
    assert_eq!(now["a"], digest(&vec![9u8; 300 << 10]));
    assert!(!now.contains_key("b"));
}
