//! The stages of one call under germline execution: admit -> plan -> copies -> per-group
//! run -> finish, over two seams:
//!
//! * [`CopySource`]: where a group's copy comes from and how it is run. Today the germline
//!   forks it ([`germline_sandbox::Germline`]); copies spawned ahead (issue 28) will be
//!   another source.
//! * [`BrokerApi`]: what the pipeline asks of the broker sidecar (Plan, a copy's egress,
//!   its label and outcome, the call's record); the real one is [`Sidecar`].
//!
//! [`Stages`] borrows the parts of a [`crate::runtime::Runtime`] a call needs; the unit
//! tests below run it on in-memory fakes of both seams, without root.

use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use germline_broker::control::{BeginCall, ControlError};
use germline_broker::{CallRecord, RequestEvent, Twin};
use germline_policy::call::{CopyOutcome, LabelRules};
use germline_policy::witness::ReplaySpec;
use germline_policy::{Label, Plan, PlanMode};
use germline_sandbox::Germline;
use serde_json::{json, Value};

use crate::callmeta::{ArgItem, CallMeta, ItemKind};
use crate::error::{
    broker_failed, limit, said, BrokerFailure, RunError, SandboxFailure, SidecarError, ToolFailure,
};
use crate::evidence::Evidence;
use crate::laps::{micros, Laps};
use crate::limits::Limiter;
use crate::metrics::Metrics;
use crate::outbox::{self, Delivery};
use crate::relay::{self, Agent, Buffered, CopyRelay};
use crate::release::Release;
use crate::runtime::{
    add_meta, agent_clearance_of, tool_result, Mode, Outcome, AGENT, ITEMS_DIR, OTHER_COPY_FAILED,
};
use crate::sidecar::Sidecar;

mod concurrent;
pub use concurrent::CopyBroker;

type SandboxResult<T> = Result<T, germline_sandbox::Error>;

/// Where a group's copies come from, and the steps of running one (the germline's API as
/// the pipeline uses it).
pub trait CopySource {
    type Copy: SourcedCopy;
    /// A call begins: the pool's first copy may run while the call is planned.
    fn call_begins(&mut self);
    /// The client capabilities pool copies announce in their `initialize` from now on.
    fn set_pool_capabilities(&mut self, caps: &Value);
    /// A data-free, checked copy whose `initialize` announces `caps`.
    fn copy_for(&mut self, caps: &Value) -> SandboxResult<Self::Copy>;
    /// A call of `groups` groups came: a pooling source keeps that many copies from its next
    /// refill on, so that every group's copy comes from the pool.
    fn want_depth(&mut self, _groups: usize) {}
    /// The laps of the last fork (none for a pool copy).
    fn fork_phases(&self) -> &[(&'static str, u64)];
    /// Network namespaces of pool copies that wait with no broker endpoint prepared yet, each
    /// handed out once: between calls the runtime has the broker bind their endpoints, so
    /// that a call's `start_copy` only binds one to the call (`germline_broker::prepared`).
    fn endpoints_to_prepare(&mut self) -> Vec<File> {
        Vec::new()
    }
    /// The copy's mounts of its items (`(file name, contents, in view)`).
    fn prepare_copy(
        &mut self,
        copy: &mut Self::Copy,
        files: &[(String, Vec<u8>, bool)],
    ) -> SandboxResult<()>;
    /// Like [`CopySource::prepare_copy`], with the entries of directory items in the copy's
    /// view, each mounted at its own path. A source that cannot mount them refuses the call
    /// rather than run it without them.
    /// `writable`: the copy may write into its directory items (a layer of its own), if its
    /// source gives writable ones at all; false for a read-only tool.
    fn prepare_copy_view(
        &mut self,
        copy: &mut Self::Copy,
        files: &[(String, Vec<u8>, bool)],
        tree: &[germline_sandbox::TreeEntry],
        _writable: bool,
    ) -> SandboxResult<()> {
        if !tree.is_empty() {
            return Err(germline_sandbox::Error::Spec(
                "this copy source cannot mount directory items".into(),
            ));
        }
        self.prepare_copy(copy, files)
    }
    /// Kills the copy after its answer `result` (which may become an error if the copy's
    /// end shows it failed).
    fn retire(&mut self, copy: Self::Copy, result: SandboxResult<Value>) -> SandboxResult<Value>;
}

/// One copy of a [`CopySource`].
pub trait SourcedCopy {
    /// The copy's network namespace, handed to the broker for its egress.
    fn netns(&self) -> std::io::Result<File>;
    fn deadline(&self) -> Instant;
    fn set_twin(&mut self, twin: Option<(u128, u64)>);
    fn kill(&mut self);
    /// Delivers the items into the copy.
    fn deliver(&mut self, files: &[(String, Vec<u8>, bool)]) -> SandboxResult<()>;
    /// Finishes the MCP handshake sent at the fork.
    fn initialize(&mut self) -> SandboxResult<()>;
    /// The `tools/call`, with the copy's requests and notifications handed to `handler`.
    fn mcp_call_relayed(
        &mut self,
        tool: &str,
        arguments: Value,
        meta: Option<Value>,
        handler: &mut dyn FnMut(&Value) -> Option<Value>,
    ) -> SandboxResult<Value>;
    /// Every wait for the copy from now on also ends when `cancel` fires.
    fn set_cancel(&mut self, _cancel: Option<Arc<relay::Cancel>>) {}
    /// The copy's state tmpfs (issue 27), held by the shim; a source without one refuses a
    /// release that declares state rather than run it without.
    fn state_dir(&self) -> SandboxResult<germline_sandbox::StateDir> {
        Err(germline_sandbox::Error::Spec(
            "this copy source keeps no state paths".into(),
        ))
    }
    /// The copy's writable layer of the directory item it sees at `dir` (issue 27; `None`:
    /// its directory items are read-only, so it leaves no writes).
    fn tree_layer(&self, _dir: &str) -> SandboxResult<Option<germline_sandbox::TreeLayer>> {
        Ok(None)
    }
}

impl CopySource for Germline {
    type Copy = germline_sandbox::Copy;
    fn call_begins(&mut self) {
        Germline::call_begins(self)
    }
    fn set_pool_capabilities(&mut self, caps: &Value) {
        Germline::set_pool_capabilities(self, caps)
    }
    fn copy_for(&mut self, caps: &Value) -> SandboxResult<Self::Copy> {
        Germline::copy_for(self, caps)
    }
    fn want_depth(&mut self, groups: usize) {
        Germline::want_depth(self, groups)
    }
    fn fork_phases(&self) -> &[(&'static str, u64)] {
        Germline::fork_phases(self)
    }
    fn endpoints_to_prepare(&mut self) -> Vec<File> {
        Germline::endpoints_to_prepare(self)
    }
    fn prepare_copy(
        &mut self,
        copy: &mut Self::Copy,
        files: &[(String, Vec<u8>, bool)],
    ) -> SandboxResult<()> {
        Germline::prepare_copy(self, copy, files)
    }
    fn prepare_copy_view(
        &mut self,
        copy: &mut Self::Copy,
        files: &[(String, Vec<u8>, bool)],
        tree: &[germline_sandbox::TreeEntry],
        writable: bool,
    ) -> SandboxResult<()> {
        let items: Vec<germline_sandbox::Item> =
            files.iter().map(germline_sandbox::Item::from).collect();
        Germline::prepare_copy_view(self, copy, &items, tree, writable)
    }
    fn retire(&mut self, copy: Self::Copy, result: SandboxResult<Value>) -> SandboxResult<Value> {
        Germline::retire(self, copy, result)
    }
}

impl SourcedCopy for germline_sandbox::Copy {
    fn netns(&self) -> std::io::Result<File> {
        File::open(format!("/proc/{}/ns/net", self.pid()))
    }
    fn deadline(&self) -> Instant {
        germline_sandbox::Copy::deadline(self)
    }
    fn set_twin(&mut self, twin: Option<(u128, u64)>) {
        germline_sandbox::Copy::set_twin(self, twin)
    }
    fn kill(&mut self) {
        germline_sandbox::Copy::kill(self)
    }
    fn deliver(&mut self, files: &[(String, Vec<u8>, bool)]) -> SandboxResult<()> {
        germline_sandbox::Copy::deliver(self, files)
    }
    fn initialize(&mut self) -> SandboxResult<()> {
        germline_sandbox::Copy::initialize(self)
    }
    fn mcp_call_relayed(
        &mut self,
        tool: &str,
        arguments: Value,
        meta: Option<Value>,
        handler: &mut dyn FnMut(&Value) -> Option<Value>,
    ) -> SandboxResult<Value> {
        germline_sandbox::Copy::mcp_call_relayed(self, tool, arguments, meta, handler)
    }
    fn set_cancel(&mut self, cancel: Option<Arc<relay::Cancel>>) {
        germline_sandbox::Copy::set_cancel(self, cancel)
    }
    fn state_dir(&self) -> SandboxResult<germline_sandbox::StateDir> {
        germline_sandbox::StateDir::open(self.pid())
    }
    fn tree_layer(&self, dir: &str) -> SandboxResult<Option<germline_sandbox::TreeLayer>> {
        germline_sandbox::Copy::tree_layer(self, dir)
    }
}

/// What the pipeline asks of the broker sidecar.
pub trait BrokerApi {
    /// Plan and the call's twin inputs.
    fn begin_call(&self, call: BeginCall) -> Result<(u64, Twin, Plan), ControlError>;
    /// A fresh connection after the old one broke (a restarted broker).
    fn reconnect(&mut self) -> Result<(), SidecarError>;
    /// Serves group `group`'s egress from the copy's network namespace.
    fn start_copy(
        &self,
        call: u64,
        group: usize,
        netns: BorrowedFd<'_>,
        deadline: Instant,
    ) -> Result<String, ControlError>;
    /// Raises the copy's label (an answer of the agent is about to enter it).
    fn raise_copy(&self, call: u64, group: usize, label: &Label) -> Result<(), ControlError>;
    /// The copy's outcome (its label, triggers) and its requests.
    fn end_copy(
        &self,
        call: u64,
        group: usize,
    ) -> Result<(CopyOutcome, Vec<RequestEvent>), ControlError>;
    /// The call's record.
    fn end_call(&self, call: u64) -> Result<CallRecord, ControlError>;
    /// [`BrokerApi::end_copy`] of the call's last copy, then [`BrokerApi::end_call`] (the call
    /// ends even if the copy's end is refused). The real broker does both in one round trip.
    #[allow(clippy::type_complexity)]
    fn end_last_copy(
        &self,
        call: u64,
        group: usize,
    ) -> Result<(CopyOutcome, Vec<RequestEvent>, CallRecord), ControlError> {
        let copy = self.end_copy(call, group);
        let record = self.end_call(call);
        let (outcome, requests) = copy?;
        Ok((outcome, requests, record?))
    }
    /// The file-state generation a started copy starts from (issue 27; none: the initial).
    fn copy_files(&self, _call: u64, _group: usize) -> Result<Option<String>, ControlError> {
        Err(ControlError::Refused(
            "this broker keeps no file state".into(),
        ))
    }
    /// Points an ended copy's horizon at file-state `generation`, under the copy's label.
    fn commit_files(
        &self,
        _call: u64,
        _group: usize,
        _generation: &str,
    ) -> Result<Label, ControlError> {
        Err(ControlError::Refused(
            "this broker keeps no file state".into(),
        ))
    }
    /// A connection of its own for one copy's thread (concurrent copies): a connection's
    /// replies would interleave, and a later group's `end_copy` waits for the earlier ones.
    fn copy_handle(&self) -> Result<Box<dyn CopyBroker>, ControlError> {
        Err(ControlError::Refused(
            "this broker opens no connection per copy".into(),
        ))
    }
}

impl BrokerApi for Sidecar {
    fn begin_call(&self, call: BeginCall) -> Result<(u64, Twin, Plan), ControlError> {
        self.client.begin_call(call)
    }
    fn reconnect(&mut self) -> Result<(), SidecarError> {
        Sidecar::reconnect(self)
    }
    fn start_copy(
        &self,
        call: u64,
        group: usize,
        netns: BorrowedFd<'_>,
        deadline: Instant,
    ) -> Result<String, ControlError> {
        self.client.start_copy(call, group, netns, deadline)
    }
    fn raise_copy(&self, call: u64, group: usize, label: &Label) -> Result<(), ControlError> {
        self.client.raise_copy(call, group, label)
    }
    fn end_copy(
        &self,
        call: u64,
        group: usize,
    ) -> Result<(CopyOutcome, Vec<RequestEvent>), ControlError> {
        self.client.end_copy(call, group)
    }
    fn end_call(&self, call: u64) -> Result<CallRecord, ControlError> {
        self.client.end_call(call)
    }
    fn end_last_copy(
        &self,
        call: u64,
        group: usize,
    ) -> Result<(CopyOutcome, Vec<RequestEvent>, CallRecord), ControlError> {
        self.client.end_last_copy(call, group)
    }
    fn copy_files(&self, call: u64, group: usize) -> Result<Option<String>, ControlError> {
        self.client.copy_files(call, group)
    }
    fn commit_files(
        &self,
        call: u64,
        group: usize,
        generation: &str,
    ) -> Result<Label, ControlError> {
        self.client.commit_files(call, group, generation)
    }
    fn copy_handle(&self) -> Result<Box<dyn CopyBroker>, ControlError> {
        Ok(Box::new(germline_broker::control::BrokerClient::connect(
            &self.socket,
        )?))
    }
}

/// A copy taken ahead of its turn: the copy, the microseconds that took, its fork's laps.
type TakenCopy<C> = (C, u64, Vec<(&'static str, u64)>);

/// What one group's copy is to do.
struct CopyJob<'a, C> {
    call: u64,
    group: usize,
    meta: &'a CallMeta,
    in_view: &'a dyn Fn(&ArgItem) -> bool,
    is_agent: bool,
    /// Why the agent's answer to a sampling or elicitation request may not enter this copy.
    inadmissible: Option<String>,
    /// Twin inputs of the call, unless twin inputs are off (the reference runs).
    twin: Option<(u128, u64)>,
    /// A probe or control re-run (crate::evidence): not counted as the call's delivery.
    rerun: bool,
    /// The call's last copy: once it ends, nothing of the call needs the broker, so its end
    /// and the call's are one round trip (unless state in files commits in between).
    last: bool,
    /// The copy, if taken ahead (see [`Stages::call`]), with the time that took and its fork's
    /// laps; else one is taken in its turn.
    copy: Option<TakenCopy<C>>,
    /// The workspaces whose writes this copy's layers are committed for: its group holds
    /// their consumers (issue 27, [`crate::workspaces`]). `None`: its layers are dropped.
    commits: Option<crate::workspaces::Commits>,
}

/// The parts of a runtime one call's stages use.
pub(crate) struct Stages<'a, S: CopySource, B: BrokerApi> {
    pub(crate) source: &'a mut S,
    pub(crate) broker: &'a mut B,
    pub(crate) release: &'a Release,
    pub(crate) user: &'a str,
    pub(crate) evidence: &'a mut Evidence,
    pub(crate) limiter: &'a Limiter,
    pub(crate) metrics: Option<&'a Metrics>,
    pub(crate) twin_on: bool,
    pub(crate) outbox: Option<&'a Path>,
    pub(crate) mode: Mode,
    /// A copy of this call got data: a call whose germline died before that may run again.
    pub(crate) data_sent: &'a mut bool,
    /// The call's broker requests by group (for its trace).
    pub(crate) last_requests: &'a mut Vec<(usize, RequestEvent)>,
    /// The release's state in files, if its manifest declares any ([`crate::state`]).
    pub(crate) state: Option<&'a crate::state::FileState>,
    /// Writes into directory items (issue 27, [`crate::writes`]).
    pub(crate) writes: CallWrites,
    /// The release's multi-group calls run their copies concurrently (`[copies] concurrent`).
    pub(crate) concurrent: bool,
}

/// Where a call's writes are journalled, and what the agent is told of them.
#[derive(Debug, Default)]
pub(crate) struct CallWrites {
    /// The commit journal's directory (`None`: writes are never committed).
    pub(crate) journal: Option<std::path::PathBuf>,
    /// `_meta.germline.writes` of the call's answer.
    pub(crate) summary: Option<Value>,
}

/// The call's file items as a copy gets them: `(file name, contents, in the copy's view)`
/// (an item outside the view is an empty file in the copy, A5).
pub(crate) fn view_files(
    meta: &CallMeta,
    in_view: &dyn Fn(&ArgItem) -> bool,
) -> Vec<(String, Vec<u8>, bool)> {
    meta.items
        .iter()
        .filter_map(|i| match (&i.kind, &i.file_name) {
            (ItemKind::File { .. }, Some(f)) => Some((f.clone(), i.contents.clone(), in_view(i))),
            _ => None,
        })
        .collect()
}

/// Plan for `meta` (the broker's `begin_call`); `replay`: a probe or control re-run's, served
/// by the broker from the record.
pub(crate) fn begin<B: BrokerApi>(
    broker: &mut B,
    release: &Release,
    user: &str,
    meta: &CallMeta,
    mode: PlanMode,
    open: bool,
    replay: Option<&ReplaySpec>,
) -> Result<(u64, Twin, Plan), RunError> {
    begin_with(broker, begin_call(release, user, meta, mode, open, replay))
}

/// The broker's `begin_call` for `meta` (not concurrent).
fn begin_call(
    release: &Release,
    user: &str,
    meta: &CallMeta,
    mode: PlanMode,
    open: bool,
    replay: Option<&ReplaySpec>,
) -> BeginCall {
    {
        BeginCall {
            release: release.digest.clone(),
            user: user.to_string(),
            items: meta.item_meta(),
            hosts: meta.hosts.clone(),
            consumers: meta.consumers.clone(),
            mode,
            rules: LabelRules::default(),
            open,
            replay: replay.cloned(),
            concurrent: false,
        }
    }
}

fn begin_with<B: BrokerApi>(
    broker: &mut B,
    call: BeginCall,
) -> Result<(u64, Twin, Plan), RunError> {
    let r = broker.begin_call(call.clone());
    let r = match r {
        Err(ControlError::Refused(e)) => return Err(RunError::Broker(BrokerFailure::Refused(e))),
        Err(_) => {
            // The connection broke: try once more on a fresh one (a restarted broker).
            broker
                .reconnect()
                .map_err(|e| RunError::Broker(BrokerFailure::Unreachable(e)))?;
            broker.begin_call(call)
        }
        ok => ok,
    };
    let (id, twin, plan) = r.map_err(broker_failed)?;
    Ok((id, twin, plan))
}

/// What every stage of one call after Plan knows of it.
struct CallCtx<'m> {
    call: u64,
    meta: &'m CallMeta,
    /// The group whose copy answers the agent.
    agent_group: Option<usize>,
    agent_clearance: Option<Label>,
    /// The broker's twin inputs of the call, and what the copies get of them (none when
    /// twin inputs are off).
    twin_in: (u128, u64),
    twin: Option<(u128, u64)>,
    /// The call's workspaces, each a consumer Plan placed (empty when no write commits).
    workspaces: Vec<crate::workspaces::CallWorkspace>,
    /// How many groups Plan formed.
    groups: usize,
}

impl CallCtx<'_> {
    /// Why the agent's answer to a sampling or elicitation request may not enter `group`'s
    /// copy (none: it may).
    fn inadmissible(&self, group: &germline_policy::plan::Group) -> Option<String> {
        match &self.agent_clearance {
            Some(c) => relay::admissible(c, &group.horizon, &group.hosts).err(),
            None => Some("germline: the call has no agent".to_string()),
        }
    }
}

/// What the per-group runs of one call gathered for its finish.
#[derive(Default)]
struct Gathered {
    laps: Laps,
    /// The agent's group's result and label.
    agent: Option<(Result<Value, ToolFailure>, Label)>,
    /// A copy of another group failed (its words never reach the agent).
    others_failed: bool,
    triggers: usize,
    /// The groups whose copies tripped triggers, for the evidence layer.
    outcomes: Vec<(usize, CopyOutcome)>,
    /// Results for the other consumers the manifest names.
    deliveries: Vec<Delivery>,
    /// The copies ran concurrently (`[copies] concurrent`): the answer's `_meta` says so.
    concurrent: bool,
    /// The call's record, if its last copy's end ended it too ([`BrokerApi::end_last_copy`]).
    ended: Option<CallRecord>,
}

impl<'x, S: CopySource, B: BrokerApi> Stages<'x, S, B> {
    /// The call's stages: admit -> plan -> copies -> per-group run -> finish.
    pub(crate) fn call(
        &mut self,
        meta: &CallMeta,
        plan_mode: PlanMode,
        agent_link: &mut Agent<'_>,
    ) -> Result<Outcome, RunError> {
        self.call_with(meta, plan_mode, agent_link, None)
    }

    /// [`Stages::call`], running the groups' copies with `concurrently` when the release
    /// opts in and every copy was taken ahead (else one at a time, A1).
    fn call_with(
        &mut self,
        meta: &CallMeta,
        plan_mode: PlanMode,
        agent_link: &mut Agent<'_>,
        concurrently: Option<concurrent::RunGroups<'x, S, B>>,
    ) -> Result<Outcome, RunError> {
        let t0 = Instant::now();
        *self.data_sent = false;
        self.writes.summary = None;
        let mut got = Gathered::default();
        self.admit(meta)?;
        got.laps.lap("evidence.admit", t0);
        let concurrently = concurrently.filter(|_| self.concurrent_call(plan_mode, meta));
        let (cx, plan) = self.plan(meta, plan_mode, concurrently.is_some(), &mut got.laps)?;
        got.laps.lap("plan", t0);
        let mut early = self.copies(&cx, &plan, agent_link);
        if let Some(run) = concurrently {
            // Only when every copy was taken ahead; else they run one at a time below.
            if let Some(taken) = concurrent::all_taken(&mut early) {
                let r = run(self, &cx, &plan, taken, agent_link, &mut got);
                return self.finish(&cx, &plan, r.err(), got, t0);
            }
        }
        let mut failure = None;
        for (gi, group) in plan.groups.iter().enumerate() {
            let ahead = early.get_mut(gi).and_then(Option::take);
            let r = self.run_group(&cx, gi, group, ahead, agent_link, &mut got);
            if agent_link.cancelled() {
                // The agent cancelled the call: the running copy was killed (run_copy); the
                // copies taken ahead for the later groups die now, with their cgroups, and
                // no group runs any more. The broker's end_call (finish) drops what is still
                // pending for them.
                early.clear();
                failure = Some(RunError::Cancelled);
                break;
            }
            if let Err(e) = r {
                failure = Some(e);
                break;
            }
        }
        self.finish(&cx, &plan, failure, got, t0)
    }

    /// Admit: a declared flow the agent asked to carry what its host may not see is refused
    /// before dampening counts the call and before any copy runs (crate::flows); then the
    /// evidence layer admits the attempt or refuses a suppressed release.
    fn admit(&mut self, meta: &CallMeta) -> Result<(), RunError> {
        if let Some(tool) = self.release.manifest.tools.get(&meta.tool) {
            crate::flows::check(&meta.tool, tool, meta).map_err(RunError::Flow)?;
        }
        self.source.call_begins();
        self.evidence
            .admit(&self.release.digest)
            .map_err(RunError::Suppressed)
    }

    /// Whether the call's tool is one its release declares read-only (the manifest's
    /// `read_only`): its copies get their directory items read-only and commit no write.
    fn read_only(&self, meta: &CallMeta) -> bool {
        self.release
            .manifest
            .tools
            .get(&meta.tool)
            .is_some_and(|t| t.read_only)
    }

    /// Plan: the broker's `begin_call`, and what the later stages need of its answer.
    fn plan<'m>(
        &mut self,
        meta: &'m CallMeta,
        plan_mode: PlanMode,
        concurrent: bool,
        laps: &mut Laps,
    ) -> Result<(CallCtx<'m>, Plan), RunError> {
        let mut c = begin_call(self.release, self.user, meta, plan_mode, false, None);
        c.concurrent = concurrent;
        // Each workspace a write may be committed to is a consumer: Plan places it. A tool its
        // publisher declares read-only writes nothing, so its call has none.
        let workspaces = match &self.writes.journal {
            Some(_) if !self.read_only(meta) => {
                crate::workspaces::of_call(meta, &self.release.manifest.name)
            }
            _ => Vec::new(),
        };
        c.consumers
            .extend(workspaces.iter().map(|w| w.member.clone()));
        let s = Instant::now();
        let (call, twin0, plan) = begin_with(self.broker, c)?;
        laps.lap("plan.begin_call", s);
        let agent_group = plan
            .groups
            .iter()
            .position(|g| g.consumers.iter().any(|c| c == AGENT));
        let agent_clearance = meta
            .consumers
            .iter()
            .find(|c| c.name == AGENT)
            .map(|c| c.clearance.clone());
        let cx = CallCtx {
            call,
            meta,
            agent_group,
            agent_clearance,
            twin_in: (twin0.time_ns, twin0.seed),
            twin: self.twin_on.then_some((twin0.time_ns, twin0.seed)),
            workspaces,
            groups: plan.groups.len(),
        };
        Ok((cx, plan))
    }

    /// Copies: with several groups, every group's copy is taken (or forked) now, before the
    /// first gets any data: the later ones are data-free until their turn, and their
    /// confinement and handshake run while the earlier groups' copies serve the call, off its
    /// path. With one group, its copy is taken in its turn (none here).
    fn copies(
        &mut self,
        cx: &CallCtx<'_>,
        plan: &Plan,
        agent_link: &Agent<'_>,
    ) -> Vec<Option<TakenCopy<S::Copy>>> {
        let mut early = Vec::new();
        if plan.groups.len() > 1 {
            let g = &mut *self.source;
            g.want_depth(plan.groups.len());
            for (gi, group) in plan.groups.iter().enumerate() {
                let caps = if Some(gi) == cx.agent_group && cx.inadmissible(group).is_none() {
                    agent_link.relayed_capabilities()
                } else {
                    json!({})
                };
                if Some(gi) == cx.agent_group {
                    g.set_pool_capabilities(&caps);
                }
                // A failure here is reported by that group's own turn, which tries again.
                let s = Instant::now();
                let c = g.copy_for(&caps).ok();
                let us = micros(s);
                early.push(c.map(|c| (c, us, g.fork_phases().to_vec())));
            }
        }
        early
    }

    /// Run one group: its copy (taken `ahead` or now) runs the call on the group's view;
    /// its result goes to the agent (the agent's group) and to the group's other consumers.
    /// An error is the shim's (broker, sandbox): the call fails with it.
    fn run_group(
        &mut self,
        cx: &CallCtx<'_>,
        gi: usize,
        group: &germline_policy::plan::Group,
        ahead: Option<TakenCopy<S::Copy>>,
        agent_link: &mut Agent<'_>,
        got: &mut Gathered,
    ) -> Result<(), RunError> {
        let in_view = |i: &ArgItem| group.view.iter().any(|v| v == &i.name);
        let is_agent = Some(gi) == cx.agent_group;
        let job = CopyJob {
            call: cx.call,
            group: gi,
            meta: cx.meta,
            in_view: &in_view,
            is_agent,
            inadmissible: cx.inadmissible(group),
            twin: cx.twin,
            rerun: false,
            last: gi + 1 == cx.groups,
            copy: ahead,
            commits: crate::workspaces::for_group(&cx.workspaces, group),
        };
        let ran = self.run_copy(job, agent_link, &mut got.laps, &mut got.ended)?;
        gather(cx, gi, group, ran, got);
        Ok(())
    }
}

/// What group `gi`'s copy `ran` to (its result, label, outcome, and whether an answer of the
/// agent entered it) goes to: the agent (the agent's group) and the group's other consumers.
fn gather(
    cx: &CallCtx<'_>,
    gi: usize,
    group: &germline_policy::plan::Group,
    ran: (Result<Value, ToolFailure>, Label, CopyOutcome, bool),
    got: &mut Gathered,
) {
    let is_agent = Some(gi) == cx.agent_group;
    let (result, mut label, out, answered) = ran;
    // An answer of the agent entered the copy: its output carries it.
    if let (true, Some(c)) = (answered, &cx.agent_clearance) {
        label.join(c);
    }
    got.triggers += out.triggers.len();
    // Every other consumer of this group gets this group's result.
    for c in group
        .consumers
        .iter()
        .filter(|c| c.as_str() != AGENT && !crate::workspaces::is_workspace(c))
    {
        got.deliveries.push(Delivery {
            consumer: c.clone(),
            result: ToolFailure::delivered(&result),
            label: Some(label.clone()),
        });
    }
    if !out.triggers.is_empty() {
        got.outcomes.push((gi, out));
    }
    if is_agent {
        got.agent = Some((result, label));
    } else if result
        .as_ref()
        .map_or(true, |v| v.get("isError") == Some(&Value::Bool(true)))
    {
        // Its error text is the copy's own words: the agent gets a fixed notice.
        got.others_failed = true;
    }
}

impl<S: CopySource, B: BrokerApi> Stages<'_, S, B> {
    /// Finish: the broker's `end_call` (also after a `failure`, which then is the call's
    /// error), the evidence layer's queue of triggers and weighing of denials, the results
    /// for the other consumers, and the agent's answer with `_meta.germline`.
    fn finish(
        &mut self,
        cx: &CallCtx<'_>,
        plan: &Plan,
        failure: Option<RunError>,
        got: Gathered,
        t0: Instant,
    ) -> Result<Outcome, RunError> {
        let Gathered {
            mut laps,
            agent,
            others_failed,
            triggers,
            outcomes,
            deliveries,
            concurrent,
            ended,
        } = got;
        let meta = cx.meta;
        let end = match ended {
            Some(record) => Ok(record),
            None => {
                let s = Instant::now();
                let end = self.broker.end_call(cx.call);
                laps.lap("broker.end_call", s);
                end
            }
        };
        if let Some(e) = failure {
            return Err(e);
        }
        let record = end.map_err(broker_failed)?;
        let s = Instant::now();
        self.evidence.queue(
            &self.release.digest,
            meta,
            plan,
            &outcomes,
            &record,
            cx.twin_in,
            self.twin_on,
        );
        let declared = self.release.manifest.deterministic;
        self.evidence
            .weigh_denials(&self.release.digest, declared, &outcomes);
        laps.lap("evidence.queue", s);
        let s = Instant::now();
        let Some((result, label)) = agent else {
            return Err(said("Plan formed no group for the agent".into()));
        };
        let mut result = result.map_err(RunError::Tool)?;
        let mut g = json!({"label": label, "copies": plan.groups.len(), "mode": self.mode.name()});
        if others_failed {
            g["notice"] = json!(OTHER_COPY_FAILED);
        }
        if let Some(w) = self.writes.summary.take() {
            g["writes"] = w;
        }
        if concurrent {
            g["copies_ran"] = json!("concurrent");
        }
        if !deliveries.is_empty() {
            g["recipients"] = Value::Object(outbox::deliver_all(
                self.outbox,
                &meta.tool,
                deliveries,
                &meta.consumers,
            ));
        }
        add_meta(&mut result, g);
        laps.lap("answer", s);
        laps.lap("total", t0);
        Ok(Outcome {
            result,
            label: Some(label),
            copies: plan.groups.len(),
            triggers,
            phases: laps.into_phases(),
            notifications: Vec::new(),
        })
    }

    /// Runs group `gi`'s copy. The outer error is the shim's (broker, sandbox); the inner
    /// result is the copy's own answer or failure.
    #[allow(clippy::type_complexity)]
    fn run_copy(
        &mut self,
        job: CopyJob<'_, S::Copy>,
        agent: &mut Agent<'_>,
        phases: &mut Laps,
        ended: &mut Option<CallRecord>,
    ) -> Result<(Result<Value, ToolFailure>, Label, CopyOutcome, bool), RunError> {
        let CopyJob {
            call,
            group: gi,
            meta,
            in_view,
            is_agent,
            inadmissible,
            rerun,
            last,
            twin,
            copy: ahead,
            commits,
        } = job;
        // A read-only tool's copy gets its directory items read-only (docs/policy.md "Writes").
        let writable = !self.read_only(meta);
        let g = &mut *self.source;
        // Redacted before any copy runs (a copy taken ahead is dropped, so killed, on error).
        let args = meta
            .arguments_for(in_view, ITEMS_DIR)
            .map_err(RunError::Invalid)?;
        let view_bytes = meta
            .items
            .iter()
            .filter(|i| in_view(i))
            .map(|i| i.contents.len() as u64)
            .sum();
        // Held until this function returns, after the copy is gone.
        let s = Instant::now();
        let _permit = self.limiter.admit_copy(view_bytes).map_err(limit)?;
        phases.lap("limits", s);
        let t = Instant::now();
        let metrics = self.metrics;
        let release = self.release;
        let mut laps_ahead = None;
        let mut copy = match ahead {
            Some((c, us, laps)) => {
                laps_ahead = Some((us, laps));
                c
            }
            None => {
                // The copy's `initialize` is sent now (a pool copy's was made while it
                // waited): it answers it while the shim sets up its broker endpoint and mounts.
                let caps = if is_agent && inadmissible.is_none() {
                    agent.relayed_capabilities()
                } else {
                    json!({})
                };
                if is_agent {
                    g.set_pool_capabilities(&caps);
                }
                g.copy_for(&caps).map_err(|e| {
                    if let (Some(m), germline_sandbox::Error::Refused(_)) = (metrics, &e) {
                        m.check_failed(&release.label());
                    }
                    RunError::Sandbox(SandboxFailure::Sandbox(e))
                })?
            }
        };
        if let (Some(m), false) = (metrics, rerun) {
            m.item_bytes(&release.label(), view_bytes);
        }
        copy.set_twin(twin);
        let cancel = agent.cancel();
        copy.set_cancel(cancel.clone());
        // The fork's laps (none for a pool copy); a copy taken ahead reports when it was.
        match laps_ahead {
            Some((us, laps)) => {
                phases.took("fork", us);
                phases.extend(laps);
            }
            None => {
                phases.lap("fork", t);
                phases.extend(g.fork_phases().iter().copied());
            }
        }
        let t = Instant::now();
        let netns = copy
            .netns()
            .map_err(|e| RunError::Sandbox(SandboxFailure::CopyNetns(e)))?;
        phases.lap("broker.netns", t);
        // From the broker's snapshot (which names a generation) to its load: no sweep.
        let held = match self.state.map(crate::state::FileState::shared).transpose() {
            Ok(h) => h,
            Err(e) => {
                copy.kill();
                return Err(said(format!("state in files: {e}")));
            }
        };
        let s = Instant::now();
        if let Err(e) = self
            .broker
            .start_copy(call, gi, netns.as_fd(), copy.deadline())
        {
            copy.kill();
            return Err(broker_failed(e));
        }
        phases.lap("broker.start_copy", s);
        // State in files: the generation the copy's horizon is at when it starts (the same
        // snapshot its key-value slot reads are served from), loaded before any data.
        let start_state = match self.state {
            Some(st) => {
                let loaded = self
                    .broker
                    .copy_files(call, gi)
                    .map_err(broker_failed)
                    .and_then(|g| {
                        st.load(g.as_deref())
                            .map_err(|e| said(format!("state in files: {e}")))
                    });
                match loaded {
                    Ok(s) => Some(s),
                    Err(e) => {
                        copy.kill();
                        return Err(e);
                    }
                }
            }
            None => None,
        };
        drop(held);
        phases.lap("broker", t);
        let t = Instant::now();
        let files = view_files(meta, in_view);
        let tree = crate::treeitem::view_entries(&meta.items, in_view);
        // Only the agent's own copy gets the agent's progress token, and only its notifications
        // reach the agent (as they arrive); every other copy's are dropped unread.
        let token = meta.progress_token.clone().filter(|_| is_agent);
        let call_meta = token.clone().map(|t| json!({"progressToken": t}));
        let deadline = copy.deadline();
        let client = &*self.broker;
        let agent_clearance = agent_clearance_of(meta);
        let mut relay =
            CopyRelay::new(agent, is_agent, token, inadmissible, deadline).with_raise(move || {
                client
                    .raise_copy(call, gi, &agent_clearance)
                    .map_err(|e| e.to_string())
            });
        // Sub-phases of `copy` for `germline bench` (a few clock reads per call).
        let mut marks = [0u64; 5];
        let us = micros;
        *self.data_sent = true;
        let mut state_dir = None;
        phases.lap("copy.prepare", t);
        let r = (|| {
            let s = Instant::now();
            g.prepare_copy_view(&mut copy, &files, &tree, writable)?;
            if let Some(st) = &start_state {
                let d = copy.state_dir()?;
                d.fill(st)?;
                state_dir = Some(d);
            }
            marks[0] = us(s);
            let s = Instant::now();
            copy.deliver(&files)?;
            marks[1] = us(s);
            // What is left of the handshake sent at the fork (0 once the copy answered it).
            let s = Instant::now();
            copy.initialize()?;
            marks[4] = us(s);
            let s = Instant::now();
            let v = copy.mcp_call_relayed(&meta.tool, args, call_meta, &mut |m| relay.handle(m));
            marks[2] = us(s);
            v
        })();
        // The layers of the directories of the workspaces whose consumers this copy's group
        // holds (issue 27), held past its end so they are read once it is retired; every other
        // copy's go with it, unread.
        let mut layers = Vec::new();
        let commits = commits.filter(|_| !rerun && self.writes.journal.is_some());
        for (seen_at, trusted) in commits.iter().flat_map(|c| c.dirs.iter().cloned()) {
            match seen_at.to_str().map(|d| copy.tree_layer(d)) {
                Some(Ok(Some(l))) => layers.push((seen_at, trusted, l)),
                Some(Ok(None)) | None => {}
                Some(Err(e)) => {
                    copy.kill();
                    return Err(said(format!("writes: {e}")));
                }
            }
        }
        let s = Instant::now();
        let cancelled = cancel.as_ref().is_some_and(|c| c.fired());
        let r = if cancelled {
            // The agent cancelled the call: the copy is killed now with every descendant and
            // its cgroup emptied and removed (not frozen for later: the agent is waiting for
            // its next request, and nothing of the copy may run on).
            copy.kill();
            drop(copy);
            Err(germline_sandbox::Error::Cancelled)
        } else {
            // Killed now; the kernel's exit of the copy completes off the call's path.
            g.retire(copy, r)
        };
        marks[3] = us(s);
        phases.lap("copy", t);
        phases.extend([
            ("copy.mounts", marks[0]),
            ("copy.deliver", marks[1]),
            ("copy.init", marks[4]),
            ("copy.mcp", marks[2]),
            ("copy.teardown", marks[3]),
        ]);
        // What the copy left in its state tmpfs, read once it is frozen (its descriptor keeps
        // the tmpfs after the copy is gone). A re-run or a cancelled call commits nothing.
        let left = match (&state_dir, rerun || cancelled) {
            (Some(d), false) => Some(d.read()),
            _ => None,
        };
        drop(state_dir);
        let s = Instant::now();
        // The call's last copy, with no state in files to commit under the open call: its end
        // and the call's in one round trip; the call's finish then has its record.
        let (outcome, requests) = if last && !rerun && self.state.is_none() {
            let (o, r, record) = self.broker.end_last_copy(call, gi).map_err(broker_failed)?;
            *ended = Some(record);
            (o, r)
        } else {
            self.broker.end_copy(call, gi).map_err(broker_failed)?
        };
        self.last_requests
            .extend(requests.into_iter().map(|r| (gi, r)));
        phases.lap("broker.end_copy", s);
        if let (Some(st), Some(left), Some(before)) = (self.state, left, &start_state) {
            let s = Instant::now();
            let left = left.map_err(|e| said(format!("state in files: {e}")))?;
            if crate::state::hash(&left) != crate::state::hash(before) {
                // Durable before the pointer names it; the broker labels the pointer with
                // the copy's output label (refused outside the horizon). No sweep between.
                let _held = st
                    .shared()
                    .map_err(|e| said(format!("state in files: {e}")))?;
                let generation = st
                    .store(&left)
                    .map_err(|e| said(format!("state in files: {e}")))?;
                self.broker
                    .commit_files(call, gi, &generation)
                    .map_err(broker_failed)?;
            }
            phases.lap("state.commit", s);
        }
        let r = r.map_err(ToolFailure::Copy).and_then(tool_result);
        // Writes: only a copy that answered, not cancelled, commits (docs/policy.md "Writes").
        if let (Some(journal), false, true, Some(commits)) =
            (&self.writes.journal, cancelled, r.is_ok(), &commits)
        {
            if !layers.is_empty() {
                let s = Instant::now();
                let mut trees = Vec::new();
                // Sub-laps (branch git40): reading the layers back, diffing them against the
                // views, releasing the slots, and deciding and committing.
                let (mut read_us, mut diff_us) = (0, 0);
                for (seen_at, trusted, layer) in &layers {
                    let t = Instant::now();
                    let left = layer.read().map_err(|e| said(format!("writes: {e}")))?;
                    read_us += crate::laps::micros(t);
                    let t = Instant::now();
                    let ops = crate::writes::diff(meta, in_view, seen_at, &left);
                    diff_us += crate::laps::micros(t);
                    trees.push((trusted.clone(), ops, left.skipped));
                }
                phases.took("writes.read", read_us);
                phases.took("writes.diff", diff_us);
                let t = Instant::now();
                drop(layers);
                phases.lap("writes.release", t);
                let t = Instant::now();
                let w = crate::writes::commit_all(
                    journal,
                    meta.policy.as_deref(),
                    &outcome.label,
                    &commits.clearance,
                    &trees,
                );
                if !w.is_null() {
                    let told = crate::workspaces::told_agent(w, commits, &agent_clearance_of(meta));
                    self.writes.summary =
                        Some(crate::workspaces::merge(self.writes.summary.take(), told));
                }
                phases.lap("writes.decide", t);
                phases.lap("writes.commit", s);
            }
        }
        Ok((r, outcome.label.clone(), outcome, relay.answered))
    }

    /// One probe or control re-run (crate::evidence): a single copy with `view`'s items,
    /// served by the broker from `spec` (nothing delivered). Returns its request digests to
    /// the destination, in order.
    pub(crate) fn replay_copy(
        &mut self,
        job: &crate::evidence::Job,
        view: &[String],
    ) -> Result<Vec<String>, RunError> {
        let (meta, spec) = (&job.meta, &job.spec);
        let (call, twin, _) = begin(
            self.broker,
            self.release,
            self.user,
            meta,
            PlanMode::NoSplit,
            false,
            Some(spec),
        )?;
        let in_view = |i: &ArgItem| view.iter().any(|v| v == &i.name);
        let job = CopyJob {
            call,
            group: 0,
            meta,
            in_view: &in_view,
            is_agent: false,
            inadmissible: Some(
                "germline: a probe or control re-run never reaches the agent".into(),
            ),
            twin: job.twin_on.then_some((twin.time_ns, twin.seed)),
            rerun: true,
            last: false,
            copy: None,
            commits: None,
        };
        let mut link = Buffered::default();
        let mut agent = Agent {
            link: &mut link,
            capabilities: json!({}),
        };
        let r = self.run_copy(job, &mut agent, &mut Laps::new(), &mut None);
        let end = self.broker.end_call(call);
        let (_, _, out, _) = r?;
        end.map_err(broker_failed)?;
        Ok(out.requests.get(&spec.host).cloned().unwrap_or_default())
    }
}

/// The pipeline on in-memory fakes of its two seams, without root: the fakes keep what a
/// germline and a broker would (Plan is the policy crate's own), so the pipeline's rules run
/// for real: which groups get copies, what each copy sees, what reaches the agent.
#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::BTreeSet;
    use std::path::Path;
    use std::rc::Rc;

    use germline_policy::plan::{plan, PlanInput};
    use germline_policy::Policy;
    use germline_release::manifest::Manifest;
    use germline_sandbox::Error as SandboxError;

    use super::*;

    /// What happened, in order, across the source and its copies.
    type Events = Rc<RefCell<Vec<String>>>;

    /// A germline stand-in: hands out numbered copies; some takes or calls fail.
    struct FakeSource {
        events: Events,
        taken: usize,
        /// Takes (0-based, in order) that fail, as a germline whose fork is refused.
        fail_takes: BTreeSet<usize>,
        /// A copy that sees a non-empty value of this argument crashes during its call.
        crash_with: Option<&'static str>,
        /// A copy that sees a non-empty value of this argument answers with a JSON-RPC error.
        rpc_error_with: Option<&'static str>,
        /// The copy (by take) during whose call the agent cancels.
        cancel_in: Option<usize>,
    }

    struct FakeCopy {
        n: usize,
        events: Events,
        files_in_view: usize,
        crash_with: Option<&'static str>,
        rpc_error_with: Option<&'static str>,
        cancel_in: Option<usize>,
        cancel: Option<Arc<relay::Cancel>>,
    }

    impl Drop for FakeCopy {
        fn drop(&mut self) {
            self.events.borrow_mut().push(format!("drop {}", self.n));
        }
    }

    impl FakeSource {
        fn new() -> FakeSource {
            FakeSource {
                events: Rc::default(),
                taken: 0,
                fail_takes: BTreeSet::new(),
                crash_with: None,
                rpc_error_with: None,
                cancel_in: None,
            }
        }
        fn events(&self) -> Vec<String> {
            self.events.borrow().clone()
        }
        fn count(&self, prefix: &str) -> usize {
            self.events()
                .iter()
                .filter(|e| e.starts_with(prefix))
                .count()
        }
    }

    impl CopySource for FakeSource {
        type Copy = FakeCopy;
        fn call_begins(&mut self) {
            self.events.borrow_mut().push("call_begins".into());
        }
        fn set_pool_capabilities(&mut self, _caps: &Value) {}
        fn want_depth(&mut self, groups: usize) {
            self.events.borrow_mut().push(format!("depth {groups}"));
        }
        fn copy_for(&mut self, _caps: &Value) -> SandboxResult<FakeCopy> {
            let n = self.taken;
            self.taken += 1;
            if self.fail_takes.contains(&n) {
                self.events.borrow_mut().push(format!("refused {n}"));
                return Err(SandboxError::CopyRefused(format!("fork {n} refused")));
            }
            self.events.borrow_mut().push(format!("take {n}"));
            Ok(FakeCopy {
                n,
                events: self.events.clone(),
                files_in_view: 0,
                crash_with: self.crash_with,
                rpc_error_with: self.rpc_error_with,
                cancel_in: self.cancel_in,
                cancel: None,
            })
        }
        fn fork_phases(&self) -> &[(&'static str, u64)] {
            &[]
        }
        fn prepare_copy(
            &mut self,
            copy: &mut FakeCopy,
            files: &[(String, Vec<u8>, bool)],
        ) -> SandboxResult<()> {
            copy.files_in_view = files.iter().filter(|f| f.2).count();
            Ok(())
        }
        fn retire(&mut self, copy: FakeCopy, result: SandboxResult<Value>) -> SandboxResult<Value> {
            self.events.borrow_mut().push(format!("retire {}", copy.n));
            result
        }
    }

    impl SourcedCopy for FakeCopy {
        fn netns(&self) -> std::io::Result<File> {
            File::open("/dev/null")
        }
        fn deadline(&self) -> Instant {
            Instant::now() + std::time::Duration::from_secs(30)
        }
        fn set_twin(&mut self, _twin: Option<(u128, u64)>) {}
        fn set_cancel(&mut self, cancel: Option<Arc<relay::Cancel>>) {
            self.cancel = cancel;
        }
        fn kill(&mut self) {
            self.events.borrow_mut().push(format!("kill {}", self.n));
        }
        fn deliver(&mut self, _files: &[(String, Vec<u8>, bool)]) -> SandboxResult<()> {
            Ok(())
        }
        fn initialize(&mut self) -> SandboxResult<()> {
            Ok(())
        }
        /// Says, in a log notification and in its answer, which arguments it was given.
        fn mcp_call_relayed(
            &mut self,
            _tool: &str,
            arguments: Value,
            _meta: Option<Value>,
            handler: &mut dyn FnMut(&Value) -> Option<Value>,
        ) -> SandboxResult<Value> {
            let seen = seen(&arguments);
            self.events
                .borrow_mut()
                .push(format!("call {} saw {seen}", self.n));
            handler(&json!({"jsonrpc": "2.0", "method": "notifications/message",
                            "params": {"level": "info", "data": format!("copy {} saw {seen}", self.n)}}));
            if let Some(arg) = self.crash_with {
                if seen.contains(arg) {
                    return Err(SandboxError::Crashed(format!(
                        "copy {} says: {seen}",
                        self.n
                    )));
                }
            }
            if let Some(arg) = self.rpc_error_with {
                if seen.contains(arg) {
                    return Err(SandboxError::Server {
                        method: "tools/call".into(),
                        error: json!({"code": -32602, "message": format!("copy {} says: {seen}", self.n),
                                      "data": {"n": self.n}}),
                    });
                }
            }
            if self.cancel_in == Some(self.n) {
                // The agent cancels while this copy runs: its wait ends as the real one's.
                let c = self.cancel.as_ref().expect("the call's cancellation");
                c.fire();
                return Err(SandboxError::Cancelled);
            }
            Ok(
                json!({"content": [{"type": "text", "text": format!("copy {} saw {seen}", self.n)}],
                      "isError": false}),
            )
        }
    }

    /// The names of the non-empty arguments a copy got, sorted, comma-separated.
    fn seen(arguments: &Value) -> String {
        let mut names: Vec<&str> = arguments
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(_, v)| v.as_str().is_some_and(|s| !s.is_empty()))
            .map(|(k, _)| k.as_str())
            .collect();
        names.sort();
        names.join(",")
    }

    /// A broker stand-in: Plan by the policy crate, each copy's label its view's, a log.
    #[derive(Default)]
    struct FakeBroker {
        down: bool,
        plan: RefCell<Option<Plan>>,
        started: RefCell<Vec<usize>>,
        ended_copies: RefCell<Vec<usize>>,
        ended_calls: RefCell<usize>,
        /// Groups whose end ended the call too (`end_last_copy`).
        ended_last: RefCell<Vec<usize>>,
    }

    impl BrokerApi for FakeBroker {
        fn begin_call(&self, call: BeginCall) -> Result<(u64, Twin, Plan), ControlError> {
            if self.down {
                return Err(ControlError::Closed);
            }
            let input = PlanInput {
                items: &call.items,
                hosts: &call.hosts,
                consumers: &call.consumers,
            };
            let p = plan(input, call.mode).map_err(|e| ControlError::Refused(e.to_string()))?;
            *self.plan.borrow_mut() = Some(p.clone());
            Ok((
                7,
                Twin {
                    time_ns: 1,
                    seed: 2,
                },
                p,
            ))
        }
        fn reconnect(&mut self) -> Result<(), SidecarError> {
            if self.down {
                Err(SidecarError::Unreachable {
                    socket: "/fake/broker.sock".into(),
                    source: ControlError::Closed,
                })
            } else {
                Ok(())
            }
        }
        fn start_copy(
            &self,
            _call: u64,
            group: usize,
            _netns: BorrowedFd<'_>,
            _deadline: Instant,
        ) -> Result<String, ControlError> {
            self.started.borrow_mut().push(group);
            Ok(String::new())
        }
        fn raise_copy(
            &self,
            _call: u64,
            _group: usize,
            _label: &Label,
        ) -> Result<(), ControlError> {
            Ok(())
        }
        fn end_copy(
            &self,
            _call: u64,
            group: usize,
        ) -> Result<(CopyOutcome, Vec<RequestEvent>), ControlError> {
            self.ended_copies.borrow_mut().push(group);
            let label = self
                .plan
                .borrow()
                .as_ref()
                .and_then(|p| p.groups.get(group).map(|g| g.view_label.clone()))
                .ok_or(ControlError::Closed)?;
            let outcome = CopyOutcome {
                label,
                triggers: Vec::new(),
                contacted: Default::default(),
                requests: Default::default(),
            };
            Ok((outcome, Vec::new()))
        }
        fn end_call(&self, call: u64) -> Result<CallRecord, ControlError> {
            *self.ended_calls.borrow_mut() += 1;
            Ok(CallRecord {
                call,
                release: String::new(),
                twin: Twin {
                    time_ns: 1,
                    seed: 2,
                },
                delivered: Default::default(),
                copies: Default::default(),
            })
        }
        fn end_last_copy(
            &self,
            call: u64,
            group: usize,
        ) -> Result<(CopyOutcome, Vec<RequestEvent>, CallRecord), ControlError> {
            self.ended_last.borrow_mut().push(group);
            let (o, r) = self.end_copy(call, group)?;
            Ok((o, r, self.end_call(call)?))
        }
    }

    /// Arguments x, y, z labelled a, b, c; the agent is cleared for a, recipient r1 for b,
    /// r2 for c: a call consumed by the first `n` of them has `n` groups.
    fn meta(n: usize) -> CallMeta {
        let policy = Policy::parse(
            Path::new("p.toml"),
            r#"[labels]
a = "a"
b = "b"
c = "c"

[[argument]]
tool = "t"
name = "x"
label = ["a"]

[[argument]]
tool = "t"
name = "y"
label = ["b"]

[[argument]]
tool = "t"
name = "z"
label = ["c"]

[consumers]
agent = ["a"]
r1 = ["b"]
r2 = ["c"]
"#,
        )
        .expect("policy");
        let tool: germline_release::manifest::Tool =
            serde_json::from_value(json!({"destinations": {"hosts": []}})).expect("tool");
        let consumers: Vec<String> = ["agent", "r1", "r2"][..n]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let args = json!({"x": "xx", "y": "yy", "z": "zz"});
        crate::callmeta::build(&policy, "t", &tool, &args, None, &consumers).expect("meta")
    }

    fn release() -> Release {
        let m: Manifest = serde_json::from_value(json!({
            "schema": germline_release::manifest::SCHEMA, "name": "fake", "version": "1.0.0",
            "language": "python", "entry": ["python3", "-m", "fake"],
            "initialisation": {"imports": []}, "tools": {}, "readable_paths": [],
            "deterministic": true,
        }))
        .expect("manifest");
        Release::unverified_for_tests(m)
    }

    /// A link that carries a cancellation (as stdio's does).
    struct CancelLink {
        inner: Buffered,
        cancel: Arc<relay::Cancel>,
    }

    impl relay::AgentLink for CancelLink {
        fn notify(&mut self, msg: &Value) {
            self.inner.notify(msg);
        }
        fn request(&mut self, m: &str, p: Value, d: Instant) -> Result<Value, Value> {
            self.inner.request(m, p, d)
        }
        fn cancel(&self) -> Option<Arc<relay::Cancel>> {
            Some(self.cancel.clone())
        }
    }

    /// Runs one call through the stages; returns its result and what reached the agent's
    /// link as notifications.
    fn call(
        source: &mut FakeSource,
        broker: &mut FakeBroker,
        meta: &CallMeta,
    ) -> (Result<Outcome, RunError>, Vec<Value>) {
        let release = release();
        let mut evidence = Evidence::disabled();
        let limiter = Limiter::off();
        let mut data_sent = false;
        let mut requests = Vec::new();
        let mut stages = Stages {
            source,
            broker,
            release: &release,
            user: "tester",
            evidence: &mut evidence,
            limiter: &limiter,
            metrics: None,
            twin_on: true,
            outbox: None,
            mode: Mode::Germline,
            data_sent: &mut data_sent,
            last_requests: &mut requests,
            state: None,
            writes: CallWrites::default(),
            concurrent: false,
        };
        let mut link = CancelLink {
            inner: Buffered::default(),
            cancel: Arc::new(relay::Cancel::new().expect("socketpair")),
        };
        let mut agent = Agent {
            link: &mut link,
            capabilities: json!({}),
        };
        let r = stages.call(meta, PlanMode::Split, &mut agent);
        (r, link.inner.notifications)
    }

    fn text(result: &Value) -> &str {
        result
            .pointer("/content/0/text")
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    #[test]
    fn plan_gives_one_copy_per_group_each_with_its_view() {
        for n in 1..=3 {
            let (mut source, mut broker) = (FakeSource::new(), FakeBroker::default());
            let (r, _) = call(&mut source, &mut broker, &meta(n));
            let out = r.expect("the call");
            assert_eq!(out.copies, n, "groups of a call with {n} consumers");
            assert_eq!(source.count("take"), n, "{:?}", source.events());
            assert_eq!(source.count("retire"), n, "{:?}", source.events());
            let mut started = broker.started.borrow().clone();
            started.sort();
            assert_eq!(started, (0..n).collect::<Vec<_>>());
            assert_eq!(broker.ended_copies.borrow().len(), n);
            // The last copy's end ended the call (one round trip); the finish used its record.
            assert_eq!(broker.ended_last.borrow().as_slice(), [n - 1]);
            assert_eq!(*broker.ended_calls.borrow(), 1);
            // Each copy saw exactly its group's one argument, and together the n groups'.
            let mut seen: Vec<String> = source
                .events()
                .iter()
                .filter_map(|e| e.split_once(" saw ").map(|(_, s)| s.to_string()))
                .collect();
            seen.sort();
            assert_eq!(seen, ["x", "y", "z"][..n], "{:?}", source.events());
            // With several groups, every copy is taken before the first gets any data.
            if n > 1 {
                let first_call = source
                    .events()
                    .iter()
                    .position(|e| e.starts_with("call "))
                    .expect("a call");
                let takes_before = source.events()[..first_call]
                    .iter()
                    .filter(|e| e.starts_with("take"))
                    .count();
                assert_eq!(takes_before, n, "{:?}", source.events());
                // The pool is asked for as many copies as the call has groups, before the
                // first is taken.
                let depth = source
                    .events()
                    .iter()
                    .position(|e| *e == format!("depth {n}"));
                let first_take = source.events().iter().position(|e| e.starts_with("take"));
                assert!(
                    depth.is_some() && depth < first_take,
                    "{:?}",
                    source.events()
                );
            } else {
                assert_eq!(source.count("depth"), 0, "{:?}", source.events());
            }
            assert_eq!(out.result["_meta"]["germline"]["copies"], json!(n));
        }
    }

    #[test]
    fn only_the_agents_copy_answers_the_agent() {
        let (mut source, mut broker) = (FakeSource::new(), FakeBroker::default());
        let (r, notes) = call(&mut source, &mut broker, &meta(3));
        let out = r.expect("the call");
        // The answer and the one notification are the agent's copy's, which saw x only.
        assert!(text(&out.result).ends_with("saw x"), "{}", out.result);
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0]["params"]["data"]
                .as_str()
                .is_some_and(|d| d.ends_with("saw x")),
            "{notes:?}"
        );
        assert!(out.result["_meta"]["germline"].get("notice").is_none());
        // The agent's result is labelled by its own group's view, not by the others'.
        assert_eq!(out.label, Some(Label::of(["a"])));
    }

    #[test]
    fn another_groups_failing_copy_gives_the_agent_a_fixed_notice_only() {
        let (mut source, mut broker) = (FakeSource::new(), FakeBroker::default());
        source.crash_with = Some("y");
        let (r, notes) = call(&mut source, &mut broker, &meta(3));
        let out = r.expect("the agent's copy answered");
        assert!(text(&out.result).ends_with("saw x"), "{}", out.result);
        assert_eq!(
            out.result["_meta"]["germline"]["notice"],
            json!(OTHER_COPY_FAILED)
        );
        // The failing copy's own words reach the agent nowhere.
        let all = format!("{} {notes:?}", out.result);
        assert!(!all.contains("says"), "{all}");
        assert!(!all.contains("saw y"), "{all}");
        assert_eq!(*broker.ended_calls.borrow(), 1);
    }

    #[test]
    fn the_agents_failing_copy_fails_the_call_as_a_tool_failure() {
        let (mut source, mut broker) = (FakeSource::new(), FakeBroker::default());
        source.crash_with = Some("x");
        let (r, _) = call(&mut source, &mut broker, &meta(2));
        let e = r.expect_err("the agent's copy crashed");
        assert_eq!(e.outcome(), "tool_failed", "{e}");
        assert_eq!(*broker.ended_calls.borrow(), 1);
    }

    #[test]
    fn a_copy_that_cannot_be_taken_fails_the_call_and_the_call_still_ends() {
        let (mut source, mut broker) = (FakeSource::new(), FakeBroker::default());
        // Group 1's copy is refused when taken ahead (take 1) and again in its turn (take 3).
        source.fail_takes = [1, 3].into();
        let (r, _) = call(&mut source, &mut broker, &meta(3));
        let e = r.expect_err("a group had no copy");
        assert_eq!(e.outcome(), "sandbox_failed", "{e}");
        // Group 0 ran; group 2 never got data; the broker's call was ended.
        assert_eq!(source.count("call "), 1, "{:?}", source.events());
        assert_eq!(*broker.ended_calls.borrow(), 1);
        // A refusal when taken ahead alone is retried in the copy's turn.
        let (mut source, mut broker) = (FakeSource::new(), FakeBroker::default());
        source.fail_takes = [1].into();
        let (r, _) = call(&mut source, &mut broker, &meta(3));
        assert_eq!(r.expect("retried").copies, 3);
        assert_eq!(source.count("call "), 3, "{:?}", source.events());
    }

    #[test]
    fn a_broker_that_is_down_fails_the_call_before_any_copy() {
        let (mut source, mut broker) = (FakeSource::new(), FakeBroker::default());
        broker.down = true;
        let (r, notes) = call(&mut source, &mut broker, &meta(2));
        let e = r.expect_err("no broker");
        assert_eq!(e.outcome(), "broker_failed", "{e}");
        assert!(
            e.to_string().contains(
                "the broker at /fake/broker.sock is not reachable: control channel closed"
            ),
            "{e}"
        );
        assert_eq!(source.count("take"), 0, "{:?}", source.events());
        assert!(notes.is_empty());
    }

    #[test]
    fn the_agents_copys_json_rpc_error_reaches_the_agent_and_anothers_does_not() {
        let (mut source, mut broker) = (FakeSource::new(), FakeBroker::default());
        source.rpc_error_with = Some("x");
        let (r, _) = call(&mut source, &mut broker, &meta(2));
        let e = r.expect_err("the agent's copy answered with an error");
        assert_eq!(
            e.server_error(),
            Some(&json!({"code": -32602, "message": "copy 0 says: x", "data": {"n": 0}})),
            "{e}"
        );
        // Another group's error object stays the fixed notice.
        let (mut source, mut broker) = (FakeSource::new(), FakeBroker::default());
        source.rpc_error_with = Some("y");
        let (r, _) = call(&mut source, &mut broker, &meta(2));
        let out = r.expect("the agent's copy answered");
        assert_eq!(
            out.result["_meta"]["germline"]["notice"],
            json!(OTHER_COPY_FAILED)
        );
        assert!(!out.result.to_string().contains("says"), "{}", out.result);
        // germline's own failures carry no server error.
        let (mut source, mut broker) = (FakeSource::new(), FakeBroker::default());
        source.crash_with = Some("x");
        let (r, _) = call(&mut source, &mut broker, &meta(2));
        assert_eq!(r.expect_err("crashed").server_error(), None);
    }

    #[test]
    fn a_cancel_kills_the_running_copy_and_every_copy_taken_ahead_and_runs_no_more() {
        let (mut source, mut broker) = (FakeSource::new(), FakeBroker::default());
        source.cancel_in = Some(0);
        let (r, notes) = call(&mut source, &mut broker, &meta(3));
        let e = r.expect_err("cancelled");
        assert!(matches!(e, RunError::Cancelled), "{e}");
        let ev = source.events();
        // Copy 0 was killed (not retired for later), the copies taken ahead for groups 1 and
        // 2 were dropped (killed) without a call, and the broker ended the copy and the call.
        assert!(ev.contains(&"kill 0".to_string()), "{ev:?}");
        assert_eq!(source.count("retire"), 0, "{ev:?}");
        assert_eq!(source.count("call "), 1, "{ev:?}");
        for n in 1..3 {
            assert!(ev.contains(&format!("drop {n}")), "{ev:?}");
        }
        assert_eq!(broker.ended_copies.borrow().as_slice(), [0]);
        assert_eq!(*broker.ended_calls.borrow(), 1);
        // Only what copy 0 said before the cancel reached the agent (it is the agent's).
        assert!(notes.len() <= 1, "{notes:?}");
    }
}
