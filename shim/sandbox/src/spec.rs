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
    /// Node.js and other runtimes that start threads before any fork point: never pass G1,
    /// so they run as spawned copies ([`Execution::Spawn`], docs/sandbox.md).
    Node,
    /// Any executable entry (a native binary): spawned copies. The word `binary` is
    /// accepted for the manifest's `native`.
    #[serde(alias = "binary")]
    Native,
}

/// How a release's copies are made (issue 28, docs/sandbox.md "Spawned copies").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Execution {
    /// Forked from a germline that passed G1-G3 (Python with the official SDK).
    #[default]
    Fork,
    /// Started ahead of the call from the verified rootfs by the shim's launcher, one fresh
    /// process per copy ([`crate::spawn`]).
    Spawn,
}

impl Language {
    /// The execution a release of this language gets unless its manifest asks otherwise:
    /// only Python can fork (its bootstrap finds a fork point that passes G1).
    pub fn default_execution(self) -> Execution {
        match self {
            Language::Python => Execution::Fork,
            Language::Node | Language::Native => Execution::Spawn,
        }
    }
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

/// A read-only bind mount the shim adds to the germline's root before any release code runs,
/// so that every copy inherits it (the deployment CA bundles of `germline_broker::ca::copy_trust`
/// over the rootfs's CA paths, for instance). The signed rootfs itself is never changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BindMount {
    /// A file or directory on the host.
    pub source: PathBuf,
    /// Where it appears inside the germline: a path inside the rootfs (`/etc/ssl/certs/x.crt`;
    /// a relative path is taken from the rootfs's root). It must exist in the rootfs and be of
    /// the source's kind, except below `/run`, where the shim creates it.
    pub target: String,
}

impl From<(PathBuf, PathBuf)> for BindMount {
    /// From one `(host file, path in the rootfs)` pair of `CopyTrust::mounts`.
    fn from((source, target): (PathBuf, PathBuf)) -> BindMount {
        BindMount {
            source,
            target: format!("/{}", target.to_string_lossy().trim_start_matches('/')),
        }
    }
}

/// The default TCP port a copy may connect to, for germlines started without a broker
/// (`germline start`). `germline run` and `serve` set `LaunchSpec::egress_port` to the port
/// their broker drew (`germline_broker::Broker::copy_proxy_addr`), never this one.
pub const EGRESS_PORT: u16 = 3128;

fn default_egress_port() -> Option<u16> {
    Some(EGRESS_PORT)
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
    /// Forked or spawned copies (`launch_spec` decides from the manifest).
    #[serde(default)]
    pub execution: Execution,
    /// Whether each copy gets a private tmpfs at `/run/scratch`.
    #[serde(default)]
    pub scratch: bool,
    /// Warm the germline with a synthetic session on public data before the fork point.
    #[serde(default)]
    pub warm: bool,
    /// `tools/call`s of that session, `{"tool": name, "arguments": {...}}` on public
    /// arguments from the signed manifest (`initialisation.warm_calls`).
    #[serde(default)]
    pub warm_calls: Vec<serde_json::Value>,
    /// Limits, from the policy.
    #[serde(default)]
    pub limits: Limits,
    /// Read-only bind mounts added to the germline's root (every copy inherits them). Each
    /// target must be covered by `readable_paths` (or lie below `/run`) so that Landlock lets
    /// the copies read it.
    #[serde(default)]
    pub extra_mounts: Vec<BindMount>,
    /// The one TCP port Landlock lets the germline and its copies connect to: the broker's
    /// endpoint on loopback inside a copy's own network namespace (nothing else is reachable
    /// there; the germline's namespace has no interface up). `None`: no TCP connect at all.
    #[serde(default = "default_egress_port")]
    pub egress_port: Option<u16>,
    /// Size of each copy's own writable tmpfs at [`STATE_DIR`] (issue 27, the manifest's
    /// state paths), bytes; 0: none. The germline itself sees there the release's initial
    /// state, read-only: an `extra_mounts` entry whose target is [`STATE_DIR`] (required).
    #[serde(default)]
    pub state_bytes: u64,
    /// Directory items are writable in each copy (issue 27): the item store's directories
    /// carry write rights in the germline's Landlock layer, a slot holding a directory item is
    /// bound read-write, and what the copy leaves there is read back by the shim
    /// (`Copy::tree_layer`). Off: directory items are read-only (`EROFS`).
    #[serde(default)]
    pub writable_trees: bool,
    /// Spawned copies get their call's twin inputs as one line on their stdin, written just
    /// before the call's `tools/call` ([`NODE_TWIN_LINE`]). Only for a launch whose runtime
    /// takes that line off the stream before the server reads it: a Node release launched
    /// with the shim's preload ([`NODE_TWIN_PRELOAD`] at [`NODE_TWIN_PATH`], through
    /// `NODE_OPTIONS`). Off: spawned copies read the real clocks and entropy.
    #[serde(default)]
    pub twin_line: bool,
    /// Forked copies get their call's twin inputs with their data: the germline binds the
    /// twin's clock and entropy replacements before its fork point (`germline_twin.py`,
    /// `twin_prepare`), each answering as its original until a call's data sets the twin
    /// inputs, so a copy's `twin_install` sets a few values instead of rebinding module
    /// namespaces on the call's path. Off: bound by the copy when its data carries twin
    /// inputs, and not at all otherwise (the reference runs).
    #[serde(default)]
    pub twin_forked: bool,
}

/// The twin-input preload of spawned Node copies (docs/evidence.md, "Twin inputs"): loaded
/// with `NODE_OPTIONS=--require` before the release's entry, it takes the twin line off
/// stdin and derives the copy's clocks and entropy from it.
pub const NODE_TWIN_PRELOAD: &str = include_str!("../bootstrap/node/germline-twin.cjs");

/// Where the preload is bind-mounted, read-only, in a spawned Node copy.
pub const NODE_TWIN_PATH: &str = "/run/germline-twin.cjs";

/// How the twin line starts (no JSON-RPC message starts with `#`).
pub const NODE_TWIN_LINE: &str = "#germline-twin ";

/// Where a copy's state tmpfs is mounted ([`LaunchSpec::state_bytes`]).
pub const STATE_DIR: &str = "/run/state";

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
            execution: Execution::Fork,
            scratch: false,
            warm: false,
            warm_calls: vec![],
            limits: Limits::default(),
            extra_mounts: vec![],
            egress_port: default_egress_port(),
            state_bytes: 0,
            writable_trees: false,
            twin_line: false,
            twin_forked: false,
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
