//! The runtime's host operations with its own error texts: bind mounts, fifos, signals and
//! network namespaces. Every system call is a `germline_sys::sys` wrapper; cgroups, /proc and
//! mountinfo are read through `germline_sys` too.

use std::ffi::CString;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use germline_sys::{cgroup, procfs, sys};

use crate::error::{Error, Result};

fn cstr(p: &Path) -> Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| Error::NulInPath(p.to_path_buf()))
}

/// Binds `src` read-only at `dst` (an existing directory).
pub fn bind_readonly(src: &Path, dst: &Path) -> Result<()> {
    let s = cstr(src)?;
    let d = cstr(dst)?;
    sys::mount(Some(&s), &d, None, libc::MS_BIND, None)
        .map_err(|e| Error::op("bind mount", dst, e))?;
    // A remount changes only the flags of the bind mount just made.
    let flags =
        libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV;
    if let Err(e) = sys::mount(None, &d, None, flags, None) {
        let e = Error::op("read-only remount", dst, e);
        let _ = unmount(dst);
        return Err(e);
    }
    Ok(())
}

/// Detaches the mount at `p`.
pub fn unmount(p: &Path) -> Result<()> {
    sys::umount2(&cstr(p)?, libc::MNT_DETACH).map_err(|e| Error::op("unmount", p, e))
}

/// Makes a fifo at `p`, mode 0600.
pub fn mkfifo(p: &Path) -> Result<()> {
    sys::mkfifo(&cstr(p)?, 0o600).map_err(|e| Error::op("mkfifo", p, e))
}

/// Sends `sig` to `pid`.
pub fn kill(pid: i32, sig: i32) -> Result<()> {
    if pid <= 0 {
        return Err(Error::BadPid(pid));
    }
    sys::kill(pid, sig).map_err(|source| Error::Signal { sig, pid, source })
}

/// Waits up to `limit` for `pid` (started at `start`) to be gone.
pub fn wait_gone(pid: i32, start: u64, limit: Duration) -> bool {
    let t = Instant::now();
    while procfs::start_time(pid) == Some(start) {
        if t.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

/// Kills every process in the cgroup subtrees `dirs` and removes the cgroups (5 s at most).
pub fn destroy_cgroups(dirs: &[PathBuf]) {
    cgroup::destroy_trees(dirs, Duration::from_secs(5));
}

/// Opens `path` and checks that it is a network namespace.
fn open_netns(path: &Path) -> Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let not_netns = || Error::NotNetns(path.to_path_buf());
    // The path comes from config.json: never open a device or wait on a fifo. A namespace
    // file (nsfs) is a regular file to stat.
    let is_file = std::fs::metadata(path)
        .map(|m| m.is_file())
        .unwrap_or(false);
    if !is_file {
        return Err(not_netns());
    }
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| Error::op("network namespace", path, e))?;
    if sys::ns_type(f.as_raw_fd()).ok() != Some(libc::CLONE_NEWNET) {
        return Err(not_netns());
    }
    Ok(f)
}

/// Checks, at `create`, that `path` names a network namespace the process can join.
pub fn check_netns(path: &Path) -> Result<()> {
    open_netns(path).map(drop)
}

/// Moves the calling (single-threaded) process into the network namespace at `path`.
pub fn enter_netns(path: &Path) -> Result<()> {
    let f = open_netns(path)?;
    sys::setns(f.as_raw_fd(), libc::CLONE_NEWNET)
        .map_err(|e| Error::op("cannot join the network namespace", path, e))
}

/// Moves the calling (single-threaded) process into a fresh network namespace with `lo` up.
pub fn new_netns() -> Result<()> {
    sys::unshare(libc::CLONE_NEWNET).map_err(Error::sys("cannot make a network namespace"))?;
    sys::loopback_up().map_err(Error::sys(
        "cannot bring lo up in the new network namespace",
    ))
}

/// The first IPv4 address of an interface that is up and not loopback, in the calling
/// process's network namespace (a pod's address, which its spec cannot know in advance).
pub fn first_address() -> Result<std::net::Ipv4Addr> {
    let all = sys::ipv4_addresses()
        .map_err(Error::sys("cannot list the network namespace's addresses"))?;
    all.into_iter()
        .find(|a| a.up && !a.loopback)
        .map(|a| a.addr)
        .ok_or(Error::NoAddress)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_network_namespace_file_is_accepted() {
        check_netns(Path::new("/proc/self/ns/net")).expect("our own netns");
        for p in [
            "/proc/self/ns/mnt",
            "/etc/hostname",
            "/dev/null",
            "/nonexistent",
        ] {
            let e = check_netns(Path::new(p)).expect_err(p);
            assert!(e.to_string().contains(p), "{e}");
        }
    }
}
