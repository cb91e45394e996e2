//! The half of the checks that reads: one snapshot of the germline (G1-G3: its cgroup's
//! `cgroup.procs` and `cgroup.threads`, `/proc/PID/status`, its descriptors with their
//! `fdinfo`, `/proc/PID/maps`) or of one process of a copy (also its namespaces, its
//! `/proc/PID/cgroup` and its seccomp programs), from outside. Nothing the process says about
//! itself is in it; the rules ([`super::rules`], [`super::copy_rules`]) judge it without any
//! I/O, so they are tested on recorded fixtures.

use std::collections::BTreeMap;

use super::Role;
use crate::cgroup::{self, Cgroup, Version};
use crate::error::Result;
use crate::procfs::{self, Fd, Mapping, Namespaces};
use crate::seccomp::Program;

/// What G1-G3 read of a germline, in the order they read it. A file that could not be read is
/// kept as its error: the rules turn it into a refusal.
#[derive(Debug)]
pub struct GermlineSnapshot {
    /// Host pids in the germline's cgroup (`cgroup.procs`; empty if unreadable).
    pub cgroup_procs: Vec<i32>,
    /// Host tids in the germline's cgroup (`cgroup.threads`; empty if unreadable).
    pub cgroup_threads: Vec<i32>,
    /// `/proc/PID/status` as key -> value.
    pub status: Result<BTreeMap<String, String>>,
    /// Every open descriptor, sorted by number.
    pub fds: Result<Vec<Fd>>,
    /// `/proc/PID/maps`.
    pub maps: Result<Vec<Mapping>>,
}

impl GermlineSnapshot {
    /// Reads the germline `pid` in the cgroup `cgroup`, from outside.
    pub fn read(pid: i32, cgroup: &Cgroup) -> GermlineSnapshot {
        let cgroup_procs = cgroup.procs().unwrap_or_default();
        let cgroup_threads = cgroup.threads().unwrap_or_default();
        if cgroup_procs.is_empty() {
            // G1 judges a gone germline by its empty cgroup alone: nothing more to read.
            return GermlineSnapshot {
                cgroup_procs,
                cgroup_threads,
                status: Err(gone(pid)),
                fds: Err(gone(pid)),
                maps: Err(gone(pid)),
            };
        }
        GermlineSnapshot {
            cgroup_procs,
            cgroup_threads,
            status: procfs::status(pid).map_err(Into::into),
            fds: procfs::fds(pid).map_err(Into::into),
            maps: procfs::maps(pid).map_err(Into::into),
        }
    }
}

/// Stands for a file not read because the germline's cgroup is empty.
fn gone(pid: i32) -> crate::Error {
    crate::Error::GermlineDied(format!("the germline {pid} is gone"))
}

/// What the copy checks read of one process of a copy, in the order they read it. As in
/// [`GermlineSnapshot`], a reading that failed is kept as its error.
#[derive(Debug)]
pub struct CopySnapshot {
    /// `/proc/PID/status` as key -> value.
    pub status: Result<BTreeMap<String, String>>,
    /// Every open descriptor, sorted by number.
    pub fds: Result<Vec<Fd>>,
    /// `/proc/PID/maps`.
    pub maps: Result<Vec<Mapping>>,
    /// The process's namespaces.
    pub namespaces: Result<Namespaces>,
    /// The reaper's namespaces: read for [`Role::Tool`] only, once the tool's own were read.
    pub parent_namespaces: Option<Result<Namespaces>>,
    /// `/proc/PID/cgroup` as (controllers, path).
    pub cgroups: Result<Vec<(String, String)>>,
    /// The host's cgroup layout: read only when `cgroups` has a line of the unified hierarchy
    /// (no controller named), the one line it decides about.
    pub cgroup_version: Option<Version>,
    /// Every seccomp program of the process, oldest first.
    pub seccomp: std::io::Result<Vec<Program>>,
}

impl CopySnapshot {
    /// Reads the process `pid` of a copy, which is its `role`, from outside.
    pub fn read(pid: i32, role: Role) -> CopySnapshot {
        let status = procfs::status(pid).map_err(Into::into);
        let fds = procfs::fds(pid).map_err(Into::into);
        let maps = procfs::maps(pid).map_err(Into::into);
        let namespaces = Namespaces::of(pid).map_err(Into::into);
        let parent_namespaces = match (role, &namespaces) {
            (Role::Tool { parent }, Ok(_)) => Some(Namespaces::of(parent).map_err(Into::into)),
            _ => None,
        };
        let cgroups: Result<Vec<(String, String)>> = procfs::cgroups(pid).map_err(Into::into);
        let unified = cgroups
            .as_ref()
            .is_ok_and(|cg| cg.iter().any(|(ctrl, _)| ctrl.is_empty()));
        CopySnapshot {
            status,
            fds,
            maps,
            namespaces,
            parent_namespaces,
            cgroups,
            cgroup_version: unified.then(cgroup::version),
            seccomp: super::read_seccomp_filters(pid),
        }
    }
}
