//! Host tests of the page-range bookkeeping and the kernel heap, on a real
//! host buffer standing in for guest memory.

use crate::heap::KernelHeap;
use crate::space::*;
use shoal_plat::{Errno, Global};
use std::alloc::{alloc_zeroed, Layout};
use std::boxed::Box;

/// A zeroed, page-aligned host buffer of `size` bytes (leaked).
fn buffer(size: usize) -> u64 {
    // SAFETY: nonzero size, valid alignment.
    let p = unsafe { alloc_zeroed(Layout::from_size_align(size, 4096).unwrap()) };
    assert!(!p.is_null());
    p as u64
}

/// A space managing `pages` pages, with one guard page of "image" below.
fn space(pages: u64) -> (Box<Space>, u64) {
    let lo = buffer(((pages + 1) * PAGE) as usize);
    let mut s = Box::new(Space::new());
    s.init(lo, lo + (pages + 1) * PAGE, lo + PAGE, lo + (pages + 1) * PAGE);
    s.check();
    (s, lo + PAGE)
}

fn fill(addr: u64, len: u64, v: u8) {
    // SAFETY: test memory inside the buffer.
    unsafe { std::ptr::write_bytes(addr as *mut u8, v, len as usize) }
}

fn all(addr: u64, len: u64, v: u8) -> bool {
    // SAFETY: test memory inside the buffer.
    unsafe { std::slice::from_raw_parts(addr as *const u8, len as usize) }.iter().all(|&b| b == v)
}

#[test]
fn brk_linux_semantics() {
    let (mut s, base) = space(64);
    assert_eq!(s.brk(0), base);
    assert_eq!(s.brk(base + 10_000), base + 10_000);
    assert!(all(base, 3 * PAGE, 0));
    fill(base, 10_000, 7);
    // Shrink and grow again: released pages come back zeroed.
    assert_eq!(s.brk(base + 100), base + 100);
    assert_eq!(s.brk(base + 3 * PAGE), base + 3 * PAGE);
    assert!(all(base, 100, 7));
    assert!(all(base + PAGE, 2 * PAGE, 0));
    // Past the end, below the start: unchanged.
    assert_eq!(s.brk(base + 65 * PAGE), base + 3 * PAGE);
    assert_eq!(s.brk(base - 1), base + 3 * PAGE);
    s.check();
    assert_eq!(s.stats(), (64 * PAGE, 61 * PAGE));
}

#[test]
fn the_kernels_first_pages_lie_below_the_break_in_a_large_space() {
    let pages = KERNEL_LOW_MIN / PAGE;
    let (mut s, base) = space(pages);
    // The break starts above the kept range.
    assert_eq!(s.brk(0), base + KERNEL_LOW);
    assert_eq!(s.brk_start(), base + KERNEL_LOW);
    assert_eq!(s.brk(base + KERNEL_LOW - PAGE), base + KERNEL_LOW, "the break cannot reach into the kept range");
    // hvt's console buffer, then the heap's first chunk: bottom-up in it.
    assert_eq!(s.alloc_kernel(8 * PAGE), Some(base));
    assert_eq!(s.alloc_kernel(256 << 10), Some(base + 8 * PAGE));
    // What no longer fits goes top-down, as mappings do.
    assert_eq!(s.alloc_kernel(KERNEL_LOW), Some(base + pages * PAGE - KERNEL_LOW));
    assert_eq!(s.brk(base + KERNEL_LOW + 3 * PAGE), base + KERNEL_LOW + 3 * PAGE);
    s.check();
    let (mut big, big_base) = space(pages);
    assert_eq!(big.alloc_kernel(KERNEL_LOW + PAGE), Some(big_base + pages * PAGE - KERNEL_LOW - PAGE));
    // A smaller space keeps every byte for the break.
    let (mut small, small_base) = space(pages - 1);
    assert_eq!(small.brk(0), small_base);
    assert_eq!(small.alloc_kernel(PAGE), Some(small_base + (pages - 2) * PAGE));
}

#[test]
fn mmap_top_down_zeroed_and_reused() {
    let (mut s, base) = space(64);
    let a = s.map_anywhere(3 * PAGE, 3).unwrap();
    assert_eq!(a, base + 61 * PAGE);
    assert!(all(a, 3 * PAGE, 0));
    fill(a, 3 * PAGE, 0xaa);
    s.unmap(a, 3 * PAGE).unwrap();
    assert_eq!(s.use_at(a), Some(Use::Free { dirty: true }));
    let b = s.map_anywhere(1, 3).unwrap();
    assert_eq!(b, base + 63 * PAGE);
    assert!(all(b, PAGE, 0), "reused memory must be zero again");
    s.check();
}

#[test]
fn coalescing() {
    let (mut s, _) = space(64);
    let a = s.map_anywhere(PAGE, 3).unwrap();
    let b = s.map_anywhere(PAGE, 3).unwrap();
    let c = s.map_anywhere(PAGE, 3).unwrap();
    assert_eq!((a - b, b - c), (PAGE, PAGE));
    assert_eq!(s.segments(), 2, "equal neighbours merge");
    s.unmap(b, PAGE).unwrap();
    assert_eq!(s.segments(), 4);
    s.unmap(a, PAGE).unwrap();
    s.unmap(c, PAGE).unwrap();
    s.check();
    // Clean and dirty free memory stay apart but form one run.
    assert_eq!(s.segments(), 2);
    let big = s.map_anywhere(64 * PAGE, 3).unwrap();
    assert!(all(big, 64 * PAGE, 0));
    assert_eq!(s.segments(), 1);
    s.check();
}

#[test]
fn exhaustion_is_enomem_and_brk_stops_at_mappings() {
    let (mut s, base) = space(16);
    let m = s.map_anywhere(12 * PAGE, 3).unwrap();
    assert_eq!(s.map_anywhere(5 * PAGE, 3), Err(Errno::ENOMEM));
    assert_eq!(s.brk(base + 4 * PAGE), base + 4 * PAGE);
    assert_eq!(s.brk(base + 4 * PAGE + 1), base + 4 * PAGE, "would collide with a mapping");
    assert_eq!(s.map_anywhere(1, 3), Err(Errno::ENOMEM));
    s.unmap(m, PAGE).unwrap();
    assert_eq!(s.map_anywhere(1, 3), Ok(m));
    assert_eq!(s.map_anywhere(u64::MAX - 5, 3), Err(Errno::ENOMEM));
    assert_eq!(s.map_anywhere(0, 3), Err(Errno::EINVAL));
    s.check();
}

#[test]
fn map_fixed_rules() {
    let (mut s, base) = space(32);
    let a = s.map_anywhere(4 * PAGE, 3).unwrap();
    fill(a, 4 * PAGE, 1);
    assert_eq!(s.map_fixed(a + PAGE, PAGE, 1, false), Ok(a + PAGE));
    assert!(all(a + PAGE, PAGE, 0), "replaced pages are zero");
    assert!(all(a, PAGE, 1));
    assert_eq!(s.use_at(a + PAGE), Some(Use::Anon { prot: 1 }));
    assert_eq!(s.map_fixed(a, PAGE, 3, true), Err(Errno::EEXIST));
    assert_eq!(s.map_fixed(a + 1, PAGE, 3, false), Err(Errno::EINVAL));
    s.brk(base + 2 * PAGE);
    assert_eq!(s.map_fixed(base, PAGE, 3, false), Err(Errno::ENOMEM), "not over the break");
    assert_eq!(s.map_fixed(base - PAGE, PAGE, 3, false), Err(Errno::ENOMEM), "not over the image");
    assert_eq!(s.map_fixed(base + 8 * PAGE, 2 * PAGE, 3, true), Ok(base + 8 * PAGE));
    s.check();
}

#[test]
fn munmap_leaves_non_mappings() {
    let (mut s, base) = space(32);
    s.brk(base + 2 * PAGE);
    let k = s.alloc_kernel(PAGE).unwrap();
    s.unmap(base, 32 * PAGE).unwrap();
    assert_eq!(s.use_at(base), Some(Use::Brk));
    assert_eq!(s.use_at(k), Some(Use::Kernel));
    assert_eq!(s.unmap(base + 1, PAGE), Err(Errno::EINVAL));
    assert_eq!(s.unmap(base, 0), Err(Errno::EINVAL));
    s.check();
}

#[test]
fn mremap_shrink_grow_move() {
    let (mut s, _) = space(64);
    let a = s.map_anywhere(4 * PAGE, 3).unwrap();
    fill(a, 4 * PAGE, 9);
    // Shrink in place.
    assert_eq!(s.remap(a, 4 * PAGE, 2 * PAGE, 0, 0), Ok(a));
    assert_eq!(s.use_at(a + 2 * PAGE), Some(Use::Free { dirty: true }));
    // Grow in place: the pages above are free again.
    assert_eq!(s.remap(a, 2 * PAGE, 4 * PAGE, 0, 0), Ok(a));
    assert!(all(a, 2 * PAGE, 9));
    assert!(all(a + 2 * PAGE, 2 * PAGE, 0));
    // Grow with a mapping above: must move.
    let b = s.map_anywhere(PAGE, 3).unwrap();
    let c = s.remap(b, PAGE, 2 * PAGE, 0, 0);
    assert_eq!(c, Err(Errno::ENOMEM));
    fill(b, PAGE, 5);
    let c = s.remap(b, PAGE, 8 * PAGE, MREMAP_MAYMOVE, 0).unwrap();
    assert_ne!(c, b);
    assert!(all(c, PAGE, 5));
    assert!(all(c + PAGE, 7 * PAGE, 0));
    assert_eq!(s.use_at(b), Some(Use::Free { dirty: true }));
    // Not a mapping: EFAULT; bad flags: EINVAL.
    assert_eq!(s.remap(b, PAGE, 2 * PAGE, MREMAP_MAYMOVE, 0), Err(Errno::EFAULT));
    assert_eq!(s.remap(c, PAGE, 2 * PAGE, MREMAP_FIXED, 0), Err(Errno::EINVAL));
    assert_eq!(s.remap(c, PAGE, 2 * PAGE, 64, 0), Err(Errno::EINVAL));
    // MREMAP_FIXED to a chosen place.
    let d = s.remap(c, 8 * PAGE, 8 * PAGE, MREMAP_MAYMOVE | MREMAP_FIXED, b - 16 * PAGE).unwrap();
    assert_eq!(d, b - 16 * PAGE);
    assert!(all(d, PAGE, 5));
    assert_eq!(s.use_at(c), Some(Use::Free { dirty: true }));
    // DONTUNMAP keeps the old range mapped, zeroed.
    let e = s.remap(d, 8 * PAGE, 8 * PAGE, MREMAP_MAYMOVE | MREMAP_DONTUNMAP, 0).unwrap();
    assert!(all(e, PAGE, 5));
    assert!(all(d, 8 * PAGE, 0));
    assert_eq!(s.use_at(d), Some(Use::Anon { prot: 3 }));
    s.check();
}

#[test]
fn mprotect_and_madvise() {
    let (mut s, base) = space(32);
    let a = s.map_anywhere(4 * PAGE, 3).unwrap();
    assert_eq!(s.protect(a + PAGE, PAGE, PROT_READ), Ok(()));
    assert_eq!(s.use_at(a + PAGE), Some(Use::Anon { prot: 1 }));
    assert_eq!(s.use_at(a), Some(Use::Anon { prot: 3 }));
    assert_eq!(s.protect(a + PAGE, PAGE, 3), Ok(()));
    assert_eq!(s.segments(), 2, "restored protection merges again");
    assert_eq!(s.protect(a - PAGE, 2 * PAGE, 3), Err(Errno::ENOMEM), "free page");
    assert_eq!(s.protect(a, PAGE, 0x100), Err(Errno::EINVAL));
    assert_eq!(s.protect(base - PAGE, PAGE, 1), Ok(()), "the image is mapped");
    assert_eq!(s.protect(base - 2 * PAGE, PAGE, 1), Err(Errno::ENOMEM), "outside guest memory");
    fill(a, 4 * PAGE, 3);
    assert_eq!(s.dontneed(a + PAGE, 2 * PAGE), Ok(()));
    assert!(all(a, PAGE, 3) && all(a + PAGE, 2 * PAGE, 0) && all(a + 3 * PAGE, PAGE, 3));
    assert_eq!(s.dontneed(a - PAGE, PAGE), Err(Errno::ENOMEM));
    s.brk(base + PAGE);
    fill(base, PAGE, 4);
    assert_eq!(s.dontneed(base, PAGE), Ok(()));
    assert!(all(base, PAGE, 0));
    s.check();
}

#[test]
fn random_operations_keep_invariants() {
    let (mut s, _) = space(4096);
    let mut maps: Vec<(u64, u64)> = Vec::new();
    let mut x: u64 = 0x1234_5678;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..20_000 {
        let r = next();
        if r % 3 != 0 || maps.is_empty() {
            let len = (next() % 64 + 1) * PAGE - next() % PAGE;
            if let Ok(a) = s.map_anywhere(len, 3) {
                let pages = page_up(len).unwrap();
                assert!(all(a, pages, 0));
                fill(a, pages, (r & 0xff) as u8 | 1);
                maps.push((a, pages));
            }
        } else {
            let (a, len) = maps.swap_remove((next() % maps.len() as u64) as usize);
            if next() % 4 == 0 && len > PAGE {
                // Partial unmap, keep the rest.
                s.unmap(a, PAGE).unwrap();
                maps.push((a + PAGE, len - PAGE));
            } else {
                s.unmap(a, len).unwrap();
            }
        }
    }
    s.check();
    let mapped: u64 = maps.iter().map(|m| m.1).sum();
    assert_eq!(s.stats().1, 4096 * PAGE - mapped);
    for (a, len) in maps {
        s.unmap(a, len).unwrap();
    }
    s.check();
    // Freed memory went back to the host on the way (16 MiB managed, far
    // more than RELEASE_HIGH freed); what is still dirty goes now.
    assert!(RELEASED.with(|r| !r.borrow().is_empty()));
    s.release_free();
    s.check();
    assert_eq!(s.segments(), 1, "everything coalesced, clean");
    assert_eq!(s.use_at(s.range().0), Some(Use::Free { dirty: false }));
    assert!(all(s.range().0, 4096 * PAGE, 0));
}

#[test]
fn freed_memory_goes_back_to_the_host_in_batches() {
    let released = || RELEASED.with(|r| core::mem::take(&mut *r.borrow_mut()));
    let (mut s, _) = space(2048);
    released();
    // Up to RELEASE_HIGH of freed memory stays resident: a 2 MiB buffer
    // mapped and unmapped again and again reuses the same pages.
    for _ in 0..3 {
        let a = s.map_anywhere(RELEASE_HIGH, 3).unwrap();
        fill(a, RELEASE_HIGH, 9);
        s.unmap(a, RELEASE_HIGH).unwrap();
        assert_eq!(released(), vec![]);
        assert_eq!(s.use_at(a), Some(Use::Free { dirty: true }));
    }
    assert_eq!(s.dirty_bytes(), RELEASE_HIGH);
    // More freed below it: past RELEASE_HIGH, the lowest dirty pages go
    // back until RELEASE_LOW is left (the last range cut, its upper part
    // kept), and read as zero.
    let top = s.map_anywhere(RELEASE_HIGH, 3).unwrap();
    let low = s.map_anywhere(RELEASE_HIGH, 3).unwrap();
    assert!(low < top);
    fill(low, RELEASE_HIGH, 4);
    s.unmap(top, RELEASE_HIGH).unwrap();
    s.unmap(low, RELEASE_HIGH).unwrap();
    assert_eq!(released(), vec![(low, low + 2 * RELEASE_HIGH - RELEASE_LOW)]);
    assert_eq!(s.dirty_bytes(), RELEASE_LOW);
    assert!(all(low, 2 * RELEASE_HIGH - RELEASE_LOW, 0));
    assert_eq!(s.use_at(low + RELEASE_HIGH + RELEASE_LOW), Some(Use::Free { dirty: true }), "the highest stays");
    s.check();
    // Many holes go back in batches of at most 64 ranges.
    s.release_free();
    released();
    let maps: Vec<u64> = (0..200).map(|_| s.map_anywhere(2 * PAGE, 3).unwrap()).collect();
    for &m in &maps {
        fill(m, 2 * PAGE, 5);
    }
    for &m in maps.iter().step_by(2) {
        s.unmap(m, 2 * PAGE).unwrap();
    }
    assert_eq!(released(), vec![], "800 KiB freed: below RELEASE_HIGH");
    assert_eq!(s.release_free(), 100 * 2 * PAGE);
    let r = released();
    assert_eq!(r.len(), 100);
    for &m in maps.iter().step_by(2) {
        assert!(r.contains(&(m, m + 2 * PAGE)));
        assert_eq!(s.use_at(m), Some(Use::Free { dirty: false }));
        assert!(all(m, 2 * PAGE, 0));
    }
    for &m in maps.iter().skip(1).step_by(2) {
        assert!(all(m, 2 * PAGE, 5), "mapped memory is untouched");
    }
    s.check();
    // A shrinking break is freed memory too.
    let base = s.brk(0);
    assert_eq!(s.brk(base + 2 * RELEASE_HIGH), base + 2 * RELEASE_HIGH);
    fill(base, 2 * RELEASE_HIGH, 3);
    s.brk(base);
    assert_eq!(released(), vec![(base, base + 2 * RELEASE_HIGH - RELEASE_LOW)]);
    assert!(all(base, 2 * RELEASE_HIGH - RELEASE_LOW, 0));
    s.check();
}

#[test]
fn madvise_dontneed_releases_at_once_whatever_the_protection() {
    let released = || RELEASED.with(|r| core::mem::take(&mut *r.borrow_mut()));
    let taken = || PROTECTED.with(|p| core::mem::take(&mut *p.borrow_mut()));
    let (mut s, _) = space(64);
    let a = s.map_anywhere(8 * PAGE, 3).unwrap();
    fill(a, 8 * PAGE, 1);
    s.protect(a + 2 * PAGE, 2 * PAGE, PROT_READ).unwrap();
    released();
    taken();
    assert_eq!(s.dontneed(a + PAGE, 4 * PAGE), Ok(()));
    // One piece per segment, in one batch; no protection lent.
    assert_eq!(released(), vec![(a + PAGE, a + 2 * PAGE), (a + 2 * PAGE, a + 4 * PAGE), (a + 4 * PAGE, a + 5 * PAGE)]);
    assert_eq!(taken(), vec![]);
    assert!(all(a, PAGE, 1) && all(a + PAGE, 4 * PAGE, 0) && all(a + 5 * PAGE, 3 * PAGE, 1));
    assert_eq!(s.use_at(a + 2 * PAGE), Some(Use::Anon { prot: 1 }), "still mapped, same protection");
    s.check();
}

static TEST_SPACE: Global<Option<Box<Space>>> = Global::new(None);

fn test_pages(bytes: u64) -> Option<u64> {
    TEST_SPACE.with(|s| s.as_mut().unwrap().alloc_kernel(bytes))
}

#[test]
fn kernel_heap_grows_from_pages() {
    use std::alloc::GlobalAlloc;
    let (s, _) = space(32 << 8); // 32 MiB
    TEST_SPACE.with(|t| *t = Some(s));
    let heap = KernelHeap::new(test_pages);
    let mut live: Vec<(*mut u8, Layout)> = Vec::new();
    let mut x: u64 = 99;
    for i in 0..100_000u64 {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let size = match x >> 60 {
            0 => 1 + (x >> 20) as usize % 65536,
            _ => 1 + (x >> 20) as usize % 200,
        };
        let layout = Layout::from_size_align(size, 1 << ((x >> 8) % 5)).unwrap();
        // SAFETY: nonzero size.
        let p = unsafe { heap.alloc(layout) };
        assert!(!p.is_null(), "allocation {i} of {size} failed");
        assert_eq!(p as usize % layout.align(), 0);
        // SAFETY: fresh block of `size` bytes.
        unsafe { std::ptr::write_bytes(p, 0x5a, size) };
        live.push((p, layout));
        if live.len() > 500 {
            let (p, l) = live.swap_remove((x >> 33) as usize % live.len());
            // SAFETY: allocated above with `l`.
            unsafe { heap.dealloc(p, l) };
        }
    }
    // A big block and a realloc that has to move it.
    let big = Layout::from_size_align(4 << 20, 16).unwrap();
    // SAFETY: nonzero size; then a live block and nonzero new size.
    unsafe {
        let p = heap.alloc(big);
        assert!(!p.is_null());
        *p = 42;
        let q = heap.realloc(p, big, 8 << 20);
        assert!(!q.is_null());
        assert_eq!(*q, 42);
        heap.dealloc(q, Layout::from_size_align(8 << 20, 16).unwrap());
    }
    for (p, l) in live {
        // SAFETY: allocated above with `l`.
        unsafe { heap.dealloc(p, l) };
    }
    assert!(heap.bytes() <= 24 << 20, "heap took {} bytes", heap.bytes());
    // Exhaustion is a null pointer, not a crash.
    // SAFETY: nonzero size.
    let huge = unsafe { heap.alloc(Layout::from_size_align(1 << 40, 8).unwrap()) };
    assert!(huge.is_null());
    TEST_SPACE.with(|s| s.as_ref().unwrap().check());
}

static TRIM_SPACE: Global<Option<Box<Space>>> = Global::new(None);

fn trim_pages(bytes: u64) -> Option<u64> {
    TRIM_SPACE.with(|s| s.as_mut().unwrap().alloc_kernel(bytes))
}

/// The heap claims its chunk as it grows and gives its free top back:
/// what a transient allocation took leaves, the live blocks stay.
#[test]
fn kernel_heap_claims_as_it_grows_and_trims_its_free_top() {
    use std::alloc::GlobalAlloc;
    let (s, _) = space(32 << 8); // 32 MiB
    TRIM_SPACE.with(|t| *t = Some(s));
    let heap = KernelHeap::new(trim_pages);
    let small = Layout::from_size_align(100, 8).unwrap();
    let big = Layout::from_size_align(40 << 10, 8).unwrap();
    // SAFETY: nonzero sizes; blocks freed with their layouts.
    unsafe {
        let a = heap.alloc(small);
        assert!(!a.is_null());
        assert!(heap.free_top() < 2 * PAGE, "only what is needed is claimed: {} free at the top", heap.free_top());
        let b = heap.alloc(big);
        assert!(!b.is_null());
        std::ptr::write_bytes(b, 0x5a, big.size());
        heap.dealloc(b, big);
        assert!(heap.free_top() >= 40 << 10);
        let (from, to) = heap.trim().expect("the big block's pages are free");
        assert!(to - from >= 36 << 10 && from % PAGE == 0 && to % PAGE == 0, "{from:#x}..{to:#x}");
        assert!((a as u64) < from, "the live block stays below what was trimmed");
        assert_eq!(heap.trim(), None, "nothing left to trim");
        *a = 7;
        // Growing again claims the trimmed pages again.
        let c = heap.alloc(big);
        assert!(!c.is_null());
        std::ptr::write_bytes(c, 0x11, big.size());
        assert_eq!(*a, 7);
        heap.dealloc(c, big);
        heap.dealloc(a, small);
    }
    assert_eq!(heap.bytes(), 256 << 10, "one chunk");
}

static TRIM2_SPACE: Global<Option<Box<Space>>> = Global::new(None);

fn trim2_pages(bytes: u64) -> Option<u64> {
    TRIM2_SPACE.with(|s| s.as_mut().unwrap().alloc_kernel(bytes))
}

/// A trim when the heap's current chunk (not the first) holds no
/// allocation at all: talc would delete that heap, and the heap must
/// still know where its end is (it grew in place from a stale end, on a
/// gap talc no longer listed, and corrupted its free lists: the fault
/// nginx saw under `--rejuvenate-every`, whose rejuvenations free all of
/// net's state at once). Then the heap grows and shrinks again, and every
/// block keeps its contents.
#[test]
fn kernel_heap_trims_a_chunk_that_holds_nothing() {
    use std::alloc::GlobalAlloc;
    let (s, _) = space(32 << 8); // 32 MiB
    TRIM2_SPACE.with(|t| *t = Some(s));
    let heap = KernelHeap::new(trim2_pages);
    let small = Layout::from_size_align(100, 8).unwrap();
    let big = Layout::from_size_align(300 << 10, 8).unwrap();
    let mid = Layout::from_size_align(20 << 10, 8).unwrap();
    // SAFETY: nonzero sizes; blocks freed with their layouts, written
    // only within their sizes.
    unsafe {
        let a = heap.alloc(small);
        assert!(!a.is_null());
        *a = 7;
        for round in 0..4u8 {
            // Too big for the first chunk: a chunk of its own.
            let b = heap.alloc(big);
            assert!(!b.is_null(), "round {round}");
            std::ptr::write_bytes(b, 0x5a, big.size());
            heap.dealloc(b, big);
            // The second chunk holds nothing now: all but its first page
            // leave (the first keeps the heap a heap), and the host gives
            // them back as zeroes.
            let trimmed = heap.trim();
            if let Some((from, to)) = trimmed {
                std::ptr::write_bytes(from as *mut u8, 0, (to - from) as usize);
            }
            // Growing again finds sound free lists (talc's consistency scan
            // runs in every allocation of the host tests).
            let mut blocks = Vec::new();
            for i in 0..10u8 {
                let p = heap.alloc(mid);
                assert!(!p.is_null(), "round {round} block {i}");
                std::ptr::write_bytes(p, i, mid.size());
                blocks.push((p, i));
            }
            let (from, to) = trimmed.expect("the freed block's pages");
            assert!(to - from >= 290 << 10 && from % PAGE == 0 && to % PAGE == 0, "round {round}: {from:#x}..{to:#x}");
            assert!((b as u64) < from && from - (b as u64) < PAGE, "round {round}: {b:p}, {from:#x}");
            for &(p, i) in &blocks {
                assert!(std::slice::from_raw_parts(p, mid.size()).iter().all(|&x| x == i), "round {round} block {i}");
            }
            for (p, _) in blocks {
                heap.dealloc(p, mid);
            }
            heap.trim();
            // The chunk is grown in place again, not replaced by a new one.
            assert_eq!(heap.bytes(), (256 << 10) + (512 << 10), "round {round}");
        }
        assert_eq!(*a, 7);
        heap.dealloc(a, small);
    }
}

static IN_USE_SPACE: Global<Option<Box<Space>>> = Global::new(None);
static IN_USE_HEAP: KernelHeap = KernelHeap::new(in_use_pages);
static SEEN_IN_USE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Pages for [`IN_USE_HEAP`], noting whether the heap said it was in use
/// while it asked for them (it is: an allocation is in progress).
fn in_use_pages(bytes: u64) -> Option<u64> {
    SEEN_IN_USE.store(IN_USE_HEAP.in_use(), std::sync::atomic::Ordering::Relaxed);
    IN_USE_SPACE.with(|s| s.as_mut().unwrap().alloc_kernel(bytes))
}

/// `in_use` is what recover asks after a failure: true only inside the
/// allocator.
#[test]
fn kernel_heap_says_when_it_is_in_use() {
    use std::alloc::GlobalAlloc;
    let (s, _) = space(1 << 8); // 1 MiB
    IN_USE_SPACE.with(|t| *t = Some(s));
    assert!(!IN_USE_HEAP.in_use());
    let l = Layout::from_size_align(64, 8).unwrap();
    // SAFETY: nonzero size; freed with its layout.
    unsafe {
        let p = IN_USE_HEAP.alloc(l);
        assert!(!p.is_null());
        assert!(SEEN_IN_USE.load(std::sync::atomic::Ordering::Relaxed), "in use while it grows");
        assert!(!IN_USE_HEAP.in_use());
        IN_USE_HEAP.dealloc(p, l);
    }
}

/// A fake file system for the file-mapping tests: file 7 is a list of
/// page-aligned host pages of which the first `SIZE` bytes are the file;
/// references are counted.
mod fake_fs {
    use crate::file::{FileOps, Mappable};
    use shoal_plat::Errno;
    use std::sync::Mutex;

    /// The pages' addresses and whether each was handed out for mapping.
    pub static PAGES: Mutex<Vec<(u64, bool)>> = Mutex::new(Vec::new());
    pub static SIZE: Mutex<u64> = Mutex::new(0);
    pub static REFS: Mutex<i64> = Mutex::new(0);

    /// Makes file 7 `data` (in fresh pages).
    pub fn set(data: &[u8]) {
        let mut pages = PAGES.lock().unwrap();
        pages.clear();
        for chunk in data.chunks(4096) {
            let p = super::buffer(4096);
            // SAFETY: a fresh page-sized buffer.
            unsafe { std::ptr::copy_nonoverlapping(chunk.as_ptr(), p as *mut u8, chunk.len()) };
            pages.push((p, false));
        }
        *SIZE.lock().unwrap() = data.len() as u64;
    }

    /// Resizes file 7 (new pages are zero; pages past the end dropped).
    pub fn resize(size: u64) {
        let mut pages = PAGES.lock().unwrap();
        let n = size.div_ceil(4096) as usize;
        pages.truncate(n);
        while pages.len() < n {
            pages.push((super::buffer(4096), false));
        }
        *SIZE.lock().unwrap() = size;
    }

    pub fn page_addr(k: usize) -> u64 {
        PAGES.lock().unwrap()[k].0
    }

    fn get(fd: i32, shared_write: bool) -> Result<Mappable, Errno> {
        match fd {
            3 => {
                *REFS.lock().unwrap() += 1;
                Ok(Mappable::File(7))
            }
            4 if shared_write => Err(Errno::EACCES),
            4 => {
                *REFS.lock().unwrap() += 1;
                Ok(Mappable::File(7))
            }
            5 => Ok(Mappable::Zero),
            _ => Err(Errno::EBADF),
        }
    }
    fn retain(_: u64) {
        *REFS.lock().unwrap() += 1;
    }
    fn release(_: u64) {
        *REFS.lock().unwrap() -= 1;
    }
    fn read_at(_: u64, off: u64, buf: &mut [u8]) -> Result<usize, Errno> {
        let size = *SIZE.lock().unwrap();
        let pages = PAGES.lock().unwrap();
        let mut done = 0;
        while done < buf.len() && off + (done as u64) < size {
            let pos = off + done as u64;
            let (p, _) = pages[(pos / 4096) as usize];
            // SAFETY: inside one of the file's pages.
            buf[done] = unsafe { *((p + pos % 4096) as *const u8) };
            done += 1;
        }
        Ok(done)
    }
    fn size(_: u64) -> Result<u64, Errno> {
        Ok(*SIZE.lock().unwrap())
    }
    fn page(_: u64, off: u64) -> Result<Option<(u64, bool)>, Errno> {
        if off >= *SIZE.lock().unwrap() {
            return Ok(None);
        }
        let e = PAGES.lock().unwrap()[(off / 4096) as usize];
        Ok(Some((e.0, !e.1)))
    }
    fn handed_out(_: u64, off: u64) {
        PAGES.lock().unwrap()[(off / 4096) as usize].1 = true;
    }
    fn map_host(_: u64, _: u64, _: u64, _: u64, _: bool) -> Result<u64, Errno> {
        Err(Errno::ENODEV)
    }
    fn unmap_host(_: u64, _: u64, _: u64) -> Result<(), Errno> {
        Ok(())
    }
    pub static OPS: FileOps = FileOps { get, retain, release, read_at, size, page, handed_out, map_host, unmap_host };
}

/// The file-mapping tests share mm's globals (the file table, the space):
/// one at a time.
static FILE_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn file_test_space(pages: u64) {
    let lo = buffer(((pages + 1) * PAGE) as usize);
    crate::with_space(|s| s.init(lo, lo + (pages + 1) * PAGE, lo + PAGE, lo + (pages + 1) * PAGE));
    shoal_plat::umem::set_bounds(1, u64::MAX);
    crate::file::register(&fake_fs::OPS);
}

#[test]
fn private_file_mappings_copy_and_remap() {
    use crate::sys;
    use shoal_plat::Args;
    let _one = FILE_TESTS.lock().unwrap_or_else(|e| e.into_inner());
    file_test_space(256);
    fake_fs::set(&(0..10_000u32).map(|i| b'a' + (i % 26) as u8).collect::<Vec<u8>>());
    let mmap = |len: u64, prot: u64, flags: u64, fd: u64, off: u64| sys::mmap(&Args([0, len, prot, flags, fd, off]));
    // SAFETY: test memory inside the buffer.
    let bytes = |a: u64, n: usize| unsafe { std::slice::from_raw_parts(a as *const u8, n) }.to_vec();
    let refs0 = *fake_fs::REFS.lock().unwrap();
    // Private at an offset: file bytes, then zeros past the end.
    let m = mmap(8192, 3, 2, 3, 4096).unwrap();
    assert_eq!(bytes(m, 2), b"op"); // 4096 % 26 = 14
    assert_eq!(bytes(m + 10_000 - 4096, 4), [0; 4]);
    assert_eq!(*fake_fs::REFS.lock().unwrap(), refs0 + 1);
    fill(m, 1, b'#');
    sys::munmap(&Args([m, 8192, 0, 0, 0, 0])).unwrap();
    let mut one = [0u8; 1];
    crate::file::ops().unwrap();
    (fake_fs::OPS.read_at)(7, 4096, &mut one).unwrap();
    assert_eq!(one[0], b'a' + (4096 % 26) as u8, "private: no write-back");
    assert_eq!(*fake_fs::REFS.lock().unwrap(), refs0);
    assert_eq!(mmap(4096, 1, 2, 3, 100), Err(Errno::EINVAL));
    assert_eq!(mmap(4096, 3, 1, 4, 0), Err(Errno::EACCES));
    assert_eq!(mmap(4096, 3, 2, 9, 0), Err(Errno::EBADF));
    let z = mmap(4096, 3, 2, 5, 0).unwrap();
    assert!(all(z, 4096, 0));
    // mremap keeps the file: the grown part is the file's next bytes.
    let p = mmap(4096, 3, 2, 3, 0).unwrap();
    let g = sys::mremap(&Args([p, 4096, 8192, 1, 0, 0])).unwrap();
    assert_eq!(crate::file::find(g).map(|m| m.off), Some(0));
    assert_eq!(bytes(g + 4096, 2), b"op");
    sys::munmap(&Args([g, 8192, 0, 0, 0, 0])).unwrap();
    assert_eq!(*fake_fs::REFS.lock().unwrap(), refs0, "every reference given back");
    crate::with_space(|s| s.check());
}

/// A MAP_SHARED mapping's pages are made to show the
/// file's own pages (the Alias hypercall; recorded here), every mapping of
/// a page shows the same file page, the mapping follows the file's size
/// (growth shows new pages, shrinking gives pages past the end their own
/// zeroed memory back), and leaving the mapping (munmap, mremap) gives its
/// pages their own memory back. Nothing is copied or written back.
#[test]
fn item4_shared_file_mappings_show_the_files_pages() {
    use crate::file::ALIASED;
    use crate::sys;
    use shoal_plat::Args;
    let _one = FILE_TESTS.lock().unwrap_or_else(|e| e.into_inner());
    let taken = || ALIASED.with(|p| core::mem::take(&mut *p.borrow_mut()));
    file_test_space(256);
    // 2.5 pages of file.
    fake_fs::set(&vec![b'f'; 10_240]);
    let (p0, p1, p2) = (fake_fs::page_addr(0), fake_fs::page_addr(1), fake_fs::page_addr(2));
    let mmap = |len: u64, prot: u64, flags: u64, fd: u64, off: u64| sys::mmap(&Args([0, len, prot, flags, fd, off]));
    taken();
    let a = mmap(4 * PAGE, 3, 1, 3, 0).unwrap();
    assert_eq!(
        taken(),
        vec![(p0, p0, PAGE), (p1, p1, PAGE), (p2, p2, PAGE), (a, p0, PAGE), (a + PAGE, p1, PAGE), (a + 2 * PAGE, p2, PAGE)],
        "each file page made aliasable once, then shown; the page past the end stays the mapping's own"
    );
    assert_eq!(crate::file::find(a).map(|m| m.live), Some(a + 3 * PAGE));
    // A second mapping, read-only, at an offset: the same pages, no re-backing.
    let b = mmap(2 * PAGE, 1, 1, 4, PAGE).unwrap();
    assert_eq!(taken(), vec![(b, p1, PAGE), (b + PAGE, p2, PAGE)]);
    assert!(crate::file::shows_file(b + 10, 1) && crate::file::shows_file(a + 2 * PAGE, 8));
    assert!(!crate::file::shows_file(a + 3 * PAGE, 8), "past the end of the file");
    // The file grows into the mapping (what vfs reports after a write).
    fake_fs::resize(4 * PAGE + 1);
    let p3 = fake_fs::page_addr(3);
    crate::file::resized(Some(7));
    assert_eq!(taken(), vec![(p3, p3, PAGE), (a + 3 * PAGE, p3, PAGE)], "only the new page, only in the mapping that reaches it");
    // It shrinks: pages past the new end get their own memory back, zeroed.
    fill(a + 2 * PAGE, PAGE, 7);
    fake_fs::resize(PAGE + 5);
    crate::file::resized(None);
    assert_eq!(taken(), vec![(a + 2 * PAGE, a + 2 * PAGE, 2 * PAGE), (b + PAGE, b + PAGE, PAGE)]);
    assert!(all(a + 2 * PAGE, 2 * PAGE, 0), "past the end reads as zero");
    // msync has nothing to do; MADV_DONTNEED must not zero the file's pages.
    assert_eq!(sys::msync(&Args([a, 4 * PAGE, 4, 0, 0, 0])), Ok(0));
    assert_eq!(sys::msync(&Args([a, 4096, 5, 0, 0, 0])), Err(Errno::EINVAL));
    fill(a, 8, b'k');
    sys::madvise(&Args([a, 4 * PAGE, 4, 0, 0, 0])).unwrap();
    assert!(all(a, 8, b'k'), "the page shows the file: left alone");
    // mremap: the old pages get their own memory back, the new place shows the file.
    let m = sys::mremap(&Args([a, 4 * PAGE, 8 * PAGE, 1, 0, 0])).unwrap();
    let (q0, q1) = (fake_fs::page_addr(0), fake_fs::page_addr(1));
    assert_eq!(taken(), vec![(a, a, 2 * PAGE), (m, q0, PAGE), (m + PAGE, q1, PAGE)]);
    assert_eq!(sys::mremap(&Args([m, 8 * PAGE, 8 * PAGE, 1 | 2 | 4, a, 0])), Err(Errno::EINVAL), "MREMAP_DONTUNMAP");
    // munmap: own memory back for the part that showed the file.
    sys::munmap(&Args([b, 2 * PAGE, 0, 0, 0, 0])).unwrap();
    assert_eq!(taken(), vec![(b, b, PAGE)]);
    sys::munmap(&Args([m, 8 * PAGE, 0, 0, 0, 0])).unwrap();
    assert_eq!(taken(), vec![(m, m, 2 * PAGE)]);
    assert!(!crate::file::shows_file(0, u64::MAX));
    // A private mapping never aliases.
    let pv = mmap(PAGE, 3, 2, 3, 0).unwrap();
    assert_eq!(taken(), vec![]);
    sys::munmap(&Args([pv, PAGE, 0, 0, 0, 0])).unwrap();
    crate::with_space(|s| s.check());
}

/// Shared mappings show at most `MAX_SHOWN_PAGES` file pages together
/// (16 in unit tests): a mapping past the bound is `ENOMEM` with nothing
/// shown, and a file growing into mappings shows only up to it.
#[test]
fn shared_mappings_show_a_bounded_number_of_file_pages() {
    use crate::file::{ALIASED, MAX_SHOWN_PAGES};
    use crate::sys;
    use shoal_plat::Args;
    let _one = FILE_TESTS.lock().unwrap_or_else(|e| e.into_inner());
    let taken = || ALIASED.with(|p| core::mem::take(&mut *p.borrow_mut()));
    assert_eq!(MAX_SHOWN_PAGES, 16);
    file_test_space(256);
    fake_fs::set(&vec![b'f'; 10 * PAGE as usize]);
    let mmap = |len: u64, prot: u64| sys::mmap(&Args([0, len, prot, 1, 3, 0]));
    let munmap = |a: u64, len: u64| sys::munmap(&Args([a, len, 0, 0, 0, 0]));
    let a = mmap(10 * PAGE, 1).unwrap();
    taken();
    assert_eq!(mmap(10 * PAGE, 1), Err(Errno::ENOMEM), "20 pages would show the file");
    assert_eq!(taken(), vec![], "nothing shown");
    // PROT_EXEC is kept out of the alias (the tenders refuse it).
    let b = mmap(6 * PAGE, 1 | 4).unwrap();
    assert_eq!(taken().len(), 6);
    assert_eq!(mmap(PAGE, 1), Err(Errno::ENOMEM));
    munmap(b, 6 * PAGE).unwrap();
    munmap(a, 10 * PAGE).unwrap();
    taken();
    // Growth: two mappings of a 4-page file show 8 pages; at 16 pages
    // the first shows 12 (the bound), the second keeps its 4.
    fake_fs::resize(4 * PAGE);
    let c = mmap(16 * PAGE, 1).unwrap();
    let d = mmap(10 * PAGE, 1).unwrap();
    fake_fs::resize(16 * PAGE);
    crate::file::resized(Some(7));
    let live = |x: u64| crate::file::find(x).map(|m| (m.live - m.start) / PAGE);
    assert_eq!((live(c), live(d)), (Some(12), Some(4)));
    // Freed room is used at the next change of size.
    munmap(c, 16 * PAGE).unwrap();
    fake_fs::resize(16 * PAGE + 1);
    crate::file::resized(Some(7));
    assert_eq!(live(d), Some(10));
    munmap(d, 10 * PAGE).unwrap();
    assert!(!crate::file::shows_file(0, u64::MAX));
    crate::with_space(|s| s.check());
}

#[test]
fn kernel_writes_need_a_writable_mapping() {
    // What umem asks mm before a system call writes the program's memory
    // (EFAULT otherwise, as on Linux).
    let (mut s, base) = space(64);
    assert!(!s.user_writable(base, 8), "free memory is not mapped");
    assert_eq!(s.brk(base + 2 * PAGE), base + 2 * PAGE);
    assert!(s.user_writable(base + 100, PAGE), "the break");
    let rw = s.map_anywhere(2 * PAGE, PROT_READ | PROT_WRITE).unwrap();
    let ro = s.map_anywhere(PAGE, PROT_READ).unwrap();
    let none = s.map_anywhere(PAGE, 0).unwrap();
    assert!(s.user_writable(rw, 2 * PAGE));
    assert!(!s.user_writable(ro + 8, 8), "mapped without PROT_WRITE");
    assert!(!s.user_writable(none, 1));
    assert_eq!(ro + PAGE, rw, "placed top-down");
    assert!(!s.user_writable(rw - 4, 8), "straddles the read-only one and the writable one");
    s.protect(ro, PAGE, PROT_READ | PROT_WRITE).unwrap();
    assert!(s.user_writable(ro + 8, 8), "after mprotect");
    s.unmap(rw, 2 * PAGE).unwrap();
    assert!(!s.user_writable(rw, 8), "after munmap");
    assert!(s.user_writable(base - PAGE, 8), "outside the managed range: the image, checked by umem");
    assert!(s.user_writable(u64::MAX - 4, 8), "overflow is umem's to refuse");
}

#[test]
fn address_space_and_data_limits() {
    let (mut s, _) = space(64);
    crate::set_limits(8 * PAGE, 4 * PAGE);
    assert_eq!(crate::check_limits(&s, 9 * PAGE, 0), Err(Errno::ENOMEM));
    s.map_anywhere(3 * PAGE, PROT_READ).unwrap();
    assert_eq!(s.usage(), (3 * PAGE, 0, 0));
    assert_eq!(crate::check_limits(&s, 5 * PAGE, 0), Ok(()));
    assert_eq!(crate::check_limits(&s, 6 * PAGE, 0), Err(Errno::ENOMEM));
    s.map_anywhere(3 * PAGE, PROT_READ | PROT_WRITE).unwrap();
    let base = s.brk(0);
    s.brk(base + PAGE);
    assert_eq!(s.usage(), (6 * PAGE, 3 * PAGE, PAGE));
    // Data: 3 writable pages and 1 of break; one more does not fit.
    assert_eq!(crate::check_limits(&s, PAGE, PAGE), Err(Errno::ENOMEM));
    assert_eq!(crate::check_limits(&s, PAGE, 0), Ok(()), "read-only mappings are not data");
    crate::set_limits(u64::MAX, u64::MAX);
    assert_eq!(crate::check_limits(&s, 1 << 40, 1 << 40), Ok(()));
}

/// Protection changes reach the tender (real pages),
/// only where they differ, and whatever leaves a protected mapping
/// (munmap, a MAP_FIXED replacement) makes its pages read-write again, so
/// memory handed out later never faults.
#[test]
fn mprotect_changes_the_real_protection_and_unmap_restores_it() {
    // As in an unmodified executable's instance (a shoal image's pages
    // never execute; no test here asks for that).
    crate::space::allow_run_time_code();
    let taken = || PROTECTED.with(|p| core::mem::take(&mut *p.borrow_mut()));
    let (mut s, _) = space(32);
    let a = s.map_anywhere(4 * PAGE, 3).unwrap();
    assert_eq!(taken(), vec![], "read-write over free memory: nothing to change");
    s.protect(a, PAGE, 0).unwrap();
    assert_eq!(taken(), vec![(a, a + PAGE, 0)], "the guard page");
    s.protect(a, 2 * PAGE, PROT_READ | PROT_EXEC).unwrap();
    assert_eq!(taken(), vec![(a, a + PAGE, 5), (a + PAGE, a + 2 * PAGE, 5)], "read and execute (one request per segment)");
    s.protect(a, 2 * PAGE, PROT_READ | PROT_WRITE | PROT_EXEC).unwrap();
    assert_eq!(taken(), vec![(a, a + 2 * PAGE, 7)], "read, write and execute (a JIT's RWX)");
    s.protect(a, 2 * PAGE, 3).unwrap();
    assert_eq!(taken(), vec![(a, a + 2 * PAGE, 3)], "back to read-write");
    s.protect(a + PAGE, PAGE, 0).unwrap();
    taken();
    s.unmap(a, 4 * PAGE).unwrap();
    assert_eq!(taken(), vec![(a + PAGE, a + 2 * PAGE, 3)], "munmap makes the page writable for its next user");
    let b = s.map_anywhere(2 * PAGE, 0).unwrap();
    assert_eq!(taken(), vec![(b, b + 2 * PAGE, 0)], "mmap(PROT_NONE), as musl maps thread stacks");
    assert_eq!(s.map_fixed(b, 2 * PAGE, 3, false), Ok(b));
    assert_eq!(taken(), vec![(b, b + 2 * PAGE, 3)], "replaced read-write before it is zeroed");
    s.check();
}

/// A mapping without access goes to clean memory when there is room, and
/// one with access to the dirty memory freed last (reused while resident):
/// a thread's stack, mapped without access before its guard is cut, then
/// costs hvt no TLB flush (see `shoal_abi::PROTECT_UNTOUCHED`).
#[test]
fn mappings_without_access_prefer_clean_memory() {
    let (mut s, _) = space(64);
    let rw = s.map_anywhere(8 * PAGE, PROT_READ | PROT_WRITE).unwrap();
    fill(rw, 8 * PAGE, 1);
    s.unmap(rw, 8 * PAGE).unwrap();
    assert_eq!(s.use_at(rw), Some(Use::Free { dirty: true }));
    let none = s.map_anywhere(4 * PAGE, 0).unwrap();
    assert!(none + 4 * PAGE <= rw, "placed below the dirty pages, on clean ones: {none:#x} {rw:#x}");
    let again = s.map_anywhere(8 * PAGE, PROT_READ | PROT_WRITE).unwrap();
    assert_eq!(again, rw, "a mapping with access reuses the dirty pages");
    assert!(all(again, 8 * PAGE, 0), "zeroed");
    s.check();
}

/// A reservation made on clean memory and never given access is replaced
/// by a `MAP_FIXED` mapping without zeroing (its pages are still zero: the
/// bytes written here behind the kernel's back stand for pages nobody may
/// touch, and stay); one that had access is zeroed.
#[test]
fn an_untouched_reservation_is_mapped_over_without_zeroing() {
    let (mut s, _) = space(64);
    let r = s.map_anywhere(8 * PAGE, 0).unwrap();
    fill(r, 8 * PAGE, 0x5a);
    assert_eq!(s.map_fixed(r, 8 * PAGE, PROT_READ | PROT_WRITE, false), Ok(r));
    assert!(all(r, 8 * PAGE, 0x5a), "zeroed though untouched");
    s.protect(r, 8 * PAGE, 0).unwrap();
    assert_eq!(s.map_fixed(r, 8 * PAGE, PROT_READ | PROT_WRITE, false), Ok(r));
    assert!(all(r, 8 * PAGE, 0), "a mapping that had access is zeroed");
    s.check();
}

/// Kernel pages given back are free again (an exited thread's stack).
#[test]
fn kernel_pages_are_freed() {
    let (mut s, _) = space(128);
    let k = s.alloc_kernel(16 * PAGE).unwrap();
    assert_eq!(s.use_at(k), Some(Use::Kernel));
    s.free_kernel(k, 16 * PAGE);
    assert!(matches!(s.use_at(k), Some(Use::Free { .. })));
    assert_eq!(s.alloc_kernel(16 * PAGE), Some(k), "reused");
    s.check();
}
