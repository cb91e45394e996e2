//! A copy's state tmpfs (`/run/state`, issue 27), opened from the host: the shim writes its
//! horizon's state into it before the call and reads what the copy left there after it.
//!
//! The descriptor is opened while the copy lives and keeps the tmpfs alive after the copy and
//! its mount namespace are gone, so the read comes after the copy is retired (frozen, then
//! killed). Nothing the copy made is ever followed: every path is resolved beneath the
//! tmpfs's root with no symbolic link on the way (`openat2`), so even a copy still running
//! while it is read cannot make the shim read outside it; a symbolic link, device, FIFO or
//! socket it left is reported, not read.

use std::ffi::CString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};

use crate::error::{Error, Result};
use crate::sys;

/// One file of a state: its path below `/run/state` (`db.sqlite`, `cache/a/b`) and contents.
/// Directories are implied by their files, plus [`StateFiles::dirs`] for empty ones.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StateFiles {
    /// Sorted by path.
    pub files: Vec<(String, Vec<u8>)>,
    /// Every directory (also the non-empty ones), sorted.
    pub dirs: Vec<String>,
    /// Entries that are neither files nor directories (left out of the state).
    pub skipped: Vec<String>,
}

/// Most entries (files, directories, others) read back from a copy's state tmpfs or layer.
pub const MAX_ENTRIES: usize = 65536;

/// The copy's `/run/state`, held by the shim.
#[derive(Debug)]
pub struct StateDir(OwnedFd);

fn c(s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::Spec("NUL byte in a state path".into()))
}

fn valid_rel(rel: &str) -> bool {
    !rel.is_empty()
        && !rel.starts_with('/')
        && rel
            .split('/')
            .all(|p| !p.is_empty() && p != "." && p != "..")
}

impl StateDir {
    /// Opens `/run/state` of the copy `pid` and checks that it is a tmpfs (the one the shim
    /// mounted, not the germline's read-only initial state) and empty.
    pub fn open(pid: i32) -> Result<StateDir> {
        let path = c(&format!("/proc/{pid}/root{}", crate::spec::STATE_DIR))?;
        let fd = sys::open_raw(
            &path,
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            0,
        )
        .map(sys::own)
        .map_err(|e| Error::sys("open the copy's /run/state", e))?;
        let f_type =
            sys::fs_type(fd.as_raw_fd()).map_err(|e| Error::sys("fstatfs /run/state", e))?;
        if f_type != libc::TMPFS_MAGIC {
            return Err(Error::Refused(format!(
                "the copy's /run/state is not the tmpfs the shim mounted (f_type {f_type:#x})"
            )));
        }
        let d = StateDir(fd);
        let entries = std::fs::read_dir(d.path(""))
            .map_err(|e| Error::sys("list the copy's /run/state", e))?
            .count();
        if entries != 0 {
            return Err(Error::Refused(format!(
                "the copy's /run/state holds {entries} entries before its state"
            )));
        }
        Ok(d)
    }

    /// A directory the shim holds (a copy's writable layer of a directory item, issue 27),
    /// read as a state tmpfs is.
    pub(crate) fn from_fd(fd: OwnedFd) -> StateDir {
        StateDir(fd)
    }

    fn path(&self, rel: &str) -> std::path::PathBuf {
        let mut p = std::path::PathBuf::from(format!("/proc/self/fd/{}", self.0.as_raw_fd()));
        if !rel.is_empty() {
            p.push(rel);
        }
        p
    }

    /// Writes `state` into the empty tmpfs: directories 0777, files 0666 (the copy's users
    /// are unprivileged on the host; the tmpfs is its alone). Before the call, so nothing of
    /// the copy runs meanwhile.
    pub fn fill(&self, state: &StateFiles) -> Result<()> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
        let bad = |p: &str| Error::Spec(format!("state path {p:?} is not a relative path"));
        for d in &state.dirs {
            if !valid_rel(d) {
                return Err(bad(d));
            }
            let p = self.path(d);
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o777)
                .create(&p)
                .map_err(|e| Error::sys(format!("state: mkdir {d:?}"), e))?;
            // The umask took bits off.
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o777))
                .map_err(|e| Error::sys(format!("state: chmod {d:?}"), e))?;
        }
        for (rel, contents) in &state.files {
            if !valid_rel(rel) {
                return Err(bad(rel));
            }
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o666)
                .custom_flags(libc::O_NOFOLLOW)
                .open(self.path(rel))
                .map_err(|e| Error::sys(format!("state: create {rel:?}"), e))?;
            f.write_all(contents)
                .map_err(|e| Error::sys(format!("state: write {rel:?}"), e))?;
            f.set_permissions(std::fs::Permissions::from_mode(0o666))
                .map_err(|e| Error::sys(format!("state: chmod {rel:?}"), e))?;
        }
        Ok(())
    }

    /// What the copy left: every regular file and directory, read without following any
    /// symbolic link (call it once the copy is frozen or dead).
    pub fn read(&self) -> Result<StateFiles> {
        let mut out = StateFiles::default();
        let root =
            sys::open_beneath_as(self.0.as_raw_fd(), c".", libc::O_RDONLY | libc::O_DIRECTORY)
                .map_err(|e| Error::sys("state: open the root", e))?;
        walk(&root, "", &mut out, 0)?;
        out.files.sort();
        out.dirs.sort();
        out.skipped.sort();
        Ok(out)
    }
}

/// Lists the directory open at `dir` (`rel` below the tmpfs's root) and reads what is below
/// it. Every entry is opened from its own directory's descriptor, one component at a time,
/// with `openat2` beneath it and no symbolic link followed (`ELOOP` for one), so nothing the
/// copy made, even swapped between the listing and the open, leads the shim out of the tmpfs;
/// no path is walked again from the root or through `/proc` (branch git41: a third as many
/// lookups as reopening each entry through `/proc/self/fd`).
fn walk(dir: &OwnedFd, rel: &str, out: &mut StateFiles, depth: usize) -> Result<()> {
    if depth > 32 {
        out.skipped.push(rel.to_string());
        return Ok(());
    }
    let entries = sys::list_dir(dir.as_raw_fd())
        .map_err(|e| Error::sys(format!("state: list {rel:?}"), e))?;
    for (name, d_type) in entries {
        // The tmpfs bounds the bytes, not the entries (empty files cost none).
        if out.files.len() + out.dirs.len() + out.skipped.len() >= MAX_ENTRIES {
            return Err(Error::Refused(format!(
                "the copy left more than {MAX_ENTRIES} entries"
            )));
        }
        let shown = name.to_string_lossy();
        let child = if rel.is_empty() {
            shown.into_owned()
        } else {
            format!("{rel}/{shown}")
        };
        // The entry itself, never what a link names (`d_type`, else `fstatat` without
        // following).
        let kind = match d_type {
            libc::DT_UNKNOWN => sys::lstat_at(dir.as_raw_fd(), &name)
                .map_err(|e| Error::sys(format!("state: stat {child:?}"), e))?,
            libc::DT_DIR => libc::S_IFDIR,
            libc::DT_REG => libc::S_IFREG,
            _ => 0,
        };
        if kind == libc::S_IFDIR {
            out.dirs.push(child.clone());
            let sub =
                sys::open_beneath_as(dir.as_raw_fd(), &name, libc::O_RDONLY | libc::O_DIRECTORY)
                    .map_err(|e| Error::sys(format!("state: resolve {child:?}"), e))?;
            walk(&sub, &child, out, depth + 1)?;
        } else if kind == libc::S_IFREG {
            let contents = read_file(dir, &name, &child)?;
            out.files.push((child, contents));
        } else {
            out.skipped.push(child);
        }
    }
    Ok(())
}

/// The contents of the regular file `name` in the directory open at `dir` (`rel`: its path,
/// for errors). `O_NONBLOCK`: a FIFO swapped in after the listing never blocks the open, and
/// it is refused as not a regular file before anything is read; the item store and state
/// tmpfs are mounted `nodev`, so a device cannot be opened at all.
fn read_file(dir: &OwnedFd, name: &std::ffi::CStr, rel: &str) -> Result<Vec<u8>> {
    let fd = sys::open_beneath_as(
        dir.as_raw_fd(),
        name,
        libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY,
    )
    .map_err(|e| Error::sys(format!("state: open {rel:?}"), e))?;
    let mut f = File::from(fd);
    let md = f
        .metadata()
        .map_err(|e| Error::sys(format!("state: stat {rel:?}"), e))?;
    if !md.is_file() {
        return Err(Error::Refused(format!(
            "state: {rel:?} is not a regular file"
        )));
    }
    let mut v = Vec::with_capacity(md.len() as usize);
    f.read_to_end(&mut v)
        .map_err(|e| Error::sys(format!("state: read {rel:?}"), e))?;
    Ok(v)
}

/// Makes `dir` hold a release's initial state (each declared file empty, each directory
/// empty) readable by the germline's unprivileged user; returns `dir`. The germline sees it,
/// read-only, at `/run/state` (an `extra_mounts` entry), so a server that opens its database
/// at start finds it.
pub fn initial_state(dir: &std::path::Path, paths: &[(String, bool)]) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let io = |what: String| move |e| Error::sys(what, e);
    std::fs::create_dir_all(dir).map_err(io(format!("state: mkdir {}", dir.display())))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
        .map_err(io(format!("state: chmod {}", dir.display())))?;
    for (name, is_dir) in paths {
        if !valid_rel(name) || name.contains('/') {
            return Err(Error::Spec(format!("state name {name:?}")));
        }
        let p = dir.join(name);
        if *is_dir {
            std::fs::create_dir_all(&p).map_err(io(format!("state: mkdir {}", p.display())))?;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755))
                .map_err(io(format!("state: chmod {}", p.display())))?;
        } else {
            std::fs::write(&p, b"").map_err(io(format!("state: write {}", p.display())))?;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644))
                .map_err(io(format!("state: chmod {}", p.display())))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir_of(p: &std::path::Path) -> StateDir {
        let f = std::fs::File::open(p).expect("open");
        StateDir::from_fd(OwnedFd::from(f))
    }

    /// Empty files cost a tmpfs no bytes: the read-back bounds the entries too.
    #[test]
    fn too_many_entries_are_refused() {
        let d = tempfile::tempdir().expect("tmp");
        std::fs::create_dir(d.path().join("sub")).expect("mkdir");
        std::fs::write(d.path().join("sub/f"), b"x").expect("write");
        let ok = dir_of(d.path()).read().expect("read");
        assert_eq!(ok.files, vec![("sub/f".to_string(), b"x".to_vec())]);
        assert_eq!(ok.dirs, vec!["sub".to_string()]);
        for i in 0..MAX_ENTRIES {
            std::fs::File::create(d.path().join(format!("e{i}"))).expect("create");
        }
        let e = dir_of(d.path()).read().expect_err("refused");
        assert!(e.to_string().contains("more than 65536 entries"), "{e}");
    }

    /// What a copy may leave in a layer: nested directories and files are read from their
    /// own directory's descriptor; a symlink (to a file or a directory outside), a FIFO and a
    /// socket are listed as skipped, never followed, opened or waited on.
    #[test]
    fn links_fifos_and_sockets_are_skipped_and_never_followed() {
        let d = tempfile::tempdir().expect("tmp");
        let out = tempfile::tempdir().expect("tmp");
        std::fs::write(out.path().join("secret"), b"outside").expect("write");
        std::fs::create_dir_all(d.path().join("a/b")).expect("mkdir");
        std::fs::create_dir(d.path().join("empty")).expect("mkdir");
        std::fs::write(d.path().join("top"), b"1").expect("write");
        std::fs::write(d.path().join("a/b/deep"), b"2").expect("write");
        std::os::unix::fs::symlink(out.path().join("secret"), d.path().join("a/file-link"))
            .expect("ln");
        std::os::unix::fs::symlink(out.path(), d.path().join("a/dir-link")).expect("ln");
        let fifo = c(&d.path().join("a/fifo").display().to_string()).expect("path");
        // SAFETY: `fifo` is a NUL-terminated path that lives for the call.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
        let _sock = std::os::unix::net::UnixListener::bind(d.path().join("sock")).expect("bind");
        let got = dir_of(d.path()).read().expect("read");
        assert_eq!(
            got.files,
            vec![
                ("a/b/deep".to_string(), b"2".to_vec()),
                ("top".to_string(), b"1".to_vec())
            ]
        );
        assert_eq!(got.dirs, vec!["a", "a/b", "empty"]);
        assert_eq!(
            got.skipped,
            vec!["a/dir-link", "a/fifo", "a/file-link", "sock"]
        );
    }

    #[test]
    fn relative_paths_only() {
        for ok in ["db.sqlite", "a/b", "a.b/c-d"] {
            assert!(valid_rel(ok), "{ok}");
        }
        for bad in ["", "/a", "a/../b", "a//b", "./a", "..", "a/"] {
            assert!(!valid_rel(bad), "{bad}");
        }
    }
}
