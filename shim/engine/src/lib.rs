//! germline-engine: the per-call pipeline of germline execution (issue 26's layer 3).
//!
//! * [`callmeta`]: a `tools/call` -> the call's public metadata, labelled items, declared
//!   destinations and consumers (pure); [`fileitem`]: file items read once, labelled by file.
//! * [`runtime`]: the per-call pipeline (Plan via the broker, one copy per group) and the
//!   paper's baselines, behind one [`runtime::Runtime`].
//! * [`flows`]: declared flows of the manifest; a call whose declared flow would carry an item
//!   to a host not cleared for it is refused before any copy runs (pure).
//! * [`relay`]: what a copy may send to and ask of the agent during a call.
//! * [`evidence`]: probe and control re-runs of triggers, signed witness records, dampening
//!   (docs/evidence.md).
//! * [`sidecar`]: starting or reaching the broker; [`launcher`]: where germlines are forked;
//!   [`hub`]: one germline shared by the sessions of a release and user under `serve`.
//! * [`limits`], [`metrics`], [`trace`], [`status`], [`sweep`]: operations
//!   (docs/operations.md), the last three told of each call as [`observe::CallObserver`]s; [`outbox`]: results for the recipients a manifest names.
//! * [`laps`]: the phase timing of a call.
//! * [`process`]: the baselines' tool process (one persistent or fresh process, not a copy).
//!
//! The transports that drive it are in `germline-mcp`; the benchmarks in `germline-eval`.
//! See docs/run.md and docs/architecture.md.

pub mod builder;
pub mod callmeta;
pub mod commit;
pub mod error;
pub mod evidence;
pub mod fileitem;
pub mod flows;
pub mod hub;
pub mod ids;
pub mod laps;
pub mod launcher;
pub mod limits;
pub mod metrics;
pub mod observe;
pub mod outbox;
pub mod pipeline;
pub mod process;
pub mod relay;
pub mod release;
pub mod runtime;
pub mod sidecar;
pub mod spawned;
pub mod state;
pub mod status;
pub mod sweep;
#[cfg(test)]
mod testkit;
pub mod trace;
pub mod treeitem;
pub mod twin_node;
pub mod workspaces;
pub mod writes;
