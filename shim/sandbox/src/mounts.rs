//! Mounts made from outside in a copy's mount namespace before it gets data: its private procfs
//! (of its own PID namespace), its optional scratch tmpfs and the tmpfs holding its items.
//!
//! A helper forked from the shim enters the copy's PID namespace (so that a procfs it creates
//! shows that namespace), forks once more, creates the procfs with the new mount API while it is
//! still in the host's mount namespace (a procfs mount made inside a user-namespace-owned mount
//! namespace would be refused as "too revealing", the germline having no procfs), enters the
//! copy's mount namespace and attaches it there. Fork-safe code only in the helpers.

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use crate::error::{Error, Result};
use crate::sys;

const FSOPEN_CLOEXEC: usize = 1;
const FSCONFIG_SET_STRING: usize = 1;
const FSCONFIG_CMD_CREATE: usize = 6;
const FSMOUNT_CLOEXEC: usize = 1;
const MOUNT_ATTR_NOSUID: usize = 0x2;
const MOUNT_ATTR_NODEV: usize = 0x4;
const MOUNT_ATTR_NOEXEC: usize = 0x8;
const MOVE_MOUNT_F_EMPTY_PATH: usize = 0x4;

/// One item file: its path inside the copy and its contents (empty outside the copy's view).
#[derive(Debug, Clone)]
pub struct ItemFile {
    pub path: CString,
    pub contents: Vec<u8>,
}

/// The mounts to make in one copy.
#[derive(Debug)]
pub struct CopyMounts {
    pidns: OwnedFd,
    mntns: OwnedFd,
    proc_fs: CString,
    proc_dir: CString,
    run_proc_dir: CString,
    subset: CString,
    pid: CString,
    empty: CString,
    tmpfs: CString,
    scratch: Option<(CString, CString)>,
    items_dir: CString,
    items_opts: CString,
    items: Vec<ItemFile>,
}

fn c(s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::Spec("NUL byte in a mount argument".into()))
}

fn open_ns(pid: i32, kind: &str) -> Result<OwnedFd> {
    let p = c(&format!("/proc/{pid}/ns/{kind}"))?;
    sys::open_raw(&p, libc::O_RDONLY | libc::O_CLOEXEC, 0)
        .map(sys::own)
        .map_err(|e| Error::sys(format!("open /proc/{pid}/ns/{kind}"), e))
}

impl CopyMounts {
    /// Prepares the mounts for the copy whose host pid is `pid`.
    pub fn new(pid: i32, scratch_bytes: Option<u64>, items: Vec<ItemFile>) -> Result<CopyMounts> {
        let total: usize = items.iter().map(|i| i.contents.len()).sum();
        Ok(CopyMounts {
            pidns: open_ns(pid, "pid")?,
            mntns: open_ns(pid, "mnt")?,
            proc_fs: c("proc")?,
            proc_dir: c("/proc")?,
            run_proc_dir: c("/run/proc")?,
            subset: c("subset")?,
            pid: c("pid")?,
            empty: c("")?,
            tmpfs: c("tmpfs")?,
            scratch: match scratch_bytes {
                Some(n) => Some((c("/run/scratch")?, c(&format!("size={n},mode=1777"))?)),
                None => None,
            },
            items_dir: c("/run/items")?,
            items_opts: c(&format!("size={},mode=755", total + (64 << 10)))?,
            items,
        })
    }

    /// Makes the mounts; returns once they are in place.
    pub fn apply(&self) -> Result<()> {
        let (r, w) = sys::pipe().map_err(|e| Error::sys("pipe", e))?;
        let pid = sys::fork().map_err(|e| Error::sys("fork", e))?;
        if pid == 0 {
            sys::close_raw(r.as_raw_fd());
            self.helper(w.as_raw_fd());
        }
        drop(w);
        let mut rec = [0u8; 6];
        let n = sys::read_raw(r.as_raw_fd(), &mut rec)
            .map_err(|e| Error::sys("read helper status", e))?;
        let _ = sys::waitpid(pid, 0);
        if n == 6 && rec[0] == b'E' {
            let errno = i32::from_ne_bytes([rec[2], rec[3], rec[4], rec[5]]);
            let step = [
                "setns(pid)",
                "fork",
                "fsopen(proc)",
                "fsconfig",
                "fsmount",
                "setns(mnt)",
                "move_mount /proc",
                "mount scratch",
                "mount items",
                "write item",
                "remount items",
            ]
            .get(usize::from(rec[1]))
            .copied()
            .unwrap_or("?");
            return Err(Error::sys(
                format!("copy mounts: {step}"),
                std::io::Error::from_raw_os_error(errno),
            ));
        }
        if n != 1 || rec[0] != b'K' {
            return Err(Error::sys(
                "copy mounts",
                std::io::ErrorKind::UnexpectedEof.into(),
            ));
        }
        Ok(())
    }

    fn helper(&self, out: RawFd) -> ! {
        let fail = |step: u8, e: std::io::Error| -> ! {
            let mut rec = [b'E', step, 0, 0, 0, 0];
            rec[2..6].copy_from_slice(&e.raw_os_error().unwrap_or(0).to_ne_bytes());
            let _ = sys::write_all_raw(out, &rec);
            sys::exit_now(1)
        };
        if let Err(e) = sys::setns(self.pidns.as_raw_fd(), libc::CLONE_NEWPID) {
            fail(0, e);
        }
        let pid = match sys::fork() {
            Ok(p) => p,
            Err(e) => fail(1, e),
        };
        if pid != 0 {
            let code = match sys::waitpid(pid, 0) {
                Ok((_, st)) if libc::WIFEXITED(st) => libc::WEXITSTATUS(st),
                _ => 1,
            };
            sys::exit_now(code);
        }
        // Now in the copy's PID namespace, still in the host's mount namespace.
        // Two procfs instances of the copy's PID namespace: one on /proc (where Landlock keeps
        // the copy from reading it) and one on /run/proc, which the copy can read.
        let mut mnts = [0usize; 2];
        for slot in mnts.iter_mut() {
            let fs = match sys::syscall5(
                libc::SYS_fsopen,
                self.proc_fs.as_ptr() as usize,
                FSOPEN_CLOEXEC,
                0,
                0,
                0,
            ) {
                Ok(fd) => fd as usize,
                Err(e) => fail(2, e),
            };
            // subset=pid: only the process directories, no /proc/sys, kcore and friends.
            if let Err(e) = sys::syscall5(
                libc::SYS_fsconfig,
                fs,
                FSCONFIG_SET_STRING,
                self.subset.as_ptr() as usize,
                self.pid.as_ptr() as usize,
                0,
            ) {
                fail(3, e);
            }
            if let Err(e) = sys::syscall5(libc::SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, 0, 0, 0) {
                fail(3, e);
            }
            *slot = match sys::syscall5(
                libc::SYS_fsmount,
                fs,
                FSMOUNT_CLOEXEC,
                MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
                0,
                0,
            ) {
                Ok(fd) => fd as usize,
                Err(e) => fail(4, e),
            };
        }
        if let Err(e) = sys::setns(self.mntns.as_raw_fd(), libc::CLONE_NEWNS) {
            fail(5, e);
        }
        for (mnt, dir) in mnts.into_iter().zip([&self.proc_dir, &self.run_proc_dir]) {
            if let Err(e) = sys::syscall5(
                libc::SYS_move_mount,
                mnt,
                self.empty.as_ptr() as usize,
                libc::AT_FDCWD as isize as usize,
                dir.as_ptr() as usize,
                MOVE_MOUNT_F_EMPTY_PATH,
            ) {
                fail(6, e);
            }
        }
        let flags = libc::MS_NOSUID | libc::MS_NODEV;
        if let Some((dir, opts)) = &self.scratch {
            if let Err(e) = sys::mount(Some(&self.tmpfs), dir, Some(&self.tmpfs), flags, Some(opts))
            {
                fail(7, e);
            }
        }
        if let Err(e) = sys::mount(
            Some(&self.tmpfs),
            &self.items_dir,
            Some(&self.tmpfs),
            flags | libc::MS_NOEXEC,
            Some(&self.items_opts),
        ) {
            fail(8, e);
        }
        for item in &self.items {
            match sys::open_raw(
                &item.path,
                libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_CLOEXEC,
                0o444,
            ) {
                Ok(fd) => {
                    let r = sys::write_all_raw(fd, &item.contents);
                    sys::close_raw(fd);
                    if let Err(e) = r {
                        fail(9, e);
                    }
                }
                Err(e) => fail(9, e),
            }
        }
        if let Err(e) = sys::mount(
            None,
            &self.items_dir,
            None,
            libc::MS_REMOUNT | libc::MS_RDONLY | flags | libc::MS_NOEXEC,
            None,
        ) {
            fail(10, e);
        }
        let _ = sys::write_all_raw(out, b"K");
        sys::exit_now(0)
    }
}
