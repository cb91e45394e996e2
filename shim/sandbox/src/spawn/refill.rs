//! The pool's refill thread (issue 28; docs/sandbox.md, "The pool of spawned copies", **When
//! the refill runs**): it launches a copy and makes its handshake and warm calls (data-free,
//! public inputs only) while the session's thread goes back to the agent, so a call that
//! arrives meanwhile never waits for a refill spawn. Everything else about the copy (its
//! outside checks, its `/run/items`, freezing it, admitting it to the pool) stays on the
//! session's thread, in [`super::SpawnPool`].
//!
//! One thread for the pool's whole life, not one per spawn: the keeper's parent-death signal
//! (`PR_SET_PDEATHSIG`, launch.rs) fires when the **thread** that forked it exits, so the
//! thread must outlive every copy it launched; the pool kills its copies before it joins it.

use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::Spawned;
use crate::cgroup::Cgroup;
use crate::copy::{client_error, CopyChannel};
use crate::error::{Error, Result};
use crate::germline::HOST_ID;
use crate::launch::{self, Prepared};
use crate::mcp_client::Session;

/// What every launch of the release needs (shared with the refill thread).
#[derive(Debug)]
pub(super) struct Launcher {
    pub prepared: Prepared,
    pub warm_calls: Vec<Value>,
    pub init_timeout: Duration,
    /// Warm calls that failed, over every launch ([`super::PoolStatus::warm_failed`]).
    pub warm_failed: std::sync::atomic::AtomicU64,
    /// Copies take the twin line off their stdin ([`crate::spec::LaunchSpec::twin_line`]).
    pub twin_line: bool,
}

/// A launched copy, initialised (when asked) but not checked yet, and its socket's inode.
pub(super) type Launched = Result<(Spawned, u64)>;

impl Launcher {
    /// Launches one copy into `cgroup` (made and limited by the caller) and, with
    /// `handshake`, makes the shim's handshake announcing `caps` and the manifest's warm
    /// calls. The copy is not checked: the caller checks it before it holds anything.
    pub fn launch(&self, cgroup: Cgroup, caps: &Value, handshake: bool) -> Launched {
        let started =
            match launch::start(
                &self.prepared,
                HOST_ID,
                HOST_ID,
                &|pid| Ok(cgroup.add(pid)?),
            ) {
                Ok(s) => s,
                Err(e) => {
                    let _ = cgroup.destroy();
                    return Err(e);
                }
            };
        let init_deadline = Instant::now() + self.init_timeout;
        let socket_inode = started.ctl_inode;
        // From here, dropping the copy kills it and removes its cgroup.
        let mut copy = Spawned {
            keeper: started.keeper,
            pid: started.pid,
            cgroup,
            chan: CopyChannel::new(started.ctl, init_deadline),
            mcp: Session::strict(),
            ns: Default::default(),
            init_result: None,
            spawn_time: Duration::ZERO,
            dead: false,
            items_dir: None,
            leases: Vec::new(),
            retired_at: None,
            killed: false,
            keeper_status: None,
            offered: None,
            thawed_ahead: false,
            twin_line: self.twin_line,
            twin: None,
        };
        if handshake {
            copy.mcp.set_client_capabilities(caps.clone());
            let params = Session::initialize_params(caps);
            let r = copy
                .mcp
                .handshake(&mut copy.chan, params)
                .map_err(client_error)
                .map_err(|e| Error::Init(format!("the MCP handshake: {e}")))?;
            copy.init_result = Some(r);
            for w in &self.warm_calls {
                let tool = w["tool"].as_str().unwrap_or_default().to_string();
                let args = w.get("arguments").cloned().unwrap_or_else(|| json!({}));
                // A warm call the server answers with an error is skipped, said and counted
                // (an optimisation that did not apply); one it does not answer leaves the
                // copy unusable.
                match copy.mcp_call_relayed(&tool, args, None, &mut |_| None) {
                    Ok(r) if r["isError"] == json!(true) => self.warm_call_failed(&tool, &r),
                    Ok(_) => {}
                    Err(Error::Server { error, .. }) => self.warm_call_failed(&tool, &error),
                    Err(e) => return Err(Error::Init(format!("warm call {tool}: {e}"))),
                }
            }
        }
        Ok((copy, socket_inode))
    }
}

impl Launcher {
    /// Counts a failed warm call, and says the pool's first on stderr (every launch runs the
    /// same calls on the same public arguments: one line, not one per copy).
    fn warm_call_failed(&self, tool: &str, why: &Value) {
        let before = self
            .warm_failed
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if before == 0 {
            let text = why["content"]
                .as_array()
                .map(|c| {
                    c.iter()
                        .filter_map(|x| x["text"].as_str())
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .filter(|t| !t.is_empty())
                .or_else(|| why["message"].as_str().map(str::to_string))
                .unwrap_or_else(|| why.to_string());
            let text: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
            eprintln!(
                "germline: spawn pool: warm call {tool:?} failed (skipped; the pool status's \
                 warm_failed counts them): {}",
                text.chars().take(300).collect::<String>()
            );
        }
    }
}

/// One launch for the thread: the copy's cgroup and the capabilities it announces.
struct Job {
    cgroup: Cgroup,
    caps: Value,
}

/// The refill thread and its two queues (one job in flight at a time: the pool sends the next
/// one only after it collected the last).
#[derive(Debug)]
pub(super) struct Refiller {
    jobs: Option<Sender<Job>>,
    done: Receiver<Launched>,
    thread: Option<JoinHandle<()>>,
}

/// What [`Refiller::wait`] found.
pub(super) enum Waited {
    Done(Box<Launched>),
    Running,
    /// The thread is gone (it panicked): the pool spawns on the session's thread from then on.
    Gone,
}

impl Refiller {
    /// `bell`: poked when a launch ends, to wake an idle step waiting for it
    /// ([`super::SpawnPool::set_doorbell`]).
    pub fn start(
        launcher: Arc<Launcher>,
        bell: Option<Arc<germline_sys::doorbell::Doorbell>>,
    ) -> Result<Refiller> {
        let (jobs, rx) = mpsc::channel::<Job>();
        let (tx, done) = mpsc::channel::<Launched>();
        let thread = std::thread::Builder::new()
            .name("germline-refill".into())
            .spawn(move || {
                for job in rx {
                    let r = launcher.launch(job.cgroup, &job.caps, true);
                    if tx.send(r).is_err() {
                        break;
                    }
                    if let Some(b) = &bell {
                        b.poke();
                    }
                }
            })
            .map_err(|e| Error::sys("start the pool's refill thread", e))?;
        Ok(Refiller {
            jobs: Some(jobs),
            done,
            thread: Some(thread),
        })
    }

    /// Starts a launch on the thread; false if the thread is gone.
    pub fn send(&self, cgroup: Cgroup, caps: Value) -> bool {
        self.jobs
            .as_ref()
            .is_some_and(|j| j.send(Job { cgroup, caps }).is_ok())
    }

    /// The launch in flight, if it ends within `wait` (`None`: as long as it takes).
    pub fn wait(&self, wait: Option<Duration>) -> Waited {
        match wait {
            None => match self.done.recv() {
                Ok(r) => Waited::Done(Box::new(r)),
                Err(_) => Waited::Gone,
            },
            Some(w) => match self.done.recv_timeout(w) {
                Ok(r) => Waited::Done(Box::new(r)),
                Err(RecvTimeoutError::Timeout) => Waited::Running,
                Err(RecvTimeoutError::Disconnected) => Waited::Gone,
            },
        }
    }
}

impl Drop for Refiller {
    /// Ends the thread once its launch in flight (if any) is over; the pool killed that
    /// copy's cgroup first, so its handshake fails at once.
    fn drop(&mut self) {
        self.jobs = None;
        // Whatever the thread still hands back is dropped here: dropping a copy kills it.
        while self.done.recv().is_ok() {}
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
