//! Signals.
//!
//! The kernel keeps Linux's signal state: an action per signal and the
//! alternate stack per process, the blocked mask and the pending set per
//! thread (in sched's thread control blocks; [`with_signals`] loads the
//! calling thread's). The only signals that can arise are those the
//! process sends itself (`kill`, `tkill`, `tgkill`, `raise`, `abort`,
//! `pthread_kill`). One sent to the calling thread (or to the process:
//! `kill` targets the calling thread) is delivered synchronously, before the
//! sending syscall returns, as Linux does for an unblocked signal sent to
//! oneself; a blocked one stays pending and is delivered when
//! `rt_sigprocmask` or `rt_sigaction` makes it deliverable. One sent to
//! another thread is pending there, interrupts its blocking system call
//! (`EINTR`, no `SA_RESTART`) and is delivered when that call returns (see
//! [`send_thread`]).
//!
//! Queueing, as Linux: each pending signal keeps what it carries
//! ([`Info`]: `si_code`, `si_pid`/`si_uid`, `si_value`) in the process's
//! [`QUEUE`]; a standard signal sent again while pending is lost, a
//! real-time one (32 and up) is queued once per send, up to
//! [`QUEUE_MAX`] for all threads. A thread's own signals (`tgkill`,
//! `raise`) are taken before those sent to the process (`kill`,
//! `sigqueue`), lowest number first, as Linux dequeues them;
//! `rt_sigtimedwait` and signalfd take them without a handler.
//!
//! Delivery: ignored signals are discarded; a default-terminate (or core)
//! action prints `shoal: killed by signal N` and ends the instance with
//! status 128+N, what a shell reports for such a death (this is how
//! `abort()` ends); stop signals are ignored (nobody could continue the
//! process); a handler is entered as Linux enters it on x86-64, on an
//! `rt_sigframe` ([`build_frame`]) below the kernel's stack or on the
//! alternate stack (`SA_ONSTACK` and `sigaltstack`, unless the thread
//! already runs on it; `SS_AUTODISARM` honoured), with `sa_mask` (and the
//! signal unless `SA_NODEFER`) blocked and `SA_RESETHAND` honoured. Its
//! return reaches `sa_restorer`, whose `rt_sigreturn` resumes the kernel
//! code that entered it ([`sigreturn_from_image`]), which takes the mask
//! and, for a thread a preemption tick interrupted in its own code
//! ([`deliver_pending_interrupted`]), the registers back from the frame:
//! what the handler changed there takes effect (musl's asynchronous
//! `pthread_cancel`; Go's asynchronous preemption, which also moves the
//! stack pointer). Inside a system call of a program linked with the
//! kernel no registers are saved (the call is a function call): the
//! frame's are zero and are not taken back. [`build_frame`] and
//! [`read_frame`] take and give a register set for an entry path that
//! saves one. `sigaltstack` reports `SS_ONSTACK` and refuses changes
//! (`EPERM`) while the caller runs on it. A CPU fault of the program
//! (SIGSEGV, SIGBUS, SIGILL, SIGTRAP, SIGFPE) reaches [`deliver_fault`]
//! through the tender's program-fault hand-back, offered only while such
//! a signal has a handler ([`update_fault_entry`]); in an unmodified
//! executable [`deliver_fault_direct`] enters the handler as Linux does,
//! with nothing kept on the kernel's side (its `rt_sigreturn` is
//! [`sigreturn_direct`]; a handler left by `siglongjmp` costs nothing).
//! The frame's `fpstate` holds the interrupted FPU/SSE state where the
//! entry path saved it ([`Fp`]: the preemption and fault entries), and
//! what the handler leaves there is what the thread resumes with.

use shoal_plat::Errno;

/// Number of signals (1..=64).
pub const NSIG: i32 = 64;
/// `SIGKILL`.
pub const SIGKILL: i32 = 9;
/// `SIGSTOP`.
pub const SIGSTOP: i32 = 19;
/// `SIG_DFL`.
pub const SIG_DFL: u64 = 0;
/// `SIG_IGN`.
pub const SIG_IGN: u64 = 1;
/// `sa_flags`: handler takes `(sig, siginfo, ucontext)`.
pub const SA_SIGINFO: u64 = 4;
/// `sa_flags`: run the handler on the alternate signal stack.
pub const SA_ONSTACK: u64 = 0x0800_0000;
/// `sa_flags`: do not block the signal during its handler.
pub const SA_NODEFER: u64 = 0x4000_0000;
/// `sa_flags`: reset to `SIG_DFL` on delivery.
pub const SA_RESETHAND: u64 = 0x8000_0000;
/// `si_code` of `kill`.
pub const SI_USER: i32 = 0;
/// `si_code` of `tkill`/`tgkill`.
pub const SI_TKILL: i32 = -6;

/// The kernel's `struct sigaction` on x86-64 (what `rt_sigaction` takes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KSigaction {
    /// `SIG_DFL`, `SIG_IGN` or the handler's address.
    pub handler: u64,
    /// `SA_*` flags.
    pub flags: u64,
    /// `sa_restorer` (unused: handlers return normally).
    pub restorer: u64,
    /// Signals blocked during the handler.
    pub mask: u64,
}

/// `stack_t` (what `sigaltstack` takes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StackT {
    /// Base of the stack.
    pub ss_sp: u64,
    /// `SS_*` flags.
    pub ss_flags: i32,
    /// Padding.
    pub pad: i32,
    /// Size of the stack.
    pub ss_size: u64,
}

/// `SS_ONSTACK`.
pub const SS_ONSTACK: i32 = 1;
/// `SS_DISABLE`.
pub const SS_DISABLE: i32 = 2;
/// `SS_AUTODISARM`.
pub const SS_AUTODISARM: i32 = 1 << 31;
/// `MINSIGSTKSZ` on x86-64.
pub const MINSIGSTKSZ: u64 = 2048;

/// The `siginfo_t` handed to `SA_SIGINFO` handlers (128 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SigInfo {
    /// Signal number.
    pub si_signo: i32,
    /// Errno value (0).
    pub si_errno: i32,
    /// How it was sent (`SI_USER`, `SI_TKILL`).
    pub si_code: i32,
    /// Padding.
    pub pad: i32,
    /// Sending process.
    pub si_pid: i32,
    /// Sending user.
    pub si_uid: u32,
    /// Rest of the union.
    pub rest: [u64; 13],
}

/// What delivering a signal does now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Disposition {
    /// Discard it.
    Ignore,
    /// End the process.
    Terminate,
    /// Call a handler.
    Handle(KSigaction),
}

/// The signal state of the process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Signals {
    /// Actions of signals 1..=64 (index sig-1).
    pub actions: [KSigaction; NSIG as usize],
    /// Blocked signals (bit sig-1).
    pub mask: u64,
    /// Pending signals (bit sig-1).
    pub pending: u64,
    /// The alternate signal stack.
    pub altstack: StackT,
    /// Counts the changes of `actions` (a change of an action is also
    /// one of [`CHANGES`], which module `heal` watches).
    pub actions_changed: u64,
}

/// Signals queued at most, for all threads together: what
/// `RLIMIT_SIGPENDING` reports (Linux's limit counts the same thing). A
/// real-time signal sent beyond it with `sigqueue` fails with `EAGAIN`; a
/// `kill` beyond it is still made pending, without its information.
pub const QUEUE_MAX: usize = 512;

/// `SIGRTMIN` as the kernel numbers it (libcs reserve the first few).
pub const SIGRTMIN: i32 = 32;

/// What a signal carries besides its number: the first words of its
/// `siginfo_t` after `si_signo`, `si_errno` and `si_code`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Info {
    /// `si_code`.
    pub code: i32,
    /// Bytes 16..24: `si_pid` and `si_uid` (a send), or `si_addr` (a fault).
    pub a: u64,
    /// Bytes 24..32: `si_value` (`sigqueue`, timers).
    pub b: u64,
}

impl Info {
    /// A signal the process sent itself with `code` (`kill`, `tgkill`):
    /// from pid 1, uid 0.
    pub fn sent(code: i32) -> Info {
        Info { code, a: crate::PID, b: 0 }
    }

    /// The `siginfo_t` of signal `sig` with this information.
    pub fn siginfo(&self, sig: i32) -> SigInfo {
        let mut rest = [0u64; 13];
        rest[0] = self.b;
        SigInfo { si_signo: sig, si_errno: 0, si_code: self.code, pad: 0, si_pid: self.a as u32 as i32, si_uid: (self.a >> 32) as u32, rest }
    }
}

/// What each pending signal carries, oldest first, for every thread:
/// one entry per pending standard signal (a second send while one is
/// pending is lost, as on Linux) and one per send of a real-time signal,
/// which Linux queues. Kept apart from [`Signals`], which process's
/// recovery log copies whole (a reboot of process loses the queued
/// information, not the pending signals).
#[derive(Clone, Copy, Debug)]
pub struct Queue {
    entries: [Queued; QUEUE_MAX],
    len: usize,
}

impl Queue {
    /// An empty queue.
    pub const fn new() -> Queue {
        Queue { entries: [Queued { tid: 0, sig: 0, info: Info { code: 0, a: 0, b: 0 }, shared: false }; QUEUE_MAX], len: 0 }
    }

    /// Entries in use.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn used(&self) -> &[Queued] {
        &self.entries[..self.len]
    }

    /// Removes up to `n` entries for which `f` holds, oldest first;
    /// returns the first removed.
    fn remove_where(&mut self, f: impl Fn(&Queued) -> bool, n: usize) -> Option<Queued> {
        let (mut first, mut removed, mut keep) = (None, 0, 0);
        for i in 0..self.len {
            let q = self.entries[i];
            if removed < n && f(&q) {
                first = first.or(Some(q));
                removed += 1;
            } else {
                self.entries[keep] = q;
                keep += 1;
            }
        }
        self.len = keep;
        first
    }
}

impl Default for Queue {
    fn default() -> Self {
        Queue::new()
    }
}

/// The signal queue of the process.
pub static QUEUE: shoal_plat::Global<Queue> = shoal_plat::Global::new(Queue::new());

/// One entry of the signal queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Queued {
    /// The thread it is pending for.
    pub tid: u32,
    /// The signal.
    pub sig: i32,
    /// What it carries.
    pub info: Info,
    /// Sent to the process (`kill`, `sigqueue`) rather than to the thread
    /// (`tgkill`, `raise`): Linux takes a thread's own signals first.
    pub shared: bool,
}

const NO_ALTSTACK: StackT = StackT { ss_sp: 0, ss_flags: SS_DISABLE, pad: 0, ss_size: 0 };

/// The bit of signal `sig` in a mask.
pub fn bit(sig: i32) -> u64 {
    1u64 << (sig - 1)
}

/// Signals that can be neither blocked nor caught.
pub const UNBLOCKABLE: u64 = (1 << (SIGKILL - 1)) | (1 << (SIGSTOP - 1));

/// Whether the default action of `sig` is to ignore it (SIGCHLD, SIGCONT,
/// SIGURG, SIGWINCH) or to stop (SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU: with
/// nobody to continue the process, treated as ignore).
pub fn default_ignored(sig: i32) -> bool {
    matches!(sig, 17 | 18 | 23 | 28 | 19 | 20 | 21 | 22)
}

impl Signals {
    /// The state of a new process: all default, nothing blocked.
    pub const fn new() -> Signals {
        Signals {
            actions: [KSigaction { handler: 0, flags: 0, restorer: 0, mask: 0 }; NSIG as usize],
            mask: 0,
            pending: 0,
            altstack: NO_ALTSTACK,
            actions_changed: 0,
        }
    }

    /// What delivering `sig` would do now.
    pub fn disposition(&self, sig: i32) -> Disposition {
        let act = self.actions[(sig - 1) as usize];
        if sig == SIGKILL {
            return Disposition::Terminate;
        }
        match act.handler {
            SIG_IGN => Disposition::Ignore,
            SIG_DFL if default_ignored(sig) => Disposition::Ignore,
            SIG_DFL => Disposition::Terminate,
            _ => Disposition::Handle(act),
        }
    }

    /// Generates `sig` (1..=64) for the calling thread (`tid`, whose mask
    /// and pending set are loaded): pending unless it would be ignored
    /// (blocked signals are always kept, their action may change), with
    /// `info` queued as [`Signals::enqueue`] says.
    pub fn generate(&mut self, queue: &mut Queue, tid: u32, sig: i32, info: Info, shared: bool) -> Result<(), Errno> {
        if self.mask & bit(sig) == 0 && self.disposition(sig) == Disposition::Ignore {
            return Ok(());
        }
        enqueue(queue, Queued { tid, sig, info, shared }, self.pending & bit(sig) != 0)?;
        self.pending |= bit(sig);
        Ok(())
    }

    /// Takes pending signal `sig` of thread `tid` (whose pending set is
    /// loaded): its oldest queued information (a signal raised without
    /// any, such as one the tender forwarded, comes from outside the
    /// instance: `SI_USER` from pid 0); the signal stays pending while
    /// more of it are queued.
    fn take(&mut self, queue: &mut Queue, tid: u32, sig: i32) -> Info {
        let own = queue.used().iter().any(|q| q.tid == tid && q.sig == sig && !q.shared);
        let got = queue.remove_where(|q| q.tid == tid && q.sig == sig && (!own || !q.shared), 1);
        if !queue.used().iter().any(|q| q.tid == tid && q.sig == sig) {
            self.pending &= !bit(sig);
        }
        got.map_or(Info { code: SI_USER, a: 0, b: 0 }, |q| q.info)
    }

    /// Takes the lowest pending signal of thread `tid` in `set`: of those
    /// sent to the thread itself first, then of those sent to the process,
    /// as Linux dequeues them.
    pub fn take_from(&mut self, queue: &mut Queue, tid: u32, set: u64) -> Option<(i32, Info)> {
        let ready = self.pending & set;
        if ready == 0 {
            return None;
        }
        let own = queue.used().iter().filter(|q| q.tid == tid && !q.shared && ready & bit(q.sig) != 0).map(|q| q.sig).min();
        let sig = own.unwrap_or(ready.trailing_zeros() as i32 + 1);
        Some((sig, self.take(queue, tid, sig)))
    }

    /// Takes the lowest pending signal of thread `tid` that is not blocked.
    pub fn next_deliverable(&mut self, queue: &mut Queue, tid: u32) -> Option<(i32, Info)> {
        self.take_from(queue, tid, !self.mask)
    }

    /// Sets the blocked mask (SIGKILL and SIGSTOP cannot be blocked).
    pub fn set_mask(&mut self, mask: u64) {
        self.mask = mask & !UNBLOCKABLE;
    }

    /// Sets the action of `sig`; discards it if pending and now ignored.
    pub fn set_action(&mut self, sig: i32, mut act: KSigaction) {
        act.mask &= !UNBLOCKABLE;
        self.actions[(sig - 1) as usize] = act;
        self.actions_changed += 1;
        if self.disposition(sig) == Disposition::Ignore {
            self.pending &= !bit(sig);
            QUEUE.with(|q| q.remove_where(|e| e.sig == sig, usize::MAX));
        }
    }
}

impl Default for Signals {
    fn default() -> Self {
        Signals::new()
    }
}

/// Queues `q` (`already`: its signal is pending for its thread now). A standard signal already pending
/// keeps its first information; a real-time one is queued again. With
/// the queue full, a real-time signal sent with information of its
/// own (`si_code` other than `SI_USER`) is `EAGAIN`, anything else is
/// made pending without it, as on Linux.
pub fn enqueue(queue: &mut Queue, q: Queued, already: bool) -> Result<(), Errno> {
    let Queued { tid, sig, info, .. } = q;
    if sig < SIGRTMIN && already {
        return Ok(());
    }
    if !already {
        // Left by a thread that ended with the signal pending, whose
        // id was given again.
        queue.remove_where(|q| q.tid == tid && q.sig == sig, usize::MAX);
    }
    if queue.len < QUEUE_MAX {
        queue.entries[queue.len] = q;
        queue.len += 1;
        return Ok(());
    }
    if sig >= SIGRTMIN && info.code != SI_USER {
        return Err(Errno::EAGAIN);
    }
    Ok(())
}

/// The process's signal state.
// A `ZeroGlobal`: the default alternate stack is `SS_DISABLE`, a non-zero
// start that put process's `.data` on a page of its own.
pub static SIGNALS: shoal_plat::ZeroGlobal<Signals> = shoal_plat::ZeroGlobal::new();

/// Counts the borrows of [`SIGNALS`] that may change it ([`signals_mut`],
/// [`with_signals`]): process's log (module `heal`) copies the signal
/// state only when this moved since its last copy, instead of comparing
/// the state before every call into process. Such borrows are rare (a
/// signal sent, delivered or its action, mask or stack changed), so an
/// unconditional count costs nothing measurable.
pub(crate) static CHANGES: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

/// Runs `f` on the signal state, which it may change (counted in
/// [`CHANGES`]; read-only uses borrow [`SIGNALS`] directly).
pub(crate) fn signals_mut<R>(f: impl FnOnce(&mut Signals) -> R) -> R {
    CHANGES.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
    crate::heal::changed();
    SIGNALS.with(f)
}

/// Checks a signal number for sending (0 allowed: existence check).
pub fn check_sig(sig: i32) -> Result<(), Errno> {
    if (0..=NSIG).contains(&sig) {
        Ok(())
    } else {
        Err(Errno::EINVAL)
    }
}

/// Runs `f` on the signal state with the calling thread's mask and
/// pending set (kept per thread in sched's thread control blocks) loaded
/// into `mask`/`pending`, and stores them back afterwards.
pub fn with_signals<R>(f: impl FnOnce(&mut Signals) -> R) -> R {
    signals_mut(|s| {
        (s.mask, s.pending) = shoal_sched::sig_state();
        let r = f(s);
        shoal_sched::set_sig_state(s.mask, s.pending);
        r
    })
}

/// Counts the signals generated (sent and kept pending): the readiness
/// generation of signalfd descriptors.
static GENERATED: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

/// What to call when a signal was made pending (net's signalfd: waiters
/// re-check), set once at boot.
static ON_SIGNAL: shoal_plat::Global<Option<fn()>> = shoal_plat::Global::new(None);

/// Sets what to call when a signal was made pending.
pub fn set_on_signal(f: fn()) {
    ON_SIGNAL.with(|o| *o = Some(f));
}

/// How many signals were generated so far.
pub fn generated() -> u64 {
    GENERATED.load(core::sync::atomic::Ordering::Relaxed)
}

fn note_generated() {
    GENERATED.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
    if let Some(f) = ON_SIGNAL.try_with(|o| *o).flatten() {
        f();
    }
}

/// Takes the calling thread's lowest pending signal in `set` with its
/// information, without running a handler (signalfd's read).
pub fn take_pending(set: u64) -> Option<(i32, Info)> {
    let tid = shoal_sched::current_tid();
    with_signals(|s| QUEUE.with(|q| s.take_from(q, tid, set & !UNBLOCKABLE)))
}

/// Sends `sig` to the calling thread and delivers what is deliverable.
/// (as a thread-directed signal: SIGPIPE, SIGXFSZ).
pub fn send_self(sig: i32, code: i32) {
    let _ = send_self_info(sig, Info::sent(code), false);
}

/// [`send_self`] with the information the signal carries, sent to the
/// process (`shared`: `kill`, `sigqueue`; it reaches the calling thread)
/// or the thread (`EAGAIN`: the queue is full, see [`Signals::enqueue`]).
pub fn send_self_info(sig: i32, info: Info, shared: bool) -> Result<(), Errno> {
    if sig == 0 {
        return Ok(());
    }
    let tid = shoal_sched::current_tid();
    let r = with_signals(|s| QUEUE.with(|q| s.generate(q, tid, sig, info, shared)));
    note_generated();
    deliver_pending();
    r
}

/// Sends `sig` to thread `tid` (`ESRCH` if there is none). To the calling
/// thread: delivered before returning ([`send_self`]). To another thread:
/// made pending there (unless ignored); if that thread is blocked in a
/// system call and does not block `sig`, the call ends with `EINTR` and the
/// signal is delivered as it returns. That is what `pthread_kill` and
/// `pthread_cancel` need: musl turns `EINTR` at a cancellation point of a
/// thread with a pending cancellation into the cancellation.
pub fn send_thread(tid: u32, sig: i32, code: i32) -> Result<(), Errno> {
    send_thread_info(tid, sig, Info::sent(code))
}

/// [`send_thread`] with the information the signal carries.
pub fn send_thread_info(tid: u32, sig: i32, info: Info) -> Result<(), Errno> {
    if tid == shoal_sched::current_tid() {
        return send_self_info(sig, info, false);
    }
    let (mask, pending) = shoal_sched::sig_state_of(tid).ok_or(Errno::ESRCH)?;
    if sig == 0 {
        return Ok(());
    }
    let ignored = SIGNALS.with(|s| s.disposition(sig) == Disposition::Ignore);
    if ignored && mask & bit(sig) == 0 {
        return Ok(());
    }
    signals_mut(|_| QUEUE.with(|q| enqueue(q, Queued { tid, sig, info, shared: false }, pending & bit(sig) != 0)))?;
    shoal_sched::post_signal(tid, bit(sig))?;
    note_generated();
    Ok(())
}

/// Delivers every pending, unblocked signal (lowest number first).
pub fn deliver_pending() {
    deliver_pending_in(None, None);
}

/// The registers of code a preemption tick interrupted, as the kernel's
/// preemption entry saved them (`shoal_syscall::preempt`): r15, r14, r13,
/// r12, r11, r10, r9, r8, rdi, rsi, rbp, rbx, rdx, rcx, rax, rflags, rip,
/// in that order; the interrupted rsp is [`interrupted_rsp`].
pub type Interrupted = [u64; 17];

/// The interrupted stack pointer of a frame at `frame` (above it: the
/// frame, then the 128-byte red zone the entry stepped over).
pub fn interrupted_rsp(frame: u64) -> u64 {
    frame + 17 * 8 + 128
}

/// The registers of interrupted code in `mcontext_t.gregs` order (Linux
/// x86-64): r8, r9, r10, r11, r12, r13, r14, r15, rdi, rsi, rbp, rbx,
/// rdx, rax, rcx, rsp, rip, eflags. What [`build_frame`] takes and
/// [`read_frame`] gives back.
pub type Regs = [u64; 18];

/// Indices into [`Regs`].
pub mod reg {
    /// rdi.
    pub const RDI: usize = 8;
    /// rsi.
    pub const RSI: usize = 9;
    /// rdx.
    pub const RDX: usize = 12;
    /// rax.
    pub const RAX: usize = 13;
    /// rsp.
    pub const RSP: usize = 15;
    /// rip.
    pub const RIP: usize = 16;
    /// eflags.
    pub const EFLAGS: usize = 17;
}

/// Index in an [`Interrupted`] frame of each of [`Regs`]; `None`: rsp,
/// which comes from the frame's address.
const GREG_FROM_FRAME: [Option<usize>; 18] = [
    Some(7),
    Some(6),
    Some(5),
    Some(4),
    Some(3),
    Some(2),
    Some(1),
    Some(0),
    Some(8),
    Some(9),
    Some(10),
    Some(11),
    Some(12),
    Some(14),
    Some(13),
    None,
    Some(16),
    Some(15),
];
/// Offset of `uc_mcontext.gregs` in `ucontext_t`, in words.
const UC_GREGS: usize = 5;
/// The flags a handler may change through its context (Linux's
/// `FIX_EFLAGS`: CF, PF, AF, ZF, SF, TF, DF, OF, RF, AC).
const USER_FLAGS: u64 = 0x50dd5;

/// The registers of an interrupted frame.
fn regs_of(frame: &Interrupted, rsp: u64) -> Regs {
    let mut r = [0u64; 18];
    for (i, f) in GREG_FROM_FRAME.iter().enumerate() {
        r[i] = match f {
            Some(k) => frame[*k],
            None => rsp,
        };
    }
    r
}

/// Takes back what the handler changed, as `rt_sigreturn` does: the
/// general-purpose registers, rip and the user flags into `frame`, and
/// the stack pointer into `rsp` (Go's asynchronous preemption pushes a
/// return address and moves both rip and rsp; the preemption exit moves
/// the frame to the new stack pointer).
fn regs_to(r: &Regs, frame: &mut Interrupted, rsp: &mut u64) {
    for (i, f) in GREG_FROM_FRAME.iter().enumerate() {
        match f {
            Some(15) => frame[15] = (frame[15] & !USER_FLAGS) | (r[i] & USER_FLAGS),
            Some(k) => frame[*k] = r[i],
            None => *rsp = r[i],
        }
    }
}

/// What a fault adds to a signal frame (`mcontext_t`'s `err`, `trapno`
/// and `cr2`); zero for a signal that was sent.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fault {
    /// The CPU's error code.
    pub err: u64,
    /// The exception vector.
    pub trapno: u64,
    /// The faulting address of a page fault.
    pub cr2: u64,
}

/// Size of Linux's `struct ucontext` on x86-64: flags, link, stack (24),
/// mcontext (256), the 8-byte signal mask.
pub const UC_SIZE: u64 = 304;
/// Offset of `uc_sigmask` in `ucontext_t` (flags, link, stack, mcontext).
const UC_SIGMASK: usize = 8 + 8 + 24 + 256;
/// Offset of `uc_stack` in `ucontext_t`.
const UC_STACK: usize = 16;
/// Offset of `uc_mcontext.fpstate` (after the 23 `gregs`).
const UC_FPSTATE: usize = 40 + 23 * 8;
/// Size of the `fxsave` area `fpstate` points at.
pub const FPSTATE_SIZE: u64 = 512;
/// `uc_flags`: the frame saved ss (`UC_SIGCONTEXT_SS`) and sigreturn
/// restores it strictly (`UC_STRICT_RESTORE_SS`), as 64-bit Linux sets.
const UC_FLAGS: u64 = 2 | 4;
/// `cs | gs << 16 | fs << 32 | ss << 48` of 64-bit user code.
const CSGSFS: u64 = 0x33 | (0x2b << 48);
/// `sa_flags`: `sa_restorer` is set.
pub const SA_RESTORER: u64 = 0x0400_0000;

/// Where the frame of a handler with action `act` goes when the thread
/// runs at `sp`, as Linux decides: the top of the alternate stack `alt`
/// with `SA_ONSTACK`, unless it is disabled or `sp` is already on it (a
/// nested signal stays there); `None`: below `sp` less the 128-byte red
/// zone (what an entry path that saved the interrupted registers passes
/// to [`build_frame`]).
pub fn alt_stack_top(act: &KSigaction, alt: &StackT, sp: u64) -> Option<u64> {
    (act.flags & SA_ONSTACK != 0 && alt.ss_flags & SS_DISABLE == 0 && !on_stack(alt, sp)).then(|| alt.ss_sp.wrapping_add(alt.ss_size))
}

/// Where a signal frame was built ([`build_frame`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame {
    /// The handler's stack pointer: the return address (`pretcode`).
    pub sp: u64,
    /// The `siginfo_t` (the handler's second argument).
    pub info: u64,
    /// The `ucontext_t` (its third argument).
    pub uc: u64,
}

/// What a signal frame holds besides the interrupted registers.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Delivery {
    /// The `siginfo_t` (its `si_signo` is the signal).
    pub info: SigInfo,
    /// The fault that raised it, if any.
    pub fault: Fault,
    /// The signal mask before delivery (`uc_sigmask`).
    pub old_mask: u64,
    /// The alternate stack as set (`uc_stack`).
    pub altstack: StackT,
    /// The return address of the handler (`sa_restorer`).
    pub restorer: u64,
    /// The interrupted FPU/SSE state, if the entry path saved it ([`Fp::LIVE`]:
    /// it did not, the registers hold it).
    pub fp: Fp,
}

/// Where an entry path saved the interrupted thread's FPU/SSE state, which
/// it restores from when it returns to the thread: the signal frame's
/// `fpstate` is copied from it, and what the handler's `rt_sigreturn`
/// leaves in `fpstate` is written back to it (Linux restores the
/// registers from `fpstate`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fp {
    /// The area (64-byte aligned): `fxsave` layout in its first 512 bytes.
    pub at: u64,
    /// `xsave` layout (its header follows the legacy 512 bytes): the
    /// header's `XSTATE_BV` says which parts hold values (a clear bit: the
    /// part is in its initial state and its bytes are stale).
    pub xsave: bool,
}

impl Fp {
    /// No saved state: the registers hold it.
    pub const LIVE: Fp = Fp { at: 0, xsave: false };
}

/// An `fxsave` area: the x87, MXCSR and XMM registers.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub struct Fxsave(pub [u8; 512]);

impl Default for Fxsave {
    fn default() -> Self {
        Fxsave([0; 512])
    }
}

/// Offsets in an `fxsave` area: the x87 control word, MXCSR and the
/// MXCSR bits the CPU supports, the x87 registers, the XMM registers.
const FX_FCW: usize = 0;
const FX_MXCSR: usize = 24;
const FX_MXCSR_MASK: usize = 28;
const FX_ST: core::ops::Range<usize> = 32..160;
const FX_XMM: core::ops::Range<usize> = 160..416;
/// The bytes `rt_sigreturn` takes from a program's `fpstate` (the rest of
/// the 512 are reserved or software-defined).
const FX_TAKEN: usize = 416;

impl Fxsave {
    /// The state as saved at `fp` (an `xsave` area's parts in their
    /// initial state are given their initial values).
    fn from_area(fp: Fp) -> Result<Fxsave, Errno> {
        let mut fx: Fxsave = shoal_plat::umem::read(fp.at)?;
        if fp.xsave {
            let bv: u64 = shoal_plat::umem::read(fp.at + 512)?;
            if bv & 1 == 0 {
                fx.0[..FX_ST.end].fill(0);
                fx.0[FX_FCW..FX_FCW + 2].copy_from_slice(&0x037fu16.to_le_bytes());
                // MXCSR is saved whatever XSTATE_BV says.
                let mxcsr: [u8; 8] = shoal_plat::umem::read(fp.at + FX_MXCSR as u64)?;
                fx.0[FX_MXCSR..FX_MXCSR + 8].copy_from_slice(&mxcsr);
            }
            if bv & 2 == 0 {
                fx.0[FX_XMM].fill(0);
            }
        }
        Ok(fx)
    }

    /// The MXCSR bits this CPU accepts (`fxrstor` faults on any other).
    fn mxcsr_mask(&self) -> u32 {
        match u32::from_le_bytes([self.0[FX_MXCSR_MASK], self.0[FX_MXCSR_MASK + 1], self.0[FX_MXCSR_MASK + 2], self.0[FX_MXCSR_MASK + 3]]) {
            0 => 0xffbf,
            m => m,
        }
    }

    /// Takes what a program's `fpstate` holds over `self` (the state the
    /// kernel saved), as `rt_sigreturn` does: the x87 and SSE registers,
    /// MXCSR without the bits this CPU refuses; `None` (a null pointer) is
    /// the initial state.
    fn take(&mut self, theirs: Option<&Fxsave>) {
        let mask = self.mxcsr_mask();
        match theirs {
            None => {
                self.0[..FX_TAKEN].fill(0);
                self.0[FX_FCW..FX_FCW + 2].copy_from_slice(&0x037fu16.to_le_bytes());
                self.0[FX_MXCSR..FX_MXCSR + 4].copy_from_slice(&0x1f80u32.to_le_bytes());
            }
            Some(t) => self.0[..FX_TAKEN].copy_from_slice(&t.0[..FX_TAKEN]),
        }
        self.0[FX_MXCSR_MASK..FX_MXCSR_MASK + 4].copy_from_slice(&mask.to_le_bytes());
        let m = u32::from_le_bytes([self.0[FX_MXCSR], self.0[FX_MXCSR + 1], self.0[FX_MXCSR + 2], self.0[FX_MXCSR + 3]]) & mask;
        self.0[FX_MXCSR..FX_MXCSR + 4].copy_from_slice(&m.to_le_bytes());
    }

    /// Writes the state back into the entry path's area `fp`, marking its
    /// x87 and SSE parts as holding values.
    fn store(&self, fp: Fp) -> Result<(), Errno> {
        shoal_plat::umem::write(fp.at, *self)?;
        if fp.xsave {
            let bv: u64 = shoal_plat::umem::read(fp.at + 512)?;
            shoal_plat::umem::write(fp.at + 512, bv | 3)?;
        }
        Ok(())
    }
}

/// Puts the program's `fpstate` (`None`: a null pointer) into the entry
/// path's area `fp`.
fn fp_back(theirs: Option<&Fxsave>, fp: Fp) -> Result<(), Errno> {
    let mut fx = Fxsave::from_area(fp)?;
    fx.take(theirs);
    fx.store(fp)
}

/// The program's `fpstate` of the `ucontext_t` at `uc` (`None`: a null
/// pointer, the initial state).
fn fpstate_of(uc: u64) -> Result<Option<Fxsave>, Errno> {
    match shoal_plat::umem::read::<u64>(uc + UC_FPSTATE as u64)? {
        0 => Ok(None),
        at => shoal_plat::umem::read(at).map(Some),
    }
}

/// What a handler's `rt_sigreturn` left in its frame, copied out while
/// the frame is intact (the kernel code it returns to reuses the stack
/// below it).
#[repr(C)]
#[derive(Clone, Copy)]
struct Taken {
    /// The context's registers (all flags as the frame holds them).
    regs: Regs,
    /// `uc_sigmask`.
    mask: u64,
    /// Whether `fpstate` was null.
    fp_null: bool,
    /// What `fpstate` points at.
    fp: Fxsave,
}

impl Taken {
    fn read(uc: u64) -> Result<Taken, Errno> {
        let (regs, mask) = read_frame(uc, u64::MAX)?;
        let fp = fpstate_of(uc)?;
        Ok(Taken { regs, mask, fp_null: fp.is_none(), fp: fp.unwrap_or_default() })
    }
}

/// Builds Linux's x86-64 `rt_sigframe` for a signal below `top`
/// (the interrupted stack pointer less the 128-byte red zone, or the top
/// of the alternate stack), as Linux lays it out: the `fxsave` area
/// (64-byte aligned) highest, then the frame at a stack pointer 8 below
/// a 16-byte boundary, holding the return address `restorer`, the
/// `ucontext_t` (`uc_flags`, `uc_link` 0, `uc_stack` = the alternate
/// stack, `uc_mcontext` with `regs` in `gregs` order, `csgsfs`, the
/// fault's `err`/`trapno`/`cr2`, `oldmask` and the `fpstate` pointer, then
/// `uc_sigmask` = the old mask) and the `siginfo_t`. The handler is then
/// entered with rsp = [`Frame::sp`], rdi = the signal, rsi = [`Frame::info`],
/// rdx = [`Frame::uc`], rax = 0 and rip = the handler; its `ret` reaches
/// the restorer, whose `rt_sigreturn` [`read_frame`]s the context back.
/// Fails (`EFAULT`) if the frame does not fit in writable memory, as
/// Linux's setup does (it then kills with SIGSEGV).
pub fn build_frame(top: u64, regs: &Regs, d: &Delivery) -> Result<Frame, Errno> {
    let Delivery { info, fault, old_mask, altstack, restorer, fp: saved } = d;
    let (old_mask, restorer) = (*old_mask, *restorer);
    use shoal_plat::umem;
    let fp = top.checked_sub(FPSTATE_SIZE).ok_or(Errno::EFAULT)? & !63;
    let size = 8 + UC_SIZE + core::mem::size_of::<SigInfo>() as u64;
    let sp = (fp.checked_sub(size).ok_or(Errno::EFAULT)? & !15).wrapping_sub(8);
    let (uc, si) = (sp + 8, sp + 8 + UC_SIZE);
    umem::check_write(sp, top - sp)?;
    let mut u = [0u64; (UC_SIZE / 8) as usize];
    u[0] = UC_FLAGS;
    u[UC_STACK / 8] = altstack.ss_sp;
    // Linux copies the flags the thread last set, 0 before any
    // sigaltstack; shoal keeps no difference between that and a stack
    // disabled later, and gives 0 for both.
    u[UC_STACK / 8 + 1] = if altstack.ss_size == 0 { 0 } else { altstack.ss_flags as u32 as u64 };
    u[UC_STACK / 8 + 2] = altstack.ss_size;
    u[UC_GREGS..UC_GREGS + 18].copy_from_slice(regs);
    u[UC_GREGS + 18] = CSGSFS;
    u[UC_GREGS + 19] = fault.err;
    u[UC_GREGS + 20] = fault.trapno;
    u[UC_GREGS + 21] = old_mask;
    u[UC_GREGS + 22] = fault.cr2;
    u[UC_FPSTATE / 8] = fp;
    u[UC_SIGMASK / 8] = old_mask;
    let fx = if saved.at != 0 {
        Fxsave::from_area(*saved)?
    } else {
        let mut fx = Fxsave::default();
        fxsave(&mut fx);
        fx
    };
    umem::write(fp, fx)?;
    umem::write(uc, u)?;
    umem::write(si, *info)?;
    umem::write(sp, restorer)?;
    Ok(Frame { sp, info: si, uc })
}

/// What `rt_sigreturn` takes back from the `ucontext_t` at `uc`: the
/// registers (eflags: only the user flags, over `old_flags`) and the
/// signal mask (SIGKILL and SIGSTOP taken out).
pub fn read_frame(uc: u64, old_flags: u64) -> Result<(Regs, u64), Errno> {
    let u: [u64; (UC_SIZE / 8) as usize] = shoal_plat::umem::read(uc)?;
    let mut r = [0u64; 18];
    r.copy_from_slice(&u[UC_GREGS..UC_GREGS + 18]);
    r[reg::EFLAGS] = (old_flags & !USER_FLAGS) | (r[reg::EFLAGS] & USER_FLAGS);
    Ok((r, u[UC_SIGMASK / 8] & !UNBLOCKABLE))
}

/// Saves the x87 and SSE state into `area`.
fn fxsave(area: &mut Fxsave) {
    // SAFETY: fxsave writes the 512 bytes of `area`, which is 16-byte
    // aligned (64 here), and changes no register.
    unsafe { core::arch::asm!("fxsave64 [{}]", in(reg) area.0.as_mut_ptr(), options(nostack, preserves_flags)) };
}

/// [`deliver_pending`] for a thread a preemption tick interrupted in its
/// own code: each handler sees the interrupted registers in its
/// `ucontext_t` and may change them, as with a signal Linux delivers
/// asynchronously (musl's asynchronous `pthread_cancel` moves the program
/// counter to its cancellation code this way).
/// Returns the stack pointer to resume at (a handler may have changed it).
/// `fp`: where the entry saved the thread's FPU/SSE state (the frames'
/// `fpstate` comes from there, and goes back there at `rt_sigreturn`).
pub fn deliver_pending_interrupted(frame: &mut Interrupted, fp: Option<Fp>) -> u64 {
    let mut rsp = interrupted_rsp(core::ptr::from_ref(frame) as u64);
    deliver_pending_in(Some((frame, &mut rsp)), fp);
    rsp
}

/// An interrupted thread's saved registers and its stack pointer.
type Resumed<'a> = (&'a mut Interrupted, &'a mut u64);

fn deliver_pending_in(mut frame: Option<Resumed<'_>>, fp: Option<Fp>) {
    loop {
        // Decide with the state borrowed; run handlers without it (they
        // make system calls of their own).
        let tid = shoal_sched::current_tid();
        let step = with_signals(|s| {
            let (sig, info) = QUEUE.with(|q| s.next_deliverable(q, tid))?;
            let d = s.disposition(sig);
            let old_mask = s.mask;
            if let Disposition::Handle(act) = d {
                if act.flags & SA_RESETHAND != 0 {
                    s.actions[(sig - 1) as usize] = KSigaction::default();
                    s.actions_changed += 1;
                }
                let own = if act.flags & SA_NODEFER != 0 { 0 } else { bit(sig) };
                s.set_mask(old_mask | act.mask | own);
            }
            Some((sig, info, d, old_mask))
        });
        let Some((sig, info, d, old_mask)) = step else { return };
        match d {
            Disposition::Ignore => {}
            Disposition::Terminate => terminate(sig),
            Disposition::Handle(act) => {
                // As sigreturn does, the mask afterwards is the context's
                // (the handler may change it there; musl's cancellation
                // handler does).
                let mask = call_handler(sig, info, act, old_mask, frame.as_mut().map(|(f, r)| (&mut **f, &mut **r)), fp);
                with_signals(|s| s.set_mask(mask));
            }
        }
    }
}

/// Ends the process as killed by `sig`.
pub fn terminate(sig: i32) -> ! {
    use core::fmt::Write;
    let _ = writeln!(shoal_plat::console::Stderr, "shoal: killed by signal {sig}");
    shoal_plat::halt(128 + sig as i64)
}

#[cfg(target_arch = "x86_64")]
core::arch::global_asm!(
    // shoal_process_enter_handler(jb: rdi, ctx: rsi): saves the
    // callee-saved registers, the stack pointer and the return address in
    // `jb`; reserves ENTER_AREA bytes below everything the caller has on
    // the stack and has shoal_process_build_frame(ctx, area_top) build the
    // signal frame there (or on the alternate stack); then enters the
    // handler as Linux does: rsp = the frame (holding the return address,
    // the restorer), rdi = sig, rsi = info, rdx = uc, rax = 0, DF clear.
    // It comes back (returns to its caller) only through
    // shoal_process_resume(jb).
    ".section .text.shoal_process_enter_handler,\"ax\",@progbits",
    ".globl shoal_process_enter_handler",
    ".type shoal_process_enter_handler,@function",
    "shoal_process_enter_handler:",
    "    mov [rdi], rbx",
    "    mov [rdi + 8], rbp",
    "    mov [rdi + 16], r12",
    "    mov [rdi + 24], r13",
    "    mov [rdi + 32], r14",
    "    mov [rdi + 40], r15",
    "    lea rax, [rsp + 8]",
    "    mov [rdi + 48], rax",
    "    mov rax, [rsp]",
    "    mov [rdi + 56], rax",
    "    mov rbx, rsi",
    "    mov rsi, rsp",
    "    and rsi, -64",
    "    lea rsp, [rsi - {area}]",
    "    mov rdi, rbx",
    "    call {build}",
    "    mov rsp, rax",
    "    mov r11, [rbx + {handler}]",
    "    mov edi, [rbx + {sig}]",
    "    mov rsi, [rbx + {info}]",
    "    mov rdx, [rbx + {uc}]",
    "    xor eax, eax",
    "    cld",
    "    jmp r11",
    ".size shoal_process_enter_handler, . - shoal_process_enter_handler",
    // shoal_process_resume(jb: rdi): returns from the
    // shoal_process_enter_handler that filled `jb`.
    ".section .text.shoal_process_resume,\"ax\",@progbits",
    ".globl shoal_process_resume",
    ".type shoal_process_resume,@function",
    "shoal_process_resume:",
    "    mov rbx, [rdi]",
    "    mov rbp, [rdi + 8]",
    "    mov r12, [rdi + 16]",
    "    mov r13, [rdi + 24]",
    "    mov r14, [rdi + 32]",
    "    mov r15, [rdi + 40]",
    "    mov rsp, [rdi + 48]",
    "    jmp qword ptr [rdi + 56]",
    ".size shoal_process_resume, . - shoal_process_resume",
    // shoal_process_restorer: the return address of a handler whose
    // action has no SA_RESTORER (Linux refuses to deliver then; shoal's
    // own callers, the kernel's tests, set none): rt_sigreturn at once.
    ".section .text.shoal_process_restorer,\"ax\",@progbits",
    ".globl shoal_process_restorer",
    ".type shoal_process_restorer,@function",
    "shoal_process_restorer:",
    "    and rsp, -16",
    "    call {sigreturn}",
    "    ud2",
    ".size shoal_process_restorer, . - shoal_process_restorer",
    sigreturn = sym sigreturn_from_restorer,
    build = sym shoal_process_build_frame,
    area = const ENTER_AREA,
    handler = const core::mem::offset_of!(EnterCtx, handler),
    sig = const core::mem::offset_of!(EnterCtx, sig),
    info = const core::mem::offset_of!(EnterCtx, frame) + core::mem::offset_of!(Frame, info),
    uc = const core::mem::offset_of!(EnterCtx, frame) + core::mem::offset_of!(Frame, uc),
);

/// Stack bytes [`shoal_process_enter_handler`] sets aside for a signal
/// frame below its caller's stack: the `fxsave` area, the `rt_sigframe`
/// and their alignment, and a red zone above them.
const ENTER_AREA: usize = 1280;

/// What [`shoal_process_enter_handler`] needs to build a frame and enter
/// a handler ([`shoal_process_build_frame`] fills `frame`).
#[repr(C)]
struct EnterCtx {
    handler: u64,
    sig: i32,
    regs: Regs,
    delivery: Delivery,
    /// The alternate stack's top, or 0: in the reserved area.
    top: u64,
    frame: Frame,
    /// The frame as the handler's `rt_sigreturn` found it.
    taken: Taken,
}

/// Builds the frame for [`shoal_process_enter_handler`] below `ctx.top`,
/// or below `area_top` less a red zone; returns its stack pointer. A
/// frame that does not fit ends the process with SIGSEGV, as on Linux.
extern "C" fn shoal_process_build_frame(ctx: *mut EnterCtx, area_top: u64) -> u64 {
    // SAFETY: shoal_process_enter_handler passes call_handler's context,
    // which lives until the handler returns.
    let c = unsafe { &mut *ctx };
    let top = if c.top != 0 { c.top } else { area_top - 128 };
    match build_frame(top, &c.regs, &c.delivery) {
        Ok(f) => {
            c.frame = f;
            f.sp
        }
        Err(_) => terminate(11),
    }
}

extern "C" {
    fn shoal_process_enter_handler(jb: *mut JumpBuf, ctx: *mut EnterCtx);
    fn shoal_process_resume(jb: *const JumpBuf) -> !;
    fn shoal_process_restorer();
}

/// Where a handler's `rt_sigreturn` returns to in the kernel: the
/// callee-saved registers, stack pointer and return address of
/// [`call_handler`]'s entry into it, and the previous one of the thread
/// (handlers nest).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct JumpBuf {
    regs: [u64; 8],
    prev: u64,
    /// The handler's [`EnterCtx`] (its frame tells a nested
    /// `rt_sigreturn` from one of a frame built for a direct delivery).
    ctx: u64,
}

/// The innermost handler's [`JumpBuf`] of each thread that runs one.
#[cfg(not(test))]
static HANDLERS: shoal_plat::Global<alloc::collections::BTreeMap<u32, u64>> = shoal_plat::Global::new(alloc::collections::BTreeMap::new());

/// The innermost handler's [`JumpBuf`] of thread `tid` (0: none).
#[cfg(not(test))]
fn handler_top(tid: u32) -> u64 {
    HANDLERS.with(|h| h.get(&tid).copied()).unwrap_or(0)
}

/// Sets the innermost handler's [`JumpBuf`] of thread `tid` (0: none).
#[cfg(not(test))]
fn set_handler_top(tid: u32, jb: u64) {
    HANDLERS.with(|h| {
        if jb == 0 {
            h.remove(&tid);
        } else {
            h.insert(tid, jb);
        }
    });
}

// Unit tests run on several host threads that all look like one thread
// to sched: each keeps its own.
#[cfg(test)]
std::thread_local! {
    static HANDLER_TOP: core::cell::Cell<u64> = const { core::cell::Cell::new(0) };
}

#[cfg(test)]
fn handler_top(_: u32) -> u64 {
    HANDLER_TOP.with(|c| c.get())
}

#[cfg(test)]
fn set_handler_top(_: u32, jb: u64) {
    HANDLER_TOP.with(|c| c.set(jb));
}

/// `rt_sigreturn` of a program linked with the kernel (a handler's return
/// through musl's `__restore_rt` or the kernel's own restorer): resumes
/// the kernel where it entered the thread's innermost handler, which
/// then takes the context back ([`read_frame`]). A thread in no handler
/// (a forged `rt_sigreturn`) is killed with SIGSEGV, as Linux kills one
/// whose frame is bad. An executable not linked with the kernel has its
/// own entry path, which restores its saved registers from the frame at
/// its stack pointer with [`read_frame`].
pub fn sigreturn_from_image() -> ! {
    let tid = shoal_sched::current_tid();
    let jb = handler_top(tid);
    if jb == 0 {
        terminate(11);
    }
    // The frame, read now: the kernel code resumed below reuses the stack
    // under it. An unreadable one kills, as Linux's sigreturn does.
    // SAFETY: `jb` and the context it names were registered by
    // run_handler for this thread and live in its frame, above this one.
    unsafe {
        let ctx = (*(jb as *const JumpBuf)).ctx as *mut EnterCtx;
        match Taken::read((*ctx).frame.uc) {
            Ok(t) => (*ctx).taken = t,
            Err(_) => terminate(11),
        }
    }
    // SAFETY: `jb` was registered by call_handler for this thread and lies
    // in its frame, which is live while its handler runs (a handler left
    // by siglongjmp leaves a stale entry only under newer ones, which are
    // taken first).
    unsafe { shoal_process_resume(jb as *const JumpBuf) }
}

extern "C" fn sigreturn_from_restorer() -> ! {
    sigreturn_from_image()
}

/// The stack pointer of the caller (close enough: this frame's).
#[inline(always)]
pub fn current_sp() -> u64 {
    let sp: u64;
    // SAFETY: reads rsp into a register; no memory or flags touched.
    unsafe { core::arch::asm!("mov {}, rsp", out(reg) sp, options(nomem, nostack, preserves_flags)) };
    sp
}

/// Whether `sp` lies on the alternate stack `st` (enabled or not).
pub fn on_stack(st: &StackT, sp: u64) -> bool {
    st.ss_size != 0 && sp > st.ss_sp && sp - st.ss_sp <= st.ss_size
}

fn call_handler(sig: i32, from: Info, act: KSigaction, old_mask: u64, frame: Option<Resumed<'_>>, fp: Option<Fp>) -> u64 {
    // The interrupted registers: a preempted thread's; inside a system
    // call of a program linked with the kernel, none are saved (the call
    // is a function call): zero, and what the handler changes is not taken.
    let regs = frame.as_ref().map_or([0; 18], |(f, rsp)| regs_of(f, **rsp));
    let flags = frame.as_ref().map_or(0, |(f, _)| f[15]);
    let fp = if frame.is_some() { fp } else { None };
    let (back, mask) = run_handler(sig, from.siginfo(sig), Fault::default(), act, old_mask, (regs, fp), current_sp(), flags, 0);
    if let Some((fr, rsp)) = frame {
        regs_to(&back, fr, rsp);
    }
    mask
}

/// The signals a CPU fault of the program raises: SIGILL, SIGTRAP,
/// SIGBUS, SIGFPE, SIGSEGV.
pub const FAULT_SIGNALS: [i32; 5] = [4, 5, 7, 8, 11];

/// The kernel's program-fault entry and area (set at boot by the syscall
/// crate, which owns the entry), and whether the tender has them now.
static FAULT_ENTRY: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);
static FAULT_AREA: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);
static FAULT_REGISTERED: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// Sets the program-fault entry and area given to the tender while the
/// program has a handler for a fault signal ([`update_fault_entry`]).
pub fn set_fault_entry(entry: u64, area: u64) {
    FAULT_AREA.store(area, core::sync::atomic::Ordering::Relaxed);
    FAULT_ENTRY.store(entry, core::sync::atomic::Ordering::Relaxed);
}

/// Gives the tender the program-fault entry while some fault signal has a
/// handler, and withdraws it when none has: a program without one ends at
/// a fault exactly as before (the tender's own report and status).
pub fn update_fault_entry() {
    use core::sync::atomic::Ordering::Relaxed;
    let entry = FAULT_ENTRY.load(Relaxed);
    if entry == 0 {
        return;
    }
    let want = SIGNALS.with(|s| FAULT_SIGNALS.iter().any(|&sig| matches!(s.disposition(sig), Disposition::Handle(_))));
    if want != FAULT_REGISTERED.load(Relaxed) {
        let r = shoal_plat::hypercall::program_fault(if want { entry } else { 0 }, FAULT_AREA.load(Relaxed));
        FAULT_REGISTERED.store(want && r == 0, Relaxed);
    }
}

/// Takes the fault `a` for the program, as Linux's `force_sig_fault`:
/// with its signal unblocked and a handler installed, blocks what the
/// action says (and honours `SA_RESETHAND`); returns the signal, its
/// action and the mask before. `None` (blocked, ignored or default): the
/// fault ends the instance.
fn take_fault(a: &shoal_abi::ProgramFaultArea) -> Option<(i32, KSigaction, u64)> {
    let sig = i32::try_from(a.signo).ok().filter(|s| FAULT_SIGNALS.contains(s))?;
    with_signals(|s| {
        let old_mask = s.mask;
        let Disposition::Handle(act) = s.disposition(sig) else { return None };
        if old_mask & bit(sig) != 0 {
            return None;
        }
        if act.flags & SA_RESETHAND != 0 {
            s.actions[(sig - 1) as usize] = KSigaction::default();
            s.actions_changed += 1;
        }
        let own = if act.flags & SA_NODEFER != 0 { 0 } else { bit(sig) };
        s.set_mask(old_mask | act.mask | own);
        Some((sig, act, old_mask))
    })
}

/// The restorer a handler returns to.
fn restorer_of(act: &KSigaction) -> u64 {
    if act.flags & SA_RESTORER != 0 && act.restorer != 0 {
        act.restorer
    } else {
        shoal_process_restorer as *const () as u64
    }
}

/// Delivers a CPU fault of a program linked with the kernel: the handler
/// runs on a frame holding the faulting registers and
/// `trapno`/`err`/`cr2` (and the FPU/SSE state saved at `fp`), below this
/// kernel code's stack (the program's) or on the alternate stack, and
/// what its `rt_sigreturn` leaves in the context (a handler may move rip
/// and rsp) is returned, to resume there (the FPU/SSE state back at
/// `fp`). `None`: the fault ends the instance.
pub fn deliver_fault(a: &shoal_abi::ProgramFaultArea, fp: Fp) -> Option<Regs> {
    let (sig, act, old_mask) = take_fault(a)?;
    let info = Info { code: a.code as u32 as i32, a: a.addr, b: 0 }.siginfo(sig);
    let fault = Fault { err: a.err, trapno: a.trapno, cr2: a.cr2 };
    let (back, mask) = run_handler(sig, info, fault, act, old_mask, (a.regs, Some(fp)), a.regs[reg::RSP], a.regs[reg::EFLAGS], 0);
    with_signals(|s| s.set_mask(mask));
    Some(back)
}

/// Delivers a CPU fault of an unmodified executable as Linux does, with
/// nothing left on the kernel's side: builds the `rt_sigframe` (the
/// faulting registers, the FPU/SSE state saved at `fp`) below the faulting
/// stack's red zone or on the alternate stack, and returns the registers
/// that enter the handler (rip = the handler, rsp = the frame, rdi, rsi,
/// rdx = signal, info, context, rax = 0, DF, TF and RF clear; the others
/// as at the fault). Its `rt_sigreturn` comes back as a system call at
/// the frame ([`sigreturn_direct`]); a handler that leaves with
/// `siglongjmp` leaves nothing behind. `None`: the fault ends the instance.
pub fn deliver_fault_direct(a: &shoal_abi::ProgramFaultArea, fp: Fp) -> Option<Regs> {
    let (sig, act, old_mask) = take_fault(a)?;
    let info = Info { code: a.code as u32 as i32, a: a.addr, b: 0 }.siginfo(sig);
    let fault = Fault { err: a.err, trapno: a.trapno, cr2: a.cr2 };
    let sp = a.regs[reg::RSP];
    let alt = SIGNALS.with(|s| s.altstack);
    let top = alt_stack_top(&act, &alt, sp);
    let d = Delivery { info, fault, old_mask, altstack: alt, restorer: restorer_of(&act), fp };
    let Ok(f) = build_frame(top.unwrap_or(sp.wrapping_sub(128)), &a.regs, &d) else { terminate(11) };
    if top.is_some() && alt.ss_flags & SS_AUTODISARM != 0 {
        signals_mut(|s| s.altstack = NO_ALTSTACK);
    }
    let mut r = a.regs;
    r[reg::RIP] = act.handler;
    r[reg::RSP] = f.sp;
    r[reg::RDI] = sig as u64;
    r[reg::RSI] = f.info;
    r[reg::RDX] = f.uc;
    r[reg::RAX] = 0;
    // DF, TF and RF, as Linux clears them for a handler.
    r[reg::EFLAGS] &= !(0x400 | 0x100 | 0x1_0000);
    Some(r)
}

/// Whether the `rt_sigreturn` of a thread whose stack pointer is `uc`
/// returns from the handler the kernel entered last for it (nested in
/// kernel code: [`sigreturn_from_image`] resumes there) rather than from
/// a frame built for a direct delivery ([`sigreturn_direct`]).
pub fn is_nested_frame(uc: u64) -> bool {
    let jb = handler_top(shoal_sched::current_tid());
    if jb == 0 {
        return false;
    }
    // Read with checks: a handler left by siglongjmp leaves a stale entry,
    // whose stack may hold anything now.
    let at = |field: usize| jb.wrapping_add(field as u64);
    let Ok(ctx) = shoal_plat::umem::read::<u64>(at(core::mem::offset_of!(JumpBuf, ctx))) else { return false };
    let off = core::mem::offset_of!(EnterCtx, frame) + core::mem::offset_of!(Frame, uc);
    ctx != 0 && shoal_plat::umem::read::<u64>(ctx.wrapping_add(off as u64)).is_ok_and(|u| u == uc)
}

/// `rt_sigreturn` of a frame built by [`deliver_fault_direct`], at the
/// `ucontext_t` at `uc` (the caller's stack pointer): the registers to
/// resume with (eflags: the user flags over `old_flags`), the FPU/SSE
/// state into `fx` (over the state there, which the caller saved), the
/// signal mask set and an alternate stack disarmed for the handler armed
/// again, as Linux's. Fails when the frame cannot be read (Linux then
/// kills with SIGSEGV).
pub fn sigreturn_direct(uc: u64, old_flags: u64, fx: &mut Fxsave) -> Result<Regs, Errno> {
    let (regs, mask) = read_frame(uc, old_flags)?;
    fx.take(fpstate_of(uc)?.as_ref());
    let st: StackT = shoal_plat::umem::read(uc + UC_STACK as u64)?;
    with_signals(|s| {
        if st.ss_flags & SS_AUTODISARM != 0 && s.altstack.ss_size == 0 && !on_stack(&st, regs[reg::RSP]) {
            s.altstack = st;
        }
        s.set_mask(mask);
    });
    Ok(regs)
}

/// Saves the running thread's FPU/SSE state into `fx`.
pub fn save_fp(fx: &mut Fxsave) {
    fxsave(fx);
}

/// Enters the handler `act` of `sig` with `regs` in its context (and the
/// FPU/SSE state an entry path saved, which gets the context's back) (`sp`:
/// where the thread was, for the alternate-stack decision) and returns
/// the context's registers and mask after its `rt_sigreturn` (eflags:
/// only the user flags, over `old_flags`). The frame goes on the
/// alternate stack if the action says so, else below `below` (0: below
/// this kernel code's stack).
#[allow(clippy::too_many_arguments)]
fn run_handler(
    sig: i32,
    info: SigInfo,
    fault: Fault,
    act: KSigaction,
    old_mask: u64,
    (regs, fp): (Regs, Option<Fp>),
    sp: u64,
    old_flags: u64,
    below: u64,
) -> (Regs, u64) {
    let alt = SIGNALS.with(|s| s.altstack);
    // Below this kernel code's stack unless on the alternate stack.
    let switch = alt_stack_top(&act, &alt, sp).is_some();
    let mut ctx = EnterCtx {
        handler: act.handler,
        sig,
        regs,
        delivery: Delivery { info, fault, old_mask, altstack: alt, restorer: restorer_of(&act), fp: fp.unwrap_or(Fp::LIVE) },
        top: if switch { alt.ss_sp.wrapping_add(alt.ss_size) } else { below },
        frame: Frame { sp: 0, info: 0, uc: 0 },
        taken: Taken { regs: [0; 18], mask: 0, fp_null: false, fp: Fxsave::default() },
    };
    if switch && alt.ss_flags & SS_AUTODISARM != 0 {
        signals_mut(|s| s.altstack = NO_ALTSTACK);
    }
    let tid = shoal_sched::current_tid();
    let mut jb = JumpBuf::default();
    let at = core::ptr::from_mut(&mut jb) as u64;
    jb.prev = handler_top(tid);
    jb.ctx = core::ptr::from_mut(&mut ctx) as u64;
    set_handler_top(tid, at);
    // The handler is the program's code: preemptible while it runs.
    shoal_sched::preempt::leave();
    // SAFETY: the program installed `act.handler` as the handler of `sig`
    // with rt_sigaction; it is entered as Linux enters it, on a frame
    // built below this function's stack in memory the program may write
    // (checked), and comes back only through its rt_sigreturn, which
    // resumes here with this function's registers and stack as they were
    // (`jb` and `ctx` live until then).
    unsafe { shoal_process_enter_handler(&mut jb, &mut ctx) };
    shoal_sched::preempt::enter();
    // SAFETY: `jb` was written by the entry above through a raw pointer.
    let prev = unsafe { core::ptr::read_volatile(&raw const jb.prev) };
    set_handler_top(tid, prev);
    if switch && alt.ss_flags & SS_AUTODISARM != 0 {
        signals_mut(|s| s.altstack = alt);
    }
    // SAFETY: written by sigreturn_from_image through a raw pointer.
    let t = unsafe { core::ptr::read_volatile(&raw const ctx.taken) };
    let mut regs = t.regs;
    regs[reg::EFLAGS] = (old_flags & !USER_FLAGS) | (regs[reg::EFLAGS] & USER_FLAGS);
    if let Some(fp) = fp {
        if fp_back((!t.fp_null).then_some(&t.fp), fp).is_err() {
            terminate(11);
        }
    }
    (regs, t.mask)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the handler below saw: (rip, rax, rsp) from its context.
    static SEEN: std::sync::Mutex<(u64, u64, u64)> = std::sync::Mutex::new((0, 0, 0));

    extern "C" fn redirecting(_sig: i32, _info: *mut SigInfo, uc: *mut u64) {
        // SAFETY: call_handler passes its 128-word context.
        let uc = unsafe { core::slice::from_raw_parts_mut(uc, (UC_SIZE / 8) as usize) };
        *SEEN.lock().unwrap() = (uc[UC_GREGS + 16], uc[UC_GREGS + 13], uc[UC_GREGS + 15]);
        uc[UC_GREGS + 16] = 0x4000; // rip: elsewhere, as musl's cancel handler does
        uc[UC_GREGS + 13] = 7; // rax
        uc[UC_GREGS + 17] = u64::MAX; // eflags: only the user flags may change
        uc[UC_GREGS + 15] -= 8; // rsp: a pushed return address, as Go's preemption does
    }

    #[test]
    fn a_handler_sees_and_changes_the_interrupted_registers() {
        let _serial = crate::TEST_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        shoal_plat::umem::set_bounds(1, u64::MAX);
        let mut frame: Interrupted = [0; 17];
        frame[14] = 42; // rax
        frame[15] = 0x202; // rflags: IF
        frame[16] = 0x1234; // rip
        let at = core::ptr::from_ref(&frame) as u64;
        let mut rsp = interrupted_rsp(at);
        let act = KSigaction { handler: redirecting as extern "C" fn(i32, *mut SigInfo, *mut u64) as usize as u64, flags: SA_SIGINFO, ..Default::default() };
        call_handler(10, Info::sent(SI_USER), act, 0, Some((&mut frame, &mut rsp)), None);
        assert_eq!(*SEEN.lock().unwrap(), (0x1234, 42, interrupted_rsp(at)));
        assert_eq!(rsp, interrupted_rsp(at) - 8, "the new rsp");
        assert_eq!(frame[16], 0x4000, "the new rip");
        assert_eq!(frame[14], 7, "the new rax");
        assert_eq!(frame[15], 0x202 | USER_FLAGS, "IF kept, user flags set");
        // Without an interrupted frame the context is zero and nothing is taken.
        call_handler(10, Info::sent(SI_USER), act, 0, None, None);
        assert_eq!(*SEEN.lock().unwrap(), (0, 0, 0));
    }

    #[test]
    fn layouts() {
        let _serial = crate::TEST_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        assert_eq!(core::mem::size_of::<KSigaction>(), 32);
        assert_eq!(core::mem::size_of::<StackT>(), 24);
        assert_eq!(core::mem::size_of::<SigInfo>(), 128);
    }

    #[test]
    fn dispositions() {
        let _serial = crate::TEST_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let mut s = Signals::new();
        assert_eq!(s.disposition(6), Disposition::Terminate);
        assert_eq!(s.disposition(17), Disposition::Ignore);
        s.set_action(6, KSigaction { handler: SIG_IGN, ..Default::default() });
        assert_eq!(s.disposition(6), Disposition::Ignore);
        s.set_action(SIGKILL, KSigaction { handler: SIG_IGN, ..Default::default() });
        assert_eq!(s.disposition(SIGKILL), Disposition::Terminate);
    }

    #[test]
    fn pending_and_mask() {
        let _serial = crate::TEST_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let mut s = Signals::new();
        let q = &mut Box::new(Queue::new());
        // Unblocked and ignored: discarded.
        let _ = s.generate(q, 1, 17, Info::sent(SI_USER), true);
        assert_eq!(s.pending, 0);
        // Blocked: queued even if ignored; discarded when set to SIG_IGN.
        s.set_mask(bit(6) | bit(17) | UNBLOCKABLE);
        assert_eq!(s.mask, bit(6) | bit(17));
        let _ = s.generate(q, 1, 6, Info::sent(SI_TKILL), false);
        let _ = s.generate(q, 1, 17, Info::sent(SI_USER), true);
        assert_eq!(s.pending, bit(6) | bit(17));
        assert_eq!(s.next_deliverable(q, 1), None);
        s.set_action(17, KSigaction { handler: SIG_IGN, ..Default::default() });
        assert_eq!(s.pending, bit(6));
        s.set_mask(0);
        assert_eq!(s.next_deliverable(q, 1), Some((6, Info::sent(SI_TKILL))));
        assert_eq!(s.next_deliverable(q, 1), None);
    }

    #[test]
    fn real_time_signals_queue_and_standard_ones_coalesce() {
        let _serial = crate::TEST_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let mut s = Box::new(Signals::new());
        let q = &mut Box::new(Queue::new());
        s.set_mask(bit(10) | bit(34));
        for v in 0..100u64 {
            s.generate(q, 1, 34, Info { code: -1, a: 1, b: v }, true).unwrap();
            s.generate(q, 1, 10, Info { code: -1, a: 1, b: v }, true).unwrap();
        }
        assert_eq!(q.len(), 101);
        s.set_mask(0);
        assert_eq!(s.next_deliverable(q, 1), Some((10, Info { code: -1, a: 1, b: 0 })), "the first send's information");
        for v in 0..100u64 {
            assert_eq!(s.next_deliverable(q, 1), Some((34, Info { code: -1, a: 1, b: v })));
        }
        assert_eq!(s.next_deliverable(q, 1), None);
        // A full queue: sigqueue is refused, kill still makes it pending.
        s.set_mask(bit(34));
        for _ in 0..QUEUE_MAX {
            s.generate(q, 1, 34, Info { code: -1, a: 1, b: 0 }, true).unwrap();
        }
        assert_eq!(s.generate(q, 1, 34, Info { code: -1, a: 1, b: 0 }, true), Err(Errno::EAGAIN));
        assert_eq!(s.generate(q, 1, 35, Info::sent(SI_USER), true), Ok(()));
        assert_eq!(s.pending, bit(34) | bit(35));
        assert_eq!(s.take_from(q, 1, bit(35)), Some((35, Info { code: SI_USER, a: 0, b: 0 })));
    }
}
