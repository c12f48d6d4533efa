//! The hypercall handlers. Every argument is hostile: the argument
//! structure and every buffer it names are read and written only through
//! `shoal_loader::GuestMemory`, which checks (without overflow) that the
//! whole range lies in guest memory.
//!
//! As on spt, a hypercall that writes results back needs its argument
//! structure in memory the guest may write: not the image's code or
//! read-only data, the archive or the boot-info page ([`ReadOnly`]). The VMM
//! writes guest memory through its own mapping, which the guest's page
//! tables do not protect, so without this check a guest could make the VMM
//! overwrite its code. The check is made before the call has any effect.
//!
//! A fault report is believed only from the CPL-0 exception stub: the
//! guest runs at CPL 3 with IOPL 3, so it can write the fault port itself,
//! with any report it likes; the VMM asks the vCPU where it was ([`Origin`]).

use crate::x86;
use shoal_abi::{
    ConsoleBufferArgs, ConsoleBufferHeader, ConsoleReadArgs, ConsoleWriteArgs, FaultArgs, HaltArgs, Hypercall, PollArgs, ProtectArgs, CONSOLE_BUFFER_MAX,
    CONSOLE_STDERR, CONSOLE_STDOUT, HYPERCALL_PORT_BASE,
};
use shoal_loader::{GuestAddr, GuestMemory, MemError};
use std::io::Write;
use vm_memory::Bytes;

/// Where console output goes (the process's stdout/stderr, or buffers in
/// tests).
pub struct Console<'a> {
    /// Stream 1.
    pub stdout: &'a mut dyn Write,
    /// Stream 2.
    pub stderr: &'a mut dyn Write,
}

/// What the run loop does after a hypercall.
#[derive(Debug)]
pub enum Action {
    /// Resume the guest.
    Continue,
    /// The guest halted with this status.
    Halt(i64),
    /// A CPU exception, reported by the CPL-0 stub.
    Fault(FaultArgs),
    /// The guest polled with no deadline and nothing to wait for.
    BlockedForever,
    /// The guest broke the hypercall protocol; stop it.
    Refused(Refusal),
    /// The VMM could not go on (a KVM call failed); stop the guest.
    Stopped(String),
}

/// Ways a guest can break the hypercall protocol.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// A port write that is not a 32-bit `out dx, eax`.
    #[error("it wrote {size} bytes to hypercall port {port:#x}; hypercalls are 32-bit port writes")]
    BadSize {
        /// The port.
        port: u16,
        /// Bytes written.
        size: usize,
    },
    /// A port that is not a hypercall.
    #[error("it wrote to I/O port {0:#x}, which is not a hypercall port")]
    UnknownPort(u16),
    /// A port read.
    #[error("it read I/O port {0:#x}; hvt hypercalls are port writes")]
    PortRead(u16),
    /// The argument structure does not lie in guest memory.
    #[error("its {call:?} argument structure is outside guest memory: {source}")]
    BadArgs {
        /// The hypercall.
        call: Hypercall,
        /// The range check that failed.
        source: MemError,
    },
    /// The argument structure of a hypercall that writes results back lies
    /// (partly) in read-only guest memory.
    #[error(
        "its {call:?} argument structure [{addr:#x}, +{len:#x}) is outside writable guest memory \
         (the image's code or read-only data, the archive or the boot-info page), where the results would be written"
    )]
    ReadOnlyArgs {
        /// The hypercall.
        call: Hypercall,
        /// Guest address of the argument structure.
        addr: u64,
        /// Its size.
        len: u64,
    },
    /// A fault report that did not come from the CPL-0 exception stub.
    #[error(
        "it wrote a fault report (argument {arg:#x}) to the fault port itself at CPL {cpl} (rip {rip:#x}); \
         only the exception stub reports CPU exceptions"
    )]
    ForgedFault {
        /// The argument it passed.
        arg: u64,
        /// The privilege level it wrote the port from.
        cpl: u8,
        /// Where it wrote the port from.
        rip: u64,
    },
}

/// The guest ranges `[start, end)` that are read-only for the guest (its
/// page tables map them so): hypercall results are never written there.
#[derive(Clone, Debug, Default)]
pub struct ReadOnly(pub Vec<(u64, u64)>);

impl ReadOnly {
    /// Whether `[addr, addr + len)` lies in guest memory and outside every
    /// read-only range.
    pub fn writable(&self, mem: &GuestMemory, addr: u64, len: u64) -> bool {
        if !mem.contains(GuestAddr(addr), len) {
            return false;
        }
        let end = addr + len; // no overflow: checked by `contains`
        !self.0.iter().any(|&(s, e)| addr < e && s < end)
    }
}

/// Where the vCPU was when it wrote to the fault port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Origin {
    /// Its current privilege level (the RPL of CS).
    pub cpl: u8,
    /// Its instruction pointer (after the `out`).
    pub rip: u64,
}

impl Origin {
    /// Whether this is the exception stub: CPL 0, which a CPL-3 guest can
    /// only reach through the IDT, and an instruction in the stub's page.
    pub fn is_stub(&self) -> bool {
        self.cpl == 0 && (x86::STUB_ADDR..x86::STUB_ADDR + shoal_abi::PAGE_SIZE).contains(&self.rip)
    }
}

/// What a hypercall handler needs to know about the guest.
pub struct Guest<'a> {
    /// Guest memory as the guest may name it.
    pub mem: &'a GuestMemory,
    /// The whole mapping, tender-private pages included (the stub's report).
    pub private: &'a vm_memory::GuestRegionMmap<()>,
    /// Ranges results are never written to.
    pub read_only: &'a ReadOnly,
    /// Applies a `Protect` request (`crate::protect`); `None`: not
    /// supported here (unit tests), answered `ENOSYS`.
    pub protect: Option<&'a ProtectFn<'a>>,
    /// Applies an `Alias` request (`crate::protect`); `None`: not
    /// available (`ENOSYS`).
    pub alias: Option<&'a AliasFn<'a>>,
    /// Applies one range of a `Release` request (`crate::protect`):
    /// `(addr, len)`; `None`: not available (`ENOSYS`).
    pub release: Option<&'a ReleaseFn<'a>>,
    /// Where a `VolumeSave` archive is kept until the guest has ended
    /// (`--volume`), and the largest taken; `None`: no volume (`ENOSYS`).
    pub volume: Option<(&'a std::cell::RefCell<Option<Vec<u8>>>, u64)>,
    /// The kernel's fault entry and armed word (`FaultHandler`), once
    /// registered; `None` as a field: not supported here (`ENOSYS`).
    pub fault: Option<&'a std::cell::Cell<Option<(u64, u64)>>>,
    /// The kernel's program-fault entry and area (`ProgramFault`), once
    /// registered; `None` as a field: not supported here (`ENOSYS`).
    pub program: Option<&'a std::cell::Cell<Option<(u64, u64)>>>,
    /// The read-only host directories (`--mount`); `None`: none (`ENOSYS`).
    pub mounts: Option<&'a shoal_hostcall::hostfs::Mounts>,
    /// Maps mounted files' pages into guest memory (`HOSTFS_MAP`,
    /// `crate::protect`); `None`: not available (`ENOSYS`).
    pub file_maps: Option<&'a dyn shoal_hostcall::hostfs::Mapper>,
}

/// How the run loop gives one range of a `Release` request back: as
/// [`ProtectFn`].
pub type ReleaseFn<'a> = dyn Fn(u64, u64) -> Result<i64, String> + 'a;

/// How the run loop applies an `Alias` request: as [`ProtectFn`].
pub type AliasFn<'a> = dyn Fn(&shoal_abi::AliasArgs) -> Result<i64, String> + 'a;

/// How the run loop applies a `Protect` request: `Ok` is the hypercall's
/// result, `Err` stops the guest (the VMM's own tables are broken).
pub type ProtectFn<'a> = dyn Fn(&ProtectArgs) -> Result<i64, String> + 'a;

/// Reads the argument structure of `call` at `arg`; with `write`, it must
/// also lie in writable guest memory (checked before the call has any
/// effect, as spt does).
fn args<T: shoal_loader::Pod>(g: &Guest<'_>, call: Hypercall, arg: GuestAddr, write: bool) -> Result<T, Refusal> {
    let a = g.mem.read_obj::<T>(arg).map_err(|source| Refusal::BadArgs { call, source })?;
    let len = core::mem::size_of::<T>() as u64;
    if write && !g.read_only.writable(g.mem, arg.0, len) {
        return Err(Refusal::ReadOnlyArgs { call, addr: arg.0, len });
    }
    Ok(a)
}

const EFAULT: i64 = -(libc::EFAULT as i64);
const EINVAL: i64 = -(libc::EINVAL as i64);

/// Writes the results back into the argument structure, which `args`
/// checked as writable, so this cannot fail; should it, the guest is refused
/// rather than resumed with a stale result.
fn put<T: shoal_loader::Pod>(g: &Guest<'_>, call: Hypercall, arg: GuestAddr, v: &T) -> Action {
    match g.mem.write_obj(arg, v) {
        Ok(()) => Action::Continue,
        Err(source) => Action::Refused(Refusal::BadArgs { call, source }),
    }
}

/// Applies `each` to the `count` records of type `T` the guest lists at
/// `base` (the batched hypercalls: one exit for many pages or ranges),
/// stopping at the first answer other than `Ok(0)`: `EINVAL` for more
/// than `max` records, `ENOSYS` when this VMM has no handler (`each` is
/// `None`), `EFAULT` for a record outside guest memory.
fn each_listed<T: shoal_loader::Pod>(
    g: &Guest<'_>,
    base: u64,
    count: u64,
    max: u64,
    each: Option<impl FnMut(T) -> Result<i64, String>>,
) -> Result<i64, String> {
    if count > max {
        return Ok(-i64::from(libc::EINVAL));
    }
    let Some(mut each) = each else { return Ok(-i64::from(libc::ENOSYS)) };
    let size = core::mem::size_of::<T>() as u64;
    for i in 0..count {
        let Ok(record) = g.mem.read_obj::<T>(GuestAddr(base.wrapping_add(i * size))) else {
            return Ok(-i64::from(libc::EFAULT));
        };
        let r = each(record);
        if r != Ok(0) {
            return r;
        }
    }
    Ok(0)
}

/// Ends a hypercall whose handler answered `r`: its result written back
/// into the argument structure `with_ret` makes (`Ok`), or the instance
/// stopped (`Err`: the tender could not carry the request out).
fn answer<T: shoal_loader::Pod>(g: &Guest<'_>, call: Hypercall, arg: GuestAddr, r: Result<i64, String>, with_ret: impl FnOnce(i64) -> T) -> Action {
    match r {
        Ok(ret) => put(g, call, arg, &with_ret(ret)),
        Err(e) => Action::Stopped(e),
    }
}

/// Decodes a write of `data` to I/O port `port`: which hypercall, and the
/// guest address of its argument structure.
pub fn decode(port: u16, data: &[u8]) -> Result<(Hypercall, GuestAddr), Refusal> {
    let Some(nr) = port.checked_sub(HYPERCALL_PORT_BASE) else {
        return Err(Refusal::UnknownPort(port));
    };
    let Some(call) = Hypercall::from_nr(u64::from(nr)) else {
        return Err(Refusal::UnknownPort(port));
    };
    let Ok(bytes) = <[u8; 4]>::try_from(data) else {
        return Err(Refusal::BadSize { port, size: data.len() });
    };
    Ok((call, GuestAddr(u64::from(u32::from_le_bytes(bytes)))))
}

/// The guest's console buffer, as registered with
/// [`Hypercall::ConsoleBuffer`]: where its [`ConsoleBufferHeader`] is and
/// how many bytes may follow it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConsoleBuffer {
    /// Guest address of the header.
    pub addr: u64,
    /// Room after the header.
    pub cap: u64,
}

const HEADER_LEN: u64 = core::mem::size_of::<ConsoleBufferHeader>() as u64;

impl ConsoleBuffer {
    /// Checks a registration: at most [`CONSOLE_BUFFER_MAX`] bytes, header
    /// and room in writable guest memory (the guest writes it; the VMM
    /// only ever reads it). The result is the hypercall's.
    fn register(g: &Guest<'_>, a: &ConsoleBufferArgs) -> Result<ConsoleBuffer, i64> {
        if a.cap == 0 || a.cap > CONSOLE_BUFFER_MAX {
            return Err(EINVAL);
        }
        if !g.read_only.writable(g.mem, a.addr, HEADER_LEN + a.cap) {
            return Err(EFAULT);
        }
        Ok(ConsoleBuffer { addr: a.addr, cap: a.cap })
    }

    /// Writes what the guest left in its buffer when it ended without
    /// flushing it (a CPU exception, a refused hypercall), before the
    /// VMM's own message. The header is the guest's: a stream that is not
    /// stdout or stderr, or a length beyond the registered room, means
    /// nothing is written.
    pub fn drain(&self, mem: &GuestMemory, console: &mut Console<'_>) {
        let Ok(h) = mem.read_obj::<ConsoleBufferHeader>(GuestAddr(self.addr)) else { return };
        let len = u64::from(h.len);
        if len == 0 || len > self.cap {
            return;
        }
        let a = ConsoleWriteArgs { stream: u64::from(h.stream), buf: self.addr + HEADER_LEN, len, ret: 0 };
        let mut wrote = false;
        console_write(mem, &a, console, &mut wrote);
    }
}

/// Handles hypercall `call` with its argument structure at `arg` (from
/// [`decode`]). `origin` tells where the vCPU was; it is asked only for the
/// fault port (it costs KVM calls). `net` holds the instance's sockets;
/// `buffer` the guest's registered console buffer.
#[allow(clippy::too_many_arguments)]
pub fn handle(
    call: Hypercall,
    arg: GuestAddr,
    g: &Guest<'_>,
    net: &mut crate::net::Net,
    origin: &mut dyn FnMut() -> Result<Origin, String>,
    console: &mut Console<'_>,
    wrote: &mut bool,
    buffer: &mut Option<ConsoleBuffer>,
) -> Action {
    match call {
        Hypercall::ConsoleBuffer => {
            let mut a: ConsoleBufferArgs = match args(g, call, arg, true) {
                Ok(a) => a,
                Err(r) => return Action::Refused(r),
            };
            a.ret = match ConsoleBuffer::register(g, &a) {
                Ok(b) => {
                    *buffer = Some(b);
                    0
                }
                Err(e) => e,
            };
            put(g, call, arg, &a)
        }
        Hypercall::SignalWord => {
            let mut a: shoal_abi::SignalWordArgs = match args(g, call, arg, true) {
                Ok(a) => a,
                Err(r) => return Action::Refused(r),
            };
            a.ret = if !a.addr.is_multiple_of(8) {
                EINVAL
            } else if !g.read_only.writable(g.mem, a.addr, 8) {
                EFAULT
            } else {
                match g.mem.host_ptr(GuestAddr(a.addr), 8) {
                    Ok(p) => {
                        crate::forward::register(p);
                        0
                    }
                    Err(_) => EFAULT,
                }
            };
            put(g, call, arg, &a)
        }
        Hypercall::ConsoleWrite => {
            let mut a: ConsoleWriteArgs = match args(g, call, arg, true) {
                Ok(a) => a,
                Err(r) => return Action::Refused(r),
            };
            a.ret = console_write(g.mem, &a, console, wrote);
            put(g, call, arg, &a)
        }
        Hypercall::Halt => match args::<HaltArgs>(g, call, arg, false) {
            Ok(a) => Action::Halt(a.status),
            Err(r) => Action::Refused(r),
        },
        Hypercall::Poll => {
            let mut a: PollArgs = match args(g, call, arg, true) {
                Ok(a) => a,
                Err(r) => return Action::Refused(r),
            };
            if a.wait_set != 0 {
                // No devices exist yet.
                a.ret = EINVAL;
            } else if a.timeout_ns == u64::MAX {
                // Nothing could ever wake it (spt does the same).
                return Action::BlockedForever;
            } else {
                // Block here: an idle guest costs no CPU.
                if a.timeout_ns > 0 {
                    sleep_interruptible(a.timeout_ns);
                }
                a.ret = 0;
            }
            a.ready_set = 0;
            put(g, call, arg, &a)
        }
        // Host-socket passthrough (crate::net): the VMM's own sockets,
        // named by handles of its table.
        Hypercall::Net => {
            let mut a: shoal_abi::NetArgs = match args(g, call, arg, true) {
                Ok(a) => a,
                Err(r) => return Action::Refused(r),
            };
            a.ret = net.batch(g, &a);
            put(g, call, arg, &a)
        }
        Hypercall::NetPoll => {
            let mut a: shoal_abi::NetPollArgs = match args(g, call, arg, true) {
                Ok(a) => a,
                Err(r) => return Action::Refused(r),
            };
            a.ret = match net.poll(g, &mut a) {
                Ok(r) => r,
                // Nothing to wait for and no deadline (spt does the same).
                Err(crate::net::NothingToWaitFor) => return Action::BlockedForever,
            };
            put(g, call, arg, &a)
        }
        Hypercall::ConsoleRead => {
            let mut a: ConsoleReadArgs = match args(g, call, arg, true) {
                Ok(a) => a,
                Err(r) => return Action::Refused(r),
            };
            a.ret = console_read(g, &a);
            put(g, call, arg, &a)
        }
        Hypercall::Preempt => {
            let mut a: shoal_abi::PreemptArgs = match args(g, call, arg, true) {
                Ok(a) => a,
                Err(r) => return Action::Refused(r),
            };
            let n = crate::preempt::AREA_BYTES;
            a.ret = match a.op {
                shoal_abi::PREEMPT_REGISTER if !a.area.is_multiple_of(8) || !g.mem.contains(GuestAddr(a.entry), 1) => EINVAL,
                shoal_abi::PREEMPT_REGISTER if !g.read_only.writable(g.mem, a.area, n) => EFAULT,
                shoal_abi::PREEMPT_REGISTER => match g.mem.host_ptr(GuestAddr(a.area), n) {
                    Ok(p) => {
                        crate::preempt::register(p, a.entry);
                        0
                    }
                    Err(_) => EFAULT,
                },
                shoal_abi::PREEMPT_ARM => crate::preempt::arm(a.tick_ns),
                shoal_abi::PREEMPT_WATCH => crate::preempt::watch(),
                shoal_abi::PREEMPT_WAKE => crate::preempt::wake(a.tick_ns),
                _ => EINVAL,
            };
            put(g, call, arg, &a)
        }
        Hypercall::HostFs => {
            let mut a: shoal_abi::HostFsArgs = match args(g, call, arg, true) {
                Ok(a) => a,
                Err(r) => return Action::Refused(r),
            };
            a.ret = match g.mounts {
                None => -i64::from(libc::ENOSYS),
                Some(m) if matches!(a.op, shoal_abi::HOSTFS_MAP | shoal_abi::HOSTFS_MAP_EXEC | shoal_abi::HOSTFS_UNMAP) => match g.file_maps {
                    Some(f) => shoal_hostcall::hostfs::serve_map(m, &a, g.mem, f),
                    None => -i64::from(libc::ENOSYS),
                },
                Some(m) => shoal_hostcall::hostfs::serve(m, &a, g.mem, &|addr, len| g.read_only.writable(g.mem, addr, len)),
            };
            put(g, call, arg, &a)
        }
        // The explicit ready point: a template's is taken in the run loop
        // before this (crate::template); everywhere else it changes nothing.
        Hypercall::Ready => {
            let mut a: shoal_abi::ReadyArgs = match args(g, call, arg, true) {
                Ok(a) => a,
                Err(r) => return Action::Refused(r),
            };
            a.ret = 0;
            put(g, call, arg, &a)
        }
        Hypercall::VolumeSave => {
            let mut a: shoal_abi::VolumeSaveArgs = match args(g, call, arg, true) {
                Ok(a) => a,
                Err(r) => return Action::Refused(r),
            };
            a.ret = match g.volume {
                None => -i64::from(libc::ENOSYS),
                Some((_, max)) if a.len > max => -i64::from(libc::EFBIG),
                // Copied now, validated by shoal_loader::volume::store once
                // the guest has halted.
                Some((_, _)) if !g.mem.contains(GuestAddr(a.addr), a.len) => EFAULT,
                Some((kept, _)) => {
                    // At most the guest's memory size (max), checked above.
                    let mut v = vec![0u8; a.len as usize];
                    match g.mem.read(GuestAddr(a.addr), &mut v) {
                        Ok(()) => {
                            *kept.borrow_mut() = Some(v);
                            0
                        }
                        Err(_) => EFAULT,
                    }
                }
            };
            put(g, call, arg, &a)
        }
        // Registered here, used by the run loop when the CPL-0 stub
        // reports a fault (crate::hand_back).
        Hypercall::FaultHandler => {
            let mut a: shoal_abi::FaultHandlerArgs = match args(g, call, arg, true) {
                Ok(a) => a,
                Err(r) => return Action::Refused(r),
            };
            a.ret = match g.fault {
                None => -i64::from(libc::ENOSYS),
                Some(_) if !a.armed.is_multiple_of(8) => -i64::from(libc::EINVAL),
                Some(_) if !g.mem.contains(GuestAddr(a.armed), 8) || !g.mem.contains(GuestAddr(a.entry), 1) => EFAULT,
                Some(f) => {
                    f.set(Some((a.entry, a.armed)));
                    0
                }
            };
            put(g, call, arg, &a)
        }
        Hypercall::ProgramFault => {
            let mut a: shoal_abi::ProgramFaultArgs = match args(g, call, arg, true) {
                Ok(a) => a,
                Err(r) => return Action::Refused(r),
            };
            let size = core::mem::size_of::<shoal_abi::ProgramFaultArea>() as u64;
            a.ret = match g.program {
                None => -i64::from(libc::ENOSYS),
                Some(f) if a.entry == 0 => {
                    f.set(None);
                    0
                }
                Some(_) if !a.area.is_multiple_of(8) => -i64::from(libc::EINVAL),
                Some(_) if !g.read_only.writable(g.mem, a.area, size) || !g.mem.contains(GuestAddr(a.entry), 1) => EFAULT,
                Some(f) => {
                    f.set(Some((a.entry, a.area)));
                    0
                }
            };
            put(g, call, arg, &a)
        }
        Hypercall::Protect => {
            let mut a: ProtectArgs = match args(g, call, arg, true) {
                Ok(a) => a,
                Err(r) => return Action::Refused(r),
            };
            let r = g.protect.map_or(Ok(-i64::from(libc::ENOSYS)), |f| f(&a));
            answer(g, call, arg, r, |ret| {
                a.ret = ret;
                a
            })
        }
        Hypercall::Alias => {
            let mut a: shoal_abi::AliasArgs = match args(g, call, arg, true) {
                Ok(a) => a,
                Err(r) => return Action::Refused(r),
            };
            let r = g.alias.map_or(Ok(-i64::from(libc::ENOSYS)), |f| f(&a));
            answer(g, call, arg, r, |ret| {
                a.ret = ret;
                a
            })
        }
        Hypercall::AliasList => {
            let mut a: shoal_abi::AliasListArgs = match args(g, call, arg, true) {
                Ok(a) => a,
                Err(r) => return Action::Refused(r),
            };
            let prot = a.prot;
            // The guest flushes after every list, so a pair's
            // PROTECT_FLUSH is only "done" here.
            let each = g.alias.map(|f| {
                move |p: shoal_abi::AliasPair| {
                    let r = f(&shoal_abi::AliasArgs { dst: p.dst, src: p.src, len: shoal_abi::PAGE_SIZE, prot, ret: 0 });
                    r.map(|r| if r == shoal_abi::PROTECT_FLUSH { 0 } else { r })
                }
            });
            let r = each_listed(g, a.pairs, a.count, shoal_abi::ALIAS_LIST_MAX, each);
            answer(g, call, arg, r, |ret| {
                a.ret = ret;
                a
            })
        }
        Hypercall::Release => {
            // One exit for up to RELEASE_LIST_MAX ranges.
            let mut a: shoal_abi::ReleaseArgs = match args(g, call, arg, true) {
                Ok(a) => a,
                Err(r) => return Action::Refused(r),
            };
            let each = g.release.map(|f| move |x: shoal_abi::ReleaseRange| f(x.addr, x.len));
            let r = each_listed(g, a.ranges, a.count, shoal_abi::RELEASE_LIST_MAX, each);
            answer(g, call, arg, r, |ret| {
                a.ret = ret;
                a
            })
        }
        Hypercall::Fault => {
            // Only the CPL-0 stub reports CPU exceptions, from its own stack
            // in tender-private memory. The guest at CPL 3 can write this
            // port too (IOPL 3), so where the vCPU is decides, not what the
            // report says.
            let o = match origin() {
                Ok(o) => o,
                Err(e) => return Action::Stopped(e),
            };
            if !o.is_stub() || arg.0 != x86::FAULT_REPORT_ADDR {
                return Action::Refused(Refusal::ForgedFault { arg: arg.0, cpl: o.cpl, rip: o.rip });
            }
            let mut raw = [0u8; core::mem::size_of::<FaultArgs>()];
            if let Err(e) = g.private.read_slice(&mut raw, vm_memory::MemoryRegionAddress(arg.0)) {
                return Action::Stopped(format!("cannot read the exception stub's fault report: {e}"));
            }
            let q = |i: usize| {
                let mut w = [0u8; 8];
                w.copy_from_slice(&raw[i * 8..i * 8 + 8]);
                u64::from_le_bytes(w)
            };
            Action::Fault(FaultArgs { vector: q(0), error_code: q(1), rip: q(2), rsp: q(3), cr2: q(4) })
        }
    }
}

/// Sleeps `ns` or until a signal arrives (a forwarded SIGTERM must end the
/// guest's sleep: `std::thread::sleep` would sleep on after it). The guest
/// loops until its deadline, so returning early is always allowed.
fn sleep_interruptible(ns: u64) {
    // A forwarded signal that arrived while the guest was on its way here
    // (after it last looked at its word) would not interrupt this sleep:
    // return at once, and never sleep more than a second, so one that
    // lands between this look and the sleep is seen within a second.
    if crate::forward::waiting_in_word() {
        return;
    }
    let ns = ns.min(1_000_000_000);
    let ts = libc::timespec { tv_sec: (ns / 1_000_000_000).min(i64::MAX as u64) as libc::time_t, tv_nsec: (ns % 1_000_000_000) as libc::c_long };
    // SAFETY: `ts` is a valid timespec; no remainder is asked for.
    unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, 0, &ts, std::ptr::null_mut()) };
}

/// Reads the VMM's stdin (descriptor 0) without blocking, into guest
/// memory the guest may write: the descriptor may be a blocking pipe or
/// terminal shared with the caller, so its flags are left alone and a
/// zero-timeout `poll` decides whether the `read` returns at once. The
/// guest waits for input in `NetPoll` on `STDIN_HANDLE`.
fn console_read(g: &Guest<'_>, a: &ConsoleReadArgs) -> i64 {
    if !g.read_only.writable(g.mem, a.buf, a.len) {
        return EFAULT;
    }
    let mut p = libc::pollfd { fd: 0, events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd; no timeout.
    let rc = unsafe { libc::poll(&mut p, 1, 0) };
    if rc < 0 {
        return -i64::from(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO));
    }
    if rc == 0 {
        return -i64::from(libc::EAGAIN);
    }
    let mut buf = [0u8; 16 * 1024];
    let n = (a.len as usize).min(buf.len());
    // SAFETY: `buf` has room for `n` bytes.
    let got = unsafe { libc::read(0, buf.as_mut_ptr().cast(), n) };
    if got < 0 {
        return -i64::from(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO));
    }
    let got = got as usize;
    if g.mem.write(GuestAddr(a.buf), &buf[..got]).is_err() {
        return EFAULT;
    }
    got as i64
}

fn console_write(mem: &GuestMemory, a: &ConsoleWriteArgs, console: &mut Console<'_>, wrote: &mut bool) -> i64 {
    let out: &mut dyn Write = match a.stream {
        CONSOLE_STDOUT => &mut *console.stdout,
        CONSOLE_STDERR => &mut *console.stderr,
        _ => return EINVAL,
    };
    if !mem.contains(GuestAddr(a.buf), a.len) && a.len != 0 {
        return EFAULT;
    }
    let mut buf = [0u8; 16 * 1024];
    let mut done: u64 = 0;
    while done < a.len {
        let n = (a.len - done).min(buf.len() as u64);
        let chunk = &mut buf[..n as usize];
        // Checked above; checked again here (guest memory cannot shrink, but
        // the accessor is the one place that forms host pointers).
        if mem.read(GuestAddr(a.buf + done), chunk).is_err() {
            return EFAULT;
        }
        if let Err(e) = out.write_all(chunk) {
            return if done > 0 { done as i64 } else { -i64::from(e.raw_os_error().unwrap_or(libc::EIO)) };
        }
        *wrote = true;
        done += n;
    }
    let _ = out.flush();
    i64::try_from(done).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_only_ranges_are_not_writable() {
        let low = GuestMemory::LOW;
        let mut buf = vec![0u8; 0x10000];
        // SAFETY: `buf` backs guest addresses [LOW, LOW + 0x10000) and
        // outlives `mem`; nothing else references it meanwhile.
        let mem = unsafe { GuestMemory::new(buf.as_mut_ptr(), low + 0x10000) };
        let ro = ReadOnly(vec![(low, low + 0x1000), (low + 0x4000, low + 0x6000)]);
        assert!(!ro.writable(&mem, low, 8));
        assert!(!ro.writable(&mem, low + 0xff8, 0x10), "straddles the end of a read-only range");
        assert!(ro.writable(&mem, low + 0x1000, 0x20));
        assert!(!ro.writable(&mem, low + 0x3ff0, 0x20), "straddles the start of one");
        assert!(ro.writable(&mem, low + 0x6000, 0x20));
        assert!(!ro.writable(&mem, low + 0xfff0, 0x20), "beyond guest memory");
        assert!(!ro.writable(&mem, u64::MAX - 8, 0x20), "overflow");
        assert!(!ro.writable(&mem, 0, 8), "tender-private memory");
    }

    #[test]
    fn only_the_stub_at_cpl0_reports_faults() {
        assert!(Origin { cpl: 0, rip: x86::STUB_ADDR + 0x218 }.is_stub());
        assert!(!Origin { cpl: 3, rip: x86::STUB_ADDR + 0x218 }.is_stub());
        assert!(!Origin { cpl: 3, rip: 0x101000 }.is_stub());
        assert!(!Origin { cpl: 0, rip: 0x101000 }.is_stub());
    }
}
