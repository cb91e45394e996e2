//! One agent session: MCP JSON-RPC from the agent, answered through a [`Runtime`].
//! Transport-free: `germline run` feeds it stdio lines, `germline serve` HTTP bodies.

use std::sync::Arc;

use germline_policy::Policy;
use serde_json::{json, Value};

use crate::callmeta;
use crate::relay::{Agent, AgentLink, Buffered};
use crate::runtime::{Outcome, RunError, Runtime, AGENT};

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;
/// The tool (the agent's own copy) failed.
pub const TOOL_FAILED: i64 = -32000;
/// germline refused or could not run the call (broker down, germline refused).
pub const RUNTIME_FAILED: i64 = -32001;
/// A `[limits]` value of the policy refused the call (docs/operations.md).
pub const LIMIT_REACHED: i64 = -32002;
/// A flow the release's manifest declares would carry an item to a host not cleared for it
/// (crate::flows, docs/release.md): the call was not run.
pub const FLOW_REFUSED: i64 = -32003;

/// Methods answered by a data-free copy.
const PASSTHROUGH: &[&str] = &[
    "tools/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "prompts/list",
    "prompts/get",
    "completion/complete",
];

pub struct Session {
    pub runtime: Runtime,
    pub policy: Arc<Policy>,
    /// The last call's outcome, for benchmarks and tests in-process.
    pub last: Option<Outcome>,
    pub calls: u64,
    /// Notifications for the agent, to be written before the next answer (transports
    /// without a live link: [`Session::handle`]).
    pub pending: Vec<Value>,
    /// The client capabilities the agent announced at `initialize`.
    pub agent_capabilities: Value,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("calls", &self.calls)
            .finish_non_exhaustive()
    }
}

pub fn error(id: &Value, code: i64, message: impl Into<String>) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message.into()}})
}

fn ok(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

impl Session {
    pub fn new(runtime: Runtime, policy: Arc<Policy>) -> Session {
        Session {
            runtime,
            policy,
            last: None,
            calls: 0,
            pending: Vec::new(),
            agent_capabilities: json!({}),
        }
    }

    /// Handles one line from the agent; `None` for notifications (no answer). During a call
    /// the copy of the agent's group talks to the agent through `link`.
    pub fn handle_line(&mut self, line: &str, link: &mut dyn AgentLink) -> Option<Value> {
        if line.trim().is_empty() {
            return None;
        }
        match serde_json::from_str::<Value>(line) {
            Ok(v) => self.handle_with(v, link),
            Err(e) => Some(error(
                &Value::Null,
                PARSE_ERROR,
                format!("parse error: {e}"),
            )),
        }
    }

    /// Handles one JSON-RPC message with no live link to the agent: notifications of the
    /// call wait in [`Session::pending`], requests to the agent are refused.
    pub fn handle(&mut self, msg: Value) -> Option<Value> {
        let mut link = Buffered::default();
        let answer = self.handle_with(msg, &mut link);
        self.pending.append(&mut link.notifications);
        answer
    }

    /// Handles one JSON-RPC message (a batch is answered with one error per element).
    pub fn handle_with(&mut self, msg: Value, link: &mut dyn AgentLink) -> Option<Value> {
        if let Value::Array(batch) = msg {
            let out: Vec<Value> = batch
                .into_iter()
                .filter_map(|m| self.handle_with(m, link))
                .collect();
            return (!out.is_empty()).then_some(Value::Array(out));
        }
        let Some(obj) = msg.as_object() else {
            return Some(error(
                &Value::Null,
                INVALID_REQUEST,
                "a JSON-RPC message must be an object",
            ));
        };
        let id = obj.get("id").cloned();
        let method = obj.get("method").and_then(Value::as_str);
        if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            return id.map(|id| error(&id, INVALID_REQUEST, "expected \"jsonrpc\": \"2.0\""));
        }
        let Some(method) = method else {
            // A response from the agent (to a request we never send in this version): drop it.
            return None;
        };
        let Some(id) = id else {
            // Notifications (initialized, cancelled, roots changed): nothing to answer.
            return None;
        };
        if !(id.is_string() || id.is_number()) {
            return Some(error(
                &Value::Null,
                INVALID_REQUEST,
                "the id must be a string or a number",
            ));
        }
        let params = obj.get("params").cloned().unwrap_or_else(|| json!({}));
        Some(match method {
            "ping" => ok(&id, json!({})),
            "initialize" => {
                self.agent_capabilities = params
                    .get("capabilities")
                    .filter(|c| c.is_object())
                    .cloned()
                    .unwrap_or_else(|| json!({}));
                self.initialize(&id, params)
            }
            "tools/call" => self.tools_call(&id, &params, link),
            m if PASSTHROUGH.contains(&m) => match self.runtime.passthrough(m, params) {
                Ok(r) => ok(&id, r),
                Err(e) => error(&id, code_of(&e), format!("germline: {m}: {e}")),
            },
            "logging/setLevel" => ok(&id, json!({})),
            other => error(&id, METHOD_NOT_FOUND, format!("method {other:?} not found")),
        })
    }

    fn initialize(&mut self, id: &Value, params: Value) -> Value {
        let id = id.clone();
        match self.runtime.passthrough("initialize", params) {
            Ok(mut r) => {
                if let Some(info) = r.get_mut("serverInfo").and_then(Value::as_object_mut) {
                    info.insert(
                            "germline".into(),
                            json!({"mode": self.runtime.mode.name(), "release": self.runtime.release.label(),
                                   "digest": self.runtime.release.digest}),
                        );
                }
                ok(&id, r)
            }
            Err(e) => error(
                &id,
                RUNTIME_FAILED,
                format!("germline: initialize failed: {e}"),
            ),
        }
    }

    fn tools_call(&mut self, id: &Value, params: &Value, link: &mut dyn AgentLink) -> Value {
        let Some(name) = params.get("name").and_then(Value::as_str) else {
            return error(
                id,
                INVALID_PARAMS,
                "tools/call needs params.name (a string)",
            );
        };
        let manifest = &self.runtime.release.manifest;
        let Some(tool) = manifest.tools.get(name) else {
            let known: Vec<&str> = manifest.tools.keys().map(String::as_str).collect();
            return error(
                id,
                INVALID_PARAMS,
                format!(
                    "unknown tool {name:?}: release {} declares {}",
                    self.runtime.release.label(),
                    known.join(", ")
                ),
            );
        };
        let args = params
            .get("arguments")
            .cloned()
            .unwrap_or_else(|| json!({}));
        // The agent, and any recipient the signed manifest names for this call.
        let mut consumers = vec![AGENT.to_string()];
        match callmeta::recipients(&self.policy, name, tool, &args, params.get("_meta"), AGENT) {
            Ok(r) => consumers.extend(r),
            Err(e) => return error(id, INVALID_PARAMS, format!("germline: {e}")),
        }
        let meta = match callmeta::build(
            &self.policy,
            name,
            tool,
            &args,
            params.get("_meta"),
            &consumers,
        ) {
            Ok(m) => m,
            Err(e) => return error(id, INVALID_PARAMS, format!("germline: {e}")),
        };
        self.calls += 1;
        let mut agent = Agent {
            link,
            capabilities: self.agent_capabilities.clone(),
        };
        match self.runtime.call_with(&meta, &mut agent) {
            Ok(out) => {
                let r = ok(id, out.result.clone());
                self.last = Some(out);
                r
            }
            Err(e) => {
                self.last = None;
                error(id, code_of(&e), format!("germline: {e}"))
            }
        }
    }
}

fn code_of(e: &RunError) -> i64 {
    match e {
        RunError::Invalid(_) => INVALID_PARAMS,
        RunError::Tool(_) => TOOL_FAILED,
        RunError::Broker(_) | RunError::Sandbox(_) | RunError::Suppressed(_) => RUNTIME_FAILED,
        RunError::Limit(_) => LIMIT_REACHED,
        RunError::Flow(_) => FLOW_REFUSED,
    }
}
