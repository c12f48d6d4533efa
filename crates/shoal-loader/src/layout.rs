//! Where everything goes in guest memory (see the table in `shoal_abi`).

use crate::image::{page_up, Image};
use shoal_abi::{ARGS_ADDR, ARGS_MAX, PAGE_SIZE};
use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;

/// Least free memory (heap) an instance gets: below this, `--mem` is too
/// small.
pub const MIN_HEAP: u64 = 1 << 20;
/// Largest main-thread stack.
pub const MAX_STACK: u64 = 8 << 20;
/// Smallest main-thread stack.
pub const MIN_STACK: u64 = 64 << 10;
/// Most bytes the initial process stack (argc, pointers, auxv, random
/// bytes) may take: a quarter of the stack.
pub const INITIAL_STACK_SHARE: u64 = 4;
/// Number of auxiliary vector entries the loader writes (with `AT_NULL`).
pub const AUXV_ENTRIES: u64 = 20;

/// Why a layout could not be planned.
#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    /// Guest memory too small for image + archive + heap + stack.
    #[error("--mem {mem} is too small for image {image} (needs at least {need})")]
    TooSmall {
        /// The requested size, human readable.
        mem: String,
        /// The image.
        image: String,
        /// The least size that works, human readable.
        need: String,
    },
    /// Guest memory size not a multiple of the page size.
    #[error("--mem {0:#x} is not a multiple of the page size (4 KiB)")]
    Unaligned(u64),
    /// argv and the environment do not fit at `ARGS_ADDR`.
    #[error("the arguments and environment take {0} bytes; at most {ARGS_MAX} fit")]
    ArgsTooLarge(u64),
    /// An argument or environment string contains a NUL byte.
    #[error("argument or environment string {0:?} contains a NUL byte")]
    Nul(OsString),
    /// Too many argument and environment strings for the initial stack.
    #[error("{0} argument and environment strings do not fit on the initial stack")]
    TooManyArgs(u64),
}

/// A planned guest memory layout. All addresses page aligned except where
/// noted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Size of guest memory.
    pub mem_size: u64,
    /// First page of the image.
    pub image_start: u64,
    /// End of the image's last page.
    pub image_end: u64,
    /// Guest address of the file-system archive (0 when there is none).
    pub archive_addr: u64,
    /// Size in bytes of the archive (not rounded).
    pub archive_size: u64,
    /// Start of free memory.
    pub heap_start: u64,
    /// End of free memory (exclusive).
    pub heap_end: u64,
    /// Lowest address of the main stack.
    pub stack_base: u64,
    /// One past the highest stack address (= `mem_size`).
    pub stack_top: u64,
    /// Bytes the argv and environment strings take at `ARGS_ADDR`
    /// (not rounded).
    pub args_len: u64,
}

/// Stack size for `mem` bytes of guest memory: an eighth of it, between
/// [`MIN_STACK`] and [`MAX_STACK`], in whole pages.
pub fn stack_size(mem: u64) -> u64 {
    ((mem / 8) & !(PAGE_SIZE - 1)).clamp(MIN_STACK, MAX_STACK)
}

/// Formats a byte count as the CLI reads it: `64M`, `1G`, `1536K`, or bytes.
pub fn format_size(n: u64) -> String {
    const K: u64 = 1 << 10;
    const M: u64 = 1 << 20;
    const G: u64 = 1 << 30;
    if n != 0 && n.is_multiple_of(G) {
        format!("{}G", n / G)
    } else if n != 0 && n.is_multiple_of(M) {
        format!("{}M", n / M)
    } else if n != 0 && n.is_multiple_of(K) {
        format!("{}K", n / K)
    } else {
        format!("{n}")
    }
}

/// Bytes argv and env strings take at `ARGS_ADDR` (each with its NUL).
pub fn args_len(argv: &[OsString], env: &[OsString]) -> Result<u64, LayoutError> {
    let mut total: u64 = 0;
    for s in argv.iter().chain(env) {
        if s.as_bytes().contains(&0) {
            return Err(LayoutError::Nul(s.clone()));
        }
        total = total.saturating_add(s.len() as u64 + 1);
    }
    Ok(total)
}

/// Bytes of the initial process stack for `nstrings` argument and
/// environment strings (before 16-byte alignment).
pub(crate) fn initial_stack_bytes(nargs: u64, nenv: u64) -> u64 {
    // argc, argv[], NULL, envp[], NULL, auxv pairs, 16 random bytes.
    (1 + nargs + 1 + nenv + 1 + 2 * AUXV_ENTRIES) * 8 + 16
}

/// Plans the layout of `mem_size` bytes of guest memory for `image`, an
/// archive of `archive_size` bytes (0: none) and the given argv/env.
pub fn plan(image: &Image, mem_size: u64, archive_size: u64, argv: &[OsString], env: &[OsString]) -> Result<Layout, LayoutError> {
    if !mem_size.is_multiple_of(PAGE_SIZE) {
        return Err(LayoutError::Unaligned(mem_size));
    }
    // A Linux executable: address space for its reservations on top (the
    // kernel keeps its writable memory within `mem_size`).
    let mem_size = if image.exec_entry().is_some() { mem_size.saturating_add(shoal_abi::EXEC_ADDRESS_RESERVE) } else { mem_size };
    let args = args_len(argv, env)?;
    if args > ARGS_MAX {
        return Err(LayoutError::ArgsTooLarge(args));
    }
    let image_start = image.start();
    let image_end = image.end();
    let (archive_addr, heap_start) = if archive_size == 0 { (0, image_end) } else { (image_end, page_up(image_end.saturating_add(archive_size))) };
    // Least memory that leaves MIN_HEAP between heap_start and the stack.
    let need_below_stack = heap_start.saturating_add(MIN_HEAP);
    // `m - stack_size(m)` never decreases as `m` grows (the stack grows by
    // at most an eighth of the growth), so step up by the deficit.
    let mut need = page_up(need_below_stack.saturating_add(MIN_STACK));
    while need.saturating_sub(stack_size(need)) < need_below_stack && need < u64::MAX / 2 {
        need = need.saturating_add(page_up(need_below_stack - need.saturating_sub(stack_size(need))));
    }
    let stack = stack_size(mem_size);
    if mem_size.saturating_sub(stack) < need_below_stack {
        return Err(LayoutError::TooSmall { mem: format_size(mem_size), image: image.path().display().to_string(), need: format_size(round_up_to_mib(need)) });
    }
    let nargs = argv.len() as u64;
    let nenv = env.len() as u64;
    if initial_stack_bytes(nargs, nenv) > stack / INITIAL_STACK_SHARE {
        return Err(LayoutError::TooManyArgs(nargs + nenv));
    }
    let stack_base = mem_size - stack;
    debug_assert!(ARGS_ADDR + args <= image_start);
    Ok(Layout {
        mem_size,
        image_start,
        image_end,
        archive_addr,
        archive_size,
        heap_start,
        heap_end: stack_base,
        stack_base,
        stack_top: mem_size,
        args_len: args,
    })
}

/// Rounds a suggestion up to whole MiB so the message suggests a usable
/// `--mem` value.
fn round_up_to_mib(n: u64) -> u64 {
    const M: u64 = 1 << 20;
    n.div_ceil(M).saturating_mul(M)
}
