//! The memory system calls.

use crate::file::{self, FileMap, Mappable};
use crate::space::{page_up, PAGE, PROT_WRITE};
use crate::with_space;
use shoal_plat::{Args, Errno, SysResult};

const MAP_SHARED: u64 = 0x01;
const MAP_PRIVATE: u64 = 0x02;
const MAP_SHARED_VALIDATE: u64 = 0x03;
const MAP_TYPE: u64 = 0x0f;
const MAP_FIXED: u64 = 0x10;
const MAP_ANONYMOUS: u64 = 0x20;
const MAP_FIXED_NOREPLACE: u64 = 0x10_0000;
/// Flags Linux knows (`LEGACY_MAP_MASK` plus the validated ones), for
/// `MAP_SHARED_VALIDATE`.
const MAP_KNOWN: u64 = MAP_TYPE
    | MAP_FIXED
    | MAP_ANONYMOUS
    | 0x100 // MAP_GROWSDOWN
    | 0x800 // MAP_DENYWRITE
    | 0x1000 // MAP_EXECUTABLE
    | 0x2000 // MAP_LOCKED
    | 0x4000 // MAP_NORESERVE
    | 0x8000 // MAP_POPULATE
    | 0x1_0000 // MAP_NONBLOCK
    | 0x2_0000 // MAP_STACK
    | 0x4_0000 // MAP_HUGETLB
    | 0x8_0000 // MAP_SYNC
    | MAP_FIXED_NOREPLACE
    | 0x400_0000 // MAP_UNINITIALIZED
    | (0x3f << 26); // huge page size

/// `brk(addr)`: returns the (new or unchanged) break; never fails. A
/// growth past `RLIMIT_AS` or `RLIMIT_DATA` leaves the break unchanged.
pub fn brk(a: &Args) -> SysResult {
    Ok(with_space(|s| {
        let (new, cur) = (a.u(0), s.brk(0));
        let grow = page_up(new).zip(page_up(cur)).map_or(0, |(n, c)| n.saturating_sub(c));
        if grow > 0 && crate::check_limits(s, grow, grow).is_err() {
            return cur;
        }
        s.brk(new)
    }))
}

/// `mmap(addr, len, prot, flags, fd, off)`. Shared anonymous memory
/// behaves as private (there is one process, no fork). The hint `addr` is
/// ignored without `MAP_FIXED`/`MAP_FIXED_NOREPLACE`. File-backed mappings:
/// see [`crate::file`].
pub fn mmap(a: &Args) -> SysResult {
    let (addr, len, prot, flags, off) = (a.u(0), a.u(1), a.uint(2), a.u(3), a.u(5));
    if len == 0 {
        return Err(Errno::EINVAL);
    }
    match flags & MAP_TYPE {
        MAP_SHARED | MAP_PRIVATE => {}
        MAP_SHARED_VALIDATE if flags & !MAP_KNOWN == 0 => {}
        MAP_SHARED_VALIDATE => return Err(Errno::EOPNOTSUPP),
        _ => return Err(Errno::EINVAL),
    }
    if off % PAGE != 0 {
        return Err(Errno::EINVAL);
    }
    if page_up(len).is_none() {
        return Err(Errno::ENOMEM);
    }
    let fixed = flags & (MAP_FIXED | MAP_FIXED_NOREPLACE) != 0;
    let file = if flags & MAP_ANONYMOUS == 0 {
        let shared = flags & MAP_TYPE != MAP_PRIVATE;
        let ops = file::ops()?;
        match (ops.get)(a.int(4), shared && prot & PROT_WRITE != 0)? {
            Mappable::Zero => None,
            Mappable::File(id) => {
                if off.checked_add(page_up(len).unwrap_or(u64::MAX)).is_none_or(|e| e > i64::MAX as u64) {
                    (ops.release)(id);
                    return Err(Errno::EOVERFLOW);
                }
                if !file::room(1) {
                    (ops.release)(id);
                    return Err(Errno::ENOMEM);
                }
                Some((id, shared))
            }
        }
    } else {
        None
    };
    let fail = |e: Errno| {
        if let (Some((id, _)), Ok(ops)) = (file, file::ops()) {
            (ops.release)(id);
        }
        e
    };
    if flags & MAP_FIXED != 0 && flags & MAP_FIXED_NOREPLACE == 0 {
        // The mappings replaced are unmapped first.
        if let Some(end) = page_up(len).and_then(|l| addr.checked_add(l)) {
            if addr % PAGE == 0 {
                file::detach(addr, end).map_err(fail)?;
            }
        }
    }
    let start = with_space(|s| {
        // RLIMIT_AS and RLIMIT_DATA (writable private mappings). A fixed
        // mapping may replace others; counted whole, as a bound.
        let bytes = page_up(len).unwrap_or(u64::MAX);
        let data = if prot & PROT_WRITE != 0 && flags & MAP_TYPE == MAP_PRIVATE { bytes } else { 0 };
        crate::check_limits(s, bytes, data)?;
        if fixed {
            s.map_fixed(addr, len, prot, flags & MAP_FIXED_NOREPLACE != 0)
        } else {
            s.map_anywhere(len, prot)
        }
    })
    .map_err(fail)?;
    if let Some((id, shared)) = file {
        let m = FileMap { start, end: start + page_up(len).unwrap_or(0), id, off, shared, live: start };
        let set_up = if shared { file::attach(m) } else { file::set_up_private(m) };
        match set_up {
            Ok(m) => {
                if let Err(e) = file::add(m) {
                    file::forget_host(&m);
                    let _ = with_space(|s| s.unmap(m.start, len));
                    return Err(fail(e));
                }
            }
            Err(e) => {
                let _ = with_space(|s| s.unmap(m.start, len));
                return Err(fail(e));
            }
        }
    }
    Ok(start)
}

/// `munmap(addr, len)`. Only the program's anonymous mappings are
/// released; other memory in the range (the break, the image, the stack,
/// the kernel heap) stays as it is.
pub fn munmap(a: &Args) -> SysResult {
    let (addr, len) = (a.u(0), a.u(1));
    if addr % PAGE == 0 && len != 0 {
        if let Some(end) = page_up(len).and_then(|l| addr.checked_add(l)) {
            file::detach(addr, end)?;
        }
    }
    with_space(|s| s.unmap(addr, len)).map(|_| 0)
}

/// `mremap(old, old_len, new_len, flags, new_addr)` on anonymous mappings:
/// shrinks, grows in place when the pages above are free, or moves (copies)
/// with `MREMAP_MAYMOVE`; `MREMAP_FIXED` and `MREMAP_DONTUNMAP` work too.
///
/// A file mapping keeps its file: growing it maps more of the file, and a
/// shared one shows the file's pages at its new place. `MREMAP_DONTUNMAP`
/// on a shared file mapping is `EINVAL` (as Linux before 5.13).
pub fn mremap(a: &Args) -> SysResult {
    let (old, old_len, new_len) = (a.u(0), a.u(1), a.u(2));
    if let (Some(ol), Some(nl)) = (page_up(old_len), page_up(new_len)) {
        if nl > ol {
            let writable = with_space(|s| matches!(s.use_at(old), Some(crate::space::Use::Anon { prot }) if prot as u32 & PROT_WRITE != 0));
            with_space(|s| crate::check_limits(s, nl - ol, if writable { nl - ol } else { 0 }))?;
        }
    }
    let rec = file::find(old);
    let (Some(ol), Some(nl)) = (page_up(old_len), page_up(new_len)) else {
        return with_space(|s| s.remap(old, old_len, new_len, a.uint(3), a.u(4)));
    };
    let Some(m) = rec else {
        return with_space(|s| s.remap(old, old_len, new_len, a.uint(3), a.u(4)));
    };
    if !file::room(2) {
        return Err(Errno::ENOMEM);
    }
    if m.shared && a.uint(3) & crate::space::MREMAP_DONTUNMAP != 0 {
        return Err(Errno::EINVAL);
    }
    let ops = file::ops()?;
    let old_end = old.saturating_add(ol);
    // The memory moves (a copy) or stays; then the old range leaves the
    // records (a shared one's pages get their own memory back) and the new
    // one is set up as a fresh mapping of the same file range.
    let new = with_space(|s| s.remap(old, old_len, new_len, a.uint(3), a.u(4)))?;
    if new == old && m.shared {
        // In place: the pages that stay keep showing the file.
        if nl < ol {
            let _ = file::detach(old + nl, old_end);
        } else if nl > ol {
            file::grow(old, old + nl);
        }
        return Ok(new);
    }
    if new == old && !m.shared && m.live > m.start {
        // In place, over the host's pages of a mounted file: the pages
        // that stay keep showing them.
        if nl < ol {
            let _ = file::detach(old + nl, old_end);
        } else if nl > ol {
            file::grow_private(&m, old_end, old + nl)?;
        }
        return Ok(new);
    }
    (ops.retain)(m.id);
    let _ = file::detach(old, old_end);
    let nm = FileMap { start: new, end: new + nl, id: m.id, off: m.off + (old - m.start), shared: m.shared, live: new };
    let set_up = if m.shared {
        file::attach(nm)
    } else if nl > ol {
        file::fill(&nm, new + ol, new + nl).map(|_| nm)
    } else {
        Ok(nm)
    };
    match set_up.and_then(file::add) {
        Ok(()) => Ok(new),
        Err(e) => {
            // Keep the (private) memory; only the file link is lost.
            (ops.release)(m.id);
            Err(e)
        }
    }
}

const MS_ASYNC: u32 = 1;
const MS_INVALIDATE: u32 = 2;
const MS_SYNC: u32 = 4;

/// `msync(addr, len, flags)`: shared file mappings are the file's pages
/// already (see [`crate::file`]), so there is nothing to write; the
/// arguments are checked as Linux checks them (`ENOMEM` if part of the
/// range is not mapped).
pub fn msync(a: &Args) -> SysResult {
    let (addr, len, flags) = (a.u(0), a.u(1), a.uint(2));
    if addr % PAGE != 0 || flags & !(MS_ASYNC | MS_INVALIDATE | MS_SYNC) != 0 || flags & (MS_ASYNC | MS_SYNC) == MS_ASYNC | MS_SYNC {
        return Err(Errno::EINVAL);
    }
    page_up(len).and_then(|l| addr.checked_add(l)).ok_or(Errno::ENOMEM)?;
    with_space(|s| s.advise_check(addr, len))?;
    Ok(0)
}

/// `mincore(addr, len, vec)`: every mapped page is resident (one byte
/// with bit 0 set per page); `ENOMEM` for unmapped pages.
pub fn mincore(a: &Args) -> SysResult {
    let (addr, len, vec) = (a.u(0), a.u(1), a.u(2));
    if addr % PAGE != 0 {
        return Err(Errno::EINVAL);
    }
    let bytes = page_up(len).ok_or(Errno::ENOMEM)?;
    addr.checked_add(bytes).ok_or(Errno::ENOMEM)?;
    with_space(|s| s.advise_check(addr, len))?;
    shoal_plat::umem::slice_mut(vec, (bytes / PAGE) as usize)?.fill(1);
    Ok(0)
}

/// `mprotect(addr, len, prot)`: validated like Linux (`EINVAL`, `ENOMEM`
/// for unmapped pages), recorded, and made real by the tender (`Protect`
/// hypercall: host `mprotect` on spt, the guest's page tables on hvt), so
/// guard pages and `PROT_NONE` regions fault, and `PROT_EXEC` pages run
/// (libraries `ld.so` maps, JIT code).
pub fn mprotect(a: &Args) -> SysResult {
    let (addr, len) = (a.u(0), a.u(1));
    if addr % PAGE != 0 {
        return Err(Errno::EINVAL);
    }
    if len == 0 {
        return Ok(0);
    }
    with_space(|s| s.protect(addr, len, a.uint(2))).map(|_| 0)
}

/// `madvise(addr, len, advice)`. `MADV_DONTNEED` zero-fills the program's
/// memory in the range (Linux semantics for private anonymous memory) by
/// giving its pages back to the host (`Release` hypercall; see
/// [`crate::space::Space::dontneed`]); `MADV_FREE` does the same at once
/// (Linux frees such pages when it likes before their next write, and
/// they read as zero after that: freeing them now is one of the outcomes
/// Linux allows). Pages that show a file (shared file mappings) are left
/// as they are by both. `MADV_REMOVE` is `EACCES` (no shared mappings);
/// other known advice is accepted after checking the range is mapped
/// (`ENOMEM` otherwise); unknown advice is `EINVAL`.
pub fn madvise(a: &Args) -> SysResult {
    let (addr, len, advice) = (a.u(0), a.u(1), a.int(2));
    if addr % PAGE != 0 {
        return Err(Errno::EINVAL);
    }
    let Some(rounded) = page_up(len) else { return Err(Errno::EINVAL) };
    if addr.checked_add(rounded).is_none() {
        return Err(Errno::EINVAL);
    }
    let known = matches!(advice, 0..=4 | 8..=25);
    if !known {
        return Err(Errno::EINVAL);
    }
    if rounded == 0 {
        return Ok(0);
    }
    with_space(|s| match advice {
        // MADV_DONTNEED, MADV_FREE, MADV_DONTNEED_LOCKED: pages that show a
        // file keep showing it (Linux would read them from the file again).
        4 | 8 | 24 => s.advise_check(addr, len).and_then(|_| {
            let mut r = Ok(());
            let end = addr.saturating_add(rounded);
            file::outside_shared(addr, end, |x, y| r = r.and(s.dontneed(x, y - x)));
            r
        }),
        9 => s.advise_check(addr, len).and(Err(Errno::EACCES)), // MADV_REMOVE
        _ => s.advise_check(addr, len),
    })
    .map(|_| 0)
}
