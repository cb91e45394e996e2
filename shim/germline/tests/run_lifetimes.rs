//! Germline lifetimes (policy `[lifetimes]`, docs/operations.md) with the real MCP client SDK
//! as the agent: each lifetime answers mcp-server-time's compatibility calls as the
//! unprotected server does; `single-shot` starts a fresh germline per call, `session` keeps
//! one, and neither leaves a process behind when the session ends. `long-lived` is served by
//! `germline serve` and refused by `germline run`.

mod run_common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use run_common::*;
use serde_json::{json, Value};

fn current() -> Value {
    json!({"tool": "get_current_time", "arguments": {"timezone": "Europe/Paris"}})
}

fn convert() -> Value {
    json!({"tool": "convert_time", "arguments": {"source_timezone": "UTC", "time": "09:30",
                                                "target_timezone": "America/New_York"}})
}

/// A call's text with mcp-server-time's clock fields masked.
fn masked(r: &Value) -> String {
    format!("ok={} {}", r["ok"], without_clock(&text(r)))
}

fn plain(w: &World) -> Vec<String> {
    let py = agent_python().display().to_string();
    run_agent(
        w.path(),
        &json!([current(), convert()]),
        &[
            py,
            "-m".into(),
            "mcp_server_time".into(),
            "--local-timezone".into(),
            "UTC".into(),
        ],
    )
    .iter()
    .map(masked)
    .collect()
}

/// One `germline run` session of `lifetime`: calls, a process snapshot after each pair.
fn session(w: &World, lifetime: &str) -> (Vec<String>, Vec<i32>, Vec<i32>) {
    let policy = w.policy(
        9,
        &format!("\n[lifetimes]\n\"mcp-server-time\" = \"{lifetime}\"\n"),
    );
    let (a, b) = (
        w.path().join(format!("{lifetime}-a")),
        w.path().join(format!("{lifetime}-b")),
    );
    let script = json!([current(), convert(), {"wait_file": a}, current(), convert(),
                        {"wait_file": b}]);
    let run = AgentRun::start(
        w.path(),
        &script,
        &run_cmd(&policy, "germline", "mcp-server-time", w.path(), &[]),
    );
    let mut out = vec![run.next(), run.next()];
    // The idle work after a call (a fresh single-shot germline) runs as soon as the answer
    // is out; give it time to finish before the snapshot.
    std::thread::sleep(Duration::from_secs(3));
    let first = descendants(run.pid());
    std::fs::write(&a, "").expect("turn a");
    out.push(run.next());
    out.push(run.next());
    std::thread::sleep(Duration::from_secs(3));
    let second = descendants(run.pid());
    std::fs::write(&b, "").expect("turn b");
    assert!(run.finish(), "the agent failed");
    (out.iter().map(masked).collect(), first, second)
}

#[test]
fn single_shot_and_session_answer_as_the_server_and_leave_nothing() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let reference = plain(&w);
    let mut seen = Vec::new();
    for lifetime in ["single-shot", "session"] {
        let (calls, first, second) = session(&w, lifetime);
        assert_eq!(calls[..2], reference[..], "{lifetime}");
        assert_eq!(calls[2..], reference[..], "{lifetime}");
        assert!(!first.is_empty() && !second.is_empty());
        // After the session: nothing it started is left.
        for p in first.iter().chain(&second) {
            assert!(
                wait_gone(*p),
                "{lifetime}: process {p} outlived the session"
            );
        }
        seen.push((lifetime, first == second));
    }
    // single-shot: the germline of the first calls is gone and a fresh one runs; session:
    // the same processes serve every call.
    assert_eq!(seen, vec![("single-shot", false), ("session", true)]);
}

#[test]
fn long_lived_is_served_by_germline_serve_and_refused_by_run() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let policy = w.policy(9, "\n[lifetimes]\n\"mcp-server-time\" = \"long-lived\"\n");
    let cmd = run_cmd(&policy, "germline", "mcp-server-time", w.path(), &[]);
    let out = Command::new(&cmd[0])
        .args(&cmd[1..])
        .stdin(Stdio::null())
        .output()
        .expect("germline run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("long-lived") && err.contains("germline serve"),
        "{err}"
    );

    let metrics = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").to_string()
    };
    let mut serve = Command::new(germline())
        .args(["serve", "--metrics-listen", metrics.as_str(), "--policy"])
        .arg(&policy)
        .arg("--key")
        .arg(key())
        .args(["--listen", "127.0.0.1:0", "--no-auth", "--state-dir"])
        .arg(w.path().join("serve-state"))
        .arg(bundle("mcp-server-time"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("germline serve");
    let err = serve.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut url = None;
    while url.is_none() {
        let line = rx
            .recv_timeout(Duration::from_secs(120))
            .expect("germline serve came up");
        if let Some(rest) = line.strip_prefix("germline serve: http://") {
            url = rest
                .split_whitespace()
                .next()
                .map(|u| format!("http://{u}"));
        }
    }
    let url = url.expect("url");
    // Two agent sessions, one after the other, on the one long-lived germline.
    let mut firsts = Vec::new();
    for _ in 0..2 {
        let out = Command::new(agent_python())
            .arg(root().join("tests/run/serve_client.py"))
            .args([url.as_str(), "-", "2"])
            .output()
            .expect("serve client");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).expect("json");
        firsts.push(
            v["first"]["content"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        );
    }
    // The serve process's metrics count the four calls of both sessions on one germline.
    let text = {
        use std::io::{Read, Write};
        let mut c = std::net::TcpStream::connect(&metrics).expect("metrics");
        c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .expect("write");
        let mut t = String::new();
        c.read_to_string(&mut t).expect("read");
        t
    };
    assert!(
        text.lines().any(|l| l.starts_with("germline_calls_total{")
            && l.contains("outcome=\"ok\"")
            && l.ends_with(" 4")),
        "{text}"
    );
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(serve.id() as i32, libc::SIGTERM) };
    let status = serve.wait().expect("serve ended");
    assert!(status.success(), "{status}");
    for f in &firsts {
        assert!(f.contains("\"timezone\": \"UTC\""), "{f}");
    }
}

/// A `germline serve` of one release, stopped (SIGTERM) when dropped.
struct Serve {
    child: std::process::Child,
    url: String,
}

impl Serve {
    fn start(w: &World, policy: &std::path::Path, extra: &[&str], release: &str) -> Serve {
        let mut child = Command::new(germline())
            .arg("serve")
            .args(extra)
            .arg("--policy")
            .arg(policy)
            .arg("--key")
            .arg(key())
            .args(["--listen", "127.0.0.1:0", "--state-dir"])
            .arg(w.path().join("serve-state"))
            .arg(bundle(release))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("germline serve");
        let err = child.stderr.take();
        // Stopped by Drop, also if it never comes up.
        let mut s = Serve {
            child,
            url: String::new(),
        };
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        std::thread::spawn(move || {
            for line in err
                .into_iter()
                .flat_map(|e| BufReader::new(e).lines().map_while(Result::ok))
            {
                eprintln!("[serve] {line}");
                let _ = tx.send(line);
            }
        });
        while s.url.is_empty() {
            let line = rx
                .recv_timeout(Duration::from_secs(120))
                .expect("germline serve came up");
            if let Some(rest) = line.strip_prefix("germline serve: http://") {
                s.url = format!("http://{}", rest.split_whitespace().next().expect("url"));
            }
        }
        s
    }

    /// The state files (`germline status`) of this serve's runtimes: one per germline.
    fn runtimes(&self) -> Vec<Value> {
        let prefix = format!("{}-", self.child.id());
        std::fs::read_dir("/run/germline/status")
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| {
                let n = e.file_name().to_string_lossy().to_string();
                n.starts_with(&prefix) && n.ends_with(".json")
            })
            .filter_map(|e| std::fs::read(e.path()).ok())
            .filter_map(|b| serde_json::from_slice(&b).ok())
            .collect()
    }

    /// The germline pid of `user`'s runtimes.
    fn germlines_of(&self, user: &str) -> Vec<i64> {
        self.runtimes()
            .iter()
            .filter(|r| r["user"] == user)
            .filter_map(|r| r["germline_pid"].as_i64())
            .collect()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own, not yet reaped child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        for _ in 0..300 {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A users file (alice, bob) and each one's token file.
fn users(w: &World) -> (String, std::path::PathBuf, std::path::PathBuf) {
    let (ta, tb) = (
        format!("{:016x}{:016x}", rand_u64(), rand_u64()),
        format!("{:016x}{:016x}", rand_u64(), rand_u64()),
    );
    let users = w.path().join("users");
    std::fs::write(&users, format!("# who may call\nalice {ta}\nbob {tb}\n")).expect("users");
    let (fa, fb) = (w.path().join("token-alice"), w.path().join("token-bob"));
    std::fs::write(&fa, &ta).expect("token");
    std::fs::write(&fb, &tb).expect("token");
    (users.display().to_string(), fa, fb)
}

/// One agent session (tests/run/serve_steps.py), read as it goes.
struct Client {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<Value>,
}

impl Client {
    fn start(w: &World, url: &str, token: &std::path::Path, steps: &Value) -> Client {
        let sp = w.path().join(format!("steps-{:x}.json", rand_u64()));
        std::fs::write(&sp, steps.to_string()).expect("steps");
        let mut child = Command::new(agent_python())
            .arg(root().join("tests/run/serve_steps.py"))
            .arg(url)
            .arg(token)
            .arg(&sp)
            .stdout(Stdio::piped())
            .spawn()
            .expect("serve_steps.py");
        let out = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    let _ = tx.send(v);
                }
            }
        });
        Client { child, lines: rx }
    }

    fn next(&self) -> Value {
        self.lines
            .recv_timeout(Duration::from_secs(120))
            .expect("the agent's next answer")
    }

    /// Waits for the session to close (DELETE sent and answered); whether it did cleanly.
    fn finish(mut self) -> bool {
        let closed = self.next() == json!({"closed": true});
        closed && self.child.wait().is_ok_and(|s| s.success())
    }

    /// All the steps at once: every call's answer.
    fn run(w: &World, url: &str, token: &std::path::Path, steps: &Value) -> Vec<Value> {
        let c = Client::start(w, url, token, steps);
        let calls = steps
            .as_array()
            .map_or(0, |a| a.iter().filter(|s| s.get("tool").is_some()).count());
        let out: Vec<Value> = (0..calls).map(|_| c.next()).collect();
        assert!(c.finish(), "the agent failed");
        out
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The germline's own cgroup directories (every hierarchy), named after its id.
fn germline_cgroups(pid: i64) -> Vec<std::path::PathBuf> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    let Some(id) = text.lines().find_map(|l| {
        let at = l.find("/germline/")? + "/germline/".len();
        l[at..].split('/').next().map(str::to_string)
    }) else {
        return vec![];
    };
    let mut roots = vec![std::path::PathBuf::from("/sys/fs/cgroup/germline")];
    for e in std::fs::read_dir("/sys/fs/cgroup")
        .into_iter()
        .flatten()
        .flatten()
    {
        roots.push(e.path().join("germline"));
    }
    roots
        .into_iter()
        .map(|r| r.join(&id))
        .filter(|p| p.is_dir())
        .collect()
}

#[test]
fn serve_gives_each_session_its_own_germline_and_its_end_leaves_nothing() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let reference = plain(&w);
    // `session` is the default lifetime.
    let policy = w.policy(9, "");
    let (users, ta, tb) = users(&w);
    let s = Serve::start(&w, &policy, &["--users", users.as_str()], "mcp-server-time");
    let f = |n: &str| w.path().join(n);
    // Both sessions are open before either calls; then both call at once.
    let steps = |me: &str, other: &str, end: &str| {
        json!([{"touch": f(me)}, {"wait_file": f(other)},
               current(), convert(), current(), convert(), {"wait_file": f(end)}])
    };
    let a = Client::start(&w, &s.url, &ta, &steps("ready-a", "ready-b", "end-a"));
    let b = Client::start(&w, &s.url, &tb, &steps("ready-b", "ready-a", "end-b"));
    let ra: Vec<Value> = (0..4).map(|_| a.next()).collect();
    let rb: Vec<Value> = (0..4).map(|_| b.next()).collect();
    for r in [&ra, &rb] {
        let got: Vec<String> = r.iter().map(masked).collect();
        assert_eq!(got[..2], reference[..]);
        assert_eq!(got[2..], reference[..]);
    }
    // Two germlines, one per session.
    let (pa, pb) = (s.germlines_of("alice"), s.germlines_of("bob"));
    assert!(pa.len() == 1 && pb.len() == 1, "{:?}", s.runtimes());
    let (pa, pb) = (pa[0], pb[0]);
    assert_ne!(pa, pb);
    // They did not take turns: some call of one session ran while one of the other did.
    let span = |r: &Value| {
        (
            r["t0"].as_f64().unwrap_or(0.0),
            r["t1"].as_f64().unwrap_or(0.0),
        )
    };
    let overlap = ra
        .iter()
        .map(span)
        .any(|(a0, a1)| rb.iter().map(span).any(|(b0, b1)| a0 < b1 && b0 < a1));
    assert!(
        overlap,
        "the sessions' calls never overlapped: {ra:?} {rb:?}"
    );

    // Alice's session ends (the SDK sends DELETE): her germline, its processes, cgroups and
    // mounts are gone; Bob's germline still serves.
    let procs_a: Vec<i32> = std::iter::once(pa as i32)
        .chain(descendants(pa as i32))
        .collect();
    let cgroups_a = germline_cgroups(pa);
    assert!(!cgroups_a.is_empty(), "alice's germline has cgroups");
    let id_a = cgroups_a[0]
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .expect("id");
    std::fs::write(f("end-a"), "").expect("end a");
    assert!(a.finish(), "alice's session did not close cleanly");
    for p in &procs_a {
        assert!(
            wait_gone(*p),
            "process {p} of alice's germline outlived her session"
        );
    }
    // Her germline's processes are gone; its cgroups, mounts and state file go after them,
    // on serve's side, with no answer to wait for: they must be gone within a while.
    assert!(
        eventually(|| cgroups_a.iter().all(|c| !c.exists())),
        "cgroups left: {cgroups_a:?}"
    );
    let mounted = || {
        std::fs::read_to_string("/proc/self/mountinfo")
            .expect("mountinfo")
            .contains(&id_a)
    };
    assert!(eventually(|| !mounted()), "a mount of {id_a} is left");
    assert!(
        eventually(|| s.germlines_of("alice").is_empty()),
        "{:?}",
        s.runtimes()
    );
    assert_eq!(s.germlines_of("bob"), vec![pb]);
    // Still there after the thread that answered Bob's initialize could have ended (tokio
    // ends an idle blocking thread after 10 s; the kernel kills a germline whose forking
    // thread is gone): germlines are forked on a thread of their own.
    std::thread::sleep(Duration::from_secs(11));
    assert!(std::path::Path::new(&format!("/proc/{pb}")).exists());
    std::fs::write(f("end-b"), "").expect("end b");
    assert!(b.finish(), "bob's session did not close cleanly");
    assert!(wait_gone(pb as i32));
    assert!(eventually(|| s.runtimes().is_empty()), "{:?}", s.runtimes());
}

#[test]
fn long_lived_shares_one_germline_and_its_slots_per_user_only() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let policy = w.policy(
        9,
        "\n[[argument]]\ntool = \"add_note\"\nname = \"text\"\nlabel = []\n\n\
         [lifetimes]\n\"germline-notes\" = \"long-lived\"\n",
    );
    let (users, ta, tb) = users(&w);
    let s = Serve::start(&w, &policy, &["--users", users.as_str()], "germline-notes");
    let add = |t: &str| json!({"tool": "add_note", "arguments": {"text": t}});
    let list = json!({"tool": "list_notes", "arguments": {}});
    let one = Client::run(&w, &s.url, &ta, &json!([add("buy milk")]));
    assert_eq!(text(&one[0]), "1 notes");
    let alice = s.germlines_of("alice");
    assert_eq!(alice.len(), 1, "{:?}", s.runtimes());
    // Her germline outlived her first session; her second session uses it and her slot.
    let two = Client::run(&w, &s.url, &ta, &json!([list.clone(), add("call Bob")]));
    assert_eq!(text(&two[0]), "- buy milk");
    assert_eq!(text(&two[1]), "2 notes");
    assert_eq!(s.germlines_of("alice"), alice);
    // Bob has a germline and slots of his own: none of Alice's notes.
    let bob = Client::run(
        &w,
        &s.url,
        &tb,
        &json!([list.clone(), add("bob's"), list.clone()]),
    );
    assert_eq!(text(&bob[0]), "(no notes)");
    assert_eq!(text(&bob[1]), "1 notes");
    assert_eq!(text(&bob[2]), "- bob's");
    let pb = s.germlines_of("bob");
    assert!(pb.len() == 1 && pb != alice, "{:?}", s.runtimes());
    let again = Client::run(&w, &s.url, &ta, &json!([list]));
    assert_eq!(text(&again[0]), "- buy milk\n- call Bob");
}

#[test]
fn an_idle_session_times_out_and_its_germline_stops() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let policy = w.policy(9, "");
    let (users, ta, _) = users(&w);
    let s = Serve::start(
        &w,
        &policy,
        &["--users", users.as_str(), "--session-idle-timeout", "2"],
        "mcp-server-time",
    );
    let go = w.path().join("go");
    let c = Client::start(
        &w,
        &s.url,
        &ta,
        &json!([current(), {"wait_file": go}, current()]),
    );
    assert_eq!(c.next()["ok"], json!(true));
    let pa = s.germlines_of("alice");
    assert_eq!(pa.len(), 1, "{:?}", s.runtimes());
    // Unused for 2 s: the session ends and its germline stops, with no request from anyone.
    assert!(
        (0..100).any(|_| {
            std::thread::sleep(Duration::from_millis(100));
            s.germlines_of("alice").is_empty()
        }),
        "the idle session's germline still runs"
    );
    assert!(wait_gone(pa[0] as i32));
    std::fs::write(&go, "").expect("go");
    let late = c.next();
    assert_eq!(late["ok"], json!(false), "{late}");
    assert!(
        late["error"]
            .as_str()
            .is_some_and(|e| e.contains("ended session") || e.contains("404")),
        "{late}"
    );
}
