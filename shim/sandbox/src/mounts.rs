//! Mounts made from outside in a copy's mount namespace before it gets data: its private procfs
//! (of its own PID namespace), its optional scratch tmpfs and the tmpfs holding its items.
//!
//! A helper forked from the shim enters the copy's PID namespace (so that a procfs it creates
//! shows that namespace), forks once more, creates the procfs with the new mount API while it is
//! still in the host's mount namespace (a procfs mount made inside a user-namespace-owned mount
//! namespace would be refused as "too revealing", the germline having no procfs), enters the
//! copy's mount namespace and attaches it there. Fork-safe code only in the helpers. The binds
//! alone that a pool copy gets at its call need neither procfs nor a helper: the calling
//! thread joins the copy's mount namespace for them and comes back ([`CopyMounts::apply`]).

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use crate::error::{Error, Result};
use crate::sys;
use crate::tree::TreeEntry;

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
    /// The copy's PID namespace (procfs needs it; binds alone do not open it).
    pidns: Option<OwnedFd>,
    mntns: OwnedFd,
    proc_fs: CString,
    proc_dir: CString,
    run_proc_dir: CString,
    subset: CString,
    pid: CString,
    empty: CString,
    tmpfs: CString,
    scratch: Option<(CString, CString)>,
    /// The copy's state tmpfs (`/run/state`, writable by the copy: [`StateDir`]).
    state: Option<(CString, CString)>,
    items_dir: CString,
    items_opts: CString,
    items: Vec<ItemFile>,
    /// Item store slots to bind at their mount points: (slot directory, target relative to
    /// the copy's root, read-write: a slot holding a writable directory item, issue 27).
    binds: Vec<(RawFd, CString, bool)>,
    root: CString,
    bind_attr: sys::MountAttr,
    /// The same, without `RDONLY`, for a slot holding a writable directory item.
    bind_attr_rw: sys::MountAttr,
    /// Make the procfs, scratch and items mounts (else only the binds).
    base: bool,
    /// Write `items` into the items tmpfs and make it read-only (else it stays empty and
    /// writable by the shim alone: [`CopyMounts::base_only`]).
    fill: bool,
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
        CopyMounts::with_pidns(pid, scratch_bytes, items, true)
    }

    fn with_pidns(
        pid: i32,
        scratch_bytes: Option<u64>,
        items: Vec<ItemFile>,
        pidns: bool,
    ) -> Result<CopyMounts> {
        let total: usize = items.iter().map(|i| i.contents.len()).sum();
        Ok(CopyMounts {
            pidns: if pidns {
                Some(open_ns(pid, "pid")?)
            } else {
                None
            },
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
            state: None,
            items_dir: c("/run/items")?,
            items_opts: c(&format!("size={},mode=755", total + (64 << 10)))?,
            items,
            binds: Vec::new(),
            root: c("/")?,
            // MOUNT_ATTR_RDONLY | NOSUID | NODEV | NOEXEC, private propagation.
            bind_attr: [0x1 | 0x2 | 0x4 | 0x8, 0, libc::MS_PRIVATE, 0],
            // NOSUID | NODEV | NOEXEC, private; RDONLY cleared.
            bind_attr_rw: [0x2 | 0x4 | 0x8, 0x1, libc::MS_PRIVATE, 0],
            base: true,
            fill: true,
        })
    }

    /// The mounts that need no data (procfs, scratch, an empty items tmpfs of at most
    /// `items_bytes`), made before the copy's call: the shim writes the items later through
    /// [`ItemsDir`]. The tmpfs is owned by the host's root (unmapped in the copy's user
    /// namespace) with mode 0755, so the copy, which has no capabilities, cannot write to it
    /// even without its Landlock layer.
    pub fn base_only(pid: i32, scratch_bytes: Option<u64>, items_bytes: u64) -> Result<CopyMounts> {
        let mut m = CopyMounts::new(pid, scratch_bytes, Vec::new())?;
        m.items_opts = c(&format!("size={items_bytes},mode=755"))?;
        m.fill = false;
        Ok(m)
    }

    /// Only the binds of item store slots ([`CopyMounts::with_binds`]), for a copy whose
    /// [`CopyMounts::base_only`] mounts are made.
    pub fn binds_only(pid: i32) -> Result<CopyMounts> {
        let mut m = CopyMounts::with_pidns(pid, None, Vec::new(), false)?;
        m.base = false;
        m.fill = false;
        Ok(m)
    }

    /// Also mounts a tmpfs of `bytes` (none for 0) at `/run/state`, empty and writable by the
    /// copy (mode 0777: the copy's users are unprivileged on the host), over the germline's
    /// read-only initial state. The shim fills it through [`StateDir`] before the call.
    pub fn with_state(mut self, bytes: u64) -> Result<CopyMounts> {
        self.state = match bytes {
            0 => None,
            n => Some((
                c(crate::spec::STATE_DIR)?,
                c(&format!("size={n},mode=777"))?,
            )),
        };
        Ok(self)
    }

    /// Also binds item store slots (see [`ItemStore`]) at absolute mount points of the copy,
    /// read-only unless the flag says read-write. The slot descriptors must stay open until
    /// [`CopyMounts::apply`] returns.
    pub fn with_binds(mut self, binds: Vec<(RawFd, String, bool)>) -> Result<CopyMounts> {
        if binds.len() > ITEM_SLOTS {
            return Err(Error::Spec(format!("more than {ITEM_SLOTS} item mounts")));
        }
        self.binds = binds
            .into_iter()
            .map(|(fd, t, rw)| Ok((fd, c(t.trim_start_matches('/'))?, rw)))
            .collect::<Result<_>>()?;
        Ok(self)
    }

    /// Makes the mounts; returns once they are in place.
    pub fn apply(&self) -> Result<()> {
        if !self.base && !self.fill {
            return self.apply_binds();
        }
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
                "clone an item directory (open_tree)",
                "make an item directory read-only",
                "open an item mount point",
                "attach an item directory (move_mount)",
                "mount state",
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

    /// Binds alone (a pool copy's items at their own paths at its call, issue 27's directory
    /// items), made by the calling thread itself, without a forked helper (branch git41:
    /// forking the shim, tens of MB of address space, then waiting for the helper to be
    /// scheduled took 0.6-4 ms of a loaded call's path; a thread of its own waited as long to
    /// be scheduled; the system calls take ~30 us). The slots are cloned while the thread is
    /// in the host's mount namespace, where the shim's detached store lives; then the thread
    /// stops sharing its filesystem context with the rest of the shim (`unshare(CLONE_FS)`,
    /// which joining a mount namespace requires: from then on this thread keeps its own
    /// working directory, root and umask), joins the copy's mount namespace, attaches the
    /// clones there and returns to its own namespace, root and working directory.
    /// Namespaces and the filesystem context are per thread: no other thread of the shim
    /// resolves anything in the copy's namespace meanwhile. If the way back fails the process
    /// aborts: nothing of the shim may go on resolving paths in a copy's namespace.
    fn apply_binds(&self) -> Result<()> {
        let failed = |step: &str, e: std::io::Error| Error::sys(format!("copy mounts: {step}"), e);
        let mut trees = Vec::with_capacity(self.binds.len());
        for (slot, _, rw) in &self.binds {
            let tree = sys::open_tree_clone_fd(*slot)
                .map(sys::own)
                .map_err(|e| failed("clone an item directory (open_tree)", e))?;
            let attr = if *rw {
                &self.bind_attr_rw
            } else {
                &self.bind_attr
            };
            sys::mount_setattr_fd(tree.as_raw_fd(), attr)
                .map_err(|e| failed("make an item directory read-only", e))?;
            trees.push(tree);
        }
        let dir = |p: &std::ffi::CStr| {
            sys::open_raw(p, libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC, 0).map(sys::own)
        };
        let home = sys::open_raw(
            c"/proc/thread-self/ns/mnt",
            libc::O_RDONLY | libc::O_CLOEXEC,
            0,
        )
        .map(sys::own)
        .map_err(|e| failed("open this thread's mount namespace", e))?;
        let root = dir(c"/").map_err(|e| failed("open this thread's root", e))?;
        let cwd = dir(c".").map_err(|e| failed("open this thread's working directory", e))?;
        // Private to this thread from now on (a thread this one started since shares it
        // again: unshared each time).
        sys::unshare(libc::CLONE_FS).map_err(|e| failed("unshare(CLONE_FS)", e))?;
        sys::setns(self.mntns.as_raw_fd(), libc::CLONE_NEWNS)
            .map_err(|e| failed("setns(mnt)", e))?;
        let attached = self.attach(&trees);
        let back = sys::setns(home.as_raw_fd(), libc::CLONE_NEWNS)
            .and_then(|()| sys::fchdir(root.as_raw_fd()))
            .and_then(|()| sys::chroot(c"."))
            .and_then(|()| sys::fchdir(cwd.as_raw_fd()));
        if let Err(e) = back {
            eprintln!(
                "germline: cannot leave a copy's mount namespace ({e}); aborting rather than \
                 resolving paths in it"
            );
            std::process::abort();
        }
        attached
    }

    /// Attaches the cloned slots `trees` at their mount points; run only by
    /// [`CopyMounts::apply_binds`] while its thread is in the copy's mount namespace.
    fn attach(&self, trees: &[OwnedFd]) -> Result<()> {
        let failed = |step: &str, e: std::io::Error| Error::sys(format!("copy mounts: {step}"), e);
        // setns put this thread's root at the copy's root. Mount points are resolved strictly
        // below it without following any symbolic link.
        let root = sys::open_raw(
            &self.root,
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            0,
        )
        .map(sys::own)
        .map_err(|e| failed("open an item mount point", e))?;
        for ((_, target, _), tree) in self.binds.iter().zip(trees) {
            let t = sys::open_beneath(root.as_raw_fd(), target)
                .map(sys::own)
                .map_err(|e| failed("open an item mount point", e))?;
            sys::move_mount_fds(tree.as_raw_fd(), t.as_raw_fd())
                .map_err(|e| failed("attach an item directory (move_mount)", e))?;
        }
        Ok(())
    }

    /// In the helper: joins the copy's PID namespace (the helper's children are in it) and
    /// goes on in a child, the parent exiting with the child's status; else the failed step.
    fn enter_pidns(&self) -> std::result::Result<(), (u8, std::io::Error)> {
        let Some(pidns) = &self.pidns else {
            return Err((0, std::io::Error::from_raw_os_error(libc::EBADF)));
        };
        sys::setns(pidns.as_raw_fd(), libc::CLONE_NEWPID).map_err(|e| (0, e))?;
        let pid = sys::fork().map_err(|e| (1, e))?;
        if pid != 0 {
            let code = match sys::waitpid(pid, 0) {
                Ok((_, st)) if libc::WIFEXITED(st) => libc::WEXITSTATUS(st),
                _ => 1,
            };
            sys::exit_now(code);
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
        // Only procfs needs the copy's PID namespace (binds alone are made without a helper:
        // `apply_binds`).
        if self.base {
            if let Err((step, e)) = self.enter_pidns() {
                fail(step, e);
            }
        }
        // Now in the copy's PID namespace if procfs is to be mounted, still in the host's
        // mount namespace.
        // Two procfs instances of the copy's PID namespace: one on /proc (where Landlock keeps
        // the copy from reading it) and one on /run/proc, which the copy can read.
        let mut mnts = [0usize; 2];
        for slot in mnts.iter_mut().filter(|_| self.base) {
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
        // Item directories are cloned while still in the host's mount namespace, where the
        // shim's detached store lives; the clones keep the inodes the germline's rules name.
        let mut trees: [RawFd; ITEM_SLOTS] = [-1; ITEM_SLOTS];
        for ((slot, _, rw), tree) in self.binds.iter().zip(trees.iter_mut()) {
            match sys::open_tree_clone_fd(*slot) {
                Ok(fd) => *tree = fd,
                Err(e) => fail(11, e),
            }
            let attr = if *rw {
                &self.bind_attr_rw
            } else {
                &self.bind_attr
            };
            if let Err(e) = sys::mount_setattr_fd(*tree, attr) {
                fail(12, e);
            }
        }
        if let Err(e) = sys::setns(self.mntns.as_raw_fd(), libc::CLONE_NEWNS) {
            fail(5, e);
        }
        for (mnt, dir) in mnts
            .into_iter()
            .zip([&self.proc_dir, &self.run_proc_dir])
            .filter(|_| self.base)
        {
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
        if let Some((dir, opts)) = self.scratch.as_ref().filter(|_| self.base) {
            if let Err(e) = sys::mount(Some(&self.tmpfs), dir, Some(&self.tmpfs), flags, Some(opts))
            {
                fail(7, e);
            }
        }
        if let Some((dir, opts)) = self.state.as_ref().filter(|_| self.base) {
            if let Err(e) = sys::mount(Some(&self.tmpfs), dir, Some(&self.tmpfs), flags, Some(opts))
            {
                fail(15, e);
            }
        }
        if self.base {
            if let Err(e) = sys::mount(
                Some(&self.tmpfs),
                &self.items_dir,
                Some(&self.tmpfs),
                flags | libc::MS_NOEXEC,
                Some(&self.items_opts),
            ) {
                fail(8, e);
            }
        }
        for item in self.items.iter().filter(|_| self.fill) {
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
        if self.fill {
            if let Err(e) = sys::mount(
                None,
                &self.items_dir,
                None,
                libc::MS_REMOUNT | libc::MS_RDONLY | flags | libc::MS_NOEXEC,
                None,
            ) {
                fail(10, e);
            }
        }
        if !self.binds.is_empty() {
            // setns put our root at the copy's root. Mount points are resolved strictly below
            // it without following any symbolic link.
            let root = match sys::open_raw(
                &self.root,
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
                0,
            ) {
                Ok(fd) => fd,
                Err(e) => fail(13, e),
            };
            for ((_, target, _), tree) in self.binds.iter().zip(trees.iter()) {
                let t = match sys::open_beneath(root, target) {
                    Ok(fd) => fd,
                    Err(e) => fail(13, e),
                };
                if let Err(e) = sys::move_mount_fds(*tree, t) {
                    fail(14, e);
                }
                sys::close_raw(t);
                sys::close_raw(*tree);
            }
            sys::close_raw(root);
        }
        let _ = sys::write_all_raw(out, b"K");
        sys::exit_now(0)
    }
}

/// A copy's `/run/items` tmpfs, opened from the host after [`CopyMounts::base_only`]: the
/// shim writes the call's items into it without entering the copy's namespaces.
#[derive(Debug)]
pub struct ItemsDir(OwnedFd);

impl ItemsDir {
    /// Opens `/run/items` of the copy `pid` (its root, through procfs) and checks that it is a
    /// tmpfs and empty.
    pub fn open(pid: i32) -> Result<ItemsDir> {
        let path = c(&format!("/proc/{pid}/root/run/items"))?;
        let fd = sys::open_raw(
            &path,
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            0,
        )
        .map(sys::own)
        .map_err(|e| Error::sys("open the copy's /run/items", e))?;
        let f_type =
            sys::fs_type(fd.as_raw_fd()).map_err(|e| Error::sys("fstatfs /run/items", e))?;
        if f_type != libc::TMPFS_MAGIC {
            return Err(Error::Refused(format!(
                "the copy's /run/items is not the tmpfs the shim mounted (f_type {f_type:#x})"
            )));
        }
        let entries = std::fs::read_dir(format!("/proc/self/fd/{}", fd.as_raw_fd()))
            .map_err(|e| Error::sys("list the copy's /run/items", e))?
            .count();
        if entries != 0 {
            return Err(Error::Refused(format!(
                "the copy's /run/items holds {entries} entries before its items"
            )));
        }
        Ok(ItemsDir(fd))
    }

    /// Writes one item as a new read-only file `name` (never replacing or following anything).
    pub fn write(&self, name: &str, contents: &[u8]) -> Result<()> {
        let fd = sys::create_new_at(self.0.as_raw_fd(), &c(name)?, 0o444)
            .map_err(|e| Error::sys(format!("create item {name:?}"), e))?;
        sys::write_all_raw(fd.as_raw_fd(), contents)
            .map_err(|e| Error::sys(format!("write item {name:?}"), e))
    }
}

/// How many directories the item store holds: each copy may use up to this many mount points
/// for items delivered at their own paths (copies run one at a time).
pub const ITEM_SLOTS: usize = 8;

/// The shim's private store for items delivered at their own paths (`/home/alice/invoice.pdf`).
///
/// Landlock ignores a rule on a directory once a mount hides it, and every rule of the
/// germline's layer must exist before any release code runs, long before a copy's items are
/// known. So the shim makes, before the germline starts, one tmpfs that is mounted nowhere (a
/// detached mount only the shim holds) with [`ITEM_SLOTS`] directories, and the germline's
/// Landlock layer gets one read rule on each directory, by descriptor. A copy's items are
/// written into a free directory, and a bind mount of that directory (same inodes, so the rule
/// applies) is attached in that copy's mount namespace only. The directory is emptied and freed
/// once the copy is dead.
#[derive(Debug)]
pub struct ItemStore {
    _mnt: OwnedFd,
    slots: Vec<OwnedFd>,
    busy: std::sync::Mutex<Vec<bool>>,
    /// The last directory view written ahead, between calls ([`ItemStore::write_ahead`]).
    ahead: std::sync::Mutex<Ahead>,
}

/// What identifies a slot's tree: its mount point, whether its files keep their write bit,
/// and each entry with its path below the mount point, contents, mode and modification time.
/// Two equal keys make byte-for-byte the same tree.
pub(crate) type TreeKey = (String, bool, Vec<(String, TreeEntry)>);

/// The tree written ahead (branch git41): the view a copy got last, written again into a
/// free slot between calls, for the next copy whose view is exactly the same.
#[derive(Debug, Default)]
struct Ahead {
    /// Only a store whose owner writes ahead between calls keeps a view ([`ItemStore::set_ahead`]).
    enabled: bool,
    /// The view to write ahead next.
    want: Option<TreeKey>,
    /// A slot written with this view, held by the store (busy) and never bound anywhere yet.
    ready: Option<(TreeKey, usize)>,
    /// How many copies got a tree written ahead.
    taken: u64,
}

fn empty_dir(dir: &std::path::Path) -> std::io::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        if e.file_type()?.is_dir() {
            std::fs::remove_dir_all(e.path())?;
        } else {
            std::fs::remove_file(e.path())?;
        }
    }
    Ok(())
}

impl ItemStore {
    /// A fresh store whose tmpfs holds at most `size_bytes`.
    pub fn new(size_bytes: u64) -> Result<std::sync::Arc<ItemStore>> {
        fn sys_err(step: &'static str) -> impl Fn(std::io::Error) -> Error {
            move |e| Error::sys(format!("item store: {step}"), e)
        }
        let tmpfs = c("tmpfs")?;
        let fs = sys::syscall5(
            libc::SYS_fsopen,
            tmpfs.as_ptr() as usize,
            FSOPEN_CLOEXEC,
            0,
            0,
            0,
        )
        .map_err(sys_err("fsopen(tmpfs)"))?;
        let fs = sys::own(RawFd::try_from(fs).map_err(|_| Error::Spec("descriptor".into()))?);
        for (k, v) in [
            ("size", size_bytes.to_string()),
            ("mode", "0700".to_string()),
        ] {
            let (k, v) = (c(k)?, c(&v)?);
            sys::syscall5(
                libc::SYS_fsconfig,
                fs.as_raw_fd() as usize,
                FSCONFIG_SET_STRING,
                k.as_ptr() as usize,
                v.as_ptr() as usize,
                0,
            )
            .map_err(sys_err("fsconfig"))?;
        }
        sys::syscall5(
            libc::SYS_fsconfig,
            fs.as_raw_fd() as usize,
            FSCONFIG_CMD_CREATE,
            0,
            0,
            0,
        )
        .map_err(sys_err("fsconfig(create)"))?;
        let mnt = sys::syscall5(
            libc::SYS_fsmount,
            fs.as_raw_fd() as usize,
            FSMOUNT_CLOEXEC,
            MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC,
            0,
            0,
        )
        .map_err(sys_err("fsmount"))?;
        let mnt = sys::own(RawFd::try_from(mnt).map_err(|_| Error::Spec("descriptor".into()))?);
        let mut slots = Vec::new();
        for k in 0..ITEM_SLOTS {
            let dir = format!("/proc/self/fd/{}/slot-{k}", mnt.as_raw_fd());
            std::fs::create_dir(&dir).map_err(sys_err("mkdir slot"))?;
            std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .map_err(sys_err("chmod slot"))?;
            let fd = sys::open_raw(
                &c(&dir)?,
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
                0,
            )
            .map_err(sys_err("open slot"))?;
            let fd = sys::own(fd);
            // The germline applies its Landlock rules with these descriptors after laying out
            // fds 0-3 for itself: keep them clear of that range.
            let high = sys::dup_above(fd.as_raw_fd(), 16).map_err(sys_err("dup slot"))?;
            let high = sys::own(high);
            sys::set_cloexec(high.as_raw_fd()).map_err(sys_err("cloexec slot"))?;
            slots.push(high);
        }
        Ok(std::sync::Arc::new(ItemStore {
            _mnt: mnt,
            busy: std::sync::Mutex::new(vec![false; slots.len()]),
            slots,
            ahead: std::sync::Mutex::new(Ahead::default()),
        }))
    }

    /// The slot directories, for the germline's Landlock rules.
    pub fn slot_fds(&self) -> Vec<RawFd> {
        self.slots.iter().map(AsRawFd::as_raw_fd).collect()
    }

    /// Takes a free slot, empty.
    pub fn lease(self: &std::sync::Arc<Self>) -> Result<SlotLease> {
        let idx = self.claim()?;
        Ok(SlotLease {
            store: self.clone(),
            idx,
        })
    }

    /// Marks a free slot busy and empties it; a tree written ahead gives its slot up if no
    /// other is free.
    fn claim(&self) -> Result<usize> {
        let free = || -> Result<Option<usize>> {
            let mut busy = self
                .busy
                .lock()
                .map_err(|_| Error::Spec("item store lock poisoned".into()))?;
            let idx = busy.iter().position(|b| !b);
            if let Some(i) = idx {
                busy[i] = true;
            }
            Ok(idx)
        };
        let idx = match free()? {
            Some(i) => i,
            None => {
                self.drop_ready();
                free()?.ok_or_else(|| {
                    Error::Spec(format!(
                        "all {ITEM_SLOTS} item directories are in use by live copies"
                    ))
                })?
            }
        };
        if let Err(e) = empty_dir(&self.slot_path(idx)) {
            self.release(idx);
            return Err(Error::sys("item store: empty a slot", e));
        }
        Ok(idx)
    }

    /// The slot's directory, as a path the shim can write through.
    fn slot_path(&self, idx: usize) -> std::path::PathBuf {
        std::path::PathBuf::from(format!("/proc/self/fd/{}", self.slots[idx].as_raw_fd()))
    }

    /// Empties the slot `idx` and frees it: nothing of a copy's items outlives it in the
    /// shim either.
    fn release(&self, idx: usize) {
        let _ = empty_dir(&self.slot_path(idx));
        if let Ok(mut busy) = self.busy.lock() {
            if let Some(b) = busy.get_mut(idx) {
                *b = false;
            }
        }
    }

    /// Keeps the last directory view (see [`ItemStore::write_ahead`]); off by default, and
    /// for a store whose owner never writes ahead.
    pub(crate) fn set_ahead(&self, on: bool) {
        if let Ok(mut a) = self.ahead.lock() {
            a.enabled = on;
            if !on {
                a.want = None;
            }
        }
        if !on {
            self.drop_ready();
        }
    }

    /// Whether this store writes views ahead.
    pub(crate) fn ahead_on(&self) -> bool {
        self.ahead.lock().is_ok_and(|a| a.enabled)
    }

    /// The slot written ahead with exactly `key`, if there is one: the store's since it was
    /// written, never bound anywhere, so it holds that tree and nothing else.
    pub(crate) fn take_ready(self: &std::sync::Arc<Self>, key: &TreeKey) -> Option<SlotLease> {
        let mut a = self.ahead.lock().ok()?;
        if a.ready.as_ref().is_some_and(|(k, _)| k == key) {
            let (_, idx) = a.ready.take()?;
            a.taken += 1;
            return Some(SlotLease {
                store: self.clone(),
                idx,
            });
        }
        None
    }

    /// The view a copy just got: the one to write ahead next (if this store writes ahead).
    pub(crate) fn remember(&self, key: TreeKey) {
        if let Ok(mut a) = self.ahead.lock() {
            if a.enabled {
                a.want = Some(key);
            }
        }
    }

    /// How many copies got a tree written ahead.
    pub fn taken_ahead(&self) -> u64 {
        self.ahead.lock().map(|a| a.taken).unwrap_or(0)
    }

    /// Between calls: writes the last view a copy got into a free slot, unless a slot
    /// already holds it, so that the next copy with exactly that view is given that slot
    /// instead of having it written on the call's path (`itemview::mount_view` compares the
    /// whole view: paths, contents, modes and times). A view that differs is written on the
    /// path as before; the slot written ahead is emptied when another view replaces it, when
    /// a copy needs the slot, or with the store.
    pub fn write_ahead(&self) -> Result<()> {
        // Taken, not copied: a view is compared with the slot's once, after the call that
        // remembered it, not at every idle step until the next call.
        let want = {
            let Ok(mut a) = self.ahead.lock() else {
                return Ok(());
            };
            let Some(w) = a.want.take() else {
                return Ok(());
            };
            if a.ready.as_ref().is_some_and(|(r, _)| *r == w) {
                return Ok(());
            }
            w
        };
        self.drop_ready();
        let idx = self.claim()?;
        let mut made = crate::tree::Made::default();
        for (rel, entry) in &want.2 {
            if let Err(e) =
                crate::tree::write(self.slots[idx].as_raw_fd(), rel, entry, want.1, &mut made)
            {
                drop(made);
                self.release(idx);
                return Err(e);
            }
        }
        drop(made);
        match self.ahead.lock() {
            Ok(mut a) => a.ready = Some((want, idx)),
            Err(_) => self.release(idx),
        }
        Ok(())
    }

    /// Empties and frees the slot written ahead, if any.
    fn drop_ready(&self) {
        let ready = self.ahead.lock().ok().and_then(|mut a| a.ready.take());
        if let Some((_, idx)) = ready {
            self.release(idx);
        }
    }
}

/// One slot of the [`ItemStore`] held by one copy until it is dead.
#[derive(Debug)]
pub struct SlotLease {
    store: std::sync::Arc<ItemStore>,
    idx: usize,
}

impl SlotLease {
    /// The slot's directory, as a path the shim can write through.
    pub fn path(&self) -> std::path::PathBuf {
        self.store.slot_path(self.idx)
    }

    /// The slot's directory descriptor (for `CopyMounts::with_binds`).
    pub fn fd(&self) -> RawFd {
        self.store.slots[self.idx].as_raw_fd()
    }

    /// Writes `contents` at `rel` (below the slot), read-only for everyone.
    pub fn write(&self, rel: &str, contents: &[u8]) -> Result<()> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let path = self.path().join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| Error::sys(format!("item store: mkdir for {rel}"), e))?;
        }
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o444)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| Error::sys(format!("item store: create {rel}"), e))?;
        f.write_all(contents)
            .map_err(|e| Error::sys(format!("item store: write {rel}"), e))
    }
}

impl Drop for SlotLease {
    fn drop(&mut self) {
        // Nothing of a copy's items outlives it in the shim either.
        self.store.release(self.idx);
    }
}

/// One mount point of items at their own paths and the files below it (see [`plan_item_paths`]).
pub type ItemMount = (String, Vec<(String, usize)>);

/// Where items delivered at their own paths are mounted: `(mount point inside the copy,
/// [(path below the mount point, item index)])`. Each mount point is the deepest directory of
/// the rootfs above an item's path (`/home` for `/home/alice/invoice.pdf` when the rootfs has
/// no `/home/alice`); it hides that directory of the rootfs in this copy only, so it may not
/// hold or lie in a readable path, an extra mount or one of the shim's mounts.
pub fn plan_item_paths(
    rootfs: &std::path::Path,
    protected: &[String],
    items: &[(usize, &str, &str)],
) -> Result<Vec<ItemMount>> {
    let comps = |p: &str| -> Vec<String> {
        p.trim_start_matches('/')
            .split('/')
            .map(String::from)
            .collect()
    };
    let protected: Vec<Vec<String>> = protected.iter().map(|p| comps(p)).collect();
    /// Where the walk above one item stopped: at the deepest existing directory (its depth),
    /// or at a symbolic link or non-directory at that depth.
    #[derive(Clone, Copy)]
    enum Walked {
        Dir(usize),
        Link(usize),
        Other(usize),
    }
    // Items with the same parent directory share the walk (a directory item's files share
    // their ancestors: one lookup per directory, not per file; branch git41).
    let mut walked: std::collections::HashMap<&str, Walked> = std::collections::HashMap::new();
    #[derive(Clone, Copy)]
    enum Found {
        Dir,
        Link,
        Other,
        Absent,
    }
    let mut looked_up: std::collections::HashMap<&str, Found> = std::collections::HashMap::new();
    let mut seen: std::collections::HashSet<&str> = std::collections::HashSet::new();
    let mut found: Vec<(Vec<String>, Vec<String>, usize)> = Vec::new();
    for &(idx, name, path) in items {
        let what = || format!("item {name:?} (path {path:?})");
        let parts = comps(path);
        if !path.starts_with('/')
            || path.contains('\0')
            || parts.iter().any(|c| c.is_empty() || c == "." || c == "..")
        {
            return Err(Error::Spec(format!(
                "{}: not an absolute plain path (empty, `.` or `..` component)",
                what()
            )));
        }
        if !seen.insert(path) {
            return Err(Error::Spec(format!(
                "{}: two items at the same path",
                what()
            )));
        }
        // The deepest existing directory above the item, reached through no symbolic link.
        let parent = &path[..path.rfind('/').unwrap_or(0)];
        let w = match walked.get(parent) {
            Some(w) => *w,
            None => {
                let mut w = Walked::Dir(0);
                let mut end = 0;
                for (depth, c) in parts[..parts.len() - 1].iter().enumerate() {
                    end += 1 + c.len();
                    // `/a/b` of `/a/b/c/f`: each rootfs directory looked up once per plan.
                    let prefix = &path[..end];
                    let f = match looked_up.get(prefix) {
                        Some(f) => *f,
                        None => {
                            let f = match std::fs::symlink_metadata(rootfs.join(&prefix[1..])) {
                                Ok(m) if m.file_type().is_symlink() => Found::Link,
                                Ok(m) if m.is_dir() => Found::Dir,
                                Ok(_) => Found::Other,
                                Err(_) => Found::Absent,
                            };
                            looked_up.insert(prefix, f);
                            f
                        }
                    };
                    match f {
                        Found::Link => {
                            w = Walked::Link(depth);
                            break;
                        }
                        Found::Dir => w = Walked::Dir(depth + 1),
                        Found::Other => {
                            w = Walked::Other(depth);
                            break;
                        }
                        Found::Absent => break,
                    }
                }
                walked.insert(parent, w);
                w
            }
        };
        let depth = match w {
            Walked::Dir(d) => d,
            Walked::Link(d) => {
                return Err(Error::Spec(format!(
                    "{}: /{} in the rootfs is a symbolic link",
                    what(),
                    parts[..=d].join("/")
                )))
            }
            Walked::Other(d) => {
                return Err(Error::Spec(format!(
                    "{}: /{} in the rootfs is not a directory",
                    what(),
                    parts[..=d].join("/")
                )))
            }
        };
        if depth == 0 {
            return Err(Error::Spec(format!(
                "{}: the rootfs has no directory above it to mount on (only /); give the \
                 rootfs an empty /{} or choose another path",
                what(),
                parts[0]
            )));
        }
        let at = parts[..depth].to_vec();
        let overlaps = |p: &Vec<String>| {
            let n = p.len().min(at.len());
            p[..n] == at[..n]
        };
        if ["dev", "proc", "run"].contains(&at[0].as_str()) || protected.iter().any(overlaps) {
            return Err(Error::Spec(format!(
                "{}: it would be mounted on /{}, which holds or lies in a readable path, an \
                 extra mount or one of the shim's mounts (/dev, /proc, /run)",
                what(),
                at.join("/")
            )));
        }
        found.push((at, parts, idx));
    }
    // Mount points below another one are merged into it (one mount each, no nesting).
    let mut points: Vec<Vec<String>> = found.iter().map(|f| f.0.clone()).collect();
    points.sort_by_key(Vec::len);
    let mut kept: Vec<Vec<String>> = Vec::new();
    for p in points {
        if !kept
            .iter()
            .any(|k| p.len() >= k.len() && p[..k.len()] == k[..])
        {
            kept.push(p);
        }
    }
    let mut out: Vec<ItemMount> = kept
        .iter()
        .map(|k| (format!("/{}", k.join("/")), Vec::new()))
        .collect();
    for (_, parts, idx) in found {
        if let Some(i) = kept
            .iter()
            .position(|k| parts.len() > k.len() && parts[..k.len()] == k[..])
        {
            out[i].1.push((parts[kept[i].len()..].join("/"), idx));
        }
    }
    if out.len() > ITEM_SLOTS {
        return Err(Error::Spec(format!(
            "items at their own paths need {} mount points, at most {ITEM_SLOTS}",
            out.len()
        )));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(contents: &str) -> TreeKey {
        (
            "/tmp".into(),
            true,
            vec![(
                "repo/f".into(),
                TreeEntry::File {
                    path: "/tmp/repo/f".into(),
                    contents: contents.as_bytes().to_vec(),
                    mode: 0o644,
                    mtime: (1, 0),
                },
            )],
        )
    }

    /// A view written ahead is given only for exactly its key, holds that tree, gives its
    /// slot up to a copy that needs one when every other slot is busy, and is not kept by a
    /// store that does not write ahead.
    #[test]
    fn a_view_written_ahead_is_given_for_its_key_only_and_yields_its_slot() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            assert!(std::env::var_os("GERMLINE_REQUIRE_ROOT_TESTS").is_none());
            return;
        }
        let store = ItemStore::new(1 << 20).expect("store");
        store.remember(key("a"));
        store.write_ahead().expect("nothing to write");
        assert!(store.take_ready(&key("a")).is_none(), "off by default");
        store.set_ahead(true);
        store.remember(key("a"));
        store.write_ahead().expect("write ahead");
        assert!(store.take_ready(&key("b")).is_none(), "other contents");
        let lease = store.take_ready(&key("a")).expect("the same view");
        let f = std::fs::read_to_string(lease.path().join("repo/f")).expect("read");
        assert_eq!(f, "a");
        assert_eq!(store.taken_ahead(), 1);
        drop(lease);
        // Every slot but the one written ahead busy: the next lease takes that one.
        store.write_ahead().expect("again");
        let busy: Vec<SlotLease> = (0..ITEM_SLOTS - 1)
            .map(|_| store.lease().expect("lease"))
            .collect();
        let last = store.lease().expect("the slot written ahead, given up");
        assert_eq!(std::fs::read_dir(last.path()).expect("ls").count(), 0);
        assert!(store.take_ready(&key("a")).is_none());
        drop((busy, last));
    }
}
