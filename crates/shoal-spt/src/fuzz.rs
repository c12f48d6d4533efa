//! A harness that runs the hypercall dispatch without a guest, for the
//! fuzz targets (crates/shoal-spt/fuzz, built with the `fuzz` feature):
//! guest memory is mapped at its guest addresses in this process, the
//! handlers' state is installed as the instance child installs it, and
//! each hypercall goes through [`hypercall::fast`] and then
//! [`hypercall::dispatch`], as the entry trampoline sends it. An end of
//! the instance (halt, fault, a bad argument structure, a wait that
//! nothing could end) comes back as a [`End`] value instead of ending the
//! process.
//!
//! In an instance the seccomp filter and Landlock bound what the guest
//! reaches through these handlers (`crate::net`'s module docs); here no
//! filter runs, so the harness keeps the fuzzer's host safe itself:
//! - the network is a private network namespace with only loopback
//!   ([`Harness::new`] makes one, and turns guest networking off when it
//!   cannot);
//! - a `Net` operation naming a descriptor that is not a socket the guest
//!   made (the fuzzer's own files) is pointed at handle -1 before the call;
//!   the guest's sockets are closed after each input ([`Harness::reset`]);
//! - guest console output goes to `/dev/null`, console input reads
//!   `/dev/null`;
//! - `Poll`/`NetPoll` deadlines are cut to 1 µs (the fuzzer must not
//!   sleep), and `Preempt` arm/watch are not run (they start a host
//!   interval timer, whose `SIGALRM` is libFuzzer's);
//! - after `Protect`/`Alias`, free memory is made read-write again, so a
//!   later handler reading a page the guest made inaccessible (which ends
//!   a real instance with a fault report, as the guest's own read would)
//!   does not end the fuzzer.

use crate::hypercall::{self, End};
use crate::net::NetPolicy;
use shoal_abi::{Hypercall, NetArgs, NetOp, NetPollArgs, PollArgs, BOOT_INFO_ADDR, NET_MAX_OPS};
use shoal_loader::{GuestAddr, GuestMemory};
use std::os::fd::{AsRawFd, OwnedFd};

/// Guest memory size: addresses `[BOOT_INFO_ADDR, MEM_SIZE)`.
pub const MEM_SIZE: u64 = 4 << 20;
/// Where free memory starts: below it, guest memory is read-only (as the
/// image, the archive and the boot page are), above it the guest may
/// protect, alias and release.
pub const HEAP_START: u64 = 1 << 20;
/// Most bytes of a `VolumeSave`.
const VOLUME_MAX: u64 = 1 << 20;
/// The longest `Poll`/`NetPoll` wait the harness lets through.
const MAX_WAIT_NS: u64 = 1_000;

/// Why the harness could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// Guest memory could not be mapped at its guest addresses.
    #[error("cannot map guest memory at {BOOT_INFO_ADDR:#x}: {0}")]
    Memory(std::io::Error),
    /// A file the harness needs could not be made.
    #[error("cannot make the harness's {0}: {1}")]
    File(&'static str, std::io::Error),
}

/// The state of one fuzzing process (make one: guest memory is at fixed
/// addresses and the handlers' state is global).
pub struct Harness {
    alias: OwnedFd,
    _null: OwnedFd,
    volume: &'static mut [u8],
    /// Whether guest networking is on (a private network namespace exists).
    pub network: bool,
}

impl Harness {
    /// Maps guest memory, installs the handlers' state and, when this
    /// process may (root), moves it into a network namespace of its own
    /// with loopback up; without one, guest networking is off.
    pub fn new() -> Result<Harness, HarnessError> {
        // SAFETY: MAP_FIXED_NOREPLACE maps only where nothing is.
        unsafe { crate::sys::mmap_fixed_noreplace(BOOT_INFO_ADDR, MEM_SIZE - BOOT_INFO_ADDR, libc::PROT_READ | libc::PROT_WRITE) }
            .map_err(HarnessError::Memory)?;
        let null = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null").map_err(|e| HarnessError::File("/dev/null", e))?;
        let alias = crate::sys::memfd(c"shoal-fuzz-alias").map_err(|e| HarnessError::File("alias file", e))?;
        // Console input reads /dev/null; output goes there too.
        crate::sys::dup3(null.as_raw_fd(), 0, 0).map_err(|e| HarnessError::File("stdin", std::io::Error::from_raw_os_error(e)))?;
        hypercall::set_console_fds(null.as_raw_fd(), null.as_raw_fd());
        let network = private_loopback().is_ok();
        crate::net::install(NetPolicy { listeners: 0, outbound: network, bind_any: false, relay: false });
        hypercall::install(0, 0, MEM_SIZE, &[(BOOT_INFO_ADDR, HEAP_START)]);
        crate::protect::install(HEAP_START, MEM_SIZE, alias.as_raw_fd());
        crate::preempt::install(BOOT_INFO_ADDR, MEM_SIZE, 0, None);
        let volume = vec![0u8; crate::VOLUME_HEADER + VOLUME_MAX as usize].leak();
        hypercall::install_volume(volume.as_mut_ptr(), VOLUME_MAX);
        let mut h = Harness { alias, _null: null.into(), volume, network };
        h.reset(&[]);
        Ok(h)
    }

    /// Starts a new input: fresh guest memory (zero, with `blob` at
    /// [`HEAP_START`], at most what fits), an empty alias file, and the
    /// guest sockets of the previous input closed.
    pub fn reset(&mut self, blob: &[u8]) {
        close_guest_sockets();
        // SAFETY: [BOOT_INFO_ADDR, MEM_SIZE) is the harness's own mapping,
        // which no Rust reference points into; fresh private memory
        // replaces it (aliases included).
        let fresh = unsafe { crate::sys::mmap_own(BOOT_INFO_ADDR, MEM_SIZE - BOOT_INFO_ADDR, libc::PROT_READ | libc::PROT_WRITE) };
        if let Err(e) = fresh {
            panic!("the harness cannot remap guest memory: {e}");
        }
        // SAFETY: ftruncate on the harness's own memory file.
        unsafe {
            libc::ftruncate(self.alias.as_raw_fd(), 0);
            libc::ftruncate(self.alias.as_raw_fd(), MEM_SIZE as libc::off_t);
        }
        let n = blob.len().min((MEM_SIZE - HEAP_START) as usize);
        let _ = mem().write(GuestAddr(HEAP_START), &blob[..n]);
        // SAFETY: the read-only part of guest memory, which the handlers
        // must never write (a write there is a bug the fuzzer reports).
        let _ = unsafe { crate::sys::mprotect(BOOT_INFO_ADDR, HEAP_START - BOOT_INFO_ADDR, libc::PROT_READ) };
        self.volume[..8].fill(0);
    }

    /// Runs hypercall `nr` with its argument structure at `arg`: `Ok` when
    /// the guest would resume, the end otherwise.
    pub fn call(&mut self, nr: u64, arg: u64) -> Result<(), End> {
        let call = Hypercall::from_nr(nr);
        match call {
            // Poll refuses "never" without waiting.
            Some(Hypercall::Poll) => cut_wait::<PollArgs>(arg, |a| &mut a.timeout_ns, |_| true),
            // NetPoll refuses "never" without waiting only with nothing
            // listed; with entries it would sleep until a signal, even if
            // none names a socket (the guest's own hang).
            Some(Hypercall::NetPoll) => cut_wait::<NetPollArgs>(arg, |a| &mut a.timeout_ns, |a| a.nfds == 0 && a.max_events == 0),
            Some(Hypercall::Net) if !hide_own_descriptors(arg) => return Ok(()),
            Some(Hypercall::Preempt) => {
                let op = mem().read_obj::<shoal_abi::PreemptArgs>(GuestAddr(arg)).map(|a| a.op);
                if matches!(op, Ok(shoal_abi::PREEMPT_ARM | shoal_abi::PREEMPT_WATCH)) {
                    return Ok(());
                }
            }
            _ => {}
        }
        if !self.network && matches!(call, Some(Hypercall::Net | Hypercall::NetPoll)) {
            return Ok(());
        }
        let r = if hypercall::fast(nr, arg) { Ok(()) } else { hypercall::dispatch(nr, arg) };
        if matches!(call, Some(Hypercall::Protect | Hypercall::Alias | Hypercall::AliasList)) {
            // SAFETY: free guest memory, the harness's own mapping.
            let _ = unsafe { crate::sys::mprotect(HEAP_START, MEM_SIZE - HEAP_START, libc::PROT_READ | libc::PROT_WRITE) };
        }
        r
    }
}

/// Points every operation of the `Net` batch at `arg` whose handle is an
/// open descriptor other than a socket (one of the fuzzer's files) at
/// handle -1 (`EBADF`). Handles of sockets an earlier operation of the
/// batch makes are not open yet, and stay. `false`: such an operation lies
/// in read-only guest memory, where the harness cannot change it, and the
/// call must not run.
fn hide_own_descriptors(arg: u64) -> bool {
    let m = mem();
    let Ok(a) = m.read_obj::<NetArgs>(GuestAddr(arg)) else { return true };
    let size = core::mem::size_of::<NetOp>() as u64;
    for i in 0..a.count.min(NET_MAX_OPS) {
        let at = a.ops.wrapping_add(i * size);
        let Ok(mut op) = m.read_obj::<NetOp>(GuestAddr(at)) else { return true };
        if i32::try_from(op.handle).is_ok_and(|fd| fd >= 0 && is_open(fd) && !is_socket(fd)) {
            if !hypercall::writable(at, size) {
                return false;
            }
            op.handle = -1;
            let _ = m.write_obj(GuestAddr(at), &op);
        }
    }
    true
}

/// Guest memory as the handlers see it.
fn mem() -> GuestMemory {
    hypercall::guest_mem()
}

/// Cuts the deadline of the wait at `arg` to [`MAX_WAIT_NS`]; a deadline
/// of "never" stays where `refused` says the handler refuses it without
/// waiting.
fn cut_wait<T: shoal_loader::Pod>(arg: u64, deadline: impl Fn(&mut T) -> &mut u64, refused: impl Fn(&T) -> bool) {
    let m = mem();
    // Outside writable memory the handler refuses the call before waiting.
    if !hypercall::writable(arg, core::mem::size_of::<T>() as u64) {
        return;
    }
    let Ok(mut a) = m.read_obj::<T>(GuestAddr(arg)) else { return };
    let keep = refused(&a);
    let d = deadline(&mut a);
    if *d == u64::MAX && keep {
        return;
    }
    *d = (*d).min(MAX_WAIT_NS);
    let _ = m.write_obj(GuestAddr(arg), &a);
}

/// Whether `fd` is an open descriptor.
fn is_open(fd: i32) -> bool {
    // SAFETY: F_GETFD takes no pointer.
    unsafe { libc::fcntl(fd, libc::F_GETFD) >= 0 }
}

/// Whether `fd` is an open socket.
fn is_socket(fd: i32) -> bool {
    // SAFETY: an all-zero stat is valid; fstat writes one.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: `st` is a writable stat.
    unsafe { libc::fstat(fd, &mut st) == 0 && st.st_mode & libc::S_IFMT == libc::S_IFSOCK }
}

/// The open descriptors of this process that are sockets (the fuzzer has
/// none of its own: every one is the guest's).
fn sockets() -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else { return Vec::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok()).filter(|&fd| is_socket(fd)).collect()
}

fn close_guest_sockets() {
    for fd in sockets() {
        // SAFETY: a socket the guest made; nothing else holds it.
        unsafe { libc::close(fd) };
    }
}

/// Moves this process into a network namespace of its own, whose only
/// interface is loopback, and brings loopback up.
fn private_loopback() -> Result<(), i32> {
    crate::sys::unshare(libc::CLONE_NEWNET)?;
    // SAFETY: socket takes no pointers; the descriptor is owned below.
    let s = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if s < 0 {
        return Err(crate::sys::errno());
    }
    // SAFETY: `s` was just made and is owned here.
    let s = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(s) };
    // SAFETY: an all-zero ifreq is valid.
    let mut ifr: libc::ifreq = unsafe { core::mem::zeroed() };
    for (d, c) in ifr.ifr_name.iter_mut().zip(b"lo") {
        *d = *c as libc::c_char;
    }
    ifr.ifr_ifru.ifru_flags = (libc::IFF_UP | libc::IFF_LOOPBACK | libc::IFF_RUNNING) as libc::c_short;
    // SAFETY: SIOCSIFFLAGS reads one ifreq.
    if unsafe { libc::ioctl(s.as_raw_fd(), libc::SIOCSIFFLAGS, &ifr) } != 0 {
        return Err(crate::sys::errno());
    }
    Ok(())
}
