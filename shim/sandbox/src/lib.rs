//! germline-sandbox: the germline container and its confined copies (issue 4).
//!
//! * [`Germline::start`] builds the germline from a rootfs and a [`LaunchSpec`]
//!   ([`launch`]: namespaces, read-only root, Landlock, seccomp) and runs the release's
//!   initialisation through a language bootstrap up to its fork point.
//! * [`Germline::copy`] checks G1-G3 ([`checks`]), forks a copy, moves it to its own cgroup,
//!   checks it from outside and hands it back ready for data.
//! * [`Germline::call`] runs one MCP call in a fresh copy and kills it afterwards.
//!
//! See docs/sandbox.md.

pub mod cancel;
pub mod checks;
pub mod cli;
pub mod copy;
mod error;
pub mod germline;
mod itemview;
pub mod landlock;
pub mod launch;
pub mod mcp_client;
pub mod mounts;
pub mod offered;
pub mod pool_depth;
pub mod protocol;
pub mod seccomp;
pub mod spawn;
pub mod spec;
pub mod statedir;
pub mod tree;

// Moved to germline-sys (issue 26); re-exported so `germline_sandbox::cgroup` and
// `crate::sys::...` keep working.
pub use germline_sys::{cgroup, procfs, sys};

pub use cancel::Cancel;
pub use copy::{Copy, Item, PoolState, TreeLayer};
pub use error::{Error, Result};
#[cfg(feature = "ablation")]
pub use germline::Ablation;
pub use germline::{Germline, Options};
pub use spec::{BindMount, Execution, Language, LaunchSpec, Limits};
pub use statedir::{StateDir, StateFiles};
pub use tree::TreeEntry;
