//! Slots are crash-safe: a writer process killed with SIGKILL in the middle of its writes
//! leaves every transaction either wholly there or absent (issue 2, item 5).
//!
//! The writer is this same test binary re-run with `GERMLINE_SLOT_WRITER` set: its test
//! `slot_writer_child` does nothing otherwise.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use germline_policy::slots::{SlotKey, SlotStore};
use germline_policy::Label;

const BATCH: [&str; 3] = ["a", "b", "c"];
const VALUE_LEN: usize = 256 * 1024;

fn key() -> SlotKey {
    SlotKey {
        release: "sha256:crash".into(),
        user: "alice".into(),
        horizon: Label::of(["hr"]),
    }
}

/// The value written for batch `i`, entry `part`: long enough that a write spans many pages.
fn value(i: u64, part: &str) -> Vec<u8> {
    let mut v = Vec::with_capacity(VALUE_LEN);
    let mut x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ u64::from(part.as_bytes()[0]);
    while v.len() < VALUE_LEN {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v
}

#[test]
fn slot_writer_child() {
    let Ok(db) = std::env::var("GERMLINE_SLOT_WRITER") else {
        return;
    };
    let start: u64 = std::env::var("GERMLINE_SLOT_START")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let mut store = SlotStore::open(Path::new(&db)).expect("open");
    for i in start.. {
        let vals: Vec<Vec<u8>> = BATCH.iter().map(|p| value(i, p)).collect();
        let keys: Vec<String> = BATCH.iter().map(|p| format!("{i:08}-{p}")).collect();
        let kv: Vec<(&str, &[u8])> = keys
            .iter()
            .map(String::as_str)
            .zip(vals.iter().map(Vec::as_slice))
            .collect();
        store
            .write_all(&key(), &kv, &Label::of(["hr"]))
            .expect("write");
        if i == start + 2 {
            println!("ready");
        }
    }
}

/// Checks every batch is complete and correct or absent, and returns how many there are.
fn check(db: &Path) -> u64 {
    let store = SlotStore::open(db).expect("reopen after kill");
    let slot = store.snapshot(&key()).expect("snapshot");
    let mut batches = std::collections::BTreeMap::<u64, Vec<&str>>::new();
    for (k, e) in &slot.entries {
        let (i, part) = k.split_once('-').expect("key shape");
        let i: u64 = i.parse().expect("batch number");
        assert_eq!(e.value, value(i, part), "entry {k} is torn");
        assert_eq!(e.label, Label::of(["hr"]));
        batches
            .entry(i)
            .or_default()
            .push(BATCH.iter().find(|p| **p == part).expect("part"));
    }
    for (i, parts) in &batches {
        assert_eq!(
            parts.len(),
            BATCH.len(),
            "batch {i} is partly there: {parts:?}"
        );
    }
    let n = batches.len() as u64;
    // Batches land in order, so what survives is a prefix.
    assert_eq!(
        batches.keys().copied().collect::<Vec<_>>(),
        (0..n).collect::<Vec<_>>()
    );
    n
}

#[test]
fn kill_9_leaves_whole_writes_or_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("slots.db");
    let exe = std::env::current_exe().expect("test binary");
    let mut landed = 0;
    for round in 0..5u64 {
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "slot_writer_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("GERMLINE_SLOT_WRITER", &db)
            .env("GERMLINE_SLOT_START", landed.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn writer");
        let out = child.stdout.take().expect("stdout");
        let ready = BufReader::new(out)
            .lines()
            .map_while(Result::ok)
            .any(|l| l.contains("ready"));
        assert!(ready, "writer never became ready");
        std::thread::sleep(Duration::from_millis(40 + round * 37));
        child.kill().expect("SIGKILL");
        child.wait().expect("reap");
        let n = check(&db);
        assert!(
            n >= landed + 3,
            "round {round}: expected progress, {n} batches after {landed}"
        );
        landed = n;
    }
}
