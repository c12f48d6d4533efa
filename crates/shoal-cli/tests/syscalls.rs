//! System calls that must not lie: each program in
//! `apps/tests/sys_*.c` prints what the same source prints as a native
//! static musl program, on spt and on hvt (hvt skips visibly without
//! /dev/kvm). Each test is named after the item of the issue it checks.

mod common;
use common::*;

/// Item 3: flock, fcntl record locks and OFD locks conflict, block only
/// the waiting thread and go on close, as on Linux.
#[test]
fn item3_flock_record_and_ofd_locks() {
    matches_native("sys_locks.c");
}

/// Item 5: RLIMIT_NOFILE, RLIMIT_AS, RLIMIT_DATA and RLIMIT_FSIZE are
/// enforced; SA_ONSTACK handlers run on the alternate stack; ppoll and
/// pselect6 apply their signal masks for the wait.
#[test]
fn item5_resource_limits_altstack_and_wait_masks() {
    matches_native("sys_limits.c");
}

/// Item 2: pwritev2 honours RWF_APPEND and the other RWF_* flags as Linux
/// does on tmpfs, pipes and devices; unknown flags are EOPNOTSUPP.
#[test]
fn item2_pwritev2_rwf_flags() {
    matches_native("sys_rwf.c");
}

/// Item 10: RLIMIT_STACK's hard limit is unlimited, so setrlimit above
/// 8 MiB succeeds as on Linux, and getrlimit reports what was set.
#[test]
fn item10_rlimit_stack_above_8_mib() {
    matches_native("sys_stack.c");
}

/// Item 9: a memory-backed /dev/shm (shm_open, sem_open) and System V
/// shared memory, semaphores and message queues inside an instance.
#[test]
fn item9_dev_shm_and_system_v_ipc() {
    matches_native("sys_ipc.c");
}

/// Item 8: robust mutexes give EOWNERDEAD after their owner exits (the
/// kernel walks the robust list too), PI mutexes and the raw PI futex
/// protocol (FUTEX_WAITERS, EDEADLK, ESRCH, EPERM) work as on Linux, and
/// get_robust_list answers.
#[test]
fn item8_robust_and_priority_inheritance_mutexes() {
    matches_native("sys_robust.c");
}

/// Item 4: MAP_SHARED file mappings are the file's pages: stores through
/// one mapping are seen through others (another descriptor, another
/// offset, another thread) and by read; write and pwrite are seen by every
/// mapping; ftruncate and growth inside the mapped range and mremap behave
/// as on Linux, with no msync.
#[test]
fn item4_map_shared_file_mappings_are_coherent() {
    matches_native("sys_mapshared.c");
}
