//! Bad input and failures reach the agent as clear MCP errors, and the next call works:
//! a malformed line, an unknown tool, a path no rule covers, a copy that crashes mid-call, a
//! broker that goes down. And `germline run` leaves nothing behind when it stops.

mod run_common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use run_common::*;
use serde_json::{json, Value};

struct Raw {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<Value>,
    next: u64,
}

impl Raw {
    fn start(cmd: &[String]) -> Raw {
        let mut child = Command::new(&cmd[0])
            .args(&cmd[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("germline run");
        let stdin = child.stdin.take();
        let out = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str(&line) {
                    if tx.send(v).is_err() {
                        return;
                    }
                }
            }
        });
        Raw {
            child,
            stdin,
            lines: rx,
            next: 100,
        }
    }

    fn send_line(&mut self, line: &str) -> Value {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{line}").expect("write");
        stdin.flush().expect("flush");
        loop {
            let v = self
                .lines
                .recv_timeout(Duration::from_secs(60))
                .expect("an answer within 60 s");
            if v.get("id").is_some() {
                return v;
            }
        }
    }

    fn call(&mut self, tool: &str, args: Value) -> Value {
        self.next += 1;
        let msg = json!({"jsonrpc": "2.0", "id": self.next, "method": "tools/call",
                         "params": {"name": tool, "arguments": args}});
        self.send_line(&msg.to_string())
    }

    fn children(&self) -> Vec<i32> {
        let pid = self.child.id();
        let mut out = Vec::new();
        if let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) {
            for t in rd.flatten() {
                let c = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
                out.extend(c.split_whitespace().filter_map(|p| p.parse::<i32>().ok()));
            }
        }
        out
    }
}

fn cmdline(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .unwrap_or_default()
}

fn error_message(v: &Value) -> String {
    v["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn ok_text(v: &Value) -> String {
    v["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn bad_input_and_failures_give_clear_errors_and_the_next_call_works() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let sink = Sink::start(w.path(), "ocr");
    // ocr_text's inline text is public here, so its copy may send it to ocr.example.
    let policy = w.policy(
        sink.port,
        "\n[[argument]]\ntool = \"ocr_text\"\nname = \"text\"\nlabel = []\n",
    );
    // --no-evidence: the crash (only in a copy that sees the salary sheet) leaves the agent's
    // copy short of ocr.example's requests, a genuine item witness that would suppress this
    // declared-deterministic release; this test is about the calls after a failure.
    let mut s = Raw::start(&run_cmd(
        &policy,
        "germline",
        "germline-office-crash",
        w.path(),
        &["--no-evidence"],
    ));
    let init = s.send_line(
        &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}})
        .to_string(),
    );
    assert!(init.get("result").is_some(), "{init}");
    let good = |s: &mut Raw| {
        let r = s.call("summarize", json!({"text": "one two three"}));
        assert_eq!(ok_text(&r), "3 words; starts with: one two three", "{r}");
    };
    good(&mut s);

    // A malformed line: a parse error with id null, and the session goes on.
    let r = s.send_line("{\"jsonrpc\": \"2.0\", \"id\": 7, \"method\": ");
    assert_eq!(r["error"]["code"], json!(-32700), "{r}");
    assert_eq!(r["id"], Value::Null);
    good(&mut s);

    // An unknown tool names the tools the release declares.
    let r = s.call("delete_everything", json!({}));
    assert_eq!(r["error"]["code"], json!(-32602));
    assert!(
        error_message(&r).contains("declares ocr_annotate, ocr_text, payslip, summarize"),
        "{r}"
    );
    good(&mut s);

    // A file no [[item]] rule covers: refused (fails closed), naming the argument and the file.
    let stray = w.path().join("stray.txt");
    std::fs::write(&stray, "not labelled").expect("write");
    let r = s.call(
        "ocr_annotate",
        json!({"invoice": stray.display().to_string(), "salary_sheet": w.salary.display().to_string()}),
    );
    let m = error_message(&r);
    assert!(
        m.contains("argument `invoice`") && m.contains("stray.txt") && m.contains("[[item]]"),
        "{m}"
    );
    good(&mut s);

    // The agent's copy dies in the middle of the call.
    let r = s.call(
        "ocr_annotate",
        json!({"invoice": w.invoice.display().to_string(), "salary_sheet": w.salary.display().to_string()}),
    );
    assert_eq!(r["error"]["code"], json!(-32000), "{r}");
    assert!(error_message(&r).contains("the tool failed"), "{r}");
    good(&mut s);

    // The broker goes down: the call in flight fails with a clear error; the next one works
    // (the sidecar is started again).
    let broker = s
        .children()
        .into_iter()
        .find(|p| cmdline(*p).contains("broker serve"))
        .expect("the broker sidecar is a child of germline run");
    // SAFETY: kill(2) on a pid we just found as our child's child.
    unsafe { libc::kill(broker, libc::SIGKILL) };
    assert!(wait_gone(broker) || cmdline(broker).is_empty());
    let r = s.call("ocr_text", json!({"text": "hello"}));
    let first = error_message(&r);
    if !first.is_empty() {
        assert!(first.contains("broker"), "{r}");
    }
    let r = s.call("ocr_text", json!({"text": "hello again"}));
    assert!(ok_text(&r).starts_with("corrected: ocr ok"), "{r}");
    drop(s.stdin.take());
    let st = s.child.wait().expect("wait");
    assert!(st.success(), "{st}");
}

#[test]
fn run_leaves_no_process_cgroup_or_mount_behind() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let sink = Sink::start(w.path(), "ocr");
    let policy = w.policy(sink.port, "");
    for (how, mode) in [
        ("eof", "germline"),
        ("sigterm", "germline"),
        ("sigterm", "confined-ifc"),
    ] {
        let mut s = Raw::start(&run_cmd(
            &policy,
            mode,
            "germline-office",
            w.path(),
            &["--pool", "1"],
        ));
        let r = s.call(
            "ocr_annotate",
            json!({"invoice": w.invoice.display().to_string(), "salary_sheet": w.salary.display().to_string()}),
        );
        assert!(r.get("result").is_some(), "{r}");
        let pid = s.child.id() as i32;
        let mut family = s.children();
        for c in family.clone() {
            let c =
                std::fs::read_to_string(format!("/proc/{c}/task/{c}/children")).unwrap_or_default();
            family.extend(c.split_whitespace().filter_map(|p| p.parse::<i32>().ok()));
        }
        assert!(
            family.len() >= 2,
            "{how}/{mode}: broker and germline/process: {family:?}"
        );
        match how {
            "eof" => drop(s.stdin.take()),
            // SAFETY: kill(2) on our own child.
            _ => unsafe {
                libc::kill(pid, libc::SIGTERM);
            },
        }
        let st = s.child.wait().expect("wait");
        assert!(st.success(), "{how}/{mode}: {st}");
        for p in &family {
            assert!(
                wait_gone(*p),
                "{how}/{mode}: process {p} ({}) left behind",
                cmdline(*p)
            );
        }
        let run_dir = format!("/run/germline/session-{pid}");
        assert!(
            !std::path::Path::new(&run_dir).exists(),
            "{run_dir} left behind"
        );
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        assert!(
            !mounts.contains(&format!("run-{pid}-")),
            "a mount left behind"
        );
        let prefix = format!("run-{pid}-");
        let under = |dir: &str, prefix: &str| -> Vec<String> {
            std::fs::read_dir(dir)
                .map(|rd| {
                    rd.flatten()
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .filter(|n| n.starts_with(prefix))
                        .collect()
                })
                .unwrap_or_default()
        };
        for base in [
            "/sys/fs/cgroup",
            "/sys/fs/cgroup/unified",
            "/sys/fs/cgroup/memory",
            "/sys/fs/cgroup/pids",
            "/sys/fs/cgroup/freezer",
        ] {
            let left = under(&format!("{base}/germline"), &prefix);
            assert!(
                left.is_empty(),
                "{how}/{mode}: cgroups left in {base}/germline: {left:?}"
            );
        }
        let ca_left = under("/run/germline", &format!("ca-{pid}-"));
        assert!(
            ca_left.is_empty(),
            "{how}/{mode}: CA bundles left: {ca_left:?}"
        );
    }
}

/// What a `germline run` with pid `pid` has on this host: its germlines' cgroups (in every
/// hierarchy), the processes in them, its /run/germline directories and host mounts naming it.
fn traces_of(pid: i32) -> (Vec<String>, Vec<i32>, Vec<String>, bool) {
    let prefix = format!("run-{pid}-");
    let mut cgroups = Vec::new();
    let mut procs = Vec::new();
    for base in [
        "/sys/fs/cgroup",
        "/sys/fs/cgroup/unified",
        "/sys/fs/cgroup/memory",
        "/sys/fs/cgroup/pids",
        "/sys/fs/cgroup/freezer",
    ] {
        let Ok(rd) = std::fs::read_dir(format!("{base}/germline")) else {
            continue;
        };
        for e in rd.flatten() {
            if !e.file_name().to_string_lossy().starts_with(&prefix) {
                continue;
            }
            cgroups.push(e.path().display().to_string());
            for sub in std::fs::read_dir(e.path()).into_iter().flatten().flatten() {
                let p =
                    std::fs::read_to_string(sub.path().join("cgroup.procs")).unwrap_or_default();
                procs.extend(p.split_whitespace().filter_map(|x| x.parse::<i32>().ok()));
            }
        }
    }
    procs.sort_unstable();
    procs.dedup();
    let dirs = std::fs::read_dir("/run/germline")
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| *n == format!("session-{pid}") || n.starts_with(&format!("ca-{pid}-")))
                .collect()
        })
        .unwrap_or_default();
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .contains(&prefix);
    (cgroups, procs, dirs, mounts)
}

/// A SIGKILLed `germline run` cannot stop anything: its frozen germline, its pool copy, their
/// cgroups and its /run/germline directories stay. The next `germline run` removes them at
/// start, and `germline gc` does the same on demand; neither touches a live run's.
#[test]
fn leftovers_of_a_killed_run_are_swept_by_the_next_start_and_by_gc() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let sink = Sink::start(w.path(), "ocr");
    let policy = w.policy(sink.port, "");
    let cmd = run_cmd(
        &policy,
        "germline",
        "germline-office",
        w.path(),
        // ocr_text sends its (default-labelled, so uncleared) text to ocr.example: a genuine
        // item witness that would suppress the declared release before the live run's call.
        &["--pool", "1", "--no-evidence"],
    );
    let start_and_kill = || {
        let mut s = Raw::start(&cmd);
        let r = s.call("ocr_text", json!({"text": "hello"}));
        assert!(r.get("result").is_some(), "{r}");
        let pid = s.child.id() as i32;
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        let _ = s.child.wait();
        let left = traces_of(pid);
        // Without the sweep this stays (the mechanism-off half of the test): the cgroups and
        // directories always, the processes where a frozen task cannot die (cgroup v1).
        assert!(
            !left.0.is_empty() && !left.2.is_empty(),
            "a SIGKILLed run left nothing: {left:?}"
        );
        (pid, left)
    };
    let (first, left) = start_and_kill();
    // A live run meanwhile: the sweep must leave it alone.
    let mut live = Raw::start(&cmd);
    let r = live.call("ocr_text", json!({"text": "still here"}));
    assert!(r.get("result").is_some(), "{r}");
    let (cg, procs, dirs, mounts) = traces_of(first);
    assert!(
        cg.is_empty() && dirs.is_empty() && !mounts,
        "{cg:?} {dirs:?}"
    );
    for p in &left.1 {
        assert!(
            wait_gone(*p),
            "process {p} of the killed run is still there"
        );
    }
    assert!(procs.is_empty(), "{procs:?}");

    let (second, _) = start_and_kill();
    let out = Command::new(germline())
        .arg("gc")
        .output()
        .expect("germline gc");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("gc prints JSON");
    let named = report["cgroups"].to_string();
    assert!(named.contains(&format!("run-{second}-")), "{report}");
    assert_eq!(traces_of(second).0, Vec::<String>::new());
    assert!(traces_of(second).2.is_empty());
    // The live run was never touched: its next call works.
    let r = live.call("ocr_text", json!({"text": "after gc"}));
    assert!(r.get("result").is_some(), "{r}");
    let live_pid = live.child.id() as i32;
    assert!(!traces_of(live_pid).0.is_empty());
    drop(live.stdin.take());
    let st = live.child.wait().expect("wait");
    assert!(st.success(), "{st}");
}
