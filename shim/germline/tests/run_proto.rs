//! Issue 29 over stdio: the server's errors, `ping` during a long call and cancellation, each
//! seen by the official MCP client SDK (tests/run/proto_client.py) against the unprotected
//! server and against `germline run` on the same calls. Root: run for real, and fail rather
//! than skip under `GERMLINE_REQUIRE_ROOT_TESTS=1`.

mod run_common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use run_common::*;
use serde_json::{json, Value};

fn client_script() -> PathBuf {
    root().join("tests/run/proto_client.py")
}

/// Runs proto_client.py with `args` against `server` to its end: its JSON lines.
fn client(args: &[&str], server: &[String]) -> Vec<Value> {
    Client::start(args, server).finish()
}

/// proto_client.py running: its JSON lines as they come.
struct Client {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<Value>,
    stderr: tempfile::NamedTempFile,
}

impl Client {
    fn start(args: &[&str], server: &[String]) -> Client {
        let stderr = tempfile::NamedTempFile::new().expect("stderr file");
        let mut child = Command::new(agent_python())
            .arg(client_script())
            .args(args)
            .arg("--")
            .args(server)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .stdout(Stdio::piped())
            .stderr(stderr.reopen().expect("stderr"))
            .spawn()
            .expect("proto_client.py");
        let out = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    if tx.send(v).is_err() {
                        return;
                    }
                }
            }
        });
        Client {
            child,
            lines: rx,
            stderr,
        }
    }

    fn next(&self) -> Value {
        self.lines
            .recv_timeout(Duration::from_secs(120))
            .unwrap_or_else(|_| panic!("the client's next line within 120 s: {}", self.err()))
    }

    fn err(&self) -> String {
        std::fs::read_to_string(self.stderr.path()).unwrap_or_default()
    }

    fn finish(mut self) -> Vec<Value> {
        let status = self.child.wait().expect("wait");
        let lines: Vec<Value> = self.lines.try_iter().collect();
        assert!(status.success(), "client: {status}\n{}", self.err());
        lines
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The release run unprotected: its own rootfs, chrooted, host network, the server's entry.
/// With `proxy`, its HTTP requests go to that address (a sink), as a deployment's forward
/// proxy would carry them: the sink answers `ocr.example` for it.
fn direct_office(proxy: Option<u16>) -> Vec<String> {
    let mut v: Vec<String> = vec!["env".into(), "PYTHONDONTWRITEBYTECODE=1".into()];
    if let Some(p) = proxy {
        v.push(format!("HTTP_PROXY=http://127.0.0.1:{p}"));
    }
    v.extend([
        "chroot".into(),
        bundle("germline-office")
            .join("rootfs")
            .display()
            .to_string(),
        "/usr/bin/python3".into(),
        "-m".into(),
        "germline_examples.office".into(),
    ]);
    v
}

/// `germline run` of germline-office in `mode`, with a state directory of its own (a fresh
/// dampening ledger per run) and no pool (the copies seen are the call's).
fn germline_office(w: &World, policy: &Path, mode: &str, tag: &str) -> Vec<String> {
    let state = w.path().join(format!("state-{mode}-{tag}"));
    let mut cmd = run_cmd(policy, mode, "germline-office", w.path(), &["--pool", "0"]);
    let i = cmd
        .iter()
        .position(|a| a == "--state-dir")
        .expect("--state-dir");
    cmd[i + 1] = state.display().to_string();
    cmd
}

fn field(v: &Value, k: &str) -> Value {
    v.get(k).cloned().unwrap_or(Value::Null)
}

/// Issue 29: errors of the server (-32602, -32601, ...) became -32000 with germline's text,
/// and `logging/setLevel` was answered `{}` for a server that does not implement it. Now the
/// agent's copy's JSON-RPC errors, and a data-free copy's, reach the agent as the server
/// wrote them: the same code, message and data as from the server run unprotected.
#[test]
fn the_servers_errors_reach_the_agent_as_the_server_wrote_them() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let policy = w.policy(1, "");
    let plain = client(&["errors"], &direct_office(None));
    let germ = client(
        &["errors"],
        &germline_office(&w, &policy, "germline", "errors"),
    );
    assert_eq!(plain.len(), germ.len(), "{plain:?}\n{germ:?}");
    assert!(plain.len() >= 9, "{plain:?}");
    // germline's own refusal keeps its code and its text (the release's tools named).
    const OWN: &str = "tools/call unknown tool";
    eprintln!("{:<30} | {:<60} | germline run", "request", "unprotected");
    for (p, g) in plain.iter().zip(&germ) {
        let show = |v: &Value| {
            format!(
                "ok={} code={} message={} data={}",
                field(v, "ok"),
                field(v, "code"),
                field(v, "message"),
                field(v, "data")
            )
        };
        eprintln!(
            "{:<30} | {:<60} | {}",
            p["req"].as_str().unwrap_or_default(),
            show(p),
            show(g)
        );
        if p["req"] != OWN {
            assert_eq!(p, g, "the same answer unprotected and under germline");
        }
    }
    let by = |name: &str| {
        germ.iter()
            .find(|v| v["req"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} in {germ:?}"))
    };
    // The server's own -32601, not germline's `{}` or its own text.
    let set_level = by("logging/setLevel");
    assert_eq!(
        (field(&set_level, "code"), field(&set_level, "message")),
        (json!(-32601), json!("Method not found"))
    );
    assert_eq!(field(&by("unknown method"), "code"), json!(-32601));
    assert_eq!(
        field(&by("resources/read unknown"), "code"),
        json!(-32602),
        "the server's -32602 with its data"
    );
    let own = by(OWN);
    assert_eq!(field(&own, "code"), json!(-32602), "{own}");
    assert!(
        own["message"].as_str().is_some_and(
            |m| m.starts_with("unknown tool \"no_such_tool\": release germline-office")
        ),
        "{own}"
    );
}

/// `germline run`'s pid under the client `client_pid` (its child, as the SDK started it).
fn germline_run_pid(client_pid: u32) -> Option<u32> {
    descendants(client_pid as i32).into_iter().find_map(|p| {
        let cmd = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
        let args: Vec<&[u8]> = cmd.split(|b| *b == 0).collect();
        (args.len() > 1 && args[0].ends_with(b"germline") && args[1] == b"run").then_some(p as u32)
    })
}

/// Samples of the live copies of one `germline run`, every millisecond: (monotonic time,
/// cgroups with a task, the tasks).
type Samples = Vec<(f64, BTreeSet<String>, Vec<i32>)>;

fn watch(pid: u32, stop: Arc<AtomicBool>, samples: Arc<Mutex<Samples>>) {
    while !stop.load(Ordering::SeqCst) {
        let live = live_copies(pid);
        let t = monotonic();
        let cgroups = live.iter().map(|(c, _)| c.clone()).collect();
        let pids = live
            .iter()
            .flat_map(|(_, p)| p.iter().copied())
            .filter(|p| running(*p))
            .collect();
        if let Ok(mut s) = samples.lock() {
            s.push((t, cgroups, pids));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// What one mode showed on a cancelled call.
struct Cancelled {
    /// The copies (cgroups) live when the cancel was sent; and the ms until they were all
    /// empty and their tasks gone (None: not within the samples).
    copies: usize,
    gone_ms: Option<f64>,
    /// The ms from the cancel until the broker closed the call's pending request to the sink.
    dropped_ms: Option<f64>,
    late: Vec<Value>,
    next_ms: f64,
    next_ok: bool,
}

/// A call of `tool` with `args` to `server`, cancelled while its request waits at the slow
/// `sink`; with `watch_copies`, the copies of `germline run` are sampled meanwhile.
fn cancel_run(
    w: &World,
    sink: &Sink,
    (tool, args): (&str, &str),
    server: &[String],
    watch_copies: bool,
) -> Cancelled {
    sink.clear();
    let go = w.path().join(format!("go-{:x}", rand_u64()));
    let go_s = go.display().to_string();
    let c = Client::start(
        &["cancel", tool, args, "--go-file", &go_s, "--quiet", "3"],
        server,
    );
    let stop = Arc::new(AtomicBool::new(false));
    let samples: Arc<Mutex<Samples>> = Arc::default();
    let mut watcher = None;
    if watch_copies {
        let mut pid = None;
        for _ in 0..600 {
            pid = germline_run_pid(c.child.id());
            if pid.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let pid = pid.expect("germline run under the client");
        let (stop, samples) = (stop.clone(), samples.clone());
        watcher = Some(std::thread::spawn(move || watch(pid, stop, samples)));
    }
    // The cancel goes out while the call waits for its answer from the slow service: its
    // request is pending in the broker (or, unprotected, in the server).
    for _ in 0..600 {
        if !sink.bodies().is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!sink.bodies().is_empty(), "the call reached the sink");
    std::thread::sleep(Duration::from_millis(200));
    std::fs::write(&go, "").expect("go file");
    let sent = c.next();
    let t = sent["cancel_monotonic"].as_f64().expect("cancel time");
    assert_eq!(sent["answered_before"], json!(false), "{sent}");
    let after = c.next();
    stop.store(true, Ordering::SeqCst);
    if let Some(h) = watcher {
        h.join().expect("watcher");
    }
    let lines = c.finish();
    assert!(lines.is_empty(), "{lines:?}");
    assert_eq!(
        after["cancel_sent"].as_array().map(Vec::len),
        Some(1),
        "the SDK sent notifications/cancelled: {after}"
    );
    let s = samples.lock().expect("samples");
    let before = s.iter().rev().find(|(at, _, _)| *at < t);
    let (copies, gone_ms) = match before {
        Some((_, cgs, pids)) => {
            let gone = s.iter().find(|(at, live, alive)| {
                *at >= t && live.is_disjoint(cgs) && pids.iter().all(|p| !alive.contains(p))
            });
            (cgs.len(), gone.map(|(at, _, _)| (at - t) * 1000.0))
        }
        None => (0, None),
    };
    let dropped_ms = std::fs::read_to_string(&sink.log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["dropped"] == json!(true))
        .and_then(|v| v["monotonic"].as_f64())
        .map(|at| (at - t) * 1000.0);
    Cancelled {
        copies,
        gone_ms,
        dropped_ms,
        late: after["late"].as_array().cloned().unwrap_or_default(),
        next_ms: after["next_ms"].as_f64().unwrap_or(f64::MAX),
        next_ok: after["next_ok"] == json!(true),
    }
}

/// Issue 29: `notifications/cancelled` was ignored over stdio: the call ran to its end and a
/// ping after the cancel waited 4.5 s. Now the cancel kills the call's copies in every group
/// (their cgroups emptied within 100 ms, measured), the broker drops their pending request,
/// the agent gets no result for the cancelled id, and the next call is served at once; as the
/// server run unprotected, and as `sig-pin` (the same server, one process, told of the cancel).
#[test]
fn a_cancel_kills_the_calls_copies_and_the_next_call_is_served_at_once() {
    if !can_run() {
        return;
    }
    let w = World::new();
    // A slow OCR service: the call waits 5 s for its answer.
    let sink = Sink::start_args(w.path(), "slow", &["--delay".to_string(), "5".to_string()]);
    let policy = w.policy(sink.port, "");
    let files = json!({"invoice": w.invoice, "salary_sheet": w.salary}).to_string();
    let annotate = ("ocr_annotate", files.as_str());
    // Unprotected, the chrooted server cannot read the host's files: the same wait, on text.
    let text = json!({"text": "a slow call"}).to_string();
    let plain = cancel_run(
        &w,
        &sink,
        ("ocr_text", &text),
        &direct_office(Some(sink.port)),
        false,
    );
    let sigpin = cancel_run(
        &w,
        &sink,
        annotate,
        &germline_office(&w, &policy, "sig-pin", "cancel"),
        false,
    );
    let germ = cancel_run(
        &w,
        &sink,
        annotate,
        &germline_office(&w, &policy, "germline", "cancel"),
        true,
    );
    let ms = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.1} ms"));
    eprintln!("run          | late answers | next call  | pending request dropped | copies gone");
    for (name, r) in [
        ("unprotected", &plain),
        ("sig-pin", &sigpin),
        ("germline", &germ),
    ] {
        eprintln!(
            "{name:<12} | {:<12} | {:>7.1} ms | {:<23} | {}",
            r.late.len(),
            r.next_ms,
            ms(r.dropped_ms),
            if name == "germline" {
                format!("{} copies, cgroups empty after {}", r.copies, ms(r.gone_ms))
            } else {
                "-".into()
            }
        );
    }
    for (name, r) in [
        ("unprotected", &plain),
        ("sig-pin", &sigpin),
        ("germline", &germ),
    ] {
        assert!(
            r.late.is_empty(),
            "{name}: an answer to the cancelled id: {:?}",
            r.late
        );
        assert!(r.next_ok, "{name}: the next call failed");
        // At once: well before the 5 s the cancelled call would have waited.
        assert!(
            r.next_ms < 2500.0,
            "{name}: next call took {} ms",
            r.next_ms
        );
    }
    // Fig. 2c: two groups, so two copies, both killed, with every task of their cgroups.
    assert_eq!(germ.copies, 2, "the call's copies were live at the cancel");
    let gone = germ.gone_ms.expect("the copies' cgroups emptied");
    assert!(gone < 100.0, "copies gone after {gone:.1} ms");
    let dropped = germ
        .dropped_ms
        .expect("the broker dropped the pending request");
    assert!(
        dropped < 100.0,
        "pending request dropped after {dropped:.1} ms"
    );
}

/// Issue 29: a ping sent during a long call waited for the call. Now it is answered at once
/// (the stdio loop reads the agent while the call runs), as by the server run unprotected and
/// under `sig-pin`.
#[test]
fn a_ping_during_a_long_call_is_answered_at_once() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let sink = Sink::start_args(w.path(), "slow", &["--delay".to_string(), "3".to_string()]);
    let policy = w.policy(sink.port, "");
    let args = json!({"invoice": w.invoice, "salary_sheet": w.salary}).to_string();
    let ping = ["ping", "ocr_annotate", args.as_str(), "--after", "1.5"];
    let plain_args = json!({"text": "a slow call"}).to_string();
    // Unprotected, the chrooted server cannot read the host's files: the same wait, on text.
    let plain = client(
        &["ping", "ocr_text", &plain_args, "--after", "1.5"],
        &direct_office(Some(sink.port)),
    );
    let sigpin = client(&ping, &germline_office(&w, &policy, "sig-pin", "ping"));
    let germ = client(&ping, &germline_office(&w, &policy, "germline", "ping"));
    for (name, out) in [
        ("unprotected", &plain),
        ("sig-pin", &sigpin),
        ("germline", &germ),
    ] {
        let r = out.first().expect("one line");
        eprintln!(
            "{name:<12} pings {:?} ms during a call of {:.0} ms",
            r["pings_ms"]
                .as_array()
                .map(|a| a
                    .iter()
                    .filter_map(Value::as_f64)
                    .map(|x| (x * 10.0).round() / 10.0)
                    .collect::<Vec<_>>())
                .unwrap_or_default(),
            r["call_ms"].as_f64().unwrap_or_default()
        );
        assert_eq!(r["call_ok"], json!(true), "{name}: {r}");
        assert_eq!(r["call_done_before_pings"], json!(false), "{name}: {r}");
        assert!(
            r["call_ms"].as_f64().unwrap_or_default() > 3000.0,
            "{name}: {r}"
        );
        let pings = r["pings_ms"].as_array().expect("pings");
        assert_eq!(pings.len(), 5, "{name}: {r}");
        assert!(
            pings.iter().all(|p| p.as_f64().is_some_and(|x| x < 1000.0)),
            "{name}: a ping waited: {r}"
        );
    }
}

/// A request cancelled while it waits for its turn (germline serves one request at a time) is
/// dropped unanswered, and the call running meanwhile is not disturbed.
#[test]
fn a_request_cancelled_before_its_turn_is_never_answered() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let sink = Sink::start_args(w.path(), "slow", &["--delay".to_string(), "2".to_string()]);
    let policy = w.policy(sink.port, "");
    let args = json!({"invoice": w.invoice, "salary_sheet": w.salary}).to_string();
    for mode in ["sig-pin", "germline"] {
        let out = client(
            &["cancel-queued", "ocr_annotate", &args, "--after", "1"],
            &germline_office(&w, &policy, mode, "queued"),
        );
        let r = out.first().expect("one line");
        eprintln!("{mode}: {r}");
        assert_eq!(r["first_ok"], json!(true), "{mode}: {r}");
        assert_eq!(r["second_answered"], json!(false), "{mode}: {r}");
        assert_eq!(r["late"], json!([]), "{mode}: {r}");
        assert_eq!(r["after_ok"], json!(true), "{mode}: {r}");
    }
}
