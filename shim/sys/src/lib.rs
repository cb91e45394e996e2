//! germline-sys: the host system layer every other crate stands on (docs/architecture.md,
//! "Layout after issue 26").
//!
//! * [`sys`]: thin wrappers around single Linux system calls, fork-safe where marked;
//! * [`cgroup`]: cgroups v1 and v2 (create, limit, freeze, kill, destroy);
//! * [`procfs`]: reading a process from outside through the host's /proc, and
//!   [`mountinfo`], its mount table's one parser;
//! * [`paths`]: every host path and cgroup name germline uses;
//! * [`user`]: a thread that opens files with a user's permissions (`germline daemon`);
//! * [`doorbell`]: the transport's signal to the runtime's idle waits that a request came.
//!
//! It depends on no workspace crate.

pub mod cgroup;
pub mod doorbell;
mod error;
pub mod mountinfo;
pub mod paths;
pub mod procfs;
pub mod sys;
pub mod user;

pub use error::{Error, Result};
