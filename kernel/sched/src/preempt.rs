//! Preemption on a timer tick (docs/architecture.md "Preemption on a timer tick"): the words the kernel
//! shares with the tender ([`shoal_abi::PreemptArea`]) and the kernel's
//! side of the protocol.
//!
//! Threads switch cooperatively inside the kernel (see the crate
//! documentation); what a tick adds is a switch away from a thread that
//! runs application or libc code and never enters the kernel (a spin-wait,
//! a compute loop). The kernel is not reentrant, so a tick never switches
//! inside it:
//!
//! - [`enter`] and [`leave`] keep `in_kernel` true exactly while the vCPU
//!   runs kernel code on behalf of the program (every entry from the
//!   program: `__shoal_syscall`, `__shoal_clone`, `__shoal_unmapself`, the
//!   preemption entry; every way back: the return of those, a new thread's
//!   first instruction, a signal handler the kernel calls). A switch inside
//!   the kernel goes from kernel code to kernel code, so the word stays set.
//! - A tick that finds `in_kernel` set only sets `pending`; the system call
//!   returning takes it ([`take_pending`]) and yields then.
//! - A tick that finds it clear (and the vCPU in guest code) makes the
//!   vCPU continue at the kernel's preemption entry (`shoal-syscall`),
//!   which saves every register and the FPU/SSE/AVX state, yields, and
//!   resumes the interrupted code as it was.
//!
//! No cost while one thread runs alone: after every change of the thread
//! table the kernel publishes how many threads want the vCPU
//! ([`contenders`], [`publish`]): the runnable ones, plus one while a lone
//! running thread has a deadline to be woken at (a sleeper's, `alarm`'s);
//! when that goes above one and the tick is not armed, one `Preempt`
//! hypercall arms it. The tender disarms it at the first tick
//! that finds at most one runnable thread, so a program that never has two
//! runnable threads never gets a tick, and one that had them gets at most
//! one more.

use core::sync::atomic::{compiler_fence, AtomicBool, AtomicU64, Ordering};

/// [`shoal_abi::PreemptArea`] as atomics (same layout: 8-byte words).
#[repr(C)]
pub struct Area {
    /// See [`shoal_abi::PreemptArea::in_kernel`].
    pub in_kernel: AtomicU64,
    /// See [`shoal_abi::PreemptArea::pending`].
    pub pending: AtomicU64,
    /// See [`shoal_abi::PreemptArea::resume_rip`].
    pub resume_rip: AtomicU64,
    /// See [`shoal_abi::PreemptArea::runnable`].
    pub runnable: AtomicU64,
    /// See [`shoal_abi::PreemptArea::armed`].
    pub armed: AtomicU64,
    /// See [`shoal_abi::PreemptArea::ticks`].
    pub ticks: AtomicU64,
    /// See [`shoal_abi::PreemptArea::watch`].
    pub watch: AtomicU64,
    /// See [`shoal_abi::PreemptArea::watch_seq`].
    pub watch_seq: AtomicU64,
    /// See [`shoal_abi::PreemptArea::wake`].
    pub wake: AtomicU64,
}

const _: () = assert!(core::mem::size_of::<Area>() == core::mem::size_of::<shoal_abi::PreemptArea>());
const _: () = assert!(core::mem::offset_of!(Area, resume_rip) as u64 == shoal_abi::PREEMPT_RESUME_RIP_OFFSET);

/// The area the tender reads and writes (registered at boot).
#[no_mangle]
pub static SHOAL_PREEMPT_AREA: Area = Area {
    in_kernel: AtomicU64::new(0),
    pending: AtomicU64::new(0),
    resume_rip: AtomicU64::new(0),
    // 1 (the main thread) is set by `init`, before the tender sees the
    // area: an all-zero area lies in sched's `.bss` instead of giving
    // sched's `.data` a page of its own in every instance.
    runnable: AtomicU64::new(0),
    armed: AtomicU64::new(0),
    ticks: AtomicU64::new(0),
    watch: AtomicU64::new(0),
    watch_seq: AtomicU64::new(0),
    wake: AtomicU64::new(0),
};

/// Whether the tender took the area (and so can preempt).
static REGISTERED: AtomicBool = AtomicBool::new(false);
/// The tick period asked for (ns).
#[cfg_attr(test, allow(dead_code))]
static TICK_NS: AtomicU64 = AtomicU64::new(shoal_abi::PREEMPT_TICK_NS);

/// Registers the area and the preemption entry `entry` with the tender (at
/// boot). A tender that refuses leaves the instance cooperative, as before.
#[cfg(not(test))]
pub fn init(entry: u64) {
    let area = core::ptr::addr_of!(SHOAL_PREEMPT_AREA) as u64;
    // The main thread runs (unless a count was published already).
    let _ = SHOAL_PREEMPT_AREA.runnable.compare_exchange(0, 1, Ordering::Relaxed, Ordering::Relaxed);
    let r = shoal_plat::hypercall::preempt(shoal_abi::PREEMPT_REGISTER, area, entry, 0);
    REGISTERED.store(r == 0, Ordering::Relaxed);
    if r == 0 {
        shoal_plat::console::set_wake(request_wake);
    }
}

/// The stdout buffer holds lines back (`shoal_plat::console`): sets
/// `wake` so that the next tick interrupts the program even when it runs
/// alone, and arms one tick `delay_ns` from now unless the preemption
/// tick runs (it comes anyway, and a tick that finds one thread disarms
/// only after seeing `wake`). False when no tick can come.
#[cfg(not(test))]
fn request_wake(delay_ns: u64) -> bool {
    let a = &SHOAL_PREEMPT_AREA;
    if !registered() {
        return false;
    }
    a.wake.store(1, Ordering::SeqCst);
    let armed = a.armed.load(Ordering::SeqCst);
    if armed == shoal_abi::PREEMPT_ARMED_TICK || armed == shoal_abi::PREEMPT_ARMED_WAKE {
        return true;
    }
    if shoal_plat::hypercall::preempt_wake(delay_ns) == 0 {
        return true;
    }
    a.wake.store(0, Ordering::SeqCst);
    false
}

/// Takes the wake the stdout buffer asked for (`true`: write the held
/// lines out now, `shoal_plat::console::flush_held`).
pub fn take_wake() -> bool {
    SHOAL_PREEMPT_AREA.wake.load(Ordering::Relaxed) != 0 && SHOAL_PREEMPT_AREA.wake.swap(0, Ordering::SeqCst) != 0
}

/// Whether ticks can come (the tender registered the area).
pub fn registered() -> bool {
    REGISTERED.load(Ordering::Relaxed)
}

// Ordering: the tender reads and writes the area only while this vCPU is
// interrupted (spt: a signal handler on this very thread; hvt: after a VM
// exit, which is serialising), never concurrently from another CPU. So
// plain (relaxed) stores and loads are enough, with compiler fences that
// keep the kernel's own memory accesses on the right side of them: a
// sequentially consistent store (`xchg`) on every system call cost about
// 20 ns each way.

/// The vCPU enters kernel code: no preemption until [`leave`].
#[inline]
pub fn enter() {
    SHOAL_PREEMPT_AREA.in_kernel.store(1, Ordering::Relaxed);
    compiler_fence(Ordering::SeqCst);
}

/// The vCPU goes back to the program's code: ticks may switch threads.
#[inline]
pub fn leave() {
    compiler_fence(Ordering::SeqCst);
    SHOAL_PREEMPT_AREA.in_kernel.store(0, Ordering::Relaxed);
}

/// Whether the vCPU is marked as running kernel code.
pub fn in_kernel() -> bool {
    SHOAL_PREEMPT_AREA.in_kernel.load(Ordering::Relaxed) != 0
}

/// Takes the tick that landed while the kernel ran (`true`: yield now).
/// Inline: every system call's way out asks (the kernel is built
/// without cross-crate LTO).
#[inline]
pub fn take_pending() -> bool {
    SHOAL_PREEMPT_AREA.pending.load(Ordering::Relaxed) != 0 && SHOAL_PREEMPT_AREA.pending.swap(0, Ordering::SeqCst) != 0
}

/// Whether a tick landed while the kernel ran (without taking it).
#[inline]
pub fn pending() -> bool {
    compiler_fence(Ordering::SeqCst);
    SHOAL_PREEMPT_AREA.pending.load(Ordering::Relaxed) != 0
}

/// Ticks that reached the instance so far (the tender counts them).
pub fn ticks() -> u64 {
    SHOAL_PREEMPT_AREA.ticks.load(Ordering::Relaxed)
}

/// How many threads want the vCPU, as the tender reads it: the `runnable`
/// ones, plus one when a single thread runs while a `deadline` is pending
/// (a sleeping thread's, the interval timer's `SIGALRM`): a thread that
/// computes without system calls would otherwise never let the kernel see
/// the deadline pass, and a thread spin-waiting for a sleeping one would
/// wait forever. With no runnable thread the idle wait sleeps until the
/// deadline itself.
pub fn contenders(runnable: usize, deadline: bool) -> usize {
    runnable + usize::from(runnable == 1 && deadline)
}

/// What the kernel must do after `runnable` threads became runnable: arm
/// the tick when there is more than one and it is not armed. Pure, for the
/// unit tests; [`publish`] acts on it.
pub fn must_arm(runnable: u64, armed: bool, registered: bool) -> bool {
    registered && runnable > 1 && !armed
}

/// Publishes the number of runnable threads (the running one included)
/// and arms the tick if it is needed and off. The store comes before the
/// load of `armed`: a tick that disarms runs between two instructions of
/// this thread (spt) or while the vCPU is stopped (hvt), so either it saw
/// the new count and kept the tick, or this load sees it disarmed.
pub fn publish(runnable: usize) {
    let a = &SHOAL_PREEMPT_AREA;
    if a.runnable.load(Ordering::Relaxed) == runnable as u64 {
        return;
    }
    a.runnable.store(runnable as u64, Ordering::SeqCst);
    // A tick at the watchdog's period only is not a preemption tick.
    if must_arm(runnable as u64, a.armed.load(Ordering::SeqCst) == shoal_abi::PREEMPT_ARMED_TICK, registered()) {
        arm();
    }
}

/// A gated call into rebootable component `c` begins (the hang
/// watchdog; [`shoal_abi::PreemptArea::watch`]): numbers it and
/// publishes it; when the tick is off, one `Preempt`/`PREEMPT_WATCH`
/// hypercall has the tender run it at the watchdog's period. Cheap
/// otherwise: two stores and a load (the tender reads the words only
/// while this vCPU is interrupted; see the ordering note above).
#[inline]
pub fn watch_begin(c: u64) {
    let a = &SHOAL_PREEMPT_AREA;
    a.watch_seq.store(a.watch_seq.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
    a.watch.store(c, Ordering::Relaxed);
    compiler_fence(Ordering::SeqCst);
    if a.armed.load(Ordering::Relaxed) == 0 && registered() && !WATCH_REFUSED.load(Ordering::Relaxed) {
        arm_watch();
    }
}

/// The gated call [`watch_begin`] announced has ended (or was abandoned).
#[inline]
pub fn watch_end() {
    compiler_fence(Ordering::SeqCst);
    SHOAL_PREEMPT_AREA.watch.store(0, Ordering::Relaxed);
}

/// The component of the gated call being watched (0: none).
#[inline]
pub fn watching() -> u64 {
    SHOAL_PREEMPT_AREA.watch.load(Ordering::Relaxed)
}

/// The tender refused `PREEMPT_WATCH` once: not asked again.
static WATCH_REFUSED: AtomicBool = AtomicBool::new(false);

/// The running thread blocks (a switch, the idle wait): takes the gated
/// call in progress out of the watchdog's sight and returns it (0: none),
/// for [`watch_resume`] when this thread runs again. A blocked call is not
/// a hang, and the thread switched to is not in it.
#[inline]
pub fn watch_pause() -> u64 {
    let w = SHOAL_PREEMPT_AREA.watch.load(Ordering::Relaxed);
    if w != 0 {
        watch_end();
    }
    w
}

/// The thread runs again: its gated call (if [`watch_pause`] returned one)
/// is watched again, as a new call (its age starts afresh).
#[inline]
pub fn watch_resume(w: u64) {
    if w != 0 {
        watch_begin(w);
    }
}

#[cfg(not(test))]
fn arm_watch() {
    // A tender that refuses leaves calls unwatched (hangs are not
    // detected), nothing else.
    if shoal_plat::hypercall::preempt(shoal_abi::PREEMPT_WATCH, 0, 0, 0) != 0 {
        WATCH_REFUSED.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
fn arm_watch() {
    SHOAL_PREEMPT_AREA.armed.store(shoal_abi::PREEMPT_ARMED_WATCHDOG, Ordering::SeqCst);
}

#[cfg(not(test))]
fn arm() {
    let r = shoal_plat::hypercall::preempt(shoal_abi::PREEMPT_ARM, 0, 0, TICK_NS.load(Ordering::Relaxed));
    if r != 0 {
        // A tender that cannot arm its timer: stay cooperative.
        REGISTERED.store(false, Ordering::Relaxed);
    }
}

#[cfg(test)]
fn arm() {
    ARMS.fetch_add(1, Ordering::SeqCst);
    SHOAL_PREEMPT_AREA.armed.store(1, Ordering::SeqCst);
}

/// Arms counted by the unit tests' stand-in tender.
#[cfg(test)]
pub static ARMS: AtomicU64 = AtomicU64::new(0);

/// Unit tests stand in for a tender that registered the area.
#[cfg(test)]
pub fn register_for_tests() {
    REGISTERED.store(true, Ordering::SeqCst);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tick_is_armed_only_for_more_than_one_runnable_thread() {
        assert!(!must_arm(1, false, true), "one thread alone: no tick");
        assert!(!must_arm(0, false, true), "all blocked: no tick");
        assert!(must_arm(2, false, true));
        assert!(!must_arm(3, true, true), "already armed: no hypercall");
        assert!(!must_arm(2, false, false), "a tender without preemption");
    }

    #[test]
    fn publishing_arms_once_per_crossing_above_one() {
        register_for_tests();
        let a = &SHOAL_PREEMPT_AREA;
        let arms = || ARMS.load(Ordering::SeqCst);
        publish(1);
        let n = arms();
        publish(2);
        assert_eq!(arms(), n + 1, "a second runnable thread arms the tick");
        assert_eq!(a.runnable.load(Ordering::SeqCst), 2);
        publish(3);
        publish(2);
        assert_eq!(arms(), n + 1, "armed: no more hypercalls");
        // The tender's tick found one runnable thread and disarmed.
        publish(1);
        a.armed.store(0, Ordering::SeqCst);
        assert_eq!(arms(), n + 1);
        publish(2);
        assert_eq!(arms(), n + 2, "armed again at the next crossing");
        publish(1);
    }

    #[test]
    fn a_pending_deadline_counts_for_a_lone_running_thread() {
        assert_eq!(contenders(1, false), 1, "alone, nothing to wait for: no tick");
        assert_eq!(contenders(1, true), 2, "alone beside a sleeper: ticks, to wake it");
        assert_eq!(contenders(0, true), 0, "idle: the idle wait sleeps to the deadline");
        assert_eq!(contenders(2, true), 2);
    }

    #[test]
    fn a_watchdog_tick_does_not_count_as_a_preemption_tick() {
        register_for_tests();
        let a = &SHOAL_PREEMPT_AREA;
        publish(1);
        a.armed.store(0, Ordering::SeqCst);
        let seq = a.watch_seq.load(Ordering::SeqCst);
        watch_begin(6);
        assert_eq!(a.watch.load(Ordering::SeqCst), 6);
        assert_eq!(a.watch_seq.load(Ordering::SeqCst), seq + 1);
        assert_eq!(a.armed.load(Ordering::SeqCst), shoal_abi::PREEMPT_ARMED_WATCHDOG, "armed for the watchdog");
        // Blocking inside the call hides it; running again shows it as a
        // new call.
        assert_eq!(watch_pause(), 6);
        assert_eq!(a.watch.load(Ordering::SeqCst), 0);
        assert_eq!(watch_pause(), 0, "the thread switched to is in no call");
        watch_resume(0);
        assert_eq!(a.watch.load(Ordering::SeqCst), 0);
        watch_resume(6);
        assert_eq!(a.watch.load(Ordering::SeqCst), 6);
        assert_eq!(a.watch_seq.load(Ordering::SeqCst), seq + 2, "a new call: its age starts afresh");
        watch_end();
        assert_eq!(a.watch.load(Ordering::SeqCst), 0);
        // A second thread must still get the preemption tick.
        let n = ARMS.load(Ordering::SeqCst);
        publish(2);
        assert_eq!(ARMS.load(Ordering::SeqCst), n + 1);
        publish(1);
        a.armed.store(0, Ordering::SeqCst);
    }

    #[test]
    fn in_kernel_and_pending_words() {
        enter();
        assert!(in_kernel());
        leave();
        assert!(!in_kernel());
        assert!(!take_pending());
        SHOAL_PREEMPT_AREA.pending.store(1, Ordering::SeqCst);
        assert!(pending());
        assert!(take_pending());
        assert!(!take_pending(), "taken once");
    }
}
