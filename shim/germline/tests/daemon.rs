//! `germline daemon` (docs/daemon.md): users who are not root run releases through it, with
//! the official MCP Python SDK spawning exactly the command line a client's configuration
//! holds (`germline run --daemon SOCKET --policy ... --key ... RELEASE`), as an unprivileged
//! uid. The test, as root, makes the users (`germtest`, `germtest2`), starts the daemon on a
//! socket of its own and runs each agent with `setpriv` as one of them.

mod run_common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use run_common::*;
use serde_json::{json, Value};

/// A local user (made if absent): name, uid, gid.
#[derive(Clone)]
struct User {
    name: &'static str,
    uid: u32,
    gid: u32,
}

fn user(name: &'static str) -> User {
    let id = |flag: &str| -> Option<u32> {
        let out = Command::new("id").args([flag, name]).output().ok()?;
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    };
    if id("-u").is_none() {
        let made = Command::new("useradd")
            .args(["-M", "-s", "/usr/sbin/nologin", name])
            .status()
            .expect("useradd");
        assert!(made.success(), "useradd {name}");
    }
    User {
        name,
        uid: id("-u").expect("uid"),
        gid: id("-g").expect("gid"),
    }
}

/// `setpriv` as `u`: its uid, its gid, no other group (what a desktop session's process has
/// of root's: nothing).
fn as_user(u: &User) -> Command {
    let mut c = Command::new("setpriv");
    c.arg("--reuid")
        .arg(u.uid.to_string())
        .arg("--regid")
        .arg(u.gid.to_string())
        .arg("--clear-groups")
        .arg("--")
        .env("HOME", "/tmp");
    c
}

/// The daemon under test, on a socket of its own; stopped (SIGTERM) when dropped.
struct Daemon {
    child: Child,
    socket: PathBuf,
    log: PathBuf,
}

impl Daemon {
    fn start(dir: &Path) -> Daemon {
        let socket = dir.join("daemon.sock");
        let log = dir.join("daemon.log");
        let child = Command::new(germline())
            .args(["daemon", "--socket"])
            .arg(&socket)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log"))
            .spawn()
            .expect("germline daemon");
        let t = Instant::now();
        while !socket.exists() {
            assert!(t.elapsed() < Duration::from_secs(20), "no daemon socket");
            std::thread::sleep(Duration::from_millis(20));
        }
        Daemon { child, socket, log }
    }

    /// The daemon as systemd starts it: `systemd-socket-activate` listens (as the socket
    /// unit does) and execs `germline daemon` on the first connection, the socket as fd 3
    /// (`LISTEN_FDS`). `None` without systemd-socket-activate.
    fn activated(dir: &Path) -> Option<Daemon> {
        let socket = dir.join("activated.sock");
        let log = dir.join("activated.log");
        let child = Command::new("systemd-socket-activate")
            .arg("--seqpacket")
            .arg("-l")
            .arg(&socket)
            .arg(germline())
            .arg("daemon")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log"))
            .spawn()
            .ok()?;
        let t = Instant::now();
        while !socket.exists() {
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "no activation socket"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // What SocketMode=0666 of config/germline-daemon.socket sets.
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).expect("chmod");
        Some(Daemon { child, socket, log })
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The pids of the sessions it started for `uid`, in order.
    fn sessions(&self, uid: u32) -> Vec<i32> {
        let tail = format!(" for uid {uid} ");
        self.log()
            .lines()
            .filter(|l| l.contains(&tail))
            .filter_map(|l| {
                l.strip_prefix("germline daemon: session ")?
                    .split_whitespace()
                    .next()?
                    .parse()
                    .ok()
            })
            .collect()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // SAFETY: kill(2) of our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

/// The world, readable by the test's users (a tempdir is 0700), and its policy.
fn world() -> (World, PathBuf) {
    let w = World::new();
    std::fs::set_permissions(w.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let policy = w.policy(
        9,
        "\n[[argument]]\ntool = \"add_note\"\nname = \"text\"\nlabel = []\n\
         [[argument]]\ntool = \"summarize\"\nname = \"text\"\nlabel = []\n",
    );
    std::fs::set_permissions(&policy, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    (w, policy)
}

/// The command line a client's configuration holds for `release`, through `daemon`.
fn client_cmd(d: &Daemon, policy: &Path, release: &str) -> Vec<String> {
    vec![
        germline().display().to_string(),
        "run".into(),
        "--daemon".into(),
        d.socket.display().to_string(),
        "--policy".into(),
        policy.display().to_string(),
        "--key".into(),
        key().display().to_string(),
        bundle(release).display().to_string(),
    ]
}

/// The SDK agent (tests/run/agent.py) run as `u` on `script`, spawning `server` (as `u`).
fn agent_as(u: &User, dir: &Path, script: &Value, server: &[String]) -> Child {
    let sp = dir.join(format!("script-{:x}.json", rand_u64()));
    std::fs::write(&sp, script.to_string()).expect("script");
    std::fs::set_permissions(&sp, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let stderr = dir.join(format!("agent-{}-{:x}.log", u.name, rand_u64()));
    as_user(u)
        .arg(agent_python())
        .arg(root().join("tests/run/agent.py"))
        .arg(&sp)
        .arg("--")
        .args(server)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(stderr).expect("stderr"))
        .spawn()
        .expect("agent")
}

/// The calls' lines of a whole agent run as `u`; panics if the agent failed.
fn run_as(u: &User, dir: &Path, script: &Value, server: &[String]) -> Vec<Value> {
    let out = agent_as(u, dir, script, server)
        .wait_with_output()
        .expect("agent");
    assert!(out.status.success(), "the agent as {} failed", u.name);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l.get("tool").is_some())
        .collect()
}

/// The cgroup directories of `germline run` process `pid`'s germlines, in every hierarchy.
fn run_cgroups(pid: i32) -> Vec<PathBuf> {
    let prefix = format!("run-{pid}-");
    let mut roots = vec![PathBuf::from("/sys/fs/cgroup/germline")];
    for e in std::fs::read_dir("/sys/fs/cgroup")
        .into_iter()
        .flatten()
        .flatten()
    {
        roots.push(e.path().join("germline"));
    }
    roots
        .into_iter()
        .flat_map(|r| std::fs::read_dir(r).into_iter().flatten().flatten())
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix))
        })
        .collect()
}

#[test]
fn a_user_without_root_runs_a_release_and_reads_only_their_own_files() {
    if !can_run() {
        return;
    }
    let alice = user("germtest");
    let (w, policy) = world();
    let d = Daemon::start(w.path());
    // The user's own file, and a root-only one; both under rules, so only permissions differ.
    let mine = w.path().join("home/alice/finance/notes.txt");
    std::fs::write(&mine, "alpha beta gamma delta\n").expect("write");
    std::os::unix::fs::chown(&mine, Some(alice.uid), Some(alice.gid)).expect("chown");
    std::fs::set_permissions(&mine, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    std::fs::set_permissions(&w.salary, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    for dir in ["home", "home/alice", "home/alice/finance", "home/alice/hr"] {
        std::fs::set_permissions(w.path().join(dir), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
    }
    let script = json!([
        {"tool": "summarize", "arguments": {"text": "one two three"}},
        {"tool": "summarize", "arguments": {"text": mine.display().to_string()}},
        {"tool": "summarize", "arguments": {"text": w.salary.display().to_string()}},
    ]);
    let out = run_as(
        &alice,
        w.path(),
        &script,
        &client_cmd(&d, &policy, "germline-office"),
    );
    assert_eq!(out.len(), 3, "{out:?}");
    assert_eq!(out[0]["ok"], true, "{}", out[0]);
    assert_eq!(text(&out[0]), "3 words; starts with: one two three");
    // Her own file becomes an item (the copy sees it under /run/items).
    assert_eq!(out[1]["ok"], true, "{}", out[1]);
    assert!(text(&out[1]).contains("/run/items/"), "{}", out[1]);
    // Root's file is refused, by name, before anything runs; its contents reach nothing.
    let e = out[2]["error"].as_str().unwrap_or_default();
    assert_eq!(out[2]["ok"], false, "{}", out[2]);
    assert!(
        e.contains(&format!("cannot read {}", w.salary.display()))
            && e.contains("permission denied"),
        "{e}"
    );
    let all = serde_json::to_string(&out).expect("json");
    assert!(!all.contains(&w.canary_hr), "{all}");
    // The session ran as root for her uid, with her state directory (root-only).
    let sessions = d.sessions(alice.uid);
    assert_eq!(sessions.len(), 1, "{}", d.log());
    let state = PathBuf::from(format!("/var/lib/germline/users/{}", alice.uid));
    let meta = std::fs::metadata(&state).expect("her state directory");
    assert_eq!(meta.permissions().mode() & 0o777, 0o700);
    assert!(state.join("ca/ca.pem").exists(), "her broker's CA is hers");
    assert!(d
        .log()
        .contains(&format!("session {} ended with status 0", sessions[0])));
}

#[test]
fn what_the_user_cannot_read_or_may_not_ask_for_is_refused() {
    if !can_run() {
        return;
    }
    let alice = user("germtest");
    let (w, policy) = world();
    let d = Daemon::start(w.path());
    let cmd = client_cmd(&d, &policy, "germline-office");
    let run = |args: &[String]| {
        let out = as_user(&alice)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("germline run");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // A root-only policy: refused by name, with the kernel's reason.
    let secret_policy = w.path().join("root-policy.toml");
    std::fs::copy(&policy, &secret_policy).expect("copy");
    std::fs::set_permissions(&secret_policy, std::fs::Permissions::from_mode(0o600))
        .expect("chmod");
    let mut args = cmd.clone();
    args[5] = secret_policy.display().to_string();
    let (code, err) = run(&args);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&secret_policy.display().to_string()) && err.contains("Permission denied"),
        "{err}"
    );
    // A credential file the user cannot read, named by a policy they can.
    let cred_policy = w.path().join("cred-policy.toml");
    let text = std::fs::read_to_string(&policy).expect("policy")
        + "\n[credentials.\"ocr.example\"]\nheader = \"X-Api-Key\"\nvalue_file = \"/etc/shadow\"\n";
    std::fs::write(&cred_policy, text).expect("write");
    std::fs::set_permissions(&cred_policy, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    args[5] = cred_policy.display().to_string();
    let (code, err) = run(&args);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("/etc/shadow") && err.contains("Permission denied"),
        "{err}"
    );
    // Her own copy of the release in a directory of hers that others may not search: the
    // germline's unprivileged user could not bind it; said plainly, not "Permission denied".
    let private = w.path().join("private");
    std::fs::create_dir(&private).expect("mkdir");
    let copied = Command::new("cp")
        .arg("-a")
        .arg(bundle("germline-office"))
        .arg(private.join("bundle"))
        .status()
        .expect("cp");
    assert!(copied.success());
    let chowned = Command::new("chown")
        .arg("-R")
        .arg(format!("{}:{}", alice.uid, alice.gid))
        .arg(&private)
        .status()
        .expect("chown");
    assert!(chowned.success());
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let mut args = cmd.clone();
    *args.last_mut().expect("release") = private.join("bundle").display().to_string();
    let (code, err) = run(&args);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!("others may not search {}", private.display())),
        "{err}"
    );
    // Those three sessions started and refused; nothing below starts one.
    let started = d.sessions(alice.uid).len();
    assert_eq!(started, 3, "{}", d.log());
    // Options that would make root write or connect where the user says: refused before
    // anything is asked of the daemon.
    let mut args = cmd.clone();
    args.insert(2, "--state-dir".into());
    args.insert(3, "/tmp/elsewhere".into());
    let (code, err) = run(&args);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("takes no --state-dir"), "{err}");
    let mut args = cmd.clone();
    args.insert(2, "--mode".into());
    args.insert(3, "sig-pin".into());
    let (code, err) = run(&args);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("only germline and nosplit"), "{err}");
    // A hostile client that claims to be root in its request: the request is not one the
    // daemon takes (it carries no identity), and no session starts.
    let hostile = r#"
import json, os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.connect(sys.argv[1])
req = {"request": "run", "uid": 0, "release": sys.argv[2], "policy": sys.argv[3],
       "key": sys.argv[4], "mode": "germline", "pool": 0, "copy_cpus": [],
       "germline_restart_window": 60, "witness_key": "deployment", "probe_tries": 3,
       "no_evidence": True, "image_limits": {"entries": 524288, "path": 4096,
       "path_total": 67108864, "bytes": 8589934592, "unsigned_bytes": 16777216, "json": 4194304}}
r, w = os.pipe()
socket.send_fds(s, [json.dumps(req).encode()], [r, w, 2])
print(s.recv(65536).decode())
"#;
    let out = as_user(&alice)
        .args(["/usr/bin/python3", "-c", hostile])
        .arg(&d.socket)
        .arg(bundle("germline-office"))
        .arg(&policy)
        .arg(key())
        .output()
        .expect("hostile client");
    let reply: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(reply["reply"], "refused", "{reply}");
    assert!(
        reply["reason"]
            .as_str()
            .is_some_and(|r| r.contains("unknown field `uid`")),
        "{reply}"
    );
    assert!(d.sessions(0).is_empty(), "{}", d.log());
    assert_eq!(d.sessions(alice.uid).len(), started, "{}", d.log());
}

#[test]
fn two_users_sessions_and_slots_are_their_own() {
    if !can_run() {
        return;
    }
    let (alice, bob) = (user("germtest"), user("germtest2"));
    let (w, policy) = world();
    let d = Daemon::start(w.path());
    let cmd = client_cmd(&d, &policy, "germline-notes");
    let note = format!("alice-private-{:x}", rand_u64());
    let a = run_as(
        &alice,
        w.path(),
        &json!([{"tool": "add_note", "arguments": {"text": note}},
                {"tool": "list_notes", "arguments": {}}]),
        &cmd,
    );
    assert!(text(&a[1]).contains(&note), "{}", a[1]);
    // Bob's session of the same release sees none of Alice's slots...
    let b = run_as(
        &bob,
        w.path(),
        &json!([{"tool": "list_notes", "arguments": {}}]),
        &cmd,
    );
    assert_eq!(b[0]["ok"], true, "{}", b[0]);
    assert!(!text(&b[0]).contains(&note), "{}", b[0]);
    // ... while Alice's next session still has them.
    let a2 = run_as(
        &alice,
        w.path(),
        &json!([{"tool": "list_notes", "arguments": {}}]),
        &cmd,
    );
    assert!(text(&a2[0]).contains(&note), "{}", a2[0]);
    // Each one's state is a root-only directory of their own, which the other cannot open.
    let state = |u: &User| PathBuf::from(format!("/var/lib/germline/users/{}", u.uid));
    for (me, other) in [(&alice, &bob), (&bob, &alice)] {
        assert!(state(me).join("slots.db").exists(), "{}", me.name);
        let peek = as_user(me)
            .arg("ls")
            .arg(state(other))
            .output()
            .expect("ls");
        assert!(
            !peek.status.success(),
            "{} read {}'s state",
            me.name,
            other.name
        );
    }
    assert_eq!(d.sessions(alice.uid).len(), 2, "{}", d.log());
    assert_eq!(d.sessions(bob.uid).len(), 1, "{}", d.log());
}

/// An MCP client that keeps its server's stdin and stdout open after the server died (as a
/// client that killed a server it gave up on may), so that only the daemon's connection tells
/// the session its client is gone. It initializes, makes one call, prints the answer and the
/// server's pid, and then holds the pipes.
const HOLDER: &str = r#"
import json, subprocess, sys, time
p = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
def send(m):
    p.stdin.write((json.dumps(m) + "\n").encode()); p.stdin.flush()
send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
      "capabilities": {}, "clientInfo": {"name": "holder", "version": "0"}}})
p.stdout.readline()
send({"jsonrpc": "2.0", "method": "notifications/initialized"})
send({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
      "params": {"name": "summarize", "arguments": {"text": "x y"}}})
print(p.stdout.readline().decode().strip(), flush=True)
print(p.pid, flush=True)
time.sleep(120)
"#;

#[test]
fn a_client_killed_mid_session_ends_its_session_and_leaves_nothing() {
    if !can_run() {
        return;
    }
    let alice = user("germtest");
    let (w, policy) = world();
    let d = Daemon::start(w.path());
    let mut holder = as_user(&alice)
        .args(["/usr/bin/python3", "-c", HOLDER])
        .args(client_cmd(&d, &policy, "germline-office"))
        .stdout(Stdio::piped())
        .spawn()
        .expect("holder");
    let mut out = std::io::BufReader::new(holder.stdout.take().expect("stdout"));
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).expect("answer");
    let answer: Value = serde_json::from_str(&line).expect("a JSON-RPC answer");
    assert_eq!(
        answer["result"]["content"][0]["text"], "2 words; starts with: x y",
        "{answer}"
    );
    line.clear();
    std::io::BufRead::read_line(&mut out, &mut line).expect("pid");
    let client: i32 = line.trim().parse().expect("the client's pid");
    let session = *d.sessions(alice.uid).first().expect("a session");
    let cgroups = run_cgroups(session);
    assert!(!cgroups.is_empty(), "the session's germline has cgroups");
    let run_dir = PathBuf::from(format!("/run/germline/session-{session}"));
    assert!(run_dir.exists());
    // SAFETY: kill(2) of the holder's child, the `germline run` client.
    unsafe { libc::kill(client, libc::SIGKILL) };
    let t = Instant::now();
    while Path::new(&format!("/proc/{session}")).exists() && t.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let gone = !Path::new(&format!("/proc/{session}")).exists();
    // The holder still holds the session's stdin and stdout.
    assert!(matches!(holder.try_wait(), Ok(None)), "the holder ended");
    let _ = holder.kill();
    let _ = holder.wait();
    assert!(gone, "the session outlived its client\n{}", d.log());
    assert!(
        d.log()
            .contains(&format!("session {session}'s client is gone")),
        "{}",
        d.log()
    );
    let left: Vec<PathBuf> = cgroups.into_iter().filter(|c| c.exists()).collect();
    assert!(left.is_empty(), "{left:?}");
    assert!(!run_dir.exists());
}

/// A holder (above) as `u` on `release`, after its call: the holder and its client's pid.
fn hold(u: &User, d: &Daemon, policy: &Path) -> (Child, i32) {
    let mut holder = as_user(u)
        .args(["/usr/bin/python3", "-c", HOLDER])
        .args(client_cmd(d, policy, "germline-office"))
        .stdout(Stdio::piped())
        .spawn()
        .expect("holder");
    let mut out = std::io::BufReader::new(holder.stdout.take().expect("stdout"));
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).expect("answer");
    assert!(line.contains("2 words"), "{line}");
    line.clear();
    std::io::BufRead::read_line(&mut out, &mut line).expect("pid");
    (holder, line.trim().parse().expect("the client's pid"))
}

#[test]
fn each_user_sees_only_their_own_sessions() {
    if !can_run() {
        return;
    }
    let (alice, bob) = (user("germtest"), user("germtest2"));
    let (w, policy) = world();
    let d = Daemon::start(w.path());
    let (mut ha, _) = hold(&alice, &d, &policy);
    let (mut hb, _) = hold(&bob, &d, &policy);
    let status = |u: &User| -> Vec<i64> {
        let out = as_user(u)
            .env("GERMLINE_DAEMON_SOCKET", &d.socket)
            .arg(germline())
            .args(["status", "--json"])
            .output()
            .expect("germline status");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let rows: Vec<Value> = serde_json::from_slice(&out.stdout).expect("JSON");
        rows.iter().filter_map(|r| r["pid"].as_i64()).collect()
    };
    let (sa, sb) = (d.sessions(alice.uid), d.sessions(bob.uid));
    assert_eq!(status(&alice), vec![i64::from(sa[0])], "{}", d.log());
    assert_eq!(status(&bob), vec![i64::from(sb[0])], "{}", d.log());
    for h in [&mut ha, &mut hb] {
        let _ = h.kill();
        let _ = h.wait();
    }
}

#[test]
fn a_socket_activated_daemon_serves_a_session() {
    if !can_run() {
        return;
    }
    let alice = user("germtest");
    let (w, policy) = world();
    let Some(d) = Daemon::activated(w.path()) else {
        assert!(
            std::env::var_os("GERMLINE_REQUIRE_ROOT_TESTS").is_none(),
            "needs systemd-socket-activate (package systemd)"
        );
        return;
    };
    let out = run_as(
        &alice,
        w.path(),
        &json!([{"tool": "summarize", "arguments": {"text": "activated by systemd"}}]),
        &client_cmd(&d, &policy, "germline-office"),
    );
    assert_eq!(text(&out[0]), "3 words; starts with: activated by systemd");
    assert!(
        d.log()
            .contains("germline daemon: listening on the socket systemd passed"),
        "{}",
        d.log()
    );
    assert_eq!(d.sessions(alice.uid).len(), 1, "{}", d.log());
}
