//! `podman run -i --runtime germline-runtime`, `ctr run --runtime io.containerd.germline.v1`
//! (our shim v2) and `ctr run --runc-binary germline-runtime` for real (Debian's podman, conmon, runc, containerd 1.6), with
//! images loaded from OCI archives built from the signed example releases (no registry), and
//! the real MCP client SDK as the agent. Needs root, podman and the example bundles; under
//! GERMLINE_REQUIRE_ROOT_TESTS=1 a missing part fails the test.

mod run_common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use run_common::*;
use serde_json::{json, Value};

fn runtime_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_germline-runtime"))
}

fn podman_ready() -> bool {
    let ok = can_run()
        && Command::new("podman")
            .arg("--version")
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
    assert!(
        ok || std::env::var_os("GERMLINE_REQUIRE_ROOT_TESTS").is_none(),
        "needs root, podman (scripts/setup.d/70-engines.sh) and the example bundles"
    );
    ok
}

/// Loads bundles/out/NAME/image (optionally tampered) as `localhost/germline-test/NAME:TAG`,
/// once per test binary.
fn image(name: &str, tamper: Option<&str>) -> String {
    let tag = if tamper.is_some() {
        "tampered"
    } else {
        "signed"
    };
    let args: Vec<&str> = tamper.map(|p| vec!["--tamper", p]).unwrap_or_default();
    image_with(name, tag, &args)
}

/// `bundles/oci-archive.py` with `args`, loaded as `localhost/germline-test/NAME:TAG`.
fn image_with(name: &str, tag: &str, args: &[&str]) -> String {
    let reference = format!("localhost/germline-test/{name}:{tag}");
    let dir = std::env::temp_dir().join(format!("germline-oci-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let tar = dir.join(format!("{name}-{tag}.tar"));
    let mut cmd = Command::new("python3");
    cmd.arg(root().join("bundles/oci-archive.py"))
        .arg(root().join("bundles/out").join(name).join("image"))
        .arg(&reference)
        .arg(&tar);
    cmd.args(args);
    let st = cmd.status().expect("oci-archive.py");
    assert!(st.success(), "oci-archive.py {name}");
    let out = Command::new("podman")
        .arg("load")
        .arg("-i")
        .arg(&tar)
        .output()
        .expect("podman load");
    assert!(
        out.status.success(),
        "podman load: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_file(&tar);
    reference
}

static TIME: OnceLock<String> = OnceLock::new();
static POOL: OnceLock<String> = OnceLock::new();

/// The node configuration the runtime reads (instead of /etc/germline/runtime.toml).
fn runtime_config(dir: &Path, policy: &Path) -> PathBuf {
    runtime_config_with(dir, policy, "")
}

fn runtime_config_with(dir: &Path, policy: &Path, extra: &str) -> PathBuf {
    let p = dir.join("runtime.toml");
    std::fs::write(
        &p,
        format!(
            "policy = \"{}\"\nkeys = [\"{}\"]\ngermline = \"{}\"\nstate_dir = \"{}\"\n{extra}",
            policy.display(),
            key().display(),
            germline().display(),
            dir.join("broker-state").display()
        ),
    )
    .expect("runtime.toml");
    p
}

/// `podman run -i --rm` of `image` under `runtime` (germline-runtime or runc), with this
/// machine's ulimits (podman's defaults need CAP_SYS_RESOURCE, which the sandbox lacks).
fn podman_run(config: &Path, runtime: &str, extra: &[String], image: &str) -> Vec<String> {
    let mut v: Vec<String> = vec!["podman".into()];
    if runtime != "runc" {
        // Passed to every runtime command podman runs (runc would refuse the flag).
        v.extend([
            "--runtime-flag".into(),
            format!("config={}", config.display()),
        ]);
    }
    v.extend([
        "run".into(),
        "-i".into(),
        "--rm".into(),
        "--ulimit".into(),
        "nofile=20000:20000".into(),
        "--ulimit".into(),
        "nproc=32768:32768".into(),
        "--runtime".into(),
        runtime.into(),
    ]);
    v.extend(extra.iter().cloned());
    v.push(image.into());
    v
}

/// Every JSON line the agent printed.
fn agent_lines(dir: &Path, script: &Value, server: &[String]) -> (Vec<Value>, String) {
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
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    (lines, String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn podman_serves_mcp_server_time_to_the_mcp_sdk_client() {
    if !podman_ready() {
        return;
    }
    let img = TIME.get_or_init(|| image("mcp-server-time", None));
    let w = World::new();
    let policy = w.policy(9, "");
    let cfg = runtime_config(w.path(), &policy);
    let server = podman_run(
        &cfg,
        &runtime_bin().display().to_string(),
        &["--network".into(), "none".into()],
        img,
    );
    let script = json!([{"list_tools": true},
        {"tool": "get_current_time", "arguments": {"timezone": "Europe/Paris"}},
        {"tool": "convert_time", "arguments": {"source_timezone": "UTC", "time": "12:00",
                                               "target_timezone": "Asia/Tokyo"}}]);
    let (lines, err) = agent_lines(w.path(), &script, &server);
    assert_eq!(lines.len(), 4, "{lines:?}\n{err}");
    assert_eq!(lines[0]["step"], "initialize", "{err}");
    assert_eq!(lines[0]["server"], "mcp-time");
    assert_eq!(
        lines[1]["tools"],
        json!(["convert_time", "get_current_time"])
    );
    assert_eq!(lines[2]["ok"], json!(true), "{}", lines[2]);
    assert!(text(&lines[2]).contains("Europe/Paris"), "{}", lines[2]);
    assert_eq!(lines[2]["meta"]["germline"]["mode"], "germline");
    assert!(text(&lines[3]).contains("21:00"), "{}", lines[3]);
}

#[test]
fn pool_trojan_leaks_under_runc_and_not_under_germline_runtime() {
    if !podman_ready() {
        return;
    }
    let img = POOL.get_or_init(|| image("germline-office-pool", None));
    let w = World::new();
    let sink = Sink::start(w.path(), "ocr");
    let policy = w.policy(sink.port, "");
    let cfg = runtime_config(w.path(), &policy);
    let world = w.path().display().to_string();
    // The same command for both runtimes: the host network, a proxy to the sink and the test
    // world mounted at its own path, so that under runc the Trojan can reach everything.
    let extra: Vec<String> = vec![
        "--network".into(),
        "host".into(),
        "-e".into(),
        format!("HTTP_PROXY=http://127.0.0.1:{}", sink.port),
        "-v".into(),
        format!("{world}:{world}:ro"),
    ];
    let call = json!({"tool": "ocr_annotate", "arguments": {
        "invoice": w.invoice.display().to_string(),
        "salary_sheet": w.salary.display().to_string()}});
    let script = json!([call, call, call]);
    let mut seen = Vec::new();
    for runtime in ["runc".to_string(), runtime_bin().display().to_string()] {
        sink.clear();
        let (lines, err) = agent_lines(w.path(), &script, &podman_run(&cfg, &runtime, &extra, img));
        let calls: Vec<&Value> = lines.iter().filter(|l| l.get("tool").is_some()).collect();
        assert_eq!(calls.len(), 3, "{runtime}: {lines:?}\n{err}");
        assert!(
            calls.iter().all(|c| c["ok"] == json!(true)),
            "{runtime}: {calls:?}\n{err}"
        );
        let leaks = sink
            .bodies()
            .iter()
            .filter(|b| b.contains(&w.canary_hr))
            .count();
        let delivered = sink.bodies().len();
        seen.push((leaks, delivered));
        if runtime != "runc" {
            // The runtime said what it ignored (podman relays the container's stderr).
            assert!(err.contains("ignored environment HTTP_PROXY (-e)"), "{err}");
            assert!(err.contains("--network host"), "{err}");
        }
    }
    // runc: the stash of call 1 rides on calls 2 and 3. germline-runtime: every request
    // reaches the sink, none carries the salary sheet.
    assert_eq!(seen, vec![(2, 3), (0, 3)]);
}

#[test]
fn a_tampered_image_fails_at_create_with_the_reason() {
    if !podman_ready() {
        return;
    }
    let img = image(
        "mcp-server-time",
        Some("usr/lib/python3/dist-packages/mcp_server_time/__init__.py"),
    );
    let w = World::new();
    let policy = w.policy(9, "");
    let cfg = runtime_config(w.path(), &policy);
    let argv = podman_run(
        &cfg,
        &runtime_bin().display().to_string(),
        &["--network".into(), "none".into()],
        &img,
    );
    let out = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .output()
        .expect("podman");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("release refused: rootfs digest mismatch: manifest pins sha256:"),
        "{err}"
    );
    // Under runc the same image runs: the refusal is germline's, not a broken image.
    let argv = podman_run(&cfg, "runc", &["--network".into(), "none".into()], &img);
    let out = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .output()
        .expect("podman");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn podman_pause_stop_and_rm_leave_no_process_cgroup_or_mount() {
    if !podman_ready() {
        return;
    }
    let img = TIME.get_or_init(|| image("mcp-server-time", None));
    let w = World::new();
    let policy = w.policy(9, "");
    let cfg = runtime_config(w.path(), &policy);
    let mut argv = podman_run(
        &cfg,
        &runtime_bin().display().to_string(),
        &["--network".into(), "none".into(), "-d".into()],
        img,
    );
    argv.retain(|a| a != "--rm");
    let out = Command::new(&argv[0])
        .args(&argv[1..])
        .output()
        .expect("podman run -d");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let inspect = |f: &str| {
        let o = Command::new("podman")
            .args(["inspect", "--format", f, &id])
            .output()
            .expect("inspect");
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    // Wait until germline run has its germline up (its cgroup exists).
    let pid: i32 = inspect("{{.State.Pid}}").parse().expect("pid");
    assert!(pid > 0);
    let germline_cg = || {
        std::fs::read_dir("/sys/fs/cgroup/pids/germline")
            .map(|rd| {
                rd.flatten()
                    .filter(|e| {
                        e.file_name()
                            .to_string_lossy()
                            .starts_with(&format!("run-{pid}-"))
                    })
                    .count()
            })
            .unwrap_or(0)
    };
    for _ in 0..300 {
        if germline_cg() > 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(germline_cg() > 0, "the germline never started");
    assert_eq!(inspect("{{.State.Status}}"), "running");
    // pause / unpause: the engine cgroup's freezer (the front end and its broker).
    let freezer = PathBuf::from(format!(
        "/sys/fs/cgroup/freezer/libpod_parent/libpod-{id}/freezer.state"
    ));
    for (cmd, want, state) in [
        ("pause", "paused", "FROZEN"),
        ("unpause", "running", "THAWED"),
    ] {
        let o = Command::new("podman").args([cmd, &id]).output().expect(cmd);
        assert!(
            o.status.success(),
            "{cmd}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(inspect("{{.State.Status}}"), want);
        if freezer.exists() {
            let s = std::fs::read_to_string(&freezer).unwrap_or_default();
            assert_eq!(s.trim(), state, "{cmd}");
        }
    }
    let st = Command::new("podman")
        .args(["stop", "-t", "10", &id])
        .output()
        .expect("stop");
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let rm = Command::new("podman")
        .args(["rm", &id])
        .output()
        .expect("rm");
    assert!(
        rm.status.success(),
        "{}",
        String::from_utf8_lossy(&rm.stderr)
    );
    assert!(wait_gone(pid), "pid {pid} still there");
    assert_eq!(germline_cg(), 0, "germline cgroups of {pid} left");
    assert!(
        !Path::new(&format!("/run/germline-runtime/{id}")).exists(),
        "state left"
    );
    assert!(!Path::new(&format!("/run/germline/session-{pid}")).exists());
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    assert!(!mounts.contains(&id), "a mount of {id} is left");
    assert!(
        !Path::new(&format!("/sys/fs/cgroup/pids/libpod_parent/libpod-{id}")).exists(),
        "the engine cgroup is left"
    );
}

#[test]
fn a_non_germline_image_is_refused_or_handed_to_runc_if_configured() {
    if !podman_ready() {
        return;
    }
    let img = image_with("mcp-server-time", "plain", &["--drop-germline"]);
    let w = World::new();
    let policy = w.policy(9, "");
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}});
    let run = |cfg: &Path| {
        let argv = podman_run(
            cfg,
            &runtime_bin().display().to_string(),
            &["--network".into(), "none".into()],
            &img,
        );
        let mut child = Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("podman");
        {
            use std::io::Write;
            let mut stdin = child.stdin.take().expect("stdin");
            writeln!(stdin, "{init}").expect("write");
        }
        child.wait_with_output().expect("podman")
    };
    // Default: refused at create, with the reason in podman's output.
    let out = run(&runtime_config(w.path(), &policy));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("is not a germline release"), "{err}");
    // non_germline = "runc": the same image runs as an ordinary container and answers.
    let out = run(&runtime_config_with(
        w.path(),
        &policy,
        "non_germline = \"runc\"\n",
    ));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("\"serverInfo\""), "{stdout}");
    assert!(
        !stdout.contains("\"germline\""),
        "runc served it, not germline: {stdout}"
    );
}

/// A containerd of the test's own (private root, state and socket), stopped on drop. The
/// germline shim (`containerd-shim-germline-v1`, beside germline-runtime in the target
/// directory) is on its PATH, as `io.containerd.germline.v1` resolves to it.
struct Containerd {
    child: std::process::Child,
    sock: PathBuf,
    state: PathBuf,
    /// A namespace of its own: the shim's germline-runtime state is per namespace
    /// (`/run/containerd/germline/NS`), so tests running at once do not see each other's.
    ns: String,
}

/// `containerd-shim-germline-v1`, built by `cargo build --workspace` (the
/// germline-containerd-shim crate) into the same directory as germline-runtime.
fn shim_bin() -> PathBuf {
    let p = runtime_bin().with_file_name("containerd-shim-germline-v1");
    assert!(
        p.is_file(),
        "{} is missing: build it with `cargo build -p germline-containerd-shim`",
        p.display()
    );
    p
}

fn containerd_ready() -> bool {
    if !podman_ready() {
        return false;
    }
    let have = Command::new("containerd")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        have || std::env::var_os("GERMLINE_REQUIRE_ROOT_TESTS").is_none(),
        "needs containerd (scripts/setup.d/70-engines.sh)"
    );
    have
}

impl Containerd {
    fn start(dir: &Path, runtime_config: &Path) -> Containerd {
        let state = PathBuf::from(format!("/run/germline-test-ctr-{}", rand_u64() as u32));
        let sock = state.join("c.sock");
        let cfg = dir.join("containerd.toml");
        std::fs::write(
            &cfg,
            format!(
                "version = 2\nroot = \"{}\"\nstate = \"{}\"\n[grpc]\n  address = \"{}\"\n\
                 [plugins.\"io.containerd.grpc.v1.cri\"]\n  disable_tcp_service = true\n",
                dir.join("containerd-root").display(),
                state.join("state").display(),
                sock.display()
            ),
        )
        .expect("containerd.toml");
        let path = format!(
            "{}:{}",
            shim_bin().parent().expect("target dir").display(),
            std::env::var("PATH").unwrap_or_else(|_| "/usr/sbin:/usr/bin:/sbin:/bin".into())
        );
        // Shims inherit containerd's environment and pass it to the runtime they call.
        let child = Command::new("containerd")
            .arg("--config")
            .arg(&cfg)
            .env("GERMLINE_RUNTIME_CONFIG", runtime_config)
            .env("PATH", path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("containerd");
        for _ in 0..200 {
            if sock.exists() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        assert!(sock.exists(), "containerd did not come up");
        let ns = format!("germline-test-{:x}", rand_u64() as u32);
        Containerd {
            child,
            sock,
            state,
            ns,
        }
    }

    fn ctr(&self) -> Vec<String> {
        vec![
            "ctr".into(),
            "--address".into(),
            self.sock.display().to_string(),
            "-n".into(),
            self.ns.clone(),
        ]
    }

    fn ctr_output(&self, args: &[&str]) -> std::process::Output {
        let v = self.ctr();
        Command::new(&v[0])
            .args(&v[1..])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("ctr")
    }

    /// `bundles/oci-archive.py` of release NAME with `args`, imported as REF.
    fn import(&self, dir: &Path, name: &str, reference: &str, args: &[&str]) {
        let tar = dir.join(format!("{name}-{:x}.tar", rand_u64() as u32));
        let st = Command::new("python3")
            .arg(root().join("bundles/oci-archive.py"))
            .arg(root().join("bundles/out").join(name).join("image"))
            .arg(reference)
            .arg(&tar)
            .args(args)
            .status()
            .expect("oci-archive.py");
        assert!(st.success(), "oci-archive.py {name}");
        let o = self.ctr_output(&["images", "import", &tar.display().to_string()]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let _ = std::fs::remove_file(&tar);
    }

    /// `ctr run --rm [--runtime R] EXTRA REF ID`.
    fn run_argv(&self, runtime: Option<&str>, extra: &[String], reference: &str) -> Vec<String> {
        let mut v = self.ctr();
        v.extend(["run".into(), "--rm".into()]);
        if let Some(r) = runtime {
            v.extend(["--runtime".into(), r.into()]);
        }
        v.extend(extra.iter().cloned());
        v.push(reference.into());
        v.push(format!("germline-{:x}", rand_u64() as u32));
        v
    }

    /// No task and no container left, nothing of germline-runtime's state, no mount.
    fn assert_clean(&self) {
        let o = self.ctr_output(&["tasks", "ls", "-q"]);
        assert_eq!(
            String::from_utf8_lossy(&o.stdout).trim(),
            "",
            "a task is left"
        );
        let o = self.ctr_output(&["containers", "ls", "-q"]);
        assert_eq!(
            String::from_utf8_lossy(&o.stdout).trim(),
            "",
            "a container is left"
        );
        let ns = Path::new("/run/containerd/germline").join(&self.ns);
        let left: Vec<String> = std::fs::read_dir(&ns)
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with("germline-"))
                    .collect()
            })
            .unwrap_or_default();
        assert!(left.is_empty(), "germline-runtime state left: {left:?}");
        let _ = std::fs::remove_dir(&ns);
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
        let root = self.state.display().to_string();
        assert!(
            !mounts.lines().any(|l| l.contains(&root)),
            "a mount under {root} is left"
        );
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.state);
    }
}

/// The germline pids' cgroups (`germline/run-PID-*`) now present.
fn germline_cgroups() -> Vec<String> {
    std::fs::read_dir("/sys/fs/cgroup/pids/germline")
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("run-"))
                .collect()
        })
        .unwrap_or_default()
}

fn assert_time_session(lines: &[Value], err: &str) {
    assert_eq!(lines.len(), 3, "{lines:?}\n{err}");
    assert_eq!(lines[0]["step"], "initialize", "{err}");
    assert_eq!(lines[0]["server"], "mcp-time", "{err}");
    assert_eq!(
        lines[1]["tools"],
        json!(["convert_time", "get_current_time"])
    );
    assert_eq!(lines[2]["ok"], json!(true), "{}", lines[2]);
    assert!(text(&lines[2]).contains("\"timezone\""), "{}", lines[2]);
    assert_eq!(lines[2]["meta"]["germline"]["mode"], "germline");
}

#[test]
fn ctr_run_with_the_germline_shim_serves_mcp_server_time_and_leaves_nothing() {
    if !containerd_ready() {
        return;
    }
    let w = World::new();
    let policy = w.policy(9, "");
    let cfg = runtime_config(w.path(), &policy);
    let c = Containerd::start(w.path(), &cfg);
    let reference = "localhost/germline-test/mcp-server-time:ctr";
    c.import(w.path(), "mcp-server-time", reference, &[]);
    let before = germline_cgroups();
    let script = json!([{"list_tools": true},
        {"tool": "get_current_time", "arguments": {"timezone": "UTC"}}]);
    // containerd's own shim v2 for io.containerd.germline.v1.
    let server = c.run_argv(Some("io.containerd.germline.v1"), &[], reference);
    let (lines, err) = agent_lines(w.path(), &script, &server);
    assert_time_session(&lines, &err);
    c.assert_clean();
    // New `run-PID-*` cgroups whose `germline run` is gone are leftovers (other tests'
    // germlines may be running meanwhile; their owners are alive).
    let orphans = || -> Vec<String> {
        germline_cgroups()
            .into_iter()
            .filter(|g| !before.contains(g))
            .filter(|g| {
                let pid = g.split('-').nth(1).unwrap_or("");
                !Path::new("/proc").join(pid).exists()
            })
            .collect()
    };
    for _ in 0..30 {
        if orphans().is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(
        orphans().is_empty(),
        "germline cgroups left: {:?}",
        orphans()
    );
    // containerd's runc shim calling germline-runtime as its runc works the same way.
    let server = c.run_argv(
        None,
        &["--runc-binary".into(), runtime_bin().display().to_string()],
        reference,
    );
    let (lines, err) = agent_lines(w.path(), &script, &server);
    assert_time_session(&lines, &err);
    c.assert_clean();
}

#[test]
fn ctr_pool_trojan_leaks_under_runc_and_not_under_the_germline_shim() {
    if !containerd_ready() {
        return;
    }
    let w = World::new();
    let sink = Sink::start(w.path(), "ocr");
    let policy = w.policy(sink.port, "");
    let cfg = runtime_config(w.path(), &policy);
    let c = Containerd::start(w.path(), &cfg);
    let reference = "localhost/germline-test/germline-office-pool:ctr";
    c.import(w.path(), "germline-office-pool", reference, &[]);
    let world = w.path().display().to_string();
    // The same command for both runtimes: the host network, a proxy to the sink and the
    // test world mounted at its own path.
    let extra: Vec<String> = vec![
        "--net-host".into(),
        "--env".into(),
        format!("HTTP_PROXY=http://127.0.0.1:{}", sink.port),
        "--mount".into(),
        format!("type=bind,src={world},dst={world},options=rbind:ro"),
    ];
    let call = json!({"tool": "ocr_annotate", "arguments": {
        "invoice": w.invoice.display().to_string(),
        "salary_sheet": w.salary.display().to_string()}});
    let script = json!([call, call, call]);
    let mut seen = Vec::new();
    for runtime in ["io.containerd.runc.v2", "io.containerd.germline.v1"] {
        sink.clear();
        let argv = c.run_argv(Some(runtime), &extra, reference);
        let (lines, err) = agent_lines(w.path(), &script, &argv);
        let calls: Vec<&Value> = lines.iter().filter(|l| l.get("tool").is_some()).collect();
        assert_eq!(calls.len(), 3, "{runtime}: {lines:?}\n{err}");
        assert!(
            calls.iter().all(|c| c["ok"] == json!(true)),
            "{runtime}: {calls:?}\n{err}"
        );
        let bodies = sink.bodies();
        let leaks = bodies.iter().filter(|b| b.contains(&w.canary_hr)).count();
        seen.push((leaks, bodies.len()));
        if runtime == "io.containerd.germline.v1" {
            assert!(err.contains("ignored environment HTTP_PROXY"), "{err}");
            assert!(err.contains("ignored mounts"), "{err}");
        }
        c.assert_clean();
    }
    assert_eq!(seen, vec![(2, 3), (0, 3)]);
}

#[test]
fn ctr_a_tampered_image_is_refused_by_the_germline_shim_with_the_reason() {
    if !containerd_ready() {
        return;
    }
    let w = World::new();
    let policy = w.policy(9, "");
    let cfg = runtime_config(w.path(), &policy);
    let c = Containerd::start(w.path(), &cfg);
    let reference = "localhost/germline-test/mcp-server-time:tampered";
    c.import(
        w.path(),
        "mcp-server-time",
        reference,
        &[
            "--tamper",
            "usr/lib/python3/dist-packages/mcp_server_time/__init__.py",
        ],
    );
    let run = |runtime: &str| {
        let argv = c.run_argv(Some(runtime), &[], reference);
        Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(Stdio::null())
            .output()
            .expect("ctr run")
    };
    let out = run("io.containerd.germline.v1");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("release refused: rootfs digest mismatch: manifest pins sha256:"),
        "{err}"
    );
    c.assert_clean();
    // Under runc the same image runs, and its tampered module imports: the refusal is
    // germline's, not a broken image.
    let mut argv = c.run_argv(Some("io.containerd.runc.v2"), &[], reference);
    argv.extend([
        "/usr/bin/python3".into(),
        "-c".into(),
        "import mcp_server_time".into(),
    ]);
    let out = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .output()
        .expect("ctr run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Two network namespaces of the test's own joined by a veth pair: the pod's network (what
/// a CNI plugin would give a pod) and the rest of the cluster's, where the agent and the sink
/// are. Nothing of the host's network is touched; both go (with the veth and any nft table)
/// on drop.
struct PodNet {
    pod: String,
    world: String,
    pod_ip: String,
    world_ip: String,
}

impl PodNet {
    fn new() -> PodNet {
        let r = rand_u64();
        let tag = format!("{:06x}", r as u32 & 0xff_ffff);
        // 10.201.X.Y/30, X and Y/4 random: two tests at once do not share a subnet.
        let (x, y) = ((r >> 24) as u8 % 250 + 1, ((r >> 32) as u8 % 60) * 4);
        let n = PodNet {
            pod: format!("germline-pod-{tag}"),
            world: format!("germline-world-{tag}"),
            pod_ip: format!("10.201.{x}.{}", y + 2),
            world_ip: format!("10.201.{x}.{}", y + 1),
        };
        let (vp, vw) = (format!("glp{tag}"), format!("glw{tag}"));
        let steps: Vec<Vec<String>> = vec![
            vec!["netns".into(), "add".into(), n.pod.clone()],
            vec!["netns".into(), "add".into(), n.world.clone()],
            // Made inside the pod's namespace, its peer straight in the world's.
            format!(
                "-n {} link add {vp} type veth peer name {vw} netns {}",
                n.pod, n.world
            )
            .split(' ')
            .map(String::from)
            .collect(),
        ];
        let mut steps = steps;
        for (ns, dev, ip) in [(&n.pod, &vp, &n.pod_ip), (&n.world, &vw, &n.world_ip)] {
            for s in [
                format!("-n {ns} addr add {ip}/30 dev {dev}"),
                format!("-n {ns} link set {dev} up"),
                format!("-n {ns} link set lo up"),
            ] {
                steps.push(s.split(' ').map(String::from).collect());
            }
        }
        for s in steps {
            let o = Command::new("ip").args(&s).output().expect("ip");
            assert!(
                o.status.success(),
                "ip {}: {}",
                s.join(" "),
                String::from_utf8_lossy(&o.stderr)
            );
        }
        n
    }

    /// `ip netns exec NS PROGRAM`.
    fn exec(ns: &str, program: &Path) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns]).arg(program);
        c
    }

    fn nft(&self, rules: &str) {
        let o = Command::new("ip")
            .args(["netns", "exec", &self.pod, "nft", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                use std::io::Write;
                c.stdin.take().expect("stdin").write_all(rules.as_bytes())?;
                c.wait_with_output()
            })
            .expect("nft");
        assert!(
            o.status.success(),
            "nft: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

impl Drop for PodNet {
    fn drop(&mut self) {
        for ns in [&self.pod, &self.world] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

/// The network namespace identity (`/proc/PID/ns/net` or a bind of one) of `p`.
fn netns_of(p: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).ok().map(|m| m.ino())
}

#[test]
fn ctr_serves_streamable_http_in_the_pod_netns_and_its_broker_obeys_the_pods_network_policy() {
    if !containerd_ready() {
        return;
    }
    let have_nft = Command::new("nft").arg("--version").output().is_ok();
    assert!(
        have_nft || std::env::var_os("GERMLINE_REQUIRE_ROOT_TESTS").is_none(),
        "needs nft (scripts/setup.d/70-engines.sh)"
    );
    if !have_nft {
        return;
    }
    let w = World::new();
    let net = PodNet::new();
    // The sink, in the world's network, at the address ocr.example is pinned to.
    let log = w.path().join("sink-world.jsonl");
    struct Killed(std::process::Child);
    impl Drop for Killed {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut sink = PodNet::exec(&net.world, Path::new("python3"))
        .arg(root().join("tests/run/sink.py"))
        .args([
            "--bind",
            &net.world_ip,
            "--port",
            "0",
            "--seconds",
            "300",
            "--log",
        ])
        .arg(&log)
        .stdout(Stdio::piped())
        .spawn()
        .expect("sink");
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(sink.stdout.take().expect("stdout")),
        &mut line,
    )
    .expect("sink ready");
    let sink = Killed(sink);
    let sink_port: u16 = line
        .trim()
        .strip_prefix("ready ")
        .and_then(|p| p.parse().ok())
        .expect("sink port");
    let secret = format!("k-{:016x}", rand_u64());
    let policy = w.policy_pinned(
        &format!("{}:{sink_port}", net.world_ip),
        "[[argument]]\ntool = \"ocr_text\"\nname = \"text\"\nlabel = []\n\n\
         [credentials.\"ocr.example\"]\nheader = \"X-Api-Key\"\nvalue_env = \"GERMLINE_TEST_OCR_KEY\"\n",
    );
    let cfg = runtime_config(w.path(), &policy);
    let c = Containerd::start(w.path(), &cfg);
    let reference = "localhost/germline-test/germline-office:ctr";
    c.import(w.path(), "germline-office", reference, &[]);
    let id = format!("germline-{:x}", rand_u64() as u32);
    // 0.0.0.0: the pod's own address, found in its namespace (a pod spec cannot know it).
    let listen = format!("{}:8080", net.pod_ip);
    let out = w.path().join("ctr-run.log");
    let mut argv = c.ctr();
    argv.extend([
        "run".into(),
        "--rm".into(),
        "--runtime".into(),
        "io.containerd.germline.v1".into(),
        "--with-ns".into(),
        format!("network:/var/run/netns/{}", net.pod),
        "--annotation".into(),
        "dev.germline.mcp/listen=0.0.0.0:8080".into(),
        "--env".into(),
        format!("GERMLINE_TEST_OCR_KEY={secret}"),
        "--env".into(),
        "UNNAMED_SECRET=never-delivered".into(),
        reference.into(),
        id.clone(),
    ]);
    let run = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).expect("log"))
        .stderr(std::fs::File::create(w.path().join("ctr-run.err")).expect("log"))
        .spawn()
        .expect("ctr run");
    // Dropped before containerd: a failed assertion still kills the task (SIGKILL; the
    // shim's delete then removes what it had).
    struct Task<'a> {
        c: &'a Containerd,
        id: String,
        run: std::process::Child,
    }
    impl Drop for Task<'_> {
        fn drop(&mut self) {
            if self.run.try_wait().ok().flatten().is_none() {
                let _ = self
                    .c
                    .ctr_output(&["tasks", "kill", "-s", "SIGKILL", &self.id]);
                for _ in 0..100 {
                    if self.run.try_wait().ok().flatten().is_some() {
                        return;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(100));
                }
                let _ = self.run.kill();
                let _ = self.run.wait();
            }
        }
    }
    let mut task = Task {
        c: &c,
        id: id.clone(),
        run,
    };
    // The container's stderr (through the shim's fifo) says where the endpoint and token are.
    let read_out = || {
        std::fs::read_to_string(&out).unwrap_or_default()
            + &std::fs::read_to_string(w.path().join("ctr-run.err")).unwrap_or_default()
    };
    let mut token = None;
    for _ in 0..600 {
        token = read_out()
            .lines()
            .find_map(|l| l.strip_prefix("germline serve: bearer token in "))
            .map(|t| PathBuf::from(t.trim()));
        if token.is_some() || task.run.try_wait().ok().flatten().is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let token = token.unwrap_or_else(|| panic!("no endpoint: {}", read_out()));
    let text = read_out();
    assert!(text.contains(&format!("http://{listen}/mcp")), "{text}");
    assert!(
        text.contains("ignored environment UNNAMED_SECRET (-e)"),
        "{text}"
    );
    assert!(
        !text.contains("GERMLINE_TEST_OCR_KEY") && !text.contains(&secret),
        "{text}"
    );
    // The front end and its broker run in the pod's network namespace.
    let pid: i32 = token
        .parent()
        .and_then(|d| d.file_name())
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("serve-"))
        .and_then(|p| p.parse().ok())
        .expect("serve pid");
    let pod_ns = netns_of(&Path::new("/var/run/netns").join(&net.pod));
    assert!(pod_ns.is_some());
    assert_eq!(netns_of(Path::new(&format!("/proc/{pid}/ns/net"))), pod_ns);
    let broker = descendants(pid)
        .into_iter()
        .find(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .map(|c| c.split(|b| *b == 0).nth(1) == Some(b"broker"))
                .unwrap_or(false)
        })
        .expect("the broker sidecar");
    assert_eq!(
        netns_of(Path::new(&format!("/proc/{broker}/ns/net"))),
        pod_ns,
        "the broker runs in the pod's network namespace"
    );
    // The agent, in the world's network, over Streamable HTTP with the real MCP SDK.
    let agent = |note: &str| -> (Vec<Value>, String) {
        let sp = w.path().join(format!("script-{note}.json"));
        let script = json!([{"list_tools": true},
            {"tool": "ocr_text", "arguments": {"text": format!("scan {note}")}}]);
        std::fs::write(&sp, script.to_string()).expect("script");
        let o = PodNet::exec(&net.world, &agent_python())
            .arg(root().join("tests/run/agent.py"))
            .arg(&sp)
            .args(["--url", &format!("http://{listen}/mcp")])
            .arg(&token)
            .output()
            .expect("agent");
        let lines = String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        (lines, String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let records = || -> Vec<Value> {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    };
    // Policy off: the broker delivers ocr.example's request to the sink, with the credential.
    let (lines, err) = agent("allowed");
    assert_eq!(lines.len(), 3, "{lines:?}\n{err}\n{}", read_out());
    assert_eq!(lines[0]["server"], "germline-office", "{err}");
    assert!(lines[1]["tools"]
        .as_array()
        .is_some_and(|t| t.contains(&json!("ocr_text"))));
    assert_eq!(lines[2]["ok"], json!(true), "{}", lines[2]);
    assert_eq!(lines[2]["meta"]["germline"]["mode"], "germline");
    let got = records();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["body"], "scan allowed");
    assert_eq!(got[0]["headers"]["x-api-key"], json!(secret), "{}", got[0]);
    assert!(!got[0].to_string().contains("never-delivered"));
    // Policy on: the pod's egress to the sink is rejected (NetworkPolicy's stand-in, in the
    // pod's namespace); the broker's delivery fails, and the sink sees nothing.
    net.nft(&format!(
        "table inet germline_test {{\n chain egress {{\n  type filter hook output priority 0; policy accept;\n  ip daddr {} tcp dport {sink_port} reject with tcp reset\n }}\n}}\n",
        net.world_ip
    ));
    let (lines, err) = agent("denied");
    assert_eq!(lines.len(), 3, "{lines:?}\n{err}");
    // The copy's request got the broker's answer for a delivery that failed.
    assert!(
        run_common::text(&lines[2]).contains("upstream failed"),
        "{}",
        lines[2]
    );
    assert_eq!(records().len(), 1, "{:?}", records());
    // SIGTERM: serve stops, ctr run --rm removes the container, nothing is left.
    let o = c.ctr_output(&["tasks", "kill", &id]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut done = false;
    for _ in 0..300 {
        if task.run.try_wait().ok().flatten().is_some() {
            done = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    drop(task);
    drop(sink);
    assert!(done, "ctr run did not end after SIGTERM: {}", read_out());
    c.assert_clean();
    assert!(!token.exists(), "{} is left", token.display());
    assert!(!Path::new(&format!("/proc/{pid}")).exists());
}

#[test]
fn the_precreate_hook_refuses_a_tampered_release_before_any_runtime_runs() {
    if !podman_ready() {
        return;
    }
    let tampered = image(
        "mcp-server-time",
        Some("usr/lib/python3/dist-packages/mcp_server_time/__init__.py"),
    );
    let signed = image("mcp-server-time", None);
    let w = World::new();
    let policy = w.policy(9, "");
    let cfg = runtime_config(w.path(), &policy);
    // hooks/germline-precreate.json, pointed at this build, this node configuration and log.
    let log = w.path().join("precreate.log");
    let mut hook: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("hooks/germline-precreate.json")).expect("hook"),
    )
    .expect("hook JSON");
    hook["hook"]["path"] = json!(runtime_bin());
    hook["hook"]["args"] = json!([
        "germline-runtime",
        "--config",
        cfg,
        "--log",
        log,
        "hook",
        "precreate"
    ]);
    let dir = w.path().join("hooks.d");
    std::fs::create_dir(&dir).expect("hooks.d");
    std::fs::write(dir.join("germline-precreate.json"), hook.to_string()).expect("hook");
    // Under runc: the hook decides before any runtime is called.
    let run = |img: &str, hooks: bool| {
        let extra: Vec<String> = ["--network", "none", "--entrypoint", "/usr/bin/python3"]
            .map(String::from)
            .to_vec();
        let mut argv = podman_run(&cfg, "runc", &extra, img);
        if hooks {
            argv.splice(1..1, ["--hooks-dir".into(), dir.display().to_string()]);
        }
        argv.extend(["-c".into(), "import mcp_server_time".into()]);
        Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(Stdio::null())
            .output()
            .expect("podman")
    };
    let o = run(&tampered, false);
    assert!(
        o.status.success(),
        "without the hook runc runs it: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = run(&tampered, true);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("precreate hook"), "{err}");
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        logged.contains("release refused: rootfs digest mismatch: manifest pins sha256:"),
        "{logged}"
    );
    let o = run(&signed, true);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let logged = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        logged.contains("precreate hook: release mcp-server-time@"),
        "{logged}"
    );
    assert!(!Path::new(&format!(
        "/run/germline-runtime/precreate-{}",
        std::process::id()
    ))
    .exists());
}
