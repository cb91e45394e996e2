//! Sweeping state in files (issue 27): generations no horizon's pointer (`@files` in the
//! broker's slot store) names are removed; one a pointer names is kept, whatever the horizon;
//! nothing is removed while a commit or a copy's start holds the shared lock, before the grace
//! period, or when the slot store cannot be read. The pointers are written with the broker's
//! own `SlotStore::write`, into a real SQLite store.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use germline_broker::FILES_KEY;
use germline_engine::state::FileState;
use germline_policy::slots::{SlotKey, SlotStore};
use germline_policy::Label;
use germline_release::manifest::{StateKind, StatePath};
use germline_sandbox::StateFiles;

const RELEASE: &str = "sha256:sweep";

fn decl() -> Vec<StatePath> {
    vec![StatePath {
        path: "/run/state/db.sqlite".into(),
        kind: StateKind::File,
        arg: None,
    }]
}

fn state(n: u8) -> StateFiles {
    StateFiles {
        files: vec![("db.sqlite".into(), vec![n; 16])],
        ..Default::default()
    }
}

fn point(slots: &mut SlotStore, user: &str, horizon: &[&str], generation: &str) {
    let key = SlotKey {
        release: RELEASE.into(),
        user: user.into(),
        horizon: Label::of(horizon.iter().copied()),
    };
    slots
        .write(
            &key,
            FILES_KEY,
            generation.as_bytes(),
            &Label::of(horizon.iter().copied()),
        )
        .expect("pointer");
}

fn on_disk(st: &FileState) -> BTreeSet<String> {
    st.generations().expect("list").into_iter().collect()
}

fn sweep(st: &FileState, db: &Path, grace: Duration) -> Option<Vec<String>> {
    st.sweep_unreferenced(db, RELEASE, "alice", grace)
        .expect("sweep")
}

#[test]
fn only_generations_no_pointer_names_are_swept_and_never_under_a_lock() {
    let dir = tempfile::tempdir().expect("tmp");
    let db = dir.path().join("slots.db");
    // No slot store: nothing can be known live, so nothing is removed.
    let st = FileState::open(dir.path(), RELEASE, "alice", &decl()).expect("open");
    let g: Vec<String> = (1..=3)
        .map(|n| st.store(&state(n)).expect("store"))
        .collect();
    let e = st
        .sweep_unreferenced(&db, RELEASE, "alice", Duration::ZERO)
        .expect_err("no store");
    assert!(e.to_string().contains("no slot store"), "{e}");
    assert_eq!(on_disk(&st).len(), 3);

    let mut slots = SlotStore::open(&db).expect("slots");
    point(&mut slots, "alice", &["finance"], &g[1]);
    point(&mut slots, "alice", &["hr"], &g[2]);
    // Another user's pointer to the same contents names bob's generation, not alice's.
    point(&mut slots, "bob", &["finance"], &g[0]);

    // A commit between its generation and its pointer (or a copy between its snapshot and
    // its load) holds the shared lock: the sweep does nothing and says so.
    let held = st.shared().expect("shared lock");
    assert_eq!(sweep(&st, &db, Duration::ZERO), None);
    drop(held);
    assert_eq!(on_disk(&st).len(), 3);

    // Within the grace period (an evidence re-run may still start from it): kept.
    assert_eq!(sweep(&st, &db, Duration::from_secs(3600)), Some(vec![]));
    assert_eq!(on_disk(&st).len(), 3);

    // Unreferenced and old enough: gone; each horizon's current generation stays and loads.
    assert_eq!(sweep(&st, &db, Duration::ZERO), Some(vec![g[0].clone()]));
    assert_eq!(on_disk(&st), BTreeSet::from([g[1].clone(), g[2].clone()]));
    assert_eq!(st.load(Some(&g[1])).expect("load"), state(2));
    assert_eq!(st.load(Some(&g[2])).expect("load"), state(3));

    // finance moves on to hr's contents: its old generation is no one's any more.
    point(&mut slots, "alice", &["finance"], &g[2]);
    assert_eq!(sweep(&st, &db, Duration::ZERO), Some(vec![g[1].clone()]));
    assert_eq!(on_disk(&st), BTreeSet::from([g[2].clone()]));
    // A second sweep finds nothing more to do.
    assert_eq!(sweep(&st, &db, Duration::ZERO), Some(vec![]));
}
