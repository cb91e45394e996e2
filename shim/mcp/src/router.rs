//! `germline serve` with several releases: one [`Session`] per release, the agent sees one MCP
//! server. `tools/call` goes to the release that declares the tool (names are unique across
//! releases, checked at start); lists are merged; everything else goes to the first release.
//!
//! One `Router` serves every HTTP session. Each release's policy lifetime says whose runtime
//! ([`Session`], and so germline) serves a request (docs/operations.md):
//! - `session` (the default) and `single-shot`: one runtime per agent (HTTP) session, started
//!   at its `initialize` and stopped when the session ends ([`Router::end`]); concurrent
//!   sessions never take turns;
//! - `long-lived`: one runtime per user (the user the bearer token names), shared by that
//!   user's sessions for the life of `germline serve`; its calls run one at a time (a germline
//!   forks one copy at a time and is frozen while a copy holds data).
//!
//! The runtime's user keys the broker's state slots (release, user, horizon) in every lifetime.
//! Calls to different releases, or of different runtimes, run in parallel.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use germline_policy::limits::Lifetime;
use serde_json::{json, Map, Value};

use crate::error::{Error, SessionError};
use crate::session::{
    error, Session, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, RUNTIME_FAILED,
};
use germline_engine::release::Release;
use germline_engine::runtime::Mode;

/// Which release declares each tool, or an error naming both releases of a clashing name.
/// `releases` holds each release's name for messages (`name@version (digest)`) and its
/// manifest's tools; called on the verified manifests before any germline starts.
pub fn tool_owners(
    releases: &[(String, Vec<String>)],
) -> Result<BTreeMap<String, usize>, crate::error::Error> {
    let mut owners: BTreeMap<String, usize> = BTreeMap::new();
    for (i, (name, tools)) in releases.iter().enumerate() {
        for tool in tools {
            if let Some(&j) = owners.get(tool) {
                return Err(crate::error::Error::ToolClash {
                    tool: tool.clone(),
                    first: releases[j].0.clone(),
                    second: name.clone(),
                });
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

/// Who sends a request: its HTTP session and the user its bearer token names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub session: String,
    pub user: String,
}

/// Starts the [`Session`] (and so the germline or baseline process) of release `index` (the
/// command line's order) for `user`.
pub type Factory = dyn Fn(usize, &str) -> Result<Session, Error> + Send + Sync;

/// One runtime of a release, started at its first need.
#[derive(Debug, Default)]
struct Live {
    session: Option<Session>,
    /// Its agent session ended: nothing may start here again.
    ended: bool,
}

type Entry = Arc<Mutex<Live>>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic in an earlier call leaves no per-call state behind (copies are per call).
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One served release: its runtimes by key (the HTTP session under `session` and
/// `single-shot`, the user under `long-lived`).
#[derive(Debug)]
pub struct Served {
    pub label: String,
    pub digest: String,
    pub lifetime: Lifetime,
    index: usize,
    live: Mutex<HashMap<String, Entry>>,
}

impl Served {
    /// `long-lived`: one runtime per user, shared by that user's sessions.
    fn per_user(&self) -> bool {
        self.lifetime == Lifetime::LongLived
    }

    fn key<'a>(&self, c: &'a Caller) -> &'a str {
        if self.per_user() {
            &c.user
        } else {
            &c.session
        }
    }

    /// The caller's runtime entry; a user's is made on first use, a session's only by
    /// [`Router::open`] (so a request racing the session's end never starts a germline).
    fn entry(&self, c: &Caller, create: bool) -> Option<Entry> {
        let mut m = lock(&self.live);
        if self.per_user() && create {
            return Some(m.entry(c.user.clone()).or_default().clone());
        }
        m.get(self.key(c)).cloned()
    }

    fn with_session<T>(
        &self,
        c: &Caller,
        factory: &Factory,
        f: impl FnOnce(&mut Session) -> T,
    ) -> Result<T, SessionError> {
        let Some(e) = self.entry(c, true) else {
            return Err(SessionError::Ended);
        };
        let mut live = lock(&e);
        if live.ended {
            return Err(SessionError::Ended);
        }
        if live.session.is_none() {
            let s = factory(self.index, &c.user).map_err(|e| SessionError::Start(Box::new(e)))?;
            live.session = Some(s);
        }
        match live.session.as_mut() {
            Some(s) => Ok(f(s)),
            None => Err(SessionError::Ended),
        }
    }

    fn handle(&self, c: &Caller, factory: &Factory, msg: Value) -> Value {
        let id = msg.get("id").cloned().unwrap_or(Value::Null);
        let r = self.with_session(c, factory, |s| {
            let answer = s.handle(msg);
            // A JSON response carries no notifications (no SSE stream yet): drop them rather
            // than let them pile up.
            s.pending.clear();
            answer
        });
        match r {
            Ok(answer) => answer.unwrap_or_else(|| error(&id, INVALID_PARAMS, "no answer")),
            Err(e @ SessionError::Ended) => error(&id, INVALID_REQUEST, e.to_string()),
            Err(e @ SessionError::Start(_)) => error(&id, RUNTIME_FAILED, e.to_string()),
        }
    }

    /// `tools/call` with the agent on `link` (an SSE stream): `None` when the agent cancelled
    /// it (no answer for its id).
    fn call_with(
        &self,
        c: &Caller,
        factory: &Factory,
        msg: Value,
        link: &mut dyn germline_engine::relay::AgentLink,
    ) -> Option<Value> {
        let id = msg.get("id").cloned().unwrap_or(Value::Null);
        match self.with_session(c, factory, |s| s.handle_with(msg, link)) {
            Ok(answer) => answer,
            Err(e @ SessionError::Ended) => Some(error(&id, INVALID_REQUEST, e.to_string())),
            Err(e @ SessionError::Start(_)) => Some(error(&id, RUNTIME_FAILED, e.to_string())),
        }
    }

    /// Stops and forgets the runtimes of `keys` (waiting for a call in flight); their calls.
    fn end(&self, keys: &[&str]) -> u64 {
        let gone: Vec<Entry> = {
            let mut m = lock(&self.live);
            keys.iter().filter_map(|k| m.remove(*k)).collect()
        };
        let mut calls = 0;
        for e in gone {
            let mut live = lock(&e);
            live.ended = true;
            if let Some(mut s) = live.session.take() {
                calls += s.calls;
                s.runtime.stop();
            }
        }
        calls
    }
}

/// Several releases behind one MCP endpoint.
pub struct Router {
    pub releases: Vec<Served>,
    owners: BTreeMap<String, usize>,
    pub mode: Mode,
    factory: Box<Factory>,
    /// Calls of runtimes already stopped.
    ended_calls: AtomicU64,
}

impl std::fmt::Debug for Router {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Router")
            .field("releases", &self.releases)
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
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
    /// `releases` (label, digest, lifetime) in the order of `owners`' indices (the command
    /// line's order of releases); `factory` starts a release's runtime when one is needed.
    pub fn new(
        releases: Vec<(String, String, Lifetime)>,
        owners: BTreeMap<String, usize>,
        mode: Mode,
        factory: Box<Factory>,
    ) -> Router {
        let releases = releases
            .into_iter()
            .enumerate()
            .map(|(index, (label, digest, lifetime))| Served {
                label,
                digest,
                lifetime,
                index,
                live: Mutex::new(HashMap::new()),
            })
            .collect();
        Router {
            releases,
            owners,
            mode,
            factory,
            ended_calls: AtomicU64::new(0),
        }
    }

    /// A new agent session: its releases of lifetime `session` and `single-shot` get a
    /// place for their runtime (started at the session's first request, `initialize`).
    pub fn open(&self, c: &Caller) {
        for r in self.releases.iter().filter(|r| !r.per_user()) {
            lock(&r.live).entry(c.session.clone()).or_default();
        }
    }

    /// Starts `user`'s `long-lived` runtimes now (at `germline serve`'s start, so that a
    /// germline that cannot start is reported before anything is served).
    pub fn warm(&self, user: &str) -> Result<(), SessionError> {
        let c = Caller {
            session: String::new(),
            user: user.to_string(),
        };
        for r in self.releases.iter().filter(|r| r.per_user()) {
            r.with_session(&c, &*self.factory, |_| ())?;
        }
        Ok(())
    }

    /// The agent session `session` ended (DELETE, idle timeout, evicted): its runtimes stop
    /// (a call in flight ends first) and leave no process, cgroup or mount.
    pub fn end(&self, session: &str) {
        for r in self.releases.iter().filter(|r| !r.per_user()) {
            let n = r.end(&[session]);
            self.ended_calls.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// A `tools/call` of `c` whose agent is on `link` (an SSE stream: the agent group copy's
    /// notifications and requests reach it as they come). `None`: the agent cancelled it. A
    /// call the router refuses before any copy runs is answered as by [`Router::handle`].
    pub fn call_with(
        &self,
        c: &Caller,
        msg: Value,
        link: &mut dyn germline_engine::relay::AgentLink,
    ) -> Option<Value> {
        let name = msg.pointer("/params/name").and_then(Value::as_str);
        let owner = match (self.releases.len(), name.and_then(|n| self.owners.get(n))) {
            (1, _) => self.releases.first(),
            (_, Some(&i)) => self.releases.get(i),
            _ => None,
        };
        match owner {
            Some(r) => r.call_with(c, &*self.factory, msg, link),
            None => Some(self.handle(c, msg)),
        }
    }

    fn on(&self, r: &Served, c: &Caller, msg: Value) -> Value {
        r.handle(c, &*self.factory, msg)
    }

    /// Answers one JSON-RPC request (an object with `method` and `id`) of `c`. Blocking: it
    /// runs the release's copies (and may first start the caller's germline).
    pub fn handle(&self, c: &Caller, msg: Value) -> Value {
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
            return self.on(first, c, msg);
        }
        match method.as_str() {
            "initialize" => {
                let answers: Vec<Value> = self
                    .releases
                    .iter()
                    .map(|r| self.on(r, c, msg.clone()))
                    .collect();
                merge_initialize(&id, answers, self.mode)
            }
            "tools/call" => {
                let name = msg.pointer("/params/name").and_then(Value::as_str);
                match name.and_then(|n| self.owners.get(n)) {
                    Some(&i) => self.on(&self.releases[i], c, msg),
                    None if name.is_none() => self.on(first, c, msg),
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
                        .map(|r| self.on(r, c, msg.clone()))
                        .collect();
                    merge_lists(&id, key, answers)
                } else if matches!(m, "resources/read" | "prompts/get" | "completion/complete") {
                    // The first release that knows the resource or prompt answers.
                    let mut first_error = None;
                    for r in &self.releases {
                        let a = self.on(r, c, msg.clone());
                        if a.get("error").is_none() {
                            return a;
                        }
                        first_error.get_or_insert(a);
                    }
                    first_error.unwrap_or_else(|| error(&id, METHOD_NOT_FOUND, "no release"))
                } else {
                    // ping (answered alike by every session), logging/setLevel and methods
                    // germline does not know: the first release's server answers them.
                    self.on(first, c, msg)
                }
            }
        }
    }

    /// Refills the caller's pools (after an answer went out); starts nothing.
    pub fn idle(&self, c: &Caller) {
        for r in &self.releases {
            if let Some(e) = r.entry(c, false) {
                if let Some(s) = lock(&e).session.as_mut() {
                    s.runtime.idle();
                }
            }
        }
    }

    /// Stops every runtime, waiting for a call in flight to end.
    pub fn stop(&self) {
        for r in &self.releases {
            let keys: Vec<String> = lock(&r.live).keys().cloned().collect();
            let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
            let n = r.end(&keys);
            self.ended_calls.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Calls served so far, over all releases and runtimes.
    pub fn calls(&self) -> u64 {
        let live: u64 = self
            .releases
            .iter()
            .map(|r| {
                let entries: Vec<Entry> = lock(&r.live).values().cloned().collect();
                entries
                    .iter()
                    .map(|e| lock(e).session.as_ref().map_or(0, |s| s.calls))
                    .sum::<u64>()
            })
            .sum();
        live + self.ended_calls.load(Ordering::Relaxed)
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
        let e = e.to_string();
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
    fn an_ended_session_is_an_invalid_request_and_a_failed_start_a_runtime_failure() {
        let served = |lifetime| Served {
            label: "r".into(),
            digest: "sha256:r".into(),
            lifetime,
            index: 0,
            live: Mutex::new(HashMap::new()),
        };
        let factory: Box<Factory> = Box::new(|i, _| Err(Error::NoRelease(i)));
        let c = Caller {
            session: "s1".into(),
            user: "alice".into(),
        };
        let msg = || json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"});
        // A session never opened: nothing is started for it.
        let ended = served(Lifetime::Session).handle(&c, &*factory, msg());
        assert_eq!(ended["error"]["code"], INVALID_REQUEST, "{ended}");
        assert_eq!(
            ended["error"]["message"],
            "germline: unknown or ended session: initialize again"
        );
        // A user's long-lived runtime is started at its first need, and fails to.
        let failed = served(Lifetime::LongLived).handle(&c, &*factory, msg());
        assert_eq!(failed["error"]["code"], RUNTIME_FAILED, "{failed}");
        assert_eq!(failed["error"]["message"], "germline: no release 0");
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
