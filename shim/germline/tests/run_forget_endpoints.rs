//! Endpoints the broker prepared for pool copies are forgotten when the shim drops those
//! copies unused (`germline_sandbox::offered`, broker op `forget_copy`): through `germline run
//! --pool 1 --broker SOCK` against a broker of its own process (as `germline daemon` and
//! `serve` deployments share one), with the real MCP client SDK. A two-group call deepens the
//! pool to two, and the pause after it refills both; a one-group call then takes one, and after
//! it the other (ready by then) has its endpoint prepared (the broker's `stats` counts it: a
//! forked pool copy is offered at an idle step once it is ready, so a copy forked at the last
//! idle step before a call is offered only after that call). Once the session ends, the stopped
//! pool's copies are forgotten and the broker holds none. Before `forget_copy`, each stayed, pinning its
//! copy's network namespace in the broker until 64 more pushed it out.

mod run_common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use germline_broker::control::BrokerClient;
use run_common::*;
use serde_json::json;

struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_stopped_pools_prepared_endpoints_are_forgotten_by_the_broker() {
    if !can_run() {
        return;
    }
    let w = World::new();
    let sink = Sink::start(w.path(), "ocr");
    let policy = w.policy(sink.port, "");
    let sock = w.path().join("run/broker.sock");
    let _broker = Daemon(
        Command::new(germline())
            .args(["broker", "serve", "--policy"])
            .arg(&policy)
            .arg("--socket")
            .arg(&sock)
            .arg("--state")
            .arg(w.path().join("broker-state"))
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn broker"),
    );
    let t0 = Instant::now();
    let client = loop {
        match BrokerClient::connect(&sock) {
            Ok(c) => break c,
            Err(e) if t0.elapsed() > Duration::from_secs(10) => {
                panic!("broker never listened: {e}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    let call = json!({"tool": "ocr_annotate", "arguments": {
        "invoice": w.invoice.display().to_string(),
        "salary_sheet": w.salary.display().to_string()}});
    // Both arguments finance's: one group.
    let one = json!({"tool": "ocr_annotate", "arguments": {
        "invoice": w.invoice.display().to_string(),
        "salary_sheet": w.invoice.display().to_string()}});
    let sock_arg = sock.display().to_string();
    let run = AgentRun::start(
        w.path(),
        &json!([call, {"sleep": 2}, one, {"sleep": 4}]),
        &run_cmd(
            &policy,
            "germline",
            "germline-office",
            w.path(),
            &["--pool", "1", "--broker", &sock_arg],
        ),
    );
    let out = run.next();
    assert!(out["ok"].as_bool().unwrap_or(false), "{out}");
    assert_eq!(out["meta"]["germline"]["copies"], json!(2), "{out}");
    let out = run.next();
    assert!(out["ok"].as_bool().unwrap_or(false), "{out}");
    assert_eq!(out["meta"]["germline"]["copies"], json!(1), "{out}");
    // While the agent pauses, the copy the call left in the pool has its endpoint prepared.
    let t0 = Instant::now();
    let mut seen = 0;
    while t0.elapsed() < Duration::from_secs(4) && seen < 2 {
        seen = seen.max(client.prepared_endpoints().expect("stats"));
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        seen >= 1,
        "no pool copy's endpoint was prepared while the agent paused"
    );
    assert!(run.finish(), "the agent failed");
    assert_eq!(
        client.prepared_endpoints().expect("stats"),
        0,
        "the stopped pool's copies (after {seen} prepared) are forgotten by the broker"
    );
}
