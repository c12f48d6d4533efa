//! The hypercall entry the guest calls (`BootInfo::hypercall_entry`) and
//! the handlers behind it.
//!
//! The guest calls [`entry`] as `extern "C" fn(nr: u64, arg: u64)` on its
//! own stack with its own FS base (its libc's thread pointer). The naked
//! trampoline switches to a tender-owned stack and first offers the call
//! to [`fast`], which answers the hypercalls of a busy server (`Net`,
//! `NetPoll`) with the guest's FS base still loaded: their handlers use no
//! thread-local storage (raw `syscall` instructions, no libc, no
//! allocation, no formatting), and a `wrfsbase` costs about 0.1 µs on the
//! virtualised hosts measured (two per hypercall, three
//! hypercalls per Redis request). Everything else, and a fast call whose
//! argument is bad (its message needs libc), goes to [`handle`]: the
//! trampoline saves the guest FS base, loads the tender's (so the Rust and
//! libc code of the handler find their thread-local storage: `errno`),
//! calls it, and undoes both. Signal handlers never depend on which FS
//! base is loaded (`crate::signals`, `crate::preempt`). Checked in the
//! disassembly (2026-11-26, the musl and glibc builds): apart from the
//! panic machinery, which only a bug could reach and which ends the
//! instance either way, nothing reachable from [`fast`] addresses memory
//! through `%fs`; its one library call is `memcpy`, through a GOT entry
//! filled at load time (the tender is linked `-z now`: no lazy binding).
//!
//! Every argument is hostile: the argument structure must lie entirely in
//! guest memory, and for hypercalls that write results back, in memory the
//! guest can write (not code, read-only data, the archive or the boot-info
//! page). A violation stops the instance with status
//! [`crate::EXIT_STOPPED`] and a `shoal: the guest made an invalid hypercall`
//! message. Buffers named inside an argument structure are checked too, but
//! a bad one only fails that call (`-EFAULT`).
//!
//! The handlers do not allocate (malloc may call `mmap`, which the filter
//! forbids) and make only the system calls in `crate::filter`.

use crate::EXIT_STOPPED;
use core::fmt::Write;
use core::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering};
use shoal_abi::{
    ConsoleReadArgs, ConsoleWriteArgs, FaultArgs, HaltArgs, Hypercall, NetArgs, NetPollArgs, PollArgs, ProtectArgs, BOOT_INFO_ADDR, CONSOLE_STDERR,
    CONSOLE_STDOUT,
};
use shoal_loader::{GuestAddr, GuestMemory, Pod};

static TENDER_FS: AtomicU64 = AtomicU64::new(0);
static STACK_TOP: AtomicU64 = AtomicU64::new(0);
static MEM_SIZE: AtomicU64 = AtomicU64::new(0);

/// Most read-only guest ranges the handlers know about.
pub const MAX_RO: usize = 64;
static RO: [[AtomicU64; 2]; MAX_RO] = [const { [AtomicU64::new(0), AtomicU64::new(0)] }; MAX_RO];
static RO_COUNT: AtomicUsize = AtomicUsize::new(0);

/// Sets up the handlers' state (in the child, before entering the guest):
/// the tender's FS base, the top of the handler stack (16-byte aligned),
/// the guest memory size and the guest ranges that are mapped read-only.
pub fn install(tender_fs: u64, stack_top: u64, mem_size: u64, read_only: &[(u64, u64)]) {
    TENDER_FS.store(tender_fs, Ordering::Relaxed);
    STACK_TOP.store(stack_top & !15, Ordering::Relaxed);
    MEM_SIZE.store(mem_size, Ordering::Relaxed);
    let n = read_only.len().min(MAX_RO);
    for (slot, &(start, end)) in RO.iter().zip(read_only) {
        slot[0].store(start, Ordering::Relaxed);
        slot[1].store(end, Ordering::Relaxed);
    }
    RO_COUNT.store(n, Ordering::Relaxed);
}

/// The hypercall entry: the address the guest finds in
/// `BootInfo::hypercall_entry`.
///
/// # Safety
/// Only the guest calls this, from the child after [`install`].
#[unsafe(naked)]
pub unsafe extern "C" fn entry(nr: u64, arg: u64) {
    core::arch::naked_asm!(
        "push rbx",
        "push rbp",
        "mov rbp, rsp",
        "mov rsp, qword ptr [rip + {stack}]",
        // Kept for `handle` (the stack stays 16-byte aligned: two pushes).
        "push rdi",
        "push rsi",
        "call {fast}",
        "test al, al",
        "jnz 2f",
        "pop rsi",
        "pop rdi",
        "rdfsbase rbx",
        "mov rax, qword ptr [rip + {fs}]",
        "wrfsbase rax",
        "call {handle}",
        "wrfsbase rbx",
        "2:",
        "mov rsp, rbp",
        "pop rbp",
        "pop rbx",
        "ret",
        fs = sym TENDER_FS,
        stack = sym STACK_TOP,
        fast = sym fast,
        handle = sym handle,
    )
}

/// A message built on the stack, truncated if too long.
pub(crate) struct Msg {
    buf: [u8; 512],
    len: usize,
}

impl Msg {
    pub(crate) fn new() -> Msg {
        Msg { buf: [0; 512], len: 0 }
    }

    /// The message so far.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl Write for Msg {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let room = self.buf.len() - self.len;
        let n = s.len().min(room);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

/// Writes `shoal: <message>` and a newline to stderr without allocating.
pub fn say(args: core::fmt::Arguments<'_>) {
    let mut m = Msg::new();
    let _ = m.write_str("shoal: ");
    let _ = m.write_fmt(args);
    if m.len == m.buf.len() {
        m.len -= 1;
    }
    m.buf[m.len] = b'\n';
    let _ = crate::sys::write_all(2, &m.buf[..m.len + 1]);
}

/// Prints the message and stops the instance with `status`.
pub fn stop(status: i32, args: core::fmt::Arguments<'_>) -> ! {
    say(args);
    crate::sys::exit(status)
}

pub(crate) fn guest_mem() -> GuestMemory {
    let base = core::ptr::with_exposed_provenance_mut::<u8>(BOOT_INFO_ADDR as usize);
    // SAFETY: the child mapped [BOOT_INFO_ADDR, MEM_SIZE) at its own address
    // before entering the guest and never unmaps it; the tender holds no
    // references into it.
    unsafe { GuestMemory::new(base, MEM_SIZE.load(Ordering::Relaxed)) }
}

pub(crate) fn writable(addr: u64, len: u64) -> bool {
    if !guest_mem().contains(GuestAddr(addr), len) {
        return false;
    }
    let end = addr + len; // no overflow: checked by `contains`
    let n = RO_COUNT.load(Ordering::Relaxed);
    !RO.iter().take(n).any(|r| {
        let (s, e) = (r[0].load(Ordering::Relaxed), r[1].load(Ordering::Relaxed));
        addr < e && s < end
    })
}

fn name(nr: u64) -> &'static str {
    match Hypercall::from_nr(nr) {
        Some(Hypercall::ConsoleWrite) => "console write",
        Some(Hypercall::Halt) => "halt",
        Some(Hypercall::Poll) => "poll",
        Some(Hypercall::Fault) => "fault",
        Some(Hypercall::Net) => "net",
        Some(Hypercall::NetPoll) => "net poll",
        Some(Hypercall::ConsoleRead) => "console read",
        Some(Hypercall::Protect) => "protect",
        Some(Hypercall::ConsoleBuffer) => "console buffer",
        Some(Hypercall::SignalWord) => "signal word",
        Some(Hypercall::VolumeSave) => "volume save",
        Some(Hypercall::Preempt) => "preempt",
        Some(Hypercall::Alias) => "alias",
        Some(Hypercall::AliasList) => "alias list",
        Some(Hypercall::FaultHandler) => "fault handler",
        Some(Hypercall::Release) => "release",
        Some(Hypercall::ProgramFault) => "program fault",
        Some(Hypercall::HostFs) => "host fs",
        Some(Hypercall::Ready) => "ready",
        None => "unknown",
    }
}

/// Reads the argument structure of hypercall `nr` at `arg`: an [`End`]
/// that stops the instance if it is not (writable, with `write`) guest
/// memory.
fn args<T: Pod>(nr: u64, arg: u64, write: bool) -> Result<T, End> {
    let len = core::mem::size_of::<T>() as u64;
    let ok = if write { writable(arg, len) } else { guest_mem().contains(GuestAddr(arg), len) };
    match guest_mem().read_obj::<T>(GuestAddr(arg)) {
        Ok(v) if ok => Ok(v),
        _ => Err(End::BadArgs { nr, arg, len, write }),
    }
}

/// Why a hypercall ends the instance instead of returning to the guest.
/// [`dispatch`] returns it, so a harness (the fuzz targets) sees the end
/// as a value; [`handle`] carries it out ([`End::finish`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// `Halt` with this exit status.
    Exit(i32),
    /// An argument structure outside (writable, with `write`) guest memory.
    BadArgs {
        /// The hypercall number.
        nr: u64,
        /// Guest address of the argument structure.
        arg: u64,
        /// Its size.
        len: u64,
        /// Whether results are written back into it.
        write: bool,
    },
    /// A `Protect`, `Alias` or `AliasList` that would take write access
    /// from its own argument structure, where the result is written (the
    /// write would fault in the tender).
    ProtectsOwnArgs {
        /// The hypercall number.
        nr: u64,
        /// Guest address of the argument structure.
        arg: u64,
    },
    /// A `Poll` or `NetPoll` that nothing could ever wake.
    BlockedForever,
    /// The guest kernel reported a CPU exception.
    Fault {
        /// The exception vector.
        vector: u64,
        /// Its error code.
        error_code: u64,
        /// Where it happened.
        rip: u64,
        /// The stack pointer then.
        rsp: u64,
        /// The faulting address (page faults).
        cr2: u64,
    },
    /// A hypercall number that does not exist.
    Unknown {
        /// The number.
        nr: u64,
        /// Its argument.
        arg: u64,
    },
}

impl End {
    /// Ends the instance: the halt's status, or a message and
    /// [`EXIT_STOPPED`].
    pub fn finish(self) -> ! {
        match self {
            End::Exit(status) => crate::sys::exit(status),
            End::BadArgs { nr, arg, len, write } => stop(
                EXIT_STOPPED,
                format_args!(
                    "the guest made an invalid hypercall: {} ({nr}) with its {len}-byte argument at {arg:#x}, outside {}",
                    name(nr),
                    if write { "writable guest memory" } else { "guest memory" }
                ),
            ),
            End::ProtectsOwnArgs { nr, arg } => stop(
                EXIT_STOPPED,
                format_args!(
                    "the guest made an invalid hypercall: {} ({nr}) would take write access from its own argument structure at {arg:#x}, where the result is written",
                    name(nr)
                ),
            ),
            End::BlockedForever => stop(EXIT_STOPPED, format_args!("the guest blocked forever with nothing to wake it")),
            End::Fault { vector, error_code, rip, rsp, cr2 } => stop(
                EXIT_STOPPED,
                format_args!(
                    "guest fault: vector {vector} ({}) at rip {rip:#x}, rsp {rsp:#x}, error code {error_code:#x}, address {cr2:#x}",
                    vector_name(vector)
                ),
            ),
            End::Unknown { nr, arg } => stop(EXIT_STOPPED, format_args!("the guest made an invalid hypercall: number {nr} does not exist (argument {arg:#x})")),
        }
    }
}

/// Refuses a protection change of `[addr, addr + len)` to `prot` that
/// would leave the argument structure (a `T` at `arg`) without write
/// access: the tender writes the result there afterwards, and guest
/// addresses are its own, so the write would fault in the tender. (hvt's
/// VMM writes through its own mapping and needs no such rule.)
fn keeps_own_args<T>(nr: u64, arg: u64, addr: u64, len: u64, prot: u64) -> Result<(), End> {
    let size = core::mem::size_of::<T>() as u64;
    // No overflow: `args` checked [arg, arg + size) lies in guest memory.
    let overlaps = addr < arg + size && arg < addr.saturating_add(len);
    if prot & shoal_abi::PROT_WRITE == 0 && overlaps {
        return Err(End::ProtectsOwnArgs { nr, arg });
    }
    Ok(())
}

fn put<T: Pod>(arg: u64, v: &T) {
    // Cannot fail: `args` checked the same range as writable.
    let _ = guest_mem().write_obj(GuestAddr(arg), v);
}

/// The argument structure of a hypercall answered by [`fast`]: `None` when
/// it is not writable guest memory, for [`handle`] to stop the instance
/// with its message.
fn fast_args<T: Pod>(arg: u64) -> Option<T> {
    let len = core::mem::size_of::<T>() as u64;
    if !writable(arg, len) {
        return None;
    }
    guest_mem().read_obj::<T>(GuestAddr(arg)).ok()
}

/// The hypercalls answered with the guest's FS base loaded, called by
/// [`entry`] on the tender's stack: `Net` and `NetPoll`, whose handlers
/// (`crate::net`) make raw system calls only and touch no thread-local
/// storage. Returns whether it answered; `false` (another hypercall, a bad
/// argument structure, a `NetPoll` that would sleep forever) sends the
/// call to [`handle`], having changed nothing.
pub extern "C" fn fast(nr: u64, arg: u64) -> bool {
    match Hypercall::from_nr(nr) {
        Some(Hypercall::Net) => {
            let Some(mut a) = fast_args::<NetArgs>(arg) else { return false };
            a.ret = crate::net::batch(&a);
            put(arg, &a);
            true
        }
        Some(Hypercall::NetPoll) => {
            let Some(mut a) = fast_args::<NetPollArgs>(arg) else { return false };
            if crate::template::at_ready_point(a.timeout_ns) {
                return false;
            }
            match crate::net::poll(&mut a) {
                Ok(r) => {
                    a.ret = r;
                    put(arg, &a);
                    true
                }
                Err(()) => false,
            }
        }
        _ => false,
    }
}

/// The hypercall dispatcher, called by [`entry`] on the tender's stack with
/// the tender's FS base: [`dispatch`], and the instance ended if the call
/// ends it.
pub extern "C" fn handle(nr: u64, arg: u64) {
    if let Err(end) = dispatch(nr, arg) {
        end.finish()
    }
}

/// Carries out hypercall `nr` with its argument structure at `arg`:
/// `Ok` to resume the guest, or why the instance ends. Guest memory and
/// the handlers' state are those [`install`] (and the other modules'
/// `install`) set.
pub fn dispatch(nr: u64, arg: u64) -> Result<(), End> {
    match Hypercall::from_nr(nr) {
        Some(Hypercall::ConsoleWrite) => {
            let mut a: ConsoleWriteArgs = args(nr, arg, true)?;
            a.ret = console_write(&a);
            put(arg, &a);
        }
        Some(Hypercall::Halt) => {
            let a: HaltArgs = args(nr, arg, false)?;
            return Err(End::Exit((a.status & 0xff) as i32));
        }
        Some(Hypercall::Poll) => {
            let mut a: PollArgs = args(nr, arg, true)?;
            a.ready_set = 0;
            a.ret = 0;
            if a.wait_set != 0 {
                // No devices yet: nothing can be waited for.
                a.ret = -i64::from(libc::EINVAL);
            } else if a.timeout_ns == u64::MAX {
                return Err(End::BlockedForever);
            } else if !crate::signals::forward_waiting() {
                // (A forwarded signal already in the guest's word would
                // not end this sleep: the guest looks at it first.)
                crate::sys::sleep_ns(a.timeout_ns);
            }
            put(arg, &a);
        }
        Some(Hypercall::Net) => {
            let mut a: NetArgs = args(nr, arg, true)?;
            a.ret = crate::net::batch(&a);
            put(arg, &a);
        }
        Some(Hypercall::NetPoll) => {
            let mut a: NetPollArgs = args(nr, arg, true)?;
            if crate::template::at_ready_point(a.timeout_ns) {
                // A template stays here; a copy goes on with this wait,
                // on its own sockets.
                crate::template::serve();
            }
            a.ret = match crate::net::poll(&mut a) {
                Ok(r) => r,
                Err(()) => return Err(End::BlockedForever),
            };
            put(arg, &a);
        }
        Some(Hypercall::ConsoleRead) => {
            let mut a: ConsoleReadArgs = args(nr, arg, true)?;
            a.ret = console_read(&a);
            put(arg, &a);
        }
        Some(Hypercall::Protect) => {
            let mut a: ProtectArgs = args(nr, arg, true)?;
            keeps_own_args::<ProtectArgs>(nr, arg, a.addr, a.len, a.prot)?;
            a.ret = crate::protect::protect(&a);
            put(arg, &a);
        }
        Some(Hypercall::Alias) => {
            let mut a: shoal_abi::AliasArgs = args(nr, arg, true)?;
            keeps_own_args::<shoal_abi::AliasArgs>(nr, arg, a.dst, a.len, a.prot)?;
            a.ret = crate::protect::alias(&a);
            put(arg, &a);
        }
        Some(Hypercall::AliasList) => {
            let mut a: shoal_abi::AliasListArgs = args(nr, arg, true)?;
            let size = core::mem::size_of::<shoal_abi::AliasPair>() as u64;
            // Pairs beyond the limit or outside guest memory are refused by
            // the handler before any is mapped.
            for i in 0..a.count.min(shoal_abi::ALIAS_LIST_MAX) {
                if let Ok(p) = guest_mem().read_obj::<shoal_abi::AliasPair>(GuestAddr(a.pairs.wrapping_add(i * size))) {
                    keeps_own_args::<shoal_abi::AliasListArgs>(nr, arg, p.dst, shoal_abi::PAGE_SIZE, a.prot)?;
                }
            }
            a.ret = crate::protect::alias_list(&a);
            put(arg, &a);
        }
        Some(Hypercall::Release) => {
            let mut a: shoal_abi::ReleaseArgs = args(nr, arg, true)?;
            a.ret = crate::protect::release(&a);
            put(arg, &a);
        }
        // Console writes are plain function calls here, as cheap as the
        // host write they make: the guest need not buffer (and its output
        // is then never held back from a crash report).
        Some(Hypercall::ConsoleBuffer) => {
            let mut a: shoal_abi::ConsoleBufferArgs = args(nr, arg, true)?;
            a.ret = -i64::from(libc::ENOSYS);
            put(arg, &a);
        }
        Some(Hypercall::SignalWord) => {
            let mut a: shoal_abi::SignalWordArgs = args(nr, arg, true)?;
            a.ret = if !a.addr.is_multiple_of(8) {
                -i64::from(libc::EINVAL)
            } else if !writable(a.addr, 8) {
                -i64::from(libc::EFAULT)
            } else {
                crate::signals::register_signal_word(a.addr);
                0
            };
            put(arg, &a);
        }
        Some(Hypercall::FaultHandler) => {
            let mut a: shoal_abi::FaultHandlerArgs = args(nr, arg, true)?;
            let mem = guest_mem();
            a.ret = if !a.armed.is_multiple_of(8) {
                -i64::from(libc::EINVAL)
            } else if !writable(a.armed, 8) || !mem.contains(GuestAddr(a.entry), 1) {
                -i64::from(libc::EFAULT)
            } else {
                crate::signals::register_fault_handler(a.entry, a.armed, GuestMemory::LOW, mem.size());
                0
            };
            put(arg, &a);
        }
        Some(Hypercall::ProgramFault) => {
            let mut a: shoal_abi::ProgramFaultArgs = args(nr, arg, true)?;
            let size = core::mem::size_of::<shoal_abi::ProgramFaultArea>() as u64;
            a.ret = if a.entry == 0 {
                crate::signals::register_program_fault(0, 0);
                0
            } else if !a.area.is_multiple_of(8) {
                -i64::from(libc::EINVAL)
            } else if !writable(a.area, size) || !guest_mem().contains(GuestAddr(a.entry), 1) {
                -i64::from(libc::EFAULT)
            } else {
                crate::signals::register_program_fault(a.entry, a.area);
                0
            };
            put(arg, &a);
        }
        Some(Hypercall::Preempt) => {
            let mut a: shoal_abi::PreemptArgs = args(nr, arg, true)?;
            a.ret = match a.op {
                shoal_abi::PREEMPT_REGISTER => crate::preempt::register(a.area, a.entry, writable),
                shoal_abi::PREEMPT_ARM => crate::preempt::arm(a.tick_ns),
                shoal_abi::PREEMPT_WATCH => crate::preempt::watch(),
                shoal_abi::PREEMPT_WAKE => crate::preempt::wake(a.tick_ns),
                _ => -i64::from(libc::EINVAL),
            };
            put(arg, &a);
        }
        Some(Hypercall::VolumeSave) => {
            let mut a: shoal_abi::VolumeSaveArgs = args(nr, arg, true)?;
            a.ret = volume_save(&a);
            put(arg, &a);
        }
        Some(Hypercall::HostFs) => {
            let mut a: shoal_abi::HostFsArgs = args(nr, arg, true)?;
            a.ret = match MOUNTS.get() {
                Some(m) if matches!(a.op, shoal_abi::HOSTFS_MAP | shoal_abi::HOSTFS_MAP_EXEC | shoal_abi::HOSTFS_UNMAP) => {
                    shoal_hostcall::hostfs::serve_map(m, &a, &guest_mem(), &crate::protect::FileMapper)
                }
                Some(m) => shoal_hostcall::hostfs::serve(m, &a, &guest_mem(), &writable),
                None => -i64::from(libc::ENOSYS),
            };
            put(arg, &a);
        }
        Some(Hypercall::Ready) => {
            let mut a: shoal_abi::ReadyArgs = args(nr, arg, true)?;
            if crate::template::at_explicit_ready_point() {
                // As at the listening ready point: a template stays here,
                // a copy goes on from this write.
                crate::template::serve();
            }
            a.ret = 0;
            put(arg, &a);
        }
        Some(Hypercall::Fault) => {
            let a: FaultArgs = args(nr, arg, false)?;
            return Err(End::Fault { vector: a.vector, error_code: a.error_code, rip: a.rip, rsp: a.rsp, cr2: a.cr2 });
        }
        None => return Err(End::Unknown { nr, arg }),
    }
    Ok(())
}

/// The read-only host directories (`--mount`), set once before the guest
/// runs.
static MOUNTS: std::sync::OnceLock<shoal_hostcall::hostfs::Mounts> = std::sync::OnceLock::new();

/// Sets the mounts (in the child, before entering the guest; the first
/// call wins).
pub fn install_mounts(m: shoal_hostcall::hostfs::Mounts) {
    let _ = MOUNTS.set(m);
}

/// The volume area shared with the waiting parent (a mapping of the
/// report memfd after its first page): its address and how many archive
/// bytes it holds (`crate::VOLUME_HEADER` bytes of length, then the data).
static VOLUME_AREA: AtomicU64 = AtomicU64::new(0);
static VOLUME_MAX: AtomicU64 = AtomicU64::new(0);

/// Sets the volume area (in the child, before entering the guest).
pub fn install_volume(area: *mut u8, max: u64) {
    VOLUME_AREA.store(area as u64, Ordering::Relaxed);
    VOLUME_MAX.store(max, Ordering::Relaxed);
}

/// Copies the guest's volume archive into the shared area, where the
/// parent reads it once the instance has exited. The parent validates it:
/// here only the range is checked.
fn volume_save(a: &shoal_abi::VolumeSaveArgs) -> i64 {
    let (area, max) = (VOLUME_AREA.load(Ordering::Relaxed), VOLUME_MAX.load(Ordering::Relaxed));
    if area == 0 {
        return -i64::from(libc::ENOSYS);
    }
    if a.len > max {
        return -i64::from(libc::EFBIG);
    }
    let Ok(src) = guest_mem().host_ptr(GuestAddr(a.addr), a.len) else {
        return -i64::from(libc::EFAULT);
    };
    let area = area as *mut u8;
    // SAFETY: the area is a shared mapping of VOLUME_HEADER + max bytes
    // (`install_volume`), len <= max, and [src, src + len) lies in guest
    // memory, all of which is mapped at least readable; the two never
    // overlap (the area is a tender mapping outside guest memory).
    unsafe {
        core::ptr::copy_nonoverlapping(src, area.add(crate::VOLUME_HEADER), a.len as usize);
        core::ptr::write_volatile(area.cast::<u64>(), a.len);
    }
    0
}

/// The host descriptors of the guest's stdout and stderr: 1 and 2, except
/// in a harness that must keep its own (the fuzz targets,
/// [`set_console_fds`]).
static CONSOLE_FDS: [AtomicI32; 2] = [AtomicI32::new(1), AtomicI32::new(2)];

/// Sends the guest's stdout and stderr to the host descriptors `out` and
/// `err` instead of 1 and 2.
#[cfg(feature = "fuzz")]
pub fn set_console_fds(out: i32, err: i32) {
    CONSOLE_FDS[0].store(out, Ordering::Relaxed);
    CONSOLE_FDS[1].store(err, Ordering::Relaxed);
}

fn console_write(a: &ConsoleWriteArgs) -> i64 {
    let fd = match a.stream {
        CONSOLE_STDOUT => CONSOLE_FDS[0].load(Ordering::Relaxed),
        CONSOLE_STDERR => CONSOLE_FDS[1].load(Ordering::Relaxed),
        _ => return -i64::from(libc::EINVAL),
    };
    let Ok(ptr) = guest_mem().host_ptr(GuestAddr(a.buf), a.len) else {
        return -i64::from(libc::EFAULT);
    };
    let mut done: u64 = 0;
    while done < a.len {
        let chunk = (a.len - done).min(1 << 30) as usize;
        // SAFETY: [ptr, ptr + len) was checked to lie in guest memory, all of
        // which is mapped at least readable.
        match unsafe { crate::sys::write_raw(fd, ptr.wrapping_add(done as usize), chunk) } {
            Ok(0) => break,
            Ok(n) => done += n as u64,
            Err(libc::EINTR) => {}
            Err(e) if done == 0 => return -i64::from(e),
            Err(_) => break,
        }
    }
    done as i64
}

/// Reads the instance's stdin (descriptor 0) without blocking: the host
/// descriptor may be a blocking pipe or terminal shared with the caller,
/// so its flags are left alone and a zero-timeout `ppoll` decides whether
/// the `read` would return at once.
fn console_read(a: &ConsoleReadArgs) -> i64 {
    if !writable(a.buf, a.len) {
        return -i64::from(libc::EFAULT);
    }
    let Ok(ptr) = guest_mem().host_ptr(GuestAddr(a.buf), a.len) else {
        return -i64::from(libc::EFAULT);
    };
    let mut p = libc::pollfd { fd: 0, events: libc::POLLIN, revents: 0 };
    let zero = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: one valid pollfd, a valid timespec, no signal mask.
    let rc = unsafe {
        libc::syscall(libc::SYS_ppoll, &mut p as *mut libc::pollfd, 1usize, &zero as *const libc::timespec, core::ptr::null::<libc::sigset_t>(), 8usize)
    };
    if rc < 0 {
        return -i64::from(crate::sys::errno());
    }
    if rc == 0 {
        return -i64::from(libc::EAGAIN);
    }
    let len = a.len.min(1 << 30) as usize;
    // SAFETY: [ptr, ptr + len) lies in writable guest memory (checked
    // above); the read writes at most `len` bytes there.
    let n = unsafe { libc::read(0, ptr.cast(), len) };
    if n < 0 {
        -i64::from(crate::sys::errno())
    } else {
        n as i64
    }
}

fn vector_name(v: u64) -> &'static str {
    match v {
        0 => "#DE divide error",
        1 => "#DB debug",
        3 => "#BP breakpoint",
        4 => "#OF overflow",
        5 => "#BR bound range",
        6 => "#UD invalid opcode",
        7 => "#NM device not available",
        8 => "#DF double fault",
        10 => "#TS invalid TSS",
        11 => "#NP segment not present",
        12 => "#SS stack fault",
        13 => "#GP general protection",
        14 => "#PF page fault",
        16 => "#MF x87 error",
        17 => "#AC alignment check",
        18 => "#MC machine check",
        19 => "#XM SIMD error",
        _ => "unknown exception",
    }
}
