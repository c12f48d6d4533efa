//! Kernel component `recover` (docs/design.md "Components and recovery"; after VampOS):
//! reboots one failed kernel component while the application and the
//! other components keep running.
//!
//! What it holds:
//! - **Component memory.** shoal's linker script brackets each component's
//!   code, data and bss with symbols (`__shoal_region_LIB_{text,data,bss}_{start,end}`,
//!   `shoal-toolchain`'s `layout.rs`); [`init`] reads them, and right after
//!   kernel initialisation takes a **snapshot** of the writable memory
//!   (data + bss) of every component declared rebootable.
//! - **The gate.** Every system call goes through [`call_in`] with the
//!   component the table names for it (so a panic names it), counts calls per component (for
//!   `--inject`), and for a rebootable component saves a return context
//!   (a `setjmp`-like record of the callee-saved registers, the stack
//!   pointer and the return address) before entering it.
//! - **Failure detection and reboot.** The kernel's panic handler (in
//!   `shoal-kernel`; `panic = "abort"`, so nothing unwinds) calls
//!   [`on_panic`]: if the panic happened inside a gated call into a
//!   rebootable component, the context is restored — the component's
//!   frames are abandoned, and the stack below the gate is the caller's
//!   again — the component's snapshot is copied back over its data and
//!   bss (which also resets the borrow flags of its `Global` cells), its
//!   after-reboot hook runs, and the call is retried once; a second failure
//!   reboots it again and returns `EIO` to the application. Every reboot
//!   prints `shoal: rebooted COMPONENT in T µs (replayed N calls)`.
//!
//! - **Calls that do not pass the table** (module `log`): [`enter`] marks
//!   code of a component reached from another (vfs from net's read and
//!   write, ramfs from vfs), so a failure there reboots *that* component
//!   (the gate retries the whole system call); every gate is armed once a
//!   component is rebootable. The scheduler puts an armed gate aside while
//!   its thread is switched out ([`suspend`], [`resume`]).
//! - **Logs of stateful components** (module `log`): [`LOGS`] holds each
//!   one's log outside its memory, so restoring the snapshot leaves it
//!   alone; the after-reboot hook replays it and reports what it replayed
//!   and the log's size ([`set_replayed`], [`set_log_bytes`]), which the
//!   reboot line shows: `shoal: rebooted vfs in 42.1 µs (replayed 34 calls,
//!   log 21954 bytes)`.
//!
//! Rebootable so far (the list is `shoal-kernel`'s): the components whose
//! memory holds nothing the application can observe beyond what the
//! snapshot restores (`time`, `sysinfo`, `user`), and `vfs`, `ramfs`,
//! `process` and `net`, whose state lives (partly) on the heap: their
//! hooks build it afresh from their log (`shoal_vfs::heal` has the design;
//! `shoal_process::heal` logs before each call into process, through
//! [`set_logger`], since its signal state also changes outside its calls;
//! `shoal_net::heal` after every gated call, through [`set_committer`],
//! since its state also changes in calls into vfs; both run only once
//! their component called [`set_pending`]).
//! A panic in any other component (`mm`, `sched`, …) ends the
//! instance as before, now naming the component.
//!
//! What a reboot does not undo: heap blocks the failed call allocated
//! (leaked), and `Global` cells of *other* components that the failed call
//! held borrowed (a later use panics in turn); a failure while the
//! kernel heap's cell is borrowed is mm's, inside the allocator every
//! component shares, and ends the instance ([`set_heap_check`]). A CPU fault in the call
//! (a wild write) comes back the same way when the tender hands it to
//! `shoal_recover_fault` (`Hypercall::FaultHandler`); so does a hang: a
//! call that outruns the tender's watchdog ([`watchdog`]).
//!
//! `shoal run --no-recover` ([`shoal_abi::RECOVER_OFF`]) turns the gates
//! off: system calls go straight to their component, nothing is
//! snapshotted, counted, watched or rebooted (what `shoal bench recover`
//! measures the gates against), and [`enter`] tracks no current component
//! (a kernel panic is reported without one).
#![cfg_attr(not(test), no_std)]

extern crate alloc;

mod log;
mod snapshot;
pub mod watchdog;
pub use log::{
    enter, enter_quiet, log_bytes, log_cell, rejuvenating, resume, set_committer, set_log_bytes, set_logger, set_pending, set_rejuvenator, set_replayed,
    suspend, Entered, Suspended, LOGS,
};

use alloc::boxed::Box;
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, AtomicU8, Ordering::Relaxed};
use shoal_abi::COMPONENTS;
use shoal_plat::{Args, Errno, Global, SysResult, SyscallFn};

/// A kernel component: 1 + its index in [`shoal_abi::COMPONENTS`]; 0 is
/// none (the application, or code outside every component).
pub type Component = u8;

/// The numbers of the components, by name (as in [`shoal_abi::COMPONENTS`]).
pub mod id {
    use super::Component;
    /// `plat`.
    pub const PLAT: Component = 1;
    /// `mm`.
    pub const MM: Component = 2;
    /// `sched`.
    pub const SCHED: Component = 3;
    /// `vfs`.
    pub const VFS: Component = 4;
    /// `ramfs`.
    pub const RAMFS: Component = 5;
    /// `time`.
    pub const TIME: Component = 6;
    /// `process`.
    pub const PROCESS: Component = 7;
    /// `sysinfo`.
    pub const SYSINFO: Component = 8;
    /// `user`.
    pub const USER: Component = 9;
    /// `net`.
    pub const NET: Component = 10;
    /// `syscall`.
    pub const SYSCALL: Component = 11;
}

/// A rebootable component and the hook that runs after its memory is
/// restored (with the number of its reboots so far, 1 for the first).
pub type Rebootable = (Component, Option<fn(u64)>);

/// How many components there are.
const N: usize = COMPONENTS.len();

/// The component named `name`, or 0.
pub fn by_name(name: &str) -> Component {
    COMPONENTS.iter().position(|c| *c == name).map_or(0, |i| i as Component + 1)
}

/// The name of component `c` (`?` for none).
pub fn name(c: Component) -> &'static str {
    (c as usize).checked_sub(1).and_then(|i| COMPONENTS.get(i)).copied().unwrap_or("?")
}

/// An address range `[start, end)`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Range {
    /// First address.
    pub start: usize,
    /// One past the last.
    pub end: usize,
}

impl Range {
    fn len(&self) -> usize {
        self.end.saturating_sub(self.start)
    }

    fn contains(&self, a: usize) -> bool {
        self.start <= a && a < self.end
    }
}

/// A component's memory regions in the image.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Regions {
    /// Its code.
    pub text: Range,
    /// Its initialised writable data.
    pub data: Range,
    /// Its zero-initialised writable data.
    pub bss: Range,
}

/// A cell written once by [`init`] (before the first system call) and only
/// read afterwards.
struct Once<T>(UnsafeCell<T>);

// SAFETY: the kernel runs one flow of control at a time (see
// `shoal_plat::Global`); the cell is written only by `init`, before any
// reader exists.
unsafe impl<T> Sync for Once<T> {}

/// Every component's regions (all empty until [`init`]).
static REGIONS: Once<[Regions; N]> =
    Once(UnsafeCell::new([Regions { text: Range { start: 0, end: 0 }, data: Range { start: 0, end: 0 }, bss: Range { start: 0, end: 0 } }; N]));

fn regions() -> &'static [Regions; N] {
    // SAFETY: written only in `init_with`, before the first system call;
    // no `&mut` to it exists while this shared reference lives.
    unsafe { &*REGIONS.0.get() }
}

/// The regions of every component, from the symbols of the linker script.
#[cfg(not(test))]
fn image_regions() -> [Regions; N] {
    macro_rules! table {
        ($($c:ident),*) => {{
            let mut t = [Regions::default(); N];
            $({
                extern "C" {
                    #[link_name = concat!("__shoal_region_", stringify!($c), "_text_start")]
                    static TS: u8;
                    #[link_name = concat!("__shoal_region_", stringify!($c), "_text_end")]
                    static TE: u8;
                    #[link_name = concat!("__shoal_region_", stringify!($c), "_data_start")]
                    static DS: u8;
                    #[link_name = concat!("__shoal_region_", stringify!($c), "_data_end")]
                    static DE: u8;
                    #[link_name = concat!("__shoal_region_", stringify!($c), "_bss_start")]
                    static BS: u8;
                    #[link_name = concat!("__shoal_region_", stringify!($c), "_bss_end")]
                    static BE: u8;
                }
                let a = |p: *const u8| p as usize;
                let i = by_name(stringify!($c)) as usize - 1;
                t[i] = Regions {
                    text: Range { start: a(&raw const TS), end: a(&raw const TE) },
                    data: Range { start: a(&raw const DS), end: a(&raw const DE) },
                    bss: Range { start: a(&raw const BS), end: a(&raw const BE) },
                };
            })*
            t
        }};
    }
    // Every entry of shoal_abi::COMPONENTS (checked by a unit test).
    table!(plat, mm, sched, vfs, ramfs, time, process, sysinfo, user, net, syscall)
}

/// What [`init`] keeps per component.
struct State {
    /// The snapshot of data then bss of each rebootable component, its
    /// all-zero stretches left out (module `snapshot`; boxed slices: `None` is then a null pointer, so the whole state starts all
    /// zero and lies in `.bss`; an `Option<Vec>`'s `None` is a non-zero
    /// capacity niche, which put recover's `.data` on a page of its own).
    snapshots: [Option<Box<[u8]>>; N],
    /// What runs after a component's memory is restored, with the number
    /// of its reboots so far (1 for the first).
    hooks: [Option<fn(u64)>; N],
    /// Reboots per component.
    reboots: [u64; N],
    /// TSC ticks per second (for the reboot time).
    tsc_hz: u64,
}

static STATE: Global<State> = Global::new(State { snapshots: [const { None }; N], hooks: [None; N], reboots: [0; N], tsc_hz: 0 });

/// Bit `c - 1` set: component `c` has a snapshot and can be rebooted.
static REBOOTABLE: AtomicU16 = AtomicU16::new(0);
/// The component the current system call entered (0: none).
static CURRENT: AtomicU8 = AtomicU8::new(0);
/// The component whose failure returned to the armed gate (it is the one
/// rebooted, which may not be the one the gate entered: vfs called from
/// net, ramfs from vfs).
static FAILED: AtomicU8 = AtomicU8::new(0);
/// Non-zero while a gate's return context is saved and a failure may
/// return to it. An 8-byte word: the spt tender reads it to decide whether
/// a CPU fault is the kernel's to handle (`Hypercall::FaultHandler`).
static ARMED: AtomicU64 = AtomicU64::new(0);
/// Calls per component, through the system-call table: counted only
/// when an `--inject` is set (its N-th call), which [`init`] reads before
/// the program's first call.
static CALLS: [AtomicU64; N] = [const { AtomicU64::new(0) }; N];
/// `--no-recover`: no gates at all.
static OFF: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// Whether every gate is armed, not only those of rebootable components:
/// with the stateful components rebootable ([`shoal_abi::RECOVER_STATEFUL`]),
/// a call into one component may reach one of them (net's read reaches
/// vfs, vfs reaches ramfs), and that one must be rebooted when it fails.
/// Without them, only a call straight into `time`, `sysinfo` or `user`
/// needs a return context, and the others' gates stay a counter.
static ARM_ALL: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// Whether the stateful components (`vfs`, `ramfs`, `process`, `net`) are
/// rebootable in this run: their calls are logged only then.
pub fn stateful() -> bool {
    let flags = shoal_plat::boot::info().recover_flags;
    flags & shoal_abi::RECOVER_OFF == 0 && flags & shoal_abi::RECOVER_STATEFUL != 0
}
/// `--inject`: the component (0: none) and the call number.
static INJECT_COMPONENT: AtomicU8 = AtomicU8::new(0);
static INJECT_AT: AtomicU64 = AtomicU64::new(0);
static INJECT_KIND: AtomicU32 = AtomicU32::new(0);
/// `--rejuvenate-every`: the period in TSC ticks (0: off), the next
/// deadline, and the index the search for the next component to reboot
/// starts at (the one after the component rebooted last; 0 at first, so
/// that recover's `.data` is empty and costs no page of its own).
static REJUVENATE_TICKS: AtomicU64 = AtomicU64::new(0);
static REJUVENATE_NEXT: AtomicU64 = AtomicU64::new(0);
static REJUVENATE_FROM: AtomicU8 = AtomicU8::new(0);

/// The check "is the kernel heap in use further up the stack" (mm's
/// `heap_in_use`, registered by `shoal-kernel` through
/// [`set_heap_check`]; 0: none). See [`in_shared_heap`].
static HEAP_CHECK: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);

/// Registers `f`, which says whether the kernel heap is in use further
/// up the stack (a failure there is not the current component's to
/// reboot: [`in_shared_heap`]).
pub fn set_heap_check(f: fn() -> bool) {
    HEAP_CHECK.store(f as usize, Relaxed);
}

/// Whether a failure happened inside the kernel heap's allocator (its
/// cell is borrowed): the heap is mm's and shared by every component, it
/// is never rebooted, and a reboot of the component whose call was in
/// progress could not run (its hook allocates, and the cell stays
/// borrowed: it panicked with "RefCell already borrowed"). The instance
/// ends instead, naming mm (seen once: a corrupted free list of the heap,
/// found under `--rejuvenate-every`, faulted inside a call into net).
fn in_shared_heap() -> bool {
    match HEAP_CHECK.load(Relaxed) {
        0 => false,
        f => {
            // SAFETY: the only non-zero value is a `fn() -> bool` stored by
            // `set_heap_check`.
            let f: fn() -> bool = unsafe { core::mem::transmute::<usize, fn() -> bool>(f) };
            f()
        }
    }
}

/// The saved context of the armed gate: rbx, rbp, r12–r15, the stack
/// pointer after the gate's return, and its return address.
struct Context(UnsafeCell<[u64; 8]>);

// SAFETY: one flow of control at a time (see `Once`); the context is
// written by `shoal_recover_call` and read by `shoal_recover_unwind` only.
unsafe impl Sync for Context {}

static CONTEXT: Context = Context(UnsafeCell::new([0; 8]));

// shoal_recover_call(f, args, ctx): saves the callee-saved registers, the
// stack pointer and the return address in ctx, then jumps to
// `body(f, args)`, which returns straight to shoal_recover_call's caller
// with the call's result in rax and rdx ([`Raw`]).
// shoal_recover_unwind(ctx) restores them and returns [`Raw`]'s "aborted"
// (rax 0, rdx 2) from that shoal_recover_call: to its caller, the call
// simply returned, with every callee-saved register as the C ABI
// promises. (The jump instead of a call keeps the frame and the result
// out of memory: a frame in the gate's stack that `body` filled and the
// gate read back cost a few cycles on every gated call.)
core::arch::global_asm!(
    ".section .text.shoal_recover_call,\"ax\",@progbits",
    ".globl shoal_recover_call",
    ".type shoal_recover_call,@function",
    "shoal_recover_call:",
    "    mov [rdx], rbx",
    "    mov [rdx + 8], rbp",
    "    mov [rdx + 16], r12",
    "    mov [rdx + 24], r13",
    "    mov [rdx + 32], r14",
    "    mov [rdx + 40], r15",
    "    lea rax, [rsp + 8]",
    "    mov [rdx + 48], rax",
    "    mov rax, [rsp]",
    "    mov [rdx + 56], rax",
    "    jmp {body}",
    ".size shoal_recover_call, . - shoal_recover_call",
    ".section .text.shoal_recover_unwind,\"ax\",@progbits",
    ".globl shoal_recover_unwind",
    ".type shoal_recover_unwind,@function",
    "shoal_recover_unwind:",
    "    mov rbx, [rdi]",
    "    mov rbp, [rdi + 8]",
    "    mov r12, [rdi + 16]",
    "    mov r13, [rdi + 24]",
    "    mov r14, [rdi + 32]",
    "    mov r15, [rdi + 40]",
    "    mov rsp, [rdi + 48]",
    "    xor eax, eax",
    "    mov edx, 2",
    "    jmp qword ptr [rdi + 56]",
    ".size shoal_recover_unwind, . - shoal_recover_unwind",
    body = sym body,
);

/// A gated call's result as `shoal_recover_call` returns it, in two
/// registers (rax, rdx: the SysV ABI's return of a two-word struct):
/// `Ok(val)` (`err` 0), `Err(Errno(val))` (1), or [`RAW_ABORTED`].
#[repr(C)]
struct Raw {
    val: u64,
    err: u64,
}

/// [`Raw::err`] when the component failed and `shoal_recover_unwind` came
/// back to the gate.
const RAW_ABORTED: u64 = 2;

// The function pointer and the arguments only pass through the assembly
// in registers, to `body`, which calls `f` with Rust's ABI.
#[allow(improper_ctypes)]
extern "C" {
    fn shoal_recover_call(f: SyscallFn, args: &Args, ctx: *mut [u64; 8]) -> Raw;
    fn shoal_recover_unwind(ctx: *const [u64; 8]) -> !;
}

/// Reads the component regions, snapshots the writable memory of the
/// `rebootable` components (with the hook each runs after a reboot) and
/// the `--inject` request from the boot information. Called once, at the
/// end of kernel initialisation: the snapshot is the components' state
/// right after it.
#[cfg(not(test))]
pub fn init(rebootable: &[Rebootable]) {
    let bi = shoal_plat::boot::info();
    if bi.recover_flags & shoal_abi::RECOVER_OFF != 0 {
        OFF.store(true, Relaxed);
        return;
    }
    ARM_ALL.store(bi.recover_flags & shoal_abi::RECOVER_STATEFUL != 0, Relaxed);
    // An armed gate is its thread's: the scheduler puts it aside at a
    // switch (see `log::suspend`).
    shoal_sched::set_switch_hooks((log::suspend_raw, log::resume_raw));
    init_with(image_regions(), rebootable, bi.tsc_hz);
    watchdog::init(bi.watchdog_ns);
    let inj = bi.inject;
    if inj.component != 0 {
        let c = inj.component as usize;
        if c > N || !matches!(inj.kind, shoal_abi::INJECT_PANIC | shoal_abi::INJECT_WILD_WRITE | shoal_abi::INJECT_HANG) || inj.at == 0 {
            use core::fmt::Write;
            let _ = writeln!(shoal_plat::console::Stderr, "shoal: ignoring an injection the kernel does not know (component {c}, kind {})", inj.kind);
        } else {
            INJECT_COMPONENT.store(c as Component, Relaxed);
            INJECT_AT.store(inj.at, Relaxed);
            INJECT_KIND.store(inj.kind, Relaxed);
        }
    }
    if bi.rejuvenate_ns != 0 && bi.tsc_hz != 0 {
        let ticks = ((bi.rejuvenate_ns as u128 * bi.tsc_hz as u128) / 1_000_000_000).clamp(1, u64::MAX as u128) as u64;
        REJUVENATE_TICKS.store(ticks, Relaxed);
        REJUVENATE_NEXT.store(shoal_plat::cpu::rdtsc().saturating_add(ticks), Relaxed);
    }
    PLAIN.store(plain_mask(ARM_ALL.load(Relaxed), REBOOTABLE.load(Relaxed), INJECT_COMPONENT.load(Relaxed), REJUVENATE_TICKS.load(Relaxed) != 0), Relaxed);
    // A CPU fault inside a gated call comes back to `shoal_recover_fault`
    // (both tenders hand faults back; a tender that answers ENOSYS would
    // end the instance as before).
    let _ = shoal_plat::hypercall::fault_handler(shoal_recover_fault as *const () as u64, (&raw const ARMED) as u64);
}

/// [`init`] with the regions given.
fn init_with(regions: [Regions; N], rebootable: &[Rebootable], tsc_hz: u64) {
    // SAFETY: before the first system call; no reference to the table is
    // alive (`regions()` is only called by the gate and the reboot).
    unsafe { *REGIONS.0.get() = regions };
    let mut mask = 0u16;
    STATE.with(|s| {
        s.tsc_hz = tsc_hz;
        for &(c, hook) in rebootable {
            let Some(i) = (c as usize).checked_sub(1).filter(|i| *i < N) else { continue };
            let r = regions[i];
            // SAFETY: the ranges are the component's data and bss regions
            // (linker-script symbols), mapped and readable; nothing writes
            // them while the snapshot is taken (reading a bss page never
            // touched maps the zero page: it costs no memory).
            let parts = unsafe {
                [core::slice::from_raw_parts(r.data.start as *const u8, r.data.len()), core::slice::from_raw_parts(r.bss.start as *const u8, r.bss.len())]
            };
            let Some(snap) = snapshot::encode(&parts) else { continue };
            s.snapshots[i] = Some(snap);
            s.hooks[i] = hook;
            mask |= 1 << i;
        }
    });
    REBOOTABLE.store(mask, Relaxed);
    // `--inject …@N` counts the calls the program makes: not those of the
    // kernel's initialisation (ramfs's, made by vfs building the root).
    for calls in &CALLS {
        calls.store(0, Relaxed);
    }
}

/// The component whose code holds address `a` (0: none): for faults
/// reported with an instruction address. (The system-call gate names the
/// component from the table instead: the compiler may copy a small
/// function of one crate into another.)
pub fn component_at(a: usize) -> Component {
    regions().iter().position(|r| r.text.contains(a)).map_or(0, |i| i as Component + 1)
}

/// Makes `c` the current component; returns the one before. A load and
/// a store, not an atomic swap (`xchg`, a locked instruction that costs
/// some 20 cycles on every gate and every entry): the kernel runs one
/// flow of control and is never preempted inside (`shoal_sched::preempt`),
/// so nothing can come between the two.
#[inline]
fn swap_current(c: Component) -> Component {
    let prev = CURRENT.load(Relaxed);
    CURRENT.store(c, Relaxed);
    prev
}

/// Adds one to a call counter and returns the new count (a load and a
/// store, for the reason [`swap_current`] gives).
#[inline]
fn bump(calls: &AtomicU64) -> u64 {
    let n = calls.load(Relaxed) + 1;
    calls.store(n, Relaxed);
    n
}

/// Counts a call into component `c` for `--inject` (only when one is
/// set: see [`CALLS`]); whether it is the call the injection targets.
#[inline]
fn count_call(c: Component) -> bool {
    let target = INJECT_COMPONENT.load(Relaxed);
    if target == 0 {
        return false;
    }
    let n = (c as usize).checked_sub(1).and_then(|i| CALLS.get(i)).map_or(0, bump);
    target == c && INJECT_AT.load(Relaxed) == n
}

/// The component the current system call entered (0: none).
pub fn current() -> Component {
    CURRENT.load(Relaxed)
}

fn rebootable(c: Component) -> bool {
    c != 0 && REBOOTABLE.load(Relaxed) & (1 << (c - 1)) != 0
}

/// Whether the syscall table may answer a call into component `c`
/// without its gate (the clock reads, which Linux answers in the vDSO
/// without entering the kernel: `shoal_syscall`'s fast path); if so,
/// counts the call as [`call_in`] would, so `--inject` numbers stay the
/// same. Not while another call is in progress, nor when an `--inject`
/// targets `c` or software rejuvenation is on (those need the gate). Out
/// of line: the statics are this crate's (see `log::log_cell`).
#[inline(never)]
pub fn ungated_call(c: Component) -> bool {
    if OFF.load(Relaxed) {
        return true;
    }
    if CURRENT.load(Relaxed) != 0 || INJECT_COMPONENT.load(Relaxed) == c || REJUVENATE_TICKS.load(Relaxed) != 0 {
        return false;
    }
    // Never the injected call: an injection into `c` took the gate above.
    count_call(c);
    true
}

/// Reboots so far of component `c`.
pub fn reboots(c: Component) -> u64 {
    (c as usize).checked_sub(1).filter(|i| *i < N).map_or(0, |i| STATE.with(|s| s.reboots[i]))
}

/// Components whose gate only records the component (bit `c - 1`): no
/// `--inject`, no rejuvenation, and the component neither rebootable nor
/// armed through `ARM_ALL`. Set once by [`init`]; 0 (every call takes
/// the full gate) before it, in unit tests and under `--no-recover`, whose
/// gate records nothing.
static PLAIN: AtomicU16 = AtomicU16::new(0);

/// The [`PLAIN`] mask for a run's settings: pure, for the unit tests.
fn plain_mask(arm_all: bool, rebootable: u16, inject: Component, rejuvenate: bool) -> u16 {
    if inject != 0 || rejuvenate || (rebootable != 0 && arm_all) {
        return 0;
    }
    // Without ARM_ALL only a rebootable component's own gate is armed.
    !rebootable & ((1u32 << N) - 1) as u16
}

/// Runs `f` as a call into component `c`: records the component, counts
/// the call, injects the `--inject` fault at its call, and for a
/// rebootable component recovers from a panic (see the crate
/// documentation). Inline: with nothing to count, inject or protect for
/// `c` (most calls of most runs) the gate is one flag test and the
/// component's record, without the call into this crate.
#[inline]
pub fn call_in(c: Component, f: SyscallFn, args: &Args) -> SysResult {
    let bit = (c as u32).wrapping_sub(1);
    if bit < 16 && PLAIN.load(Relaxed) & (1 << bit) != 0 {
        let prev = swap_current(c);
        let r = f(args);
        CURRENT.store(prev, Relaxed);
        return r;
    }
    call_in_gated(c, f, args)
}

/// Whether calls into `c` pass the gate as one flag test ([`PLAIN`]:
/// nothing to count, inject or protect), so that a call may skip the gate
/// altogether. Inline, for the system-call table's light calls only (see
/// [`ungated_call`] for why components call out of line).
#[inline]
pub fn plain(c: Component) -> bool {
    let bit = (c as u32).wrapping_sub(1);
    bit < 16 && PLAIN.load(Relaxed) & (1 << bit) != 0
}

/// [`call_in`] with everything its gate may have to do.
#[inline(never)]
fn call_in_gated(c: Component, f: SyscallFn, args: &Args) -> SysResult {
    if OFF.load(Relaxed) {
        return f(args);
    }
    if REJUVENATE_TICKS.load(Relaxed) != 0 && CURRENT.load(Relaxed) == 0 && ARMED.load(Relaxed) == 0 {
        rejuvenate();
    }
    let prev = swap_current(c);
    let inject = count_call(c);
    // A gate inside a gate (a rebootable component's call never calls back
    // into the table, so this does not happen today) runs unprotected: one
    // saved context at a time.
    // With the stateful components rebootable every gate is armed (see
    // ARM_ALL); a failure in a component that is not rebootable ends the
    // instance as before.
    let r = if REBOOTABLE.load(Relaxed) != 0 && ARMED.load(Relaxed) == 0 && (ARM_ALL.load(Relaxed) || rebootable(c)) {
        if rebootable(c) {
            log::before_call(c);
        }
        let r = protected(c, f, args, inject);
        log::after_call();
        r
    } else {
        if inject {
            injected(c, INJECT_AT.load(Relaxed));
        }
        f(args)
    };
    CURRENT.store(prev, Relaxed);
    r
}

/// The injected panic. For a rebootable component it first overwrites the
/// component's whole data and bss with `0xa5` bytes, as a failing
/// component may leave its state (its `Global` cells then read as
/// borrowed, its values as garbage): the program's later results are right
/// only if the reboot really restores the memory.
/// Software rejuvenation (`--rejuvenate-every`): when the period has
/// passed, reboots the next rebootable component in turn. Runs at the
/// start of a system call made outside every component, so no component
/// is active and none holds a reference into another's memory.
fn rejuvenate() {
    let now = shoal_plat::cpu::rdtsc();
    if now < REJUVENATE_NEXT.load(Relaxed) {
        return;
    }
    REJUVENATE_NEXT.store(now.saturating_add(REJUVENATE_TICKS.load(Relaxed)), Relaxed);
    let mask = REBOOTABLE.load(Relaxed);
    if mask == 0 {
        return;
    }
    let mut i = REJUVENATE_FROM.load(Relaxed) as usize % N;
    while mask & (1 << i) == 0 {
        i = (i + 1) % N;
    }
    REJUVENATE_FROM.store(((i + 1) % N) as u8, Relaxed);
    // The component did not fail: its logger and its rejuvenation hook
    // bring the log up to date and may set its sound state aside (see
    // `log::rejuvenating`, `set_rejuvenator`).
    log::set_rejuvenating(true);
    log::before_rejuvenation(i as Component + 1);
    reboot(i as Component + 1);
    log::set_rejuvenating(false);
}

fn injected(c: Component, n: u64) -> ! {
    let wild = INJECT_KIND.load(Relaxed) == shoal_abi::INJECT_WILD_WRITE;
    if rebootable(c) {
        let r = regions()[c as usize - 1];
        for range in [r.data, r.bss] {
            // SAFETY: the component's own writable regions; no reference
            // into them is alive here (the gate has not entered the
            // component's code yet) and the panic below keeps the
            // component from running on this memory: the gate restores it.
            unsafe { core::ptr::write_bytes(range.start as *mut u8, 0xa5, range.len()) };
        }
    }
    if INJECT_KIND.load(Relaxed) == shoal_abi::INJECT_HANG {
        // Spins until the watchdog stops the call (without one, forever:
        // what a hung component does).
        loop {
            core::hint::spin_loop();
        }
    }
    if wild {
        // SAFETY: deliberately not: address 8 lies below guest memory (the
        // boot-info page is the lowest), so this write faults (SIGSEGV on
        // spt, a page fault on hvt) and never lands anywhere.
        unsafe { core::ptr::write_volatile(core::ptr::without_provenance_mut::<u64>(8), 0xa5) };
    }
    panic!("injected fault: panic at call {n} into {}", name(c))
}

/// Where the tender resumes the guest after a CPU fault in guest code
/// while a gate is armed (`Hypercall::FaultHandler`; spt: SIGSEGV or
/// SIGBUS, hvt: a page or general-protection fault), with the
/// signal, the faulting address and instruction: the component the call
/// entered failed; back to its gate, which reboots it. Not armed (a race
/// with the tender's check cannot happen: one flow of control), the
/// instance ends as the tender would have ended it.
#[cfg_attr(test, allow(dead_code))]
extern "C" fn shoal_recover_fault(sig: u64, addr: u64, rip: u64) -> ! {
    use core::fmt::Write;
    let what = match sig {
        11 => "SIGSEGV",
        7 => "SIGBUS",
        _ => "signal",
    };
    let c = current();
    if sig == shoal_abi::FAULT_HANG {
        // The tender's watchdog stopped a gated call (it sends this only
        // while the gate is armed; a guest that fakes it ends here).
        if ARMED.load(Relaxed) != 0 && rebootable(c) {
            watchdog::describe(&mut shoal_plat::console::Stderr, name(c), rip);
            abort_to_gate();
        }
        let _ = writeln!(shoal_plat::console::Stderr, "shoal: the watchdog stopped the kernel outside a gated call (rip {rip:#x})");
        shoal_plat::hypercall::halt(134)
    }
    if ARMED.load(Relaxed) != 0 && rebootable(c) {
        if in_shared_heap() {
            let _ = writeln!(
                shoal_plat::console::Stderr,
                "shoal: fault in mm's kernel heap during a call into {}: {what} (invalid memory access at {addr:#x}, rip {rip:#x}); mm is not rebootable",
                name(c)
            );
            shoal_plat::hypercall::halt(128 + (sig & 0x7f) as i64)
        }
        let _ = writeln!(shoal_plat::console::Stderr, "shoal: fault in {}: {what} (invalid memory access at {addr:#x}, rip {rip:#x})", name(c));
        abort_to_gate();
    }
    let _ = writeln!(shoal_plat::console::Stderr, "shoal: the guest crashed: {what} (invalid memory access at {addr:#x}, rip {rip:#x})");
    // Straight to the tender: after a CPU fault nothing else of the
    // kernel's (a volume's save) runs.
    shoal_plat::hypercall::halt(128 + (sig & 0x7f) as i64)
}

/// The gated call, entered by `shoal_recover_call`'s jump: calls `f` and
/// returns its result in registers ([`Raw`]).
#[allow(improper_ctypes_definitions)]
extern "C" fn body(f: SyscallFn, args: &Args) -> Raw {
    match f(args) {
        Ok(v) => Raw { val: v, err: 0 },
        Err(e) => Raw { val: e.0 as u32 as u64, err: 1 },
    }
}

/// The `--inject` fault, run in place of the call it hits (inside the
/// armed gate, so its failure returns there): `INJECT_COMPONENT` and
/// `INJECT_AT` are that call's component and number.
fn inject_now(_: &Args) -> SysResult {
    injected(INJECT_COMPONENT.load(Relaxed), INJECT_AT.load(Relaxed))
}

/// Runs `f` with a saved return context; after a failure, reboots `c` and
/// retries once; a second failure is `EIO`. `inject`: the first attempt
/// is the injected fault instead.
fn protected(c: Component, f: SyscallFn, args: &Args, inject: bool) -> SysResult {
    let mut now: SyscallFn = if inject { inject_now } else { f };
    for _ in 0..2 {
        ARMED.store(1, Relaxed);
        // Watched for a hang: calls into a rebootable component (every
        // gate is armed, but a long call elsewhere — mm, sched — is not
        // one the kernel could recover from).
        if rebootable(c) {
            watchdog::begin(c);
        }
        // SAFETY: `body` is entered with `now` and `args`, alive for the
        // whole call. If the component fails, `abort_to_gate` returns here
        // with `RAW_ABORTED`: the frames above are abandoned (no
        // destructor of theirs runs: what they held leaks, which is safe)
        // and every callee-saved register holds what it held at the call.
        let r = unsafe { shoal_recover_call(now, args, CONTEXT.0.get()) };
        watchdog::end();
        ARMED.store(0, Relaxed);
        match r.err {
            0 => return Ok(r.val),
            1 => return Err(Errno(r.val as u32 as i32)),
            _ => debug_assert_eq!(r.err, RAW_ABORTED),
        }
        reboot(match FAILED.swap(0, Relaxed) {
            0 => c,
            f => f,
        });
        now = f;
    }
    Err(Errno::EIO)
}

/// Returns to the armed gate as failed, if a gate is armed for a
/// rebootable component; otherwise returns.
fn abort_to_gate() {
    if ARMED.swap(0, Relaxed) != 0 && rebootable(current()) {
        FAILED.store(current(), Relaxed);
        // SAFETY: the gate is armed, so `CONTEXT` holds the context
        // `shoal_recover_call` saved for the call still in progress below
        // us on this stack.
        unsafe { shoal_recover_unwind(CONTEXT.0.get()) }
    }
}

/// Called by the kernel's panic handler: if the panic happened inside a
/// call into a rebootable component, prints it, naming the component, and
/// returns to the gate (which reboots the component and retries); else
/// returns and the handler stops the instance.
pub fn on_panic(info: &core::panic::PanicInfo) {
    let c = current();
    if ARMED.load(Relaxed) != 0 && rebootable(c) {
        use core::fmt::Write;
        if in_shared_heap() {
            let _ =
                writeln!(shoal_plat::console::Stderr, "shoal: kernel panic in mm's kernel heap during a call into {}: {info}; mm is not rebootable", name(c));
            shoal_plat::halt(134)
        }
        let _ = writeln!(shoal_plat::console::Stderr, "shoal: kernel panic in {}: {info}", name(c));
        abort_to_gate();
    }
}

/// Copies component `c`'s post-initialisation snapshot back over its data
/// and bss, without counting a reboot or printing (an after-reboot hook
/// uses it for a component whose value holds the rebooted one's state:
/// ramfs's tree is part of vfs's `Vfs`). `false` if `c` has no snapshot.
pub fn restore_regions(c: Component) -> bool {
    let Some(i) = (c as usize).checked_sub(1).filter(|i| *i < N) else { return false };
    let r = regions()[i];
    STATE.try_with(|s| copy_back(s, i, r)).flatten().is_some()
}

/// Copies snapshot `i` back over the regions `r` it was taken from (data,
/// then bss); `None` when there is no snapshot or it does not fit.
fn copy_back(s: &State, i: usize, r: Regions) -> Option<()> {
    let snap = s.snapshots.get(i)?.as_deref()?;
    // SAFETY: the ranges are the component's own data and bss regions
    // (callers: a reboot, or an after-reboot hook), disjoint from each
    // other and from the snapshot (on the kernel heap); the failed call's
    // frames were abandoned, so no reference into the component's memory
    // is alive, and no other flow of control runs.
    let mut parts = unsafe {
        [core::slice::from_raw_parts_mut(r.data.start as *mut u8, r.data.len()), core::slice::from_raw_parts_mut(r.bss.start as *mut u8, r.bss.len())]
    };
    snapshot::restore(snap, &mut parts)
}

/// Restores component `c`'s post-initialisation snapshot, runs its hook
/// and prints the reboot line; returns the time it took in nanoseconds.
fn reboot(c: Component) -> u64 {
    let i = c as usize - 1;
    let t0 = shoal_plat::cpu::rdtsc();
    let r = regions()[i];
    let done = STATE.try_with(|s| {
        copy_back(s, i, r)?;
        s.reboots[i] += 1;
        Some((s.hooks[i], s.reboots[i], s.tsc_hz))
    });
    let Some(Some((hook, count, hz))) = done else {
        use core::fmt::Write;
        let _ = writeln!(shoal_plat::console::Stderr, "shoal: cannot reboot {}: its snapshot is unavailable", name(c));
        shoal_plat::halt(134)
    };
    if let Some(h) = hook {
        h(count);
    }
    let ticks = shoal_plat::cpu::rdtsc().wrapping_sub(t0);
    let ns = if hz == 0 { 0 } else { (ticks as u128 * 1_000_000_000 / hz as u128) as u64 };
    // Unit tests on the host have no tender to print to.
    if shoal_plat::boot::booted() {
        use core::fmt::Write;
        let replayed = log::take_replayed();
        match log::log_bytes(c) {
            0 => {
                let _ =
                    writeln!(shoal_plat::console::Stderr, "shoal: rebooted {} in {}.{} µs (replayed {replayed} calls)", name(c), ns / 1000, ns % 1000 / 100);
            }
            b => {
                let _ = writeln!(
                    shoal_plat::console::Stderr,
                    "shoal: rebooted {} in {}.{} µs (replayed {replayed} calls, log {b} bytes)",
                    name(c),
                    ns / 1000,
                    ns % 1000 / 100
                );
            }
        }
    }
    ns
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_components_with_nothing_to_count_inject_or_protect_skip_the_gate() {
        let all = ((1u32 << N) - 1) as u16;
        let (time, vfs) = (1u16 << (id::TIME - 1), 1u16 << (id::VFS - 1));
        assert_eq!(plain_mask(false, 0, 0, false), all, "nothing rebootable");
        assert_eq!(plain_mask(false, time, 0, false), all & !time, "time's gate is armed");
        assert_eq!(plain_mask(true, time | vfs, 0, false), 0, "--recover-stateful arms every gate");
        assert_eq!(plain_mask(true, 0, 0, false), all, "nothing rebootable, nothing armed");
        assert_eq!(plain_mask(false, time, id::VFS, false), 0, "--inject counts every call");
        assert_eq!(plain_mask(false, time, 0, true), 0, "rejuvenation runs at the gate");
    }

    #[test]
    fn a_clock_read_goes_ungated_and_counted_unless_an_injection_or_a_call_needs_the_gate() {
        let calls = || CALLS[id::TIME as usize - 1].load(Relaxed);
        let n = calls();
        assert!(ungated_call(id::TIME));
        assert_eq!(calls(), n, "no --inject: nothing counts calls");
        INJECT_COMPONENT.store(id::VFS, Relaxed);
        assert!(ungated_call(id::TIME));
        assert_eq!(calls(), n + 1, "counted as the gate counts, so --inject numbers stay");
        INJECT_COMPONENT.store(id::TIME, Relaxed);
        assert!(!ungated_call(id::TIME), "an injection into time takes the gate");
        INJECT_COMPONENT.store(id::VFS, Relaxed);
        assert!(ungated_call(id::TIME));
        CURRENT.store(id::NET, Relaxed);
        assert!(!ungated_call(id::TIME), "inside another call");
        CURRENT.store(0, Relaxed);
        REJUVENATE_TICKS.store(5, Relaxed);
        assert!(!ungated_call(id::TIME), "rejuvenation runs at the gate");
        REJUVENATE_TICKS.store(0, Relaxed);
        INJECT_COMPONENT.store(0, Relaxed);
        assert_eq!(calls(), n + 2);
    }

    static HEAP_BUSY: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

    fn heap_busy() -> bool {
        HEAP_BUSY.load(Relaxed)
    }

    #[test]
    fn a_failure_inside_the_kernel_heap_is_no_components_to_reboot() {
        assert!(!in_shared_heap(), "no check registered: every failure is the component's");
        set_heap_check(heap_busy);
        assert!(!in_shared_heap());
        HEAP_BUSY.store(true, Relaxed);
        assert!(in_shared_heap(), "the heap is in use: the failure is mm's");
        HEAP_BUSY.store(false, Relaxed);
        assert!(!in_shared_heap());
        HEAP_CHECK.store(0, Relaxed);
    }

    #[test]
    fn every_component_has_a_name_and_a_number() {
        for (i, n) in COMPONENTS.iter().enumerate() {
            assert_eq!(by_name(n) as usize, i + 1);
            assert_eq!(name(i as Component + 1), *n);
        }
        assert_eq!(by_name("recover"), 0);
        let ids = [id::PLAT, id::MM, id::SCHED, id::VFS, id::RAMFS, id::TIME, id::PROCESS, id::SYSINFO, id::USER, id::NET, id::SYSCALL];
        for (i, c) in ids.iter().enumerate() {
            assert_eq!(name(*c), COMPONENTS[i]);
        }
        assert_eq!(name(0), "?");
        assert_eq!(name(N as Component + 1), "?");
        // The table of image_regions() names every component.
        let src = include_str!("lib.rs");
        assert!(src.contains(&format!("table!({})", COMPONENTS.join(", "))));
    }

    static SEEN: AtomicU64 = AtomicU64::new(0);

    fn unwinds(_: &Args) -> SysResult {
        SEEN.store(7, Relaxed);
        // SAFETY: the test's shoal_recover_call saved CONTEXT just below.
        unsafe { shoal_recover_unwind(CONTEXT.0.get()) }
    }

    fn returns(_: &Args) -> SysResult {
        Err(Errno(9))
    }

    /// The component memory of the gate test: 16 bytes of "data" and 16 of
    /// "bss".
    static mut MEM: [u8; 32] = [0; 32];

    fn mem() -> &'static mut [u8; 32] {
        // SAFETY: only the single gate test touches it.
        unsafe { &mut *core::ptr::addr_of_mut!(MEM) }
    }

    fn fails_after_scribbling(_: &Args) -> SysResult {
        mem().fill(0xee);
        SEEN.fetch_add(1, Relaxed);
        abort_to_gate();
        unreachable!("the gate is armed")
    }

    fn fails_once(_: &Args) -> SysResult {
        let seen = SEEN.fetch_add(1, Relaxed) + 1;
        mem()[0] = 0xee;
        if seen == 1 {
            abort_to_gate();
        }
        Ok(mem()[0] as u64 + 1000)
    }

    fn hook(n: u64) {
        mem()[31] = n as u8;
    }

    /// The context switch, snapshot, restore and retry, on the host: one
    /// test, since they share the gate's global state.
    #[test]
    fn the_gate_reboots_a_failed_component_and_retries_once() {
        let args = Args::default();
        // SAFETY: CONTEXT is saved by the call before `unwinds` uses it.
        let r = unsafe { shoal_recover_call(returns, &args, CONTEXT.0.get()) };
        assert_eq!((r.val, r.err), (9, 1), "the result comes back in registers");
        // SAFETY: as above.
        let r = unsafe { shoal_recover_call(|_| Ok(u64::MAX), &args, CONTEXT.0.get()) };
        assert_eq!((r.val, r.err), (u64::MAX, 0));
        // SAFETY: as above; `unwinds` returns through the saved context.
        let r = unsafe { shoal_recover_call(unwinds, &args, CONTEXT.0.get()) };
        assert_eq!(r.err, RAW_ABORTED);
        assert_eq!(SEEN.swap(0, Relaxed), 7);

        let m = mem();
        for (i, b) in m.iter_mut().enumerate() {
            *b = i as u8;
        }
        let start = m.as_ptr() as usize;
        let mut t = [Regions::default(); N];
        let c = by_name("time");
        t[c as usize - 1] = Regions { text: Range::default(), data: Range { start, end: start + 16 }, bss: Range { start: start + 16, end: start + 32 } };
        init_with(t, &[(c, Some(hook))], 1_000_000_000);
        assert!(rebootable(c) && !rebootable(by_name("vfs")));
        // Calls are counted only for an `--inject` (here one into vfs,
        // which never comes).
        INJECT_COMPONENT.store(id::VFS, Relaxed);
        INJECT_AT.store(u64::MAX, Relaxed);

        // A component that fails every time: rebooted twice, EIO.
        assert_eq!(call_in(c, fails_after_scribbling, &Args::default()), Err(Errno::EIO));
        assert_eq!(SEEN.load(Relaxed), 2);
        assert_eq!(reboots(c), 2);
        let expect: Vec<u8> = (0..31u8).chain([2]).collect();
        assert_eq!(&m[..], &expect[..], "restored from the snapshot, then the hook ran with the reboot count");
        assert_eq!(current(), 0);
        assert_eq!(ARMED.load(Relaxed), 0);

        // One that fails once: the retry's result reaches the caller.
        SEEN.store(0, Relaxed);
        assert_eq!(call_in(c, fails_once, &Args::default()), Ok(0xee + 1000));
        assert_eq!(reboots(c), 3);

        // An injected panic needs the kernel's panic handler; here the
        // count that triggers it is checked instead.
        assert_eq!(CALLS[c as usize - 1].load(Relaxed), 2);
        INJECT_COMPONENT.store(0, Relaxed);
        // An ordinary call is not disturbed.
        assert_eq!(call_in(c, |_| Ok(5), &Args::default()), Ok(5));
        assert_eq!(CALLS[c as usize - 1].load(Relaxed), 2, "no --inject: not counted");
    }

    static LOGGED: AtomicU64 = AtomicU64::new(0);
    static COMMITTED: AtomicU64 = AtomicU64::new(0);

    /// A committer that cannot bring its log up to date the first time
    /// (as net's, when its log is borrowed) and asks again.
    fn committer() {
        if COMMITTED.fetch_add(1, Relaxed) == 0 {
            set_pending(id::NET);
        }
    }

    #[test]
    fn loggers_and_committers_run_only_when_their_component_has_something_pending() {
        set_logger(id::PROCESS, || {
            LOGGED.fetch_add(1, Relaxed);
        });
        set_committer(id::NET, committer);
        log::before_call(id::PROCESS);
        log::after_call();
        assert_eq!((LOGGED.load(Relaxed), COMMITTED.load(Relaxed)), (0, 0), "nothing pending: neither runs");
        set_pending(id::PROCESS);
        log::after_call();
        assert_eq!(LOGGED.load(Relaxed), 0, "a logger runs before a call into its component, not after calls");
        log::before_call(id::VFS);
        assert_eq!(LOGGED.load(Relaxed), 0, "nor before calls into others");
        log::before_call(id::PROCESS);
        log::before_call(id::PROCESS);
        assert_eq!(LOGGED.load(Relaxed), 1, "once per set_pending");
        set_pending(id::NET);
        log::after_call();
        assert_eq!(COMMITTED.load(Relaxed), 1);
        log::after_call();
        assert_eq!(COMMITTED.load(Relaxed), 2, "asked again: it runs after the next call too");
        log::after_call();
        assert_eq!(COMMITTED.load(Relaxed), 2);
        set_pending(id::NET);
        log::before_call(id::NET);
        assert_eq!(COMMITTED.load(Relaxed), 3, "and before a call into its own component");
    }
}
