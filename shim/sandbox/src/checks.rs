//! The checks made from outside before every fork (G1-G3) and on every copy before it gets data
//! (issue 4, item 3; paper A2, O1, O2). Each check returns the list of reasons it failed.
//!
//! Both are split in two: [`snapshot`] reads the germline or a copy from outside, [`rules`]
//! (G1-G3) and [`copy_rules`] (a copy) judge the snapshot without I/O.

pub mod copy_rules;
#[cfg(test)]
mod fixtures;
pub mod rules;
pub mod snapshot;
pub mod spawn_rules;

use crate::procfs::{self, Fd, Mount, Namespaces};
use crate::seccomp::Program;
use snapshot::CopySnapshot;

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

/// The checks on a copy before it gets any data: reads the process `x.pid` from outside
/// ([`CopySnapshot`]), then judges it ([`copy_rules::copy`]). Returns the copy's namespaces and
/// the reasons for refusal (empty: the copy may receive data).
pub fn copy(x: &CopyExpect<'_>) -> (Option<Namespaces>, Vec<String>) {
    let snap = CopySnapshot::read(x.pid, x.role);
    let bad = copy_rules::copy(x, &snap);
    (snap.namespaces.ok(), bad)
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
