//! The Linux calls the runtime makes: bind mounts, fifos, signals, process identity and the
//! cgroups of a container. Each `unsafe` wraps one libc call.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn cstr(p: &Path) -> Result<CString, String> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| format!("{}: NUL in path", p.display()))
}

fn last(what: &str, p: &Path) -> String {
    format!(
        "{what} {}: {}",
        p.display(),
        std::io::Error::last_os_error()
    )
}

/// Binds `src` read-only at `dst` (an existing directory).
pub fn bind_readonly(src: &Path, dst: &Path) -> Result<(), String> {
    let s = cstr(src)?;
    let d = cstr(dst)?;
    // SAFETY: s and d are valid NUL-terminated strings for the duration of the call; the
    // filesystem type and data may be null for a bind mount.
    let r = unsafe {
        libc::mount(
            s.as_ptr(),
            d.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        )
    };
    if r != 0 {
        return Err(last("bind mount", dst));
    }
    // SAFETY: as above; a remount changes only the flags of the bind mount just made.
    let r = unsafe {
        libc::mount(
            std::ptr::null(),
            d.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV,
            std::ptr::null(),
        )
    };
    if r != 0 {
        let e = last("read-only remount", dst);
        let _ = unmount(dst);
        return Err(e);
    }
    Ok(())
}

/// Whether `p` is a mount point (its device differs from its parent's, or it is a bind of
/// the same filesystem: then /proc/self/mountinfo lists it).
pub fn is_mount_point(p: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let want = p.as_os_str().as_bytes();
    text.lines().any(|l| {
        l.split(' ')
            .nth(4)
            .map(|m| unescape_mountinfo(m) == want)
            .unwrap_or(false)
    })
}

fn unescape_mountinfo(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 4], 8) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

/// Detaches the mount at `p`.
pub fn unmount(p: &Path) -> Result<(), String> {
    let c = cstr(p)?;
    // SAFETY: c is a valid NUL-terminated path for the duration of the call.
    if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } != 0 {
        return Err(last("unmount", p));
    }
    Ok(())
}

/// Makes a fifo at `p`, mode 0600.
pub fn mkfifo(p: &Path) -> Result<(), String> {
    let c = cstr(p)?;
    // SAFETY: c is a valid NUL-terminated path for the duration of the call.
    if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
        return Err(last("mkfifo", p));
    }
    Ok(())
}

/// Sends `sig` to `pid`.
pub fn kill(pid: i32, sig: i32) -> Result<(), String> {
    if pid <= 0 {
        return Err(format!("refusing to signal pid {pid}"));
    }
    // SAFETY: kill(2) with a positive pid affects only that process.
    if unsafe { libc::kill(pid, sig) } != 0 {
        return Err(format!(
            "signal {sig} to pid {pid}: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// The start time of `pid` (field 22 of /proc/PID/stat, clock ticks since boot): with the pid
/// it names one process, never a later one that reuses the number. `None` once it is gone
/// (a zombie counts as gone: it runs nothing).
pub fn start_time(pid: i32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain spaces: fields follow the last ')'.
    let rest = &text[text.rfind(')')? + 2..];
    let mut f = rest.split(' ');
    let state = f.next()?;
    if state == "Z" || state == "X" {
        return None;
    }
    f.nth(18)?.parse().ok()
}

/// Waits up to `limit` for `pid` (started at `start`) to be gone.
pub fn wait_gone(pid: i32, start: u64, limit: Duration) -> bool {
    let t = Instant::now();
    while start_time(pid) == Some(start) {
        if t.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// The directories of cgroup `rel` in every mounted hierarchy (v1: one per controller
/// mount; v2: one).
pub fn cgroup_dirs(rel: &str) -> Vec<PathBuf> {
    let rel = rel.trim_start_matches('/');
    let root = Path::new(CGROUP_ROOT);
    if root.join("cgroup.controllers").exists() {
        return vec![root.join(rel)];
    }
    let mut v: Vec<PathBuf> = std::fs::read_dir(root)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
                // The hybrid layout's cgroup2 mount: engines (and crun) do not use it here.
                .filter(|e| e.file_name() != "unified")
                .map(|e| e.path().join(rel))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// A cgroupfs-style `linux.cgroupsPath` we may create: absolute or relative, plain
/// components only (the systemd `slice:prefix:name` form is not one).
pub fn plain_cgroup_path(p: &str) -> bool {
    !p.contains(':')
        && !p.trim_matches('/').is_empty()
        && p.split('/')
            .all(|c| c != ".." && c != "." && !c.contains('\0'))
}

/// Creates cgroup `rel` in every hierarchy and moves `pid` into it (best effort per
/// hierarchy: a controller that refuses is skipped). Returns the directories made.
pub fn join_cgroup(rel: &str, pid: i32) -> Vec<PathBuf> {
    let mut made = Vec::new();
    for d in cgroup_dirs(rel) {
        if std::fs::create_dir_all(&d).is_err() {
            continue;
        }
        if std::fs::write(d.join("cgroup.procs"), pid.to_string()).is_ok() {
            made.push(d);
        } else {
            let _ = std::fs::remove_dir(&d);
        }
    }
    made
}

fn procs_of(dir: &Path) -> Vec<i32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Every directory at and below `dir`, deepest first.
fn subtree(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        if let Ok(rd) = std::fs::read_dir(&d) {
            for e in rd.flatten() {
                if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                    stack.push(e.path());
                }
            }
        }
        out.push(d);
    }
    out.reverse();
    out
}

/// Kills every process in the cgroup subtrees `dirs` (thawing frozen ones first, since a
/// frozen task does not die) and removes the cgroups. Returns what could not be removed.
pub fn destroy_cgroups(dirs: &[PathBuf]) -> Vec<PathBuf> {
    for d in dirs {
        for s in subtree(d) {
            let st = s.join("freezer.state");
            if st.exists() {
                let _ = std::fs::write(&st, "THAWED");
            }
            if s.join("cgroup.freeze").exists() {
                let _ = std::fs::write(s.join("cgroup.freeze"), "0");
            }
        }
    }
    let t = Instant::now();
    let mut left = Vec::new();
    loop {
        left.clear();
        for d in dirs {
            for s in subtree(d) {
                for pid in procs_of(&s) {
                    let _ = kill(pid, libc::SIGKILL);
                }
                if s.exists() && std::fs::remove_dir(&s).is_err() {
                    left.push(s);
                }
            }
        }
        if left.is_empty() || t.elapsed() > Duration::from_secs(5) {
            return left;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The cgroups `germline run` with pid `pid` made for its germlines (`germline/run-PID-*` in
/// every hierarchy): what is left if it was killed before it could stop them.
pub fn germline_cgroups_of(pid: i32) -> Vec<PathBuf> {
    let prefix = format!("run-{pid}-");
    cgroup_dirs("germline")
        .into_iter()
        .flat_map(|d| {
            std::fs::read_dir(&d)
                .map(|rd| {
                    rd.flatten()
                        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                        .map(|e| e.path())
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        })
        .collect()
}

/// Freezes (`true`) or thaws the cgroup directories that have a freezer.
pub fn freeze(dirs: &[PathBuf], frozen: bool) -> bool {
    let mut any = false;
    for d in dirs {
        if d.join("freezer.state").exists() {
            any |= std::fs::write(
                d.join("freezer.state"),
                if frozen { "FROZEN" } else { "THAWED" },
            )
            .is_ok();
        } else if d.join("cgroup.freeze").exists() {
            any |= std::fs::write(d.join("cgroup.freeze"), if frozen { "1" } else { "0" }).is_ok();
        }
    }
    any
}

/// If `rootfs` is an overlay mount, its lower directories (top first), resolved: the image's
/// layers as the engine unpacked them, without what the engine wrote into the upper layer
/// (podman adds `/etc/mtab`, mount points and the like).
pub fn overlay_lowerdirs(rootfs: &Path) -> Option<Vec<PathBuf>> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let want = rootfs.as_os_str().as_bytes();
    // The last matching line is the mount on top.
    let line = text.lines().rev().find(|l| {
        l.split(' ')
            .nth(4)
            .map(|m| unescape_mountinfo(m) == want)
            .unwrap_or(false)
    })?;
    let (_, after) = line.split_once(" - ")?;
    let mut f = after.split(' ');
    if f.next()? != "overlay" {
        return None;
    }
    let opts = f.nth(1)?;
    let lower = opts.split(',').find_map(|o| o.strip_prefix("lowerdir="))?;
    Some(
        lower
            .split(':')
            .map(|d| {
                let p = PathBuf::from(std::ffi::OsStr::from_bytes(&unescape_mountinfo(d)));
                std::fs::canonicalize(&p).unwrap_or(p)
            })
            .collect(),
    )
}

/// `NS_GET_NSTYPE` (linux/nsfs.h): the `CLONE_NEW*` type of a namespace file.
const NS_GET_NSTYPE: libc::c_ulong = 0xb703;

/// Opens `path` and checks that it is a network namespace.
fn open_netns(path: &Path) -> Result<std::fs::File, String> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    // The path comes from config.json: never open a device or wait on a fifo. A namespace
    // file (nsfs) is a regular file to stat.
    let is_file = std::fs::metadata(path)
        .map(|m| m.is_file())
        .unwrap_or(false);
    if !is_file {
        return Err(format!(
            "network namespace {}: not a network namespace file (config.json \
             linux.namespaces[network].path)",
            path.display()
        ));
    }
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| format!("network namespace {}: {e}", path.display()))?;
    // SAFETY: NS_GET_NSTYPE takes no argument and returns the type or -1; `f` is open.
    let t = unsafe { libc::ioctl(f.as_raw_fd(), NS_GET_NSTYPE as _) };
    if t != libc::CLONE_NEWNET {
        return Err(format!(
            "network namespace {}: not a network namespace file (config.json \
             linux.namespaces[network].path)",
            path.display()
        ));
    }
    Ok(f)
}

/// Checks, at `create`, that `path` names a network namespace the process can join.
pub fn check_netns(path: &Path) -> Result<(), String> {
    open_netns(path).map(drop)
}

/// Moves the calling (single-threaded) process into the network namespace at `path`.
pub fn enter_netns(path: &Path) -> Result<(), String> {
    use std::os::fd::AsRawFd;
    let f = open_netns(path)?;
    // SAFETY: setns(2) on a descriptor we hold open; the result is checked.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(format!(
            "cannot join the network namespace {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// Moves the calling (single-threaded) process into a fresh network namespace with `lo` up.
pub fn new_netns() -> Result<(), String> {
    // SAFETY: unshare(2) with a constant flag; the result is checked.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        return Err(format!(
            "cannot make a network namespace: {}",
            std::io::Error::last_os_error()
        ));
    }
    germline_broker::netns::loopback_up()
        .map_err(|e| format!("cannot bring lo up in the new network namespace: {e}"))
}

/// The first IPv4 address of an interface that is up and not loopback, in the calling
/// process's network namespace (a pod's address, which its spec cannot know in advance).
pub fn first_address() -> Result<std::net::Ipv4Addr, String> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs(3) writes a list head we free below with freeifaddrs; checked.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(format!(
            "cannot list the network namespace's addresses: {}",
            std::io::Error::last_os_error()
        ));
    }
    let mut found = None;
    let mut p = head;
    while !p.is_null() && found.is_none() {
        // SAFETY: `p` is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*p };
        let up = ifa.ifa_flags & libc::IFF_UP as libc::c_uint != 0;
        let lo = ifa.ifa_flags & libc::IFF_LOOPBACK as libc::c_uint != 0;
        let inet = !ifa.ifa_addr.is_null()
            // SAFETY: a non-null ifa_addr points to a sockaddr whose family says its type.
            && unsafe { (*ifa.ifa_addr).sa_family } == libc::AF_INET as libc::sa_family_t;
        if up && !lo && inet {
            // SAFETY: the family is AF_INET, so the address is a sockaddr_in.
            let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
            found = Some(std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)));
        }
        p = ifa.ifa_next;
    }
    // SAFETY: `head` came from getifaddrs and is freed once; no reference to it is kept.
    unsafe { libc::freeifaddrs(head) };
    found.ok_or_else(|| {
        "the container's network namespace has no IPv4 address besides loopback for \
         dev.germline.mcp/listen 0.0.0.0:PORT (name an address, or give the pod a network)"
            .to_string()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_network_namespace_file_is_accepted() {
        check_netns(Path::new("/proc/self/ns/net")).expect("our own netns");
        for p in [
            "/proc/self/ns/mnt",
            "/etc/hostname",
            "/dev/null",
            "/nonexistent",
        ] {
            let e = check_netns(Path::new(p)).expect_err(p);
            assert!(e.contains(p), "{e}");
        }
    }

    #[test]
    fn cgroup_paths_with_dots_or_systemd_form_are_not_plain() {
        assert!(plain_cgroup_path("/libpod_parent/libpod-abc"));
        assert!(plain_cgroup_path("k8s/pod1/c1"));
        assert!(!plain_cgroup_path("/libpod_parent/../../etc"));
        assert!(!plain_cgroup_path("machine.slice:libpod:abc"));
        assert!(!plain_cgroup_path("/"));
    }

    #[test]
    fn own_start_time_is_stable_and_a_dead_pid_has_none() {
        let me = std::process::id() as i32;
        let a = start_time(me).expect("own stat");
        assert_eq!(start_time(me), Some(a));
        assert_eq!(start_time(i32::MAX), None);
    }

    #[test]
    fn mountinfo_octal_escapes_are_decoded() {
        assert_eq!(unescape_mountinfo("/a\\040b"), b"/a b".to_vec());
        assert_eq!(unescape_mountinfo("/plain"), b"/plain".to_vec());
    }
}
