//! Every host path and cgroup name germline uses, named once. A name that carries its owner's
//! pid (`session-PID`, `run-PID-N-MODE`, `ca-PID-N-...`) is what lets a later run or
//! `germline-runtime delete` find and remove what a killed process left behind (sweep), so
//! the writer and the sweeper must build it from the same function here.
//!
//! One path is named elsewhere: the node-wide limits directory, `/run/germline/limits`, is
//! `germline_policy::limits::DEFAULT_NODE_DIR`, because the policy core stays free of
//! dependencies (docs/architecture.md, "Layout after issue 26").

use std::path::PathBuf;

// --- /run/germline: per-boot state of the front end, the broker and the sandbox CLI ---

/// The front end's, the broker's and the sandbox CLI's runtime directory.
pub const RUN_DIR: &str = "/run/germline";
/// The broker daemon's control socket (`germline broker --socket`'s default).
pub const BROKER_SOCKET: &str = "/run/germline/broker.sock";
/// `germline daemon`'s socket, where `germline run` started by a user asks for a session
/// (docs/daemon.md).
pub const DAEMON_SOCKET: &str = "/run/germline/daemon.sock";
/// The variable that names another daemon socket to `germline run` (tests, a second daemon).
pub const DAEMON_SOCKET_ENV: &str = "GERMLINE_DAEMON_SOCKET";
/// `germline status`'s directory: one file per running front end.
pub const STATUS_DIR: &str = "/run/germline/status";
/// Where a copy finds the broker's CA certificate, inside the copy's own view (the file is
/// bound there from the host; this is not a host path).
pub const COPY_CA_PEM: &str = "/run/germline/ca.pem";

/// Prefix of `germline run`'s per-session directory (`session-PID`).
pub const SESSION_PREFIX: &str = "session-";
/// Prefix of `germline serve`'s directory (`serve-PID`).
pub const SERVE_PREFIX: &str = "serve-";
/// Prefix of a germline's per-deployment CA directory (`ca-PID-N-...`).
pub const CA_PREFIX: &str = "ca-";

/// `germline run`'s directory while process `pid` runs.
pub fn session_dir(pid: u32) -> PathBuf {
    PathBuf::from(format!("{RUN_DIR}/{SESSION_PREFIX}{pid}"))
}

/// `germline serve`'s directory while process `pid` runs.
pub fn serve_dir(pid: u32) -> PathBuf {
    PathBuf::from(format!("{RUN_DIR}/{SERVE_PREFIX}{pid}"))
}

/// The `n`-th CA directory process `pid` makes for a germline in `mode`.
pub fn ca_dir(pid: u32, n: u32, mode: &str) -> PathBuf {
    PathBuf::from(format!("{RUN_DIR}/{}{n}-{mode}", ca_dir_prefix(pid)))
}

/// The start of the names of the CA directories process `pid` makes in [`RUN_DIR`].
pub fn ca_dir_prefix(pid: u32) -> String {
    format!("{CA_PREFIX}{pid}-")
}

// --- /run/germline-runtime: the OCI runtime's state ---

/// `germline-runtime --root`'s default (runc's is /run/runc).
pub const RUNTIME_ROOT: &str = "/run/germline-runtime";
/// Where `germline-runtime` binds each container's verified release (traversable by the
/// germline's unprivileged user, unlike an engine's 0700 state root).
pub const RUNTIME_RELEASES: &str = "/run/germline-runtime/releases";

/// Where the precreate hook of process `pid` binds the rootfs it verifies.
pub fn precreate_dir(pid: u32) -> PathBuf {
    PathBuf::from(format!("{RUNTIME_ROOT}/precreate-{pid}"))
}

/// The containerd shim's state root for `germline-runtime` (one directory per namespace).
pub const CONTAINERD_ROOT: &str = "/run/containerd/germline";

// --- /var/lib/germline: state that outlives a boot ---

/// The broker's state directory (slots, the deployment CA, the audit log).
pub const BROKER_STATE: &str = "/var/lib/germline/broker";
/// The state of the users `germline daemon` serves: one root-only directory per uid.
pub const USERS_STATE: &str = "/var/lib/germline/users";

/// The state directory (broker CA, slots, evidence) of the sessions `germline daemon` runs
/// for `uid`: theirs alone, so one user's slots and records never meet another's.
pub fn user_state_dir(uid: u32) -> PathBuf {
    PathBuf::from(format!("{USERS_STATE}/{uid}"))
}
/// Where `germline witness` finds the broker's evidence by default.
pub const BROKER_EVIDENCE: &str = "/var/lib/germline/broker/evidence";
/// The benchmarks' own broker state (kept apart from a deployment's).
pub const BROKER_BENCH_STATE: &str = "/var/lib/germline/broker-bench";
/// The release rollback state (`germline release verify --state`, the runtime's `[tuf] state`).
pub const RELEASE_STATE: &str = "/var/lib/germline/release-state";

// --- /etc/germline: the node's configuration ---

/// The node's configuration directory (policy, pinned keys, trust metadata).
pub const ETC_DIR: &str = "/etc/germline";
/// `germline-runtime`'s node configuration.
pub const RUNTIME_CONFIG: &str = "/etc/germline/runtime.toml";

// --- cgroups ---

/// The cgroup (below each hierarchy's root) that holds every germline and its copies.
pub const CGROUP_PARENT: &str = "germline";
/// Prefix of the germline cgroups `germline run` makes (`run-PID-N-MODE`).
pub const RUN_CGROUP_PREFIX: &str = "run-";

/// A germline's cgroup: its `init` and each `copy-N` are children of it.
pub fn germline_cgroup(id: &str) -> String {
    format!("{CGROUP_PARENT}/{id}")
}

/// The id `germline run` (process `pid`) gives its `n`-th germline in `mode`: the cgroup
/// name [`run_cgroup_prefix`] finds again after a kill.
pub fn run_germline_id(pid: u32, n: u32, mode: &str) -> String {
    format!("{}{n}-{mode}", run_cgroup_prefix(pid))
}

/// The start of the names of the germline cgroups of `germline run` process `pid`.
pub fn run_cgroup_prefix(pid: u32) -> String {
    format!("{RUN_CGROUP_PREFIX}{pid}-")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sweeper finds a run's germline cgroups and CA directories by prefix: each name a
    /// writer makes must start with the prefix of its own pid and not with another pid's.
    #[test]
    fn owner_prefixes_match_only_their_own_pid() {
        let id = run_germline_id(42, 0, "germline");
        assert!(id.starts_with(&run_cgroup_prefix(42)), "{id}");
        assert!(!id.starts_with(&run_cgroup_prefix(4)), "{id}");
        assert!(!run_germline_id(421, 0, "germline").starts_with(&run_cgroup_prefix(42)));
        let ca = ca_dir(421, 0, "germline");
        let name = ca.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        assert!(name.starts_with(&ca_dir_prefix(421)), "{name}");
        assert!(!name.starts_with(&ca_dir_prefix(42)), "{name}");
    }
}
