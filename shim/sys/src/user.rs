//! Acting for a user: the file-system credentials of one thread.
//!
//! `germline daemon` runs sessions as root for unprivileged users (docs/daemon.md). Every file
//! such a session opens because the user named it (the release, the pinned key, the policy,
//! a credential's `value_file`, a path argument that becomes an item, the CA bundles of the
//! user's rootfs) is opened by a thread that holds the user's file-system uid, gid and
//! supplementary groups, so the kernel grants exactly what it grants the user. [`FsCreds::run`]
//! runs a closure on such a thread.
//!
//! Why a thread, and raw system calls: Linux keeps credentials per thread, and
//! `setfsuid(2)`, `setfsgid(2)` and the raw `setgroups(2)` change only the calling thread's
//! (glibc's `setgroups` would change every thread of the process). A fresh thread that exits
//! when the closure returns cannot leak the user's identity into the rest of the session,
//! whatever the closure does, and needs no code to switch back. Changing the file-system uid
//! from 0 to another drops the thread's file capabilities (`CAP_DAC_OVERRIDE`,
//! `CAP_DAC_READ_SEARCH`, `CAP_FOWNER`, ...: capabilities(7), "Effect of user ID changes on
//! capabilities"), so root's overrides do not apply on that thread either.

use std::fmt;
use std::str::FromStr;

/// A user's file-system identity: uid, primary gid and supplementary groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsCreds {
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

/// Most supplementary groups accepted (the kernel's NGROUPS_MAX is 65536).
const MAX_GROUPS: usize = 65536;

impl FsCreds {
    /// Runs `f` on a new thread that holds these file-system credentials, and returns its
    /// result; an error if the thread could not take them (then `f` does not run). A panic in
    /// `f` is resumed on the caller's thread.
    pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> std::io::Result<T> {
        std::thread::scope(|s| {
            let h = s.spawn(|| -> std::io::Result<T> {
                self.enter()?;
                Ok(f())
            });
            match h.join() {
                Ok(r) => r,
                Err(panic) => std::panic::resume_unwind(panic),
            }
        })
    }

    /// Takes these credentials on the calling thread (only [`FsCreds::run`]'s own thread).
    fn enter(&self) -> std::io::Result<()> {
        if self.groups.len() > MAX_GROUPS {
            return Err(std::io::Error::other("too many supplementary groups"));
        }
        // Groups first: setgroups needs CAP_SETGID, which the fsuid change below would not
        // drop, but the order keeps the thread never holding the user's uid with root's
        // groups.
        // SAFETY: the raw setgroups(2) reads `groups.len()` gid_t values from a live slice;
        // it changes only this thread's credentials.
        let r = unsafe {
            libc::syscall(
                libc::SYS_setgroups,
                self.groups.len(),
                self.groups.as_ptr().cast::<libc::gid_t>(),
            )
        };
        if r != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // setfsgid/setfsuid return the previous value and never fail visibly: a second call
        // with an invalid id (-1) returns the current one, which must be what was asked.
        // SAFETY: plain system calls on integers, changing only this thread's credentials.
        let (fsgid, fsuid) = unsafe {
            libc::syscall(libc::SYS_setfsgid, self.gid);
            let g = libc::syscall(libc::SYS_setfsgid, u32::MAX);
            libc::syscall(libc::SYS_setfsuid, self.uid);
            let u = libc::syscall(libc::SYS_setfsuid, u32::MAX);
            (g, u)
        };
        if fsgid != i64::from(self.gid) || fsuid != i64::from(self.uid) {
            return Err(std::io::Error::other(format!(
                "could not take the file-system identity {self} (have uid {fsuid}, gid {fsgid})"
            )));
        }
        Ok(())
    }
}

/// `UID:GID:G1,G2,...` (the groups may be empty: `UID:GID:`).
impl fmt::Display for FsCreds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let groups: Vec<String> = self.groups.iter().map(u32::to_string).collect();
        write!(f, "{}:{}:{}", self.uid, self.gid, groups.join(","))
    }
}

impl FromStr for FsCreds {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("expected UID:GID:G1,G2,... (numbers), found {s:?}");
        let mut parts = s.splitn(3, ':');
        let num = |p: Option<&str>| p.and_then(|v| v.parse::<u32>().ok()).ok_or_else(bad);
        let uid = num(parts.next())?;
        let gid = num(parts.next())?;
        let groups = match parts.next() {
            None | Some("") => Vec::new(),
            Some(g) => g
                .split(',')
                .map(|v| v.parse::<u32>().map_err(|_| bad()))
                .collect::<Result<Vec<_>, _>>()?,
        };
        if uid == u32::MAX || gid == u32::MAX || groups.contains(&u32::MAX) {
            return Err(bad());
        }
        Ok(FsCreds { uid, gid, groups })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_form_round_trips_and_refuses_garbage() {
        for c in [
            FsCreds {
                uid: 1001,
                gid: 1001,
                groups: vec![],
            },
            FsCreds {
                uid: 5,
                gid: 6,
                groups: vec![7, 8],
            },
        ] {
            assert_eq!(c.to_string().parse::<FsCreds>(), Ok(c.clone()));
        }
        for bad in ["", "1", "1:", "a:1:", "1:1:x", "1:1:2,", "4294967295:1:"] {
            assert!(bad.parse::<FsCreds>().is_err(), "{bad}");
        }
    }

    /// The user's thread is refused what the user is refused (a root-only file), gets what
    /// the user gets, and the caller keeps root's access afterwards.
    #[test]
    fn a_users_thread_reads_only_what_the_user_may() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            assert!(
                std::env::var_os("GERMLINE_REQUIRE_ROOT_TESTS").is_none(),
                "needs root"
            );
            eprintln!("skipped: needs root");
            return;
        }
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("germline-fscreds-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).expect("mkdir");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let secret = dir.join("secret");
        let open = dir.join("open");
        std::fs::write(&secret, "root only").expect("write");
        std::fs::write(&open, "anyone").expect("write");
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let nobody = FsCreds {
            uid: 65534,
            gid: 65534,
            groups: vec![],
        };
        let (s, o) = nobody
            .run(|| (std::fs::read(&secret), std::fs::read(&open)))
            .expect("thread");
        assert_eq!(
            s.expect_err("root-only").kind(),
            std::io::ErrorKind::PermissionDenied
        );
        assert_eq!(o.expect("world-readable"), b"anyone");
        assert_eq!(
            std::fs::read(&secret).expect("still root here"),
            b"root only"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
