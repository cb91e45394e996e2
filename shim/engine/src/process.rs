//! The baselines' tool process: the release's own entry point, started once (`sig-pin`,
//! `sig-ifc`, `confined-ifc`) or once per call (`fresh-ifc`), chrooted into the verified
//! rootfs with a private `/run` whose `items/` the shim fills per call. Confined processes also
//! get fresh network and IPC namespaces (egress only through the broker) and a read-only
//! Landlock ruleset; unconfined ones share the host's network and reach declared names through
//! the broker's open forward proxy, as an ordinary deployment behind a proxy would.

use std::ffi::{CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;

use germline_sandbox::mcp_client::{Channel, ClientError, LineChannel, LineError, Session};
use serde_json::{json, Value};

use crate::callmeta::{CallMeta, ItemKind};
use crate::error::{ProcessError, ToolFailure};

/// A running tool process speaking MCP over its stdio.
#[derive(Debug)]
pub struct ToolProcess {
    child: Child,
    chan: LineChannel<ChildStdin>,
    mcp: Session,
    pub pid: i32,
    /// Directory items bound so far, by the host directory's (device, inode): where the
    /// process sees each (`/run/items/dir<n>`). Bound once per process and reused by later
    /// calls, as an unprotected server keeps seeing the same host directory: no mount per
    /// call, and the mount table does not grow with the calls.
    dirs: Vec<((u64, u64), String)>,
}

/// How to start it.
#[derive(Debug, Clone)]
pub struct ProcessSpec {
    pub rootfs: PathBuf,
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Fresh network and IPC namespaces and Landlock.
    pub confined: bool,
    pub readable: Vec<String>,
    /// Read-only bind mounts `(host file, path inside the rootfs)`: the CA bundles.
    pub binds: Vec<(PathBuf, PathBuf)>,
    /// A host directory bound read-write at `/tmp`: the user's temporary directory, which an
    /// ordinary deployment shares between all of the user's tools (the baselines model that;
    /// `xtool` uses it). `None`: a private tmpfs.
    pub shared_tmp: Option<PathBuf>,
    /// The broker's copy proxy port: in a confined process's own namespace the only TCP
    /// port its Landlock layer lets it connect to.
    pub proxy_port: u16,
    /// A host directory bound read-write at `/run/state` when the manifest declares state
    /// paths: the baseline keeps its state on its own disk, as the unprotected server does
    /// ([`crate::state::baseline_dir`]; docs/policy.md "State in files"). `None`: no
    /// `/run/state`.
    pub state: Option<PathBuf>,
}

fn cstr(p: &Path) -> Result<CString, ProcessError> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| ProcessError::NulInPath(p.to_path_buf()))
}

fn check(r: libc::c_int) -> std::io::Result<()> {
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Binds `src` at `dst` (`rec`: `MS_REC`, with the mounts below `src`, or 0), then makes the
/// bind read-only. For the forked child before exec: two mount(2) calls on memory prepared
/// before the fork (async-signal-safe, nothing allocated).
fn bind_read_only(src: &CStr, dst: &CStr, rec: libc::c_ulong) -> std::io::Result<()> {
    let (none, no_data) = (std::ptr::null(), std::ptr::null());
    // SAFETY: `src` and `dst` are NUL-terminated and outlive the call; the type and data
    // arguments may be null for a bind.
    check(unsafe {
        libc::mount(
            src.as_ptr(),
            dst.as_ptr(),
            none,
            libc::MS_BIND | rec,
            no_data,
        )
    })?;
    let ro = libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY;
    // SAFETY: as above; a remount takes no source.
    check(unsafe { libc::mount(none, dst.as_ptr(), none, ro, no_data) })
}

impl ToolProcess {
    pub fn start(spec: &ProcessSpec) -> Result<ToolProcess, ProcessError> {
        let rootfs = spec
            .rootfs
            .canonicalize()
            .map_err(|source| ProcessError::Rootfs {
                path: spec.rootfs.clone(),
                source,
            })?;
        for d in ["run", "dev", "tmp"] {
            if !rootfs.join(d).is_dir() {
                return Err(ProcessError::MissingDir(d));
            }
        }
        let root = cstr(&rootfs)?;
        let run = cstr(&rootfs.join("run"))?;
        let items = cstr(&rootfs.join("run/items"))?;
        let state_at = cstr(&rootfs.join("run/state"))?;
        let state = match &spec.state {
            Some(d) if d.is_dir() => Some(cstr(d)?),
            Some(d) => return Err(ProcessError::StateDir(d.clone())),
            None => None,
        };
        let dev = cstr(&rootfs.join("dev"))?;
        let tmp = cstr(&rootfs.join("tmp"))?;
        let (tmp_opts, host_dev, tmpfs) = (c"size=64m,mode=1777", c"/dev", c"tmpfs");
        let (opts, slash) = (c"size=256m,mode=755", c"/");
        let shared_tmp = match &spec.shared_tmp {
            Some(d) if d.is_dir() => Some(cstr(d)?),
            Some(d) => return Err(ProcessError::SharedTmp(d.clone())),
            None => None,
        };
        let ruleset = if spec.confined {
            let mut rules: Vec<(String, u64, bool)> = Vec::new();
            for p in &spec.readable {
                let inside = rootfs.join(p.trim_start_matches('/'));
                if let Ok(m) = std::fs::metadata(&inside) {
                    rules.push((
                        inside.display().to_string(),
                        germline_sandbox::landlock::READ,
                        m.is_dir(),
                    ));
                }
            }
            rules.push((
                "/dev/null".into(),
                germline_sandbox::landlock::READ_WRITE_FILE,
                false,
            ));
            rules.push((
                "/dev/urandom".into(),
                germline_sandbox::landlock::READ,
                false,
            ));
            // Paths are as seen before chroot (the ruleset is applied before it).
            rules.push((
                rootfs.join("run").display().to_string(),
                germline_sandbox::landlock::READ,
                true,
            ));
            let abi = germline_sandbox::landlock::abi();
            // /tmp is writable, as confinement of the AgentBound and MCPGuard class leaves a
            // tool's scratch directory (the rule is resolved after /tmp is mounted).
            rules.push((
                rootfs.join("tmp").display().to_string(),
                germline_sandbox::landlock::all_fs_rights(abi),
                true,
            ));
            if spec.state.is_some() {
                // The state directory is the server's own disk (resolved after it is bound).
                rules.push((
                    rootfs.join("run/state").display().to_string(),
                    germline_sandbox::landlock::all_fs_rights(abi),
                    true,
                ));
            }
            // TCP connect only to the broker's proxy port, in the process's own namespace.
            Some(
                germline_sandbox::landlock::Ruleset::new(abi, rules, vec![], Some(spec.proxy_port))
                    .map_err(ProcessError::Landlock)?,
            )
        } else {
            None
        };
        let confined = spec.confined;
        let mut binds = Vec::new();
        for (src, rel) in &spec.binds {
            let target = rootfs.join(rel);
            if target.is_file() {
                binds.push((cstr(src)?, cstr(&target)?));
            }
        }
        let mut cmd = Command::new(spec.argv.first().ok_or(ProcessError::NoEntry)?);
        cmd.args(&spec.argv[1..])
            .env_clear()
            .envs(spec.env.iter().cloned())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        // SAFETY: the closure runs in the forked child before exec and calls only
        // async-signal-safe system calls on memory prepared before the fork.
        unsafe {
            cmd.pre_exec(move || {
                check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0))?;
                let mut flags = libc::CLONE_NEWNS;
                if confined {
                    flags |= libc::CLONE_NEWNET | libc::CLONE_NEWIPC;
                }
                check(libc::unshare(flags))?;
                check(libc::mount(
                    std::ptr::null(),
                    slash.as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ))?;
                // The verified rootfs, read-only: not even an unconfined baseline may change
                // the signed files (its writes would also break the next verification).
                bind_read_only(&root, &root, libc::MS_REC)?;
                check(libc::mount(
                    tmpfs.as_ptr(),
                    run.as_ptr(),
                    tmpfs.as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV,
                    opts.as_ptr().cast(),
                ))?;
                check(libc::mkdir(items.as_ptr(), 0o755))?;
                if let Some(src) = &state {
                    check(libc::mkdir(state_at.as_ptr(), 0o755))?;
                    check(libc::mount(
                        src.as_ptr(),
                        state_at.as_ptr(),
                        std::ptr::null(),
                        libc::MS_BIND,
                        std::ptr::null(),
                    ))?;
                }
                match &shared_tmp {
                    Some(src) => check(libc::mount(
                        src.as_ptr(),
                        tmp.as_ptr(),
                        std::ptr::null(),
                        libc::MS_BIND,
                        std::ptr::null(),
                    ))?,
                    None => check(libc::mount(
                        tmpfs.as_ptr(),
                        tmp.as_ptr(),
                        tmpfs.as_ptr(),
                        libc::MS_NOSUID | libc::MS_NODEV,
                        tmp_opts.as_ptr().cast(),
                    ))?,
                }
                check(libc::mount(
                    host_dev.as_ptr(),
                    dev.as_ptr(),
                    std::ptr::null(),
                    libc::MS_BIND | libc::MS_REC,
                    std::ptr::null(),
                ))?;
                for (src, dst) in &binds {
                    bind_read_only(src, dst, 0)?;
                }
                if let Some(r) = &ruleset {
                    check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
                    r.apply().map_err(|(_, e)| e)?;
                }
                check(libc::chroot(root.as_ptr()))?;
                check(libc::chdir(slash.as_ptr()))?;
                Ok(())
            });
        }
        let mut child = cmd.spawn().map_err(|source| ProcessError::Spawn {
            argv: spec.argv.join(" "),
            source,
        })?;
        let stdin = child.stdin.take().ok_or(ProcessError::NoPipe("stdin"))?;
        let stdout: ChildStdout = child.stdout.take().ok_or(ProcessError::NoPipe("stdout"))?;
        let chan = LineChannel::spawn(stdout, stdin);
        let pid = i32::try_from(child.id()).map_err(|_| ProcessError::Pid)?;
        Ok(ToolProcess {
            child,
            chan,
            mcp: Session::lenient(),
            pid,
            dirs: Vec::new(),
        })
    }

    /// Writes the call's items where the process sees them (`/run/items/<name>`).
    pub fn put_items(&self, items: &[(String, Vec<u8>)]) -> Result<(), String> {
        let dir = PathBuf::from(format!("/proc/{}/root/run/items", self.pid));
        for (name, contents) in items {
            let p = dir.join(name);
            std::fs::write(&p, contents).map_err(|e| format!("item {name}: {e}"))?;
        }
        Ok(())
    }

    /// The call's directory items (issue 27), where the process sees them: each directory's
    /// trusted host path bound read-write at `/run/items/dir<n>` in the process's own mount
    /// namespace, and `args` rewritten to name it (the directory's argument, and a file
    /// argument below it). A baseline is an ordinary deployment: its server reads and changes
    /// the host's files, as the unprotected server does, and what it writes stays on the host
    /// for its later calls (docs/security-matrix.md, `writeback`). A confined process's
    /// Landlock rule on `/run` is read-only, so there the directory cannot be changed.
    pub fn put_dirs(&mut self, meta: &CallMeta, args: &mut Value) -> Result<(), String> {
        use std::os::unix::fs::MetadataExt;
        for item in &meta.items {
            let ItemKind::Dir { host_path, trusted } = &item.kind else {
                continue;
            };
            // A declared workspace (`[workspaces]`) is no argument's value: the server reaches
            // it by its own configured path, which a baseline's rootfs shows or does not, as
            // before; the whole arguments must not be replaced by a path.
            if item.arg.is_root() {
                continue;
            }
            let id = std::fs::metadata(trusted)
                .map(|m| (m.dev(), m.ino()))
                .map_err(|e| format!("directory {}: {e}", host_path.display()))?;
            let inside = match self.dirs.iter().find(|(d, _)| *d == id) {
                Some((_, inside)) => inside.clone(),
                None => {
                    let inside = format!("{}/dir{}", crate::runtime::ITEMS_DIR, self.dirs.len());
                    self.bind_dir(trusted, &inside)
                        .map_err(|e| format!("directory {}: {e}", host_path.display()))?;
                    self.dirs.push((id, inside.clone()));
                    inside
                }
            };
            if let Some(slot) = item.arg.get_mut(args) {
                *slot = Value::String(inside.clone());
            }
            for f in &meta.items {
                if let (ItemKind::File { host_path: fp }, Some(slot)) =
                    (&f.kind, f.arg.get_mut(args))
                {
                    if let Ok(rel) = fp.strip_prefix(host_path) {
                        *slot = Value::String(format!("{inside}/{}", rel.display()));
                    }
                }
            }
        }
        Ok(())
    }

    /// Binds `host` at `inside` (a new directory under the process's `/run/items`): a detached
    /// clone of the host directory (`open_tree`), attached by a forked child that joins the
    /// process's mount namespace (`move_mount` attaches only in the caller's own namespace).
    fn bind_dir(&self, host: &Path, inside: &str) -> Result<(), String> {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::OpenOptionsExt;

        let at = PathBuf::from(format!("/proc/{}/root{inside}", self.pid));
        std::fs::create_dir(&at).map_err(|e| format!("make {inside}: {e}"))?;
        let target = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
            .open(&at)
            .map_err(|e| format!("open {inside}: {e}"))?;
        let ns = std::fs::File::open(format!("/proc/{}/ns/mnt", self.pid))
            .map_err(|e| format!("the process's mount namespace: {e}"))?;
        let src = cstr(host).map_err(|e| e.to_string())?;
        let tree = germline_sys::sys::open_tree_clone(&src)
            .map(germline_sys::sys::own)
            .map_err(|e| format!("clone (open_tree): {e}"))?;
        let (ns, tree, target) = (ns.as_raw_fd(), tree.as_raw_fd(), target.as_raw_fd());
        let pid = germline_sys::sys::fork().map_err(|e| format!("fork: {e}"))?;
        if pid == 0 {
            // The child: fork-safe system calls only, on descriptors opened before the fork.
            let code = match germline_sys::sys::setns(ns, libc::CLONE_NEWNS)
                .and_then(|()| germline_sys::sys::move_mount_fds(tree, target))
            {
                Ok(()) => 0,
                Err(e) => e.raw_os_error().unwrap_or(255),
            };
            germline_sys::sys::exit_now(code);
        }
        let (_, status) =
            germline_sys::sys::waitpid(pid, 0).map_err(|e| format!("wait for the binder: {e}"))?;
        match (libc::WIFEXITED(status), libc::WEXITSTATUS(status)) {
            (true, 0) => Ok(()),
            (true, code) => Err(format!(
                "attach in the process (setns, move_mount): {}",
                std::io::Error::from_raw_os_error(code)
            )),
            _ => Err(format!("the binder ended with status {status}")),
        }
    }

    /// One JSON-RPC request; notifications the process sends meanwhile are skipped.
    pub fn request(
        &mut self,
        method: &str,
        params: Value,
        deadline: Instant,
    ) -> Result<Value, ToolFailure> {
        self.exchange(deadline, |mcp, chan| mcp.request(chan, method, params))
    }

    /// Like [`ToolProcess::request`], with one handler for the notifications and the requests
    /// the tool sends meanwhile (as `Copy::request_relayed` in the sandbox):
    /// `Some({"result": ..})` or `Some({"error": ..})` answers a request, `None` refuses it.
    pub fn request_relayed(
        &mut self,
        method: &str,
        params: Value,
        deadline: Instant,
        handler: &mut dyn FnMut(&Value) -> Option<Value>,
    ) -> Result<Value, ToolFailure> {
        self.exchange(deadline, |mcp, chan| {
            mcp.request_relayed(chan, method, params, handler)
        })
    }

    /// initialize (once), then tools/call with the call's `_meta`.
    pub fn mcp_call(
        &mut self,
        tool: &str,
        arguments: Value,
        meta: Option<Value>,
        deadline: Instant,
        handler: &mut dyn FnMut(&Value) -> Option<Value>,
    ) -> Result<Value, ToolFailure> {
        self.ensure_initialized(deadline)?;
        let params = Session::tools_call_params(tool, arguments, meta);
        self.request_relayed("tools/call", params, deadline, handler)
    }

    pub fn ensure_initialized(&mut self, deadline: Instant) -> Result<(), ToolFailure> {
        self.exchange(deadline, |mcp, chan| mcp.ensure_handshake(chan))
    }

    /// `f` on the process's MCP session and its channel, before `deadline`; a failure in this
    /// module's words.
    fn exchange<T>(
        &mut self,
        deadline: Instant,
        f: impl FnOnce(&mut Session, &mut LineChannel<ChildStdin>) -> Result<T, ClientError<LineError>>,
    ) -> Result<T, ToolFailure> {
        self.chan.set_deadline(deadline);
        f(&mut self.mcp, &mut self.chan).map_err(failure)
    }

    /// Every wait for the process from now on also ends once `cancel` fires.
    pub fn set_cancel(&mut self, cancel: Option<std::sync::Arc<germline_sandbox::Cancel>>) {
        self.chan.set_cancel(cancel);
    }

    /// Tells the process that the agent cancelled the shim's last request to it (as the
    /// unprotected server would be told), so that it stops working on it; its late answer, if
    /// it sends one, is skipped by the next request's wait (an id nobody waits for).
    pub fn cancel_last(&mut self) {
        if let Some(id) = self.mcp.last_request_id() {
            let line = format!(
                "{}\n",
                json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                       "params": {"requestId": id, "reason": "the agent cancelled the request"}})
            );
            let _ = self.chan.send_line(line.as_bytes());
        }
    }

    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ToolProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A failed request: the process's own JSON-RPC error object, or in the words this module
/// always used.
fn failure(e: ClientError<LineError>) -> ToolFailure {
    match e {
        ClientError::Failed { error, .. } => ToolFailure::Server(error),
        e => ToolFailure::Said(text(e)),
    }
}

/// A failed request in the words this module always used.
fn text(e: ClientError<LineError>) -> String {
    match e {
        ClientError::Channel(LineError::Closed) => "the tool process closed its stdout".into(),
        ClientError::Channel(LineError::Read(e)) => format!("reading the tool's stdout: {e}"),
        ClientError::Channel(LineError::Deadline) => {
            "the tool process did not answer before its deadline".into()
        }
        ClientError::Channel(LineError::Write(e)) => {
            format!("the tool process stopped reading: {e}")
        }
        ClientError::Channel(LineError::Cancelled) => "the agent cancelled the request".into(),
        ClientError::NotJson(_) => "the tool process sent a line that is not JSON".into(),
        // `{method} failed: {error}`, `a response without result`; a lenient session never
        // refuses a message as not JSON-RPC, and `ensure_handshake` never re-initialises.
        e => e.to_string(),
    }
}
