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
        .args([
            "bench",
            "--json",
            "--quick",
            "--gap-ms",
            "5",
            "--fresh-calls",
            "2",
            "--out",
        ])
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
            "germline+concurrent",
        ] {
            let r = lat
                .iter()
                .find(|r| r["case"] == case && r["runtime"] == rt)
                .unwrap_or_else(|| panic!("no latency row for {case} under {rt}"));
            let p50 = r["p50_ms"].as_f64().expect("p50");
            let p99 = r["p99_ms"].as_f64().expect("p99");
            assert!(p50 > 0.0 && p50 <= p99, "{case} {rt}: p50 {p50}, p99 {p99}");
            // --fresh-calls sizes fresh-ifc alone; the row says the sizes it was measured with.
            let calls = if rt == "fresh-ifc" { 2 } else { 3 };
            assert_eq!(r["calls_per_pass"], calls, "{case} {rt}");
            assert_eq!(r["passes"], 1, "{case} {rt}");
            let conc = rt == "germline+concurrent";
            assert_eq!(
                r["copies_ran"],
                if conc { "concurrent" } else { "sequential" },
                "{case} {rt}"
            );
            // Only a multi-group call under the concurrent policy has its copies run
            // concurrently (and its answers say so); a one-group call never.
            let n = r["concurrent_calls"].as_u64().expect("concurrent_calls");
            if conc && case == "summarize_many" {
                assert!(
                    n > 0,
                    "no summarize_many call ran its copies concurrently: {r}"
                );
            } else {
                assert_eq!(n, 0, "{case} {rt}: {r}");
            }
        }
    }
    assert_eq!(doc["fresh_calls_per_pass"], 2);
    let policy = std::fs::read_to_string(out.join("policy-concurrent.toml")).expect("policy");
    assert!(
        policy.contains("[copies]\nconcurrent = [\"germline-bench\",\"mcp-server-time\"]"),
        "{policy}"
    );
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
    // The same fan-out under every germline runtime: one at a time without and with the
    // pool, and concurrent copies from the pool (whose 2..5-copy answers say so).
    let series = doc["scaling_runtimes"]
        .as_array()
        .expect("scaling_runtimes");
    let names: Vec<&str> = series
        .iter()
        .filter_map(|s| s["runtime"].as_str())
        .collect();
    assert_eq!(
        names,
        vec!["germline", "germline+pool", "germline+concurrent"]
    );
    assert_eq!(series[0], doc["scaling"]);
    for s in series {
        let rows = s["copies"].as_array().expect("copies");
        let copies: Vec<u64> = rows.iter().filter_map(|r| r["copies"].as_u64()).collect();
        assert_eq!(copies, vec![1, 2, 3, 4, 5], "{s}");
        assert!(s["slope_ms_per_copy"].as_f64().is_some(), "{s}");
        let conc = s["copies_ran"] == "concurrent";
        for r in rows {
            let n = r["concurrent_calls"].as_u64().expect("concurrent_calls");
            assert_eq!(n > 0, conc && r["copies"] != 1, "{r} of {}", s["runtime"]);
        }
    }
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
    let of = |issue: u64| targets.iter().filter(|t| t["issue"] == issue).count();
    // Issue 8's seven, and issue 30's: pooled and unpooled against sig-pin (noop,
    // get_current_time), the pool never slower, the tail, the 3-copy call, the extra copy,
    // the live copy's memory.
    assert_eq!((of(8), of(30), targets.len()), (7, 9, 16), "{targets:?}");
    assert!(targets
        .iter()
        .all(|t| t["met"].is_boolean() && t["value"].is_string()));
    // What this run does not measure is named with the command that does, never a value.
    let missing = doc["targets_not_measured"]
        .as_array()
        .expect("not measured");
    assert_eq!(missing.len(), 3);
    for t in missing {
        assert!(t.get("met").is_none() && t.get("value").is_none(), "{t}");
        let cmd = t["command"].as_str().expect("command");
        assert!(
            cmd.starts_with("germline run-bench ")
                || cmd.starts_with("germline bench --serve-clients 8"),
            "{cmd}"
        );
    }
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
    assert!(
        md.contains("### Issue 8") && md.contains("### Issue 30"),
        "{md}"
    );
    assert!(md.contains("not measured by this run"), "{md}");
    assert!(
        md.contains("| summarize_many | 3 | germline+concurrent | "),
        "{md}"
    );
    assert!(
        md.contains("| fresh-ifc | ") && md.contains(" | 1 x 2 |"),
        "{md}"
    );
}
