//! `germline bench --quick --out DIR` runs end to end and writes a well-formed bench.json and
//! bench.md. Structure only: speed is measured by the benchmark itself, never asserted here.
//! Run with `--json`: stdout is exactly bench.json, and the tables a person reads go to stderr.

mod run_common;

use std::process::Command;

use run_common::*;
use serde_json::Value;

#[test]
fn bench_quick_writes_well_formed_results() {
    if !can_run() {
        return;
    }
    assert!(
        bundle("germline-bench").exists(),
        "bundles/out/germline-bench missing (scripts/setup.d/70-bench.sh)"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("bench");
    let r = Command::new(germline())
        .current_dir(root())
        .args(["bench", "--json", "--quick", "--gap-ms", "5", "--out"])
        .arg(&out)
        .arg("--state-dir")
        .arg(dir.path().join("broker"))
        .output()
        .expect("germline bench");
    let stdout = String::from_utf8_lossy(&r.stdout);
    assert!(
        r.status.success(),
        "germline bench failed: {stdout}\n{}",
        String::from_utf8_lossy(&r.stderr)
    );
    let doc: Value =
        serde_json::from_slice(&std::fs::read(out.join("bench.json")).expect("bench.json"))
            .expect("bench.json is JSON");
    assert_eq!(doc["schema"], "germline.bench/v1");
    assert_eq!(doc["quick"], true);
    assert!(doc["pin"].is_string());
    // Every case under every runtime, with a finite P50 no larger than its P99.
    let lat = doc["latency"].as_array().expect("latency");
    for case in [
        "noop",
        "stats",
        "summarize",
        "summarize_many",
        "get_current_time",
    ] {
        for rt in [
            "sig-pin",
            "confined-ifc",
            "fresh-ifc",
            "germline",
            "germline+pool",
        ] {
            let r = lat
                .iter()
                .find(|r| r["case"] == case && r["runtime"] == rt)
                .unwrap_or_else(|| panic!("no latency row for {case} under {rt}"));
            let p50 = r["p50_ms"].as_f64().expect("p50");
            let p99 = r["p99_ms"].as_f64().expect("p99");
            assert!(p50 > 0.0 && p50 <= p99, "{case} {rt}: p50 {p50}, p99 {p99}");
        }
    }
    assert_eq!(doc["table_vii"].as_array().map(Vec::len), Some(5));
    // summarize_many really is a three-copy call, and fanoutN an N-copy one.
    let copies: Vec<u64> = doc["scaling"]["copies"]
        .as_array()
        .expect("scaling")
        .iter()
        .map(|r| r["copies"].as_u64().expect("copies"))
        .collect();
    assert_eq!(copies, vec![1, 2, 3, 4, 5]);
    assert!(doc["scaling"]["slope_ms_per_copy"].as_f64().is_some());
    assert!(doc["memory"]["idle_server"]["pss_kb"].as_u64().unwrap_or(0) > 0);
    assert!(!doc["memory"]["resident_germlines"]
        .as_array()
        .expect("memory")
        .is_empty());
    // noop and get_current_time without the pool, get_current_time with a pool of 2.
    let b = doc["breakdown"].as_array().expect("breakdown");
    let pools: Vec<u64> = b.iter().filter_map(|r| r["pool"].as_u64()).collect();
    assert_eq!(pools, vec![0, 0, 2], "{b:?}");
    for k in [
        "plan",
        "fork",
        "fork.germline_checks",
        "fork.fork",
        "fork.confine",
        "fork.copy_checks",
        "broker",
        "copy",
        "copy.init",
        "copy.mcp",
    ] {
        assert!(
            b[0]["phases"][k]["us"].as_f64().is_some(),
            "phase {k} missing"
        );
    }
    // A forked copy's laps were timed; a pool copy was forked before the call.
    assert!(b[0]["phases"]["fork.fork"]["us"].as_f64().unwrap_or(0.0) > 0.0);
    assert_eq!(b[2]["phases"]["fork.fork"]["us"].as_f64(), Some(0.0));
    let targets = doc["targets"].as_array().expect("targets");
    assert_eq!(targets.len(), 7);
    assert!(targets
        .iter()
        .all(|t| t["met"].is_boolean() && t["value"].is_string()));
    // --json: stdout is the one document bench.json holds; the targets a person reads are
    // printed on stderr instead.
    let printed: Value = serde_json::from_str(&stdout).expect("stdout is one JSON document");
    assert_eq!(printed, doc);
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert!(stderr.contains("target "), "targets are printed: {stderr}");
    // Not on a terminal: the steps are lines, and no progress bar's escapes are there.
    assert!(
        stderr.contains("bench: latency germline pass 1 "),
        "{stderr}"
    );
    assert!(stderr.contains("bench: time breakdown"), "{stderr}");
    assert!(!stderr.contains('\x1b'), "{stderr}");
    let md = std::fs::read_to_string(out.join("bench.md")).expect("bench.md");
    assert!(md.contains("## Targets") && md.contains("| noop |"));
}
