//! The scheduling system calls.

use shoal_plat::{umem, Args, Errno, SysResult};
use shoal_time::sys::Timespec;

/// `sched_yield()`: every other runnable thread runs once first.
pub fn sched_yield(_: &Args) -> SysResult {
    crate::yield_now();
    Ok(0)
}

/// Whether `pid` (0: the caller) names a thread of the process, as the
/// affinity calls take it (Linux takes a thread id there).
fn affinity_target(pid: i32) -> Result<(), Errno> {
    if pid == 0 || (pid > 0 && crate::thread_exists(pid as u32)) {
        Ok(())
    } else {
        Err(Errno::ESRCH)
    }
}

/// The instance's nice value (-20..=19), one for all its threads: it is
/// recorded and reported, and the round-robin scheduler does not weigh it.
static NICE: shoal_plat::Global<i32> = shoal_plat::Global::new(0);

const PRIO_PROCESS: i32 = 0;
const PRIO_PGRP: i32 = 1;
const PRIO_USER: i32 = 2;

/// Whether `(which, who)` names the instance (its threads, its process
/// group 1, its user): `EINVAL` for an unknown `which`, `ESRCH` for
/// anything else, as Linux answers for a process that does not exist.
fn prio_target(which: i32, who: i32) -> Result<(), Errno> {
    let ours = match which {
        PRIO_PROCESS => who == 0 || (who > 0 && crate::thread_exists(who as u32)),
        PRIO_PGRP => who == 0 || who == 1,
        PRIO_USER => who == 0 || who as u32 == shoal_plat::boot::ids().0,
        _ => return Err(Errno::EINVAL),
    };
    if ours {
        Ok(())
    } else {
        Err(Errno::ESRCH)
    }
}

/// `getpriority(which, who)`: `20 - nice` (1..=40), as the system call
/// returns it (libc turns it into the nice value).
pub fn getpriority(a: &Args) -> SysResult {
    prio_target(a.int(0), a.int(1))?;
    Ok((20 - NICE.with(|n| *n)) as u64)
}

/// `setpriority(which, who, nice)`: `nice` clamped to -20..=19; lowering it
/// needs root (`EACCES` otherwise: `RLIMIT_NICE` is 0, as Linux's default).
pub fn setpriority(a: &Args) -> SysResult {
    prio_target(a.int(0), a.int(1))?;
    let want = a.int(2).clamp(-20, 19);
    NICE.with(|n| {
        if want < *n && shoal_plat::boot::ids().0 != 0 {
            return Err(Errno::EACCES);
        }
        *n = want;
        Ok(0)
    })
}

/// `sched_get_priority_max(policy)`: 99 for the real-time policies
/// (`SCHED_FIFO`, `SCHED_RR`), 0 for `SCHED_OTHER`, `SCHED_BATCH`,
/// `SCHED_IDLE`, `SCHED_DEADLINE`; `EINVAL` for others, as Linux.
pub fn sched_get_priority_max(a: &Args) -> SysResult {
    match a.int(0) {
        1 | 2 => Ok(99),
        0 | 3 | 5 | 6 => Ok(0),
        _ => Err(Errno::EINVAL),
    }
}

/// `sched_get_priority_min(policy)`: 1 for the real-time policies, 0 for
/// the others Linux knows, `EINVAL` for unknown ones.
pub fn sched_get_priority_min(a: &Args) -> SysResult {
    match a.int(0) {
        1 | 2 => Ok(1),
        0 | 3 | 5 | 6 => Ok(0),
        _ => Err(Errno::EINVAL),
    }
}

/// `sched_getaffinity(pid, len, mask)`: one CPU (CPU 0); returns the size
/// of the kernel's CPU mask (8 bytes), as Linux does. `pid` is any thread
/// of the process (0: the caller).
pub fn sched_getaffinity(a: &Args) -> SysResult {
    let (pid, len) = (a.int(0), a.u(1));
    affinity_target(pid)?;
    if len < 8 || len % 8 != 0 {
        return Err(Errno::EINVAL);
    }
    umem::write(a.u(2), 1u64)?;
    Ok(8)
}

/// `getcpu(cpu, node, cache)`: the instance has one CPU (CPU 0, NUMA node
/// 0); either pointer may be NULL, and the cache argument is unused, as on
/// Linux since 2.6.24. The vDSO's `getcpu` answers the same without a call.
pub fn getcpu(a: &Args) -> SysResult {
    for at in [a.u(0), a.u(1)] {
        if at != 0 {
            umem::write(at, 0u32)?;
        }
    }
    Ok(0)
}

/// `sched_setaffinity(pid, len, mask)`: the instance has one CPU, so a
/// mask that includes CPU 0 is accepted (and changes nothing) and one
/// without it is `EINVAL`, as Linux answers a mask with no online CPU.
/// Linux reads at most its own mask size (8 bytes here) and takes a
/// shorter mask as zero-extended.
pub fn sched_setaffinity(a: &Args) -> SysResult {
    let (pid, len, mask) = (a.int(0), a.usize(1), a.u(2));
    let mut bytes = [0u8; 8];
    let n = len.min(8);
    if n > 0 {
        bytes[..n].copy_from_slice(umem::slice(mask, n)?);
    }
    affinity_target(pid)?;
    if bytes[0] & 1 == 0 {
        return Err(Errno::EINVAL);
    }
    Ok(0)
}

const MEMBARRIER_CMD_QUERY: i32 = 0;
const MEMBARRIER_CMD_GLOBAL: i32 = 1;
const MEMBARRIER_CMD_GLOBAL_EXPEDITED: i32 = 2;
const MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED: i32 = 4;
const MEMBARRIER_CMD_PRIVATE_EXPEDITED: i32 = 8;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: i32 = 16;
const MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE: i32 = 32;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE: i32 = 64;
const MEMBARRIER_CMD_GET_REGISTRATIONS: i32 = 512;
/// The commands `MEMBARRIER_CMD_QUERY` reports: all but the rseq pair
/// (`rseq` itself is not offered).
const MEMBARRIER_SUPPORTED: i32 = MEMBARRIER_CMD_GLOBAL
    | MEMBARRIER_CMD_GLOBAL_EXPEDITED
    | MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED
    | MEMBARRIER_CMD_PRIVATE_EXPEDITED
    | MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED
    | MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE
    | MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE
    | MEMBARRIER_CMD_GET_REGISTRATIONS;

/// The `MEMBARRIER_CMD_REGISTER_*` commands the process made.
static MEMBARRIER_REGISTERED: core::sync::atomic::AtomicI32 = core::sync::atomic::AtomicI32::new(0);

/// `membarrier(cmd, flags, cpu_id)`, real: the instance's threads share
/// one vCPU, so every other thread is between two instructions of its own
/// and has seen the caller's stores once the caller's own are ordered,
/// which a full fence does. The private expedited commands need their
/// registration first (`EPERM`), as on Linux; `flags` must be 0; unknown
/// commands are `EINVAL`.
pub fn membarrier(a: &Args) -> SysResult {
    use core::sync::atomic::{fence, Ordering::SeqCst};
    let (cmd, flags) = (a.int(0), a.uint(1));
    if flags != 0 {
        return Err(Errno::EINVAL);
    }
    let registered = MEMBARRIER_REGISTERED.load(SeqCst);
    match cmd {
        MEMBARRIER_CMD_QUERY => return Ok(MEMBARRIER_SUPPORTED as u64),
        MEMBARRIER_CMD_GET_REGISTRATIONS => return Ok(registered as u64),
        MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED | MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED | MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE => {
            MEMBARRIER_REGISTERED.fetch_or(cmd, SeqCst);
        }
        MEMBARRIER_CMD_PRIVATE_EXPEDITED | MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE if registered & (cmd << 1) == 0 => return Err(Errno::EPERM),
        MEMBARRIER_CMD_GLOBAL | MEMBARRIER_CMD_GLOBAL_EXPEDITED | MEMBARRIER_CMD_PRIVATE_EXPEDITED | MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE => {}
        _ => return Err(Errno::EINVAL),
    }
    fence(SeqCst);
    Ok(0)
}

const FUTEX_WAIT: u32 = 0;
const FUTEX_WAKE: u32 = 1;
const FUTEX_FD: u32 = 2;
const FUTEX_REQUEUE: u32 = 3;
const FUTEX_CMP_REQUEUE: u32 = 4;
const FUTEX_WAKE_OP: u32 = 5;
const FUTEX_LOCK_PI: u32 = 6;
const FUTEX_UNLOCK_PI: u32 = 7;
const FUTEX_TRYLOCK_PI: u32 = 8;
const FUTEX_WAIT_BITSET: u32 = 9;
const FUTEX_WAKE_BITSET: u32 = 10;
const FUTEX_LOCK_PI2: u32 = 13;
const FUTEX_PRIVATE_FLAG: u32 = 128;
const FUTEX_CLOCK_REALTIME: u32 = 256;

fn futex_word(addr: u64) -> Result<u32, Errno> {
    if !addr.is_multiple_of(4) {
        return Err(Errno::EINVAL);
    }
    umem::read::<u32>(addr)
}

/// The new value of a `FUTEX_WAKE_OP` target: `op` applied to `old`.
pub fn wake_op(old: u32, val3: u32) -> Result<u32, Errno> {
    let op = (val3 >> 28) & 0xf;
    let mut oparg = ((val3 << 8) as i32 >> 20) as u32; // sign-extended 12 bits
    if op & 8 != 0 {
        if oparg > 31 {
            return Err(Errno::EINVAL);
        }
        oparg = 1 << oparg;
    }
    Ok(match op & 7 {
        0 => oparg,
        1 => old.wrapping_add(oparg),
        2 => old | oparg,
        3 => old & !oparg,
        4 => old ^ oparg,
        _ => return Err(Errno::ENOSYS),
    })
}

/// Whether `FUTEX_WAKE_OP`'s comparison (bits 24..28 of `val3`, against
/// the sign-extended 12-bit argument in bits 0..12) holds for `old`.
pub fn wake_op_cmp(old: u32, val3: u32) -> Result<bool, Errno> {
    let cmp = (val3 >> 24) & 0xf;
    let arg = ((val3 << 20) as i32) >> 20;
    let old = old as i32;
    Ok(match cmp {
        0 => old == arg,
        1 => old != arg,
        2 => old < arg,
        3 => old <= arg,
        4 => old > arg,
        5 => old >= arg,
        _ => return Err(Errno::ENOSYS),
    })
}

/// `futex(uaddr, op, val, timeout, uaddr2, val3)`: `FUTEX_WAIT`,
/// `WAIT_BITSET` (timeouts relative for `WAIT`, absolute for
/// `WAIT_BITSET`, on `CLOCK_MONOTONIC` or with `FUTEX_CLOCK_REALTIME`),
/// `WAKE`, `WAKE_BITSET`, `REQUEUE`, `CMP_REQUEUE`, `WAKE_OP`, and the PI
/// operations `LOCK_PI` (absolute `CLOCK_REALTIME` timeout), `LOCK_PI2`
/// (absolute, `CLOCK_MONOTONIC` unless `FUTEX_CLOCK_REALTIME`),
/// `TRYLOCK_PI`, `UNLOCK_PI` (see [`crate::pi`]). Private and shared
/// futexes are the same (one address space). The PI requeue operations
/// (`WAIT_REQUEUE_PI`, `CMP_REQUEUE_PI`, used by glibc's PI condition
/// variables, not musl's) are `ENOSYS`. See the crate documentation for
/// blocking.
pub fn futex(a: &Args) -> SysResult {
    let (uaddr, op, val, timeout, uaddr2, val3) = (a.u(0), a.uint(1), a.uint(2), a.u(3), a.u(4), a.uint(5));
    let cmd = op & !(FUTEX_PRIVATE_FLAG | FUTEX_CLOCK_REALTIME);
    if op & FUTEX_CLOCK_REALTIME != 0 && !matches!(cmd, FUTEX_WAIT | FUTEX_WAIT_BITSET | FUTEX_LOCK_PI2) {
        return Err(Errno::ENOSYS);
    }
    // For the requeue operations the "timeout" argument is a count.
    let val2 = timeout as u32;
    match cmd {
        FUTEX_WAIT | FUTEX_WAIT_BITSET => {
            if cmd == FUTEX_WAIT_BITSET && val3 == 0 {
                return Err(Errno::EINVAL);
            }
            let bitset = if cmd == FUTEX_WAIT { u32::MAX } else { val3 };
            let t: Option<Timespec> = if timeout != 0 { Some(umem::read(timeout)?) } else { None };
            let deadline = match t {
                None => None,
                Some(t) => {
                    let ns = t.to_ns()?;
                    Some(if cmd == FUTEX_WAIT {
                        shoal_time::monotonic_ns().saturating_add(ns)
                    } else if op & FUTEX_CLOCK_REALTIME != 0 {
                        ns.saturating_sub(shoal_time::realtime_offset_ns())
                    } else {
                        ns
                    })
                }
            };
            futex_word(uaddr)?;
            crate::futex_wait(uaddr, val, bitset, deadline).map(|_| 0)
        }
        FUTEX_WAKE | FUTEX_WAKE_BITSET => {
            if cmd == FUTEX_WAKE_BITSET && val3 == 0 {
                return Err(Errno::EINVAL);
            }
            let bitset = if cmd == FUTEX_WAKE { u32::MAX } else { val3 };
            futex_word(uaddr)?;
            Ok(crate::futex_wake(uaddr, val, bitset) as u64)
        }
        FUTEX_REQUEUE | FUTEX_CMP_REQUEUE => {
            if (val as i32) < 0 || (val2 as i32) < 0 {
                return Err(Errno::EINVAL);
            }
            futex_word(uaddr2)?;
            if futex_word(uaddr)? != val3 && cmd == FUTEX_CMP_REQUEUE {
                return Err(Errno::EAGAIN);
            }
            Ok(crate::futex_requeue(uaddr, uaddr2, val, val2) as u64)
        }
        FUTEX_WAKE_OP => {
            futex_word(uaddr)?;
            let old = futex_word(uaddr2)?;
            let new = wake_op(old, val3)?;
            let hit = wake_op_cmp(old, val3)?;
            umem::write(uaddr2, new)?;
            let mut n = crate::futex_wake(uaddr, val, u32::MAX);
            if hit {
                n += crate::futex_wake(uaddr2, val2, u32::MAX);
            }
            Ok(n as u64)
        }
        FUTEX_LOCK_PI | FUTEX_LOCK_PI2 => {
            let deadline = if timeout != 0 {
                let ns = umem::read::<Timespec>(timeout)?.to_ns()?;
                let realtime = cmd == FUTEX_LOCK_PI || op & FUTEX_CLOCK_REALTIME != 0;
                Some(if realtime { ns.saturating_sub(shoal_time::realtime_offset_ns()) } else { ns })
            } else {
                None
            };
            crate::pi::lock(uaddr, deadline, false).map(|_| 0)
        }
        FUTEX_TRYLOCK_PI => crate::pi::lock(uaddr, None, true).map(|_| 0),
        FUTEX_UNLOCK_PI => crate::pi::unlock(uaddr).map(|_| 0),
        FUTEX_FD => Err(Errno::EINVAL),
        _ => Err(Errno::ENOSYS),
    }
}

/// `nanosleep(req, rem)`: blocks the calling thread only. Woken by a
/// signal: `EINTR`, with the time left in `rem` (if not NULL).
pub fn nanosleep(a: &Args) -> SysResult {
    let req: Timespec = umem::read(a.u(0))?;
    let d = req.to_ns()?;
    sleep(shoal_time::monotonic_ns().saturating_add(d), a.u(1))
}

/// `pause()`: waits for a signal; `EINTR` once one is delivered.
pub fn pause(_: &Args) -> SysResult {
    Err(crate::wait_for_signal())
}

/// SIGKILL and SIGSTOP cannot be blocked.
const UNBLOCKABLE: u64 = (1 << 8) | (1 << 18);

/// `rt_sigsuspend(mask, size)`: waits for a signal with `mask` as the
/// thread's signal mask; the signal is delivered under it, then the old
/// mask is back (Linux's saved sigmask, restored by the syscall table).
pub fn rt_sigsuspend(a: &Args) -> SysResult {
    if a.u(1) != 8 {
        return Err(Errno::EINVAL);
    }
    let m: u64 = umem::read(a.u(0))?;
    let (old, pending) = crate::sig_state();
    crate::set_sig_state(m & !UNBLOCKABLE, pending);
    crate::set_saved_mask(old);
    Err(crate::wait_for_signal())
}

/// `clock_nanosleep(id, flags, req, rem)`: as `nanosleep`, on the clocks
/// `shoal_time::sys::deadline` accepts, relative or `TIMER_ABSTIME` (then
/// `rem` is not written).
pub fn clock_nanosleep(a: &Args) -> SysResult {
    let t: Timespec = umem::read(a.u(2))?;
    let d = shoal_time::sys::deadline(a.int(0), a.int(1), t)?;
    let rem = if a.int(1) & shoal_time::sys::TIMER_ABSTIME != 0 { 0 } else { a.u(3) };
    sleep(d, rem)
}

fn sleep(deadline: u64, rem: u64) -> SysResult {
    match crate::sleep_until(deadline) {
        Ok(()) => Ok(0),
        Err(e) => {
            if rem != 0 {
                let left = deadline.saturating_sub(shoal_time::monotonic_ns());
                umem::write(rem, Timespec::from_ns(left))?;
            }
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: [u64; 6]) -> Args {
        Args(v)
    }

    #[test]
    fn forwarded_host_signals_become_pending_once() {
        let term = 1u64 << 14;
        let (mask, pending) = crate::sig_state();
        assert_eq!(pending & term, 0);
        crate::raise_host_signals();
        assert_eq!(crate::sig_state().1 & term, 0, "nothing arrived");
        shoal_plat::hostsig::arrive(15);
        crate::raise_host_signals();
        assert_eq!(crate::sig_state().1 & term, term, "SIGTERM pending on the running thread");
        assert!(crate::has_deliverable());
        assert_eq!(shoal_plat::hostsig::take(), 0, "taken once");
        crate::set_sig_state(mask, pending);
    }

    #[test]
    fn pause_and_sigsuspend_return_eintr_for_a_pending_signal() {
        umem::set_bounds(1, u64::MAX);
        let usr1 = 1u64 << 9;
        let (mask, pending) = crate::sig_state();
        crate::set_sig_state(0, usr1);
        assert_eq!(pause(&args([0; 6])), Err(Errno::EINTR), "a deliverable signal ends pause at once");
        // sigsuspend: the new mask applies while waiting; the old one is
        // saved for the syscall table to restore after delivery.
        crate::set_sig_state(0b110, usr1);
        let m: u64 = 1 << 3;
        assert_eq!(rt_sigsuspend(&args([&m as *const u64 as u64, 8, 0, 0, 0, 0])), Err(Errno::EINTR));
        assert_eq!(crate::sig_state().0, m, "the temporary mask");
        assert_eq!(crate::take_saved_mask(), Some(0b110), "the old mask, to restore");
        assert_eq!(rt_sigsuspend(&args([&m as *const u64 as u64, 4, 0, 0, 0, 0])), Err(Errno::EINVAL), "size");
        crate::set_sig_state(mask, pending);
    }

    #[test]
    fn futex_single_thread() {
        umem::set_bounds(1, u64::MAX);
        let mut w: u32 = 5;
        let p = &mut w as *mut u32 as u64;
        assert_eq!(futex(&args([p, 1 | 128, 1, 0, 0, 0])), Ok(0), "wake: nobody");
        assert_eq!(futex(&args([p, 0, 4, 0, 0, 0])), Err(Errno::EAGAIN), "value changed");
        assert_eq!(futex(&args([p + 1, 0, 5, 0, 0, 0])), Err(Errno::EINVAL), "misaligned");
        let bad = Timespec { tv_sec: 0, tv_nsec: -1 };
        assert_eq!(futex(&args([p, 0, 5, &bad as *const _ as u64, 0, 0])), Err(Errno::EINVAL));
        assert_eq!(futex(&args([p, 9, 5, 0, 0, 0])), Err(Errno::EINVAL), "bitset 0");
        assert_eq!(futex(&args([p, 4, 0, 0, p, 6])), Err(Errno::EAGAIN));
        assert_eq!(futex(&args([p, 4, 0, 0, p, 5])), Ok(0));
        // FUTEX_WAKE_OP: *uaddr2 += 3.
        let mut w2: u32 = 10;
        let p2 = &mut w2 as *mut u32 as u64;
        assert_eq!(futex(&args([p, 5, 1, 0, p2, (1 << 28) | (3 << 12)])), Ok(0));
        assert_eq!(w2, 13);
        // Bad comparison: ENOSYS, nothing written.
        assert_eq!(futex(&args([p, 5, 1, 0, p2, (1 << 28) | (7 << 24) | (3 << 12)])), Err(Errno::ENOSYS));
        assert_eq!(w2, 13);
        // PI: lock, relock (EDEADLK), unlock; requeue-PI is ENOSYS.
        w = 0;
        assert_eq!(futex(&args([p, 6 | 128, 0, 0, 0, 0])), Ok(0));
        assert_eq!(w, crate::current_tid());
        assert_eq!(futex(&args([p, 8, 0, 0, 0, 0])), Err(Errno::EDEADLK));
        assert_eq!(futex(&args([p, 7, 0, 0, 0, 0])), Ok(0));
        assert_eq!(w, 0);
        assert_eq!(futex(&args([p, 13 | 256, 0, 0, 0, 0])), Ok(0), "LOCK_PI2 takes FUTEX_CLOCK_REALTIME");
        assert_eq!(futex(&args([p, 7, 0, 0, 0, 0])), Ok(0));
        assert_eq!(futex(&args([p, 11, 0, 0, 0, 0])), Err(Errno::ENOSYS));
    }

    // `OP << 24 | ARG` with ARG 0 spells the encoding out as the others do.
    #[allow(clippy::identity_op)]
    #[test]
    fn wake_op_comparisons() {
        assert_eq!(wake_op_cmp(5, 5), Ok(true)); // EQ 5
        assert_eq!(wake_op_cmp(5, 1 << 24 | 5), Ok(false)); // NE 5
        assert_eq!(wake_op_cmp(u32::MAX, 2 << 24 | 0), Ok(true)); // -1 < 0
        assert_eq!(wake_op_cmp(0, 2 << 24 | 0xfff), Ok(false)); // 0 < -1
        assert_eq!(wake_op_cmp(1, 4 << 24 | 0), Ok(true)); // GT
        assert_eq!(wake_op_cmp(0, 5 << 24 | 0), Ok(true)); // GE
        assert_eq!(wake_op_cmp(0, 6 << 24), Err(Errno::ENOSYS));
    }

    #[test]
    fn wake_op_encoding() {
        assert_eq!(wake_op(6, 1 << 12), Ok(1)); // SET 1
        assert_eq!(wake_op(6, 3 << 28 | 2 << 12), Ok(4)); // ANDN 2
        assert_eq!(wake_op(6, 4 << 28 | 0xfff << 12), Ok(!6)); // XOR -1
        assert_eq!(wake_op(0, 10 << 28 | 4 << 12), Ok(16)); // OR with 1<<4
        assert_eq!(wake_op(0, 8 << 28 | 40 << 12), Err(Errno::EINVAL));
    }

    #[test]
    fn affinity() {
        umem::set_bounds(1, u64::MAX);
        assert_eq!((sched_get_priority_max(&args([1, 0, 0, 0, 0, 0])), sched_get_priority_min(&args([2, 0, 0, 0, 0, 0]))), (Ok(99), Ok(1)));
        assert_eq!((sched_get_priority_max(&args([0, 0, 0, 0, 0, 0])), sched_get_priority_min(&args([6, 0, 0, 0, 0, 0]))), (Ok(0), Ok(0)));
        assert_eq!(sched_get_priority_max(&args([4, 0, 0, 0, 0, 0])), Err(Errno::EINVAL));
        assert_eq!(getpriority(&args([3, 0, 0, 0, 0, 0])), Err(Errno::EINVAL));
        assert_eq!(getpriority(&args([1, 77, 0, 0, 0, 0])), Err(Errno::ESRCH));
        let mut m = [0xffu64; 4];
        let p = m.as_mut_ptr() as u64;
        assert_eq!(sched_getaffinity(&args([0, 32, p, 0, 0, 0])), Ok(8));
        assert_eq!(m[0], 1);
        assert_eq!(sched_getaffinity(&args([0, 4, p, 0, 0, 0])), Err(Errno::EINVAL));
        assert_eq!(sched_getaffinity(&args([-1i64 as u64, 8, p, 0, 0, 0])), Err(Errno::ESRCH));
        let one = [1u8, 0, 0];
        let q = one.as_ptr() as u64;
        assert_eq!(sched_setaffinity(&args([0, 3, q, 0, 0, 0])), Ok(0));
        let two = [2u8];
        assert_eq!(sched_setaffinity(&args([0, 1, two.as_ptr() as u64, 0, 0, 0])), Err(Errno::EINVAL));
        assert_eq!(sched_setaffinity(&args([0, 0, q, 0, 0, 0])), Err(Errno::EINVAL));
    }

    #[test]
    fn membarrier_commands() {
        assert_eq!(membarrier(&args([0, 0, 0, 0, 0, 0])), Ok(MEMBARRIER_SUPPORTED as u64));
        assert_eq!(membarrier(&args([0, 1, 0, 0, 0, 0])), Err(Errno::EINVAL));
        assert_eq!(membarrier(&args([1, 0, 0, 0, 0, 0])), Ok(0));
        assert_eq!(membarrier(&args([8, 0, 0, 0, 0, 0])), Err(Errno::EPERM));
        assert_eq!(membarrier(&args([16, 0, 0, 0, 0, 0])), Ok(0));
        assert_eq!(membarrier(&args([8, 0, 0, 0, 0, 0])), Ok(0));
        assert_eq!(membarrier(&args([512, 0, 0, 0, 0, 0])), Ok(16));
        assert_eq!(membarrier(&args([128, 0, 0, 0, 0, 0])), Err(Errno::EINVAL));
    }
}
