//! Creating the germline container (issue 4, item 1).
//!
//! Our own code rather than libcontainer: the germline is not an OCI container the user
//! configures but a fixed recipe (user, PID, mount, IPC, UTS and empty network namespaces,
//! read-only root, stdio on /dev/null, Landlock, seccomp) whose last step must be our bootstrap,
//! and every step is one system call. The work is split between the parent (which allocates
//! everything) and two forked children that only make system calls:
//!
//! * `C`, the keeper: enters a new user namespace (the parent writes its maps), new mount, IPC,
//!   UTS, network and PID namespaces, builds the read-only root and pivots into it, forks `G`
//!   and waits for it. `C` lives in the host's PID namespace and never joins the germline's
//!   cgroup.
//! * `G`, the germline: PID 1 of its own PID namespace. It waits until the parent has put it in
//!   its cgroup, puts /dev/null on its standard streams and the control socket on fd 3, closes
//!   everything else, sets NoNewPrivs, applies Landlock and seccomp, and executes the bootstrap.

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::landlock::{self, Ruleset};
use crate::seccomp::Program;
use crate::sys;

/// Steps of the children, reported as numbers through the status pipe.
const STEPS: [&str; 27] = [
    "unshare(CLONE_NEWUSER)",
    "wait for uid/gid maps",
    "setresgid/setresuid(0)",
    "unshare(mount, IPC, UTS, net, PID)",
    "sethostname",
    "make / private",
    "bind the rootfs",
    "mount tmpfs on /dev",
    "create /dev node file",
    "bind a /dev node",
    "remount /dev read-only",
    "remount the rootfs read-only",
    "chdir(rootfs)",
    "pivot_root",
    "detach the old root",
    "fork the germline",
    "wait for the cgroup",
    "open /dev/null",
    "arrange descriptors",
    "chdir(workdir)",
    "PR_SET_NO_NEW_PRIVS",
    "Landlock",
    "seccomp",
    "execve",
    "mount tmpfs on /run",
    "mkdir in /run",
    "remount /run read-only",
];

/// Everything the children need, allocated before `fork()`.
#[derive(Debug)]
pub struct Prepared {
    rootfs: CString,
    dev_dir: CString,
    dev_nodes: Vec<(CString, CString)>,
    run_dir: CString,
    run_subdirs: Vec<CString>,
    ro_flags: libc::c_ulong,
    hostname: Vec<u8>,
    workdir: CString,
    tmpfs: CString,
    tmpfs_opts: CString,
    dot: CString,
    slash: CString,
    devnull: CString,
    ruleset: Ruleset,
    landlock: bool,
    filters: Vec<libc::sock_filter>,
    exe: CString,
    argv: Vec<CString>,
    envp: Vec<CString>,
}

fn cstr(s: impl Into<Vec<u8>>) -> Result<CString> {
    CString::new(s).map_err(|_| Error::Spec("string with a NUL byte".into()))
}

/// Mount flags that a bind remount inside a user namespace must keep (they are locked).
fn locked_flags(path: &Path) -> Result<libc::c_ulong> {
    let c = cstr(path.as_os_str().as_bytes())?;
    // SAFETY: statvfs is plain old data; zero is a valid initial value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: c is NUL-terminated and st is a valid out pointer.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(Error::sys(
            format!("statvfs {}", path.display()),
            std::io::Error::last_os_error(),
        ));
    }
    let f = st.f_flag;
    let mut m: libc::c_ulong = 0;
    for (st_flag, ms_flag) in [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (libc::ST_RELATIME, libc::MS_RELATIME),
    ] {
        if f & st_flag != 0 {
            m |= ms_flag;
        }
    }
    Ok(m)
}

impl Prepared {
    /// Leaves the germline without its Landlock ruleset (tests that show what it prevents).
    /// Lets the germline and its copies `connect()` to TCP `port` (the broker's proxy).
    pub fn allow_connect(&mut self, port: u16) {
        self.ruleset.allow_connect(port);
    }

    pub fn without_landlock(&mut self) {
        self.landlock = false;
    }

    /// Prepares the launch of `interpreter argv...` in `rootfs`.
    pub fn new(
        rootfs: &Path,
        workdir: &str,
        readable: &[String],
        scratch: bool,
        exe: &str,
        argv: &[String],
        env: &[String],
    ) -> Result<Prepared> {
        let rootfs = rootfs
            .canonicalize()
            .map_err(|e| Error::Spec(format!("rootfs {}: {e}", rootfs.display())))?;
        let inside = |p: &str| rootfs.join(p.trim_start_matches('/'));
        let mut rules = Vec::new();
        for p in readable {
            let m = std::fs::metadata(inside(p))
                .map_err(|e| Error::Spec(format!("readable path {p} is not in the rootfs: {e}")))?;
            rules.push((p.clone(), landlock::READ, m.is_dir()));
        }
        for dir in ["/dev", "/proc", "/tmp", "/run"] {
            if !inside(dir).is_dir() {
                return Err(Error::Spec(format!("the rootfs lacks the directory {dir}")));
            }
        }
        rules.push(("/dev/null".into(), landlock::READ_WRITE_FILE, false));
        for dev in ["/dev/zero", "/dev/urandom", "/dev/random"] {
            rules.push((dev.into(), landlock::READ, false));
        }
        // Each copy's items and scratch tmpfs are mounted at /run/items and /run/scratch. Landlock
        // ignores rules on a directory once a mount hides it, so the rule sits on /run, the root
        // of a small read-only tmpfs the keeper mounts (its subdirectories are the mount points).
        let abi = landlock::abi();
        let run_rights = if scratch {
            landlock::all_fs_rights(abi)
        } else {
            landlock::READ
        };
        rules.push(("/run".into(), run_rights, true));
        let ruleset = Ruleset::new(abi, rules).map_err(|e| Error::sys("Landlock", e))?;
        let dev_nodes = ["null", "zero", "urandom", "random"]
            .iter()
            .map(|n| {
                Ok((
                    cstr(format!("/dev/{n}"))?,
                    cstr(inside(&format!("/dev/{n}")).as_os_str().as_bytes())?,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Prepared {
            ro_flags: locked_flags(&rootfs)?,
            dev_dir: cstr(inside("/dev").as_os_str().as_bytes())?,
            rootfs: cstr(rootfs.as_os_str().as_bytes())?,
            dev_nodes,
            run_dir: cstr(inside("/run").as_os_str().as_bytes())?,
            run_subdirs: ["items", "scratch", "proc"]
                .iter()
                .map(|d| cstr(inside(&format!("/run/{d}")).as_os_str().as_bytes()))
                .collect::<Result<_>>()?,
            hostname: b"germline".to_vec(),
            workdir: cstr(workdir)?,
            tmpfs: cstr("tmpfs")?,
            tmpfs_opts: cstr("size=64k,mode=755")?,
            dot: cstr(".")?,
            slash: cstr("/")?,
            devnull: cstr("/dev/null")?,
            ruleset,
            landlock: true,
            filters: Program::germline().filters(),
            exe: cstr(exe)?,
            argv: argv
                .iter()
                .map(|a| cstr(a.as_str()))
                .collect::<Result<_>>()?,
            envp: env
                .iter()
                .map(|a| cstr(a.as_str()))
                .collect::<Result<_>>()?,
        })
    }
}

fn report(fd: RawFd, step: usize, err: &std::io::Error) -> ! {
    let mut rec = [0u8; 6];
    rec[0] = b'E';
    rec[1] = u8::try_from(step).unwrap_or(u8::MAX);
    rec[2..6].copy_from_slice(&err.raw_os_error().unwrap_or(0).to_ne_bytes());
    let _ = sys::write_all_raw(fd, &rec);
    sys::exit_now(1)
}

macro_rules! step {
    ($fd:expr, $n:expr, $e:expr) => {
        if let Err(e) = $e {
            report($fd, $n, &e);
        }
    };
}

/// The keeper `C` (fork-safe code only).
fn keeper(
    p: &Prepared,
    argvp: &[*const libc::c_char],
    envpp: &[*const libc::c_char],
    to_parent: RawFd,
    from_parent: RawFd,
    ctl: RawFd,
) -> ! {
    let _ = sys::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
    step!(to_parent, 0, sys::unshare(libc::CLONE_NEWUSER));
    step!(to_parent, 0, sys::write_all_raw(to_parent, b"U"));
    let mut b = [0u8; 1];
    match sys::read_raw(from_parent, &mut b) {
        Ok(1) if b[0] == b'M' => {}
        Ok(_) => report(
            to_parent,
            1,
            &std::io::Error::from_raw_os_error(libc::EPIPE),
        ),
        Err(e) => report(to_parent, 1, &e),
    }
    step!(to_parent, 2, sys::setresgid(0));
    step!(to_parent, 2, sys::setresuid(0));
    step!(
        to_parent,
        3,
        sys::unshare(
            libc::CLONE_NEWNS
                | libc::CLONE_NEWIPC
                | libc::CLONE_NEWUTS
                | libc::CLONE_NEWNET
                | libc::CLONE_NEWPID
        )
    );
    step!(to_parent, 4, sys::sethostname(&p.hostname));
    step!(
        to_parent,
        5,
        sys::mount(None, &p.slash, None, libc::MS_REC | libc::MS_PRIVATE, None)
    );
    step!(
        to_parent,
        6,
        sys::mount(Some(&p.rootfs), &p.rootfs, None, libc::MS_BIND, None)
    );
    step!(
        to_parent,
        7,
        sys::mount(
            Some(&p.tmpfs),
            &p.dev_dir,
            Some(&p.tmpfs),
            libc::MS_NOSUID | libc::MS_NOEXEC,
            Some(&p.tmpfs_opts)
        )
    );
    for (host, target) in &p.dev_nodes {
        match sys::open_raw(
            target,
            libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
            0o666,
        ) {
            Ok(fd) => sys::close_raw(fd),
            Err(e) => report(to_parent, 8, &e),
        }
        step!(
            to_parent,
            9,
            sys::mount(Some(host), target, None, libc::MS_BIND, None)
        );
    }
    step!(
        to_parent,
        10,
        sys::mount(
            None,
            &p.dev_dir,
            None,
            libc::MS_REMOUNT | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NOEXEC,
            None
        )
    );
    step!(
        to_parent,
        24,
        sys::mount(
            Some(&p.tmpfs),
            &p.run_dir,
            Some(&p.tmpfs),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            Some(&p.tmpfs_opts)
        )
    );
    for d in &p.run_subdirs {
        step!(to_parent, 25, sys::mkdir(d, 0o755));
    }
    step!(
        to_parent,
        26,
        sys::mount(
            None,
            &p.run_dir,
            None,
            libc::MS_REMOUNT | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            None
        )
    );
    step!(
        to_parent,
        11,
        sys::mount(
            None,
            &p.rootfs,
            None,
            libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | p.ro_flags,
            None
        )
    );
    step!(to_parent, 12, sys::chdir(&p.rootfs));
    step!(to_parent, 13, sys::pivot_root(&p.dot, &p.dot));
    step!(to_parent, 14, sys::umount2(&p.dot, libc::MNT_DETACH));
    step!(to_parent, 14, sys::chdir(&p.slash));
    let pid = match sys::fork() {
        Ok(pid) => pid,
        Err(e) => report(to_parent, 15, &e),
    };
    if pid == 0 {
        germline(p, argvp, envpp, to_parent, from_parent, ctl);
    }
    let mut rec = [0u8; 5];
    rec[0] = b'P';
    rec[1..5].copy_from_slice(&pid.to_ne_bytes());
    let _ = sys::write_all_raw(to_parent, &rec);
    // The keeper keeps nothing of the shim's: no descriptor but the standard streams.
    let _ = sys::close_range(3, 0);
    let code = match sys::waitpid(pid, 0) {
        Ok((_, st)) if libc::WIFEXITED(st) => libc::WEXITSTATUS(st),
        Ok((_, st)) if libc::WIFSIGNALED(st) => 128 + libc::WTERMSIG(st),
        _ => 255,
    };
    sys::exit_now(code)
}

/// The germline `G` (fork-safe code only), PID 1 of its PID namespace.
fn germline(
    p: &Prepared,
    argvp: &[*const libc::c_char],
    envpp: &[*const libc::c_char],
    to_parent: RawFd,
    from_parent: RawFd,
    ctl: RawFd,
) -> ! {
    let _ = sys::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
    let mut b = [0u8; 1];
    match sys::read_raw(from_parent, &mut b) {
        Ok(1) if b[0] == b'G' => {}
        Ok(_) => report(
            to_parent,
            16,
            &std::io::Error::from_raw_os_error(libc::EPIPE),
        ),
        Err(e) => report(to_parent, 16, &e),
    }
    let null = match sys::open_raw(&p.devnull, libc::O_RDWR, 0) {
        Ok(fd) => fd,
        Err(e) => report(to_parent, 17, &e),
    };
    // Move the descriptors we keep above the standard range first, then lay them out.
    let hi_ctl = sys::dup_above(ctl, 64);
    let hi_status = sys::dup_above(to_parent, 64);
    let (hi_ctl, hi_status) = match (hi_ctl, hi_status) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => report(to_parent, 18, &e),
    };
    let to_parent = hi_status;
    for std in 0..3 {
        step!(to_parent, 18, sys::dup2(null, std));
    }
    step!(to_parent, 18, sys::dup2(hi_ctl, 3));
    // Everything above 3 becomes close-on-exec: the status pipe stays open to report a
    // failing execve and closes when the bootstrap starts.
    step!(
        to_parent,
        18,
        sys::close_range(4, libc::CLOSE_RANGE_CLOEXEC)
    );
    step!(to_parent, 19, sys::chdir(&p.workdir));
    step!(
        to_parent,
        20,
        sys::prctl(libc::PR_SET_NO_NEW_PRIVS, 1).map(drop)
    );
    if p.landlock {
        if let Err((_, e)) = p.ruleset.apply() {
            report(to_parent, 21, &e);
        }
    }
    let prog = libc::sock_fprog {
        len: u16::try_from(p.filters.len()).unwrap_or(u16::MAX),
        filter: p.filters.as_ptr().cast_mut(),
    };
    step!(to_parent, 22, sys::seccomp_set_filter(&prog));
    let e = sys::execve(&p.exe, argvp, envpp);
    report(to_parent, 23, &e)
}

/// A started germline process pair.
#[derive(Debug)]
pub struct Started {
    /// Host pid of the keeper `C` (our child).
    pub keeper: i32,
    /// Host pid of the germline `G`.
    pub pid: i32,
    /// Our end of the control socket.
    pub ctl: OwnedFd,
    /// Inode of the germline's end of the control socket.
    pub ctl_inode: u64,
}

fn read_exact_until(fd: RawFd, buf: &mut [u8], deadline: Instant) -> Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        let ms = i32::try_from(left.as_millis()).unwrap_or(i32::MAX);
        if !sys::poll_readable(fd, ms).map_err(|e| Error::sys("poll status pipe", e))? {
            return Err(Error::Start {
                step: "waiting for the keeper",
                source: std::io::ErrorKind::TimedOut.into(),
            });
        }
        let n =
            sys::read_raw(fd, &mut buf[got..]).map_err(|e| Error::sys("read status pipe", e))?;
        if n == 0 {
            break;
        }
        got += n;
    }
    Ok(got)
}

fn child_error(rec: &[u8]) -> Error {
    let step = STEPS.get(usize::from(rec[1])).copied().unwrap_or("?");
    let errno = i32::from_ne_bytes([rec[2], rec[3], rec[4], rec[5]]);
    Error::Start {
        step,
        source: std::io::Error::from_raw_os_error(errno),
    }
}

/// Forks the keeper and the germline; `join_cgroup` is called with G's host pid before G may
/// continue. Returns once G has executed the bootstrap.
pub fn start(
    p: &Prepared,
    host_uid: u32,
    host_gid: u32,
    join_cgroup: &dyn Fn(i32) -> Result<()>,
) -> Result<Started> {
    let (status_r, status_w) = sys::pipe().map_err(|e| Error::sys("pipe", e))?;
    let (go_r, go_w) = sys::pipe().map_err(|e| Error::sys("pipe", e))?;
    let (ctl, ctl_child) =
        sys::socketpair(libc::SOCK_SEQPACKET).map_err(|e| Error::sys("socketpair", e))?;
    let ctl_inode = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(format!("/proc/self/fd/{}", ctl_child.as_raw_fd()))
            .map_err(|e| Error::sys("stat control socket", e))?
            .ino()
    };
    let mut argvp: Vec<*const libc::c_char> = p.argv.iter().map(|a| a.as_ptr()).collect();
    argvp.push(std::ptr::null());
    let mut envpp: Vec<*const libc::c_char> = p.envp.iter().map(|a| a.as_ptr()).collect();
    envpp.push(std::ptr::null());
    let keeper_pid = sys::fork().map_err(|e| Error::sys("fork", e))?;
    if keeper_pid == 0 {
        sys::close_raw(status_r.as_raw_fd());
        sys::close_raw(go_w.as_raw_fd());
        sys::close_raw(ctl.as_raw_fd());
        keeper(
            p,
            &argvp,
            &envpp,
            status_w.as_raw_fd(),
            go_r.as_raw_fd(),
            ctl_child.as_raw_fd(),
        );
    }
    drop(status_w);
    drop(go_r);
    drop(ctl_child);
    let fail = |e: Error| -> Error {
        let _ = sys::kill(keeper_pid, libc::SIGKILL);
        let _ = sys::waitpid(keeper_pid, 0);
        e
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let sr = status_r.as_raw_fd();
    let mut b = [0u8; 1];
    match read_exact_until(sr, &mut b, deadline) {
        Ok(1) if b[0] == b'U' => {}
        Ok(1) if b[0] == b'E' => {
            let mut rest = [0u8; 5];
            let _ = read_exact_until(sr, &mut rest, deadline);
            let rec = [b'E', rest[0], rest[1], rest[2], rest[3], rest[4]];
            return Err(fail(child_error(&rec)));
        }
        Ok(_) => {
            return Err(fail(Error::Start {
                step: "keeper",
                source: std::io::ErrorKind::UnexpectedEof.into(),
            }))
        }
        Err(e) => return Err(fail(e)),
    }
    let maps = (|| -> std::io::Result<()> {
        std::fs::write(format!("/proc/{keeper_pid}/setgroups"), "deny")?;
        std::fs::write(
            format!("/proc/{keeper_pid}/uid_map"),
            format!("0 {host_uid} 1\n"),
        )?;
        std::fs::write(
            format!("/proc/{keeper_pid}/gid_map"),
            format!("0 {host_gid} 1\n"),
        )?;
        Ok(())
    })();
    if let Err(e) = maps {
        return Err(fail(Error::sys("write the user namespace maps", e)));
    }
    sys::write_all_raw(go_w.as_raw_fd(), b"M")
        .map_err(|e| fail(Error::sys("signal the keeper", e)))?;
    let mut rec = [0u8; 6];
    let n = read_exact_until(sr, &mut rec[..1], deadline).map_err(&fail)?;
    if n == 1 && rec[0] == b'E' {
        let _ = read_exact_until(sr, &mut rec[1..], deadline);
        return Err(fail(child_error(&rec)));
    }
    if n != 1 || rec[0] != b'P' {
        return Err(fail(Error::Start {
            step: "keeper",
            source: std::io::ErrorKind::UnexpectedEof.into(),
        }));
    }
    read_exact_until(sr, &mut rec[1..5], deadline).map_err(&fail)?;
    let pid = i32::from_ne_bytes([rec[1], rec[2], rec[3], rec[4]]);
    if let Err(e) = join_cgroup(pid) {
        return Err(fail(e));
    }
    sys::write_all_raw(go_w.as_raw_fd(), b"G")
        .map_err(|e| fail(Error::sys("signal the germline", e)))?;
    drop(go_w);
    // End of file: the germline executed the bootstrap. An 'E' record: a step failed.
    let n = read_exact_until(sr, &mut rec, deadline).map_err(&fail)?;
    if n > 0 {
        if rec[0] == b'E' {
            return Err(fail(child_error(&rec)));
        }
        return Err(fail(Error::Start {
            step: "germline",
            source: std::io::ErrorKind::InvalidData.into(),
        }));
    }
    Ok(Started {
        keeper: keeper_pid,
        pid,
        ctl,
        ctl_inode,
    })
}
