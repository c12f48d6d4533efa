//! The process system calls.

use crate::limits::{self, Rlimit, NLIMITS};
use crate::signal::{self, KSigaction, StackT, SIGNALS};
use crate::{PID, PPID};
use shoal_plat::{umem, Args, Errno, Global, SysResult};

/// `exit(status)`: ends the calling thread (see `shoal_sched::exit_thread`);
/// the last thread's exit ends the instance with `status & 0xff`.
pub fn exit(a: &Args) -> SysResult {
    shoal_sched::exit_thread(a.int(0))
}

/// `exit_group(status)`: ends the instance with `status & 0xff`.
pub fn exit_group(a: &Args) -> SysResult {
    crate::exit(a.int(0) as i64)
}

/// `getpid()`: 1.
pub fn getpid(_: &Args) -> SysResult {
    Ok(PID)
}

/// `getppid()`: 0 (no parent inside the instance).
pub fn getppid(_: &Args) -> SysResult {
    Ok(PPID)
}

/// `gettid()`: the calling thread's id.
pub fn gettid(_: &Args) -> SysResult {
    Ok(shoal_sched::current_tid() as u64)
}

/// `set_tid_address(ptr)`: stored for the calling thread; returns its tid.
pub fn set_tid_address(a: &Args) -> SysResult {
    shoal_sched::set_clear_child_tid(a.u(0));
    Ok(shoal_sched::current_tid() as u64)
}

/// `set_robust_list(head, len)`: stored for the calling thread (`len` must
/// be the 24-byte head); the kernel walks the list when the thread exits
/// (`shoal_sched::pi`), after musl's own walk in `pthread_exit`.
pub fn set_robust_list(a: &Args) -> SysResult {
    if a.u(1) != 24 {
        return Err(Errno::EINVAL);
    }
    shoal_sched::set_robust_list(a.u(0));
    Ok(0)
}

/// `get_robust_list(tid, head_ptr, len_ptr)`: the robust-list head of
/// thread `tid` (0: the caller) and its length, 24; `ESRCH` if there is no
/// such thread.
pub fn get_robust_list(a: &Args) -> SysResult {
    let tid = match a.int(0) {
        0 => shoal_sched::current_tid(),
        t if t > 0 => t as u32,
        _ => return Err(Errno::ESRCH),
    };
    let head = shoal_sched::robust_list_of(tid).ok_or(Errno::ESRCH)?;
    umem::write(a.u(2), 24u64)?;
    umem::write(a.u(1), head)?;
    Ok(0)
}

const ARCH_SET_GS: i32 = 0x1001;
const ARCH_SET_FS: i32 = 0x1002;
const ARCH_GET_FS: i32 = 0x1003;
const ARCH_GET_GS: i32 = 0x1004;
/// First non-canonical user address.
const TASK_SIZE: u64 = 1 << 47;

/// `arch_prctl(code, addr)`: sets or reads the FS or GS base with the
/// user-mode FSGSBASE instructions (docs/design.md "Host facts"). Other codes: `EINVAL`.
pub fn arch_prctl(a: &Args) -> SysResult {
    let addr = a.u(1);
    match a.int(0) {
        ARCH_SET_FS | ARCH_SET_GS if addr >= TASK_SIZE => Err(Errno::EPERM),
        ARCH_SET_FS => {
            // SAFETY: libc sets its thread pointer; the kernel itself does
            // not use FS- or GS-relative addressing.
            unsafe { shoal_plat::cpu::wrfsbase(addr) };
            Ok(())
        }
        ARCH_SET_GS => {
            // SAFETY: as above, for GS.
            unsafe { shoal_plat::cpu::wrgsbase(addr) };
            Ok(())
        }
        ARCH_GET_FS => umem::write(addr, shoal_plat::cpu::rdfsbase()),
        ARCH_GET_GS => umem::write(addr, shoal_plat::cpu::rdgsbase()),
        _ => Err(Errno::EINVAL),
    }
    .map(|_| 0)
}

const PR_SET_PDEATHSIG: i32 = 1;
const PR_GET_PDEATHSIG: i32 = 2;
const PR_SET_NAME: i32 = 15;
const PR_GET_NAME: i32 = 16;

/// The parent-death signal (`PR_SET_PDEATHSIG`). The instance's process
/// has no parent inside it that could die first, so it is only kept and
/// reported back.
static PDEATHSIG: core::sync::atomic::AtomicI32 = core::sync::atomic::AtomicI32::new(0);

/// `prctl(option, …)`: the calling thread's name — `PR_SET_NAME` copies
/// up to 15 bytes of the string at `arg2` (longer names are truncated, as
/// on Linux), `PR_GET_NAME` writes the 16-byte NUL-padded name to `arg2`.
/// musl's `pthread_setname_np`/`pthread_getname_np` of the calling thread
/// use these (Redis names its background threads). A thread starts with
/// its creator's name; the main thread's is empty, since an instance has
/// no executable file to take it from. `PR_SET_PDEATHSIG` takes a signal
/// number (0..=64, else `EINVAL`) and `PR_GET_PDEATHSIG` writes it back as
/// an `int` (Go's `os/exec` and glibc programs set it). The other options,
/// which control process machinery an instance does not have, are
/// `EINVAL`, Linux's answer to an option it does not know.
pub fn prctl(a: &Args) -> SysResult {
    let addr = a.u(1);
    match a.int(0) {
        PR_SET_PDEATHSIG => {
            let sig = a.u(1);
            if sig > signal::NSIG as u64 {
                return Err(Errno::EINVAL);
            }
            PDEATHSIG.store(sig as i32, core::sync::atomic::Ordering::Relaxed);
            Ok(0)
        }
        PR_GET_PDEATHSIG => umem::write(addr, PDEATHSIG.load(core::sync::atomic::Ordering::Relaxed)).map(|_| 0),
        PR_SET_NAME => {
            let mut name = [0u8; 16];
            for (i, b) in name.iter_mut().take(15).enumerate() {
                let c: u8 = umem::read(addr.checked_add(i as u64).ok_or(Errno::EFAULT)?)?;
                if c == 0 {
                    break;
                }
                *b = c;
            }
            shoal_sched::set_thread_name(name);
            Ok(0)
        }
        PR_GET_NAME => umem::write(addr, shoal_sched::thread_name()).map(|_| 0),
        _ => Err(Errno::EINVAL),
    }
}

/// `rt_sigreturn()`: see [`signal::sigreturn_from_image`] (the system-
/// call entry takes it before the table, outside every gate; this entry
/// is reached only through the table itself).
pub fn rt_sigreturn(_: &Args) -> SysResult {
    signal::sigreturn_from_image()
}

/// `rt_sigaction(sig, act, oact, sigsetsize)`.
pub fn rt_sigaction(a: &Args) -> SysResult {
    let (sig, act, oact) = (a.int(0), a.u(1), a.u(2));
    if a.u(3) != 8 || !(1..=signal::NSIG).contains(&sig) {
        return Err(Errno::EINVAL);
    }
    if act != 0 && (sig == signal::SIGKILL || sig == signal::SIGSTOP) {
        return Err(Errno::EINVAL);
    }
    let new: Option<KSigaction> = if act != 0 { Some(umem::read(act)?) } else { None };
    let old = SIGNALS.with(|s| s.actions[(sig - 1) as usize]);
    if oact != 0 {
        umem::write(oact, old)?;
    }
    if let Some(n) = new {
        signal::with_signals(|s| s.set_action(sig, n));
        if signal::FAULT_SIGNALS.contains(&sig) {
            signal::update_fault_entry();
        }
    }
    Ok(0)
}

const SIG_BLOCK: i32 = 0;
const SIG_UNBLOCK: i32 = 1;
const SIG_SETMASK: i32 = 2;

/// `rt_sigprocmask(how, set, oldset, sigsetsize)`. Unblocking a pending
/// signal delivers it before returning.
pub fn rt_sigprocmask(a: &Args) -> SysResult {
    let (how, set, oset) = (a.int(0), a.u(1), a.u(2));
    if a.u(3) != 8 {
        return Err(Errno::EINVAL);
    }
    let new: Option<u64> = if set != 0 { Some(umem::read(set)?) } else { None };
    let old = signal::with_signals(|s| s.mask);
    let mask = match (new, how) {
        (None, _) => old,
        (Some(n), SIG_BLOCK) => old | n,
        (Some(n), SIG_UNBLOCK) => old & !n,
        (Some(n), SIG_SETMASK) => n,
        _ => return Err(Errno::EINVAL),
    };
    if oset != 0 {
        umem::write(oset, old)?;
    }
    signal::with_signals(|s| s.set_mask(mask));
    signal::deliver_pending();
    Ok(0)
}

/// `rt_sigpending(set, sigsetsize)`: the blocked signals waiting.
pub fn rt_sigpending(a: &Args) -> SysResult {
    if a.u(1) > 8 {
        return Err(Errno::EINVAL);
    }
    let p = signal::with_signals(|s| s.pending & s.mask);
    let bytes = p.to_le_bytes();
    umem::slice_mut(a.u(0), a.usize(1))?.copy_from_slice(&bytes[..a.usize(1)]);
    Ok(0)
}

/// `sigaltstack(ss, old_ss)`: handlers installed with `SA_ONSTACK` run on
/// it (see [`crate::signal`]). While the caller runs on it, the old value
/// says `SS_ONSTACK` and a change is refused (`EPERM`), as on Linux.
pub fn sigaltstack(a: &Args) -> SysResult {
    let (ss, old) = (a.u(0), a.u(1));
    let new: Option<StackT> = if ss != 0 { Some(umem::read(ss)?) } else { None };
    if let Some(n) = new {
        let mode = n.ss_flags & !signal::SS_AUTODISARM;
        if mode != 0 && mode != signal::SS_DISABLE {
            return Err(Errno::EINVAL);
        }
        if mode == 0 && n.ss_size < signal::MINSIGSTKSZ {
            return Err(Errno::ENOMEM);
        }
    }
    let cur = SIGNALS.with(|s| s.altstack);
    let on = signal::on_stack(&cur, signal::current_sp());
    if old != 0 {
        let mut o = cur;
        if on {
            o.ss_flags |= signal::SS_ONSTACK;
        }
        umem::write(old, o)?;
    }
    if new.is_some() && on {
        return Err(Errno::EPERM);
    }
    if let Some(mut n) = new {
        if n.ss_flags & signal::SS_DISABLE != 0 {
            n = StackT { ss_sp: 0, ss_flags: signal::SS_DISABLE, pad: 0, ss_size: 0 };
        }
        signal::signals_mut(|s| s.altstack = n);
    }
    Ok(0)
}

fn send(sig: i32, code: i32) -> SysResult {
    // To the process: kill's signals are taken after the thread's own.
    let _ = signal::send_self_info(sig, signal::Info::sent(code), true);
    Ok(0)
}

/// `kill(pid, sig)`: only the process itself exists (pid 1, or 0 / -1 for
/// its process group); `kill(-1, …)` reaches no process (it skips the
/// caller and init). Others: `ESRCH`.
pub fn kill(a: &Args) -> SysResult {
    let (pid, sig) = (a.int(0), a.int(1));
    signal::check_sig(sig)?;
    match pid {
        1 | 0 => send(sig, signal::SI_USER),
        p if p < -1 && p == -(PID as i32) => send(sig, signal::SI_USER),
        _ => Err(Errno::ESRCH),
    }
}

/// `tkill(tid, sig)`: to any thread of the process (see
/// [`signal::send_thread`]).
pub fn tkill(a: &Args) -> SysResult {
    let (tid, sig) = (a.int(0), a.int(1));
    if tid <= 0 {
        return Err(Errno::EINVAL);
    }
    signal::check_sig(sig)?;
    signal::send_thread(tid as u32, sig, signal::SI_TKILL).map(|_| 0)
}

/// `tgkill(tgid, tid, sig)`: to a thread of process 1.
pub fn tgkill(a: &Args) -> SysResult {
    let (tgid, tid, sig) = (a.int(0), a.int(1), a.int(2));
    if tgid <= 0 || tid <= 0 {
        return Err(Errno::EINVAL);
    }
    signal::check_sig(sig)?;
    if tgid as u64 != PID {
        return Err(Errno::ESRCH);
    }
    signal::send_thread(tid as u32, sig, signal::SI_TKILL).map(|_| 0)
}

/// The `siginfo_t` a program hands `rt_sigqueueinfo`: `si_code` and the
/// two words after it (the rest is not kept).
fn user_info(addr: u64) -> Result<signal::Info, Errno> {
    let si: signal::SigInfo = umem::read(addr)?;
    let a = (si.si_pid as u32 as u64) | (u64::from(si.si_uid) << 32);
    Ok(signal::Info { code: si.si_code, a, b: si.rest[0] })
}

/// Whether a program may send `info` itself: not with a code the kernel
/// or `kill`/`tkill` would set (`si_code >= 0` or `SI_TKILL`) to another
/// process, as Linux rules; to itself anything goes.
fn may_queue(pid: i32, info: &signal::Info) -> Result<(), Errno> {
    if (info.code >= 0 || info.code == signal::SI_TKILL) && pid as u64 != PID {
        return Err(Errno::EPERM);
    }
    Ok(())
}

/// `rt_sigqueueinfo(pid, sig, info)` (musl's `sigqueue`): `sig` with the
/// program's `si_code`, `si_pid`/`si_uid` and `si_value` to the process
/// (the calling thread, as `kill`); real-time signals are queued, each
/// with its own information. `EAGAIN` when the queue is full.
pub fn rt_sigqueueinfo(a: &Args) -> SysResult {
    let (pid, sig) = (a.int(0), a.int(1));
    let info = user_info(a.u(2))?;
    signal::check_sig(sig)?;
    may_queue(pid, &info)?;
    if pid as u64 != PID {
        return Err(Errno::ESRCH);
    }
    signal::send_self_info(sig, info, true).map(|_| 0)
}

/// `rt_tgsigqueueinfo(tgid, tid, sig, info)`: as [`rt_sigqueueinfo`], to
/// thread `tid`.
pub fn rt_tgsigqueueinfo(a: &Args) -> SysResult {
    let (tgid, tid, sig) = (a.int(0), a.int(1), a.int(2));
    if tgid <= 0 || tid <= 0 {
        return Err(Errno::EINVAL);
    }
    let info = user_info(a.u(3))?;
    signal::check_sig(sig)?;
    may_queue(tgid, &info)?;
    if tgid as u64 != PID {
        return Err(Errno::ESRCH);
    }
    signal::send_thread_info(tid as u32, sig, info).map(|_| 0)
}

/// `rt_sigtimedwait(set, info, timeout, sigsetsize)` (musl's
/// `sigwaitinfo`, `sigtimedwait`, `sigwait`): takes the lowest pending
/// signal of `set` (its oldest queued information, written to `info`)
/// and returns its number, without running a handler. With none
/// pending, the signals of `set` are unblocked while the thread waits (so
/// that one sent to it ends the wait), up to `timeout` (`EAGAIN` when it
/// passes; a zero timeout only polls); a signal outside `set` that is not
/// blocked ends the wait with `EINTR` and is delivered. SIGKILL and
/// SIGSTOP cannot be waited for.
pub fn rt_sigtimedwait(a: &Args) -> SysResult {
    if a.u(3) != 8 {
        return Err(Errno::EINVAL);
    }
    let set = umem::read::<u64>(a.u(0))? & !signal::UNBLOCKABLE;
    let timeout: Option<shoal_time::sys::Timespec> = if a.u(2) != 0 { Some(umem::read(a.u(2))?) } else { None };
    let deadline = match timeout {
        Some(t) if t.tv_sec < 0 || !(0..1_000_000_000).contains(&t.tv_nsec) => return Err(Errno::EINVAL),
        Some(t) => Some(shoal_time::monotonic_ns().saturating_add((t.tv_sec as u64).saturating_mul(1_000_000_000)).saturating_add(t.tv_nsec as u64)),
        None => None,
    };
    let tid = shoal_sched::current_tid();
    let taken = |a: &Args| -> Result<Option<u64>, Errno> {
        match signal::with_signals(|s| signal::QUEUE.with(|q| s.take_from(q, tid, set))) {
            Some((sig, info)) => {
                if a.u(1) != 0 {
                    umem::write(a.u(1), info.siginfo(sig))?;
                }
                Ok(Some(sig as u64))
            }
            None => Ok(None),
        }
    };
    if let Some(sig) = taken(a)? {
        return Ok(sig);
    }
    if matches!(timeout, Some(t) if t.tv_sec == 0 && t.tv_nsec == 0) {
        return Err(Errno::EAGAIN);
    }
    let old = signal::with_signals(|s| {
        let m = s.mask;
        s.mask = m & !set;
        m
    });
    let r = match deadline {
        Some(d) => shoal_sched::sleep_until(d),
        None => Err(shoal_sched::wait_for_signal()),
    };
    signal::with_signals(|s| s.mask = old);
    if let Some(sig) = taken(a)? {
        return Ok(sig);
    }
    match r {
        Err(Errno::EINTR) => Err(Errno::EINTR),
        _ => Err(Errno::EAGAIN),
    }
}

static LIMITS: Global<Option<[Rlimit; NLIMITS]>> = Global::new(None);

/// The limits as they are (`None`: still the defaults; module `heal`).
/// Counts the changes of the limits (`prlimit64`, `setrlimit`): process's
/// log (module `heal`) copies them only when this moved.
pub(crate) static LIMIT_CHANGES: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

pub(crate) fn limits_now() -> Option<Option<[Rlimit; NLIMITS]>> {
    LIMITS.try_with(|l| *l)
}

/// Puts back limits after a reboot (module `heal`).
pub(crate) fn set_limits_now(v: Option<[Rlimit; NLIMITS]>) {
    LIMITS.with(|l| *l = v);
}

fn with_limits<R>(f: impl FnOnce(&mut [Rlimit; NLIMITS]) -> R) -> R {
    LIMITS.with(|l| {
        let t = l.get_or_insert_with(|| {
            let bi = shoal_plat::boot::info();
            limits::defaults(bi.mem_size, bi.stack_top.saturating_sub(bi.stack_base))
        });
        f(t)
    })
}

/// The soft limit of `resource` now (`RLIM_INFINITY` for an unknown one).
/// The components that enforce limits (mm, vfs) learn them through the
/// syscall table after `setrlimit`/`prlimit64`.
pub fn soft_limit(resource: usize) -> u64 {
    with_limits(|t| t.get(resource).map_or(limits::INF, |r| r.cur))
}

fn prlimit(pid: i32, resource: u32, new: u64, old: u64) -> SysResult {
    if pid != 0 && pid as u64 != PID {
        return Err(Errno::ESRCH);
    }
    let r = resource as usize;
    if r >= NLIMITS {
        return Err(Errno::EINVAL);
    }
    let n: Option<Rlimit> = if new != 0 { Some(umem::read(new)?) } else { None };
    if let Some(n) = n {
        limits::check(r, n)?;
    }
    if old != 0 {
        umem::write(old, with_limits(|t| t[r]))?;
    }
    if let Some(n) = n {
        with_limits(|t| t[r] = n);
        LIMIT_CHANGES.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
        crate::heal::changed();
    }
    Ok(0)
}

/// `prlimit64(pid, resource, new, old)`; see [`crate::limits`].
pub fn prlimit64(a: &Args) -> SysResult {
    prlimit(a.int(0), a.uint(1), a.u(2), a.u(3))
}

/// `getrlimit(resource, rlim)`.
pub fn getrlimit(a: &Args) -> SysResult {
    if a.u(1) == 0 {
        return Err(Errno::EFAULT);
    }
    prlimit(0, a.uint(0), 0, a.u(1))
}

/// `setrlimit(resource, rlim)`.
pub fn setrlimit(a: &Args) -> SysResult {
    if a.u(1) == 0 {
        return Err(Errno::EFAULT);
    }
    prlimit(0, a.uint(0), a.u(1), 0)
}

/// `struct rusage`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Rusage {
    /// User CPU time (seconds, microseconds).
    pub utime: [i64; 2],
    /// System CPU time.
    pub stime: [i64; 2],
    /// Maximum resident set size, KiB.
    pub maxrss: i64,
    /// The other counters (ixrss … nivcsw).
    pub rest: [i64; 13],
}

/// `getrusage(who, usage)`: user time is the CPU time of the instance from
/// the TSC (`shoal_time::cpu_ns`: time since boot minus time blocked in the
/// tender); system time is 0 (kernel code runs as part of the program);
/// `ru_maxrss` is the image plus the memory mm has handed out now (an
/// upper bound of what is resident). `RUSAGE_CHILDREN`: zeros (no children).
pub fn getrusage(a: &Args) -> SysResult {
    let mut r = Rusage::default();
    match a.int(0) {
        0 | 1 => {
            let ns = shoal_time::cpu_ns();
            r.utime = [(ns / 1_000_000_000) as i64, (ns % 1_000_000_000 / 1000) as i64];
            let (total, free) = shoal_mm::stats();
            let bi = shoal_plat::boot::info();
            let image = bi.image_end.saturating_sub(bi.image_start);
            r.maxrss = ((image + total - free) / 1024) as i64;
        }
        -1 => {}
        _ => return Err(Errno::EINVAL),
    }
    umem::write(a.u(1), r)?;
    Ok(0)
}

/// `times(buf)`: the instance's CPU time in clock ticks (`USER_HZ`, 100 a
/// second) as user time, as `getrusage` reports it (no children); `buf`
/// may be NULL. Returns the ticks of the monotonic clock (an arbitrary
/// point, as Linux's).
pub fn times(a: &Args) -> SysResult {
    const NS_PER_TICK: u64 = 10_000_000;
    if a.u(0) != 0 {
        let user = (shoal_time::cpu_ns() / NS_PER_TICK) as i64;
        umem::write(a.u(0), [user, 0i64, 0, 0])?;
    }
    Ok(shoal_time::monotonic_ns() / NS_PER_TICK)
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::sync::atomic::{AtomicI32, Ordering};

    fn args(v: [u64; 6]) -> Args {
        Args(v)
    }

    static GOT: AtomicI32 = AtomicI32::new(0);

    extern "C" fn handler(sig: i32) {
        GOT.store(sig, Ordering::SeqCst);
        // A handler may make system calls; the mask blocks `sig` meanwhile.
        let mut m = 0u64;
        let p = &mut m as *mut u64 as u64;
        assert_eq!(rt_sigprocmask(&args([0, 0, p, 8, 0, 0])), Ok(0));
        assert_eq!(m & signal::bit(sig), signal::bit(sig));
    }

    /// One test for the global signal state (tests run on several threads).
    #[test]
    fn signals_through_syscalls() {
        let _serial = crate::TEST_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        umem::set_bounds(1, u64::MAX);
        let act = KSigaction { handler: handler as extern "C" fn(i32) as usize as u64, flags: 0, restorer: 0, mask: 0 };
        let mut old = KSigaction::default();
        let (pa, po) = (&act as *const _ as u64, &mut old as *mut _ as u64);
        assert_eq!(rt_sigaction(&args([10, pa, po, 8, 0, 0])), Ok(0));
        assert_eq!(old.handler, signal::SIG_DFL);
        assert_eq!(rt_sigaction(&args([10, pa, po, 4, 0, 0])), Err(Errno::EINVAL));
        assert_eq!(rt_sigaction(&args([9, pa, 0, 8, 0, 0])), Err(Errno::EINVAL));
        assert_eq!(rt_sigaction(&args([65, 0, po, 8, 0, 0])), Err(Errno::EINVAL));
        // Delivered synchronously by kill to self.
        assert_eq!(kill(&args([1, 10, 0, 0, 0, 0])), Ok(0));
        assert_eq!(GOT.swap(0, Ordering::SeqCst), 10);
        // Blocked: pending until unblocked.
        let set = signal::bit(10);
        let ps = &set as *const u64 as u64;
        assert_eq!(rt_sigprocmask(&args([0, ps, 0, 8, 0, 0])), Ok(0));
        assert_eq!(tgkill(&args([1, 1, 10, 0, 0, 0])), Ok(0));
        assert_eq!(GOT.load(Ordering::SeqCst), 0);
        let mut pend = 0u64;
        assert_eq!(rt_sigpending(&args([&mut pend as *mut u64 as u64, 8, 0, 0, 0, 0])), Ok(0));
        assert_eq!(pend, set);
        let mut oldmask = 0u64;
        assert_eq!(rt_sigprocmask(&args([1, ps, &mut oldmask as *mut u64 as u64, 8, 0, 0])), Ok(0));
        assert_eq!(oldmask, set);
        assert_eq!(GOT.swap(0, Ordering::SeqCst), 10);
        assert_eq!(rt_sigprocmask(&args([7, ps, 0, 8, 0, 0])), Err(Errno::EINVAL));
        // Signal 0 and other targets.
        assert_eq!(kill(&args([1, 0, 0, 0, 0, 0])), Ok(0));
        assert_eq!(kill(&args([2, 0, 0, 0, 0, 0])), Err(Errno::ESRCH));
        assert_eq!(kill(&args([u64::MAX, 0, 0, 0, 0, 0])), Err(Errno::ESRCH));
        assert_eq!(kill(&args([1, 65, 0, 0, 0, 0])), Err(Errno::EINVAL));
        assert_eq!(tkill(&args([2, 0, 0, 0, 0, 0])), Err(Errno::ESRCH));
        assert_eq!(tkill(&args([0, 0, 0, 0, 0, 0])), Err(Errno::EINVAL));
        // Ignored: nothing happens.
        let ign = KSigaction { handler: signal::SIG_IGN, ..Default::default() };
        assert_eq!(rt_sigaction(&args([6, &ign as *const _ as u64, 0, 8, 0, 0])), Ok(0));
        assert_eq!(kill(&args([0, 6, 0, 0, 0, 0])), Ok(0));
        // SA_RESETHAND: handled once, then default.
        let once = KSigaction { handler: handler as extern "C" fn(i32) as usize as u64, flags: signal::SA_RESETHAND, ..Default::default() };
        assert_eq!(rt_sigaction(&args([12, &once as *const _ as u64, 0, 8, 0, 0])), Ok(0));
        assert_eq!(tkill(&args([1, 12, 0, 0, 0, 0])), Ok(0));
        assert_eq!(GOT.swap(0, Ordering::SeqCst), 12);
        assert_eq!(SIGNALS.with(|s| s.actions[11].handler), signal::SIG_DFL);
    }

    static ALT_SP: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);
    static ALT_FLAGS: AtomicI32 = AtomicI32::new(-1);

    extern "C" fn alt_handler(_sig: i32) {
        let here = 0u8;
        ALT_SP.store(&here as *const u8 as u64, Ordering::SeqCst);
        let mut old = StackT::default();
        assert_eq!(sigaltstack(&args([0, &mut old as *mut _ as u64, 0, 0, 0, 0])), Ok(0));
        ALT_FLAGS.store(old.ss_flags, Ordering::SeqCst);
        if old.ss_flags & signal::SS_ONSTACK != 0 {
            // No change while running on it.
            let again = StackT { ss_sp: 0x1000, ss_flags: 0, pad: 0, ss_size: 1 << 16 };
            assert_eq!(sigaltstack(&args([&again as *const _ as u64, 0, 0, 0, 0, 0])), Err(Errno::EPERM));
        }
    }

    #[test]
    fn sa_onstack_handlers_run_on_the_alternate_stack() {
        let _serial = crate::TEST_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        umem::set_bounds(1, u64::MAX);
        let buf = vec![0u8; 1 << 16];
        let (lo, hi) = (buf.as_ptr() as u64, buf.as_ptr() as u64 + (1 << 16));
        let ss = StackT { ss_sp: lo, ss_flags: 0, pad: 0, ss_size: 1 << 16 };
        assert_eq!(sigaltstack(&args([&ss as *const _ as u64, 0, 0, 0, 0, 0])), Ok(0));
        let act = KSigaction { handler: alt_handler as extern "C" fn(i32) as usize as u64, flags: signal::SA_ONSTACK, restorer: 0, mask: 0 };
        assert_eq!(rt_sigaction(&args([14, &act as *const _ as u64, 0, 8, 0, 0])), Ok(0));
        assert_eq!(kill(&args([1, 14, 0, 0, 0, 0])), Ok(0));
        let sp = ALT_SP.load(Ordering::SeqCst);
        assert!(sp > lo && sp < hi, "handler ran at {sp:#x}, not in [{lo:#x}, {hi:#x})");
        assert_eq!(ALT_FLAGS.load(Ordering::SeqCst) & signal::SS_ONSTACK, signal::SS_ONSTACK);
        // Without SA_ONSTACK: the current stack.
        let act = KSigaction { flags: 0, ..act };
        assert_eq!(rt_sigaction(&args([14, &act as *const _ as u64, 0, 8, 0, 0])), Ok(0));
        assert_eq!(kill(&args([1, 14, 0, 0, 0, 0])), Ok(0));
        let sp = ALT_SP.load(Ordering::SeqCst);
        assert!(!(sp > lo && sp < hi));
        assert_eq!(ALT_FLAGS.load(Ordering::SeqCst) & signal::SS_ONSTACK, 0);
        let off = StackT { ss_sp: 0, ss_flags: signal::SS_DISABLE, pad: 0, ss_size: 0 };
        assert_eq!(sigaltstack(&args([&off as *const _ as u64, 0, 0, 0, 0, 0])), Ok(0));
        let dfl = KSigaction::default();
        assert_eq!(rt_sigaction(&args([14, &dfl as *const _ as u64, 0, 8, 0, 0])), Ok(0));
    }

    #[test]
    fn robust_list_get_and_set() {
        let _serial = crate::TEST_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        umem::set_bounds(1, u64::MAX);
        let head = [0u64; 3];
        let hp = head.as_ptr() as u64;
        assert_eq!(set_robust_list(&args([hp, 16, 0, 0, 0, 0])), Err(Errno::EINVAL));
        assert_eq!(set_robust_list(&args([hp, 24, 0, 0, 0, 0])), Ok(0));
        let (mut h, mut l) = (0u64, 0u64);
        let (ph, pl) = (&mut h as *mut u64 as u64, &mut l as *mut u64 as u64);
        assert_eq!(get_robust_list(&args([0, ph, pl, 0, 0, 0])), Ok(0));
        assert_eq!((h, l), (hp, 24));
        let me = shoal_sched::current_tid() as u64;
        assert_eq!(get_robust_list(&args([me, ph, pl, 0, 0, 0])), Ok(0));
        assert_eq!(get_robust_list(&args([9999, ph, pl, 0, 0, 0])), Err(Errno::ESRCH));
        assert_eq!(get_robust_list(&args([u64::MAX, ph, pl, 0, 0, 0])), Err(Errno::ESRCH));
        assert_eq!(set_robust_list(&args([0, 24, 0, 0, 0, 0])), Ok(0));
    }

    #[test]
    fn prctl_names_the_calling_thread() {
        let _serial = crate::TEST_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        umem::set_bounds(1, u64::MAX);
        let mut out = [0xffu8; 16];
        let op = out.as_mut_ptr() as u64;
        let short = b"bio_aof\0";
        assert_eq!(prctl(&args([15, short.as_ptr() as u64, 0, 0, 0, 0])), Ok(0));
        assert_eq!(prctl(&args([16, op, 0, 0, 0, 0])), Ok(0));
        assert_eq!(&out, b"bio_aof\0\0\0\0\0\0\0\0\0");
        // Longer names are cut to 15 bytes; the string past them is not read.
        let long = b"0123456789abcdefXYZ";
        assert_eq!(prctl(&args([15, long.as_ptr() as u64, 0, 0, 0, 0])), Ok(0));
        assert_eq!(prctl(&args([16, op, 0, 0, 0, 0])), Ok(0));
        assert_eq!(&out, b"0123456789abcde\0");
        assert_eq!(prctl(&args([15, 0, 0, 0, 0, 0])), Err(Errno::EFAULT));
        assert_eq!(prctl(&args([16, 0, 0, 0, 0, 0])), Err(Errno::EFAULT));
        assert_eq!(prctl(&args([41, 1, 0, 0, 0, 0])), Err(Errno::EINVAL));
        assert_eq!(prctl(&args([-1i64 as u64, 0, 0, 0, 0, 0])), Err(Errno::EINVAL));
    }

    #[test]
    fn sigaltstack_rules() {
        let _serial = crate::TEST_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        umem::set_bounds(1, u64::MAX);
        let small = StackT { ss_sp: 0x1000, ss_flags: 0, pad: 0, ss_size: 100 };
        assert_eq!(sigaltstack(&args([&small as *const _ as u64, 0, 0, 0, 0, 0])), Err(Errno::ENOMEM));
        let bad = StackT { ss_sp: 0x1000, ss_flags: 1, pad: 0, ss_size: 1 << 16 };
        assert_eq!(sigaltstack(&args([&bad as *const _ as u64, 0, 0, 0, 0, 0])), Err(Errno::EINVAL));
    }

    #[test]
    fn limits_syscalls() {
        let _serial = crate::TEST_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        umem::set_bounds(1, u64::MAX);
        let mut r = Rlimit { cur: 0, max: 0 };
        let p = &mut r as *mut Rlimit as u64;
        assert_eq!(getrlimit(&args([7, p, 0, 0, 0, 0])), Ok(0));
        assert_eq!(r, Rlimit { cur: 1024, max: 4096 });
        let n = Rlimit { cur: 100, max: 4096 };
        assert_eq!(prlimit64(&args([0, 7, &n as *const _ as u64, p, 0, 0])), Ok(0));
        assert_eq!(r.cur, 1024, "old value returned");
        assert_eq!(getrlimit(&args([7, p, 0, 0, 0, 0])), Ok(0));
        assert_eq!(r.cur, 100);
        assert_eq!(getrlimit(&args([16, p, 0, 0, 0, 0])), Err(Errno::EINVAL));
        // RLIMIT_STACK: hard unlimited, so the soft limit may go past 8 MiB.
        assert_eq!(getrlimit(&args([3, p, 0, 0, 0, 0])), Ok(0));
        assert_eq!(r.max, limits::INF);
        let big = Rlimit { cur: 64 << 20, max: limits::INF };
        assert_eq!(setrlimit(&args([3, &big as *const _ as u64, 0, 0, 0, 0])), Ok(0));
        assert_eq!(getrlimit(&args([3, p, 0, 0, 0, 0])), Ok(0));
        assert_eq!(r, big);
        assert_eq!(soft_limit(3), 64 << 20);
        let bad = Rlimit { cur: 32 << 20, max: 16 << 20 };
        assert_eq!(setrlimit(&args([3, &bad as *const _ as u64, 0, 0, 0, 0])), Err(Errno::EINVAL));
        assert_eq!(prlimit64(&args([5, 7, 0, p, 0, 0])), Err(Errno::ESRCH));
        assert_eq!(core::mem::size_of::<Rusage>(), 144);
        let mut ru = Rusage::default();
        assert_eq!(getrusage(&args([u64::MAX, &mut ru as *mut _ as u64, 0, 0, 0, 0])), Ok(0));
        assert_eq!(getrusage(&args([5, &mut ru as *mut _ as u64, 0, 0, 0, 0])), Err(Errno::EINVAL));
    }
}
