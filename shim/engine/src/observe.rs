//! What watches a runtime's calls: [`CallObserver`], implemented by metrics
//! ([`crate::metrics`]), traces ([`crate::trace`]) and the state file of `germline status`
//! ([`crate::status`]). The runtime keeps its observers in one list, in the order they were
//! given (metrics, traces, status), and tells each of them the same events through a
//! [`RuntimeView`] of itself: an observer reads the runtime, it never gets it (so no observer
//! has to be taken out of the runtime to be handed the runtime, as `status::after_call` did).
//!
//! Per-copy counters (item bytes, failed checks, limit refusals of a copy) stay with the
//! pipeline, which counts them on [`crate::metrics::Metrics`] directly: no dynamic dispatch
//! per copy.

use std::time::SystemTime;

use germline_broker::RequestEvent;
use germline_policy::limits::Lifetime;
use germline_sandbox::Germline;

use crate::error::RunError;
use crate::evidence::Evidence;
use crate::release::Release;
use crate::runtime::{Mode, Outcome};

/// What an observer may read of the runtime, borrowed for one notification.
pub struct RuntimeView<'a> {
    pub release: &'a Release,
    pub mode: Mode,
    pub lifetime: Lifetime,
    /// The germline's or baseline process's pid.
    pub pid: Option<i32>,
    /// The germline, under germline execution.
    pub germline: Option<&'a Germline>,
    pub evidence: &'a Evidence,
    /// The last call's broker requests by group (verdicts, declared hosts).
    pub last_requests: &'a [(usize, RequestEvent)],
}

/// One finished `tools/call`.
pub struct CallView<'a> {
    pub tool: &'a str,
    /// When it started (wall clock).
    pub started: SystemTime,
    pub result: &'a Result<Outcome, RunError>,
    /// The agent's W3C `traceparent` and `tracestate` from the request's `_meta`, if sent.
    pub traceparent: Option<&'a str>,
    pub tracestate: Option<&'a str>,
}

/// A successful call whose observers wait until its answer went out
/// ([`crate::runtime::Runtime::observe_after_answer`]): what [`CallView`] borrows, owned. Its
/// outcome keeps every field observers read but the answer's content: of the answer, only
/// whether it is a tool error (`isError`), so a large answer is not copied on the call path.
pub(crate) struct DeferredCall {
    pub tool: String,
    pub started: SystemTime,
    pub outcome: Outcome,
    pub traceparent: Option<String>,
    pub tracestate: Option<String>,
}

impl DeferredCall {
    pub fn of(call: &CallView<'_>, out: &Outcome) -> DeferredCall {
        let is_error = out.result.get("isError").cloned();
        let mut result = serde_json::Map::new();
        if let Some(e) = is_error {
            result.insert("isError".into(), e);
        }
        DeferredCall {
            tool: call.tool.to_string(),
            started: call.started,
            outcome: Outcome {
                result: serde_json::Value::Object(result),
                label: out.label.clone(),
                copies: out.copies,
                triggers: out.triggers,
                phases: out.phases.clone(),
                notifications: Vec::new(),
            },
            traceparent: call.traceparent.map(str::to_string),
            tracestate: call.tracestate.map(str::to_string),
        }
    }
}

/// Something told about a runtime's calls and idle work. Every method but `after_call` does
/// nothing unless the observer says otherwise.
pub trait CallObserver: Send {
    /// A call ended: after its answer was made, and before it went out unless the front
    /// tells the observers after it ([`crate::runtime::Runtime::observe_after_answer`]).
    fn after_call(&mut self, rt: &RuntimeView<'_>, call: &CallView<'_>);

    /// The evidence layer recorded a verdict: the release's dampening state may have changed.
    fn after_verdict(&mut self, _rt: &RuntimeView<'_>) {}

    /// A step of idle work ended with nothing more due (a refilled pool, a fresh germline).
    fn after_idle_step(&mut self, _rt: &RuntimeView<'_>) {}

    /// [`crate::runtime::Runtime::idle`] finished all of its work.
    fn after_idle(&mut self, _rt: &RuntimeView<'_>) {}

    /// The runtime stopped; nothing more is reported after this.
    fn stopped(&mut self) {}
}

impl std::fmt::Debug for RuntimeView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeView")
            .field("release", &self.release.label())
            .field("mode", &self.mode)
            .field("pid", &self.pid)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for CallView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallView")
            .field("tool", &self.tool)
            .field("result", &self.result)
            .finish_non_exhaustive()
    }
}

/// The observers of one runtime, in the order they are told.
#[derive(Default)]
pub struct Observers(Vec<Box<dyn CallObserver>>);

impl Observers {
    pub fn push(&mut self, o: Box<dyn CallObserver>) {
        self.0.push(o);
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Tells every observer, in order.
    pub fn each(&mut self, mut f: impl FnMut(&mut dyn CallObserver)) {
        for o in &mut self.0 {
            f(o.as_mut());
        }
    }
}

impl std::fmt::Debug for Observers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Observers({})", self.0.len())
    }
}
