//! Shared parts of the `germline run` tests: the example releases, an HTTP sink, a policy
//! for them, and the real MCP client SDK as the agent (tests/run/agent.py).
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

pub mod evidence;
pub mod git;

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn germline() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_germline"))
}

/// True if the test can run; false (skip) when not root, unless root tests are required.
pub fn can_run() -> bool {
    // SAFETY: geteuid(2) cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let ready = agent_python().exists() && bundle("germline-office").exists();
    if root && ready {
        return true;
    }
    assert!(
        std::env::var_os("GERMLINE_REQUIRE_ROOT_TESTS").is_none(),
        "needs root, {} and the example bundles (scripts/setup.sh)",
        agent_python().display()
    );
    false
}

pub fn agent_python() -> PathBuf {
    PathBuf::from(
        std::env::var("GERMLINE_AGENT_VENV")
            .unwrap_or_else(|_| "/var/tmp/germline-venv-agent".into()),
    )
    .join("bin/python")
}

pub fn bundle(name: &str) -> PathBuf {
    // GERMLINE_GIT_RELEASE: a trial build of mcp-server-git beside the one setup builds
    // (`GERMLINE_SERVERS_SUFFIX=-warm bundles/build-servers.sh mcp-server-git`), for every
    // test of that release at once.
    let name = match std::env::var("GERMLINE_GIT_RELEASE") {
        Ok(other) if name == "mcp-server-git" && !other.is_empty() => other,
        _ => name.to_string(),
    };
    root().join("bundles/out").join(name).join("bundle")
}

pub fn key() -> PathBuf {
    root().join("bundles/out/keys/cosign.pub")
}

/// An HTTP sink on loopback recording every request (tests/run/sink.py).
pub struct Sink {
    child: Child,
    pub port: u16,
    pub log: PathBuf,
}

impl Sink {
    pub fn start(dir: &Path, name: &str) -> Sink {
        Self::start_with(dir, name, None)
    }

    /// A sink that also serves the files of `www` to GET requests (a fetch target).
    pub fn start_with(dir: &Path, name: &str, www: Option<&Path>) -> Sink {
        let mut args = Vec::new();
        if let Some(w) = www {
            args.push("--dir".to_string());
            args.push(w.display().to_string());
        }
        Self::start_args(dir, name, &args)
    }

    /// A sink with more options of tests/run/sink.py (e.g. `--redirect PATH=URL`).
    pub fn start_args(dir: &Path, name: &str, args: &[String]) -> Sink {
        let log = dir.join(format!("sink-{name}.jsonl"));
        let mut cmd = Command::new("python3");
        cmd.arg(root().join("tests/run/sink.py"))
            .args(["--port", "0", "--seconds", "900", "--log"])
            .arg(&log)
            .args(args);
        let mut child = cmd.stdout(Stdio::piped()).spawn().expect("sink");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("sink ready");
        let port = line
            .trim()
            .strip_prefix("ready ")
            .and_then(|p| p.parse().ok())
            .expect("sink port");
        Sink { child, port, log }
    }

    /// Bodies received so far.
    pub fn bodies(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .map(|v| v["body"].as_str().unwrap_or_default().to_string())
            .collect()
    }

    pub fn clear(&self) {
        let _ = std::fs::remove_file(&self.log);
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The test world: Alice's finance and HR files, each with a canary.
pub struct World {
    pub dir: tempfile::TempDir,
    pub invoice: PathBuf,
    pub salary: PathBuf,
    pub payslip: PathBuf,
    pub canary_hr: String,
}

impl World {
    pub fn new() -> World {
        let dir = tempfile::Builder::new()
            .prefix("germline-run-")
            .tempdir_in("/var/tmp")
            .expect("tempdir");
        let home = dir.path().join("home/alice");
        std::fs::create_dir_all(home.join("finance")).expect("mkdir");
        std::fs::create_dir_all(home.join("hr")).expect("mkdir");
        let canary_hr = format!("CANARY-HR-{:016x}", rand_u64());
        let invoice = home.join("finance/invoice.txt");
        std::fs::write(&invoice, "INVOICE 2026-117\nTotal due: EUR 1,250.00\n").expect("write");
        let salary = home.join("hr/salary.csv");
        std::fs::write(
            &salary,
            format!("name,salary\nalice,91234\n{canary_hr},1\n"),
        )
        .expect("write");
        let payslip = home.join("hr/payslip-2026-11.txt");
        std::fs::write(
            &payslip,
            format!("Payslip November: alice net 5,120.00 {canary_hr}\n"),
        )
        .expect("write");
        World {
            dir,
            invoice,
            salary,
            payslip,
            canary_hr,
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The deployer's policy: finance to ocr.example, everything to the agent, `extra` appended.
    pub fn policy(&self, ocr_port: u16, extra: &str) -> PathBuf {
        self.policy_pinned(&format!("127.0.0.1:{ocr_port}"), extra)
    }

    /// The same, with ocr.example and docs.example pinned to `ocr` (`IP:PORT`).
    pub fn policy_pinned(&self, ocr: &str, extra: &str) -> PathBuf {
        let home = self.dir.path().join("home");
        let text = format!(
            r#"[labels]
hr = "personnel records"
finance = "invoices"

[[item]]
path = "{home}/*/hr/**"
label = ["hr"]

[[item]]
path = "{home}/*/finance/**"
label = ["finance"]

[[argument]]
tool = "*_time"
name = "*"
label = []

[[argument]]
tool = "fetch"
name = "*"
label = []

[destinations]
"ocr.example" = ["finance"]
"docs.example" = []

[pins]
"ocr.example" = "{ocr}"
"docs.example" = "{ocr}"

[consumers]
agent = ["hr", "finance"]
{extra}
"#,
            home = home.display()
        );
        let p = self.dir.path().join("policy.toml");
        std::fs::write(&p, text).expect("policy");
        p
    }
}

pub fn rand_u64() -> u64 {
    let mut b = [0u8; 8];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        let _ = std::io::Read::read_exact(&mut f, &mut b);
    }
    u64::from_ne_bytes(b)
}

/// One agent session: runs `script` (steps of tests/run/agent.py) against `germline run`.
pub fn run_agent(dir: &Path, script: &Value, server: &[String]) -> Vec<Value> {
    let sp = dir.join(format!("script-{:x}.json", rand_u64()));
    std::fs::write(&sp, script.to_string()).expect("script");
    let out = Command::new(agent_python())
        .arg(root().join("tests/run/agent.py"))
        .arg(&sp)
        .arg("--")
        .args(server)
        .stderr(Stdio::piped())
        .output()
        .expect("agent");
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert!(
        out.status.success(),
        "agent failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    lines
        .into_iter()
        .filter(|l| l.get("tool").is_some())
        .collect()
}

/// The `germline run` command line.
pub fn run_cmd(
    policy: &Path,
    mode: &str,
    release: &str,
    dir: &Path,
    extra: &[&str],
) -> Vec<String> {
    let mut v = vec![
        germline().display().to_string(),
        "run".into(),
        "--policy".into(),
        policy.display().to_string(),
        "--key".into(),
        key().display().to_string(),
        "--mode".into(),
        mode.into(),
        "--state-dir".into(),
        dir.join("broker-state").display().to_string(),
        "--audit".into(),
        dir.join(format!("audit-{mode}-{release}.jsonl"))
            .display()
            .to_string(),
    ];
    v.extend(extra.iter().map(|s| s.to_string()));
    v.push(bundle(release).display().to_string());
    v
}

pub fn audit(dir: &Path, mode: &str, release: &str) -> Vec<Value> {
    std::fs::read_to_string(dir.join(format!("audit-{mode}-{release}.jsonl")))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

pub fn text(r: &Value) -> String {
    r["text"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

pub fn wait_gone(pid: i32) -> bool {
    for _ in 0..200 {
        if !Path::new(&format!("/proc/{pid}")).exists() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

/// True once `done` holds, asked every 50 ms for up to 30 s: for what a process finishes on
/// its own after the answer a test waited for (a state file's thread, a session's teardown).
pub fn eventually(mut done: impl FnMut() -> bool) -> bool {
    let t0 = std::time::Instant::now();
    loop {
        if done() {
            return true;
        }
        if t0.elapsed() > Duration::from_secs(30) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// An agent session read as it goes (for tests that act between its steps).
pub struct AgentRun {
    child: Child,
    lines: std::sync::mpsc::Receiver<Value>,
    /// Where the agent's and `germline run`'s stderr go.
    pub stderr: PathBuf,
}

impl AgentRun {
    /// Starts tests/run/agent.py on `script` against `server`.
    pub fn start(dir: &Path, script: &Value, server: &[String]) -> AgentRun {
        let sp = dir.join(format!("script-{:x}.json", rand_u64()));
        std::fs::write(&sp, script.to_string()).expect("script");
        // The agent's stderr holds the server's (germline run's) stderr too.
        let stderr = dir.join(format!("agent-stderr-{:x}.log", rand_u64()));
        let mut child = Command::new(agent_python())
            .arg(root().join("tests/run/agent.py"))
            .arg(&sp)
            .arg("--")
            .args(server)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).expect("agent stderr"))
            .spawn()
            .expect("agent");
        let out = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    if (v.get("tool").is_some() || v.get("fetch").is_some()) && tx.send(v).is_err()
                    {
                        return;
                    }
                }
            }
        });
        AgentRun {
            child,
            lines: rx,
            stderr,
        }
    }

    /// The next call's (or fetch's) line, within 120 s.
    pub fn next(&self) -> Value {
        self.lines
            .recv_timeout(Duration::from_secs(120))
            .expect("the agent's next line within 120 s")
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Waits for the agent to end; true if it succeeded.
    pub fn finish(mut self) -> bool {
        self.child.wait().map(|s| s.success()).unwrap_or(false)
    }
}

impl Drop for AgentRun {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Every live descendant of `pid` (children of each of its threads, recursively).
pub fn descendants(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        let Ok(rd) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for t in rd.flatten() {
            let c = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
            for k in c.split_whitespace().filter_map(|x| x.parse::<i32>().ok()) {
                if !out.contains(&k) {
                    out.push(k);
                    todo.push(k);
                }
            }
        }
    }
    out.sort_unstable();
    out
}

/// Runs `server` (a `germline run` command line) with stdin closed at once, as a session that
/// makes no call: it settles the evidence jobs earlier sessions of the release left pending
/// (an MCP client kills its server a few seconds after closing stdin, which can be before the
/// last call's re-runs end) and exits. Its stderr, once it exited successfully within 300 s.
pub fn settle_pending(server: &[String]) -> String {
    let (prog, args) = server.split_first().expect("a command line");
    let mut child = Command::new(prog)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("germline run");
    let mut err = child.stderr.take().expect("stderr");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut err, &mut s);
        s
    });
    let t0 = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if t0.elapsed() > Duration::from_secs(300) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the settling session did not end within 300 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stderr = reader.join().expect("stderr reader");
    assert!(status.success(), "settling session: {status}\n{stderr}");
    stderr
}

/// CLOCK_MONOTONIC in seconds (Python's `time.monotonic()` reads the same clock).
pub fn monotonic() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec to write.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

/// Whether `pid` runs (a zombie runs nothing and holds no memory: gone).
pub fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rfind(')')
                .and_then(|i| s.get(i + 2..i + 3))
                .map(|st| st != "Z")
        })
        .unwrap_or(false)
}

/// Copy cgroups (`germline/run-<pid>-*/copy-*`, cgroup v1 pids or v2) of the `germline run`
/// or `serve` process `pid` that hold a task (a zombie counts), with their tasks.
pub fn live_copies(pid: u32) -> Vec<(String, Vec<i32>)> {
    let base = ["/sys/fs/cgroup/pids/germline", "/sys/fs/cgroup/germline"]
        .into_iter()
        .map(Path::new)
        .find(|p| p.is_dir());
    let Some(base) = base else {
        return Vec::new();
    };
    let prefix = format!("run-{pid}-");
    let mut out = Vec::new();
    for run in std::fs::read_dir(base).into_iter().flatten().flatten() {
        if !run.file_name().to_string_lossy().starts_with(&prefix) {
            continue;
        }
        for c in std::fs::read_dir(run.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = c.file_name().to_string_lossy().to_string();
            if !name.starts_with("copy-") {
                continue;
            }
            let procs: Vec<i32> = std::fs::read_to_string(c.path().join("cgroup.procs"))
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect();
            if !procs.is_empty() {
                out.push((c.path().display().to_string(), procs));
            }
        }
    }
    out
}

/// mcp-server-time's answer `s` with the fields read from the clock masked: `datetime`, and
/// `day_of_week` and `is_dst`, which follow it (two runs a second apart straddle midnight in
/// some time zone every hour: Europe/Paris's at 23:00 UTC). Every other line is kept.
pub fn without_clock(s: &str) -> String {
    s.lines()
        .map(|l| {
            let t = l.trim_start();
            if ["\"datetime\"", "\"day_of_week\"", "\"is_dst\""]
                .iter()
                .any(|k| t.starts_with(k))
            {
                "<clock>"
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}
