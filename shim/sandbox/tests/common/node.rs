//! server-everything (bundles/out/node-everything), as the spawned-pool tests launch it.

use std::path::PathBuf;

use germline_sandbox::{Execution, Language, LaunchSpec, Limits};
use serde_json::json;

pub fn rootfs() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../bundles/out/node-everything/bundle/rootfs")
}

pub fn node_ready() -> bool {
    let ok = rootfs().join("app").exists();
    assert!(
        ok || std::env::var_os("GERMLINE_REQUIRE_ROOT_TESTS").is_none(),
        "needs {} (bundles/build-node.sh)",
        rootfs().display()
    );
    ok
}

/// server-everything as its manifest launches it, with its warm call.
pub fn spec() -> LaunchSpec {
    LaunchSpec {
        rootfs: rootfs(),
        interpreter: "/usr/bin/node".into(),
        entry: vec![
            "/app/node_modules/@modelcontextprotocol/server-everything/dist/index.js".into(),
            "stdio".into(),
        ],
        env: [
            "HOME=/tmp",
            "LANG=C.UTF-8",
            "PATH=/usr/local/bin:/usr/bin:/bin",
        ]
        .map(String::from)
        .to_vec(),
        workdir: "/".into(),
        module_path: vec![],
        readable_paths: vec!["/usr".into(), "/app".into(), "/etc/ssl".into()],
        language: Language::Node,
        execution: Execution::Spawn,
        scratch: false,
        warm: true,
        warm_calls: vec![json!({"tool": "echo", "arguments": {"message": "warm"}})],
        limits: Limits::default(),
        extra_mounts: vec![],
        egress_port: None,
        state_bytes: 0,
        writable_trees: false,
        twin_line: false,
        twin_forked: false,
    }
}
