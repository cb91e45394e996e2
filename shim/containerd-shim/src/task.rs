//! The task service: one container per shim, its calls mapped onto `germline-runtime`.

use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use containerd_shim as shim;
use shim::api;
use shim::monitor::{Subject, Topic};
use shim::protos::events::task::{TaskCreate, TaskDelete, TaskExit, TaskStart};
use shim::protos::protobuf::well_known_types::timestamp::Timestamp;
use shim::protos::protobuf::{CodedInputStream, MessageField};
use shim::protos::topics;
use shim::protos::ttrpc;
use shim::publisher::RemotePublisher;
use shim::synchronous::monitor::monitor_subscribe;
use shim::{Config, DeleteResponse, ExitSignal, Flags, StartOpts, TtrpcContext, TtrpcResult};

use crate::runtime::{Runtime, Stdio3};

/// What the shim knows of its container.
#[derive(Debug, Clone)]
struct Container {
    id: String,
    bundle: PathBuf,
    pid: i32,
    started: bool,
    paused: bool,
    exit: Option<(u32, Timestamp)>,
    stdin: String,
    stdout: String,
    stderr: String,
    /// The rootfs this shim mounted at `bundle/rootfs` (containerd's snapshot mounts).
    mounted: bool,
}

struct Inner {
    namespace: String,
    runtime: Mutex<Runtime>,
    container: Mutex<Option<Container>>,
    changed: Condvar,
    /// Exits of pids not (yet) known as the container's: its process may exit before
    /// `create` has read its pid file.
    early: Mutex<HashMap<i32, (u32, Timestamp)>>,
    publisher: Mutex<RemotePublisher>,
    exit: Arc<ExitSignal>,
}

/// The shim (`Shim`) and its task service (`Task`).
#[derive(Clone)]
pub struct Service {
    namespace: String,
    id: String,
    exit: Arc<ExitSignal>,
    inner: Option<Arc<Inner>>,
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("namespace", &self.namespace)
            .field("id", &self.id)
            .finish()
    }
}

fn now() -> Timestamp {
    shim::util::timestamp().unwrap_or_default()
}

fn err(msg: impl Into<String>) -> ttrpc::Error {
    ttrpc::Error::RpcStatus(ttrpc::get_status(ttrpc::Code::UNKNOWN, msg.into()))
}

fn not_found(msg: impl Into<String>) -> ttrpc::Error {
    ttrpc::Error::RpcStatus(ttrpc::get_status(ttrpc::Code::NOT_FOUND, msg.into()))
}

fn failed(msg: impl Into<String>) -> ttrpc::Error {
    ttrpc::Error::RpcStatus(ttrpc::get_status(
        ttrpc::Code::FAILED_PRECONDITION,
        msg.into(),
    ))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl shim::Shim for Service {
    type T = Service;

    fn new(_runtime_id: &str, args: &Flags, _config: &mut Config) -> Self {
        Service {
            namespace: args.namespace.clone(),
            id: args.id.clone(),
            exit: Arc::new(ExitSignal::default()),
            inner: None,
        }
    }

    fn start_shim(&mut self, opts: StartOpts) -> Result<String, shim::Error> {
        let grouping = opts.id.clone();
        let (_pid, address) = shim::spawn(opts, &grouping, Vec::new())?;
        shim::util::write_address(&address)?;
        Ok(address)
    }

    /// containerd's cleanup after a shim died: remove what `germline-runtime` has of the
    /// container (the working directory is its bundle).
    fn delete_shim(&mut self) -> Result<DeleteResponse, shim::Error> {
        let rt = Runtime::new(&self.namespace);
        if let Err(e) = rt.run(&["delete", "--force", &self.id]) {
            shim::warn!("germline-runtime delete {}: {e}", self.id);
        }
        if let Ok(cwd) = std::env::current_dir() {
            unmount_rootfs(&cwd.join("rootfs"));
        }
        let mut r = DeleteResponse::new();
        r.exit_status = 128 + libc::SIGKILL as u32;
        r.exited_at = MessageField::some(now());
        Ok(r)
    }

    fn wait(&mut self) {
        self.exit.wait();
    }

    fn create_task_service(&self, publisher: RemotePublisher) -> Self::T {
        let inner = Arc::new(Inner {
            namespace: self.namespace.clone(),
            runtime: Mutex::new(Runtime::new(&self.namespace)),
            container: Mutex::new(None),
            changed: Condvar::new(),
            early: Mutex::new(HashMap::new()),
            publisher: Mutex::new(publisher),
            exit: self.exit.clone(),
        });
        match monitor_subscribe(Topic::Pid) {
            Ok(sub) => {
                let i = inner.clone();
                std::thread::spawn(move || {
                    while let Ok(ev) = sub.rx.recv() {
                        if let Subject::Pid(pid) = ev.subject {
                            i.exited(pid, ev.exit_code);
                        }
                    }
                });
            }
            Err(e) => shim::error!("cannot watch exits: {e}"),
        }
        let mut s = self.clone();
        s.inner = Some(inner);
        s
    }
}

impl Inner {
    fn publish(&self, topic: &str, event: Box<dyn shim::protos::protobuf::MessageDyn>) {
        let p = lock(&self.publisher);
        if let Err(e) = p.publish(shim::Context::default(), topic, &self.namespace, event) {
            shim::warn!("publish {topic}: {e}");
        }
    }

    /// A child was reaped: if it is the container's process, the container has stopped.
    fn exited(&self, pid: i32, code: i32) {
        let ts = now();
        let mut c = lock(&self.container);
        match c.as_mut() {
            Some(ct) if ct.pid == pid && ct.exit.is_none() => {
                ct.exit = Some((code as u32, ts.clone()));
                let ev = TaskExit {
                    container_id: ct.id.clone(),
                    id: ct.id.clone(),
                    pid: pid as u32,
                    exit_status: code as u32,
                    exited_at: MessageField::some(ts),
                    ..Default::default()
                };
                drop(c);
                self.changed.notify_all();
                self.publish(topics::TASK_EXIT_EVENT_TOPIC, Box::new(ev));
            }
            _ => {
                let mut e = lock(&self.early);
                if e.len() > 256 {
                    e.clear();
                }
                e.insert(pid, (code as u32, ts));
            }
        }
    }

    fn get(&self, id: &str) -> TtrpcResult<Container> {
        match lock(&self.container).as_ref() {
            Some(c) if c.id == id => Ok(c.clone()),
            _ => Err(not_found(format!("container {id:?} not found"))),
        }
    }
}

/// The one extra field containerd's runtime options for a non-runc shim carry:
/// `runtimeoptions.v1.Options{type_url = 1, config_path = 2}` (CRI's `options.ConfigPath`,
/// `ctr run --runtime-config-path`).
fn config_path(opts: &shim::protos::protobuf::well_known_types::any::Any) -> Option<PathBuf> {
    if !opts.type_url.ends_with("runtimeoptions.v1.Options") {
        return None;
    }
    let mut is = CodedInputStream::from_bytes(&opts.value);
    let mut path = None;
    while let Ok(Some(tag)) = is.read_raw_tag_or_eof() {
        let (field, wire) = (tag >> 3, tag & 7);
        if wire != 2 {
            return None;
        }
        let s = is.read_string().ok()?;
        if field == 2 && !s.is_empty() {
            path = Some(PathBuf::from(s));
        }
    }
    path
}

/// A pipe (read end, write end), close-on-exec.
fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
    let r = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded, so both fds are open and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// The container's stdio from containerd's fifos. stdin is copied from its fifo into a pipe
/// (opening a fifo for reading blocks until the client opens it, and a reader that opened
/// without blocking would see end-of-file before the client writes); the client's close
/// becomes the container's end-of-file. stdout and stderr are the fifos themselves, opened
/// read-write so that opening does not wait for the client.
fn open_stdio(stdin: &str, stdout: &str, stderr: &str) -> std::io::Result<Stdio3> {
    let null = || File::options().read(true).write(true).open("/dev/null");
    let out = |p: &str| -> std::io::Result<OwnedFd> {
        if p.is_empty() {
            return Ok(null()?.into());
        }
        Ok(File::options()
            .read(true)
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(p)?
            .into())
    };
    let stdin_fd: OwnedFd = if stdin.is_empty() {
        null()?.into()
    } else {
        let (r, w) = pipe()?;
        let path = stdin.to_string();
        std::thread::spawn(move || {
            let mut w = File::from(w);
            let Ok(mut f) = File::open(&path) else { return };
            let mut buf = [0u8; 65536];
            loop {
                match f.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if w.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                }
            }
        });
        r
    };
    Ok(Stdio3 {
        stdin: stdin_fd,
        stdout: out(stdout)?,
        stderr: out(stderr)?,
    })
}

fn unmount_rootfs(p: &Path) {
    if let Some(s) = p.to_str() {
        if let Err(e) = shim::mount::umount_recursive(Some(s), 0) {
            shim::warn!("unmount {s}: {e}");
        }
    }
}

/// The container's process and its descendants (`germline run`, its broker, its germline
/// and copies), from /proc.
fn descendants(root: i32) -> Vec<i32> {
    let mut parent: HashMap<i32, i32> = HashMap::new();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
                continue;
            };
            // `pid (comm) state ppid ...`: comm may hold spaces and parentheses.
            let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
                continue;
            };
            if let Some(ppid) = rest.split_whitespace().nth(1).and_then(|s| s.parse().ok()) {
                parent.insert(pid, ppid);
            }
        }
    }
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        let mut kids: Vec<i32> = parent
            .iter()
            .filter(|(_, pp)| **pp == p)
            .map(|(c, _)| *c)
            .collect();
        kids.sort_unstable();
        out.extend(kids);
        i += 1;
    }
    out
}

impl Service {
    fn inner(&self) -> TtrpcResult<&Arc<Inner>> {
        self.inner
            .as_ref()
            .ok_or_else(|| err("the task service is not set up"))
    }
}

impl shim::Task for Service {
    fn connect(
        &self,
        _ctx: &TtrpcContext,
        _req: api::ConnectRequest,
    ) -> TtrpcResult<api::ConnectResponse> {
        let inner = self.inner()?;
        let pid = lock(&inner.container).as_ref().map(|c| c.pid).unwrap_or(0);
        Ok(api::ConnectResponse {
            shim_pid: std::process::id(),
            task_pid: pid as u32,
            version: env!("CARGO_PKG_VERSION").to_string(),
            ..Default::default()
        })
    }

    fn create(
        &self,
        _ctx: &TtrpcContext,
        req: api::CreateTaskRequest,
    ) -> TtrpcResult<api::CreateTaskResponse> {
        let inner = self.inner()?;
        if lock(&inner.container).is_some() {
            return Err(failed(
                "this shim already has a container (one per shim; exec is not supported)",
            ));
        }
        if req.terminal {
            return Err(failed(
                "a terminal (-t) is not supported: germline serves MCP on the container's plain \
                 stdio",
            ));
        }
        if !req.checkpoint.is_empty() {
            return Err(failed("restoring a checkpoint is not supported"));
        }
        let bundle = PathBuf::from(&req.bundle);
        let rt = {
            let mut rt = lock(&inner.runtime);
            if let Some(opts) = req.options.as_ref() {
                if let Some(p) = config_path(opts) {
                    rt.config = Some(p);
                }
            }
            rt.clone()
        };
        let rootfs = bundle.join("rootfs");
        let mut mounted = false;
        for m in &req.rootfs {
            std::fs::create_dir_all(&rootfs).map_err(|e| err(format!("{e}")))?;
            shim::mount::mount_rootfs(
                Some(m.type_.as_str()),
                Some(m.source.as_str()),
                &m.options,
                &rootfs,
            )
            .map_err(|e| err(format!("mount the rootfs at {}: {e}", rootfs.display())))?;
            mounted = true;
        }
        let io = open_stdio(&req.stdin, &req.stdout, &req.stderr)
            .map_err(|e| err(format!("the container's stdio: {e}")))?;
        let pid = match rt.create(&bundle, &req.id, io) {
            Ok(p) => p,
            Err(e) => {
                if mounted {
                    unmount_rootfs(&rootfs);
                }
                return Err(err(e));
            }
        };
        let early = lock(&inner.early).remove(&pid);
        *lock(&inner.container) = Some(Container {
            id: req.id.clone(),
            bundle,
            pid,
            started: false,
            paused: false,
            exit: early,
            stdin: req.stdin.clone(),
            stdout: req.stdout.clone(),
            stderr: req.stderr.clone(),
            mounted,
        });
        inner.publish(
            topics::TASK_CREATE_EVENT_TOPIC,
            Box::new(TaskCreate {
                container_id: req.id.clone(),
                bundle: req.bundle.clone(),
                rootfs: req.rootfs.clone(),
                io: MessageField::some(shim::protos::events::task::TaskIO {
                    stdin: req.stdin.clone(),
                    stdout: req.stdout.clone(),
                    stderr: req.stderr.clone(),
                    terminal: false,
                    ..Default::default()
                }),
                pid: pid as u32,
                ..Default::default()
            }),
        );
        Ok(api::CreateTaskResponse {
            pid: pid as u32,
            ..Default::default()
        })
    }

    fn start(
        &self,
        _ctx: &TtrpcContext,
        req: api::StartRequest,
    ) -> TtrpcResult<api::StartResponse> {
        let inner = self.inner()?;
        if !req.exec_id.is_empty() {
            return Err(failed("exec is not supported"));
        }
        let c = inner.get(&req.id)?;
        let rt = lock(&inner.runtime).clone();
        rt.run(&["start", &req.id]).map_err(err)?;
        if let Some(ct) = lock(&inner.container).as_mut() {
            ct.started = true;
        }
        inner.publish(
            topics::TASK_START_EVENT_TOPIC,
            Box::new(TaskStart {
                container_id: req.id.clone(),
                pid: c.pid as u32,
                ..Default::default()
            }),
        );
        Ok(api::StartResponse {
            pid: c.pid as u32,
            ..Default::default()
        })
    }

    fn state(
        &self,
        _ctx: &TtrpcContext,
        req: api::StateRequest,
    ) -> TtrpcResult<api::StateResponse> {
        let inner = self.inner()?;
        let c = inner.get(&req.id)?;
        let status = match (&c.exit, c.started, c.paused) {
            (Some(_), _, _) => api::Status::STOPPED,
            (None, false, _) => api::Status::CREATED,
            (None, true, true) => api::Status::PAUSED,
            (None, true, false) => api::Status::RUNNING,
        };
        let mut r = api::StateResponse {
            id: c.id.clone(),
            bundle: c.bundle.display().to_string(),
            pid: c.pid as u32,
            stdin: c.stdin.clone(),
            stdout: c.stdout.clone(),
            stderr: c.stderr.clone(),
            terminal: false,
            ..Default::default()
        };
        r.status = status.into();
        if let Some((code, ts)) = c.exit {
            r.exit_status = code;
            r.exited_at = MessageField::some(ts);
        }
        Ok(r)
    }

    fn wait(&self, _ctx: &TtrpcContext, req: api::WaitRequest) -> TtrpcResult<api::WaitResponse> {
        let inner = self.inner()?;
        inner.get(&req.id)?;
        let mut g = lock(&inner.container);
        loop {
            match g.as_ref() {
                Some(c) if c.id == req.id => {
                    if let Some((code, ts)) = &c.exit {
                        return Ok(api::WaitResponse {
                            exit_status: *code,
                            exited_at: MessageField::some(ts.clone()),
                            ..Default::default()
                        });
                    }
                }
                // Deleted while we waited.
                _ => return Err(not_found(format!("container {:?} not found", req.id))),
            }
            g = inner.changed.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn kill(&self, _ctx: &TtrpcContext, req: api::KillRequest) -> TtrpcResult<api::Empty> {
        let inner = self.inner()?;
        let c = inner.get(&req.id)?;
        if c.exit.is_some() {
            return Err(not_found(format!("container {:?} has exited", req.id)));
        }
        let rt = lock(&inner.runtime).clone();
        let sig = req.signal.to_string();
        let mut args = vec!["kill"];
        if req.all {
            args.push("--all");
        }
        args.extend([req.id.as_str(), sig.as_str()]);
        rt.run(&args).map_err(err)?;
        Ok(api::Empty::new())
    }

    fn delete(
        &self,
        _ctx: &TtrpcContext,
        req: api::DeleteRequest,
    ) -> TtrpcResult<api::DeleteResponse> {
        let inner = self.inner()?;
        if !req.exec_id.is_empty() {
            return Err(not_found("exec is not supported"));
        }
        let c = inner.get(&req.id)?;
        let rt = lock(&inner.runtime).clone();
        rt.run(&["delete", "--force", &req.id]).map_err(err)?;
        if c.mounted {
            unmount_rootfs(&c.bundle.join("rootfs"));
        }
        // The process was killed by `delete --force` if it still ran; its exit is reaped.
        let (code, ts) = {
            let mut g = lock(&inner.container);
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
            loop {
                if let Some(e) = g.as_ref().and_then(|c| c.exit.clone()) {
                    break e;
                }
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                if left.is_zero() {
                    break (128 + libc::SIGKILL as u32, now());
                }
                g = inner
                    .changed
                    .wait_timeout(g, left)
                    .map(|(g, _)| g)
                    .unwrap_or_else(|p| p.into_inner().0);
            }
        };
        *lock(&inner.container) = None;
        inner.changed.notify_all();
        inner.publish(
            topics::TASK_DELETE_EVENT_TOPIC,
            Box::new(TaskDelete {
                container_id: req.id.clone(),
                id: req.id.clone(),
                pid: c.pid as u32,
                exit_status: code,
                exited_at: MessageField::some(ts.clone()),
                ..Default::default()
            }),
        );
        Ok(api::DeleteResponse {
            pid: c.pid as u32,
            exit_status: code,
            exited_at: MessageField::some(ts),
            ..Default::default()
        })
    }

    fn pids(&self, _ctx: &TtrpcContext, req: api::PidsRequest) -> TtrpcResult<api::PidsResponse> {
        let inner = self.inner()?;
        let c = inner.get(&req.id)?;
        let mut r = api::PidsResponse::new();
        if c.exit.is_none() {
            for pid in descendants(c.pid) {
                r.processes.push(shim::protos::types::task::ProcessInfo {
                    pid: pid as u32,
                    ..Default::default()
                });
            }
        }
        Ok(r)
    }

    fn stats(
        &self,
        _ctx: &TtrpcContext,
        req: api::StatsRequest,
    ) -> TtrpcResult<api::StatsResponse> {
        let inner = self.inner()?;
        let c = inner.get(&req.id)?;
        if c.exit.is_some() {
            return Err(not_found(format!("container {:?} has exited", req.id)));
        }
        let cg = shim::cgroup::get_cgroup(c.pid as u32).map_err(|e| err(e.to_string()))?;
        let m = shim::cgroup::collect_metrics(&cg).map_err(|e| err(e.to_string()))?;
        let any = shim::util::convert_to_any(Box::new(m)).map_err(|e| err(e.to_string()))?;
        Ok(api::StatsResponse {
            stats: MessageField::some(any),
            ..Default::default()
        })
    }

    fn pause(&self, _ctx: &TtrpcContext, req: api::PauseRequest) -> TtrpcResult<api::Empty> {
        self.set_paused(&req.id, true)
    }

    fn resume(&self, _ctx: &TtrpcContext, req: api::ResumeRequest) -> TtrpcResult<api::Empty> {
        self.set_paused(&req.id, false)
    }

    fn close_io(&self, _ctx: &TtrpcContext, req: api::CloseIORequest) -> TtrpcResult<api::Empty> {
        // stdin ends when the client closes its fifo (the copy then closes the pipe).
        self.inner()?.get(&req.id)?;
        Ok(api::Empty::new())
    }

    fn exec(&self, _ctx: &TtrpcContext, _req: api::ExecProcessRequest) -> TtrpcResult<api::Empty> {
        Err(failed(
            "exec is not supported: a germline container runs only its signed release",
        ))
    }

    fn shutdown(&self, _ctx: &TtrpcContext, _req: api::ShutdownRequest) -> TtrpcResult<api::Empty> {
        let inner = self.inner()?;
        if lock(&inner.container).is_some() {
            // containerd asks again after delete.
            return Ok(api::Empty::new());
        }
        inner.exit.signal();
        Ok(api::Empty::new())
    }
}

impl Service {
    fn set_paused(&self, id: &str, paused: bool) -> TtrpcResult<api::Empty> {
        let inner = self.inner()?;
        inner.get(id)?;
        let rt = lock(&inner.runtime).clone();
        rt.run(&[if paused { "pause" } else { "resume" }, id])
            .map_err(err)?;
        if let Some(c) = lock(&inner.container).as_mut() {
            c.paused = paused;
        }
        Ok(api::Empty::new())
    }
}
