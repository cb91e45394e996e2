//! Thin wrappers around single Linux system calls.
//!
//! Every `unsafe` block here wraps exactly one libc call and turns its return code into an
//! `io::Result` on the spot. Functions marked "fork-safe" allocate nothing and may be called in
//! the child of `fork()` in a multi-threaded process.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn check_long(ret: libc::c_long) -> io::Result<libc::c_long> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// The calling thread's errno (fork-safe).
pub fn errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// `fork()`. In the child only fork-safe functions of this module may be used.
pub fn fork() -> io::Result<libc::pid_t> {
    // SAFETY: fork has no pointer arguments; callers restrict the child to fork-safe calls.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(pid)
    }
}

/// `_exit()` (fork-safe): leaves without running atexit handlers or destructors.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit takes an integer and never returns.
    unsafe { libc::_exit(code) }
}

/// `unshare()` (fork-safe).
pub fn unshare(flags: libc::c_int) -> io::Result<()> {
    // SAFETY: unshare takes only flags.
    check(unsafe { libc::unshare(flags) }).map(drop)
}

/// `setns()` (fork-safe).
pub fn setns(fd: RawFd, nstype: libc::c_int) -> io::Result<()> {
    // SAFETY: setns takes a descriptor and flags; a bad descriptor is reported as EBADF.
    check(unsafe { libc::setns(fd, nstype) }).map(drop)
}

/// `mount()` (fork-safe). Null pointers for absent strings.
pub fn mount(
    source: Option<&CStr>,
    target: &CStr,
    fstype: Option<&CStr>,
    flags: libc::c_ulong,
    data: Option<&CStr>,
) -> io::Result<()> {
    let p = |s: Option<&CStr>| s.map_or(std::ptr::null(), CStr::as_ptr);
    // SAFETY: every pointer is either null or a NUL-terminated string that outlives the call.
    check(unsafe { libc::mount(p(source), target.as_ptr(), p(fstype), flags, p(data).cast()) })
        .map(drop)
}

/// `umount2()` (fork-safe).
pub fn umount2(target: &CStr, flags: libc::c_int) -> io::Result<()> {
    // SAFETY: target is a NUL-terminated string.
    check(unsafe { libc::umount2(target.as_ptr(), flags) }).map(drop)
}

/// `pivot_root(new, old)` (fork-safe).
pub fn pivot_root(new_root: &CStr, put_old: &CStr) -> io::Result<()> {
    // SAFETY: both arguments are NUL-terminated strings.
    check_long(unsafe { libc::syscall(libc::SYS_pivot_root, new_root.as_ptr(), put_old.as_ptr()) })
        .map(drop)
}

/// `mkdir()` (fork-safe).
pub fn mkdir(path: &CStr, mode: libc::mode_t) -> io::Result<()> {
    // SAFETY: path is a NUL-terminated string.
    check(unsafe { libc::mkdir(path.as_ptr(), mode) }).map(drop)
}

/// `chdir()` (fork-safe).
pub fn chdir(path: &CStr) -> io::Result<()> {
    // SAFETY: path is a NUL-terminated string.
    check(unsafe { libc::chdir(path.as_ptr()) }).map(drop)
}

/// `fchdir()`: the calling thread's working directory becomes the directory open at `fd`
/// (an `O_PATH` descriptor will do).
pub fn fchdir(fd: RawFd) -> io::Result<()> {
    // SAFETY: fchdir takes a descriptor; a bad one is reported as EBADF.
    check(unsafe { libc::fchdir(fd) }).map(drop)
}

/// `chroot()`.
pub fn chroot(path: &CStr) -> io::Result<()> {
    // SAFETY: `path` is NUL-terminated and outlives the call.
    check(unsafe { libc::chroot(path.as_ptr()) }).map(drop)
}

/// `sethostname()` (fork-safe).
pub fn sethostname(name: &[u8]) -> io::Result<()> {
    // SAFETY: the pointer and length describe a live byte slice.
    check(unsafe { libc::sethostname(name.as_ptr().cast(), name.len()) }).map(drop)
}

/// `setresuid(id, id, id)` (fork-safe).
pub fn setresuid(id: libc::uid_t) -> io::Result<()> {
    // SAFETY: plain integers.
    check(unsafe { libc::setresuid(id, id, id) }).map(drop)
}

/// `setresgid(id, id, id)` (fork-safe).
pub fn setresgid(id: libc::gid_t) -> io::Result<()> {
    // SAFETY: plain integers.
    check(unsafe { libc::setresgid(id, id, id) }).map(drop)
}

/// `open()` (fork-safe), returning the raw descriptor.
pub fn open_raw(path: &CStr, flags: libc::c_int, mode: libc::mode_t) -> io::Result<RawFd> {
    // SAFETY: path is NUL-terminated; mode is passed as the variadic third argument.
    check(unsafe { libc::open(path.as_ptr(), flags, libc::c_uint::from(mode)) })
}

/// `close()` (fork-safe). Errors are ignored: the descriptor is gone either way.
pub fn close_raw(fd: RawFd) {
    // SAFETY: closing a descriptor we own; a stale number yields EBADF, which we ignore.
    unsafe { libc::close(fd) };
}

/// `dup2()` (fork-safe).
pub fn dup2(old: RawFd, new: RawFd) -> io::Result<()> {
    // SAFETY: plain descriptors.
    check(unsafe { libc::dup2(old, new) }).map(drop)
}

/// `fcntl(fd, F_DUPFD, min)` (fork-safe).
pub fn dup_above(fd: RawFd, min: RawFd) -> io::Result<RawFd> {
    // SAFETY: F_DUPFD takes an integer third argument.
    check(unsafe { libc::fcntl(fd, libc::F_DUPFD, min) })
}

/// `fcntl(fd, F_SETFD, FD_CLOEXEC)`.
pub fn set_cloexec(fd: RawFd) -> io::Result<()> {
    // SAFETY: F_SETFD takes an integer third argument.
    check(unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) }).map(drop)
}

/// `close_range(first, u32::MAX, flags)` (fork-safe).
pub fn close_range(first: u32, flags: u32) -> io::Result<()> {
    // SAFETY: plain integers.
    check_long(unsafe { libc::syscall(libc::SYS_close_range, first, u32::MAX, flags) }).map(drop)
}

/// `write()` of a whole small buffer (fork-safe).
pub fn write_all_raw(fd: RawFd, buf: &[u8]) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let rest = &buf[done..];
        // SAFETY: the pointer and length describe the live remainder of buf.
        let n = unsafe { libc::write(fd, rest.as_ptr().cast(), rest.len()) };
        if n < 0 {
            if errno() == libc::EINTR {
                continue;
            }
            return Err(io::Error::last_os_error());
        }
        done += n.unsigned_abs();
    }
    Ok(())
}

/// `read()` into buf (fork-safe), retrying on EINTR; returns the count (0 at end of file).
pub fn read_raw(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        // SAFETY: the pointer and length describe the live, writable buf.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            return Ok(n.unsigned_abs());
        }
        if errno() != libc::EINTR {
            return Err(io::Error::last_os_error());
        }
    }
}

/// `prctl()` with integer arguments (fork-safe).
pub fn prctl(option: libc::c_int, arg2: libc::c_ulong) -> io::Result<libc::c_int> {
    // SAFETY: the options used in this crate take integer arguments only.
    check(unsafe {
        libc::prctl(
            option,
            arg2,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    })
}

/// `seccomp(SECCOMP_SET_MODE_FILTER, 0, prog)` (fork-safe).
pub fn seccomp_set_filter(prog: &libc::sock_fprog) -> io::Result<()> {
    // SAFETY: prog points to a sock_fprog whose filter array outlives the call.
    check_long(unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            0,
            prog as *const libc::sock_fprog,
        )
    })
    .map(drop)
}

/// `landlock_create_ruleset()` (fork-safe). With no attr and flag 1 it returns the ABI.
pub fn landlock_create_ruleset(attr: Option<&[u8]>, flags: u32) -> io::Result<RawFd> {
    let (ptr, size) = attr.map_or((std::ptr::null(), 0), |a| (a.as_ptr(), a.len()));
    // SAFETY: ptr is null (ABI query) or points to `size` readable bytes of a ruleset attr.
    let r =
        check_long(unsafe { libc::syscall(libc::SYS_landlock_create_ruleset, ptr, size, flags) })?;
    Ok(RawFd::try_from(r).unwrap_or(-1))
}

/// `landlock_add_rule(fd, LANDLOCK_RULE_PATH_BENEATH, attr, 0)` (fork-safe).
pub fn landlock_add_path_rule(ruleset: RawFd, attr: &[u8; 12]) -> io::Result<()> {
    // SAFETY: attr is a 12-byte packed landlock_path_beneath_attr.
    check_long(unsafe { libc::syscall(libc::SYS_landlock_add_rule, ruleset, 1, attr.as_ptr(), 0) })
        .map(drop)
}

/// `landlock_add_rule(fd, LANDLOCK_RULE_NET_PORT, attr, 0)` (fork-safe).
pub fn landlock_add_net_rule(ruleset: RawFd, attr: &[u8; 16]) -> io::Result<()> {
    // SAFETY: attr is a 16-byte packed landlock_net_port_attr (allowed_access, port).
    check_long(unsafe { libc::syscall(libc::SYS_landlock_add_rule, ruleset, 2, attr.as_ptr(), 0) })
        .map(drop)
}

/// `landlock_restrict_self(fd, 0)` (fork-safe).
pub fn landlock_restrict_self(ruleset: RawFd) -> io::Result<()> {
    // SAFETY: plain descriptor and flags.
    check_long(unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0) }).map(drop)
}

/// `execve()` (fork-safe); returns only on failure.
pub fn execve(
    path: &CStr,
    argv: &[*const libc::c_char],
    envp: &[*const libc::c_char],
) -> io::Error {
    // SAFETY: argv and envp are null-terminated arrays of NUL-terminated strings kept alive by
    // the caller.
    unsafe { libc::execve(path.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
    io::Error::last_os_error()
}

/// `waitpid()`, retrying on EINTR. Returns the raw status.
pub fn waitpid(pid: libc::pid_t, flags: libc::c_int) -> io::Result<(libc::pid_t, libc::c_int)> {
    let mut status = 0;
    loop {
        // SAFETY: status is a valid out pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, flags) };
        if r >= 0 {
            return Ok((r, status));
        }
        if errno() != libc::EINTR {
            return Err(io::Error::last_os_error());
        }
    }
}

/// `pidfd_open(pid, 0)`: a descriptor that becomes readable when the process exits, and that
/// never names another process (pids are reused, pidfds are not).
pub fn pidfd_open(pid: libc::pid_t) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes two integers and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = RawFd::try_from(fd).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    Ok(own(fd))
}

/// `kill()`.
pub fn kill(pid: libc::pid_t, sig: libc::c_int) -> io::Result<()> {
    // SAFETY: plain integers.
    check(unsafe { libc::kill(pid, sig) }).map(drop)
}

/// A signal set holding `sigs`.
fn sigset(sigs: &[libc::c_int]) -> io::Result<libc::sigset_t> {
    let mut set = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigemptyset initialises the set it is given a pointer to.
    check(unsafe { libc::sigemptyset(set.as_mut_ptr()) })?;
    // SAFETY: initialised by sigemptyset just above.
    let mut set = unsafe { set.assume_init() };
    for s in sigs {
        // SAFETY: `set` is an initialised sigset_t; a bad signal number is reported as EINVAL.
        check(unsafe { libc::sigaddset(&mut set, *s) })?;
    }
    Ok(set)
}

/// `pthread_sigmask(SIG_BLOCK)`: blocks `sigs` in the calling thread; threads it starts later
/// inherit the mask (children of `std::process::Command` start with an empty one).
pub fn block_signals(sigs: &[libc::c_int]) -> io::Result<()> {
    let set = sigset(sigs)?;
    // SAFETY: `set` is an initialised sigset_t; the old mask is not asked for (null).
    let r = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(r))
    }
}

/// `sigwait()`: waits until one of `sigs` (blocked in every thread) is pending and takes it.
pub fn wait_signal(sigs: &[libc::c_int]) -> io::Result<libc::c_int> {
    let set = sigset(sigs)?;
    let mut sig: libc::c_int = 0;
    // SAFETY: `set` is an initialised sigset_t and `sig` a valid place for the signal taken.
    let r = unsafe { libc::sigwait(&set, &mut sig) };
    if r == 0 {
        Ok(sig)
    } else {
        Err(io::Error::from_raw_os_error(r))
    }
}

/// `mkfifo()`.
pub fn mkfifo(path: &CStr, mode: libc::mode_t) -> io::Result<()> {
    // SAFETY: path is a NUL-terminated string.
    check(unsafe { libc::mkfifo(path.as_ptr(), mode) }).map(drop)
}

/// `flock()`: blocks for `LOCK_EX`; the lock goes when the descriptor is closed.
pub fn flock(fd: RawFd, op: libc::c_int) -> io::Result<()> {
    // SAFETY: flock takes a descriptor and flags; a bad descriptor is reported as EBADF.
    check(unsafe { libc::flock(fd, op) }).map(drop)
}

/// `NS_GET_NSTYPE` (linux/nsfs.h): the `CLONE_NEW*` type of a namespace file.
const NS_GET_NSTYPE: libc::c_ulong = 0xb703;

/// The `CLONE_NEW*` type of the namespace file open at `fd` (`ioctl(NS_GET_NSTYPE)`); an
/// error for a file that is not a namespace.
pub fn ns_type(fd: RawFd) -> io::Result<libc::c_int> {
    // SAFETY: NS_GET_NSTYPE takes no argument and returns the type or -1.
    check(unsafe { libc::ioctl(fd, NS_GET_NSTYPE as _) })
}

/// One IPv4 address of an interface, with the flags that matter for choosing it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InterfaceAddr {
    pub addr: std::net::Ipv4Addr,
    pub up: bool,
    pub loopback: bool,
}

/// The IPv4 addresses of the interfaces of the calling thread's network namespace
/// (`getifaddrs()`), in the kernel's order.
pub fn ipv4_addresses() -> io::Result<Vec<InterfaceAddr>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head that is freed below with freeifaddrs.
    check(unsafe { libc::getifaddrs(&mut head) })?;
    let mut out = Vec::new();
    let mut p = head;
    while !p.is_null() {
        // SAFETY: `p` is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*p };
        let inet = !ifa.ifa_addr.is_null()
            // SAFETY: a non-null ifa_addr points to a sockaddr whose family says its type.
            && unsafe { (*ifa.ifa_addr).sa_family } == libc::AF_INET as libc::sa_family_t;
        if inet {
            // SAFETY: the family is AF_INET, so the address is a sockaddr_in.
            let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
            out.push(InterfaceAddr {
                addr: std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
                up: ifa.ifa_flags & libc::IFF_UP as libc::c_uint != 0,
                loopback: ifa.ifa_flags & libc::IFF_LOOPBACK as libc::c_uint != 0,
            });
        }
        p = ifa.ifa_next;
    }
    // SAFETY: `head` came from getifaddrs and is freed once; no reference to it is kept.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// Brings `lo` up in the calling thread's network namespace (a fresh one has it down).
pub fn loopback_up() -> io::Result<()> {
    // SAFETY: socket(2) with constant arguments; the result is checked.
    let raw =
        check(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    let sock = own(raw);
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in ifr.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS reads the interface named in `ifr` and writes its flags into it;
    // `ifr` is a valid, writable ifreq for the duration of the call.
    check(unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS as _, &mut ifr) })?;
    // SAFETY: the union field ifru_flags is the one SIOCGIFFLAGS just wrote.
    let flags = unsafe { ifr.ifr_ifru.ifru_flags };
    if flags & libc::IFF_UP as libc::c_short != 0 {
        return Ok(());
    }
    ifr.ifr_ifru.ifru_flags = flags | libc::IFF_UP as libc::c_short;
    // SAFETY: SIOCSIFFLAGS reads `ifr`, valid for the call.
    check(unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS as _, &ifr) }).map(drop)
}

/// `sched_setaffinity()` of every thread of `pid`'s process to `cpus` (the germline has one
/// thread; its copies inherit the mask when it forks). Fails on an empty or out-of-range set.
pub fn set_affinity(pid: libc::pid_t, cpus: &[usize]) -> io::Result<()> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let max = 8 * std::mem::size_of::<libc::cpu_set_t>();
    if cpus.is_empty() || cpus.iter().any(|c| *c >= max) {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    for c in cpus {
        // SAFETY: c < CPU_SETSIZE (checked above); `set` is a valid cpu_set_t.
        unsafe { libc::CPU_SET(*c, &mut set) };
    }
    // SAFETY: `set` is a valid cpu_set_t of the size passed.
    check(unsafe { libc::sched_setaffinity(pid, std::mem::size_of_val(&set), &set) }).map(drop)
}

/// `sched_setscheduler()` of thread `pid`: `SCHED_IDLE` (runs only when nothing else wants
/// the CPU) or back to `SCHED_OTHER`.
pub fn set_sched_idle(pid: libc::pid_t, idle: bool) -> io::Result<()> {
    let policy = if idle {
        libc::SCHED_IDLE
    } else {
        libc::SCHED_OTHER
    };
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid sched_param for the call.
    check(unsafe { libc::sched_setscheduler(pid, policy, &param) }).map(drop)
}

/// The filesystem type (`f_type` of `fstatfs()`) of the file open at `fd`.
pub fn fs_type(fd: RawFd) -> io::Result<i64> {
    // SAFETY: an all-zero statfs is a valid value for fstatfs to overwrite.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a writable statfs; a bad descriptor is reported as EBADF.
    check(unsafe { libc::fstatfs(fd, &mut st) })?;
    Ok(st.f_type)
}

/// `openat(dir, name, O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, mode)`: a new file
/// in `dir`, never an existing one or a link.
pub fn create_new_at(dir: RawFd, name: &CStr, mode: libc::mode_t) -> io::Result<OwnedFd> {
    let flags = libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: `name` is NUL-terminated and outlives the call; a bad `dir` gives EBADF.
    let fd = check(unsafe { libc::openat(dir, name.as_ptr(), flags, libc::c_uint::from(mode)) })?;
    // SAFETY: openat succeeded, so the descriptor is fresh and ours.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `CLOCK_MONOTONIC` in nanoseconds (the clock Python's `time.monotonic_ns` reads).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

/// `pipe2(O_CLOEXEC)`: (read end, write end).
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: fds is a valid array of two ints.
    check(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: pipe2 succeeded, so both descriptors are fresh and ours.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// `socketpair(AF_UNIX, kind | SOCK_CLOEXEC)`.
pub fn socketpair(kind: libc::c_int) -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: fds is a valid array of two ints.
    check(unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            kind | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    })?;
    // SAFETY: socketpair succeeded, so both descriptors are fresh and ours.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// `poll()` for readability of one descriptor; false on timeout.
pub fn poll_readable(fd: RawFd, timeout_ms: i32) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        // SAFETY: p is one valid pollfd.
        let r = unsafe { libc::poll(&mut p, 1, timeout_ms) };
        if r >= 0 {
            return Ok(r > 0);
        }
        if errno() != libc::EINTR {
            return Err(io::Error::last_os_error());
        }
    }
}

/// Polls `a` and `b` for input for up to `timeout_ms` (-1: forever): which are readable (a
/// hang-up or an error counts as readable: the next read says what it is).
pub fn poll_readable2(a: RawFd, b: RawFd, timeout_ms: i32) -> io::Result<(bool, bool)> {
    let mut p = [
        libc::pollfd {
            fd: a,
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: b,
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    loop {
        // SAFETY: p is a valid array of two pollfd for the duration of the call.
        let r = unsafe { libc::poll(p.as_mut_ptr(), 2, timeout_ms) };
        if r >= 0 {
            return Ok((p[0].revents != 0, p[1].revents != 0));
        }
        if errno() != libc::EINTR {
            return Err(io::Error::last_os_error());
        }
    }
}

/// `memfd_create(name, MFD_CLOEXEC)`.
pub fn memfd(name: &CStr) -> io::Result<OwnedFd> {
    // SAFETY: name is NUL-terminated.
    let fd = check(unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) })?;
    // SAFETY: memfd_create succeeded, so the descriptor is fresh and ours.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `sendmsg()` of `data` with descriptors attached as SCM_RIGHTS.
pub fn send_with_fds(sock: RawFd, data: &[u8], fds: &[RawFd]) -> io::Result<usize> {
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    let fd_bytes = std::mem::size_of_val(fds);
    // SAFETY: CMSG_SPACE is a pure size computation.
    let space = unsafe { libc::CMSG_SPACE(u32::try_from(fd_bytes).unwrap_or(u32::MAX)) } as usize;
    let mut cbuf = vec![0u64; space.div_ceil(8).max(1)];
    // SAFETY: msghdr is plain old data; all-zero is a valid empty header.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        msg.msg_control = cbuf.as_mut_ptr().cast();
        msg.msg_controllen = space;
        // SAFETY: msg_control points to `space` bytes, enough for one header.
        let cmsg = unsafe { libc::CMSG_FIRSTHDR(&msg) };
        // SAFETY: cmsg points into cbuf (non-null since controllen >= one header).
        let hdr = unsafe { &mut *cmsg };
        hdr.cmsg_level = libc::SOL_SOCKET;
        hdr.cmsg_type = libc::SCM_RIGHTS;
        // SAFETY: pure size computation.
        hdr.cmsg_len =
            unsafe { libc::CMSG_LEN(u32::try_from(fd_bytes).unwrap_or(u32::MAX)) } as usize;
        // SAFETY: CMSG_DATA points inside cbuf with room for fd_bytes bytes.
        let dst = unsafe { libc::CMSG_DATA(cmsg) };
        // SAFETY: copies fd_bytes bytes from the fds slice into the control buffer.
        unsafe { std::ptr::copy_nonoverlapping(fds.as_ptr().cast::<u8>(), dst, fd_bytes) };
    }
    // SAFETY: msg describes live buffers for the duration of the call.
    let n = unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n.unsigned_abs())
    }
}

/// `recv()` without descriptors (any SCM_RIGHTS sent along are closed by the kernel's
/// MSG_CMSG_CLOEXEC plus our drop: we never accept descriptors from untrusted peers).
pub fn recv(sock: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        // SAFETY: the pointer and length describe the live, writable buf.
        let n = unsafe {
            libc::recv(
                sock,
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_CMSG_CLOEXEC,
            )
        };
        if n >= 0 {
            return Ok(n.unsigned_abs());
        }
        if errno() != libc::EINTR {
            return Err(io::Error::last_os_error());
        }
    }
}

/// `ptrace()` with integer or pointer arguments.
pub fn ptrace(
    req: libc::c_uint,
    pid: libc::pid_t,
    addr: usize,
    data: usize,
) -> io::Result<libc::c_long> {
    // SAFETY: for the requests used here, addr is an integer and data is null or points to a
    // buffer sized by a previous call; errors are reported through errno.
    check_long(unsafe {
        libc::ptrace(
            req,
            pid,
            addr as *mut libc::c_void,
            data as *mut libc::c_void,
        )
    })
}

/// `syscall(nr, a, b, c, d, e)` for the mount API calls that libc does not wrap (fork-safe).
pub fn syscall5(
    nr: libc::c_long,
    a: usize,
    b: usize,
    c: usize,
    d: usize,
    e: usize,
) -> io::Result<libc::c_long> {
    // SAFETY: callers pass the argument layout of `nr` (strings NUL-terminated, live for the
    // call); the kernel validates every pointer.
    check_long(unsafe { libc::syscall(nr, a, b, c, d, e) })
}

/// `struct mount_attr` of `mount_setattr(2)`: attr_set, attr_clr, propagation, userns_fd.
pub type MountAttr = [u64; 4];

/// `open_tree(AT_FDCWD, path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC)` (fork-safe): a detached
/// bind mount of `path`.
pub fn open_tree_clone(path: &CStr) -> io::Result<RawFd> {
    const OPEN_TREE_CLONE: libc::c_uint = 1;
    // SAFETY: path is NUL-terminated and outlives the call; the flags are plain integers.
    let r = check_long(unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            path.as_ptr(),
            OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint,
        )
    })?;
    RawFd::try_from(r).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))
}

/// `open_tree(fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH)` (fork-safe): a
/// detached bind mount of the directory `fd` refers to (same inodes, so Landlock rules on them
/// still apply).
pub fn open_tree_clone_fd(fd: RawFd) -> io::Result<RawFd> {
    const OPEN_TREE_CLONE: libc::c_uint = 1;
    // SAFETY: the empty path is a static NUL-terminated string; the rest are integers.
    let r = check_long(unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            fd,
            c"".as_ptr(),
            OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint | libc::AT_EMPTY_PATH as libc::c_uint,
        )
    })?;
    RawFd::try_from(r).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))
}

/// `mount_setattr(fd, "", AT_EMPTY_PATH, attr)` (fork-safe).
pub fn mount_setattr_fd(fd: RawFd, attr: &MountAttr) -> io::Result<()> {
    // SAFETY: the empty path is a static NUL-terminated string; attr points to a live
    // 32-byte struct mount_attr whose size we pass.
    check_long(unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            fd,
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            attr.as_ptr(),
            std::mem::size_of::<MountAttr>(),
        )
    })
    .map(drop)
}

/// `move_mount(from, "", to, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH)`
/// (fork-safe): attaches the detached mount `from` on the object `to` refers to.
pub fn move_mount_fds(from: RawFd, to: RawFd) -> io::Result<()> {
    const F_EMPTY_PATH: libc::c_uint = 0x4;
    const T_EMPTY_PATH: libc::c_uint = 0x40;
    // SAFETY: both paths are the static empty string; the descriptors are plain integers.
    check_long(unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            from,
            c"".as_ptr(),
            to,
            c"".as_ptr(),
            F_EMPTY_PATH | T_EMPTY_PATH,
        )
    })
    .map(drop)
}

/// `openat2(dir, path, {O_PATH | O_CLOEXEC, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
/// RESOLVE_NO_MAGICLINKS})` (fork-safe): `path` resolved strictly below `dir` without following
/// any symbolic link, the last component included.
pub fn open_beneath(dir: RawFd, path: &CStr) -> io::Result<RawFd> {
    open_beneath_raw(dir, path, libc::O_PATH)
}

/// The one `openat2` call of [`open_beneath`] and [`open_beneath_as`] (fork-safe: no
/// allocation), with `flags | O_CLOEXEC | O_NOFOLLOW`.
fn open_beneath_raw(dir: RawFd, path: &CStr, flags: libc::c_int) -> io::Result<RawFd> {
    const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
    const RESOLVE_NO_SYMLINKS: u64 = 0x04;
    const RESOLVE_BENEATH: u64 = 0x08;
    // struct open_how { flags, mode, resolve }
    let how: [u64; 3] = [
        (flags | libc::O_CLOEXEC | libc::O_NOFOLLOW) as u64,
        0,
        RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
    ];
    // SAFETY: path is NUL-terminated; how is a live 24-byte struct open_how whose size we pass.
    let r = check_long(unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir,
            path.as_ptr(),
            how.as_ptr(),
            std::mem::size_of_val(&how),
        )
    })?;
    RawFd::try_from(r).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))
}

/// `openat2(dir, path, {flags | O_NOFOLLOW | O_CLOEXEC, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
/// RESOLVE_NO_MAGICLINKS})`: as [`open_beneath`], opened with `flags` (`O_RDONLY |
/// O_DIRECTORY` to list a directory, `O_RDONLY | O_NONBLOCK` to read a file) instead of as an
/// `O_PATH` descriptor. A symbolic link anywhere, the last component included, is `ELOOP`.
pub fn open_beneath_as(dir: RawFd, path: &CStr, flags: libc::c_int) -> io::Result<OwnedFd> {
    open_beneath_raw(dir, path, flags).map(own)
}

/// The file type (`st_mode & S_IFMT`) of `name` in the directory `dir`, not following a
/// symbolic link (`fstatat` with `AT_SYMLINK_NOFOLLOW`).
pub fn lstat_at(dir: RawFd, name: &CStr) -> io::Result<libc::mode_t> {
    // SAFETY: an all-zero stat is a valid value for fstatat to overwrite.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `name` is NUL-terminated and `st` writable, both live for the call.
    check(unsafe { libc::fstatat(dir, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) })?;
    Ok(st.st_mode & libc::S_IFMT)
}

/// The entries of the directory open (for reading, not `O_PATH`) at `dir`: each name with its
/// `d_type` (`libc::DT_*`; `DT_UNKNOWN` where the filesystem gives none), `.` and `..` left
/// out, in the directory's order. Listed through the descriptor itself (`getdents64` from
/// offset 0), never by a path, so no procfs or other path walk is made for it.
pub fn list_dir(dir: RawFd) -> io::Result<Vec<(std::ffi::CString, u8)>> {
    // SAFETY: lseek takes integers; a bad descriptor is reported as EBADF.
    check_long(unsafe { libc::lseek(dir, 0, libc::SEEK_SET) } as libc::c_long)?;
    let mut buf = vec![0u8; 32 << 10];
    let mut out = Vec::new();
    loop {
        // SAFETY: the pointer and length describe the live, writable `buf`.
        let n = check_long(unsafe {
            libc::syscall(libc::SYS_getdents64, dir, buf.as_mut_ptr(), buf.len())
        })?;
        let n = usize::try_from(n).unwrap_or(0);
        if n == 0 {
            return Ok(out);
        }
        // struct linux_dirent64 { u64 d_ino; s64 d_off; u16 d_reclen; u8 d_type; char d_name[]; }
        let mut at = 0;
        while at + 19 <= n {
            let reclen = usize::from(u16::from_ne_bytes([buf[at + 16], buf[at + 17]]));
            if reclen < 20 || at + reclen > n {
                return Err(io::Error::from_raw_os_error(libc::EIO));
            }
            let d_type = buf[at + 18];
            let name = &buf[at + 19..at + reclen];
            let len = name.iter().position(|&b| b == 0).unwrap_or(name.len());
            let name = &name[..len];
            if name != b"." && name != b".." {
                let name = std::ffi::CString::new(name)
                    .map_err(|_| io::Error::from_raw_os_error(libc::EIO))?;
                out.push((name, d_type));
            }
            at += reclen;
        }
    }
}

/// Wraps a raw descriptor we just created and own.
pub fn own(fd: RawFd) -> OwnedFd {
    // SAFETY: callers pass only descriptors freshly returned by a successful call.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// The raw number of any descriptor-like value.
pub fn raw<F: AsRawFd>(f: &F) -> RawFd {
    f.as_raw_fd()
}

/// Empties the calling thread's capability bounding, ambient, effective, permitted and
/// inheritable sets (a spawned copy before its exec: as root of its user namespace it would
/// otherwise keep every capability there). Fork-safe: no allocation.
pub fn drop_all_capabilities() -> io::Result<()> {
    for cap in 0..64 {
        // EINVAL past the kernel's last capability: nothing left to drop.
        if let Err(e) = prctl(libc::PR_CAPBSET_DROP, cap) {
            if e.raw_os_error() == Some(libc::EINVAL) {
                break;
            }
            return Err(e);
        }
    }
    // SAFETY: PR_CAP_AMBIENT with integer arguments only.
    check(unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    })?;
    // _LINUX_CAPABILITY_VERSION_3: two 32-bit data words, all zero.
    let mut header: [u32; 2] = [0x2008_0522, 0];
    let data: [u32; 6] = [0; 6];
    // SAFETY: capset(2) reads a header and two data structs (6 words) that live on this stack
    // frame for the whole call.
    check_long(unsafe { libc::syscall(libc::SYS_capset, header.as_mut_ptr(), data.as_ptr()) })
        .map(drop)
}
