//! The pool's reaper thread (issue 28; docs/sandbox.md, "The pool of spawned copies", **The
//! retire**): retired copies, frozen at their retire, are handed to it at the next idle step
//! or the next call's take, and it kills them, waits for their keepers and removes their
//! cgroups. Before it, the take of a call that came back to back sent the kills, polled the
//! keepers and tried the cgroups' removal itself, on the call's path (issue 30: a pool must
//! never be slower than no pool).
//!
//! It only kills and waits: it forks nothing, so the keepers' parent-death signal (which
//! follows the thread that forked them, refill.rs) is not tied to it. A thread may wait for
//! the children of any thread of its process.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::Spawned;
use crate::error::{Error, Result};

/// How long the thread polls one copy before its drop kills and waits for it.
const GIVE_UP: Duration = Duration::from_secs(10);

/// The reaper thread and what it still holds.
#[derive(Debug)]
pub(super) struct Reaper {
    tx: Option<Sender<Spawned>>,
    /// Copies handed over and not reaped yet.
    busy: Arc<AtomicUsize>,
    thread: Option<JoinHandle<()>>,
}

impl Reaper {
    pub fn start() -> Result<Reaper> {
        let (tx, rx) = mpsc::channel::<Spawned>();
        let busy = Arc::new(AtomicUsize::new(0));
        let count = busy.clone();
        let thread = std::thread::Builder::new()
            .name("germline-reap".into())
            .spawn(move || {
                for mut copy in rx {
                    // Killed now (signals only), then polled until its keeper is waited for
                    // and its cgroup removed; one that outlives a second is killed again
                    // through its cgroup (try_reap). Past [`GIVE_UP`] the drop's own kill
                    // (bounded waits) ends it, so that the thread, and the pool's stop that
                    // joins it, never hang on one copy.
                    let since = Instant::now();
                    while !copy.try_reap() && since.elapsed() < GIVE_UP {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    drop(copy);
                    count.fetch_sub(1, Ordering::AcqRel);
                }
            })
            .map_err(|e| Error::sys("start the pool's reaper thread", e))?;
        Ok(Reaper {
            tx: Some(tx),
            busy,
            thread: Some(thread),
        })
    }

    /// Hands `copy` over; gives it back (`Some`) if the thread is gone.
    pub fn hand(&self, copy: Spawned) -> Option<Spawned> {
        let Some(tx) = &self.tx else {
            return Some(copy);
        };
        self.busy.fetch_add(1, Ordering::AcqRel);
        match tx.send(copy) {
            Ok(()) => None,
            Err(e) => {
                self.busy.fetch_sub(1, Ordering::AcqRel);
                Some(e.0)
            }
        }
    }

    /// Copies handed over and not reaped yet.
    pub fn busy(&self) -> usize {
        self.busy.load(Ordering::Acquire)
    }
}

impl Drop for Reaper {
    /// Ends the thread once it reaped everything it was handed.
    fn drop(&mut self) {
        self.tx = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
