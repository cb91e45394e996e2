//! `phases --cpu`: what each process of a session spends on one call, in CPU time rather than
//! wall time (the machine is shared, so wall time measures the neighbours as much as us).
//! Read from `/proc` before and after each measured call: every task's on-CPU time
//! (`/proc/PID/task/TID/schedstat`, nanoseconds), the process's minor and major faults
//! (`/proc/PID/stat`), and a copy's private memory
//! (`/proc/PID/smaps_rollup`). Processes are this one and its descendants, named by the leaf
//! of their `pids` cgroup (`copy-N` is a forked copy, `init` the germline, `sN` a spawned copy)
//! or, outside the germline's cgroups, by their command (`broker`, the baseline's server).
//! Kernel work done on behalf of a copy in kernel threads (a network namespace's cleanup) is
//! nobody's here, so the sums are lower bounds of what a call costs the machine. This
//! process's own row also holds the snapshots' reading of /proc (a few ms in a debug build:
//! the baseline's "between calls" row, where nothing else runs, shows it); the calling
//! thread's row (`/proc/thread-self/schedstat` right around `handle`) does not.

use std::collections::BTreeMap;
use std::fs;

/// One process's counters at one instant.
#[derive(Clone, Copy, Default, Debug)]
pub struct Counters {
    pub run_ns: u64,
    pub minflt: u64,
    pub majflt: u64,
}

#[derive(Clone, Debug)]
pub struct Proc {
    pub class: String,
    pub c: Counters,
    /// Private (clean + dirty) kB, read for copies only.
    pub private_kb: Option<u64>,
}

pub type Snapshot = BTreeMap<u32, Proc>;

fn stat(pid: u32) -> Option<(u32, Counters)> {
    let s = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = s.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let n = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
    let ppid = f.get(1)?.parse().ok()?;
    Some((
        ppid,
        Counters {
            run_ns: 0,
            minflt: n(7)?,
            majflt: n(9)?,
        },
    ))
}

fn run_ns(pid: u32) -> u64 {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|t| fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// This thread's on-CPU nanoseconds.
pub fn thread_ns() -> u64 {
    fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn private_kb(pid: u32) -> Option<u64> {
    let s = fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    let kb = |key: &str| {
        s.lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Some(kb("Private_Clean:") + kb("Private_Dirty:"))
}

fn class(pid: u32, me: u32) -> String {
    if pid == me {
        return "shim (this process)".into();
    }
    let cg = fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    let pids = cg
        .lines()
        .find_map(|l| l.split_once(":pids:").map(|(_, p)| p.to_string()))
        .unwrap_or_default();
    if pids.contains("/germline/") {
        let leaf = pids.rsplit('/').next().unwrap_or("");
        let base = leaf.trim_end_matches(|c: char| c.is_ascii_digit());
        return match base {
            "copy-" => "copy".into(),
            "init" => "germline".into(),
            "s" => "copy (spawned)".into(),
            other => format!("cgroup {other}"),
        };
    }
    let cmd = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let words: Vec<String> = cmd
        .split(|b| *b == 0)
        .filter(|w| !w.is_empty())
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .collect();
    if words.iter().any(|w| w == "broker") {
        return "broker".into();
    }
    let comm = fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    format!("other ({})", comm.trim())
}

/// This process and every descendant, with their counters.
pub fn snapshot(with_memory: bool) -> Snapshot {
    let me = std::process::id();
    let mut parent: BTreeMap<u32, (u32, Counters)> = BTreeMap::new();
    if let Ok(dir) = fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            if let Some(v) = stat(pid) {
                parent.insert(pid, v);
            }
        }
    }
    let mut out = Snapshot::new();
    for (&pid, &(_, c)) in &parent {
        // A descendant of this process (its chain of parents reaches it).
        let mut p = pid;
        let mut ours = false;
        for _ in 0..64 {
            if p == me {
                ours = true;
                break;
            }
            match parent.get(&p) {
                Some(&(pp, _)) if pp != 0 && pp != p => p = pp,
                _ => break,
            }
        }
        if !ours {
            continue;
        }
        let class = class(pid, me);
        let private_kb = if with_memory && class.starts_with("copy") {
            private_kb(pid)
        } else {
            None
        };
        let c = Counters {
            run_ns: run_ns(pid),
            ..c
        };
        out.insert(
            pid,
            Proc {
                class,
                c,
                private_kb,
            },
        );
    }
    out
}

/// What each class spent between two snapshots; a process born in between counts from zero
/// (a fork's counters start at zero), one that died in between is lost (so: lower bounds).
/// Copies are also listed one by one (their run time, faults and private kB after).
#[derive(Default, Debug)]
pub struct Delta {
    pub by_class: BTreeMap<String, Counters>,
    pub copies: Vec<(Counters, Option<u64>, Option<u64>)>,
}

pub fn delta(before: &Snapshot, after: &Snapshot) -> Delta {
    let mut d = Delta::default();
    for (pid, a) in after {
        let (b, b_priv) = match before.get(pid) {
            Some(b) if b.class == a.class => (b.c, b.private_kb),
            Some(_) => continue,
            None => (Counters::default(), None),
        };
        let x = Counters {
            run_ns: a.c.run_ns.saturating_sub(b.run_ns),
            minflt: a.c.minflt.saturating_sub(b.minflt),
            majflt: a.c.majflt.saturating_sub(b.majflt),
        };
        let e = d.by_class.entry(a.class.clone()).or_default();
        e.run_ns += x.run_ns;
        e.minflt += x.minflt;
        e.majflt += x.majflt;
        if a.class.starts_with("copy") && (x.run_ns > 0 || x.minflt > 0) {
            d.copies.push((x, b_priv, a.private_kb));
        }
    }
    d.copies.sort_by_key(|y| std::cmp::Reverse(y.0.run_ns));
    d
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Prints medians over calls, per class, and the busiest copies one by one.
pub fn report(calls: &[Delta], thread: &[f64]) {
    let n = calls.len().max(1) as f64;
    println!(
        "cpu per call ({} calls): on-CPU ms from schedstat (median, p90, p99), minor and major faults (median, mean)",
        calls.len()
    );
    let mut t = thread.to_vec();
    let mut tp = t.clone();
    println!(
        "  {:<26} run {:>7.3} ms (p90 {:>7.3}, p99 {:>7.3})",
        "calling thread (handle)",
        median(&mut t),
        pct(&mut tp, 0.9),
        pct(&mut tp, 0.99)
    );
    let classes: std::collections::BTreeSet<&String> =
        calls.iter().flat_map(|d| d.by_class.keys()).collect();
    let mut total = vec![0f64; calls.len()];
    for c in classes {
        let get = |d: &Delta| d.by_class.get(c).copied().unwrap_or_default();
        let mut run: Vec<f64> = calls.iter().map(|d| get(d).run_ns as f64 / 1e6).collect();
        for (i, r) in run.iter().enumerate() {
            if let Some(x) = total.get_mut(i) {
                *x += r;
            }
        }
        let mut p = run.clone();
        let mut flt: Vec<f64> = calls.iter().map(|d| get(d).minflt as f64).collect();
        let maj: u64 = calls.iter().map(|d| get(d).majflt).sum();
        println!(
            "  {c:<26} run {:>7.3} ms (p90 {:>7.3}, p99 {:>7.3})  minflt {:>6.0}  majflt/call {:>5.2}",
            median(&mut run),
            pct(&mut p, 0.9),
            pct(&mut p, 0.99),
            median(&mut flt),
            maj as f64 / n,
        );
    }
    let mut tp = total.clone();
    println!(
        "  {:<26} run {:>7.3} ms (p90 {:>7.3}, p99 {:>7.3})",
        "all of the session",
        median(&mut total),
        pct(&mut tp, 0.9),
        pct(&mut tp, 0.99)
    );
    let most = calls.iter().map(|d| d.copies.len()).max().unwrap_or(0);
    for k in 0..most {
        let mut run: Vec<f64> = Vec::new();
        let mut flt: Vec<f64> = Vec::new();
        let mut before: Vec<f64> = Vec::new();
        let mut after: Vec<f64> = Vec::new();
        for d in calls {
            if let Some((x, b, a)) = d.copies.get(k) {
                run.push(x.run_ns as f64 / 1e6);
                flt.push(x.minflt as f64);
                if let Some(b) = b {
                    before.push(*b as f64);
                }
                if let Some(a) = a {
                    after.push(*a as f64);
                }
            }
        }
        let mut rp = run.clone();
        println!(
            "  copy, {}th busiest        run {:>7.3} ms (p99 {:>7.3})  minflt {:>6.0}  private kB before {:>6.0} after {:>6.0}  ({} calls)",
            k + 1,
            median(&mut run),
            pct(&mut rp, 0.99),
            median(&mut flt),
            median(&mut before),
            median(&mut after),
            run.len()
        );
    }
}

pub fn pct(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    let i = ((v.len() as f64 - 1.0) * q).round() as usize;
    v.get(i).copied().unwrap_or(f64::NAN)
}
