//! One agent session: MCP JSON-RPC from the agent, answered through a [`Runtime`].
//! Transport-free: `germline run` feeds it stdio lines, `germline serve` HTTP bodies.

use std::sync::Arc;

use germline_policy::Policy;
use serde_json::{json, Value};

use crate::jsonrpc::{self, Kind};
use germline_engine::callmeta;
use germline_engine::relay::{Agent, AgentLink, Buffered};
use germline_engine::runtime::{Outcome, RunError, Runtime, AGENT};

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
/// (germline_engine::flows, docs/release.md): the call was not run.
pub const FLOW_REFUSED: i64 = -32003;
/// `germline run` could not start the release (a bad or tampered release, a wrong key, a policy
/// that does not load, a germline that failed to start): the client's `initialize` is answered
/// with this code and the reason, and nothing of the release runs (docs/run.md).
pub const START_FAILED: i64 = -32004;

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
    /// Files the agent names (path arguments that become items) are opened with this user's
    /// permissions: a session `germline daemon` runs for an unprivileged user
    /// (docs/daemon.md). `None`: with this process's own.
    pub read_as: Option<germline_sys::user::FsCreds>,
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

/// What a message that cannot be parsed is told: serde_json's reason, and for JSON nested
/// deeper than its limit, which limit.
pub fn parse_error_text(e: &serde_json::Error) -> String {
    let text = e.to_string();
    if text.contains("recursion limit exceeded") {
        format!("{text} (JSON nested deeper than 128 arrays and objects is refused)")
    } else {
        text
    }
}

/// The parse error answering `text`, with its id if a shallow scan of its top level reads
/// one (so that the request waiting for it ends now), else null.
pub fn parse_error(text: &[u8], why: &str) -> String {
    let id = jsonrpc::peek_id(text);
    let e = error(
        id.as_ref().map_or(&Value::Null, jsonrpc::RawId::value),
        PARSE_ERROR,
        format!("parse error: {why}"),
    );
    jsonrpc::render(&e, id.as_slice())
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
            read_as: None,
        }
    }

    /// Handles one line from the agent: the text of its answer, `None` for notifications
    /// and responses (no answer). During a call the copy of the agent's group talks to the
    /// agent through `link`. Ids come back as the agent wrote them ([`jsonrpc::render`]); a
    /// line that cannot be parsed is answered with its id wherever a shallow scan reads one.
    pub fn handle_line(&mut self, line: &[u8], link: &mut dyn AgentLink) -> Option<String> {
        if line.trim_ascii().is_empty() {
            return None;
        }
        let parsed = std::str::from_utf8(line)
            .map_err(|e| format!("the line is not UTF-8 ({e})"))
            .and_then(|text| serde_json::from_str::<Value>(text).map_err(|e| parse_error_text(&e)));
        match parsed {
            Ok(v) => {
                let raw = jsonrpc::raw_ids_if_needed(&v, line);
                let answer = self.handle_with(v, link)?;
                Some(jsonrpc::render(&answer, &raw))
            }
            Err(why) => Some(parse_error(line, &why)),
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
            if batch.is_empty() {
                return Some(error(
                    &Value::Null,
                    INVALID_REQUEST,
                    "invalid request: an empty batch",
                ));
            }
            let out: Vec<Value> = batch
                .into_iter()
                .filter_map(|m| match m {
                    Value::Object(_) => self.handle_with(m, link),
                    _ => Some(error(
                        &Value::Null,
                        INVALID_REQUEST,
                        "invalid request: a batch element must be an object",
                    )),
                })
                .collect();
            return (!out.is_empty()).then_some(Value::Array(out));
        }
        let Some(obj) = msg.as_object() else {
            return Some(error(
                &Value::Null,
                INVALID_REQUEST,
                "invalid request: a JSON-RPC message must be an object",
            ));
        };
        let (id, method) = match jsonrpc::classify(obj) {
            Ok(Kind::Request { id, method }) => (id.clone(), method),
            // Notifications (initialized, cancelled, roots changed), and responses (to a
            // request we never send outside a call): nothing to answer.
            Ok(Kind::Notification { .. } | Kind::Response) => return None,
            Err(e) => return Some(e),
        };
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
            "tools/call" => return self.tools_call(&id, &params, link),
            // Every other request carries no item (`tools/list`, `resources/*`, `prompts/*`,
            // `completion/complete`, `logging/setLevel`, and methods germline does not know):
            // a data-free copy answers it, so a method the server does not implement gets the
            // server's own -32601, and its errors reach the agent unchanged.
            m => match self.runtime.passthrough(m, params) {
                Ok(r) => ok(&id, r),
                Err(e) => failed(&id, &e, &format!("germline: {m}: ")),
            },
        })
    }

    fn initialize(&mut self, id: &Value, params: Value) -> Value {
        let id = id.clone();
        match self.runtime.passthrough("initialize", params) {
            Ok(mut r) => {
                // Each request is served by a copy that is gone after it: none lives on to
                // send `notifications/resources/updated`, so a subscription cannot be kept
                // and is not offered (docs/run.md, "Subscriptions").
                if let Some(sub) = r.pointer_mut("/capabilities/resources/subscribe") {
                    if sub.as_bool() != Some(false) {
                        *sub = Value::Bool(false);
                    }
                }
                if let Some(info) = r.get_mut("serverInfo").and_then(Value::as_object_mut) {
                    info.insert(
                            "germline".into(),
                            json!({"mode": self.runtime.mode().name(), "release": self.runtime.release().label(),
                                   "digest": self.runtime.release().digest}),
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

    /// A `tools/call`: its answer, or none if the agent cancelled it.
    fn tools_call(
        &mut self,
        id: &Value,
        params: &Value,
        link: &mut dyn AgentLink,
    ) -> Option<Value> {
        let Some(name) = params.get("name").and_then(Value::as_str) else {
            return Some(error(
                id,
                INVALID_PARAMS,
                "tools/call needs params.name (a string)",
            ));
        };
        let manifest = &self.runtime.release().manifest;
        let Some(tool) = manifest.tools.get(name) else {
            let known: Vec<&str> = manifest.tools.keys().map(String::as_str).collect();
            return Some(error(
                id,
                INVALID_PARAMS,
                format!(
                    "unknown tool {name:?}: release {} declares {}",
                    self.runtime.release().label(),
                    known.join(", ")
                ),
            ));
        };
        let args = params
            .get("arguments")
            .cloned()
            .unwrap_or_else(|| json!({}));
        // The agent, and any recipient the signed manifest names for this call.
        let mut consumers = vec![AGENT.to_string()];
        match callmeta::recipients(&self.policy, name, tool, &args, params.get("_meta"), AGENT) {
            Ok(r) => consumers.extend(r),
            Err(e) => return Some(error(id, INVALID_PARAMS, format!("germline: {e}"))),
        }
        let t_meta = std::time::Instant::now();
        let policy = &self.policy;
        let workdir = policy.workdir(&manifest.name);
        let release = &manifest.name;
        let build = || {
            let meta = params.get("_meta");
            let mut m = callmeta::build_in(policy, workdir, name, tool, &args, meta, &consumers)?;
            // The release's declared workspaces, as directory items (issue 27).
            germline_engine::workspaces::add_declared(&mut m, policy, release)?;
            Ok::<_, callmeta::CallMetaError>(m)
        };
        let built = match &self.read_as {
            Some(c) => match c.run(build) {
                Ok(b) => b,
                Err(e) => {
                    return Some(error(
                        id,
                        RUNTIME_FAILED,
                        format!("germline: cannot take the user's permissions to read files: {e}"),
                    ))
                }
            },
            None => build(),
        };
        let meta = match built {
            Ok(mut m) => {
                // Its rules label what a copy writes into a directory item (issue 27).
                m.policy = Some(self.policy.clone());
                m
            }
            Err(e) => return Some(error(id, INVALID_PARAMS, format!("germline: {e}"))),
        };
        let meta_us = germline_engine::laps::micros(t_meta);
        self.calls += 1;
        let mut agent = Agent {
            link,
            capabilities: self.agent_capabilities.clone(),
        };
        match self.runtime.call_with(&meta, &mut agent) {
            Ok(mut out) => {
                let r = ok(id, out.result.clone());
                out.phases.push(("session.meta", meta_us));
                self.last = Some(out);
                Some(r)
            }
            // MCP: no response to a cancelled request.
            Err(RunError::Cancelled) => {
                self.last = None;
                None
            }
            Err(e) => {
                self.last = None;
                Some(failed(id, &e, "germline: "))
            }
        }
    }
}

/// The answer to a request that failed with `e`: the server's own JSON-RPC error object,
/// unchanged, where the agent's copy (or the baseline's process) answered with one
/// ([`RunError::server_error`]); else germline's own error, its fixed code and `prefix` and
/// the error's text.
fn failed(id: &Value, e: &RunError, prefix: &str) -> Value {
    match e.server_error() {
        Some(obj) => json!({"jsonrpc": "2.0", "id": id, "error": obj}),
        None => error(id, code_of(e), format!("{prefix}{e}")),
    }
}

fn code_of(e: &RunError) -> i64 {
    match e {
        RunError::Invalid(_) => INVALID_PARAMS,
        RunError::Tool(_) => TOOL_FAILED,
        RunError::Broker(_) | RunError::Sandbox(_) | RunError::Suppressed(_) => RUNTIME_FAILED,
        RunError::Limit(_) => LIMIT_REACHED,
        RunError::Flow(_) => FLOW_REFUSED,
        // Never answered (see tools_call); a code for completeness.
        RunError::Cancelled => INTERNAL_ERROR,
    }
}
