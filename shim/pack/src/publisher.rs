//! The publisher's own steps of a pack (issue 27/28): `--rootfs-hook SCRIPT`, run on the rootfs
//! once the packages and runtime are in, and `--germline-owned PATH`, rootfs paths owned by the
//! germline's root in the bundle written.
//!
//! **The hook** is an executable run as `SCRIPT ROOTFS` (the rootfs's absolute path), with the
//! packer's environment but `COSIGN_PASSWORD`, stdin closed and its output captured (stdout
//! under `--json` is the result's alone). It runs before the probe, the digest and the signature, so what it writes
//! is probed, signed and pinned like everything else in the rootfs. It fails the pack when it
//! exits non-zero (its path, exit status and the tail of its stderr), before any release is
//! written. mcp-server-git's (`bundles/servers/mcp-server-git/rootfs-hook`) writes the public
//! repository its warm calls read.
//!
//! **Germline-owned paths** are chowned (recursively, never through a symbolic link) to
//! [`HOST_ID`], the host id the germline's root maps to, in the bundle written by the pack:
//! git refuses a repository another user owns ("dubious ownership"), and the germline runs as
//! that id. Ownership is **not** part of the rootfs digest (`germline_release::digest`: modes,
//! contents and link targets only; an image's layers carry uid 0), so the signature does not
//! cover this step: a verifier of a bundle whose owners differ sees the same digest and a valid
//! signature, and the server's warm calls that need the ownership fail (the germline skips a
//! failed warm call, so its copies start unwarmed: slower, not less safe). Each path is checked
//! before anything is written: absolute, no `..` or `.`, present in the rootfs after the hook,
//! and no component a symbolic link (one could name a host file, which the chown would then
//! give away). Chowning needs root; without it the pack is refused before it starts.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};

use germline_sandbox::germline::HOST_ID;

use crate::{Error, Result};

/// How much of a failed hook's stderr the error quotes (its end: where scripts say why).
const STDERR_TAIL: usize = 2000;

/// `--rootfs-hook`'s script, checked to be a file; returned absolute, so that the hook runs the
/// same whatever the working directory.
pub fn hook_path(p: &Path) -> Result<PathBuf> {
    let abs = std::fs::canonicalize(p)
        .map_err(|e| Error::io(format!("--rootfs-hook {}", p.display()), e))?;
    if !abs.is_file() {
        return Err(Error::Hook(format!("{}: not a file", p.display())));
    }
    Ok(abs)
}

/// Runs `hook ROOTFS`; its failure is an error naming the hook, its status and its stderr's end.
pub fn run_hook(hook: &Path, root: &Path) -> Result<()> {
    let root = std::fs::canonicalize(root).map_err(|e| Error::io(root.display(), e))?;
    let out = Command::new(hook)
        .arg(&root)
        // The signing key's password is pack's, not the hook's.
        .env_remove("COSIGN_PASSWORD")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            Error::Hook(format!(
                "{}: could not run it ({e}); it must be executable (chmod +x) with a #! line",
                hook.display()
            ))
        })?;
    if out.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    let tail: String = {
        let chars: Vec<char> = stderr.trim_end().chars().collect();
        chars[chars.len().saturating_sub(STDERR_TAIL)..]
            .iter()
            .collect()
    };
    Err(Error::Hook(format!(
        "{} ROOTFS failed ({}), no release written: {}",
        hook.display(),
        out.status,
        if tail.is_empty() {
            "(no stderr)"
        } else {
            tail.trim()
        }
    )))
}

/// One `--germline-owned` value, checked lexically: absolute, not `/`, no `..` or `.`.
pub fn owned_path(s: &str) -> Result<PathBuf> {
    let refuse = |why: &str| Error::Owned(format!("--germline-owned {s:?}: {why}"));
    let p = Path::new(s);
    if !p.is_absolute() {
        return Err(refuse("expected an absolute path in the rootfs"));
    }
    // Path::components drops `.` in the middle: the segments themselves are checked.
    if s.split('/').any(|seg| seg == "." || seg == "..") {
        return Err(refuse("`..` and `.` are refused: name the path itself"));
    }
    let mut rel = PathBuf::new();
    for c in p.components() {
        match c {
            Component::RootDir => {}
            Component::Normal(n) => rel.push(n),
            _ => return Err(refuse("`..` and `.` are refused: name the path itself")),
        }
    }
    if rel.as_os_str().is_empty() {
        return Err(refuse("the whole rootfs cannot be the germline's"));
    }
    Ok(rel)
}

/// Refuses a pack with `--germline-owned` that is not run as root, before it starts.
pub fn check_can_chown(owned: &[PathBuf]) -> Result<()> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    let Some(first) = owned.first().filter(|_| euid != 0) else {
        return Ok(());
    };
    Err(Error::Owned(format!(
        "--germline-owned /{}: giving paths to the germline's root (host uid {HOST_ID}) needs \
         root, and this pack runs as uid {euid}: run it as root, or pack without \
         --germline-owned (the server's warm calls that need the ownership then fail, and its \
         copies start unwarmed)",
        first.display()
    )))
}

/// Each of `owned` lies in `root`: present, reached without a symbolic link.
pub fn check_owned(root: &Path, owned: &[PathBuf]) -> Result<()> {
    for rel in owned {
        let mut cur = root.to_path_buf();
        for c in rel.components() {
            cur.push(c);
            let md = std::fs::symlink_metadata(&cur).map_err(|e| {
                Error::Owned(format!(
                    "--germline-owned /{}: not in the rootfs ({e}) at /{}",
                    rel.display(),
                    cur.strip_prefix(root).unwrap_or(&cur).display()
                ))
            })?;
            if md.file_type().is_symlink() {
                return Err(Error::Owned(format!(
                    "--germline-owned /{}: /{} is a symbolic link (refused: it could lead out \
                     of the rootfs); name the path it links to",
                    rel.display(),
                    cur.strip_prefix(root).unwrap_or(&cur).display()
                )));
            }
        }
    }
    Ok(())
}

/// Chowns each of `owned` in `root` to [`HOST_ID`], recursively, links themselves not followed.
/// Checked again here ([`check_owned`]): `root` is the bundle's copy of the rootfs checked before.
pub fn chown_owned(root: &Path, owned: &[PathBuf]) -> Result<usize> {
    check_owned(root, owned)?;
    let mut n = 0;
    for rel in owned {
        let mut stack = vec![root.join(rel)];
        while let Some(p) = stack.pop() {
            std::os::unix::fs::lchown(&p, Some(HOST_ID), Some(HOST_ID))
                .map_err(|e| Error::io(format!("--germline-owned: chown {}", p.display()), e))?;
            n += 1;
            let md = std::fs::symlink_metadata(&p).map_err(|e| Error::io(p.display(), e))?;
            if md.is_dir() {
                for e in std::fs::read_dir(&p).map_err(|e| Error::io(p.display(), e))? {
                    let e = e.map_err(|e| Error::io(p.display(), e))?;
                    stack.push(e.path());
                }
            }
        }
    }
    Ok(n)
}

/// `--germline-owned` values as rootfs-relative paths.
pub fn owned_paths(values: &[String]) -> Result<Vec<PathBuf>> {
    values.iter().map(|s| owned_path(s)).collect()
}

/// For messages: `/a, /b`.
pub fn describe(owned: &[PathBuf]) -> String {
    owned
        .iter()
        .map(|p| format!("/{}", OsStr::new(p.as_os_str()).as_bytes().escape_ascii()))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_paths_are_absolute_and_plain() {
        assert_eq!(
            owned_path("/usr/share/x").ok(),
            Some(PathBuf::from("usr/share/x"))
        );
        for bad in ["usr/x", "/", "/usr/../etc", "/usr/./x", ""] {
            let e = owned_path(bad)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(e.contains("--germline-owned"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_symlink_on_the_way_is_refused() -> std::io::Result<()> {
        let d = tempfile::tempdir()?;
        std::fs::create_dir_all(d.path().join("usr/share"))?;
        std::os::unix::fs::symlink("/etc", d.path().join("usr/etc"))?;
        let e = check_owned(d.path(), &[PathBuf::from("usr/etc/passwd")])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("/usr/etc is a symbolic link"), "{e}");
        assert!(check_owned(d.path(), &[PathBuf::from("usr/share")]).is_ok());
        let e = check_owned(d.path(), &[PathBuf::from("usr/missing")])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("not in the rootfs"), "{e}");
        Ok(())
    }
}
