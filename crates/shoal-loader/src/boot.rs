//! Filling guest memory: the image's segments, the archive, and the boot
//! state the kernel starts from (boot info, program headers, argv/env
//! strings, the initial process stack).
//!
//! None of these functions allocate, so a tender may call them in a child
//! forked from a multi-threaded process.

use crate::image::Image;
use crate::layout::{initial_stack_bytes, Layout};
use crate::mem::{GuestAddr, GuestMemory, MemError};
use crate::tsc::Clock;
use shoal_abi::{BootInfo, TenderKind, ABI_VERSION, ARGS_ADDR, BOOT_INFO_ADDR, BOOT_INFO_MAGIC, PHDR_OFFSET};
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;

/// Auxiliary vector keys (from Linux's `uapi/linux/auxvec.h`).
pub mod auxv {
    /// End of the vector.
    pub const AT_NULL: u64 = 0;
    /// An entry to skip: the place the kernel gives the vDSO's address
    /// (`AT_SYSINFO_EHDR`) when it runs an unmodified executable.
    pub const AT_IGNORE: u64 = 1;
    /// Address of the program headers.
    pub const AT_PHDR: u64 = 3;
    /// Size of one program header.
    pub const AT_PHENT: u64 = 4;
    /// Number of program headers.
    pub const AT_PHNUM: u64 = 5;
    /// Page size.
    pub const AT_PAGESZ: u64 = 6;
    /// Base address of the program's interpreter (0: none; the kernel
    /// sets it when it loads `ld.so` for a dynamically linked executable).
    pub const AT_BASE: u64 = 7;
    /// Program entry point.
    pub const AT_ENTRY: u64 = 9;
    /// Real user id.
    pub const AT_UID: u64 = 11;
    /// Effective user id.
    pub const AT_EUID: u64 = 12;
    /// Real group id.
    pub const AT_GID: u64 = 13;
    /// Effective group id.
    pub const AT_EGID: u64 = 14;
    /// CPU capabilities (cpuid leaf 1, edx).
    pub const AT_HWCAP: u64 = 16;
    /// Clock ticks per second (`times`).
    pub const AT_CLKTCK: u64 = 17;
    /// Secure mode (setuid): never.
    pub const AT_SECURE: u64 = 23;
    /// Address of 16 random bytes.
    pub const AT_RANDOM: u64 = 25;
    /// Address of the platform string (`x86_64`).
    pub const AT_PLATFORM: u64 = 15;
    /// More CPU capabilities (bit 1: FSGSBASE usable in user mode).
    pub const AT_HWCAP2: u64 = 26;
    /// Address of the executable's path (argv[0] here).
    pub const AT_EXECFN: u64 = 31;
    /// Least stack a signal handler needs.
    pub const AT_MINSIGSTKSZ: u64 = 51;
}

/// Where the platform string `AT_PLATFORM` points goes: the last 16 bytes
/// before the program headers in the (read-only) boot-info page.
const PLATFORM_ADDR: u64 = BOOT_INFO_ADDR + PHDR_OFFSET - 16;
const _: () = assert!(core::mem::size_of::<BootInfo>() as u64 <= PHDR_OFFSET - 16);

/// Linux's `AT_MINSIGSTKSZ`: the signal frame with the FPU state this CPU
/// saves (cpuid leaf 0xd, ebx: the XSAVE area for the features XCR0
/// enables) plus the frame's fixed part, as Linux sizes it.
fn min_sigstksz() -> u64 {
    // Leaf 0xd exists where XSAVE does (every CPU shoal runs on); the
    // legacy 512-byte area is the least any CPU saves.
    let xsave = u64::from(core::arch::x86_64::__cpuid_count(0xd, 0).ebx).max(512);
    // rt_sigframe without the FPU area (440 bytes), the 64-byte alignment
    // of the area and FP_XSTATE_MAGIC2, rounded up as Linux does.
    (xsave + 440 + 64 + 4 + 15) & !15
}

/// The name every instance reports from `uname` for now.
pub const HOSTNAME: &str = "shoal";

/// Why guest memory could not be filled.
#[derive(Debug, thiserror::Error)]
pub enum BootError {
    /// Something did not fit in guest memory (a layout/memory mismatch).
    #[error("cannot write the {what} into guest memory: {source}")]
    Memory {
        /// What was being written.
        what: &'static str,
        /// The failed range.
        source: MemError,
    },
    /// The image file could not be read (it shrank since it was checked,
    /// or the disk failed).
    #[error("cannot read the image's segments: {0}")]
    Read(std::io::Error),
    /// The host could not provide random bytes.
    #[error("cannot get random bytes from the host: {0}")]
    Random(getrandom::Error),
}

fn mem_err(what: &'static str) -> impl Fn(MemError) -> BootError {
    move |source| BootError::Memory { what, source }
}

/// What the tender passes to [`write_boot_state`] besides image and layout.
#[derive(Clone, Copy, Debug)]
pub struct BootParams {
    /// Which tender this is.
    pub tender: TenderKind,
    /// spt: the hypercall function's address; hvt: 0.
    pub hypercall_entry: u64,
    /// TSC calibration and the wall clock at boot.
    pub clock: Clock,
    /// Seed for the kernel's random numbers.
    pub random_seed: [u8; 32],
    /// The 16 bytes `AT_RANDOM` points at (libc's stack canary).
    pub at_random: [u8; 16],
    /// Host name, NUL padded.
    pub hostname: [u8; 64],
    /// Network flags (`shoal_abi::NET_OUTBOUND`).
    pub net_flags: u64,
    /// Listening host sockets handed to the guest (the first
    /// `listener_count`).
    pub listeners: [shoal_abi::Listener; shoal_abi::MAX_LISTENERS],
    /// How many of `listeners` are used.
    pub listener_count: u64,
    /// Console flags (`shoal_abi::CONSOLE_STDIN_TTY`, `CONSOLE_STDOUT_TTY`,
    /// `CONSOLE_STDOUT_LINES`).
    pub console_flags: u64,
    /// The volume's guest directory, NUL padded (all zero: no volume).
    pub volume_path: [u8; shoal_abi::VOLUME_PATH_MAX],
    /// Largest archive the tender takes back (`VolumeSave`).
    pub volume_max: u64,
    /// A fault to inject into a kernel component (`--inject`; all zero:
    /// none).
    pub inject: shoal_abi::Inject,
    /// Rejuvenation period in nanoseconds (`--rejuvenate-every`; 0: none).
    pub rejuvenate_ns: u64,
    /// The hang watchdog's limit in nanoseconds (`--watchdog`; 0: off).
    pub watchdog_ns: u64,
    /// `shoal_abi::RECOVER_OFF` for `--no-recover`.
    pub recover_flags: u64,
    /// The working directory, NUL padded (all zero: `/`).
    pub cwd: [u8; shoal_abi::CWD_MAX],
    /// The uid and gid the program sees.
    pub uid: u32,
    /// See `uid`.
    pub gid: u32,
    /// The errno each of the program's system calls is refused with
    /// (`--seccomp-deny`; all zero: none).
    pub syscall_errno: [u8; shoal_abi::SECCOMP_CALLS],
}

/// What the guest is told about the tender's standard input and output:
/// whether each is a terminal (so the guest's `isatty(0)` answers as the
/// program would natively, and a guest that buffers its output flushes it
/// line by line on a terminal, a pipe or a socket).
fn console_flags() -> u64 {
    // SAFETY: isatty only inspects the descriptor, which may be closed
    // (then it answers 0).
    let tty = |fd| unsafe { libc::isatty(fd) } == 1;
    let mut f = 0;
    if tty(0) {
        f |= shoal_abi::CONSOLE_STDIN_TTY;
    }
    if tty(1) {
        f |= shoal_abi::CONSOLE_STDOUT_TTY;
    }
    // SAFETY: a zeroed stat is valid; fstat only writes it.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: fstat on a descriptor number (EBADF if closed) into `st`.
    let regular = unsafe { libc::fstat(1, &mut st) } == 0 && st.st_mode & libc::S_IFMT == libc::S_IFREG;
    if !regular {
        f |= shoal_abi::CONSOLE_STDOUT_LINES;
    }
    f
}

impl BootParams {
    /// Parameters with fresh random bytes from the host and the default
    /// host name.
    pub fn new(tender: TenderKind, hypercall_entry: u64, clock: Clock) -> Result<BootParams, BootError> {
        let mut random_seed = [0u8; 32];
        let mut at_random = [0u8; 16];
        getrandom::fill(&mut random_seed).map_err(BootError::Random)?;
        getrandom::fill(&mut at_random).map_err(BootError::Random)?;
        let mut hostname = [0u8; 64];
        hostname[..HOSTNAME.len()].copy_from_slice(HOSTNAME.as_bytes());
        Ok(BootParams {
            tender,
            hypercall_entry,
            clock,
            random_seed,
            at_random,
            hostname,
            net_flags: 0,
            listeners: [shoal_abi::Listener::default(); shoal_abi::MAX_LISTENERS],
            listener_count: 0,
            console_flags: console_flags(),
            volume_path: [0; shoal_abi::VOLUME_PATH_MAX],
            volume_max: 0,
            inject: shoal_abi::Inject::default(),
            rejuvenate_ns: 0,
            watchdog_ns: shoal_abi::DEFAULT_WATCHDOG_NS,
            recover_flags: 0,
            cwd: [0; shoal_abi::CWD_MAX],
            uid: 0,
            gid: 0,
            syscall_errno: [0; shoal_abi::SECCOMP_CALLS],
        })
    }
}

/// Where the guest starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryState {
    /// Instruction pointer: the image's entry point.
    pub rip: u64,
    /// Stack pointer: `argc` of the initial process stack, 16-byte aligned.
    pub rsp: u64,
    /// First argument: the boot-info address.
    pub rdi: u64,
}

/// Copies every segment's file bytes to its address and zeroes the rest of
/// the page the file bytes end in.
///
/// Guest memory must start zeroed (fresh anonymous memory): the bss beyond
/// that page is not touched, so it stays lazily backed, and file pages that
/// are all zero are skipped.
pub fn load_segments(mem: &GuestMemory, image: &Image) -> Result<(), BootError> {
    load_segments_except(mem, image, &[])
}

/// Bytes read from the image file per `pread` while loading: one buffer,
/// reused, so loading touches no memory but guest pages and the buffer's
/// few pages. The buffer is on the heap, not the stack: the spt instance
/// gives its free heap back before entering the guest (`malloc_trim`),
/// while stack pages, once touched, stay resident for the instance's whole
/// life (32 KiB of private memory per idle instance).
const LOAD_CHUNK: usize = 32 << 10;

/// Like [`load_segments`], but leaves the guest ranges in `skip` (sorted,
/// disjoint, page aligned: the pages the library pool provides) alone.
///
/// The bytes come from the image file in [`LOAD_CHUNK`] pieces through one
/// buffer: every guest page is written once (populated first, see
/// [`GuestMemory::populate_write`], instead of one page fault each), no
/// copy of the whole image is ever made in the tender's memory, and pages
/// of the file that are all zero are recognised before guest memory is
/// touched.
pub fn load_segments_except(mem: &GuestMemory, image: &Image, skip: &[(u64, u64)]) -> Result<(), BootError> {
    let mut buf = vec![0u8; LOAD_CHUNK];
    for s in image.segments() {
        let file_end = s.vaddr + s.filesz;
        let zero_end = (s.vaddr + s.memsz).min(crate::image::page_up(file_end));
        // Walk [vaddr, zero_end) in pieces outside `skip`.
        let mut at = s.vaddr;
        while at < zero_end {
            if let Some(&(_, e)) = skip.iter().find(|&&(a, e)| a <= at && at < e) {
                at = e;
                continue;
            }
            let next = skip.iter().map(|&(a, _)| a).filter(|&a| a > at).min().unwrap_or(u64::MAX).min(zero_end);
            let data_end = next.min(file_end);
            let mut chunk = at;
            while chunk < data_end {
                // Chunks end on page boundaries (after the first, which may
                // start inside a page), so each page is checked whole.
                // (At most LOAD_CHUNK bytes, and more than none.)
                let chunk_end = (crate::image::page_down(chunk) + LOAD_CHUNK as u64).min(data_end);
                let bytes = &mut buf[..(chunk_end - chunk) as usize];
                image.read_segment(s, chunk - s.vaddr, bytes).map_err(BootError::Read)?;
                // Guest memory is fresh anonymous memory, already zero:
                // pages of the file that are all zero (the holes of aligned
                // layouts, zero-initialised data) are skipped, so they cost
                // no memory.
                // Each run of pages that are not all zero is populated
                // with one system call before it is written: a page fault
                // costs 3-5 µs on a nested host, and a copy-mode image is
                // mostly such pages (hello: 216 faults fewer per start).
                let mut piece = chunk;
                let mut run: Option<u64> = None;
                while piece < chunk_end {
                    let piece_end = crate::image::page_up(piece + 1).min(chunk_end);
                    let off = (piece - chunk) as usize;
                    let zero = all_zero(&bytes[off..off + (piece_end - piece) as usize]);
                    if !zero && run.is_none() {
                        run = Some(piece);
                    }
                    let run_end = if zero {
                        Some(piece)
                    } else if piece_end == chunk_end {
                        Some(piece_end)
                    } else {
                        None
                    };
                    if let (Some(start), Some(end)) = (run, run_end) {
                        mem.populate_write(GuestAddr(start), end - start);
                        let from = (start - chunk) as usize;
                        mem.write(GuestAddr(start), &bytes[from..from + (end - start) as usize]).map_err(mem_err("image segment"))?;
                        run = None;
                    }
                    piece = piece_end;
                }
                chunk = chunk_end;
            }
            let z = at.max(file_end);
            if z < next {
                mem.zero(GuestAddr(z), next - z).map_err(mem_err("image bss"))?;
            }
            at = next;
        }
    }
    Ok(())
}

/// Whether `bytes` are all zero, 16 bytes at a time (a page per check).
fn all_zero(bytes: &[u8]) -> bool {
    let mut chunks = bytes.chunks_exact(16);
    let wide = chunks.by_ref().fold(0u128, |acc, c| {
        let mut w = [0u8; 16];
        w.copy_from_slice(c);
        acc | u128::from_ne_bytes(w)
    });
    wide == 0 && chunks.remainder().iter().all(|&b| b == 0)
}

/// Copies the file-system archive to its planned address.
pub fn load_archive(mem: &GuestMemory, layout: &Layout, archive: &[u8]) -> Result<(), BootError> {
    if archive.is_empty() {
        return Ok(());
    }
    mem.write(GuestAddr(layout.archive_addr), archive).map_err(mem_err("file-system archive"))
}

/// `cpuid` leaf 1, register edx: what Linux passes as `AT_HWCAP` on x86-64.
pub fn hwcap() -> u64 {
    // On every x86-64 CPU cpuid leaf 1 exists.
    let r = core::arch::x86_64::__cpuid(1);
    u64::from(r.edx)
}

/// Where the initial stack frame (`frame` bytes without the 16 random
/// bytes) and the argument and environment strings (`args_len` bytes) go:
/// `(rsp, first string)`. As Linux does, the strings sit at the top of the
/// stack, right below the random bytes, with the frame below them, when
/// all of it fits the stack's top page, which the frame touches anyway;
/// otherwise they go to `ARGS_ADDR`, below the image (a page of its own:
/// in every instance before, 4 KiB of guest memory for a few bytes).
pub(crate) fn initial_frame(stack_top: u64, args_len: u64, frame: u64) -> (u64, u64) {
    let random_addr = stack_top - 16;
    let strings = random_addr.saturating_sub(args_len);
    let rsp = strings.saturating_sub(frame) & !15;
    if rsp >= stack_top.saturating_sub(shoal_abi::PAGE_SIZE) {
        (rsp, strings)
    } else {
        ((random_addr - frame) & !15, ARGS_ADDR)
    }
}

/// Writes the boot info, the program headers, the argv/env strings and the
/// initial process stack; returns where the guest starts.
///
/// `argv` and `env` must be those `layout` was planned with.
pub fn write_boot_state(
    mem: &GuestMemory,
    image: &Image,
    layout: &Layout,
    argv: &[OsString],
    env: &[OsString],
    params: &BootParams,
) -> Result<EntryState, BootError> {
    let phdr_addr = BOOT_INFO_ADDR + PHDR_OFFSET;
    let info = BootInfo {
        magic: BOOT_INFO_MAGIC,
        abi_version: ABI_VERSION,
        tender: params.tender as u32,
        mem_size: layout.mem_size,
        image_start: layout.image_start,
        image_end: layout.image_end,
        heap_start: layout.heap_start,
        heap_end: layout.heap_end,
        stack_base: layout.stack_base,
        stack_top: layout.stack_top,
        hypercall_entry: params.hypercall_entry,
        fs_archive_addr: layout.archive_addr,
        fs_archive_size: layout.archive_size,
        tsc_hz: params.clock.tsc_hz,
        tsc_at_boot: params.clock.tsc_at_boot,
        realtime_ns_at_boot: params.clock.realtime_ns_at_boot,
        phdr_addr,
        phnum: image.phnum(),
        random_seed: params.random_seed,
        hostname: params.hostname,
        net_flags: params.net_flags,
        listener_count: params.listener_count.min(shoal_abi::MAX_LISTENERS as u64),
        listeners: params.listeners,
        console_flags: params.console_flags,
        volume_path: params.volume_path,
        volume_max: params.volume_max,
        inject: params.inject,
        rejuvenate_ns: params.rejuvenate_ns,
        watchdog_ns: params.watchdog_ns,
        recover_flags: params.recover_flags,
        cwd: params.cwd,
        uid: params.uid,
        gid: params.gid,
        syscall_errno: params.syscall_errno,
    };
    mem.write_obj(GuestAddr(BOOT_INFO_ADDR), &info).map_err(mem_err("boot info"))?;
    mem.write(GuestAddr(phdr_addr), image.phdrs()).map_err(mem_err("program headers"))?;

    // The stack frame, from its (aligned) bottom upwards.
    let nargs = argv.len() as u64;
    let nenv = env.len() as u64;
    let random_addr = layout.stack_top - 16;
    let frame = initial_stack_bytes(nargs, nenv) - 16;
    let (rsp, strings) = initial_frame(layout.stack_top, layout.args_len, frame);
    mem.write(GuestAddr(random_addr), &params.at_random).map_err(mem_err("AT_RANDOM bytes"))?;

    let mut word = GuestAddr(rsp);
    let mut push = |v: u64| -> Result<(), BootError> {
        mem.write_obj(word, &v).map_err(mem_err("initial stack"))?;
        word = GuestAddr(word.0 + 8);
        Ok(())
    };
    push(nargs)?;
    mem.write(GuestAddr(PLATFORM_ADDR), b"x86_64\0").map_err(mem_err("platform string"))?;
    let execfn = if argv.is_empty() { 0 } else { strings };
    let mut string = GuestAddr(strings);
    for list in [argv, env] {
        for s in list {
            let b = s.as_bytes();
            mem.write(string, b).map_err(mem_err("argument strings"))?;
            mem.write(GuestAddr(string.0 + b.len() as u64), &[0]).map_err(mem_err("argument strings"))?;
            push(string.0)?;
            string = GuestAddr(string.0 + b.len() as u64 + 1);
        }
        push(0)?;
    }
    use auxv::*;
    let aux = [
        (AT_PHDR, phdr_addr),
        (AT_PHENT, crate::image::PHDR_SIZE),
        (AT_PHNUM, image.phnum()),
        (AT_PAGESZ, shoal_abi::PAGE_SIZE),
        (AT_BASE, 0),
        (AT_ENTRY, image.entry()),
        (AT_UID, 0),
        (AT_EUID, 0),
        (AT_GID, 0),
        (AT_EGID, 0),
        (AT_SECURE, 0),
        (AT_RANDOM, random_addr),
        (AT_HWCAP, hwcap()),
        (AT_CLKTCK, 100),
        (AT_PLATFORM, PLATFORM_ADDR),
        (AT_HWCAP2, 2),
        (AT_EXECFN, execfn),
        (AT_MINSIGSTKSZ, min_sigstksz()),
        (AT_IGNORE, 0),
        (AT_NULL, 0),
    ];
    debug_assert!(aux.len() as u64 <= crate::layout::AUXV_ENTRIES);
    for (k, v) in aux {
        push(k)?;
        push(v)?;
    }
    Ok(EntryState { rip: image.entry(), rsp, rdi: BOOT_INFO_ADDR })
}

#[cfg(test)]
mod zero_tests {
    use super::all_zero;

    #[test]
    fn finds_a_single_set_byte_anywhere() {
        assert!(all_zero(&[]));
        assert!(all_zero(&[0u8; 4096]));
        for len in [1usize, 15, 16, 17, 4095, 4096] {
            for at in [0, len / 2, len - 1] {
                let mut b = vec![0u8; len];
                b[at] = 1;
                assert!(!all_zero(&b), "len {len}, byte {at}");
            }
        }
    }
}
