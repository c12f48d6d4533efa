//! The hvt tender: runs a shoal image in a KVM virtual machine (docs/design.md "Tenders and hypercalls").
//!
//! The guest runs entirely at **CPL 3 with IOPL 3**, entered straight from
//! `KVM_SET_SREGS`: on the nested, paravirtual KVM shoal targets, CPL-3 code
//! runs at native speed while CPL-0 code is emulated, so the only CPL-0 code
//! is a tiny stub that turns CPU exceptions into a Fault hypercall. The VMM
//! writes, once, in tender-private low memory `[0, TENDER_PRIVATE_END)`:
//! identity page tables (image code read-only and executable, everything
//! else NX, the tender-private pages supervisor-only), a GDT, an IDT whose
//! 32 exception vectors lead to the stub, and a TSS whose RSP0 is the stub's
//! stack and whose I/O permission bitmap allows exactly the hypercall ports
//! (see [`x86`] for the map). There are no interrupts and no devices.
//!
//! Hypercalls are `out dx, eax` with `dx = HYPERCALL_PORT_BASE + nr` and
//! `eax` = the guest address of the argument structure; guest memory is
//! identity mapped, so guest-virtual = guest-physical = the addresses of
//! `shoal_abi`'s layout, as on spt.
//!
//! # Exit statuses
//!
//! The same table as spt's (`shoal_spt`), with hvt's causes:
//!
//! | status | meaning |
//! |---|---|
//! | 0–255 | the guest halted with this status (the low 8 bits of `HaltArgs::status`) |
//! | [`EXIT_TENDER_FAILED`] (125) | the guest exited, but its `--volume` was not written (`shoal: the volume … was not saved: …`; the host directory is unchanged) |
//! | [`EXIT_SIGSYS`] (159) | the guest executed a `syscall` instruction: `shoal: guest fault: invalid opcode (vector 6, …): the guest executed a `syscall` instruction; …` |
//! | 128 + N | the guest took a CPU exception that Linux would turn into signal N (page fault, general protection → SIGSEGV = 139; invalid opcode → SIGILL = 132; divide error → SIGFPE = 136; breakpoint → SIGTRAP = 133; …): `shoal: guest fault: <name> (vector V, error E) at rip R, rsp S, cr2 C[: cause]` |
//! | [`EXIT_STOPPED`] (255) | hvt stopped the guest: an invalid hypercall (`shoal: the guest made an invalid hypercall: …`: an argument structure outside guest memory, or outside *writable* guest memory for a call that writes results back, or a fault report the guest wrote itself instead of the CPL-0 exception stub), a poll with no deadline and nothing to wait for, or a vCPU stop a shoal guest never causes (triple fault, `hlt`, KVM internal error: `shoal: hvt stopped the guest: …`) |
//!
//! Every status but a halt comes with one `shoal: …` line on stderr.
//!
//! # Networking
//!
//! Host-socket passthrough (docs/design.md "Networking"), as on spt, with the VMM as the
//! owner of the sockets (`src/net.rs`): [`run`] opens the published ports and
//! adopts `--listen-fd` sockets before boot and hands them to the guest as
//! handles of the VMM's table (never its descriptor numbers); the `Net`
//! hypercall carries out a batch of socket operations, `NetPoll` sleeps in
//! `ppoll` on the table's descriptors. The guest cannot make host calls
//! itself, so the VMM enforces the whole policy: no sockets of its own
//! without outbound, TCP binds to port 0 only, the `--net-allow` rules,
//! ordinary socket options only. `SHOAL_HVT_STATS=1` prints the exit counts
//! of a run (each exit costs about 27 µs on this host): an echo round trip
//! is 2 exits back to back (recv, send) and 5 when the server idles
//! between requests (recv, send, recv → EAGAIN, a zero-timeout NetPoll, the
//! waiting NetPoll).
//!
//! # Protection keys
//!
//! This nested KVM does not enforce protection keys in guest page tables
//! (docs/design.md "Host facts"), so hvt neither advertises PKU to the guest nor relies on
//! it: component isolation with keys is not available on hvt.
//!
//! # Dependencies
//!
//! - `kvm-ioctls`: safe wrappers for the KVM ioctls (create VM and vCPU,
//!   memory slot, CPUID, registers, XCRs, `KVM_RUN` and its exits).
//! - `kvm-bindings`: the KVM structures (`kvm_sregs`, `kvm_segment`,
//!   `kvm_cpuid_entry2`, `kvm_xcrs`, `kvm_device_attr`, …) those take.
//! - `vm-memory`: the anonymous, lazily backed (`MAP_NORESERVE`) guest
//!   memory mapping and bounds-checked writes of the tender-private tables.
//! - `vmm-sys-util`: the errno type of KVM errors, the FAM-struct wrapper
//!   the CPUID list is edited through, and the ioctl helpers for the one
//!   vCPU ioctl `kvm-ioctls` does not wrap on x86 (`KVM_SET_DEVICE_ATTR`,
//!   to give the guest the host's TSC).
//! - `shoal-loader`: image checks, layout, boot state, TSC calibration and
//!   the checked accessor every guest-controlled address goes through.
//! - `shoal-abi`, `shoal-archive`: the ABI and the `--fs` archive.
//! - `thiserror`: one error enum per module; `libc`: errno and signal
//!   numbers.
#![deny(missing_docs)]

mod filemap;
mod forward;
#[cfg(feature = "fuzz")]
pub mod fuzz;
mod hypercall;
mod net;
mod preempt;
mod protect;
pub mod template;
pub mod vm;
pub mod x86;

pub use hypercall::{Console, Origin, ReadOnly, Refusal};
pub use net::NetStats;
pub use vm::KvmError;
pub use x86::SetupError;

use hypercall::Action;
use kvm_ioctls::VcpuExit;
use shoal_abi::{FaultArgs, Hypercall, TenderKind};
use shoal_loader::{BootParams, Clock, GuestMemory, Image, Layout};
use std::ffi::OsString;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

/// hvt stopped the guest (its own fault report, an invalid hypercall,
/// blocked forever, an unexpected vCPU stop); the same value as spt's.
pub const EXIT_STOPPED: i32 = 255;
/// The guest executed `syscall` (128 + SIGSYS, as a forbidden system call
/// on spt).
pub const EXIT_SIGSYS: i32 = 128 + libc::SIGSYS;
/// The guest exited but its `--volume` could not be written (the same
/// value as spt's `EXIT_TENDER_FAILED`: shoal itself failed).
pub const EXIT_TENDER_FAILED: i32 = 125;

pub use shoal_loader::{FsSource, MemoryMode};

/// What to run (shared with the other tender).
pub use shoal_loader::RunConfig;

/// Why an image could not be run. Problems of the guest itself are not
/// errors: they end the run with a status ([`Outcome`]).
#[derive(Debug, thiserror::Error)]
pub enum HvtError {
    /// The image was refused.
    #[error(transparent)]
    Image(#[from] shoal_loader::ImageError),
    /// A `--mount` directory could not be opened.
    #[error(transparent)]
    Mount(shoal_loader::mount::MountError),
    /// The memory layout could not be planned.
    #[error(transparent)]
    Layout(#[from] shoal_loader::LayoutError),
    /// More memory than hvt can give a guest.
    #[error("--mem {0} is too large for the hvt tender: hypercalls pass 32-bit addresses, so guest memory is at most 4G")]
    MemTooLarge(String),
    /// The root archive could not be made (`--fs`, `--volume`).
    #[error(transparent)]
    Root(#[from] shoal_loader::RootError),
    /// The library pool could not serve the image (mode `pool`).
    #[error(transparent)]
    Pool(#[from] shoal_loader::pool::PoolError),
    /// The console descriptors could not be duplicated.
    #[error("cannot use the console descriptors: {0}")]
    Console(std::io::Error),
    /// The clock calibration failed.
    #[error(transparent)]
    Tsc(#[from] shoal_loader::TscError),
    /// Guest memory could not be filled.
    #[error(transparent)]
    Boot(#[from] shoal_loader::BootError),
    /// The machine state could not be built.
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// KVM failed.
    #[error(transparent)]
    Kvm(#[from] KvmError),
    /// A published port or handed-over listener could not be set up.
    #[error(transparent)]
    Net(#[from] shoal_loader::net::NetError),
    /// A template (`shoal serve`) could not be set up.
    #[error("{0}")]
    Template(String),
    /// The signals handed to the guest could not be caught.
    #[error("cannot catch SIGTERM and SIGHUP for the guest: {0}")]
    Signals(std::io::Error),
}

/// How long the phases of a run took, from the call of [`run_with_console`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Timings {
    /// Image checks, layout and archive, before KVM is touched.
    pub prepare: Duration,
    /// Until the VM, its memory slot and vCPU exist (KVM only).
    pub vm_created: Duration,
    /// Until the VM is loaded and set up, ready for its first instruction.
    pub vm_ready: Duration,
    /// Until the first console byte was written, if any was.
    pub first_output: Option<Duration>,
    /// Until the guest stopped.
    pub exit: Duration,
    /// Number of VM exits handled.
    pub exits: u64,
    /// Of those, the hypercalls, by number (index = `Hypercall` value).
    pub hypercalls: [u64; shoal_abi::HYPERCALL_MAX as usize],
    /// What the network hypercalls did.
    pub net: net::NetStats,
}

/// How a guest run ended.
#[derive(Debug)]
pub enum Outcome {
    /// The guest halted with this status (already masked to 8 bits).
    Exit(i32),
    /// The guest took a CPU exception.
    Fault {
        /// The CPL-0 exception stub's report.
        report: FaultArgs,
        /// Always true: a report the guest makes itself is refused
        /// ([`Refusal::ForgedFault`]); kept so that callers can still say so.
        cpu: bool,
        /// Whether the faulting instruction was `syscall`.
        syscall: bool,
        /// For a page fault: what the access was, from the page tables.
        cause: Option<&'static str>,
    },
    /// The guest broke the hypercall protocol.
    Refused(Refusal),
    /// The guest polled with no deadline and nothing to wait for.
    BlockedForever,
    /// The vCPU stopped in a way a shoal guest never should.
    Stopped(String),
    /// The guest exited, but its volume could not be written (the
    /// message says why; the host directory is as it was).
    VolumeNotSaved(String),
    /// The VMM stopped the guest because its kernel did not take a
    /// forwarded signal (`shoal_loader::stop`): that signal and why.
    NotTaken(i32, shoal_loader::stop::NotTaken),
}

impl Outcome {
    /// The exit status `shoal run` reports (see the crate docs).
    pub fn status(&self) -> i32 {
        match self {
            Outcome::Exit(s) => *s,
            Outcome::Fault { syscall: true, .. } => EXIT_SIGSYS,
            Outcome::Fault { cpu: true, report, .. } => 128 + x86::vector_signal(report.vector),
            Outcome::Fault { cpu: false, .. } => EXIT_STOPPED,
            Outcome::Refused(_) | Outcome::BlockedForever | Outcome::Stopped(_) => EXIT_STOPPED,
            Outcome::VolumeNotSaved(_) => EXIT_TENDER_FAILED,
            Outcome::NotTaken(sig, _) => shoal_loader::stop::status(*sig),
        }
    }

    /// The one-line message for stderr (without the `shoal: ` prefix), or
    /// `None` for a normal exit.
    pub fn message(&self) -> Option<String> {
        match self {
            Outcome::Exit(_) => None,
            Outcome::Fault { report: f, syscall, cause, .. } => {
                let mut m = format!(
                    "guest fault: {} (vector {}, error {:#x}) at rip {:#x}, rsp {:#x}, cr2 {:#x}",
                    x86::vector_name(f.vector),
                    f.vector,
                    f.error_code,
                    f.rip,
                    f.rsp,
                    f.cr2
                );
                if *syscall {
                    m.push_str(": the guest executed a `syscall` instruction; shoal images make no host system calls");
                } else if let Some(c) = cause {
                    m.push_str(": ");
                    m.push_str(c);
                }
                Some(m)
            }
            Outcome::Refused(r) => Some(format!("the guest made an invalid hypercall: {r}")),
            Outcome::BlockedForever => Some("the guest blocked forever with nothing to wake it".into()),
            Outcome::Stopped(s) => Some(format!("hvt stopped the guest: {s}")),
            Outcome::VolumeNotSaved(s) => Some(s.clone()),
            Outcome::NotTaken(sig, why) => Some(shoal_loader::stop::message(*sig, *why)),
        }
    }
}

/// Makes a console write to a reader that went away fail with `EPIPE`
/// instead of killing the VMM with `SIGPIPE` (the `shoal` command restores
/// the default disposition for its own output): the error goes back to the
/// guest, whose kernel raises `SIGPIPE` in the program as Linux does, and
/// the instance ends as on spt (`shoal: killed by signal 13`, status 141),
/// or goes on where the program ignores or handles the signal.
fn console_errors_not_signals() {
    // SAFETY: setting SIGPIPE's disposition to SIG_IGN has no memory-safety
    // preconditions; no handler is involved.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
}

/// Runs the image described by `cfg` with the process's stdout and stderr
/// as console; returns the exit status (see the crate docs). A guest that
/// ends abnormally gets one `shoal: …` line on stderr.
pub fn run(cfg: &RunConfig) -> Result<i32, HvtError> {
    console_errors_not_signals();
    let file = |fd: &Option<OwnedFd>| -> Result<Option<std::fs::File>, HvtError> {
        fd.as_ref().map(|f| f.try_clone().map(std::fs::File::from)).transpose().map_err(HvtError::Console)
    };
    let (mut out_file, mut err_file) = (file(&cfg.stdout)?, file(&cfg.stderr)?);
    let mut out_std = std::io::stdout();
    let mut err_std = std::io::stderr();
    let stdout: &mut dyn Write = match &mut out_file {
        Some(f) => f,
        None => &mut out_std,
    };
    let stderr: &mut dyn Write = match &mut err_file {
        Some(f) => f,
        None => &mut err_std,
    };
    let mut console = Console { stdout, stderr };
    let (outcome, t) = run_with_console(cfg, &mut console)?;
    if let Some(m) = outcome.message() {
        let _ = writeln!(console.stderr, "shoal: {m}");
    }
    // Exits are what hvt's hot paths cost (docs/design.md "Host facts": ~27 µs each here);
    // SHOAL_HVT_STATS=1 counts them, to measure and compare.
    if std::env::var_os("SHOAL_HVT_STATS").is_some_and(|v| v == "1") {
        let _ = writeln!(console.stderr, "shoal: hvt stats: {}", t.stats_line());
    }
    Ok(outcome.status())
}

impl Timings {
    /// One line of exit counts: total, per hypercall, and what the network
    /// hypercalls did.
    pub fn stats_line(&self) -> String {
        let h = |c: Hypercall| self.hypercalls[c as usize];
        format!(
            "{} exits: console {}, poll {}, net {} ({} ops), net-poll {} ({} waited)",
            self.exits,
            h(Hypercall::ConsoleWrite),
            h(Hypercall::Poll),
            h(Hypercall::Net),
            self.net.ops,
            h(Hypercall::NetPoll),
            self.net.waits
        )
    }
}

/// What [`prepare`] produced: everything that can fail before KVM is
/// touched.
struct Prepared {
    image: Image,
    layout: Layout,
    archive: Vec<u8>,
    argv: Vec<OsString>,
    env: Vec<OsString>,
    params: BootParams,
    private: x86::Private,
    /// Where hypercall results must never be written.
    read_only: ReadOnly,
    pool: Option<shoal_loader::pool::PoolPlan>,
    /// Why mode `pool` fell back to `copy`, if it did.
    pool_warning: Option<shoal_loader::pool::PoolError>,
    /// The instance's sockets: its listeners, opened before boot.
    net: net::Net,
}

/// Refuses a guest memory size this tender cannot give.
fn check_mem(mem_size: u64) -> Result<(), HvtError> {
    if mem_size > x86::MAX_MEM {
        return Err(HvtError::MemTooLarge(shoal_loader::format_size(mem_size)));
    }
    Ok(())
}

/// What [`run`] would refuse of `cfg` before it creates a VM: a memory
/// size this tender cannot give, an image the loader rejects, a root file
/// system that cannot be packed, or an image, archive, arguments and
/// environment that do not fit the memory. For callers that must refuse
/// ahead of the run (`shoal serve` at deploy); `run` makes the same checks.
pub fn check(cfg: &RunConfig) -> Result<(), HvtError> {
    check_mem(cfg.mem_size)?;
    let image = Image::open(&cfg.image)?;
    let archive = shoal_loader::root_archive(cfg)?;
    shoal_loader::plan(&image, cfg.mem_size, archive.len() as u64, &cfg.argv, &cfg.env)?;
    Ok(())
}

fn prepare(cfg: &RunConfig) -> Result<Prepared, HvtError> {
    check_mem(cfg.mem_size)?;
    let image = Image::open(&cfg.image)?;
    let archive = shoal_loader::root_archive(cfg)?.into_owned();
    let argv = cfg.argv.clone();
    let env = cfg.env.clone();
    let layout = shoal_loader::plan(&image, cfg.mem_size, archive.len() as u64, &argv, &env)?;
    let regions: Vec<x86::Region> = image
        .segments()
        .iter()
        .map(|s| x86::Region {
            start: s.page_start(),
            end: s.page_end(),
            perm: if s.perms.exec {
                x86::PagePerm::UserRx
            } else if s.perms.write {
                x86::PagePerm::UserRw
            } else {
                x86::PagePerm::UserRo
            },
        })
        .collect();
    let private = x86::build(layout.mem_size, &regions, layout.image_start, layout.image_end)?;
    let read_only = read_only_ranges(&image, &layout);
    let hz = shoal_loader::tsc::tsc_hz()?;
    let mut params = BootParams::new(TenderKind::Hvt, 0, Clock::now(hz))?;
    params.inject = cfg.inject.unwrap_or_default();
    params.rejuvenate_ns = cfg.rejuvenate_ns;
    params.watchdog_ns = cfg.watchdog_ns;
    params.recover_flags = cfg.recover_flags();
    params.cwd = shoal_loader::boot_cwd(&cfg.cwd);
    (params.uid, params.gid) = (cfg.guest_uid, cfg.guest_gid);
    params.hostname = shoal_loader::boot_hostname(&cfg.hostname);
    params.syscall_errno = shoal_loader::boot_syscall_errno(&cfg.syscall_errno);
    if let Some(v) = &cfg.volume {
        params.volume_path = v.boot_path();
        // The whole volume archive lies in guest memory: it cannot be larger.
        params.volume_max = cfg.mem_size;
    }
    let net = open_net(cfg, &mut params)?;
    let (pool, pool_warning) =
        if cfg.mode == MemoryMode::Pool { shoal_loader::pool::prepare(cfg.pool.as_ref(), cfg.pool_fallback, &image)? } else { (None, None) };
    Ok(Prepared { image, layout, archive, argv, env, params, private, read_only, pool, pool_warning, net })
}

/// Opens the published ports and adopts the handed-over listeners (before
/// boot, as spt does: a connection that arrives during boot waits in the
/// host's backlog) and tells the guest about them in `params`: listener
/// `i` is handle `FIRST_HANDLE + i` of the VMM's table. `--net-allow`
/// implies outbound (limited to its rules).
fn open_net(cfg: &RunConfig, params: &mut BootParams) -> Result<net::Net, HvtError> {
    let opened = shoal_loader::net::open_listeners(&cfg.net)?;
    let outbound = cfg.net.outbound || !cfg.net.allow.is_empty();
    if !opened.is_empty() || outbound || cfg.net.bind_any {
        raise_nofile();
    }
    params.listener_count = opened.len() as u64;
    params.net_flags = if outbound { shoal_abi::NET_OUTBOUND } else { 0 } | if cfg.net.bind_any { shoal_abi::NET_BIND_ANY } else { 0 };
    let mut fds = Vec::with_capacity(opened.len());
    for (i, (fd, l)) in opened.into_iter().enumerate() {
        // open_listeners returns at most MAX_LISTENERS.
        if let Some(slot) = params.listeners.get_mut(i) {
            *slot = shoal_abi::Listener { handle: net::FIRST_HANDLE + i as i64, ..l };
        }
        fds.push(fd);
    }
    let n = net::Net::new(fds, outbound, cfg.net.allow.clone()).with_bind_any(cfg.net.bind_any);
    if n.watching() {
        params.net_flags |= shoal_abi::NET_WATCH;
    }
    Ok(n)
}

/// Raises the descriptor limit to its hard limit: each guest connection is
/// a descriptor of this process (a server with 1,000 clients needs more
/// than the usual soft limit of 1,024). Best effort.
fn raise_nofile() {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit with a valid, owned rlimit.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

/// The guest ranges spt maps read-only, and which hypercall results must
/// therefore never be written to on hvt either: the image's code and
/// read-only data, the archive and the boot-info page (whole pages, as
/// spt protects them).
fn read_only_ranges(image: &Image, layout: &Layout) -> ReadOnly {
    let page = shoal_abi::PAGE_SIZE;
    let mut ro: Vec<(u64, u64)> = image.segments().iter().filter(|s| !s.perms.write).map(|s| (s.page_start(), s.page_end())).collect();
    if layout.archive_size > 0 {
        // No overflow: the layout placed the archive inside guest memory.
        let end = (layout.archive_addr + layout.archive_size).next_multiple_of(page);
        ro.push((layout.archive_addr, end));
    }
    ro.push((shoal_abi::BOOT_INFO_ADDR, shoal_abi::BOOT_INFO_ADDR + page));
    ReadOnly(ro)
}

/// Runs the image described by `cfg`, writing the guest's console streams
/// to `console`; returns how the guest ended and how long it took. Does not
/// print anything itself.
pub fn run_with_console(cfg: &RunConfig, console: &mut Console<'_>) -> Result<(Outcome, Timings), HvtError> {
    let t0 = Instant::now();
    let mut p = prepare(cfg)?;
    let mut timings = Timings { prepare: t0.elapsed(), ..Timings::default() };

    if let Some(w) = &p.pool_warning {
        let _ = writeln!(console.stderr, "shoal: warning: {w}; falling back to memory mode copy");
    }
    let mem_size = p.layout.mem_size;
    // `shoal serve` made this run a template (crate::template).
    let mut side = template::Side::from_env(mem_size).map_err(HvtError::Template)?;
    let (mode, pool) = (cfg.mode, p.pool.as_ref());
    let mut vm = vm::Vm::create_with(mem_size, &mut |memory| {
        let base = memory.as_ptr() as u64;
        if let Some(s) = &side {
            s.back_memory(memory)
                .map_err(|e| vm::KvmError::Memory { size: mem_size, reason: format!("cannot back it with the template's memory file: {e}") })?;
        }
        if let Some(plan) = pool {
            // SAFETY: the pool ranges lie in the image's read-only segments,
            // which `plan` placed inside guest memory [0, mem_size), all of
            // which this fresh mapping backs at `base`; nothing references
            // it yet, and KVM does not know it yet. Mapped R+W private (the
            // guest's page tables decide what the guest may do; a host
            // write only un-shares one page).
            unsafe { plan.map_into(base, |_| libc::PROT_READ | libc::PROT_WRITE) }.map_err(|(addr, e)| vm::KvmError::Memory {
                size: mem_size,
                reason: format!("cannot map the library pool at guest address {addr:#x}: {}", std::io::Error::from_raw_os_error(e)),
            })?;
        }
        if mode == MemoryMode::Ksm {
            // Best effort, as on spt: without KSM the instance runs unshared.
            // SAFETY: advice only, on this private anonymous mapping.
            let _ = unsafe { libc::madvise(memory.as_ptr().cast(), mem_size as usize, libc::MADV_MERGEABLE) };
        }
        Ok(())
    })?;
    if let Some(s) = &side {
        s.back_tables(&vm.tables).map_err(|e| HvtError::Template(format!("cannot back the page-table pool with the template's memory file: {e}")))?;
    }
    timings.vm_created = t0.elapsed();
    // SAFETY: `vm.memory` maps `mem_size` bytes for guest addresses
    // [0, mem_size) at `as_ptr()`; the view starts at guest address
    // GuestMemory::LOW (< mem_size, checked by x86::build), and lives in
    // this function only, while `vm` (which owns the mapping) is alive. The
    // mapping is memory no Rust reference points into (anonymous, and in
    // mode `pool` read-only pool pages the tender never writes).
    let mem = unsafe { GuestMemory::new(vm.memory.as_ptr().wrapping_add(GuestMemory::LOW as usize), p.layout.mem_size) };
    let pool_ranges = p.pool.as_ref().map(|pl| pl.ranges()).unwrap_or_default();
    shoal_loader::load_segments_except(&mem, &p.image, &pool_ranges)?;
    shoal_loader::load_archive(&mem, &p.layout, &p.archive)?;
    // The clock pair as close to the first guest instruction as possible.
    p.params.clock = Clock::now(p.params.clock.tsc_hz);
    let entry = shoal_loader::write_boot_state(&mem, &p.image, &p.layout, &p.argv, &p.env, &p.params)?;
    p.image.release_data();
    vm::prepare(&vm, &p.private.bytes, &entry)?;
    // A Linux executable: a `syscall` its rewriting left goes to the
    // kernel's system-call entry (see Vm::exec_syscall_entry).
    if let Some(e) = p.image.exec_entry() {
        vm.exec_syscall_entry(e)?;
    }
    // The tables are in guest memory now; only their map stays needed
    // (fault reports), not the 64 KiB of bytes they were built in.
    p.private.bytes = Vec::new();
    timings.vm_ready = t0.elapsed();

    let mut wrote = false;
    let run_time_code = p.image.exec_entry().is_some();
    let tables = protect::Tables { low: &vm.memory, pool: &vm.tables, heap_start: p.layout.heap_start, mem_size, run_time_code };
    // A template records the mounted files it maps, for its copies to map
    // them again (crate::filemap).
    let file_maps =
        side.as_ref().map(|s| s.file_maps()).transpose().map_err(|e| HvtError::Template(format!("cannot keep the template's file mappings: {e}")))?;
    let recording = file_maps.as_ref().map(|maps| filemap::Recording { tables: &tables, maps });
    let mapper: &dyn shoal_hostcall::hostfs::Mapper = match &recording {
        Some(r) => r,
        None => &tables,
    };
    // What KVM must forget after a hypercall that took access away from
    // some pages: their translations, or its whole shadow of the page
    // tables, dropped after the handler, in this loop (`protect` says why
    // only then); the guest flushes its TLB itself afterwards (int3 with
    // shoal_abi::HVT_TLB_FLUSH_MAGIC).
    let changed = std::cell::Cell::new(protect::Forget::Nothing);
    let apply = |a: &shoal_abi::ProtectArgs| {
        let (r, f) = tables.protect_pages(a)?;
        changed.set(changed.get().and(f));
        Ok(r)
    };
    let alias = |a: &shoal_abi::AliasArgs| {
        let (r, f) = tables.alias_pages(a)?;
        changed.set(changed.get().and(f));
        Ok(r)
    };
    let release = |addr: u64, len: u64| tables.release(addr, len);
    let kept = std::cell::RefCell::new(None);
    let volume = cfg.volume.as_ref().map(|_| (&kept, p.params.volume_max));
    let fault_handler = std::cell::Cell::new(None);
    let program_fault = std::cell::Cell::new(None);
    // --mount: each host directory opened once; every open on the guest's
    // behalf is confined beneath it (shoal_hostcall::hostfs); a single
    // file is opened once, and is all that mount reaches.
    let mount_fds = shoal_loader::mount::open_all(&cfg.mounts).map_err(HvtError::Mount)?;
    let mut mounts = shoal_hostcall::hostfs::Mounts::default();
    for (fd, m) in mount_fds.iter().zip(&cfg.mounts) {
        mounts.push(std::os::fd::AsRawFd::as_raw_fd(fd), m.guest.as_bytes(), m.writable, m.file);
    }
    // What the VMM makes for the guest beneath a writable mount is the
    // guest's user's (`--user`), as a file a Linux process makes.
    // SAFETY: geteuid has no preconditions.
    if mounts.any_writable() && unsafe { libc::geteuid() } == 0 {
        mounts.set_owner(cfg.guest_uid, cfg.guest_gid);
    }
    let guest = hypercall::Guest {
        mem: &mem,
        private: &vm.memory,
        read_only: &p.read_only,
        protect: Some(&apply),
        alias: Some(&alias),
        release: Some(&release),
        volume,
        fault: Some(&fault_handler),
        program: Some(&program_fault),
        mounts: (!mounts.is_empty()).then_some(&mounts),
        file_maps: Some(mapper),
    };
    let mut buffer = None;
    // SIGTERM and SIGHUP go to the guest while it runs (crate::forward);
    // its word is forgotten before guest memory goes away.
    struct Forgets;
    impl Drop for Forgets {
        fn drop(&mut self) {
            forward::clear();
            preempt::clear();
        }
    }
    let _forgets = Forgets;
    forward::install().map_err(HvtError::Signals)?;
    preempt::install(cfg.watchdog_ns).map_err(HvtError::Signals)?;
    // What preparing the VM freed (the image's headers, the boot state's
    // buffers, KVM's setup) goes back to the host before the guest runs,
    // rather than staying in the heap for the instance's whole life.
    // SAFETY: malloc_trim only releases free heap memory.
    unsafe { libc::malloc_trim(0) };
    preempt::set_immediate_exit(&mut vm.vcpu.get_kvm_run().immediate_exit);
    // A forwarded signal the kernel does not take in time ends the run here.
    let mut grace = forward::Grace::new(cfg.stop_timeout_ns);
    let outcome = loop {
        // What a signal arriving from here on asks for is seen below or
        // ends the next KVM_RUN at once.
        preempt::unkick();
        // A preemption tick stopped KVM_RUN (EINTR) or came during an exit.
        if preempt::take_tick() {
            let hang = preempt::HangExit { handler: fault_handler.get(), mem: &mem };
            if let Err(e) = preempt::tick(&vm.vcpu, GuestMemory::LOW, mem_size, &hang) {
                break Outcome::Stopped(e);
            }
        }
        // So did a forwarded SIGTERM or SIGHUP.
        if forward::take_arrived() {
            if let Err(e) = preempt::interrupt(&vm.vcpu, GuestMemory::LOW, mem_size) {
                break Outcome::Stopped(e);
            }
        }
        match grace.check() {
            Ok(None) => {}
            Ok(Some((sig, why))) => break Outcome::NotTaken(sig, why),
            Err(e) => break Outcome::Stopped(e),
        }
        let exit = match vm.vcpu.run() {
            Ok(e) => e,
            Err(e) if e.errno() == libc::EINTR || e.errno() == libc::EAGAIN => continue,
            Err(e) => break Outcome::Stopped(format!("KVM_RUN failed: {e}")),
        };
        timings.exits += 1;
        // The exit borrows the vCPU; the hypercall is decoded into owned
        // values first, so that its handler may ask the vCPU for registers.
        let call = match exit {
            VcpuExit::IoOut(port, data) => hypercall::decode(port, data),
            VcpuExit::IoIn(port, _) => Err(Refusal::PortRead(port)),
            VcpuExit::Hlt => break Outcome::Stopped("the vCPU executed `hlt`".into()),
            VcpuExit::Shutdown => break Outcome::Stopped("the vCPU shut down (triple fault: an exception while reporting an exception)".into()),
            VcpuExit::MmioRead(addr, _) | VcpuExit::MmioWrite(addr, _) => break Outcome::Stopped(format!("the guest accessed {addr:#x}, outside its memory")),
            VcpuExit::InternalError => break Outcome::Stopped("KVM reported an internal error".into()),
            VcpuExit::FailEntry(reason, _) => break Outcome::Stopped(format!("KVM could not enter the guest (hardware reason {reason:#x})")),
            other => break Outcome::Stopped(format!("unexpected VM exit {other:?}")),
        };
        let action = match call {
            Ok((call, arg)) => {
                // A template's ready point: the first wait that sleeps after
                // an accept found nothing, or the program's write to the
                // ready device. Only a copy comes back, with its own VM, to
                // carry this hypercall out on its own sockets.
                if side.as_ref().is_some_and(|s| s.at_ready_point(call, p.net.accept_waited(), &mem, arg)) {
                    if let Some(s) = side.take() {
                        let parts = template::Parts {
                            vcpu: &mut vm.vcpu,
                            memory: &vm.memory,
                            tables: &vm.tables,
                            net: &mut p.net,
                            pool: p.pool.as_ref(),
                            ksm: cfg.mode == MemoryMode::Ksm,
                            file_maps: file_maps.as_ref(),
                        };
                        match s.serve(parts) {
                            Ok(own) => {
                                vm.vcpu = own.vcpu;
                                vm._vm = own.vm;
                                vm._kvm = own.kvm;
                                preempt::set_immediate_exit(&mut vm.vcpu.get_kvm_run().immediate_exit);
                            }
                            Err(e) => break Outcome::Stopped(e),
                        }
                    }
                }
                if let Some(n) = timings.hypercalls.get_mut(call as usize) {
                    *n += 1;
                }
                let a = hypercall::handle(call, arg, &guest, &mut p.net, &mut || vcpu_origin(&vm.vcpu), console, &mut wrote, &mut buffer);
                let forgot = match changed.get() {
                    protect::Forget::Nothing | protect::Forget::Later => Ok(()),
                    protect::Forget::Pages(lo, hi) => vm.forget_pages(lo, hi),
                    protect::Forget::All => vm.forget_translations(),
                };
                if !matches!(changed.get(), protect::Forget::Later) {
                    changed.set(protect::Forget::Nothing);
                }
                if let Err(e) = forgot {
                    break Outcome::Stopped(e.to_string());
                }
                if wrote && timings.first_output.is_none() {
                    timings.first_output = Some(t0.elapsed());
                }
                a
            }
            Err(r) => Action::Refused(r),
        };
        match action {
            Action::Continue => {}
            Action::Halt(status) => break Outcome::Exit((status & 0xff) as i32),
            Action::BlockedForever => break Outcome::BlockedForever,
            Action::Fault(report) => {
                let (report, syscall) = recognise_syscall(&vm, &mem, report);
                if !syscall {
                    match hand_back(&vm, &mem, fault_handler.get(), &report) {
                        Ok(true) => continue,
                        Ok(false) => {}
                        Err(e) => break Outcome::Stopped(e.to_string()),
                    }
                    match program_fault_back(&vm, &mem, &p.read_only, program_fault.get(), &report) {
                        Ok(true) => continue,
                        Ok(false) => {}
                        Err(e) => break Outcome::Stopped(e.to_string()),
                    }
                }
                let cause = (report.vector == 14 && !syscall).then(|| x86::page_fault_cause(report.error_code, p.private.map.perm(report.cr2)));
                break Outcome::Fault { report, cpu: true, syscall, cause };
            }
            Action::Refused(r) => break Outcome::Refused(r),
            Action::Stopped(s) => break Outcome::Stopped(s),
        }
    };
    // Output the guest buffered and could not flush comes before the
    // VMM's message about how it ended (a halting kernel has flushed).
    if let Some(b) = buffer {
        b.drain(&mem, console);
    }
    // How many preemption ticks reached the instance, when asked (the
    // tests check that a program with one thread gets none).
    if std::env::var_os("SHOAL_PREEMPT_STATS").is_some() {
        let _ = writeln!(console.stderr, "shoal: preemption ticks: {}\nshoal: watchdog ticks: {}", preempt::ticks(), preempt::watchdog_ticks());
    }
    // Only a guest that halted keeps its volume (a fault, a refused
    // hypercall or a stop leaves the host directory as it was).
    let outcome = match (&cfg.volume, &outcome, kept.into_inner()) {
        (Some(v), Outcome::Exit(_), Some(archive)) => match shoal_loader::volume::store(&v.host, &archive) {
            Ok(()) => outcome,
            Err(e) => Outcome::VolumeNotSaved(e.to_string()),
        },
        _ => outcome,
    };
    timings.exit = t0.elapsed();
    timings.net = p.net.stats;
    Ok((outcome, timings))
}

/// Where the vCPU is, for a write to the fault port: its privilege level
/// is the RPL of CS (in 64-bit mode CS.RPL = SS.DPL = CPL).
fn vcpu_origin(vcpu: &kvm_ioctls::VcpuFd) -> Result<Origin, String> {
    let sregs = vcpu.get_sregs().map_err(|e| format!("KVM refused to read the special registers: {e}"))?;
    let regs = vcpu.get_regs().map_err(|e| format!("KVM refused to read the registers: {e}"))?;
    Ok(Origin { cpl: (sregs.cs.selector & 3) as u8, rip: regs.rip })
}

/// Whether a fault report comes from a `syscall` instruction, and the
/// report to show for it. On hardware, `syscall` with EFER.SCE clear raises
/// #UD at the instruction. This nested KVM ignores SCE and jumps to LSTAR,
/// which hvt points at [`x86::SYSCALL_TRAP`] (not present), so the report
/// is a page fault there, with rcx = the address after the instruction; it
/// is shown as the #UD hardware would give.
/// Hands a CPU fault of guest code back to the guest's kernel when it
/// asked for it (`Hypercall::FaultHandler`) and its armed word is set (as
/// spt's crash handler does with a SIGSEGV): the vCPU returns to CPL 3 at
/// the kernel's entry, on the faulting stack below its red zone, with the
/// signal the fault stands for, the faulting address (`cr2` of a page
/// fault) and the faulting instruction as arguments; the exception stub's
/// stack is abandoned (the next exception starts it afresh). Only page and
/// general-protection faults of an instruction in guest memory are handed
/// back. A hostile guest gains nothing: it jumps to its own code at CPL 3
/// with registers it chose.
fn hand_back(vm: &vm::Vm, mem: &GuestMemory, handler: Option<(u64, u64)>, report: &FaultArgs) -> Result<bool, vm::KvmError> {
    let Some((entry, armed)) = handler else { return Ok(false) };
    if !matches!(report.vector, 13 | 14) {
        return Ok(false);
    }
    if !matches!(mem.read_obj::<u64>(shoal_loader::GuestAddr(armed)), Ok(w) if w != 0) {
        return Ok(false);
    }
    let new_sp = (report.rsp.wrapping_sub(128) & !15).wrapping_sub(8);
    if !mem.contains(shoal_loader::GuestAddr(report.rip), 1) || !mem.contains(shoal_loader::GuestAddr(new_sp), 8) {
        return Ok(false);
    }
    let addr = if report.vector == 14 { report.cr2 } else { 0 };
    vm.resume_at_cpl3(entry, new_sp, [x86::vector_signal(report.vector) as u64, addr, report.rip])?;
    Ok(true)
}

/// Hands a CPU fault of the program to the kernel when it registered its
/// program-fault entry (`Hypercall::ProgramFault`; after recovery
/// declined it): the faulting registers, which this VMM reads itself (the
/// vCPU's, and the rax, rdx and rflags the exception stub saved below its
/// report in its own page, which the guest cannot write), and the signal
/// Linux would raise, go into the kernel's area, and the vCPU returns to
/// CPL 3 at the entry below the faulting frame's red zone. Only an
/// instruction in guest memory, only the guest's own entry: a hostile
/// guest gains nothing it could not do by jumping.
fn program_fault_back(vm: &vm::Vm, mem: &GuestMemory, ro: &hypercall::ReadOnly, program: Option<(u64, u64)>, report: &FaultArgs) -> Result<bool, vm::KvmError> {
    let Some((entry, area)) = program else { return Ok(false) };
    let size = core::mem::size_of::<shoal_abi::ProgramFaultArea>() as u64;
    let new_sp = (report.rsp.wrapping_sub(128) & !15).wrapping_sub(8);
    if !mem.contains(shoal_loader::GuestAddr(report.rip), 1) || !mem.contains(shoal_loader::GuestAddr(new_sp), 8) || !ro.writable(mem, area, size) {
        return Ok(false);
    }
    let mut raw = [0u8; 24];
    if vm_memory::Bytes::read_slice(&vm.memory, &mut raw, vm_memory::MemoryRegionAddress(x86::FAULT_SAVED_ADDR)).is_err() {
        return Ok(false);
    }
    let word = |i: usize| raw[i * 8..i * 8 + 8].iter().rev().fold(0u64, |w, &b| w << 8 | u64::from(b));
    let (rflags, rdx, rax) = (word(0), word(1), word(2));
    let Ok(r) = vm.vcpu.get_regs() else { return Ok(false) };
    let sig = x86::vector_signal(report.vector);
    // si_code and si_addr as Linux's trap handlers give them.
    let (code, addr) = match report.vector {
        14 => (if report.error_code & 1 == 0 { 1 } else { 2 }, report.cr2),
        0 => (1, report.rip),
        6 => (2, report.rip),
        _ => (0x80, 0),
    };
    let a = shoal_abi::ProgramFaultArea {
        regs: [r.r8, r.r9, r.r10, r.r11, r.r12, r.r13, r.r14, r.r15, r.rdi, r.rsi, r.rbp, r.rbx, rdx, rax, r.rcx, report.rsp, report.rip, rflags],
        signo: sig as u64,
        code,
        addr,
        trapno: report.vector,
        err: report.error_code,
        cr2: if report.vector == 14 { report.cr2 } else { 0 },
    };
    if mem.write_obj(shoal_loader::GuestAddr(area), &a).is_err() {
        return Ok(false);
    }
    vm.resume_at_cpl3(entry, new_sp, [0, 0, 0])?;
    Ok(true)
}

fn recognise_syscall(vm: &vm::Vm, mem: &GuestMemory, report: FaultArgs) -> (FaultArgs, bool) {
    let is_syscall_at = |rip: u64| {
        let mut insn = [0u8; 2];
        mem.read(shoal_loader::GuestAddr(rip), &mut insn).is_ok() && insn == [0x0f, 0x05]
    };
    if report.vector == 6 {
        return (report, is_syscall_at(report.rip));
    }
    if report.vector == 14 && report.rip == x86::SYSCALL_TRAP && report.cr2 == x86::SYSCALL_TRAP {
        if let Ok(regs) = vm.vcpu.get_regs() {
            let rip = regs.rcx.wrapping_sub(2);
            if is_syscall_at(rip) {
                return (FaultArgs { vector: 6, error_code: 0, rip, rsp: report.rsp, cr2: 0 }, true);
            }
        }
    }
    (report, false)
}
