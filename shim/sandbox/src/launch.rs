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
use crate::spec::BindMount;
use crate::sys;

/// One checked extra mount (`LaunchSpec::extra_mounts`), ready for the keeper.
#[derive(Debug)]
struct ExtraMount {
    /// The source on the host.
    source: CString,
    /// The target relative to the rootfs's root (no leading `/`).
    target: CString,
}

/// What the keeper does for `LaunchSpec::extra_mounts`, checked in the parent.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ExtraPlan {
    /// (source on the host, target relative to the root), parents before children.
    pub mounts: Vec<(std::path::PathBuf, String)>,
    /// Directories to create in the keeper's `/run` tmpfs (relative to the root), in order.
    pub run_dirs: Vec<String>,
    /// Empty files to create there as mount points of file sources.
    pub run_files: Vec<String>,
}

/// Components of a target path inside the rootfs: no `.`, `..` or empty component.
fn target_components(field: &str, target: &str) -> Result<Vec<String>> {
    if target.contains('\0') {
        return Err(Error::Spec(format!(
            "{field}: the target contains a NUL byte"
        )));
    }
    let parts: Vec<&str> = target.trim_start_matches('/').split('/').collect();
    if parts
        .iter()
        .any(|c| c.is_empty() || *c == "." || *c == "..")
    {
        return Err(Error::Spec(format!(
            "{field}: target {target:?} is not a plain path inside the rootfs (empty, `.` or `..` component)"
        )));
    }
    Ok(parts.into_iter().map(String::from).collect())
}

/// Checks `LaunchSpec::extra_mounts` against the rootfs and the Landlock allowlist: every
/// target lies inside the rootfs, is reached through no symbolic link, exists with the
/// source's kind (or lies below `/run`, where the keeper creates it), is not one of the shim's
/// own mount points, and is covered by a readable path so that Landlock lets copies read it.
pub fn plan_extra_mounts(
    rootfs: &Path,
    mounts: &[BindMount],
    readable: &[String],
) -> Result<ExtraPlan> {
    use std::os::unix::fs::PermissionsExt;
    if mounts.len() > MAX_EXTRA_MOUNTS {
        return Err(Error::Spec(format!(
            "extra_mounts: {} mounts, at most {MAX_EXTRA_MOUNTS}",
            mounts.len()
        )));
    }
    let readable: Vec<Vec<String>> = readable
        .iter()
        .filter_map(|r| target_components("readable_paths", r).ok())
        .collect();
    let mut plan = ExtraPlan::default();
    let mut seen: Vec<Vec<String>> = Vec::new();
    let mut checked: Vec<(usize, std::path::PathBuf, String)> = Vec::new();
    for (i, m) in mounts.iter().enumerate() {
        let field = format!("extra_mounts[{i}] (target {:?})", m.target);
        let parts = target_components(&field, &m.target)?;
        let rel = parts.join("/");
        let src = std::fs::metadata(&m.source)
            .map_err(|e| Error::Spec(format!("{field}: source {}: {e}", m.source.display())))?;
        if !(src.is_file() || src.is_dir()) {
            return Err(Error::Spec(format!(
                "{field}: source {} is neither a regular file nor a directory",
                m.source.display()
            )));
        }
        // Root inside the germline maps to an unprivileged host user: only what others may
        // read is readable there.
        let want = if src.is_dir() { 0o005 } else { 0o004 };
        if src.permissions().mode() & want != want {
            return Err(Error::Spec(format!(
                "{field}: source {} is not readable by others (mode {:o}); the germline's root \
                 is an unprivileged user on the host",
                m.source.display(),
                src.permissions().mode() & 0o7777
            )));
        }
        let first = parts[0].as_str();
        let under_run = first == "run";
        if ["dev", "proc"].contains(&first)
            || (under_run
                && (parts.len() < 2 || ["items", "scratch", "proc"].contains(&parts[1].as_str())))
        {
            return Err(Error::Spec(format!(
                "{field}: /{rel} is, or is inside, one of the shim's own mount points (/dev, /proc, /run, /run/items, /run/scratch, /run/proc)"
            )));
        }
        if seen.contains(&parts) {
            return Err(Error::Spec(format!("{field}: /{rel} is mounted twice")));
        }
        if under_run {
            // Below /run the keeper creates the mount point in its own tmpfs.
            for k in 2..parts.len() {
                let d = parts[..k].join("/");
                if !plan.run_dirs.contains(&d) {
                    plan.run_dirs.push(d);
                }
            }
            if src.is_dir() {
                plan.run_dirs.push(rel.clone());
            } else {
                plan.run_files.push(rel.clone());
            }
        } else {
            // Every prefix inside the rootfs must be a real directory (no symbolic link), and
            // the target must exist with the source's kind: the rootfs is never changed.
            let mut cur = rootfs.to_path_buf();
            for (k, c) in parts.iter().enumerate() {
                cur.push(c);
                let md = std::fs::symlink_metadata(&cur).map_err(|e| {
                    Error::Spec(format!(
                        "{field}: /{} in the rootfs: {e}",
                        parts[..=k].join("/")
                    ))
                })?;
                if md.file_type().is_symlink() {
                    return Err(Error::Spec(format!(
                        "{field}: /{} in the rootfs is a symbolic link; a target must be reached through none",
                        parts[..=k].join("/")
                    )));
                }
                let last = k + 1 == parts.len();
                if !last && !md.is_dir() {
                    return Err(Error::Spec(format!(
                        "{field}: /{} in the rootfs is not a directory",
                        parts[..=k].join("/")
                    )));
                }
                if last && md.is_dir() != src.is_dir() {
                    return Err(Error::Spec(format!(
                        "{field}: the source {} is a {} but /{rel} in the rootfs is not",
                        m.source.display(),
                        if src.is_dir() { "directory" } else { "file" }
                    )));
                }
            }
            // Landlock: the rules are opened after the mounts are made, so a readable path
            // equal to the target or above it covers the mounted object.
            let covered = readable
                .iter()
                .any(|r| r.len() <= parts.len() && parts[..r.len()] == r[..]);
            if !covered {
                return Err(Error::Spec(format!(
                    "{field}: /{rel} is not covered by readable_paths, so Landlock would deny \
                     every copy reading it"
                )));
            }
        }
        seen.push(parts.clone());
        checked.push((parts.len(), m.source.clone(), rel));
    }
    // Parents before children, so that a file mounted inside a mounted directory lands on top.
    checked.sort_by_key(|(depth, _, _)| *depth);
    plan.mounts = checked.into_iter().map(|(_, s, r)| (s, r)).collect();
    Ok(plan)
}

/// Steps of the keeper and the germline between fork and exec. A failing step is reported
/// through the status pipe as its one-byte discriminant ([`Step::from_byte`] reads it back).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Step {
    UnshareUser,
    WaitMaps,
    SetIds,
    UnshareRest,
    Hostname,
    RootPrivate,
    BindRootfs,
    DevTmpfs,
    DevNodeFile,
    DevNodeBind,
    DevReadOnly,
    RootfsReadOnly,
    ChdirRootfs,
    PivotRoot,
    DetachOldRoot,
    ForkGermline,
    WaitCgroup,
    OpenDevNull,
    ArrangeFds,
    ChdirWorkdir,
    NoNewPrivs,
    Landlock,
    Seccomp,
    Execve,
    RunTmpfs,
    RunMkdir,
    RunReadOnly,
    ExtraOpenTree,
    ExtraReadOnly,
    ExtraRunTarget,
    ExtraOpenTarget,
    ExtraMoveMount,
    DropCapabilities,
}

impl Step {
    /// Every step, in discriminant order.
    const ALL: [Step; 33] = [
        Step::UnshareUser,
        Step::WaitMaps,
        Step::SetIds,
        Step::UnshareRest,
        Step::Hostname,
        Step::RootPrivate,
        Step::BindRootfs,
        Step::DevTmpfs,
        Step::DevNodeFile,
        Step::DevNodeBind,
        Step::DevReadOnly,
        Step::RootfsReadOnly,
        Step::ChdirRootfs,
        Step::PivotRoot,
        Step::DetachOldRoot,
        Step::ForkGermline,
        Step::WaitCgroup,
        Step::OpenDevNull,
        Step::ArrangeFds,
        Step::ChdirWorkdir,
        Step::NoNewPrivs,
        Step::Landlock,
        Step::Seccomp,
        Step::Execve,
        Step::RunTmpfs,
        Step::RunMkdir,
        Step::RunReadOnly,
        Step::ExtraOpenTree,
        Step::ExtraReadOnly,
        Step::ExtraRunTarget,
        Step::ExtraOpenTarget,
        Step::ExtraMoveMount,
        Step::DropCapabilities,
    ];

    /// The step as the start error names it.
    fn text(self) -> &'static str {
        match self {
            Step::UnshareUser => "unshare(CLONE_NEWUSER)",
            Step::WaitMaps => "wait for uid/gid maps",
            Step::SetIds => "setresgid/setresuid(0)",
            Step::UnshareRest => "unshare(mount, IPC, UTS, net, PID)",
            Step::Hostname => "sethostname",
            Step::RootPrivate => "make / private",
            Step::BindRootfs => "bind the rootfs",
            Step::DevTmpfs => "mount tmpfs on /dev",
            Step::DevNodeFile => "create /dev node file",
            Step::DevNodeBind => "bind a /dev node",
            Step::DevReadOnly => "remount /dev read-only",
            Step::RootfsReadOnly => "remount the rootfs read-only",
            Step::ChdirRootfs => "chdir(rootfs)",
            Step::PivotRoot => "pivot_root",
            Step::DetachOldRoot => "detach the old root",
            Step::ForkGermline => "fork the germline",
            Step::WaitCgroup => "wait for the cgroup",
            Step::OpenDevNull => "open /dev/null",
            Step::ArrangeFds => "arrange descriptors",
            Step::ChdirWorkdir => "chdir(workdir)",
            Step::NoNewPrivs => "PR_SET_NO_NEW_PRIVS",
            Step::Landlock => "Landlock",
            Step::Seccomp => "seccomp",
            Step::Execve => "execve",
            Step::RunTmpfs => "mount tmpfs on /run",
            Step::RunMkdir => "mkdir in /run",
            Step::RunReadOnly => "remount /run read-only",
            Step::ExtraOpenTree => "clone an extra mount's source (open_tree)",
            Step::ExtraReadOnly => "make an extra mount read-only",
            Step::ExtraRunTarget => "create an extra mount's target in /run",
            Step::ExtraOpenTarget => "open an extra mount's target in the rootfs",
            Step::ExtraMoveMount => "attach an extra mount (move_mount)",
            Step::DropCapabilities => "drop every capability",
        }
    }

    /// The step a status record names; `None` for a byte no step has.
    fn from_byte(b: u8) -> Option<Step> {
        Step::ALL.get(usize::from(b)).copied()
    }
}

/// At most this many extra mounts (the keeper keeps their descriptors on its stack).
pub const MAX_EXTRA_MOUNTS: usize = 32;

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
    extra: Vec<ExtraMount>,
    extra_run_dirs: Vec<CString>,
    extra_run_files: Vec<CString>,
    extra_attr: sys::MountAttr,
    filters: Vec<libc::sock_filter>,
    /// A second seccomp program installed after `filters` (a spawned copy's layer).
    copy_filters: Vec<libc::sock_filter>,
    /// A spawned copy (issue 28): the control socket is a stream on stdin and stdout, stderr
    /// is `/dev/null`, nothing else stays open across exec.
    copy_stdio: bool,
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
    /// Mounts the keeper's small tmpfs (`size=64k,mode=755`) on `dir` with `flags`
    /// (fork-safe: allocates nothing).
    fn mount_tmpfs(&self, dir: &std::ffi::CStr, flags: libc::c_ulong) -> std::io::Result<()> {
        sys::mount(
            Some(&self.tmpfs),
            dir,
            Some(&self.tmpfs),
            flags,
            Some(&self.tmpfs_opts),
        )
    }

    /// Leaves the germline without its Landlock ruleset (tests that show what it prevents).
    #[cfg(feature = "ablation")]
    pub fn without_landlock(&mut self) {
        self.landlock = false;
    }

    /// Replaces the seccomp program installed on the germline (only the socket-family
    /// ablation of the tests uses another than [`Program::germline`]).
    #[cfg(feature = "ablation")]
    pub fn set_filter(&mut self, program: &Program) {
        self.filters = program.filters();
    }

    /// Makes this the launch of a spawned copy rather than a germline (docs/sandbox.md,
    /// "Spawned copies"): the same keeper and steps, but the standard streams of the process
    /// are the copy socket (a stream: stdin and stdout) and `/dev/null` (stderr), and both
    /// seccomp programs (`[germline, copy]`) are installed before the exec of the release's
    /// own entry, so no code of the release runs without them.
    pub fn for_spawned_copy(&mut self) {
        self.copy_stdio = true;
        self.copy_filters = Program::copy().filters();
    }

    /// Prepares the launch of `spec.interpreter argv...` in `spec.rootfs`. `item_slots`:
    /// directories of the shim's private item store that the Landlock layer must let copies
    /// read (they are mounted into copies later, see `mounts::ItemStore`).
    pub fn new(
        spec: &crate::spec::LaunchSpec,
        argv: &[String],
        env: &[String],
        item_slots: &[RawFd],
    ) -> Result<Prepared> {
        let (workdir, readable, scratch, exe) = (
            spec.workdir.as_str(),
            &spec.readable_paths[..],
            spec.scratch,
            spec.interpreter.as_str(),
        );
        let rootfs = spec
            .rootfs
            .canonicalize()
            .map_err(|e| Error::Spec(format!("rootfs {}: {e}", spec.rootfs.display())))?;
        let extra = plan_extra_mounts(&rootfs, &spec.extra_mounts, readable)?;
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
        // A copy's state tmpfs (/run/state) is written like its scratch: the same rule on /run.
        if spec.state_bytes > 0
            && !spec
                .extra_mounts
                .iter()
                .any(|m| m.target.trim_end_matches('/') == crate::spec::STATE_DIR)
        {
            return Err(Error::Spec(format!(
                "state_bytes: the germline's {} (its initial state) is not among extra_mounts",
                crate::spec::STATE_DIR
            )));
        }
        let run_rights = if scratch || spec.state_bytes > 0 {
            landlock::all_fs_rights(abi)
        } else {
            landlock::READ
        };
        rules.push(("/run".into(), run_rights, true));
        // Directory items a copy may write (issue 27) are in these directories: a rule on the
        // directory a bind mount is made of covers it (the walk checks the mount's root; only a
        // covered mount point is skipped: docs/sandbox.md, "Writes").
        let slot_rights = if spec.writable_trees {
            landlock::READ | landlock::TREE_WRITE
        } else {
            landlock::READ
        };
        let fd_rules = item_slots.iter().map(|fd| (*fd, slot_rights)).collect();
        let ruleset = Ruleset::new(abi, rules, fd_rules, spec.egress_port)
            .map_err(|e| Error::sys("Landlock", e))?;
        let host_path = |rel: &str| cstr(rootfs.join(rel).as_os_str().as_bytes());
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
            extra: extra
                .mounts
                .iter()
                .map(|(src, rel)| {
                    Ok(ExtraMount {
                        source: cstr(src.as_os_str().as_bytes())?,
                        target: cstr(rel.as_str())?,
                    })
                })
                .collect::<Result<_>>()?,
            extra_run_dirs: extra
                .run_dirs
                .iter()
                .map(|r| host_path(r))
                .collect::<Result<_>>()?,
            extra_run_files: extra
                .run_files
                .iter()
                .map(|r| host_path(r))
                .collect::<Result<_>>()?,
            // MOUNT_ATTR_RDONLY | NOSUID | NODEV, private propagation.
            extra_attr: [0x1 | 0x2 | 0x4, 0, libc::MS_PRIVATE, 0],
            filters: Program::germline().filters(),
            copy_filters: Vec::new(),
            copy_stdio: false,
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

/// What the keeper and the germline tell the shim through the status pipe. Not serde: it is
/// written between fork and exec, where nothing may allocate, so each record is encoded into a
/// fixed array: a tag byte and its fixed-size payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Record {
    /// `U`: the keeper is in its new user namespace; the shim may write its maps.
    Unshared,
    /// `P` + 4 bytes: the germline's host pid (the keeper forked it).
    Forked(i32),
    /// `E` + 1 + 4 bytes: a step failed with an errno. The step stays a raw byte: a record is
    /// untrusted input, and a byte no [`Step`] has is reported as `?`.
    Failed { step: u8, errno: i32 },
    /// A tag no record has.
    Other(u8),
}

impl Record {
    /// The longest record.
    const MAX: usize = 6;

    /// The record's bytes and their count (fork-safe: no allocation).
    fn encode(self) -> ([u8; Record::MAX], usize) {
        let mut b = [0u8; Record::MAX];
        let n = match self {
            Record::Unshared => {
                b[0] = b'U';
                1
            }
            Record::Forked(pid) => {
                b[0] = b'P';
                b[1..5].copy_from_slice(&pid.to_ne_bytes());
                5
            }
            Record::Failed { step, errno } => {
                b[0] = b'E';
                b[1] = step;
                b[2..6].copy_from_slice(&errno.to_ne_bytes());
                6
            }
            Record::Other(tag) => {
                b[0] = tag;
                1
            }
        };
        (b, n)
    }

    /// Reads a record from its bytes (missing payload bytes read as zero).
    fn decode(b: &[u8; Record::MAX]) -> Record {
        match b[0] {
            b'U' => Record::Unshared,
            b'P' => Record::Forked(i32::from_ne_bytes([b[1], b[2], b[3], b[4]])),
            b'E' => Record::Failed {
                step: b[1],
                errno: i32::from_ne_bytes([b[2], b[3], b[4], b[5]]),
            },
            tag => Record::Other(tag),
        }
    }

    /// Writes the record (fork-safe).
    fn send(self, fd: RawFd) -> std::io::Result<()> {
        let (b, n) = self.encode();
        sys::write_all_raw(fd, &b[..n])
    }
}

/// The shim's go-aheads to the keeper and the germline through the go pipe, one byte each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Go {
    /// To the keeper: its user namespace's maps are written.
    Maps = b'M',
    /// To the germline: it is in its cgroup.
    Germline = b'G',
}

/// Waits for one byte from `fd` and checks that it is the go-ahead `go` (fork-safe).
fn wait_for(fd: RawFd, go: Go) -> std::io::Result<()> {
    let mut b = [0u8; 1];
    match sys::read_raw(fd, &mut b) {
        Ok(1) if b[0] == go as u8 => Ok(()),
        Ok(_) => Err(std::io::Error::from_raw_os_error(libc::EPIPE)),
        Err(e) => Err(e),
    }
}

fn report(fd: RawFd, step: Step, err: &std::io::Error) -> ! {
    let _ = Record::Failed {
        step: step as u8,
        errno: err.raw_os_error().unwrap_or(0),
    }
    .send(fd);
    sys::exit_now(1)
}

/// The inode of socket `fd` as `/proc/self/fd/N` shows it: how the checks recognise that socket
/// among another process's descriptors. `what` names the step in the error.
pub(crate) fn socket_inode(fd: &OwnedFd, what: &str) -> Result<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/self/fd/{}", fd.as_raw_fd()))
        .map(|m| m.ino())
        .map_err(|e| Error::sys(what, e))
}

macro_rules! step {
    ($fd:expr, $n:expr, $e:expr) => {
        if let Err(e) = $e {
            report($fd, $n, &e);
        }
    };
}

/// What the keeper and then the germline get across their forks: made before the first
/// fork, only read after it.
#[derive(Clone, Copy)]
struct Child<'a> {
    p: &'a Prepared,
    /// `execve`'s argument and environment arrays, null-terminated.
    argvp: &'a [*const libc::c_char],
    envpp: &'a [*const libc::c_char],
    /// The status pipe to the shim, the go pipe from it, the germline's end of the control
    /// socket.
    to_parent: RawFd,
    from_parent: RawFd,
    ctl: RawFd,
}

/// The keeper `C` (fork-safe code only).
fn keeper(c: Child<'_>) -> ! {
    let Child {
        p,
        to_parent,
        from_parent,
        ..
    } = c;
    let _ = sys::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
    // SAFETY: getppid(2) cannot fail and touches no memory.
    let shim = unsafe { libc::getppid() };
    // Extra mounts are cloned while the keeper is still root in the host's namespaces, so
    // their sources are looked up with the shim's rights, and attached below after the root
    // is built.
    let mut trees: [RawFd; MAX_EXTRA_MOUNTS] = [-1; MAX_EXTRA_MOUNTS];
    for (m, slot) in p.extra.iter().zip(trees.iter_mut()) {
        match sys::open_tree_clone(&m.source) {
            Ok(fd) => *slot = fd,
            Err(e) => report(to_parent, Step::ExtraOpenTree, &e),
        }
        step!(
            to_parent,
            Step::ExtraReadOnly,
            sys::mount_setattr_fd(*slot, &p.extra_attr)
        );
    }
    step!(
        to_parent,
        Step::UnshareUser,
        sys::unshare(libc::CLONE_NEWUSER)
    );
    step!(
        to_parent,
        Step::UnshareUser,
        Record::Unshared.send(to_parent)
    );
    step!(to_parent, Step::WaitMaps, wait_for(from_parent, Go::Maps));
    step!(to_parent, Step::SetIds, sys::setresgid(0));
    step!(to_parent, Step::SetIds, sys::setresuid(0));
    // Changing credentials cleared the parent-death signal (prctl(2)): arm it again, so that a
    // SIGKILLed shim takes the keeper with it; if the shim is already gone, stop here.
    step!(
        to_parent,
        Step::SetIds,
        sys::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong)
    );
    // SAFETY: getppid(2) cannot fail and touches no memory.
    if unsafe { libc::getppid() } != shim {
        report(
            to_parent,
            Step::SetIds,
            &std::io::Error::from_raw_os_error(libc::ESRCH),
        );
    }
    step!(
        to_parent,
        Step::UnshareRest,
        sys::unshare(
            libc::CLONE_NEWNS
                | libc::CLONE_NEWIPC
                | libc::CLONE_NEWUTS
                | libc::CLONE_NEWNET
                | libc::CLONE_NEWPID
        )
    );
    step!(to_parent, Step::Hostname, sys::sethostname(&p.hostname));
    step!(
        to_parent,
        Step::RootPrivate,
        sys::mount(None, &p.slash, None, libc::MS_REC | libc::MS_PRIVATE, None)
    );
    step!(
        to_parent,
        Step::BindRootfs,
        sys::mount(Some(&p.rootfs), &p.rootfs, None, libc::MS_BIND, None)
    );
    step!(
        to_parent,
        Step::DevTmpfs,
        p.mount_tmpfs(&p.dev_dir, libc::MS_NOSUID | libc::MS_NOEXEC)
    );
    for (host, target) in &p.dev_nodes {
        match sys::open_raw(
            target,
            libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
            0o666,
        ) {
            Ok(fd) => sys::close_raw(fd),
            Err(e) => report(to_parent, Step::DevNodeFile, &e),
        }
        step!(
            to_parent,
            Step::DevNodeBind,
            sys::mount(Some(host), target, None, libc::MS_BIND, None)
        );
    }
    step!(
        to_parent,
        Step::DevReadOnly,
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
        Step::RunTmpfs,
        p.mount_tmpfs(
            &p.run_dir,
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC
        )
    );
    for d in &p.run_subdirs {
        step!(to_parent, Step::RunMkdir, sys::mkdir(d, 0o755));
    }
    for d in &p.extra_run_dirs {
        match sys::mkdir(d, 0o755) {
            Err(e) if e.raw_os_error() != Some(libc::EEXIST) => {
                report(to_parent, Step::ExtraRunTarget, &e)
            }
            _ => {}
        }
    }
    for f in &p.extra_run_files {
        match sys::open_raw(
            f,
            libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_CLOEXEC,
            0o444,
        ) {
            Ok(fd) => sys::close_raw(fd),
            Err(e) => report(to_parent, Step::ExtraRunTarget, &e),
        }
    }
    if !p.extra.is_empty() {
        // Targets are resolved strictly below the root without following any symbolic link
        // (checked in the parent too; this closes the window between the two).
        let root = match sys::open_raw(
            &p.rootfs,
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            0,
        ) {
            Ok(fd) => fd,
            Err(e) => report(to_parent, Step::ExtraOpenTarget, &e),
        };
        for (m, tree) in p.extra.iter().zip(trees.iter()) {
            let target = match sys::open_beneath(root, &m.target) {
                Ok(fd) => fd,
                Err(e) => report(to_parent, Step::ExtraOpenTarget, &e),
            };
            step!(
                to_parent,
                Step::ExtraMoveMount,
                sys::move_mount_fds(*tree, target)
            );
            sys::close_raw(target);
            sys::close_raw(*tree);
        }
        sys::close_raw(root);
    }
    step!(
        to_parent,
        Step::RunReadOnly,
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
        Step::RootfsReadOnly,
        sys::mount(
            None,
            &p.rootfs,
            None,
            libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | p.ro_flags,
            None
        )
    );
    step!(to_parent, Step::ChdirRootfs, sys::chdir(&p.rootfs));
    step!(to_parent, Step::PivotRoot, sys::pivot_root(&p.dot, &p.dot));
    step!(
        to_parent,
        Step::DetachOldRoot,
        sys::umount2(&p.dot, libc::MNT_DETACH)
    );
    step!(to_parent, Step::DetachOldRoot, sys::chdir(&p.slash));
    let pid = match sys::fork() {
        Ok(pid) => pid,
        Err(e) => report(to_parent, Step::ForkGermline, &e),
    };
    if pid == 0 {
        germline(c);
    }
    let _ = Record::Forked(pid).send(to_parent);
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
fn germline(c: Child<'_>) -> ! {
    let Child {
        p,
        argvp,
        envpp,
        to_parent,
        from_parent,
        ctl,
    } = c;
    let _ = sys::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
    step!(
        to_parent,
        Step::WaitCgroup,
        wait_for(from_parent, Go::Germline)
    );
    let null = match sys::open_raw(&p.devnull, libc::O_RDWR, 0) {
        Ok(fd) => fd,
        Err(e) => report(to_parent, Step::OpenDevNull, &e),
    };
    // Move the descriptors we keep above the standard range first, then lay them out.
    let hi_ctl = sys::dup_above(ctl, 64);
    let hi_status = sys::dup_above(to_parent, 64);
    let (hi_ctl, hi_status) = match (hi_ctl, hi_status) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(e), _) | (_, Err(e)) => report(to_parent, Step::ArrangeFds, &e),
    };
    let to_parent = hi_status;
    if p.copy_stdio {
        // A spawned copy: the socket on stdin and stdout, /dev/null on stderr, and every
        // other descriptor (the status pipe among them) closed at the exec.
        step!(to_parent, Step::ArrangeFds, sys::dup2(hi_ctl, 0));
        step!(to_parent, Step::ArrangeFds, sys::dup2(hi_ctl, 1));
        step!(to_parent, Step::ArrangeFds, sys::dup2(null, 2));
        step!(
            to_parent,
            Step::ArrangeFds,
            sys::close_range(3, libc::CLOSE_RANGE_CLOEXEC)
        );
    } else {
        for std in 0..3 {
            step!(to_parent, Step::ArrangeFds, sys::dup2(null, std));
        }
        step!(to_parent, Step::ArrangeFds, sys::dup2(hi_ctl, 3));
        // Everything above 3 becomes close-on-exec: the status pipe stays open to report a
        // failing execve and closes when the bootstrap starts.
        step!(
            to_parent,
            Step::ArrangeFds,
            sys::close_range(4, libc::CLOSE_RANGE_CLOEXEC)
        );
    }
    step!(to_parent, Step::ChdirWorkdir, sys::chdir(&p.workdir));
    step!(
        to_parent,
        Step::NoNewPrivs,
        sys::prctl(libc::PR_SET_NO_NEW_PRIVS, 1).map(drop)
    );
    if p.copy_stdio {
        // A spawned copy runs the release's entry as root of its user namespace: it keeps no
        // capability there (the germline's bootstrap drops them before its copies run).
        step!(
            to_parent,
            Step::DropCapabilities,
            sys::drop_all_capabilities()
        );
    }
    if p.landlock {
        if let Err((_, e)) = p.ruleset.apply() {
            report(to_parent, Step::Landlock, &e);
        }
    }
    let prog = libc::sock_fprog {
        len: u16::try_from(p.filters.len()).unwrap_or(u16::MAX),
        filter: p.filters.as_ptr().cast_mut(),
    };
    step!(to_parent, Step::Seccomp, sys::seccomp_set_filter(&prog));
    if !p.copy_filters.is_empty() {
        let copy_prog = libc::sock_fprog {
            len: u16::try_from(p.copy_filters.len()).unwrap_or(u16::MAX),
            filter: p.copy_filters.as_ptr().cast_mut(),
        };
        step!(
            to_parent,
            Step::Seccomp,
            sys::seccomp_set_filter(&copy_prog)
        );
    }
    let e = sys::execve(&p.exe, argvp, envpp);
    report(to_parent, Step::Execve, &e)
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

/// Reads one record of the status pipe; `None` at its end (every writer closed it).
fn read_record(fd: RawFd, deadline: Instant) -> Result<Option<Record>> {
    let mut b = [0u8; Record::MAX];
    if read_exact_until(fd, &mut b[..1], deadline)? == 0 {
        return Ok(None);
    }
    match b[0] {
        // A failure report is read as far as it came (a child may die mid-way).
        b'E' => {
            let _ = read_exact_until(fd, &mut b[1..6], deadline);
        }
        b'P' => {
            read_exact_until(fd, &mut b[1..5], deadline)?;
        }
        _ => {}
    }
    Ok(Some(Record::decode(&b)))
}

fn child_error(step: u8, errno: i32) -> Error {
    let step = Step::from_byte(step).map_or("?", Step::text);
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
    let kind = if p.copy_stdio {
        libc::SOCK_STREAM
    } else {
        libc::SOCK_SEQPACKET
    };
    let (ctl, ctl_child) = sys::socketpair(kind).map_err(|e| Error::sys("socketpair", e))?;
    let ctl_inode = socket_inode(&ctl_child, "stat control socket")?;
    let mut argvp: Vec<*const libc::c_char> = p.argv.iter().map(|a| a.as_ptr()).collect();
    argvp.push(std::ptr::null());
    let mut envpp: Vec<*const libc::c_char> = p.envp.iter().map(|a| a.as_ptr()).collect();
    envpp.push(std::ptr::null());
    let keeper_pid = sys::fork().map_err(|e| Error::sys("fork", e))?;
    if keeper_pid == 0 {
        sys::close_raw(status_r.as_raw_fd());
        sys::close_raw(go_w.as_raw_fd());
        sys::close_raw(ctl.as_raw_fd());
        keeper(Child {
            p,
            argvp: &argvp,
            envpp: &envpp,
            to_parent: status_w.as_raw_fd(),
            from_parent: go_r.as_raw_fd(),
            ctl: ctl_child.as_raw_fd(),
        });
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
    match read_record(sr, deadline) {
        Ok(Some(Record::Unshared)) => {}
        Ok(Some(Record::Failed { step, errno })) => return Err(fail(child_error(step, errno))),
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
    sys::write_all_raw(go_w.as_raw_fd(), &[Go::Maps as u8])
        .map_err(|e| fail(Error::sys("signal the keeper", e)))?;
    let pid = match read_record(sr, deadline).map_err(&fail)? {
        Some(Record::Forked(pid)) => pid,
        Some(Record::Failed { step, errno }) => return Err(fail(child_error(step, errno))),
        _ => {
            return Err(fail(Error::Start {
                step: "keeper",
                source: std::io::ErrorKind::UnexpectedEof.into(),
            }))
        }
    };
    if let Err(e) = join_cgroup(pid) {
        return Err(fail(e));
    }
    sys::write_all_raw(go_w.as_raw_fd(), &[Go::Germline as u8])
        .map_err(|e| fail(Error::sys("signal the germline", e)))?;
    drop(go_w);
    // End of file: the germline executed the bootstrap. An 'E' record: a step failed.
    match read_record(sr, deadline).map_err(&fail)? {
        None => {}
        Some(Record::Failed { step, errno }) => return Err(fail(child_error(step, errno))),
        Some(_) => {
            return Err(fail(Error::Start {
                step: "germline",
                source: std::io::ErrorKind::InvalidData.into(),
            }))
        }
    }
    Ok(Started {
        keeper: keeper_pid,
        pid,
        ctl,
        ctl_inode,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn each_step_travels_as_its_own_byte() {
        for (i, step) in Step::ALL.iter().enumerate() {
            let byte = *step as u8;
            assert_eq!(usize::from(byte), i, "{step:?}");
            assert_eq!(Step::from_byte(byte), Some(*step));
        }
        assert_eq!(Step::from_byte(Step::ALL.len() as u8), None);
        assert_eq!(Step::from_byte(u8::MAX), None);
    }

    #[test]
    fn a_failed_step_is_named_in_the_start_error() {
        assert_eq!(
            child_error(Step::Seccomp as u8, libc::EPERM).to_string(),
            format!(
                "the germline failed while starting (seccomp): {}",
                std::io::Error::from_raw_os_error(libc::EPERM)
            )
        );
        assert!(child_error(Step::ExtraMoveMount as u8, libc::EPERM)
            .to_string()
            .contains("(attach an extra mount (move_mount))"));
        // A byte no step has (a garbled record) still makes an error, naming no step.
        assert!(child_error(200, libc::EPERM)
            .to_string()
            .contains("starting (?)"));
    }

    #[test]
    fn status_records_keep_their_bytes_and_read_back() {
        let pid = 4_123_456i32.to_ne_bytes();
        let errno = libc::ENOENT.to_ne_bytes();
        let cases = [
            (Record::Unshared, vec![b'U']),
            (
                Record::Forked(4_123_456),
                vec![b'P', pid[0], pid[1], pid[2], pid[3]],
            ),
            (
                Record::Failed {
                    step: Step::PivotRoot as u8,
                    errno: libc::ENOENT,
                },
                vec![b'E', 13, errno[0], errno[1], errno[2], errno[3]],
            ),
            (Record::Other(b'x'), vec![b'x']),
        ];
        for (record, bytes) in cases {
            let (b, n) = record.encode();
            assert_eq!(&b[..n], &bytes[..], "{record:?}");
            assert_eq!(Record::decode(&b), record);
        }
    }

    #[test]
    fn status_records_travel_through_a_pipe() {
        let (r, w) = sys::pipe().expect("pipe");
        let records = [
            Record::Unshared,
            Record::Forked(77),
            Record::Failed {
                step: Step::Execve as u8,
                errno: libc::ENOEXEC,
            },
        ];
        for rec in records {
            rec.send(w.as_raw_fd()).expect("send");
        }
        drop(w);
        let deadline = Instant::now() + Duration::from_secs(5);
        for rec in records {
            assert_eq!(
                read_record(r.as_raw_fd(), deadline).expect("read"),
                Some(rec)
            );
        }
        assert_eq!(read_record(r.as_raw_fd(), deadline).expect("end"), None);
    }

    fn bm(source: &Path, target: &str) -> BindMount {
        BindMount {
            source: source.to_path_buf(),
            target: target.to_string(),
        }
    }

    fn fixture() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
        let t = tempfile::tempdir().expect("tempdir");
        let root = t.path().join("rootfs");
        std::fs::create_dir_all(root.join("etc/ssl/certs")).expect("mkdir");
        std::fs::write(root.join("etc/ssl/certs/ca.crt"), "roots").expect("write");
        std::fs::create_dir_all(root.join("opt/data")).expect("mkdir");
        std::os::unix::fs::symlink("ssl", root.join("etc/link")).expect("symlink");
        let src = t.path().join("bundle.pem");
        std::fs::write(&src, "bundle").expect("write");
        std::fs::set_permissions(&src, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        (t, root, src)
    }

    fn err(r: Result<ExtraPlan>) -> String {
        match r {
            Err(e) => e.to_string(),
            Ok(p) => panic!("accepted: {p:?}"),
        }
    }

    #[test]
    fn extra_mounts_inside_the_rootfs_and_below_run() {
        let (_t, root, src) = fixture();
        let readable = vec!["/etc".to_string()];
        let plan = plan_extra_mounts(
            &root,
            &[
                bm(&src, "/run/germline/ca.pem"),
                bm(&src, "etc/ssl/certs/ca.crt"),
            ],
            &readable,
        )
        .expect("plan");
        assert_eq!(
            plan.mounts,
            vec![
                (src.clone(), "run/germline/ca.pem".to_string()),
                (src.clone(), "etc/ssl/certs/ca.crt".to_string())
            ],
            "shallower targets first"
        );
        assert_eq!(plan.run_dirs, vec!["run/germline".to_string()]);
        assert_eq!(plan.run_files, vec!["run/germline/ca.pem".to_string()]);
        // The pairs of germline_broker's CopyTrust convert with a leading slash.
        let m = BindMount::from((
            src.clone(),
            std::path::PathBuf::from("etc/ssl/certs/ca.crt"),
        ));
        assert_eq!(m.target, "/etc/ssl/certs/ca.crt");
    }

    #[test]
    fn extra_mounts_refused_with_the_field_named() {
        let (t, root, src) = fixture();
        let readable = vec!["/etc".to_string(), "/opt".to_string()];
        let refuse = |m: BindMount| err(plan_extra_mounts(&root, &[m], &readable));
        let e = refuse(bm(&src, "/etc/../../host/passwd"));
        assert!(e.contains("extra_mounts[0]") && e.contains("`..`"), "{e}");
        let e = refuse(bm(&src, "/etc/link/certs/ca.crt"));
        assert!(e.contains("symbolic link"), "{e}");
        let e = refuse(bm(&src, "/etc/ssl/certs/missing.crt"));
        assert!(e.contains("extra_mounts[0]"), "{e}");
        let e = refuse(bm(&src, "/opt/data"));
        assert!(e.contains("is a file"), "{e}");
        let e = refuse(bm(&src, "/run/items/x"));
        assert!(e.contains("shim's own mount points"), "{e}");
        let e = refuse(bm(&src, "/proc/x"));
        assert!(e.contains("shim's own mount points"), "{e}");
        // Not covered by the Landlock allowlist: copies could never read it.
        let e = err(plan_extra_mounts(
            &root,
            &[bm(&src, "/etc/ssl/certs/ca.crt")],
            &["/opt".to_string()],
        ));
        assert!(e.contains("not covered by readable_paths"), "{e}");
        // A source only its owner can read: the germline's root could not.
        let private = t.path().join("private.pem");
        std::fs::write(&private, "x").expect("write");
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let e = refuse(bm(&private, "/etc/ssl/certs/ca.crt"));
        assert!(e.contains("not readable by others"), "{e}");
        let e = err(plan_extra_mounts(
            &root,
            &[
                bm(&src, "/etc/ssl/certs/ca.crt"),
                bm(&src, "etc/ssl/certs/ca.crt"),
            ],
            &readable,
        ));
        assert!(e.contains("extra_mounts[1]") && e.contains("twice"), "{e}");
    }
}
