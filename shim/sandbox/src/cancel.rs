//! The agent's cancellation of one request (`notifications/cancelled`, issue 29), as the
//! waits of the shim see it: a flag any thread may raise, and a socket that becomes readable
//! when it is raised, so that a wait on a copy's socket (`poll`) ends at once instead of at
//! the copy's deadline.

use std::io::Write;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};

/// One request's cancellation: [`Cancel::fire`] from the thread that reads the agent,
/// [`Cancel::fired`] and [`Cancel::fd`] where the call waits.
#[derive(Debug)]
pub struct Cancel {
    fired: AtomicBool,
    /// Readable once fired (one byte is written to `tx`, never read: it stays readable).
    rx: UnixStream,
    tx: UnixStream,
}

impl Cancel {
    /// A cancellation not fired yet.
    pub fn new() -> std::io::Result<Cancel> {
        let (rx, tx) = UnixStream::pair()?;
        rx.set_nonblocking(true)?;
        tx.set_nonblocking(true)?;
        Ok(Cancel {
            fired: AtomicBool::new(false),
            rx,
            tx,
        })
    }

    /// Fires it: every wait that polls [`Cancel::fd`] wakes up. Idempotent.
    pub fn fire(&self) {
        if !self.fired.swap(true, Ordering::SeqCst) {
            // A full buffer cannot happen (one byte); a failure leaves the flag, which every
            // wait also checks before it polls.
            let _ = (&self.tx).write(&[1]);
        }
    }

    /// Whether it was fired.
    pub fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }

    /// A descriptor that is readable once fired (to poll next to a copy's socket).
    pub fn fd(&self) -> RawFd {
        self.rx.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn firing_makes_the_descriptor_readable_once_and_for_all() {
        let c = Cancel::new().expect("socketpair");
        assert!(!c.fired());
        assert!(!germline_sys::sys::poll_readable(c.fd(), 0).expect("poll"));
        c.fire();
        c.fire();
        assert!(c.fired());
        for _ in 0..2 {
            assert!(germline_sys::sys::poll_readable(c.fd(), 0).expect("poll"));
        }
    }
}
