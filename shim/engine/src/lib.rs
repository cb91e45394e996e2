//! germline-frontend: the agent-facing MCP endpoint (issue 6).
//!
//! * [`callmeta`]: a `tools/call` -> the call's public metadata, labelled items, declared
//!   destinations and consumers (pure).
//! * [`runtime`]: the per-call pipeline of germline execution (Plan via the broker, one copy
//!   per group) and the paper's baselines, behind one [`runtime::Runtime`].
//! * [`flows`]: declared flows of the manifest; a call whose declared flow would carry an item
//!   to a host not cleared for it is refused before any copy runs (pure).
//! * [`session`]: MCP JSON-RPC from the agent, transport-free.
//! * [`evidence`]: probe and control re-runs of triggers, signed witness records, dampening
//!   (docs/evidence.md).
//! * [`stdio`]: `germline run` (MCP over stdio).
//! * [`sidecar`]: starting or reaching the broker.
//! * [`serve`], [`http`], [`router`]: `germline serve` (MCP Streamable HTTP, several releases).
//!
//! See docs/run.md.

pub mod bench;
pub mod callmeta;
pub mod cli;
pub mod conns;
pub mod evidence;
pub mod fileitem;
pub mod flows;
pub mod http;
pub mod jsonrpc;
pub mod launcher;
pub mod limits;
pub mod metrics;
pub mod outbox;
pub mod process;
pub mod relay;
pub mod release;
pub mod router;
pub mod runtime;
pub mod serve;
pub mod session;
pub mod sidecar;
pub mod status;
pub mod stdio;
pub mod suite;
pub mod sweep;
pub mod trace;
