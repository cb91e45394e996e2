//! `germline serve` with several releases: one [`Session`] per release, the agent sees one MCP
//! server. `tools/call` goes to the release that declares the tool (names are unique across
//! releases, checked at start); lists are merged; everything else goes to the first release.
//!
//! One `Router` serves every HTTP session. Sharing a release's [`Session`] (and so its
//! [`crate::runtime::Runtime`]) between agent sessions is correct for germline execution: the
//! germline never holds data, every `tools/call` runs in copies forked for that call and gone
//! after it, and a session's only state is counters. Calls to one release run one at a time
//! (its germline forks one copy at a time and is frozen while a copy holds data); calls to
//! different releases run in parallel. The baselines' persistent process is shared too, as an
//! ordinary deployment of the unprotected server would be.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use serde_json::{json, Map, Value};

use crate::release::Release;
use crate::runtime::Mode;
use crate::session::{error, Session, INVALID_PARAMS, METHOD_NOT_FOUND};

/// Which release declares each tool, or an error naming both releases of a clashing name.
/// `releases` holds each release's name for messages (`name@version (digest)`) and its
/// manifest's tools; called on the verified manifests before any germline starts.
pub fn tool_owners(releases: &[(String, Vec<String>)]) -> Result<BTreeMap<String, usize>, String> {
    let mut owners: BTreeMap<String, usize> = BTreeMap::new();
    for (i, (name, tools)) in releases.iter().enumerate() {
        for tool in tools {
            if let Some(&j) = owners.get(tool) {
                return Err(format!(
                    "two releases declare the tool {tool:?}: {} and {}; an agent could not tell \
                     which one it calls (serve them from separate endpoints)",
                    releases[j].0, name
                ));
            }
            owners.insert(tool.clone(), i);
        }
    }
    Ok(owners)
}

/// [`tool_owners`]' description of a verified release.
pub fn describe(r: &Release) -> (String, Vec<String>) {
    (
        format!("{} ({})", r.label(), r.digest),
        r.manifest.tools.keys().cloned().collect(),
    )
}

/// One served release.
#[derive(Debug)]
pub struct Served {
    pub label: String,
    pub digest: String,
    session: Mutex<Session>,
}

impl Served {
    fn lock(&self) -> MutexGuard<'_, Session> {
        // A panic in an earlier call leaves no per-call state behind (copies are per call).
        self.session
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn handle(&self, msg: Value) -> Value {
        let id = msg.get("id").cloned().unwrap_or(Value::Null);
        let mut s = self.lock();
        let answer = s.handle(msg);
        // A JSON response carries no notifications (no SSE stream yet): drop them rather
        // than let them pile up.
        s.pending.clear();
        answer.unwrap_or_else(|| error(&id, INVALID_PARAMS, "no answer"))
    }
}

/// Several releases behind one MCP endpoint.
#[derive(Debug)]
pub struct Router {
    pub releases: Vec<Served>,
    owners: BTreeMap<String, usize>,
    pub mode: Mode,
}

/// The result array of each list method.
fn list_key(method: &str) -> Option<&'static str> {
    Some(match method {
        "tools/list" => "tools",
        "resources/list" => "resources",
        "resources/templates/list" => "resourceTemplates",
        "prompts/list" => "prompts",
        _ => return None,
    })
}

impl Router {
    /// `sessions` in the order of `owners`' indices (the command line's order of releases).
    pub fn new(sessions: Vec<Session>, owners: BTreeMap<String, usize>, mode: Mode) -> Router {
        let releases = sessions
            .into_iter()
            .map(|s| Served {
                label: s.runtime.release.label(),
                digest: s.runtime.release.digest.clone(),
                session: Mutex::new(s),
            })
            .collect();
        Router {
            releases,
            owners,
            mode,
        }
    }

    /// Answers one JSON-RPC request (an object with `method` and `id`). Blocking: it runs the
    /// release's copies.
    pub fn handle(&self, msg: Value) -> Value {
        let id = msg.get("id").cloned().unwrap_or(Value::Null);
        let method = msg
            .get("method")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let Some(first) = self.releases.first() else {
            return error(&id, METHOD_NOT_FOUND, "no release is served");
        };
        if self.releases.len() == 1 {
            return first.handle(msg);
        }
        match method.as_str() {
            "initialize" => {
                let answers: Vec<Value> = self
                    .releases
                    .iter()
                    .map(|r| r.handle(msg.clone()))
                    .collect();
                merge_initialize(&id, answers, self.mode)
            }
            "tools/call" => {
                let name = msg.pointer("/params/name").and_then(Value::as_str);
                match name.and_then(|n| self.owners.get(n)) {
                    Some(&i) => self.releases[i].handle(msg),
                    None if name.is_none() => first.handle(msg),
                    None => {
                        let known: Vec<&str> = self.owners.keys().map(String::as_str).collect();
                        error(
                            &id,
                            INVALID_PARAMS,
                            format!(
                                "unknown tool {:?}: the served releases declare {}",
                                name.unwrap_or_default(),
                                known.join(", ")
                            ),
                        )
                    }
                }
            }
            m => {
                if let Some(key) = list_key(m) {
                    let answers = self
                        .releases
                        .iter()
                        .map(|r| r.handle(msg.clone()))
                        .collect();
                    merge_lists(&id, key, answers)
                } else if matches!(m, "resources/read" | "prompts/get" | "completion/complete") {
                    // The first release that knows the resource or prompt answers.
                    let mut first_error = None;
                    for r in &self.releases {
                        let a = r.handle(msg.clone());
                        if a.get("error").is_none() {
                            return a;
                        }
                        first_error.get_or_insert(a);
                    }
                    first_error.unwrap_or_else(|| error(&id, METHOD_NOT_FOUND, "no release"))
                } else {
                    // ping, logging/setLevel, unknown methods: answered alike by every session.
                    first.handle(msg)
                }
            }
        }
    }

    /// Refills every release's pool (after an answer went out).
    pub fn idle(&self) {
        for r in &self.releases {
            r.lock().runtime.idle();
        }
    }

    /// Stops every release's germline or process, waiting for a call in flight to end.
    pub fn stop(&self) {
        for r in &self.releases {
            r.lock().runtime.stop();
        }
    }

    /// Calls served so far, over all releases.
    pub fn calls(&self) -> u64 {
        self.releases.iter().map(|r| r.lock().calls).sum()
    }
}

/// One `initialize` answer for several releases: the first release's protocol version, the
/// union of capabilities, every release's own server info under `serverInfo.germline`.
pub fn merge_initialize(id: &Value, answers: Vec<Value>, mode: Mode) -> Value {
    let mut results = Vec::new();
    for a in answers {
        match a.get("result") {
            Some(r) => results.push(r.clone()),
            None => return a,
        }
    }
    let Some(first) = results.first() else {
        return error(id, METHOD_NOT_FOUND, "no release is served");
    };
    let mut caps = Map::new();
    let mut instructions = Vec::new();
    let mut infos = Vec::new();
    for r in &results {
        if let Some(c) = r.get("capabilities").and_then(Value::as_object) {
            for (k, v) in c {
                match (caps.get_mut(k), v) {
                    (Some(Value::Object(have)), Value::Object(more)) => {
                        for (kk, vv) in more {
                            have.entry(kk.clone()).or_insert_with(|| vv.clone());
                        }
                    }
                    (Some(_), _) => {}
                    (None, _) => {
                        caps.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        if let Some(t) = r.get("instructions").and_then(Value::as_str) {
            instructions.push(t.to_string());
        }
        infos.push(r.get("serverInfo").cloned().unwrap_or(Value::Null));
    }
    let mut result = json!({
        "protocolVersion": first.get("protocolVersion").cloned().unwrap_or(Value::Null),
        "capabilities": caps,
        "serverInfo": {
            "name": "germline",
            "version": env!("CARGO_PKG_VERSION"),
            "germline": {"mode": mode.name(), "releases": infos},
        },
    });
    if !instructions.is_empty() {
        result["instructions"] = json!(instructions.join("\n\n"));
    }
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// One list answer for several releases. A release without the method (-32601) adds nothing;
/// any other error is the answer (hiding a failing release's tools would mislead the agent).
/// Pagination: each release's first page (`nextCursor` dropped).
pub fn merge_lists(id: &Value, key: &str, answers: Vec<Value>) -> Value {
    let mut items = Vec::new();
    let mut any = false;
    let mut not_found = None;
    for a in answers {
        if let Some(e) = a.get("error") {
            if e.get("code").and_then(Value::as_i64) == Some(METHOD_NOT_FOUND) {
                not_found.get_or_insert(a);
                continue;
            }
            return a;
        }
        any = true;
        if let Some(list) = a
            .pointer(&format!("/result/{key}"))
            .and_then(Value::as_array)
        {
            items.extend(list.iter().cloned());
        }
    }
    match (any, not_found) {
        (false, Some(a)) => a,
        _ => json!({"jsonrpc": "2.0", "id": id, "result": {key: items}}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(id: u64, result: Value) -> Value {
        json!({"jsonrpc": "2.0", "id": id, "result": result})
    }

    #[test]
    fn a_tool_name_declared_twice_is_refused_naming_both_releases() {
        let rel = |n: &str, tools: &[&str]| {
            (n.to_string(), tools.iter().map(|t| t.to_string()).collect())
        };
        let ok = tool_owners(&[
            rel("time@1", &["get_current_time"]),
            rel("fetch@2", &["fetch"]),
        ])
        .expect("distinct names");
        assert_eq!(ok.get("fetch"), Some(&1));
        let e = tool_owners(&[
            rel("time@1", &["convert_time", "get_current_time"]),
            rel("fetch@2", &["fetch"]),
            rel("clock@3", &["get_current_time"]),
        ])
        .expect_err("a clash");
        assert!(
            e.contains("\"get_current_time\"") && e.contains("time@1") && e.contains("clock@3"),
            "{e}"
        );
    }

    #[test]
    fn lists_merge_in_order_and_skip_missing_methods() {
        let a = ok(1, json!({"tools": [{"name": "a"}], "nextCursor": "x"}));
        let b = error(&json!(1), METHOD_NOT_FOUND, "Method not found");
        let c = ok(1, json!({"tools": [{"name": "c"}]}));
        let m = merge_lists(&json!(1), "tools", vec![a, b, c]);
        assert_eq!(
            m["result"],
            json!({"tools": [{"name": "a"}, {"name": "c"}]})
        );
    }

    #[test]
    fn lists_fail_on_a_real_error_and_when_no_release_has_the_method() {
        let a = ok(1, json!({"prompts": []}));
        let b = error(&json!(1), -32000, "the tool failed");
        assert_eq!(merge_lists(&json!(1), "prompts", vec![a, b.clone()]), b);
        let n = error(&json!(1), METHOD_NOT_FOUND, "Method not found");
        assert_eq!(
            merge_lists(&json!(1), "prompts", vec![n.clone(), n.clone()]),
            n
        );
    }

    #[test]
    fn initialize_merges_capabilities_and_names_every_release() {
        let a = ok(
            7,
            json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {"listChanged": false}},
                   "serverInfo": {"name": "mcp-time"}}),
        );
        let b = ok(
            7,
            json!({"protocolVersion": "2025-06-18",
                   "capabilities": {"tools": {"listChanged": true, "x": 1}, "prompts": {}},
                   "serverInfo": {"name": "mcp-fetch"}, "instructions": "fetch things"}),
        );
        let m = merge_initialize(&json!(7), vec![a, b], Mode::Germline);
        let r = &m["result"];
        assert_eq!(r["protocolVersion"], "2025-06-18");
        assert_eq!(
            r["capabilities"],
            json!({"tools": {"listChanged": false, "x": 1}, "prompts": {}})
        );
        assert_eq!(r["serverInfo"]["name"], "germline");
        assert_eq!(r["serverInfo"]["germline"]["mode"], "germline");
        assert_eq!(
            r["serverInfo"]["germline"]["releases"],
            json!([{"name": "mcp-time"}, {"name": "mcp-fetch"}])
        );
        assert_eq!(r["instructions"], "fetch things");
        assert_eq!(m["id"], 7);
    }

    #[test]
    fn initialize_fails_if_one_release_fails() {
        let a = ok(1, json!({"protocolVersion": "2025-06-18"}));
        let e = error(&json!(1), -32001, "germline: initialize failed: x");
        assert_eq!(
            merge_initialize(&json!(1), vec![a, e.clone()], Mode::Germline),
            e
        );
    }
}
