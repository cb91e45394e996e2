//! Every fault recovers (issue 25, items 5 and 10): a germline that dies, or whose keeper
//! dies, is restarted as the broker is; the call in flight when it dies gets an error naming
//! the germline, its pid and how it ended; one that keeps dying is refused with why and what
//! to do; and a `germline run` that fails to start leaves nothing behind.
//!
//! Each drives a real `germline run` with the official MCP Python SDK as the agent
//! (tests/run/agent.py, `run_common`).

mod run_common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use run_common::*;
use serde_json::{json, Value};

/// The status file (crate::status) of the `germline run` that `agent` started, once it tells
/// of at least `calls` calls. The file is written by a thread of its own after each call
/// (engine::status), so right after an answer it may still hold the state before that call:
/// a germline pid read from it then may be the one just killed. Every answered call, refused or
/// not, counts in `calls`, so a file that counts the calls answered so far is current.
fn status_of(agent: &AgentRun, calls: u64) -> Value {
    let t = Instant::now();
    let mut last = None;
    while t.elapsed() < Duration::from_secs(30) {
        if let Some(v) = status_once(agent) {
            if v["calls"].as_u64().is_some_and(|n| n >= calls) {
                return v;
            }
            last = Some(v);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!(
        "no status file of a germline run under agent {} that counts {calls} calls (last read: \
         {last:?}; its processes: {:?})",
        agent.pid(),
        descendants(agent.pid())
    );
}

fn status_once(agent: &AgentRun) -> Option<Value> {
    let family = descendants(agent.pid());
    let rd = std::fs::read_dir("/run/germline/status").ok()?;
    for e in rd.flatten() {
        let Ok(text) = std::fs::read_to_string(e.path()) else {
            continue;
        };
        let Ok(v) = serde_json::from_str::<Value>(&text) else {
            continue;
        };
        if v["pid"]
            .as_i64()
            .is_some_and(|p| family.contains(&(p as i32)))
        {
            return Some(v);
        }
    }
    None
}

/// The germline's pid, from a status file that counts at least `calls` calls.
fn germline_pid(agent: &AgentRun, calls: u64) -> i32 {
    status_of(agent, calls)["germline_pid"]
        .as_i64()
        .expect("germline_pid") as i32
}

/// The parent of `pid` (the germline's keeper).
fn parent(pid: i32) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let rest = stat.rsplit_once(") ").expect("stat").1;
    rest.split(' ')
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("ppid")
}

fn sigkill(pid: i32) {
    // SAFETY: kill(2) on a pid this test found as a descendant of its own agent.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0, "kill {pid}");
}

/// Under cgroup v1's freezer a frozen germline dies of SIGKILL only when thawed (under v2 at
/// once): thaw its freezer cgroup, so the kill lands now, as it does on a cgroup v2 host.
fn let_kill_land(pid: i32) {
    let cg = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    for line in cg.lines() {
        let mut f = line.splitn(3, ':');
        let (_, ctl, path) = (f.next(), f.next(), f.next());
        if ctl == Some("freezer") {
            let state = format!("/sys/fs/cgroup/freezer{}/freezer.state", path.unwrap_or(""));
            let _ = std::fs::write(state, "THAWED");
        }
    }
}

fn texts(lines: &[Value]) -> Vec<String> {
    lines.iter().map(text).collect()
}

#[test]
fn a_germline_or_keeper_killed_between_calls_is_restarted_and_answers_as_before() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let sink = Sink::start(w.path(), "ocr");
    let policy = w.policy(sink.port, "");
    let go = |n: u32| w.path().join(format!("go-{n}"));
    let summarize = json!({"tool": "summarize", "arguments": {"text": "one two three"}});
    let annotate = json!({"tool": "ocr_annotate", "arguments": {
        "invoice": w.invoice.display().to_string(),
        "salary_sheet": w.salary.display().to_string()}});
    let script = json!([
        summarize, annotate,
        {"wait_file": go(1).display().to_string()},
        summarize, annotate,
        {"wait_file": go(2).display().to_string()},
        summarize, annotate,
        // Held open until the status is read: the run's status file goes with the run.
        {"wait_file": go(3).display().to_string()},
    ]);
    let agent = AgentRun::start(
        w.path(),
        &script,
        &run_cmd(
            &policy,
            "germline",
            "germline-office",
            w.path(),
            &["--pool", "1", "--no-evidence"],
        ),
    );
    let first = [agent.next(), agent.next()];
    assert!(first.iter().all(|l| l["ok"] == json!(true)), "{first:?}");
    let before = texts(&first);
    let status0 = status_of(&agent, 2);

    // 1. kill -9 of the germline between calls.
    let g1 = germline_pid(&agent, 2);
    sigkill(g1);
    std::fs::write(go(1), "").expect("go");
    let second = [agent.next(), agent.next()];
    assert_eq!(texts(&second), before, "{second:?}");
    assert!(second.iter().all(|l| l["ok"] == json!(true)), "{second:?}");
    let g2 = germline_pid(&agent, 4);
    assert_ne!(g1, g2, "a fresh germline serves the calls after a kill");
    assert!(wait_gone(g1), "the killed germline {g1} is gone");

    // 2. kill -9 of its keeper (the germline dies with it).
    let keeper = parent(g2);
    sigkill(keeper);
    std::fs::write(go(2), "").expect("go");
    let third = [agent.next(), agent.next()];
    assert_eq!(texts(&third), before, "{third:?}");
    let g3 = germline_pid(&agent, 6);
    assert_ne!(g2, g3);
    assert!(
        wait_gone(g2),
        "the germline {g2} of the killed keeper is gone"
    );
    let status = status_of(&agent, 6);
    assert_eq!(
        status["germlines_started"].as_u64(),
        status0["germlines_started"].as_u64().map(|n| n + 2),
        "two restarts: {status}"
    );
    std::fs::write(go(3), "").expect("go");
    assert!(agent.finish(), "the agent's session ended well");
}

#[test]
fn a_germline_killed_during_a_call_fails_that_call_by_name_and_the_next_call_works() {
    if !can_run() {
        return;
    }
    let w = World::new();
    // ocr.example accepts connections and never answers: the call stays in flight.
    let hang = std::net::TcpListener::bind("127.0.0.1:0").expect("listener");
    let port = hang.local_addr().expect("addr").port();
    let policy = w.policy(
        port,
        "\n[[argument]]\ntool = \"ocr_text\"\nname = \"text\"\nlabel = []\n",
    );
    let go = w.path().join("go");
    let summarize = json!({"tool": "summarize", "arguments": {"text": "one two three"}});
    let script = json!([
        summarize,
        {"tool": "ocr_text", "arguments": {"text": "hello"}},
        {"wait_file": go.display().to_string()},
        summarize,
        summarize,
        // Held open until the status is read: the run's status file goes with the run.
        {"wait_file": w.path().join("done").display().to_string()},
    ]);
    let agent = AgentRun::start(
        w.path(),
        &script,
        &run_cmd(
            &policy,
            "germline",
            "germline-office",
            w.path(),
            &["--no-evidence"],
        ),
    );
    let first = agent.next();
    assert_eq!(first["ok"], json!(true), "{first}");
    // The copy's request reached ocr.example through the broker: the call is in flight.
    hang.set_nonblocking(true).expect("nonblocking");
    let t = Instant::now();
    let _held = loop {
        match hang.accept() {
            Ok((c, _)) => break c,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                assert!(
                    t.elapsed() < Duration::from_secs(60),
                    "no request reached ocr.example"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("accept: {e}"),
        }
    };
    // The call in flight is not counted yet: one answered.
    let g = germline_pid(&agent, 1);
    sigkill(g);
    let_kill_land(g);
    let failed = agent.next();
    let err = failed["error"].as_str().unwrap_or_default().to_string();
    assert_eq!(failed["ok"], json!(false), "{failed}");
    assert!(
        err.contains(&format!(
            "the germline (pid {g}) died: killed by signal 9 (SIGKILL) during this call"
        )) && err.contains("a fresh germline serves the next call"),
        "the in-flight call names the germline, its pid and how it ended: {err}"
    );
    std::fs::write(&go, "").expect("go");
    for _ in 0..2 {
        let l = agent.next();
        assert_eq!(text(&l), text(&first), "{l}");
    }
    assert_ne!(germline_pid(&agent, 4), g);
    std::fs::write(w.path().join("done"), "").expect("done");
    assert!(agent.finish());
}

#[test]
fn a_germline_that_keeps_dying_is_refused_with_why_and_what_to_do() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let sink = Sink::start(w.path(), "ocr");
    let policy = w.policy(sink.port, "");
    let go = |n: u32| w.path().join(format!("go-{n}"));
    let summarize = json!({"tool": "summarize", "arguments": {"text": "one two three"}});
    let mut steps = vec![summarize.clone()];
    for n in 1..=4 {
        steps.push(json!({"wait_file": go(n).display().to_string()}));
        steps.push(summarize.clone());
    }
    steps.push(summarize.clone());
    // Held open until the status is read: the run's status file goes with the run.
    steps.push(json!({"wait_file": go(5).display().to_string()}));
    let agent = AgentRun::start(
        w.path(),
        &Value::Array(steps),
        &run_cmd(
            &policy,
            "germline",
            "germline-office",
            w.path(),
            // A window longer than the test on a loaded machine (the default is 60 s).
            &["--no-evidence", "--germline-restart-window", "600"],
        ),
    );
    let first = agent.next();
    assert_eq!(first["ok"], json!(true), "{first}");
    let t = Instant::now();
    for n in 1..=3 {
        // n calls answered: the first and one after each restart so far.
        sigkill(germline_pid(&agent, u64::from(n)));
        std::fs::write(go(n), "").expect("go");
        let l = agent.next();
        assert_eq!(text(&l), text(&first), "restart {n}: {l}");
    }
    let started = status_of(&agent, 4)["germlines_started"].as_u64();
    sigkill(germline_pid(&agent, 4));
    std::fs::write(go(4), "").expect("go");
    for _ in 0..2 {
        let l = agent.next();
        let err = l["error"].as_str().unwrap_or_default().to_string();
        assert!(
            err.contains("the germline died again after 3 restarts within 600 s")
                && err.contains("killed by signal 9 (SIGKILL)")
                && err.contains("not restarted again")
                && err.contains("OOM killer"),
            "{l}"
        );
    }
    assert!(
        t.elapsed() < Duration::from_secs(600),
        "the test ran within its restart window"
    );
    assert_eq!(
        status_of(&agent, 6)["germlines_started"].as_u64(),
        started,
        "no germline was started once refused"
    );
    std::fs::write(go(5), "").expect("go");
    assert!(agent.finish());
}

/// What a `germline run` may leave on this host: /run/germline's entries and the germline
/// cgroups of every hierarchy.
fn host_state() -> (Vec<String>, Vec<String>) {
    let list = |dir: &str| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .map(|rd| {
                rd.flatten()
                    .map(|e| format!("{dir}/{}", e.file_name().to_string_lossy()))
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    };
    let mut cgroups = Vec::new();
    for base in [
        "/sys/fs/cgroup",
        "/sys/fs/cgroup/unified",
        "/sys/fs/cgroup/memory",
        "/sys/fs/cgroup/pids",
        "/sys/fs/cgroup/freezer",
        "/sys/fs/cgroup/cpu",
    ] {
        cgroups.extend(list(&format!("{base}/germline")));
    }
    (list("/run/germline"), cgroups)
}

/// Processes whose command line names `pid`'s session or CA directories or cgroups.
fn processes_naming(pid: u32) -> Vec<String> {
    let needles = [
        format!("session-{pid}"),
        format!("ca-{pid}-"),
        format!("run-{pid}-"),
    ];
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(b) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let c = String::from_utf8_lossy(&b).replace('\0', " ");
        if needles.iter().any(|n| c.contains(n.as_str())) {
            out.push(c);
        }
    }
    out
}

/// A hard-linked copy of the germline-office bundle (files are replaced, never written).
fn bundle_copy(dir: &Path, name: &str) -> PathBuf {
    let out = dir.join(name);
    let st = Command::new("cp")
        .arg("-al")
        .arg(bundle("germline-office"))
        .arg(&out)
        .status()
        .expect("cp");
    assert!(st.success());
    out
}

#[test]
fn every_failed_start_leaves_nothing_behind() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let sink = Sink::start(w.path(), "ocr");
    let policy = w.policy(sink.port, "");
    // A well-formed key that is not the publisher's.
    let st = Command::new(germline())
        .args(["keygen", "--output-key-prefix", "other", "--dir"])
        .arg(w.path())
        .env("COSIGN_PASSWORD", "x")
        .stdout(Stdio::null())
        .status()
        .expect("keygen");
    assert!(st.success(), "keygen");
    let bad_key = w.path().join("other.pub");
    let tampered = bundle_copy(w.path(), "tampered");
    std::fs::write(tampered.join("rootfs/usr/tampered.txt"), "x").expect("tamper");
    let bad_policy = w.path().join("bad-policy.toml");
    std::fs::write(&bad_policy, "[destinations\n").expect("policy");
    // A release signed by the right key whose initialisation fails (its module is missing).
    let broken = bundle_copy(w.path(), "broken-init");
    let manifest = broken.join("rootfs/.germline/manifest.json");
    let mut m: Value =
        serde_json::from_slice(&std::fs::read(&manifest).expect("manifest")).expect("json");
    m["entry"] = json!(["/usr/bin/python3", "-m", "germline_examples.no_such_module"]);
    m["initialisation"]["imports"] = json!(["germline_examples.no_such_module"]);
    let sig = broken.join("rootfs/.germline/manifest.sigstore.json");
    // Unlink first: the files are hard links to the original bundle's.
    std::fs::remove_file(&manifest).expect("unlink");
    std::fs::remove_file(&sig).expect("unlink");
    std::fs::write(&manifest, serde_json::to_vec_pretty(&m).expect("json")).expect("write");
    let st = Command::new(germline())
        .args(["release", "sign", "--key"])
        .arg(root().join("bundles/out/keys/cosign.key"))
        .arg("--release")
        .arg(&broken)
        .env("COSIGN_PASSWORD", "germline-example-test-key")
        .stdout(Stdio::null())
        .status()
        .expect("sign");
    assert!(st.success(), "re-sign the broken release");
    // The broker cannot keep its state in a regular file.
    let not_a_dir = w.path().join("state-file");
    std::fs::write(&not_a_dir, "").expect("file");

    let key = key().display().to_string();
    let cmd = |policy: &Path, key: &str, release: &Path, state: &Path| -> Vec<String> {
        vec![
            "run".into(),
            "--policy".into(),
            policy.display().to_string(),
            "--key".into(),
            key.into(),
            "--mode".into(),
            "germline".into(),
            "--no-evidence".into(),
            "--state-dir".into(),
            state.display().to_string(),
            release.display().to_string(),
        ]
    };
    let good = bundle("germline-office");
    let state = w.path().join("state");
    let cases: Vec<(&str, Vec<String>, &str)> = vec![
        (
            "bad key",
            cmd(&policy, &bad_key.display().to_string(), &good, &state),
            "refused",
        ),
        (
            "tampered release",
            cmd(&policy, &key, &tampered, &state),
            "refused",
        ),
        (
            "bad policy",
            cmd(&bad_policy, &key, &good, &state),
            "bad-policy.toml",
        ),
        (
            "germline init failure",
            cmd(&policy, &key, &broken, &state),
            "the germline did not start",
        ),
        (
            "broker start failure",
            cmd(&policy, &key, &good, &not_a_dir),
            "broker",
        ),
    ];
    // Shared directories (status, limits) exist from earlier runs: make them exist here too.
    let _ = std::fs::create_dir_all("/run/germline/status");
    let mut failures = Vec::new();
    for (what, args, says) in cases {
        let before = host_state();
        let mut child = Command::new(germline())
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("germline run");
        let pid = child.id();
        let mut err = String::new();
        child
            .stderr
            .take()
            .expect("stderr")
            .read_to_string(&mut err)
            .expect("stderr");
        let st = child.wait().expect("wait");
        assert!(!st.success(), "{what}: the start fails");
        assert!(err.contains(says), "{what}: {err}");
        // The broker sidecar dies with its parent (PR_SET_PDEATHSIG); give it a moment.
        let t = Instant::now();
        while !processes_naming(pid).is_empty() && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let after = host_state();
        // Other sessions may run on this host meanwhile: only what names this start's pid.
        let own = |e: &&String| {
            let name = e.rsplit('/').next().unwrap_or_default();
            [
                format!("session-{pid}"),
                format!("serve-{pid}"),
                format!("ca-{pid}-"),
                format!("run-{pid}-"),
            ]
            .iter()
            .any(|p| name == p.as_str() || (p.ends_with('-') && name.starts_with(p.as_str())))
        };
        let left: Vec<&String> = after
            .0
            .iter()
            .filter(|e| !before.0.contains(e))
            .filter(own)
            .collect();
        let cg: Vec<&String> = after
            .1
            .iter()
            .filter(|e| !before.1.contains(e))
            .filter(own)
            .collect();
        let procs = processes_naming(pid);
        if !(left.is_empty() && cg.is_empty() && procs.is_empty()) {
            failures.push(format!(
                "{what} (pid {pid}) left /run/germline {left:?}, cgroups {cg:?}, processes {procs:?}"
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
