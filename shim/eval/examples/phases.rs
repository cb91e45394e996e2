//! Per-phase medians of one tool's calls, in process, from the runtime's own timestamps
//! (`Outcome.phases`): `cargo run -p germline-eval --example phases -- <germline run's
//! options> RELEASE --tool T --arguments JSON [--calls N --warmup N --gap-ms MS]`. A
//! diagnostic for where a call's time goes (docs/performance.md), not a benchmark of record:
//! `germline run-bench` is. A phase a call laps more than once (each copy of a multi-group
//! call laps its own `fork`, `broker.start_copy`, `copy.mcp`, ...) is printed per occurrence,
//! `copy.mcp#2` being the second copy's, so each copy's cost shows on its own.
//! `--cpu` adds what every process of the session spent on each call in CPU time and faults,
//! and between calls (the refill), read from /proc (`phases_cpu/cpu.rs`; docs/performance.md,
//! "Issue 30: what each unmet target would need").

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

#[path = "phases_cpu/cpu.rs"]
mod cpu;

use clap::Parser;
use serde_json::{json, Value};

#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    run: germline_mcp::cli::RunArgs,
    #[arg(long)]
    tool: String,
    #[arg(long, default_value = "{}")]
    arguments: String,
    #[arg(long, default_value_t = 30)]
    calls: usize,
    #[arg(long, default_value_t = 5)]
    warmup: usize,
    #[arg(long, default_value_t = 20)]
    gap_ms: u64,
    /// Tell the observers before the answer, as before `Runtime::observe_after_answer` (A/B).
    #[arg(long)]
    observers_on_path: bool,
    /// Also read every process's CPU time, faults and (copies') private memory from /proc
    /// before and after each measured call (`phases_cpu/cpu.rs`): CPU, not wall, time.
    #[arg(long)]
    cpu: bool,
    /// With --cpu: skip the copies' private memory (smaps_rollup walks their page tables).
    #[arg(long)]
    no_memory: bool,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn main() -> Result<(), String> {
    // The session starts its broker as `<this executable> broker serve ...`: hand that to the
    // `germline` binary beside `examples/`.
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if argv.get(1).is_some_and(|a| a == "broker") {
        use std::os::unix::process::CommandExt;
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let germline = exe
            .parent()
            .and_then(|p| p.parent())
            .ok_or("no target directory")?
            .join("germline");
        return Err(std::process::Command::new(germline)
            .args(&argv[1..])
            .exec()
            .to_string());
    }
    let a = Cli::parse();
    let args: Value = serde_json::from_str(&a.arguments).map_err(|e| e.to_string())?;
    let mut s = germline_mcp::cli::start_session(&a.run).map_err(|e| e.to_string())?;
    s.handle(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params":
        {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "phases", "version": "0"}}}));
    // As `germline run`'s stdio loop: observers are told after the answer (timed apart).
    s.runtime.observe_after_answer(!a.observers_on_path);
    let mut phases: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut handle = Vec::new();
    let mut writes: BTreeMap<String, usize> = BTreeMap::new();
    let mut cpu_calls = Vec::new();
    let mut cpu_thread = Vec::new();
    // Between calls (the answer's observers, the idle steps: the retire's end and the pool's
    // refill, and the gap): from one call's end snapshot to the next call's start snapshot.
    let mut cpu_between = Vec::new();
    let mut last_after: Option<cpu::Snapshot> = None;
    for i in 0..a.warmup + a.calls {
        while s.runtime.idle_step() {}
        std::thread::sleep(Duration::from_millis(a.gap_ms));
        let measured = a.cpu && i >= a.warmup;
        let before = measured.then(|| cpu::snapshot(!a.no_memory));
        let th = cpu::thread_ns();
        let t = Instant::now();
        let r = s
            .handle(
                json!({"jsonrpc": "2.0", "id": i + 1, "method": "tools/call",
                "params": {"name": a.tool, "arguments": args}}),
            )
            .unwrap_or(Value::Null);
        let us = t.elapsed().as_secs_f64() * 1e3;
        let th = cpu::thread_ns().saturating_sub(th);
        if let Some(b) = before {
            if let Some(l) = last_after.take() {
                cpu_between.push(cpu::delta(&l, &b));
            }
            let after = cpu::snapshot(!a.no_memory);
            cpu_calls.push(cpu::delta(&b, &after));
            cpu_thread.push(th as f64 / 1e6);
            last_after = Some(after);
        }
        let t = Instant::now();
        s.runtime.after_answer();
        let after = t.elapsed().as_secs_f64() * 1e3;
        if r.get("result").is_none() || r.pointer("/result/isError") == Some(&json!(true)) {
            return Err(format!("call {}: {r}", i + 1));
        }
        if i < a.warmup {
            continue;
        }
        handle.push(us);
        phases
            .entry("after_answer.observers".into())
            .or_default()
            .push(after);
        // A tool that reports its own body's time (the bench release's `work_us`): the
        // agent's copy's, so the copy's `copy.mcp` can be told from the tool's own work.
        let work = r
            .pointer("/result/content/0/text")
            .and_then(Value::as_str)
            .and_then(|t| serde_json::from_str::<Value>(t).ok())
            .and_then(|v| v["work_us"].as_f64());
        if let Some(w) = work {
            phases
                .entry("tool.work_us (answer's)".into())
                .or_default()
                .push(w / 1e3);
        }
        let w = r.pointer("/result/_meta/germline/writes").cloned();
        let key = match w {
            Some(w) => w.to_string(),
            None => "(none)".into(),
        };
        *writes.entry(key).or_default() += 1;
        if let Some(o) = &s.last {
            let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
            for (k, v) in &o.phases {
                let n = seen.entry(k).or_default();
                *n += 1;
                let name = if *n == 1 {
                    k.to_string()
                } else {
                    format!("{k}#{n}")
                };
                phases.entry(name).or_default().push(*v as f64 / 1e3);
            }
        }
    }
    s.runtime.stop();
    println!(
        "{} calls: handle median {:.2} ms",
        a.calls,
        median(&mut handle)
    );
    for (k, v) in &mut phases {
        let n = v.len();
        let m = median(v);
        println!(
            "  {k:<28} median {m:>8.2} ms  p90 {:>8.2}  p99 {:>8.2}  ({n} laps)",
            cpu::pct(v, 0.9),
            cpu::pct(v, 0.99)
        );
    }
    let mut h = handle.clone();
    println!(
        "  handle p50 {:.2} p90 {:.2} p99 {:.2} ms",
        cpu::pct(&mut h, 0.5),
        cpu::pct(&mut h, 0.9),
        cpu::pct(&mut h, 0.99)
    );
    if a.cpu {
        cpu::report(&cpu_calls, &cpu_thread);
        println!("between calls (observers after the answer, idle steps, the gap):");
        cpu::report(&cpu_between, &[]);
    }
    for (w, n) in writes {
        println!("  writes x{n}: {w}");
    }
    Ok(())
}
