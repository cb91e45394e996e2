//! `germline broker bench`: the broker's added latency per delivered request, against a direct
//! request to the same sink in the same run (issue 5; a benchmark, not a test).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use germline_policy::call::LabelRules;
use germline_policy::plan::{plan, Member, PlanInput, PlanMode};
use germline_policy::{Label, Policy};
use serde::Serialize;

use crate::{Broker, BrokerConfig};

#[derive(Debug, Serialize)]
pub struct BenchResult {
    pub requests: usize,
    /// Where the client ran: "netns" (a copy's own namespace, as in production) or
    /// "loopback" (the host's, when not root).
    pub client: &'static str,
    pub direct_p50_us: f64,
    pub direct_p99_us: f64,
    pub broker_p50_us: f64,
    pub broker_p99_us: f64,
    pub added_p50_us: f64,
    pub added_p99_us: f64,
}

fn sink() -> std::io::Result<SocketAddr> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    let addr = l.local_addr()?;
    std::thread::spawn(move || {
        for conn in l.incoming().flatten() {
            let _ = conn.set_nodelay(true);
            let mut r = BufReader::new(conn);
            let mut line = String::new();
            loop {
                line.clear();
                match r.read_line(&mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) if line == "\r\n" => {
                        let _ = r.get_mut().write_all(
                            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                        );
                        break;
                    }
                    Ok(_) => {}
                }
            }
        }
    });
    Ok(addr)
}

fn get(to: SocketAddr, target: &str) -> std::io::Result<Duration> {
    let t = Instant::now();
    let mut s = TcpStream::connect(to)?;
    s.set_nodelay(true)?;
    s.write_all(
        format!("GET {target} HTTP/1.1\r\nhost: bench.example\r\nconnection: close\r\n\r\n")
            .as_bytes(),
    )?;
    let mut buf = Vec::with_capacity(256);
    s.read_to_end(&mut buf)?;
    if !buf.starts_with(b"HTTP/1.1 200") {
        return Err(std::io::Error::other(format!(
            "unexpected answer {:?}",
            String::from_utf8_lossy(&buf)
        )));
    }
    Ok(t.elapsed())
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v.get(i).copied().unwrap_or(0.0)
}

/// Runs `requests` brokered, then `requests` direct requests to the same sink, each after a
/// warm-up of a tenth as many.
pub fn run(requests: usize, state_dir: &Path) -> Result<BenchResult, String> {
    let sink = sink().map_err(|e| e.to_string())?;
    let text = format!(
        "[labels]\npublic = \"\"\n[destinations]\n\"bench.example\" = []\n[pins]\n\"bench.example\" = \"{sink}\"\n"
    );
    let policy_path = state_dir.join("bench-policy.toml");
    std::fs::create_dir_all(state_dir).map_err(|e| e.to_string())?;
    std::fs::write(&policy_path, text).map_err(|e| e.to_string())?;
    let policy = Arc::new(Policy::load(&policy_path).map_err(|e| e.to_string())?);
    let broker = Broker::start(BrokerConfig::new(policy, state_dir)).map_err(|e| e.to_string())?;
    let hosts = [Member {
        name: "bench.example".into(),
        clearance: Label::public(),
    }];
    let p = plan(
        PlanInput {
            items: &[],
            hosts: &hosts,
            consumers: &[],
        },
        PlanMode::Split,
    )
    .map_err(|e| e.to_string())?;
    let (call, _) = broker
        .begin_call("sha256:bench", "", p, &hosts, LabelRules::default(), false)
        .map_err(|e| e.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(3600);

    // SAFETY: geteuid(2) cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let (proxy, ns, client) = if root {
        let ns: OwnedFd = std::thread::spawn(|| -> Result<OwnedFd, String> {
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).map_err(|e| e.to_string())?;
            Ok(OwnedFd::from(
                std::fs::File::open("/proc/thread-self/ns/net").map_err(|e| e.to_string())?,
            ))
        })
        .join()
        .map_err(|_| "netns thread died".to_string())??;
        let addr = broker
            .start_copy(call, 0, ns.as_fd(), deadline)
            .map_err(|e| e.to_string())?;
        (addr, Some(ns), "netns")
    } else {
        let l = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        l.set_nonblocking(true).map_err(|e| e.to_string())?;
        let addr = broker
            .start_copy_on(call, 0, l, deadline)
            .map_err(|e| e.to_string())?;
        (addr, None, "loopback")
    };
    // Direct requests from the host namespace; brokered ones from the copy's namespace.
    let direct_target = "/";
    let proxied_target = "http://bench.example/";
    let brokered = std::thread::spawn(move || -> Result<Vec<f64>, String> {
        if let Some(ns) = &ns {
            nix::sched::setns(ns.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET)
                .map_err(|e| e.to_string())?;
        }
        let mut v = Vec::with_capacity(requests);
        for i in 0..requests + requests / 10 {
            let d = get(proxy, proxied_target).map_err(|e| e.to_string())?;
            if i >= requests / 10 {
                v.push(d.as_secs_f64() * 1e6);
            }
        }
        Ok(v)
    });
    let mut broker_us = brokered
        .join()
        .map_err(|_| "client thread died".to_string())??;
    let mut direct_us = Vec::with_capacity(requests);
    for i in 0..requests + requests / 10 {
        let d = get(sink, direct_target).map_err(|e| e.to_string())?;
        if i >= requests / 10 {
            direct_us.push(d.as_secs_f64() * 1e6);
        }
    }
    let _ = broker.end_call(call);
    let (d50, d99) = (pct(&mut direct_us, 0.5), pct(&mut direct_us, 0.99));
    let (b50, b99) = (pct(&mut broker_us, 0.5), pct(&mut broker_us, 0.99));
    Ok(BenchResult {
        requests,
        client,
        direct_p50_us: d50,
        direct_p99_us: d99,
        broker_p50_us: b50,
        broker_p99_us: b99,
        added_p50_us: b50 - d50,
        added_p99_us: b99 - d99,
    })
}
