//! Preemption ticks and the hang watchdog, for both tenders (the protocol
//! is `shoal_abi::PreemptArea`'s).
//!
//! The tick is a host timer that stops the guest between two instructions:
//! on spt a `SIGALRM` whose handler gets the interrupted context, on hvt a
//! signal that makes `KVM_RUN` return. The tick is armed by the `Preempt`
//! hypercall only when the guest has more than one runnable thread, and
//! disarmed by the first tick that finds at most one. At a tick the
//! interrupted guest goes to the kernel's preemption entry only when it was
//! in the program's code (the tender's [`Cpu::in_program`]) and the
//! kernel's `in_kernel` word is clear; otherwise `pending` is set for the
//! kernel to yield on its way out. The area and the entry are the guest's:
//! a guest that lies in them redirects only itself, inside its own memory.
//!
//! The same tick is the hang watchdog's: while a gated call into a
//! rebootable kernel component is in progress (the area's `watch`), the
//! tick runs even with one thread, at the watchdog's period when nobody
//! needs preempting ([`shoal_abi::PREEMPT_ARMED_WATCHDOG`], armed by the
//! kernel's `PREEMPT_WATCH`), and [`shoal_loader::watchdog::step`] ages the
//! call; a call older than the limit is stopped: the guest goes to the
//! kernel's fault entry ([`Cpu::stop_hang`]), which reboots the component.
//! A tick that finds neither a thread to preempt nor a call in progress
//! disarms, so a program whose gated calls are short gets at most one
//! watchdog tick per period of its run.
//!
//! The same tick also serves a kernel that holds output back (hvt's stdout
//! buffer, writing into a pipe, flushes at most every 10 ms instead of at
//! every newline): it sets the area's `wake` and, when no tick runs,
//! arms one with `PREEMPT_WAKE` ([`Model::wake`]); a tick that finds
//! `wake` set interrupts the guest even with one thread, and the kernel's
//! entry writes the held output. So a line printed before a long
//! computation still reaches the reader, at most two VM exits per period
//! instead of one per line.
//!
//! [`Model`] is all atomics and allocates nothing: spt runs it in a signal
//! handler with the guest's thread pointer loaded.

use core::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use shoal_abi::preempt_word::{ARMED, IN_KERNEL, PENDING, RESUME_RIP, RUNNABLE, TICKS, WAKE, WATCH, WATCH_SEQ};
use shoal_abi::{PREEMPT_ARMED_TICK, PREEMPT_ARMED_WAKE, PREEMPT_ARMED_WATCHDOG};
use shoal_loader::watchdog::{self, Verdict};

/// Size of the guest's area in bytes.
pub const AREA_BYTES: u64 = core::mem::size_of::<shoal_abi::PreemptArea>() as u64;

/// The tender's tick timer.
pub trait Timer {
    /// Makes the timer if the tender makes it lazily: `Err(-errno)`.
    fn make(&self) -> Result<(), i64> {
        Ok(())
    }
    /// Runs the timer every `period_ns` (0: stops it): 0 or `-errno`.
    fn set(&self, period_ns: u64) -> i64;
    /// Counts one tick for the tender's statistics: a preemption tick, or
    /// one that ran at the watchdog's period only.
    fn count(&self, watchdog_only: bool);
}

/// The guest stopped by a tick (or a forwarded signal), as the tender
/// reaches it.
pub trait Cpu {
    /// How the tender fails to change the guest's registers.
    type Error;
    /// The interrupted instruction.
    fn rip(&self) -> u64;
    /// Whether the guest was stopped in the program's code (not in the
    /// tender, not in the kernel's own privileged code): only there may it
    /// be sent to the preemption entry.
    fn in_program(&self) -> bool;
    /// Continues the guest at `rip`.
    fn set_rip(&mut self, rip: u64) -> Result<(), Self::Error>;
    /// Sends the guest to the kernel's fault entry with
    /// `shoal_abi::FAULT_HANG`, if the kernel can take it there now;
    /// returns whether it did (otherwise the next tick tries again).
    fn stop_hang(&mut self) -> Result<bool, Self::Error>;
}

/// The preemption model's state: one per tender process (a `static`).
pub struct Model {
    /// The guest's area as the tender reaches it, once registered.
    area: AtomicPtr<AtomicU64>,
    /// The kernel's preemption entry.
    entry: AtomicU64,
    /// The watchdog's limit (ns; 0: off).
    limit: AtomicU64,
    /// The period the timer runs at now (ns).
    period: AtomicU64,
    /// The preemption period the kernel asked for (ns).
    tick_ns: AtomicU64,
    /// The watchdog's state between ticks (`watchdog::Watch`).
    watch_seq: AtomicU64,
    watch_age: AtomicU64,
}

impl Default for Model {
    fn default() -> Self {
        Self::new()
    }
}

impl Model {
    /// No area, no watchdog.
    pub const fn new() -> Model {
        Model {
            area: AtomicPtr::new(core::ptr::null_mut()),
            entry: AtomicU64::new(0),
            limit: AtomicU64::new(0),
            period: AtomicU64::new(0),
            tick_ns: AtomicU64::new(shoal_abi::PREEMPT_TICK_NS),
            watch_seq: AtomicU64::new(0),
            watch_age: AtomicU64::new(0),
        }
    }

    /// Sets the hang watchdog's limit (ns; 0: off).
    pub fn set_limit(&self, watchdog_ns: u64) {
        self.limit.store(watchdog_ns, Ordering::SeqCst);
    }

    /// `Preempt`/`PREEMPT_REGISTER`, checked by the tender: `area` is
    /// where the tender reaches [`AREA_BYTES`] of 8-aligned, writable guest
    /// memory that stays mapped until [`Model::clear`]; `entry` is inside
    /// guest memory.
    pub fn register(&self, area: *mut u8, entry: u64) {
        self.entry.store(entry, Ordering::SeqCst);
        self.area.store(area.cast(), Ordering::SeqCst);
    }

    /// The period the timer runs at now (ns; 0: stopped).
    pub fn period(&self) -> u64 {
        self.period.load(Ordering::SeqCst)
    }

    /// Whether the guest registered its area.
    pub fn registered(&self) -> bool {
        !self.area.load(Ordering::SeqCst).is_null()
    }

    /// Forgets the area (before guest memory is unmapped).
    pub fn clear(&self) {
        self.area.store(core::ptr::null_mut(), Ordering::SeqCst);
    }

    fn word(&self, i: usize) -> Option<&AtomicU64> {
        let a = self.area.load(Ordering::SeqCst);
        // SAFETY: `register`'s caller vouched for AREA_BYTES of 8-aligned
        // guest memory mapped until `clear` forgets it; `i` is one of the
        // area's word indices.
        (!a.is_null()).then(|| unsafe { &*a.add(i) })
    }

    fn set_timer(&self, timer: &impl Timer, period_ns: u64) -> i64 {
        self.period.store(period_ns, Ordering::SeqCst);
        timer.set(period_ns)
    }

    /// `Preempt`/`PREEMPT_ARM`: starts the tick (every `tick_ns`, at least
    /// `shoal_abi::PREEMPT_MIN_TICK_NS`).
    pub fn arm(&self, timer: &impl Timer, tick_ns: u64) -> i64 {
        let Some(armed) = self.word(ARMED) else {
            return -i64::from(libc::EINVAL);
        };
        if let Err(e) = timer.make() {
            return e;
        }
        let tick = tick_ns.clamp(shoal_abi::PREEMPT_MIN_TICK_NS, 1_000_000_000);
        self.tick_ns.store(tick, Ordering::SeqCst);
        let rc = self.set_timer(timer, tick);
        if rc == 0 {
            armed.store(PREEMPT_ARMED_TICK, Ordering::SeqCst);
        }
        rc
    }

    /// `Preempt`/`PREEMPT_WATCH`: a gated call began with the tick off: run
    /// the tick at the watchdog's period, counting the call's age from now.
    /// Nothing to do when the tick runs already or there is no watchdog.
    pub fn watch(&self, timer: &impl Timer) -> i64 {
        let (Some(armed), Some(seq)) = (self.word(ARMED), self.word(WATCH_SEQ)) else {
            return -i64::from(libc::EINVAL);
        };
        let limit = self.limit.load(Ordering::SeqCst);
        if limit == 0 || armed.load(Ordering::SeqCst) != 0 {
            return 0;
        }
        self.watch_seq.store(seq.load(Ordering::SeqCst), Ordering::SeqCst);
        self.watch_age.store(0, Ordering::SeqCst);
        if let Err(e) = timer.make() {
            return e;
        }
        let rc = self.set_timer(timer, limit);
        if rc == 0 {
            armed.store(PREEMPT_ARMED_WATCHDOG, Ordering::SeqCst);
        }
        rc
    }

    /// `Preempt`/`PREEMPT_WAKE`: one tick after `delay_ns` (at least
    /// `shoal_abi::PREEMPT_MIN_TICK_NS`) for a kernel that set the area's
    /// `wake`. Nothing to do while the preemption tick runs (it comes
    /// anyway); a watchdog-only tick, slower, is brought forward.
    pub fn wake(&self, timer: &impl Timer, delay_ns: u64) -> i64 {
        let Some(armed) = self.word(ARMED) else {
            return -i64::from(libc::EINVAL);
        };
        let mode = armed.load(Ordering::SeqCst);
        if mode == PREEMPT_ARMED_TICK || mode == PREEMPT_ARMED_WAKE {
            return 0;
        }
        if let Err(e) = timer.make() {
            return e;
        }
        let rc = self.set_timer(timer, delay_ns.clamp(shoal_abi::PREEMPT_MIN_TICK_NS, 1_000_000_000));
        if rc == 0 {
            armed.store(PREEMPT_ARMED_WAKE, Ordering::SeqCst);
        }
        rc
    }

    /// One tick, with the guest stopped (see the module documentation).
    pub fn tick<C: Cpu>(&self, timer: &impl Timer, cpu: &mut C) -> Result<(), C::Error> {
        let (Some(runnable), Some(armed), Some(ticks), Some(watch), Some(seq), Some(wake)) =
            (self.word(RUNNABLE), self.word(ARMED), self.word(TICKS), self.word(WATCH), self.word(WATCH_SEQ), self.word(WAKE))
        else {
            // No area (never registered, or forgotten): nothing to tick for.
            timer.count(false);
            self.set_timer(timer, 0);
            return Ok(());
        };
        let mode = armed.load(Ordering::SeqCst);
        timer.count(mode == PREEMPT_ARMED_WATCHDOG);
        ticks.fetch_add(1, Ordering::Relaxed);
        // The watchdog first: a hang is stopped whether or not other
        // threads wait.
        let limit = self.limit.load(Ordering::SeqCst);
        let prev = watchdog::Watch { seq: self.watch_seq.load(Ordering::SeqCst), age_ns: self.watch_age.load(Ordering::SeqCst) };
        let (w, verdict) = watchdog::step(prev, watch.load(Ordering::SeqCst), seq.load(Ordering::SeqCst), self.period.load(Ordering::SeqCst), limit);
        self.watch_seq.store(w.seq, Ordering::SeqCst);
        self.watch_age.store(w.age_ns, Ordering::SeqCst);
        if verdict == Verdict::Hang && cpu.stop_hang()? {
            self.watch_age.store(0, Ordering::SeqCst);
            return Ok(());
        }
        if runnable.load(Ordering::SeqCst) <= 1 {
            if verdict == Verdict::Idle {
                self.set_timer(timer, 0);
                armed.store(0, Ordering::SeqCst);
            } else if mode != PREEMPT_ARMED_WATCHDOG {
                // Nobody to preempt, a call to watch: the watchdog's period.
                self.set_timer(timer, limit);
                armed.store(PREEMPT_ARMED_WATCHDOG, Ordering::SeqCst);
            }
            // Held output: the kernel's entry writes it.
            if wake.load(Ordering::SeqCst) != 0 {
                return self.interrupt(cpu);
            }
            return Ok(());
        }
        if mode != PREEMPT_ARMED_TICK {
            self.set_timer(timer, self.tick_ns.load(Ordering::SeqCst));
            armed.store(PREEMPT_ARMED_TICK, Ordering::SeqCst);
        }
        self.interrupt(cpu)
    }

    /// Makes the guest's kernel look at what came for it now: sent to the
    /// preemption entry if it was stopped in the program's code (the entry
    /// yields, raises forwarded host signals and delivers what is pending,
    /// so a SIGTERM reaches a program that computes in a loop, as on
    /// Linux); in the kernel or the tender, `pending` makes the kernel do
    /// the same on its way out of the system call. Nothing before the
    /// guest registered its area.
    pub fn interrupt<C: Cpu>(&self, cpu: &mut C) -> Result<(), C::Error> {
        let (Some(in_kernel), Some(pending), Some(resume)) = (self.word(IN_KERNEL), self.word(PENDING), self.word(RESUME_RIP)) else {
            return Ok(());
        };
        if in_kernel.load(Ordering::SeqCst) != 0 || !cpu.in_program() {
            pending.store(1, Ordering::SeqCst);
            return Ok(());
        }
        resume.store(cpu.rip(), Ordering::SeqCst);
        in_kernel.store(1, Ordering::SeqCst);
        cpu.set_rip(self.entry.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::cell::Cell;

    /// The timer's last period (0: stopped).
    #[derive(Default)]
    struct FakeTimer {
        period: Cell<u64>,
    }

    impl Timer for FakeTimer {
        fn set(&self, period_ns: u64) -> i64 {
            self.period.set(period_ns);
            0
        }
        fn count(&self, _watchdog_only: bool) {}
    }

    /// A guest stopped in its program's code at `rip`.
    struct FakeCpu {
        rip: u64,
    }

    impl Cpu for FakeCpu {
        type Error = ();
        fn rip(&self) -> u64 {
            self.rip
        }
        fn in_program(&self) -> bool {
            true
        }
        fn set_rip(&mut self, rip: u64) -> Result<(), ()> {
            self.rip = rip;
            Ok(())
        }
        fn stop_hang(&mut self) -> Result<bool, ()> {
            Ok(false)
        }
    }

    const ENTRY: u64 = 0x4000;

    fn model(area: &mut [u64; 16]) -> Model {
        let m = Model::new();
        m.register(area.as_mut_ptr().cast(), ENTRY);
        area[RUNNABLE] = 1;
        m
    }

    #[test]
    fn a_wake_tick_interrupts_a_lone_thread_once_then_stops() {
        let mut area = [0u64; 16];
        let m = model(&mut area);
        let timer = FakeTimer::default();
        let words = area.as_ptr();
        // SAFETY: every index used is below the area's 16 words, which
        // live until the end of the test.
        let word = |i: usize| unsafe { words.add(i).read_volatile() };
        // The kernel holds a line back: wake set, one tick asked for.
        // SAFETY: as above.
        unsafe { words.cast_mut().add(WAKE).write_volatile(1) };
        assert_eq!(m.wake(&timer, 10_000_000), 0);
        assert_eq!(timer.period.get(), 10_000_000);
        assert_eq!(word(ARMED), PREEMPT_ARMED_WAKE);
        // The tick: one thread, no watchdog: the guest goes to the entry
        // (to write the line out) and the tick stops.
        let mut cpu = FakeCpu { rip: 0x1234 };
        m.tick(&timer, &mut cpu).unwrap();
        assert_eq!(cpu.rip, ENTRY, "sent to the kernel's entry");
        assert_eq!(word(RESUME_RIP), 0x1234);
        assert_eq!(word(IN_KERNEL), 1);
        assert_eq!(timer.period.get(), 0, "one tick only");
        assert_eq!(word(ARMED), 0);
    }

    #[test]
    fn without_wake_a_lone_thread_is_not_interrupted() {
        let mut area = [0u64; 16];
        let m = model(&mut area);
        let timer = FakeTimer::default();
        assert_eq!(m.wake(&timer, 5_000_000), 0);
        let mut cpu = FakeCpu { rip: 0x1234 };
        m.tick(&timer, &mut cpu).unwrap();
        assert_eq!(cpu.rip, 0x1234, "the kernel took the wake already: nothing to do");
        assert_eq!(timer.period.get(), 0);
    }

    #[test]
    fn a_wake_leaves_a_running_preemption_tick_alone() {
        let mut area = [0u64; 16];
        let m = model(&mut area);
        let timer = FakeTimer::default();
        assert_eq!(m.arm(&timer, 10_000_000), 0);
        timer.period.set(12345);
        assert_eq!(m.wake(&timer, 1), 0);
        assert_eq!(timer.period.get(), 12345, "the preemption tick comes anyway");
        let unregistered = Model::new();
        assert_eq!(unregistered.wake(&timer, 1), -i64::from(libc::EINVAL));
    }
}
