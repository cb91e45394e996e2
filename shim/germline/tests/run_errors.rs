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
    /// Each line from `germline run`: parsed, and as written.
    lines: mpsc::Receiver<(Value, String)>,
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
                    if tx.send((v, line)).is_err() {
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
            let (v, _) = self
                .lines
                .recv_timeout(Duration::from_secs(60))
                .expect("an answer within 60 s");
            if v.get("id").is_some() {
                return v;
            }
        }
    }

    /// Writes `bytes` (a line's worth, newline included) to `germline run`'s stdin.
    fn write_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes).expect("write");
        stdin.flush().expect("flush");
    }

    /// Sends a ping with id `mark` and returns every answer (parsed and as written) up to
    /// and including its own: what the lines sent before it were answered with, in order.
    fn answers_until_ping(&mut self, mark: &str) -> Vec<(Value, String)> {
        self.write_raw(
            format!(
                "{}\n",
                json!({"jsonrpc": "2.0", "id": mark, "method": "ping"})
            )
            .as_bytes(),
        );
        let mut out = Vec::new();
        loop {
            let (v, text) = self
                .lines
                .recv_timeout(Duration::from_secs(120))
                .expect("an answer within 120 s");
            if v.get("id").is_none() {
                continue;
            }
            let done = v["id"] == mark;
            out.push((v, text));
            if done {
                return out;
            }
        }
    }

    /// User plus system CPU time of `germline run` itself (all its threads), in seconds.
    fn cpu_seconds(&self) -> f64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id()))
            .expect("/proc/PID/stat");
        let rest = &stat[stat.rfind(')').expect("comm") + 2..];
        let f: Vec<&str> = rest.split(' ').collect();
        let ticks: u64 =
            f[11].parse::<u64>().expect("utime") + f[12].parse::<u64>().expect("stime");
        // SAFETY: sysconf(3) has no memory effects.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        ticks as f64 / hz as f64
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

    // A malformed line: a parse error, with its id where one can be read (so the request
    // waiting for it ends), and the session goes on.
    let r = s.send_line("{\"jsonrpc\": \"2.0\", \"id\": 7, \"method\": ");
    assert_eq!(r["error"]["code"], json!(-32700), "{r}");
    assert_eq!(r["id"], json!(7));
    let r = s.send_line("{\"jsonrpc\": \"2.0\", \"method\": ");
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
        .args(["gc", "--json"])
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

/// `germline run` of germline-office, initialized, with `ocr_text`'s text public (its copy
/// sends it to the sink, so a call that ran shows there).
fn office(w: &World, sink: &Sink) -> Raw {
    let policy = w.policy(
        sink.port,
        "\n[[argument]]\ntool = \"ocr_text\"\nname = \"text\"\nlabel = []\n",
    );
    let mut s = Raw::start(&run_cmd(
        &policy,
        "germline",
        "germline-office",
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
    s
}

fn ocr_call(id: Value, text: &str) -> Vec<u8> {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": "ocr_text", "arguments": {"text": text}}})
    .to_string()
    .into_bytes()
}

/// Issue 25: a line over 32 MiB was cut at a read boundary and its tail parsed as a new
/// message, so a valid 33 MiB `tools/call` (padded in front) was answered with an error *and*
/// run. Now it is refused whole, with its id when its start holds one, and nothing of it runs.
#[test]
fn an_over_long_line_is_refused_whole_and_nothing_of_it_runs() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let sink = Sink::start(w.path(), "ocr");
    let mut s = office(&w, &sink);
    let canary = format!("CANARY-LONG-{:016x}", rand_u64());
    // 1: the id first, then 33 MiB of text.
    let mut one = ocr_call(json!("long-1"), "");
    let tail = one.split_off(one.len() - 4); // `"}}}`
    one.resize(one.len() + (33 << 20), b'a');
    one.extend_from_slice(&tail);
    one.push(b'\n');
    // 2: 33 MiB of blanks, then a whole valid call (valid JSON as one line, and its tail
    // alone would parse too).
    let mut two = vec![b' '; 33 << 20];
    two.extend_from_slice(&ocr_call(json!("long-2"), &canary));
    two.push(b'\n');
    s.write_raw(&one);
    s.write_raw(&two);
    let answers = s.answers_until_ping("mark-1");
    let ids: Vec<&Value> = answers.iter().map(|(v, _)| &v["id"]).collect();
    assert_eq!(
        ids,
        [&json!("long-1"), &Value::Null, &json!("mark-1")],
        "one refusal per line, nothing else: {:?}",
        answers
            .iter()
            .map(|(_, t)| t.chars().take(200).collect::<String>())
            .collect::<Vec<_>>()
    );
    for (v, _) in &answers[..2] {
        assert_eq!(v["error"]["code"], json!(-32600), "{v}");
        let m = error_message(v);
        assert!(
            m.contains("longer than 32 MiB") && m.contains("nothing of it was run"),
            "{m}"
        );
    }
    // The session goes on, and nothing of the refused lines reached a copy's destination.
    let r = s.call("ocr_text", json!({"text": "after the long lines"}));
    assert!(ok_text(&r).starts_with("corrected: ocr ok"), "{r}");
    let bodies = sink.bodies();
    assert_eq!(bodies, ["after the long lines"], "only the good call ran");
    drop(s.stdin.take());
    assert!(s.child.wait().expect("wait").success());
}

/// Issue 25: the newline search went over the whole buffer at every read (29 s of CPU for
/// 50 MB). Now each byte is searched once: 50 MB costs about five times 10 MB, not 25.
#[test]
fn the_newline_search_is_linear_in_the_bytes_sent() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let sink = Sink::start(w.path(), "ocr");
    let mut s = office(&w, &sink);
    let mut cpu = Vec::new();
    for (mb, mark) in [(10usize, "mark-10"), (50, "mark-50")] {
        let mut line = vec![b' '; mb * 1_000_000];
        line.extend_from_slice(br#"{"jsonrpc":"2.0","id":"big","method":"ping"}"#);
        line.push(b'\n');
        let before = s.cpu_seconds();
        s.write_raw(&line);
        let answers = s.answers_until_ping(mark);
        let used = s.cpu_seconds() - before;
        eprintln!(
            "{mb} MB line: {used:.3} s of CPU, answers {:?}",
            answers
                .iter()
                .map(|(v, _)| v["id"].clone())
                .collect::<Vec<_>>()
        );
        // 10 MB is a line like any other; 50 MB is over the limit and refused.
        assert_eq!(answers.len(), 2, "{answers:?}");
        cpu.push(used);
    }
    // One clock tick is 10 ms: compare against at least 3 ticks.
    let (ten, fifty) = (cpu[0].max(0.03), cpu[1]);
    assert!(
        fifty <= 8.0 * ten,
        "50 MB took {fifty:.3} s of CPU, 10 MB {:.3} s: not linear",
        cpu[0]
    );
    drop(s.stdin.take());
    assert!(s.child.wait().expect("wait").success());
}

/// Issue 25: `{"method": 5}` got no answer, a 30-digit id came back as a float, and a request
/// nested too deeply was answered with `id: null`. Now: -32600 with the id; ids as written;
/// the parse error carries the id wherever a shallow scan reads it.
#[test]
fn ids_come_back_as_written_and_invalid_requests_are_answered() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let sink = Sink::start(w.path(), "ocr");
    let mut s = office(&w, &sink);
    let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
    let lines = [
        r#"{"jsonrpc":"2.0","id":5,"method":5}"#.to_string(),
        r#"{"method":5}"#.to_string(),
        r#"{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"ping"}"#.to_string(),
        r#"{"jsonrpc":"2.0","id":"s-\u00e9","method":"ping"}"#.to_string(),
        format!(
            r#"{{"jsonrpc":"2.0","id":"deep-1","method":"tools/call","params":{{"name":"ocr_text","arguments":{{"text":"x","d":{}}}}}}}"#,
            deep(200)
        ),
        format!(
            r#"{{"jsonrpc":"2.0","method":"tools/call","params":{{"name":"ocr_text","arguments":{{"text":"x","d":{}}}}},"id":98765432109876543210987}}"#,
            deep(5000)
        ),
    ];
    for l in &lines {
        s.write_raw(format!("{l}\n").as_bytes());
    }
    let answers = s.answers_until_ping("mark-ids");
    let texts: Vec<&str> = answers.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(
        answers.len(),
        lines.len() + 1,
        "one answer per line: {texts:?}"
    );
    let (a, t) = (&answers[0].0, &answers[0].1);
    assert_eq!(
        (a["id"].clone(), a["error"]["code"].clone()),
        (json!(5), json!(-32600)),
        "{t}"
    );
    assert!(
        error_message(a).contains("the method must be a string"),
        "{t}"
    );
    let a = &answers[1].0;
    assert_eq!(
        (a["id"].clone(), a["error"]["code"].clone()),
        (Value::Null, json!(-32600)),
        "{a}"
    );
    let t = &answers[2].1;
    assert!(
        t.contains(r#""id":123456789012345678901234567890,"#)
            || t.contains(r#""id":123456789012345678901234567890}"#),
        "{t}"
    );
    assert_eq!(answers[2].0["result"], json!({}), "{t}");
    assert_eq!(answers[3].0["id"], json!("s-é"));
    for (k, id) in [
        (4, r#""id":"deep-1""#),
        (5, r#""id":98765432109876543210987"#),
    ] {
        let (a, t) = (&answers[k].0, &answers[k].1);
        assert_eq!(a["error"]["code"], json!(-32700), "{t}");
        assert!(t.contains(id), "{t}");
        assert!(error_message(a).contains("nested deeper than 128"), "{t}");
    }
    assert!(sink.bodies().is_empty(), "nothing ran");
    drop(s.stdin.take());
    assert!(s.child.wait().expect("wait").success());
}

/// Issue 25: the official MCP SDK as agent sends a call nested deeper than the parser's
/// limit; on 88bfd6b its error came with `id: null` and the SDK waited for its own timeout
/// (60 s). Now the SDK gets the error at once.
#[test]
fn an_sdk_client_gets_the_error_of_a_too_deep_call_at_once() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let sink = Sink::start(w.path(), "ocr");
    let policy = w.policy(
        sink.port,
        "\n[[argument]]\ntool = \"ocr_text\"\nname = \"*\"\nlabel = []\n",
    );
    let mut d = json!("leaf");
    for _ in 0..150 {
        d = json!([d]);
    }
    let script = json!([
        {"tool": "ocr_text", "arguments": {"text": "deep", "d": d}},
        {"tool": "ocr_text", "arguments": {"text": "shallow"}},
    ]);
    let out = run_agent(
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
    assert_eq!(out.len(), 2, "{out:?}");
    let deep = &out[0];
    assert_eq!(deep["ok"], false, "{deep}");
    let e = deep["error"].as_str().unwrap_or_default();
    assert!(e.contains("nested deeper than 128"), "{deep}");
    let ms = deep["ms"].as_f64().unwrap_or(f64::MAX);
    assert!(
        ms < 20_000.0,
        "the SDK waited {ms:.0} ms for the error: {deep}"
    );
    assert_eq!(out[1]["ok"], true, "{}", out[1]);
    assert_eq!(sink.bodies(), ["shallow"]);
}
