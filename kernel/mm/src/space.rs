//! The address-space bookkeeping of the managed memory `[base, end)`.
//!
//! The managed range is cut into page-aligned *segments* kept in one sorted
//! table that covers it without gaps. A segment is free (clean: never handed
//! out, so still zero from the tender; or dirty: handed out before), part of
//! the program break, part of the kernel heap, or an anonymous mapping with
//! its recorded protection. Neighbours with equal state are merged, so freed
//! ranges coalesce. The table is a fixed array (no allocation: the kernel
//! heap itself grows from here), searched by binary search; operations are
//! linear in the number of segments, which stays small because of merging.
//!
//! Placement: the break grows up from `base`; mappings and kernel-heap
//! chunks are placed top-down (highest free run that fits), as Linux places
//! mmaps below the stack, so the two meet only when memory is exhausted.
//! One exception: in a managed range of at least [`KERNEL_LOW_MIN`], the
//! lowest [`KERNEL_LOW`] bytes are kept for the kernel's own pages (the
//! heap's first chunk, hvt's console buffer), placed there bottom-up while
//! they fit, and the break starts above them. The host's page tables cover guest
//! memory in 2 MiB ranges (a 4 KiB table each, in every spt instance's
//! process; hvt's guest tables likewise): right above the image, the first
//! chunk shares the range the image's data and bss need anyway, where at
//! the top, 4 MiB below the stack's top, it needed one of its own (an idle
//! spt instance: page tables 4 KiB smaller, `bench density`).
//!
//! Zero-fill: memory given to the program reads as zero the first time, as
//! on Linux. Clean free pages are zero already and are not touched (touching
//! them would make the tender back them with host memory); dirty ones are
//! zeroed when handed out again, a page at a time and only when the page is
//! not already all zero.
//!
//! Giving memory back: freed pages (`munmap`, a shrinking break or
//! `mremap`) become dirty free pages. When more than [`RELEASE_HIGH`]
//! bytes are dirty, dirty ranges go back to the tender, lowest addresses
//! first, until [`RELEASE_LOW`] bytes are left, in one `Release` hypercall
//! per [`shoal_abi::RELEASE_LIST_MAX`] ranges ([`Space::release_down_to`]):
//! the host frees the memory behind them, and they are clean again (zero,
//! untouched). The dirty pages kept are the highest ones, which top-down
//! placement hands out first: a program that frees and maps again at once
//! (allocators do; a 2 MiB buffer per request) reuses resident memory
//! instead of paying a hypercall (on hvt a VM exit) and the host page
//! faults every time, and at most [`RELEASE_HIGH`] of freed memory stays
//! with the host. `madvise(MADV_DONTNEED)` and `MADV_FREE` release their
//! range at once ([`Space::dontneed`]).

use shoal_plat::Errno;

/// Page size.
pub const PAGE: u64 = shoal_abi::PAGE_SIZE;

/// Bytes at the bottom of the managed range kept for the kernel's first
/// pages (module docs), below the start of the break: the heap's first
/// chunk (256 KiB) and hvt's console buffer (32 KiB), with room to spare.
pub const KERNEL_LOW: u64 = 320 << 10;

/// Smallest managed range that keeps [`KERNEL_LOW`] for the kernel heap
/// (below it every byte of the break counts more than a page table).
pub const KERNEL_LOW_MIN: u64 = 4 << 20;

/// Dirty free bytes above which the kernel gives freed memory back to the
/// tender (see the module docs).
pub const RELEASE_HIGH: u64 = 2 << 20;
/// Dirty free bytes a release leaves (the highest ones).
pub const RELEASE_LOW: u64 = 1 << 20;

/// Capacity of the segment table. When it is full, operations that would
/// split a segment fail with `ENOMEM` instead of crashing.
pub const MAX_SEGS: usize = 8192;

/// `PROT_*` bits Linux accepts.
pub const PROT_READ: u32 = 1;
/// Writable.
pub const PROT_WRITE: u32 = 2;
/// Executable.
pub const PROT_EXEC: u32 = 4;
/// Atomic-operation capable (no effect on x86).
pub const PROT_SEM: u32 = 8;
/// Applies down to the start of a grows-down mapping.
pub const PROT_GROWSDOWN: u32 = 0x0100_0000;
/// Applies up to the end of a grows-up mapping.
pub const PROT_GROWSUP: u32 = 0x0200_0000;

/// `mremap` may move the mapping.
pub const MREMAP_MAYMOVE: u32 = 1;
/// `mremap` moves to `new_addr`.
pub const MREMAP_FIXED: u32 = 2;
/// `mremap` keeps the old range mapped (zero-filled).
pub const MREMAP_DONTUNMAP: u32 = 4;

/// What a segment holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Use {
    /// Free. `dirty`: handed out before, so not known to be zero.
    Free {
        /// Not known to be zero.
        dirty: bool,
    },
    /// Part of the program break (`brk`).
    Brk,
    /// Part of the kernel's own heap.
    Kernel,
    /// An anonymous mapping of the program, with its `PROT_*` bits.
    Anon {
        /// Recorded protection (`PROT_READ|PROT_WRITE|PROT_EXEC|PROT_SEM`).
        prot: u8,
    },
}

impl Use {
    /// The protection the pages really have (`shoal_abi::PROT_*` bits of
    /// the `Protect` hypercall): a program mapping's recorded protection
    /// (x86 pages are readable when executable; execute, only in an
    /// unmodified executable's instance, is what its libraries and JIT code
    /// need, W^X flips and RWX included; a shoal image's code is its only
    /// executable memory), read-write for everything else.
    pub fn real_prot(self) -> u64 {
        // Execute only where the program is an unmodified executable.
        let exec = |prot: u8| {
            if u32::from(prot) & PROT_EXEC != 0 && RUN_TIME_CODE.load(core::sync::atomic::Ordering::Relaxed) {
                shoal_abi::PROT_EXEC
            } else {
                0
            }
        };
        match self {
            Use::Anon { prot } if u32::from(prot) & PROT_WRITE != 0 => RW | exec(prot),
            Use::Anon { prot } if u32::from(prot) & (PROT_READ | PROT_EXEC) != 0 => shoal_abi::PROT_READ | exec(prot),
            Use::Anon { .. } => 0,
            _ => RW,
        }
    }
}

const RW: u64 = shoal_abi::PROT_READ | shoal_abi::PROT_WRITE;

/// A bit of [`Use::Anon`]'s `prot` beside the `PROT_*` bits: the mapping
/// has no access and was made on clean free memory, so its pages still
/// read as zero. A runtime's address-space reservation (Go reserves 64 MiB
/// arenas `PROT_NONE`, then maps them read-write with `MAP_FIXED`) is then
/// replaced without zeroing pages nobody touched: zeroing them cost 40 ms
/// per 64 MiB on spt and 1.7 s on hvt, and made them resident.
const CLEAN: u8 = 0x80;

/// Whether mappings the program makes executable (and not writable) are
/// executable: only in an unmodified executable, for code it makes at run
/// time (`shoal_abi::PROT_EXEC`). A writable and executable mapping is
/// only writable: a JIT that writes and runs the same page at once faults
/// at the first instruction (W^X).
static RUN_TIME_CODE: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// Lets the program's executable mappings be executable (set once, at the
/// start of an unmodified executable).
pub fn allow_run_time_code() {
    RUN_TIME_CODE.store(true, core::sync::atomic::Ordering::Relaxed);
}

/// Asks the tender to give `[a, b)` protection `prot`. Without a tender
/// (unit tests) nothing happens. A tender that refuses leaves the pages as
/// they were, which only loses the fault a protected page would give.
/// `untouched`: every page of the range is clean free memory, so the
/// tender may skip the flush that taking access away needs otherwise
/// (`shoal_abi::PROTECT_UNTOUCHED`).
fn set_real_prot(a: u64, b: u64, prot: u64, untouched: bool) {
    if shoal_plat::boot::booted() {
        let hint = if untouched { shoal_abi::PROTECT_UNTOUCHED } else { 0 };
        let r = shoal_plat::hypercall::protect(a, b - a, prot | hint);
        // A tender that cannot make pages executable: read-only at least.
        if r < 0 && prot & shoal_abi::PROT_EXEC != 0 {
            let _ = shoal_plat::hypercall::protect(a, b - a, shoal_abi::PROT_READ | hint);
        }
    }
    #[cfg(test)]
    PROTECTED.with(|p| p.borrow_mut().push((a, b, prot)));
}

/// Asks the tender to give the host memory behind `ranges` back (they read
/// as zero afterwards); whether it did. Without a tender (unit tests) the
/// request is recorded in [`RELEASED`] and the pages are zeroed, as the
/// host would leave them.
pub(crate) fn give_back(ranges: &[shoal_abi::ReleaseRange]) -> bool {
    if ranges.is_empty() {
        return true;
    }
    #[cfg(test)]
    {
        RELEASED.with(|r| r.borrow_mut().extend(ranges.iter().map(|x| (x.addr, x.addr + x.len))));
        for x in ranges {
            // SAFETY: test memory the Space manages, which its caller freed
            // or discarded.
            unsafe { core::ptr::write_bytes(x.addr as *mut u8, 0, x.len as usize) };
        }
        true
    }
    #[cfg(not(test))]
    {
        shoal_plat::boot::booted() && shoal_plat::hypercall::release(ranges) == 0
    }
}

#[cfg(test)]
std::thread_local! {
    /// Every range given back to the host, for the unit tests.
    pub static RELEASED: core::cell::RefCell<std::vec::Vec<(u64, u64)>> = const { core::cell::RefCell::new(std::vec::Vec::new()) };
}

#[cfg(test)]
std::thread_local! {
    /// Every real-protection change requested, for the unit tests.
    pub static PROTECTED: core::cell::RefCell<std::vec::Vec<(u64, u64, u64)>> = const { core::cell::RefCell::new(std::vec::Vec::new()) };
}

impl Use {
    fn is_free(self) -> bool {
        matches!(self, Use::Free { .. })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Seg {
    start: u64,
    end: u64,
    what: Use,
}

const EMPTY: Seg = Seg { start: 0, end: 0, what: Use::Free { dirty: false } };

/// Rounds `x` up to a page; `None` on overflow.
pub fn page_up(x: u64) -> Option<u64> {
    x.checked_add(PAGE - 1).map(|v| v & !(PAGE - 1))
}

/// Rounds `x` down to a page.
pub fn page_down(x: u64) -> u64 {
    x & !(PAGE - 1)
}

/// Writes zeros over `[a, b)` (page aligned), skipping pages that already
/// read as zero so that untouched memory stays untouched by writes.
///
/// # Safety
/// `[a, b)` must be memory the caller may overwrite.
pub(crate) unsafe fn zero_range(a: u64, b: u64) {
    let mut p = a;
    while p < b {
        // SAFETY: the page [p, p + PAGE) is inside [a, b), which the caller
        // lets us read and write; it is page aligned, so u64 aligned.
        unsafe {
            let words = core::slice::from_raw_parts(p as *const u64, (PAGE / 8) as usize);
            if words.iter().any(|&w| w != 0) {
                core::ptr::write_bytes(p as *mut u8, 0, PAGE as usize);
            }
        }
        p += PAGE;
    }
}

/// The managed memory and its segments.
///
/// `repr(C)` with the segment table last: the scalars and the first
/// segments (all an idle program has) share one page of mm's bss. Laid out
/// by Rust, the scalars went after the 192 KiB table, so every instance
/// wrote a page at each end of it.
#[repr(C)]
pub struct Space {
    /// Lowest guest address that counts as mapped (outside the managed range
    /// it is the image, the archive or the stack: mapped, never released).
    lo: u64,
    /// One past the highest guest address.
    hi: u64,
    base: u64,
    end: u64,
    len: usize,
    free_pages: u64,
    /// Lowest address of the break: `base`, or `base + KERNEL_LOW`.
    brk_base: u64,
    brk_cur: u64,
    /// Bytes of dirty free pages (`Use::Free { dirty: true }`).
    dirty: u64,
    /// The tender refused a release: stop asking (memory is then zeroed
    /// by the kernel when handed out again, as before).
    release_off: bool,
    segs: [Seg; MAX_SEGS],
}

impl Space {
    /// An empty space (manages nothing until [`Space::init`]).
    pub const fn new() -> Space {
        Space { lo: 0, hi: 0, base: 0, end: 0, len: 0, free_pages: 0, brk_base: 0, brk_cur: 0, dirty: 0, release_off: false, segs: [EMPTY; MAX_SEGS] }
    }

    /// Manages `[base, end)` (rounded inwards to pages); guest memory as a
    /// whole is `[lo, hi)`. The memory must be zero (fresh from the tender).
    pub fn init(&mut self, lo: u64, hi: u64, base: u64, end: u64) {
        let base = page_up(base).unwrap_or(!(PAGE - 1));
        let end = page_down(end).max(base);
        self.lo = lo;
        self.hi = hi;
        self.base = base;
        self.end = end;
        self.brk_base = if end - base >= KERNEL_LOW_MIN { base + KERNEL_LOW } else { base };
        self.brk_cur = self.brk_base;
        if end > base {
            self.segs[0] = Seg { start: base, end, what: Use::Free { dirty: false } };
            self.len = 1;
        } else {
            self.len = 0;
        }
        self.free_pages = (end - base) / PAGE;
        self.dirty = 0;
    }

    /// `(total, free)` bytes of the managed range.
    pub fn stats(&self) -> (u64, u64) {
        (self.end - self.base, self.free_pages * PAGE)
    }

    /// Bytes the program has mapped (anonymous and file mappings) and, of
    /// those, the writable ones, plus the break: what `RLIMIT_AS` and
    /// `RLIMIT_DATA` count. `(mapped, writable, brk)`.
    pub fn usage(&self) -> (u64, u64, u64) {
        let (mut mapped, mut writable, mut brk) = (0, 0, 0);
        for s in &self.segs[..self.len] {
            let n = s.end - s.start;
            match s.what {
                Use::Anon { prot } => {
                    mapped += n;
                    if prot as u32 & PROT_WRITE != 0 {
                        writable += n;
                    }
                }
                Use::Brk => brk += n,
                _ => {}
            }
        }
        (mapped, writable, brk)
    }

    /// See [`crate::for_each_mapping`].
    pub fn for_each_mapping(&self, f: &mut impl FnMut(u64, u64, u32, bool)) {
        let mut run: Option<(u64, u64, u32, bool)> = None;
        for s in &self.segs[..self.len] {
            let kind = match s.what {
                Use::Anon { prot } => Some((u32::from(prot & 0xf), false)),
                Use::Brk => Some((PROT_READ | PROT_WRITE, true)),
                _ => None,
            };
            match (run, kind) {
                (Some((a, b, p, k)), Some((q, l))) if b == s.start && p == q && k == l => run = Some((a, s.end, p, k)),
                (_, k) => {
                    if let Some((a, b, p, k)) = run {
                        f(a, b, p, k);
                    }
                    run = k.map(|(q, l)| (s.start, s.end, q, l));
                }
            }
        }
        if let Some((a, b, p, k)) = run {
            f(a, b, p, k);
        }
    }

    /// The managed range.
    pub fn range(&self) -> (u64, u64) {
        (self.base, self.end)
    }

    /// Index of the segment holding `addr` (`base <= addr < end`).
    fn idx_of(&self, addr: u64) -> usize {
        debug_assert!(addr >= self.base && addr < self.end);
        // The last segment whose start is <= addr.
        self.segs[..self.len].partition_point(|s| s.start <= addr) - 1
    }

    /// Makes `addr` a segment boundary; returns the index of the segment
    /// starting there (`len` for `end`). Needs one free table slot.
    fn split(&mut self, addr: u64) -> usize {
        if addr >= self.end {
            return self.len;
        }
        let i = self.idx_of(addr);
        if self.segs[i].start == addr {
            return i;
        }
        assert!(self.len < MAX_SEGS, "mm: segment table full after capacity check");
        self.segs.copy_within(i..self.len, i + 1);
        self.len += 1;
        self.segs[i].end = addr;
        self.segs[i + 1].start = addr;
        i + 1
    }

    /// Whether `n` more segments fit (each change splits at most twice).
    fn room(&self, n: usize) -> Result<(), Errno> {
        if self.len + n <= MAX_SEGS {
            Ok(())
        } else {
            Err(Errno::ENOMEM)
        }
    }

    /// Gives `[start, end)` (inside the managed range, page aligned) the use
    /// `what`, merging with equal neighbours. The caller checked `room(2)`.
    fn assign(&mut self, start: u64, end: u64, what: Use) {
        if start >= end {
            return;
        }
        self.apply_protection(start, end, what.real_prot());
        let i = self.split(start);
        let j = self.split(end);
        for s in &self.segs[i..j] {
            if s.what.is_free() {
                self.free_pages -= (s.end - s.start) / PAGE;
            }
            if s.what == (Use::Free { dirty: true }) {
                self.dirty -= s.end - s.start;
            }
        }
        if what.is_free() {
            self.free_pages += (end - start) / PAGE;
        }
        if what == (Use::Free { dirty: true }) {
            self.dirty += end - start;
        }
        self.segs[i] = Seg { start, end, what };
        if j > i + 1 {
            self.segs.copy_within(j..self.len, i + 1);
            self.len -= j - i - 1;
        }
        // Merge with the right neighbour, then the left one.
        if i + 1 < self.len && self.segs[i + 1].what == what {
            self.segs[i].end = self.segs[i + 1].end;
            self.segs.copy_within(i + 2..self.len, i + 1);
            self.len -= 1;
        }
        if i > 0 && self.segs[i - 1].what == what {
            self.segs[i - 1].end = self.segs[i].end;
            self.segs.copy_within(i + 1..self.len, i);
            self.len -= 1;
        }
    }

    /// Makes the pages' real protection in `[start, end)` `prot` where the
    /// table says otherwise (runs of pieces that differ, one request each).
    /// The table is the truth the real protection follows: every change of
    /// a segment goes through [`Space::assign`], which calls this first.
    fn apply_protection(&self, start: u64, end: u64, prot: u64) {
        // A run: its range and whether every piece of it is clean.
        let mut run: Option<(u64, u64, bool)> = None;
        self.pieces(start, end, |a, b, w| {
            let clean = w == Use::Free { dirty: false };
            if w.real_prot() == prot {
                if let Some((x, y, c)) = run.take() {
                    set_real_prot(x, y, prot, c);
                }
            } else {
                run = Some(match run {
                    Some((x, y, c)) if y == a => (x, b, c && clean),
                    Some((x, y, c)) => {
                        set_real_prot(x, y, prot, c);
                        (a, b, clean)
                    }
                    None => (a, b, clean),
                });
            }
        });
        if let Some((x, y, c)) = run {
            set_real_prot(x, y, prot, c);
        }
    }

    /// Calls `f(a, b, use)` for each piece of `[start, end)` (inside the
    /// managed range), in address order. `f` must not change the table.
    fn pieces(&self, start: u64, end: u64, mut f: impl FnMut(u64, u64, Use)) {
        if start >= end {
            return;
        }
        let mut i = self.idx_of(start);
        while i < self.len && self.segs[i].start < end {
            let s = self.segs[i];
            f(s.start.max(start), s.end.min(end), s.what);
            i += 1;
        }
    }

    /// Zeroes every piece of `[start, end)` that may hold old data.
    fn scrub(&self, start: u64, end: u64) {
        self.pieces(start, end, |a, b, what| {
            if what != (Use::Free { dirty: false }) {
                // SAFETY: [a, b) is managed memory that is free or about to
                // be replaced by the caller: nobody relies on its contents.
                unsafe { zero_range(a, b) };
            }
        });
    }

    /// Whether every page of `[start, end)` is free.
    fn all_free(&self, start: u64, end: u64) -> bool {
        let mut ok = true;
        self.pieces(start, end, |_, _, w| ok &= w.is_free());
        ok
    }

    /// The lowest start of `pages` free pages inside the range kept for the
    /// kernel, `[base, brk_base)`, if any.
    fn find_free_low(&self, pages: u64) -> Option<u64> {
        let want = pages.checked_mul(PAGE)?;
        let mut run_start: Option<u64> = None;
        for s in &self.segs[..self.len] {
            if s.start >= self.brk_base {
                break;
            }
            if !s.what.is_free() {
                run_start = None;
                continue;
            }
            let b = *run_start.get_or_insert(s.start);
            if s.end.min(self.brk_base) - b >= want {
                return Some(b);
            }
        }
        None
    }

    /// The highest page-aligned start of `pages` free pages, if any.
    fn find_free(&self, pages: u64) -> Option<u64> {
        let want = pages.checked_mul(PAGE)?;
        // Segments are contiguous, so consecutive free segments form a run.
        let mut run_end: Option<u64> = None;
        for s in self.segs[..self.len].iter().rev() {
            if !s.what.is_free() {
                run_end = None;
                continue;
            }
            let e = *run_end.get_or_insert(s.end);
            if e - s.start >= want {
                return Some(e - want);
            }
        }
        None
    }

    /// The highest page-aligned start of `pages` clean free pages, if any.
    fn find_free_clean(&self, pages: u64) -> Option<u64> {
        let want = pages.checked_mul(PAGE)?;
        self.segs[..self.len].iter().rev().find(|s| s.what == (Use::Free { dirty: false }) && s.end - s.start >= want).map(|s| s.end - want)
    }

    /// Whether `[addr, addr+len)` lies inside guest memory.
    fn in_guest(&self, addr: u64, len: u64) -> bool {
        addr >= self.lo && addr.checked_add(len).is_some_and(|e| e <= self.hi)
    }

    fn clip(&self, a: u64, b: u64) -> (u64, u64) {
        (a.max(self.base), b.min(self.end))
    }

    // ---------------------------------------------------------------- brk

    /// The start of the program break (its lowest address).
    pub fn brk_start(&self) -> u64 {
        self.brk_base
    }

    /// `brk(2)`: sets the break to `new` if possible; returns the break.
    /// `0` or an impossible value leaves it unchanged (Linux semantics).
    pub fn brk(&mut self, new: u64) -> u64 {
        let cur = self.brk_cur;
        if new < self.brk_base || new > self.end || self.room(2).is_err() {
            return cur;
        }
        let (Some(cur_top), Some(new_top)) = (page_up(cur), page_up(new)) else { return cur };
        if new_top > cur_top {
            if !self.all_free(cur_top, new_top) {
                return cur;
            }
            self.scrub(cur_top, new_top);
            self.assign(cur_top, new_top, Use::Brk);
        } else if new_top < cur_top {
            self.assign(new_top, cur_top, Use::Free { dirty: true });
            self.settle();
        }
        self.brk_cur = new;
        new
    }

    // ------------------------------------------------------- kernel heap

    /// Takes `bytes` (rounded up to pages) for the kernel; not zeroed:
    /// the lowest free run of the range kept below the break if it fits
    /// there (module docs), else top-down.
    pub fn alloc_kernel(&mut self, bytes: u64) -> Option<u64> {
        let pages = page_up(bytes)? / PAGE;
        self.room(2).ok()?;
        let a = match self.find_free_low(pages) {
            Some(a) => a,
            None => self.find_free(pages)?,
        };
        self.assign(a, a + pages * PAGE, Use::Kernel);
        Some(a)
    }

    /// Frees the kernel's pages in `addr..addr + bytes` (dirty: their
    /// memory goes back to the host as freed memory does, [`Space::settle`]).
    pub fn free_kernel(&mut self, addr: u64, bytes: u64) {
        let Some(end) = page_up(bytes).and_then(|b| addr.checked_add(b)) else { return };
        let (a, b) = self.clip(addr & !(PAGE - 1), end);
        let mut pos = a;
        while pos < b {
            let s = self.segs[self.idx_of(pos)];
            let e = s.end.min(b);
            if s.what == Use::Kernel {
                if self.room(2).is_err() {
                    return;
                }
                self.assign(pos, e, Use::Free { dirty: true });
            }
            pos = e;
        }
        self.settle();
    }

    // -------------------------------------------------------------- mmap

    /// Maps `len` bytes of zeroed anonymous memory anywhere; returns the
    /// address.
    pub fn map_anywhere(&mut self, len: u64, prot: u32) -> Result<u64, Errno> {
        if len == 0 {
            return Err(Errno::EINVAL);
        }
        let bytes = page_up(len).ok_or(Errno::ENOMEM)?;
        self.room(2)?;
        let what = Use::Anon { prot: (prot & 0xf) as u8 };
        // A mapping without access (a thread stack before its guard is
        // cut, a runtime's address-space reservation) goes to clean memory
        // when there is room: it costs no host memory there, and taking
        // access from untouched pages needs no TLB flush (on hvt, KVM
        // would rebuild its whole shadow of the page tables after one).
        let clean = if what.real_prot() == 0 { self.find_free_clean(bytes / PAGE) } else { None };
        let a = clean.or_else(|| self.find_free(bytes / PAGE)).ok_or(Errno::ENOMEM)?;
        self.scrub(a, a + bytes);
        let what = match what {
            Use::Anon { prot } if clean.is_some() => Use::Anon { prot: prot | CLEAN },
            w => w,
        };
        self.assign(a, a + bytes, what);
        Ok(a)
    }

    /// Maps `len` bytes of zeroed anonymous memory at `addr` (`MAP_FIXED`),
    /// replacing mappings there. With `noreplace`, fails with `EEXIST` if
    /// anything is mapped there. Only free memory and the program's own
    /// mappings can be replaced: the break, the kernel heap, the image and
    /// the stack cannot (`ENOMEM`).
    pub fn map_fixed(&mut self, addr: u64, len: u64, prot: u32, noreplace: bool) -> Result<u64, Errno> {
        if len == 0 || !addr.is_multiple_of(PAGE) {
            return Err(Errno::EINVAL);
        }
        let bytes = page_up(len).ok_or(Errno::ENOMEM)?;
        let end = addr.checked_add(bytes).ok_or(Errno::ENOMEM)?;
        if addr < self.base || end > self.end {
            return Err(if noreplace && self.in_guest(addr, bytes) { Errno::EEXIST } else { Errno::ENOMEM });
        }
        let mut any = false;
        let mut foreign = false;
        let mut all_clean = true;
        self.pieces(addr, end, |_, _, w| match w {
            Use::Free { dirty } => all_clean &= !dirty,
            Use::Anon { prot } => {
                any = true;
                all_clean &= prot & CLEAN != 0;
            }
            Use::Brk | Use::Kernel => foreign = true,
        });
        if noreplace && (any || foreign) {
            return Err(Errno::EEXIST);
        }
        if foreign {
            return Err(Errno::ENOMEM);
        }
        self.room(2)?;
        // Replaced mappings may be unwritable: free them first (read-write
        // again) so that zeroing them cannot fault; untouched reservations
        // are clean and need no zeroing.
        if any {
            self.free_mappings(addr, end);
        }
        self.scrub(addr, end);
        let mut what = Use::Anon { prot: (prot & 0xf) as u8 };
        if let Use::Anon { prot } = what {
            if all_clean && what.real_prot() == 0 {
                what = Use::Anon { prot: prot | CLEAN };
            }
        }
        self.assign(addr, end, what);
        Ok(addr)
    }

    /// `munmap(2)`: releases the program's anonymous mappings in the range.
    /// Parts that are not the program's mappings (free memory, the break,
    /// the kernel heap, the image, the stack) are left as they are.
    pub fn unmap(&mut self, addr: u64, len: u64) -> Result<(), Errno> {
        if !addr.is_multiple_of(PAGE) || len == 0 {
            return Err(Errno::EINVAL);
        }
        let bytes = page_up(len).ok_or(Errno::EINVAL)?;
        let end = addr.checked_add(bytes).ok_or(Errno::EINVAL)?;
        if end > self.hi {
            return Err(Errno::EINVAL);
        }
        let (a, b) = self.clip(addr, end);
        let mut pos = a;
        while pos < b {
            let s = self.segs[self.idx_of(pos)];
            let e = s.end.min(b);
            if let Use::Anon { prot } = s.what {
                self.room(2)?;
                self.assign(pos, e, Use::Free { dirty: prot & CLEAN == 0 });
            }
            pos = e;
        }
        self.settle();
        Ok(())
    }

    /// Frees the program's mappings in `[a, b)`: pages of an untouched
    /// reservation ([`CLEAN`]) as clean, every other as dirty.
    fn free_mappings(&mut self, a: u64, b: u64) {
        let mut pos = a;
        while pos < b {
            let s = self.segs[self.idx_of(pos)];
            let e = s.end.min(b);
            if let Use::Anon { prot } = s.what {
                self.assign(pos, e, Use::Free { dirty: prot & CLEAN == 0 });
            }
            pos = e;
        }
    }

    /// Gives freed memory back when more than [`RELEASE_HIGH`] bytes are
    /// dirty (module docs).
    fn settle(&mut self) {
        if self.dirty > RELEASE_HIGH {
            self.release_down_to(RELEASE_LOW);
        }
    }

    /// Bytes of dirty free pages: freed memory the host still backs.
    pub fn dirty_bytes(&self) -> u64 {
        self.dirty
    }

    /// Dirty free bytes that [`Space::release_free`] could give back: none
    /// once the tender refused a release.
    pub fn releasable_bytes(&self) -> u64 {
        if self.release_off {
            0
        } else {
            self.dirty
        }
    }

    /// Gives every dirty free range back to the tender; returns the bytes
    /// released.
    pub fn release_free(&mut self) -> u64 {
        self.release_down_to(0)
    }

    /// Gives dirty free ranges back to the tender, lowest first, until at
    /// most `keep` dirty bytes are left (one hypercall per
    /// [`shoal_abi::RELEASE_LIST_MAX`] ranges; the last range may be cut,
    /// page aligned, keeping its upper part), and marks them clean.
    /// Returns the bytes released.
    pub fn release_down_to(&mut self, keep: u64) -> u64 {
        let mut total = 0;
        const MAX: usize = shoal_abi::RELEASE_LIST_MAX as usize;
        while !self.release_off && self.dirty > keep {
            let mut batch = [shoal_abi::ReleaseRange::default(); MAX];
            let mut n = 0;
            let mut want = self.dirty - keep;
            for s in &self.segs[..self.len] {
                if s.what != (Use::Free { dirty: true }) {
                    continue;
                }
                let len = (s.end - s.start).min(page_up(want).unwrap_or(u64::MAX));
                batch[n] = shoal_abi::ReleaseRange { addr: s.start, len };
                n += 1;
                want = want.saturating_sub(len);
                if n == MAX || want == 0 {
                    break;
                }
            }
            if n == 0 {
                break;
            }
            // Cutting a range splits its segment: keep one slot free.
            if self.room(2).is_err() {
                break;
            }
            if !give_back(&batch[..n]) {
                self.release_off = true;
                break;
            }
            for r in &batch[..n] {
                self.assign(r.addr, r.addr + r.len, Use::Free { dirty: false });
                total += r.len;
            }
        }
        total
    }

    /// Checks `[addr, addr+len)` is entirely mapped (managed parts: the
    /// break, the kernel heap or program mappings; unmanaged guest memory is
    /// the image, archive or stack, all mapped). Returns the page-rounded end.
    fn check_mapped(&self, addr: u64, len: u64) -> Result<u64, Errno> {
        if !addr.is_multiple_of(PAGE) {
            return Err(Errno::EINVAL);
        }
        let bytes = page_up(len).ok_or(Errno::ENOMEM)?;
        let end = addr.checked_add(bytes).ok_or(Errno::ENOMEM)?;
        if bytes == 0 {
            return Ok(end);
        }
        if !self.in_guest(addr, bytes) {
            return Err(Errno::ENOMEM);
        }
        let (a, b) = self.clip(addr, end);
        if a < b && !self.pieces_all(a, b, |w| !w.is_free()) {
            return Err(Errno::ENOMEM);
        }
        Ok(end)
    }

    fn pieces_all(&self, a: u64, b: u64, p: impl Fn(Use) -> bool) -> bool {
        let mut ok = true;
        self.pieces(a, b, |_, _, w| ok &= p(w));
        ok
    }

    /// `mprotect(2)`: records `prot` for the program's mappings in the
    /// range, and (through [`Space::assign`]) has the tender give the pages
    /// that protection. Memory the table does not
    /// manage (the image, the archive, the main stack) keeps its
    /// protection.
    pub fn protect(&mut self, addr: u64, len: u64, prot: u32) -> Result<(), Errno> {
        let valid = PROT_READ | PROT_WRITE | PROT_EXEC | PROT_SEM | PROT_GROWSDOWN | PROT_GROWSUP;
        if prot & !valid != 0 || prot & (PROT_GROWSDOWN | PROT_GROWSUP) == (PROT_GROWSDOWN | PROT_GROWSUP) {
            return Err(Errno::EINVAL);
        }
        let end = self.check_mapped(addr, len)?;
        let (a, b) = self.clip(addr, end);
        let what = Use::Anon { prot: (prot & 0xf) as u8 };
        let mut pos = a;
        while pos < b {
            let s = self.segs[self.idx_of(pos)];
            let e = s.end.min(b);
            if matches!(s.what, Use::Anon { .. }) && s.what != what {
                self.room(2)?;
                self.assign(pos, e, what);
            }
            pos = e;
        }
        Ok(())
    }

    /// `madvise(MADV_DONTNEED)`: the program's memory in the range reads as
    /// zero afterwards (private anonymous memory on Linux). Unmapped parts:
    /// `ENOMEM`.
    ///
    /// The pages go back to the tender (`Release`: the host frees them and
    /// they read as zero, whatever their protection), up to
    /// [`shoal_abi::RELEASE_LIST_MAX`] pieces per hypercall; without that
    /// (a tender that refuses) the kernel writes zeros over them.
    pub fn dontneed(&mut self, addr: u64, len: u64) -> Result<(), Errno> {
        let end = self.check_mapped(addr, len)?;
        let (a, b) = self.clip(addr, end);
        if !self.release_off && self.release_program(a, b) {
            return Ok(());
        }
        self.pieces(a, b, |x, y, w| {
            if matches!(w, Use::Anon { .. } | Use::Brk) {
                // Zeroing needs write access: lend it for the moment.
                let prot = w.real_prot();
                if prot != RW {
                    set_real_prot(x, y, RW, false);
                }
                // SAFETY: the program's own anonymous memory, which it asked
                // to discard.
                unsafe { zero_range(x, y) };
                if prot != RW {
                    set_real_prot(x, y, prot, false);
                }
            }
        });
        Ok(())
    }

    /// Gives the program's memory (mappings and the break) in `[a, b)` back
    /// to the tender; whether it was all given back (`false`: from the
    /// first refused batch on, nothing more was, and releasing is off).
    fn release_program(&mut self, a: u64, b: u64) -> bool {
        const MAX: usize = shoal_abi::RELEASE_LIST_MAX as usize;
        let mut batch = [shoal_abi::ReleaseRange::default(); MAX];
        let mut n = 0;
        let mut ok = true;
        self.pieces(a, b, |x, y, w| {
            if !ok || !matches!(w, Use::Anon { .. } | Use::Brk) {
                return;
            }
            batch[n] = shoal_abi::ReleaseRange { addr: x, len: y - x };
            n += 1;
            if n == MAX {
                ok = give_back(&batch[..n]);
                n = 0;
            }
        });
        ok = ok && give_back(&batch[..n]);
        if !ok {
            self.release_off = true;
        }
        ok
    }

    /// Makes the program's pages in `[a, b)` writable for the kernel for a
    /// moment (file data copied into a read-only mapping); returns whether
    /// anything was changed, for [`Space::restore`].
    pub fn lend_write(&self, a: u64, b: u64) -> bool {
        let mut lent = false;
        self.pieces(a, b, |x, y, w| {
            if w.real_prot() & RW != RW {
                // Execute stays: a thread preempted in code being
                // rewritten resumes there.
                set_real_prot(x, y, RW | (w.real_prot() & shoal_abi::PROT_EXEC), false);
                lent = true;
            }
        });
        lent
    }

    /// Gives the pages in `[a, b)` back the real protection the table says
    /// (after [`Space::lend_write`]).
    pub fn restore(&self, a: u64, b: u64) {
        self.pieces(a, b, |x, y, w| {
            if w.real_prot() & RW != RW {
                set_real_prot(x, y, w.real_prot(), false);
            }
        });
    }

    /// Checks the range for `madvise` advice that needs no action.
    pub fn advise_check(&self, addr: u64, len: u64) -> Result<(), Errno> {
        self.check_mapped(addr, len).map(|_| ())
    }

    /// `mremap(2)` on anonymous mappings.
    pub fn remap(&mut self, old: u64, old_len: u64, new_len: u64, flags: u32, new_addr: u64) -> Result<u64, Errno> {
        if !old.is_multiple_of(PAGE) || flags & !(MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP) != 0 {
            return Err(Errno::EINVAL);
        }
        let may_move = flags & MREMAP_MAYMOVE != 0;
        let fixed = flags & MREMAP_FIXED != 0;
        let dontunmap = flags & MREMAP_DONTUNMAP != 0;
        if (fixed || dontunmap) && !may_move {
            return Err(Errno::EINVAL);
        }
        let old_len = page_up(old_len).ok_or(Errno::EINVAL)?;
        let new_len = page_up(new_len).ok_or(Errno::EINVAL)?;
        if new_len == 0 || old_len == 0 {
            // old_len 0 duplicates a shared mapping; ours are private.
            return Err(Errno::EINVAL);
        }
        if dontunmap && old_len != new_len {
            return Err(Errno::EINVAL);
        }
        let old_end = old.checked_add(old_len).ok_or(Errno::EFAULT)?;
        // The old range must be one mapping of the program.
        if old < self.base || old_end > self.end {
            return Err(Errno::EFAULT);
        }
        let first = self.segs[self.idx_of(old)];
        let Use::Anon { prot } = first.what else { return Err(Errno::EFAULT) };
        if first.end < old_end {
            return Err(Errno::EFAULT);
        }
        self.room(4)?;
        if fixed {
            if !new_addr.is_multiple_of(PAGE) {
                return Err(Errno::EINVAL);
            }
            let new_end = new_addr.checked_add(new_len).ok_or(Errno::EINVAL)?;
            if new_addr < old_end && old < new_end {
                return Err(Errno::EINVAL);
            }
            self.map_fixed(new_addr, new_len, prot as u32, false)?;
            self.move_out(old, new_addr, old_len.min(new_len), old_len, dontunmap);
            return Ok(new_addr);
        }
        if new_len <= old_len && !dontunmap {
            self.assign(old + new_len, old_end, Use::Free { dirty: true });
            self.settle();
            return Ok(old);
        }
        let grow_end = old.checked_add(new_len);
        if !dontunmap {
            if let Some(ge) = grow_end.filter(|&ge| ge <= self.end) {
                if self.all_free(old_end, ge) {
                    self.scrub(old_end, ge);
                    self.assign(old_end, ge, Use::Anon { prot });
                    return Ok(old);
                }
            }
        }
        if !may_move {
            return Err(Errno::ENOMEM);
        }
        let dst = self.find_free(new_len / PAGE).ok_or(Errno::ENOMEM)?;
        self.scrub(dst, dst + new_len);
        self.assign(dst, dst + new_len, Use::Anon { prot });
        self.move_out(old, dst, old_len, old_len, dontunmap);
        Ok(dst)
    }

    /// Copies `copy` bytes from `old` to `dst`, then releases the old range
    /// of `old_len` bytes (or zero-fills it, keeping it mapped).
    fn move_out(&mut self, old: u64, dst: u64, copy: u64, old_len: u64, keep: bool) {
        // The destination already has the mapping's real protection (read
        // only for a PROT_READ mapping): lend the kernel write access for
        // the copy. An unreadable (PROT_NONE) source is lent too.
        let lent_dst = self.lend_write(dst, dst + copy);
        let lent_src = self.lend_write(old, old + old_len);
        // SAFETY: both ranges are program mappings in the managed range,
        // checked by the caller, they do not overlap, and both are
        // accessible for now.
        unsafe { core::ptr::copy_nonoverlapping(old as *const u8, dst as *mut u8, copy as usize) };
        if lent_dst {
            self.restore(dst, dst + copy);
        }
        if keep {
            // SAFETY: the old mapping stays the program's, with new content
            // zero as Linux gives it after MREMAP_DONTUNMAP; writable for now.
            unsafe { zero_range(old, old + old_len) };
            if lent_src {
                self.restore(old, old + old_len);
            }
        } else {
            self.assign(old, old + old_len, Use::Free { dirty: true });
            self.settle();
        }
    }

    /// Whether the program may have the kernel write `[addr, addr + len)`
    /// as far as the managed range goes: not free (unmapped) memory and not
    /// a mapping without `PROT_WRITE`, as Linux answers `EFAULT` there. The
    /// break, writable mappings and everything outside the managed range
    /// (the image, the stack: checked elsewhere) pass. Kernel-heap pages
    /// pass too: the kernel may hand its own buffers to its system calls.
    pub fn user_writable(&self, addr: u64, len: u64) -> bool {
        let (a, b) = self.clip(addr, addr.saturating_add(len));
        let mut ok = true;
        self.pieces(a, b, |_, _, w| {
            ok &= match w {
                Use::Free { .. } => false,
                Use::Anon { prot } => u32::from(prot) & PROT_WRITE != 0,
                Use::Brk | Use::Kernel => true,
            }
        });
        ok
    }

    /// The use of the page holding `addr` (tests and diagnostics).
    pub fn use_at(&self, addr: u64) -> Option<Use> {
        if addr < self.base || addr >= self.end {
            return None;
        }
        Some(self.segs[self.idx_of(addr)].what)
    }

    /// Number of segments in the table.
    pub fn segments(&self) -> usize {
        self.len
    }

    /// Checks the table's invariants (tests).
    #[cfg(test)]
    pub fn check(&self) {
        let mut pos = self.base;
        let mut free = 0;
        for (k, s) in self.segs[..self.len].iter().enumerate() {
            assert_eq!(s.start, pos, "gap at {k}");
            assert!(s.end > s.start);
            assert_eq!(s.start % PAGE, 0);
            assert_eq!(s.end % PAGE, 0);
            if k > 0 {
                assert_ne!(self.segs[k - 1].what, s.what, "unmerged at {k}");
            }
            if s.what.is_free() {
                free += (s.end - s.start) / PAGE;
            }
            pos = s.end;
        }
        assert_eq!(pos, self.end);
        assert_eq!(free, self.free_pages);
        let dirty: u64 = self.segs[..self.len].iter().filter(|s| s.what == (Use::Free { dirty: true })).map(|s| s.end - s.start).sum();
        assert_eq!(dirty, self.dirty);
    }
}

impl Default for Space {
    fn default() -> Self {
        Space::new()
    }
}
