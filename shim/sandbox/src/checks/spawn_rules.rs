//! The checks on a spawned copy before it gets data (issue 28; docs/sandbox.md, "Spawned
//! copies: what replaces G1"). Pure functions of what the shim expects and one
//! [`CopySnapshot`] per process of the copy's cgroup, like [`super::copy_rules`], with two
//! rules changed because a spawned copy has no untrusted parent: threads are allowed, and the
//! copy may hold objects it made itself (epoll, eventfd, timerfd, pipes, sockets, memfds)
//! provided none of them is open anywhere outside the copy.

use std::collections::HashSet;

use super::copy_rules;
use super::rules::{judged, shared_mappings, status_field};
use super::snapshot::CopySnapshot;
use super::CopyExpect;
use crate::procfs::Fd;

/// Every check on one process of a spawned copy: status, descriptors, shared mappings,
/// namespaces (none shared with the shim or a live copy), its own cgroup, the seccomp
/// programs `[germline, copy]` word for word. `foreign`: the inodes open in the shim and in
/// every other live copy.
pub fn spawned(x: &CopyExpect<'_>, snap: &CopySnapshot, foreign: &HashSet<u64>) -> Vec<String> {
    let mut bad = status(snap);
    bad.extend(descriptors(x, snap, foreign));
    bad.extend(shared_mappings(
        &snap.maps,
        x.germline.rootfs_dev,
        "mapping",
    ));
    bad.extend(copy_rules::namespaces(x, snap));
    bad.extend(copy_rules::cgroup(x, snap));
    bad.extend(copy_rules::seccomp(x, snap));
    bad
}

/// PID 1 of its own PID namespace (threads allowed); no capability; `no_new_privs`; seccomp
/// in filter mode.
pub fn status(snap: &CopySnapshot) -> Vec<String> {
    judged(&snap.status, "cannot read the copy's status", |st| {
        let mut bad = Vec::new();
        let f = |k: &str| status_field(st, k);
        if f("NSpid").split_whitespace().last() != Some("1") {
            bad.push(format!(
                "the spawned copy is not PID 1 of its PID namespace (NSpid {})",
                f("NSpid")
            ));
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
        bad
    })
}

/// Whether `f` is an object a process makes for itself (never a path it opened).
fn self_made(f: &Fd) -> bool {
    let kind = f.mode & libc::S_IFMT;
    f.target.starts_with("anon_inode:")
        || f.target.starts_with("/memfd:")
        || (kind == libc::S_IFIFO && f.target.starts_with("pipe:["))
        || (kind == libc::S_IFSOCK && f.target.starts_with("socket:["))
}

/// The copy socket is open; every other descriptor is `/dev/null`, a file of the read-only
/// rootfs, or an object the copy made that is open nowhere outside it. Anonymous-inode
/// objects (epoll, eventfd, timerfd, signalfd) all share the kernel's one anonymous inode, so
/// the inode cannot tell them apart: they are allowed by kind. One made outside could reach
/// the copy only by being passed, and nothing passes any (docs/sandbox.md: the launcher marks
/// every descriptor but the socket and `/dev/null` close-on-exec, the shim sends no descriptor
/// on the socket, `pidfd_getfd` is refused by seccomp).
pub fn descriptors(x: &CopyExpect<'_>, snap: &CopySnapshot, foreign: &HashSet<u64>) -> Vec<String> {
    judged(&snap.fds, "cannot list the copy's descriptors", |fds| {
        let sock = |f: &Fd| f.ino == x.socket_inode && f.mode & libc::S_IFMT == libc::S_IFSOCK;
        let mut bad: Vec<String> = fds
            .iter()
            .filter(|f| !sock(f))
            .filter_map(|f| {
                if x.germline.is_devnull(f) || x.germline.is_rootfs_file(f) {
                    None
                } else if !self_made(f) {
                    Some(format!(
                        "descriptor {} is {} (only /dev/null, the copy socket, files of the \
                         rootfs and objects the copy made may be open)",
                        f.num, f.target
                    ))
                } else if !f.target.starts_with("anon_inode:") && foreign.contains(&f.ino) {
                    Some(format!(
                        "descriptor {} is {}, which is open outside the copy too",
                        f.num, f.target
                    ))
                } else {
                    None
                }
            })
            .collect();
        if !fds.iter().any(sock) {
            bad.push("the copy socket is not open in the copy".into());
        }
        bad
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::{GermlineFacts, Role};
    use crate::procfs::Namespaces;
    use std::collections::BTreeMap;

    fn facts() -> GermlineFacts {
        GermlineFacts {
            pid: 10,
            ctl_inode: 777,
            rootfs_mnt_id: 40,
            rootfs_dev: (254, 0),
            devnull_mnt_ids: vec![41],
            extra_mounts: vec![],
        }
    }

    fn fd(num: i32, target: &str, mode: u32, ino: u64, mnt: Option<u64>) -> Fd {
        Fd {
            num,
            target: target.into(),
            mnt_id: mnt,
            dev: 0,
            ino,
            rdev: 0,
            mode,
        }
    }

    fn snap(threads: &str, fds: Vec<Fd>) -> CopySnapshot {
        let status: BTreeMap<String, String> = [
            ("Threads", threads),
            ("NSpid", "5001 1"),
            ("CapEff", "0000000000000000"),
            ("CapPrm", "0000000000000000"),
            ("CapBnd", "0000000000000000"),
            ("CapInh", "0000000000000000"),
            ("CapAmb", "0000000000000000"),
            ("NoNewPrivs", "1"),
            ("Seccomp", "2"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        CopySnapshot {
            status: Ok(status),
            fds: Ok(fds),
            maps: Ok(vec![]),
            namespaces: Ok(Namespaces::default()),
            parent_namespaces: None,
            cgroups: Ok(vec![]),
            cgroup_version: None,
            seccomp: Ok(vec![]),
        }
    }

    fn judge(s: &CopySnapshot, foreign: &[u64]) -> Vec<String> {
        let f = facts();
        let ns = Namespaces {
            pid: 1,
            net: 2,
            ipc: 3,
            uts: 4,
            mnt: 5,
            user: 6,
        };
        let x = CopyExpect {
            pid: 5001,
            role: Role::Sole,
            socket_inode: 777,
            germline: &f,
            germline_ns: &ns,
            others: &[],
            cgroup_rel: "g/c1",
            filters: &[],
        };
        let mut bad = status(s);
        bad.extend(descriptors(&x, s, &foreign.iter().copied().collect()));
        bad
    }

    fn node_like() -> Vec<Fd> {
        vec![
            fd(0, "socket:[777]", libc::S_IFSOCK, 777, None),
            fd(1, "socket:[777]", libc::S_IFSOCK, 777, None),
            Fd {
                rdev: libc::makedev(1, 3),
                ..fd(2, "/dev/null", libc::S_IFCHR, 9, Some(41))
            },
            fd(3, "anon_inode:[eventpoll]", 0o600, 31, None),
            fd(4, "pipe:[32]", libc::S_IFIFO, 32, None),
            fd(5, "anon_inode:[eventfd]", 0o600, 31, None),
        ]
    }

    #[test]
    fn threads_and_self_made_objects_pass() {
        assert_eq!(judge(&snap("7", node_like()), &[]), Vec::<String>::new());
    }

    #[test]
    fn anonymous_inodes_pass_by_kind_whatever_their_shared_inode() {
        assert_eq!(judge(&snap("7", node_like()), &[31]), Vec::<String>::new());
    }

    #[test]
    fn a_pipe_open_outside_the_copy_is_refused() {
        let bad = judge(&snap("7", node_like()), &[32]);
        assert_eq!(bad.len(), 1, "{bad:?}");
        assert!(
            bad[0].contains("pipe:[32]") && bad[0].contains("outside"),
            "{bad:?}"
        );
    }

    #[test]
    fn a_host_file_and_a_missing_socket_are_refused() {
        let mut fds = node_like();
        fds.retain(|f| f.ino != 777);
        fds.push(fd(9, "/etc/shadow", libc::S_IFREG, 99, Some(12)));
        let bad = judge(&snap("1", fds), &[]);
        assert!(bad.iter().any(|b| b.contains("/etc/shadow")), "{bad:?}");
        assert!(
            bad.iter().any(|b| b.contains("copy socket is not open")),
            "{bad:?}"
        );
    }
}
