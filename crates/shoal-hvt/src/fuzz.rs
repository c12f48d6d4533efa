//! A harness that runs the hypercall dispatch without a VM, for the fuzz
//! targets (crates/shoal-hvt/fuzz, built with the `fuzz` feature): guest
//! memory is a plain anonymous mapping from guest-physical 0 holding the
//! tender-private pages (`x86::build`'s page tables, GDT, stub) as a real
//! VM's does, the page-table pool is another, and each hypercall goes
//! through [`hypercall::decode`] and [`hypercall::handle`] with the real
//! `Protect`/`Alias`/`Release` page-table code and the real socket table
//! (`crate::net`). What the run loop would do next (halt, fault, refusal,
//! stop) comes back as an [`Action`] value.
//!
//! The harness keeps the fuzzer's host safe: the network is a private
//! network namespace with only loopback ([`Harness::new`] makes one, and
//! turns guest networking off when it cannot); console output goes
//! nowhere, console input reads `/dev/null`; `Poll`/`NetPoll` deadlines are
//! cut to 1 µs (the fuzzer must not sleep); `Preempt` arm/watch are not
//! run (they start a host timer signalling the vCPU thread, which has no
//! vCPU here); the fault port's origin (the vCPU's privilege level) is the
//! input's choice.

use crate::hypercall::{self, Console, ConsoleBuffer, Guest, Origin, ReadOnly};
pub use crate::hypercall::{Action, Refusal};
use crate::{net, protect, x86};
use shoal_abi::{Hypercall, NetPollArgs, PollArgs, HYPERCALL_PORT_BASE, PAGE_SIZE};
use shoal_loader::{GuestAddr, GuestMemory};
use std::cell::{Cell, RefCell};
use std::os::fd::{AsRawFd, OwnedFd};
use vm_memory::{Bytes, GuestAddress, GuestMemoryRegion, GuestRegionMmap, MemoryRegionAddress, MmapRegion};

/// Guest memory size.
pub const MEM_SIZE: u64 = 8 << 20;
/// The image: code, then read-only data (read-only for results).
const CODE: (u64, u64) = (0x10_0000, 0x11_0000);
const RODATA: (u64, u64) = (0x11_0000, 0x12_0000);
/// Where free memory starts (what `Protect`, `Alias` and `Release` may
/// change) and where the input's bytes go.
pub const HEAP_START: u64 = 0x20_0000;
/// Most bytes of a `VolumeSave`.
const VOLUME_MAX: u64 = 1 << 20;
/// The longest `Poll`/`NetPoll` wait the harness lets through.
const MAX_WAIT_NS: u64 = 1_000;

/// Why the harness could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// Guest memory or the table pool could not be mapped.
    #[error("cannot map guest memory: {0}")]
    Memory(String),
    /// The tender-private pages could not be built.
    #[error("cannot build the page tables: {0}")]
    Tables(String),
    /// `/dev/null` could not be opened.
    #[error("cannot open /dev/null: {0}")]
    Null(std::io::Error),
}

/// The state of one fuzzing process.
pub struct Harness {
    low: GuestRegionMmap<()>,
    pool: GuestRegionMmap<()>,
    private: Vec<u8>,
    read_only: ReadOnly,
    net: net::Net,
    buffer: Option<ConsoleBuffer>,
    kept: RefCell<Option<Vec<u8>>>,
    fault: Cell<Option<(u64, u64)>>,
    _null: OwnedFd,
    /// Whether guest networking is on (a private network namespace exists).
    pub network: bool,
}

impl Harness {
    /// Maps guest memory and the table pool, builds the page tables and,
    /// when this process may (root), moves it into a network namespace of
    /// its own with loopback up; without one, guest networking is off.
    pub fn new() -> Result<Harness, HarnessError> {
        let region = |size: u64, at: u64| {
            let m = MmapRegion::<()>::new(size as usize).map_err(|e| HarnessError::Memory(e.to_string()))?;
            GuestRegionMmap::new(m, GuestAddress(at)).ok_or_else(|| HarnessError::Memory(format!("a region of {size:#x} bytes at {at:#x} is invalid")))
        };
        let low = region(MEM_SIZE, 0)?;
        let pool = region(protect::pool_size(MEM_SIZE), protect::POOL_ADDR)?;
        let image = [
            x86::Region { start: CODE.0, end: CODE.1, perm: x86::PagePerm::UserRx },
            x86::Region { start: RODATA.0, end: RODATA.1, perm: x86::PagePerm::UserRo },
        ];
        let private = x86::build(MEM_SIZE, &image, CODE.0, RODATA.1).map_err(|e| HarnessError::Tables(e.to_string()))?.bytes;
        let read_only = ReadOnly(vec![CODE, RODATA, (shoal_abi::BOOT_INFO_ADDR, shoal_abi::BOOT_INFO_ADDR + PAGE_SIZE)]);
        let null = std::fs::OpenOptions::new().read(true).open("/dev/null").map_err(HarnessError::Null)?;
        // Console input reads /dev/null.
        // SAFETY: dup2 onto descriptor 0, which this process does not use.
        unsafe { libc::dup2(null.as_raw_fd(), 0) };
        let network = private_loopback().is_ok();
        let mut h = Harness {
            low,
            pool,
            private,
            read_only,
            net: new_net(network),
            buffer: None,
            kept: RefCell::new(None),
            fault: Cell::new(None),
            _null: null.into(),
            network,
        };
        h.reset(&[]);
        Ok(h)
    }

    /// Starts a new input: guest memory and the table pool zero again, the
    /// tender-private pages rewritten, `blob` (at most what fits) at
    /// [`HEAP_START`], an empty socket table and no registrations.
    pub fn reset(&mut self, blob: &[u8]) {
        for r in [&self.low, &self.pool] {
            // SAFETY: the harness's own private anonymous mapping, which no
            // Rust reference points into; its pages read as zero again.
            unsafe { libc::madvise(r.as_ptr().cast(), r.len() as usize, libc::MADV_DONTNEED) };
        }
        let page = PAGE_SIZE as usize;
        for (i, chunk) in self.private.chunks(page).enumerate() {
            if chunk.iter().any(|&b| b != 0) {
                let _ = self.low.write_slice(chunk, MemoryRegionAddress((i * page) as u64));
            }
        }
        let n = blob.len().min((MEM_SIZE - HEAP_START) as usize);
        let _ = self.low.write_slice(&blob[..n], MemoryRegionAddress(HEAP_START));
        self.net = new_net(self.network);
        self.buffer = None;
        *self.kept.borrow_mut() = None;
        self.fault.set(None);
    }

    /// Runs the write of the 32-bit `arg` to hypercall port
    /// `HYPERCALL_PORT_BASE + nr`, from a vCPU at privilege level `cpl`
    /// (and, at CPL 0, in the exception stub): what the run loop would do
    /// next.
    pub fn call(&mut self, nr: u16, arg: u32, cpl: u8) -> Action {
        let (call, addr) = match hypercall::decode(HYPERCALL_PORT_BASE.wrapping_add(nr), &arg.to_le_bytes()) {
            Ok(c) => c,
            Err(r) => return Action::Refused(r),
        };
        // SAFETY: `low` maps MEM_SIZE bytes from guest address 0; the view
        // starts at LOW inside it and lives only in this call, while `self`
        // (which owns the mapping) is borrowed.
        let mem = unsafe { GuestMemory::new(self.low.as_ptr().wrapping_add(GuestMemory::LOW as usize), MEM_SIZE) };
        match call {
            // Poll refuses "never" without waiting; NetPoll only with
            // nothing listed.
            Hypercall::Poll => cut_wait::<PollArgs>(&mem, addr, |a| &mut a.timeout_ns, |_| true),
            Hypercall::NetPoll => cut_wait::<NetPollArgs>(&mem, addr, |a| &mut a.timeout_ns, |a| a.nfds == 0 && a.max_events == 0),
            Hypercall::Preempt => {
                let op = mem.read_obj::<shoal_abi::PreemptArgs>(addr).map(|a| a.op);
                if matches!(op, Ok(shoal_abi::PREEMPT_ARM | shoal_abi::PREEMPT_WATCH | shoal_abi::PREEMPT_WAKE)) {
                    return Action::Continue;
                }
            }
            _ => {}
        }
        let tables = protect::Tables { low: &self.low, pool: &self.pool, heap_start: HEAP_START, mem_size: MEM_SIZE, run_time_code: true };
        let apply = |a: &shoal_abi::ProtectArgs| tables.protect(a);
        let alias = |a: &shoal_abi::AliasArgs| tables.alias(a);
        let release = |addr: u64, len: u64| tables.release(addr, len);
        let guest = Guest {
            mem: &mem,
            private: &self.low,
            read_only: &self.read_only,
            protect: Some(&apply),
            alias: Some(&alias),
            release: Some(&release),
            volume: Some((&self.kept, VOLUME_MAX)),
            fault: Some(&self.fault),
            program: None,
            mounts: None,
            file_maps: None,
        };
        let rip = if cpl == 0 { x86::STUB_ADDR + 0x10 } else { HEAP_START };
        let mut origin = || Ok(Origin { cpl, rip });
        let (mut out, mut err) = (std::io::sink(), std::io::sink());
        let mut console = Console { stdout: &mut out, stderr: &mut err };
        let mut wrote = false;
        hypercall::handle(call, addr, &guest, &mut self.net, &mut origin, &mut console, &mut wrote, &mut self.buffer)
    }

    /// Writes what the guest left in its console buffer, as the run loop
    /// does when the guest ends without flushing it.
    pub fn drain(&self) {
        // SAFETY: as in `call`.
        let mem = unsafe { GuestMemory::new(self.low.as_ptr().wrapping_add(GuestMemory::LOW as usize), MEM_SIZE) };
        if let Some(b) = self.buffer {
            let (mut out, mut err) = (std::io::sink(), std::io::sink());
            b.drain(&mem, &mut Console { stdout: &mut out, stderr: &mut err });
        }
    }
}

/// The socket table: outbound to loopback only (an allow rule, which the
/// handlers check), `--net-bind-any` on, when there is a private network
/// namespace; no networking otherwise.
fn new_net(network: bool) -> net::Net {
    let allow = ["127.0.0.0/8", "[::1]"].iter().filter_map(|r| shoal_loader::net::Allow::parse(r).ok()).collect();
    net::Net::new(Vec::new(), network, allow).with_bind_any(network)
}

/// Cuts the deadline of the wait at `arg` to [`MAX_WAIT_NS`]; a deadline
/// of "never" stays where `refused` says the handler refuses it without
/// waiting.
fn cut_wait<T: shoal_loader::Pod>(mem: &GuestMemory, arg: GuestAddr, deadline: impl Fn(&mut T) -> &mut u64, refused: impl Fn(&T) -> bool) {
    let Ok(mut a) = mem.read_obj::<T>(arg) else { return };
    let keep = refused(&a);
    let d = deadline(&mut a);
    if *d == u64::MAX && keep {
        return;
    }
    *d = (*d).min(MAX_WAIT_NS);
    let _ = mem.write_obj(arg, &a);
}

/// Moves this process into a network namespace of its own, whose only
/// interface is loopback, and brings loopback up.
fn private_loopback() -> std::io::Result<()> {
    // SAFETY: unshare takes flags only.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: socket takes no pointers; the descriptor is owned below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just made and is owned here.
    let s = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    // SAFETY: an all-zero ifreq is valid.
    let mut ifr: libc::ifreq = unsafe { core::mem::zeroed() };
    for (d, c) in ifr.ifr_name.iter_mut().zip(b"lo") {
        *d = *c as libc::c_char;
    }
    ifr.ifr_ifru.ifru_flags = (libc::IFF_UP | libc::IFF_LOOPBACK | libc::IFF_RUNNING) as libc::c_short;
    // SAFETY: SIOCSIFFLAGS reads one ifreq.
    if unsafe { libc::ioctl(s.as_raw_fd(), libc::SIOCSIFFLAGS, &ifr) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
