//! A call's observers (metrics, traces, the state file) are told after its answer went out
//! when the front asks for it (`Runtime::observe_after_answer`, as `germline run`'s stdio loop
//! does; docs/performance.md, "Off the call's path"): a slow observer does not delay the
//! answer, and every call is still told, once, with its outcome and its phases, at the latest
//! before the next call begins or at stop. Real release (server-everything, the
//! node-everything bundle) under germline execution with a spawned pool, real broker
//! (`germline broker serve`), the session as `germline run` builds it.

mod run_common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use germline_engine::observe::{CallObserver, CallView, RuntimeView};
use germline_mcp::session::Session;
use run_common::*;
use serde_json::{json, Value};

/// What the slow observer was told: (tool, ok, number of phases, when).
type Told = Arc<Mutex<Vec<(String, bool, usize, Instant)>>>;

/// An observer that takes `delay` per call (a metrics push or trace export that blocks).
struct Slow {
    told: Told,
    delay: Duration,
}

impl CallObserver for Slow {
    fn after_call(&mut self, _rt: &RuntimeView<'_>, call: &CallView<'_>) {
        std::thread::sleep(self.delay);
        let (ok, phases) = match call.result {
            Ok(o) => (true, o.phases.len()),
            Err(_) => (false, 0),
        };
        self.told
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((call.tool.to_string(), ok, phases, Instant::now()));
    }
}

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    run: germline_mcp::cli::RunArgs,
}

/// `germline broker serve` on `sock` (the session is given it with `--broker`).
struct Broker(Child);

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn broker(dir: &Path, policy: &Path) -> (Broker, std::path::PathBuf) {
    let sock = dir.join("run/broker.sock");
    let child = Command::new(germline())
        .args(["broker", "serve", "--policy"])
        .arg(policy)
        .arg("--socket")
        .arg(&sock)
        .arg("--state")
        .arg(dir.join("state"))
        .stdin(Stdio::null())
        .spawn()
        .expect("start the broker");
    let b = Broker(child);
    let up = eventually(|| germline_broker::control::BrokerClient::connect(&sock).is_ok());
    assert!(up, "the broker did not come up at {}", sock.display());
    (b, sock)
}

fn call(s: &mut Session, id: u64, message: &str) -> Value {
    s.handle(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"message": message}}}))
        .expect("an answer")
}

fn told(t: &Told) -> Vec<(String, bool, usize, Instant)> {
    t.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
}

#[test]
fn a_slow_observer_is_told_after_the_answer_and_never_delays_it() {
    let bundle = bundle("node-everything");
    if !can_run() || !bundle.exists() {
        return;
    }
    let dir = tempfile::tempdir().expect("tmp");
    let policy = root().join("config/policy.example.toml");
    let (_broker, sock) = broker(dir.path(), &policy);
    let args = [
        "germline".into(),
        "--policy".into(),
        policy.into_os_string(),
        "--key".into(),
        key().into_os_string(),
        "--pool".into(),
        "1".into(),
        "--no-evidence".into(),
        "--broker".into(),
        sock.into_os_string(),
        "--state-dir".into(),
        dir.path().join("state").into_os_string(),
        bundle.into_os_string(),
    ];
    let cli = Cli::parse_from(args);
    let mut s = germline_mcp::cli::start_session(&cli.run).expect("session");
    s.handle(
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params":
        {"protocolVersion": "2025-06-18", "capabilities": {},
         "clientInfo": {"name": "observers", "version": "0"}}}),
    );
    let t: Told = Arc::default();
    let delay = Duration::from_millis(1500);
    s.runtime.add_observer(Box::new(Slow {
        told: t.clone(),
        delay,
    }));
    s.runtime.observe_after_answer(true);
    let refill = |s: &mut Session| {
        let end = Instant::now() + Duration::from_secs(60);
        while s.runtime.idle_step() && Instant::now() < end {}
    };

    // The answer comes without the observer's delay, and the observer is not told yet.
    refill(&mut s);
    let t0 = Instant::now();
    let r = call(&mut s, 1, "one");
    let answered = t0.elapsed();
    assert_eq!(
        r.pointer("/result/content/0/text").and_then(Value::as_str),
        Some("Echo: one"),
        "{r}"
    );
    assert!(
        answered < delay,
        "the answer waited for the observer: {answered:?}"
    );
    assert!(told(&t).is_empty(), "told before the answer went out");
    // The front tells it once the answer is out: the call, its outcome and its phases.
    s.runtime.after_answer();
    let got = told(&t);
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].0.as_str(), got[0].1), ("echo", true));
    assert!(got[0].2 > 0, "the phases reach the observer");
    // Told once: a second after_answer tells nothing.
    s.runtime.after_answer();
    assert_eq!(told(&t).len(), 1);

    // A front that does not tell them: the next call tells the last one's before it begins,
    // and stop tells the last.
    refill(&mut s);
    call(&mut s, 2, "two");
    assert_eq!(told(&t).len(), 1);
    refill(&mut s);
    let before = Instant::now();
    call(&mut s, 3, "three");
    let got = told(&t);
    assert_eq!(got.len(), 2, "call two's observers were told");
    assert!(got[1].3 >= before, "told as call three began");

    // Off (the default for a caller that reads observers right after the call): told before
    // the answer returns, as before.
    s.runtime.observe_after_answer(false);
    assert_eq!(told(&t).len(), 3, "turning it off tells the call waiting");
    refill(&mut s);
    let t0 = Instant::now();
    call(&mut s, 4, "four");
    assert!(t0.elapsed() >= delay, "told on the call's path");
    assert_eq!(told(&t).len(), 4);
    s.runtime.observe_after_answer(true);
    refill(&mut s);
    call(&mut s, 5, "five");
    assert_eq!(told(&t).len(), 4);
    s.runtime.stop();
    assert_eq!(told(&t).len(), 5, "stop tells the last call's observers");
}
