//! The typed causes inside [`crate::runtime::RunError`]: the sandbox's and the broker's own
//! errors are kept as sources, not flattened into strings, and each displays exactly the
//! text the shim printed before (the fixed outcome names and JSON-RPC codes are chosen by
//! the `RunError` variant, never by these).

use germline_broker::control::ControlError;

/// Why the germline, a copy or a baseline process failed or was refused.
#[derive(Debug, thiserror::Error)]
pub enum SandboxFailure {
    /// The sandbox's own error (a copy refused at its checks, a fork that failed, ...).
    #[error(transparent)]
    Sandbox(#[from] germline_sandbox::Error),
    /// The copy's network namespace, for the broker, could not be opened.
    #[error("the copy's network namespace: {0}")]
    CopyNetns(#[source] std::io::Error),
    /// The baseline process's network namespace, for the broker, could not be opened.
    #[error("the process's network namespace: {0}")]
    ProcessNetns(#[source] std::io::Error),
    /// A probe and control re-run gave no verdict (crate::evidence).
    #[error(transparent)]
    Classify(#[from] germline_policy::witness::ClassifyError),
    /// Told in the shim's own words (a germline that died or keeps dying, a baseline process
    /// that did not start, a state the runtime cannot be in).
    #[error("{0}")]
    Said(String),
}

/// Why the broker could not serve the call.
#[derive(Debug, thiserror::Error)]
pub enum BrokerFailure {
    /// The broker's control channel failed, or the broker answered with an error.
    #[error(transparent)]
    Control(#[from] ControlError),
    /// The broker refused the call (its reason, as it said it).
    #[error("{0}")]
    Refused(String),
    /// A broker whose connection broke could not be reached again.
    #[error("{0}")]
    Unreachable(String),
}
