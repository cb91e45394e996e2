//! Copy endpoints prepared ahead of their call (issues 28 and 30; docs/broker.md, "A copy's
//! endpoint"). A pool copy's listener depends on nothing of the call that will use it: `lo`
//! up in the copy's network namespace, the bind, the `SIOCGSKNS` check. The shim asks for it
//! while the copy waits in its pool ([`crate::Broker::prepare_copy`]); the call's
//! `start_copy` then only binds that listener to the call and group it is given (slot
//! snapshot, Plan's horizon, the endpoint's task), and binds one on the spot as before when
//! none was prepared.
//!
//! The rules, each checked at the start:
//! * a prepared listener serves only the copy whose namespace it was bound in: it is found by
//!   the identity (nsfs device and inode) of the namespace `start_copy` is given, and its own
//!   namespace (`SIOCGSKNS`) is checked against that again. The listener holds its namespace
//!   alive, so no other namespace can take that inode number while it waits;
//! * it serves one call: it leaves the registry when a call takes it;
//! * it carries nothing from before its call: a connection the copy queued while it waited
//!   (no endpoint served it yet) is closed unread, as it would have been refused had nothing
//!   been prepared.
//!
//! A pool copy the shim drops unused (retired for other client capabilities, trimmed, killed,
//! its pool stopped) is forgotten ([`PreparedEndpoints::forget`], control op `forget_copy`):
//! its listener is closed, and with it the last hold on the copy's network namespace. The
//! registry holds at most [`MAX_PREPARED`] all the same, the oldest going first (a shim that
//! died before it could forget leaves its entries until then; their calls, if any, bind on
//! the spot).

use std::collections::VecDeque;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::Mutex;

use crate::netns::{self, NetnsError};

/// The most listeners waiting at once (a pool's depth is far below this).
pub const MAX_PREPARED: usize = 64;

#[derive(Debug)]
struct Entry {
    /// The namespace's identity (nsfs device, inode), pinned by the listener's socket.
    ns: (u64, u64),
    listener: TcpListener,
}

/// Listeners bound in pool copies' namespaces, waiting for their call.
#[derive(Debug, Default)]
pub struct PreparedEndpoints {
    entries: Mutex<VecDeque<Entry>>,
}

impl PreparedEndpoints {
    /// Binds `addr` in `netns` now (checked as [`netns::listener_in`] checks) and keeps it for
    /// the call that starts a copy in that namespace. A second preparation of one namespace
    /// replaces the first.
    pub fn prepare(&self, netns: BorrowedFd<'_>, addr: SocketAddr) -> Result<(), NetnsError> {
        let ns = netns::ns_id(netns)?;
        let listener = netns::listener_in(netns, addr)?;
        let mut e = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        e.retain(|x| x.ns != ns);
        e.push_back(Entry { ns, listener });
        while e.len() > MAX_PREPARED {
            e.pop_front();
        }
        Ok(())
    }

    /// The listener prepared in `netns`, if any: out of the registry, its namespace checked
    /// again, and every connection queued before now closed unread.
    pub fn take(&self, netns: BorrowedFd<'_>) -> Result<Option<TcpListener>, NetnsError> {
        let ns = netns::ns_id(netns)?;
        let found = {
            let mut e = self.entries.lock().unwrap_or_else(|p| p.into_inner());
            let i = e.iter().position(|x| x.ns == ns);
            i.and_then(|i| e.remove(i))
        };
        let Some(entry) = found else {
            return Ok(None);
        };
        let got = netns::ns_id(netns::socket_ns(entry.listener.as_raw_fd())?.as_fd())?;
        if got != ns {
            return Err(NetnsError::WrongNamespace {
                got: got.1,
                want: ns.1,
            });
        }
        drain(&entry.listener);
        Ok(Some(entry.listener))
    }

    /// Closes the listener prepared in `netns`, if any (the shim dropped that copy unused): a
    /// later start naming that namespace binds its endpoint afresh. `true` if one was there.
    pub fn forget(&self, netns: BorrowedFd<'_>) -> Result<bool, NetnsError> {
        let ns = netns::ns_id(netns)?;
        let found = {
            let mut e = self.entries.lock().unwrap_or_else(|p| p.into_inner());
            let i = e.iter().position(|x| x.ns == ns);
            i.and_then(|i| e.remove(i))
        };
        // Closed outside the lock (a close can wait for the kernel).
        Ok(found.is_some())
    }

    /// Listeners waiting.
    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Closes every connection queued on the (non-blocking) listener, unread.
fn drain(l: &TcpListener) {
    while let Ok((conn, _)) = l.accept() {
        drop(conn);
    }
}
