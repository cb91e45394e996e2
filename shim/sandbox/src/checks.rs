//! The checks made from outside before every fork (G1-G3) and on every copy before it gets data
//! (issue 4, item 3; paper A2, O1, O2). Each check returns the list of reasons it failed.
//!
//! G1-G3 are split in two: [`snapshot`] reads the germline from outside, [`rules`] judges the
//! snapshot without I/O.

pub mod rules;
pub mod snapshot;

use crate::procfs::{self, Fd, Mount, Namespaces};
use crate::seccomp::Program;
use rules::status_field;

/// Device number of /dev/null (1:3).
const DEV_NULL: (u32, u32) = (1, 3);

/// What the shim knows of a germline independently of anything the germline says.
#[derive(Debug, Clone)]
pub struct GermlineFacts {
    pub pid: i32,
    pub ctl_inode: u64,
    /// Mount id of the read-only rootfs in the germline's mount namespace, and its device.
    pub rootfs_mnt_id: u64,
    pub rootfs_dev: (u32, u32),
    /// Mount ids of the /dev/null bind mount(s).
    pub devnull_mnt_ids: Vec<u64>,
    /// Mount ids and devices of the read-only extra mounts (`LaunchSpec::extra_mounts`): files
    /// the shim chose, as public as the rootfs, so G2 accepts descriptors on them too.
    pub extra_mounts: Vec<(u64, (u32, u32))>,
}

impl GermlineFacts {
    /// Reads the germline's mounts once, right after it started (before release code could
    /// change anything it cannot: it has no right to mount). `extra_targets`: where the extra
    /// mounts sit (absolute paths inside the germline).
    pub fn read(
        pid: i32,
        ctl_inode: u64,
        extra_targets: &[String],
    ) -> crate::Result<GermlineFacts> {
        GermlineFacts::from_mounts(pid, ctl_inode, &procfs::mountinfo(pid)?, extra_targets)
    }

    /// The facts from the germline's mounts as `/proc/PID/mountinfo` lists them.
    pub fn from_mounts(
        pid: i32,
        ctl_inode: u64,
        mounts: &[Mount],
        extra_targets: &[String],
    ) -> crate::Result<GermlineFacts> {
        let root = mounts
            .iter()
            .rev()
            .find(|m| m.mount_point == "/")
            .ok_or_else(|| crate::Error::Refused("the germline has no root mount".into()))?;
        Ok(GermlineFacts {
            pid,
            ctl_inode,
            rootfs_mnt_id: root.id,
            rootfs_dev: root.dev,
            devnull_mnt_ids: mounts
                .iter()
                .filter(|m| m.mount_point == "/dev/null")
                .map(|m| m.id)
                .collect(),
            extra_mounts: mounts
                .iter()
                .filter(|m| extra_targets.contains(&m.mount_point))
                .map(|m| (m.id, m.dev))
                .collect(),
        })
    }

    pub(crate) fn is_devnull(&self, f: &Fd) -> bool {
        let is_chr = f.mode & libc::S_IFMT == libc::S_IFCHR;
        is_chr
            && procfs::major_minor(f.rdev) == DEV_NULL
            && f.mnt_id.is_some_and(|m| self.devnull_mnt_ids.contains(&m))
    }

    pub(crate) fn is_rootfs_file(&self, f: &Fd) -> bool {
        let kind = f.mode & libc::S_IFMT;
        let dev = procfs::major_minor(f.dev);
        (kind == libc::S_IFREG || kind == libc::S_IFDIR)
            && ((f.mnt_id == Some(self.rootfs_mnt_id) && dev == self.rootfs_dev)
                || self
                    .extra_mounts
                    .iter()
                    .any(|(id, d)| f.mnt_id == Some(*id) && dev == *d))
    }
}

/// Which process of a copy a check is on (docs/sandbox.md, "The tool is PID 2").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The copy's only process: PID 1 of its PID namespace, holding the copy socket.
    Sole,
    /// PID 1 of the copy's namespace under a reaper: holds no descriptor but `/dev/null`.
    Reaper,
    /// The tool under the reaper `parent` (host pid): PID 2 of the reaper's namespaces, its
    /// child, holding the copy socket.
    Tool { parent: i32 },
}

/// What the shim expects of a copy.
#[derive(Debug)]
pub struct CopyExpect<'a> {
    pub pid: i32,
    pub role: Role,
    pub socket_inode: u64,
    pub germline: &'a GermlineFacts,
    pub germline_ns: &'a Namespaces,
    pub others: &'a [Namespaces],
    pub cgroup_rel: &'a str,
    pub filters: &'a [Program],
}

impl Role {
    fn who(&self) -> &'static str {
        match self {
            Role::Sole => "the copy",
            Role::Reaper => "the copy's reaper",
            Role::Tool { .. } => "the copy's tool",
        }
    }
}

/// The checks on a copy before it gets any data. Returns the copy's namespaces and the reasons
/// for refusal (empty: the copy may receive data).
pub fn copy(x: &CopyExpect<'_>) -> (Option<Namespaces>, Vec<String>) {
    let mut bad = Vec::new();
    let pid = x.pid;
    match procfs::status(pid) {
        Ok(st) => {
            let f = |k: &str| status_field(&st, k);
            if f("Threads") != "1" {
                bad.push(format!("the copy has {} threads", f("Threads")));
            }
            let want = if matches!(x.role, Role::Tool { .. }) {
                "2"
            } else {
                "1"
            };
            if f("NSpid").split_whitespace().last() != Some(want) {
                bad.push(format!(
                    "{} is not PID {want} of its PID namespace (NSpid {})",
                    x.role.who(),
                    f("NSpid")
                ));
            }
            if let Role::Tool { parent } = x.role {
                if f("PPid") != parent.to_string() {
                    bad.push(format!(
                        "the copy's tool is a child of {}, not of the copy's reaper {parent}",
                        f("PPid")
                    ));
                }
            }
            for cap in ["CapEff", "CapPrm", "CapBnd", "CapInh", "CapAmb"] {
                if !f(cap).trim_start_matches('0').is_empty() {
                    bad.push(format!("{cap} is {}, not zero", f(cap)));
                }
            }
            if f("NoNewPrivs") != "1" {
                bad.push(format!("NoNewPrivs is {:?}", f("NoNewPrivs")));
            }
            if f("Seccomp") != "2" {
                bad.push(format!("Seccomp mode is {:?}", f("Seccomp")));
            }
        }
        Err(e) => bad.push(format!("cannot read the copy's status: {e}")),
    }
    match procfs::fds(pid) {
        Ok(fds) => {
            for f in &fds {
                let sock = f.ino == x.socket_inode && f.mode & libc::S_IFMT == libc::S_IFSOCK;
                if !(sock || x.germline.is_devnull(f)) {
                    bad.push(format!(
                        "descriptor {} is {} (only /dev/null and the copy socket may be open)",
                        f.num, f.target
                    ));
                }
            }
            let holds = fds.iter().any(|f| f.ino == x.socket_inode);
            match x.role {
                // The tool's death must close the socket, or the shim would wait for the
                // deadline instead of seeing the copy crash.
                Role::Reaper if holds => {
                    bad.push("the copy's reaper still holds the copy socket".into())
                }
                Role::Sole | Role::Tool { .. } if !holds => {
                    bad.push("the copy socket is not open in the copy".into())
                }
                _ => {}
            }
        }
        Err(e) => bad.push(format!("cannot list the copy's descriptors: {e}")),
    }
    bad.extend(rules::shared_mappings(
        &procfs::maps(pid).map_err(Into::into),
        x.germline.rootfs_dev,
        "mapping",
    ));
    let ns = match Namespaces::of(pid) {
        Ok(ns) => {
            if let Role::Tool { parent } = x.role {
                match Namespaces::of(parent) {
                    Ok(p) if p == ns => {}
                    Ok(_) => bad.push("the copy's tool is not in its reaper's namespaces".into()),
                    Err(e) => bad.push(format!("cannot read the reaper's namespaces: {e}")),
                }
            }
            let shared = ns.shared_with(x.germline_ns);
            if !shared.is_empty() {
                bad.push(format!(
                    "the copy shares its {} namespace(s) with the germline",
                    shared.join(", ")
                ));
            }
            for o in x.others {
                let shared = ns.shared_with(o);
                if !shared.is_empty() {
                    bad.push(format!(
                        "the copy shares its {} namespace(s) with a live copy",
                        shared.join(", ")
                    ));
                }
            }
            Some(ns)
        }
        Err(e) => {
            bad.push(format!("cannot read the copy's namespaces: {e}"));
            None
        }
    };
    match procfs::cgroups(pid) {
        Ok(cg) => {
            let want = format!("/{}", x.cgroup_rel);
            for (ctrl, path) in &cg {
                let relevant = ctrl.is_empty()
                    && crate::cgroup::version() == crate::cgroup::Version::V2
                    || ["pids", "memory", "freezer", "cpu"]
                        .iter()
                        .any(|c| ctrl.split(',').any(|x| x == *c));
                if relevant && path != &want {
                    bad.push(format!(
                        "the copy's {ctrl:?} cgroup is {path}, not its own {want}"
                    ));
                }
            }
        }
        Err(e) => bad.push(format!("cannot read the copy's cgroups: {e}")),
    }
    match read_seccomp_filters(pid) {
        Ok(got) => {
            if got.as_slice() != x.filters {
                let differing: Vec<String> = (0..got.len().max(x.filters.len()))
                    .filter(|i| got.get(*i) != x.filters.get(*i))
                    .map(|i| match i {
                        0 => "layer 0 (the germline's)".to_string(),
                        1 => "layer 1 (the copy's)".to_string(),
                        i => format!("layer {i}"),
                    })
                    .collect();
                bad.push(format!(
                    "the copy's seccomp filters ({} programs of {:?} instructions) differ from the expected ones ({} programs of {:?}): {}",
                    got.len(),
                    got.iter().map(|p| p.0.len()).collect::<Vec<_>>(),
                    x.filters.len(),
                    x.filters.iter().map(|p| p.0.len()).collect::<Vec<_>>(),
                    differing.join(", ")
                ));
            }
        }
        Err(e) => bad.push(format!("cannot read the copy's seccomp filters: {e}")),
    }
    (ns, bad)
}

/// Reads every seccomp program of `pid` in index order (oldest first on this kernel) with `PTRACE_SECCOMP_GET_FILTER`.
pub fn read_seccomp_filters(pid: i32) -> std::io::Result<Vec<Program>> {
    use crate::sys;
    const PTRACE_SECCOMP_GET_FILTER: libc::c_uint = 0x420c;
    sys::ptrace(libc::PTRACE_SEIZE, pid, 0, 0)?;
    let result = (|| {
        sys::ptrace(libc::PTRACE_INTERRUPT, pid, 0, 0)?;
        sys::waitpid(pid, libc::__WALL)?;
        let mut out = Vec::new();
        for index in 0..16usize {
            let n = match sys::ptrace(PTRACE_SECCOMP_GET_FILTER, pid, index, 0) {
                Ok(n) => usize::try_from(n).unwrap_or(0),
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => break,
                Err(e) => return Err(e),
            };
            let mut buf = vec![0u8; n * 8];
            sys::ptrace(
                PTRACE_SECCOMP_GET_FILTER,
                pid,
                index,
                buf.as_mut_ptr() as usize,
            )?;
            out.push(Program::from_bytes(&buf));
        }
        Ok(out)
    })();
    let _ = sys::ptrace(libc::PTRACE_DETACH, pid, 0, 0);
    result
}
