//! `germline release pack --from pypi:NAME` (issue 27) on real servers from PyPI, one per
//! Python MCP SDK generation the bootstrap runs: mcp-server-time (mcp 2.x), mcp-server-calculator
//! (pins mcp < 2: a 1.x minor) and sequential-thinking-mcp (the standalone fastmcp package).
//! Each is packed here, then driven by the official MCP client SDK (tests/run/agent.py) through
//! `germline run --mode germline` and, unprotected, as the same rootfs chrooted with its own
//! Python: the answers must be the same. A release whose SDK the bootstrap does not run is
//! refused at start, and the client gets the reason as the JSON-RPC start error (-32004).
//!
//! mcp-server-time is packed by the test itself (offline from the cache that
//! scripts/setup.d/65-pack.sh fills); the other two by that setup step with the same command
//! (bundles/out/pypi-NAME), so the test does one pack, not three.

mod run_common;

use std::path::{Path, PathBuf};
use std::process::Command;

use run_common::*;
use serde_json::{json, Value};

const PASSWORD: &str = "germline-example-test-key";

/// Packs `from` into `dir/name`, signed with the example key; the JSON it printed.
fn pack(dir: &Path, name: &str, from: &str) -> (PathBuf, Value) {
    let out = dir.join(name);
    let o = Command::new(germline())
        .args(["release", "pack", "--json", "--from", from, "--key"])
        .arg(root().join("bundles/out/keys/cosign.key"))
        .arg("--out")
        .arg(&out)
        .env("COSIGN_PASSWORD", PASSWORD)
        .output()
        .expect("germline release pack");
    assert!(
        o.status.success(),
        "pack {from}: {}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    let v: Value = serde_json::from_slice(&o.stdout).expect("pack prints JSON");
    assert_eq!(v["signed"], true, "{v}");
    // Not a terminal: no progress drawn, only the result.
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    (out, v)
}

/// `germline run --mode germline` of the bundle at `bundle`.
fn germline_run(policy: &Path, bundle: &Path, dir: &Path) -> Vec<String> {
    vec![
        germline().display().to_string(),
        "run".into(),
        "--policy".into(),
        policy.display().to_string(),
        "--key".into(),
        key().display().to_string(),
        "--mode".into(),
        "germline".into(),
        "--state-dir".into(),
        dir.join("broker-state").display().to_string(),
        bundle.display().to_string(),
    ]
}

/// The same server unprotected: its rootfs chrooted, its own Python, the entry the manifest
/// names, the host's network (these servers use none).
fn plain(bundle: &Path, manifest: &Value) -> Vec<String> {
    let entry: Vec<String> = manifest["entry"]
        .as_array()
        .expect("entry")
        .iter()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect();
    let mut v: Vec<String> = vec![
        "env".into(),
        "PYTHONDONTWRITEBYTECODE=1".into(),
        "chroot".into(),
        bundle.join("rootfs").display().to_string(),
        entry[0].clone(),
    ];
    match entry[1].split_once(':') {
        Some((module, func)) => {
            v.push("-c".into());
            v.push(format!(
                "import sys; from {module} import {func} as f; sys.exit(f())"
            ));
        }
        None => v.extend(entry[1..].iter().cloned()),
    }
    v
}

fn answers(out: &[Value]) -> Vec<String> {
    out.iter()
        .map(|r| format!("ok={} {}", r["ok"], text(r)))
        .collect()
}

fn manifest_of(packed: &Value) -> Value {
    let p = packed["manifest"].as_str().expect("manifest path");
    serde_json::from_str(&std::fs::read_to_string(p).expect("draft manifest")).expect("JSON")
}

/// Where the release of `name` comes from: packed by this test, or by
/// scripts/setup.d/65-pack.sh with the same command (bundles/out/pypi-NAME).
enum Packed<'a> {
    Here(&'a str),
    BySetup(&'a str),
}

/// The release (packed here or by the setup step), its draft checked, `script` run both ways;
/// the germline's answers.
fn same_answers(
    w: &World,
    policy: &Path,
    name: &str,
    from: Packed<'_>,
    tools: &[&str],
    script: &Value,
    mask: &dyn Fn(&str) -> String,
) -> Vec<String> {
    let (bundle, packed) = match from {
        Packed::Here(from) => pack(w.path(), name, from),
        Packed::BySetup(server) => {
            let dir = root().join("bundles/out").join(format!("pypi-{server}"));
            let text = std::fs::read_to_string(dir.join("pack.json"))
                .unwrap_or_else(|e| panic!("{}: {e} (scripts/setup.d/65-pack.sh)", dir.display()));
            let mut v: Value = serde_json::from_str(&text).expect("pack.json");
            v["manifest"] = json!(dir.join("manifest.json"));
            (dir.join("bundle"), v)
        }
    };
    assert_eq!(packed["tools"], json!(tools), "{packed}");
    let m = manifest_of(&packed);
    // Destinations are never guessed: none was given, so every tool has none.
    for t in tools {
        assert_eq!(m["tools"][t]["destinations"]["hosts"], json!([]), "{m}");
    }
    let g = run_agent(w.path(), script, &germline_run(policy, &bundle, w.path()));
    let p = run_agent(w.path(), script, &plain(&bundle, &m));
    let g: Vec<String> = answers(&g).iter().map(|s| mask(s)).collect();
    let p: Vec<String> = answers(&p).iter().map(|s| mask(s)).collect();
    assert_eq!(g.len(), script_calls(script), "{name}: {g:?}");
    assert_eq!(g, p, "{name}: germline vs unprotected");
    g
}

fn script_calls(script: &Value) -> usize {
    script.as_array().map_or(0, Vec::len)
}

#[test]
fn servers_packed_from_pypi_answer_as_unprotected_on_every_sdk_generation() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let policy = w.policy_pinned(
        "127.0.0.1:9",
        "\n[[argument]]\ntool = \"*\"\nname = \"*\"\nlabel = []\n",
    );

    // mcp 2.x.
    let time = same_answers(
        &w,
        &policy,
        "time",
        Packed::Here("pypi:mcp-server-time"),
        &["get_current_time", "convert_time"],
        &json!([
            {"tool": "get_current_time", "arguments": {"timezone": "Europe/Paris"}},
            {"tool": "convert_time", "arguments": {"source_timezone": "UTC", "time": "09:30",
                                                   "target_timezone": "Asia/Tokyo"}},
            {"tool": "get_current_time", "arguments": {"timezone": "Not/AZone"}},
        ]),
        &without_clock,
    );
    assert!(
        time[0].starts_with("ok=true") && time[0].contains("Europe/Paris"),
        "{time:?}"
    );
    assert!(time[1].contains("+9.0h"), "{time:?}");
    assert!(time[2].contains("Not/AZone"), "{time:?}");

    // mcp 1.x: mcp-server-calculator pins mcp < 2.
    let calc = same_answers(
        &w,
        &policy,
        "calculator",
        Packed::BySetup("mcp-server-calculator"),
        &["calculate"],
        &json!([
            {"tool": "calculate", "arguments": {"expression": "2**10 + 3*7"}},
            {"tool": "calculate", "arguments": {"expression": "1/0"}},
        ]),
        &|s| s.to_string(),
    );
    assert_eq!(calc[0], "ok=true 1045", "{calc:?}");

    // The standalone fastmcp package.
    let think = same_answers(
        &w,
        &policy,
        "think",
        Packed::BySetup("sequential-thinking-mcp"),
        &["think"],
        &json!([
            {"tool": "think", "arguments": {"thread_purpose": "plan a trip", "thought": "book trains first",
                                            "thought_index": 1}},
        ]),
        &|s| s.to_string(),
    );
    assert!(think[0].starts_with("ok=true"), "{think:?}");

    // Which SDK each was packed with (the bootstrap's probe reads the same metadata).
    let dists = |bundle: PathBuf| {
        std::fs::read_dir(bundle.join("rootfs/usr/lib/python3/dist-packages"))
            .expect("site")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".dist-info"))
            .collect::<Vec<_>>()
    };
    let by_setup = |s: &str| root().join(format!("bundles/out/pypi-{s}/bundle"));
    let time_dists = dists(w.path().join("time"));
    assert!(
        time_dists.iter().any(|d| d.starts_with("mcp-2.")),
        "{time_dists:?}"
    );
    let calc_dists = dists(by_setup("mcp-server-calculator"));
    assert!(
        calc_dists.iter().any(|d| d.starts_with("mcp-1.")),
        "{calc_dists:?}"
    );
    let think_dists = dists(by_setup("sequential-thinking-mcp"));
    assert!(
        think_dists.iter().any(|d| d.starts_with("fastmcp-")),
        "{think_dists:?}"
    );

    // An SDK the bootstrap does not run: the time release with its mcp distribution said to be
    // 0.9.1 (the generation before 1.0), re-packed from the rootfs (no probe on that path).
    // `germline run` refuses to start, and the client is told why and what to do.
    let rootfs = w.path().join("old-sdk-rootfs");
    let st = Command::new("cp")
        .arg("-a")
        .arg(w.path().join("time/rootfs"))
        .arg(&rootfs)
        .status()
        .expect("cp");
    assert!(st.success());
    let site = rootfs.join("usr/lib/python3/dist-packages");
    let info = std::fs::read_dir(&site)
        .expect("site")
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            let n = p.file_name().unwrap_or_default().to_string_lossy();
            n.starts_with("mcp-2.") && n.ends_with(".dist-info")
        })
        .expect("mcp's dist-info");
    let meta = std::fs::read_to_string(info.join("METADATA")).expect("METADATA");
    let meta: String = meta
        .lines()
        .map(|l| {
            if l.starts_with("Version: ") {
                "Version: 0.9.1".to_string()
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(info.join("METADATA"), meta).expect("write");
    std::fs::rename(&info, site.join("mcp-0.9.1.dist-info")).expect("rename");
    let old = w.path().join("old-sdk");
    let o = Command::new(germline())
        .args(["release", "pack", "--manifest"])
        .arg(w.path().join("time.manifest.json"))
        .arg("--rootfs")
        .arg(&rootfs)
        .arg("--key")
        .arg(root().join("bundles/out/keys/cosign.key"))
        .arg("--out")
        .arg(&old)
        .env("COSIGN_PASSWORD", PASSWORD)
        .output()
        .expect("pack");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let r = Command::new(agent_python())
        .arg(root().join("tests/run/initialize.py"))
        .arg("--")
        .args(germline_run(&policy, &old, w.path()))
        .output()
        .expect("initialize.py");
    let r: Value = serde_json::from_slice(&r.stdout).expect("initialize.py prints JSON");
    assert_eq!(r["code"], -32004, "{r}");
    let m = r["message"].as_str().unwrap_or_default();
    assert!(m.contains("unsupported SDK: mcp 0.9.1"), "{m}");
    assert!(m.contains("mcp >= 1.2"), "says what runs: {m}");
}
