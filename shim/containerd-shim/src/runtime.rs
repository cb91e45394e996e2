//! Running `germline-runtime` (runc's command line) from the shim, as containerd's runc shim
//! runs runc.
//!
//! The shim is a child subreaper whose SIGCHLD thread (the `containerd-shim` crate's) reaps
//! every child and publishes its exit on the crate's monitor; `Command::wait` would race it.
//! So a command is spawned with a monitor subscription taken first, and its exit code is the
//! one the monitor reports for its pid.

use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use containerd_shim::monitor::Topic;
use containerd_shim::synchronous::monitor::{monitor_subscribe, wait_pid};

/// How to call `germline-runtime` for one namespace.
#[derive(Debug, Clone)]
pub struct Runtime {
    /// The binary: `$GERMLINE_RUNTIME_BINARY`, else `germline-runtime` beside the shim, else
    /// on `PATH`.
    pub binary: PathBuf,
    /// Its `--root`: `/run/containerd/germline/NAMESPACE`.
    pub root: PathBuf,
    /// Its `--config` (the node configuration), when containerd's runtime options name one.
    pub config: Option<PathBuf>,
}

/// The container's stdio as `create` passes it on to the container's process.
#[derive(Debug)]
pub struct Stdio3 {
    pub stdin: OwnedFd,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
}

impl Runtime {
    pub fn new(namespace: &str) -> Runtime {
        let binary = std::env::var_os("GERMLINE_RUNTIME_BINARY")
            .map(PathBuf::from)
            .or_else(|| {
                let p = std::env::current_exe()
                    .ok()?
                    .parent()?
                    .join("germline-runtime");
                p.is_file().then_some(p)
            })
            .unwrap_or_else(|| PathBuf::from("germline-runtime"));
        Runtime {
            binary,
            root: Path::new(germline_sys::paths::CONTAINERD_ROOT).join(namespace),
            config: None,
        }
    }

    fn command(&self, log: Option<&Path>) -> Command {
        let mut c = Command::new(&self.binary);
        c.arg("--root").arg(&self.root);
        if let Some(cfg) = &self.config {
            c.arg("--config").arg(cfg);
        }
        if let Some(l) = log {
            c.arg("--log").arg(l).arg("--log-format").arg("json");
        }
        c
    }

    /// Runs `germline-runtime ARGS` with its output captured; on failure the error names the
    /// command and carries what it printed.
    pub fn run(&self, args: &[&str]) -> Result<String, String> {
        let mut c = self.command(None);
        c.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let sub = monitor_subscribe(Topic::Pid).map_err(|e| format!("monitor: {e}"))?;
        let mut child = c
            .spawn()
            .map_err(|e| format!("{}: {e}", self.binary.display()))?;
        let pid = child.id() as i32;
        let mut out = String::new();
        let mut err = String::new();
        if let Some(mut o) = child.stdout.take() {
            let _ = o.read_to_string(&mut out);
        }
        if let Some(mut e) = child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        let code = wait_pid(pid, sub);
        if code == 0 {
            Ok(out)
        } else {
            let err = err.trim();
            Err(if err.is_empty() {
                format!("germline-runtime {} exited with {code}", args.join(" "))
            } else {
                err.to_string()
            })
        }
    }

    /// `germline-runtime create`: the container's process gets `io` as its stdio, so errors
    /// come from the JSON log (as runc's do for containerd's runc shim).
    pub fn create(&self, bundle: &Path, id: &str, io: Stdio3) -> Result<i32, String> {
        let log = bundle.join("log.json");
        let pid_file = bundle.join("init.pid");
        let _ = std::fs::remove_file(&pid_file);
        let mut c = self.command(Some(&log));
        c.arg("create")
            .arg("--bundle")
            .arg(bundle)
            .arg("--pid-file")
            .arg(&pid_file)
            .arg(id)
            .current_dir(bundle)
            .stdin(Stdio::from(io.stdin))
            .stdout(Stdio::from(io.stdout))
            .stderr(Stdio::from(io.stderr));
        let sub = monitor_subscribe(Topic::Pid).map_err(|e| format!("monitor: {e}"))?;
        let child = c
            .spawn()
            .map_err(|e| format!("{}: {e}", self.binary.display()))?;
        // Our copies of the stdio fds went with `c`: only the container holds them now.
        drop(c);
        let code = wait_pid(child.id() as i32, sub);
        if code != 0 {
            return Err(last_error(&log).unwrap_or_else(|| {
                format!(
                    "germline-runtime create exited with {code} (see {})",
                    log.display()
                )
            }));
        }
        let text = std::fs::read_to_string(&pid_file)
            .map_err(|e| format!("{}: {e}", pid_file.display()))?;
        text.trim()
            .parse::<i32>()
            .map_err(|_| format!("{}: expected a pid, found {text:?}", pid_file.display()))
    }
}

/// The `error` messages of a runc-style JSON log, oldest first (a bundle handed to runc
/// has runc's own reason before germline-runtime's).
pub fn last_error(log: &Path) -> Option<String> {
    let text = std::fs::read_to_string(log).ok()?;
    let errs: Vec<String> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["level"] == "error")
        .filter_map(|v| v["msg"].as_str().map(str::to_string))
        .collect();
    (!errs.is_empty()).then(|| errs.join(": "))
}
