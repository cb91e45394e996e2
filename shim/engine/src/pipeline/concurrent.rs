//! Concurrent copies (issue 30, opt-in per release by `[copies] concurrent`): a multi-group
//! call's copies run at the same time, one thread per group, and the broker's hold rule
//! gives each copy exactly what the sequential run (A1) gives it (docs/design/30-performance.md,
//! "Engine changes for concurrent data phases").
//!
//! What needs the source (`&mut`) runs on the calling thread: every copy's mounts before the
//! threads start, every retire after they join. Each thread has a broker connection of its
//! own ([`BrokerApi::copy_handle`]); only the agent's group, run on the calling thread, holds
//! the agent link. A copy's end (`end_copy`) is made on its own thread as soon as its answer
//! is in, since later groups' held requests wait for it; the broker orders the ends.

use std::os::fd::AsFd;
use std::time::Instant;

use germline_broker::control::{BrokerClient, ControlError};
use germline_broker::RequestEvent;
use germline_policy::call::CopyOutcome;
use germline_policy::{Label, Plan, PlanMode};
use serde_json::{json, Value};

use super::{
    gather, BrokerApi, CallCtx, CopySource, Gathered, SandboxResult, SourcedCopy, Stages, TakenCopy,
};
use crate::callmeta::ArgItem;
use crate::error::{broker_failed, limit, RunError, SandboxFailure, ToolFailure};
use crate::laps::micros;
use crate::relay::{Agent, Buffered, CopyRelay};
use crate::runtime::{agent_clearance_of, tool_result, ITEMS_DIR};

/// What one copy's thread asks of the broker.
pub trait CopyBroker: Send {
    fn raise_copy(&self, call: u64, group: usize, label: &Label) -> Result<(), ControlError>;
    fn end_copy(
        &self,
        call: u64,
        group: usize,
    ) -> Result<(CopyOutcome, Vec<RequestEvent>), ControlError>;
}

impl CopyBroker for BrokerClient {
    fn raise_copy(&self, call: u64, group: usize, label: &Label) -> Result<(), ControlError> {
        BrokerClient::raise_copy(self, call, group, label)
    }
    fn end_copy(
        &self,
        call: u64,
        group: usize,
    ) -> Result<(CopyOutcome, Vec<RequestEvent>), ControlError> {
        BrokerClient::end_copy(self, call, group)
    }
}

/// The concurrent run of a call's groups, as [`Stages::call_with`] takes it (a function of
/// sources whose copies may move to other threads).
pub(super) type RunGroups<'x, S, B> = fn(
    &mut Stages<'x, S, B>,
    &CallCtx<'_>,
    &Plan,
    Vec<TakenCopy<<S as CopySource>::Copy>>,
    &mut Agent<'_>,
    &mut Gathered,
) -> Result<(), RunError>;

/// Every group's copy, if each was taken ahead and there are several; else `None` and
/// `early` is left as it was (the call then runs its copies one at a time).
pub(super) fn all_taken<C>(early: &mut Vec<Option<TakenCopy<C>>>) -> Option<Vec<TakenCopy<C>>> {
    if early.len() < 2 || early.iter().any(Option::is_none) {
        return None;
    }
    Some(early.drain(..).flatten().collect())
}

/// One group's copy, ready to run on its thread.
struct Job<C> {
    group: usize,
    copy: C,
    args: Value,
    files: Vec<(String, Vec<u8>, bool)>,
    is_agent: bool,
    inadmissible: Option<String>,
    token: Option<Value>,
    /// The mounts' result: a copy whose mounts failed does not run (its error is its answer).
    prepared: SandboxResult<()>,
    broker: Box<dyn CopyBroker>,
}

/// What a copy's thread leaves: the copy (to retire), its answer, whether an answer of the
/// agent entered it, its broker outcome, and how long it ran.
struct Ran<C> {
    group: usize,
    copy: C,
    result: SandboxResult<Value>,
    answered: bool,
    ended: Result<(CopyOutcome, Vec<RequestEvent>), ControlError>,
    us: u64,
}

impl<S: CopySource, B: BrokerApi> Stages<'_, S, B> {
    /// Whether this call's copies may run concurrently: the release opts in, Plan splits
    /// (a lazy plan's scout decides which copies run, so it must end first), and the release
    /// keeps no state in files (a copy's files are committed after its end, in group order),
    /// and the call has no directory item whose writes may be committed (the agent's copy's
    /// layer is read by the sequential path only, [`crate::writes`]) or its tool is read-only.
    pub(super) fn concurrent_call(
        &self,
        plan_mode: PlanMode,
        meta: &crate::callmeta::CallMeta,
    ) -> bool {
        self.concurrent
            && plan_mode == PlanMode::Split
            && self.state.is_none()
            && (self.writes.journal.is_none()
                || crate::writes::dirs(meta).is_empty()
                || self.read_only(meta))
    }
}

impl<'x, S: CopySource, B: BrokerApi> Stages<'x, S, B>
where
    S::Copy: Send,
{
    /// [`Stages::call`] for a source whose copies may run on threads of their own: with
    /// `[copies] concurrent`, a multi-group call's copies run concurrently.
    pub(crate) fn call_sendable(
        &mut self,
        meta: &crate::callmeta::CallMeta,
        plan_mode: PlanMode,
        agent_link: &mut Agent<'_>,
    ) -> Result<crate::runtime::Outcome, RunError> {
        let run: RunGroups<'x, S, B> = Self::run_groups;
        self.call_with(meta, plan_mode, agent_link, Some(run))
    }

    fn run_groups(
        &mut self,
        cx: &CallCtx<'_>,
        plan: &Plan,
        taken: Vec<TakenCopy<S::Copy>>,
        agent_link: &mut Agent<'_>,
        got: &mut Gathered,
    ) -> Result<(), RunError> {
        let t = Instant::now();
        let meta = cx.meta;
        let cancel = agent_link.cancel();
        let mut jobs = Vec::new();
        // Held until the copies are gone.
        let mut permits = Vec::new();
        // On the calling thread: every copy's arguments, limits, broker endpoint and mounts,
        // before any copy gets data. An error drops the copies taken so far (killing them).
        for ((gi, group), (mut copy, us, laps)) in plan.groups.iter().enumerate().zip(taken) {
            let in_view = |i: &ArgItem| group.view.iter().any(|v| v == &i.name);
            let args = meta
                .arguments_for(&in_view, ITEMS_DIR)
                .map_err(RunError::Invalid)?;
            let view_bytes = meta
                .items
                .iter()
                .filter(|i| in_view(i))
                .map(|i| i.contents.len() as u64)
                .sum();
            permits.push(self.limiter.admit_copy(view_bytes).map_err(limit)?);
            if let Some(m) = self.metrics {
                m.item_bytes(&self.release.label(), view_bytes);
            }
            copy.set_twin(cx.twin);
            copy.set_cancel(cancel.clone());
            got.laps.took("fork", us);
            got.laps.extend(laps);
            let netns = copy
                .netns()
                .map_err(|e| RunError::Sandbox(SandboxFailure::CopyNetns(e)))?;
            // Each copy's serial parts on the calling thread, timed apart (issue 30: the cost
            // of each extra copy).
            let s = Instant::now();
            self.broker
                .start_copy(cx.call, gi, netns.as_fd(), copy.deadline())
                .map_err(broker_failed)?;
            got.laps.lap("copies.prepare.start_copy", s);
            let s = Instant::now();
            let broker = self.broker.copy_handle().map_err(broker_failed)?;
            got.laps.lap("copies.prepare.handle", s);
            let s = Instant::now();
            let files = super::view_files(meta, &in_view);
            let tree = crate::treeitem::view_entries(&meta.items, &in_view);
            let writable = !self.read_only(meta);
            let prepared = self
                .source
                .prepare_copy_view(&mut copy, &files, &tree, writable);
            got.laps.lap("copies.prepare.mounts", s);
            let is_agent = Some(gi) == cx.agent_group;
            jobs.push(Job {
                group: gi,
                copy,
                args,
                files,
                is_agent,
                inadmissible: cx.inadmissible(group),
                token: meta.progress_token.clone().filter(|_| is_agent),
                prepared,
                broker,
            });
        }
        got.laps.lap("copies.prepare", t);
        got.concurrent = true;
        *self.data_sent = true;
        let t = Instant::now();
        let call = cx.call;
        let agent_clearance = agent_clearance_of(meta);
        let tool = meta.tool.as_str();
        let mut ran: Vec<Ran<S::Copy>> = std::thread::scope(|s| {
            let mut threads = Vec::new();
            let mut agents_job = None;
            for job in jobs {
                if job.is_agent {
                    agents_job = Some(job);
                    continue;
                }
                let clearance = &agent_clearance;
                threads.push(s.spawn(move || {
                    // Not the agent's copy: nothing reaches the agent from it (CopyRelay).
                    let mut quiet = Buffered::default();
                    let mut agent = Agent {
                        link: &mut quiet,
                        capabilities: json!({}),
                    };
                    run_job(job, call, tool, clearance, &mut agent)
                }));
            }
            let mut out: Vec<Ran<S::Copy>> = Vec::new();
            if let Some(job) = agents_job {
                out.push(run_job(job, call, tool, &agent_clearance, agent_link));
            }
            for th in threads {
                match th.join() {
                    Ok(r) => out.push(r),
                    Err(panic) => std::panic::resume_unwind(panic),
                }
            }
            out
        });
        ran.sort_by_key(|r| r.group);
        got.laps.lap("copies.run", t);
        let t = Instant::now();
        let cancelled = cancel.as_ref().is_some_and(|c| c.fired());
        let mut failure = None;
        for r in ran {
            let Ran {
                group: gi,
                mut copy,
                result,
                answered,
                ended,
                us,
            } = r;
            got.laps.took("copy", us);
            let result = if cancelled {
                copy.kill();
                drop(copy);
                Err(germline_sandbox::Error::Cancelled)
            } else {
                self.source.retire(copy, result)
            };
            match ended {
                Ok((outcome, requests)) => {
                    self.last_requests
                        .extend(requests.into_iter().map(|e| (gi, e)));
                    let result = result.map_err(ToolFailure::Copy).and_then(tool_result);
                    let label = outcome.label.clone();
                    gather(
                        cx,
                        gi,
                        &plan.groups[gi],
                        (result, label, outcome, answered),
                        got,
                    );
                }
                Err(e) => {
                    failure.get_or_insert(broker_failed(e));
                }
            }
        }
        drop(permits);
        got.laps.lap("copies.retire", t);
        if cancelled {
            return Err(RunError::Cancelled);
        }
        match failure {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// Runs one group's copy to its answer, then ends it in the broker (which waits for the
/// earlier groups' ends). The copy is retired by the calling thread afterwards.
fn run_job<C: SourcedCopy>(
    job: Job<C>,
    call: u64,
    tool: &str,
    agent_clearance: &Label,
    agent: &mut Agent<'_>,
) -> Ran<C> {
    let Job {
        group: gi,
        mut copy,
        args,
        files,
        is_agent,
        inadmissible,
        token,
        prepared,
        broker,
    } = job;
    let t = Instant::now();
    let deadline = copy.deadline();
    let call_meta = token.clone().map(|t| json!({"progressToken": t}));
    let (result, answered) = {
        let b = &*broker;
        let mut relay =
            CopyRelay::new(agent, is_agent, token, inadmissible, deadline).with_raise(move || {
                b.raise_copy(call, gi, agent_clearance)
                    .map_err(|e| e.to_string())
            });
        let result = prepared
            .and_then(|()| copy.deliver(&files))
            .and_then(|()| copy.initialize())
            .and_then(|()| copy.mcp_call_relayed(tool, args, call_meta, &mut |m| relay.handle(m)));
        (result, relay.answered)
    };
    let us = micros(t);
    // The answer is in: the copy is ended now (its endpoint closed, its outcome taken), so
    // that later groups' requests held on its record go on.
    let ended = broker.end_copy(call, gi);
    Ran {
        group: gi,
        copy,
        result,
        answered,
        ended,
        us,
    }
}
