//! Pool copies whose network namespace was offered to the broker for an endpoint prepared
//! ahead of their call (`germline_broker::prepared`), and the ones dropped unused since.
//!
//! The broker's prepared listener pins the copy's network namespace until a call takes it. A
//! copy the shim drops without a call (retired because it announced other client
//! capabilities, trimmed when its pool shrinks, dead when handed out, its pool stopped) would
//! leave that listener behind, pinning a namespace nothing uses, until the broker evicts it.
//! So an offered copy holds [`Offered`]: the namespace's descriptor, which keeps its identity
//! (nsfs device and inode) from being reused while the shim still has to name it, and which
//! joins [`DroppedEndpoints`] when the copy is dropped by any path but a call's take
//! ([`Offered::taken`]). Between calls, and when its pool stops, the runtime drains that
//! list and asks the broker to forget each (control op `forget_copy`); nothing of it runs on
//! a call's path but the `Drop` that moves a descriptor into the list.

use std::fs::File;
use std::sync::{Arc, Mutex};

/// Namespaces of offered copies dropped unused, for the broker to forget.
#[derive(Debug, Default, Clone)]
pub struct DroppedEndpoints(Arc<Mutex<Vec<File>>>);

impl DroppedEndpoints {
    /// Opens the network namespace of `pid` for the broker to prepare; the copy keeps the
    /// returned [`Offered`], whose drop (unless taken) lists it here.
    pub(crate) fn offer(&self, pid: i32) -> Option<(File, Offered)> {
        let ns = File::open(format!("/proc/{pid}/ns/net")).ok()?;
        let kept = ns.try_clone().ok()?;
        Some((
            ns,
            Offered {
                ns: Some(kept),
                dropped: self.clone(),
            },
        ))
    }

    /// The namespaces listed since the last drain.
    pub fn drain(&self) -> Vec<File> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// An offered copy's network namespace, listed in [`DroppedEndpoints`] when dropped.
#[derive(Debug)]
pub struct Offered {
    ns: Option<File>,
    dropped: DroppedEndpoints,
}

impl Offered {
    /// The copy was handed to a call: its `start_copy` takes the prepared endpoint.
    pub(crate) fn taken(mut self) {
        self.ns = None;
    }
}

impl Drop for Offered {
    fn drop(&mut self) {
        if let Some(ns) = self.ns.take() {
            let mut l = self.dropped.0.lock().unwrap_or_else(|p| p.into_inner());
            l.push(ns);
        }
    }
}
