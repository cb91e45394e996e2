//! germline-oci: the OCI runtime library behind `germline-runtime`, an OCI runtime with runc's
//! command-line contract, as podman (through conmon) and CRI-O call it, so that `podman run -i
//! --runtime germline-runtime IMAGE` serves a signed release's tools on the container's stdio
//! exactly as `germline run` does.
//!
//! * `create` reads the engine's `config.json` as untrusted input (it takes only the rootfs
//!   location and the engine's cgroup), verifies the release found in that rootfs against the
//!   node's pinned keys (`/etc/germline/runtime.toml`, `/etc/germline/keys/*.pub`), says which
//!   engine settings it ignores, and forks the container's process, which waits for `start`.
//! * `start` releases it: it execs `germline run` on the verified release (which verifies it
//!   again, so nothing changed between `create` and `start` runs), with the container's stdio
//!   as the agent's MCP endpoint.
//! * `state`, `kill`, `delete`, `pause`, `resume` behave as runc's; `delete` also removes what a
//!   killed `germline run` could not (its germlines' cgroups and run directories).
//! * `run` is `create` and `start`; `list`, `ps`, `events`, `features` and `spec` report as
//!   runc's do (`info.rs`).
//!
//! The binary (`shim/germline/src/bin/germline-runtime/main.rs`) parses runc's command line into a
//! [`Cmd`] and calls [`run`]. See docs/engines.md.

pub mod config;
pub mod error;
mod host;
mod info;
mod runtime;
pub mod spec;
pub mod state;
pub mod trust;

pub use error::{Error, Result};
pub use runtime::{run, Cmd, Globals, Log};

/// The OCI runtime-spec version germline-runtime writes and reads up to (oci-spec's): the
/// `ociVersion` of `state` and `features`, and the `spec:` line of `--version`.
pub const OCI_VERSION: &str = oci_spec::runtime::VERSION;

/// What `germline-runtime --version` prints after the program name, as runc's `--version`
/// (`runc version X` then `spec: Y`).
pub fn version_text() -> String {
    format!("version {}\nspec: {OCI_VERSION}", env!("CARGO_PKG_VERSION"))
}
