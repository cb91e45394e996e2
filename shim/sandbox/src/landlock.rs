//! The read-only Landlock ruleset the shim applies to the germline before any release code runs
//! (every copy inherits it), prepared in the parent and applied in the child without allocating.

use std::ffi::CString;
use std::io;
use std::os::fd::RawFd;

use crate::sys;

const EXECUTE: u64 = 1 << 0;
const WRITE_FILE: u64 = 1 << 1;
const READ_FILE: u64 = 1 << 2;
const READ_DIR: u64 = 1 << 3;
const TRUNCATE: u64 = 1 << 14;
/// Rights that a rule on a non-directory may carry.
const FILE_RIGHTS: u64 = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | (1 << 15);
/// Read-only access to a tree.
pub const READ: u64 = EXECUTE | READ_FILE | READ_DIR;
/// Read and write a single file (only /dev/null gets this).
pub const READ_WRITE_FILE: u64 = READ_FILE | WRITE_FILE;
/// What a copy may do in its writable directory items (issue 27, `LaunchSpec::writable_trees`):
/// write, truncate, make and remove regular files and directories, and rename within them
/// (`REFER`). No devices, FIFOs, sockets or symlinks.
pub const TREE_WRITE: u64 =
    WRITE_FILE | (1 << 4) | (1 << 5) | (1 << 7) | (1 << 8) | REFER | TRUNCATE;
/// Link or rename into another directory: denied by every layer (ABI >= 2) unless a rule of
/// that layer grants it, handled or not.
pub const REFER: u64 = 1 << 13;

/// The Landlock ABI of the running kernel (0 if Landlock is unavailable).
pub fn abi() -> u32 {
    sys::landlock_create_ruleset(None, 1)
        .ok()
        .and_then(|v| u32::try_from(v).ok())
        .unwrap_or(0)
}

/// Every filesystem right the given ABI knows (all of them are "handled", hence denied unless
/// a rule grants them).
pub fn all_fs_rights(abi: u32) -> u64 {
    let mut r = (1u64 << 13) - 1;
    if abi >= 2 {
        r |= 1 << 13; // REFER
    }
    if abi >= 3 {
        r |= TRUNCATE;
    }
    if abi >= 5 {
        r |= 1 << 15; // IOCTL_DEV
    }
    r
}

/// One path rule, with the path as seen inside the germline's root.
#[derive(Debug, Clone)]
pub struct Rule {
    pub path: CString,
    pub access: u64,
}

/// A ruleset ready to be applied in a forked child.
#[derive(Debug)]
pub struct Ruleset {
    abi: u32,
    attr: [u8; 24],
    attr_len: usize,
    rules: Vec<Rule>,
    /// Rules on directories the caller holds open (beneath-rules by descriptor).
    fd_rules: Vec<(RawFd, u64)>,
    /// `landlock_net_port_attr`s: TCP connect allowed to these ports (ABI >= 4).
    net_rules: Vec<[u8; 16]>,
}

/// `LANDLOCK_ACCESS_NET_CONNECT_TCP`.
pub const CONNECT_TCP: u64 = 1 << 1;

impl Ruleset {
    /// `rules` name paths inside the new root; `is_dir` tells whether each is a directory (a
    /// rule on a file may carry only file rights). `connect_port`: the one TCP port connect is
    /// allowed to (TCP bind and connect are otherwise denied on ABI >= 4). `fd_rules`: rules on
    /// directories given by descriptors that stay open until [`Ruleset::apply`] has run.
    pub fn new(
        abi: u32,
        rules: Vec<(String, u64, bool)>,
        fd_rules: Vec<(RawFd, u64)>,
        connect_port: Option<u16>,
    ) -> io::Result<Ruleset> {
        if abi == 0 {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "Landlock is not available",
            ));
        }
        let fs = all_fs_rights(abi);
        let net: u64 = if abi >= 4 { 3 } else { 0 }; // BIND_TCP | CONNECT_TCP, no rules: denied
        let scoped: u64 = if abi >= 6 { 3 } else { 0 }; // abstract unix sockets, signals
        let mut attr = [0u8; 24];
        attr[0..8].copy_from_slice(&fs.to_ne_bytes());
        attr[8..16].copy_from_slice(&net.to_ne_bytes());
        attr[16..24].copy_from_slice(&scoped.to_ne_bytes());
        let attr_len = match abi {
            1..=3 => 8,
            4 | 5 => 16,
            _ => 24,
        };
        let mut out = Vec::new();
        for (path, access, is_dir) in rules {
            let access = if is_dir {
                access & fs
            } else {
                access & fs & FILE_RIGHTS
            };
            let path = CString::new(path)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path with NUL byte"))?;
            out.push(Rule { path, access });
        }
        let net_rules = match connect_port {
            Some(port) if abi >= 4 => {
                let mut a = [0u8; 16];
                a[0..8].copy_from_slice(&CONNECT_TCP.to_ne_bytes());
                a[8..16].copy_from_slice(&u64::from(port).to_ne_bytes());
                vec![a]
            }
            _ => vec![],
        };
        Ok(Ruleset {
            abi,
            attr,
            attr_len,
            rules: out,
            fd_rules: fd_rules
                .into_iter()
                .map(|(fd, access)| (fd, access & fs))
                .collect(),
            net_rules,
        })
    }

    /// The ABI this ruleset was built for.
    pub fn abi(&self) -> u32 {
        self.abi
    }

    /// Creates, fills and enforces the ruleset on the calling thread (fork-safe). Returns the
    /// index of the failing rule (usize::MAX for create/restrict) with the error.
    pub fn apply(&self) -> Result<(), (usize, io::Error)> {
        let fd = sys::landlock_create_ruleset(Some(&self.attr[..self.attr_len]), 0)
            .map_err(|e| (usize::MAX, e))?;
        for (i, rule) in self.rules.iter().enumerate() {
            let pfd: RawFd = match sys::open_raw(&rule.path, libc::O_PATH | libc::O_CLOEXEC, 0) {
                Ok(f) => f,
                Err(e) => {
                    sys::close_raw(fd);
                    return Err((i, e));
                }
            };
            let mut attr = [0u8; 12];
            attr[0..8].copy_from_slice(&rule.access.to_ne_bytes());
            attr[8..12].copy_from_slice(&pfd.to_ne_bytes());
            let r = sys::landlock_add_path_rule(fd, &attr);
            sys::close_raw(pfd);
            if let Err(e) = r {
                sys::close_raw(fd);
                return Err((i, e));
            }
        }
        for (i, (dir, access)) in self.fd_rules.iter().enumerate() {
            let mut attr = [0u8; 12];
            attr[0..8].copy_from_slice(&access.to_ne_bytes());
            attr[8..12].copy_from_slice(&dir.to_ne_bytes());
            if let Err(e) = sys::landlock_add_path_rule(fd, &attr) {
                sys::close_raw(fd);
                return Err((self.rules.len() + i, e));
            }
        }
        for (i, attr) in self.net_rules.iter().enumerate() {
            if let Err(e) = sys::landlock_add_net_rule(fd, attr) {
                sys::close_raw(fd);
                return Err((self.rules.len() + i, e));
            }
        }
        let r = sys::landlock_restrict_self(fd);
        sys::close_raw(fd);
        r.map_err(|e| (usize::MAX, e))
    }

    /// The rules, for reports.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }
}
