//! germline-mcp: the agent-facing MCP transports and sessions (issue 26's layer 4).
//!
//! * [`session`]: MCP JSON-RPC from the agent, transport-free; [`jsonrpc`]: its framing.
//! * [`stdio`], [`cli`]: `germline run` (MCP over stdio) and its wiring.
//! * [`serve`], [`http`], [`conns`], [`router`]: `germline serve` (MCP Streamable HTTP,
//!   several releases); [`status_page`]: its `/status` page.
//!
//! Each call goes to `germline-engine`'s runtime. See docs/run.md.

pub mod allow;
pub mod cli;
pub mod conns;
pub mod daemon;
pub mod error;
pub mod http;
pub mod jsonrpc;
pub mod oauth;
pub mod router;
pub mod serve;
pub mod session;
pub mod sse;
pub mod status_page;
pub mod stdio;

pub use error::{Error, SessionError};
