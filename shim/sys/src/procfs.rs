//! Reading a process from outside through the host's /proc. Nothing the germline or a copy
//! says about itself counts; these readings are what the checks judge.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;

use crate::error::{Error, Result};

fn read(path: &str) -> Result<String> {
    fs::read_to_string(path).map_err(|e| Error::sys(format!("read {path}"), e))
}

/// `/proc/PID/<file>`, read and given to `parse`.
fn read_parsed<T>(pid: i32, file: &str, parse: fn(&str) -> T) -> Result<T> {
    Ok(parse(&read(&format!("/proc/{pid}/{file}"))?))
}

/// A device number written `major:minor`, each in `radix`.
fn major_minor_in(s: &str, radix: u32) -> Option<(u32, u32)> {
    let (a, b) = s.split_once(':')?;
    Some((
        u32::from_str_radix(a, radix).ok()?,
        u32::from_str_radix(b, radix).ok()?,
    ))
}

/// `/proc/PID/status` as key -> value.
pub fn status(pid: i32) -> Result<BTreeMap<String, String>> {
    read_parsed(pid, "status", parse_status)
}

/// The text of a `/proc/PID/status` as key -> value (both trimmed); a line without `:` is
/// skipped.
pub fn parse_status(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// The namespace inode numbers of a process.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Namespaces {
    pub pid: u64,
    pub net: u64,
    pub ipc: u64,
    pub uts: u64,
    pub mnt: u64,
    pub user: u64,
}

fn ns_inode(pid: i32, kind: &str) -> Result<u64> {
    let p = format!("/proc/{pid}/ns/{kind}");
    let m = fs::metadata(&p).map_err(|e| Error::sys(format!("stat {p}"), e))?;
    Ok(m.ino())
}

impl Namespaces {
    /// Reads the namespaces of `pid`.
    pub fn of(pid: i32) -> Result<Namespaces> {
        Ok(Namespaces {
            pid: ns_inode(pid, "pid")?,
            net: ns_inode(pid, "net")?,
            ipc: ns_inode(pid, "ipc")?,
            uts: ns_inode(pid, "uts")?,
            mnt: ns_inode(pid, "mnt")?,
            user: ns_inode(pid, "user")?,
        })
    }

    /// Names of the namespaces (pid, net, ipc, uts, mnt) that `self` shares with `other`.
    pub fn shared_with(&self, other: &Namespaces) -> Vec<&'static str> {
        let mut v = Vec::new();
        if self.pid == other.pid {
            v.push("pid");
        }
        if self.net == other.net {
            v.push("net");
        }
        if self.ipc == other.ipc {
            v.push("ipc");
        }
        if self.uts == other.uts {
            v.push("uts");
        }
        if self.mnt == other.mnt {
            v.push("mnt");
        }
        v
    }
}

/// One open descriptor of a process, judged by where its file lives.
#[derive(Debug, Clone)]
pub struct Fd {
    pub num: i32,
    pub target: String,
    pub mnt_id: Option<u64>,
    pub dev: u64,
    pub ino: u64,
    pub rdev: u64,
    pub mode: u32,
}

/// Every open descriptor of `pid`.
pub fn fds(pid: i32) -> Result<Vec<Fd>> {
    let dir = format!("/proc/{pid}/fd");
    let entries = fs::read_dir(&dir).map_err(|e| Error::sys(format!("list {dir}"), e))?;
    let mut out = Vec::new();
    for e in entries.flatten() {
        let Some(num) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let path = format!("{dir}/{num}");
        let target = fs::read_link(&path)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        // stat() follows the magic link to the open file itself.
        let Ok(m) = fs::metadata(&path) else { continue };
        let mnt_id = fs::read_to_string(format!("/proc/{pid}/fdinfo/{num}"))
            .ok()
            .and_then(|s| {
                s.lines().find_map(|l| {
                    l.strip_prefix("mnt_id:")
                        .and_then(|v| v.trim().parse().ok())
                })
            });
        out.push(Fd {
            num,
            target,
            mnt_id,
            dev: m.dev(),
            ino: m.ino(),
            rdev: m.rdev(),
            mode: m.mode(),
        });
    }
    out.sort_by_key(|f| f.num);
    Ok(out)
}

/// One line of `/proc/PID/mountinfo`.
#[derive(Debug, Clone)]
pub struct Mount {
    pub id: u64,
    pub dev: (u32, u32),
    pub mount_point: String,
    pub fstype: String,
}

/// The mounts of `pid`'s mount namespace as it sees them.
pub fn mountinfo(pid: i32) -> Result<Vec<Mount>> {
    read_parsed(pid, "mountinfo", parse_mountinfo)
}

/// The text of a `/proc/PID/mountinfo`, line by line; a line [`crate::mountinfo::parse`]
/// rejects, or whose id or device is not numeric, is skipped.
pub fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(crate::mountinfo::parse)
        .filter_map(|l| {
            Some(Mount {
                id: l.id.parse().ok()?,
                dev: major_minor_in(l.dev, 10)?,
                mount_point: l.mount_point.to_string(),
                fstype: l.fstype.to_string(),
            })
        })
        .collect()
}

/// One line of `/proc/PID/maps`.
#[derive(Debug, Clone)]
pub struct Mapping {
    pub range: String,
    pub perms: String,
    pub dev: (u32, u32),
    pub ino: u64,
    pub path: String,
}

/// The memory mappings of `pid`.
pub fn maps(pid: i32) -> Result<Vec<Mapping>> {
    read_parsed(pid, "maps", parse_maps)
}

/// The text of a `/proc/PID/maps`, line by line; a line of fewer than five fields is skipped,
/// an unreadable device is (0, 0) and an unreadable inode 0.
pub fn parse_maps(text: &str) -> Vec<Mapping> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let (range, perms, _off, dev, ino) =
                (it.next()?, it.next()?, it.next()?, it.next()?, it.next()?);
            Some(Mapping {
                range: range.to_string(),
                perms: perms.to_string(),
                dev: major_minor_in(dev, 16).unwrap_or((0, 0)),
                ino: ino.parse().unwrap_or(0),
                path: it.collect::<Vec<_>>().join(" "),
            })
        })
        .collect()
}

/// `/proc/PID/cgroup` lines as (controllers, path).
pub fn cgroups(pid: i32) -> Result<Vec<(String, String)>> {
    read_parsed(pid, "cgroup", parse_cgroups)
}

/// The text of a `/proc/PID/cgroup` as (controllers, path) (`hierarchy-id:controllers:path`;
/// the unified hierarchy has no controller); a line of fewer than three fields is skipped.
pub fn parse_cgroups(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.splitn(3, ':');
            let _id = it.next()?;
            Some((it.next()?.to_string(), it.next()?.to_string()))
        })
        .collect()
}
/// Host pids of the children of `pid` (all its threads).
pub fn children(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    if let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            if let Ok(s) = fs::read_to_string(t.path().join("children")) {
                out.extend(s.split_whitespace().filter_map(|x| x.parse::<i32>().ok()));
            }
        }
    }
    out
}

/// Whether `pid` still exists and is not a zombie.
pub fn alive(pid: i32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s
            .rsplit_once(") ")
            .map(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X'))
            .unwrap_or(false),
        Err(_) => false,
    }
}

/// The start time of `pid` (field 22 of /proc/PID/stat, clock ticks since boot): with the pid
/// it names one process, never a later one that reuses the number. `None` once it is gone
/// (a zombie counts as gone: it runs nothing).
pub fn start_time(pid: i32) -> Option<u64> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may contain spaces: fields follow the last ')'.
    let rest = &text[text.rfind(')')? + 2..];
    let mut f = rest.split(' ');
    let state = f.next()?;
    if state == "Z" || state == "X" {
        return None;
    }
    f.nth(18)?.parse().ok()
}

/// Private memory in kB from the text of /proc/PID/smaps_rollup: Private_Clean + Private_Dirty.
pub fn parse_private_kb(smaps_rollup: &str) -> u64 {
    smaps_rollup
        .lines()
        .filter(|l| l.starts_with("Private_Clean:") || l.starts_with("Private_Dirty:"))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum()
}

/// Private memory in bytes of every process of `pids` together (a copy and its helpers);
/// `None` once one of them is gone.
pub fn private_memory(pids: impl IntoIterator<Item = i32>) -> Option<u64> {
    let mut kb = 0;
    for pid in pids {
        kb += parse_private_kb(&fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?);
    }
    Some(kb * 1024)
}

/// `Anonymous` of a `smaps_rollup`, kB: the pages of the process's own memory (heap, stacks,
/// written copies of its files' data), not backed by any file. Unlike [`parse_private_kb`] it
/// leaves out file pages mapped by this process alone *so far*: the first process of a rootfs
/// counts its binary's page-cache pages as `Private_Clean`, or as `Private_Dirty` while the
/// file is freshly written and not yet written back, and a second process mapping the same
/// files makes them shared; they are not what one more such process costs (measured: a
/// just-installed 3.6 MB static binary, `Private_Dirty` 3112 kB alone and 364 kB once a second
/// one ran; `Anonymous` 364 kB throughout).
pub fn parse_anonymous_kb(smaps_rollup: &str) -> u64 {
    smaps_rollup
        .lines()
        .filter(|l| l.starts_with("Anonymous:"))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum()
}

/// What one more process like these costs in memory (bytes): `Anonymous` of every process of
/// `pids` together ([`parse_anonymous_kb`]); `None` once one of them is gone.
pub fn anonymous_memory(pids: impl IntoIterator<Item = i32>) -> Option<u64> {
    let mut kb = 0;
    for pid in pids {
        let text = fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
        kb += parse_anonymous_kb(&text);
    }
    Some(kb * 1024)
}

/// Splits a device number into (major, minor).
pub fn major_minor(dev: u64) -> (u32, u32) {
    (libc::major(dev), libc::minor(dev))
}

#[cfg(test)]
mod tests {
    //! The parsers on `/proc` files recorded from real germlines and copies (germline-sandbox's
    //! `tests/fixtures/proc/`, the fixtures of its check rules).

    use super::*;

    #[test]
    fn private_kb_adds_clean_and_dirty_only() {
        let text = "55a0-7ffe ---p 00000000 00:00 0 [rollup]\nRss: 900 kB\nPrivate_Clean: 120 kB\nPrivate_Dirty: 3 kB\nShared_Clean: 700 kB\nAnonymous: 2 kB\n";
        assert_eq!(parse_private_kb(text), 123);
        assert_eq!(parse_anonymous_kb(text), 2);
    }

    fn fixture(name: &str, file: &str) -> String {
        let p = format!(
            "{}/../sandbox/tests/fixtures/proc/{name}/{file}",
            env!("CARGO_MANIFEST_DIR")
        );
        fs::read_to_string(&p).unwrap_or_else(|e| panic!("fixture {p}: {e}"))
    }

    #[test]
    fn a_recorded_status_is_every_line_as_trimmed_key_and_value() {
        let st = parse_status(&fixture("plain", "status"));
        assert_eq!(st.len(), 59, "one entry a line");
        assert_eq!(st["Threads"], "1");
        assert_eq!(st["NSpid"], "17184\t1", "inner tabs stay");
        assert_eq!(st["Seccomp"], "2");
        assert_eq!(st["Groups"], "", "an empty value");
        assert_eq!(st["VmPeak"], "80776 kB");
        assert!(parse_status("no colon here\n").is_empty());
    }

    #[test]
    fn recorded_maps_give_range_perms_hex_device_inode_and_path() {
        let maps = parse_maps(&fixture("plain", "maps"));
        assert_eq!(maps.len(), 183, "one mapping a line");
        let m = &maps[0];
        assert_eq!(
            (&m.range[..], &m.perms[..], m.dev, m.ino, &m.path[..]),
            (
                "00400000-0041f000",
                "r--p",
                (254, 0),
                950288,
                "/usr/bin/python3.11"
            )
        );
        let anon = maps
            .iter()
            .find(|m| m.range == "00a85000-00aca000")
            .expect("heap");
        assert_eq!((anon.dev, anon.ino, &anon.path[..]), ((0, 0), 0, ""));
        let shm = parse_maps(&fixture("o2_shm", "maps"));
        let shared = shm.iter().find(|m| m.perms == "rw-s").expect("shared");
        assert_eq!((shared.dev, shared.ino), ((0, 1), 7539));
        assert_eq!(shared.path, "/dev/zero (deleted)", "a path with a space");
        assert!(
            parse_maps("00400000-0041f000 r--p 0\n").is_empty(),
            "too few fields"
        );
    }

    #[test]
    fn a_recorded_mountinfo_gives_id_device_mount_point_and_type() {
        let mounts = parse_mountinfo(&fixture("plain", "mountinfo"));
        assert_eq!(mounts.len(), 7);
        let m = |i: usize| {
            let m = &mounts[i];
            (m.id, m.dev, &m.mount_point[..], &m.fstype[..])
        };
        assert_eq!(m(0), (70, (254, 0), "/", "ext4"));
        assert_eq!(m(2), (72, (0, 6), "/dev/null", "devtmpfs"));
        let bad = "x 47 254:0 / / ro - ext4 /dev/vda rw\n70 47 254 / / ro - ext4 /dev/vda rw\n";
        assert!(
            parse_mountinfo(bad).is_empty(),
            "a non-numeric id or device"
        );
    }

    #[test]
    fn a_recorded_cgroup_file_gives_controllers_and_path() {
        let cg = parse_cgroups(&fixture("copy_sole", "cgroup"));
        assert_eq!(cg.len(), 10);
        let own = "/germline/t9177-0-copy_sole/copy-0".to_string();
        assert_eq!(cg[1], ("pids".to_string(), own));
        assert_eq!(
            cg[9],
            (String::new(), "/".to_string()),
            "the unified hierarchy"
        );
        assert_eq!(
            parse_cgroups("1:cpu:/a:b\nbroken\n"),
            [("cpu".to_string(), "/a:b".to_string())]
        );
    }

    #[test]
    fn own_start_time_is_stable_and_a_dead_pid_has_none() {
        let me = std::process::id() as i32;
        let a = start_time(me).expect("own stat");
        assert_eq!(start_time(me), Some(a));
        assert_eq!(start_time(i32::MAX), None);
    }
}
