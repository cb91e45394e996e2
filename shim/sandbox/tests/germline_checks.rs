//! Checks before every fork (G1-G3; O1, O2) and the germline's own confinement (Landlock, no
//! network), each with the mechanism off and on where the paper's Table XII compares them.

mod common;

use std::io::ErrorKind;
use std::net::TcpListener;

use serde_json::json;

use germline_sandbox::{Error, Germline};

fn refused(name: &str, expect: &str) {
    let mut g = Germline::start(common::test_release(name), common::opts(name)).expect("start");
    match g.call(&[], "echo", json!({"text": "hi"})) {
        Err(Error::Refused(reason)) => assert!(
            reason.contains(expect),
            "{name}: refused for {reason:?}, expected {expect}"
        ),
        other => panic!("{name}: expected a refusal for {expect}, got {other:?}"),
    }
    assert!(g.stray_processes().is_empty() || name == "g1_process");
    // The release stays refused.
    assert!(matches!(
        g.call(&[], "echo", json!({"text": "hi"})),
        Err(Error::Refused(_))
    ));
    assert!(g.status().refused.is_some());
    g.stop().expect("stop");
}

/// Mechanism off: the channel the initialisation kept carries data from one call's copy to
/// the next one's.
fn leaks_when_off(name: &str) {
    let mut opts = common::opts(name);
    opts.ablation.skip_germline_checks = true;
    opts.ablation.skip_copy_checks = true;
    let mut g = Germline::start(common::test_release(name), opts).expect("start");
    assert_eq!(
        common::call_text(&mut g, "stash", json!({"text": "secret-of-call-1"})).expect("stash"),
        "stashed"
    );
    assert_eq!(
        common::call_text(&mut g, "peek", json!({})).expect("peek"),
        "secret-of-call-1"
    );
    g.stop().expect("stop");
}

#[test]
fn o1_pipe_leaks_when_off_and_is_refused_when_on() {
    if !common::can_run() {
        return;
    }
    leaks_when_off("o1_pipe");
    refused("o1_pipe", "G2: descriptor");
}

#[test]
fn o2_shared_memory_leaks_when_off_and_is_refused_when_on() {
    if !common::can_run() {
        return;
    }
    leaks_when_off("o2_shm");
    refused("o2_shm", "G3: shared mapping");
}

#[test]
fn g1_a_thread_left_by_initialisation_is_refused() {
    if !common::can_run() {
        return;
    }
    refused("g1_thread", "G1: the germline has 2 threads");
}

#[test]
fn g1_a_second_process_left_by_initialisation_is_refused() {
    if !common::can_run() {
        return;
    }
    refused("g1_process", "G1: the germline's cgroup holds processes");
}

#[test]
fn g2_a_sealed_memfd_or_a_read_only_device_off_the_rootfs_is_refused() {
    if !common::can_run() {
        return;
    }
    refused("g2_memfd", "/memfd:stash");
    refused("g2_rodev", "is /dev/zero (not /dev/null");
}

const G4: &str = "G4: the germline does not ignore SIGCHLD";

#[test]
fn g4_a_germline_that_keeps_sigchld_reads_exit_statuses_when_off_and_is_refused_when_on() {
    if !common::can_run() {
        return;
    }
    // Off: the first copy ends itself with its data's first byte ("A", 65) as exit status; the
    // germline reaps it when it is thawed for the next fork, and the next copy reads it.
    let mut opts = common::opts("g4_sigchld");
    opts.ablation.skip_germline_checks = true;
    let mut g = Germline::start(common::test_release("g4_sigchld"), opts).expect("start");
    let crashed = g.call(&[], "stash", json!({"text": "A"}));
    assert!(crashed.is_err(), "the copy ended itself: {crashed:?}");
    assert_eq!(
        common::call_text(&mut g, "peek", json!({})).expect("peek"),
        "65"
    );
    g.stop().expect("stop");
    // On: refused before its first copy, saying why.
    refused("g4_sigchld", G4);
}

#[test]
fn g4_is_read_right_after_each_refreeze() {
    if !common::can_run() {
        return;
    }
    // SIGCHLD is ignored whenever the germline is checked before a fork, and caught from the
    // fork on: only the read right after the refreeze sees it, and the copy it forked is
    // killed before any data reaches it.
    refused("g4_flip", G4);
}

#[test]
fn a_well_behaved_germline_passes_g1_to_g3() {
    if !common::can_run() {
        return;
    }
    let mut g =
        Germline::start(common::test_release("plain"), common::opts("plain")).expect("start");
    assert_eq!(g.check(), Vec::<String>::new());
    assert_eq!(
        common::call_text(&mut g, "echo", json!({"text": "hi"})).expect("call"),
        "hi"
    );
    g.stop().expect("stop");
}

fn secret_file() {
    let dir = std::path::Path::new(germline_sandbox::spec::DEFAULT_PYTHON_ROOTFS).join("secret");
    std::fs::create_dir_all(&dir).expect("mkdir secret");
    std::fs::write(dir.join("credentials"), "hunter2").expect("write secret");
}

#[test]
fn landlock_denies_reads_outside_the_allowlist_during_initialisation() {
    if !common::can_run() {
        return;
    }
    secret_file();
    let mut opts = common::opts("ll-off");
    opts.ablation.no_landlock = true;
    let mut g = Germline::start(common::test_release("init_probe"), opts).expect("start");
    let off = common::json_of(&common::call_text(&mut g, "init_report", json!({})).expect("call"));
    g.stop().expect("stop");
    assert_eq!(
        off["secret"], "hunter2",
        "without Landlock the initialisation reads the file"
    );

    let mut g =
        Germline::start(common::test_release("init_probe"), common::opts("ll-on")).expect("start");
    let on = common::json_of(&common::call_text(&mut g, "init_report", json!({})).expect("call"));
    g.stop().expect("stop");
    assert_eq!(on["secret"], "EACCES", "{on}");
}

#[test]
fn initialisation_cannot_open_a_network_connection() {
    if !common::can_run() {
        return;
    }
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let port = listener.local_addr().expect("addr").port();
    let mut spec = common::test_release("init_probe");
    spec.entry.extend(["--port".to_string(), port.to_string()]);
    let mut g = Germline::start(spec, common::opts("net")).expect("start");
    let r = common::json_of(&common::call_text(&mut g, "init_report", json!({})).expect("call"));
    g.stop().expect("stop");
    assert_ne!(r["net"], "connected", "{r}");
    assert!(
        matches!(listener.accept(), Err(e) if e.kind() == ErrorKind::WouldBlock),
        "the host listener was reached"
    );
}

/// Issue 25: the germline's own layer (installed by the shim before any release code) has the
/// socket family allowlist too, so the initialisation cannot open AF_VSOCK or AF_NETLINK
/// either; without the allowlist it can open AF_NETLINK (and AF_VSOCK where the host has it).
#[test]
fn initialisation_cannot_open_vsock_or_netlink_sockets() {
    if !common::can_run() {
        return;
    }
    let mut opts = common::opts("init-sockets-off");
    opts.ablation.any_socket_family = true;
    let mut g = Germline::start(common::test_release("init_probe"), opts).expect("start");
    let off = common::json_of(&common::call_text(&mut g, "init_report", json!({})).expect("call"));
    g.stop().expect("stop");
    assert_eq!(off["sockets"]["AF_NETLINK"], "ok", "{off}");

    let mut g = Germline::start(
        common::test_release("init_probe"),
        common::opts("init-sockets-on"),
    )
    .expect("start");
    let on = common::json_of(&common::call_text(&mut g, "init_report", json!({})).expect("call"));
    g.stop().expect("stop");
    assert_eq!(
        on["sockets"],
        json!({"AF_VSOCK": "EAFNOSUPPORT", "AF_NETLINK": "EAFNOSUPPORT"}),
        "{on}"
    );
}

/// The descriptors of `pid` as the fixtures record them: one a line, as `procfs::fds` reads
/// them (number, mode in octal, device, inode, rdev, mount id or `-`, link target).
fn recorded_fds(pid: i32) -> String {
    germline_sandbox::procfs::fds(pid)
        .expect("fds")
        .iter()
        .map(|f| {
            let mnt = f.mnt_id.map_or("-".to_string(), |m| m.to_string());
            format!(
                "{} {:o} {} {} {} {mnt} {}\n",
                f.num, f.mode, f.dev, f.ino, f.rdev, f.target
            )
        })
        .collect()
}

/// Records what G1-G3 read of real germlines into `$GERMLINE_RECORD_FIXTURES/<release>/`, the
/// fixtures of the rules' unit tests (`src/checks/rules.rs`, `tests/fixtures/proc/`): `status`,
/// `maps` and `mountinfo` as the kernel wrote them, `cgroup.procs` and `cgroup.threads` of the
/// germline's cgroup, `fds` (one descriptor a line as `procfs::fds` reads it: number, mode in
/// octal, device, inode, rdev, mount id or `-`, link target) and `shim` (the germline's pid
/// and the control socket's inode, which the shim knows on its own). Run as root:
/// `GERMLINE_RECORD_FIXTURES=shim/sandbox/tests/fixtures/proc cargo test -p germline-sandbox
/// --test germline_checks -- --ignored record_proc_fixtures`.
#[test]
#[ignore = "records fixtures; run by hand"]
fn record_proc_fixtures() {
    let Ok(out) = std::env::var("GERMLINE_RECORD_FIXTURES") else {
        panic!("set GERMLINE_RECORD_FIXTURES to the fixtures directory");
    };
    assert!(common::can_run());
    for name in [
        "plain",
        "g1_thread",
        "g1_process",
        "o1_pipe",
        "g2_rodev",
        "o2_shm",
    ] {
        let g = Germline::start(common::test_release(name), common::opts(name)).expect("start");
        let dir = std::path::Path::new(&out).join(name);
        std::fs::create_dir_all(&dir).expect("mkdir");
        let pid = g.pid();
        for file in ["status", "maps", "mountinfo"] {
            let text = std::fs::read_to_string(format!("/proc/{pid}/{file}")).expect("read");
            std::fs::write(dir.join(file), text).expect("write");
        }
        let lines = |ids: Vec<i32>| ids.iter().map(|i| format!("{i}\n")).collect::<String>();
        let procs = g.cgroup().procs().expect("procs");
        let threads = g.cgroup().threads().expect("threads");
        std::fs::write(dir.join("cgroup.procs"), lines(procs)).expect("write");
        std::fs::write(dir.join("cgroup.threads"), lines(threads)).expect("write");
        std::fs::write(dir.join("fds"), recorded_fds(pid)).expect("write");
        let facts = g.facts();
        std::fs::write(
            dir.join("shim"),
            format!("pid {pid}\nctl_inode {}\n", facts.ctl_inode),
        )
        .expect("write");
        drop(g);
    }
}

/// Records what the copy checks read of real copies of the `plain` release into
/// `$GERMLINE_RECORD_FIXTURES/copy_<role>/`, the fixtures of the copy rules' unit tests
/// (`src/checks/copy_rules.rs`): `copy_sole` (a copy without reaper), `copy_reaper` and
/// `copy_tool` (PID 1 and PID 2 of one copy under a reaper). Each holds `status`, `maps` and
/// `cgroup` as the kernel wrote them, `fds` (as in `record_proc_fixtures`), `ns` (`kind inode`
/// a line), `seccomp` (one program a line, in hex, oldest first) and `shim`: what the shim
/// knows on its own (the germline's pid, control socket inode and namespaces, the copy's
/// cgroup, and the copy socket's inode: the socket the copy holds, as the checks that passed
/// before it was recorded found it) plus the germline's `mountinfo`. Run as root:
/// `GERMLINE_RECORD_FIXTURES=shim/sandbox/tests/fixtures/proc cargo test -p germline-sandbox
/// --test germline_checks -- --ignored record_copy_proc_fixtures`.
#[test]
#[ignore = "records fixtures; run by hand"]
fn record_copy_proc_fixtures() {
    use germline_sandbox::checks::read_seccomp_filters;
    use germline_sandbox::procfs::{self, Namespaces};
    let Ok(out) = std::env::var("GERMLINE_RECORD_FIXTURES") else {
        panic!("set GERMLINE_RECORD_FIXTURES to the fixtures directory");
    };
    assert!(common::can_run());
    let ns_lines = |ns: &Namespaces| {
        format!(
            "pid {}\nnet {}\nipc {}\nuts {}\nmnt {}\nuser {}\n",
            ns.pid, ns.net, ns.ipc, ns.uts, ns.mnt, ns.user
        )
    };
    for reaper in [false, true] {
        let mut opts = common::opts(if reaper { "copy_reaper" } else { "copy_sole" });
        opts.reaper = reaper;
        let mut g = Germline::start(common::test_release("plain"), opts).expect("start");
        let copy = g.copy().expect("copy");
        let socket_pid = copy.tool_pid().unwrap_or(copy.pid());
        let socket_inode = procfs::fds(socket_pid)
            .expect("fds")
            .iter()
            .find(|f| f.target.starts_with("socket:"))
            .expect("the copy socket")
            .ino;
        let processes = match copy.tool_pid() {
            None => vec![("copy_sole", copy.pid(), None)],
            Some(tool) => vec![
                ("copy_reaper", copy.pid(), None),
                ("copy_tool", tool, Some(copy.pid())),
            ],
        };
        for (name, pid, parent) in processes {
            let dir = std::path::Path::new(&out).join(name);
            std::fs::create_dir_all(&dir).expect("mkdir");
            for file in ["status", "maps", "cgroup"] {
                let text = std::fs::read_to_string(format!("/proc/{pid}/{file}")).expect("read");
                std::fs::write(dir.join(file), text).expect("write");
            }
            let mountinfo =
                std::fs::read_to_string(format!("/proc/{}/mountinfo", g.pid())).expect("read");
            std::fs::write(dir.join("mountinfo"), mountinfo).expect("write");
            std::fs::write(dir.join("fds"), recorded_fds(pid)).expect("write");
            let ns = Namespaces::of(pid).expect("namespaces");
            std::fs::write(dir.join("ns"), ns_lines(&ns)).expect("write");
            let seccomp: String = read_seccomp_filters(pid)
                .expect("seccomp")
                .iter()
                .map(|p| format!("{}\n", p.to_hex()))
                .collect();
            std::fs::write(dir.join("seccomp"), seccomp).expect("write");
            let parent = parent.map_or(String::new(), |p| format!("parent {p}\n"));
            std::fs::write(
                dir.join("shim"),
                format!(
                    "pid {}\nctl_inode {}\nsocket_inode {socket_inode}\ncgroup_rel {}\n{parent}{}",
                    g.pid(),
                    g.facts().ctl_inode,
                    copy.cgroup().rel(),
                    ns_lines(g.namespaces())
                        .lines()
                        .map(|l| format!("germline_{l}\n"))
                        .collect::<String>()
                ),
            )
            .expect("write");
        }
        drop(copy);
        drop(g);
    }
}
