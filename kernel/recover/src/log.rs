//! Calls from one component into another that do not pass the system-call
//! table, and the memory a stateful component keeps outside its own
//! regions (its call log).
//!
//! - [`enter`]: code of component `c` runs from here until the guard is
//!   dropped (vfs's entry `shoal_vfs::with`, which `net`, `mm` and the
//!   table's own read and write reach; ramfs's entry points, called by
//!   vfs). A failure there is `c`'s: the gate below (whatever component
//!   the system call entered) reboots `c` and retries the system call.
//!   With `count`, the call is counted for `--inject COMPONENT:…@N`.
//! - [`LOGS`]: one slot per component for its log, which restoring the
//!   component's snapshot leaves alone (this crate's memory is no
//!   component's). What a log holds is the component's business (vfs's
//!   module `heal`); it reports its size with [`set_log_bytes`] and the
//!   number of calls a reboot replayed with [`set_replayed`], for the
//!   reboot line.

use super::{count_call, injected, rebootable, swap_current, Component, ARMED, CURRENT, INJECT_AT, N, OFF};
use alloc::boxed::Box;
use core::any::Any;
use core::sync::atomic::{AtomicU16, AtomicU64, AtomicUsize, Ordering::Relaxed};
use shoal_plat::Global;

/// While alive, the code running is component `c`'s; dropping it returns
/// to the component that called (and ends the hang watch it started, if
/// it started one). Under `--no-recover` it holds [`UNTRACKED`] and its
/// drop does nothing.
pub struct Entered(Component, bool);

/// The component an [`Entered`] returns to when recovery is off
/// (`--no-recover`): none, and nothing to put back (no component number
/// is this large).
const UNTRACKED: Component = Component::MAX;

// `enter`, `enter_quiet`, the guard's drop and `log_cell` are called from
// every entry point of vfs and ramfs. Kept out of line (rustc would inline
// such small functions across crates): inlined, each caller would address
// recover's statics PC-relatively, a distance that changes with every
// image's layout under the `aslr` policy, and the callers' code pages
// would no longer be shared between images (docs/versioning.md; the
// `versions` test checks vfs). Out of line, the call goes through vfs's
// trampoline table and the code bytes stay the same.
//
// The drop's check for UNTRACKED could be inline (it reads only the
// guard), which saves the call under `--no-recover`; measured, it saved
// nothing beyond the noise there (SQLite's transaction call by call) and
// cost the file-system calls of `--recover-stateful` some 20 to 50 cycles
// each (vfs's entry points grew by the check), so it stays out of line.
impl Drop for Entered {
    #[inline(never)]
    fn drop(&mut self) {
        if self.0 == UNTRACKED {
            return;
        }
        if self.1 {
            super::watchdog::end();
        }
        CURRENT.store(self.0, Relaxed);
    }
}

/// Whether entering `c` from `prev` starts a hang watch: `c` is
/// rebootable, a gate is armed (so the watchdog's stop has a gate to
/// return to), and no call is watched yet (the gate entered a component
/// that is not rebootable: `mm`). See [`super::watchdog::begin_nested`].
#[inline]
fn watch_from(prev: Component, c: Component) -> bool {
    c != prev && ARMED.load(Relaxed) != 0 && rebootable(c) && super::watchdog::begin_nested(c)
}

/// Enters component `c` (see the module documentation), counting the call
/// for `--inject` and injecting the fault at its call: only when a gate
/// is armed and `c` is rebootable, so that a fault at that count is
/// always one the kernel can recover from (otherwise the count goes on).
///
/// Under `--no-recover` nothing is tracked (no gate sets the current
/// component either, nothing is counted, watched or rebooted): one load
/// of recover's `OFF` word and back, and the guard's drop a compare.
/// (Every file-system call enters vfs and ramfs this way: `enter` was
/// about 1.8% of SQLite's guest samples in that mode, 0.5% now. The
/// early return alone did not move it: the function saved three
/// registers before the check, for the calls further down; those calls
/// are in `enter_from` now.)
#[inline(never)]
pub fn enter(c: Component) -> Entered {
    if OFF.load(Relaxed) {
        return Entered(UNTRACKED, false);
    }
    let prev = swap_current(c);
    if c == prev {
        // Already in `c` (vfs's `with` under vfs's own gate): nothing to
        // watch or count.
        return Entered(prev, false);
    }
    enter_from(prev, c)
}

/// [`enter`] from another component `prev`: the hang watch, the count
/// and the injection. Apart, so that the two paths above it need no
/// saved registers.
#[inline(never)]
fn enter_from(prev: Component, c: Component) -> Entered {
    let watched = watch_from(prev, c);
    if count_call(c) && ARMED.load(Relaxed) != 0 && rebootable(c) {
        injected(c, INJECT_AT.load(Relaxed));
    }
    Entered(prev, watched)
}

/// Like [`enter`], without counting the call.
#[inline(never)]
pub fn enter_quiet(c: Component) -> Entered {
    if OFF.load(Relaxed) {
        return Entered(UNTRACKED, false);
    }
    let prev = swap_current(c);
    let watched = watch_from(prev, c);
    Entered(prev, watched)
}

/// Each component's log (see the module documentation). Other components
/// reach their slot through [`log_cell`].
pub static LOGS: [Global<Option<Box<dyn Any>>>; N] = [const { Global::new(None) }; N];

/// Component `c`'s slot in [`LOGS`] (out of line: see `Entered`'s drop).
#[inline(never)]
pub fn log_cell(c: Component) -> Option<&'static Global<Option<Box<dyn Any>>>> {
    (c as usize).checked_sub(1).and_then(|i| LOGS.get(i))
}

/// Bytes each component's log holds, as it last reported.
static LOG_BYTES: [AtomicU64; N] = [const { AtomicU64::new(0) }; N];
/// Calls the last reboot's replay applied (set by the after-reboot hook).
static REPLAYED: AtomicU64 = AtomicU64::new(0);

/// Component `c`'s log now holds `bytes` bytes.
pub fn set_log_bytes(c: Component, bytes: u64) {
    if let Some(b) = (c as usize).checked_sub(1).and_then(|i| LOG_BYTES.get(i)) {
        b.store(bytes, Relaxed);
    }
}

/// The size component `c`'s log last reported (0: none).
pub fn log_bytes(c: Component) -> u64 {
    (c as usize).checked_sub(1).and_then(|i| LOG_BYTES.get(i)).map_or(0, |b| b.load(Relaxed))
}

/// The reboot's replay applied `n` logged calls (called by an
/// after-reboot hook).
pub fn set_replayed(n: u64) {
    REPLAYED.store(n, Relaxed);
}

/// Takes the count [`set_replayed`] left (0 if none).
pub(crate) fn take_replayed() -> u64 {
    REPLAYED.swap(0, Relaxed)
}

/// The gate state of a thread that gives up the vCPU inside a system call
/// (see [`suspend`]).
pub struct Suspended {
    armed: u64,
    current: Component,
    context: [u64; 8],
}

/// Called by the scheduler right before it switches to another thread:
/// the armed gate, its saved context and the current component belong to
/// the thread leaving, so they are put aside (the next thread starts with
/// none armed) and [`resume`] puts them back when the thread runs again.
/// Without this, a failure in another thread would return to this
/// thread's gate, on the wrong stack.
pub fn suspend() -> Suspended {
    // SAFETY: one flow of control; the context is read here and written
    // only by a gate, which cannot run during this copy.
    let context = unsafe { *super::CONTEXT.0.get() };
    Suspended { armed: ARMED.swap(0, Relaxed), current: CURRENT.swap(0, Relaxed), context }
}

/// [`suspend`] as the scheduler's switch hook keeps it (installed by
/// `init`, which unit tests do not build).
#[cfg_attr(test, allow(dead_code))]
pub(crate) fn suspend_raw() -> [u64; 10] {
    let s = suspend();
    let mut w = [0u64; 10];
    w[0] = s.armed;
    w[1] = u64::from(s.current);
    w[2..].copy_from_slice(&s.context);
    w
}

/// [`resume`] from what [`suspend_raw`] kept.
#[cfg_attr(test, allow(dead_code))]
pub(crate) fn resume_raw(w: [u64; 10]) {
    let mut context = [0u64; 8];
    context.copy_from_slice(&w[2..]);
    resume(Suspended { armed: w[0], current: w[1] as Component, context });
}

/// Puts back what [`suspend`] put aside (the thread runs again).
pub fn resume(s: Suspended) {
    // SAFETY: as in `suspend`; the other threads' gates are all suspended
    // or finished, so nothing else uses the context now.
    unsafe { *super::CONTEXT.0.get() = s.context };
    CURRENT.store(s.current, Relaxed);
    ARMED.store(s.armed, Relaxed);
}

/// What a stateful component runs to bring its log up to date before a
/// call into it begins, once something is pending ([`set_pending`];
/// `process`: see `shoal_process::heal`), by component: function
/// addresses (0: none) in plain atomics, as [`COMMITTERS`].
static LOGGERS: [AtomicUsize; N] = [const { AtomicUsize::new(0) }; N];

/// What a component runs only before a rejuvenation reboots it (vfs,
/// ramfs and net: their logs are brought up to date as each call
/// leaves them, so before an ordinary call there is nothing to do; a
/// rejuvenation sets their sound state aside). Kept apart from
/// [`LOGGERS`] so that the gates of those components do not call a hook
/// that would only check [`rejuvenating`] and return.
static REJUVENATORS: [AtomicUsize; N] = [const { AtomicUsize::new(0) }; N];

/// Registers `f` to run before a gated call into `c` when `c` has called
/// [`set_pending`] since `f` last ran, and before a rejuvenation reboots
/// it.
pub fn set_logger(c: Component, f: fn()) {
    if let Some(l) = (c as usize).checked_sub(1).and_then(|i| LOGGERS.get(i)) {
        l.store(f as usize, Relaxed);
    }
}

/// Registers `f` to run before a rejuvenation reboots `c` (after its
/// logger, if it has one), never before an ordinary call.
pub fn set_rejuvenator(c: Component, f: fn()) {
    if let Some(l) = (c as usize).checked_sub(1).and_then(|i| REJUVENATORS.get(i)) {
        l.store(f as usize, Relaxed);
    }
}

/// Set while a rejuvenation reboots a component (no failure: its state
/// is sound, and its logger may set it aside to reuse or free it).
static REJUVENATING: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// Whether the reboot under way is a rejuvenation (see [`set_logger`]).
pub fn rejuvenating() -> bool {
    REJUVENATING.load(Relaxed)
}

pub(crate) fn set_rejuvenating(on: bool) {
    REJUVENATING.store(on, Relaxed);
}

/// What a stateful component runs after a gated call that left something
/// pending for it, whichever component the call entered (`net`: its
/// state also changes in calls into vfs — `close`, `poll` — that reach
/// it through vfs's object table; see `shoal_net::heal`), by component:
/// function addresses (0: none) in plain atomics.
static COMMITTERS: [AtomicUsize; N] = [const { AtomicUsize::new(0) }; N];

/// Bit `c - 1` set: component `c` has a committer.
static COMMITTER_MASK: AtomicU16 = AtomicU16::new(0);

/// Bit `c - 1` set: component `c` changed state its log does not hold
/// yet ([`set_pending`]). One word on recover's own page, beside the
/// gate's other words, so the check after every gated call is this load.
/// (A flag of each component's own, read through a pointer, put a load
/// from that component's page on every gated call: the gate's hottest
/// instruction in a profile of SQLite's inserts.)
static PENDING: AtomicU16 = AtomicU16::new(0);

/// Component `c` changed state its log does not hold yet: its logger runs
/// before the next gated call into it, its committer after the next gated
/// call (any component's). Out of line: see `Entered`'s drop.
#[inline(never)]
pub fn set_pending(c: Component) {
    if let Some(i) = (c as usize).checked_sub(1).filter(|i| *i < N) {
        PENDING.store(PENDING.load(Relaxed) | 1 << i, Relaxed);
    }
}

/// Registers `f` to run after a gated system call (any component's) once
/// `c` has called [`set_pending`]: it brings `c`'s log up to date with
/// what changed (and calls [`set_pending`] again if it could not).
pub fn set_committer(c: Component, f: fn()) {
    if let Some(i) = (c as usize).checked_sub(1).filter(|i| *i < N) {
        COMMITTERS[i].store(f as usize, Relaxed);
        COMMITTER_MASK.fetch_or(1 << i, Relaxed);
    }
}

/// Runs every committer whose component has something pending (after a
/// gated call): a load and a branch when none has.
#[inline]
pub(crate) fn after_call() {
    let mut mask = PENDING.load(Relaxed) & COMMITTER_MASK.load(Relaxed);
    while mask != 0 {
        let i = mask.trailing_zeros() as usize;
        mask &= mask - 1;
        PENDING.store(PENDING.load(Relaxed) & !(1 << i), Relaxed);
        run_hook(&COMMITTERS, i as Component + 1);
    }
}

/// Runs the hook `c` registered in `hooks`, if any.
#[inline]
fn run_hook(hooks: &[AtomicUsize; N], c: Component) {
    let a = (c as usize).checked_sub(1).and_then(|i| hooks.get(i)).map_or(0, |h| h.load(Relaxed));
    if a != 0 {
        // SAFETY: `a` was stored by `set_logger`, `set_rejuvenator` or
        // `set_committer` from a `fn()`, and is never anything else (0 is
        // checked above).
        let f: fn() = unsafe { core::mem::transmute::<usize, fn()>(a) };
        f();
    }
}

/// Before a gated call into `c`: if `c` has something pending, runs its
/// logger and its committer (a change to `c`'s state made outside every
/// gated call — process's signals, net's in the scheduler's idle wait —
/// is in its log before the call can fail).
#[inline]
pub(crate) fn before_call(c: Component) {
    let Some(i) = (c as usize).checked_sub(1).filter(|i| *i < N) else { return };
    let p = PENDING.load(Relaxed);
    if p & 1 << i == 0 {
        return;
    }
    PENDING.store(p & !(1 << i), Relaxed);
    run_hook(&LOGGERS, c);
    run_hook(&COMMITTERS, c);
}

/// Runs `c`'s logger and its rejuvenation hook (before a rejuvenation
/// reboots it).
pub(crate) fn before_rejuvenation(c: Component) {
    run_hook(&LOGGERS, c);
    run_hook(&REJUVENATORS, c);
}
