//! The real, unmodified mcp-server-sqlite from PyPI (issue 27, "State between calls"), packed
//! by `germline release pack --from pypi:mcp-server-sqlite --with 'mcp<2'
//! --state=--db-path=db.sqlite` (scripts/setup.d/66-pack-state.sh, bundles/out/
//! pypi-mcp-server-sqlite), driven through `germline run --mode germline` by the official MCP
//! client SDK (tests/run/agent.py), against the same code run unprotected on the host with a
//! database file of its own.
//!
//! Every call is a fresh copy of the germline, so the table created by one call, the row
//! inserted by the next and the select of a later one only meet through the state the shim
//! keeps per (release, user, horizon): the answers must be those of the unprotected server.
//! The row survives a restart of `germline run`; a session whose agent has another clearance
//! (so its calls have another horizon) sees an empty database.

mod run_common;

use std::path::{Path, PathBuf};

use run_common::*;
use serde_json::{json, Value};

fn release() -> PathBuf {
    root().join("bundles/out/pypi-mcp-server-sqlite/bundle")
}

fn policy(d: &Path, name: &str, agent: &str) -> PathBuf {
    let text = format!(
        r#"[labels]
hr = "personnel records"
finance = "invoices"

[[argument]]
tool = "*"
name = "*"
label = []

[consumers]
agent = {agent}
"#
    );
    let p = d.join(name);
    std::fs::write(&p, text).expect("policy");
    p
}

fn germline_run(d: &Path, policy: &Path, audit: &str) -> Vec<String> {
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
        d.join("broker-state").display().to_string(),
        "--audit".into(),
        d.join(audit).display().to_string(),
        release().display().to_string(),
    ]
}

fn answers(out: &[Value]) -> Vec<String> {
    out.iter()
        .map(|r| format!("ok={} {}", r["ok"], text(r)))
        .collect()
}

fn commits(d: &Path, audit: &str) -> Vec<Value> {
    std::fs::read_to_string(d.join(audit))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["event"] == "state_commit")
        .collect()
}

#[test]
fn sqlite_keeps_its_database_between_calls_per_horizon() {
    if !can_run() {
        return;
    }
    if !release().exists() {
        assert!(
            std::env::var_os("GERMLINE_REQUIRE_ROOT_TESTS").is_none(),
            "bundles/out/pypi-mcp-server-sqlite missing (scripts/setup.d/66-pack-state.sh)"
        );
        return;
    }
    let w = tempfile::tempdir().expect("tempdir");
    let d = w.path();
    let select =
        json!({"tool": "read_query", "arguments": {"query": "SELECT id, name FROM invoices"}});
    let script = json!([
        {"tool": "create_table", "arguments": {"query": "CREATE TABLE invoices (id INTEGER PRIMARY KEY, name TEXT)"}},
        {"tool": "write_query", "arguments": {"query": "INSERT INTO invoices (name) VALUES ('acme')"}},
        select,
        {"tool": "list_tables", "arguments": {}},
        {"tool": "describe_table", "arguments": {"table_name": "invoices"}},
    ]);
    let finance = policy(d, "finance.toml", r#"["finance"]"#);
    let g = answers(&run_agent(
        d,
        &script,
        &germline_run(d, &finance, "audit-1.jsonl"),
    ));
    // Unprotected: the release's own code on the host, its database a file of its own. `-S`:
    // no site hooks of the host's Python run (a host `.pth` that appends to certifi's bundle
    // would write into the release's rootfs, found through PYTHONPATH).
    let rootfs = release().parent().expect("dir").join("bundle/rootfs");
    let plain = answers(&run_agent(
        d,
        &script,
        &[
            "env".into(),
            "PYTHONDONTWRITEBYTECODE=1".into(),
            format!(
                "PYTHONPATH={}",
                rootfs.join("usr/lib/python3/dist-packages").display()
            ),
            "/usr/bin/python3.11".into(),
            "-S".into(),
            "-c".into(),
            "import sys; from mcp_server_sqlite import main; sys.exit(main())".into(),
            "--db-path".into(),
            d.join("plain.sqlite").display().to_string(),
        ],
    ));
    assert_eq!(g.len(), 5, "{g:?}");
    assert_eq!(g, plain, "germline vs unprotected");
    assert_eq!(g[2], "ok=true [{'id': 1, 'name': 'acme'}]", "{g:?}");
    assert!(g[3].contains("'name': 'invoices'"), "{}", g[3]);
    // Only the two calls that changed the database committed a generation, each labelled
    // with its copy's label (no item: public) at the agent's horizon.
    let c = commits(d, "audit-1.jsonl");
    assert_eq!(c.len(), 2, "{c:?}");
    assert!(c.iter().all(|e| e["label"] == json!([])), "{c:?}");
    assert_ne!(c[0]["generation"], c[1]["generation"]);

    // A restart of `germline run` (a new germline, a new broker, the same state dir).
    let again = answers(&run_agent(
        d,
        &json!([select]),
        &germline_run(d, &finance, "audit-2.jsonl"),
    ));
    assert_eq!(again, vec![g[2].clone()], "after a restart");
    assert!(
        commits(d, "audit-2.jsonl").is_empty(),
        "a read commits nothing"
    );

    // Another clearance, so another horizon: its own (empty) database, not the finance one.
    let both = policy(d, "both.toml", r#"["finance", "hr"]"#);
    let other = answers(&run_agent(
        d,
        &json!([select]),
        &germline_run(d, &both, "audit-3.jsonl"),
    ));
    assert_eq!(other.len(), 1, "{other:?}");
    assert!(
        other[0].contains("no such table: invoices") && !other[0].contains("acme"),
        "another horizon: {}",
        other[0]
    );
}
