//! The kubelet's path, as far as this machine has it: containerd 1.6's CRI plugin with a
//! `germline` runtime handler (`runtime_type = "io.containerd.germline.v1"`, what a
//! RuntimeClass with `handler: germline` selects), driven over the CRI gRPC API (v1) as the
//! kubelet drives it: RunPodSandbox with that handler, CreateContainer, StartContainer,
//! ContainerStatus, StopContainer, RemoveContainer, StopPodSandbox, RemovePodSandbox. No
//! kubelet is installable here (docs/engines.md). The pod network comes from a CNI plugin of
//! the test's own (a veth into a namespace of its own). Needs root, containerd, the example
//! bundles and `cargo build --workspace` (germline, germline-runtime and this shim in one
//! target directory); under GERMLINE_REQUIRE_ROOT_TESTS=1 a missing part fails the test.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hyper_util::rt::TokioIo;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::*;
use tonic::transport::{Channel, Endpoint, Uri};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The target directory's binaries (this test runs from `target/debug/deps`).
fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target directory");
    dir.join(name)
}

fn ready() -> bool {
    // SAFETY: geteuid(2) cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let have = |c: &str| {
        Command::new(c)
            .arg("--version")
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false)
    };
    let bins = [
        "germline",
        "germline-runtime",
        "containerd-shim-germline-v1",
    ]
    .iter()
    .all(|b| bin(b).is_file());
    let ok = root
        && have("containerd")
        && have("ctr")
        && bins
        && repo().join("bundles/out/mcp-server-time/image").is_dir();
    assert!(
        ok || std::env::var_os("GERMLINE_REQUIRE_ROOT_TESTS").is_none(),
        "needs root, containerd (scripts/setup.d/70-engines.sh), the example bundles and \
         `cargo build --workspace`"
    );
    ok
}

fn rand() -> u32 {
    let mut b = [0u8; 4];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        use std::io::Read;
        let _ = f.read_exact(&mut b);
    }
    u32::from_le_bytes(b)
}

/// The "rest of the cluster": a network namespace of the test's own, to which the test's CNI
/// plugin connects each pod by a veth pair (so no host network is touched). Deleted on drop.
struct World {
    name: String,
}

impl Drop for World {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// A CNI plugin of the test's own (bash): on ADD it makes `eth0` in the pod's namespace, a
/// veth whose peer is in `world`, with `pod_ip`/30, records the namespace path in
/// `dir/pod-netns`, and answers with a CNI 0.4.0 result. containerd's CRI plugin calls it as
/// it calls any CNI plugin (`bin_dir`, `conf_dir`).
fn cni_plugin(dir: &Path, world: &str, tag: &str, pod_ip: &str, world_ip: &str) {
    let bin = dir.join("cni-bin");
    std::fs::create_dir_all(&bin).expect("cni-bin");
    std::os::unix::fs::symlink("/usr/lib/cni/loopback", bin.join("loopback")).expect("loopback");
    let script = format!(
        r#"#!/bin/bash
set -euo pipefail
cat >/dev/null
case "$CNI_COMMAND" in
VERSION) echo '{{"cniVersion":"0.4.0","supportedVersions":["0.3.0","0.3.1","0.4.0"]}}' ;;
ADD)
  echo "$CNI_NETNS" > {rec}
  nsenter --net="$CNI_NETNS" ip link add "$CNI_IFNAME" type veth peer name glc{tag} netns {world}
  nsenter --net="$CNI_NETNS" ip addr add {pod_ip}/30 dev "$CNI_IFNAME"
  nsenter --net="$CNI_NETNS" ip link set "$CNI_IFNAME" up
  ip -n {world} addr add {world_ip}/30 dev glc{tag}
  ip -n {world} link set glc{tag} up
  printf '{{"cniVersion":"0.4.0","interfaces":[{{"name":"%s","sandbox":"%s"}}],"ips":[{{"version":"4","address":"{pod_ip}/30","interface":0}}]}}' "$CNI_IFNAME" "$CNI_NETNS" ;;
*) ;;
esac
"#,
        rec = dir.join("pod-netns").display(),
    );
    let p = bin.join("germline-test-veth");
    std::fs::write(&p, script).expect("plugin");
    std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    std::fs::write(
        dir.join("cni/10-germline-test.conflist"),
        r#"{"cniVersion":"0.4.0","name":"germline-test","plugins":[{"type":"germline-test-veth"}]}"#,
    )
    .expect("conflist");
}

/// The network namespace identity (inode) of a namespace file.
fn netns_of(p: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).ok().map(|m| m.ino())
}

/// Direct children of `pid` (of every thread).
fn children(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in rd.flatten() {
            let c = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
            out.extend(c.split_whitespace().filter_map(|x| x.parse::<i32>().ok()));
        }
    }
    out
}

struct Containerd {
    child: std::process::Child,
    sock: PathBuf,
    state: PathBuf,
    _dir: tempfile::TempDir,
    dir: PathBuf,
}

impl Drop for Containerd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.state);
    }
}

impl Containerd {
    /// A containerd with its own root, state and socket, its CRI plugin on a random stream
    /// port, the `germline` runtime handler whose options name `runtime_config`, and the
    /// given sandbox (pause) image.
    fn start(runtime_config_text: &str, world: &World) -> Containerd {
        let tmp = tempfile::Builder::new()
            .prefix("germline-cri-")
            .tempdir_in("/var/tmp")
            .expect("tempdir");
        let dir = tmp.path().to_path_buf();
        std::fs::create_dir_all(dir.join("cni")).expect("cni dir");
        let r = rand();
        let (x, y) = ((r >> 8) as u8 % 250 + 1, (r as u8 % 60) * 4);
        cni_plugin(
            &dir,
            &world.name,
            &format!("{:06x}", r >> 8 & 0xff_ffff),
            &format!("10.202.{x}.{}", y + 2),
            &format!("10.202.{x}.{}", y + 1),
        );
        let rc = dir.join("runtime.toml");
        std::fs::write(&rc, runtime_config_text).expect("runtime.toml");
        let state = PathBuf::from(format!("/run/germline-test-cri-{:x}", rand()));
        let sock = state.join("c.sock");
        let cfg = format!(
            r#"version = 2
root = "{root}"
state = "{state}"
[grpc]
  address = "{sock}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/germline-test/pause:cri"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  disable_apparmor = true
  # The sandbox's oom_score_adj (-998) needs CAP_SYS_RESOURCE, which this machine lacks:
  # clamp it to containerd's own (docs/engines.md, host settings).
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{cni_bin}"
    conf_dir = "{cni}"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.germline]
    runtime_type = "io.containerd.germline.v1"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.germline.options]
      ConfigPath = "{rc}"
"#,
            root = dir.join("root").display(),
            state = state.join("state").display(),
            sock = sock.display(),
            cni = dir.join("cni").display(),
            cni_bin = dir.join("cni-bin").display(),
            rc = rc.display(),
        );
        let cp = dir.join("containerd.toml");
        std::fs::write(&cp, cfg).expect("containerd.toml");
        let path = format!(
            "{}:{}",
            bin("germline").parent().expect("dir").display(),
            std::env::var("PATH").unwrap_or_else(|_| "/usr/sbin:/usr/bin:/sbin:/bin".into())
        );
        let log = std::fs::File::create(dir.join("containerd.log")).expect("log");
        let child = Command::new("containerd")
            .arg("--config")
            .arg(&cp)
            .env("PATH", path)
            .env_remove("GERMLINE_RUNTIME_CONFIG")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("containerd");
        let t = Instant::now();
        while !sock.exists() && t.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(sock.exists(), "containerd did not come up");
        Containerd {
            child,
            sock,
            state,
            _dir: tmp,
            dir,
        }
    }

    /// `bundles/oci-archive.py` of the time release with `args`, imported into k8s.io.
    fn import(&self, reference: &str, args: &[&str]) {
        let tar = self.dir.join(format!("{:x}.tar", rand()));
        let st = Command::new("python3")
            .arg(repo().join("bundles/oci-archive.py"))
            .arg(repo().join("bundles/out/mcp-server-time/image"))
            .arg(reference)
            .arg(&tar)
            .args(args)
            .status()
            .expect("oci-archive.py");
        assert!(st.success(), "oci-archive.py {args:?}");
        let o = Command::new("ctr")
            .arg("--address")
            .arg(&self.sock)
            .args(["-n", "k8s.io", "images", "import"])
            .arg(&tar)
            .output()
            .expect("ctr");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let _ = std::fs::remove_file(&tar);
    }

    async fn client(&self) -> RuntimeServiceClient<Channel> {
        let sock = self.sock.clone();
        let ch = Endpoint::try_from("http://[::]:50051")
            .expect("endpoint")
            .connect_with_connector(tower::service_fn(move |_: Uri| {
                let s = sock.clone();
                async move {
                    Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(s).await?))
                }
            }))
            .await
            .expect("CRI connect");
        RuntimeServiceClient::new(ch)
    }
}

fn sandbox_config(dir: &Path, name: &str) -> PodSandboxConfig {
    PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: name.into(),
            uid: format!("uid-{:x}", rand()),
            namespace: "germline-test".into(),
            attempt: 0,
        }),
        log_directory: dir.join("logs").display().to_string(),
        linux: Some(LinuxPodSandboxConfig {
            security_context: Some(LinuxSandboxSecurityContext {
                // The pod's own network, from the test's CNI plugin.
                namespace_options: Some(NamespaceOption {
                    network: NamespaceMode::Pod as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn container_config(image: &str, name: &str) -> ContainerConfig {
    ContainerConfig {
        metadata: Some(ContainerMetadata {
            name: name.into(),
            attempt: 0,
        }),
        image: Some(ImageSpec {
            image: image.into(),
            ..Default::default()
        }),
        envs: vec![KeyValue {
            key: "HTTP_PROXY".into(),
            value: "http://127.0.0.1:9".into(),
        }],
        log_path: format!("{name}.log"),
        // The agent's MCP endpoint is the container's stdin/stdout (kubectl attach -i).
        stdin: true,
        ..Default::default()
    }
}

/// Processes whose command line names `needle`.
fn procs_naming(needle: &str) -> Vec<i32> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            if let Ok(c) = std::fs::read(e.path().join("cmdline")) {
                if String::from_utf8_lossy(&c).contains(needle) && pid != std::process::id() as i32
                {
                    out.push(pid);
                }
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cri_germline_handler_runs_a_verified_release_and_refuses_a_tampered_one() {
    if !ready() {
        return;
    }
    let broker = PathBuf::from(format!("/var/tmp/germline-cri-broker-{:x}", rand()));
    let rc = format!(
        "policy = \"{policy}\"\nkeys = [\"{key}\"]\ngermline = \"{g}\"\nstate_dir = \"{s}\"\n\
         non_germline = \"runc\"\n[tuf]\nrequired = false\nrepo = \"{s}/no-tuf\"\n\
         root = \"{s}/no-tuf-root.json\"\nstate = \"{s}/release-state\"\n",
        policy = repo().join("config/policy.example.toml").display(),
        key = repo().join("bundles/out/keys/cosign.pub").display(),
        g = bin("germline").display(),
        s = broker.display(),
    );
    let world = World {
        name: format!("germline-cri-world-{:x}", rand()),
    };
    let o = Command::new("ip")
        .args(["netns", "add", &world.name])
        .output()
        .expect("ip");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let c = Containerd::start(&rc, &world);
    // The pod's sandbox ("pause") container: the time image without its release, waiting
    // for a signal; the germline handler hands it to runc (`non_germline = "runc"`).
    c.import(
        "localhost/germline-test/pause:cri",
        &[
            "--drop-germline",
            "--cmd",
            r#"["/usr/bin/python3", "-c", "import signal; signal.pause()"]"#,
        ],
    );
    let signed = "localhost/germline-test/mcp-server-time:cri";
    let tampered = "localhost/germline-test/mcp-server-time:cri-tampered";
    c.import(signed, &[]);
    c.import(
        tampered,
        &[
            "--tamper",
            "usr/lib/python3/dist-packages/mcp_server_time/__init__.py",
        ],
    );
    let mut cri = c.client().await;
    // containerd creates its socket before every plugin has registered; the CRI service
    // answers Version once it is up.
    let t = Instant::now();
    loop {
        match cri
            .version(VersionRequest {
                version: "v1".into(),
            })
            .await
        {
            Ok(_) => break,
            Err(e) if t.elapsed() > Duration::from_secs(30) => {
                panic!("CRI Version: {e}\n{}", c.log())
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    let sb_cfg = sandbox_config(&c.dir, &format!("agent-{:x}", rand()));
    let sb = cri
        .run_pod_sandbox(RunPodSandboxRequest {
            config: Some(sb_cfg.clone()),
            runtime_handler: "germline".into(),
        })
        .await
        .unwrap_or_else(|e| panic!("RunPodSandbox: {e}\n{}", c.log()))
        .into_inner()
        .pod_sandbox_id;

    // A tampered image: CreateContainer records it, StartContainer (the task's create)
    // fails with germline-runtime's reason.
    let bad = cri
        .create_container(CreateContainerRequest {
            pod_sandbox_id: sb.clone(),
            config: Some(container_config(tampered, "tampered")),
            sandbox_config: Some(sb_cfg.clone()),
        })
        .await
        .expect("CreateContainer (tampered)")
        .into_inner()
        .container_id;
    let e = cri
        .start_container(StartContainerRequest {
            container_id: bad.clone(),
        })
        .await
        .expect_err("a tampered release must not start");
    assert!(
        e.message()
            .contains("release refused: rootfs digest mismatch: manifest pins sha256:"),
        "{}",
        e.message()
    );

    // The signed image runs under germline execution.
    let good = cri
        .create_container(CreateContainerRequest {
            pod_sandbox_id: sb.clone(),
            config: Some(container_config(signed, "time")),
            sandbox_config: Some(sb_cfg.clone()),
        })
        .await
        .expect("CreateContainer")
        .into_inner()
        .container_id;
    cri.start_container(StartContainerRequest {
        container_id: good.clone(),
    })
    .await
    .unwrap_or_else(|e| panic!("StartContainer: {e}\n{}", c.log()));
    let state = |cri: &mut RuntimeServiceClient<Channel>, id: String| {
        let mut cri = cri.clone();
        async move {
            cri.container_status(ContainerStatusRequest {
                container_id: id,
                verbose: false,
            })
            .await
            .ok()
            .and_then(|r| r.into_inner().status)
            .map(|s| s.state)
        }
    };
    assert_eq!(
        state(&mut cri, good.clone()).await,
        Some(ContainerState::ContainerRunning as i32)
    );
    // Its process is `germline run` on the release verified for this container, and its
    // stderr (the container log) says what of the pod spec germline did not apply.
    let needle = format!("-{good}");
    let t = Instant::now();
    let mut log = String::new();
    while t.elapsed() < Duration::from_secs(30) {
        log = std::fs::read_to_string(c.dir.join("logs/time.log")).unwrap_or_default();
        if log.contains("ignored environment HTTP_PROXY") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        log.contains("ignored environment HTTP_PROXY"),
        "container log: {log}\n{}",
        c.log()
    );
    let runs: Vec<i32> = procs_naming(&needle);
    assert!(
        !runs.is_empty(),
        "no germline run for {good}: {log}\n{}",
        c.log()
    );
    // The container joined the pod's network namespace (the one the CNI plugin was given),
    // and so did the broker `germline run` started: what it delivers leaves from the pod.
    let pod_netns = std::fs::read_to_string(c.dir.join("pod-netns")).expect("CNI ADD ran");
    let pod_ns = netns_of(Path::new(pod_netns.trim()));
    assert!(pod_ns.is_some(), "{pod_netns}");
    assert_ne!(pod_ns, netns_of(Path::new("/proc/self/ns/net")));
    let arg1 = |p: &i32, want: &[u8]| {
        std::fs::read(format!("/proc/{p}/cmdline"))
            .map(|c| c.split(|b| *b == 0).nth(1) == Some(want))
            .unwrap_or(false)
    };
    let run = *runs
        .iter()
        .find(|p| arg1(p, b"run"))
        .expect("the germline run process");
    assert_eq!(
        netns_of(Path::new(&format!("/proc/{run}/ns/net"))),
        pod_ns,
        "germline run is not in the pod's network namespace"
    );
    // It starts its broker once it has verified the release again.
    let t = Instant::now();
    let broker_pid = loop {
        if let Some(p) = children(run).into_iter().find(|p| arg1(p, b"broker")) {
            break p;
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "no broker sidecar under germline run {run}\n{}",
            c.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        netns_of(Path::new(&format!("/proc/{broker_pid}/ns/net"))),
        pod_ns,
        "the broker is not in the pod's network namespace"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        state(&mut cri, good.clone()).await,
        Some(ContainerState::ContainerRunning as i32),
        "{log}"
    );

    // Stop and remove everything, as the kubelet does when the pod goes.
    cri.stop_container(StopContainerRequest {
        container_id: good.clone(),
        timeout: 10,
    })
    .await
    .expect("StopContainer");
    for id in [&good, &bad] {
        cri.remove_container(RemoveContainerRequest {
            container_id: id.clone(),
        })
        .await
        .expect("RemoveContainer");
    }
    cri.stop_pod_sandbox(StopPodSandboxRequest {
        pod_sandbox_id: sb.clone(),
    })
    .await
    .expect("StopPodSandbox");
    cri.remove_pod_sandbox(RemovePodSandboxRequest {
        pod_sandbox_id: sb.clone(),
    })
    .await
    .expect("RemovePodSandbox");
    for id in [&good, &bad, &sb] {
        let st = Path::new("/run/containerd/germline/k8s.io").join(id);
        assert!(!st.exists(), "germline-runtime state {} left", st.display());
        assert!(procs_naming(id).is_empty(), "a process of {id} is left");
    }
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    for id in [&good, &sb] {
        assert!(!mounts.contains(id.as_str()), "a mount of {id} is left");
    }
    let _ = std::fs::remove_dir_all(&broker);
}

impl Containerd {
    fn log(&self) -> String {
        let l = std::fs::read_to_string(self.dir.join("containerd.log")).unwrap_or_default();
        let lines: Vec<&str> = l.lines().rev().take(30).collect();
        lines.into_iter().rev().collect::<Vec<_>>().join("\n")
    }
}
