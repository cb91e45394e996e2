//! The server run once in a germline to list its tools: the real sandbox (the same bootstrap,
//! Landlock, seccomp and checks as `germline run`), no network, no data. A server the
//! bootstrap cannot run (an SDK generation it does not know, a transport of its own) is
//! refused here, at pack time, with the bootstrap's reason, instead of at its first deployment.

use std::path::Path;

use germline_sandbox::{Execution, Germline, Language, LaunchSpec, Limits, Options};
use serde_json::{json, Value};

use crate::draft::{Draft, INTERPRETER};
use crate::memory::ProbeCall;
use crate::{Error, Result};

/// What the probe learnt.
#[derive(Debug, Clone)]
pub struct Probed {
    /// The tools, as `tools/list` gave them (every page).
    pub tools: Vec<Listed>,
    /// One finding per `--probe-call` ([`crate::memory`]).
    pub memory: Vec<crate::memory::Finding>,
}

/// A tool as `tools/list` gave it: its name, and whether it says it changes nothing it is
/// given (MCP's `annotations.readOnlyHint`, `true` exactly), which the draft copies into the
/// manifest's `read_only` for the publisher's review: the server's own word, never guessed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub name: String,
    pub read_only: bool,
}

/// The tools of a `tools/list` result (one page).
pub(crate) fn listed(page: &Value) -> Vec<Listed> {
    page.get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| {
            Some(Listed {
                name: t.get("name")?.as_str()?.to_string(),
                read_only: t.pointer("/annotations/readOnlyHint") == Some(&Value::Bool(true)),
            })
        })
        .collect()
}

/// The launch of the draft release from `root` (the germline's environment of `germline run`,
/// without the broker's proxy: the probe has no network at all).
pub fn launch_spec(root: &Path, draft: &Draft) -> LaunchSpec {
    LaunchSpec {
        rootfs: root.to_path_buf(),
        interpreter: INTERPRETER.into(),
        entry: draft.entry.clone(),
        env: [
            "HOME=/tmp",
            "LANG=C.UTF-8",
            "PATH=/usr/local/bin:/usr/bin:/bin",
            "PYTHONDONTWRITEBYTECODE=1",
            "PYTHONUNBUFFERED=1",
        ]
        .map(String::from)
        .to_vec(),
        workdir: "/".into(),
        module_path: vec![],
        readable_paths: draft.readable_paths.clone(),
        language: Language::Python,
        execution: Execution::Fork,
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

/// Starts the draft in a germline, lists the tools from one copy, probes each of `calls` for
/// state kept in memory ([`crate::memory`]), stops it.
pub fn list_tools(root: &Path, draft: &Draft, calls: &[ProbeCall]) -> Result<Probed> {
    probe(root, draft, calls, &root.with_file_name("state-initial"))
}

/// [`list_tools`], with the directory the germline's initial state is made in (`initial`,
/// used only when the draft declares state).
pub fn probe(root: &Path, draft: &Draft, calls: &[ProbeCall], initial: &Path) -> Result<Probed> {
    let id = format!("pack-{}-{}", std::process::id(), draft.name);
    let mut spec = launch_spec(root, draft);
    if !draft.state.is_empty() {
        // As `germline run` does: the germline sees each state path (empty) at /run/state, so
        // a server that opens its database at start works here too.
        let initial = initial.to_path_buf();
        let decls: Vec<(String, bool)> = draft
            .state
            .iter()
            .map(|s| {
                (
                    s.name().to_string(),
                    s.kind == germline_release::manifest::StateKind::Dir,
                )
            })
            .collect();
        germline_sandbox::statedir::initial_state(&initial, &decls)
            .map_err(|e| Error::Probe(e.to_string()))?;
        spec.extra_mounts.push(germline_sandbox::BindMount {
            source: initial,
            target: germline_sandbox::spec::STATE_DIR.into(),
        });
        spec.state_bytes = 1 << 20;
    }
    let mut g = Germline::start(spec, Options::new(&id)).map_err(|e| {
        Error::Probe(match e {
            germline_sandbox::Error::Init(reason) => reason,
            other => other.to_string(),
        })
    })?;
    let listed = (|| {
        let mut copy = g.copy()?;
        let mut tools = Vec::new();
        let mut cursor: Option<Value> = None;
        let result = (|| {
            for _ in 0..100 {
                let params = match &cursor {
                    Some(c) => json!({"cursor": c}),
                    None => json!({}),
                };
                let page = copy.mcp_call_method("tools/list", params)?;
                tools.extend(listed(&page));
                cursor = page.get("nextCursor").filter(|c| !c.is_null()).cloned();
                if cursor.is_none() {
                    break;
                }
            }
            Ok(Value::Null)
        })();
        let tools = copy.finish(result).map(|_| tools)?;
        let memory = calls
            .iter()
            .map(|c| crate::memory::check(&mut g, c))
            .collect::<germline_sandbox::Result<Vec<_>>>()?;
        Ok((tools, memory))
    })();
    let _ = g.stop();
    let (tools, memory) =
        listed.map_err(|e: germline_sandbox::Error| Error::Probe(e.to_string()))?;
    if tools.is_empty() {
        return Err(Error::Probe(format!("{} listed no tools", draft.name)));
    }
    if let Some(c) = calls
        .iter()
        .find(|c| !tools.iter().any(|t| t.name == c.tool))
    {
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        return Err(Error::ProbeCall(format!(
            "{}: the server has no such tool (it lists: {})",
            c.tool,
            names.join(", ")
        )));
    }
    Ok(Probed { tools, memory })
}
