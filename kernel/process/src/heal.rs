//! Rebooting process (VampOS's component reboot; docs/recovery.md): its log and the replay.
//!
//! process's state is the signal state ([`crate::signal::SIGNALS`]:
//! dispositions, blocked mask, pending signals, alternate stack), the
//! resource limits and the System V IPC objects (on the heap: a restored
//! snapshot would point at freed memory). The log (in
//! `shoal_recover::LOGS`, outside process's memory) holds one entry for
//! each, as they were when the last call into process *began*: the gate
//! calls [`log_state`] before a call into process once a mutator said
//! the state changed ([`changed`], recover's pending word; and
//! rejuvenation before it reboots it), because the signal state also
//! changes outside process's calls (the system-call table delivers
//! signals, the scheduler raises the host's). Each entry is superseded in place when its part
//! changed — the log's size is that of the state. Whether a part changed
//! is known from a change count its mutators bump, not by comparing it:
//! the check before a call that changes nothing is three loads. A reboot restores the
//! snapshot, then [`after_reboot`] puts the three entries back (the IPC
//! objects as a fresh copy; the abandoned ones leak), and the gate retries
//! the call that failed from the state it began with. Shared-memory
//! segments keep their pages (they belong to `mm`); threads blocked in a
//! `semop` stay blocked and are woken as before.

use crate::ipc::{self, Ipc};
use crate::limits::{Rlimit, NLIMITS};
use crate::signal::{Signals, SIGNALS};
use alloc::boxed::Box;
use core::sync::atomic::{AtomicU64, Ordering::Relaxed};
use shoal_recover::id;

struct Log {
    signals: Signals,
    /// `signal::CHANGES` when `signals` was copied.
    signals_seen: u64,
    limits: Option<[Rlimit; NLIMITS]>,
    /// `sys::LIMIT_CHANGES` when `limits` was copied.
    limits_seen: u64,
    ipc: Ipc,
    /// `ipc::IPC_CHANGES` when `ipc` was copied.
    ipc_seen: u64,
    /// Calls that changed one of the entries.
    calls: u64,
}

fn slot<R>(f: impl FnOnce(&mut Log) -> R) -> Option<R> {
    shoal_recover::log_cell(id::PROCESS)?.try_with(|s| s.as_mut().and_then(|b| b.downcast_mut::<Log>()).map(f)).flatten()
}

/// The change counts the log was last brought up to date with (all
/// three parts copied): [`log_state`]'s fast path. Each is stored
/// inverted (`!count`), so the start value `u64::MAX` is all zero and the
/// cell lies in `.bss` (a non-zero start put process's `.data` on a page
/// of its own in every instance).
struct Seen([AtomicU64; 3]);

impl Seen {
    fn with_counts(&self, sig: u64, lim: u64, ipc: u64) -> bool {
        !self.0[0].load(Relaxed) == sig && !self.0[1].load(Relaxed) == lim && !self.0[2].load(Relaxed) == ipc
    }

    fn set(&self, sig: u64, lim: u64, ipc: u64) {
        self.0[0].store(!sig, Relaxed);
        self.0[1].store(!lim, Relaxed);
        self.0[2].store(!ipc, Relaxed);
    }
}

/// Starts unequal to every live count (those start at 0 and only grow):
/// `u64::MAX`, stored inverted.
static UP_TO_DATE: Seen = Seen([const { AtomicU64::new(0) }; 3]);

/// Starts the log (at the end of kernel initialisation) and registers
/// [`log_state`] with the gate.
pub fn start() {
    // Only when process is rebootable (`--recover-stateful`): otherwise
    // nothing would ever replay the log.
    if !shoal_recover::stateful() {
        return;
    }
    // The `_seen` counts start unequal to the live ones: the first
    // `log_state` copies everything.
    let log = Log {
        signals: SIGNALS.with(|s| *s),
        signals_seen: u64::MAX,
        limits: crate::sys::limits_now().flatten(),
        limits_seen: u64::MAX,
        ipc: Ipc::new(),
        ipc_seen: u64::MAX,
        calls: 0,
    };
    if let Some(cell) = shoal_recover::log_cell(id::PROCESS) {
        cell.with(|s| *s = Some(Box::new(log)));
    }
    shoal_recover::set_logger(id::PROCESS, log_state);
    log_state();
}

/// Something the log holds changed (a mutator bumped its count): the
/// gate runs [`log_state`] before the next call into process. Out of
/// line: it is rare, and keeps recover's call in one place.
#[inline(never)]
pub(crate) fn changed() {
    shoal_recover::set_pending(id::PROCESS);
}

/// Brings the log up to date (the gate calls this before a call into
/// process once a mutator called [`changed`], and before a
/// rejuvenation). Each part is copied only when its change count moved since
/// the last copy (the mutators count: `signal::signals_mut`,
/// `sys::LIMIT_CHANGES`, `ipc::IPC_CHANGES`), so a call that changed
/// nothing — `getpid`, nearly every call — costs three loads and
/// compares, not a comparison of the whole state.
pub fn log_state() {
    let sig_n = crate::signal::CHANGES.load(Relaxed);
    let lim_n = crate::sys::LIMIT_CHANGES.load(Relaxed);
    let ipc_n = ipc::changes();
    // Nothing moved since the log was last brought up to date: not even
    // the log's cell is borrowed (the common case: getpid and the like).
    if !shoal_recover::rejuvenating() && UP_TO_DATE.with_counts(sig_n, lim_n, ipc_n) {
        return;
    }
    let done = slot(|log| {
        let mut changed = ipc::copy_if_changed(&mut log.ipc, &mut log.ipc_seen) == Some(true);
        if log.signals_seen != sig_n {
            // Borrowed elsewhere (a failed call abandoned its borrow):
            // the copy waits for a later call.
            if let Some(s) = SIGNALS.try_with(|s| *s) {
                log.signals = s;
                log.signals_seen = sig_n;
                changed = true;
            }
        }
        if log.limits_seen != lim_n {
            if let Some(limits) = crate::sys::limits_now() {
                log.limits = limits;
                log.limits_seen = lim_n;
                changed = true;
            }
        }
        if changed {
            log.calls += 1;
        }
        log.signals_seen == sig_n && log.limits_seen == lim_n && log.ipc_seen == ipc_n
    });
    if done == Some(true) {
        UP_TO_DATE.set(sig_n, lim_n, ipc_n);
    } else {
        // Borrowed (a failed call abandoned the borrow): the copy waits
        // for the next call into process.
        changed();
    }
    // Before a rejuvenation the IPC objects are sound: freed here (the
    // reboot installs the log's copy) rather than leaked.
    if shoal_recover::rejuvenating() {
        ipc::clear();
    }
}

/// After-reboot hook of process: its memory is its snapshot again; the
/// logged state goes back.
pub fn after_reboot(_count: u64) {
    let done = slot(|log| {
        SIGNALS.with(|s| *s = log.signals);
        crate::sys::set_limits_now(log.limits);
        ipc::install(log.ipc.clone());
        core::mem::size_of::<Log>() + log.ipc.heap_bytes()
    });
    let Some(bytes) = done else {
        use core::fmt::Write;
        let _ = writeln!(shoal_plat::console::Stderr, "shoal: cannot rebuild process after a reboot: its log is unavailable");
        shoal_plat::halt(134)
    };
    shoal_recover::set_replayed(3);
    shoal_recover::set_log_bytes(id::PROCESS, bytes as u64);
    // The restored counts are the snapshot's: the next call into process
    // compares them with the log's afresh.
    changed();
}
