//! The cgroup v2 code path, run for real on the cgroup2 mount of this hybrid machine
//! (/sys/fs/cgroup/unified): create, move a process in, read its tasks and threads, freeze and
//! thaw (`cgroup.freeze` / `cgroup.events`), kill (`cgroup.kill`), remove. The resource limits
//! cannot run here: the memory, pids and cpu controllers are bound to the v1 hierarchies, so
//! the unified hierarchy offers none of them (docs/sandbox.md, "cgroup v1 and v2").

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use germline_sandbox::cgroup::{Cgroup, Version};

const UNIFIED: &str = "/sys/fs/cgroup/unified";

fn state(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit(')').next().map(|r| r.trim().to_string()))
        .and_then(|r| r.split(' ').next().map(String::from))
        .unwrap_or_default()
}

#[test]
fn the_v2_interface_freezes_kills_and_removes_on_the_unified_mount() {
    if !common::can_run() {
        return;
    }
    let v2 = Path::new(UNIFIED).join("cgroup.controllers").exists()
        || Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    if !v2 {
        assert!(
            std::env::var("GERMLINE_REQUIRE_ROOT_TESTS").as_deref() != Ok("1"),
            "no cgroup2 mount on this machine"
        );
        eprintln!("skipped: no cgroup2 mount");
        return;
    }
    let root = if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        Path::new("/sys/fs/cgroup")
    } else {
        Path::new(UNIFIED)
    };
    let rel = format!("germline-v2test-{}/copy-0", std::process::id());
    let cg = Cgroup::create_v2_at(root, &rel).expect("create");
    assert_eq!(cg.version(), Version::V2);
    let mut child = Command::new("sleep").arg("60").spawn().expect("spawn");
    let pid = child.id();
    let ipid = i32::try_from(pid).expect("pid");
    cg.add(ipid).expect("add");
    assert_eq!(cg.procs().expect("procs"), vec![ipid]);
    assert_eq!(cg.threads().expect("threads"), vec![ipid]);
    let line = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).expect("cgroup");
    assert!(line.contains(&format!("0::/{rel}")), "{line}");

    // Freeze: cgroup.freeze, confirmed by cgroup.events.
    cg.set_frozen(true).expect("freeze");
    assert!(cg.is_frozen());
    cg.set_frozen(false).expect("thaw");
    assert!(!cg.is_frozen());
    assert_ne!(state(pid), "", "still alive after the thaw");

    // The limits need controllers this hierarchy does not have here.
    let available = std::fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_default();
    let limits = cg.set_limits(64 << 20, 16, 50);
    if available.split_whitespace().any(|c| c == "memory") {
        limits.expect("limits");
    } else {
        let e = limits.expect_err("memory.max without the memory controller");
        assert!(e.to_string().contains("memory.max"), "{e}");
        eprintln!("cgroup2 controllers here: {available:?}; limits not testable: {e}");
    }
    assert_eq!(cg.oom_kills(), 0);

    // Kill: cgroup.kill, then the group is empty and removed.
    let t = Instant::now();
    cg.destroy().expect("destroy");
    let _ = child.wait();
    assert!(t.elapsed() < Duration::from_secs(5));
    assert!(!root.join(&rel).exists());
    Cgroup::remove_parent_v2_at(root, &format!("germline-v2test-{}", std::process::id()));
    assert!(!root
        .join(format!("germline-v2test-{}", std::process::id()))
        .exists());
}
