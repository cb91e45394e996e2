//! The half of G1-G3 that reads: one snapshot of the germline from outside (its cgroup's
//! `cgroup.procs` and `cgroup.threads`, `/proc/PID/status`, its descriptors with their
//! `fdinfo`, `/proc/PID/maps`). Nothing the germline says about itself is in it; the rules
//! ([`super::rules`]) judge it without any I/O, so they are tested on recorded fixtures.

use std::collections::BTreeMap;

use crate::cgroup::Cgroup;
use crate::error::Result;
use crate::procfs::{self, Fd, Mapping};

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
