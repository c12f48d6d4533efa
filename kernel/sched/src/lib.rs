//! Kernel component `sched` (docs/design.md "Components and recovery"): threads, futexes, round-robin
//! scheduling on one vCPU, cooperative inside the kernel and preemptive on
//! a timer tick in the program's code ([`preempt`]).
//!
//! **Threads.** musl's `pthread_create` calls [`__shoal_clone`] (instead of
//! the `clone` system call) with `CLONE_VM|CLONE_THREAD|…`; the kernel
//! makes a thread control block ([`table::Tcb`]: tid, saved stack pointer,
//! state, `clear_child_tid`, robust list, signal mask and pending set) and
//! builds the new thread's first frame on the stack musl gave it, so that
//! the first switch to it enters `func(arg)` with FS base = `tls`. When
//! `func` returns, the thread exits with its return value as `SYS_exit`
//! does. The creator keeps running (cooperative scheduling).
//!
//! **Scheduling.** One thread runs until it blocks (futex wait, sleep),
//! yields (`sched_yield`) or exits, or until a preemption tick finds it in
//! its own code while another thread is runnable (module [`preempt`]: the
//! tick then yields for it); then the next runnable thread runs, round
//! robin. A switch ([`switch`]) saves the callee-saved registers,
//! the FS and GS bases (`rdfsbase`/`wrfsbase`: thread-local storage; GS
//! holds a Linux executable's per-thread kernel stack, see `shoal_syscall::exec`),
//! MXCSR and the x87 control word on the old thread's stack and restores
//! the new one's. Kernel code runs on the stack of the thread that called
//! it, so a blocked thread's kernel frames stay on its own stack. No
//! [`shoal_plat::Global`] borrow is ever held across a switch: the table
//! is consulted, released, then the switch happens.
//!
//! **Idle and deadlock.** When no thread is runnable but some wait with a
//! deadline, the vCPU blocks in the tender's `poll` hypercall until the
//! earliest deadline (idle costs no CPU), then expired waiters wake
//! (`ETIMEDOUT`). When no thread is runnable and no deadline is pending,
//! nothing can ever wake any thread (there are no asynchronous events yet):
//! the kernel prints `shoal: deadlock: all N threads are blocked and nothing
//! can wake them` (`the only thread is blocked…` for one) and stops the
//! instance with status [`DEADLOCK_STATUS`] (255, the status with which
//! shoal stops an instance it cannot let continue), where Linux would hang
//! forever.
//!
//! **Exit.** `SYS_exit` of a thread that is not the last one stores 0 to
//! its `clear_child_tid` (musl: `&__thread_list_lock`) and wakes one waiter
//! there, frees the TCB and switches away for good. A detached thread's
//! stack is freed by [`__shoal_unmapself`] *after* the switch: the next
//! thread to run unmaps it (the exiting thread cannot free the stack it
//! runs on). The exit of the last thread, and `exit_group`, end the
//! instance. An exiting thread's robust list is walked first and the PI
//! futexes it owned are handed on (module [`pi`]).
//!
//! **Signals** are per-thread only in their mask and pending set (kept
//! here, used by `process`); actions are per-process. A signal sent to a
//! blocked thread that does not block it wakes the thread (`EINTR`) and is
//! delivered when that thread returns from its system call — this is how
//! `pthread_cancel` reaches a thread waiting at a cancellation point.
#![cfg_attr(not(test), no_std)]

extern crate alloc;

pub mod itimer;
pub mod pi;
pub mod preempt;
pub mod sys;
pub mod table;

use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
use shoal_plat::{umem, Errno, Global};
use table::{Block, Pick, Table, Wake};

/// The exit status of an instance stopped for a deadlock.
pub const DEADLOCK_STATUS: i64 = 255;

// A `ZeroGlobal`: `Table::new()` holds `Vec::new()`s (dangling, non-null
// pointers), which put sched's `.data` on a page of its own.
static TABLE: shoal_plat::ZeroGlobal<Table> = shoal_plat::ZeroGlobal::new();

/// Runs `f` on the thread table, then publishes the number of runnable
/// threads for the tick ([`preempt::publish`]: arms it when that goes
/// above one). Every access that can change a thread's state goes
/// through here; plain reads (run on every system call) do not.
pub(crate) fn table<R>(f: impl FnOnce(&mut Table) -> R) -> R {
    let (r, n, d) = TABLE.with(|t| {
        let r = f(t);
        (r, t.runnable(), t.has_deadline())
    });
    preempt::publish(preempt::contenders(n, d || itimer::deadline().is_some()));
    r
}

/// Publishes the count again after something the table does not hold
/// changed it (the interval timer was set).
pub(crate) fn republish() {
    table(|_| ());
}
/// A detached thread's stack `(base, size)` to free after the switch away
/// from it.
static PENDING_UNMAP: Global<Option<(u64, u64)>> = Global::new(None);
/// An exited thread's kernel stack `(base, size)` to free after the switch
/// away from it (an executable's threads have one: `shoal_syscall::exec`).
static PENDING_KSTACK: Global<Option<(u64, u64)>> = Global::new(None);
/// Finds the running thread's own kernel stack `(base, size)`, if any.
pub type KernelStackOf = fn() -> Option<(u64, u64)>;

/// Says which kernel stack the running thread has (registered once by
/// the system-call layer for an executable).
static KSTACK_OF: Global<Option<KernelStackOf>> = Global::new(None);

/// Registers how to find the running thread's own kernel stack, freed
/// after it exits.
pub fn set_kernel_stack_of(f: KernelStackOf) {
    KSTACK_OF.with(|k| *k = Some(f));
}

/// Where the switch saves the stack pointer of a thread that has exited.
static DEAD_RSP: AtomicU64 = AtomicU64::new(0);

#[cfg(all(target_arch = "x86_64", not(test)))]
core::arch::global_asm!(
    // shoal_sched_switch(save: *mut u64 (rdi), next_rsp: u64 (rsi))
    ".section .text.shoal_sched_switch,\"ax\",@progbits",
    ".globl shoal_sched_switch",
    ".type shoal_sched_switch,@function",
    "shoal_sched_switch:",
    "    push rbp",
    "    push rbx",
    "    push r12",
    "    push r13",
    "    push r14",
    "    push r15",
    "    sub rsp, 32",
    "    stmxcsr dword ptr [rsp]",
    "    fnstcw word ptr [rsp + 4]",
    "    rdfsbase rax",
    "    mov qword ptr [rsp + 8], rax",
    "    rdgsbase rax",
    "    mov qword ptr [rsp + 16], rax",
    "    mov qword ptr [rdi], rsp",
    "    mov rsp, rsi",
    "    mov rax, qword ptr [rsp + 8]",
    "    wrfsbase rax",
    "    mov rax, qword ptr [rsp + 16]",
    "    wrgsbase rax",
    "    ldmxcsr dword ptr [rsp]",
    "    fldcw word ptr [rsp + 4]",
    "    add rsp, 32",
    "    pop r15",
    "    pop r14",
    "    pop r13",
    "    pop r12",
    "    pop rbx",
    "    pop rbp",
    "    ret",
    ".size shoal_sched_switch, . - shoal_sched_switch",
    // A new thread's first switch returns here with r12 = func, r13 = arg
    // and rsp 16-byte aligned.
    ".globl shoal_sched_thread_start",
    ".type shoal_sched_thread_start,@function",
    "shoal_sched_thread_start:",
    "    call shoal_sched_enter_thread",
    "    mov rdi, r13",
    "    xor ebp, ebp",
    "    call r12",
    "    mov edi, eax",
    "    call shoal_sched_thread_return",
    "    ud2",
    ".size shoal_sched_thread_start, . - shoal_sched_thread_start",
);

#[cfg(not(test))]
extern "C" {
    fn shoal_sched_switch(save: *mut u64, next_rsp: u64);
    fn shoal_sched_thread_start();
}

/// Switches the vCPU to the thread whose saved stack pointer is
/// `next_rsp`, saving the current one's at `save`.
///
/// # Safety
/// `save` must be writable; `next_rsp` must be a stack pointer saved by a
/// switch, or a first frame built by [`__shoal_clone`].
#[cfg(not(test))]
unsafe fn switch(save: *mut u64, next_rsp: u64) {
    // SAFETY: the caller's contract.
    unsafe { shoal_sched_switch(save, next_rsp) }
}

#[cfg(test)]
unsafe fn switch(_save: *mut u64, _next_rsp: u64) {
    panic!("context switch in a unit test");
}

/// Runs right after every switch, in the thread switched to: frees the
/// stack of a detached thread that has just exited.
#[no_mangle]
pub extern "C" fn shoal_sched_after_switch() {
    if let Some((base, size)) = PENDING_UNMAP.with(|p| p.take()) {
        let _ = shoal_mm::unmap(base, size);
    }
    if let Some((base, size)) = PENDING_KSTACK.with(|p| p.take()) {
        shoal_mm::free_kernel_pages(base, size);
    }
}

/// A new thread's first code after its first switch: what follows the
/// switch, then the vCPU leaves the kernel for the thread's `func`
/// (preemptible from there on).
#[no_mangle]
pub extern "C" fn shoal_sched_enter_thread() {
    shoal_sched_after_switch();
    preempt::leave();
}

/// Where a thread's `func` returns to: exits the thread with its value.
#[no_mangle]
pub extern "C" fn shoal_sched_thread_return(status: i32) -> ! {
    preempt::enter();
    exit_thread(status)
}

/// What a thread keeps of another component's across a switch: taken
/// right before the switch (and cleared for the thread switched to), put
/// back when the thread runs again. recover registers its armed gate
/// (the gate's saved context, armed word and current component).
pub type SwitchHooks = (fn() -> [u64; 10], fn([u64; 10]));

static SWITCH_HOOKS: Global<Option<SwitchHooks>> = Global::new(None);

/// Registers the [`SwitchHooks`] (once, at boot).
pub fn set_switch_hooks(h: SwitchHooks) {
    SWITCH_HOOKS.with(|s| *s = Some(h));
}

/// Gives up the vCPU after the running thread blocked, yielded or exited
/// (already recorded in the table); returns when this thread runs again.
/// A gated call that blocks here is not running meanwhile: the hang
/// watchdog must neither age it nor see it in the thread switched to
/// ([`preempt::watch_pause`]).
fn reschedule() {
    let watched = preempt::watch_pause();
    reschedule_now();
    preempt::watch_resume(watched);
}

fn reschedule_now() {
    // Whether the deadlines were just expired (after an idle wait): then
    // the loop does not read the clock again at once (a busy server's
    // every request comes through here).
    let mut expired = false;
    loop {
        if !core::mem::take(&mut expired) {
            if let Some(d) = table(|t| t.next_deadline()) {
                let now = shoal_time::monotonic_ns();
                if now >= d {
                    table(|t| t.expire(now));
                }
            }
        }
        match table(|t| t.pick()) {
            Pick::Run { prev, next } => {
                if prev == Some(next) {
                    return;
                }
                let (save, rsp) = table(|t| {
                    let save = prev.and_then(|p| t.rsp_slot(p)).unwrap_or(DEAD_RSP.as_ptr());
                    (save, t.get(next).map_or(0, |n| n.rsp))
                });
                // What another component keeps per thread (recover's armed
                // gate) is put aside while others run.
                let kept = SWITCH_HOOKS.with(|h| *h).map(|(put_aside, back)| (put_aside(), back));
                // SAFETY: `save` is a boxed TCB's rsp slot (stable while the
                // thread exists) or the dead slot; `rsp` was saved by a
                // switch or built by __shoal_clone. No Global is borrowed.
                unsafe { switch(save, rsp) };
                if let Some((state, back)) = kept {
                    back(state);
                }
                shoal_sched_after_switch();
                return;
            }
            Pick::Idle(deadline) => {
                let deadline = itimer::deadline().map_or(deadline, |a| a.min(deadline));
                if !idle_wait(Some(deadline)) {
                    shoal_time::sleep_until(deadline);
                    raise_host_signals();
                }
                let now = shoal_time::monotonic_ns();
                table(|t| t.expire(now));
                expired = true;
            }
            // Threads that wait for something outside the guest (a host
            // socket) are not deadlocked: the idle wait blocks for it.
            // An armed interval timer will wake them (SIGALRM).
            Pick::Deadlock(n) => {
                let alarm = itimer::deadline();
                if !idle_wait(alarm) {
                    match alarm {
                        Some(d) => {
                            shoal_time::sleep_until(d);
                            raise_host_signals();
                        }
                        // A thread in pause() or sigsuspend() waits for a
                        // signal from outside, which the tender forwards
                        // (SIGTERM, SIGHUP): not a deadlock. The sleep ends
                        // when one arrives (or, idly, after an hour).
                        None if shoal_plat::hostsig::registered() && table(|t| t.awaits_signal()) => {
                            // Idle until a signal comes: freed memory goes
                            // back to the host first (IDLE_RELEASE_NS).
                            shoal_mm::release_free();
                            shoal_time::sleep_until(shoal_time::monotonic_ns().saturating_add(SIGNAL_WAIT_NS));
                            raise_host_signals();
                        }
                        None => deadlock(n),
                    }
                }
            }
        }
    }
}

/// How a component whose objects change outside the guest (the host
/// sockets of `net`) makes an idle instance wait for them: called when
/// every thread is blocked, with the nearest deadline (`None`: no thread
/// has one). It blocks in the tender until one of its objects may have
/// changed or the deadline passed, wakes the threads waiting for it, and
/// returns `true`; or returns `false` at once when it has nothing to wait
/// for (then the scheduler sleeps until the deadline, or reports the
/// deadlock).
pub type IdleWait = fn(Option<u64>) -> bool;

static IDLE_WAIT: Global<Option<IdleWait>> = Global::new(None);

/// Installs the idle wait (one; `net` at boot).
pub fn set_idle_wait(f: IdleWait) {
    IDLE_WAIT.with(|w| *w = Some(f));
}

/// Runs the idle wait now (a single-threaded instance that must block:
/// `shoal_vfs::wait`); `false` if there is none or it has nothing to wait
/// for.
pub fn idle_wait(deadline: Option<u64>) -> bool {
    let watched = preempt::watch_pause();
    let r = match IDLE_WAIT.with(|w| *w) {
        Some(f) => f(idle_deadline(deadline)),
        None => false,
    };
    preempt::watch_resume(watched);
    // A signal the tender forwarded is what may have ended the wait. One
    // raised here may have woken a thread, so the caller must pick again
    // rather than sleep on: the signal is taken out of the word now, and
    // `shoal_time::sleep_until` would not see it (a SIGTERM that came
    // while the idle path gave memory back slept to the program's 120 s
    // deadline).
    raise_host_signals() || r
}

/// How long an instance must have been idle before the memory its
/// program freed goes back to the host (`shoal_mm::release_free`).
///
/// mm keeps up to 2 MiB of freed pages resident so that a program that
/// frees and maps again at once (a thread stack per request, an
/// allocator's buffer) reuses them without a hypercall and host page
/// faults; an idle instance keeps them for nothing (an idle
/// function instance held a finished request thread's stack pages).
pub const IDLE_RELEASE_NS: u64 = 1_000_000_000;

/// The idle wait's start and the system-call epoch then, when it was cut
/// to [`IDLE_RELEASE_NS`] (0, 0: none).
static LONG_IDLE: (AtomicU64, AtomicU64) = (AtomicU64::new(0), AtomicU64::new(0));

/// The deadline an idle wait until `deadline` uses, giving freed memory
/// back first when the instance is idle for long: at once when the wait
/// lasts [`IDLE_RELEASE_NS`] or more, and for a wait without a deadline
/// when the previous one was cut to [`IDLE_RELEASE_NS`] and ran out with
/// no system call since (the callers loop: a wake without news is a wait
/// that reached its deadline).
fn idle_deadline(deadline: Option<u64>) -> Option<u64> {
    if shoal_mm::dirty_bytes() == 0 {
        return deadline;
    }
    let now = shoal_time::monotonic_ns();
    let soon = now.saturating_add(IDLE_RELEASE_NS);
    let epoch = shoal_plat::syscall_epoch();
    match deadline {
        Some(d) if d < soon => deadline,
        Some(_) => {
            shoal_mm::release_free();
            deadline
        }
        None => {
            let (cut, at) = (LONG_IDLE.0.load(Relaxed), LONG_IDLE.1.load(Relaxed));
            if cut != 0 && at == epoch && now >= cut {
                LONG_IDLE.0.store(0, Relaxed);
                shoal_mm::release_free();
                return None;
            }
            LONG_IDLE.0.store(soon, Relaxed);
            LONG_IDLE.1.store(epoch, Relaxed);
            Some(soon)
        }
    }
}

/// The idle wait in place of blocking the running thread, when no other
/// thread can run (a server whose other threads all sleep, as Redis's
/// background threads do): what a single-threaded instance does
/// (`shoal_vfs::wait`), with the earliest of `deadline`, the other
/// threads' deadlines and the interval timer; deadlines that passed are
/// expired afterwards, so their threads run when this one blocks next.
/// It skips the run queue's block, pick and wake-up (several table
/// passes and clock reads per wake-up of a busy server). `None` when
/// another thread is runnable or there is no idle wait: the caller blocks
/// on its wait queue as usual; otherwise whether a signal is now
/// deliverable (the call ends with `EINTR`). Out of line: vfs calls it
/// (see `shoal_recover::log`).
#[inline(never)]
pub fn idle_for(deadline: Option<u64>) -> Option<bool> {
    let (others, next) = TABLE.with(|t| (t.runnable() > 1, t.next_deadline()));
    if others {
        return None;
    }
    let d = [deadline, next, itimer::deadline()].into_iter().flatten().min();
    if !idle_wait(d) {
        return None;
    }
    if next.is_some() {
        let now = shoal_time::monotonic_ns();
        table(|t| t.expire(now));
    }
    Some(has_deliverable())
}

/// Raises the signals the tender forwarded (`shoal_plat::hostsig`) and the
/// interval timer's `SIGALRM` ([`itimer`]) in the process: each goes to the thread [`table::Table::process_signal_target`]
/// picks and, if that thread is blocked in a system call and does not
/// block the signal, interrupts it (`EINTR`); the syscall table delivers
/// it when the call returns. Called after every idle wait and system
/// call; returns whether it raised any (a thread may have woken).
pub fn raise_host_signals() -> bool {
    let mut bits = shoal_plat::hostsig::take();
    // The real-time interval timer's SIGALRM takes the same path.
    if itimer::deadline().is_some() && itimer::expired(shoal_time::monotonic_ns()) {
        bits |= 1 << (itimer::SIGALRM - 1);
    }
    if bits == 0 {
        return false;
    }
    for sig in 0..64 {
        let bit = 1u64 << sig;
        if bits & bit != 0 {
            let tid = TABLE.with(|t| t.process_signal_target(bit));
            let _ = post_signal(tid, bit);
        }
    }
    true
}

/// [`raise_host_signals`] on a system call's way out: inline, two loads
/// when no forwarded signal waits and no timer is armed (nearly every
/// call). For the system-call table only: inlined into a component, it
/// would tie the component's code bytes to this crate's addresses
/// (docs/versioning.md).
#[inline]
pub fn raise_host_signals_after_call() -> bool {
    if !shoal_plat::hostsig::pending_inline() && !itimer::armed() {
        return false;
    }
    raise_host_signals()
}

/// Reports that all `n` threads are blocked for good and stops the
/// instance with [`DEADLOCK_STATUS`].
pub fn deadlock(n: usize) -> ! {
    use core::fmt::Write;
    let mut e = shoal_plat::console::Stderr;
    let _ = if n == 1 {
        writeln!(e, "shoal: deadlock: the only thread is blocked and nothing can wake it")
    } else {
        writeln!(e, "shoal: deadlock: all {n} threads are blocked and nothing can wake them")
    };
    shoal_plat::halt(DEADLOCK_STATUS)
}

/// For a light system call (`shoal_syscall::exec`), in one look that
/// calls nothing: the running thread's tid and whether a signal is
/// pending that it does not block; `None` when the look would take more
/// (the table in use or not made yet, the running thread not where its
/// hint says, an interval timer armed or its cell in use): the caller
/// takes the full path. For the system-call table only (see
/// [`raise_host_signals_after_call`]).
#[inline]
pub fn light_state() -> Option<(u32, bool)> {
    if itimer::TIMER.try_with(|t| t.is_some()) != Some(false) {
        return None;
    }
    TABLE.try_with_made(|t| t.cur_by_hint().map(|c| (c.tid, c.sig_pending & !c.sig_mask != 0)))?
}

/// The running thread's tid.
pub fn current_tid() -> u32 {
    TABLE.with(|t| t.current())
}

/// Whether thread `tid` exists.
pub fn thread_exists(tid: u32) -> bool {
    TABLE.with(|t| t.get(tid).is_some())
}

/// Number of threads.
pub fn thread_count() -> usize {
    TABLE.with(|t| t.len())
}

/// Whether a thread other than the running one could run now (one is on
/// the run queue). When none can, a thread that blocks goes straight to
/// the idle wait, which asks the tender anyway: `net`'s `epoll_wait` then
/// skips asking the tender once more before it blocks. Out of line: the
/// table is this crate's static (see `shoal_recover::log`).
#[inline(never)]
pub fn others_runnable() -> bool {
    TABLE.with(|t| t.runnable() > 1)
}

/// `set_tid_address` for the running thread.
pub fn set_clear_child_tid(addr: u64) {
    TABLE.with(|t| t.cur().clear_child_tid = addr);
}

/// The `set_robust_list` head of thread `tid` (`None`: no such thread).
pub fn robust_list_of(tid: u32) -> Option<u64> {
    TABLE.with(|t| t.get(tid).map(|c| c.robust_list))
}

/// `set_robust_list` for the running thread.
pub fn set_robust_list(head: u64) {
    TABLE.with(|t| t.cur().robust_list = head);
}

/// The running thread's name (NUL-padded; see [`table::Tcb::name`]).
pub fn thread_name() -> [u8; 16] {
    TABLE.with(|t| t.cur().name)
}

/// Names the running thread (`name` NUL-padded, byte 15 NUL).
pub fn set_thread_name(name: [u8; 16]) {
    TABLE.with(|t| t.cur().name = name);
}

/// The running thread's `(signal mask, pending signals)`.
pub fn sig_state() -> (u64, u64) {
    TABLE.with(|t| {
        let c = t.cur();
        (c.sig_mask, c.sig_pending)
    })
}

/// Sets the running thread's signal mask and pending set.
pub fn set_sig_state(mask: u64, pending: u64) {
    TABLE.with(|t| {
        let c = t.cur();
        c.sig_mask = mask;
        c.sig_pending = pending;
    });
}

/// Records the mask to restore after the signals that interrupted a wait
/// under a temporary mask (`ppoll`, `pselect6`) are delivered.
pub fn set_saved_mask(mask: u64) {
    TABLE.with(|t| t.cur().saved_mask = Some(mask));
}

/// Takes the mask [`set_saved_mask`] recorded, if any.
pub fn take_saved_mask() -> Option<u64> {
    TABLE.with(|t| t.cur().saved_mask.take())
}

/// What the end of every system call asks, in one look at the running
/// thread: takes the mask [`set_saved_mask`] recorded (if any) and says
/// whether a pending signal is not blocked (as [`take_saved_mask`], then
/// [`has_deliverable`]: two lookups of the thread per call before).
#[inline]
pub fn after_call() -> (Option<u64>, bool) {
    TABLE.with(|t| {
        let c = t.cur();
        (c.saved_mask.take(), c.sig_pending & !c.sig_mask != 0)
    })
}

/// Whether the running thread has a pending signal it does not block.
pub fn has_deliverable() -> bool {
    let (m, p) = sig_state();
    p & !m != 0
}

/// The signal mask and pending set of thread `tid`.
pub fn sig_state_of(tid: u32) -> Option<(u64, u64)> {
    TABLE.with(|t| t.get(tid).map(|c| (c.sig_mask, c.sig_pending)))
}

/// The signal mask of thread `tid`.
pub fn sig_mask_of(tid: u32) -> Option<u64> {
    TABLE.with(|t| t.get(tid).map(|c| c.sig_mask))
}

/// Makes signals `bits` pending for thread `tid` (not the running one);
/// if it is blocked and does not block them, it wakes with `EINTR`.
pub fn post_signal(tid: u32, bits: u64) -> Result<(), Errno> {
    table(|t| {
        let th = t.get(tid).ok_or(Errno::ESRCH)?;
        th.sig_pending |= bits;
        if bits & !th.sig_mask != 0 {
            t.interrupt(tid);
        }
        Ok(())
    })
}

/// How long an instance whose only waits are for signals sleeps in the
/// tender at a time (a forwarded signal ends the sleep at once).
const SIGNAL_WAIT_NS: u64 = 3600 * 1_000_000_000;

/// `pause` and `rt_sigsuspend`: blocks the running thread until a signal
/// it does not block is posted; always `EINTR` (the syscall table then
/// delivers the signal).
pub fn wait_for_signal() -> Errno {
    if !has_deliverable() {
        table(|t| t.block_current(Block::Signal, None));
        reschedule();
    }
    Errno::EINTR
}

fn wake_result() -> Result<(), Errno> {
    match TABLE.with(|t| t.cur().wake) {
        Wake::Woken => Ok(()),
        Wake::TimedOut => Err(Errno::ETIMEDOUT),
        Wake::Interrupted => Err(Errno::EINTR),
    }
}

/// `FUTEX_WAIT`: if the word at `addr` is `val`, blocks until woken by a
/// wake meeting `bitset` (`Ok`), until `deadline` (monotonic ns,
/// `ETIMEDOUT`) or a signal (`EINTR`); otherwise `EAGAIN`. The check and
/// the enqueue are atomic (nothing else runs in between).
pub fn futex_wait(addr: u64, val: u32, bitset: u32, deadline: Option<u64>) -> Result<(), Errno> {
    let now: u32 = umem::read(addr)?;
    if now != val {
        return Err(Errno::EAGAIN);
    }
    table(|t| t.block_current(Block::Futex { addr, bitset }, deadline));
    reschedule();
    wake_result()
}

/// Keys of kernel wait queues ([`wait_key`]) have this bit set, so they
/// can never equal a futex address (user addresses are below 2^47).
pub const KERNEL_KEY: u64 = 1 << 63;

/// Blocks the running thread on the kernel wait queue `key` (which must
/// have [`KERNEL_KEY`] set) until [`wake_key`] (`Ok`), `deadline`
/// (`ETIMEDOUT`) or a signal (`EINTR`). Other components use this for what
/// they wait on (pipes, poll); if every thread ends up blocked with no
/// deadline pending, the scheduler reports the deadlock.
pub fn wait_key(key: u64, deadline: Option<u64>) -> Result<(), Errno> {
    debug_assert!(key & KERNEL_KEY != 0);
    table(|t| t.block_current(Block::Futex { addr: key | KERNEL_KEY, bitset: u32::MAX }, deadline));
    reschedule();
    wake_result()
}

/// Wakes every thread waiting on the kernel wait queue `key`; they run
/// later (the caller keeps the vCPU). Returns how many were woken.
pub fn wake_key(key: u64) -> u32 {
    // Most of these wake no one (net and vfs wake the queue at every
    // change, whether or not a thread waits on it; a single-threaded
    // server's waits go straight to the idle wait): the count of runnable
    // threads is published again only when one woke.
    let woken = TABLE.with(|t| t.wake(key | KERNEL_KEY, u32::MAX, u32::MAX));
    if woken > 0 {
        table(|_| ());
    }
    woken
}

/// `FUTEX_WAKE`: wakes up to `n` waiters on `addr` whose bitset meets
/// `bitset`; returns how many. The woken run later (the caller keeps the
/// vCPU).
pub fn futex_wake(addr: u64, n: u32, bitset: u32) -> u32 {
    table(|t| t.wake(addr, n, bitset))
}

/// `FUTEX_REQUEUE`: wakes `n_wake` waiters on `from`, moves up to `n_move`
/// others to `to`; returns the sum.
pub fn futex_requeue(from: u64, to: u64, n_wake: u32, n_move: u32) -> u32 {
    table(|t| t.requeue(from, to, n_wake, n_move))
}

/// Blocks the running thread until `deadline` (monotonic ns); other
/// threads run meanwhile. `EINTR` if a signal woke it first.
pub fn sleep_until(deadline: u64) -> Result<(), Errno> {
    table(|t| t.block_current(Block::Sleep, Some(deadline)));
    reschedule();
    match wake_result() {
        Err(Errno::ETIMEDOUT) | Ok(()) => Ok(()),
        Err(e) => Err(e),
    }
}

/// `sched_yield`: lets every other runnable thread run once.
pub fn yield_now() {
    table(|t| t.yield_current());
    reschedule();
}

/// `SYS_exit` of the running thread. The last thread's exit ends the
/// instance with `status & 0xff`. Before it goes, its robust list is
/// walked and the PI futexes it owned are handed on (see [`pi`]).
pub fn exit_thread(status: i32) -> ! {
    let (ctid, alone) = TABLE.with(|t| (t.cur().clear_child_tid, t.len() == 1));
    if alone {
        shoal_plat::halt((status & 0xff) as i64);
    }
    let (tid, head) = TABLE.with(|t| (t.current(), t.cur().robust_list));
    pi::exit_robust_list(tid, head);
    pi::exit_pi_owner(tid);
    if ctid != 0 && umem::write(ctid, 0u32).is_ok() {
        futex_wake(ctid, 1, u32::MAX);
    }
    // Its kernel stack, which it runs on until the switch.
    if let Some(stack) = KSTACK_OF.with(|k| *k).and_then(|f| f()) {
        PENDING_KSTACK.with(|p| *p = Some(stack));
    }
    table(|t| t.exit_current());
    reschedule();
    // A thread that has exited is never picked again.
    shoal_plat::halt(134)
}

/// `clone` flag `CLONE_VM` (Linux).
pub const CLONE_VM: i32 = 0x100;
/// `clone` flag `CLONE_SIGHAND` (Linux).
pub const CLONE_SIGHAND: i32 = 0x800;
/// `clone` flag `CLONE_VFORK` (Linux).
pub const CLONE_VFORK: i32 = 0x4000;
/// `clone` flag `CLONE_THREAD` (Linux).
pub const CLONE_THREAD: i32 = 0x10000;
/// `clone` flag `CLONE_SETTLS` (Linux).
pub const CLONE_SETTLS: i32 = 0x80000;
/// `clone` flag `CLONE_PARENT_SETTID` (Linux).
pub const CLONE_PARENT_SETTID: i32 = 0x100000;
/// `clone` flag `CLONE_CHILD_CLEARTID` (Linux).
pub const CLONE_CHILD_CLEARTID: i32 = 0x200000;
/// `clone` flag `CLONE_CHILD_SETTID` (Linux).
pub const CLONE_CHILD_SETTID: i32 = 0x1000000;

/// Size of a new thread's first frame (see `shoal_sched_switch`): MXCSR,
/// x87 control word, FS and GS bases (32 bytes), r15…rbp (48), return
/// address.
pub const FIRST_FRAME: u64 = 32 + 48 + 8;

fn clone(func: u64, stack: u64, flags: i32, arg: u64, ptid: u64, tls: u64, ctid: u64) -> Result<u32, Errno> {
    let need = CLONE_VM | CLONE_THREAD | CLONE_SIGHAND;
    if flags & need != need || flags & CLONE_VFORK != 0 {
        // A new process (fork, vfork, posix_spawn): a unikernel is one.
        return Err(Errno::ENOSYS);
    }
    if stack == 0 || func == 0 {
        return Err(Errno::EINVAL);
    }
    let top = stack & !15;
    let rsp = top.checked_sub(FIRST_FRAME).ok_or(Errno::EFAULT)?;
    umem::check(rsp, FIRST_FRAME)?;
    let fs = if flags & CLONE_SETTLS != 0 { tls } else { shoal_plat::cpu::rdfsbase() };
    #[cfg(not(test))]
    let start = shoal_sched_thread_start as *const () as u64;
    #[cfg(test)]
    let start = 0u64;
    // [rsp]: MXCSR (default), x87 CW (default); +8 FS base; +16 GS base;
    // r15, r14, r13 = arg, r12 = func, rbx, rbp; return address.
    let frame: [u64; 11] = [0x037f_0000_1f80, fs, shoal_plat::cpu::rdgsbase(), 0, 0, 0, arg, func, 0, 0, start];
    umem::write(rsp, frame)?;
    spawn_first_frame(rsp, flags, ptid, ctid)
}

/// Makes a thread whose first switch pops the first frame at `rsp`
/// (built by the caller, [`FIRST_FRAME`] bytes), with `clone`'s tid
/// flags; returns its tid.
pub fn spawn_first_frame(rsp: u64, flags: i32, ptid: u64, ctid: u64) -> Result<u32, Errno> {
    let tid = table(|t| t.spawn(rsp))?;
    if flags & CLONE_CHILD_CLEARTID != 0 {
        TABLE.with(|t| t.get(tid).map(|c| c.clear_child_tid = ctid));
    }
    if flags & CLONE_PARENT_SETTID != 0 {
        let _ = umem::write(ptid, tid);
    }
    if flags & CLONE_CHILD_SETTID != 0 {
        let _ = umem::write(ctid, tid);
    }
    Ok(tid)
}

/// Called by shoal's musl instead of the `clone` system call, with the
/// arguments of musl's `__clone(func, stack, flags, arg, ptid, tls, ctid)`.
/// Creates a thread (see the crate documentation); returns its tid, or
/// `-ENOSYS` for anything but a thread of this process, `-EAGAIN` when the
/// kernel cannot hold another thread.
#[no_mangle]
pub extern "C" fn __shoal_clone(func: usize, stack: usize, flags: i32, arg: usize, ptid: usize, tls: usize, ctid: usize) -> i32 {
    preempt::enter();
    let r = match clone(func as u64, stack as u64, flags, arg as u64, ptid as u64, tls as u64, ctid as u64) {
        Ok(tid) => tid as i32,
        Err(e) => -e.0,
    };
    preempt::leave();
    r
}

/// Called by shoal's musl when an exiting detached thread frees its own
/// stack (`__unmapself`): the range is freed by the next thread to run,
/// right after the switch away from this one; the thread exits as
/// `SYS_exit(0)` does. The last thread just ends the instance (status 0).
#[no_mangle]
pub extern "C" fn __shoal_unmapself(base: usize, size: usize) -> ! {
    preempt::enter();
    if thread_count() > 1 {
        PENDING_UNMAP.with(|p| *p = Some((base as u64, size as u64)));
    }
    exit_thread(0)
}

#[cfg(test)]
mod idle_tests {
    use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

    /// The deadline the fake idle wait was given (u64::MAX: none; 0: not
    /// called).
    static SEEN: AtomicU64 = AtomicU64::new(0);

    fn waits(d: Option<u64>) -> bool {
        SEEN.store(d.unwrap_or(u64::MAX), Relaxed);
        true
    }

    fn nothing_to_wait_for(d: Option<u64>) -> bool {
        SEEN.store(d.unwrap_or(u64::MAX), Relaxed);
        false
    }

    #[test]
    fn with_no_other_thread_to_run_a_block_is_the_idle_wait() {
        // Only the main thread (running), no deadlines in the table.
        super::set_idle_wait(waits);
        assert_eq!(super::idle_for(Some(1234)), Some(false), "waited; no signal");
        assert_eq!(SEEN.load(Relaxed), 1234, "with the caller's deadline");
        assert_eq!(super::idle_for(None), Some(false));
        assert_eq!(SEEN.load(Relaxed), u64::MAX, "no deadline: none");
        // No idle wait (nothing to wait for): the caller blocks as usual.
        super::set_idle_wait(nothing_to_wait_for);
        assert_eq!(super::idle_for(Some(5)), None);
    }

    /// An idle wait with nothing to wait for that a forwarded signal
    /// overtook (it arrived while the idle path gave memory back, whose
    /// hypercall first flushed the program's output): the signal is taken
    /// out of the word and raised, so the caller must pick again instead
    /// of sleeping to its deadline, where the word no longer shows it.
    fn nothing_to_wait_for_but_a_signal_came(d: Option<u64>) -> bool {
        SEEN.store(d.unwrap_or(u64::MAX), Relaxed);
        shoal_plat::hostsig::arrive(15);
        false
    }

    #[test]
    fn a_signal_raised_after_the_idle_wait_makes_the_caller_pick_again() {
        let term = 1u64 << 14;
        let (mask, pending) = super::sig_state();
        super::set_idle_wait(nothing_to_wait_for_but_a_signal_came);
        assert!(super::idle_wait(Some(5)), "the caller picks again");
        assert!(!shoal_plat::hostsig::pending(), "the signal left the word");
        assert_eq!(super::sig_state().1 & term, term, "and is pending in the program");
        assert_eq!(super::idle_for(Some(5)), Some(true), "a single thread's call ends with EINTR");
        super::set_sig_state(mask, pending);
        super::set_idle_wait(nothing_to_wait_for);
        assert!(!super::idle_wait(Some(5)), "no signal: nothing to wait for");
    }
}
