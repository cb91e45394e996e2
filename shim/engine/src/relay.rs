//! What a copy may say to the agent during a call, and how it gets there (issue 6).
//!
//! Only the copy of the agent's own group talks to the agent: its log messages and its
//! progress on the agent's token are written to the agent as they arrive, and its
//! `sampling/createMessage` and `elicitation/create` requests are relayed to the agent and the
//! agent's answer handed back. That answer is data labelled with the agent's clearance, so it
//! enters the copy only where it is admissible: where the agent's clearance flows to the
//! group's horizon `κ(g)` (every member of the group, hosts included, is cleared for it).
//! Otherwise the agent is not asked and the copy gets a fixed refusal; so does every copy
//! outside the agent's group, whose own words never reach the agent. A copy that received an
//! answer has its output label joined with the agent's clearance.

use std::sync::Arc;
use std::time::Instant;

use germline_policy::Label;
pub use germline_sandbox::Cancel;
use serde_json::{json, Value};

/// Requests a copy may have relayed to the agent, with the client capability each needs.
pub const RELAYED: &[(&str, &str)] = &[
    ("sampling/createMessage", "sampling"),
    ("elicitation/create", "elicitation"),
];

/// What a copy outside the agent's group is told when it asks the agent for anything.
pub const NOT_THE_AGENTS_COPY: &str =
    "germline: only the copy serving the agent may ask the agent; this copy serves another \
     destination of the call";

/// JSON-RPC error code of a refused relay.
pub const REFUSED: i64 = -32601;

/// The agent's side of a transport during a call.
pub trait AgentLink {
    /// Writes a notification to the agent now.
    fn notify(&mut self, msg: &Value);
    /// Sends a request to the agent and waits for its answer until `deadline`: the result,
    /// or the JSON-RPC error object (`{code, message}`).
    fn request(&mut self, method: &str, params: Value, deadline: Instant) -> Result<Value, Value>;
    /// The agent's cancellation of the request being served, where the transport reads the
    /// agent while a call runs (stdio): the call's waits end when it fires.
    fn cancel(&self) -> Option<Arc<Cancel>> {
        None
    }
}

/// A transport that answers with one JSON body (HTTP `application/json`, in-process use):
/// notifications wait for the answer, requests to the agent are refused.
#[derive(Debug, Default)]
pub struct Buffered {
    pub notifications: Vec<Value>,
}

impl AgentLink for Buffered {
    fn notify(&mut self, msg: &Value) {
        self.notifications.push(msg.clone());
    }

    fn request(&mut self, method: &str, _: Value, _: Instant) -> Result<Value, Value> {
        Err(json!({"code": REFUSED, "message": format!(
            "germline: {method} is not relayed over this transport (use `germline run` over stdio)")}))
    }
}

/// The agent of one call: its transport and the capabilities it announced at `initialize`.
pub struct Agent<'a> {
    pub link: &'a mut dyn AgentLink,
    pub capabilities: Value,
}

impl std::fmt::Debug for Agent<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("capabilities", &self.capabilities)
            .finish_non_exhaustive()
    }
}

impl Agent<'_> {
    /// The agent's cancellation of this call, if its transport can carry one.
    pub fn cancel(&self) -> Option<Arc<Cancel>> {
        self.link.cancel()
    }

    /// Whether the agent cancelled this call.
    pub fn cancelled(&self) -> bool {
        self.link.cancel().is_some_and(|c| c.fired())
    }

    /// The client capabilities a copy's `initialize` announces: those of the agent that the
    /// shim relays.
    pub fn relayed_capabilities(&self) -> Value {
        let mut caps = json!({});
        for (_, cap) in RELAYED {
            if let Some(c) = self.capabilities.get(*cap) {
                caps[*cap] = c.clone();
            }
        }
        caps
    }
}

/// Keeps what the agent may see of its copy's notifications: log messages, and progress on
/// the agent's own token.
pub fn forwardable(msg: &Value, token: Option<&Value>) -> bool {
    match msg.get("method").and_then(Value::as_str) {
        Some("notifications/message") => true,
        Some("notifications/progress") => {
            token.is_some() && msg.pointer("/params/progressToken") == token
        }
        _ => false,
    }
}

/// Whether the agent's answer may enter a copy of a group with horizon `horizon`; `Err` says
/// why not, naming labels only (public metadata).
pub fn admissible(
    agent_clearance: &Label,
    horizon: &Label,
    hosts: &[String],
) -> Result<(), String> {
    if agent_clearance.flows_to(horizon) {
        return Ok(());
    }
    Err(format!(
        "germline: the agent's answer would carry the agent's clearance {{{}}}, and this copy \
         also serves {} (horizon {{{}}}): it is not admissible here, so the agent is not asked",
        agent_clearance.canonical(),
        hosts.join(", "),
        horizon.canonical()
    ))
}

/// One copy's handler of what it sends during a call.
pub struct CopyRelay<'a, 'b> {
    agent: &'a mut Agent<'b>,
    is_agent: bool,
    token: Option<Value>,
    /// Why an answer of the agent may not enter this copy; `None`: it may.
    inadmissible: Option<String>,
    deadline: Instant,
    /// An answer of the agent (a result or an error) entered the copy.
    pub answered: bool,
    /// Requests relayed to the agent.
    pub relayed: usize,
    /// Called before an answer of the agent enters the copy: raises the copy's label in the
    /// broker (so its slot writes and output made after it carry the agent's clearance).
    raise: Option<Box<dyn FnMut() -> Result<(), String> + 'a>>,
}

impl std::fmt::Debug for CopyRelay<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CopyRelay")
            .field("is_agent", &self.is_agent)
            .field("answered", &self.answered)
            .finish_non_exhaustive()
    }
}

impl<'a, 'b> CopyRelay<'a, 'b> {
    /// `is_agent`: the copy serves the agent's group; `token`: the agent's progress token.
    pub fn new(
        agent: &'a mut Agent<'b>,
        is_agent: bool,
        token: Option<Value>,
        inadmissible: Option<String>,
        deadline: Instant,
    ) -> Self {
        CopyRelay {
            agent,
            is_agent,
            token,
            inadmissible,
            deadline,
            answered: false,
            relayed: 0,
            raise: None,
        }
    }

    /// Sets the hook that raises the copy's label before an answer of the agent enters it;
    /// if it fails, the copy gets an error instead of the answer.
    pub fn with_raise(mut self, f: impl FnMut() -> Result<(), String> + 'a) -> Self {
        self.raise = Some(Box::new(f));
        self
    }

    /// Handles one message from the copy (a notification or a request other than `ping`);
    /// for a request, the answer (`{"result"}` or `{"error"}`).
    pub fn handle(&mut self, msg: &Value) -> Option<Value> {
        let method = msg.get("method").and_then(Value::as_str)?;
        if msg.get("id").is_none() {
            if self.is_agent && forwardable(msg, self.token.as_ref()) {
                self.agent.link.notify(msg);
            }
            return None;
        }
        Some(match self.decide(method) {
            Err(message) => json!({"error": {"code": REFUSED, "message": message}}),
            Ok(()) => {
                let params = msg.get("params").cloned().unwrap_or_else(|| json!({}));
                self.relayed += 1;
                let answer = match self.agent.link.request(method, params, self.deadline) {
                    Ok(r) => json!({"result": r}),
                    Err(e) => json!({"error": e}),
                };
                // The answer (a result or the agent's error) is the agent's data: label the
                // copy first, or hand it nothing.
                if let Some(raise) = self.raise.as_mut() {
                    if let Err(e) = raise() {
                        return Some(json!({"error": {"code": REFUSED, "message": format!(
                            "germline: the broker could not label the agent's answer: {e}")}}));
                    }
                }
                self.answered = true;
                answer
            }
        })
    }

    fn decide(&self, method: &str) -> Result<(), String> {
        let Some((_, cap)) = RELAYED.iter().find(|(m, _)| *m == method) else {
            return Err(format!(
                "germline: {method} is not available to the tool during a call"
            ));
        };
        if !self.is_agent {
            return Err(NOT_THE_AGENTS_COPY.into());
        }
        if let Some(why) = &self.inadmissible {
            return Err(why.clone());
        }
        if self.agent.capabilities.get(*cap).is_none() {
            return Err(format!(
                "germline: the agent did not offer {cap} at initialize"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[derive(Default)]
    struct Log {
        notes: Vec<Value>,
        asked: Vec<String>,
    }

    impl AgentLink for Log {
        fn notify(&mut self, msg: &Value) {
            self.notes.push(msg.clone());
        }
        fn request(&mut self, method: &str, _: Value, _: Instant) -> Result<Value, Value> {
            self.asked.push(method.into());
            Ok(json!({"role": "assistant", "content": {"type": "text", "text": "reply"}}))
        }
    }

    fn sample() -> Value {
        json!({"jsonrpc": "2.0", "id": 4, "method": "sampling/createMessage", "params": {}})
    }

    fn run(is_agent: bool, inadmissible: Option<String>, caps: Value) -> (Log, Value, bool) {
        let mut log = Log::default();
        let (answer, answered) = {
            let mut agent = Agent {
                link: &mut log,
                capabilities: caps,
            };
            let deadline = Instant::now() + Duration::from_secs(1);
            let mut r =
                CopyRelay::new(&mut agent, is_agent, Some(json!(7)), inadmissible, deadline);
            r.handle(&json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": "x"}}));
            r.handle(
                &json!({"jsonrpc": "2.0", "method": "notifications/progress",
                             "params": {"progressToken": 8, "progress": 1}}),
            );
            let a = r.handle(&sample()).expect("a request is answered");
            (a, r.answered)
        };
        (log, answer, answered)
    }

    #[test]
    fn the_agents_copy_is_relayed_and_other_copies_are_not() {
        let caps = json!({"sampling": {}});
        let (log, a, answered) = run(true, None, caps.clone());
        assert_eq!(log.asked, ["sampling/createMessage"]);
        assert_eq!(a["result"]["content"]["text"], "reply");
        assert!(answered);
        // Its log message reaches the agent; progress on another token does not.
        assert_eq!(log.notes.len(), 1);

        let (log, a, answered) = run(false, None, caps);
        assert!(log.asked.is_empty() && log.notes.is_empty() && !answered);
        assert_eq!(a["error"]["message"], NOT_THE_AGENTS_COPY);
    }

    #[test]
    fn an_answer_enters_only_after_the_copy_was_labelled() {
        let mut log = Log::default();
        let mut agent = Agent {
            link: &mut log,
            capabilities: json!({"sampling": {}}),
        };
        let deadline = Instant::now() + Duration::from_secs(1);
        let mut r = CopyRelay::new(&mut agent, true, None, None, deadline)
            .with_raise(|| Err("broker down".to_string()));
        let a = r.handle(&sample()).expect("answered");
        assert!(!r.answered);
        assert!(a.get("result").is_none(), "{a}");
        assert!(a["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("broker down")));
        drop(r);
        let mut raised = 0;
        let mut r = CopyRelay::new(&mut agent, true, None, None, deadline).with_raise(|| {
            raised += 1;
            Ok(())
        });
        assert!(r
            .handle(&sample())
            .is_some_and(|a| a.get("result").is_some()));
        assert!(r.answered);
        drop(r);
        assert_eq!(raised, 1);
    }

    #[test]
    fn an_inadmissible_answer_is_never_asked_for() {
        let why = admissible(
            &Label::of(["finance", "hr"]),
            &Label::of(["finance"]),
            &["ocr.example".into()],
        )
        .expect_err("hr does not flow to finance");
        assert!(
            why.contains("ocr.example") && why.contains("finance,hr"),
            "{why}"
        );
        let (log, a, answered) = run(true, Some(why.clone()), json!({"sampling": {}}));
        assert!(log.asked.is_empty() && !answered);
        assert_eq!(a["error"]["message"], why.as_str());
        assert!(admissible(&Label::of(["hr"]), &Label::of(["hr", "finance"]), &[]).is_ok());
    }

    #[test]
    fn nothing_is_relayed_the_agent_did_not_offer() {
        let (log, a, _) = run(true, None, json!({}));
        assert!(log.asked.is_empty());
        assert!(a["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("did not offer sampling")));
        let mut log = Log::default();
        let mut agent = Agent {
            link: &mut log,
            capabilities: json!({"sampling": {}, "roots": {}}),
        };
        assert_eq!(agent.relayed_capabilities(), json!({"sampling": {}}));
        let mut r = CopyRelay::new(&mut agent, true, None, None, Instant::now());
        let a = r.handle(&json!({"jsonrpc": "2.0", "id": 1, "method": "roots/list"}));
        assert!(a.is_some_and(|a| a["error"]["code"] == REFUSED));
    }
}
