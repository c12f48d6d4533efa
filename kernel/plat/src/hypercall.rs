//! The binding to the tender: one function, two mechanisms (docs/design.md "Tenders and hypercalls").
//!
//! On spt the tender's hypercall function is called directly (its address is
//! in the boot info); on hvt the guest writes the argument address to the
//! hypercall's I/O port, which exits to the VMM. Arguments live in the
//! caller's stack frame; results come back in the same structure.

use core::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(test))]
use shoal_abi::HYPERCALL_PORT_BASE;
use shoal_abi::{
    AliasArgs, AliasListArgs, AliasPair, ConsoleBufferArgs, ConsoleReadArgs, ConsoleWriteArgs, HaltArgs, Hypercall, NetArgs, NetOp, NetPollArgs, NetPollFd,
    PollArgs, ProtectArgs, SignalWordArgs,
};

static ENTRY: AtomicU64 = AtomicU64::new(0);

pub(crate) fn set_entry(entry: u64) {
    ENTRY.store(entry, Ordering::Relaxed);
}

/// Performs hypercall `call` with the argument structure at `arg`.
#[cfg(not(test))]
fn raw<T>(call: Hypercall, arg: &mut T) {
    // Buffered stdout goes out before anything else the instance does
    // outside (crate::console).
    if !matches!(call, Hypercall::ConsoleWrite | Hypercall::ConsoleBuffer) {
        crate::console::flush();
    }
    raw_unflushed(call, arg);
}

/// [`raw`] without writing out buffered stdout first.
#[cfg(not(test))]
fn raw_unflushed<T>(call: Hypercall, arg: &mut T) {
    let entry = ENTRY.load(Ordering::Relaxed);
    let addr = arg as *mut T as u64;
    if entry != 0 {
        // SAFETY: `entry` is the tender's hypercall function, given in the
        // boot info; it follows the C ABI `fn(u64, u64)` and only touches the
        // argument structure we pass, which lives for the whole call.
        unsafe {
            let f: extern "C" fn(u64, u64) = core::mem::transmute(entry as usize);
            f(call as u64, addr);
        }
    } else {
        let port = HYPERCALL_PORT_BASE + call as u16;
        // SAFETY: on hvt the guest runs with IOPL 3 and the TSS allows the
        // hypercall ports; the `out` exits to the VMM, which reads and writes
        // only the argument structure at `addr` (below 4 GiB: guest memory
        // is limited to that on hvt).
        unsafe {
            core::arch::asm!("out dx, eax", in("dx") port, in("eax") addr as u32,
                options(nostack, preserves_flags));
        }
    }
}

#[cfg(test)]
fn raw<T>(call: Hypercall, _arg: &mut T) {
    panic!("hypercall {call:?} in a unit test");
}

#[cfg(test)]
fn raw_unflushed<T>(call: Hypercall, _arg: &mut T) {
    panic!("hypercall {call:?} in a unit test");
}

/// Writes `bytes` to console stream `stream`; returns bytes written or a
/// negative errno.
pub fn console_write(stream: u64, bytes: &[u8]) -> i64 {
    if needs_bounce(bytes.as_ptr() as u64, bytes.len() as u64) {
        // Through a copy on this stack: see `needs_bounce`.
        let mut done = 0usize;
        let mut tmp = [0u8; 512];
        while done < bytes.len() {
            let n = (bytes.len() - done).min(tmp.len());
            tmp[..n].copy_from_slice(&bytes[done..done + n]);
            let r = console_write(stream, &tmp[..n]);
            if r < 0 {
                return if done == 0 { r } else { done as i64 };
            }
            done += r as usize;
            if (r as usize) < n {
                break;
            }
        }
        return done as i64;
    }
    let mut a = ConsoleWriteArgs { stream, buf: bytes.as_ptr() as u64, len: bytes.len() as u64, ret: 0 };
    raw(Hypercall::ConsoleWrite, &mut a);
    a.ret
}

static ALIAS_CHECK: core::sync::atomic::AtomicPtr<()> = core::sync::atomic::AtomicPtr::new(core::ptr::null_mut());

/// Registers mm's answer to "does `[addr, addr + len)` touch a page that
/// shows another page" ([`alias`]).
pub fn set_alias_check(f: fn(u64, u64) -> bool) {
    ALIAS_CHECK.store(f as *mut (), Ordering::SeqCst);
}

/// Whether a buffer handed to the tender must go through a copy: on hvt
/// the VMM reads and writes guest memory by guest-physical address, which
/// is the guest address everywhere but in pages that [`alias`] pointed at
/// other pages (shared file mappings). spt's tender uses the guest's own
/// addresses and needs no copy.
pub fn needs_bounce(addr: u64, len: u64) -> bool {
    if len == 0 || ENTRY.load(Ordering::Relaxed) != 0 || !crate::boot::booted() {
        return false;
    }
    let f = ALIAS_CHECK.load(Ordering::SeqCst);
    if f.is_null() {
        return false;
    }
    // SAFETY: only set_alias_check stores here, always a fn(u64, u64) -> bool.
    let f: fn(u64, u64) -> bool = unsafe { core::mem::transmute(f) };
    f(addr, len)
}

/// [`alias`] for single pages, many at once (`pairs.len()` at most
/// `shoal_abi::ALIAS_LIST_MAX`), all with protection `prot`; returns 0 or
/// a negative errno (the pairs before the refused one are applied).
pub fn alias_list(pairs: &[AliasPair], prot: u64) -> i64 {
    let mut a = AliasListArgs { pairs: pairs.as_ptr() as u64, count: pairs.len() as u64, prot, ret: 0 };
    raw(Hypercall::AliasList, &mut a);
    #[cfg(not(test))]
    if ENTRY.load(Ordering::Relaxed) == 0 {
        // hvt: drop stale translations (also after a refusal part-way: the
        // pairs before it are applied, and the VMM always drops its shadow
        // of the tables after a list).
        flush_tlb();
    }
    a.ret
}

/// hvt: makes the guest forget stale translations after the VMM took
/// access away from some page (`shoal_abi::PROTECT_FLUSH`). CPL 3 can
/// neither `invlpg` nor write CR3: `int3` with the magic in rax enters the
/// VMM's CPL-0 gate, which reloads CR3 and returns.
#[cfg(not(test))]
fn flush_tlb() {
    // SAFETY: the VMM's #BP gate sees the magic in rax, only reloads CR3
    // and returns after the int3, preserving every register.
    unsafe {
        core::arch::asm!("int3", in("rax") shoal_abi::HVT_TLB_FLUSH_MAGIC, options(nostack, preserves_flags));
    }
}

/// The caller's view of a `Protect`/`Alias` result: 0 or a negative errno,
/// after the flush a [`shoal_abi::PROTECT_FLUSH`] asks for.
fn settle(ret: i64) -> i64 {
    #[cfg(not(test))]
    if ret == shoal_abi::PROTECT_FLUSH {
        flush_tlb();
    }
    if ret == shoal_abi::PROTECT_FLUSH {
        0
    } else {
        ret
    }
}

/// Whether a page must be re-backed in place before other pages can show
/// it ([`alias`] with `src == dst`): on spt (the page must come from the
/// tender's alias file), not on hvt (any guest-physical page can be shown
/// anywhere). True without a tender too, so unit tests see the requests.
pub fn needs_rebacking() -> bool {
    !crate::boot::booted() || ENTRY.load(Ordering::Relaxed) != 0
}

/// Makes the guest pages `[dst, dst + len)` show the pages `[src, src +
/// len)` with protection `prot` (`shoal_abi::AliasArgs`); `src == dst`
/// gives them back their own memory. Returns 0 or a negative errno.
pub fn alias(dst: u64, src: u64, len: u64, prot: u64) -> i64 {
    let mut a = AliasArgs { dst, src, len, prot, ret: 0 };
    raw(Hypercall::Alias, &mut a);
    settle(a.ret)
}

/// Gives the guest pages of `ranges` (at most
/// `shoal_abi::RELEASE_LIST_MAX`) back to the host
/// ([`shoal_abi::Hypercall::Release`]): they read as zero afterwards and
/// cost the host nothing until touched again. 0, or a negative errno
/// (`-ENOSYS`: this tender cannot release; the ranges before a refused
/// one are released).
pub fn release(ranges: &[shoal_abi::ReleaseRange]) -> i64 {
    let mut a = shoal_abi::ReleaseArgs { ranges: ranges.as_ptr() as u64, count: ranges.len() as u64, ret: 0 };
    raw(Hypercall::Release, &mut a);
    a.ret
}

/// Registers the console buffer at `addr` (a `ConsoleBufferHeader` and
/// `cap` bytes) with the tender; 0 if it will drain it when the guest ends
/// unflushed, a negative errno if the guest must not buffer.
pub fn console_buffer(addr: u64, cap: u64) -> i64 {
    let mut a = ConsoleBufferArgs { addr, cap, ret: 0 };
    raw(Hypercall::ConsoleBuffer, &mut a);
    a.ret
}

/// The `Preempt` hypercall ([`shoal_abi::PreemptArgs`]); 0, or a
/// negative errno (a tender without preemption: `-ENOSYS`).
pub fn preempt(op: u64, area: u64, entry: u64, tick_ns: u64) -> i64 {
    let mut a = shoal_abi::PreemptArgs { op, area, entry, tick_ns, ret: 0 };
    raw(Hypercall::Preempt, &mut a);
    a.ret
}

/// `Preempt`/`PREEMPT_WAKE`: one tick after `delay_ns`, asked for by the
/// stdout buffer to write out lines it holds back; the only hypercall
/// that leaves them held (it exists to save that write).
pub fn preempt_wake(delay_ns: u64) -> i64 {
    let mut a = shoal_abi::PreemptArgs { op: shoal_abi::PREEMPT_WAKE, tick_ns: delay_ns, ..Default::default() };
    raw_unflushed(Hypercall::Preempt, &mut a);
    a.ret
}

/// The program's explicit ready point ([`shoal_abi::Hypercall::Ready`]):
/// in a template made at that point the tender stops here and this
/// returns only in each copy; elsewhere it returns at once. Always 0.
pub fn ready() -> i64 {
    let mut a = shoal_abi::ReadyArgs { ret: 0 };
    raw(Hypercall::Ready, &mut a);
    a.ret
}

/// Hands the volume's packed tree to the tender
/// ([`shoal_abi::Hypercall::VolumeSave`]); 0, or a negative errno.
pub fn volume_save(archive: &[u8]) -> i64 {
    let mut a = shoal_abi::VolumeSaveArgs { addr: archive.as_ptr() as u64, len: archive.len() as u64, ret: 0 };
    raw(Hypercall::VolumeSave, &mut a);
    a.ret
}

/// One operation on a read-only host directory
/// ([`shoal_abi::Hypercall::HostFs`]); the result (`ret`). The caller
/// passes buffers that need no bounce ([`needs_bounce`]).
pub fn host_fs(a: &mut shoal_abi::HostFsArgs) -> i64 {
    raw(Hypercall::HostFs, a);
    a.ret
}

/// Registers the host-signal word at `addr` with the tender
/// ([`crate::hostsig`]); 0, or a negative errno.
pub fn signal_word(addr: u64) -> i64 {
    let mut a = SignalWordArgs { addr, ret: 0 };
    raw(Hypercall::SignalWord, &mut a);
    a.ret
}

/// Registers the kernel's fault entry and armed word with the tender
/// ([`shoal_abi::Hypercall::FaultHandler`]); 0, or a negative errno
/// (`ENOSYS`: this tender cannot hand faults back).
pub fn fault_handler(entry: u64, armed: u64) -> i64 {
    let mut a = shoal_abi::FaultHandlerArgs { entry, armed, ret: 0 };
    raw(Hypercall::FaultHandler, &mut a);
    a.ret
}

/// Registers (`entry` 0: withdraws) the kernel's program-fault entry and
/// the area the tender writes the fault to
/// ([`shoal_abi::Hypercall::ProgramFault`]); 0, or a negative errno
/// (`ENOSYS`: this tender cannot hand the program's faults back).
pub fn program_fault(entry: u64, area: u64) -> i64 {
    let mut a = shoal_abi::ProgramFaultArgs { entry, area, ret: 0 };
    raw(Hypercall::ProgramFault, &mut a);
    a.ret
}

/// Reads the tender's standard input into `buf` without blocking; returns
/// bytes read, 0 at end of input, `-EAGAIN` when nothing is available now,
/// or another negative errno.
pub fn console_read(buf: &mut [u8]) -> i64 {
    if needs_bounce(buf.as_ptr() as u64, buf.len() as u64) {
        // Through a copy on this stack (see `needs_bounce`); a short read.
        let mut tmp = [0u8; 512];
        let n = buf.len().min(tmp.len());
        let r = console_read(&mut tmp[..n]);
        if r > 0 {
            let r = (r as usize).min(n);
            buf[..r].copy_from_slice(&tmp[..r]);
        }
        return r;
    }
    let mut a = ConsoleReadArgs { buf: buf.as_mut_ptr() as u64, len: buf.len() as u64, ret: 0 };
    raw(Hypercall::ConsoleRead, &mut a);
    a.ret
}

/// Asks the tender to give the guest pages `[addr, addr + len)` the
/// protection `prot` (`shoal_abi::PROT_READ`/`PROT_WRITE` bits); returns 0
/// or a negative errno.
pub fn protect(addr: u64, len: u64, prot: u64) -> i64 {
    let mut a = ProtectArgs { addr, len, prot, ret: 0 };
    raw(Hypercall::Protect, &mut a);
    settle(a.ret)
}

/// Blocks for at most `timeout_ns` nanoseconds (`u64::MAX`: forever) or
/// until a device in `wait_set` is ready; returns the ready set.
pub fn poll(timeout_ns: u64, wait_set: u64) -> u64 {
    let mut a = PollArgs { timeout_ns, wait_set, ready_set: 0, ret: 0 };
    raw(Hypercall::Poll, &mut a);
    a.ready_set
}

/// Carries out a batch of socket operations on the tender's host sockets
/// (each `ret` is filled in); returns how many were carried out or a
/// negative errno for the batch.
pub fn net(ops: &mut [NetOp]) -> i64 {
    let mut a = NetArgs { ops: ops.as_mut_ptr() as u64, count: ops.len() as u64, ret: 0 };
    raw(Hypercall::Net, &mut a);
    a.ret
}

/// Waits until one of the host sockets in `fds` has an event or
/// `timeout_ns` passes (`u64::MAX`: no deadline); returns how many entries
/// have events (their `revents` filled in), 0 on time-out, or a negative
/// errno.
pub fn net_poll(fds: &mut [NetPollFd], timeout_ns: u64) -> i64 {
    let mut a = NetPollArgs { fds: fds.as_mut_ptr() as u64, nfds: fds.len() as u64, timeout_ns, ..NetPollArgs::default() };
    raw(Hypercall::NetPoll, &mut a);
    a.ret
}

/// [`net_poll`] that also collects, into `events`, the host sockets of the
/// tender's watch set whose readiness rose (boot info `NET_WATCH`).
/// Returns `net_poll`'s result and how many entries of `events` were
/// written.
pub fn net_poll_watch(fds: &mut [NetPollFd], events: &mut [NetPollFd], timeout_ns: u64) -> (i64, usize) {
    let mut a = NetPollArgs {
        fds: fds.as_mut_ptr() as u64,
        nfds: fds.len() as u64,
        timeout_ns,
        ret: 0,
        events: events.as_mut_ptr() as u64,
        max_events: events.len() as u64,
        nevents: 0,
    };
    raw(Hypercall::NetPoll, &mut a);
    (a.ret, (a.nevents as usize).min(events.len()))
}

/// Stops the instance.
pub fn halt(status: i64) -> ! {
    let mut a = HaltArgs { status };
    raw(Hypercall::Halt, &mut a);
    // A tender never returns from Halt; if one did, stop here for good.
    loop {
        core::hint::spin_loop();
    }
}
