//! spt: the seccomp-sandboxed process tender (docs/design.md "Tenders and hypercalls").
//!
//! [`run`] runs one shoal image in a child process and returns the
//! instance's exit status:
//!
//! 1. In the calling process (the *front end*): read and check the image,
//!    pack or check the file-system archive, plan the guest layout,
//!    calibrate the TSC (cached per host boot), open and verify the pool
//!    files. Any failure here is an [`SptError`]; nothing has run yet.
//! 2. Start a child (`clone` sharing memory until its `exec`, as
//!    `posix_spawn` does; as root into new PID, mount and IPC namespaces) that
//!    `exec`s the instance program [`INSTANCE_PROGRAM`] (`shoal-spt`, built
//!    beside `shoal`) with no environment but one fixed variable (malloc tunables), no arguments, and only
//!    the descriptors it boots from (`front`, `spec`): the guest shares its
//!    address space with this process, so it must start from a clean image
//!    that holds nothing of the caller's.
//! 3. The instance (`instance`) reads the boot spec, checks the image again,
//!    confines itself as root (`confine`: empty network namespace, empty
//!    root, user nobody, new user namespace, no capabilities), maps guest
//!    memory `[BOOT_INFO_ADDR, mem_size)` at its own address (private,
//!    anonymous, `MAP_NORESERVE`, `MAP_FIXED_NOREPLACE`), reads the
//!    segments from the image's descriptor into it (memory mode `copy`, or
//!    `ksm`: the same plus `MADV_MERGEABLE`, or `pool`: the verified pool
//!    files mapped), maps the file-system archive (a memfd the front end
//!    sealed against any change, mapped private and read-only), closes
//!    every descriptor but 0-2, writes the boot state, protects code R+X,
//!    read-only data, the archive and the boot-info page R, installs the
//!    SIGSYS/crash handlers, sets `no_new_privs`, installs the seccomp
//!    filter (`crate::filter`: `write` to fd 1/2, `exit_group`,
//!    `clock_nanosleep` on CLOCK_MONOTONIC, relative, `restart_syscall` —
//!    nothing else) and jumps to the entry with `rdi` = boot info and `rsp`
//!    = the initial process stack. A failure there prints `shoal: …` and
//!    exits with [`EXIT_TENDER_FAILED`].
//! 4. The front end waits and maps the instance's end to a status.
//!
//! [`Prepared`] does step 1 once for many instances (`shoal serve`'s
//! functions) and then step 2 for each, with the caller as the
//! instance's parent instead of a waiting front end.
//!
//! [`run_in_place`] does step 2 without the fork (Solo5's spt is always one
//! process): the calling process `exec`s the instance program itself; no
//! waiting parent, the signal handlers print the messages and pick the
//! statuses themselves.
//!
//! # Exit statuses
//!
//! | status | meaning |
//! |---|---|
//! | 0–255 | the guest halted with this status (the low 8 bits of `HaltArgs::status`) |
//! | [`EXIT_TENDER_FAILED`] (125) | the child could not start the guest (message `shoal: …`), or the guest exited but its `--volume` was not written (`shoal: the volume … was not saved: …`; the host directory is unchanged) |
//! | [`EXIT_SIGSYS`] (159 = 128 + SIGSYS) | the guest made a forbidden system call: `shoal: the guest made a system call that the spt sandbox forbids and was killed (system call N, name)` |
//! | 128 + N | the guest died by signal N: `shoal: the guest crashed: SIGSEGV (invalid memory access at 0x…, rip 0x…)`, or `shoal: the guest was killed by SIGKILL` |
//! | [`EXIT_STOPPED`] (255) | spt stopped the guest: a fault hypercall (`shoal: guest fault: vector …`), an invalid hypercall (argument structure outside guest memory or in read-only memory, unknown number: `shoal: the guest made an invalid hypercall: …`), or a poll with no deadline and nothing to wait for (`shoal: the guest blocked forever with nothing to wake it`) |
//!
//! A guest can itself halt with 125, 159 or 255; the message on stderr is
//! what tells them apart.
//!
//! # What the sandbox does and does not protect
//!
//! The guest shares the instance's address space with spt's own code and
//! data and can read and write any page of it, which is why that process
//! is a fresh `exec` holding only what the guest gets anyway. spt's
//! protection is the seccomp filter, which holds whatever the guest does:
//! the worst a guest can do is use the four allowed system calls (write to
//! its own stdout/stderr, sleep, resume that sleep, exit), and lie about
//! its own death in the report page (threat model: docs/architecture.md). The checks
//! on hypercall arguments make a buggy guest fail with a clear message
//! instead of crashing spt.
//!
//! # Dependencies
//!
//! - `shoal-abi`: the hypercall numbers and argument structures.
//! - `shoal-loader`: image checks, layout, boot state, TSC calibration,
//!   checked guest-memory access (shared with hvt).
//! - `shoal-archive` (feature `std`): packs `--fs DIR` and checks archives
//!   passed in packed.
//! - `seccompiler` (rust-vmm, Firecracker's): compiles the allow-list to
//!   BPF and installs it; its arch check kills non-x86-64 system calls.
//! - `libc`: the system calls (clone, execveat, mmap, mprotect, sigaction, mount, setresuid, …), each
//!   wrapped once in `sys`.
//! - `thiserror`: error enums with sentence-like messages.
#![deny(missing_docs)]

mod child;
mod confine;
pub mod filter;
mod front;
#[cfg(feature = "fuzz")]
pub mod fuzz;
mod hypercall;
pub mod instance;
mod landlock;
mod net;
mod preempt;
mod prepared;
mod protect;
mod relay;
mod signals;
mod spec;
mod supervise;
mod sys;
mod template;

use shoal_loader::{plan, Image};
use signals::Report;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The child could not start the guest.
pub const EXIT_TENDER_FAILED: i32 = 125;
/// The guest made a forbidden system call (128 + SIGSYS).
pub const EXIT_SIGSYS: i32 = 128 + libc::SIGSYS;
/// spt stopped the guest (fault, invalid hypercall, blocked forever).
pub const EXIT_STOPPED: i32 = 255;

/// The spec's bit mask of the writable mounts (`HOSTDIR:GUESTDIR:rw`).
pub(crate) fn writable_mounts(mounts: &[shoal_loader::mount::Mount]) -> u64 {
    mounts.iter().enumerate().filter(|(_, m)| m.writable).fold(0, |b, (i, _)| b | 1 << i)
}

/// Where the instance keeps the `O_PATH` descriptors of its host
/// directories (`--mount`): mount `i` at `MOUNT_FD0 + i`, a fixed range the
/// filter names (`crate::filter`), above every boot descriptor and below
/// the usual 1024 soft limit.
pub const MOUNT_FD0: i32 = 1000;

/// Largest guest memory spt accepts (1 TiB): well below where Linux puts a
/// position-independent tender and its libraries.
pub const MAX_MEM: u64 = 1 << 40;

pub use shoal_loader::{FsSource, MemoryMode};

/// The `posix_spawn`-style start (no copy of the caller's address space)
/// and the signal reset its child needs: `shoal serve` starts its
/// instances the same way (`serve::spawn`).
pub use sys::{reset_signals, spawn_with};

/// A function prepared once for many instances (`shoal serve`), started
/// with one `exec` each and confined as [`run`] confines.
pub use prepared::{InstanceIo, Prepared};

/// Where a template stops (`Prepared::spawn_template_at`).
pub use shoal_abi::ReadyPoint;
/// A template's control channel (`shoal serve`'s cold starts by copy).
pub use template::{end_orphaned_templates, CopyIo, Template, TemplateError, WATCHER_NAME};

/// What to run (shared with the other tender).
pub use shoal_loader::RunConfig;

/// Why spt could not run the image. Nothing of the guest ran.
#[derive(Debug, thiserror::Error)]
pub enum SptError {
    /// The image was refused.
    #[error(transparent)]
    Image(#[from] shoal_loader::ImageError),
    /// The layout could not be planned (too little memory, arguments too large).
    #[error(transparent)]
    Layout(#[from] shoal_loader::LayoutError),
    /// The root archive could not be made (`--fs`, `--volume`).
    #[error(transparent)]
    Root(#[from] shoal_loader::RootError),
    /// `--net-bind-any` without a waiting parent, which binds the sockets.
    #[error("--net-bind-any needs the waiting parent process, which binds the host sockets the guest asks for; drop --single-process")]
    BindAnyNeedsParent,
    /// A UDP port without outbound and without a waiting parent, which
    /// relays its datagrams.
    #[error(
        "a UDP port (--publish …/udp, --listen-fd) without --net-outbound needs the waiting parent process, which relays its datagrams; drop --single-process"
    )]
    UdpNeedsParent,
    /// `--uid-range` without a waiting parent, which holds the uid.
    #[error("--uid-range needs the waiting parent process, which holds the instance's uid while it runs; drop --single-process")]
    UidRangeNeedsParent,
    /// No uid of `--uid-range` could be claimed.
    #[error(transparent)]
    Uid(#[from] shoal_loader::uids::UidError),
    /// `--volume` without a waiting parent, which writes the directory.
    #[error("--volume needs the waiting parent process, which writes the host directory when the instance ends; drop --single-process")]
    VolumeNeedsParent,
    /// A `--mount` could not be used.
    #[error(transparent)]
    Mount(#[from] shoal_loader::mount::MountError),
    /// `--mount` by a caller who cannot confine the instance to it.
    #[error("--mount on spt needs root (the instance reaches the host directories through read-only clones of them in its own empty root); run as root or use --tender hvt")]
    MountNeedsRoot,
    /// Boot parameters (random bytes) could not be made.
    #[error(transparent)]
    Boot(#[from] shoal_loader::BootError),
    /// The library pool could not serve the image (mode `pool`).
    #[error(transparent)]
    Pool(#[from] shoal_loader::pool::PoolError),
    /// The TSC could not be calibrated.
    #[error(transparent)]
    Tsc(#[from] shoal_loader::TscError),
    /// The seccomp filter could not be compiled (a bug in spt).
    #[error("cannot compile the seccomp filter: {0}")]
    Filter(#[from] filter::FilterError),
    /// The CPU or kernel does not allow `rdfsbase`/`wrfsbase` in user mode.
    #[error("this host does not allow the FSGSBASE instructions in user mode (Linux 5.9 or later on a CPU with FSGSBASE is needed); spt cannot switch between guest and tender thread pointers without them")]
    NoFsgsbase,
    /// Guest memory larger than spt supports.
    #[error("--mem {0} is larger than spt supports ({max})", max = shoal_loader::format_size(MAX_MEM))]
    TooMuchMemory(String),
    /// The network could not be set up (`--publish`, `--listen-fd`).
    #[error(transparent)]
    Net(#[from] shoal_loader::net::NetError),
    /// Landlock could not be applied.
    #[error(transparent)]
    Landlock(#[from] landlock::LandlockError),
    /// The instance program is not installed.
    #[error("cannot find the spt instance program {INSTANCE_PROGRAM} (looked for {0}); build it with cargo build --release")]
    NoInstanceProgram(PathBuf),
    /// The image needs more pool files than an instance may hold open.
    #[error("the image needs {0} library-pool files, more than an instance maps ({max}); use --mem-mode copy or ksm", max = spec::MAX_POOL_FILES)]
    TooManyPoolFiles(usize),
    /// A system call of the parent failed (fork, waitpid, mmap).
    #[error("cannot {what}: {source}")]
    Sys {
        /// What was being done.
        what: &'static str,
        /// What the system said.
        source: std::io::Error,
    },
}

/// The report page shared with the instance process (see `signals`): a
/// memfd, mapped here and, after `exec`, in the instance.
struct ReportPage {
    ptr: *mut Report,
    fd: OwnedFd,
}

impl ReportPage {
    /// The page, and after it an area for a volume archive of at most
    /// `volume_max` bytes (sparse: only what the instance writes is memory).
    fn new(volume_max: u64) -> Result<ReportPage, SptError> {
        let sys_err = |what| move |source| SptError::Sys { what, source };
        let fd = sys::memfd(c"shoal-report").map_err(sys_err("make the report page"))?;
        std::fs::File::from(fd.try_clone().map_err(sys_err("make the report page"))?)
            .set_len(shoal_abi::PAGE_SIZE + if volume_max > 0 { VOLUME_HEADER as u64 + volume_max } else { 0 })
            .map_err(sys_err("size the report page"))?;
        let p = sys::mmap_shared_fd(&fd, shoal_abi::PAGE_SIZE as usize).map_err(sys_err("map the report page"))?;
        Ok(ReportPage { ptr: p.cast(), fd })
    }
    fn get(&self) -> &Report {
        // SAFETY: a zero-filled page (a valid `Report`: all atomics zero)
        // that stays mapped until drop.
        unsafe { &*self.ptr }
    }
}

impl Drop for ReportPage {
    fn drop(&mut self) {
        // SAFETY: nothing refers to the page any more.
        unsafe { sys::munmap(self.ptr.cast(), shoal_abi::PAGE_SIZE as usize) };
    }
}

/// Runs the image as `cfg` says; returns the instance's exit status (see
/// the table in the crate docs). Blocks until the instance ends.
pub fn run(cfg: &RunConfig) -> Result<i32, SptError> {
    launch(cfg, true)
}

/// Runs the image as `cfg` says in *this* process, with no waiting parent:
/// the process becomes the instance (it `exec`s the instance program) and
/// ends with the instance's exit status (the same statuses and messages as
/// [`run`], written by the signal handlers themselves; see `signals`).
/// What is lost is the message for a kill from outside (SIGKILL, the OOM
/// killer): the caller sees the signal instead. An instance costs one
/// process instead of two (on this host about 130 KiB of private memory
/// and 50 KiB of page tables less).
///
/// Returns only when the instance could not be started; after the point
/// of no return a failure prints `shoal: …` and exits with
/// [`EXIT_TENDER_FAILED`].
pub fn run_in_place(cfg: &RunConfig) -> Result<std::convert::Infallible, SptError> {
    let status = launch(cfg, false)?;
    // Not reached: without a parent, `launch` ends in the guest.
    std::process::exit(status)
}

/// The instance program, `shoal-spt`: beside the running program, or one
/// directory up when the running program is a test in `target/*/deps`.
pub fn instance_program() -> Result<PathBuf, SptError> {
    let exe = std::env::current_exe().map_err(|source| SptError::Sys { what: "find the running program", source })?;
    let dir = exe.parent().unwrap_or(Path::new("/"));
    let mut candidates = vec![dir.join(INSTANCE_PROGRAM)];
    if dir.file_name().is_some_and(|n| n == "deps") {
        if let Some(up) = dir.parent() {
            candidates.push(up.join(INSTANCE_PROGRAM));
        }
    }
    candidates.iter().find(|p| p.is_file()).cloned().ok_or_else(|| SptError::NoInstanceProgram(candidates.swap_remove(0)))
}

/// With this variable set in its environment, `shoal run` and
/// `shoal-tender --tender spt` print on stderr, as `shoal: start: MS ms
/// STEP`, the time each step of an instance's start ends (front end and
/// instance process, milliseconds from the front end's first step): what
/// shoal spends above `shoal bench boot`'s floor, broken down. Off by
/// default; it costs a `write` per step.
pub const START_TIMING_ENV: &str = "SHOAL_DEBUG_START";

/// Name of the instance program, installed beside `shoal` and `shoal-tender`.
pub const INSTANCE_PROGRAM: &str = "shoal-spt";

/// What this host and `cfg`'s memory size must allow before anything is
/// prepared (the front end's and [`Prepared::new`]'s first checks).
fn check_host(cfg: &RunConfig) -> Result<(), SptError> {
    if !sys::has_fsgsbase() {
        return Err(SptError::NoFsgsbase);
    }
    if cfg.mem_size > MAX_MEM {
        return Err(SptError::TooMuchMemory(shoal_loader::format_size(cfg.mem_size)));
    }
    Ok(())
}

/// Opens the host directories of `--mount` (`O_PATH`), refused where the
/// instance could not be confined to them.
fn open_mounts(cfg: &RunConfig) -> Result<Vec<OwnedFd>, SptError> {
    if cfg.mounts.is_empty() {
        return Ok(Vec::new());
    }
    if !confine::is_root() {
        return Err(SptError::MountNeedsRoot);
    }
    Ok(shoal_loader::mount::open_all(&cfg.mounts)?)
}

/// The pool plan of memory mode `pool` (`None` in other modes, or after
/// a fallback to `copy`, whose warning comes second), its file count
/// checked against what a boot spec carries.
fn prepare_pool(cfg: &RunConfig, image: &Image) -> Result<(Option<shoal_loader::pool::PoolPlan>, Option<String>), SptError> {
    if cfg.mode != MemoryMode::Pool {
        return Ok((None, None));
    }
    let (plan, warning) = shoal_loader::pool::prepare(cfg.pool.as_ref(), cfg.pool_fallback, image)?;
    let files = plan.as_ref().map_or(0, |p| p.files.len());
    if files > spec::MAX_POOL_FILES {
        return Err(SptError::TooManyPoolFiles(files));
    }
    Ok((plan, warning.map(|w| format!("{w}; falling back to memory mode copy"))))
}

/// The memory mode the instance runs in: `copy` when `pool` fell back.
fn spec_mode(cfg: &RunConfig, pool: Option<&shoal_loader::pool::PoolPlan>) -> MemoryMode {
    if pool.is_none() && cfg.mode == MemoryMode::Pool {
        MemoryMode::Copy
    } else {
        cfg.mode
    }
}

/// The boot spec's list of pool mappings.
fn spec_pool(pool: Option<&shoal_loader::pool::PoolPlan>) -> Vec<spec::PoolEntry> {
    pool.map(|p| p.maps.iter().map(|m| spec::PoolEntry { addr: m.addr, len: m.len, exec: m.exec }).collect()).unwrap_or_default()
}

/// Prepares the instance; then forks and waits (`supervised`), or becomes
/// the instance (not `supervised`: never returns `Ok`). Either way the
/// instance is a fresh `exec` of [`INSTANCE_PROGRAM`] (`crate::front`).
fn launch(cfg: &RunConfig, supervised: bool) -> Result<i32, SptError> {
    let t0 = if std::env::var_os(START_TIMING_ENV).is_some() { sys::monotonic_ns().max(1) } else { 0 };
    sys::start_timing(t0);
    check_host(cfg)?;
    let image = Image::open(&cfg.image)?;
    sys::start_step("front: image checked");
    let archive = shoal_loader::root_archive(cfg)?;
    let archive: &[u8] = &archive;
    if cfg.volume.is_some() && !supervised {
        return Err(SptError::VolumeNeedsParent);
    }
    if cfg.net.bind_any && !supervised {
        return Err(SptError::BindAnyNeedsParent);
    }
    // The whole volume archive lies in guest memory: it cannot be larger.
    let volume_max = if cfg.volume.is_some() { cfg.mem_size } else { 0 };
    // Planned here for its errors (too little memory, arguments too
    // large); the instance plans the same layout again from the same input.
    let layout = plan(&image, cfg.mem_size, archive.len() as u64, &cfg.argv, &cfg.env)?;
    sys::start_step("front: archive packed, layout planned");
    let tsc_hz = shoal_loader::tsc::tsc_hz()?;
    sys::start_step("front: TSC frequency read");
    let (pool_plan, warning) = prepare_pool(cfg, &image)?;
    if let Some(w) = warning {
        print_err(cfg.stderr.as_ref().map(AsRawFd::as_raw_fd), &format!("shoal: warning: {w}\n"));
    }
    sys::start_step("front: pool files opened and verified");
    let listeners = shoal_loader::net::open_listeners(&cfg.net)?;
    // Without outbound the parent keeps each UDP socket and the instance
    // gets its end of a relay (crate::relay).
    let mut relays = Vec::new();
    let mut listener_fds: Vec<OwnedFd> = Vec::with_capacity(listeners.len());
    for (fd, l) in &listeners {
        if !cfg.net.outbound && l.sock_type == libc::SOCK_DGRAM as u32 {
            if !supervised {
                return Err(SptError::UdpNeedsParent);
            }
            let (ours, theirs) = sys::seqpacket_pair().map_err(|source| SptError::Sys { what: "make a UDP port's relay", source })?;
            let udp = fd.try_clone().map_err(|source| SptError::Sys { what: "keep a UDP port for its relay", source })?;
            relays.push((udp, ours));
            listener_fds.push(theirs);
        } else {
            listener_fds.push(fd.try_clone().map_err(|source| SptError::Sys { what: "pass a listening socket", source })?);
        }
    }
    let mounts = open_mounts(cfg)?;
    let program = instance_program()?;
    // --uid-range: a uid of the instance's own, held by this process (the
    // waiting parent) until the instance has ended.
    if cfg.uid_range.is_some() && !supervised {
        return Err(SptError::UidRangeNeedsParent);
    }
    let uid_claim = cfg.uid_range.map(shoal_loader::uids::claim).transpose()?;
    let spec = spec::Spec {
        mem_size: cfg.mem_size,
        mode: spec_mode(cfg, pool_plan.as_ref()),
        tsc_hz,
        supervised,
        parent_pidfd: false,
        archive_len: archive.len() as u64,
        image_name: cfg.image.as_os_str().as_bytes().to_vec(),
        argv: cfg.argv.iter().map(|a| a.as_bytes().to_vec()).collect(),
        env: cfg.env.iter().map(|a| a.as_bytes().to_vec()).collect(),
        pool: spec_pool(pool_plan.as_ref()),
        outbound: cfg.net.outbound,
        bind_any: cfg.net.bind_any,
        listeners: listeners.iter().map(|(_, l)| *l).collect(),
        volume_path: cfg.volume.as_ref().map(|v| v.guest.as_bytes().to_vec()).unwrap_or_default(),
        volume_max,
        mounts: cfg.mounts.iter().map(|m| m.guest.as_bytes().to_vec()).collect(),
        inject: cfg.inject.unwrap_or_default(),
        rejuvenate_ns: cfg.rejuvenate_ns,
        watchdog_ns: cfg.watchdog_ns,
        recover_flags: cfg.recover_flags(),
        timing_t0_ns: t0,
        filter: Vec::new(),
        filter_key: [0; 6],
        template: false,
        ready_explicit: false,
        uid: uid_claim.as_ref().map_or(confine::NOBODY, shoal_loader::uids::UidClaim::uid),
        cwd: cfg.cwd.clone(),
        guest_ids: [cfg.guest_uid, cfg.guest_gid],
        writable_mounts: crate::writable_mounts(&cfg.mounts),
        hostname: cfg.hostname.clone(),
        syscall_errno: cfg.syscall_errno.clone(),
    };
    // The seccomp program the instance would compile (`crate::instance`:
    // same policy, same guest range), from the disk cache of programs
    // this build compiled before; the instance takes it only if its own
    // key is the same, and compiles its own otherwise.
    let udp_port = |l: &shoal_abi::Listener| l.sock_type == libc::SOCK_DGRAM as u32;
    let policy = net::NetPolicy {
        listeners: spec.listeners.len() as u32,
        outbound: spec.outbound,
        bind_any: spec.bind_any,
        relay: !spec.outbound && (spec.bind_any || spec.listeners.iter().any(udp_port)),
    };
    let guest = filter::GuestRange {
        heap_start: layout.heap_start,
        mem_size: layout.mem_size,
        alias_fd: policy.alias_fd(),
        run_time_code: image.exec_entry().is_some(),
        mounts: spec.mounts.len().min(shoal_hostcall::hostfs::MAX_MOUNTS) as u32,
        writable: spec.writable_mounts != 0,
    };
    let mut spec = spec;
    spec.filter = filter::program_bytes_cached(policy, guest)?;
    spec.filter_key = filter::key(policy, guest);
    sys::start_step("front: seccomp filter found or compiled (disk cache)");
    drop(listeners);
    let report = if supervised { Some(ReportPage::new(volume_max)?) } else { None };
    let root = confine::is_root();
    // With outbound on, the guest reaches the host's network as the caller
    // would (what it may reach is Landlock's and the filter's decision);
    // otherwise it needs no network namespace with interfaces at all.
    let netns = if root && !cfg.net.outbound {
        Some(confine::empty_netns().map_err(|source| SptError::Sys { what: "open the instances' empty network namespace", source })?)
    } else {
        None
    };
    // --net-bind-any: the parent binds for the instance (crate::net).
    let channel =
        if cfg.net.bind_any { Some(sys::seqpacket_pair().map_err(|source| SptError::Sys { what: "make the instance's bind channel", source })?) } else { None };
    let handover = front::Handover::new(front::Parts {
        program: &program,
        spec: &spec.encode(),
        image: image.path(),
        image_fd: None,
        archive,
        archive_fd: None,
        program_fd: None,
        stdin: None,
        report: report.as_ref().map(|r| &r.fd),
        parent_pidfd: false,
        pool: pool_plan.as_ref().map(|p| &p.files[..]).unwrap_or_default(),
        listeners: &listener_fds,
        channel: channel.as_ref().map(|(_, theirs)| theirs),
        mounts: &mounts,
        stdout: cfg.stdout.as_ref(),
        stderr: cfg.stderr.as_ref(),
        netns,
    })?;
    drop(pool_plan);
    drop(listener_fds);
    drop(mounts);
    sys::start_step("front: hand-over ready (spec, archive and descriptors)");
    // Buffered output must not be written twice (once by the child).
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    let Some(report) = report else { handover.become_instance(root) };
    // SIGTERM and SIGHUP for this process are the instance's, from now on.
    let wake = signals::catch_for_child().map_err(|source| SptError::Sys { what: "catch SIGTERM and SIGHUP for the instance", source })?;
    // SAFETY: the child runs only `Handover::exec_child`, which resets the
    // signal dispositions first, makes only async-signal-safe system calls
    // on its own stack, writes no memory of this process's and ends in
    // exec or _exit.
    let pid = unsafe { sys::spawn_with(if root { confine::CLONE_NAMESPACES } else { 0 }, &|| handover.exec_child()) }
        .map_err(|source| SptError::Sys { what: "start the instance process", source })?;
    // The parent waits and, with --net-bind-any, binds for the instance,
    // and relays its UDP ports (crate::relay); the instance's end of the
    // channel must close with the instance, so this process keeps no copy
    // of it.
    let channel = channel.map(|(ours, theirs)| {
        drop(theirs);
        ours
    });
    if channel.is_some() || !relays.is_empty() {
        let relay_binds = !cfg.net.outbound;
        std::thread::Builder::new()
            .name("shoal-net".into())
            .spawn(move || relay::serve(channel, relays, relay_binds))
            .map_err(|source| SptError::Sys { what: "start the network thread", source })?;
    }
    // Give back the image and the archive.
    drop(handover);
    drop(image);
    sys::trim_heap();
    let err_fd = cfg.stderr.as_ref().map(AsRawFd::as_raw_fd);
    // Waits, forwarding SIGTERM and SIGHUP; an instance whose kernel does
    // not take them is stopped here (crate::supervise).
    let (status, stopped) = supervise::wait(pid, &wake, report.get(), cfg.stop_timeout_ns, &|m| print_err(err_fd, m))
        .map_err(|source| SptError::Sys { what: "wait for the instance", source })?;
    if std::env::var_os(PREEMPT_STATS_ENV).is_some() {
        let n = report.get().ticks.load(std::sync::atomic::Ordering::Relaxed);
        let w = report.get().watchdog_ticks.load(std::sync::atomic::Ordering::Relaxed);
        print_err(err_fd, &format!("shoal: preemption ticks: {n}\nshoal: watchdog ticks: {w}\n"));
    }
    let code = match stopped {
        Some((sig, _)) => shoal_loader::stop::status(sig),
        None => outcome(status, report.get(), err_fd),
    };
    // The instance has ended: its uid is free for the next one.
    drop(uid_claim);
    // Only an instance that exited has a volume to keep: its kernel hands
    // the archive over right before the Halt hypercall (exit, a signal's
    // default action). A guest killed by a signal (a CPU fault, a
    // forbidden system call, SIGKILL) leaves the host directory as it was.
    if let (Some(v), true) = (&cfg.volume, libc::WIFEXITED(status)) {
        if let Err(e) = save_volume(&report, volume_max, &v.host) {
            print_err(err_fd, &format!("shoal: {e}\n"));
            return Ok(EXIT_TENDER_FAILED);
        }
    }
    Ok(code)
}

/// With this variable set in its environment, `shoal run` reports how many
/// preemption ticks reached the instance (`shoal: preemption ticks: N` on
/// stderr at the end; spt counts them in the report page, which the guest
/// could overwrite: a statistic, not a security boundary). Not with
/// `--single-process`.
pub const PREEMPT_STATS_ENV: &str = "SHOAL_PREEMPT_STATS";

/// Size of the length word before the volume archive in the shared area.
pub(crate) const VOLUME_HEADER: usize = 8;

/// Reads the archive the instance left after the report page and stores
/// it in `host` (nothing when the kernel handed none over).
fn save_volume(report: &ReportPage, max: u64, host: &Path) -> Result<(), shoal_loader::volume::VolumeError> {
    use std::os::unix::fs::FileExt;
    let io = |what| move |source| shoal_loader::volume::VolumeError::Io { path: host.to_path_buf(), what, source };
    let file = std::fs::File::from(report.fd.try_clone().map_err(io("read the instance's volume archive"))?);
    let mut word = [0u8; VOLUME_HEADER];
    file.read_exact_at(&mut word, shoal_abi::PAGE_SIZE).map_err(io("read the instance's volume archive"))?;
    let len = u64::from_le_bytes(word);
    if len == 0 {
        return Ok(());
    }
    if len > max {
        return Err(shoal_loader::volume::VolumeError::Io {
            path: host.to_path_buf(),
            what: "take the instance's volume archive",
            source: std::io::Error::from_raw_os_error(libc::EFBIG),
        });
    }
    let mut bytes = vec![0u8; len as usize];
    file.read_exact_at(&mut bytes, shoal_abi::PAGE_SIZE + VOLUME_HEADER as u64).map_err(io("read the instance's volume archive"))?;
    shoal_loader::volume::store(host, &bytes)
}

/// Turns the child's wait status into the instance's exit status, printing
/// the message for deaths by signal.
fn outcome(status: libc::c_int, report: &Report, err_fd: Option<RawFd>) -> i32 {
    if libc::WIFEXITED(status) {
        return libc::WEXITSTATUS(status);
    }
    if !libc::WIFSIGNALED(status) {
        return EXIT_STOPPED; // not reachable with waitpid(.., 0)
    }
    let mut msg = String::new();
    let code = signals::describe(&mut msg, libc::WTERMSIG(status), report);
    print_err(err_fd, &msg);
    code
}

fn print_err(fd: Option<RawFd>, msg: &str) {
    match fd {
        Some(fd) => {
            let _ = sys::write_all(fd, msg.as_bytes());
        }
        None => {
            let _ = std::io::stderr().write_all(msg.as_bytes());
        }
    }
}
