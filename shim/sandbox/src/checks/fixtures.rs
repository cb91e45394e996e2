//! The `/proc` files recorded from real germlines of the test releases
//! (`tests/fixtures/proc/`, written by `record_proc_fixtures` in `tests/germline_checks.rs`),
//! read through the parsers production reads `/proc` with (`germline_sys::procfs`,
//! `germline_sys::cgroup::parse_ids`). Test code only.

use super::snapshot::{CopySnapshot, GermlineSnapshot};
use super::{CopyExpect, GermlineFacts, Role};
use crate::cgroup::{parse_ids, Version};
use crate::procfs::{parse_cgroups, parse_maps, parse_mountinfo, parse_status, Fd, Namespaces};
use crate::seccomp::Program;

/// One recorded germline: what the shim knows of it and what it read.
pub struct Fixture {
    pub facts: GermlineFacts,
    pub snap: GermlineSnapshot,
}

/// The recorded file `file` of the germline `name`.
pub fn file(name: &str, file: &str) -> String {
    let p = format!(
        "{}/tests/fixtures/proc/{name}/{file}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("fixture {p}: {e}"))
}

/// The recorder's `fds` file: one descriptor a line, `num mode(octal) dev ino rdev mnt_id|-
/// target`, what `procfs::fds` read by stat(2) and `fdinfo` (no /proc file has that text).
pub fn fds(text: &str) -> Vec<Fd> {
    text.lines()
        .map(|l| {
            let f: Vec<&str> = l.splitn(7, ' ').collect();
            Fd {
                num: f[0].parse().expect("num"),
                mode: u32::from_str_radix(f[1], 8).expect("mode"),
                dev: f[2].parse().expect("dev"),
                ino: f[3].parse().expect("ino"),
                rdev: f[4].parse().expect("rdev"),
                mnt_id: f[5].parse().ok(),
                target: f[6].to_string(),
            }
        })
        .collect()
}

/// The numeric field `key` (with its trailing space) of a recorded `shim` file, if there.
fn shim_field(shim: &str, key: &str) -> Option<u64> {
    shim.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().parse().ok())
}

/// What the shim knows of the recorded germline `name`.
fn facts(name: &str) -> GermlineFacts {
    let shim = file(name, "shim");
    let field = |key: &str| shim_field(&shim, key).expect("shim field");
    let pid = i32::try_from(field("pid ")).expect("pid");
    GermlineFacts::from_mounts(
        pid,
        field("ctl_inode "),
        &parse_mountinfo(&file(name, "mountinfo")),
        &[],
    )
    .expect("facts")
}

/// The recorded germline `name`.
pub fn load(name: &str) -> Fixture {
    Fixture {
        facts: facts(name),
        snap: GermlineSnapshot {
            cgroup_procs: parse_ids(&file(name, "cgroup.procs")),
            cgroup_threads: parse_ids(&file(name, "cgroup.threads")),
            status: Ok(parse_status(&file(name, "status"))),
            fds: Ok(fds(&file(name, "fds"))),
            maps: Ok(parse_maps(&file(name, "maps"))),
        },
    }
}

/// One recorded process of a copy of the `plain` release (`record_copy_proc_fixtures`): what
/// the shim expects of it and what it read.
pub struct CopyFixture {
    /// The process's host pid (its recorded status's `Pid`).
    pub pid: i32,
    pub facts: GermlineFacts,
    pub role: Role,
    pub socket_inode: u64,
    pub germline_ns: Namespaces,
    /// The namespaces of other live copies (none when it was recorded).
    pub others: Vec<Namespaces>,
    pub cgroup_rel: String,
    /// The programs the shim expects of a copy with the default options.
    pub filters: Vec<Program>,
    pub snap: CopySnapshot,
}

impl CopyFixture {
    pub fn expect(&self) -> CopyExpect<'_> {
        CopyExpect {
            pid: self.pid,
            role: self.role,
            socket_inode: self.socket_inode,
            germline: &self.facts,
            germline_ns: &self.germline_ns,
            others: &self.others,
            cgroup_rel: &self.cgroup_rel,
            filters: &self.filters,
        }
    }
}

/// Namespaces from `kind inode` lines, each kind after `prefix`.
fn namespaces(text: &str, prefix: &str) -> Namespaces {
    let kind = |k: &str| shim_field(text, &format!("{prefix}{k} ")).expect("namespace");
    Namespaces {
        pid: kind("pid"),
        net: kind("net"),
        ipc: kind("ipc"),
        uts: kind("uts"),
        mnt: kind("mnt"),
        user: kind("user"),
    }
}

/// The recorded `seccomp` file: one program a line, in hex.
fn programs(text: &str) -> Vec<Program> {
    text.lines()
        .map(|l| {
            let bytes: Vec<u8> = (0..l.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&l[i..i + 2], 16).expect("hex"))
                .collect();
            Program::from_bytes(&bytes)
        })
        .collect()
}

/// The recorded copy process `name`: `copy_sole`, `copy_reaper` or `copy_tool`.
pub fn load_copy(name: &str) -> CopyFixture {
    let shim = file(name, "shim");
    let field = |key: &str| shim_field(&shim, key).expect("shim field");
    let role = match shim_field(&shim, "parent ") {
        Some(p) => Role::Tool {
            parent: i32::try_from(p).expect("parent"),
        },
        None if name == "copy_reaper" => Role::Reaper,
        None => Role::Sole,
    };
    let namespaces_now = namespaces(&file(name, "ns"), "");
    let status = parse_status(&file(name, "status"));
    CopyFixture {
        pid: status.get("Pid").and_then(|p| p.parse().ok()).expect("Pid"),
        facts: facts(name),
        role,
        socket_inode: field("socket_inode "),
        germline_ns: namespaces(&shim, "germline_"),
        others: Vec::new(),
        cgroup_rel: shim
            .lines()
            .find_map(|l| l.strip_prefix("cgroup_rel "))
            .expect("cgroup_rel")
            .to_string(),
        filters: vec![Program::germline(), Program::copy()],
        snap: CopySnapshot {
            status: Ok(status),
            fds: Ok(fds(&file(name, "fds"))),
            maps: Ok(parse_maps(&file(name, "maps"))),
            namespaces: Ok(namespaces_now),
            // The tool's reaper is the recorded `copy_reaper`.
            parent_namespaces: matches!(role, Role::Tool { .. })
                .then(|| Ok(namespaces(&file("copy_reaper", "ns"), ""))),
            cgroups: Ok(parse_cgroups(&file(name, "cgroup"))),
            // The recording host has cgroups v1 (hybrid: the unified hierarchy holds no
            // controller).
            cgroup_version: Some(Version::V1),
            seccomp: Ok(programs(&file(name, "seccomp"))),
        },
    }
}
