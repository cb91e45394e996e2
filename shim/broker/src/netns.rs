//! Per-copy listeners inside a copy's network namespace (DESIGN "Egress").
//!
//! The listener is created by the calling thread (a control connection's own thread, never a
//! pooled async worker), which enters the namespace with `setns`, brings `lo` up, binds, and
//! goes back to the namespace it came from before it does anything else (issue 30: a fresh
//! thread per copy cost a thread's start and a scheduling hop on every call's path). A thread
//! that could not go back never binds in place again, and [`thread_stranded`] tells its owner
//! to end it; its listeners come from a fresh thread that exits after binding, as before. The
//! socket's namespace is then checked with `SIOCGSKNS` against the namespace we were given, so
//! one copy can never be handed another's endpoint.

use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use nix::sched::{setns, CloneFlags};
use nix::sys::stat::fstat;

#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    #[error("cannot duplicate the namespace descriptor: {0}")]
    Dup(nix::Error),
    #[error("setns into the copy's network namespace failed: {0}")]
    Setns(nix::Error),
    #[error("cannot bring lo up in the copy's network namespace: {0}")]
    LoopbackUp(std::io::Error),
    #[error("cannot bind {addr} in the copy's network namespace: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("SIOCGSKNS on the listener failed: {0}")]
    SocketNamespace(std::io::Error),
    #[error("the listener landed in namespace {got} but the copy's is {want}")]
    WrongNamespace { got: u64, want: u64 },
    #[error("the listener thread died")]
    Thread,
    #[error("fstat of a namespace descriptor failed: {0}")]
    Stat(nix::Error),
}

/// Identity of a namespace: (device, inode) of its nsfs file.
pub fn ns_id(fd: BorrowedFd<'_>) -> Result<(u64, u64), NetnsError> {
    let st = fstat(fd).map_err(NetnsError::Stat)?;
    Ok((st.st_dev, st.st_ino))
}

/// Creates a TCP listener bound to `addr` inside the network namespace `netns`.
pub fn listener_in(netns: BorrowedFd<'_>, addr: SocketAddr) -> Result<TcpListener, NetnsError> {
    let want = ns_id(netns)?;
    let listener = match bind_in_place(netns, addr) {
        Some(r) => r?,
        None => bind_on_fresh_thread(netns, addr)?,
    };
    let got = socket_ns(listener.as_raw_fd())?;
    let got_id = ns_id(got.as_fd())?;
    if got_id != want {
        return Err(NetnsError::WrongNamespace {
            got: got_id.1,
            want: want.1,
        });
    }
    Ok(listener)
}

thread_local! {
    /// This thread entered a copy's namespace and could not go back ([`thread_stranded`]).
    static STRANDED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether this thread is stranded in a copy's network namespace (its `setns` back failed):
/// its owner ends it rather than let it do anything more.
pub fn thread_stranded() -> bool {
    STRANDED.with(|s| s.get())
}

/// The listener, bound by this thread inside `netns`, after which the thread is back in its
/// own namespace; `None` if this thread may not (it is stranded, or cannot name its own
/// namespace to go back to).
fn bind_in_place(
    netns: BorrowedFd<'_>,
    addr: SocketAddr,
) -> Option<Result<TcpListener, NetnsError>> {
    if thread_stranded() {
        return None;
    }
    let home = std::fs::File::open("/proc/thread-self/ns/net").ok()?;
    if let Err(e) = setns(netns, CloneFlags::CLONE_NEWNET) {
        return Some(Err(NetnsError::Setns(e)));
    }
    let bound = (|| {
        loopback_up().map_err(NetnsError::LoopbackUp)?;
        let l = TcpListener::bind(addr).map_err(|source| NetnsError::Bind { addr, source })?;
        l.set_nonblocking(true)
            .map_err(|source| NetnsError::Bind { addr, source })?;
        Ok(l)
    })();
    if let Err(e) = setns(home.as_fd(), CloneFlags::CLONE_NEWNET) {
        STRANDED.with(|s| s.set(true));
        return Some(Err(NetnsError::Setns(e)));
    }
    Some(bound)
}

/// The listener, bound inside `netns` by a fresh thread that exits afterwards.
fn bind_on_fresh_thread(
    netns: BorrowedFd<'_>,
    addr: SocketAddr,
) -> Result<TcpListener, NetnsError> {
    let owned: OwnedFd = netns.try_clone_to_owned().map_err(|e| {
        NetnsError::Dup(nix::Error::from_raw(
            e.raw_os_error().unwrap_or(libc::EBADF),
        ))
    })?;
    let handle = std::thread::Builder::new()
        .name("germline-netns".into())
        .spawn(move || -> Result<TcpListener, NetnsError> {
            setns(owned.as_fd(), CloneFlags::CLONE_NEWNET).map_err(NetnsError::Setns)?;
            loopback_up().map_err(NetnsError::LoopbackUp)?;
            let l = TcpListener::bind(addr).map_err(|source| NetnsError::Bind { addr, source })?;
            l.set_nonblocking(true)
                .map_err(|source| NetnsError::Bind { addr, source })?;
            Ok(l)
        })
        .map_err(|_| NetnsError::Thread)?;
    handle.join().map_err(|_| NetnsError::Thread)?
}

/// The network namespace a socket belongs to, as a new descriptor (`SIOCGSKNS`).
pub fn socket_ns(sock: RawFd) -> Result<OwnedFd, NetnsError> {
    const SIOCGSKNS: libc::c_ulong = 0x894C;
    // SAFETY: SIOCGSKNS takes no argument and returns a new descriptor or -1; `sock` is a
    // descriptor we own for the duration of the call.
    let fd = unsafe { libc::ioctl(sock, SIOCGSKNS as _) };
    if fd < 0 {
        return Err(NetnsError::SocketNamespace(std::io::Error::last_os_error()));
    }
    // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sets IFF_UP on `lo` in the calling thread's network namespace.
pub use germline_sys::sys::loopback_up;
