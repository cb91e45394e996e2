//! The seccomp programs: one installed by the shim on the germline before any release code runs
//! (inherited by every copy), one more layer each copy installs on itself before it is checked.
//!
//! We write the classic-BPF programs ourselves instead of using seccompiler: they are a few
//! dozen instructions, and the shim must compare them word for word with what
//! `PTRACE_SECCOMP_GET_FILTER` reads back from a copy, so the exact bytes must be ours.

use libc::sock_filter;

const BPF_LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
const BPF_JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
const BPF_JGE_K: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
const BPF_JSET_K: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
const BPF_RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;

const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;
const OFF_ARG0_LO: u32 = 16;

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

const RET_ALLOW: u32 = libc::SECCOMP_RET_ALLOW;
const RET_KILL: u32 = libc::SECCOMP_RET_KILL_PROCESS;

fn ret_errno(e: i32) -> u32 {
    libc::SECCOMP_RET_ERRNO | (e.unsigned_abs() & libc::SECCOMP_RET_DATA)
}

fn stmt(code: u16, k: u32) -> sock_filter {
    sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

fn nr(n: libc::c_long) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// A seccomp program as the kernel stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Program(pub Vec<(u16, u8, u8, u32)>);

impl Program {
    fn build(prologue_extra: &[sock_filter], rules: &[(libc::c_long, u32)]) -> Program {
        let mut p = vec![
            stmt(BPF_LD_W_ABS, OFF_ARCH),
            jump(BPF_JEQ_K, AUDIT_ARCH, 1, 0),
            stmt(BPF_RET_K, RET_KILL),
            stmt(BPF_LD_W_ABS, OFF_NR),
        ];
        #[cfg(target_arch = "x86_64")]
        {
            // x32 system calls alias the x86_64 numbers with bit 30 set: refuse them outright.
            p.push(jump(BPF_JGE_K, 0x4000_0000, 0, 1));
            p.push(stmt(BPF_RET_K, RET_KILL));
        }
        p.extend_from_slice(prologue_extra);
        for &(n, action) in rules {
            p.push(jump(BPF_JEQ_K, nr(n), 0, 1));
            p.push(stmt(BPF_RET_K, action));
        }
        p.push(stmt(BPF_RET_K, RET_ALLOW));
        Program(p.into_iter().map(|f| (f.code, f.jt, f.jf, f.k)).collect())
    }

    /// The filter the shim installs on the germline (issue 4, item 1).
    pub fn germline() -> Program {
        let eperm = ret_errno(libc::EPERM);
        let mut rules = vec![
            (libc::SYS_ptrace, eperm),
            (libc::SYS_process_vm_readv, eperm),
            (libc::SYS_process_vm_writev, eperm),
            (libc::SYS_pidfd_getfd, eperm),
            (libc::SYS_io_uring_setup, eperm),
            (libc::SYS_io_uring_enter, eperm),
            (libc::SYS_io_uring_register, eperm),
            (libc::SYS_bpf, eperm),
            (libc::SYS_perf_event_open, eperm),
            (libc::SYS_keyctl, eperm),
            (libc::SYS_add_key, eperm),
            (libc::SYS_request_key, eperm),
            (libc::SYS_kexec_load, eperm),
            (libc::SYS_kexec_file_load, eperm),
            (libc::SYS_userfaultfd, eperm),
            // seccomp cannot read clone3's flags (they sit in user memory): answer ENOSYS so that
            // libc falls back to clone, whose flags the copy filter can inspect.
            (libc::SYS_clone3, ret_errno(libc::ENOSYS)),
        ];
        rules.sort_by_key(|r| r.0);
        Program::build(&[], &rules)
    }

    /// The extra layer every copy installs on itself once confined (issue 4, item 4): nothing
    /// that changes its namespaces, mounts or the kernel.
    pub fn copy() -> Program {
        let eperm = ret_errno(libc::EPERM);
        let ns_flags = u32::try_from(
            libc::CLONE_NEWNS
                | libc::CLONE_NEWUTS
                | libc::CLONE_NEWIPC
                | libc::CLONE_NEWNET
                | libc::CLONE_NEWPID
                | libc::CLONE_NEWUSER
                | libc::CLONE_NEWCGROUP,
        )
        .unwrap_or(u32::MAX);
        // clone(flags, ...) with a namespace flag: EPERM. The accumulator is reloaded with the
        // system call number afterwards.
        let clone_check = [
            jump(BPF_JEQ_K, nr(libc::SYS_clone), 0, 3),
            stmt(BPF_LD_W_ABS, OFF_ARG0_LO),
            jump(BPF_JSET_K, ns_flags, 0, 1),
            stmt(BPF_RET_K, eperm),
            stmt(BPF_LD_W_ABS, OFF_NR),
        ];
        let mut rules = vec![
            (libc::SYS_mount, eperm),
            (libc::SYS_umount2, eperm),
            (libc::SYS_pivot_root, eperm),
            (libc::SYS_chroot, eperm),
            (libc::SYS_unshare, eperm),
            (libc::SYS_setns, eperm),
            (libc::SYS_fsopen, eperm),
            (libc::SYS_fsconfig, eperm),
            (libc::SYS_fsmount, eperm),
            (libc::SYS_fspick, eperm),
            (libc::SYS_move_mount, eperm),
            (libc::SYS_open_tree, eperm),
            (libc::SYS_mount_setattr, eperm),
            (libc::SYS_init_module, eperm),
            (libc::SYS_finit_module, eperm),
            (libc::SYS_delete_module, eperm),
            (libc::SYS_reboot, eperm),
            (libc::SYS_swapon, eperm),
            (libc::SYS_swapoff, eperm),
            (libc::SYS_acct, eperm),
            (libc::SYS_open_by_handle_at, eperm),
            (libc::SYS_name_to_handle_at, eperm),
            (libc::SYS_setdomainname, eperm),
            (libc::SYS_sethostname, eperm),
        ];
        rules.sort_by_key(|r| r.0);
        Program::build(&clone_check, &rules)
    }

    /// The kernel's representation, for installing.
    pub fn filters(&self) -> Vec<sock_filter> {
        self.0
            .iter()
            .map(|&(code, jt, jf, k)| sock_filter { code, jt, jf, k })
            .collect()
    }

    /// Little-endian bytes of the `struct sock_filter` array (what a bootstrap installs).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.0.len() * 8);
        for &(code, jt, jf, k) in &self.0 {
            out.extend_from_slice(&code.to_ne_bytes());
            out.push(jt);
            out.push(jf);
            out.extend_from_slice(&k.to_ne_bytes());
        }
        out
    }

    /// Hex of [`Program::to_bytes`], for JSON messages.
    pub fn to_hex(&self) -> String {
        self.to_bytes().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Parses the array read back with `PTRACE_SECCOMP_GET_FILTER`.
    pub fn from_bytes(bytes: &[u8]) -> Program {
        Program(
            bytes
                .chunks_exact(8)
                .map(|c| {
                    (
                        u16::from_ne_bytes([c[0], c[1]]),
                        c[2],
                        c[3],
                        u32::from_ne_bytes([c[4], c[5], c[6], c[7]]),
                    )
                })
                .collect(),
        )
    }

    /// An allow-everything program (what a hijacked bootstrap might install instead).
    pub fn allow_all() -> Program {
        Program(vec![(BPF_RET_K, 0, 0, RET_ALLOW)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_round_trip_through_bytes() {
        for p in [Program::germline(), Program::copy(), Program::allow_all()] {
            assert_eq!(Program::from_bytes(&p.to_bytes()), p);
        }
    }

    #[test]
    fn germline_program_ends_in_allow_and_checks_arch_first() {
        let p = Program::germline();
        assert_eq!(p.0[0], (BPF_LD_W_ABS, 0, 0, OFF_ARCH));
        assert_eq!(p.0.last().copied(), Some((BPF_RET_K, 0, 0, RET_ALLOW)));
        assert_ne!(Program::germline(), Program::copy());
    }
}
