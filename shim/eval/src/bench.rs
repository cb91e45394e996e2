//! `germline run-bench`: per-call latency through the agent-facing endpoint (MCP over stdio)
//! for one tool under every runtime, in one run on one machine. Each mode is its own
//! `germline run` process; the client here writes one `tools/call` line at a time and times
//! the answer, after a warm-up. A benchmark, not a test: it prints figures and writes JSON.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

use clap::Args;
use serde::Serialize;
use serde_json::{json, Value};

use germline_engine::runtime::Mode;

#[derive(Debug, Args, Clone)]
pub struct BenchArgs {
    #[arg(long)]
    pub policy: PathBuf,
    #[arg(long)]
    pub key: PathBuf,
    /// Calls measured per mode (after the warm-up).
    #[arg(long, default_value_t = 200)]
    pub calls: usize,
    #[arg(long, default_value_t = 20)]
    pub warmup: usize,
    /// Pause between calls, as an agent's own step would leave (0: back to back; the pool
    /// refills only in such pauses).
    #[arg(long, default_value_t = 0)]
    pub gap_ms: u64,
    /// The tool and its arguments.
    #[arg(long, default_value = "get_current_time")]
    pub tool: String,
    #[arg(long, default_value = r#"{"timezone":"UTC"}"#)]
    pub arguments: String,
    /// Pool size of the extra `germline` run with a pool.
    #[arg(long, default_value_t = 2)]
    pub pool: usize,
    /// Where the broker keeps its state.
    #[arg(long, default_value = germline_sys::paths::BROKER_STATE)]
    pub state_dir: PathBuf,
    /// Write the figures here as JSON.
    #[arg(long, default_value = "run-bench.json")]
    pub out: PathBuf,
    /// Only these modes (default: every mode; `germline` also runs with the pool). Without
    /// `fresh-ifc` the ratio to it is not computed.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub modes: Vec<Mode>,
    /// `concurrent`: also run `germline` (no pool, and with `--pool` if above 0) with the
    /// release named in `[copies] concurrent` (issue 30), beside the default one-at-a-time run, for a multi-group tool
    /// such as the bench bundle's `summarize_many`. `sequential` alone is the default.
    #[arg(long, value_delimiter = ',', value_parser = ["sequential", "concurrent"])]
    pub copies: Vec<String>,
    pub release: PathBuf,
}

#[derive(Debug, Serialize)]
pub struct ModeResult {
    pub mode: String,
    pub pool: usize,
    /// How a multi-group call's copies ran: `sequential` (A1) or `concurrent`.
    pub copies: &'static str,
    pub calls: usize,
    pub median_ms: f64,
    pub p99_ms: f64,
    pub mean_ms: f64,
    pub min_ms: f64,
    /// fresh-ifc's median over this one's.
    pub speedup_over_fresh: f64,
    /// Every measured call's latency, in call order (where the tail falls).
    pub samples_ms: Vec<f64>,
    /// Spawned releases (issue 28): the pool's refill rate, copies per second of refill work.
    pub refill_per_s: Option<f64>,
    /// Spawned releases: the private memory of a pooled copy as it entered the pool (kB).
    pub pooled_copy_private_kb: Option<u64>,
    /// Spawned releases: the pool's final figures as the runtime wrote them when it stopped
    /// (`germline_sandbox::spawn::PoolStatus`).
    pub spawn_pool: Option<Value>,
}

/// The spawn pool's figures in a `germline run`'s stderr (the runtime writes them when it
/// stops; none for a forked release or a baseline mode).
fn spawn_pool_of(stderr: &str) -> Option<Value> {
    stderr.lines().rev().find_map(|l| {
        l.strip_prefix(germline_engine::runtime::SPAWN_POOL_LINE)
            .and_then(|j| serde_json::from_str(j).ok())
    })
}

/// The `p` quantile (0..=1) of sorted samples, nearest rank; NaN when there are none.
pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

/// The release's name as its manifest states it (what `[copies] concurrent` names).
pub(crate) fn release_name(release: &std::path::Path) -> Result<String, String> {
    let manifest = release.join("rootfs/.germline/manifest.json");
    let m: Value = serde_json::from_slice(
        &std::fs::read(&manifest).map_err(|e| format!("{}: {e}", manifest.display()))?,
    )
    .map_err(|e| format!("{}: {e}", manifest.display()))?;
    m["name"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| format!("{}: no name", manifest.display()))
}

/// `--policy` with the release named in `[copies] concurrent`, written beside `--out`.
fn concurrent_policy(a: &BenchArgs) -> Result<PathBuf, String> {
    let name = release_name(&a.release)?;
    let text =
        std::fs::read_to_string(&a.policy).map_err(|e| format!("{}: {e}", a.policy.display()))?;
    let line = format!("concurrent = [{}]", json!(name));
    // Into the policy's own `[copies]` table if it has one (a table may appear once).
    let text = match text.find("\n[copies]\n") {
        Some(i) => format!("{}\n[copies]\n{line}\n{}", &text[..i], &text[i + 10..]),
        None => format!("{text}\n[copies]\n{line}\n"),
    };
    let mut out = a.out.clone().into_os_string();
    out.push(".concurrent-policy.toml");
    let out = PathBuf::from(out);
    std::fs::write(&out, text).map_err(|e| format!("{}: {e}", out.display()))?;
    Ok(out)
}

/// The latencies of one mode's calls, and its spawn pool's figures if it has one.
fn measure(
    a: &BenchArgs,
    mode: Mode,
    pool: usize,
    policy: &std::path::Path,
) -> Result<(Vec<f64>, Option<Value>), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    // Its stderr goes to a file (a pipe nobody reads during the run could fill and block it).
    let err_path = std::env::temp_dir().join(format!(
        "germline-run-bench-{}-{}-{pool}.stderr",
        std::process::id(),
        mode.name()
    ));
    let err_file =
        std::fs::File::create(&err_path).map_err(|e| format!("{}: {e}", err_path.display()))?;
    let mut child = Command::new(exe)
        .arg("run")
        .arg("--policy")
        .arg(policy)
        .arg("--key")
        .arg(&a.key)
        .arg("--mode")
        .arg(mode.name())
        .arg("--pool")
        .arg(pool.to_string())
        .arg("--state-dir")
        .arg(&a.state_dir)
        .arg(&a.release)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(err_file)
        .spawn()
        .map_err(|e| format!("germline run: {e}"))?;
    let mut stdin = child.stdin.take().ok_or("stdin")?;
    let mut out = BufReader::new(child.stdout.take().ok_or("stdout")?);
    let args: Value =
        serde_json::from_str(&a.arguments).map_err(|e| format!("--arguments: {e}"))?;
    let mut line = String::new();
    let mut rpc = |id: u64, method: &str, params: Value| -> Result<Value, String> {
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(stdin, "{msg}").map_err(|e| e.to_string())?;
        stdin.flush().map_err(|e| e.to_string())?;
        loop {
            line.clear();
            if out.read_line(&mut line).map_err(|e| e.to_string())? == 0 {
                return Err(format!("{}: germline run exited", mode.name()));
            }
            let v: Value = serde_json::from_str(&line).map_err(|e| e.to_string())?;
            if v.get("id") == Some(&json!(id)) {
                return Ok(v);
            }
        }
    };
    rpc(
        0,
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "germline-run-bench", "version": env!("CARGO_PKG_VERSION")}}),
    )?;
    let mut times = Vec::with_capacity(a.calls);
    for i in 0..(a.warmup + a.calls) {
        if a.gap_ms > 0 {
            std::thread::sleep(std::time::Duration::from_millis(a.gap_ms));
        }
        let t = Instant::now();
        let v = rpc(
            i as u64 + 1,
            "tools/call",
            json!({"name": a.tool, "arguments": args}),
        )?;
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        if v.get("result").is_none() || v["result"]["isError"] == json!(true) {
            return Err(format!("{}: the call failed: {v}", mode.name()));
        }
        if i >= a.warmup {
            times.push(ms);
        }
    }
    drop(stdin);
    let _ = child.wait();
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    let _ = std::fs::remove_file(&err_path);
    Ok((times, spawn_pool_of(&stderr)))
}

pub fn run(a: &BenchArgs) -> Result<(), String> {
    // The machine's load before our own work: figures of runs on a busy machine are not
    // comparable with an idle one's.
    let machine = crate::suite::machine();
    let load = machine["load_at_start"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let mut runs: Vec<(Mode, usize)> = Mode::ALL
        .iter()
        .filter(|m| a.modes.is_empty() || a.modes.contains(m))
        .map(|m| (*m, 0))
        .collect();
    if a.modes.is_empty() || a.modes.contains(&Mode::Germline) {
        runs.push((Mode::Germline, a.pool));
    }
    let mut runs: Vec<(Mode, usize, &'static str)> = runs
        .into_iter()
        .map(|(m, p)| (m, p, "sequential"))
        .collect();
    let conc = if a.copies.iter().any(|c| c == "concurrent") {
        runs.push((Mode::Germline, 0, "concurrent"));
        // And with the pool (issue 30): concurrent copies pay off once no copy is forked on
        // the call's path, which a pool deep enough for the call's groups gives.
        if a.pool > 0 {
            runs.push((Mode::Germline, a.pool, "concurrent"));
        }
        Some(concurrent_policy(a)?)
    } else {
        None
    };
    let mut raw = Vec::new();
    for (mode, pool, copies) in runs {
        eprintln!(
            "run-bench: {} (pool {pool}, copies {copies}) ...",
            mode.name()
        );
        let policy = match (&conc, copies) {
            (Some(p), "concurrent") => p.as_path(),
            _ => a.policy.as_path(),
        };
        let (samples, spawn_pool) = measure(a, mode, pool, policy)?;
        let mut t = samples.clone();
        t.sort_by(f64::total_cmp);
        raw.push((mode, pool, copies, t, samples, spawn_pool));
    }
    let fresh = raw
        .iter()
        .find(|(m, _, _, _, _, _)| *m == Mode::FreshIfc)
        .map(|(_, _, _, t, _, _)| percentile(t, 0.5))
        .unwrap_or(f64::NAN);
    let results: Vec<ModeResult> = raw
        .iter()
        .map(|(m, pool, copies, t, samples, spawn_pool)| {
            let median = percentile(t, 0.5);
            ModeResult {
                mode: m.name().to_string(),
                pool: *pool,
                copies,
                calls: t.len(),
                median_ms: median,
                p99_ms: percentile(t, 0.99),
                mean_ms: t.iter().sum::<f64>() / t.len().max(1) as f64,
                min_ms: t.first().copied().unwrap_or(f64::NAN),
                speedup_over_fresh: fresh / median,
                samples_ms: samples.clone(),
                refill_per_s: spawn_pool.as_ref().and_then(|p| p["refill_per_s"].as_f64()),
                pooled_copy_private_kb: spawn_pool
                    .as_ref()
                    .and_then(|p| p["pooled_copy_private_kb"].as_u64()),
                spawn_pool: spawn_pool.clone(),
            }
        })
        .collect();
    println!(
        "germline run-bench: {} through `germline run` (MCP over stdio), {} calls per mode after {} warm-up, {} ms between calls; load at start {}",
        a.tool, a.calls, a.warmup, a.gap_ms, load
    );
    println!(
        "{:<14} {:>5} {:>10} {:>10} {:>10} {:>14}",
        "mode", "pool", "median ms", "p99 ms", "min ms", "vs fresh-ifc"
    );
    for r in &results {
        // Without a fresh-ifc run there is no ratio to print.
        let vs = if r.speedup_over_fresh.is_finite() {
            format!("{:.1}x", r.speedup_over_fresh)
        } else {
            "-".to_string()
        };
        println!(
            "{:<14} {:>5} {:>10.2} {:>10.2} {:>10.2} {:>14}",
            if r.copies == "concurrent" {
                format!("{}/conc", r.mode)
            } else {
                r.mode.clone()
            },
            r.pool,
            r.median_ms,
            r.p99_ms,
            r.min_ms,
            vs
        );
    }
    // Spawned copies (issue 28): what refilling the pool costs, beside the latencies.
    for r in results.iter().filter(|r| r.spawn_pool.is_some()) {
        let p = r.spawn_pool.as_ref().unwrap_or(&Value::Null);
        println!(
            "  spawned copies, {} pool {}: refill {} copies/s, {} kB private per pooled copy, \
             {} spawned, {:.1} ms per spawn (mean)",
            r.mode,
            r.pool,
            // None: the pool never refilled (pool 0, or no pause long enough).
            r.refill_per_s
                .map_or_else(|| "-".to_string(), |v| format!("{v:.1}")),
            r.pooled_copy_private_kb.unwrap_or(0),
            p["spawned"].as_u64().unwrap_or(0),
            p["mean_spawn_ms"].as_f64().unwrap_or(f64::NAN),
        );
    }
    let target = |name: &str, ok: bool, value: String| {
        println!(
            "  target {name}: {} ({value})",
            if ok { "met" } else { "NOT met" }
        );
        json!({"target": name, "met": ok, "value": value})
    };
    let g = results
        .iter()
        .find(|r| r.mode == "germline" && r.pool == 0 && r.copies == "sequential");
    let gp = results.iter().find(|r| r.mode == "germline" && r.pool > 0);
    let mut targets = Vec::new();
    if let (Some(g), Some(gp)) = (g, gp) {
        targets.push(target(
            "single-copy median < 15 ms without the pool",
            g.median_ms < 15.0,
            format!("{:.2} ms", g.median_ms),
        ));
        targets.push(target(
            "single-copy median < 10 ms with the pool",
            gp.median_ms < 10.0,
            format!("{:.2} ms", gp.median_ms),
        ));
        // The issue states these two without naming a pool: each is judged with the pool and
        // without it, so that a figure met only with the pool reads as such.
        if fresh.is_finite() {
            for (r, with) in [(gp, "with the pool"), (g, "without the pool")] {
                targets.push(target(
                    &format!(">= 50x faster than fresh-ifc, {with}"),
                    r.speedup_over_fresh >= 50.0,
                    format!("{:.1}x", r.speedup_over_fresh),
                ));
            }
        } else {
            println!(
                "  target >= 50x faster than fresh-ifc: not measured (--modes without fresh-ifc)"
            );
        }
        for (r, with) in [(gp, "with the pool"), (g, "without the pool")] {
            targets.push(target(
                &format!("p99 within 5 ms of the median, {with}"),
                r.p99_ms - r.median_ms <= 5.0,
                format!(
                    "{:.2} ms over ({:.2} against {:.2})",
                    r.p99_ms - r.median_ms,
                    r.p99_ms,
                    r.median_ms
                ),
            ));
        }
    }
    let doc = json!({
        "tool": a.tool, "arguments": a.arguments, "calls": a.calls, "warmup": a.warmup, "gap_ms": a.gap_ms,
        "release": a.release, "results": results, "targets": targets,
        "cpus": machine["cpus"], "load_at_start": load,
    });
    std::fs::write(
        &a.out,
        serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?,
    )
    .map_err(|e| format!("{}: {e}", a.out.display()))?;
    println!("  written to {}", a.out.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spawn_pool_line_is_found_among_the_runs_other_lines() {
        let stderr = "germline: serving x\ngermline: x: spawned copies: 3 made\n\
                      germline: spawn pool {\"ready\":2,\"refill_per_s\":7.5,\"pooled_copy_private_kb\":9000}\n";
        let p = spawn_pool_of(stderr).expect("found");
        assert_eq!(p["refill_per_s"], 7.5);
        assert_eq!(p["pooled_copy_private_kb"], 9000);
        assert_eq!(spawn_pool_of("germline: serving x\n"), None);
        assert_eq!(spawn_pool_of("germline: spawn pool {not json\n"), None);
    }
}
