//! The host side of loading a shoal image, shared by the tenders (`spt`
//! today, `hvt` later).
//!
//! A tender uses it in this order:
//!
//! 1. [`Image::open`] reads the image and refuses anything it should not run
//!    (not ELF, not x86-64, not a fixed-address executable, no or another
//!    ABI note, segments truncated, overlapping, below [`shoal_abi::IMAGE_BASE`],
//!    with `p_filesz > p_memsz`, or writable and executable).
//! 2. [`plan`] places image, archive, heap and stack in guest memory of the
//!    requested size ([`Layout`]).
//! 3. The tender maps guest memory and makes a [`GuestMemory`] view of it:
//!    the only way to touch guest bytes, with a bounds check on every access.
//! 4. [`load_segments`], [`load_archive`] and [`write_boot_state`] fill it;
//!    the last returns the guest's [`EntryState`] (rip, rsp, rdi).
//!
//! The clock calibration lives in [`tsc`]: [`tsc::tsc_hz`] (cached per host
//! boot) and [`Clock::now`].
//!
//! Steps 3 and 4 do not allocate, so spt can run them in a child it forked
//! from a multi-threaded process.
//!
//! # Dependencies
//!
//! - `shoal-abi`: the guest memory layout, `BootInfo` and the ABI note.
//! - `object`: a maintained, fuzzed ELF reader; only its read-only ELF
//!   parser is enabled (`read_core`, `elf`), no writer, no other formats.
//! - `thiserror`: one error enum per module with sentence-like messages.
//! - `getrandom`: the kernel's random seed and `AT_RANDOM` bytes from the
//!   host's `getrandom(2)` (handles `EINTR` and short reads).
//! - `libc`: `clock_gettime` (CLOCK_MONOTONIC_RAW, CLOCK_REALTIME) for the
//!   TSC calibration, `geteuid` and open flags (`O_NOFOLLOW`) for the safe
//!   host directories of [`hostdir`].
#![deny(missing_docs)]

mod boot;
pub mod hostdir;
mod image;
pub mod inject;
mod layout;
mod mem;
pub mod mount;
pub mod net;
pub mod pool;
pub mod stop;
pub mod tsc;
pub mod uids;
pub mod volume;
pub mod watchdog;

pub use boot::{auxv, hwcap, load_archive, load_segments, load_segments_except, write_boot_state, BootError, BootParams, EntryState, HOSTNAME};
pub use image::{FileRange, Image, ImageError, Perms, Segment, Tls, IMAGE_ADDR_LIMIT, MAX_PHNUM, PHDR_SIZE};
pub use layout::{args_len, format_size, plan, stack_size, Layout, LayoutError, MAX_STACK, MIN_HEAP, MIN_STACK};
pub use mem::{GuestAddr, GuestMemory, MemError, Pod};
pub use tsc::{Clock, TscError};

/// How a tender fills guest memory (docs/design.md, "Memory and sharing"). Shared by spt and hvt.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MemoryMode {
    /// Every segment copied into anonymous memory.
    #[default]
    Copy,
    /// Like `Copy`, and the region is offered to KSM (`MADV_MERGEABLE`).
    Ksm,
    /// Code and rodata of each library version mapped from the library
    /// pool ([`pool`]), shared through the page cache; the rest copied.
    Pool,
}

impl MemoryMode {
    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            MemoryMode::Copy => "copy",
            MemoryMode::Ksm => "ksm",
            MemoryMode::Pool => "pool",
        }
    }
}

/// The root file system of an instance. Shared by spt and hvt.
#[derive(Debug)]
pub enum FsSource {
    /// Pack this host directory.
    Dir(std::path::PathBuf),
    /// An archive the caller packed already (checked before use).
    Packed(Vec<u8>),
}

/// The root archive for `cfg`: `--fs` packed (or checked, when packed
/// already), with the `--volume` directory in it; empty without either.
pub fn root_archive(cfg: &RunConfig) -> Result<std::borrow::Cow<'_, [u8]>, RootError> {
    use std::borrow::Cow;
    Ok(match (&cfg.fs, &cfg.volume) {
        (None, None) => Cow::Borrowed(&[]),
        (Some(FsSource::Dir(d)), None) => Cow::Owned(shoal_archive::pack_dir(d)?),
        (Some(FsSource::Packed(b)), None) => {
            shoal_archive::Archive::parse(b).map_err(RootError::Archive)?;
            Cow::Borrowed(b)
        }
        (None | Some(FsSource::Dir(_)), Some(v)) => {
            let root = match &cfg.fs {
                Some(FsSource::Dir(d)) => Some(d.as_path()),
                _ => None,
            };
            Cow::Owned(shoal_archive::pack_with_volume(root, &v.host, &v.guest)?)
        }
        (Some(FsSource::Packed(_)), Some(_)) => return Err(RootError::PackedWithVolume),
    })
}

/// Why the root archive could not be made.
#[derive(Debug, thiserror::Error)]
pub enum RootError {
    /// The `--fs` or `--volume` directory could not be packed.
    #[error("cannot pack the file system: {0}")]
    Pack(#[from] shoal_archive::PackError),
    /// A packed archive passed in is invalid.
    #[error("{0}")]
    Archive(shoal_archive::ArchiveError),
    /// A caller's packed archive cannot take a volume.
    #[error("a volume needs the root file system as a directory, not a packed archive")]
    PackedWithVolume,
}

/// What a tender runs: the same configuration for spt and hvt.
#[derive(Debug)]
pub struct RunConfig {
    /// The image file.
    pub image: std::path::PathBuf,
    /// Guest memory size in bytes (a multiple of 4 KiB; hvt: at most 4 GiB).
    pub mem_size: u64,
    /// The root file system, if any.
    pub fs: Option<FsSource>,
    /// The guest's argv, `argv[0]` included.
    pub argv: Vec<std::ffi::OsString>,
    /// The guest's environment, `KEY=VALUE` strings.
    pub env: Vec<std::ffi::OsString>,
    /// Memory mode.
    pub mode: MemoryMode,
    /// The library pool for [`MemoryMode::Pool`] (default: `SHOAL_POOL_DIR`
    /// or `/dev/shm/shoal-pool`).
    pub pool: Option<pool::Pool>,
    /// In mode `pool`, fall back to `copy` (with a warning) when the pool
    /// cannot serve the image, instead of failing.
    pub pool_fallback: bool,
    /// Where the guest's stdout goes (default: this process's stdout).
    pub stdout: Option<std::os::fd::OwnedFd>,
    /// Where the guest's stderr and the tender's messages go (default: this
    /// process's stderr).
    pub stderr: Option<std::os::fd::OwnedFd>,
    /// What the guest may reach on the network (default: nothing).
    pub net: net::NetConfig,
    /// A host directory kept across runs (`--volume`; [`volume`]).
    pub volume: Option<volume::Volume>,
    /// Read-only host directories (`--mount HOSTDIR:GUESTDIR:ro`; [`mount`]).
    pub mounts: Vec<mount::Mount>,
    /// A fault to inject into a kernel component (`--inject`; [`inject`]).
    pub inject: Option<shoal_abi::Inject>,
    /// Reboot the rebootable kernel components one by one, one every this
    /// many nanoseconds (`--rejuvenate-every`; [`inject::parse_period`]).
    pub rejuvenate_ns: u64,
    /// The hang watchdog's limit in nanoseconds (`--watchdog MS`; 0: off;
    /// default `shoal_abi::DEFAULT_WATCHDOG_NS`; [`inject::parse_watchdog`]).
    pub watchdog_ns: u64,
    /// How long a forwarded SIGTERM or SIGHUP may wait untaken before the
    /// tender stops the guest itself (`--stop-timeout SECONDS`, ns;
    /// [`stop`]).
    pub stop_timeout_ns: u64,
    /// `--no-recover`: no component gates (`shoal_abi::RECOVER_OFF`).
    pub no_recover: bool,
    /// `--recover-stateful`: vfs, ramfs, process and net are rebootable too
    /// (`shoal_abi::RECOVER_STATEFUL`; see [`RunConfig::recover_flags`]).
    pub recover_stateful: bool,
    /// `--log-shrink N|never` (0: not given; see
    /// `shoal_abi::RECOVER_LOG_SHRINK_SHIFT`).
    pub log_shrink: u32,
    /// `--log-report` (`shoal_abi::RECOVER_LOG_REPORT`).
    pub log_report: bool,
    /// `--uid-range`: a root-started spt instance runs as a uid of its
    /// own from this range (`uids`), not as `nobody`.
    pub uid_range: Option<uids::UidRange>,
    /// The program's working directory at start (`--cwd`, absolute;
    /// empty: `/`).
    pub cwd: Vec<u8>,
    /// The uid the program sees (`--user`; the instance's host identity is
    /// another matter, see `uid_range`).
    pub guest_uid: u32,
    /// The gid the program sees (`--user`).
    pub guest_gid: u32,
    /// The guest's host name (`--hostname`, what `uname` reports as the
    /// node name; empty: [`HOSTNAME`]).
    pub hostname: Vec<u8>,
    /// The errno each of the program's system calls is refused with, by
    /// number (`--seccomp-deny`; 0: runs); empty: none refused.
    pub syscall_errno: Vec<u8>,
}

/// Longest `--cwd` (the boot info's field keeps a NUL after it).
pub const CWD_PATH_MAX: usize = shoal_abi::CWD_MAX - 1;

/// [`shoal_abi::BootInfo::cwd`] for `cwd` (a longer path is cut: the
/// options refuse one, see the tender's `--cwd`).
pub fn boot_cwd(cwd: &[u8]) -> [u8; shoal_abi::CWD_MAX] {
    let mut out = [0u8; shoal_abi::CWD_MAX];
    let n = cwd.len().min(shoal_abi::CWD_MAX - 1);
    out[..n].copy_from_slice(&cwd[..n]);
    out
}

/// Longest `--hostname` (Linux's `HOST_NAME_MAX`; the boot info's field
/// keeps a NUL after it).
pub const HOSTNAME_MAX: usize = 64 - 1;

/// [`shoal_abi::BootInfo::hostname`] for `name` (empty: [`HOSTNAME`]; a
/// longer name is cut: the options refuse one, see the tender's
/// `--hostname`).
pub fn boot_hostname(name: &[u8]) -> [u8; 64] {
    let name = if name.is_empty() { HOSTNAME.as_bytes() } else { name };
    let mut out = [0u8; 64];
    let n = name.len().min(HOSTNAME_MAX);
    out[..n].copy_from_slice(&name[..n]);
    out
}

pub use shoal_abi::SECCOMP_CALLS;

/// [`shoal_abi::BootInfo::syscall_errno`] for `table` (empty: none
/// refused; a longer table is cut).
pub fn boot_syscall_errno(table: &[u8]) -> [u8; shoal_abi::SECCOMP_CALLS] {
    let mut out = [0u8; shoal_abi::SECCOMP_CALLS];
    let n = table.len().min(out.len());
    out[..n].copy_from_slice(&table[..n]);
    out
}

impl RunConfig {
    /// A configuration with `argv = [image path]`, no environment, no file
    /// system, memory mode `copy`, and the console on this process's
    /// stdout/stderr.
    pub fn new(image: impl Into<std::path::PathBuf>, mem_size: u64) -> RunConfig {
        let image = image.into();
        RunConfig {
            argv: vec![image.clone().into_os_string()],
            image,
            mem_size,
            fs: None,
            env: Vec::new(),
            mode: MemoryMode::Copy,
            pool: None,
            pool_fallback: false,
            stdout: None,
            stderr: None,
            net: net::NetConfig::default(),
            volume: None,
            mounts: Vec::new(),
            inject: None,
            rejuvenate_ns: 0,
            watchdog_ns: shoal_abi::DEFAULT_WATCHDOG_NS,
            stop_timeout_ns: stop::DEFAULT_STOP_TIMEOUT_NS,
            no_recover: false,
            recover_stateful: false,
            log_shrink: 0,
            log_report: false,
            uid_range: None,
            cwd: Vec::new(),
            guest_uid: 0,
            guest_gid: 0,
            hostname: Vec::new(),
            syscall_errno: Vec::new(),
        }
    }

    /// The kernel's [`shoal_abi::BootInfo::recover_flags`] for this run.
    /// Logging the stateful components is asked for explicitly or implied
    /// by what needs it: an injected fault in one of them (a test that it
    /// recovers) and rejuvenation (which reboots every rebootable
    /// component in turn).
    pub fn recover_flags(&self) -> u64 {
        if self.no_recover {
            return shoal_abi::RECOVER_OFF;
        }
        let stateful_component = |c: u32| {
            let name = (c as usize).checked_sub(1).and_then(|i| shoal_abi::COMPONENTS.get(i));
            matches!(name, Some(&"vfs" | &"ramfs" | &"process" | &"net"))
        };
        let injected = self.inject.is_some_and(|i| stateful_component(i.component));
        let shrink = u64::from(self.log_shrink) << shoal_abi::RECOVER_LOG_SHRINK_SHIFT;
        let report = if self.log_report { shoal_abi::RECOVER_LOG_REPORT } else { 0 };
        if self.recover_stateful || injected || self.rejuvenate_ns != 0 || self.log_shrink != 0 || self.log_report {
            shoal_abi::RECOVER_STATEFUL | shrink | report
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests;
