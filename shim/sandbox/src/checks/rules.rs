//! The half of G1-G3 that judges: pure functions of what the shim knows of the germline
//! independently of it ([`GermlineFacts`]) and one [`GermlineSnapshot`]. Each returns the
//! reasons it refuses (empty: the germline may fork). No I/O here: the tests below run them on
//! `/proc` files recorded from real germlines (`tests/fixtures/proc/`), without root.

use std::collections::BTreeMap;

use super::snapshot::GermlineSnapshot;
use super::GermlineFacts;
use crate::error::Result;
use crate::procfs::Mapping;

pub(crate) fn status_field(st: &BTreeMap<String, String>, key: &str) -> String {
    st.get(key).cloned().unwrap_or_default()
}

/// `judge` on what was read; if it could not be read, the one reason `{unread}: {error}`.
pub(crate) fn judged<T, E: std::fmt::Display>(
    reading: &std::result::Result<T, E>,
    unread: &str,
    judge: impl FnOnce(&T) -> Vec<String>,
) -> Vec<String> {
    match reading {
        Ok(v) => judge(v),
        Err(e) => vec![format!("{unread}: {e}")],
    }
}

/// G1-G3 on the germline. A germline whose cgroup is empty is gone: that is the only reason
/// given then (nothing else can be read of it).
pub fn germline(facts: &GermlineFacts, snap: &GermlineSnapshot) -> Vec<String> {
    if snap.cgroup_procs.is_empty() {
        let pid = facts.pid;
        return vec![format!(
            "G1: the germline's cgroup holds no process: the germline {pid} is gone (it exited \
             or was killed)"
        )];
    }
    let mut bad = g1(facts, snap);
    bad.extend(g2(facts, snap));
    bad.extend(g3(facts, snap));
    bad.extend(judged(
        &snap.status,
        "G4: cannot read the germline's status",
        g4,
    ));
    bad
}

/// SIGCHLD's bit in a `SigIgn` mask (signal n is bit n - 1).
const SIGCHLD_BIT: u64 = 1 << (libc::SIGCHLD - 1);

/// G4: the germline ignores SIGCHLD (`SigIgn` of `/proc/G/status` has its bit), so the kernel
/// reaps its copies as they die and no exit status is left for it to read. A germline that
/// kept SIGCHLD could `waitpid` its copies and read an exit code each one chose (a copy can
/// `_exit(code)` before the shim kills it): a channel from a copy that held data to the
/// next copies. The shim reads it right after every refreeze as well as before each fork
/// ([`crate::Germline`]): the disposition cannot change while the germline is frozen, so a
/// germline found ignoring SIGCHLD then ignores it for every copy that dies until it is
/// next thawed.
pub fn g4(status: &BTreeMap<String, String>) -> Vec<String> {
    let ign = status_field(status, "SigIgn");
    match u64::from_str_radix(ign.trim(), 16) {
        Ok(mask) if mask & SIGCHLD_BIT != 0 => Vec::new(),
        Ok(_) => vec![format!(
            "G4: the germline does not ignore SIGCHLD (SigIgn {ign}): it could wait for its \
             copies and read the exit status each one chose"
        )],
        Err(_) => vec![format!(
            "G4: unreadable SigIgn {ign:?} in the germline's status"
        )],
    }
}

/// G1: the germline is the only process of its cgroup, with one thread.
pub fn g1(facts: &GermlineFacts, snap: &GermlineSnapshot) -> Vec<String> {
    let mut bad = Vec::new();
    let pid = facts.pid;
    let procs = &snap.cgroup_procs;
    if procs[..] != [pid] {
        bad.push(format!(
            "G1: the germline's cgroup holds processes {procs:?}, not only the germline {pid}"
        ));
    }
    if snap.cgroup_threads.len() != 1 {
        bad.push(format!(
            "G1: the germline's cgroup holds {} threads",
            snap.cgroup_threads.len()
        ));
    }
    bad.extend(judged(
        &snap.status,
        "G1: cannot read the germline's status",
        |st| {
            let n = status_field(st, "Threads");
            if n == "1" {
                Vec::new()
            } else {
                vec![format!("G1: the germline has {n} threads")]
            }
        },
    ));
    bad
}

/// G2: descriptors 0-2 are `/dev/null`, 3 is the control socket, any other one is
/// `/dev/null` or a file of the read-only rootfs (or of an extra mount).
pub fn g2(facts: &GermlineFacts, snap: &GermlineSnapshot) -> Vec<String> {
    judged(
        &snap.fds,
        "G2: cannot list the germline's descriptors",
        |fds| {
            let mut bad: Vec<String> = fds
                .iter()
                .filter(|f| {
                    !if f.num <= 2 {
                        facts.is_devnull(f)
                    } else {
                        (f.num == 3
                            && f.ino == facts.ctl_inode
                            && f.mode & libc::S_IFMT == libc::S_IFSOCK)
                            || facts.is_devnull(f)
                            || facts.is_rootfs_file(f)
                    }
                })
                .map(|f| {
                    format!(
                    "G2: descriptor {} is {} (not /dev/null, the control socket or a rootfs file)",
                    f.num, f.target
                )
                })
                .collect();
            if !fds.iter().any(|f| f.num == 3 && f.ino == facts.ctl_inode) {
                bad.push("G2: the control socket is not on descriptor 3".into());
            }
            bad
        },
    )
}

/// G3: shared mappings only of rootfs files, read-only.
pub fn g3(facts: &GermlineFacts, snap: &GermlineSnapshot) -> Vec<String> {
    shared_mappings(&snap.maps, facts.rootfs_dev, "G3")
}

/// Every shared mapping in `maps` that is not a read-only mapping of a file on `rootfs_dev`,
/// each reason starting with `tag` (the copy checks use it too).
pub fn shared_mappings(
    maps: &Result<Vec<Mapping>>,
    rootfs_dev: (u32, u32),
    tag: &str,
) -> Vec<String> {
    match maps {
        Ok(maps) => maps
            .iter()
            .filter(|m| m.perms.as_bytes().get(3) == Some(&b's'))
            .filter(|m| !(m.dev == rootfs_dev && m.ino != 0 && !m.perms.contains('w')))
            .map(|m| {
                format!(
                    "{tag}: shared mapping {} {} of {:?}",
                    m.range, m.perms, m.path
                )
            })
            .collect(),
        Err(e) => vec![format!("{tag}: cannot read mappings: {e}")],
    }
}

#[cfg(test)]
mod tests {
    //! G1-G3 on `/proc` files recorded from real germlines of the test releases
    //! (`tests/germline_checks.rs`, `record_proc_fixtures`): `plain` passes, each other one
    //! breaks one rule the way its release does; a few cases edit the clean recording where no
    //! release breaks a rule that way (said at each).

    use super::super::fixtures::{load, Fixture};
    use super::*;
    use crate::procfs::{major_minor, Fd};

    fn refusals(x: &Fixture) -> Vec<String> {
        germline(&x.facts, &x.snap)
    }

    #[test]
    fn the_recordings_are_what_the_rules_assume() {
        let x = load("plain");
        // The facts come from the recorded mountinfo: the read-only rootfs and /dev/null's bind.
        assert_eq!(x.facts.rootfs_dev, (254, 0));
        assert_eq!(x.facts.devnull_mnt_ids, vec![72]);
        let fds = x.snap.fds.as_ref().expect("fds");
        assert_eq!(fds.len(), 4);
        assert_eq!(major_minor(fds[0].rdev), (1, 3));
        assert_eq!(fds[3].target, format!("socket:[{}]", x.facts.ctl_inode));
    }

    #[test]
    fn a_recorded_clean_germline_passes_g1_to_g3() {
        assert_eq!(refusals(&load("plain")), Vec::<String>::new());
    }

    #[test]
    fn g1_a_recorded_second_thread_is_refused() {
        assert_eq!(
            refusals(&load("g1_thread")),
            [
                "G1: the germline's cgroup holds 2 threads",
                "G1: the germline has 2 threads",
            ]
        );
    }

    #[test]
    fn g1_a_recorded_second_process_is_refused() {
        assert_eq!(
            refusals(&load("g1_process")),
            [
                "G1: the germline's cgroup holds processes [17428, 17558], not only the germline 17428",
                "G1: the germline's cgroup holds 2 threads",
            ]
        );
    }

    #[test]
    fn g1_an_empty_cgroup_says_the_germline_is_gone_and_nothing_else() {
        // The clean recording with its cgroup emptied (the germline was killed).
        let mut x = load("plain");
        x.snap.cgroup_procs.clear();
        x.snap.cgroup_threads.clear();
        assert_eq!(
            refusals(&x),
            ["G1: the germline's cgroup holds no process: the germline 17184 is gone (it exited \
              or was killed)"]
        );
    }

    #[test]
    fn g2_a_recorded_pipe_is_refused() {
        assert_eq!(
            refusals(&load("o1_pipe")),
            [
                "G2: descriptor 4 is pipe:[949860] (not /dev/null, the control socket or a rootfs file)",
                "G2: descriptor 5 is pipe:[949860] (not /dev/null, the control socket or a rootfs file)",
            ]
        );
    }

    #[test]
    fn g2_a_recorded_read_only_dev_zero_is_refused() {
        assert_eq!(
            refusals(&load("g2_rodev")),
            ["G2: descriptor 4 is /dev/zero (not /dev/null, the control socket or a rootfs file)"]
        );
    }

    #[test]
    fn g2_a_dev_null_on_another_mount_is_refused() {
        // The clean recording with stdin on a /dev/null of another mount (the host's own,
        // passed in by someone), same device number: only the mount id tells.
        let mut x = load("plain");
        x.snap.fds.as_mut().expect("fds")[0].mnt_id = Some(30);
        assert_eq!(
            refusals(&x),
            ["G2: descriptor 0 is /dev/null (not /dev/null, the control socket or a rootfs file)"]
        );
    }

    #[test]
    fn g2_a_control_socket_off_descriptor_3_is_refused() {
        // The clean recording with the control socket moved from 3 to 7.
        let mut x = load("plain");
        x.snap.fds.as_mut().expect("fds")[3].num = 7;
        assert_eq!(
            refusals(&x),
            [
                "G2: descriptor 7 is socket:[949024] (not /dev/null, the control socket or a rootfs file)",
                "G2: the control socket is not on descriptor 3",
            ]
        );
    }

    #[test]
    fn g2_a_rootfs_file_may_stay_open() {
        // The clean recording with a file of the read-only rootfs open on 5.
        let mut x = load("plain");
        x.snap.fds.as_mut().expect("fds").push(Fd {
            num: 5,
            target: "/usr/lib/python3.11/os.py".into(),
            mnt_id: Some(x.facts.rootfs_mnt_id),
            dev: libc::makedev(254, 0),
            ino: 1234,
            rdev: 0,
            mode: libc::S_IFREG | 0o644,
        });
        assert_eq!(refusals(&x), Vec::<String>::new());
    }

    #[test]
    fn g4_a_germline_that_does_not_ignore_sigchld_is_refused() {
        // The clean recording with SIGCHLD (bit 16) taken out of SigIgn: the germline could
        // wait for its copies (tests/germline_checks.rs has the releases that do).
        let mut x = load("plain");
        let st = x.snap.status.as_mut().expect("status");
        assert_eq!(
            st.get("SigIgn").map(String::as_str),
            Some("0000000081011000")
        );
        st.insert("SigIgn".into(), "0000000081001000".into());
        assert_eq!(
            refusals(&x),
            [
                "G4: the germline does not ignore SIGCHLD (SigIgn 0000000081001000): it could \
              wait for its copies and read the exit status each one chose"
            ]
        );
        // Other bits do not matter; an unreadable mask refuses.
        st_set(&mut x, "0000000000010000");
        assert_eq!(refusals(&x), Vec::<String>::new());
        st_set(&mut x, "zz");
        assert_eq!(
            refusals(&x),
            ["G4: unreadable SigIgn \"zz\" in the germline's status"]
        );
    }

    fn st_set(x: &mut Fixture, sig_ign: &str) {
        x.snap
            .status
            .as_mut()
            .expect("status")
            .insert("SigIgn".into(), sig_ign.into());
    }

    #[test]
    fn g3_a_recorded_shared_anonymous_mapping_is_refused() {
        assert_eq!(
            refusals(&load("o2_shm")),
            ["G3: shared mapping 7f876a6f9000-7f876a6fa000 rw-s of \"/dev/zero (deleted)\""]
        );
    }

    #[test]
    fn g3_a_rootfs_file_may_be_shared_read_only_but_not_writable() {
        // The clean recording with a shared mapping of a rootfs file, read-only, then writable.
        let mut x = load("plain");
        let shared = |perms: &str| Mapping {
            range: "7f0000000000-7f0000001000".into(),
            perms: perms.into(),
            dev: (254, 0),
            ino: 1234,
            path: "/usr/share/zoneinfo/UTC".into(),
        };
        x.snap.maps.as_mut().expect("maps").push(shared("r--s"));
        assert_eq!(refusals(&x), Vec::<String>::new());
        x.snap.maps.as_mut().expect("maps").push(shared("rw-s"));
        assert_eq!(
            refusals(&x),
            ["G3: shared mapping 7f0000000000-7f0000001000 rw-s of \"/usr/share/zoneinfo/UTC\""]
        );
    }
}
