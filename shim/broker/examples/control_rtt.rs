//! Where a control round trip's time goes (issue 28/30; a measurement, not a test): a broker
//! served on a thread, as `germline broker serve` serves each connection, and one client
//! timing a bare round trip (`copy_proxy`) against the three a pooled single-copy call makes
//! (`begin_call`, `start_copy` with a listener passed, `end_last_copy`), and the same three
//! broker methods called directly (no socket), so transport and handling separate.
//!
//! `cargo run --release -p germline-broker --example control_rtt -- [ROUNDS]`

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use germline_broker::control::{self, BeginCall, BrokerClient};
use germline_broker::{Broker, BrokerConfig};
use germline_policy::call::LabelRules;
use germline_policy::plan::{plan, Member, PlanInput, PlanMode};
use germline_policy::{Label, Policy};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn us(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e6
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(300);
    let dir = tempfile::tempdir()?;
    let pol = dir.path().join("policy.toml");
    std::fs::write(&pol, "[labels]\nhr = \"\"\n\n[destinations]\n")?;
    let policy = Arc::new(Policy::load(&pol)?);
    let broker = Arc::new(Broker::start(BrokerConfig::new(
        policy,
        &dir.path().join("state"),
    ))?);
    let sock = dir.path().join("run/broker.sock");
    let listener = control::bind(&sock)?;
    let b = broker.clone();
    std::thread::spawn(move || {
        while let Ok(fd) = nix::sys::socket::accept(listener.as_raw_fd()) {
            // SAFETY: accept returned a fresh descriptor owned by nobody else.
            let conn = unsafe { OwnedFd::from_raw_fd(fd) };
            let b = b.clone();
            std::thread::spawn(move || control::connection(&b, conn));
        }
    });
    let c = BrokerClient::connect(&sock)?;
    let agent = Member {
        name: "agent".into(),
        clearance: Label::default(),
    };
    let begin = || BeginCall {
        release: "sha256:r".into(),
        user: String::new(),
        items: Vec::new(),
        hosts: Vec::new(),
        consumers: vec![agent.clone()],
        mode: PlanMode::Split,
        rules: LabelRules::default(),
        open: false,
        replay: None,
        concurrent: false,
    };
    let gap = std::env::var("GAP_MS")
        .ok()
        .and_then(|g| g.parse().ok())
        .unwrap_or(0u64);
    let (mut bare, mut bc, mut sc, mut ec) = (vec![], vec![], vec![], vec![]);
    let (mut dbc, mut dsc, mut dec) = (vec![], vec![], vec![]);
    for _ in 0..rounds {
        std::thread::sleep(Duration::from_millis(gap));
        let t = Instant::now();
        c.copy_proxy()?;
        bare.push(us(t));
        let l = std::net::TcpListener::bind("127.0.0.1:0")?;
        let t = Instant::now();
        let (call, _, _) = c.begin_call(begin())?;
        bc.push(us(t));
        let t = Instant::now();
        c.start_copy_on(call, 0, l.as_fd(), Instant::now() + Duration::from_secs(10))?;
        sc.push(us(t));
        let t = Instant::now();
        c.end_last_copy(call, 0)?;
        ec.push(us(t));
        // The same three, called directly.
        let l = std::net::TcpListener::bind("127.0.0.1:0")?;
        l.set_nonblocking(true)?;
        let t = Instant::now();
        let input = PlanInput {
            items: &[],
            hosts: &[],
            consumers: std::slice::from_ref(&agent),
        };
        let p = plan(input, PlanMode::Split)?;
        let (call, _) = broker.begin_call("sha256:r", "", p, &[], LabelRules::default(), false)?;
        dbc.push(us(t));
        let t = Instant::now();
        broker.start_copy_on(call, 0, l, Instant::now() + Duration::from_secs(10))?;
        dsc.push(us(t));
        let t = Instant::now();
        broker.end_copy(call, 0)?;
        broker.end_call(call)?;
        dec.push(us(t));
    }
    println!(
        "{rounds} rounds, gap {gap} ms, client spin {:?}, medians in microseconds",
        std::env::var("GERMLINE_BROKER_SPIN_US").ok()
    );
    println!("  control copy_proxy (bare)  {:8.1}", median(bare));
    println!("  control begin_call         {:8.1}", median(bc));
    println!("  control start_copy_on      {:8.1}", median(sc));
    println!("  control end_last_copy      {:8.1}", median(ec));
    println!("  direct  begin_call         {:8.1}", median(dbc));
    println!("  direct  start_copy_on      {:8.1}", median(dsc));
    println!("  direct  end_copy+end_call  {:8.1}", median(dec));
    Ok(())
}
