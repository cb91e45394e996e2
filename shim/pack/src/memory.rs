//! `--probe-call TOOL=JSON` (issue 27): does the server keep state in memory between calls?
//!
//! Under germline every call runs in a fresh copy forked from the germline, so what a server
//! keeps in its process's memory between calls is lost (docs/servers.md, "State in memory").
//! The probe makes that visible at pack time for a call the publisher names, in the same
//! germline that listed the tools (no network, no data), on four data-free copies:
//!
//! * copy A: the call twice, then every resource read (`resources/list`, `resources/read`);
//! * copy B: the call once (what germline answers to a second call: a fresh process's answer);
//! * copies C and D: every resource read, no call (what germline serves after the call).
//!
//! A's second answer differing from B's, while A's first equals B's (the tool answers alike in
//! fresh processes), or a resource A reads differently from C, while C and D agree, is state
//! kept in memory: a warning. Where fresh processes already answer differently (a clock, a
//! random id) the probe says it cannot tell. What it cannot see is in docs/servers.md: state
//! only another tool or other arguments show, state that changes nothing until later, state
//! behind a network or data the probe does not have.

use germline_sandbox::{Copy, Germline};
use serde_json::{json, Value};

use crate::{Error, Result};

/// Most resources read per copy.
const MAX_RESOURCES: usize = 32;

/// A call the publisher names for the probe: `TOOL=JSON` (the arguments, an object).
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeCall {
    pub tool: String,
    pub arguments: Value,
}

impl ProbeCall {
    /// `TOOL=JSON`, e.g. `append_insight={"insight":"x"}`; `TOOL` alone calls it without
    /// arguments.
    pub fn parse(s: &str) -> Result<ProbeCall> {
        let bad = || Error::ProbeCall(s.to_string());
        let (tool, args) = match s.split_once('=') {
            Some((t, a)) => (t, serde_json::from_str::<Value>(a).map_err(|_| bad())?),
            None => (s, json!({})),
        };
        if tool.is_empty() || !args.is_object() {
            return Err(bad());
        }
        Ok(ProbeCall {
            tool: tool.to_string(),
            arguments: args,
        })
    }
}

/// What the probe found for one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// State kept in memory, and where it showed.
    Kept(String),
    /// Nothing changed within one process.
    NotSeen,
    /// Fresh processes already answer differently: the probe cannot tell.
    Varies(String),
}

/// The probe's result for one `--probe-call`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub tool: String,
    pub verdict: Verdict,
}

impl Finding {
    /// The warning to print, if any.
    pub fn warning(&self) -> Option<String> {
        match &self.verdict {
            Verdict::Kept(what) => Some(format!(
                "{} keeps state in memory: {what}. Under germline every call starts from the \
                 germline, so that state is lost between calls (docs/servers.md, \"State in \
                 memory\"); declare it as a file with --state if the server can keep it there",
                self.tool
            )),
            Verdict::Varies(what) => Some(format!(
                "{}: cannot tell whether it keeps state in memory: {what}",
                self.tool
            )),
            Verdict::NotSeen => None,
        }
    }

    /// The verdict as a word and a reason, for `--json`.
    pub fn to_json(&self) -> Value {
        let (verdict, why) = match &self.verdict {
            Verdict::Kept(w) => ("kept_in_memory", w.as_str()),
            Verdict::NotSeen => ("not_seen", ""),
            Verdict::Varies(w) => ("cannot_tell", w.as_str()),
        };
        json!({"tool": self.tool, "verdict": verdict, "why": why})
    }
}

/// `f` on a fresh copy of `g`, which is killed afterwards.
fn on_copy<T>(
    g: &mut Germline,
    f: impl FnOnce(&mut Copy) -> germline_sandbox::Result<T>,
) -> germline_sandbox::Result<T> {
    let mut copy = g.copy()?;
    let r = f(&mut copy);
    let _ = copy.finish(Ok(Value::Null));
    r
}

/// Every resource the copy lists, read: `(uri, contents)`; empty if it has none (or no
/// resources at all: a server without them answers `resources/list` with an error).
fn resources(copy: &mut Copy) -> Vec<(String, Value)> {
    let Ok(list) = copy.mcp_call_method("resources/list", json!({})) else {
        return Vec::new();
    };
    let mut uris: Vec<String> = list
        .get("resources")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|r| r.get("uri").and_then(Value::as_str))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    uris.truncate(MAX_RESOURCES);
    uris.into_iter()
        .map(|uri| {
            let read = copy
                .mcp_call_method("resources/read", json!({"uri": uri}))
                .unwrap_or_else(|e| json!({"error": e.to_string()}));
            (uri, read)
        })
        .collect()
}

/// The call's answer as the agent would see it; a failure is an answer too.
fn answer(copy: &mut Copy, c: &ProbeCall) -> Value {
    copy.mcp_call(&c.tool, c.arguments.clone())
        .unwrap_or_else(|e| json!({"error": e.to_string()}))
}

/// Probes `call` on copies of the running germline `g`.
pub fn check(g: &mut Germline, call: &ProbeCall) -> germline_sandbox::Result<Finding> {
    let (a1, a2, ra) = on_copy(g, |c| {
        let a1 = answer(c, call);
        let a2 = answer(c, call);
        Ok((a1, a2, resources(c)))
    })?;
    let b1 = on_copy(g, |c| Ok(answer(c, call)))?;
    let rc = on_copy(g, |c| Ok(resources(c)))?;
    let rd = on_copy(g, |c| Ok(resources(c)))?;
    Ok(Finding {
        tool: call.tool.clone(),
        verdict: judge(&call.tool, (&a1, &a2, &b1), (&ra, &rc, &rd)),
    })
}

type Resources = Vec<(String, Value)>;

/// The verdict from the answers `(a1, a2, b1)` and the resources `(after the calls, fresh,
/// fresh again)` (see the module's documentation).
pub fn judge(
    tool: &str,
    (a1, a2, b1): (&Value, &Value, &Value),
    (ra, rc, rd): (&Resources, &Resources, &Resources),
) -> Verdict {
    if rc == rd && ra != rc {
        let changed: Vec<&str> = ra
            .iter()
            .filter(|(uri, v)| !rc.iter().any(|(u, w)| u == uri && w == v))
            .map(|(uri, _)| uri.as_str())
            .collect();
        let what = if changed.is_empty() {
            "the list of resources".to_string()
        } else {
            format!("resource {}", changed.join(", "))
        };
        return Verdict::Kept(format!(
            "after `{tool}` in one process, {what} reads differently than in a fresh process"
        ));
    }
    if a1 != b1 {
        return Verdict::Varies(format!(
            "`{tool}` answers differently in two fresh processes (a clock, a random id?)"
        ));
    }
    if a2 != b1 {
        return Verdict::Kept(format!(
            "a second `{tool}` in one process answers differently than in a fresh process"
        ));
    }
    if rc != rd {
        return Verdict::Varies("its resources read differently in two fresh processes".into());
    }
    Verdict::NotSeen
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_calls_parse() {
        let c = ProbeCall::parse(r#"append_insight={"insight":"x"}"#).expect("parse");
        assert_eq!(c.tool, "append_insight");
        assert_eq!(c.arguments, json!({"insight": "x"}));
        assert_eq!(
            ProbeCall::parse("list_tables").expect("bare").arguments,
            json!({})
        );
        for bad in ["=", "t=[1]", "t={", "={}"] {
            assert!(ProbeCall::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn verdicts() {
        let (x, y, z) = (json!("x"), json!("y"), json!("z"));
        let none: Resources = vec![];
        let memo = |s: &str| vec![("memo://insights".to_string(), json!(s))];
        let (empty, full) = (memo("none yet"), memo("one insight"));
        // A counter: the second call in one process differs, fresh ones agree.
        assert!(matches!(
            judge("t", (&x, &y, &x), (&none, &none, &none)),
            Verdict::Kept(w) if w.contains("second")
        ));
        // A memo: answers alike, a resource changed within the process.
        assert!(matches!(
            judge("t", (&x, &x, &x), (&full, &empty, &empty)),
            Verdict::Kept(w) if w.contains("memo://insights")
        ));
        assert_eq!(
            judge("t", (&x, &x, &x), (&empty, &empty, &empty)),
            Verdict::NotSeen
        );
        // A clock: fresh processes differ, so a differing second answer proves nothing.
        assert!(matches!(
            judge("t", (&x, &y, &z), (&none, &none, &none)),
            Verdict::Varies(_)
        ));
        assert!(matches!(
            judge("t", (&x, &x, &x), (&full, &empty, &full)),
            Verdict::Varies(_)
        ));
    }
}
