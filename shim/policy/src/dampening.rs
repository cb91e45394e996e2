//! Dampening (paper Section IV-F, Appendix B-E, Table XIV): a penalty per release adapted from
//! BGP route-flap damping.
//!
//! On every call to a release, refused calls included, the penalty first decays, `P ← λP` with
//! `λ = 2^(-1/h)`, then grows by the weight of the call's event. The release is suppressed once
//! `P ≥ S` and usable again once `P < R`. An update of a release starts at zero.

use serde::{Deserialize, Serialize};

/// The parameters; the defaults are the paper's operating point.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DampeningParams {
    /// Half-life `h` in calls.
    pub half_life: f64,
    /// Weight `w` of an unverified event.
    pub unverified_weight: f64,
    /// Weight of a verified witness of a release that declared determinism, and of a broken
    /// determinism declaration.
    pub verified_weight: f64,
    /// Suppression threshold `S`.
    pub suppress_at: f64,
    /// Reuse threshold `R` (hysteresis: `R < S`).
    pub reuse_below: f64,
}

impl Default for DampeningParams {
    fn default() -> Self {
        Self {
            half_life: 50.0,
            unverified_weight: 250.0,
            verified_weight: 2000.0,
            suppress_at: 2000.0,
            reuse_below: 750.0,
        }
    }
}

impl DampeningParams {
    /// `λ = 2^(-1/h)`.
    pub fn lambda(&self) -> f64 {
        (-1.0 / self.half_life).exp2()
    }

    /// The divergence rate at which the stationary mean penalty `wp/(1-λ)` reaches `S`:
    /// `p* = S(1-λ)/w`.
    pub fn threshold_rate(&self) -> f64 {
        self.suppress_at * (1.0 - self.lambda()) / self.unverified_weight
    }

    /// Weight of an event (Table XIV).
    pub fn weight(&self, event: Event) -> f64 {
        match event {
            Event::Verified => self.verified_weight,
            Event::DeclaredBroken => self.verified_weight,
            Event::VerifiedUndeclared | Event::Unverified => self.unverified_weight,
        }
    }
}

/// The outcome of a trigger's probe replay, as Table XIV names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Event {
    /// Item witness from a release that declared determinism.
    Verified,
    /// Item witness from a release that did not declare determinism.
    VerifiedUndeclared,
    /// State or response divergence, or nondeterminism beyond twin control.
    Unverified,
    /// The control differed although the release declared determinism.
    DeclaredBroken,
}

/// Whether a call may run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Admission {
    Admitted,
    Refused,
}

/// The penalty of one release.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Penalty {
    pub value: f64,
    pub suppressed: bool,
}

impl Default for Penalty {
    fn default() -> Self {
        Self {
            value: 0.0,
            suppressed: false,
        }
    }
}

impl Penalty {
    /// Called once per call attempt, before it runs: decays the penalty and says whether the
    /// call may run. A call arriving while the release is suppressed is refused; its decay may
    /// bring the penalty under `R`, which lifts the suppression for the next call.
    pub fn admit(&mut self, p: &DampeningParams) -> Admission {
        let was_suppressed = self.suppressed;
        self.value *= p.lambda();
        if was_suppressed {
            if self.value < p.reuse_below {
                self.suppressed = false;
            }
            return Admission::Refused;
        }
        Admission::Admitted
    }

    /// Adds the weight of an admitted call's event; suppresses once `P ≥ S`.
    pub fn record(&mut self, p: &DampeningParams, event: Event) {
        self.value += p.weight(event);
        if self.value >= p.suppress_at {
            self.suppressed = true;
        }
    }

    /// One call: admit, and if admitted record its event (if any). Returns the admission.
    pub fn call(&mut self, p: &DampeningParams, event: Option<Event>) -> Admission {
        let a = self.admit(p);
        if let (Admission::Admitted, Some(e)) = (a, event) {
            self.record(p, e);
        }
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verified_witness_suppresses_at_once() {
        let p = DampeningParams::default();
        let mut pen = Penalty::default();
        assert_eq!(pen.call(&p, Some(Event::Verified)), Admission::Admitted);
        assert!(pen.suppressed);
        assert_eq!(pen.call(&p, None), Admission::Refused);
    }

    #[test]
    fn undeclared_witness_weighs_like_unverified() {
        let p = DampeningParams::default();
        assert_eq!(p.weight(Event::VerifiedUndeclared), 250.0);
        assert_eq!(p.weight(Event::DeclaredBroken), 2000.0);
    }
}
