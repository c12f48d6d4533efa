//! The seccomp-BPF allow-list: the only system calls a running guest (and
//! the tender code it calls into) can make.
//!
//! This is reviewed data: one entry per system call, with who needs it and
//! the argument checks. Anything else traps (`SECCOMP_RET_TRAP`): spt's
//! SIGSYS handler records the call's number for the parent's message and
//! then lets the kernel kill the process with SIGSYS, or, in a
//! single-process instance, writes the message itself and exits with 159
//! (see `crate::signals`).
//! A system call of another architecture (`int 0x80`, i386 `AUDIT_ARCH`)
//! kills the process at once (`SECCOMP_RET_KILL_PROCESS`, seccompiler's
//! architecture check); x32 numbers (bit 30 set) match no entry and trap.
//!
//! | system call | arguments allowed | who needs it |
//! |---|---|---|
//! | `write` (1) | fd (32-bit) == 1 or fd == 2 | console hypercall; the tender's own messages |
//! | `exit_group` (231) | any | halt and fault hypercalls; the tender stopping an instance |
//! | `clock_nanosleep` (230) | clock (32-bit) == `CLOCK_MONOTONIC` (1) and flags (32-bit) == 0 (relative) | poll hypercall (the only way a guest blocks) |
//! | `restart_syscall` (219) | none (it has none) | the kernel, not spt: a `clock_nanosleep` interrupted by a stop (SIGSTOP/SIGTSTP and SIGCONT, a cgroup freeze, a debugger attaching) is resumed through it; it can only continue the interrupted, already allowed call with its saved arguments |
//!
//! Four system calls; Solo5's spt allows seven to nine because it also has
//! block and network devices. Not needed and so not allowed: `rt_sigreturn`
//! (spt's signal handlers never return), `exit` (glibc's `_exit` uses
//! `exit_group`), `clock_gettime` (the guest reads the TSC; glibc's
//! `clock_gettime` goes through the vDSO without a system call anyway).

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule,
};
use std::collections::BTreeMap;

/// Why the filter could not be built (a bug in this file, never the
/// guest's fault).
pub type FilterError = seccompiler::BackendError;

fn eq32(arg: u8, value: u64) -> Result<SeccompCondition, FilterError> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, value)
}

/// The allow-list as seccompiler rules: system call number → alternatives
/// (each alternative a conjunction of argument checks; none: any arguments).
pub fn rules() -> Result<BTreeMap<i64, Vec<SeccompRule>>, FilterError> {
    let mut r = BTreeMap::new();
    // Console hypercall and the tender's messages: stdout and stderr only.
    r.insert(
        libc::SYS_write,
        vec![
            SeccompRule::new(vec![eq32(0, 1)?])?,
            SeccompRule::new(vec![eq32(0, 2)?])?,
        ],
    );
    // Halt and fault hypercalls, and the tender stopping the instance.
    r.insert(libc::SYS_exit_group, vec![]);
    // Poll hypercall: a relative sleep on the monotonic clock.
    r.insert(
        libc::SYS_clock_nanosleep,
        vec![SeccompRule::new(vec![
            eq32(0, libc::CLOCK_MONOTONIC as u64)?,
            eq32(1, 0)?,
        ])?],
    );
    // The kernel resumes a sleep interrupted by a stop and continue with
    // restart_syscall; without it a stopped and continued instance dies.
    r.insert(libc::SYS_restart_syscall, vec![]);
    Ok(r)
}

/// Compiles the filter. Done in the parent, before forking, because it
/// allocates.
pub fn program() -> Result<BpfProgram, FilterError> {
    let filter = SeccompFilter::new(
        rules()?,
        SeccompAction::Trap,
        SeccompAction::Allow,
        seccompiler::TargetArch::x86_64,
    )?;
    filter.try_into()
}

#[cfg(test)]
mod tests {
    #[test]
    fn allow_list_is_four_calls() {
        let r = super::rules().unwrap();
        let nrs: Vec<i64> = r.keys().copied().collect();
        assert_eq!(
            nrs,
            vec![
                libc::SYS_write,
                libc::SYS_restart_syscall,
                libc::SYS_clock_nanosleep,
                libc::SYS_exit_group
            ]
        );
        assert!(!super::program().unwrap().is_empty());
    }
}
