//! The phase timing of one call ([`Laps`]): named durations in microseconds, in the order
//! the phases ran, as `germline run-bench`, `germline bench`, metrics and traces read them
//! from [`crate::runtime::Outcome::phases`] (docs/operations.md names the phases).

use std::time::Instant;

/// Microseconds since `since` (a clock read; saturating, never wrapping).
pub fn micros(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_micros()).unwrap_or(u64::MAX)
}

/// One call's phases so far. One allocation per call, as the vector it replaces.
#[derive(Debug, Default)]
pub struct Laps(Vec<(&'static str, u64)>);

impl Laps {
    pub fn new() -> Laps {
        Laps::default()
    }

    /// Phase `name` took from `since` until now.
    pub fn lap(&mut self, name: &'static str, since: Instant) {
        self.0.push((name, micros(since)));
    }

    /// Phase `name` took `us` microseconds (timed elsewhere: a copy taken ahead).
    pub fn took(&mut self, name: &'static str, us: u64) {
        self.0.push((name, us));
    }

    /// Phases timed elsewhere (a fork's own laps, a copy's sub-phases), in order.
    pub fn extend(&mut self, laps: impl IntoIterator<Item = (&'static str, u64)>) {
        self.0.extend(laps);
    }

    /// The phases, in order, for [`crate::runtime::Outcome::phases`].
    pub fn into_phases(self) -> Vec<(&'static str, u64)> {
        self.0
    }
}
