//! The security matrix as a regression test (issue 7): the documents server's cases and xtool
//! under `germline` against four baselines, through `germline eval matrix` itself. The mechanism
//! switched on (germline) must disclose nothing while the same harness, a world made alike and
//! the same signed Trojans show leaks with it switched off (sig-pin), reduced to confinement
//! (confined-ifc), to a fresh process per call (fresh-ifc) or to copies without Plan's split
//! (nosplit): a harness that sees no leak anywhere would be broken, and this test fails then.
//! The two intermediate baselines run only the cases this test asserts of them (direct, pool,
//! xtool, with their servers' benign sessions): fresh-ifc takes ~11 s a run, and all 20 of its
//! runs were 233 of the matrix's 400 s. The full matrix (every case, every runtime, 3 trials)
//! is `germline eval matrix`, documented in docs/security-matrix.md.
//!
//! Each runtime's matrix is an invocation of its own, all at once (`matrices`), each in a
//! network namespace of its own (`matrix_with`); one after another they took ~225 s of the
//! suite. Each invocation generates its world afresh (the same generator, its own canaries):
//! nothing here compares values across runtimes, and a run is attributed against the benign
//! runs of its own runtime and world.

mod run_common;

use std::process::Command;

use run_common::*;
use serde_json::Value;

fn cell<'a>(summary: &'a Value, variant: &str, mode: &str) -> &'a Value {
    &summary["cells"][variant][mode]
}

/// Runs `germline eval matrix` (one trial) and returns its matrix.json and summary.
fn matrix(modes: &str, cases: &str, benign: &str) -> (Value, Value) {
    matrix_with(modes, cases, benign, &[])
}

/// The corpus's setup, once per process and on the host's network, before any matrix starts:
/// the matrices below run at once, and each runs it again (scripts/security-matrix.sh), which
/// then only finds everything built; two of them building the same release at once would not.
fn corpus_ready() {
    static READY: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let ok = READY.get_or_init(|| {
        Command::new("bash")
            .arg(root().join("scripts/setup.d/50-corpus.sh"))
            .env("GERMLINE_ROOT", root())
            .env("GERMLINE_BIN", germline())
            .status()
            .is_ok_and(|s| s.success())
    });
    assert!(*ok, "scripts/setup.d/50-corpus.sh failed");
}

/// The same with more options of `germline eval matrix`.
///
/// Each matrix runs in a network namespace of its own (`unshare --net`, its loopback up):
/// every matrix binds the same attacker address (127.13.37.1:8137, the corpus's raw-socket
/// target, tests/security/sinks.py), so two in one namespace could not run at once; the sinks
/// and the runtimes' brokers are all on loopback, so a matrix needs nothing of the host's
/// network. The matrices of this file then run side by side (its tests on two threads, the
/// first test's two matrices on two), where one at a time they took ~225 s of the suite.
fn matrix_with(modes: &str, cases: &str, benign: &str, more: &[&str]) -> (Value, Value) {
    corpus_ready();
    let out = tempfile::tempdir().expect("tempdir");
    let status = Command::new("unshare")
        .args([
            "--net",
            "--",
            "sh",
            "-c",
            "ip link set lo up && exec \"$@\"",
            "matrix",
        ])
        .arg(germline())
        .args(["eval", "matrix", "--modes", modes, "--trials", "1"])
        .args(more)
        .args(["--cases", cases, "--benign", benign, "--out"])
        .arg(out.path())
        .arg("--root")
        .arg(root())
        // The corpus's setup step (bundles/build-corpus.sh) uses this binary, where without
        // it each matrix ran `cargo build -p germline` from inside the test.
        .env("GERMLINE_BIN", germline())
        .status()
        .expect("start germline eval matrix (under unshare --net)");
    assert!(
        status.success(),
        "germline eval matrix ({modes}) failed: {status}"
    );
    let text = std::fs::read_to_string(out.path().join("matrix.json")).expect("matrix.json");
    let m: Value = serde_json::from_str(&text).expect("matrix.json is JSON");
    assert!(out.path().join("matrix.md").is_file() && out.path().join("matrix.png").is_file());
    let s = m["summary"].clone();
    (m, s)
}

/// Runs the matrices `parts` (modes, cases, benign) at once and merges them into one matrix:
/// its runs, and a summary whose cells and totals are each part's. A matrix's cells and totals
/// are per runtime, and each attack run is attributed against its servers' benign runs of the
/// same runtime and trial (tests/security/matrix.py), so with every runtime in one part only,
/// the merged matrix holds what one invocation of all the parts' runs would.
fn matrices(parts: &[(&str, &str, &str)]) -> (Value, Value) {
    let done: Vec<(Value, Value)> = std::thread::scope(|sc| {
        let running: Vec<_> = parts
            .iter()
            .map(|&(modes, cases, benign)| sc.spawn(move || matrix(modes, cases, benign)))
            .collect();
        running
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    });
    let (mut runs, mut summary) = (Vec::new(), serde_json::json!({"cells": {}, "totals": {}}));
    for (m, s) in done {
        runs.extend(m["runs"].as_array().cloned().unwrap_or_default());
        for (mode, total) in s["totals"].as_object().cloned().unwrap_or_default() {
            assert!(
                summary["totals"].get(&mode).is_none(),
                "{mode} is in two parts"
            );
            summary["totals"][&mode] = total;
        }
        for (variant, cells) in s["cells"].as_object().cloned().unwrap_or_default() {
            for (mode, cell) in cells.as_object().cloned().unwrap_or_default() {
                summary["cells"][&variant][&mode] = cell;
            }
        }
    }
    (serde_json::json!({ "runs": runs }), summary)
}

fn attributed(summary: &Value, variant: &str, mode: &str) -> u64 {
    cell(summary, variant, mode)["attributed"]
        .as_u64()
        .unwrap_or_else(|| panic!("no cell {variant}/{mode} in the matrix summary"))
}

#[test]
fn docs_trojans_disclose_under_baselines_and_not_under_germline() {
    if !can_run() {
        return;
    }
    let corpus = root().join("bundles/out/corpus/docs-pool/bundle");
    assert!(
        corpus.is_dir(),
        "the corpus is not built: {} (scripts/setup.d/50-corpus.sh)",
        corpus.display()
    );
    // One matrix a runtime, all at once (`matrices`): the intermediate baselines only on the
    // cases asserted of them, with their servers' benign sessions.
    let asserted = "docs-direct,docs-pool,xtool";
    let (m, s) = matrices(&[
        ("sig-pin", "docs-*,xtool", "all"),
        ("nosplit", "docs-*,xtool", "all"),
        ("germline", "docs-*,xtool", "all"),
        ("confined-ifc", asserted, "needed"),
        ("fresh-ifc", asserted, "needed"),
    ]);
    let s = &s;

    // Switched on: no attack run discloses (attributed or not), every benign step completes.
    let g = &s["totals"]["germline"];
    assert!(
        g["n"].as_u64().unwrap_or(0) >= 17,
        "docs has 16 attack cases, and xtool spans docs and web: {g}"
    );
    assert_eq!(g["attributed"], 0, "germline disclosed: {g}");
    assert_eq!(
        g["detected"], 0,
        "germline runs with a canary at a sink: {g}"
    );
    assert_eq!(
        g["benign_steps_ok"], g["benign_steps"],
        "benign steps under germline: {g}"
    );
    assert_eq!(g["benign_runs_disclosing"], 0);

    // Switched off: the same Trojans leak, as the paper's classes say.
    for v in [
        "pool",
        "trigger",
        "dormant",
        "launder",
        "init_read",
        "statefile",
        "writeback",
    ] {
        assert_eq!(
            attributed(s, v, "sig-pin"),
            1,
            "{v} must disclose under sig-pin"
        );
    }
    // Confinement alone stops the raw socket and the return-value channels, not the pool.
    assert_eq!(attributed(s, "direct", "sig-pin"), 1);
    assert_eq!(attributed(s, "direct", "confined-ifc"), 0);
    assert_eq!(attributed(s, "pool", "confined-ifc"), 1);
    assert_eq!(s["totals"]["sig-pin"]["benign_runs_disclosing"], 0);
    // Without Plan's split, one copy holds the invoice and the salary sheet of Fig. 2c's call
    // and its OCR request carries both: within-call mixing, which splitting removes.
    assert_eq!(
        attributed(s, "pool", "nosplit"),
        1,
        "within-call mixing under nosplit"
    );
    assert_eq!(attributed(s, "pool", "germline"), 0);
    // xtool: the documents server drops the call's text in the user's temporary directory and
    // the web server ships it. A fresh process per call still shares that directory; a copy's
    // scratch is its own and is discarded with it (Table XI: 3/3 under every baseline, 0 under
    // NoSplit and Germline).
    for mode in ["sig-pin", "confined-ifc", "fresh-ifc"] {
        assert_eq!(
            attributed(s, "xtool", mode),
            1,
            "xtool must disclose under {mode}"
        );
    }
    for mode in ["nosplit", "germline"] {
        assert_eq!(
            attributed(s, "xtool", mode),
            0,
            "xtool disclosed under {mode}"
        );
    }
    // ... and not because the dropper broke: the copy's temporary directory (its scratch)
    // works, so the Trojan does its advertised job and its drop is discarded with the copy.
    let runs = m["runs"].as_array().expect("runs");
    let xg = runs
        .iter()
        .find(|r| r["mode"] == "germline" && r["case"] == "xtool")
        .expect("a germline run of xtool");
    assert!(
        xg["steps_total"].as_u64().unwrap_or(0) > 0 && xg["steps_ok"] == xg["steps_total"],
        "xtool's advertised steps under germline: {xg}"
    );

    // statefile (issue 27): the Trojan keeps what it sees only in its declared state file and
    // sends that file's contents with each request. Under sig-pin the file is the process's own
    // disk and carries the HR and board items to ocr.example; under germline each copy's state
    // is committed under the copy's label at its horizon, so ocr.example's copies never see the
    // agent's state, and the agent's next copy starts with that label (ℓ(σ) carried): the board
    // summary of the second call is labelled with the first call's HR item too.
    assert_eq!(attributed(s, "statefile", "germline"), 0);
    let labels = |case: &str| -> Vec<Value> {
        let r = runs
            .iter()
            .find(|r| r["mode"] == "germline" && r["case"] == case)
            .unwrap_or_else(|| panic!("no germline run of {case}"));
        r["steps"]
            .as_array()
            .map(|v| v.iter().map(|s| s["label"].clone()).collect())
            .unwrap_or_default()
    };
    let (with_state, benign) = (labels("docs-statefile"), labels("docs-benign"));
    assert_eq!(
        benign.get(1),
        Some(&serde_json::json!(["board"])),
        "the benign board summary: {benign:?}"
    );
    assert_eq!(
        with_state.get(1),
        Some(&serde_json::json!(["board", "hr"])),
        "statefile's board summary must carry the label of the state the first call left: {with_state:?}"
    );

    // writeback (issue 27): the Trojan writes the HR review it read into a hidden file of the
    // public folder the same call names (a directory item), and reads it back in a later call
    // on that folder to post it to the blog. Under sig-pin the folder is the host's and the
    // file reaches the blog (asserted above); under germline and nosplit the agent's copy's
    // write is refused at commit (its label [hr] is not within the path's, public), so the
    // later call's copies never see it. Every run has its own copy of the folder (matrix.py).
    for mode in ["nosplit", "germline"] {
        assert_eq!(
            attributed(s, "writeback", mode),
            0,
            "writeback disclosed under {mode}"
        );
    }
    let wg = runs
        .iter()
        .find(|r| r["mode"] == "germline" && r["case"] == "docs-writeback")
        .expect("a germline run of docs-writeback");
    assert!(
        wg["steps_total"].as_u64() == Some(2) && wg["steps_ok"] == wg["steps_total"],
        "writeback's advertised steps under germline: {wg}"
    );
    let writes = &wg["steps"][0]["writes"];
    assert_eq!(
        writes["committed"],
        serde_json::json!([]),
        "writeback's first call committed: {writes}"
    );
    let refused = writes["refused"].as_array().cloned().unwrap_or_default();
    assert!(
        refused.len() == 1
            && refused[0]["path"]
                .as_str()
                .is_some_and(|p| p.ends_with("/public/.fastpdfx-index")),
        "the refusal of writeback's write, in _meta.germline.writes: {writes}"
    );

    // The bootstrap attacks are refused before their first call under germline, with the reason.
    for case in ["docs-init_thread", "docs-hijack"] {
        let r = runs
            .iter()
            .find(|r| r["mode"] == "germline" && r["case"] == case)
            .unwrap_or_else(|| panic!("no germline run of {case}"));
        assert_eq!(r["steps_ok"], 0, "{case} ran under germline: {r}");
        let why = r["refused"].as_str().unwrap_or("");
        assert!(why.contains("refused"), "{case}: no reason given: {why:?}");
        let base = runs
            .iter()
            .find(|r| r["mode"] == "sig-pin" && r["case"] == case)
            .unwrap_or_else(|| panic!("no sig-pin run of {case}"));
        assert_eq!(base["refused"], "", "{case} must start under sig-pin");
    }
}

/// Concurrent copies (issue 30, `[copies] concurrent`): documents cases whose sessions make
/// Fig. 2c's two-copy call, under germline only, with every case's release opted in. The hold
/// rule keeps what the copies get as it is one at a time: nothing discloses and every benign
/// step completes. (The matrix's policy names the releases; `meta.copies` says it did.)
#[test]
fn docs_trojans_disclose_nothing_with_concurrent_copies() {
    if !can_run() {
        return;
    }
    let (m, s) = matrix_with(
        "germline",
        "docs-pool,docs-smuggle,docs-direct,docs-launder",
        "needed",
        &["--copies", "concurrent"],
    );
    assert_eq!(m["meta"]["copies"], "concurrent", "{}", m["meta"]);
    let g = &s["totals"]["germline"];
    assert_eq!(g["n"].as_u64(), Some(4), "{g}");
    assert_eq!(
        g["attributed"], 0,
        "germline disclosed with concurrent copies: {g}"
    );
    assert_eq!(
        g["detected"], 0,
        "a canary at a sink with concurrent copies: {g}"
    );
    assert_eq!(
        g["benign_steps_ok"], g["benign_steps"],
        "benign steps with concurrent copies: {g}"
    );
    assert_eq!(g["benign_runs_disclosing"], 0);
}
