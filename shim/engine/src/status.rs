//! `germline status` (issue 11, docs/operations.md): every `germline run` and `germline serve`
//! runtime keeps a small JSON state file in [`STATUS_DIR`] (0700, files 0600), rewritten after
//! each call and removed when it stops; `germline status` reads them, asks each broker for its
//! verdict counts, and prints what a person reads at a glance (or `--json`).
//!
//! The file holds only what metrics may hold: the release's `name@version` and digest, the
//! mode, lifetime and limits of the policy, counts and times. No item, argument or host name a
//! copy made up.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::error::StatusError;
use crate::observe::{CallObserver, CallView, RuntimeView};
use crate::runtime::Runtime;

pub use germline_sys::paths::STATUS_DIR;

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// One runtime's state file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RuntimeStatus {
    /// The `germline run` / `germline serve` process.
    pub pid: u32,
    pub command: String,
    pub release: String,
    pub digest: String,
    pub mode: String,
    pub lifetime: String,
    /// The user whose slots this runtime's calls use (under `germline serve`, the bearer
    /// token's user).
    #[serde(default)]
    pub user: String,
    pub germline_pid: Option<i32>,
    /// Germlines started so far (more than one under `single-shot`).
    pub germlines_started: u64,
    pub pool: usize,
    /// The manifest's warm calls that failed in the germline's warming session (skipped, each
    /// said on the germline's stderr): a warm call that never works costs its speed-up silently
    /// otherwise (stop 39: mcp-server-git's, for days).
    #[serde(default)]
    pub warm_failed: u64,
    /// Refills of the forked pool held back by the policy's pool memory cap (`[pool]
    /// memory_mb`): the pool stayed shallower than its depth.
    #[serde(default)]
    pub pool_cap_held: u64,
    pub live_copies: usize,
    pub calls: u64,
    pub outcomes: BTreeMap<String, u64>,
    pub started_unix: u64,
    pub last_call_unix: Option<u64>,
    pub limits: Value,
    pub broker: PathBuf,
    /// The release's dampening state (penalty, suppressed, admitted and refused attempts,
    /// last verdict), null while evidence is off (docs/evidence.md).
    #[serde(default)]
    pub dampening: Value,
}

/// Keeps one runtime's state file current; removes it when dropped.
///
/// The file is written by a thread of its own ([`FileJob`]), not by the call's thread: after a
/// call the runtime's observers run before the answer goes to the agent, and the file's
/// serialising, create, write and rename were the largest of them (issue 30, "the hot path").
/// The thread writes the latest state it was handed and skips older ones still queued.
#[derive(Debug)]
pub struct StatusWriter {
    path: PathBuf,
    doc: RuntimeStatus,
    /// The runtime stopped: the file is gone and stays gone.
    stopped: bool,
    jobs: Option<std::sync::mpsc::Sender<FileJob>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// What the state file's thread is asked to do.
#[derive(Debug)]
enum FileJob {
    Write(Box<RuntimeStatus>),
    /// Remove the file and end (nothing is written after this).
    Remove,
}

/// The state file's thread: writes the latest state queued, removes the file at the end.
fn file_thread(path: PathBuf, jobs: std::sync::mpsc::Receiver<FileJob>) {
    while let Ok(mut job) = jobs.recv() {
        // Only the latest of the states queued meanwhile is written.
        while let Ok(next) = jobs.try_recv() {
            if matches!(job, FileJob::Remove) {
                break;
            }
            job = next;
        }
        match job {
            FileJob::Write(doc) => {
                if let Ok(text) = serde_json::to_string_pretty(&doc) {
                    let _ = write_atomic(&path, &text);
                }
            }
            FileJob::Remove => break,
        }
    }
    let _ = std::fs::remove_file(&path);
}

impl StatusWriter {
    /// Removes the file (after any write still queued) and waits for its thread to end.
    fn remove_file(&mut self) {
        match self.jobs.take() {
            Some(tx) => {
                let _ = tx.send(FileJob::Remove);
            }
            None => {
                let _ = std::fs::remove_file(&self.path);
            }
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for StatusWriter {
    fn drop(&mut self) {
        if !self.stopped {
            self.remove_file();
        }
    }
}

fn write_atomic(path: &Path, text: &str) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(text.as_bytes())?;
    std::fs::rename(&tmp, path)
}

fn limits_json(rt: &Runtime) -> Value {
    let l = rt.limiter.limits();
    json!({
        "copies_per_node": l.copies_per_node, "copies_per_release": l.copies_per_release,
        "calls_per_second": l.calls_per_second,
        "call_burst": l.calls_per_second.map(|_| l.call_burst),
        "item_bytes_per_copy": l.item_bytes_per_copy, "pool_max": l.pool_max,
    })
}

impl StatusWriter {
    /// Starts the state file of `rt` (`command`: "run" or "serve").
    pub fn start(rt: &Runtime, command: &str) -> Result<StatusWriter, StatusError> {
        let mut w = StatusWriter::new(rt, command)?;
        rt.observe_with(|view| w.refresh(view));
        Ok(w)
    }

    fn new(rt: &Runtime, command: &str) -> Result<StatusWriter, StatusError> {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = Path::new(STATUS_DIR);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|source| StatusError::Dir {
                dir: dir.to_path_buf(),
                source,
            })?;
        let path = dir.join(format!("{}-{n}.json", std::process::id()));
        let (tx, rx) = std::sync::mpsc::channel();
        let to = path.clone();
        // Without its thread the file is written on the caller's (as before it had one).
        let thread = std::thread::Builder::new()
            .name("germline-status".into())
            .spawn(move || file_thread(to, rx))
            .ok();
        let jobs = thread.as_ref().map(|_| tx);
        Ok(StatusWriter {
            path,
            jobs,
            thread,
            doc: RuntimeStatus {
                pid: std::process::id(),
                command: command.to_string(),
                release: rt.release.label(),
                digest: rt.release.digest.clone(),
                mode: rt.mode.name().to_string(),
                lifetime: rt.lifetime.name().to_string(),
                user: rt.user.clone(),
                germline_pid: None,
                germlines_started: 1,
                pool: 0,
                warm_failed: 0,
                pool_cap_held: 0,
                live_copies: 0,
                calls: 0,
                outcomes: BTreeMap::new(),
                started_unix: unix_now(),
                last_call_unix: None,
                limits: limits_json(rt),
                broker: rt.broker.socket().to_path_buf(),
                dampening: Value::Null,
            },
            stopped: false,
        })
    }

    fn refresh(&mut self, rt: &RuntimeView<'_>) {
        if self.stopped {
            return;
        }
        let d = &mut self.doc;
        d.lifetime = rt.lifetime.name().to_string();
        if d.germline_pid.is_some() && d.germline_pid != rt.pid {
            d.germlines_started += 1;
        }
        d.germline_pid = rt.pid;
        if let Some(g) = rt.germline {
            d.pool = g.pool_len();
            d.warm_failed = g.warm_failed();
            d.pool_cap_held = g.pool_cap_held();
            d.live_copies = g.copy_pids().len();
        }
        d.dampening = if rt.evidence.enabled() {
            let st = rt.evidence.ledger.releases.get(&rt.release.digest);
            serde_json::json!({
                "penalty": st.map_or(0.0, |s| s.penalty.value),
                "suppressed": st.is_some_and(|s| s.penalty.suppressed),
                "admitted": st.map_or(0, |s| s.admitted),
                "refused": st.map_or(0, |s| s.refused),
                "last": st.and_then(|s| s.last),
            })
        } else {
            Value::Null
        };
        let sent = match &self.jobs {
            Some(tx) => tx.send(FileJob::Write(Box::new(self.doc.clone()))).is_ok(),
            None => false,
        };
        if !sent {
            if let Ok(text) = serde_json::to_string_pretty(&self.doc) {
                let _ = write_atomic(&self.path, &text);
            }
        }
    }
}

/// The state file observes a runtime's calls and idle work, and goes when it stops.
impl CallObserver for StatusWriter {
    fn after_call(&mut self, rt: &RuntimeView<'_>, call: &CallView<'_>) {
        let outcome = match call.result {
            Ok(_) => "ok",
            Err(e) => e.outcome(),
        };
        self.doc.calls += 1;
        *self.doc.outcomes.entry(outcome.to_string()).or_insert(0) += 1;
        self.doc.last_call_unix = Some(unix_now());
        self.refresh(rt);
    }

    fn after_idle_step(&mut self, rt: &RuntimeView<'_>) {
        self.refresh(rt);
    }

    fn stopped(&mut self) {
        self.stopped = true;
        self.remove_file();
    }
}

/// Every live runtime's state, with its broker's verdict counts (`verdicts`), sorted by pid.
pub fn collect(dir: &Path) -> Vec<Value> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.extension().and_then(|x| x.to_str()) != Some("json") {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&p) else {
            continue;
        };
        let Ok(doc) = serde_json::from_str::<RuntimeStatus>(&text) else {
            continue;
        };
        // A process killed without stopping leaves its file: not a running deployment.
        if !Path::new(&format!("/proc/{}", doc.pid)).exists() {
            continue;
        }
        let mut verdicts = Vec::new();
        if let Ok(c) = germline_broker::control::BrokerClient::connect(&doc.broker) {
            if let Ok(rows) = c.stats() {
                for (digest, host, verdict, n) in rows {
                    if digest == doc.digest {
                        verdicts.push(json!({"host": host, "verdict": verdict, "count": n}));
                    }
                }
            }
        }
        let mut v = serde_json::to_value(&doc).unwrap_or(Value::Null);
        v["verdicts"] = Value::Array(verdicts);
        out.push(v);
    }
    out.sort_by_key(|v| (v["pid"].as_u64(), v["release"].as_str().map(str::to_string)));
    out
}

fn ago(then: Option<u64>) -> String {
    match then {
        Some(t) => format!("{} s ago", unix_now().saturating_sub(t)),
        None => "none yet".into(),
    }
}

/// The human form of [`collect`].
pub fn render(rows: &[Value]) -> String {
    if rows.is_empty() {
        return format!("germline status: nothing running (no state files in {STATUS_DIR})\n");
    }
    let mut s = String::new();
    for r in rows {
        let u = |k: &str| r[k].as_u64().unwrap_or(0);
        let st = |k: &str| r[k].as_str().unwrap_or("-").to_string();
        s.push_str(&format!(
            "{} (pid {}, germline {})  {}  mode {}  lifetime {}  user {}\n",
            st("release"),
            u("pid"),
            st("command"),
            st("digest").chars().take(19).collect::<String>(),
            st("mode"),
            st("lifetime"),
            st("user"),
        ));
        let outcomes: Vec<String> = r["outcomes"]
            .as_object()
            .map(|o| o.iter().map(|(k, v)| format!("{k} {v}")).collect())
            .unwrap_or_default();
        s.push_str(&format!(
            "  germline pid {}  started {}  pool {}  live copies {}\n",
            r["germline_pid"]
                .as_i64()
                .map_or("-".to_string(), |p| p.to_string()),
            u("germlines_started"),
            u("pool"),
            u("live_copies"),
        ));
        if u("pool_cap_held") > 0 {
            s.push_str(&format!(
                "  pool refills held back by the memory cap: {}\n",
                u("pool_cap_held")
            ));
        }
        if u("warm_failed") > 0 {
            s.push_str(&format!(
                "  warm calls failed: {} (skipped; the germline's stderr says why)\n",
                u("warm_failed")
            ));
        }
        s.push_str(&format!(
            "  calls {} ({})  last call {}\n",
            u("calls"),
            if outcomes.is_empty() {
                "-".to_string()
            } else {
                outcomes.join(", ")
            },
            ago(r["last_call_unix"].as_u64()),
        ));
        let verdicts: Vec<String> = r["verdicts"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|v| {
                        format!(
                            "{} {} {}",
                            v["host"].as_str().unwrap_or("?"),
                            v["verdict"].as_str().unwrap_or("?"),
                            v["count"]
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        s.push_str(&format!("  verdicts: {}\n", listed(&verdicts)));
        let d = &r["dampening"];
        s.push_str(&format!(
            "  dampening: {}\n",
            if d.is_null() {
                "off".to_string()
            } else {
                format!(
                    "{}penalty {:.0}, {} admitted, {} refused, last {}",
                    if d["suppressed"] == true {
                        "SUPPRESSED, "
                    } else {
                        ""
                    },
                    d["penalty"].as_f64().unwrap_or(0.0),
                    d["admitted"],
                    d["refused"],
                    d["last"].as_str().unwrap_or("-"),
                )
            }
        ));
        let limits: Vec<String> = r["limits"]
            .as_object()
            .map(|o| {
                o.iter()
                    .filter(|(_, v)| !v.is_null())
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect()
            })
            .unwrap_or_default();
        s.push_str(&format!("  limits: {}\n", listed(&limits)));
    }
    s
}

/// A list of `germline status` as one line: its entries, or `none`.
fn listed(entries: &[String]) -> String {
    if entries.is_empty() {
        "none".to_string()
    } else {
        entries.join(", ")
    }
}

/// `germline status [--json]`.
pub fn run(json_out: bool) -> Result<(), serde_json::Error> {
    let rows = collect(Path::new(STATUS_DIR));
    if json_out {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        print!("{}", render(&rows));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_reads_at_a_glance() {
        let rows = vec![json!({
            "pid": 7, "command": "run", "release": "mcp-server-time@1", "digest": "sha256:abc",
            "mode": "germline", "lifetime": "session", "germline_pid": 9, "germlines_started": 1,
            "pool": 2, "warm_failed": 1, "live_copies": 2, "calls": 3, "outcomes": {"ok": 2, "limit": 1},
            "last_call_unix": unix_now(), "limits": {"pool_max": 2, "copies_per_node": null},
            "verdicts": [{"host": "undeclared", "verdict": "denied", "count": 1}],
        })];
        let t = render(&rows);
        assert!(t.contains("mcp-server-time@1 (pid 7, germline run)"), "{t}");
        assert!(t.contains("calls 3 (limit 1, ok 2)"), "{t}");
        assert!(t.contains("verdicts: undeclared denied 1"), "{t}");
        assert!(t.contains("limits: pool_max 2\n"), "{t}");
        assert!(t.contains("warm calls failed: 1"), "{t}");
        assert!(render(&[]).contains("nothing running"));
    }
}
