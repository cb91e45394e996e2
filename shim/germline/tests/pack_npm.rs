//! `germline release pack --from npm:NAME@VERSION` (issue 28) on a popular reference server,
//! `@modelcontextprotocol/server-sequential-thinking`:
//! - packed once here from the pack cache that scripts/setup.d/66-pack-npm.sh fills, with the
//!   registry unreachable (so the pack is offline), its rootfs digest equal to the setup step's
//!   pack of the same spec, its draft manifest a Node release with spawned copies;
//! - names npm cannot take, and a package neither in the cache nor reachable, refused with the
//!   package and what to do;
//! - the setup step's release driven by the official MCP client SDK (tests/run/agent.py)
//!   through `germline run --mode germline` and, unprotected, with the host's Node on the same
//!   rootfs's files: the same answers, except the server's in-memory history, which a copy
//!   (destroyed after its one call) does not keep.

mod run_common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use run_common::*;
use serde_json::{json, Value};

const PASSWORD: &str = "germline-example-test-key";
const SPEC: &str = "npm:@modelcontextprotocol/server-sequential-thinking@2026.8.31";
const PACKAGE: &str = "@modelcontextprotocol/server-sequential-thinking";

/// The setup step's release (bundles/out/npm-server-sequential-thinking).
fn by_setup() -> PathBuf {
    root().join("bundles/out/npm-server-sequential-thinking")
}

fn ready() -> bool {
    let ok = by_setup().join("pack.json").exists() && Path::new("/usr/bin/node").exists();
    assert!(
        ok || std::env::var_os("GERMLINE_REQUIRE_ROOT_TESTS").is_none(),
        "needs {} (scripts/setup.d/66-pack-npm.sh)",
        by_setup().display()
    );
    ok
}

/// `germline release pack --json --from FROM` into `out`, with npm's registry and proxies
/// pointed at a closed port: only the cache can answer.
fn pack_offline(from: &str, out: &Path) -> Output {
    let dead = "http://127.0.0.1:9/";
    Command::new(germline())
        .args(["release", "pack", "--json", "--from", from, "--key"])
        .arg(root().join("bundles/out/keys/cosign.key"))
        .arg("--out")
        .arg(out)
        .env("COSIGN_PASSWORD", PASSWORD)
        .env("npm_config_registry", dead)
        .env("npm_config_proxy", dead)
        .env("npm_config_https_proxy", dead)
        .env("npm_config_fetch_retries", "0")
        .output()
        .expect("germline release pack")
}

#[test]
fn pack_from_npm_is_offline_from_the_cache_reproducible_and_refuses_bad_names() {
    if !can_run() || !ready() {
        return;
    }
    let dir = tempfile::tempdir_in("/var/tmp").expect("tempdir");
    let out = dir.path().join("think");
    let o = pack_offline(SPEC, &out);
    assert!(
        o.status.success(),
        "pack {SPEC} from the cache: {}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    // Not a terminal: no progress drawn, only the result.
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: Value = serde_json::from_slice(&o.stdout).expect("pack prints JSON");
    let setup: Value = serde_json::from_str(
        &std::fs::read_to_string(by_setup().join("pack.json")).expect("setup's pack.json"),
    )
    .expect("JSON");
    assert_eq!(v["signed"], true, "{v}");
    assert_eq!(v["tools"], json!(["sequentialthinking"]), "{v}");
    assert_eq!(
        v["rootfs_digest"], setup["rootfs_digest"],
        "two packs of {SPEC} from the cache give one rootfs"
    );
    let dists: Vec<&str> = v["distributions"]
        .as_array()
        .expect("distributions")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        dists.contains(&"@modelcontextprotocol/server-sequential-thinking@2026.8.31"),
        "{dists:?}"
    );
    assert!(
        dists
            .iter()
            .any(|d| d.starts_with("@modelcontextprotocol/sdk@")),
        "{dists:?}"
    );

    // The draft: a Node release with spawned copies, the package's bin as entry, no network.
    let m: Value = serde_json::from_str(
        &std::fs::read_to_string(v["manifest"].as_str().expect("manifest path")).expect("draft"),
    )
    .expect("JSON");
    assert_eq!(m["name"], "modelcontextprotocol-server-sequential-thinking");
    assert_eq!(m["version"], "2026.8.31");
    assert_eq!(m["language"], "node");
    assert_eq!(m["execution"], "spawn");
    assert_eq!(
        m["entry"],
        json!([
            "/usr/bin/node",
            format!("/app/node_modules/{PACKAGE}/dist/index.js")
        ])
    );
    assert_eq!(
        m["tools"]["sequentialthinking"]["destinations"]["hosts"],
        json!([])
    );
    // The lock npm installed from is in the signed rootfs.
    let lock: Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("rootfs/app/package-lock.json")).expect("lock"),
    )
    .expect("JSON");
    assert_eq!(
        lock["packages"][format!("node_modules/{PACKAGE}")]["version"],
        "2026.8.31"
    );
    assert!(out.join("rootfs/usr/bin/node").is_file());

    // Refusals name the package and say what to do; nothing is left behind.
    let bad = dir.path().join("bad");
    let o = pack_offline("npm:Not A Package", &bad);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        e.contains("Not A Package")
            && e.contains("is not an npm package name")
            && e.contains("expected npm:NAME or npm:NAME@VERSION"),
        "{e}"
    );
    let o = pack_offline("npm:@germline-test/no-such-server@1.0.0", &bad);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        e.contains("npm install @germline-test/no-such-server@1.0.0")
            && e.contains("could not reach the registry")
            && e.contains("pack it once with the network"),
        "{e}"
    );
    assert!(!bad.exists(), "a refused pack leaves no bundle");
}

fn policy(dir: &Path) -> PathBuf {
    let p = dir.join("policy.toml");
    std::fs::write(
        &p,
        "[labels]\nhr = \"personnel records\"\n\n[[argument]]\ntool = \"*\"\nname = \"*\"\nlabel = []\n",
    )
    .expect("policy");
    p
}

/// One answer: the server's JSON object, or its error (a JSON-RPC error, or a tool result
/// with `isError` and the error's text).
fn answer(r: &Value) -> Value {
    match (r["ok"].as_bool(), serde_json::from_str::<Value>(&text(r))) {
        (Some(true), Ok(v)) => v,
        _ => json!({"error": r["error"].as_str().map_or_else(|| text(r), str::to_string)}),
    }
}

#[test]
fn sequential_thinking_packed_from_npm_answers_through_spawned_copies() {
    if !can_run() || !ready() {
        return;
    }
    let dir = tempfile::tempdir_in("/var/tmp").expect("tempdir");
    let bundle = by_setup().join("bundle");
    let thought = |n: u32, total: u32, next: bool, extra: Value| {
        let mut a = json!({"thought": format!("step {n}: check the trains"), "thoughtNumber": n,
                           "totalThoughts": total, "nextThoughtNeeded": next});
        if let (Some(a), Some(x)) = (a.as_object_mut(), extra.as_object()) {
            a.extend(x.clone());
        }
        json!({"tool": "sequentialthinking", "arguments": a})
    };
    let script = json!([
        thought(1, 3, true, json!({})),
        thought(2, 3, true, json!({"branchFromThought": 1, "branchId": "b"})),
        // Past its estimate: the server raises totalThoughts to 5.
        thought(5, 3, false, json!({})),
        // Refused by the tool's schema (thoughtNumber >= 1).
        thought(0, 3, true, json!({})),
    ]);
    let germ = run_agent(
        dir.path(),
        &script,
        &[
            germline().display().to_string(),
            "run".into(),
            "--policy".into(),
            policy(dir.path()).display().to_string(),
            "--key".into(),
            key().display().to_string(),
            "--mode".into(),
            "germline".into(),
            "--pool".into(),
            "1".into(),
            "--state-dir".into(),
            dir.path().join("state").display().to_string(),
            bundle.display().to_string(),
        ],
    );
    let plain = run_agent(
        dir.path(),
        &script,
        &[
            "/usr/bin/node".into(),
            bundle
                .join(format!("rootfs/app/node_modules/{PACKAGE}/dist/index.js"))
                .display()
                .to_string(),
        ],
    );
    let g: Vec<Value> = germ.iter().map(answer).collect();
    let p: Vec<Value> = plain.iter().map(answer).collect();
    assert_eq!(g.len(), 4, "{g:?}");
    assert_eq!(p.len(), 4, "{p:?}");
    // The same answers on what the call itself decides...
    for (i, (a, b)) in g.iter().zip(&p).enumerate() {
        for k in [
            "thoughtNumber",
            "totalThoughts",
            "nextThoughtNeeded",
            "error",
        ] {
            assert_eq!(a.get(k), b.get(k), "call {i}, {k}: {a} vs {b}");
        }
    }
    assert_eq!(g[0]["nextThoughtNeeded"], true, "{g:?}");
    assert_eq!(g[2]["totalThoughts"], 5, "{g:?}");
    assert_eq!(germ[3]["ok"], false, "{germ:?}");
    assert!(
        g[3]["error"]
            .as_str()
            .is_some_and(|e| e.contains("thoughtNumber")),
        "{g:?}"
    );
    // ...and not on the server's memory of earlier calls: the unprotected process keeps its
    // thought history and branches; each spawned copy serves one call and is destroyed.
    let field = |v: &[Value], k: &str| v[..3].iter().map(|a| a[k].clone()).collect::<Vec<_>>();
    assert_eq!(
        field(&p, "thoughtHistoryLength"),
        [json!(1), json!(2), json!(3)]
    );
    assert_eq!(
        field(&g, "thoughtHistoryLength"),
        [json!(1), json!(1), json!(1)]
    );
    assert_eq!(
        field(&p, "branches"),
        [json!([]), json!(["b"]), json!(["b"])]
    );
    assert_eq!(field(&g, "branches"), [json!([]), json!(["b"]), json!([])]);
}
