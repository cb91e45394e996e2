//! The Node server started once as a spawned copy to list its tools: the launcher, namespaces,
//! Landlock, seccomp and outside checks of `germline run`'s spawned copies (issue 28), no
//! network, no data. A server that does not start there (a socket family the sandbox
//! refuses, a file outside its readable paths, a missing library) is refused at pack time,
//! with the reason, instead of at its first deployment.

use std::path::Path;
use std::time::{Duration, Instant};

use germline_sandbox::spawn::{SpawnOptions, SpawnPool};
use germline_sandbox::{Execution, Language, LaunchSpec, Limits};
use serde_json::{json, Value};

use crate::{Error, Result};

/// The launch of the drafted release from `root`: `node ENTRY...`, `germline run`'s
/// environment without the broker's proxy (the probe has no network at all).
pub fn launch_spec(root: &Path, entry: &[String], readable_paths: &[String]) -> LaunchSpec {
    LaunchSpec {
        rootfs: root.to_path_buf(),
        interpreter: super::runtime::NODE.into(),
        entry: entry.to_vec(),
        env: [
            "HOME=/tmp",
            "LANG=C.UTF-8",
            "PATH=/usr/local/bin:/usr/bin:/bin",
        ]
        .map(String::from)
        .to_vec(),
        workdir: "/".into(),
        module_path: vec![],
        readable_paths: readable_paths.to_vec(),
        language: Language::Node,
        execution: Execution::Spawn,
        scratch: false,
        warm: true,
        warm_calls: vec![],
        limits: Limits::default(),
        extra_mounts: vec![],
        egress_port: None,
        state_bytes: 0,
        writable_trees: false,
        twin_line: false,
        twin_forked: false,
    }
}

/// Refuses a rootfs below a directory others cannot enter (`mktemp -d`'s 0700, `/root`): the
/// copy's keeper, in its own user namespace, then cannot bind the rootfs, and the launcher
/// only says "Permission denied".
pub fn reachable(root: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    for dir in root.ancestors().skip(1) {
        let Ok(meta) = std::fs::metadata(dir) else {
            continue;
        };
        if meta.permissions().mode() & 0o001 == 0 {
            return Err(Error::Entry(format!(
                "{} (mode {:o}) is not searchable by others, so the sandbox cannot reach the \
                 rootfs below it: give --out in a directory with o+x on its whole path (e.g. \
                 under /var/tmp), or chmod o+x it",
                dir.display(),
                meta.permissions().mode() & 0o7777
            )));
        }
    }
    Ok(())
}

/// Spawns one copy of the draft, lists its tools (every page), kills it.
pub fn list_tools(spec: LaunchSpec, name: &str) -> Result<Vec<crate::probe::Listed>> {
    reachable(&spec.rootfs)?;
    let id = format!("pack-{}-{name}", std::process::id());
    // No pool: the one copy `start` spawns is the probe.
    let opts = SpawnOptions::new(&id);
    let mut pool = SpawnPool::start(spec, opts).map_err(|e| {
        Error::Probe(match e {
            germline_sandbox::Error::Init(reason) | germline_sandbox::Error::Refused(reason) => {
                reason
            }
            other => other.to_string(),
        })
    })?;
    let listed = (|| {
        let mut copy = pool.take(&json!({}), Instant::now() + Duration::from_secs(30))?;
        let mut tools = Vec::new();
        let result = (|| {
            let mut cursor: Option<Value> = None;
            for _ in 0..100 {
                let params = match &cursor {
                    Some(c) => json!({"cursor": c}),
                    None => json!({}),
                };
                let page = copy.mcp_call_method("tools/list", params)?;
                tools.extend(crate::probe::listed(&page));
                cursor = page.get("nextCursor").filter(|c| !c.is_null()).cloned();
                if cursor.is_none() {
                    break;
                }
            }
            Ok(Value::Null)
        })();
        pool.retire(copy, result).map(|_| tools)
    })();
    let _ = pool.stop();
    let tools = listed.map_err(|e: germline_sandbox::Error| Error::Probe(e.to_string()))?;
    if tools.is_empty() {
        return Err(Error::Probe(format!("{name} listed no tools")));
    }
    Ok(tools)
}
