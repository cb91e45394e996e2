//! Per-copy listeners inside a copy's network namespace (DESIGN "Egress").
//!
//! The listener is created by a fresh thread that enters the namespace with `setns`, brings
//! `lo` up and binds, and then exits: never a pooled async worker, which could sit in another
//! namespace. The socket's namespace is then checked with `SIOCGSKNS` against the namespace we
//! were given, so one copy can never be handed another's endpoint.

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
    let listener = handle.join().map_err(|_| NetnsError::Thread)??;
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
