//! The hypercall ABI between a shoal image (its kernel) and a tender.
//!
//! This crate is the one place where the two sides of the trust boundary
//! agree on bytes (docs/design.md "Tenders and hypercalls"), in the spirit of Solo5's `hvt_abi.h`: it holds
//! only `#[repr(C)]` structures and constants, has no dependencies, and is
//! `no_std` so the guest kernel and the host tenders both build it.
//!
//! # The guest address space
//!
//! Guest memory is one region `[0, mem_size)`. On `spt` guest addresses are
//! host virtual addresses (the region is mapped at its own address in the
//! tender process); on `hvt` they are guest-physical addresses, identity
//! mapped. The layout is:
//!
//! | range | what |
//! |---|---|
//! | `[0, TENDER_PRIVATE_END)` | tender-private (hvt page tables, GDT, IDT, TSS); unmapped on spt |
//! | `BOOT_INFO_ADDR` | one page: [`BootInfo`], then the program headers of the image |
//! | `[ARGS_ADDR, IMAGE_BASE)` | argv and environment strings, when they and the initial stack frame do not fit the stack's top page (else they lie there, above the frame, as on Linux; the kernel only follows the pointers, so either place works with every kernel) |
//! | `[IMAGE_BASE, image_end)` | the image, at its link addresses |
//! | `[fs_archive_addr, +size)` | the read-only root file-system archive, if any |
//! | `[heap_start, heap_end)` | free memory the kernel manages (brk, mmap, kernel heap) |
//! | `[stack_base, mem_size)` | the main thread's stack; the tender writes argc/argv/envp/auxv at its top |
//!
//! # Entering the guest
//!
//! The tender jumps to the image's ELF entry point (the kernel's
//! `_shoal_start`) with `rdi` = [`BOOT_INFO_ADDR`] and `rsp` pointing at
//! `argc` of a Linux-style initial process stack, exactly as Linux enters a
//! static executable; the kernel initialises itself and then enters libc's
//! `_start` with that stack.
//!
//! # Hypercalls
//!
//! A hypercall is a number ([`Hypercall`]) and the guest address of its
//! argument structure. On `spt` the kernel calls the function at
//! [`BootInfo::hypercall_entry`] as `extern "C" fn(nr: u64, arg: u64)`; on
//! `hvt` it writes the argument address (32 bits) to port
//! [`HYPERCALL_PORT_BASE`]` + nr`. Results are written back into the argument
//! structure. Tenders treat every field as hostile.
#![no_std]
#![deny(missing_docs)]

pub mod linux;

/// The version of this ABI. Bumped on every incompatible change; the tender
/// refuses an image whose [`AbiNote`] carries another version, and the kernel
/// halts if [`BootInfo::abi_version`] differs from its own.
pub const ABI_VERSION: u32 = 20;

/// Size of a page of guest memory.
pub const PAGE_SIZE: u64 = 4096;

/// End of the tender-private low memory (hvt page tables, descriptor tables).
pub const TENDER_PRIVATE_END: u64 = 0x10000;
/// Guest address of the [`BootInfo`] page.
pub const BOOT_INFO_ADDR: u64 = 0x10000;
/// Offset, within the boot-info page, of the copy of the image's program
/// headers (what `AT_PHDR` points at; libc finds `PT_TLS` through it).
pub const PHDR_OFFSET: u64 = 0x800;
/// Guest address where the argv and environment strings start.
pub const ARGS_ADDR: u64 = 0x11000;
/// Guest address where every image is linked (its lowest loadable address).
pub const IMAGE_BASE: u64 = 0x100000;
/// Address space an instance of a Linux executable gets beyond its
/// `--mem`: runtimes reserve far more address space than they use (the Go
/// runtime about 1.2 GiB of `PROT_NONE` at start). The kernel limits
/// writable memory to guest memory minus this, so a reservation costs
/// nothing until it is made writable.
pub const EXEC_ADDRESS_RESERVE: u64 = 2 << 30;
/// Room for argv and environment strings.
pub const ARGS_MAX: u64 = IMAGE_BASE - ARGS_ADDR;

// The boot-info page and the argument area must not overlap.
const _: () = assert!(ARGS_ADDR >= BOOT_INFO_ADDR + PAGE_SIZE);

/// First I/O port of the hvt hypercall ports (`port = base + nr`).
pub const HYPERCALL_PORT_BASE: u16 = 0x500;

/// [`BootInfo::magic`]: "SHOALBI1" in little-endian bytes.
pub const BOOT_INFO_MAGIC: u64 = u64::from_le_bytes(*b"SHOALBI1");

/// Name of the ELF section that carries the image's [`AbiNote`].
pub const ABI_NOTE_SECTION: &str = ".note.shoal";
/// [`AbiNote::magic`]: "SHOALABI" in little-endian bytes.
pub const ABI_NOTE_MAGIC: u64 = u64::from_le_bytes(*b"SHOALABI");

/// Stamped into every image by the kernel so that a tender can check, before
/// running anything, which ABI the image was built for.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AbiNote {
    /// Always [`ABI_NOTE_MAGIC`].
    pub magic: u64,
    /// The [`ABI_VERSION`] the image's kernel was built with.
    pub abi_version: u32,
    /// Reserved, zero.
    pub reserved: u32,
}

impl AbiNote {
    /// The note for the current ABI.
    pub const CURRENT: AbiNote = AbiNote { magic: ABI_NOTE_MAGIC, abi_version: ABI_VERSION, reserved: 0 };

    /// Parses a note from the raw bytes of its section, if they hold one.
    pub fn from_bytes(bytes: &[u8]) -> Option<AbiNote> {
        if bytes.len() < 16 {
            return None;
        }
        let mut magic = [0u8; 8];
        magic.copy_from_slice(&bytes[0..8]);
        let mut version = [0u8; 4];
        version.copy_from_slice(&bytes[8..12]);
        let mut reserved = [0u8; 4];
        reserved.copy_from_slice(&bytes[12..16]);
        Some(AbiNote { magic: u64::from_le_bytes(magic), abi_version: u32::from_le_bytes(version), reserved: u32::from_le_bytes(reserved) })
    }
}

/// Which tender runs the guest ([`BootInfo::tender`]).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TenderKind {
    /// The seccomp-sandboxed process tender.
    Spt = 1,
    /// The KVM tender.
    Hvt = 2,
}

/// What the tender tells the kernel at boot. Written by the tender at
/// [`BOOT_INFO_ADDR`] before the first guest instruction; read-only for the
/// kernel by convention (it copies what it needs).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct BootInfo {
    /// Always [`BOOT_INFO_MAGIC`].
    pub magic: u64,
    /// The tender's [`ABI_VERSION`].
    pub abi_version: u32,
    /// A [`TenderKind`] value.
    pub tender: u32,
    /// Size of guest memory: guest addresses are `[0, mem_size)`.
    pub mem_size: u64,
    /// First address of the image (page aligned, normally [`IMAGE_BASE`]).
    pub image_start: u64,
    /// End of the image's highest segment, rounded up to a page.
    pub image_end: u64,
    /// Free memory for the kernel: start (page aligned).
    pub heap_start: u64,
    /// Free memory for the kernel: end (page aligned, exclusive).
    pub heap_end: u64,
    /// Lowest address of the main thread's stack (page aligned).
    pub stack_base: u64,
    /// One past the highest address of the main thread's stack.
    pub stack_top: u64,
    /// spt: address of the tender's hypercall function
    /// (`extern "C" fn(nr: u64, arg: u64)`); hvt: 0, use port I/O.
    pub hypercall_entry: u64,
    /// Guest address of the read-only root file-system archive, or 0.
    pub fs_archive_addr: u64,
    /// Size in bytes of the root file-system archive.
    pub fs_archive_size: u64,
    /// TSC frequency in Hz, measured by the tender.
    pub tsc_hz: u64,
    /// TSC value read by the tender at `realtime_ns_at_boot`.
    pub tsc_at_boot: u64,
    /// CLOCK_REALTIME in nanoseconds since the epoch, read with `tsc_at_boot`.
    pub realtime_ns_at_boot: u64,
    /// Guest address of the program headers copy (what `AT_PHDR` holds).
    pub phdr_addr: u64,
    /// Number of program headers.
    pub phnum: u64,
    /// Random bytes from the host, to seed the kernel's `getrandom`.
    pub random_seed: [u8; 32],
    /// Host name the instance reports from `uname` (NUL padded).
    pub hostname: [u8; 64],
    /// Network flags ([`NET_OUTBOUND`]).
    pub net_flags: u64,
    /// How many entries of [`BootInfo::listeners`] are used.
    pub listener_count: u64,
    /// Listening sockets the tender opened and bound before boot
    /// (`--publish`, `--listen-fd`); a guest `bind` + `listen` on the
    /// matching port is attached to one of them.
    pub listeners: [Listener; MAX_LISTENERS],
    /// Console flags ([`CONSOLE_STDIN_TTY`], [`CONSOLE_STDOUT_TTY`],
    /// [`CONSOLE_STDOUT_LINES`]).
    pub console_flags: u64,
    /// The guest directory of a volume (`--volume HOSTDIR:GUESTDIR`):
    /// absolute, NUL padded; empty (all zero) without a volume. When the
    /// instance ends (exit or death by a signal, not a CPU fault) the
    /// kernel packs the tree there into an archive and hands it over with
    /// [`Hypercall::VolumeSave`].
    pub volume_path: [u8; VOLUME_PATH_MAX],
    /// Largest archive the tender takes from [`Hypercall::VolumeSave`].
    pub volume_max: u64,
    /// A fault to inject into a kernel component (`shoal run --inject`),
    /// for tests and benchmarks of recovery; all zero: none.
    pub inject: Inject,
    /// `shoal run --rejuvenate-every`: reboot the rebootable kernel
    /// components one by one, one every this many nanoseconds (software
    /// rejuvenation); 0: never.
    pub rejuvenate_ns: u64,
    /// The hang watchdog's limit (`shoal run --watchdog MS`, ABI 13): a
    /// gated call into a rebootable kernel component that runs longer than
    /// this many nanoseconds is stopped and the component rebooted; 0: no
    /// watchdog. The tender enforces it (with the preemption tick, see
    /// [`PreemptArea::watch`]); the kernel only arms it and names it.
    pub watchdog_ns: u64,
    /// Recovery flags ([`RECOVER_OFF`], [`RECOVER_STATEFUL`]; ABI 13).
    pub recover_flags: u64,
    /// The program's working directory at start (`--cwd`, ABI 18), an
    /// absolute path, NUL padded; all zero: `/`.
    pub cwd: [u8; CWD_MAX],
    /// The user and group ids the program sees (`--user UID:GID`, ABI 18):
    /// what `getuid`, `getgid` and their kin answer. The host identity of
    /// the instance is not changed by them.
    pub uid: u32,
    /// See [`BootInfo::uid`].
    pub gid: u32,
    /// The program's seccomp profile as the kernel applies it (ABI 20):
    /// entry `n` is the errno system call `n` is refused with before it
    /// runs (a container's `linux.seccomp`, `--seccomp-deny`); 0: it runs.
    /// All zero: nothing refused, and `/proc/self/status` says `Seccomp:
    /// 0`.
    pub syscall_errno: [u8; SECCOMP_CALLS],
}

/// Entries of [`BootInfo::syscall_errno`]: every x86-64 system-call number
/// (a higher one is `ENOSYS` anyway).
pub const SECCOMP_CALLS: usize = 512;

/// Longest [`BootInfo::cwd`] (its last byte stays NUL).
pub const CWD_MAX: usize = 256;

/// [`BootInfo::recover_flags`]: no component gates (`shoal run
/// --no-recover`): system calls go straight to their component, nothing
/// is counted, snapshotted or rebooted, and a component's failure ends the
/// instance as a kernel panic does. What `shoal bench recover` compares
/// the gates against.
pub const RECOVER_OFF: u64 = 1;

/// [`BootInfo::recover_flags`]: the stateful components (`vfs`, `ramfs`,
/// `process`) are rebootable too (`shoal run --recover-stateful`, implied
/// by an `--inject` into one of them and by `--rejuvenate-every`): calls
/// into them are logged and every gate is armed, which costs about 1.25×
/// CPU on a program that makes many file-system calls (`shoal bench
/// recover`), so it is not the default. Without it only the stateless
/// components (`time`, `sysinfo`, `user`) are rebooted.
pub const RECOVER_STATEFUL: u64 = 2;

/// [`BootInfo::recover_flags`] (ABI 14): when the instance ends, the kernel
/// prints the size of the stateful components' call log on stderr
/// (`shoal: recovery log at exit: …`; `shoal run --log-report`, used by
/// `shoal bench recover` for the log memory of each workload).
pub const RECOVER_LOG_REPORT: u64 = 4;

/// [`BootInfo::recover_flags`], bits 32–63 (ABI 14): the threshold of vfs's
/// call log for shrinking closed sessions (`shoal run --log-shrink N`,
/// VampOS's Table IV): the records of closed descriptors are kept until N
/// of them are pending, then dropped together. 0: not given, which means 1
/// (dropped at close, the default); [`LOG_SHRINK_NEVER`]: never dropped.
pub const RECOVER_LOG_SHRINK_SHIFT: u32 = 32;

/// The [`RECOVER_LOG_SHRINK_SHIFT`] value for "never shrink".
pub const LOG_SHRINK_NEVER: u32 = u32::MAX;

/// The watchdog limit unless told otherwise: 1 s.
pub const DEFAULT_WATCHDOG_NS: u64 = 1_000_000_000;

/// What the tender passes as the first argument (`rdi`, where a CPU fault
/// passes its signal number) when it sends the guest to the kernel's fault
/// entry ([`Hypercall::FaultHandler`]) because a gated call outran the
/// watchdog: not a signal number.
pub const FAULT_HANG: u64 = 0x100;

/// The kernel components, in the order of their numbers (index + 1) in
/// [`Inject::component`] and in the kernel's recovery records (docs/design.md "Components and recovery").
pub const COMPONENTS: [&str; 11] = ["plat", "mm", "sched", "vfs", "ramfs", "time", "process", "sysinfo", "user", "net", "syscall"];

/// A fault the kernel injects into one of its components at the
/// [`Inject::at`]-th call into it through the system-call table
/// (`shoal run --inject COMPONENT:KIND@N`; ABI 11). The kernel treats the
/// values as untrusted: an unknown component or kind injects nothing.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Inject {
    /// 1 + the index of the component in [`COMPONENTS`]; 0: no injection.
    pub component: u32,
    /// What to inject ([`INJECT_PANIC`], [`INJECT_WILD_WRITE`]).
    pub kind: u32,
    /// At which call into the component, counting from 1.
    pub at: u64,
}

/// [`Inject::kind`]: the component panics (a Rust `panic!`) inside the
/// call.
pub const INJECT_PANIC: u32 = 1;
/// [`Inject::kind`]: the component writes to an address outside guest
/// memory inside the call (a CPU fault: SIGSEGV on spt, a page fault on
/// hvt).
pub const INJECT_WILD_WRITE: u32 = 2;
/// [`Inject::kind`]: the component spins forever inside the call (a hang,
/// for the watchdog; ABI 13).
pub const INJECT_HANG: u32 = 3;

/// Room for [`BootInfo::volume_path`] (a longer guest path is refused by
/// the tender).
pub const VOLUME_PATH_MAX: usize = 256;

/// Arguments of [`Hypercall::VolumeSave`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct VolumeSaveArgs {
    /// Guest address of the archive (the `shoal-archive` format; paths
    /// relative to the volume's guest directory).
    pub addr: u64,
    /// Its length in bytes (at most [`BootInfo::volume_max`]).
    pub len: u64,
    /// Out: 0, or a negative Linux errno (`EFBIG`: too large, `ENOSYS`: no
    /// volume, `EFAULT`: outside guest memory).
    pub ret: i64,
}

/// [`BootInfo::console_flags`]: the tender's standard input is a terminal
/// (the guest's descriptor 0 then answers `isatty` and termios ioctls).
pub const CONSOLE_STDIN_TTY: u64 = 1;
/// [`BootInfo::console_flags`]: the tender's standard output is a terminal
/// (a buffering guest flushes its stdout at every newline, as stdio does).
pub const CONSOLE_STDOUT_TTY: u64 = 2;
/// [`BootInfo::console_flags`]: the tender's standard output is something
/// a reader may be waiting on as it comes — a terminal, a pipe, a socket
/// (anything but a regular file). On a terminal ([`CONSOLE_STDOUT_TTY`])
/// a buffering guest writes every line out at once, as stdio does;
/// otherwise it writes a line out within about 10 ms (at a newline when the last write-out is
/// older; otherwise at a tick it asks for with [`PREEMPT_WAKE`]), so a
/// program that prints "ready" and then computes does not keep its reader
/// waiting, and a stream of short lines costs a few exits per 10 ms, not
/// one per line. Output into a file is held until the buffer fills or the
/// guest makes another hypercall.
pub const CONSOLE_STDOUT_LINES: u64 = 4;

/// [`BootInfo::net_flags`]: the guest may open sockets of its own and
/// connect out (`--net-outbound`).
pub const NET_OUTBOUND: u64 = 1;
/// [`BootInfo::net_flags`]: the tender keeps a watch set of the instance's
/// host sockets, so [`Hypercall::NetPoll`] can report the sockets whose
/// readiness rose ([`NetPollArgs::events`]) in time proportional to them,
/// not to all sockets. Without it the guest polls every socket itself.
pub const NET_WATCH: u64 = 4;

/// [`BootInfo::net_flags`]: the guest may bind any port (`--net-bind-any`):
/// a `bind` that no listener of [`BootInfo::listeners`] takes makes the
/// tender open and bind a host socket of the same address and port with
/// [`net_op::BIND_NEW`], with the tender's own rights (for an instance that
/// owns its network namespace, as an OCI container does).
pub const NET_BIND_ANY: u64 = 2;

/// Most listening sockets a tender hands to one instance.
pub const MAX_LISTENERS: usize = 16;

/// [`Listener::port`] for a listener that attaches to the guest's first
/// `listen` on a socket of its kind, whatever its port (`--listen-fd`).
pub const LISTENER_ANY_PORT: u32 = 0x1_0000;

/// One listening host socket handed to the instance.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Listener {
    /// The host socket's handle (spt: its descriptor number).
    pub handle: i64,
    /// The guest port it stands for, or [`LISTENER_ANY_PORT`].
    pub port: u32,
    /// `SOCK_STREAM` (1) or `SOCK_DGRAM` (2).
    pub sock_type: u32,
    /// `AF_INET` (2) or `AF_INET6` (10): the host socket's family.
    pub family: u32,
    /// Reserved, zero.
    pub reserved: u32,
}

/// The hypercalls. The value is the hypercall number.
#[repr(u64)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hypercall {
    /// Write bytes to the console: [`ConsoleWriteArgs`].
    ConsoleWrite = 1,
    /// Stop the instance with an exit status: [`HaltArgs`]. Does not return.
    Halt = 2,
    /// Block until a deadline passes or a device is ready: [`PollArgs`].
    Poll = 3,
    /// Report a fatal CPU exception (hvt): [`FaultArgs`]. Does not return.
    Fault = 4,
    /// A batch of socket operations on tender-owned host sockets:
    /// [`NetArgs`] pointing at an array of [`NetOp`].
    Net = 5,
    /// Block until a host socket is ready or a deadline passes:
    /// [`NetPollArgs`] pointing at an array of [`NetPollFd`].
    NetPoll = 6,
    /// Read the tender's standard input without blocking:
    /// [`ConsoleReadArgs`]. A guest waits for input in
    /// [`Hypercall::NetPoll`] on [`STDIN_HANDLE`].
    ConsoleRead = 7,
    /// Change the protection of guest pages: [`ProtectArgs`].
    Protect = 8,
    /// Tell the tender where the guest buffers console output:
    /// [`ConsoleBufferArgs`]. A guest whose console writes are expensive
    /// (hvt: each is a VM exit) collects them there and flushes them with
    /// [`Hypercall::ConsoleWrite`]; when the guest ends without flushing (a
    /// CPU exception, a refused hypercall), the tender writes what the
    /// buffer still holds before its own message.
    ConsoleBuffer = 9,
    /// Tell the tender where the guest's host-signal word is:
    /// [`SignalWordArgs`]. When the tender receives one of
    /// [`FORWARDED_SIGNALS`] for the instance, it sets bit `signal - 1` of
    /// that word (atomically; the guest takes the word with an atomic swap)
    /// and the guest's wait in [`Hypercall::NetPoll`] ends early, so the
    /// kernel raises the signal in the program as Linux would.
    SignalWord = 10,
    /// Hand the volume's final contents to the tender: [`VolumeSaveArgs`].
    /// The tender keeps the last archive it was given and, once the
    /// instance has ended by exit (not by a CPU fault or a refused
    /// hypercall), replaces the host directory's contents with it.
    VolumeSave = 11,
    /// Preemption on a timer tick: [`PreemptArgs`]. [`PREEMPT_REGISTER`]
    /// tells the tender where the kernel's [`PreemptArea`] and its
    /// preemption entry are (at boot); [`PREEMPT_ARM`] starts the tick
    /// (every `tick_ns`) when more than one thread became runnable. The
    /// tender stops the tick itself at the first tick that finds at most
    /// one runnable thread, so an instance with one thread gets no ticks.
    Preempt = 12,
    /// Make guest pages show other guest pages: [`AliasArgs`]. The kernel
    /// maps a file's pages into every `MAP_SHARED` mapping of it this way,
    /// so the mappings and `read`/`write` share the same bytes.
    Alias = 13,
    /// [`Hypercall::Alias`] for many single pages at once:
    /// [`AliasListArgs`] (hvt: one exit and one TLB flush for the lot).
    AliasList = 14,
    /// Tell the tender where the kernel takes back a CPU fault of its own
    /// components: [`FaultHandlerArgs`] (ABI 11). When the guest faults at
    /// an instruction in guest memory (spt: SIGSEGV, SIGBUS; hvt: a page or
    /// general-protection fault) while the armed word is non-zero, the
    /// tender resumes the guest at `entry` (at CPL 3 on hvt; `rdi` = the
    /// signal, `rsi` = the faulting address, `rdx` = the faulting
    /// instruction, the stack 128 bytes below the faulting one, aligned)
    /// instead of ending the instance; the kernel reboots the failed
    /// component.
    FaultHandler = 15,
    /// Give guest pages back to the host: [`ReleaseArgs`] (ABI 12). The
    /// kernel calls it for memory it freed (`munmap`, a shrinking break or
    /// `mremap`) and for `madvise(MADV_DONTNEED | MADV_FREE)`, so freed
    /// guest memory stops costing the host memory.
    Release = 16,
    /// Tell the tender where the kernel takes a CPU fault of the program
    /// (a nil dereference, `ud2`, `int3`, a division by zero) to deliver
    /// it as a Linux signal to the program's own handler:
    /// [`ProgramFaultArgs`]; `entry` 0 withdraws it. Asked after
    /// [`Hypercall::FaultHandler`]'s hand-back declined (recovery first).
    ProgramFault = 17,
    /// Host directories (`--mount HOSTDIR:GUESTDIR:ro` or `:rw`, ABI 17):
    /// one operation on a file beneath mount `mount`: [`HostFsArgs`].
    HostFs = 18,
    /// The program's explicit ready point (ABI 19): it wrote to
    /// [`READY_DEVICE_PATH`] to say "initialised; snapshot me here":
    /// [`ReadyArgs`]. A tender that runs the instance as a template made
    /// at [`ReadyPoint::Explicit`] stops it here and returns only in its
    /// copies; every other tender (and every copy) answers 0 at once.
    Ready = 19,
}

/// Where a program says it is initialised (a write of any bytes; the
/// tender sees [`Hypercall::Ready`]). A character device of the guest's
/// `/dev`, numbers [`READY_DEVICE_MAJOR`]:[`READY_DEVICE_MINOR`].
pub const READY_DEVICE_PATH: &str = "/dev/shoal/ready";
/// The ready device's major number (Linux's range for local use).
pub const READY_DEVICE_MAJOR: u32 = 240;
/// The ready device's minor number.
pub const READY_DEVICE_MINOR: u32 = 0;

/// Where a template's instance is stopped and kept (`shoal serve`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReadyPoint {
    /// The program's first wait for a connection with nothing pending.
    #[default]
    Listen,
    /// The program's first write to [`READY_DEVICE_PATH`]
    /// ([`Hypercall::Ready`]); its waits for connections are not ready
    /// points.
    Explicit,
}

/// Arguments of [`Hypercall::Ready`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ReadyArgs {
    /// Out: 0 (the only answer; in a template's copy, after the copy).
    pub ret: i64,
}

/// [`HostFsArgs::op`]: the guest directory of mount `mount` (absolute,
/// no NUL) into `buf`; `ret` its length, `-ENOENT` past the last mount.
pub const HOSTFS_MOUNT: u64 = 0;
/// [`HostFsArgs::op`]: the attributes of `path` without following a
/// symbolic link in its last component, as a [`HostStat`] at `buf`.
pub const HOSTFS_STAT: u64 = 1;
/// [`HostFsArgs::op`]: up to `len` bytes of regular file `path` from
/// offset `off` into `buf`; `ret` the count (0 at the end).
pub const HOSTFS_READ: u64 = 2;
/// [`HostFsArgs::op`]: the entries of directory `path` from entry number
/// `off` on, as Linux `linux_dirent64` records into `buf` (each record's
/// `d_off` is the number of the entry after it); `ret` the bytes written,
/// 0 at the end, `-EINVAL` if not even one record fits.
pub const HOSTFS_LIST: u64 = 3;
/// [`HostFsArgs::op`]: the target of symbolic link `path` into `buf`
/// (truncated to `len`); `ret` its length.
pub const HOSTFS_READLINK: u64 = 4;
/// [`HostFsArgs::op`]: maps regular file `path` from offset `off` (page
/// aligned) privately at guest address `buf` (page aligned) over at most
/// `len` bytes (a multiple of the page size) of the guest's free memory,
/// read-only: the host's page cache of the file, shared by every instance
/// (and native process) that maps it, copied on a write only. Only the
/// whole pages inside the file are mapped; `ret` their bytes (0: `off` is
/// past the end). `-EFAULT`: the range is not the guest's free memory;
/// `-EINVAL`: misaligned or empty.
pub const HOSTFS_MAP: u64 = 5;
/// [`HostFsArgs::op`]: as [`HOSTFS_MAP`], readable and executable (an
/// unmodified executable's libraries; `-EINVAL` in another instance).
pub const HOSTFS_MAP_EXEC: u64 = 6;
/// [`HostFsArgs::op`]: gives `[buf, buf + len)` (the guest's free memory,
/// page aligned) fresh zero memory again with protection `off`
/// (`PROT_*`), ending what [`HOSTFS_MAP`] mapped there; no path.
pub const HOSTFS_UNMAP: u64 = 7;
/// [`HostFsArgs::op`]: what mount `mount` is: `ret` bit 0
/// ([`HOSTFS_IS_WRITABLE`]) set if it is writable (`HOSTDIR:GUESTDIR:rw`),
/// bit 1 ([`HOSTFS_IS_FILE`]) if it is a single regular file
/// (`HOSTFILE:GUESTFILE`), whose only path is the empty one. A tender
/// without writable mounts answers `-EINVAL` (read-only directories). The
/// calls below answer `-EROFS` on a read-only mount.
pub const HOSTFS_WRITABLE: u64 = 8;
/// [`HOSTFS_WRITABLE`]'s bit: the mount is writable.
pub const HOSTFS_IS_WRITABLE: u64 = 1;
/// [`HOSTFS_WRITABLE`]'s bit: the mount is one regular file.
pub const HOSTFS_IS_FILE: u64 = 2;
/// [`HostFsArgs::op`]: create regular file `path` with mode `off` (the
/// guest's umask applied); `len` 1: exclusively (`-EEXIST` if it exists),
/// 0: an existing regular file is kept. Never follows a link.
pub const HOSTFS_CREATE: u64 = 9;
/// [`HostFsArgs::op`]: write `len` bytes (at most [`HOSTFS_IO_MAX`]) from
/// `buf` into regular file `path` at offset `off`; `ret` the count.
pub const HOSTFS_WRITE: u64 = 10;
/// [`HostFsArgs::op`]: set regular file `path`'s size to `off`.
pub const HOSTFS_TRUNCATE: u64 = 11;
/// [`HostFsArgs::op`]: remove the name `path` (not a directory).
pub const HOSTFS_UNLINK: u64 = 12;
/// [`HostFsArgs::op`]: make directory `path` with mode `off`.
pub const HOSTFS_MKDIR: u64 = 13;
/// [`HostFsArgs::op`]: remove the empty directory `path`.
pub const HOSTFS_RMDIR: u64 = 14;
/// [`HostFsArgs::op`]: rename `path` to the path at `buf` (`len` bytes) in
/// the same mount, with `renameat2` flags `off` (`RENAME_NOREPLACE`,
/// `RENAME_EXCHANGE`).
pub const HOSTFS_RENAME: u64 = 15;
/// [`HostFsArgs::op`]: flush regular file `path` to the host's storage.
pub const HOSTFS_FSYNC: u64 = 16;
/// [`HostFsArgs::op`]: set `path`'s permission bits to `off`.
pub const HOSTFS_CHMOD: u64 = 17;
/// [`HostFsArgs::op`]: set `path`'s access and modification times
/// (`utimensat`'s two `timespec`s, `UTIME_NOW`/`UTIME_OMIT` included, as
/// four `i64` at `buf`), not following a link.
pub const HOSTFS_UTIMES: u64 = 18;
/// Longest `path` of a [`HostFsArgs`] (Linux's `PATH_MAX` less its NUL).
pub const HOSTFS_PATH_MAX: u64 = 4095;
/// Most bytes one [`HOSTFS_READ`] or [`HOSTFS_LIST`] moves (a larger
/// `len` is cut to it).
pub const HOSTFS_IO_MAX: u64 = 1 << 20;

/// Arguments of [`Hypercall::HostFs`]. `path` is relative to the mount's
/// host directory, without `.` or `..` components and without symbolic
/// links but (for [`HOSTFS_STAT`], [`HOSTFS_READLINK`]) the last one: the
/// kernel resolves names itself, Linux's way, and the tender refuses any
/// path that would leave the directory or follow a link (`-EXDEV`,
/// `-ELOOP`), so nothing outside a mount is ever reached.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct HostFsArgs {
    /// `HOSTFS_*`.
    pub op: u64,
    /// Index of the mount (in the order given on the command line).
    pub mount: u64,
    /// Guest address of the path (no NUL needed) and its length (0: the
    /// mount's directory itself).
    pub path: u64,
    /// Length of `path` (at most [`HOSTFS_PATH_MAX`]).
    pub path_len: u64,
    /// Offset (bytes for [`HOSTFS_READ`], entries for [`HOSTFS_LIST`]).
    pub off: u64,
    /// Guest address of the result buffer.
    pub buf: u64,
    /// Its length.
    pub len: u64,
    /// Out: the result, or a negative Linux errno (`EFAULT`: a buffer
    /// outside writable guest memory; `ENOSYS`: no mounts).
    pub ret: i64,
}

/// What [`HOSTFS_STAT`] writes: the host's `stat` of the file.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostStat {
    /// `st_dev`.
    pub dev: u64,
    /// `st_ino`.
    pub ino: u64,
    /// `st_mode`.
    pub mode: u32,
    /// `st_nlink`.
    pub nlink: u32,
    /// `st_uid`.
    pub uid: u32,
    /// `st_gid`.
    pub gid: u32,
    /// `st_rdev`.
    pub rdev: u64,
    /// `st_size`.
    pub size: u64,
    /// `st_blocks` (512-byte units).
    pub blocks: u64,
    /// `st_blksize`.
    pub blksize: u64,
    /// Access, modification and change times: seconds, nanoseconds.
    pub atime: [i64; 2],
    /// See `atime`.
    pub mtime: [i64; 2],
    /// See `atime`.
    pub ctime: [i64; 2],
}

/// Arguments of [`Hypercall::ProgramFault`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ProgramFaultArgs {
    /// Guest address of the kernel's program-fault entry (0: none). The
    /// tender resumes the faulting thread there with the stack 128 bytes
    /// below the faulting one (16-aligned, less 8) after writing
    /// [`ProgramFaultArea`] at `area`; every other register is undefined.
    pub entry: u64,
    /// Guest address of the kernel's 8-aligned, writable
    /// [`ProgramFaultArea`].
    pub area: u64,
    /// Out: 0, or a negative Linux errno (`ENOSYS`: faults are not
    /// handed back by this tender).
    pub ret: i64,
}

/// What the tender writes for a program fault: the faulting thread's
/// registers in Linux's `mcontext_t.gregs` order (r8 … r15, rdi, rsi,
/// rbp, rbx, rdx, rax, rcx, rsp, rip, eflags), then what the signal's
/// `siginfo_t` and `mcontext_t` say of the fault.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ProgramFaultArea {
    /// The general registers, rip and eflags at the fault.
    pub regs: [u64; 18],
    /// The signal (SIGSEGV, SIGBUS, SIGILL, SIGTRAP, SIGFPE).
    pub signo: u64,
    /// `si_code` (e.g. `SEGV_MAPERR`, `FPE_INTDIV`).
    pub code: u64,
    /// `si_addr`.
    pub addr: u64,
    /// The exception vector (`mcontext_t.trapno`).
    pub trapno: u64,
    /// The CPU's error code (`mcontext_t.err`).
    pub err: u64,
    /// The faulting address of a page fault (`mcontext_t.cr2`).
    pub cr2: u64,
}

/// Arguments of [`Hypercall::FaultHandler`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FaultHandlerArgs {
    /// Guest address of the kernel's fault entry
    /// (`extern "C" fn(signal: u64, addr: u64, rip: u64) -> !`).
    pub entry: u64,
    /// Guest address of the 8-byte, 8-aligned armed word: non-zero while a
    /// fault is the kernel's to handle.
    pub armed: u64,
    /// Out: 0, or a negative Linux errno.
    pub ret: i64,
}

/// [`PreemptArgs::op`]: register the area and the entry.
pub const PREEMPT_REGISTER: u64 = 0;
/// [`PreemptArgs::op`]: arm the tick.
pub const PREEMPT_ARM: u64 = 1;
/// [`PreemptArgs::op`]: a gated call began while the tick was off: arm it
/// at the watchdog's period (ABI 13; see [`PreemptArea::watch`]).
pub const PREEMPT_WATCH: u64 = 2;
/// [`PreemptArgs::op`] (ABI 17): the kernel holds output back and wants to
/// be interrupted once after `tick_ns` even with one thread (see
/// [`PreemptArea::wake`]); nothing to do while the preemption tick runs.
pub const PREEMPT_WAKE: u64 = 3;
/// [`PreemptArea::armed`]: the tick runs at the preemption period.
pub const PREEMPT_ARMED_TICK: u64 = 1;
/// [`PreemptArea::armed`]: the tick runs at the watchdog's period only
/// (no thread to preempt; a gated call to watch).
pub const PREEMPT_ARMED_WATCHDOG: u64 = 2;
/// [`PreemptArea::armed`] (ABI 17): one tick for [`PREEMPT_WAKE`], then off
/// (or on at another period, as the tick finds the threads and the
/// watchdog).
pub const PREEMPT_ARMED_WAKE: u64 = 3;
/// The tick the kernel asks for unless told otherwise: 10 ms.
pub const PREEMPT_TICK_NS: u64 = 10_000_000;
/// Shortest tick a tender accepts (a shorter one is raised to it).
pub const PREEMPT_MIN_TICK_NS: u64 = 1_000_000;

/// Arguments of [`Hypercall::Preempt`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PreemptArgs {
    /// [`PREEMPT_REGISTER`], [`PREEMPT_ARM`], [`PREEMPT_WATCH`] or
    /// [`PREEMPT_WAKE`].
    pub op: u64,
    /// REGISTER: guest address of the [`PreemptArea`] (8-aligned,
    /// writable guest memory).
    pub area: u64,
    /// REGISTER: guest address of the kernel's preemption entry.
    pub entry: u64,
    /// ARM: the tick period in ns (at least [`PREEMPT_MIN_TICK_NS`]);
    /// WAKE: the delay of the one tick (likewise).
    pub tick_ns: u64,
    /// Out: 0, or a negative Linux errno.
    pub ret: i64,
}

/// The words the kernel and the tender share for preemption (in the
/// kernel's data; every field 8 bytes, read and written atomically).
///
/// At a tick the tender reads `runnable`: at most 1, it stops the tick and
/// clears `armed`. Otherwise, if `in_kernel` is set (or the vCPU is not in
/// guest code) it sets `pending`, which the kernel looks at on its way out
/// of the system call; else it stores the interrupted instruction pointer
/// in `resume_rip`, sets `in_kernel` and resumes the vCPU at the kernel's
/// preemption entry, which saves the whole register state on the
/// interrupted stack (below its red zone), switches threads, and returns
/// to `resume_rip` with everything restored. All of it is the guest's own
/// memory: a guest that lies in it only hurts itself.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PreemptArea {
    /// Kernel: nonzero while the vCPU runs kernel code (no preemption).
    pub in_kernel: u64,
    /// Tender: a tick landed in the kernel; switch on the way out.
    pub pending: u64,
    /// Tender: where the preempted code resumes.
    pub resume_rip: u64,
    /// Kernel: how many threads want the vCPU: the runnable ones (the
    /// running one included), plus one while a lone running thread has a
    /// deadline to see pass (a sleeping thread's, the interval timer's).
    pub runnable: u64,
    /// Tender: nonzero while the tick is armed: [`PREEMPT_ARMED_TICK`],
    /// [`PREEMPT_ARMED_WATCHDOG`] or [`PREEMPT_ARMED_WAKE`].
    pub armed: u64,
    /// Tender: ticks that reached the instance (a statistic).
    pub ticks: u64,
    /// Kernel (ABI 13): the component (1 + its index in [`COMPONENTS`])
    /// of the gated call into a rebootable component in progress, 0 when
    /// none. The hang watchdog: at each tick the tender compares `watch`
    /// and `watch_seq` with the last tick's; the same call still in
    /// progress adds the tick's period to its age, and once the age reaches
    /// [`BootInfo::watchdog_ns`] the tender sends the guest to the kernel's
    /// fault entry with [`FAULT_HANG`] (only an instruction in guest
    /// memory, at CPL 3 on hvt, and only while the fault entry's armed word
    /// is set). While no thread needs preempting, the tick keeps running
    /// at the watchdog's period only while a gated call is in progress
    /// ([`PREEMPT_ARMED_WATCHDOG`]); the kernel arms it with
    /// [`PREEMPT_WATCH`] when a gated call begins and the tick is off.
    pub watch: u64,
    /// Kernel (ABI 13): gated calls begun so far (tells one long call
    /// from many short ones).
    pub watch_seq: u64,
    /// Kernel (ABI 17): nonzero while the kernel wants the next tick to
    /// send it to the preemption entry (or set `pending`) even when no
    /// other thread waits: hvt's stdout buffer holds lines back for a
    /// pipe and writes them out there. The kernel clears it.
    pub wake: u64,
}

/// Byte offset of [`PreemptArea::resume_rip`] (the entry reads it).
pub const PREEMPT_RESUME_RIP_OFFSET: u64 = 16;

/// Indices of [`PreemptArea`]'s fields as 8-byte words: the tenders reach
/// the area through guest memory as an array of atomic words.
pub mod preempt_word {
    use super::PreemptArea;
    use core::mem::offset_of;

    /// [`PreemptArea::in_kernel`].
    pub const IN_KERNEL: usize = 0;
    /// [`PreemptArea::pending`].
    pub const PENDING: usize = 1;
    /// [`PreemptArea::resume_rip`].
    pub const RESUME_RIP: usize = 2;
    /// [`PreemptArea::runnable`].
    pub const RUNNABLE: usize = 3;
    /// [`PreemptArea::armed`].
    pub const ARMED: usize = 4;
    /// [`PreemptArea::ticks`].
    pub const TICKS: usize = 5;
    /// [`PreemptArea::watch`].
    pub const WATCH: usize = 6;
    /// [`PreemptArea::watch_seq`].
    pub const WATCH_SEQ: usize = 7;
    /// [`PreemptArea::wake`].
    pub const WAKE: usize = 8;

    const _: () = assert!(offset_of!(PreemptArea, in_kernel) == IN_KERNEL * 8);
    const _: () = assert!(offset_of!(PreemptArea, pending) == PENDING * 8);
    const _: () = assert!(offset_of!(PreemptArea, resume_rip) == RESUME_RIP * 8);
    const _: () = assert!(offset_of!(PreemptArea, runnable) == RUNNABLE * 8);
    const _: () = assert!(offset_of!(PreemptArea, armed) == ARMED * 8);
    const _: () = assert!(offset_of!(PreemptArea, ticks) == TICKS * 8);
    const _: () = assert!(offset_of!(PreemptArea, watch) == WATCH * 8);
    const _: () = assert!(offset_of!(PreemptArea, watch_seq) == WATCH_SEQ * 8);
    const _: () = assert!(offset_of!(PreemptArea, wake) == WAKE * 8);
    const _: () = assert!(super::PREEMPT_RESUME_RIP_OFFSET as usize == RESUME_RIP * 8);
}

/// The signals a tender hands to its guest instead of acting on them
/// itself: `SIGTERM` (a clean stop: servers save and exit) and `SIGHUP`.
pub const FORWARDED_SIGNALS: [i32; 2] = [15, 1];

/// Arguments of [`Hypercall::SignalWord`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct SignalWordArgs {
    /// Guest address of the 8-byte, 8-aligned word.
    pub addr: u64,
    /// Out: 0, or a negative Linux errno.
    pub ret: i64,
}

impl Hypercall {
    /// The hypercall with number `nr`, if there is one.
    pub fn from_nr(nr: u64) -> Option<Hypercall> {
        match nr {
            1 => Some(Hypercall::ConsoleWrite),
            2 => Some(Hypercall::Halt),
            3 => Some(Hypercall::Poll),
            4 => Some(Hypercall::Fault),
            5 => Some(Hypercall::Net),
            6 => Some(Hypercall::NetPoll),
            7 => Some(Hypercall::ConsoleRead),
            8 => Some(Hypercall::Protect),
            9 => Some(Hypercall::ConsoleBuffer),
            10 => Some(Hypercall::SignalWord),
            11 => Some(Hypercall::VolumeSave),
            12 => Some(Hypercall::Preempt),
            13 => Some(Hypercall::Alias),
            14 => Some(Hypercall::AliasList),
            15 => Some(Hypercall::FaultHandler),
            16 => Some(Hypercall::Release),
            17 => Some(Hypercall::ProgramFault),
            18 => Some(Hypercall::HostFs),
            19 => Some(Hypercall::Ready),
            _ => None,
        }
    }
}

/// Number of hypercall numbers (ports `HYPERCALL_PORT_BASE..+HYPERCALL_MAX`).
pub const HYPERCALL_MAX: u64 = 20;

/// Console streams.
pub const CONSOLE_STDOUT: u64 = 1;
/// Console streams.
pub const CONSOLE_STDERR: u64 = 2;

/// Arguments of [`Hypercall::ConsoleWrite`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ConsoleWriteArgs {
    /// [`CONSOLE_STDOUT`] or [`CONSOLE_STDERR`].
    pub stream: u64,
    /// Guest address of the bytes.
    pub buf: u64,
    /// Number of bytes.
    pub len: u64,
    /// Out: bytes written, or a negative Linux errno.
    pub ret: i64,
}

/// Arguments of [`Hypercall::ConsoleBuffer`]: the guest's console buffer
/// is a [`ConsoleBufferHeader`] at `addr` followed by `cap` bytes, of which
/// the header's `len` are pending output for its `stream`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ConsoleBufferArgs {
    /// Guest address of the [`ConsoleBufferHeader`].
    pub addr: u64,
    /// Bytes of room after the header (at most [`CONSOLE_BUFFER_MAX`]).
    pub cap: u64,
    /// Out: 0, or a negative Linux errno (then the guest must not buffer).
    pub ret: i64,
}

/// The head of a guest console buffer ([`Hypercall::ConsoleBuffer`]). The
/// tender reads it only when the guest has ended and treats both fields as
/// hostile (`len` larger than the registered room is ignored).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ConsoleBufferHeader {
    /// [`CONSOLE_STDOUT`] or [`CONSOLE_STDERR`].
    pub stream: u32,
    /// Pending bytes right after the header.
    pub len: u32,
}

/// The largest console buffer a tender accepts.
pub const CONSOLE_BUFFER_MAX: u64 = 1 << 20;

/// Arguments of [`Hypercall::ConsoleRead`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ConsoleReadArgs {
    /// Guest address of the buffer.
    pub buf: u64,
    /// Its size.
    pub len: u64,
    /// Out: bytes read, 0 at end of input, `-EAGAIN` when no input is
    /// available now (the tender never blocks here), or another negative
    /// Linux errno.
    pub ret: i64,
}

/// The [`NetPollFd::handle`] that stands for the tender's standard input
/// (never a socket's handle: those start at 3 on both tenders).
pub const STDIN_HANDLE: i32 = 0;

/// [`ProtectArgs::prot`] bits, Linux's values.
pub const PROT_READ: u64 = 1;
/// Writable (see [`PROT_READ`]).
pub const PROT_WRITE: u64 = 2;
/// Executable (see [`PROT_READ`]): only in an instance that runs an
/// unmodified Linux executable — its libraries mapped by `ld.so` and code
/// it makes at run time (a JIT, with W^X flips, or read-write-execute where
/// V8's WebAssembly wants it); `syscall` instructions there take the trap
/// path. Asked for only in [`ProtectArgs`], over the same guest range as the
/// other bits; never in an alias. A shoal image's own code is its only
/// executable memory.
pub const PROT_EXEC: u64 = 4;

/// hvt: the value of `rax` that makes `int3` flush the guest's TLB instead
/// of reporting a breakpoint ("SHOALTLB"). The guest runs at CPL 3 and
/// cannot `invlpg` or write CR3; after a [`Hypercall::Protect`] on hvt the
/// kernel executes `int3` with this `rax`, and the VMM's #BP gate reloads
/// CR3 at CPL 0 and returns, so no stale translation outlives the VMM's
/// page-table change. (`int n` with a DPL-3 gate of its own would be the
/// obvious way, but KVM on this host answers it with #UD.)
pub const HVT_TLB_FLUSH_MAGIC: u64 = u64::from_le_bytes(*b"SHOALTLB");

/// Arguments of [`Hypercall::Protect`]: give `[addr, addr + len)` (page
/// aligned, inside the kernel's free memory `[heap_start, heap_end)` or the
/// main stack `[stack_base, stack_top)`) the protection `prot`
/// (`PROT_READ | PROT_WRITE`, `PROT_READ`, `PROT_READ | PROT_EXEC` as
/// [`PROT_EXEC`] allows, or 0 for no access).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ProtectArgs {
    /// First address (page aligned).
    pub addr: u64,
    /// Length in bytes (page aligned, not 0).
    pub len: u64,
    /// [`PROT_READ`], [`PROT_WRITE`] and [`PROT_EXEC`] bits.
    pub prot: u64,
    /// Out: 0, [`PROTECT_FLUSH`], or a negative Linux errno (`EINVAL`
    /// for a range or protection the tender does not allow).
    pub ret: i64,
}

/// The result of a [`Hypercall::Protect`] or [`Hypercall::Alias`] that
/// took away access a page had (or showed another page there): done, and
/// the guest must flush its TLB (on hvt: `int3` with
/// [`HVT_TLB_FLUSH_MAGIC`]). 0 means done with access only added, where
/// no translation can be stale: a page that was not present or read-only
/// faults, and the fault makes the CPU (and KVM, which shadows the tables
/// on a host without EPT) read the new entry. So a change that only grants
/// costs neither a flush nor, on hvt, KVM dropping its shadow of the
/// tables (which every later page touch would pay for).
pub const PROTECT_FLUSH: i64 = 1;

/// A flag in [`ProtectArgs::prot`]: no page of the range has been touched
/// since the host last backed it (the kernel's *clean* free memory: never
/// handed out, or given back with [`Hypercall::Release`], whose host pages
/// were dropped with every translation of them). So no translation of it
/// can be stale, and taking access away needs no flush: the answer is 0.
/// A guest that sets it wrongly only keeps its own stale translations of
/// its own memory. Placing mappings without access (a thread stack's
/// guard, a runtime's address-space reservation) on clean memory makes
/// them cost no flush on hvt.
pub const PROTECT_UNTOUCHED: u64 = 1 << 8;

/// Arguments of [`Hypercall::Alias`]: from now on the guest pages
/// `[dst, dst + len)` show the guest pages `[src, src + len)` (the same
/// memory: a store through either is seen through both), with protection
/// `prot` (as [`ProtectArgs::prot`]; never executable). Both ranges are
/// page aligned and lie inside `[heap_start, mem_size)` (the kernel's free
/// memory and the main stack), so the image, the archive, the boot
/// information and everything the tender keeps are out of reach. A later
/// [`Hypercall::Protect`] on `dst` keeps the alias.
///
/// `src == dst` gives the pages their own memory back, its contents
/// unspecified (the kernel zeroes it); with [`ALIAS_SHAREABLE`] in `prot`
/// instead, it makes them memory that other pages can show, contents
/// unspecified too (the kernel saves and restores what it keeps there).
///
/// spt: shareable guest memory is one memory file (offset = guest
/// address); the tender maps `src`'s offset at `dst` (`mmap(MAP_SHARED |
/// MAP_FIXED)`), gives pages their own memory back as fresh private
/// anonymous memory (`mmap(MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED)`), and
/// makes pages shareable by mapping their own offset of the file. hvt: the
/// VMM points `dst`'s page-table entries at `src`'s guest-physical pages
/// (every page is shareable); the kernel flushes its TLB after, as after
/// [`Hypercall::Protect`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct AliasArgs {
    /// First page that changes (page aligned).
    pub dst: u64,
    /// First page it shows (page aligned).
    pub src: u64,
    /// Length in bytes (page aligned, not 0).
    pub len: u64,
    /// [`PROT_READ`] and [`PROT_WRITE`] bits.
    pub prot: u64,
    /// Out: 0, [`PROTECT_FLUSH`], or a negative Linux errno (`EINVAL`
    /// for a range or protection the tender does not allow).
    pub ret: i64,
}

/// [`AliasArgs::prot`] flag: with `src == dst`, make the pages shareable
/// (see [`AliasArgs`]).
pub const ALIAS_SHAREABLE: u64 = 0x100;

/// One page of an [`AliasListArgs`] list: page `dst` shows page `src`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct AliasPair {
    /// The page that changes (page aligned).
    pub dst: u64,
    /// The page it shows (page aligned).
    pub src: u64,
}

/// The most pages one [`Hypercall::AliasList`] takes.
pub const ALIAS_LIST_MAX: u64 = 256;

/// Arguments of [`Hypercall::AliasList`]: for each of the `count` (at most
/// [`ALIAS_LIST_MAX`]) [`AliasPair`]s at guest address `pairs`, what
/// [`Hypercall::Alias`] does for one page, all with protection `prot`.
/// The tender applies them in order and stops at the first it refuses.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct AliasListArgs {
    /// Guest address of the [`AliasPair`] array.
    pub pairs: u64,
    /// Number of pairs.
    pub count: u64,
    /// [`PROT_READ`] and [`PROT_WRITE`] bits.
    pub prot: u64,
    /// Out: 0, or a negative Linux errno (`EINVAL` for a pair or
    /// protection the tender does not allow, `EFAULT` for a list outside
    /// guest memory).
    pub ret: i64,
}

/// One range of a [`ReleaseArgs`] list.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ReleaseRange {
    /// First address (page aligned).
    pub addr: u64,
    /// Length in bytes (page aligned, not 0).
    pub len: u64,
}

/// The most ranges one [`Hypercall::Release`] takes.
pub const RELEASE_LIST_MAX: u64 = 64;

/// Arguments of [`Hypercall::Release`]: the `count` (at most
/// [`RELEASE_LIST_MAX`]) [`ReleaseRange`]s at guest address `ranges` are
/// given back to the host. Each lies inside `[heap_start, mem_size)` (the
/// kernel's free memory and the main stack), like [`ProtectArgs`]. After
/// the call the pages read as zero, and the host memory behind them is
/// freed until they are touched again; their protection is unchanged.
///
/// The kernel releases only pages that show their own memory (never a
/// page [`Hypercall::Alias`] pointed elsewhere, nor a page another page
/// shows). spt: host `madvise(MADV_DONTNEED)` on the guest's private
/// anonymous memory (a page that shows the alias file would keep showing
/// it, unchanged). hvt: the VMM's `madvise(MADV_DONTNEED)` on the host
/// memory behind the guest-physical pages; no TLB flush is needed (the
/// guest's page tables do not change). The tender applies the ranges in
/// order and stops at the first it refuses.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ReleaseArgs {
    /// Guest address of the [`ReleaseRange`] array.
    pub ranges: u64,
    /// Number of ranges.
    pub count: u64,
    /// Out: 0, or a negative Linux errno (`EINVAL` for a range the tender
    /// does not allow or a count above [`RELEASE_LIST_MAX`], `EFAULT` for a
    /// list outside guest memory).
    pub ret: i64,
}

/// Arguments of [`Hypercall::Halt`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct HaltArgs {
    /// Exit status of the instance (the low 8 bits reach the host).
    pub status: i64,
}

/// Arguments of [`Hypercall::Poll`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PollArgs {
    /// How long to block at most, in nanoseconds (`u64::MAX`: no deadline).
    pub timeout_ns: u64,
    /// In: bit set of devices to wait for (none exist yet: 0).
    pub wait_set: u64,
    /// Out: bit set of devices that are ready.
    pub ready_set: u64,
    /// Out: 0, or a negative Linux errno.
    pub ret: i64,
}

/// Arguments of [`Hypercall::Fault`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FaultArgs {
    /// Exception vector.
    pub vector: u64,
    /// Error code pushed by the CPU, or 0.
    pub error_code: u64,
    /// Faulting instruction pointer.
    pub rip: u64,
    /// Stack pointer at the fault.
    pub rsp: u64,
    /// Faulting address (CR2) for page faults.
    pub cr2: u64,
}

/// Most operations in one [`Hypercall::Net`] batch.
pub const NET_MAX_OPS: u64 = 64;
/// Most descriptors in one [`Hypercall::NetPoll`].
pub const NET_MAX_POLL: u64 = 4096;
/// Most descriptors in one [`Hypercall::NetPoll`] that also collects the
/// watch set's reports ([`NetPollArgs::max_events`] > 0): the few the
/// watch set does not hold (standard input).
pub const NET_MAX_POLL_WATCH: u64 = 8;

/// Socket operations ([`NetOp::op`]). Addresses are Linux `sockaddr`s,
/// flags and options Linux values; results are what the Linux call
/// returns, or a negative Linux errno. Host sockets are always
/// non-blocking: the guest kernel blocks in [`Hypercall::NetPoll`].
pub mod net_op {
    /// `socket(a = domain, b = type, flags = protocol)` → handle.
    pub const SOCKET: u32 = 1;
    /// `bind(handle, addr, addrlen)`.
    pub const BIND: u32 = 2;
    /// `listen(handle, a = backlog)`.
    pub const LISTEN: u32 = 3;
    /// `accept4(handle, addr, &addrlen)` → new handle; the peer's address
    /// is written to `addr` (at most `addrlen` bytes), its length to `a`.
    pub const ACCEPT: u32 = 4;
    /// `connect(handle, addr, addrlen)`.
    pub const CONNECT: u32 = 5;
    /// `sendto(handle, buf, len, flags, addr, addrlen)` (`addr` 0: none) → bytes.
    pub const SEND: u32 = 6;
    /// `recvfrom(handle, buf, len, flags, addr, &addrlen)` → bytes; the
    /// peer's address length is written to `a` when `addr` is not 0.
    pub const RECV: u32 = 7;
    /// `shutdown(handle, a = how)`.
    pub const SHUTDOWN: u32 = 8;
    /// `close(handle)`.
    pub const CLOSE: u32 = 9;
    /// `setsockopt(handle, a = level, b = name, buf, len)`.
    pub const SETSOCKOPT: u32 = 10;
    /// `getsockopt(handle, a = level, b = name, buf, &len)` → option length.
    pub const GETSOCKOPT: u32 = 11;
    /// `getsockname(handle, addr, &addrlen)` → address length.
    pub const GETSOCKNAME: u32 = 12;
    /// `getpeername(handle, addr, &addrlen)` → address length.
    pub const GETPEERNAME: u32 = 13;
    /// With [`NET_BIND_ANY`](super::NET_BIND_ANY): `socket(a = domain, b =
    /// type)` and `bind(addr, addrlen)` in one, made by the tender with its
    /// own rights; `flags` are [`BIND_REUSEADDR`] and [`BIND_V6ONLY`] (the
    /// options that must be set before the bind) → new handle, or the
    /// errno of the host's `socket`/`bind` (`EADDRINUSE`, `EACCES`, …).
    /// Without the flag: `EACCES`.
    pub const BIND_NEW: u32 = 14;
    /// [`BIND_NEW`] flag: set `SO_REUSEADDR` before binding.
    pub const BIND_REUSEADDR: u32 = 1;
    /// [`BIND_NEW`] flag: set `IPV6_V6ONLY` before binding (`AF_INET6`).
    pub const BIND_V6ONLY: u32 = 2;
}

/// Arguments of [`Hypercall::Net`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct NetArgs {
    /// Guest address of an array of [`NetOp`].
    pub ops: u64,
    /// How many (at most [`NET_MAX_OPS`]).
    pub count: u64,
    /// Out: how many were carried out, or a negative Linux errno for the
    /// batch as a whole.
    pub ret: i64,
}

/// One socket operation (see [`net_op`] for what each field means).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct NetOp {
    /// A [`net_op`] code.
    pub op: u32,
    /// Flags of the call (`MSG_*` for send and receive, protocol for
    /// `SOCKET`).
    pub flags: u32,
    /// The socket's handle.
    pub handle: i64,
    /// First integer argument.
    pub a: u64,
    /// Second integer argument.
    pub b: u64,
    /// Guest address of the data buffer.
    pub buf: u64,
    /// Its length.
    pub len: u64,
    /// Guest address of a `sockaddr` (or 0).
    pub addr: u64,
    /// Its length (or capacity, for results).
    pub addrlen: u64,
    /// Out: the result, or a negative Linux errno.
    pub ret: i64,
}

/// Arguments of [`Hypercall::NetPoll`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct NetPollArgs {
    /// Guest address of an array of [`NetPollFd`].
    pub fds: u64,
    /// How many (at most [`NET_MAX_POLL`]; 0: just sleep).
    pub nfds: u64,
    /// How long to block at most, in nanoseconds (`u64::MAX`: no deadline).
    pub timeout_ns: u64,
    /// Out: how many entries have events, or a negative Linux errno.
    pub ret: i64,
    /// With [`NET_WATCH`]: guest address of an array of [`NetPollFd`] the
    /// tender fills with the watched host sockets whose readiness rose
    /// (edge-triggered: data, space, a connection, a hang-up arrived) since
    /// they were last reported — `handle` and `revents` (the socket's
    /// current `POLLIN`/`POLLOUT`/`POLLRDHUP`/`POLLERR`/`POLLHUP` bits);
    /// `events` is 0. The tender watches every host socket it hands over,
    /// creates or accepts, from then until it is closed; a socket is
    /// reported once when watching starts if it is ready then. The call
    /// also returns, then, when such a socket exists. 0 with `max_events`
    /// 0: only `fds` (level-triggered, as without [`NET_WATCH`]).
    pub events: u64,
    /// Capacity of `events` (at most [`NET_MAX_POLL`]); sockets left over
    /// are reported by a later call.
    pub max_events: u64,
    /// Out: how many entries of `events` were written.
    pub nevents: u64,
}

/// One host socket to wait for, as in Linux's `struct pollfd`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct NetPollFd {
    /// The handle.
    pub handle: i32,
    /// `POLL*` events to wait for.
    pub events: i16,
    /// Out: `POLL*` events that happened.
    pub revents: i16,
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::mem::size_of;

    #[test]
    fn layout_is_stable() {
        assert_eq!(size_of::<AbiNote>(), 16);
        assert_eq!(size_of::<ConsoleWriteArgs>(), 32);
        assert_eq!(size_of::<PollArgs>(), 32);
        assert_eq!(size_of::<ConsoleReadArgs>(), 24);
        assert_eq!(size_of::<ProtectArgs>(), 32);
        assert_eq!(size_of::<AliasArgs>(), 40);
        assert_eq!(size_of::<AliasPair>(), 16);
        assert_eq!(size_of::<AliasListArgs>(), 32);
        assert_eq!(size_of::<ReleaseRange>(), 16);
        assert_eq!(size_of::<ReleaseArgs>(), 24);
        assert_eq!(size_of::<HostFsArgs>(), 64);
        assert_eq!(size_of::<HostStat>(), 112);
        assert_eq!(size_of::<FaultArgs>(), 40);
        assert_eq!(size_of::<NetOp>(), 72);
        assert_eq!(size_of::<NetPollFd>(), 8);
        assert_eq!(size_of::<Listener>(), 24);
        assert_eq!(size_of::<Inject>(), 16);
        assert!(size_of::<BootInfo>() as u64 <= PHDR_OFFSET);
    }

    #[test]
    fn note_round_trips() {
        let n = AbiNote::CURRENT;
        let mut b = [0u8; 16];
        b[0..8].copy_from_slice(&n.magic.to_le_bytes());
        b[8..12].copy_from_slice(&n.abi_version.to_le_bytes());
        assert_eq!(AbiNote::from_bytes(&b), Some(n));
        assert_eq!(AbiNote::from_bytes(&b[..10]), None);
    }

    #[test]
    fn hypercall_numbers() {
        for nr in 0..HYPERCALL_MAX + 2 {
            if let Some(h) = Hypercall::from_nr(nr) {
                assert_eq!(h as u64, nr);
            }
        }
        assert_eq!(Hypercall::from_nr(0), None);
    }
}
