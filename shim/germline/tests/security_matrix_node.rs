//! The security matrix ported to Node (issue 28): the documents server of the corpus in Node
//! with the official TypeScript SDK (bundles/corpus-node, built by
//! scripts/setup.d/67-corpus-node.sh), its flow-compliant release and the pool, smuggle and mix
//! Trojans, run by tests/security/matrix.py --corpus node (`germline eval matrix --corpus node`)
//! as spawned copies. The same scripted
//! session (the official Python client) over the same world: the Trojans disclose with the
//! mechanism switched off (sig-pin) and nothing with it on (germline), while every benign step
//! completes under germline, so the documents (file items) reach the spawned copies. One trial,
//! two runtimes, four releases: about a minute.

mod run_common;

use std::path::Path;
use std::process::Command;

use run_common::*;
use serde_json::Value;

#[test]
fn node_trojans_disclose_under_sig_pin_and_not_under_germline() {
    if !can_run() {
        return;
    }
    let corpus = root().join("bundles/out/corpus-node/docs-pool/bundle");
    if !corpus.is_dir() {
        assert!(
            std::env::var_os("GERMLINE_REQUIRE_ROOT_TESTS").is_none(),
            "the Node corpus is not built: {} (scripts/setup.d/67-corpus-node.sh)",
            corpus.display()
        );
        return;
    }
    let out = tempfile::tempdir_in("/var/tmp").expect("tempdir");
    // matrix.py itself (what `germline eval matrix --corpus node` runs after its setup steps,
    // which scripts/setup.d has run already): the harness's venv, this build's germline.
    let venv = std::env::var("GERMLINE_CORPUS_VENV")
        .unwrap_or_else(|_| "/var/tmp/germline-venv-corpus".into());
    let status = Command::new(Path::new(&venv).join("bin/python"))
        .arg(root().join("tests/security/matrix.py"))
        .args([
            "--corpus",
            "node",
            "--modes",
            "sig-pin,germline",
            "--trials",
            "1",
        ])
        .args(["--cases", "docs-*", "--benign", "needed", "--germline"])
        .arg(germline())
        .arg("--out")
        .arg(out.path())
        .status()
        .expect("start tests/security/matrix.py");
    assert!(status.success(), "matrix.py --corpus node: {status}");
    let text = std::fs::read_to_string(out.path().join("matrix.json")).expect("matrix.json");
    let m: Value = serde_json::from_str(&text).expect("matrix.json is JSON");
    let s = &m["summary"];
    let attributed = |variant: &str, mode: &str| {
        s["cells"][variant][mode]["attributed"]
            .as_u64()
            .unwrap_or_else(|| panic!("no cell {variant}/{mode} in {s}"))
    };
    // Switched off: cross-call pooling and within-call mixing leak through the declared OCR
    // destination (smuggle reads files outside the call's items, which sig-pin's reads of the
    // call's own items already stop, as for the Python corpus: docs/security-matrix.md).
    for v in ["pool", "mix"] {
        assert_eq!(
            attributed(v, "sig-pin"),
            1,
            "{v} must disclose under sig-pin"
        );
    }
    // Switched on: nothing discloses, and the benign session completes.
    let g = &s["totals"]["germline"];
    assert_eq!(g["n"], 3, "three Node Trojans ran under germline: {g}");
    assert_eq!(g["attributed"], 0, "germline disclosed: {g}");
    assert_eq!(
        g["detected"], 0,
        "germline runs with a canary at a sink: {g}"
    );
    assert_eq!(g["benign_steps"], 6, "{g}");
    assert_eq!(
        g["benign_steps_ok"], g["benign_steps"],
        "benign steps under germline: {g}"
    );
    assert_eq!(s["totals"]["sig-pin"]["benign_runs_disclosing"], 0);
    // ... and the same Trojans ran, not refused releases: their own steps went through.
    let runs = m["runs"].as_array().expect("runs");
    for r in runs.iter().filter(|r| r["mode"] == "germline") {
        assert_eq!(r["refused"], "", "{} was refused: {r}", r["case"]);
        assert!(
            r["steps_ok"].as_u64().unwrap_or(0) >= 5,
            "{}: {r}",
            r["case"]
        );
    }
}
