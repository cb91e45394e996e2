//! How a long research run reports its steps without terminal code of its own: the binary
//! passes a [`Progress`] that draws on a terminal (indicatif, `germline/src/progress.rs`);
//! [`Lines`] prints one line per step on stderr, as these runs always did, for pipes and
//! logs. Kept here while germline-eval is its only library user; a second (release's verify,
//! pack) would move it to germline-sys.

/// Receives the steps of a run: `done` of `total` steps finished, `what` the one starting.
pub trait Progress {
    fn step(&self, what: &str, done: u64, total: u64);
}

/// One line per step on stderr, prefixed (`bench: latency germline pass 1 ...`).
#[derive(Debug, Clone, Copy)]
pub struct Lines(pub &'static str);

impl Progress for Lines {
    fn step(&self, what: &str, _done: u64, _total: u64) {
        eprintln!("{}: {what}", self.0);
    }
}
