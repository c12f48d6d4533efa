//! The kernel's own heap: what `alloc` (`Box`, `Vec`, `BTreeMap`…) in the
//! kernel components allocates from.
//!
//! It is the `talc` allocator: no_std, well kept, fast (bucketed free
//! lists with O(1) allocation and coalescing), and it can take memory from
//! several disjoint regions, which is what growing from mm's page allocator
//! produces (its chunks are placed top-down among the program's mappings,
//! so they are rarely adjacent). When talc runs out it calls
//! [`PageSource::acquire`], which takes a fresh chunk of pages from the page
//! allocator (growing geometrically from 256 KiB to 8 MiB per chunk, or the
//! size of a larger request) and claims it. Chunks are not returned.
//!
//! The heap is [`KERNEL_HEAP`], a static of mm; `shoal-kernel` declares
//! the `#[global_allocator]` (a zero-sized forwarder to it): declaring it
//! here would replace the allocator of every host test binary that links
//! mm.

use core::alloc::{GlobalAlloc, Layout};
use core::ptr::NonNull;
use shoal_plat::Global;
use talc::base::binning::Binning;
use talc::base::Talc;
use talc::source::Source;
use talc::DefaultBinning;

/// The first chunk (mm keeps room for it at the bottom of free memory:
/// [`crate::space::KERNEL_LOW`]).
const FIRST_CHUNK: u64 = 256 << 10;
const MAX_CHUNK: u64 = 8 << 20;

/// Where the kernel heap gets pages: a function returning the address of
/// `bytes` (a multiple of the page size) fresh bytes, or `None`.
pub type PageFn = fn(bytes: u64) -> Option<u64>;

/// talc's memory source: chunks of pages from mm.
///
/// All zero for the heap backed by mm (`get` `None`: mm's page allocator;
/// `next_chunk` 0: [`FIRST_CHUNK`]), so that [`KERNEL_HEAP`] lies in mm's
/// `.bss`.
///
/// A chunk is claimed a little at a time: talc keeps a tag at the end of
/// each heap, so a chunk claimed whole wrote its top page at once — a
/// page of every instance's memory for one word (the first chunk is 256
/// KiB; an idle instance uses about 24 KiB of it). The heap grows in place
/// by whole pages, up to the end of the chunk it was reserved in (`end`,
/// `limit`; 0: none yet), before a new chunk is taken.
#[derive(Debug)]
pub struct PageSource {
    get: Option<PageFn>,
    next_chunk: u64,
    bytes: u64,
    end: u64,
    limit: u64,
}

// SAFETY: `acquire` only calls `claim` on memory it took from the page
// allocator, which hands it out to nobody else; it never allocates from the
// kernel heap (the page allocator's table is a fixed array).
unsafe impl Source for PageSource {
    fn acquire<B: Binning>(talc: &mut Talc<Self, B>, layout: Layout) -> Result<(), ()> {
        let overhead = talc::min_first_heap_size::<B>() as u64 + 4 * layout.align() as u64 + 256;
        let need = (layout.size() as u64).checked_add(overhead).ok_or(())?;
        // Grow the current heap in place while its chunk has room.
        let src = &talc.source;
        if let Some(heap_end) = NonNull::new(src.end as *mut u8) {
            let want = src.end.checked_add(need).and_then(crate::space::page_up).ok_or(())?;
            if want <= src.limit {
                // SAFETY: [end, want) lies in the chunk the page allocator
                // handed to this heap for good (below `limit`), unclaimed so
                // far; `heap_end` is the heap's current end.
                let new_end = unsafe { talc.extend(heap_end, want as *mut u8) };
                talc.source.end = new_end.as_ptr() as u64;
                return Ok(());
            }
        }
        let next = talc.source.next_chunk.max(FIRST_CHUNK);
        let chunk = next.max(need);
        let chunk = crate::space::page_up(chunk).ok_or(())?;
        let base = talc.source.get.unwrap_or(crate::alloc_kernel_pages)(chunk).ok_or(())?;
        // The part needed now; the rest of the chunk is claimed as the heap
        // grows (above).
        let first = crate::space::page_up(need).ok_or(())?.min(chunk);
        // SAFETY: [base, base + chunk) was just handed to the kernel heap by
        // the page allocator and is used by nothing else, for good.
        let claimed = unsafe { talc.claim(base as *mut u8, first as usize) };
        let heap_end = claimed.ok_or(())?;
        talc.source.end = heap_end.as_ptr() as u64;
        talc.source.limit = base + chunk;
        talc.source.bytes += chunk;
        talc.source.next_chunk = (next * 2).min(MAX_CHUNK);
        Ok(())
    }
}

/// The kernel's heap, backed by mm's page allocator: a static of mm, all
/// zero, so it lies in the bss page mm touches anyway (in the kernel
/// crate, which has no other writable state, it gave that library a data
/// page of its own in every instance). `shoal-kernel`'s
/// `#[global_allocator]` forwards to it.
pub static KERNEL_HEAP: KernelHeap = KernelHeap::from_mm();

/// The kernel heap as a `GlobalAlloc`.
pub struct KernelHeap {
    talc: Global<Talc<PageSource, DefaultBinning>>,
}

impl KernelHeap {
    /// A heap that takes its pages from `get`.
    pub const fn new(get: PageFn) -> KernelHeap {
        KernelHeap { talc: Global::new(Talc::new(PageSource { get: Some(get), next_chunk: 0, bytes: 0, end: 0, limit: 0 })) }
    }

    /// The kernel heap backed by mm's page allocator (all zero).
    pub const fn from_mm() -> KernelHeap {
        KernelHeap { talc: Global::new(Talc::new(PageSource { get: None, next_chunk: 0, bytes: 0, end: 0, limit: 0 })) }
    }

    /// Bytes at the top of the current chunk's claimed part that no
    /// allocation holds (what [`KernelHeap::trim`] would give back, before
    /// rounding to pages). 0 while the heap is in use further up the stack.
    pub fn free_top(&self) -> u64 {
        self.talc
            .try_with(|t| {
                let end = NonNull::new(t.source.end as *mut u8)?;
                // SAFETY: `end` is the current heap's end (kept by acquire).
                let r = unsafe { t.reserved(end) };
                Some(t.source.end - r.up_to.as_ptr() as u64)
            })
            .flatten()
            .unwrap_or(0)
    }

    /// Shrinks the current heap to what its allocations hold (the free
    /// space at its top is unclaimed again, and claimed again as the heap
    /// grows) and returns the whole pages that left it, `[from, to)`, for
    /// the caller to give back to the host: a transient allocation at boot
    /// (a buffer freed again) left pages of every instance's heap written,
    /// and talc's tag at the heap's end on a page of its own. `None` when
    /// no whole page is free or the heap is in use further up the stack.
    ///
    /// A heap that holds no allocation at all (a later chunk whose blocks
    /// were all freed: a rejuvenation frees all of net's state at once)
    /// keeps its first page: truncated to nothing, talc would *delete* it,
    /// and `source.end` would name a heap talc no longer knows — the next
    /// growth in place then "extended" it, unlinking a gap that was no
    /// longer in talc's free lists through its stale links, and the lists
    /// were corrupt (the null free-list node, at 0x18, that nginx faulted
    /// on under `--rejuvenate-every`).
    pub fn trim(&self) -> Option<(u64, u64)> {
        self.talc
            .try_with(|t| {
                let end = NonNull::new(t.source.end as *mut u8)?;
                // SAFETY: `end` is the current heap's end (kept by acquire).
                let r = unsafe { t.reserved(end) };
                let keep = if r.any {
                    // Down to the highest allocation (talc stops there).
                    core::ptr::null_mut()
                } else {
                    // Nothing allocated: keep the gap on the heap's first
                    // page, so the heap stays a heap.
                    crate::space::page_up(r.up_to.as_ptr() as u64 + 1)? as *mut u8
                };
                let old = t.source.end;
                // SAFETY: `end` is the current heap's end; truncation keeps
                // every allocation (it stops at the reserved part).
                match unsafe { t.truncate(end, keep) } {
                    Some(new_end) => t.source.end = new_end.as_ptr() as u64,
                    None => {
                        // talc deleted the heap (it should not, with a
                        // page kept): never grow it in place again; the
                        // next growth takes a fresh chunk.
                        t.source.end = 0;
                        t.source.limit = 0;
                        return None;
                    }
                }
                let from = crate::space::page_up(t.source.end)?;
                (from < old).then_some((from, crate::space::page_up(old)?))
            })
            .flatten()
    }

    /// Whether the heap is in use further up the stack (an allocation,
    /// a release or a trim in progress): a failure then happened inside
    /// the allocator (`shoal_recover` ends the instance instead of
    /// rebooting the component whose call it was).
    pub fn in_use(&self) -> bool {
        self.talc.try_with(|_| ()).is_none()
    }

    /// Bytes of pages the heap has taken so far.
    pub fn bytes(&self) -> u64 {
        self.talc.with(|t| t.source.bytes)
    }
}

// SAFETY: talc upholds the GlobalAlloc contract (allocations are aligned,
// sized and disjoint); the Global cell serialises access (one flow of
// control in the kernel).
unsafe impl GlobalAlloc for KernelHeap {
    // `#[inline(never)]`: the allocator's code stays in mm's text (the
    // recover gate attributes code by component), also when shoal-kernel's
    // `#[global_allocator]` forwards to [`KERNEL_HEAP`].
    #[inline(never)]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: GlobalAlloc callers never pass a zero size.
        self.talc.with(|t| unsafe { t.allocate(layout) }).map_or(core::ptr::null_mut(), NonNull::as_ptr)
    }

    #[inline(never)]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller passes a pointer this heap allocated with `layout`.
        self.talc.with(|t| unsafe { t.deallocate(ptr, layout) })
    }

    #[inline(never)]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller passes a live allocation of `layout` and a
        // nonzero `new_size`.
        if self.talc.with(|t| unsafe { t.try_realloc_in_place(ptr, layout, new_size) }) {
            return ptr;
        }
        let Ok(new_layout) = Layout::from_size_align(new_size, layout.align()) else {
            return core::ptr::null_mut();
        };
        // SAFETY: new_size is nonzero (GlobalAlloc contract).
        let new = unsafe { self.alloc(new_layout) };
        if !new.is_null() {
            // SAFETY: both blocks are live and distinct; the smaller size is
            // inside both.
            unsafe {
                core::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
        }
        new
    }
}
