//! The half of the copy checks that judges: pure functions of what the shim expects of one
//! process of a copy ([`CopyExpect`]) and what it read of it ([`CopySnapshot`]). Each returns
//! the reasons it refuses (empty: the copy may receive data), in the order [`copy`] gives them.
//! No I/O here: the tests below run them without root.

use super::rules::{judged, shared_mappings, status_field};
use super::snapshot::CopySnapshot;
use super::{CopyExpect, Role};
use crate::cgroup::Version;
use crate::procfs::Fd;

/// Every check on one process of a copy, in order: status, descriptors, mappings,
/// namespaces, cgroup, seccomp.
pub fn copy(x: &CopyExpect<'_>, snap: &CopySnapshot) -> Vec<String> {
    let mut bad = status(x, snap);
    bad.extend(descriptors(x, snap));
    bad.extend(shared_mappings(
        &snap.maps,
        x.germline.rootfs_dev,
        "mapping",
    ));
    bad.extend(namespaces(x, snap));
    bad.extend(cgroup(x, snap));
    bad.extend(seccomp(x, snap));
    bad
}

/// One thread; PID 1 of its PID namespace (the tool: PID 2, child of its reaper); no
/// capability; `no_new_privs`; seccomp in filter mode.
pub fn status(x: &CopyExpect<'_>, snap: &CopySnapshot) -> Vec<String> {
    judged(&snap.status, "cannot read the copy's status", |st| {
        let mut bad = Vec::new();
        let f = |k: &str| status_field(st, k);
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
        bad
    })
}

/// Only `/dev/null` and the copy socket are open; the socket is held by the copy (the sole
/// process or the tool), never by a reaper.
pub fn descriptors(x: &CopyExpect<'_>, snap: &CopySnapshot) -> Vec<String> {
    judged(&snap.fds, "cannot list the copy's descriptors", |fds| {
        let sock = |f: &Fd| f.ino == x.socket_inode && f.mode & libc::S_IFMT == libc::S_IFSOCK;
        let mut bad: Vec<String> = fds
            .iter()
            .filter(|f| !(sock(f) || x.germline.is_devnull(f)))
            .map(|f| {
                format!(
                    "descriptor {} is {} (only /dev/null and the copy socket may be open)",
                    f.num, f.target
                )
            })
            .collect();
        let holds = fds.iter().any(|f| f.ino == x.socket_inode);
        match x.role {
            // The tool's death must close the socket, or the shim would wait for the deadline
            // instead of seeing the copy crash.
            Role::Reaper if holds => {
                bad.push("the copy's reaper still holds the copy socket".into())
            }
            Role::Sole | Role::Tool { .. } if !holds => {
                bad.push("the copy socket is not open in the copy".into())
            }
            _ => {}
        }
        bad
    })
}

/// The tool is in its reaper's namespaces; none of the copy's pid, net, ipc, uts or mnt
/// namespaces is the germline's or a live copy's.
pub fn namespaces(x: &CopyExpect<'_>, snap: &CopySnapshot) -> Vec<String> {
    judged(
        &snap.namespaces,
        "cannot read the copy's namespaces",
        |ns| {
            let mut bad = Vec::new();
            if let (Role::Tool { .. }, Some(parent)) = (x.role, &snap.parent_namespaces) {
                match parent {
                    Ok(p) if p == ns => {}
                    Ok(_) => bad.push("the copy's tool is not in its reaper's namespaces".into()),
                    Err(e) => bad.push(format!("cannot read the reaper's namespaces: {e}")),
                }
            }
            let germline = std::iter::once((x.germline_ns, "the germline"));
            for (other, whose) in germline.chain(x.others.iter().map(|o| (o, "a live copy"))) {
                let shared = ns.shared_with(other);
                if !shared.is_empty() {
                    bad.push(format!(
                        "the copy shares its {} namespace(s) with {whose}",
                        shared.join(", ")
                    ));
                }
            }
            bad
        },
    )
}

/// The copy is in its own cgroup in every hierarchy that limits, freezes or kills it (the
/// unified one on a cgroup v2 host).
pub fn cgroup(x: &CopyExpect<'_>, snap: &CopySnapshot) -> Vec<String> {
    judged(&snap.cgroups, "cannot read the copy's cgroups", |cg| {
        let want = format!("/{}", x.cgroup_rel);
        cg.iter()
            .filter(|(ctrl, _)| {
                ctrl.is_empty() && snap.cgroup_version == Some(Version::V2)
                    || ["pids", "memory", "freezer", "cpu"]
                        .iter()
                        .any(|c| ctrl.split(',').any(|x| x == *c))
            })
            .filter(|(_, path)| path != &want)
            .map(|(ctrl, path)| format!("the copy's {ctrl:?} cgroup is {path}, not its own {want}"))
            .collect()
    })
}

/// The copy's seccomp programs are exactly the expected ones, in order.
pub fn seccomp(x: &CopyExpect<'_>, snap: &CopySnapshot) -> Vec<String> {
    judged(
        &snap.seccomp,
        "cannot read the copy's seccomp filters",
        |got| {
            if got.as_slice() == x.filters {
                return Vec::new();
            }
            let differing: Vec<String> = (0..got.len().max(x.filters.len()))
                .filter(|i| got.get(*i) != x.filters.get(*i))
                .map(|i| match i {
                    0 => "layer 0 (the germline's)".to_string(),
                    1 => "layer 1 (the copy's)".to_string(),
                    i => format!("layer {i}"),
                })
                .collect();
            vec![format!(
            "the copy's seccomp filters ({} programs of {:?} instructions) differ from the expected ones ({} programs of {:?}): {}",
            got.len(),
            got.iter().map(|p| p.0.len()).collect::<Vec<_>>(),
            x.filters.len(),
            x.filters.iter().map(|p| p.0.len()).collect::<Vec<_>>(),
            differing.join(", ")
        )]
        },
    )
}

#[cfg(test)]
mod tests {
    //! The copy rules on `/proc` files recorded from real copies of the `plain` release
    //! (`tests/germline_checks.rs`, `record_copy_proc_fixtures`): `copy_sole` (no reaper),
    //! `copy_reaper` and `copy_tool` (one copy under a reaper). The recorder read them after the
    //! copies passed their checks, once the tool's server had started: the server's epoll and
    //! socket pair (descriptors 3, 5, 6) are what it opened since; [`checked`] takes them out
    //! to give the copy as its checks saw it. Each other case edits one field of a recording to
    //! break one rule (said at each).

    use super::super::fixtures::{load_copy, CopyFixture};
    use super::*;
    use crate::error::Error;
    use crate::procfs::{Fd, Mapping, Namespaces};
    use crate::seccomp::{Program, SocketFamilies};

    fn refusals(x: &CopyFixture) -> Vec<String> {
        copy(&x.expect(), &x.snap)
    }

    /// The recording `name` without what its server opened after the checks.
    fn checked(name: &str) -> CopyFixture {
        let mut x = load_copy(name);
        let socket = x.socket_inode;
        fds(&mut x).retain(|f| f.num <= 2 || f.ino == socket);
        x
    }

    fn fds(x: &mut CopyFixture) -> &mut Vec<Fd> {
        x.snap.fds.as_mut().expect("fds")
    }

    fn set_status(x: &mut CopyFixture, key: &str, value: &str) {
        x.snap
            .status
            .as_mut()
            .expect("status")
            .insert(key.into(), value.into());
    }

    fn ns(x: &mut CopyFixture) -> &mut Namespaces {
        x.snap.namespaces.as_mut().expect("namespaces")
    }

    #[test]
    fn the_recordings_are_what_the_rules_assume() {
        let x = load_copy("copy_tool");
        assert_eq!(x.role, Role::Tool { parent: 9304 });
        assert_eq!(x.cgroup_rel, "germline/t9177-1-copy_reaper/copy-0");
        assert_eq!(x.facts.devnull_mnt_ids, vec![72]);
        let fds = x.snap.fds.as_ref().expect("fds");
        assert_eq!(fds[4].target, format!("socket:[{}]", x.socket_inode));
        assert_eq!(load_copy("copy_reaper").role, Role::Reaper);
        assert_eq!(load_copy("copy_sole").role, Role::Sole);
    }

    #[test]
    fn recorded_clean_copies_pass() {
        for name in ["copy_sole", "copy_reaper", "copy_tool"] {
            assert_eq!(refusals(&checked(name)), Vec::<String>::new(), "{name}");
        }
        // The recorded programs are the ones production expects, layer by layer.
        let x = load_copy("copy_sole");
        assert_eq!(x.snap.seccomp.as_ref().expect("seccomp"), &x.filters);
    }

    #[test]
    fn descriptors_the_recorded_server_opened_are_refused() {
        assert_eq!(
            refusals(&load_copy("copy_sole")),
            [
                "descriptor 3 is anon_inode:[eventpoll] (only /dev/null and the copy socket may be open)",
                "descriptor 5 is socket:[2208373] (only /dev/null and the copy socket may be open)",
                "descriptor 6 is socket:[2208374] (only /dev/null and the copy socket may be open)",
            ]
        );
    }

    #[test]
    fn a_second_thread_is_refused() {
        let mut x = checked("copy_sole");
        set_status(&mut x, "Threads", "2");
        assert_eq!(refusals(&x), ["the copy has 2 threads"]);
    }

    #[test]
    fn a_process_in_the_wrong_role_is_refused() {
        // The tool (PID 2) judged as a sole copy, the reaper (PID 1) as a tool of itself.
        let mut tool = checked("copy_tool");
        tool.role = Role::Sole;
        tool.snap.parent_namespaces = None;
        assert_eq!(
            refusals(&tool),
            ["the copy is not PID 1 of its PID namespace (NSpid 9309\t3\t2)"]
        );
        let mut reaper = checked("copy_reaper");
        reaper.role = Role::Tool { parent: 9304 };
        reaper.snap.parent_namespaces =
            Some(Ok(reaper.snap.namespaces.as_ref().expect("ns").clone()));
        assert_eq!(
            refusals(&reaper),
            [
                "the copy's tool is not PID 2 of its PID namespace (NSpid 9304\t2\t1)",
                "the copy's tool is a child of 9292, not of the copy's reaper 9304",
                "the copy socket is not open in the copy",
            ]
        );
    }

    #[test]
    fn capabilities_new_privileges_and_seccomp_mode_are_refused() {
        let mut x = checked("copy_sole");
        set_status(&mut x, "CapEff", "0000000000200000");
        set_status(&mut x, "CapAmb", "0000000000000001");
        set_status(&mut x, "NoNewPrivs", "0");
        set_status(&mut x, "Seccomp", "0");
        assert_eq!(
            refusals(&x),
            [
                "CapEff is 0000000000200000, not zero",
                "CapAmb is 0000000000000001, not zero",
                "NoNewPrivs is \"0\"",
                "Seccomp mode is \"0\"",
            ]
        );
    }

    #[test]
    fn the_copy_socket_must_be_in_the_tool_not_the_reaper() {
        let mut reaper = checked("copy_reaper");
        let socket = checked("copy_tool").snap.fds.expect("fds")[3].clone();
        fds(&mut reaper).push(socket);
        assert_eq!(
            refusals(&reaper),
            ["the copy's reaper still holds the copy socket"]
        );
        let mut tool = checked("copy_tool");
        fds(&mut tool).pop();
        assert_eq!(refusals(&tool), ["the copy socket is not open in the copy"]);
    }

    #[test]
    fn a_dev_null_of_another_mount_is_refused() {
        // Stdin on the host's /dev/null (same device, mount 30).
        let mut x = checked("copy_sole");
        fds(&mut x)[0].mnt_id = Some(30);
        assert_eq!(
            refusals(&x),
            ["descriptor 0 is /dev/null (only /dev/null and the copy socket may be open)"]
        );
    }

    #[test]
    fn a_shared_writable_mapping_is_refused() {
        let mut x = checked("copy_sole");
        x.snap.maps.as_mut().expect("maps").push(Mapping {
            range: "7f0000000000-7f0000001000".into(),
            perms: "rw-s".into(),
            dev: (0, 1),
            ino: 4242,
            path: "/dev/zero (deleted)".into(),
        });
        assert_eq!(
            refusals(&x),
            ["mapping: shared mapping 7f0000000000-7f0000001000 rw-s of \"/dev/zero (deleted)\""]
        );
    }

    #[test]
    fn namespaces_shared_with_the_germline_or_a_live_copy_are_refused() {
        let mut x = checked("copy_sole");
        let germline_net = x.germline_ns.net;
        ns(&mut x).net = germline_net;
        assert_eq!(
            refusals(&x),
            ["the copy shares its net namespace(s) with the germline"]
        );
        let mut x = checked("copy_sole");
        let mut other = x.snap.namespaces.as_ref().expect("ns").clone();
        other.net += 1;
        x.others = vec![Namespaces::default(), other];
        assert_eq!(
            refusals(&x),
            ["the copy shares its pid, ipc, uts, mnt namespace(s) with a live copy"]
        );
    }

    #[test]
    fn a_tool_outside_its_reapers_namespaces_is_refused() {
        let mut x = checked("copy_tool");
        if let Some(Ok(p)) = x.snap.parent_namespaces.as_mut() {
            p.mnt += 1;
        }
        assert_eq!(
            refusals(&x),
            ["the copy's tool is not in its reaper's namespaces"]
        );
    }

    #[test]
    fn a_copy_outside_its_own_cgroup_is_refused() {
        // The recorded copy expected in another cgroup: each controller that limits, freezes
        // or kills it says so; the unified line only on a cgroup v2 host.
        let mut x = checked("copy_sole");
        x.cgroup_rel = "germline/other/copy-1".into();
        let want = |ctrl: &str| {
            format!(
                "the copy's {ctrl:?} cgroup is /germline/t9177-0-copy_sole/copy-0, not its own \
                 /germline/other/copy-1"
            )
        };
        assert_eq!(
            refusals(&x),
            [want("pids"), want("freezer"), want("memory"), want("cpu")]
        );
        let mut x = checked("copy_sole");
        x.snap.cgroup_version = Some(Version::V2);
        assert_eq!(
            refusals(&x),
            ["the copy's \"\" cgroup is /, not its own /germline/t9177-0-copy_sole/copy-0"]
        );
    }

    #[test]
    fn seccomp_programs_other_than_expected_are_refused() {
        // The shim expects the copy layer with any socket family; a copy without its layer.
        let mut x = checked("copy_sole");
        x.filters[1] = Program::copy_with(SocketFamilies::Any);
        let n = |p: &Program| p.0.len();
        let (germline, copy, any) = (
            n(&Program::germline()),
            n(&Program::copy()),
            n(&x.filters[1]),
        );
        assert_eq!(
            refusals(&x),
            [format!(
                "the copy's seccomp filters (2 programs of [{germline}, {copy}] instructions) \
                 differ from the expected ones (2 programs of [{germline}, {any}]): layer 1 \
                 (the copy's)"
            )]
        );
        let mut x = checked("copy_sole");
        x.snap.seccomp.as_mut().expect("seccomp").truncate(1);
        assert_eq!(
            refusals(&x),
            [format!(
                "the copy's seccomp filters (1 programs of [{germline}] instructions) differ \
                 from the expected ones (2 programs of [{germline}, {copy}]): layer 1 (the \
                 copy's)"
            )]
        );
    }

    #[test]
    fn what_could_not_be_read_is_refused_in_order() {
        // Every reading of the recorded copy failed (the process is gone).
        let gone = || {
            Error::sys(
                "read /proc/1/x",
                std::io::Error::from_raw_os_error(libc::ESRCH),
            )
        };
        let mut x = checked("copy_tool");
        x.snap.status = Err(gone());
        x.snap.fds = Err(gone());
        x.snap.maps = Err(gone());
        x.snap.cgroups = Err(gone());
        x.snap.seccomp = Err(std::io::Error::from_raw_os_error(libc::ESRCH));
        x.snap.parent_namespaces = Some(Err(gone()));
        let e = "read /proc/1/x: No such process (os error 3)";
        assert_eq!(
            refusals(&x),
            [
                format!("cannot read the copy's status: {e}"),
                format!("cannot list the copy's descriptors: {e}"),
                format!("mapping: cannot read mappings: {e}"),
                format!("cannot read the reaper's namespaces: {e}"),
                format!("cannot read the copy's cgroups: {e}"),
                "cannot read the copy's seccomp filters: No such process (os error 3)".into(),
            ]
        );
        x.snap.namespaces = Err(gone());
        assert_eq!(
            refusals(&x)[3],
            format!("cannot read the copy's namespaces: {e}")
        );
    }
}
