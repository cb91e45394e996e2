//! Shared helpers of the sandbox integration tests (they run as root, for real).
#![allow(dead_code)]

pub mod node;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use germline_sandbox::spec::DEFAULT_PYTHON_ROOTFS;
use germline_sandbox::{LaunchSpec, Options};

/// Whether the test can run: root and the setup script's rootfs. With
/// GERMLINE_REQUIRE_ROOT_TESTS=1 a test that cannot run fails instead of skipping.
pub fn can_run() -> bool {
    // SAFETY: geteuid has no arguments and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let rootfs = PathBuf::from(DEFAULT_PYTHON_ROOTFS)
        .join(".germline-rootfs-v2")
        .exists();
    if root && rootfs {
        return true;
    }
    let why = if root {
        "the rootfs of scripts/setup.d/40-sandbox.sh is missing"
    } else {
        "not root"
    };
    if std::env::var("GERMLINE_REQUIRE_ROOT_TESTS").as_deref() == Ok("1") {
        panic!("this test needs root and the sandbox rootfs: {why}");
    }
    eprintln!("skipped: {why}");
    false
}

static N: AtomicU32 = AtomicU32::new(0);

/// A unique germline id for this test process.
pub fn id(name: &str) -> String {
    format!(
        "t{}-{}-{name}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

pub fn opts(name: &str) -> Options {
    Options::new(&id(name))
}

/// The mcp-server-time release.
pub fn time_spec() -> LaunchSpec {
    LaunchSpec::mcp_server_time(PathBuf::from(DEFAULT_PYTHON_ROOTFS))
}

/// A test release: `source` is written to /app/releases/<name>.py in the shared rootfs (the
/// rootfs is read-only inside germlines; on the host the tests own this folder).
pub fn release(name: &str, source: &str) -> LaunchSpec {
    let dir = PathBuf::from(DEFAULT_PYTHON_ROOTFS).join("app/releases");
    std::fs::create_dir_all(&dir).expect("create the releases folder");
    let path = dir.join(format!("{name}.py"));
    if std::fs::read_to_string(&path).ok().as_deref() != Some(source) {
        let tmp = dir.join(format!(
            ".{name}.{}.{}.tmp",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::write(&tmp, source).expect("write the release");
        std::fs::rename(&tmp, &path).expect("install the release");
    }
    let mut spec = time_spec();
    spec.module_path = vec!["/app/releases".into(), "/app/site".into()];
    spec.entry = vec![format!("{name}:main")];
    spec
}

/// The text of the first content block of a tools/call result.
pub fn text(result: &serde_json::Value) -> String {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Every test release, installed together (they import testlib).
pub const RELEASES: [(&str, &str); 14] = [
    ("testlib", include_str!("../releases/testlib.py")),
    ("plain", include_str!("../releases/plain.py")),
    ("lowlevel", include_str!("../releases/lowlevel.py")),
    ("o1_pipe", include_str!("../releases/o1_pipe.py")),
    ("o2_shm", include_str!("../releases/o2_shm.py")),
    ("g1_thread", include_str!("../releases/g1_thread.py")),
    ("g1_process", include_str!("../releases/g1_process.py")),
    ("g2_memfd", include_str!("../releases/g2_memfd.py")),
    ("g2_rodev", include_str!("../releases/g2_rodev.py")),
    ("init_probe", include_str!("../releases/init_probe.py")),
    ("hijack", include_str!("../releases/hijack.py")),
    ("g4_sigchld", include_str!("../releases/g4_sigchld.py")),
    ("g4_flip", include_str!("../releases/g4_flip.py")),
    ("slow_warm", include_str!("../releases/slow_warm.py")),
];

/// The spec of test release `name` (all test releases are installed first).
pub fn test_release(name: &str) -> LaunchSpec {
    for (n, src) in RELEASES {
        release(n, src);
    }
    let mut spec = release(
        name,
        RELEASES
            .iter()
            .find(|r| r.0 == name)
            .map(|r| r.1)
            .expect("known release"),
    );
    spec.entry = vec![format!("{name}:main")];
    spec
}

/// Calls `tool` in a fresh copy and returns the text it answered.
pub fn call_text(
    g: &mut germline_sandbox::Germline,
    tool: &str,
    args: serde_json::Value,
) -> Result<String, germline_sandbox::Error> {
    g.call(&[], tool, args).map(|r| text(&r))
}

/// Parses a tool's JSON text answer.
pub fn json_of(s: &str) -> serde_json::Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("tool answered non-JSON {s:?}: {e}"))
}

/// Waits (up to 10 s) until every pool copy answered its handshake, so the next call's first
/// copy comes from the pool (only a ready one is handed out first; docs/sandbox.md, "Pool
/// states"). Panics if one does not get there.
pub fn wait_pool_ready(g: &mut germline_sandbox::Germline) {
    use germline_sandbox::PoolState;
    let t = std::time::Instant::now();
    loop {
        let states = g.pool_states();
        if states.iter().all(|s| *s == PoolState::Ready) {
            return;
        }
        assert!(
            t.elapsed() < std::time::Duration::from_secs(10),
            "the pool copies did not get ready: {states:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}
