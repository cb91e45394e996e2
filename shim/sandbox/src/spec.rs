//! What the shim needs to launch a release's germline.
//!
//! The signed release manifest (issue 3) is defined on another branch; it will be mapped onto
//! this small struct. Nothing here is trusted from the release beyond what the manifest's
//! signature covers: limits come from the deployer's policy (defaults below).

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The language of a release, which selects the bootstrap that finds its fork point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Language {
    /// CPython with the official `mcp` SDK (bootstrap/python).
    Python,
    /// Node.js and other runtimes that start threads before any fork point: never pass G1.
    Node,
}

/// Resource limits of one copy (and of the germline), from the deployer's policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Limits {
    /// Memory limit per copy, bytes.
    pub memory_bytes: u64,
    /// Maximum number of tasks per copy.
    pub pids: u64,
    /// CPU quota per copy in percent of one CPU.
    pub cpu_percent: u64,
    /// The copy's absolute deadline, fixed at its fork, milliseconds.
    pub deadline_ms: u64,
    /// How long the germline's initialisation may take, milliseconds.
    pub init_timeout_ms: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory_bytes: 256 << 20,
            pids: 64,
            cpu_percent: 100,
            deadline_ms: 30_000,
            init_timeout_ms: 60_000,
        }
    }
}

impl Limits {
    /// The deadline as a duration.
    pub fn deadline(&self) -> Duration {
        Duration::from_millis(self.deadline_ms)
    }
}

/// How to launch one release (issue 4). Paths other than `rootfs` are inside the rootfs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchSpec {
    /// The verified, extracted root filesystem of the release (a directory on the host).
    pub rootfs: PathBuf,
    /// The interpreter, inside the rootfs (for Python: `/usr/bin/python3`).
    pub interpreter: String,
    /// The release's entry: for Python `module:callable` (a console-script entry point) or
    /// `-m module`, followed by its arguments (what `sys.argv[1:]` will be).
    pub entry: Vec<String>,
    /// Environment of the germline (and copies), `KEY=VALUE`.
    #[serde(default)]
    pub env: Vec<String>,
    /// Working directory inside the rootfs.
    #[serde(default = "default_workdir")]
    pub workdir: String,
    /// Module search path for the bootstrap (Python: prepended to `sys.path`).
    #[serde(default)]
    pub module_path: Vec<String>,
    /// The read-only Landlock allowlist, inside the rootfs.
    pub readable_paths: Vec<String>,
    /// The release's language.
    pub language: Language,
    /// Whether each copy gets a private tmpfs at `/run/scratch`.
    #[serde(default)]
    pub scratch: bool,
    /// Warm the germline with a synthetic session on public data before the fork point.
    #[serde(default)]
    pub warm: bool,
    /// Limits, from the policy.
    #[serde(default)]
    pub limits: Limits,
}

fn default_workdir() -> String {
    "/".to_string()
}

impl LaunchSpec {
    /// The spec of `mcp-server-time` in the rootfs built by `scripts/setup.d/40-sandbox.sh`.
    pub fn mcp_server_time(rootfs: PathBuf) -> LaunchSpec {
        LaunchSpec {
            rootfs,
            interpreter: "/usr/bin/python3".into(),
            entry: vec![
                "mcp_server_time:main".into(),
                "--local-timezone".into(),
                "UTC".into(),
            ],
            env: vec![],
            workdir: "/".into(),
            module_path: vec!["/app/site".into()],
            readable_paths: default_python_paths(),
            language: Language::Python,
            scratch: false,
            warm: false,
            limits: Limits::default(),
        }
    }
}

/// The allowlist of a Python rootfs: interpreter, libraries, CA and timezone data, the release.
pub fn default_python_paths() -> Vec<String> {
    [
        "/usr/bin/python3.11",
        "/usr/lib",
        "/lib",
        "/lib64",
        "/usr/share/zoneinfo",
        "/etc",
        "/app",
    ]
    .into_iter()
    .map(String::from)
    .collect()
}

/// The default rootfs built by the setup script.
pub const DEFAULT_PYTHON_ROOTFS: &str = "/var/tmp/germline-sandbox/rootfs-python";
