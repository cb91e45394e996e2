//! One confined copy: its channel, its cgroup and its absolute deadline (issue 4, item 5).

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;

use crate::cancel::Cancel;
use crate::cgroup::Cgroup;
use crate::error::{Error, Result};
use crate::mcp_client::{Channel, ClientError, Session};
use crate::mounts::{ItemsDir, SlotLease};
use crate::procfs::Namespaces;
use crate::protocol::{self, DataItem, ToCopy, Twin};
use crate::sys;

/// One item for a copy: its name (the file `/run/items/<name>` and the memfd's name), its
/// contents, whether it is in the copy's view (outside it the copy gets an empty file, A5),
/// and optionally its own absolute path inside the copy (`/home/alice/invoice.pdf`), where it
/// is mounted too, in that copy's mount namespace only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub name: String,
    pub contents: Vec<u8>,
    pub in_view: bool,
    pub path: Option<String>,
}

impl Item {
    /// An item known by its name only.
    pub fn named(name: &str, contents: Vec<u8>, in_view: bool) -> Item {
        Item {
            name: name.to_string(),
            contents,
            in_view,
            path: None,
        }
    }

    /// The same item, also at `path` inside the copy.
    pub fn at(mut self, path: &str) -> Item {
        self.path = Some(path.to_string());
        self
    }

    /// The contents the copy gets: empty outside its view.
    pub fn visible(&self) -> &[u8] {
        if self.in_view {
            &self.contents
        } else {
            &[]
        }
    }
}

impl From<&(String, Vec<u8>, bool)> for Item {
    fn from((name, contents, in_view): &(String, Vec<u8>, bool)) -> Item {
        Item::named(name, contents.clone(), *in_view)
    }
}

/// The largest message we accept from a copy before calling it malformed.
const MAX_LINE: usize = 16 << 20;

/// A live copy. Dropping it kills it with all its descendants.
#[derive(Debug)]
pub struct Copy {
    pid: i32,
    /// The tool's host pid when it runs under a reaper (the copy's `pid`).
    tool: Option<i32>,
    /// The copy socket, bounded by the copy's one deadline.
    chan: CopyChannel,
    /// The MCP client's state towards the copy.
    mcp: Session,
    cgroup: Cgroup,
    fork_at: Instant,
    ready_at: Option<Instant>,
    ns: Option<Namespaces>,
    dead: bool,
    /// `false` only under the cgroup-sweep ablation.
    #[cfg(feature = "ablation")]
    sweep: bool,
    /// Checked to be PID 1 of a PID namespace of its own (O3).
    own_pidns: bool,
    /// Its network namespace while offered to the broker, which prepares its endpoint
    /// ([`crate::Germline::endpoints_to_prepare`]); listed for the broker to forget if the
    /// copy is dropped before a call takes it (crate::offered).
    pub(crate) offered: Option<crate::offered::Offered>,
    /// Item store slots mounted in this copy; freed (and emptied) once it is dead and no
    /// [`TreeLayer`] of it is held.
    leases: Vec<Arc<SlotLease>>,
    /// The slots bound read-write, holding directory items (issue 27), by mount point.
    trees: Vec<(String, Arc<SlotLease>)>,
    /// Its `/run/items`, once the mounts that need no data are made (pool copies).
    items_dir: Option<ItemsDir>,
    /// Twin inputs `(time_ns, seed)` sent with the data (A4), if set.
    twin: Option<(u128, u64)>,
    /// A pool copy's state while it waits ([`PoolState`]).
    pool_state: PoolState,
}

/// Where a pool copy is while it waits for a call (docs/sandbox.md, "The pool"). Only a
/// `Ready` copy is handed out for a call's first copy: a `Warming` one would make the call wait
/// behind its synthetic session and handshake, which is slower than forking a fresh copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PoolState {
    /// Forked, confined and checked; nothing asked of it yet (not a pool copy).
    Forked,
    /// Asked to run its warming session (if the germline warmed) and its MCP handshake; it
    /// has not answered the handshake yet.
    Warming,
    /// It answered its handshake: the warming session, which it runs first, is over.
    Ready,
}

/// The copy socket as a [`Channel`]: newline-delimited JSON, every wait bounded by the copy's
/// one deadline, items' descriptors sent along with a line.
#[derive(Debug)]
pub(crate) struct CopyChannel {
    sock: OwnedFd,
    buf: Vec<u8>,
    deadline: Instant,
    /// The agent's cancellation of the request this copy serves: a wait ends when it fires.
    cancel: Option<Arc<Cancel>>,
}

impl CopyChannel {
    /// A channel on `sock` whose waits end at `deadline` (spawned copies, crate::spawn).
    pub(crate) fn new(sock: OwnedFd, deadline: Instant) -> CopyChannel {
        CopyChannel {
            sock,
            buf: Vec::new(),
            deadline,
            cancel: None,
        }
    }

    pub(crate) fn set_deadline(&mut self, deadline: Instant) {
        self.deadline = deadline;
    }

    pub(crate) fn set_cancel(&mut self, cancel: Option<Arc<Cancel>>) {
        self.cancel = cancel;
    }

    pub(crate) fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Whether the copy has sent anything not read yet (never blocks).
    fn has_input(&self) -> bool {
        self.buf.contains(&b'\n') || sys::poll_readable(self.sock.as_raw_fd(), 0).unwrap_or(false)
    }

    fn send_raw(&self, line: &[u8], fds: &[i32]) -> Result<()> {
        let mut sent = sys::send_with_fds(self.sock.as_raw_fd(), line, fds)
            .map_err(|e| Error::Crashed(format!("send: {e}")))?;
        while sent < line.len() {
            sent += sys::send_with_fds(self.sock.as_raw_fd(), &line[sent..], &[])
                .map_err(|e| Error::Crashed(format!("send: {e}")))?;
        }
        Ok(())
    }
}

impl Channel for CopyChannel {
    type Error = Error;

    fn send_line(&mut self, line: &[u8]) -> Result<()> {
        self.send_raw(line, &[])
    }

    fn recv_line(&mut self) -> Result<Vec<u8>> {
        loop {
            if let Some(pos) = self.buf.iter().position(|&b| b == b'\n') {
                return Ok(self.buf.drain(..=pos).collect());
            }
            if self.buf.len() > MAX_LINE {
                return Err(Error::Malformed("a message longer than 16 MiB".into()));
            }
            if self.cancel.as_ref().is_some_and(|c| c.fired()) {
                return Err(Error::Cancelled);
            }
            let left = self.deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Error::Deadline);
            }
            let ms = i32::try_from(left.as_millis().max(1)).unwrap_or(i32::MAX);
            let (ready, cancelled) = match &self.cancel {
                Some(c) => sys::poll_readable2(self.sock.as_raw_fd(), c.fd(), ms),
                None => sys::poll_readable(self.sock.as_raw_fd(), ms).map(|r| (r, false)),
            }
            .map_err(|e| Error::sys("poll copy", e))?;
            if cancelled {
                return Err(Error::Cancelled);
            }
            if !ready {
                return Err(Error::Deadline);
            }
            let mut chunk = vec![0u8; 1 << 16];
            let n = sys::recv(self.sock.as_raw_fd(), &mut chunk)
                .map_err(|e| Error::Crashed(format!("recv: {e}")))?;
            if n == 0 {
                return Err(Error::Crashed("the copy closed its channel".into()));
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// A failed request as the crate's error, with the texts the copy's errors always had.
pub(crate) fn client_error(e: ClientError<Error>) -> Error {
    match e {
        ClientError::Channel(e) => e,
        e @ (ClientError::NotJson(_) | ClientError::NotJsonRpc | ClientError::NoResult) => {
            Error::Malformed(e.to_string())
        }
        ClientError::Failed { method, error } => Error::Server { method, error },
        e @ ClientError::AlreadyInitialized => Error::Spec(e.to_string()),
    }
}

impl Copy {
    pub(crate) fn new(
        pid: i32,
        sock: OwnedFd,
        cgroup: Cgroup,
        fork_at: Instant,
        deadline: Instant,
    ) -> Copy {
        Copy {
            pid,
            tool: None,
            chan: CopyChannel {
                sock,
                buf: Vec::new(),
                deadline,
                cancel: None,
            },
            mcp: Session::strict(),
            cgroup,
            fork_at,
            ready_at: None,
            ns: None,
            dead: false,
            #[cfg(feature = "ablation")]
            sweep: true,
            own_pidns: false,
            offered: None,
            leases: Vec::new(),
            trees: Vec::new(),
            items_dir: None,
            twin: None,
            pool_state: PoolState::Forked,
        }
    }

    /// The copy's pool state, read without blocking: a `Warming` copy becomes `Ready` once its
    /// handshake's answer is there to read (the copy sends nothing before it: the warming
    /// session runs first and answers nothing). The answer stays unread until the call reads
    /// it with the answer of its first request, as for any copy.
    pub fn pool_state(&mut self) -> PoolState {
        if self.pool_state == PoolState::Warming && self.chan.has_input() {
            self.pool_state = PoolState::Ready;
        }
        self.pool_state
    }

    pub(crate) fn set_warming(&mut self) {
        self.pool_state = PoolState::Warming;
    }

    /// Host pid of the copy (PID 1 of its own namespace).
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Host pid of the tool when it runs as PID 2 under a reaper (`Options::reaper`).
    pub fn tool_pid(&self) -> Option<i32> {
        self.tool
    }

    pub(crate) fn set_tool(&mut self, tool: Option<i32>) {
        self.tool = tool;
    }

    /// The copy's cgroup.
    pub fn cgroup(&self) -> &Cgroup {
        &self.cgroup
    }

    /// The copy's namespaces as read by the checks.
    pub fn namespaces(&self) -> Option<&Namespaces> {
        self.ns.as_ref()
    }

    pub(crate) fn set_namespaces(&mut self, ns: Option<Namespaces>) {
        self.ns = ns;
    }

    #[cfg(feature = "ablation")]
    pub(crate) fn set_sweep(&mut self, sweep: bool) {
        self.sweep = sweep;
    }

    /// Whether the end of the copy kills its whole cgroup (always, but under the ablation).
    fn sweeps(&self) -> bool {
        #[cfg(feature = "ablation")]
        let sweep = self.sweep;
        #[cfg(not(feature = "ablation"))]
        let sweep = true;
        sweep
    }

    /// Records that the checks found the copy to be PID 1 of a PID namespace of its own.
    pub(crate) fn set_own_pidns(&mut self, own: bool) {
        self.own_pidns = own;
    }

    /// Holds `lease` until the copy is dead; `tree_at`: the mount point of a slot bound
    /// read-write for directory items.
    pub(crate) fn hold(&mut self, lease: SlotLease, tree_at: Option<String>) {
        let lease = Arc::new(lease);
        if let Some(at) = tree_at {
            self.trees.push((at, lease.clone()));
        }
        self.leases.push(lease);
    }

    /// The copy's writable layer of the directory item at `host_dir` (issue 27; `None`: it
    /// has none here), read through a descriptor of the slot it was written into. The layer
    /// keeps the slot (neither emptied nor reused) while it is held, so it is read after the
    /// copy is retired (frozen, then killed): see [`TreeLayer::read`].
    pub fn tree_layer(&self, host_dir: &str) -> Result<Option<TreeLayer>> {
        for (at, lease) in &self.trees {
            let rel = if host_dir == at {
                "."
            } else {
                match host_dir
                    .strip_prefix(at.as_str())
                    .and_then(|r| r.strip_prefix('/'))
                {
                    Some(r) => r,
                    None => continue,
                }
            };
            let rel = CString::new(rel).map_err(|_| Error::Spec("NUL in a tree path".into()))?;
            let fd = sys::open_beneath(lease.fd(), &rel)
                .map(sys::own)
                .map_err(|e| Error::sys(format!("open the copy's layer of {host_dir}"), e))?;
            return Ok(Some(TreeLayer {
                dir: crate::statedir::StateDir::from_fd(fd),
                _lease: lease.clone(),
            }));
        }
        Ok(None)
    }

    pub(crate) fn set_items_dir(&mut self, dir: ItemsDir) {
        self.items_dir = Some(dir);
    }

    pub(crate) fn items_dir(&self) -> Option<&ItemsDir> {
        self.items_dir.as_ref()
    }

    pub(crate) fn mark_ready(&mut self) {
        self.ready_at = Some(Instant::now());
    }

    pub(crate) fn restart_deadline(&mut self, d: Duration) {
        self.chan.deadline = Instant::now() + d;
    }

    /// Time from the fork command to a checked copy ready for data.
    pub fn fork_to_ready(&self) -> Option<Duration> {
        self.ready_at.map(|r| r - self.fork_at)
    }

    /// Every wait for the copy from now on also ends, with [`Error::Cancelled`], when `cancel`
    /// fires (the agent cancelled the request the copy serves).
    pub fn set_cancel(&mut self, cancel: Option<Arc<Cancel>>) {
        self.chan.cancel = cancel;
    }

    /// The copy's absolute deadline (monotonic), shared with the broker.
    pub fn deadline(&self) -> Instant {
        self.chan.deadline
    }

    /// Private memory of the copy in bytes (Private_Clean + Private_Dirty of smaps_rollup), of
    /// its reaper and tool together when it has one.
    pub fn private_memory(&self) -> Option<u64> {
        germline_sys::procfs::private_memory(std::iter::once(self.pid).chain(self.tool))
    }

    /// Asks a checked, data-free pool copy to run the germline's warming session once more
    /// while it waits for its call (no answer: the copy reads its `data` after it).
    pub(crate) fn request_prewarm(&self) -> Result<()> {
        self.chan
            .send_raw(&protocol::encode_line(&ToCopy::Prewarm), &[])
    }

    /// Reads one newline-terminated JSON message, before the deadline.
    pub fn recv_json(&mut self) -> Result<Value> {
        let line = self.chan.recv_line()?;
        serde_json::from_slice(&line).map_err(|e| Error::Malformed(format!("not JSON: {e}")))
    }

    /// Sets the twin inputs `(time_ns, seed)` the copy derives its clocks and entropy from
    /// (paper A4); sent with the data by [`Copy::deliver`].
    pub fn set_twin(&mut self, twin: Option<(u128, u64)>) {
        self.twin = twin;
    }

    /// Sends the items (those in the view with contents, the others empty) as memfds.
    pub fn deliver(&mut self, items: &[(String, Vec<u8>, bool)]) -> Result<()> {
        let items: Vec<Item> = items.iter().map(Item::from).collect();
        self.deliver_items(&items)
    }

    /// Like [`Copy::deliver`], for [`Item`]s; the message names each item's path too.
    pub fn deliver_items(&mut self, items: &[Item]) -> Result<()> {
        if items.len() > 64 {
            return Err(Error::Spec(format!(
                "{} items: at most 64 per copy",
                items.len()
            )));
        }
        let mut fds = Vec::new();
        let mut names = Vec::new();
        for item in items {
            let c =
                CString::new(item.name.as_str()).map_err(|_| Error::Spec("item name".into()))?;
            let fd = sys::memfd(&c).map_err(|e| Error::sys("memfd_create", e))?;
            sys::write_all_raw(fd.as_raw_fd(), item.visible())
                .map_err(|e| Error::sys("write memfd", e))?;
            fds.push(fd);
            names.push(DataItem {
                name: item.name.clone(),
                path: item.path.clone(),
            });
        }
        let raw: Vec<i32> = fds.iter().map(AsRawFd::as_raw_fd).collect();
        // A control line starts with `{"op":` (no JSON-RPC line does; see the bootstrap): the
        // tag comes first in the encoding of `ToCopy`.
        let line = protocol::encode_line(&ToCopy::Data {
            items: names,
            twin: self.twin.map(|(time_ns, seed)| Twin {
                // u128 does not fit a JSON number every reader accepts: send the clock as u64.
                time_ns: u64::try_from(time_ns).unwrap_or(u64::MAX),
                seed,
            }),
        });
        // Not acknowledged: the copy installs the data before it reads the next line, and the
        // call's answer (or a broken channel) says the rest.
        self.chan.send_raw(&line, &raw)?;
        drop(fds);
        Ok(())
    }

    /// Sends one JSON-RPC request and waits for its response, skipping notifications. Every
    /// wait is bounded by the copy's one deadline, however many messages it sends.
    pub fn request(&mut self, method: &str, params: Value) -> Result<Value> {
        self.mcp
            .request(&mut self.chan, method, params)
            .map_err(client_error)
    }

    /// Like [`Copy::request`], handing every notification the copy sends meanwhile to
    /// `observer`. Requests the copy makes of the client (sampling, elicitation, roots) are
    /// answered at once with an error: during a call the shim is the copy's only client.
    pub fn request_observed(
        &mut self,
        method: &str,
        params: Value,
        observer: &mut dyn FnMut(&Value),
    ) -> Result<Value> {
        self.mcp
            .request_observed(&mut self.chan, method, params, observer)
            .map_err(client_error)
    }

    /// Like [`Copy::request_observed`], with one handler for everything the copy sends
    /// meanwhile: it sees every notification (its answer is ignored) and every request other
    /// than `ping`, and answers a request with `Some({"result": ..})` or
    /// `Some({"error": ..})`; `None` refuses it. The handler may block (it may ask the
    /// agent), but every wait here stays bounded by the copy's one deadline.
    pub fn request_relayed(
        &mut self,
        method: &str,
        params: Value,
        handler: &mut dyn FnMut(&Value) -> Option<Value>,
    ) -> Result<Value> {
        self.mcp
            .request_relayed(&mut self.chan, method, params, handler)
            .map_err(client_error)
    }

    /// Sets the client capabilities the copy's `initialize` announces (the agent's
    /// `sampling` and `elicitation`, where the shim relays them); `{}` by default.
    pub fn set_client_capabilities(&mut self, caps: Value) {
        self.mcp.set_client_capabilities(caps);
    }

    /// Sends a JSON-RPC notification.
    pub fn notify(&mut self, method: &str) -> Result<()> {
        self.mcp
            .notify(&mut self.chan, method)
            .map_err(client_error)
    }

    /// The MCP session of one call: initialize and initialized (once per copy), tools/call.
    pub fn mcp_call(&mut self, tool: &str, arguments: Value) -> Result<Value> {
        self.begin_initialize()?;
        self.request(
            "tools/call",
            Session::tools_call_params(tool, arguments, None),
        )
    }

    /// Sends the copy's MCP `initialize` (with the client capabilities set for it) and
    /// `notifications/initialized` without waiting for the answer, unless done already. The
    /// handshake is public, so it may run before the data: a fresh copy answers it while the
    /// shim prepares its mounts and broker endpoint, a pool copy while it waits for a call. The
    /// answer is read, and checked, before the answer of the next request.
    pub fn begin_initialize(&mut self) -> Result<()> {
        self.mcp
            .begin_initialize(&mut self.chan)
            .map_err(client_error)
    }

    /// The capabilities this copy's `initialize` announced, once sent.
    pub fn initialized_with(&self) -> Option<&Value> {
        self.mcp.initialized_with()
    }

    /// [`Copy::mcp_call`] with the call's `_meta` (a progress token) and an observer of the
    /// copy's notifications (progress, log messages).
    pub fn mcp_call_observed(
        &mut self,
        tool: &str,
        arguments: Value,
        meta: Option<Value>,
        observer: &mut dyn FnMut(&Value),
    ) -> Result<Value> {
        self.mcp_call_relayed(tool, arguments, meta, &mut |m| {
            if m.get("id").is_none() {
                observer(m);
            }
            None
        })
    }

    /// [`Copy::mcp_call_observed`] with a handler of the copy's requests too (see
    /// [`Copy::request_relayed`]).
    pub fn mcp_call_relayed(
        &mut self,
        tool: &str,
        arguments: Value,
        meta: Option<Value>,
        handler: &mut dyn FnMut(&Value) -> Option<Value>,
    ) -> Result<Value> {
        self.initialize()?;
        let params = Session::tools_call_params(tool, arguments, meta);
        self.request_relayed("tools/call", params, handler)
    }

    /// The copy's MCP `initialize` and `notifications/initialized`, with the client
    /// capabilities set for it, unless done already ([`Copy::mcp_call_relayed`] calls it;
    /// callers that time the handshake apart call it first).
    pub fn initialize(&mut self) -> Result<()> {
        self.mcp.initialize(&mut self.chan).map_err(client_error)
    }

    /// Any other MCP request of a data-free copy (`tools/list`, `resources/read`, ...), after
    /// its own initialize; `initialize` itself is sent with the agent's parameters and its
    /// result returned.
    pub fn mcp_call_method(&mut self, method: &str, params: Value) -> Result<Value> {
        if method == "initialize" {
            // The agent's own handshake needs a copy that has not made one (its protocol
            // version may differ): Germline::fork_copy, never a pool copy.
            return self
                .mcp
                .handshake(&mut self.chan, params)
                .map_err(client_error);
        }
        self.begin_initialize()?;
        self.request(method, params)
    }

    /// Ends the call: kills the copy, and turns a broken channel into the real reason (memory
    /// limit, deadline) where the kernel says so.
    pub fn finish(mut self, result: Result<Value>) -> Result<Value> {
        let result = self.reason(result);
        self.kill();
        result
    }

    /// A broken channel as the real reason (memory limit, deadline) where the kernel says
    /// so; read before the kill, which would count as neither.
    fn reason(&self, result: Result<Value>) -> Result<Value> {
        match result {
            Err(_) if self.cgroup.oom_kills() > 0 => Err(Error::MemoryLimit),
            Err(Error::Crashed(_)) if Instant::now() >= self.chan.deadline => Err(Error::Deadline),
            other => other,
        }
    }

    /// Ends the call like [`Copy::finish`], without waiting for the kernel to finish the
    /// copy's exit: every task of the copy is frozen now (its cgroup; it never runs user
    /// code again) and killed by [`Corpse::kill`] once the call's answer is out (SPEC.md "kill
    /// the copy and all its descendants"); the returned [`Corpse`] removes its cgroup and
    /// frees its item directories once the last task is gone. The exit of a Python copy
    /// (unmapping tens of MB, in the kernel, where this kernel does not preempt it) is then off
    /// the call's path. With the cgroup sweep ablated this waits as [`Copy::finish`] does and
    /// returns no corpse.
    pub fn retire(mut self, result: Result<Value>) -> (Result<Value>, Option<Corpse>) {
        let result = self.reason(result);
        if !self.sweeps() {
            self.kill();
            return (result, None);
        }
        self.dead = true;
        let mut frozen = None;
        if self.pid > 1 {
            // Its exit (unmapping tens of MB, ending its namespaces) then runs only on a CPU
            // that nothing else wants.
            for p in std::iter::once(self.pid).chain(self.tool) {
                let _ = sys::set_sched_idle(p, true);
            }
            // Frozen rather than killed now: a Python copy's exit is milliseconds of kernel
            // work that a kernel without preemption (PREEMPT_NONE) does not interrupt, so it
            // delayed the broker's and the shim's own wake-ups on the answer's way out. A
            // frozen task cannot die (v1) and runs nothing: killed by Corpse::kill.
            if self.own_pidns && self.cgroup.request_frozen(true).is_ok() {
                frozen = Some(self.pid);
            } else {
                let _ = sys::kill(self.pid, libc::SIGKILL);
            }
        }
        // PID 1 of its own PID namespace: as it exits the kernel kills every other task of the
        // namespace, and none can be added to it any more (O3). Whatever such a task still
        // does before it dies goes nowhere: the broker ends the copy's endpoint next, before
        // the answer. Otherwise the cgroup is killed (v1: freeze, SIGKILL each task, thaw,
        // which waits for the freeze); the corpse kills it again if a task outlives a second.
        if !self.own_pidns {
            let _ = self.cgroup.kill_now();
        }
        let corpse = Corpse {
            cgroup: self.cgroup.take(),
            leases: std::mem::take(&mut self.leases),
            since: Instant::now(),
            frozen,
        };
        (result, Some(corpse))
    }

    /// Kills the copy and every descendant (PID 1 of its namespace: they all die with it; the
    /// cgroup is emptied too) and removes its cgroup.
    pub fn kill(&mut self) {
        if self.dead {
            return;
        }
        self.dead = true;
        // Never kill(0) or kill(-1): those mean our process group and everything.
        if self.pid > 1 {
            let _ = sys::kill(self.pid, libc::SIGKILL);
        }
        if self.sweeps() {
            let _ = self.cgroup.destroy();
            // Every task is gone, and with them the copy's mount namespace: its item
            // directories can be emptied and reused.
            self.leases.clear();
        } else {
            // Ablation: only the copy's own process dies; wait for it, leave the rest.
            let t = Instant::now();
            while crate::procfs::alive(self.pid) && t.elapsed() < Duration::from_secs(2) {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

/// A copy's writable layer of one directory item ([`Copy::tree_layer`]).
#[derive(Debug)]
pub struct TreeLayer {
    dir: crate::statedir::StateDir,
    _lease: Arc<SlotLease>,
}

impl TreeLayer {
    /// Every regular file and directory the copy left below the directory item, read without
    /// following any symbolic link (`openat2` beneath the layer, as a state tmpfs is read);
    /// symlinks, devices, FIFOs and sockets are listed in `skipped`, never read. Call it once
    /// the copy is retired.
    pub fn read(&self) -> Result<crate::statedir::StateFiles> {
        self.dir.read()
    }
}

impl Drop for Copy {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A retired copy ([`Copy::retire`]): frozen until [`Corpse::kill`], then exiting; holds its
/// cgroup and its item directories until the last task is gone.
#[derive(Debug)]
pub struct Corpse {
    cgroup: Cgroup,
    leases: Vec<Arc<SlotLease>>,
    since: Instant,
    /// PID 1 of the copy's namespace while its cgroup is frozen, not yet killed.
    frozen: Option<i32>,
}

impl Corpse {
    /// How long ago the copy was sent SIGKILL (or frozen, if it was not yet).
    pub fn age(&self) -> Duration {
        self.since.elapsed()
    }

    /// Kills a frozen copy: SIGKILL to PID 1 of its namespace (every other task of the
    /// namespace dies with it), then the thaw that lets them die. Its pid cannot have been
    /// reused: a frozen task does not exit. Idempotent.
    pub fn kill(&mut self) {
        if let Some(pid) = self.frozen.take() {
            let _ = sys::kill(pid, libc::SIGKILL);
            let _ = self.cgroup.request_frozen(false);
            self.since = Instant::now();
        }
    }

    /// Removes the cgroup and frees the item directories if every task is gone; `false` while
    /// one is still exiting. One that outlives a second is sent SIGKILL again.
    pub fn try_reap(&mut self) -> bool {
        self.kill();
        match self.cgroup.try_remove() {
            Ok(true) => {
                self.leases.clear();
                true
            }
            _ => {
                if self.since.elapsed() > Duration::from_secs(1) {
                    let _ = self.cgroup.kill_now();
                }
                false
            }
        }
    }

    /// Waits until every task is gone (bounded, as [`Cgroup::destroy`]), then frees all.
    pub fn reap(mut self) -> Result<()> {
        self.kill();
        let r = self.cgroup.destroy();
        self.leases.clear();
        Ok(r?)
    }
}
