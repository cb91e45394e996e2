//! The sandbox's commands: `germline start|status|stop|call RELEASE` and
//! `germline sandbox-bench`. The `germline` binary only dispatches to [`run`].
//!
//! Output (docs/user-guide.md, "Output"): `start`, `status ID`, `call` and `stop` print text
//! for a person, or with `--json` the supervisor's answer as one JSON document; a failure is
//! `germline: message` on stderr, or under `--json` one JSON object `{"error": {command,
//! message}}` on stderr with stdout empty.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use serde_json::{json, Value};

use crate::germline::{Germline, Options};
use crate::protocol::{self, SupervisorAnswer, SupervisorRequest};
use crate::spec::{LaunchSpec, DEFAULT_PYTHON_ROOTFS};

/// Where running germlines listen for `status`, `call` and `stop`.
pub const RUN_DIR: &str = germline_sys::paths::RUN_DIR;

/// The sandbox's subcommands (flattened into the `germline` command).
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start a release's germline (in the background unless --foreground).
    Start(StartArgs),
    /// Show a germline's checks (G1-G3), pool and copies; with no ID, every running
    /// `germline run` / `germline serve` deployment (docs/operations.md).
    Status(StatusArgs),
    /// Run one tool call in a fresh checked copy of a running germline.
    Call(CallArgs),
    /// Stop a germline: kill its copies and remove its cgroups.
    Stop(IdArgs),
    /// Measure fork-to-ready latency and private memory per copy (a benchmark, not a test).
    // Listed apart, with the research commands (`germline --help`).
    #[command(hide = true)]
    SandboxBench(BenchArgs),
}

/// Which release to launch.
#[derive(Debug, Args)]
pub struct ReleaseArgs {
    /// A LaunchSpec JSON file, or `mcp-server-time` for the test rootfs of the setup script.
    pub release: String,
    /// Warm the germline with a synthetic session on public data before the fork point.
    #[arg(long)]
    pub warm: bool,
}

/// `germline start`.
#[derive(Debug, Args)]
pub struct StartArgs {
    #[command(flatten)]
    pub release: ReleaseArgs,
    /// The germline's name (default: derived from the release).
    #[arg(long)]
    pub id: Option<String>,
    /// Pre-forked, checked, data-free copies to keep ready.
    #[arg(long, default_value_t = 0)]
    pub pool: usize,
    /// Stay in the foreground.
    #[arg(long)]
    pub foreground: bool,
    /// Print `{id, pid, socket, log}` as JSON once it is up (and a failure as a JSON object on
    /// stderr).
    #[arg(long)]
    pub json: bool,
}

/// A running germline.
#[derive(Debug, Args)]
pub struct IdArgs {
    /// The germline's name as given to `start`.
    pub id: String,
    /// Print the germline's answer as JSON (and a failure as a JSON object on stderr).
    #[arg(long)]
    pub json: bool,
}

/// `germline status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The germline's name as given to `start`; none: the running deployments.
    pub id: Option<String>,
    /// Print JSON (the germline's status, or the deployments) instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `germline call`.
#[derive(Debug, Args)]
pub struct CallArgs {
    pub id: String,
    pub tool: String,
    /// The tool's arguments as a JSON object.
    #[arg(default_value = "{}")]
    pub arguments: String,
    /// Print the germline's answer `{result}` as JSON (and a failure as a JSON object on
    /// stderr) instead of the tool's text.
    #[arg(long)]
    pub json: bool,
}

/// `germline sandbox-bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(flatten)]
    pub release: ReleaseArgs,
    /// Copies to measure per mode.
    #[arg(long, default_value_t = 50)]
    pub n: usize,
    /// The tool to call, and its arguments, for the command-to-answer figure.
    #[arg(long, default_value = "get_current_time")]
    pub tool: String,
    #[arg(long, default_value = r#"{"timezone":"UTC"}"#)]
    pub arguments: String,
    /// Copies run the tool as PID 2 under a reaper (docs/sandbox.md, "The tool is PID 2").
    #[arg(long)]
    pub reaper: bool,
    /// Print the figures as one JSON document instead of the table.
    #[arg(long)]
    pub json: bool,
}

fn load_spec(r: &ReleaseArgs) -> Result<LaunchSpec, String> {
    let mut spec = if r.release == "mcp-server-time" {
        LaunchSpec::mcp_server_time(PathBuf::from(DEFAULT_PYTHON_ROOTFS))
    } else {
        let text =
            std::fs::read_to_string(&r.release).map_err(|e| format!("{}: {e}", r.release))?;
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", r.release))?
    };
    spec.warm |= r.warm;
    Ok(spec)
}

fn sanitize(id: &str) -> Result<String, String> {
    if !id.is_empty()
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        Ok(id.to_string())
    } else {
        Err(format!(
            "bad germline id {id:?} (letters, digits, - and _ only)"
        ))
    }
}

fn socket_path(id: &str) -> PathBuf {
    Path::new(RUN_DIR).join(format!("{id}.sock"))
}

/// Runs one sandbox command.
pub fn run(cmd: Command) -> ExitCode {
    let (json, name) = match &cmd {
        Command::Start(a) => (a.json, "start"),
        Command::Status(a) => (a.json, "status"),
        Command::Call(a) => (a.json, "call"),
        Command::Stop(a) => (a.json, "stop"),
        Command::SandboxBench(a) => (a.json, "sandbox-bench"),
    };
    let r = match cmd {
        Command::Start(a) => start(a),
        Command::Status(a) => match &a.id {
            Some(id) => request(id, &SupervisorRequest::Status)
                .map(|v| emit(a.json, &v, || status_text(&v))),
            // `germline` itself answers the deployments form before it gets here.
            None => Err("status: give a germline ID".into()),
        },
        Command::Call(a) => serde_json::from_str::<Value>(&a.arguments)
            .map_err(|e| format!("arguments: {e}"))
            .and_then(|args| {
                request(
                    &a.id,
                    &SupervisorRequest::Call {
                        tool: a.tool,
                        arguments: args,
                    },
                )
            })
            .map(|v| emit(a.json, &v, || call_text(&v))),
        Command::Stop(a) => request(&a.id, &SupervisorRequest::Stop)
            .map(|v| emit(a.json, &v, || format!("germline {} stopped", a.id))),
        Command::SandboxBench(a) => bench(a),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if json => {
            let v = json!({"error": {"command": name, "message": e}});
            eprintln!("{v}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("germline: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Prints `v` pretty as JSON when `json`, else `text()`.
fn emit(json: bool, v: &Value, text: impl FnOnce() -> String) {
    if json {
        println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
    } else {
        println!("{}", text().trim_end());
    }
}

/// A germline's status for a person: its checks, pool and copies.
fn status_text(v: &Value) -> String {
    let list = |k: &str| {
        v[k].as_array()
            .map(|a| {
                a.iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .unwrap_or_default()
    };
    let mut t = format!(
        "germline {} (pid {}): G1-G3 {}{}{}\n",
        v["id"].as_str().unwrap_or("?"),
        v["pid"],
        v["g1_g3"].as_str().unwrap_or("?"),
        if v["warm"] == json!(true) {
            ", warm"
        } else {
            ""
        },
        if v["frozen"] == json!(true) {
            ", frozen"
        } else {
            ""
        },
    );
    for c in v["checks"].as_array().into_iter().flatten() {
        t.push_str(&format!("  failed check: {}\n", c.as_str().unwrap_or("?")));
    }
    if let Some(r) = v["refused"].as_str() {
        t.push_str(&format!("  refused: {r}\n"));
    }
    t.push_str(&format!(
        "  pool: {} ready of {} [{}]\n  live copies: [{}]\n  copies made: {}\n",
        v["pool_pids"].as_array().map_or(0, Vec::len),
        v["pool"],
        list("pool_pids"),
        list("live_copies"),
        v["copies_made"],
    ));
    t
}

/// A call's answer for a person: the tool result's text parts, else its JSON.
fn call_text(v: &Value) -> String {
    let r = &v["result"];
    let texts: Vec<&str> = r["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["text"].as_str())
        .collect();
    let mut t = if texts.is_empty() {
        serde_json::to_string_pretty(r).unwrap_or_default()
    } else {
        texts.join("\n")
    };
    if r["isError"] == json!(true) {
        t.insert_str(0, "the tool reported an error:\n");
    }
    t
}

/// Sends one request to a running germline; its answer, or the error it answered with.
fn request(id: &str, msg: &SupervisorRequest) -> Result<Value, String> {
    let id = sanitize(id)?;
    let path = socket_path(&id);
    let mut s = UnixStream::connect(&path)
        .map_err(|e| format!("no germline {id} ({}: {e})", path.display()))?;
    s.write_all(&protocol::encode_line(msg))
        .map_err(|e| e.to_string())?;
    let mut line = String::new();
    BufReader::new(s)
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    let v: Value =
        serde_json::from_str(&line).map_err(|e| format!("bad answer from the germline: {e}"))?;
    if *msg == SupervisorRequest::Stop {
        // The daemon removes its socket once every copy, cgroup and namespace is gone.
        let t = Instant::now();
        while path.exists() && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    if let Some(e) = v.get("error") {
        return Err(format!(
            "germline {id}: {}",
            e.as_str().map_or_else(|| e.to_string(), str::to_string)
        ));
    }
    Ok(v)
}

fn start(a: StartArgs) -> Result<(), String> {
    let spec = load_spec(&a.release)?;
    let default_id = Path::new(&a.release.release)
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("germline")
        .to_string();
    let id = sanitize(&a.id.unwrap_or(default_id))?;
    std::fs::create_dir_all(RUN_DIR).map_err(|e| format!("{RUN_DIR}: {e}"))?;
    let path = socket_path(&id);
    if UnixStream::connect(&path).is_ok() {
        return Err(format!("germline {id} is already running"));
    }
    if !a.foreground {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let log = std::fs::File::create(Path::new(RUN_DIR).join(format!("{id}.log")))
            .map_err(|e| e.to_string())?;
        let mut args = vec![
            "start".to_string(),
            a.release.release.clone(),
            "--id".into(),
            id.clone(),
        ];
        args.extend(["--pool".into(), a.pool.to_string(), "--foreground".into()]);
        if a.release.warm {
            args.push("--warm".into());
        }
        let mut child = std::process::Command::new(exe)
            .args(&args)
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("spawn: {e}"))?;
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(120) {
            if UnixStream::connect(&path).is_ok() {
                let log = Path::new(RUN_DIR).join(format!("{id}.log"));
                let v = json!({"id": id, "pid": child.id(), "socket": path, "log": log});
                emit(a.json, &v, || {
                    format!(
                        "germline {id} started (pid {}); `germline status {id}`",
                        child.id()
                    )
                });
                return Ok(());
            }
            if let Ok(Some(st)) = child.try_wait() {
                let log = std::fs::read_to_string(Path::new(RUN_DIR).join(format!("{id}.log")))
                    .unwrap_or_default();
                return Err(format!("germline {id} failed to start ({st}): {log}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        return Err(format!("germline {id} did not come up"));
    }
    let mut opts = Options::new(&id);
    opts.pool = a.pool;
    let mut g = Germline::start(spec, opts).map_err(|e| e.to_string())?;
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    eprintln!(
        "germline {id}: ready, pid {}, listening on {}",
        g.pid(),
        path.display()
    );
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        let mut line = String::new();
        let mut reader = BufReader::new(&conn);
        if reader.read_line(&mut line).is_err() {
            continue;
        }
        let req: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
        let (answer, stop) = serve_one(&mut g, &req);
        let mut w = &conn;
        let _ = w.write_all(&protocol::encode_line(&answer));
        if stop {
            break;
        }
    }
    let _ = std::fs::remove_file(&path);
    g.stop().map_err(|e| e.to_string())
}

fn serve_one(g: &mut Germline, req: &Value) -> (SupervisorAnswer, bool) {
    match protocol::known::<SupervisorRequest>(req) {
        Some(SupervisorRequest::Status) => {
            let st = g.status();
            let mut v = serde_json::to_value(&st).unwrap_or(Value::Null);
            v["g1_g3"] = json!(if st.checks.is_empty() { "pass" } else { "FAIL" });
            v["pool_pids"] = json!(g.pool_pids());
            v["live_copies"] = json!(g.copy_pids());
            (SupervisorAnswer::Status(v), false)
        }
        Some(SupervisorRequest::Call { tool, arguments }) => match g.call(&[], &tool, arguments) {
            Ok(result) => (SupervisorAnswer::Result { result }, false),
            Err(e) => (
                SupervisorAnswer::Error {
                    error: e.to_string(),
                },
                false,
            ),
        },
        Some(SupervisorRequest::Stop) => (SupervisorAnswer::Stopped { stopped: true }, true),
        None => (
            SupervisorAnswer::Error {
                error: "unknown request".into(),
            },
            false,
        ),
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round();
    sorted[(i as usize).min(sorted.len() - 1)]
}

/// The median and p99 of `v` (sorted here), as `--json` prints them.
fn summary(mut v: Vec<f64>) -> Value {
    v.sort_by(f64::total_cmp);
    json!({"median": percentile(&v, 0.5), "p99": percentile(&v, 0.99)})
}

/// A line of the table: `name`, then the median and p99 of `s` ([`summary`]).
fn summary_line(name: &str, s: &Value) -> String {
    format!(
        "{name:<50} median {:>7.2} ms   p99 {:>7.2} ms",
        s["median"].as_f64().unwrap_or(f64::NAN),
        s["p99"].as_f64().unwrap_or(f64::NAN),
    )
}

/// One call with the timing split the benchmark reports: (request -> ready copy, request ->
/// answer, private memory of the copy after serving).
fn timed_call(g: &mut Germline, tool: &str, args: &Value) -> Result<(f64, f64, f64), String> {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let t = Instant::now();
    let mut c = g.copy().map_err(|e| e.to_string())?;
    let ready = ms(t.elapsed());
    let r = g
        .prepare_copy(&mut c, &[])
        .and_then(|()| c.deliver(&[]))
        .and_then(|()| c.mcp_call(tool, args.clone()));
    let answer = ms(t.elapsed());
    let mem = c.private_memory().unwrap_or(0) as f64 / (1024.0 * 1024.0);
    c.finish(r).map_err(|e| e.to_string())?;
    g.refill_pool().map_err(|e| e.to_string())?;
    Ok((ready, answer, mem))
}

fn bench(a: BenchArgs) -> Result<(), String> {
    let spec = load_spec(&a.release)?;
    let args: Value = serde_json::from_str(&a.arguments).map_err(|e| format!("arguments: {e}"))?;
    // The table's lines as they come (a run takes a while), unless the document is wanted.
    let line = |t: String| {
        if !a.json {
            println!("{t}");
        }
    };
    let mut doc = json!({"tool": a.tool, "calls_per_mode": a.n, "reaper": a.reaper, "modes": []});
    for pool in [0usize, 2] {
        let mut opts = Options::new(&format!("bench-{}-{pool}", std::process::id()));
        opts.pool = pool;
        opts.reaper = a.reaper;
        let mut g = Germline::start(spec.clone(), opts).map_err(|e| e.to_string())?;
        if pool == 0 {
            doc["warm"] = json!(g.warmed());
            line(format!(
                "germline pid {} (warm: {}), {} calls per mode",
                g.pid(),
                g.warmed(),
                a.n
            ));
        }
        let (mut ready, mut answer, mut mem) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..a.n {
            let (r, t, m) = timed_call(&mut g, &a.tool, &args)?;
            ready.push(r);
            answer.push(t);
            mem.push(m);
        }
        let mode = if pool == 0 {
            "no pool".to_string()
        } else {
            format!("pool of {pool}")
        };
        let (ready, answer) = (summary(ready), summary(answer));
        line(summary_line(
            &format!("fork command -> checked copy ready ({mode})"),
            &ready,
        ));
        line(summary_line(
            &format!("command -> answer of {} ({mode})", a.tool),
            &answer,
        ));
        mem.sort_by(f64::total_cmp);
        let (mem_median, mem_max) = (percentile(&mem, 0.5), percentile(&mem, 1.0));
        line(format!(
            "{:<50} median {mem_median:>7.2} MiB  max {mem_max:>6.2} MiB",
            format!("private memory of a live copy ({mode})"),
        ));
        if let Some(modes) = doc["modes"].as_array_mut() {
            modes.push(json!({
                "pool": pool, "ready_ms": ready, "answer_ms": answer,
                "private_mib": {"median": mem_median, "max": mem_max},
            }));
        }
        g.stop().map_err(|e| e.to_string())?;
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
    }
    Ok(())
}
