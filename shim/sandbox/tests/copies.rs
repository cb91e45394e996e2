//! The copies: O3 with the PID namespace off and on, isolation between copies (live and
//! time-shifted), items outside the view, hijacked bootstraps, the pool, both SDK styles.

mod common;

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use germline_sandbox::seccomp::{Program, SocketFamilies};
use germline_sandbox::{Error, Germline, Language};

fn strays_after(g: &Germline) -> usize {
    // The kernel tears a PID namespace down asynchronously; give it a moment.
    let t = Instant::now();
    loop {
        let n = g.stray_processes().len();
        if n == 0 || t.elapsed() > Duration::from_millis(500) {
            return n;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn o3_a_left_child_survives_without_the_pid_namespace_and_dies_with_it() {
    if !common::can_run() {
        return;
    }
    // Off: copies share the germline's PID namespace (the copy checks would refuse that, so
    // they are off too) and only the copy's own process is killed.
    let mut opts = common::opts("o3-off");
    opts.ablation.no_pid_namespace = true;
    opts.ablation.skip_copy_checks = true;
    opts.ablation.no_cgroup_sweep = true;
    let mut g = Germline::start(common::test_release("plain"), opts).expect("start");
    let r = common::call_text(&mut g, "leave_child", json!({})).expect("call");
    assert!(r.starts_with("left"), "{r}");
    assert_eq!(
        strays_after(&g),
        1,
        "with the PID namespace off one process outlives the call"
    );
    g.stop().expect("stop");

    // On: the copy is PID 1 of its own namespace; still no cgroup sweep.
    let mut opts = common::opts("o3-on");
    opts.ablation.no_cgroup_sweep = true;
    let mut g = Germline::start(common::test_release("plain"), opts).expect("start");
    common::call_text(&mut g, "leave_child", json!({})).expect("call");
    assert_eq!(
        strays_after(&g),
        0,
        "with the PID namespace on nothing outlives the call"
    );
    g.stop().expect("stop");
}

fn assert_found_nothing(p: &Value, who: &str) {
    assert_eq!(p["secret_seen"], false, "{who}: {p}");
    assert_ne!(
        p["abstract"], "ok",
        "{who} reached the abstract socket: {p}"
    );
    assert_ne!(p["tcp"], "ok", "{who} reached loopback TCP: {p}");
    assert_eq!(p["sysv"], "ENOENT", "{who} found the SysV segment: {p}");
    assert_eq!(p["hostname"], "copy", "{who}: {p}");
    // Its private procfs shows only itself, and Landlock keeps even that from it.
    assert_eq!(p["proc"], "EACCES", "{who}: {p}");
    assert_eq!(
        p["run_proc"],
        json!(["1"]),
        "{who} sees other processes in its procfs: {p}"
    );
    assert_eq!(
        p["signalable"],
        json!([]),
        "{who} can signal other processes: {p}"
    );
    assert_eq!(p["kill_all"], "ESRCH", "{who}: {p}");
    for m in p["memory"].as_array().into_iter().flatten() {
        assert_ne!(m, "ok", "{who} read another copy's memory: {p}");
    }
}

#[test]
fn copies_are_isolated_from_each_other_live_and_over_time() {
    if !common::can_run() {
        return;
    }
    let mut spec = common::test_release("plain");
    spec.scratch = true;
    let mut opts = common::opts("iso");
    opts.pool = 1;
    let mut g = Germline::start(spec, opts).expect("start");
    let items = vec![
        ("doc".to_string(), b"doc-contents".to_vec(), true),
        ("hidden".to_string(), b"s3cr3t".to_vec(), false),
    ];

    // The working copy A: sees its view only, then plants the secret everywhere it can.
    let mut a = g.copy().expect("copy A");
    g.refill_pool().expect("refill the pool before A gets data");
    common::wait_pool_ready(&mut g);
    g.prepare_copy(&mut a, &items).expect("mounts");
    a.deliver(&items).expect("deliver");
    let seen = common::json_of(&common::text(
        &a.mcp_call("items", json!({})).expect("items"),
    ));
    assert_eq!(
        seen["fds"],
        json!({"doc": "doc-contents", "hidden": ""}),
        "by fd: {seen}"
    );
    assert_eq!(
        seen["files"],
        json!({"doc": "doc-contents", "hidden": ""}),
        "by path: {seen}"
    );
    let planted = common::json_of(&common::text(
        &a.mcp_call("plant_all", json!({"secret": "s3cr3t"}))
            .expect("plant"),
    ));
    // Writes: only the scratch tmpfs; no hostname, no keyring.
    assert_eq!(planted["/run/scratch/plant"], "ok", "{planted}");
    for path in [
        "/tmp/plant",
        "/dev/shm/plant",
        "/app/plant",
        "/run/items/plant",
        "/plant",
    ] {
        assert_ne!(planted[path], "ok", "A wrote {path}: {planted}");
    }
    assert_eq!(planted["hostname"], "EPERM", "{planted}");
    assert_eq!(planted["keyring"], "EPERM", "{planted}");

    // The pool copy B, alive during A's call, looks for A while A is alive.
    let mut b = g.copy().expect("copy B from the pool");
    g.prepare_copy(&mut b, &[]).expect("mounts");
    b.deliver(&[]).expect("deliver");
    let pids = json!([a.pid(), 1, 2]);
    let found = common::json_of(&common::text(
        &b.mcp_call("probe_all", json!({"secret": "s3cr3t", "other_pids": pids}))
            .expect("probe"),
    ));
    assert_found_nothing(&found, "a live pool copy");
    for path in ["/tmp/plant", "/run/scratch/plant", "/dev/shm/plant"] {
        assert_ne!(found[path], "s3cr3t", "{found}");
    }
    let _ = a.finish(Ok(Value::Null));
    let _ = b.finish(Ok(Value::Null));

    // Time-shifted: A is dead; copy C of a later call looks.
    let r = g
        .call(
            &[],
            "probe_all",
            json!({"secret": "s3cr3t", "other_pids": []}),
        )
        .expect("probe later");
    assert_found_nothing(&common::json_of(&common::text(&r)), "a later copy");
    assert_eq!(strays_after(&g), 0);
    g.stop().expect("stop");
}

fn hijacked(mode: &str, expect: &str) {
    hijacked_with(mode, expect, false)
}

fn hijacked_with(mode: &str, expect: &str, reaper: bool) {
    let mut spec = common::test_release("hijack");
    spec.env.push(format!("HIJACK={mode}"));
    let mut opts = common::opts(&format!("hijack-{mode}"));
    opts.reaper = reaper;
    let mut g = Germline::start(spec, opts).expect("start");
    match g.call(&[], "echo", json!({"text": "hi"})) {
        Err(Error::Refused(reason)) => assert!(reason.contains(expect), "{mode}: {reason}"),
        other => panic!("a bootstrap hijacked to skip {mode} was not refused: {other:?}"),
    }
    assert_eq!(strays_after(&g), 0, "{mode}: the refused copy was killed");
    g.stop().expect("stop");
}

#[test]
fn a_bootstrap_hijacked_by_the_release_is_caught_from_outside() {
    if !common::can_run() {
        return;
    }
    hijacked("namespaces", "the copy is not PID 1 of its PID namespace");
    hijacked("capabilities", "CapEff is");
    hijacked("seccomp", "seccomp filters");
    hijacked("fork_twice", "expected one new child of the germline");
    // And the untampered release passes.
    let mut g = Germline::start(common::test_release("hijack"), common::opts("hijack-none"))
        .expect("start");
    assert_eq!(
        common::call_text(&mut g, "echo", json!({"text": "hi"})).expect("call"),
        "hi"
    );
    g.stop().expect("stop");
}

/// Issue 25: a copy whose bootstrap installs the copy layer without its socket family
/// allowlist (the exact program the shim sends, minus those instructions) is refused by the
/// outside check of the filter bytes.
#[test]
fn a_copy_layer_without_the_socket_allowlist_is_refused() {
    if !common::can_run() {
        return;
    }
    let stripped = Program::copy_with(SocketFamilies::Any);
    assert_ne!(stripped, Program::copy());
    let mut spec = common::test_release("hijack");
    spec.env.push("HIJACK=seccomp_sockets".into());
    spec.env
        .push(format!("HIJACK_FILTER={}", stripped.to_hex()));
    let mut g = Germline::start(spec, common::opts("hijack-sockets")).expect("start");
    match g.call(&[], "echo", json!({"text": "hi"})) {
        Err(Error::Refused(reason)) => assert!(
            reason.contains("seccomp filters") && reason.contains("layer 1"),
            "{reason}"
        ),
        other => panic!("a copy layer without the allowlist was not refused: {other:?}"),
    }
    assert_eq!(strays_after(&g), 0, "the refused copy was killed");
    g.stop().expect("stop");
}

/// Whether this host's kernel lets root create a socket of `family` (of any of the types the
/// copy tries): what a copy could reach without the allowlist.
fn host_opens(family: libc::c_int) -> bool {
    [
        libc::SOCK_STREAM,
        libc::SOCK_DGRAM,
        libc::SOCK_SEQPACKET,
        libc::SOCK_RAW,
    ]
    .into_iter()
    .any(|kind| {
        // SAFETY: socket takes no pointers; a descriptor it returns is closed at once.
        let fd = unsafe { libc::socket(family, kind | libc::SOCK_CLOEXEC, 0) };
        if fd >= 0 {
            // SAFETY: fd was just returned by socket and is owned here.
            unsafe { libc::close(fd) };
        }
        fd >= 0
    })
}

/// Issue 25, "copies reach only the broker": with the socket family allowlist a copy opens
/// AF_UNIX, AF_INET and AF_INET6 sockets (and glibc's getaddrinfo, whose netlink probe is
/// refused, still answers) and every other family fails with EAFNOSUPPORT, as do first
/// arguments with upper bits set; without it the kernel's own answers come back (AF_NETLINK
/// opens, AF_VSOCK too on a host with a vsock transport).
#[test]
fn copies_open_only_unix_inet_and_inet6_sockets() {
    if !common::can_run() {
        return;
    }
    let probe = |name: &str, any: bool| {
        let mut opts = common::opts(name);
        opts.ablation.any_socket_family = any;
        let mut g = Germline::start(common::test_release("plain"), opts).expect("start");
        let r = common::json_of(&common::call_text(&mut g, "sockets", json!({})).expect("call"));
        let k = common::json_of(&common::call_text(&mut g, "kernel", json!({})).expect("call"));
        g.stop().expect("stop");
        (r, k)
    };
    let (off, _) = probe("sockets-off", true);
    let (on, kernel) = probe("sockets-on", false);
    eprintln!("allowlist off: {off}\nallowlist on: {on}");

    // Off: the kernel decides.
    assert_eq!(off["refused"]["AF_NETLINK"], "ok", "{off}");
    if host_opens(libc::AF_VSOCK) {
        assert_eq!(off["refused"]["AF_VSOCK"], "ok", "{off}");
    }
    assert_eq!(
        off["raw"]["AF_UNIX+hi"], "ok",
        "the kernel reads the family as an int: {off}"
    );

    // On: every family but the three fails the same way, whatever the kernel offers.
    let refused = on["refused"].as_object().expect("refused families");
    assert!(refused.len() >= 40, "{on}");
    for name in [
        "AF_VSOCK",
        "AF_NETLINK",
        "AF_PACKET",
        "AF_ALG",
        "AF_BLUETOOTH",
        "AF_KEY",
        "AF_XDP",
        "AF_CAN",
        "AF_TIPC",
        "AF_VSOCK pair",
        "AF_NETLINK pair",
    ] {
        assert!(refused.contains_key(name), "{name} was not tried: {on}");
    }
    for (name, got) in refused {
        assert_eq!(got, "EAFNOSUPPORT", "{name} with the allowlist: {on}");
    }
    for label in [
        "AF_UNIX+hi",
        "AF_INET+hi",
        "AF_INET6 all-ones hi",
        "socketpair AF_UNIX+hi",
    ] {
        assert_eq!(on["raw"][label], "EAFNOSUPPORT", "{label}: {on}");
    }

    // Both: what an MCP server needs works.
    for (which, r) in [("off", &off), ("on", &on)] {
        let allowed = r["allowed"].as_object().expect("allowed families");
        assert_eq!(allowed.len(), 8, "{r}");
        for (name, got) in allowed {
            assert_eq!(got, "ok", "{name} with the allowlist {which}: {r}");
        }
        assert_eq!(r["raw"]["AF_INET"], "ok", "{which}: {r}");
    }

    // The other ways past the broker a copy could try (io_uring's IORING_OP_SOCKET among
    // them) are refused before the kernel reads an argument.
    #[cfg(target_arch = "x86_64")]
    {
        let calls = kernel.as_object().expect("kernel calls");
        assert_eq!(calls.len(), 11, "{kernel}");
        for (name, got) in calls {
            assert_eq!(got, "EPERM", "{name} in a copy: {kernel}");
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = kernel;
}

/// docs/sandbox.md, "The tool is PID 2": with the reaper off the tool is PID 1 of its copy's
/// namespace, with it on PID 2 under PID 1 (fresh and pool copies alike); descendants still
/// die with the copy (O3, with the cgroup sweep off so that only the namespace kills them), a
/// crashing tool still closes the channel at once, and the checks refuse a reaper that keeps
/// the copy socket or a third process.
#[test]
fn under_the_reaper_the_tool_is_pid_2_and_the_copy_stays_checked_and_killed_whole() {
    if !common::can_run() {
        return;
    }
    let pids =
        |g: &mut Germline| common::json_of(&common::call_text(g, "pids", json!({})).expect("pids"));
    let mut g =
        Germline::start(common::test_release("plain"), common::opts("reaper-off")).expect("start");
    let off = pids(&mut g);
    g.stop().expect("stop");
    assert_eq!(
        (&off["pid"], &off["run_proc"]),
        (&json!(1), &json!(["1"])),
        "{off}"
    );

    let mut opts = common::opts("reaper-on");
    opts.reaper = true;
    opts.pool = 1;
    opts.ablation.no_cgroup_sweep = true;
    let mut g = Germline::start(common::test_release("plain"), opts).expect("start");
    common::wait_pool_ready(&mut g);
    let pool_copy = g.pool_pids()[0];
    let tool = procfs_children(pool_copy);
    assert_eq!(tool.len(), 1, "a pool copy holds its tool: {tool:?}");
    for who in ["pool copy", "fresh copy"] {
        let on = pids(&mut g);
        assert_eq!(
            (&on["pid"], &on["ppid"], &on["run_proc"]),
            (&json!(2), &json!(1), &json!(["1", "2"])),
            "{who}: {on}"
        );
    }
    common::call_text(&mut g, "leave_child", json!({})).expect("call");
    assert_eq!(
        strays_after(&g),
        0,
        "a left child dies with the copy's namespace"
    );
    let t = Instant::now();
    match g.call(&[], "crash", json!({})) {
        Err(Error::Crashed(_)) => {}
        other => panic!("a crashing tool: {other:?}"),
    }
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "the crash was seen when the tool died, not at the deadline: {:?}",
        t.elapsed()
    );
    g.stop().expect("stop");

    hijacked_with(
        "reaper_socket",
        "the copy's reaper still holds the copy socket",
        true,
    );
    hijacked_with("reaper_extra", "not one tool", true);
}

fn procfs_children(pid: i32) -> Vec<i32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

#[test]
fn the_pool_hands_out_checked_copies_and_is_refilled_between_calls() {
    if !common::can_run() {
        return;
    }
    let mut opts = common::opts("pool");
    opts.pool = 2;
    let mut g = Germline::start(common::time_spec(), opts).expect("start");
    assert_eq!(g.pool_len(), 2);
    for _ in 0..3 {
        let r = g
            .call(&[], "get_current_time", json!({"timezone": "Asia/Tokyo"}))
            .expect("call");
        assert!(common::text(&r).contains("Asia/Tokyo"), "{r}");
        assert_eq!(g.pool_len(), 2);
    }
    assert!(
        g.cgroup().is_frozen(),
        "the germline is frozen between calls"
    );
    g.stop().expect("stop");
}

/// A retired copy is frozen at once, with what it left behind (no task of it runs again), and
/// killed between calls, once the answer is out; its exit is then off the answer's way. With
/// the PID namespace off (no namespace whose PID 1 takes every task with it), its cgroup is
/// killed at once instead.
#[test]
fn a_retired_copy_is_frozen_with_its_descendants_and_killed_between_calls() {
    if !common::can_run() {
        return;
    }
    let mut g =
        Germline::start(common::test_release("plain"), common::opts("retire")).expect("start");
    let mut c = g.copy().expect("copy");
    let r = c.mcp_call("leave_child", json!({})).expect("call");
    assert!(common::text(&r).starts_with("left"), "{r}");
    let pid = c.pid();
    let _ = g.retire(c, Ok(Value::Null));
    let left = g.stray_processes();
    assert!(left.contains(&pid), "the retired copy waits: {left:?}");
    assert_eq!(left.len(), 2, "the copy and the child it left: {left:?}");
    assert_eq!(
        groups_reach(&left, true),
        vec![Some(true); 2],
        "frozen, the child too"
    );
    // Between calls (what `germline run` does once the answer is out).
    g.refill_pool().expect("between calls");
    assert_eq!(strays_after(&g), 0, "killed between calls");
    assert_eq!(
        common::call_text(&mut g, "echo", json!({"text": "next"})).expect("the next call"),
        "next"
    );
    g.stop().expect("stop");

    let mut opts = common::opts("retire-nopidns");
    opts.ablation.no_pid_namespace = true;
    opts.ablation.skip_copy_checks = true;
    let mut g = Germline::start(common::test_release("plain"), opts).expect("start");
    let mut c = g.copy().expect("copy");
    c.mcp_call("leave_child", json!({})).expect("call");
    let _ = g.retire(c, Ok(Value::Null));
    assert_eq!(strays_after(&g), 0, "killed at once, nothing waits frozen");
    g.stop().expect("stop");
}

/// Whether the group of `pid` is frozen, from `/proc/PID/cgroup` and that group's
/// `cgroup.events` (v2) or `freezer.state` (v1): what the kernel says, not what the shim asked.
fn cgroup_frozen(pid: i32) -> Option<bool> {
    let lines = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    if germline_sandbox::cgroup::version() == germline_sandbox::cgroup::Version::V2 {
        let rel = lines
            .lines()
            .find_map(|l| l.strip_prefix("0::").map(str::to_string))?;
        let events = std::fs::read_to_string(format!("/sys/fs/cgroup{rel}/cgroup.events")).ok()?;
        events
            .lines()
            .find_map(|l| l.strip_prefix("frozen ").map(|v| v == "1"))
    } else {
        let rel = lines
            .lines()
            .find_map(|l| l.split_once(":freezer:").map(|(_, r)| r.to_string()))?;
        let state =
            std::fs::read_to_string(format!("/sys/fs/cgroup/freezer{rel}/freezer.state")).ok()?;
        Some(state.trim() == "FROZEN")
    }
}

/// Waits (bounded) until every pid's group is frozen (`want`) or thawed: the shim only asks,
/// the kernel freezes asynchronously.
fn groups_reach(pids: &[i32], want: bool) -> Vec<Option<bool>> {
    let t = Instant::now();
    loop {
        let now: Vec<Option<bool>> = pids.iter().map(|&p| cgroup_frozen(p)).collect();
        if now.iter().all(|f| *f == Some(want)) || t.elapsed() > Duration::from_secs(5) {
            return now;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// While a call runs, the copies still waiting in the pool are frozen (their warming and
/// handshake would compete with the call's copy for the CPU); a frozen one taken by a later
/// copy of the same call is thawed and answers; between calls the pool is thawed again.
#[test]
fn the_pool_waits_frozen_while_a_call_runs_and_is_thawed_between_calls() {
    if !common::can_run() {
        return;
    }
    let mut opts = common::opts("poolfreeze");
    opts.pool = 2;
    let mut g = Germline::start(common::time_spec(), opts).expect("start");
    let waiting = g.pool_pids();
    assert_eq!(waiting.len(), 2);
    assert_eq!(
        groups_reach(&waiting, false),
        vec![Some(false); 2],
        "an idle pool runs"
    );
    // The call's first copy is taken only from ready ones.
    common::wait_pool_ready(&mut g);

    let mut first = g.copy().expect("first copy");
    let rest = g.pool_pids();
    assert_eq!(rest.len(), 1);
    assert_eq!(
        groups_reach(&rest, true),
        vec![Some(true)],
        "the rest of the pool waits frozen"
    );
    assert_eq!(
        cgroup_frozen(first.pid()),
        Some(false),
        "the call's copy runs"
    );

    // A second copy of the same call takes the frozen one: thawed, it answers.
    let mut second = g.copy().expect("second copy");
    assert_eq!(
        second.pid(),
        rest[0],
        "the waiting pool copy was handed out"
    );
    assert_eq!(groups_reach(&rest, false), vec![Some(false)]);
    for c in [&mut first, &mut second] {
        let r = c
            .mcp_call("get_current_time", json!({"timezone": "Asia/Tokyo"}))
            .expect("call");
        assert!(common::text(&r).contains("Asia/Tokyo"), "{r}");
    }
    let _ = g.retire(first, Ok(Value::Null));
    let _ = g.retire(second, Ok(Value::Null));

    // Between calls: refilled, and nothing in the pool is frozen; a call takes one and
    // freezes the other, and a stop with a frozen pool copy leaves nothing behind.
    g.refill_pool().expect("refill");
    common::wait_pool_ready(&mut g);
    let waiting = g.pool_pids();
    assert_eq!(waiting.len(), 2);
    assert_eq!(
        groups_reach(&waiting, false),
        vec![Some(false); 2],
        "thawed between calls"
    );
    let c = g.copy().expect("copy");
    let frozen = g.pool_pids();
    assert_eq!(groups_reach(&frozen, true), vec![Some(true)]);
    let _ = g.retire(c, Ok(Value::Null));

    // A call that begins (before its Plan) freezes the pool but the copy it takes next,
    // which it then takes running; the other stays frozen.
    g.refill_pool().expect("refill");
    common::wait_pool_ready(&mut g);
    let waiting = g.pool_pids();
    assert_eq!(groups_reach(&waiting, false), vec![Some(false); 2]);
    g.call_begins();
    assert_eq!(
        groups_reach(&waiting[1..], true),
        vec![Some(true)],
        "frozen from the call's start"
    );
    assert_eq!(cgroup_frozen(waiting[0]), Some(false), "the next copy runs");
    let mut c = g.copy().expect("copy");
    assert_eq!(c.pid(), waiting[0]);
    assert_eq!(cgroup_frozen(c.pid()), Some(false));
    let r = c
        .mcp_call("get_current_time", json!({"timezone": "UTC"}))
        .expect("the thawed copy answers");
    assert!(common::text(&r).contains("UTC"), "{r}");
    let frozen = g.pool_pids();
    assert_eq!(groups_reach(&frozen, true), vec![Some(true)]);
    let _ = g.retire(c, Ok(Value::Null));
    g.stop().expect("stop");
    let t = Instant::now();
    while frozen
        .iter()
        .any(|p| std::path::Path::new(&format!("/proc/{p}")).exists())
        && t.elapsed() < Duration::from_secs(5)
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        !frozen
            .iter()
            .any(|p| std::path::Path::new(&format!("/proc/{p}")).exists()),
        "a pool copy frozen at stop was killed"
    );
}

/// A pool copy gets its data-free mounts and its MCP handshake while it waits: its call finds
/// its items (by path and by fd, empty outside the view) exactly as a freshly forked copy's
/// does, and it announced the pool's client capabilities. A pool copy that announced others
/// than a call's is retired unused and a fresh copy forked for the call.
#[test]
fn a_pool_copy_is_mounted_and_initialized_before_its_call() {
    if !common::can_run() {
        return;
    }
    let items = [
        ("a".to_string(), b"alpha".to_vec(), true),
        ("b".to_string(), b"beta".to_vec(), false),
    ];
    let mut answers = Vec::new();
    for pool in [0, 1] {
        let mut opts = common::opts(&format!("poolinit{pool}"));
        opts.pool = pool;
        let mut g = Germline::start(common::test_release("plain"), opts).expect("start");
        common::wait_pool_ready(&mut g);
        let made = g.status().copies_made;
        let r = g.call(&items, "items", json!({})).expect("items");
        if pool == 1 {
            // The call's copy came from the pool (the one forked after it is the refill).
            assert_eq!(g.status().copies_made, made + 1, "pool copy used");
        }
        answers.push(common::json_of(&common::text(&r)));
        g.stop().expect("stop");
    }
    assert_eq!(
        answers[0], answers[1],
        "a pool copy sees what a fresh one does"
    );
    assert_eq!(answers[1]["files"]["a"], json!("alpha"), "{}", answers[1]);
    assert_eq!(answers[1]["files"]["b"], json!(""), "{}", answers[1]);

    let mut opts = common::opts("poolcaps");
    opts.pool = 1;
    let mut g = Germline::start(common::test_release("plain"), opts).expect("start");
    let sampling = json!({"sampling": {}});
    // The pool copy announced none: a call announcing sampling does not get it.
    let made = g.status().copies_made;
    let mut c = g.copy_for(&sampling).expect("copy");
    assert_eq!(g.status().copies_made, made + 1, "a fresh copy was forked");
    assert_eq!(g.pool_len(), 0, "the pool copy was retired");
    assert_eq!(c.initialized_with(), Some(&sampling));
    let r = c.mcp_call("client_caps", json!({})).expect("caps");
    assert_eq!(common::json_of(&common::text(&r)), sampling);
    let _ = g.retire(c, Ok(Value::Null));
    // Refilled with the call's capabilities, the pool copy serves the next such call.
    g.set_pool_capabilities(&sampling);
    g.refill_pool().expect("refill");
    common::wait_pool_ready(&mut g);
    let made = g.status().copies_made;
    let mut c = g.copy_for(&sampling).expect("copy");
    assert_eq!(g.status().copies_made, made, "the pool copy was used");
    let r = c.mcp_call("client_caps", json!({})).expect("caps");
    assert_eq!(common::json_of(&common::text(&r)), sampling);
    let _ = g.retire(c, Ok(Value::Null));
    g.stop().expect("stop");
}

#[test]
fn a_low_level_server_on_asyncio_works_unmodified() {
    if !common::can_run() {
        return;
    }
    let mut g =
        Germline::start(common::test_release("lowlevel"), common::opts("lowlevel")).expect("start");
    assert_eq!(
        common::call_text(&mut g, "shout", json!({"text": "hi"})).expect("call"),
        "HI"
    );
    g.stop().expect("stop");
}

#[test]
fn a_multi_threaded_runtime_is_refused_with_the_reason() {
    let mut spec = common::time_spec();
    spec.language = Language::Node;
    match Germline::start(spec, common::opts("node")) {
        Err(Error::Refused(r)) => assert!(r.contains("G1") && r.contains("spawned"), "{r}"),
        other => panic!("a Node.js release was not refused: {other:?}"),
    }
    // A Python release whose manifest asks for spawned copies gets no germline either.
    let mut spec = common::time_spec();
    spec.execution = germline_sandbox::Execution::Spawn;
    match Germline::start(spec, common::opts("pyspawn")) {
        Err(Error::Refused(r)) => assert!(r.contains("Spawn execution"), "{r}"),
        other => panic!("a spawn release got a germline: {other:?}"),
    }
}
