//! `germline-runtime`'s runc commands run for real (root, the signed mcp-server-time release,
//! the real MCP client SDK): `--version` (and podman reading it), `features`, `spec`, `run`
//! (detached, and in the foreground as an MCP client's server command, and forwarding a
//! signal), `list`, `ps`, `events`, `state`, `pause`/`resume`, `kill`, `delete`, and the
//! refusals of `checkpoint`, `update` and `spec --rootless`. Under
//! GERMLINE_REQUIRE_ROOT_TESTS=1 a missing part fails the test.

mod run_common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use run_common::*;
use serde_json::{json, Value};

fn runtime_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_germline-runtime"))
}

/// The OCI runtime-spec version germline-runtime speaks (oci-spec 0.9's).
const SPEC: &str = "1.1.0";

/// A node of the test's own: its configuration (the example key, a policy, no trust metadata:
/// `required = false`), a state root, and a bundle made by `spec` whose rootfs is the signed
/// mcp-server-time release. Containers still there at the end are force-deleted.
struct Node {
    w: World,
    config: PathBuf,
    root: PathBuf,
    bundle: PathBuf,
    /// The engine cgroup `config.json` names (`linux.cgroupsPath`), without the id.
    cgroup_parent: String,
    ids: std::cell::RefCell<Vec<String>>,
}

impl Node {
    fn new() -> Node {
        let w = World::new();
        let policy = w.policy(9, "");
        let d = w.path();
        let config = d.join("runtime.toml");
        std::fs::write(
            &config,
            format!(
                "policy = \"{}\"\nkeys = [\"{}\"]\ngermline = \"{}\"\nstate_dir = \"{}\"\n\
                 [tuf]\nrequired = false\nrepo = \"{}\"\nroot = \"{}\"\nstate = \"{}\"\n",
                policy.display(),
                key().display(),
                germline().display(),
                d.join("broker-state").display(),
                d.join("no-tuf").display(),
                d.join("no-tuf-root.json").display(),
                d.join("release-state").display()
            ),
        )
        .expect("runtime.toml");
        let bundle = d.join("bundle");
        std::fs::create_dir(&bundle).expect("mkdir");
        Node {
            root: d.join("root"),
            config,
            bundle,
            cgroup_parent: format!("germline-test-{:x}", rand_u64()),
            ids: Default::default(),
            w,
        }
    }

    /// `germline-runtime --root R --config C ARGS`.
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(runtime_bin());
        c.arg("--root")
            .arg(&self.root)
            .arg("--config")
            .arg(&self.config)
            .args(args);
        c
    }

    /// Runs a command to its end: (success, stdout, stderr).
    fn out(&self, args: &[&str]) -> (bool, String, String) {
        let o = self
            .cmd(args)
            .stdin(Stdio::null())
            .output()
            .expect("germline-runtime");
        (
            o.status.success(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    }

    /// Its stdout, the command having succeeded.
    fn ok(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.out(args);
        assert!(ok, "germline-runtime {args:?}: {err}");
        out
    }

    fn json(&self, args: &[&str]) -> Value {
        let out = self.ok(args);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"))
    }

    fn track(&self, id: &str) {
        self.ids.borrow_mut().push(id.to_string());
    }

    /// `run -d` with a stdin the test holds (the container serves MCP on it and would stop at
    /// its end); the container's stdout and stderr go to files.
    fn run_detached(&self, id: &str) -> (ChildStdin, i32) {
        self.track(id);
        let pid_file = self.w.path().join(format!("{id}.pid"));
        let path = |p: &Path| p.display().to_string();
        let mut c = self
            .cmd(&[
                "run",
                "-d",
                "--bundle",
                &path(&self.bundle),
                "--pid-file",
                &path(&pid_file),
                id,
            ])
            .stdin(Stdio::piped())
            .stdout(file(&self.w.path().join(format!("{id}.out"))))
            .stderr(file(&self.w.path().join(format!("{id}.err"))))
            .spawn()
            .expect("run -d");
        let stdin = c.stdin.take().expect("stdin");
        let st = c.wait().expect("run -d");
        let err =
            std::fs::read_to_string(self.w.path().join(format!("{id}.err"))).unwrap_or_default();
        assert!(st.success(), "run -d: {st}: {err}");
        let pid = std::fs::read_to_string(&pid_file)
            .expect("pid file")
            .trim()
            .parse()
            .expect("a pid");
        (stdin, pid)
    }

    /// Waits until the container's germline is up: its `germline/run-PID-*` cgroup exists.
    fn wait_germline(&self, pid: i32) {
        let t = Instant::now();
        while germline_cgroups(pid).is_empty() {
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "the germline never started"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        for id in self.ids.borrow().iter() {
            let _ = self.cmd(&["delete", "--force", id]).output();
        }
        for hierarchy in std::fs::read_dir("/sys/fs/cgroup")
            .map(|rd| rd.flatten().map(|e| e.path()).collect::<Vec<_>>())
            .unwrap_or_default()
        {
            let _ = std::fs::remove_dir(hierarchy.join(&self.cgroup_parent));
        }
    }
}

fn file(p: &Path) -> Stdio {
    Stdio::from(std::fs::File::create(p).expect("create"))
}

/// The `germline/run-PID-*` cgroups (pids hierarchy) of the `germline run` with pid `pid`.
fn germline_cgroups(pid: i32) -> Vec<PathBuf> {
    std::fs::read_dir("/sys/fs/cgroup/pids/germline")
        .map(|rd| {
            rd.flatten()
                .filter(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .starts_with(&format!("run-{pid}-"))
                })
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default()
}

/// Every pid in the `cgroup.procs` of `dir` and below.
fn procs_below(dir: &Path) -> BTreeSet<i32> {
    let mut out = BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let text = std::fs::read_to_string(d.join("cgroup.procs")).unwrap_or_default();
        out.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
        if let Ok(rd) = std::fs::read_dir(&d) {
            stack.extend(
                rd.flatten()
                    .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
                    .map(|e| e.path()),
            );
        }
    }
    out
}

fn ready() -> bool {
    let ok = can_run() && bundle("mcp-server-time").join("rootfs").is_dir();
    assert!(
        ok || std::env::var_os("GERMLINE_REQUIRE_ROOT_TESTS").is_none(),
        "needs root, the agent venv and the example bundles (scripts/setup.sh)"
    );
    ok
}

/// Every (JSON pointer, JSON type) leaf of `v`, arrays as leaves.
fn leaves(v: &Value, at: &str, out: &mut Vec<(String, &'static str)>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                leaves(x, &format!("{at}/{k}"), out);
            }
        }
        Value::Array(_) => out.push((at.to_string(), "array")),
        Value::String(_) => out.push((at.to_string(), "string")),
        Value::Bool(_) => out.push((at.to_string(), "boolean")),
        Value::Number(_) => out.push((at.to_string(), "number")),
        Value::Null => out.push((at.to_string(), "null")),
    }
}

#[test]
fn version_features_and_spec_print_what_runc_prints() {
    if !ready() {
        return;
    }
    let n = Node::new();
    // --version and -v: the runtime's version and the OCI runtime-spec version, as runc's.
    let want = format!(
        "germline-runtime version {}\nspec: {SPEC}\n",
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(n.ok(&["--version"]), want);
    assert_eq!(n.ok(&["-v"]), want);
    // podman reads it (`podman info`: host.ociRuntime.version).
    if Command::new("podman").arg("--version").output().is_ok() {
        let o = Command::new("podman")
            .arg("--runtime")
            .arg(runtime_bin())
            .args(["info", "--format", "json"])
            .output()
            .expect("podman info");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let info: Value = serde_json::from_slice(&o.stdout).expect("podman info JSON");
        assert_eq!(
            info["host"]["ociRuntime"]["version"],
            want.trim_end(),
            "{}",
            info["host"]["ociRuntime"]
        );
    }

    // features: the runtime-spec features document.
    let f = n.json(&["features"]);
    assert_eq!(f["ociVersionMin"], "1.0.0");
    assert_eq!(f["ociVersionMax"], SPEC);
    assert_eq!(f["hooks"], json!([]), "no hook of config.json is run");
    assert_eq!(
        f["mountOptions"],
        json!([]),
        "no mount of config.json is made"
    );
    assert_eq!(f["linux"]["namespaces"], json!(["network"]));
    assert_eq!(f["linux"]["capabilities"], json!([]));
    assert_eq!(f["linux"]["cgroup"]["v1"], true);
    assert_eq!(f["linux"]["cgroup"]["systemd"], false);
    assert_eq!(
        f["potentiallyUnsafeConfigAnnotations"],
        json!(["dev.germline.mcp/listen"])
    );
    let mut ours = Vec::new();
    leaves(&f, "", &mut ours);
    assert!(
        ours.iter().all(|(_, t)| *t != "null"),
        "the features schema has no nulls: {ours:?}"
    );
    // Every field runc 1.1 prints too has the JSON type runc gives it (runc: the reference
    // implementation; the newer fields, e.g. mountExtensions, it does not print).
    let o = Command::new("runc").arg("features").output().expect("runc");
    let runc: Value = serde_json::from_slice(&o.stdout).expect("runc features JSON");
    let mut theirs = Vec::new();
    leaves(&runc, "", &mut theirs);
    let common: Vec<_> = ours
        .iter()
        .filter(|(p, _)| theirs.iter().any(|(q, _)| q == p))
        .collect();
    assert!(common.len() >= 12, "{common:?}");
    for (p, t) in &common {
        let (_, u) = theirs.iter().find(|(q, _)| q == p).expect("common");
        assert_eq!(t, u, "{p}");
    }

    // spec: runc's template config.json, once.
    let b = n.bundle.display().to_string();
    n.ok(&["spec", "--bundle", &b]);
    let c: Value =
        serde_json::from_slice(&std::fs::read(n.bundle.join("config.json")).expect("config.json"))
            .expect("JSON");
    assert_eq!(c["ociVersion"], SPEC);
    assert_eq!(c["root"]["path"], "rootfs");
    assert_eq!(c["process"]["args"], json!(["sh"]));
    assert_eq!(c["hostname"], "germline");
    let (ok, _, err) = n.out(&["spec", "--bundle", &b]);
    assert!(
        !ok && err.contains("config.json: exists; remove it first"),
        "{err}"
    );
    let (ok, _, err) = n.out(&["spec", "--rootless", "--bundle", &b]);
    assert!(
        !ok && err.contains("spec --rootless is not supported: germline-runtime runs as root"),
        "{err}"
    );
    // Refused runc commands say why.
    for (args, want) in [
        (
            vec!["checkpoint", "--image-path", "/nonexistent", "x"],
            "checkpoint is not supported",
        ),
        (
            vec!["update", "--memory", "1000000", "x"],
            "update is not supported",
        ),
        (
            vec!["exec", "--process", "/p.json", "x"],
            "exec is not supported",
        ),
    ] {
        let (ok, _, err) = n.out(&args);
        assert!(!ok && err.contains(want), "{args:?}: {err}");
    }
}

/// `spec`'s config.json, pointed at the signed release and at an engine cgroup of the test's.
fn release_bundle(n: &Node) {
    n.ok(&["spec", "--bundle", &n.bundle.display().to_string()]);
    let p = n.bundle.join("config.json");
    let mut c: Value = serde_json::from_slice(&std::fs::read(&p).expect("read")).expect("JSON");
    c["root"]["path"] = json!(bundle("mcp-server-time").join("rootfs"));
    c["linux"]["cgroupsPath"] = json!(format!("/{}/c", n.cgroup_parent));
    std::fs::write(&p, c.to_string()).expect("write");
}

#[test]
fn run_list_ps_events_pause_kill_delete_on_a_detached_container() {
    if !ready() {
        return;
    }
    let n = Node::new();
    release_bundle(&n);
    let id = format!("w4-{:x}", rand_u64());
    let (stdin, pid) = n.run_detached(&id);
    n.wait_germline(pid);
    let err = std::fs::read_to_string(n.w.path().join(format!("{id}.err"))).unwrap_or_default();
    assert!(
        err.contains("germline-runtime: ignored the command [\"sh\"]"),
        "spec's `sh` is named as ignored: {err}"
    );

    // list: runc's table, JSON and ids.
    let table = n.ok(&["list"]);
    let mut lines = table.lines();
    assert_eq!(
        lines
            .next()
            .map(|l| l.split_whitespace().collect::<Vec<_>>()),
        Some(vec!["ID", "PID", "STATUS", "BUNDLE", "CREATED", "OWNER"]),
        "{table}"
    );
    let row: Vec<String> = lines
        .next()
        .expect("a row")
        .split_whitespace()
        .map(str::to_string)
        .collect();
    assert_eq!(row[0], id);
    assert_eq!(row[1], pid.to_string());
    assert_eq!(row[2], "running");
    assert_eq!(row[3], n.bundle.display().to_string());
    assert_eq!(row[5], "root");
    let l = n.json(&["list", "--format", "json"]);
    assert_eq!(l.as_array().map(Vec::len), Some(1), "{l}");
    assert_eq!(l[0]["id"], json!(id));
    assert_eq!(l[0]["pid"], json!(pid));
    assert_eq!(l[0]["status"], "running");
    assert_eq!(l[0]["ociVersion"], SPEC);
    assert_eq!(n.ok(&["list", "-q"]), format!("{id}\n"));
    let s = n.json(&["state", &id]);
    assert_eq!(s["status"], "running");
    assert_eq!(s["pid"], json!(pid));
    assert_eq!(s["created"], l[0]["created"]);

    // ps: the container's processes, wherever they are: germline run, its broker (engine
    // cgroup), the germline (its own cgroup).
    let ps: Vec<i32> = serde_json::from_str(&n.ok(&["ps", "--format", "json", &id])).expect("pids");
    let set: BTreeSet<i32> = ps.iter().copied().collect();
    assert!(set.contains(&pid), "{ps:?}");
    let engine = PathBuf::from(format!("/sys/fs/cgroup/pids/{}/c", n.cgroup_parent));
    let in_engine = procs_below(&engine);
    assert!(in_engine.contains(&pid), "{in_engine:?}");
    let in_germline: BTreeSet<i32> = germline_cgroups(pid)
        .iter()
        .flat_map(|d| procs_below(d))
        .collect();
    assert!(!in_germline.is_empty());
    for p in in_engine.iter().chain(&in_germline) {
        assert!(
            set.contains(p),
            "pid {p} of the container's cgroups is not in ps {ps:?}"
        );
    }
    let broker = ps.iter().any(|p| {
        std::fs::read(format!("/proc/{p}/cmdline"))
            .map(|c| c.windows(14).any(|w| w == b"broker\0serve\0-"))
            .unwrap_or(false)
    });
    assert!(broker, "the broker is among {ps:?}");
    // The table: `ps -ef`'s header and exactly those processes' lines.
    let t = n.ok(&["ps", &id]);
    let mut tl = t.lines();
    let header: Vec<&str> = tl.next().expect("header").split_whitespace().collect();
    let col = header.iter().position(|h| *h == "PID").expect("PID column");
    let listed: BTreeSet<i32> = tl
        .map(|l| {
            l.split_whitespace()
                .nth(col)
                .expect("pid")
                .parse()
                .expect("pid")
        })
        .collect();
    assert_eq!(listed, set, "{t}");

    // events: one stats line, then a stream.
    let e: Value = serde_json::from_str(n.ok(&["events", "--stats", &id]).trim()).expect("JSON");
    assert_eq!(e["type"], "stats");
    assert_eq!(e["id"], json!(id));
    let tasks = e["data"]["pids"]["current"].as_u64().expect("pids.current");
    assert!(tasks as usize >= in_engine.len() + in_germline.len(), "{e}");
    assert!(
        e["data"]["memory"]["usage"]["usage"].as_u64().unwrap_or(0) > 1 << 20,
        "{e}"
    );
    assert!(
        e["data"]["cpu"]["usage"]["total"].as_u64().unwrap_or(0) > 0,
        "{e}"
    );
    let mut stream = n
        .cmd(&["events", "--interval", "1", &id])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("events");
    let mut reader = BufReader::new(stream.stdout.take().expect("stdout"));
    let t0 = Instant::now();
    for _ in 0..2 {
        let mut line = String::new();
        reader.read_line(&mut line).expect("an events line");
        let v: Value = serde_json::from_str(&line).expect("JSON line");
        assert_eq!(v["type"], "stats");
    }
    assert!(t0.elapsed() >= Duration::from_millis(900), "one a second");

    // pause / resume: the engine cgroup frozen and thawed, the state says so.
    n.ok(&["pause", &id]);
    assert_eq!(n.json(&["state", &id])["status"], "paused");
    assert_eq!(n.json(&["list", "--format", "json"])[0]["status"], "paused");
    let freezer = PathBuf::from(format!(
        "/sys/fs/cgroup/freezer/{}/c/freezer.state",
        n.cgroup_parent
    ));
    if freezer.exists() {
        assert_eq!(
            std::fs::read_to_string(&freezer).expect("freezer").trim(),
            "FROZEN"
        );
    }
    n.ok(&["resume", &id]);
    assert_eq!(n.json(&["state", &id])["status"], "running");

    // kill (runc's default signal, TERM): germline run stops; the stream of events ends.
    n.ok(&["kill", &id]);
    assert!(gone_within(pid, 20), "pid {pid} still there");
    let t = Instant::now();
    let st = loop {
        if let Some(st) = stream.try_wait().expect("events") {
            break st;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "events did not end");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(st.success(), "events: {st}");
    drop(stdin);
    let s = n.json(&["state", &id]);
    assert_eq!(s["status"], "stopped");
    assert_eq!(s["pid"], 0);
    let (ok, _, err) = n.out(&["ps", &id]);
    assert!(!ok && err.contains("is not running"), "{err}");
    n.ok(&["delete", &id]);
    assert_eq!(n.ok(&["list", "-q"]), "");
    assert!(!n.root.join(&id).exists());
    assert!(germline_cgroups(pid).is_empty(), "germline cgroups left");
    assert!(!engine.exists(), "the engine cgroup is left");
}

#[test]
fn run_in_the_foreground_serves_the_mcp_sdk_and_forwards_signals() {
    if !ready() {
        return;
    }
    let n = Node::new();
    release_bundle(&n);
    // The MCP SDK's client spawns `germline-runtime run` as its server command.
    let id = format!("w4-{:x}", rand_u64());
    n.track(&id);
    let mut server = vec![
        runtime_bin().display().to_string(),
        "--root".into(),
        n.root.display().to_string(),
        "--config".into(),
        n.config.display().to_string(),
        "run".into(),
        "--bundle".into(),
        n.bundle.display().to_string(),
    ];
    server.push(id.clone());
    let script = json!([{"list_tools": true},
        {"tool": "convert_time", "arguments": {"source_timezone": "UTC", "time": "12:00",
                                               "target_timezone": "Asia/Tokyo"}}]);
    let sp = n.w.path().join("script.json");
    std::fs::write(&sp, script.to_string()).expect("script");
    let o = Command::new(agent_python())
        .arg(root().join("tests/run/agent.py"))
        .arg(&sp)
        .arg("--")
        .args(&server)
        .output()
        .expect("agent");
    let err = String::from_utf8_lossy(&o.stderr);
    let lines: Vec<Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert_eq!(lines.len(), 3, "{lines:?}\n{err}");
    assert_eq!(lines[0]["server"], "mcp-time", "{err}");
    assert_eq!(
        lines[1]["tools"],
        json!(["convert_time", "get_current_time"])
    );
    assert_eq!(lines[2]["ok"], json!(true), "{}", lines[2]);
    assert!(text(&lines[2]).contains("21:00"), "{}", lines[2]);
    assert_eq!(lines[2]["meta"]["germline"]["mode"], "germline");
    // The session over, run removed the container (the SDK closes stdin, then kills what is
    // left a few seconds later: wait for the state to go).
    let t = Instant::now();
    while n.root.join(&id).exists() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the container was not removed"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(n.ok(&["list", "-q"]), "");

    // A signal to `germline-runtime run` reaches the container's process, which stops
    // cleanly; with --keep the stopped container stays for `state` and `delete`.
    let id = format!("w4-{:x}", rand_u64());
    n.track(&id);
    let b = n.bundle.display().to_string();
    let mut run: Child = n
        .cmd(&["run", "--keep", "--bundle", &b, &id])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(file(&n.w.path().join("keep.err")))
        .spawn()
        .expect("run");
    let t = Instant::now();
    let pid = loop {
        let (ok, out, _) = n.out(&["state", &id]);
        if ok {
            let s: Value = serde_json::from_str(&out).expect("state");
            if s["status"] == "running" {
                break s["pid"].as_i64().expect("pid") as i32;
            }
        }
        assert!(t.elapsed() < Duration::from_secs(30), "never running");
        std::thread::sleep(Duration::from_millis(50));
    };
    n.wait_germline(pid);
    germline_sys_kill(run.id() as i32, libc::SIGTERM);
    let t = Instant::now();
    let st = loop {
        if let Some(st) = run.try_wait().expect("run") {
            break st;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "run did not end after SIGTERM: not forwarded?"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let err = std::fs::read_to_string(n.w.path().join("keep.err")).unwrap_or_default();
    assert_eq!(st.code(), Some(0), "{err}");
    assert!(err.contains("germline run: stopped by a signal"), "{err}");
    assert!(gone_within(pid, 5));
    let s = n.json(&["state", &id]);
    assert_eq!(s["status"], "stopped", "--keep keeps it");
    n.ok(&["delete", &id]);
    assert!(!n.root.join(&id).exists());
}

/// Whether `pid` is gone within `secs` seconds.
fn gone_within(pid: i32, secs: u64) -> bool {
    let t = Instant::now();
    while Path::new(&format!("/proc/{pid}")).exists() {
        if t.elapsed() > Duration::from_secs(secs) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

fn germline_sys_kill(pid: i32, sig: i32) {
    // SAFETY: kill(2) takes plain integers; `pid` is our child.
    let r = unsafe { libc::kill(pid, sig) };
    assert_eq!(r, 0, "kill");
}
