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
// `struct seccomp_data` holds each argument as a 64-bit word; the arch check below admits only
// little-endian ABIs (the audit arch values carry `__AUDIT_ARCH_LE`), so the low half of
// `args[0]` is the word at 16 and the high half the word at 20.
const OFF_ARG0_LO: u32 = 16;
const OFF_ARG0_HI: u32 = 20;

#[cfg(not(target_endian = "little"))]
compile_error!("the seccomp programs read argument halves at little-endian offsets");

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

/// The socket families a confined process may create (docs/sandbox.md, "Socket families"):
/// what an MCP server in Python or Node needs. `AF_UNIX` for socketpairs, asyncio's self-pipe
/// and the copy's own channel; `AF_INET` and `AF_INET6` for the broker's endpoint on loopback.
pub const ALLOWED_FAMILIES: [libc::c_int; 3] = [libc::AF_UNIX, libc::AF_INET, libc::AF_INET6];

/// Which families `socket(2)` and `socketpair(2)` may create.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketFamilies {
    /// [`ALLOWED_FAMILIES`] only: any other family, or a first argument with any of its upper
    /// 32 bits set, fails with `EAFNOSUPPORT` before the kernel looks at it.
    Allowlist,
    /// Whatever the kernel offers: only for the tests that show what the allowlist prevents
    /// (`Ablation::any_socket_family`); no configuration reaches it.
    Any,
}

/// The allowlist's instructions, entered with the system call number in the accumulator and
/// leaving it there for what follows. `socket(family, ...)` and `socketpair(family, ...)` go
/// on only if `args[0]` is, as a whole 64-bit word, one of [`ALLOWED_FAMILIES`]: the kernel
/// reads the family as an `int` (the low half), so a filter that compared only the low half
/// would be exact too, but any upper bit set is no call a libc makes and fails closed instead.
fn socket_allowlist() -> Vec<sock_filter> {
    let refuse = ret_errno(libc::EAFNOSUPPORT);
    let n = ALLOWED_FAMILIES.len();
    // Offsets below count from the instruction after the jump.
    let mut p = vec![
        // 0: socket -> 2; else 1.
        jump(BPF_JEQ_K, nr(libc::SYS_socket), 1, 0),
        // 1: socketpair -> 2; else past the block.
        jump(BPF_JEQ_K, nr(libc::SYS_socketpair), 0, jump_len(n + 5)),
        // 2, 3: upper half zero -> 4; else the refusal.
        stmt(BPF_LD_W_ABS, OFF_ARG0_HI),
        jump(BPF_JEQ_K, 0, 0, jump_len(n + 1)),
        // 4: the low half.
        stmt(BPF_LD_W_ABS, OFF_ARG0_LO),
    ];
    // 5..5+n: an allowed family -> the reload.
    for (i, fam) in ALLOWED_FAMILIES.iter().enumerate() {
        let fam = u32::try_from(*fam).unwrap_or(u32::MAX);
        p.push(jump(BPF_JEQ_K, fam, jump_len(n - i), 0));
    }
    // 5+n: the refusal; 6+n: the system call number back in the accumulator.
    p.push(stmt(BPF_RET_K, refuse));
    p.push(stmt(BPF_LD_W_ABS, OFF_NR));
    p
}

/// A jump offset of a few instructions (the blocks here are short by construction).
fn jump_len(n: usize) -> u8 {
    u8::try_from(n).unwrap_or(u8::MAX)
}

/// A seccomp program as the kernel stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Program(pub Vec<(u16, u8, u8, u32)>);

impl Program {
    fn build(
        sockets: SocketFamilies,
        prologue_extra: &[sock_filter],
        rules: &[(libc::c_long, u32)],
    ) -> Program {
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
        if sockets == SocketFamilies::Allowlist {
            p.extend(socket_allowlist());
        }
        p.extend_from_slice(prologue_extra);
        for &(n, action) in rules {
            p.push(jump(BPF_JEQ_K, nr(n), 0, 1));
            p.push(stmt(BPF_RET_K, action));
        }
        p.push(stmt(BPF_RET_K, RET_ALLOW));
        Program(p.into_iter().map(|f| (f.code, f.jt, f.jf, f.k)).collect())
    }

    /// The filter the shim installs on the germline (issue 4, item 1), with the socket family
    /// allowlist.
    pub fn germline() -> Program {
        Program::germline_with(SocketFamilies::Allowlist)
    }

    /// [`Program::germline`] with the given socket families.
    pub fn germline_with(sockets: SocketFamilies) -> Program {
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
        Program::build(sockets, &[], &rules)
    }

    /// The extra layer every copy installs on itself once confined (issue 4, item 4): nothing
    /// that changes its namespaces, mounts or the kernel, and the socket family allowlist
    /// again (the germline's layer has it too; this one is what the copy is checked for).
    pub fn copy() -> Program {
        Program::copy_with(SocketFamilies::Allowlist)
    }

    /// [`Program::copy`] with the given socket families.
    pub fn copy_with(sockets: SocketFamilies) -> Program {
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
        Program::build(sockets, &clone_check, &rules)
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
    use proptest::prelude::*;

    /// What the kernel hands a filter: `struct seccomp_data`.
    struct Data {
        nr: u32,
        arch: u32,
        args: [u64; 6],
    }

    impl Data {
        fn call(nr: libc::c_long, arg0: u64) -> Data {
            Data {
                nr: super::nr(nr),
                arch: AUDIT_ARCH,
                args: [arg0, 1, 0, 0, 0, 0],
            }
        }

        fn word(&self, off: u32) -> u32 {
            let mut b = Vec::with_capacity(64);
            b.extend_from_slice(&self.nr.to_le_bytes());
            b.extend_from_slice(&self.arch.to_le_bytes());
            b.extend_from_slice(&0x7f00_1234_5678u64.to_le_bytes());
            for a in self.args {
                b.extend_from_slice(&a.to_le_bytes());
            }
            let o = off as usize;
            u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
        }
    }

    /// A classic-BPF interpreter for the instructions these programs use, with the kernel's
    /// rules (forward jumps only, the program must end in a return): what a program answers.
    fn run(p: &Program, d: &Data) -> u32 {
        let mut a = 0u32;
        let mut pc = 0usize;
        loop {
            let (code, jt, jf, k) = p.0[pc];
            let next = |taken: bool| pc + 1 + usize::from(if taken { jt } else { jf });
            pc = match code {
                BPF_LD_W_ABS => {
                    a = d.word(k);
                    pc + 1
                }
                BPF_JEQ_K => next(a == k),
                BPF_JGE_K => next(a >= k),
                BPF_JSET_K => next(a & k != 0),
                BPF_RET_K => return k,
                other => panic!("instruction {other:#x} at {pc} is not interpreted"),
            };
        }
    }

    fn allowed(arg0: u64) -> bool {
        ALLOWED_FAMILIES
            .iter()
            .any(|f| u64::try_from(*f) == Ok(arg0))
    }

    #[test]
    fn programs_round_trip_through_bytes() {
        for p in [
            Program::germline(),
            Program::copy(),
            Program::germline_with(SocketFamilies::Any),
            Program::copy_with(SocketFamilies::Any),
            Program::allow_all(),
        ] {
            assert_eq!(Program::from_bytes(&p.to_bytes()), p);
        }
    }

    #[test]
    fn germline_program_ends_in_allow_and_checks_arch_first() {
        let p = Program::germline();
        assert_eq!(p.0[0], (BPF_LD_W_ABS, 0, 0, OFF_ARCH));
        assert_eq!(p.0.last().copied(), Some((BPF_RET_K, 0, 0, RET_ALLOW)));
        assert_ne!(Program::germline(), Program::copy());
        assert_ne!(
            Program::germline(),
            Program::germline_with(SocketFamilies::Any)
        );
    }

    /// The families of issue 25 and every other one up to the kernel's AF_MAX, each refused
    /// by both layers; the three allowed ones pass; without the allowlist all pass.
    #[test]
    fn only_unix_inet_and_inet6_sockets_pass() {
        let refused = ret_errno(libc::EAFNOSUPPORT);
        for sockets in [SocketFamilies::Allowlist, SocketFamilies::Any] {
            for p in [Program::germline_with(sockets), Program::copy_with(sockets)] {
                for call in [libc::SYS_socket, libc::SYS_socketpair] {
                    for family in 0..64u64 {
                        let want = if sockets == SocketFamilies::Any || allowed(family) {
                            RET_ALLOW
                        } else {
                            refused
                        };
                        assert_eq!(
                            run(&p, &Data::call(call, family)),
                            want,
                            "{sockets:?}, system call {call}, family {family}"
                        );
                    }
                }
            }
        }
        for named in [
            libc::AF_VSOCK,
            libc::AF_NETLINK,
            libc::AF_PACKET,
            libc::AF_ALG,
            libc::AF_BLUETOOTH,
            libc::AF_KEY,
            libc::AF_XDP,
            libc::AF_CAN,
            libc::AF_TIPC,
        ] {
            let family = u64::try_from(named).unwrap_or(u64::MAX);
            assert_eq!(
                run(&Program::copy(), &Data::call(libc::SYS_socket, family)),
                refused,
                "family {named}"
            );
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        /// Any 64-bit first argument: socket and socketpair pass only for the exact allowed
        /// families (an allowed low half under set upper bits is refused, fail closed).
        #[test]
        fn socket_calls_pass_only_for_exact_allowed_families(
            low in prop_oneof![Just(1u32), Just(2u32), Just(10u32), any::<u32>()],
            high in prop_oneof![Just(0u32), Just(1u32), Just(0xffff_ffffu32), any::<u32>()],
            pair in any::<bool>(),
        ) {
            let arg0 = (u64::from(high) << 32) | u64::from(low);
            let call = if pair { libc::SYS_socketpair } else { libc::SYS_socket };
            for p in [Program::germline(), Program::copy()] {
                let want = if allowed(arg0) { RET_ALLOW } else { ret_errno(libc::EAFNOSUPPORT) };
                prop_assert_eq!(run(&p, &Data::call(call, arg0)), want, "{:#x}", arg0);
            }
        }

        /// Every other system call gets what it got without the allowlist.
        #[test]
        fn the_allowlist_changes_no_other_system_call(nr in 0u32..1024, arg0 in any::<u64>()) {
            prop_assume!(nr != super::nr(libc::SYS_socket) && nr != super::nr(libc::SYS_socketpair));
            let d = Data { nr, arch: AUDIT_ARCH, args: [arg0, 0, 0, 0, 0, 0] };
            prop_assert_eq!(
                run(&Program::germline(), &d),
                run(&Program::germline_with(SocketFamilies::Any), &d)
            );
            prop_assert_eq!(
                run(&Program::copy(), &d),
                run(&Program::copy_with(SocketFamilies::Any), &d)
            );
        }
    }

    #[test]
    fn another_architecture_and_x32_are_killed_before_the_allowlist() {
        let mut d = Data::call(libc::SYS_socket, 1);
        d.arch = 0x4000_0003; // i386
        assert_eq!(run(&Program::copy(), &d), RET_KILL);
        #[cfg(target_arch = "x86_64")]
        {
            let d = Data::call(libc::SYS_socket | 0x4000_0000, 1);
            assert_eq!(run(&Program::copy(), &d), RET_KILL);
        }
    }
}
