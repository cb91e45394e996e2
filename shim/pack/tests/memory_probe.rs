//! `--probe-call` (issue 27) on the real mcp-server-sqlite from PyPI, packed by
//! scripts/setup.d/66-pack-sqlite.sh: its insights memo (`append_insight`, read back as the
//! resource `memo://insights`) lives only in the process's memory, so the probe must warn; a
//! query of its database (`list_tables`) keeps nothing in memory, so it must not. The probe
//! runs on the packed rootfs as `pack --from pypi:` runs it (the same germline, no network),
//! without repacking: about a second.

use std::path::PathBuf;

use germline_pack::draft::Draft;
use germline_pack::memory::{ProbeCall, Verdict};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn can_run(rootfs: &std::path::Path) -> bool {
    // SAFETY: geteuid has no arguments and cannot fail.
    let is_root = unsafe { libc::geteuid() } == 0;
    let why = if !is_root {
        "not root"
    } else if !rootfs.is_dir() {
        "bundles/out/pypi-mcp-server-sqlite is missing (scripts/setup.d/66-pack-sqlite.sh)"
    } else {
        return true;
    };
    if std::env::var("GERMLINE_REQUIRE_ROOT_TESTS").as_deref() == Ok("1") {
        panic!("this test needs root and the packed mcp-server-sqlite: {why}");
    }
    eprintln!("skipped: {why}");
    false
}

#[test]
fn the_insights_memo_is_state_in_memory_and_a_query_is_not() {
    let rootfs = root().join("bundles/out/pypi-mcp-server-sqlite/bundle/rootfs");
    if !can_run(&rootfs) {
        return;
    }
    let state = germline_pack::state_path("--db-path=db.sqlite").expect("state flag");
    let draft = Draft {
        name: "mcp-server-sqlite".into(),
        version: "0.0.0".into(),
        entry: vec![
            "mcp_server_sqlite:main".into(),
            "--db-path".into(),
            state.path.clone(),
        ],
        readable_paths: ["/usr", "/etc/ssl", "/etc/python3.11", "/usr/share/zoneinfo"]
            .map(String::from)
            .to_vec(),
        state: vec![state],
    };
    let calls = [
        ProbeCall::parse(r#"append_insight={"insight":"churn rose in Q3"}"#).expect("call"),
        ProbeCall::parse("list_tables").expect("call"),
    ];
    let initial = tempfile::tempdir().expect("tempdir");
    let probed = germline_pack::probe::probe(&rootfs, &draft, &calls, initial.path())
        .expect("the probe runs the server");
    assert!(probed.tools.iter().any(|t| t.name == "append_insight"));
    assert_eq!(probed.memory.len(), 2, "{:?}", probed.memory);
    let memo = &probed.memory[0];
    assert!(
        matches!(&memo.verdict, Verdict::Kept(w) if w.contains("memo://insights")),
        "append_insight keeps the memo in memory: {memo:?}"
    );
    let warning = memo.warning().expect("a warning");
    assert!(warning.contains("lost between calls"), "{warning}");
    assert_eq!(
        probed.memory[1].verdict,
        Verdict::NotSeen,
        "list_tables keeps nothing in memory: {:?}",
        probed.memory[1]
    );
    // A call of a tool the server does not list is the publisher's mistake, said as such.
    let e = germline_pack::probe::probe(
        &rootfs,
        &draft,
        &[ProbeCall::parse("no_such_tool").expect("call")],
        initial.path(),
    )
    .expect_err("an unknown tool");
    assert!(e.to_string().contains("no such tool"), "{e}");
}
