//! CPU time spent during a benchmark's window, from `/proc` (issue 30, "Throughput"): what a
//! call costs the machine, not only how long it takes. On a machine with `cores` CPUs no
//! runtime can serve more than `cores / (CPU time per call)` calls per second however its
//! copies are scheduled, so the busy time per call bounds the throughput any amount of
//! parallelism can reach. Read on a quiet machine: `/proc/stat` counts every process.
//!
//! Why not a crate: two counters of two text files; `procfs` would bring a dependency tree for
//! them. Ticks are `USER_HZ`, which Linux fixes at 100 for userspace on every architecture it
//! exports `/proc/stat` in (the kernel converts from its own `HZ`), so no `sysconf` is needed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `USER_HZ`: the unit of `/proc/stat` and of `/proc/<pid>/stat`'s times.
const TICKS_PER_S: f64 = 100.0;

/// One reading of the counters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Seconds since the epoch (the clock the clients' `calls_t0`/`calls_t1` use).
    pub t: f64,
    /// Every CPU's busy ticks (user, nice, system, irq, softirq, steal; not idle or iowait).
    pub busy: u64,
    /// The clients' own user and system ticks (the last value read of each, so a client
    /// that has exited still counts what it spent).
    pub clients: u64,
}

/// The machine's busy ticks from the text of `/proc/stat` (its aggregate `cpu` line).
pub fn busy_ticks(stat: &str) -> Option<u64> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    if f.len() < 4 {
        return None;
    }
    // user nice system idle iowait irq softirq steal [guest guest_nice: already in user/nice]
    let at = |i: usize| f.get(i).copied().unwrap_or(0);
    Some(at(0) + at(1) + at(2) + at(5) + at(6) + at(7))
}

/// A process's `utime + stime` from the text of its `/proc/<pid>/stat` (fields 14 and 15; the
/// command name, field 2, may hold spaces and parentheses, so fields are counted after its
/// last `)`).
pub fn process_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): field n is f[n - 3].
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some(utime + stime)
}

fn epoch_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Samples the counters every 20 ms on a thread of its own until stopped.
#[derive(Debug)]
pub struct Sampler {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Vec<Sample>>,
}

impl Sampler {
    /// Starts sampling the machine and the processes `clients`.
    pub fn start(clients: Vec<u32>) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut last = vec![0u64; clients.len()];
            let mut out = Vec::new();
            loop {
                let done = flag.load(Ordering::Relaxed);
                for (i, pid) in clients.iter().enumerate() {
                    if let Some(t) = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                        .ok()
                        .as_deref()
                        .and_then(process_ticks)
                    {
                        last[i] = t;
                    }
                }
                if let Some(busy) = std::fs::read_to_string("/proc/stat")
                    .ok()
                    .as_deref()
                    .and_then(busy_ticks)
                {
                    out.push(Sample {
                        t: epoch_s(),
                        busy,
                        clients: last.iter().sum(),
                    });
                }
                if done {
                    return out;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Sampler { stop, thread }
    }

    /// Stops sampling (after one last sample) and returns every sample.
    pub fn stop(self) -> Vec<Sample> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_default()
    }
}

/// The CPU the machine spent from the last sample at or before `t0` to the first at or after
/// `t1` (the calls' span), for `calls` calls on `cores` CPUs: machine CPU ms per call, the
/// clients' share of it, the rest (serving: the runtime, its copies, the broker), the
/// machine's busy fraction, and the throughput ceiling `cores / machine CPU per call`. `None`
/// without samples around the span.
pub fn window(
    samples: &[Sample],
    t0: f64,
    t1: f64,
    calls: usize,
    cores: usize,
) -> Option<serde_json::Value> {
    let a = samples.iter().rev().find(|s| s.t <= t0)?;
    let b = samples.iter().find(|s| s.t >= t1)?;
    let ms = |t: u64| t as f64 * 1000.0 / TICKS_PER_S;
    let busy = b.busy.saturating_sub(a.busy);
    let clients = b.clients.saturating_sub(a.clients);
    let wall = (b.t - a.t).max(1e-3);
    let n = calls.max(1) as f64;
    let per_call = ms(busy) / n;
    Some(serde_json::json!({
        "window_s": wall,
        "machine_cpu_ms_per_call": per_call,
        "clients_cpu_ms_per_call": ms(clients) / n,
        "serving_cpu_ms_per_call": ms(busy.saturating_sub(clients)) / n,
        "busy_fraction": ms(busy) / 1000.0 / (wall * cores.max(1) as f64),
        "ceiling_calls_per_s": if per_call > 0.0 { cores as f64 * 1000.0 / per_call } else { f64::INFINITY },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_counts_work_not_idle_or_iowait() {
        let stat = "cpu  100 5 50 1000 40 3 2 1 0 0\ncpu0 50 2 25 500 20 1 1 0 0 0\nintr 1\n";
        assert_eq!(busy_ticks(stat), Some(100 + 5 + 50 + 3 + 2 + 1));
        assert_eq!(
            busy_ticks("cpu0 1 2 3 4\n"),
            None,
            "only the aggregate line counts"
        );
        assert_eq!(busy_ticks("cpu  1 x 3 4\n"), None);
    }

    #[test]
    fn process_times_are_counted_after_the_command_name() {
        // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
        // utime stime cutime cstime ...
        let stat = "42 (a) b) (c) S 1 42 42 0 -1 4194560 10 20 0 0 7 8 300 45 20 0 1 0";
        assert_eq!(process_ticks(stat), Some(15));
        assert_eq!(process_ticks("42 (short) S 1"), None);
    }

    #[test]
    fn the_window_brackets_the_calls_span() {
        let s = |t: f64, busy: u64, clients: u64| Sample { t, busy, clients };
        let samples = [
            s(9.0, 0, 0),
            s(10.0, 1000, 100),
            s(10.5, 1100, 120),
            s(11.0, 1200, 140),
            s(12.0, 5000, 500),
        ];
        // The span 10.2..10.9 is bracketed by the samples at 10.0 and 11.0.
        let v = window(&samples, 10.2, 10.9, 100, 2).expect("a window");
        // 200 busy ticks = 2000 ms over 100 calls, 40 of them the clients'.
        assert_eq!(v["machine_cpu_ms_per_call"], 20.0);
        assert_eq!(v["clients_cpu_ms_per_call"], 4.0);
        assert_eq!(v["serving_cpu_ms_per_call"], 16.0);
        assert_eq!(v["busy_fraction"], 1.0);
        assert_eq!(v["ceiling_calls_per_s"], 100.0);
        assert!(
            window(&samples, 8.0, 10.9, 1, 2).is_none(),
            "no sample before the span"
        );
        assert!(
            window(&samples, 10.0, 13.0, 1, 2).is_none(),
            "no sample after the span"
        );
    }

    #[test]
    fn the_sampler_reads_this_machine() {
        let me = std::process::id();
        let sampler = Sampler::start(vec![me]);
        // Burn some CPU so the counters move.
        let mut x = 0u64;
        let end = std::time::Instant::now() + Duration::from_millis(150);
        while std::time::Instant::now() < end {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let got = sampler.stop();
        assert!(got.len() >= 3, "{got:?}");
        let (first, last) = (got[0], got[got.len() - 1]);
        assert!(last.busy > first.busy, "{got:?}");
        assert!(
            last.clients > first.clients,
            "this process's own ticks: {got:?}"
        );
    }
}
