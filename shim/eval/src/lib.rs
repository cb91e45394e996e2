//! germline-eval: the evaluations (issue 26's layer 5).
//!
//! * [`bench`]: `germline run-bench`, per-call latency of one tool under every runtime.
//! * [`suite`]: `germline bench`, the paper's cost figures; [`load`]: its `--serve-clients`,
//!   `germline serve` under N concurrent official-SDK clients (issue 30).
//! * [`matrix`]: `germline eval matrix`, the security matrix of signed Trojans.
//!
//! `germline sandbox-bench` stays with the sandbox it measures (`germline-sandbox::cli`).

pub mod bench;
pub mod cpu;
pub mod load;
pub mod matrix;
pub mod progress;
pub mod suite;
