//! The evidence layer's pure half (paper Section IV-F, Definition 6, Theorem 2, Table XIV):
//! classifying a trigger's probe and control re-runs, the witness record, and the per-release
//! dampening ledger that refuses suppressed releases with a reason.
//!
//! A trigger between a comparing copy with view `W ⊋ V(d)` and `d`'s group `g` is re-run
//! offline N times twice: the **probe** (the contents of `W`, `g`'s slot snapshot, the twin
//! inputs, replies served by position from `g`'s transcript) and the **control** (`g`'s exact
//! item contents, same rest). Each try is reduced to one bit: did its request sequence to `d`
//! differ from the sequence `g` actually sent.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::dampening::{Admission, DampeningParams, Event, Penalty};

/// What a trigger's re-runs show (Table XIV's rows).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The probe differed on every try and the control on none: the requests depend on
    /// items `d` may not see (Definition 6).
    ItemWitness,
    /// The probe matched on every try: the trigger came from the slot or the replies
    /// (Theorem 2(b)): a state or response divergence.
    StateOrResponseDivergence,
    /// The control differed although the release declared determinism.
    BrokenDeterminismDeclaration,
    /// The control differed (release not declared deterministic), or the probe differed on
    /// some tries only: nondeterminism beyond twin control, never a witness.
    UnverifiedNondeterminism,
    /// The broker denied a request the release chose (an undeclared host, an IP literal, a
    /// Host or SNI mismatch): no re-run, weighed as an unverified event (docs/evidence.md).
    BrokerDenial,
}

impl Verdict {
    /// The dampening event of this verdict for a release that did or did not declare
    /// determinism (Table XIV).
    pub fn event(self, declared_deterministic: bool) -> Event {
        match self {
            Verdict::ItemWitness if declared_deterministic => Event::Verified,
            Verdict::ItemWitness => Event::VerifiedUndeclared,
            Verdict::BrokenDeterminismDeclaration => Event::DeclaredBroken,
            Verdict::StateOrResponseDivergence
            | Verdict::UnverifiedNondeterminism
            | Verdict::BrokerDenial => Event::Unverified,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Verdict::ItemWitness => "item witness",
            Verdict::StateOrResponseDivergence => "state or response divergence",
            Verdict::BrokenDeterminismDeclaration => "broken determinism declaration",
            Verdict::UnverifiedNondeterminism => "unverified nondeterminism",
            Verdict::BrokerDenial => "broker denial",
        }
    }
}

/// Why a classification could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClassifyError {
    #[error("no tries: probe {probe}, control {control} (N must be at least 1 for both)")]
    NoTries { probe: usize, control: usize },
}

/// Table XIV. `probe[i]` / `control[i]`: whether try `i`'s request sequence differed from the
/// destination group's. The control is judged first: if the exact inputs do not reproduce
/// `g`'s requests, no probe result can be attributed to the items.
pub fn classify(
    declared_deterministic: bool,
    probe: &[bool],
    control: &[bool],
) -> Result<Verdict, ClassifyError> {
    if probe.is_empty() || control.is_empty() {
        return Err(ClassifyError::NoTries {
            probe: probe.len(),
            control: control.len(),
        });
    }
    if control.iter().any(|&d| d) {
        return Ok(if declared_deterministic {
            Verdict::BrokenDeterminismDeclaration
        } else {
            Verdict::UnverifiedNondeterminism
        });
    }
    Ok(if probe.iter().all(|&d| d) {
        Verdict::ItemWitness
    } else if probe.iter().all(|&d| !d) {
        Verdict::StateOrResponseDivergence
    } else {
        Verdict::UnverifiedNondeterminism
    })
}

/// One item as a witness names it: its name and the SHA-256 of its contents (hex). The
/// contents themselves travel separately (`--items DIR`) at their own clearance.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ItemRef {
    pub name: String,
    pub sha256: String,
}

/// One request or reply of a sequence, as its digest (and for replies, the body in hex so
/// that the probe can be served by position).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exchange {
    pub request_sha256: String,
    pub reply_status: u16,
    pub reply_body_hex: String,
}

/// What the broker serves a probe or control re-run: nothing is delivered; requests to
/// `host` are answered by position from `transcript` (the placeholder past its end), every
/// other declared host gets the placeholder, and the state slot starts from `slot` (writes
/// stay in the re-run).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplaySpec {
    pub host: String,
    pub transcript: Vec<Exchange>,
    /// key → value (hex).
    pub slot: BTreeMap<String, String>,
    pub twin_time_ns: u64,
    pub twin_seed: u64,
}

/// A witness record (Section IV-F): everything a third party needs to re-run probe and
/// control, with the release and the items it names. Handled at the clearance of its contents
/// (`label`): the join of both views' labels, the slot's and the replies'.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WitnessRecord {
    pub version: u32,
    /// The release's digest.
    pub release: String,
    pub tool: String,
    /// The call's public metadata (arguments with out-of-view values emptied).
    pub metadata: serde_json::Value,
    /// The destination host `d` and its clearance.
    pub destination: String,
    /// The comparing copy's view `W` and `d`'s group's view.
    pub probe_items: Vec<ItemRef>,
    pub control_items: Vec<ItemRef>,
    /// `σ[κ(d)]` at the group's start: key → value (hex).
    pub slot_snapshot: BTreeMap<String, String>,
    /// Twin inputs of the call.
    pub twin_time_ns: u64,
    pub twin_seed: u64,
    /// Whether the copies got twin inputs (off only in the reference runs).
    pub twin: bool,
    /// Whether the copies ran the tool as PID 2 under a reaper (the policy's `[copies]
    /// reaper`); a verifier's re-runs do the same. Absent in older records: false.
    #[serde(default)]
    pub reaper: bool,
    /// `T(d)`: `d`'s group's delivered requests and replies, in order.
    pub transcript: Vec<Exchange>,
    /// The comparing copy's request digests to `d`, in order.
    pub probe_requests: Vec<String>,
    /// Re-run counts and the verdict recorded online.
    pub tries: u32,
    pub verdict: Verdict,
    pub label: Vec<String>,
    /// The signing deployment key: its name and SPKI fingerprint.
    pub key: String,
}

impl WitnessRecord {
    pub const VERSION: u32 = 1;

    /// The bytes a signature covers: the record's JSON with fields in declaration order and
    /// maps sorted (serde_json with `BTreeMap`), so every verifier computes the same bytes.
    pub fn signed_bytes(&self) -> Result<Vec<u8>, serde_json::Error> {
        let mut v = b"germline-witness-v1\n".to_vec();
        v.extend(serde_json::to_vec(self)?);
        Ok(v)
    }
}

/// One release's dampening state in the ledger.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ReleaseState {
    pub penalty: Penalty,
    /// Admitted and refused call attempts, and the last event's verdict.
    pub admitted: u64,
    pub refused: u64,
    pub last: Option<Verdict>,
}

/// The dampening state of every release (Appendix B-E), keyed by release digest: a new digest
/// (an update) starts at zero.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Ledger {
    pub params: DampeningParams,
    pub releases: BTreeMap<String, ReleaseState>,
}

impl Ledger {
    pub fn new(params: DampeningParams) -> Ledger {
        Ledger {
            params,
            releases: BTreeMap::new(),
        }
    }

    /// One call attempt of `release`, before it runs: `Err(reason)` when it is refused.
    pub fn admit(&mut self, release: &str) -> Result<(), String> {
        let p = self.params.clone();
        let st = self.releases.entry(release.to_string()).or_default();
        let before = st.penalty.value;
        match st.penalty.admit(&p) {
            Admission::Admitted => {
                st.admitted += 1;
                Ok(())
            }
            Admission::Refused => {
                st.refused += 1;
                let why = st.last.map_or("diverging requests", Verdict::name);
                Err(format!(
                    "release {release} is suppressed by dampening: penalty {before:.0} reached \
                     S = {:.0} after {why}; it is usable again once the penalty decays below \
                     R = {:.0} (half-life {} calls)",
                    p.suppress_at, p.reuse_below, p.half_life
                ))
            }
        }
    }

    /// Records the verdict of an admitted call's trigger.
    pub fn record(&mut self, release: &str, verdict: Verdict, declared_deterministic: bool) {
        let p = self.params.clone();
        let st = self.releases.entry(release.to_string()).or_default();
        st.penalty.record(&p, verdict.event(declared_deterministic));
        st.last = Some(verdict);
    }

    pub fn suppressed(&self, release: &str) -> bool {
        self.releases
            .get(release)
            .is_some_and(|s| s.penalty.suppressed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const N: usize = 5;

    #[test]
    fn table_xiv_rows() {
        let all = [true; N];
        let none = [false; N];
        let some = [true, false, true, true, true];
        assert_eq!(classify(true, &all, &none), Ok(Verdict::ItemWitness));
        assert_eq!(classify(false, &all, &none), Ok(Verdict::ItemWitness));
        assert_eq!(
            classify(false, &none, &none),
            Ok(Verdict::StateOrResponseDivergence)
        );
        assert_eq!(
            classify(true, &all, &some),
            Ok(Verdict::BrokenDeterminismDeclaration)
        );
        assert_eq!(
            classify(false, &all, &some),
            Ok(Verdict::UnverifiedNondeterminism)
        );
        // A probe that differs on only some tries is nondeterminism, never a witness.
        assert_eq!(
            classify(true, &some, &none),
            Ok(Verdict::UnverifiedNondeterminism)
        );
        assert!(classify(true, &[], &none).is_err());
    }

    #[test]
    fn weights_follow_table_xiv() {
        let p = DampeningParams::default();
        let w = |v: Verdict, d: bool| p.weight(v.event(d));
        assert_eq!(w(Verdict::ItemWitness, true), 2000.0);
        assert_eq!(w(Verdict::ItemWitness, false), 250.0);
        assert_eq!(w(Verdict::StateOrResponseDivergence, true), 250.0);
        assert_eq!(w(Verdict::BrokenDeterminismDeclaration, true), 2000.0);
        assert_eq!(w(Verdict::UnverifiedNondeterminism, false), 250.0);
        // A broker denial is never a verified witness, declared determinism or not.
        assert_eq!(w(Verdict::BrokerDenial, true), 250.0);
        assert_eq!(w(Verdict::BrokerDenial, false), 250.0);
    }

    #[test]
    fn ledger_suppresses_refuses_with_reason_and_recovers() {
        let mut l = Ledger::default();
        let r = "sha256:aa";
        let mut admitted = 0;
        while !l.suppressed(r) {
            l.admit(r).expect("admitted");
            l.record(r, Verdict::StateOrResponseDivergence, false);
            admitted += 1;
        }
        assert_eq!(admitted, 9);
        let mut refused = 0;
        loop {
            match l.admit(r) {
                Ok(()) => break,
                Err(why) => {
                    assert!(why.contains("suppressed") && why.contains("state or response"));
                    refused += 1;
                }
            }
        }
        assert_eq!(refused, 76);
        // An update (another digest) starts at zero.
        assert!(l.admit("sha256:bb").is_ok());
    }

    #[test]
    fn one_verified_witness_of_a_declared_release_suppresses_at_once() {
        let mut l = Ledger::default();
        let r = "sha256:cc";
        l.admit(r).expect("admitted");
        l.record(r, Verdict::ItemWitness, true);
        assert!(l.admit(r).is_err());
        // Undeclared: the same witness weighs like an unverified event.
        l.admit("sha256:dd").expect("admitted");
        l.record("sha256:dd", Verdict::ItemWitness, false);
        assert!(l.admit("sha256:dd").is_ok());
    }
}
