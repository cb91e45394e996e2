//! One germline call's records and each copy's label (paper Algorithm 1 lines 5-28,
//! Definition 4, Eq. (2) and the Remark after Corollary 2).
//!
//! This is the pure half of the broker: given the Plan, it decides what a copy's request gets
//! (delivered, replayed, placeholder or denied), keeps the delivered log `Rel[e]`, raises
//! triggers, and tracks the label `L` of each copy. The broker does the I/O around it.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use crate::label::Label;
use crate::plan::{Group, Member, Plan};

/// A request digest (SHA-256 of the canonical request, computed by the broker).
pub type Digest = [u8; 32];

/// Which terms of Eq. (2) are joined. Both on is germline execution; switching one off is the
/// ablation the label regression tests (Table VI) compare against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(default)]
pub struct LabelRules {
    /// Join `ℓ(σ)` of the delivered slot.
    pub slot_label: bool,
    /// Join `c(e)` whenever the copy sends a request to an admissible host with a non-empty
    /// record, matched or not (the match bit).
    pub match_bit: bool,
}

impl Default for LabelRules {
    fn default() -> Self {
        Self {
            slot_label: true,
            match_bit: true,
        }
    }
}

/// The call's static context: the Plan and the clearance of every declared host.
#[derive(Debug, Clone)]
pub struct CallContext {
    plan: Plan,
    hosts: BTreeMap<String, (Label, usize)>,
    rules: LabelRules,
}

impl CallContext {
    /// `hosts` are `D_f` with clearances; each must be served by a group of `plan`.
    pub fn new(plan: Plan, hosts: &[Member], rules: LabelRules) -> Result<Self, CallError> {
        let mut map = BTreeMap::new();
        for h in hosts {
            let g = plan
                .group_of_host(&h.name)
                .ok_or_else(|| CallError::Unplanned(h.name.clone()))?;
            map.insert(h.name.clone(), (h.clearance.clone(), g));
        }
        Ok(Self {
            plan,
            hosts: map,
            rules,
        })
    }

    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// `c(e)` of a declared host, or `None` if `host` is not declared.
    pub fn host_clearance(&self, host: &str) -> Option<&Label> {
        self.hosts.get(host).map(|(c, _)| c)
    }

    /// `true` if `host` is in `D_f`.
    pub fn is_declared(&self, host: &str) -> bool {
        self.hosts.contains_key(host)
    }

    fn group(&self, g: usize) -> &Group {
        &self.plan.groups[g]
    }

    /// `e` admissible for `g`: `c(e) ⊆ c(d)` for every `d ∈ g`, i.e. `c(e) ⊆ κ(g)`.
    pub fn admissible(&self, host: &str, g: usize) -> bool {
        self.hosts
            .get(host)
            .is_some_and(|(c, _)| c.flows_to(&self.group(g).horizon))
    }

    /// `e` comparable for `g`: `e`'s group ran before `g` and `V(e) ⊆ V(g)`.
    pub fn comparable(&self, host: &str, g: usize) -> bool {
        self.hosts
            .get(host)
            .is_some_and(|&(_, ge)| ge < g && self.group(g).view_contains(self.group(ge)))
    }

    fn strictly_smaller_view(&self, host: &str, g: usize) -> bool {
        self.hosts
            .get(host)
            .is_some_and(|&(_, ge)| self.group(ge).view.len() < self.group(g).view.len())
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CallError {
    #[error("declared host {0:?} is served by no group of the plan")]
    Unplanned(String),
}

/// `Rel[e]`: the (request digest, reply) pairs delivered to each host in this call.
///
/// A call's copies run one at a time (A1) unless the release opts into concurrent copies
/// ([`CallRecords::concurrent`]); then the records also know which groups have not ended,
/// and [`CopyTracker::request`] applies the hold rule so that every copy gets exactly the
/// verdicts, label and triggers the sequential run gives it (docs/design/30-performance.md).
#[derive(Debug)]
pub struct CallRecords<R> {
    rel: BTreeMap<String, Vec<(Digest, R)>>,
    /// Concurrent copies: the groups that have not ended yet. `None`: sequential copies.
    pending: Option<BTreeSet<usize>>,
}

impl<R> Default for CallRecords<R> {
    fn default() -> Self {
        Self {
            rel: BTreeMap::new(),
            pending: None,
        }
    }
}

impl<R> CallRecords<R> {
    /// Records of a call whose `groups` copies run concurrently: every group is pending until
    /// [`CallRecords::end_group`].
    pub fn concurrent(groups: usize) -> Self {
        Self {
            rel: BTreeMap::new(),
            pending: Some((0..groups).collect()),
        }
    }

    pub fn is_concurrent(&self) -> bool {
        self.pending.is_some()
    }

    pub fn record(&self, host: &str) -> &[(Digest, R)] {
        self.rel.get(host).map_or(&[], Vec::as_slice)
    }

    /// Group `g`'s copy ended (its outcome was taken): requests held on it may go on.
    pub fn end_group(&mut self, g: usize) {
        if let Some(p) = &mut self.pending {
            p.remove(&g);
        }
    }

    /// Whether group `g` has not ended yet (concurrent copies only; never, sequentially).
    pub fn pending(&self, g: usize) -> bool {
        self.running(g)
    }

    /// Whether every group before `g` ended: `g`'s `finish` (its `absent` triggers) and its
    /// slot snapshot wait for this. Always true for sequential copies.
    pub fn earlier_ended(&self, g: usize) -> bool {
        self.pending
            .as_ref()
            .is_none_or(|p| p.range(..g).next().is_none())
    }

    fn running(&self, g: usize) -> bool {
        self.pending.as_ref().is_some_and(|p| p.contains(&g))
    }
}

/// What the broker answers a copy's request with.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict<'a, R> {
    /// The copy serves this host: deliver, then report the reply with [`CopyTracker::delivered`].
    Deliver,
    /// Positional match with an admissible host: answer the recorded reply.
    Replay(&'a R),
    /// Answer the placeholder `⊥`.
    Placeholder,
    /// The host is not declared for this function: deny.
    Deny,
    /// Concurrent copies only (the hold rule): the host's group is earlier than the copy's,
    /// still running, and has not yet delivered the request at this position, so the
    /// sequential answer is not known yet. Nothing was counted: ask again once the records
    /// grow or that group ends.
    Wait,
}

/// Why a trigger fired.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TriggerKind {
    /// The copy's `position`-th request (1-based) differs from the recorded one (or there is
    /// none recorded at that position).
    Mismatch { position: usize, digest: Digest },
    /// The copy ended having sent `sent` requests where `recorded` were delivered.
    Absent { sent: usize, recorded: usize },
    /// The broker denied a request of the copy (issue 25 item 7). `name_sha256` is the hex
    /// SHA-256 of the name the copy asked for: the name itself is copy-controlled text that
    /// could carry a secret, so only its digest is kept (the trigger's `host` is a declared
    /// host, or [`UNDECLARED`]).
    Denied {
        reason: DenialReason,
        name_sha256: String,
    },
}

impl TriggerKind {
    /// A broker denial, not a tripwire mismatch: there is nothing to re-run against a group's
    /// transcript, so the evidence layer weighs it directly (docs/evidence.md).
    pub fn is_denial(&self) -> bool {
        matches!(self, TriggerKind::Denied { .. })
    }
}

/// The `host` of a denial trigger whose name no declared host matches.
pub const UNDECLARED: &str = "(undeclared)";

/// Most denial triggers one copy keeps (distinct reason and name): a copy flooding the broker
/// with denied requests costs bounded memory; every denial is still counted and logged.
pub const MAX_DENIAL_TRIGGERS: usize = 16;

/// Why the broker denied a copy's request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DenialReason {
    /// A host the manifest does not declare for this call.
    UndeclaredHost,
    /// An IP literal (or `localhost`): never a destination.
    IpLiteral,
    /// An undeclared host named by the `Location` of a redirect a declared host answered this
    /// copy with: the destination chose it, not the release.
    Redirect,
    /// The `Host` header differs from the request target (plain HTTP).
    HostMismatch,
    /// The TLS SNI differs from the CONNECT target.
    SniMismatch,
    /// Inside a CONNECT tunnel, the request names another host than the CONNECT target.
    InnerHostMismatch,
}

impl DenialReason {
    pub fn name(self) -> &'static str {
        match self {
            DenialReason::UndeclaredHost => "undeclared host",
            DenialReason::IpLiteral => "IP literal",
            DenialReason::Redirect => "redirect to an undeclared host",
            DenialReason::HostMismatch => "Host header differs from the request target",
            DenialReason::SniMismatch => "TLS SNI differs from the CONNECT target",
            DenialReason::InnerHostMismatch => "inner Host differs from the CONNECT target",
        }
    }

    /// Whether the release alone chose what was denied. A redirect's target was chosen by the
    /// destination's reply (for `host_of_argument` tools, a destination the agent named), so
    /// it is recorded but never weighed against the release (docs/evidence.md).
    pub fn blames_release(self) -> bool {
        !matches!(self, DenialReason::Redirect)
    }
}

/// An online mismatch between a copy and a host's record (Section IV-F).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Trigger {
    pub group: usize,
    pub host: String,
    pub kind: TriggerKind,
}

fn hex_digest(d: &Digest) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// The broker's state for one live copy.
#[derive(Debug)]
pub struct CopyTracker {
    group: usize,
    label: Label,
    sent: BTreeMap<String, usize>,
    triggered: BTreeSet<String>,
    triggers: Vec<Trigger>,
    /// Every request this copy sent to a declared host outside its group, in order (the
    /// evidence layer's request sequences).
    requests: BTreeMap<String, Vec<Digest>>,
    /// Undeclared hosts named by redirects this copy was answered with (see
    /// [`DenialReason::Redirect`]).
    redirects: BTreeSet<String>,
    /// Denial triggers kept so far, by reason and name digest (at most
    /// [`MAX_DENIAL_TRIGGERS`]).
    denials: BTreeSet<(DenialReason, String)>,
}

/// What a finished copy leaves: its output label `ℓ(g)` and its triggers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct CopyOutcome {
    pub label: Label,
    pub triggers: Vec<Trigger>,
    /// Declared hosts outside the copy's group it sent requests to, with counts (what a lazy
    /// plan's fork rule reads).
    pub contacted: BTreeMap<String, usize>,
    /// The digests (hex) of those requests, per host, in order.
    #[serde(default)]
    pub requests: BTreeMap<String, Vec<String>>,
}

impl CopyTracker {
    /// A copy of group `g` starts with `L ← ℓ(V(g)) ⊔ ℓ(σ)`.
    pub fn start(cx: &CallContext, g: usize, slot_label: &Label) -> Self {
        let mut label = cx.group(g).view_label.clone();
        if cx.rules.slot_label {
            label.join(slot_label);
        }
        Self {
            group: g,
            label,
            sent: BTreeMap::new(),
            triggered: BTreeSet::new(),
            triggers: Vec::new(),
            requests: BTreeMap::new(),
            redirects: BTreeSet::new(),
            denials: BTreeSet::new(),
        }
    }

    /// Notes the host a redirect answered to this copy names (its `Location`), unless the call
    /// declares it: a later request of the copy to it is denied as a redirect.
    pub fn redirected_to(&mut self, cx: &CallContext, host: &str) {
        let host = host.to_ascii_lowercase();
        if !cx.is_declared(&host) && self.redirects.len() < MAX_DENIAL_TRIGGERS {
            self.redirects.insert(host);
        }
    }

    /// Records a request the broker denied as a trigger: `name` is what the copy asked for,
    /// kept only as its digest `name_sha256` (hex SHA-256, computed by the broker); `reason`
    /// why it was denied (an undeclared name that a redirect answered to this copy named
    /// becomes [`DenialReason::Redirect`]). `target` is the declared host the request was made
    /// to, if any. One trigger per reason and name, at most [`MAX_DENIAL_TRIGGERS`] per copy.
    /// Returns the reason recorded.
    pub fn denied(
        &mut self,
        cx: &CallContext,
        target: Option<&str>,
        name: &str,
        name_sha256: String,
        mut reason: DenialReason,
    ) -> DenialReason {
        let lower = name.to_ascii_lowercase();
        if reason == DenialReason::UndeclaredHost && self.redirects.contains(&lower) {
            reason = DenialReason::Redirect;
        }
        if self.denials.len() < MAX_DENIAL_TRIGGERS
            && self.denials.insert((reason, name_sha256.clone()))
        {
            let host = target
                .or(Some(lower.as_str()))
                .filter(|h| cx.is_declared(h))
                .unwrap_or(UNDECLARED)
                .to_string();
            self.triggers.push(Trigger {
                group: self.group,
                host,
                kind: TriggerKind::Denied {
                    reason,
                    name_sha256,
                },
            });
        }
        reason
    }

    /// The copy's current label: what a slot write made now is stored with.
    pub fn label(&self) -> &Label {
        &self.label
    }

    /// Joins `l` into the copy's label: an input the shim handed the copy during the call
    /// (the agent's answer to a relayed sampling or elicitation request), so that slot writes
    /// and the output label made after it carry it.
    pub fn raise(&mut self, l: &Label) {
        self.label.join(l);
    }

    pub fn group(&self) -> usize {
        self.group
    }

    /// Joins the label of a slot snapshot taken after the copy started (concurrent copies:
    /// `g`'s snapshot waits for the earlier groups of its horizon), as [`CopyTracker::start`]
    /// would have: `L ← L ⊔ ℓ(σ)` when the rules join slot labels.
    pub fn join_slot_label(&mut self, cx: &CallContext, slot_label: &Label) {
        if cx.rules.slot_label {
            self.label.join(slot_label);
        }
    }

    /// The positional rule for a request to `host` with digest `q`.
    pub fn request<'r, R>(
        &mut self,
        cx: &CallContext,
        records: &'r CallRecords<R>,
        host: &str,
        q: &Digest,
    ) -> Verdict<'r, R> {
        let g = self.group;
        if !cx.hosts.contains_key(host) {
            return Verdict::Deny;
        }
        if cx.group(g).has_host(host) {
            return Verdict::Deliver;
        }
        let position = self.sent.get(host).copied().unwrap_or(0) + 1;
        let ge = cx.hosts[host].1;
        // The hold rule: sequentially, every earlier group has ended when `g` runs, so
        // `Rel[e]`'s entry at `position` (and whether `Rel[e]` is empty, the match bit) is
        // final. Concurrently it is final once `Rel[e]` has `position` entries (records only
        // grow) or `e`'s group ended; until then the request waits.
        if ge < g && records.running(ge) && records.record(host).len() < position {
            return Verdict::Wait;
        }
        self.note(host, q);
        // Sequentially a later group has not run yet: its hosts' records read as empty.
        let rel = if records.is_concurrent() && ge > g {
            &[]
        } else {
            records.record(host)
        };
        let admissible = cx.admissible(host, g);
        if admissible && !rel.is_empty() && cx.rules.match_bit {
            // Whether it matches is information about data inside c(e).
            let c = &cx.hosts[host].0;
            self.label.join(c);
        }
        let recorded = rel.get(position - 1);
        let matched = recorded.is_some_and(|(q2, _)| q2 == q);
        if let (true, true, Some((_, reply))) = (matched, admissible, recorded) {
            return Verdict::Replay(reply);
        }
        if !matched && cx.comparable(host, g) && self.triggered.insert(host.to_string()) {
            self.triggers.push(Trigger {
                group: g,
                host: host.to_string(),
                kind: TriggerKind::Mismatch {
                    position,
                    digest: *q,
                },
            });
        }
        Verdict::Placeholder
    }

    /// Counts a request to `host` outside the copy's group and keeps its digest; returns its
    /// position (1-based).
    pub fn note(&mut self, host: &str, q: &Digest) -> usize {
        self.requests.entry(host.to_string()).or_default().push(*q);
        let n = self.sent.entry(host.to_string()).or_insert(0);
        *n += 1;
        *n
    }

    /// Records a delivered request and its reply: `Rel[e] += (q, ρ)`, `L ← L ⊔ c(e)`.
    pub fn delivered<R>(
        &mut self,
        cx: &CallContext,
        records: &mut CallRecords<R>,
        host: &str,
        q: Digest,
        reply: R,
    ) {
        if let Some((c, _)) = cx.hosts.get(host) {
            self.label.join(c);
            records
                .rel
                .entry(host.to_string())
                .or_default()
                .push((q, reply));
        }
    }

    /// Ends the copy once every earlier group ended ([`CallRecords::earlier_ended`]); until
    /// then gives the tracker back (concurrent copies only: sequentially it always ends).
    pub fn try_finish<R>(
        self,
        cx: &CallContext,
        records: &CallRecords<R>,
    ) -> Result<CopyOutcome, Box<Self>> {
        if records.earlier_ended(self.group) {
            Ok(self.finish(cx, records))
        } else {
            Err(Box::new(self))
        }
    }

    /// Ends the copy: a comparable host with a strictly smaller view whose record is longer
    /// than what this copy sent raises an `absent` trigger, unless it already has one. With
    /// concurrent copies, call it only once every earlier group ended (see
    /// [`CopyTracker::try_finish`]): the records are final only then.
    pub fn finish<R>(mut self, cx: &CallContext, records: &CallRecords<R>) -> CopyOutcome {
        let g = self.group;
        for (host, rel) in &records.rel {
            let sent = self.sent.get(host).copied().unwrap_or(0);
            if sent < rel.len()
                && cx.comparable(host, g)
                && cx.strictly_smaller_view(host, g)
                && !self.triggered.contains(host)
            {
                self.triggers.push(Trigger {
                    group: g,
                    host: host.clone(),
                    kind: TriggerKind::Absent {
                        sent,
                        recorded: rel.len(),
                    },
                });
            }
        }
        CopyOutcome {
            label: self.label,
            triggers: self.triggers,
            contacted: self.sent,
            requests: self
                .requests
                .into_iter()
                .map(|(h, v)| (h, v.iter().map(hex_digest).collect()))
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{plan, ItemMeta, PlanInput, PlanMode};

    fn m(name: &str, c: &[&str]) -> Member {
        Member {
            name: name.into(),
            clearance: Label::of(c),
        }
    }

    /// Denials become triggers with their reason and the name's digest only; one per reason
    /// and name; at most MAX_DENIAL_TRIGGERS per copy; an undeclared host a redirect named is
    /// a redirect (never weighed against the release), a declared redirect target is not.
    #[test]
    fn denials_are_triggers_with_reasons_digests_and_a_bound() {
        let hosts = [m("ocr.example", &["finance"])];
        let consumers = [m("agent", &["finance"])];
        let p = plan(
            PlanInput {
                items: &[],
                hosts: &hosts,
                consumers: &consumers,
            },
            PlanMode::Split,
        )
        .expect("plan");
        let cx = CallContext::new(p, &hosts, LabelRules::default()).expect("cx");
        let rec: CallRecords<&str> = CallRecords::default();
        let mut c = CopyTracker::start(&cx, 0, &Label::public());
        let secret = "canary-hr-0123.leak.example";
        let d = |s: &str| format!("{:0>64}", s.len());
        assert_eq!(
            c.denied(&cx, None, secret, d(secret), DenialReason::UndeclaredHost),
            DenialReason::UndeclaredHost
        );
        // The same again is one trigger; another reason for it is another.
        c.denied(&cx, None, secret, d(secret), DenialReason::UndeclaredHost);
        c.denied(
            &cx,
            None,
            "10.0.0.1",
            d("10.0.0.1"),
            DenialReason::IpLiteral,
        );
        c.denied(
            &cx,
            Some("ocr.example"),
            "other.example",
            d("other.example"),
            DenialReason::SniMismatch,
        );
        c.redirected_to(&cx, "Elsewhere.Example");
        c.redirected_to(&cx, "ocr.example");
        assert_eq!(
            c.denied(
                &cx,
                None,
                "elsewhere.example",
                d("x"),
                DenialReason::UndeclaredHost
            ),
            DenialReason::Redirect
        );
        for i in 0..100 {
            let n = format!("h{i}.example");
            c.denied(
                &cx,
                None,
                &n,
                format!("{i:064}"),
                DenialReason::UndeclaredHost,
            );
        }
        let out = c.finish(&cx, &rec);
        assert_eq!(out.triggers.len(), MAX_DENIAL_TRIGGERS);
        let kinds: Vec<(&str, DenialReason)> = out.triggers[..4]
            .iter()
            .map(|t| match &t.kind {
                TriggerKind::Denied { reason, .. } => (t.host.as_str(), *reason),
                k => panic!("not a denial: {k:?}"),
            })
            .collect();
        assert_eq!(
            kinds,
            vec![
                (UNDECLARED, DenialReason::UndeclaredHost),
                (UNDECLARED, DenialReason::IpLiteral),
                ("ocr.example", DenialReason::SniMismatch),
                (UNDECLARED, DenialReason::Redirect),
            ]
        );
        // Never the copy's text: the trigger serialises without the secret name.
        let text = serde_json::to_string(&out.triggers).expect("json");
        assert!(
            !text.contains("canary") && !text.contains("elsewhere"),
            "{text}"
        );
        assert!(out.triggers.iter().all(|t| t.kind.is_denial()));
        assert!(!DenialReason::Redirect.blames_release());
        assert!(DenialReason::IpLiteral.blames_release());
    }

    /// Fig. 2c with a Trojan that adds the salary sheet to the OCR request in the full-view
    /// copy: the delivered request comes from the OCR copy; the agent's copy gets a
    /// placeholder and raises one trigger.
    #[test]
    fn fig_2c_mismatch_triggers_once() {
        let items = [
            ItemMeta {
                name: "invoice".into(),
                label: Label::of(["finance"]),
            },
            ItemMeta {
                name: "salary".into(),
                label: Label::of(["hr"]),
            },
        ];
        let hosts = [m("ocr.example", &["finance"])];
        let consumers = [m("agent", &["finance", "hr"])];
        let p = plan(
            PlanInput {
                items: &items,
                hosts: &hosts,
                consumers: &consumers,
            },
            PlanMode::Split,
        )
        .expect("plan");
        let cx = CallContext::new(p.clone(), &hosts, LabelRules::default()).expect("cx");
        let mut rec: CallRecords<&str> = CallRecords::default();

        let mut ocr = CopyTracker::start(&cx, 0, &Label::public());
        assert_eq!(
            ocr.request(&cx, &rec, "ocr.example", &[1; 32]),
            Verdict::Deliver
        );
        ocr.delivered(&cx, &mut rec, "ocr.example", [1; 32], "text");
        assert_eq!(
            ocr.request(&cx, &rec, "evil.example", &[9; 32]),
            Verdict::Deny
        );
        let out = ocr.finish(&cx, &rec);
        assert_eq!(out.label, Label::of(["finance"]));
        assert!(out.triggers.is_empty());

        let mut agent = CopyTracker::start(&cx, 1, &Label::public());
        assert_eq!(
            agent.request(&cx, &rec, "ocr.example", &[2; 32]),
            Verdict::Placeholder
        );
        assert_eq!(
            agent.request(&cx, &rec, "ocr.example", &[3; 32]),
            Verdict::Placeholder
        );
        let out = agent.finish(&cx, &rec);
        assert_eq!(out.triggers.len(), 1, "one trigger per copy and host");
        assert_eq!(
            out.triggers[0].kind,
            TriggerKind::Mismatch {
                position: 1,
                digest: [2; 32]
            }
        );

        // A flow-compliant full-view copy sends the same request and gets the recorded reply.
        let mut agent = CopyTracker::start(&cx, 1, &Label::public());
        assert_eq!(
            agent.request(&cx, &rec, "ocr.example", &[1; 32]),
            Verdict::Replay(&"text")
        );
        assert!(agent.finish(&cx, &rec).triggers.is_empty());

        // One that omits the request raises an `absent` trigger.
        let mut agent = CopyTracker::start(&cx, 1, &Label::public());
        let before = agent.label().clone();
        agent.raise(&Label::of(["projx"]));
        assert!(agent.label().contains("projx") && before.flows_to(agent.label()));
        let agent = CopyTracker::start(&cx, 1, &Label::public());
        let out = agent.finish(&cx, &rec);
        assert_eq!(
            out.triggers[0].kind,
            TriggerKind::Absent {
                sent: 0,
                recorded: 1
            }
        );
    }
}
