//! The `Protect` hypercall on hvt: the VMM rewrites the guest's page
//! tables (the guest runs at CPL 3 and cannot touch them).
//!
//! Only `[heap_start, mem_size)` (the kernel's free memory and the main
//! stack) can change, between read-write, read-only and not present; a
//! page keeps NX unless the kernel asks for `PROT_EXEC`, which only an
//! unmodified Linux executable's instance may (its libraries that `ld.so`
//! maps, JIT code; the guest's code is arbitrary already and runs at CPL 3
//! either way), and the image's code (below `heap_start`) is never
//! writable. A 2 MiB page that needs a 4 KiB protection is split
//! into a page table taken from the table pool: a second KVM memory slot at
//! guest-physical [`POOL_ADDR`], one page per 2 MiB region of guest memory,
//! which no guest page table maps (the guest cannot read or write its own
//! page tables there, as it cannot in tender-private memory).
//!
//! A protection change keeps the page the entry points at: the `Alias`
//! hypercall ([`Tables::alias`]) points a guest page's entry at another
//! guest-physical page of the same range (shared file mappings show the
//! file's pages that way), and a later `mprotect` of that page must not
//! undo it. A page without access keeps its address in the entry, with
//! the present bit clear.
//!
//! The `Release` hypercall ([`Tables::release`]) gives the host memory
//! behind guest-physical pages of the same range back
//! (`madvise(MADV_DONTNEED)` on the VMM's mapping of guest memory, which
//! is private and anonymous there: the pages read as zero when touched
//! again). The page tables do not change, so no TLB flush is needed; KVM
//! drops its translations of the pages through the host's MMU notifier.
//!
//! **TLB.** The guest cannot `invlpg` at CPL 3, and the VMM cannot make
//! KVM flush the guest's TLB cheaply: rewriting CR3 through
//! `KVM_SET_SREGS`, even with a changed PWT bit, left stale translations
//! here (a page made `PROT_NONE` stayed readable). So the guest flushes
//! itself: after a `Protect` or `Alias` that answers
//! `shoal_abi::PROTECT_FLUSH` the kernel executes `int3` with
//! `shoal_abi::HVT_TLB_FLUSH_MAGIC` in rax, whose DPL-3 gate runs
//! `mov cr3, cr3` at CPL 0 and returns. On a host without EPT (nested, as
//! here) KVM also keeps a shadow of the tables that neither that reload
//! nor an `invlpg` refreshes (it re-reads only entries the guest wrote
//! through its own mappings, and the guest has none of its tables), so
//! after such a change the VMM makes KVM drop its translations of the
//! pages that lost access (`Vm::forget_pages`: a protection change of the
//! VMM's mapping of them, which KVM follows through the host's MMU
//! notifier), or, the first time after a 2 MiB page was split, its whole
//! shadow (`Vm::forget_translations`, a memory-slot deletion: 5 to 50 ms
//! here, where dropping pages costs microseconds; see [`Forget`]). A
//! change that only adds access needs
//! neither: a fault on the old entry makes KVM read the new one. That
//! keeps a thread's start and end (`mmap` of its stack without access,
//! `mprotect` of all but the guard page, `munmap`) at one shadow rebuild
//! instead of three.

use crate::x86;
use shoal_abi::{AliasArgs, ProtectArgs, PAGE_SIZE, PROTECT_FLUSH, PROTECT_UNTOUCHED, PROT_EXEC, PROT_READ, PROT_WRITE};
use vm_memory::{Bytes, GuestRegionMmap, MemoryRegionAddress};

/// Guest-physical address of the page-table pool: above the 4 GiB guest
/// memory can span, so no guest address ever names it.
pub const POOL_ADDR: u64 = x86::MAX_MEM;

const MIB2: u64 = 2 << 20;

/// Bytes of table pool for guest memory of `mem_size` bytes.
pub fn pool_size(mem_size: u64) -> u64 {
    mem_size.div_ceil(MIB2) * PAGE_SIZE
}

/// What a protection request needs of the VM.
pub struct Tables<'a> {
    /// Guest memory from GPA 0 (tender-private tables included).
    pub low: &'a GuestRegionMmap<()>,
    /// The table pool at [`POOL_ADDR`].
    pub pool: &'a GuestRegionMmap<()>,
    /// First address the guest may protect.
    pub heap_start: u64,
    /// End of guest memory.
    pub mem_size: u64,
    /// Pages may be made executable (an unmodified executable's libraries
    /// and run-time code; their `syscall`s reach the kernel's entry through
    /// LSTAR).
    pub run_time_code: bool,
}

impl Tables<'_> {
    fn read(&self, gpa: u64) -> Result<u64, String> {
        let r =
            if gpa >= POOL_ADDR { self.pool.read_obj::<u64>(MemoryRegionAddress(gpa - POOL_ADDR)) } else { self.low.read_obj::<u64>(MemoryRegionAddress(gpa)) };
        r.map_err(|e| format!("cannot read the guest page table entry at {gpa:#x}: {e}"))
    }

    fn write(&self, gpa: u64, v: u64) -> Result<(), String> {
        let r = if gpa >= POOL_ADDR { self.pool.write_obj(v, MemoryRegionAddress(gpa - POOL_ADDR)) } else { self.low.write_obj(v, MemoryRegionAddress(gpa)) };
        r.map_err(|e| format!("cannot write the guest page table entry at {gpa:#x}: {e}"))
    }

    /// Sets the protection of `[a.addr, a.addr + a.len)`. `Ok(ret)` is the
    /// hypercall's result (`-EINVAL` for a request outside the rules);
    /// `Err` means the VMM's own tables are broken (stop the guest).
    #[cfg(any(test, feature = "fuzz"))]
    pub fn protect(&self, a: &ProtectArgs) -> Result<i64, String> {
        self.protect_pages(a).map(|(r, _)| r)
    }

    /// [`Tables::protect`], also saying what KVM must forget of its
    /// translations ([`Forget`]).
    pub fn protect_pages(&self, a: &ProtectArgs) -> Result<(i64, Forget), String> {
        let einval = (-i64::from(libc::EINVAL), Forget::Nothing);
        let exec_refused = a.prot & PROT_EXEC != 0 && !self.run_time_code;
        if a.prot & !(PROT_READ | PROT_WRITE | PROT_EXEC | PROTECT_UNTOUCHED) != 0
            || exec_refused
            || a.len == 0
            || !a.addr.is_multiple_of(PAGE_SIZE)
            || !a.len.is_multiple_of(PAGE_SIZE)
        {
            return Ok(einval);
        }
        let Some(end) = a.addr.checked_add(a.len) else { return Ok(einval) };
        if a.addr < self.heap_start || end > self.mem_size {
            return Ok(einval);
        }
        let bits = bits_of(a.prot);
        let mut weakened = Span::default();
        let mut page = a.addr;
        while page < end {
            let (pt, split) = self.table_of(page)?;
            weakened.1 |= split;
            let at = pt + ((page % MIB2) / PAGE_SIZE) * 8;
            let entry = self.read(at)?;
            // The page the entry points at (itself, or what an alias set).
            let old = entry & x86::ADDR_MASK;
            let target = if old != 0 { old } else { page };
            if takes_away(entry, bits) {
                weakened.add(target);
            }
            self.write(at, target | bits)?;
            page += PAGE_SIZE;
        }
        Ok(match weakened.0 {
            Some(span) if a.prot & PROTECT_UNTOUCHED == 0 => (PROTECT_FLUSH, weakened.forget(span)),
            _ => (0, weakened.forget_nothing()),
        })
    }

    /// Points the entries of `[a.dst, a.dst + a.len)` at the guest-physical
    /// pages `[a.src, a.src + a.len)` with protection `a.prot` (never
    /// executable). Both ranges must lie in `[heap_start, mem_size)`, so no
    /// guest page can ever show the image, the boot information or the
    /// tender's page tables. Results as [`Tables::protect`].
    #[cfg(feature = "fuzz")]
    pub fn alias(&self, a: &AliasArgs) -> Result<i64, String> {
        self.alias_pages(a).map(|(r, _)| r)
    }

    /// [`Tables::alias`], also saying what KVM must forget of its
    /// translations: the pages entries showed before and no longer show,
    /// or show with less access ([`Forget`]).
    pub fn alias_pages(&self, a: &AliasArgs) -> Result<(i64, Forget), String> {
        let einval = (-i64::from(libc::EINVAL), Forget::Nothing);
        let aligned = |x: u64| x.is_multiple_of(PAGE_SIZE);
        let shareable = a.prot & shoal_abi::ALIAS_SHAREABLE != 0;
        let prot = a.prot & !shoal_abi::ALIAS_SHAREABLE;
        if prot & !(PROT_READ | PROT_WRITE) != 0 || (shareable && a.src != a.dst) || a.len == 0 || !aligned(a.dst) || !aligned(a.src) || !aligned(a.len) {
            return Ok(einval);
        }
        let inside = |x: u64| x >= self.heap_start && x.checked_add(a.len).is_some_and(|e| e <= self.mem_size);
        if !inside(a.dst) || !inside(a.src) {
            return Ok(einval);
        }
        if shareable {
            // Every guest-physical page can be shown anywhere already.
            return Ok((0, Forget::Nothing));
        }
        let bits = bits_of(prot);
        let mut weakened = Span::default();
        let mut off = 0;
        while off < a.len {
            let page = a.dst + off;
            let (pt, split) = self.table_of(page)?;
            weakened.1 |= split;
            let at = pt + ((page % MIB2) / PAGE_SIZE) * 8;
            let entry = self.read(at)?;
            // A present entry that shows another page now is as stale as
            // one that lost access: KVM forgets the page it showed.
            let old = entry & x86::ADDR_MASK;
            if takes_away(entry, bits) || (entry & x86::PTE_P != 0 && old != a.src + off) {
                weakened.add(if old != 0 { old } else { page });
            }
            self.write(at, (a.src + off) | bits)?;
            off += PAGE_SIZE;
        }
        Ok(match weakened.0 {
            Some(span) => (PROTECT_FLUSH, weakened.forget(span)),
            None => (0, weakened.forget_nothing()),
        })
    }

    /// Gives the host memory behind the guest-physical pages `[addr, addr +
    /// len)` back (they read as zero afterwards). The range must lie in
    /// `[heap_start, mem_size)`, page aligned, not empty: the image, the
    /// boot information and the tender's tables are out of reach (and the
    /// pool's private file mappings lie below `heap_start`). Results as
    /// [`Tables::protect`].
    pub fn release(&self, addr: u64, len: u64) -> Result<i64, String> {
        let aligned = |x: u64| x.is_multiple_of(PAGE_SIZE);
        let inside = addr >= self.heap_start && addr.checked_add(len).is_some_and(|e| e <= self.mem_size);
        if len == 0 || !aligned(addr) || !aligned(len) || !inside {
            return Ok(-i64::from(libc::EINVAL));
        }
        let (Ok(off), Ok(n)) = (usize::try_from(addr), usize::try_from(len)) else { return Ok(-i64::from(libc::EINVAL)) };
        // SAFETY: [off, off + n) lies inside the guest memory mapping
        // (checked above against mem_size, its length); the guest asked
        // for the contents to go, and no Rust reference points into guest
        // memory across a hypercall. MADV_DONTNEED on private anonymous
        // memory only drops pages.
        let r = unsafe { libc::madvise(self.low.as_ptr().add(off).cast(), n, libc::MADV_DONTNEED) };
        if r != 0 {
            return Ok(-i64::from(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL)));
        }
        Ok(0)
    }

    /// `mmap(MAP_FIXED)` over the VMM's mapping of guest-physical
    /// `[addr, addr + len)` (inside `[heap_start, mem_size)`, checked by
    /// the caller): `fd` from `off`, or fresh anonymous memory (`fd` -1).
    /// Read-write for the VMM whatever the guest's protection (its page
    /// tables decide that); private, so a write copies the page. KVM drops
    /// its translations of the old pages through the host's MMU notifier.
    fn remap(&self, addr: u64, len: u64, fd: i32, off: u64) -> Result<(), i32> {
        let (Ok(at), Ok(n), Ok(off)) = (usize::try_from(addr), usize::try_from(len), libc::off_t::try_from(off)) else { return Err(libc::EINVAL) };
        let flags = if fd < 0 { libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE } else { libc::MAP_PRIVATE };
        // SAFETY: [at, at + n) lies inside the guest memory mapping
        // (checked by the caller against mem_size, its length), which no
        // Rust reference points into across a hypercall; MAP_FIXED
        // replaces only those pages.
        let p = unsafe { libc::mmap(self.low.as_ptr().add(at).cast(), n, libc::PROT_READ | libc::PROT_WRITE, flags | libc::MAP_FIXED, fd, off) };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EINVAL));
        }
        Ok(())
    }

    /// The 4 KiB page table mapping `addr`, splitting its 2 MiB page into
    /// one from the pool first if needed (then `true`).
    fn table_of(&self, addr: u64) -> Result<(u64, bool), String> {
        let region = addr / MIB2;
        let pde_at = x86::pd_entry_addr(region);
        let pde = self.read(pde_at)?;
        if pde & x86::PTE_P == 0 {
            return Err(format!("guest address {addr:#x} has no page directory entry"));
        }
        if pde & x86::PTE_PS == 0 {
            return Ok((pde & x86::ADDR_MASK, false));
        }
        let pt = POOL_ADDR + region * PAGE_SIZE;
        let base = region * MIB2;
        let leaf = pde & !(x86::PTE_PS | x86::ADDR_MASK);
        for i in 0..512 {
            self.write(pt + i * 8, (base + i * PAGE_SIZE) | leaf)?;
        }
        self.write(pde_at, pt | x86::DIR_BITS)?;
        Ok((pt, true))
    }
}

/// `HOSTFS_MAP` on hvt: a mounted file's pages become the guest-physical
/// pages of `[addr, addr + len)` (the host's page cache, shared by every
/// instance that maps the file, copied on a write); the guest's page
/// tables, and so its protection, stay as they are.
impl shoal_hostcall::hostfs::Mapper for Tables<'_> {
    fn free_memory(&self, addr: u64, len: u64) -> bool {
        addr >= self.heap_start && addr.checked_add(len).is_some_and(|e| e <= self.mem_size)
    }

    fn exec_allowed(&self) -> bool {
        self.run_time_code
    }

    fn map_file(&self, fd: i32, off: u64, addr: u64, len: u64, _prot: u64) -> Result<(), i32> {
        self.remap(addr, len, fd, off)
    }

    fn map_zero(&self, addr: u64, len: u64, _prot: u64) -> Result<(), i32> {
        self.remap(addr, len, -1, 0)
    }
}

/// What KVM must forget of its translations after a change of the
/// tables, when the guest flushes its TLB (`PROTECT_FLUSH`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forget {
    /// Nothing: no access was taken away.
    Nothing,
    /// Its translations of the guest-physical pages `[lo, hi)`
    /// ([`crate::vm::Vm::forget_pages`]): every page whose entry took
    /// access away, or that an entry no longer shows, lies there.
    Pages(u64, u64),
    /// All of them ([`crate::vm::Vm::forget_translations`]), because of a
    /// split (below).
    All,
    /// Nothing now, but all of them at the next change that takes access
    /// away: a 2 MiB page became a table of 4 KiB pages, and KVM may keep
    /// the shadow it made of the 2 MiB page under that directory entry
    /// (one whose entries it takes to be consecutive pages), which
    /// dropping translations of pages does not remove; it is harmless
    /// while the entries only gain access (as before this change), not
    /// once an entry shows another page or less. Once per 2 MiB region.
    Later,
}

impl Forget {
    /// Both forgotten.
    pub fn and(self, other: Forget) -> Forget {
        use Forget::*;
        match (self, other) {
            (All, _) | (_, All) | (Later, Pages(..)) | (Pages(..), Later) => All,
            (Later, _) | (_, Later) => Later,
            (Nothing, x) | (x, Nothing) => x,
            (Pages(a, b), Pages(c, d)) => Pages(a.min(c), b.max(d)),
        }
    }
}

/// The smallest range `[lo, hi)` of guest-physical pages holding every
/// page added, and whether a 2 MiB page was split.
#[derive(Default)]
struct Span(Option<(u64, u64)>, bool);

impl Span {
    fn add(&mut self, page: u64) {
        let (lo, hi) = self.0.unwrap_or((page, page + PAGE_SIZE));
        self.0 = Some((lo.min(page), hi.max(page + PAGE_SIZE)));
    }

    fn forget(&self, (lo, hi): (u64, u64)) -> Forget {
        if self.1 {
            Forget::All
        } else {
            Forget::Pages(lo, hi)
        }
    }

    fn forget_nothing(&self) -> Forget {
        if self.1 {
            Forget::Later
        } else {
            Forget::Nothing
        }
    }
}

/// Whether leaf entry `entry` becoming `bits` takes access away (present
/// to not present, or writable to read-only): a translation of the old
/// entry, in the TLB or in KVM's shadow of the tables, would then allow
/// more than the tables do. Access only added needs no flush (see
/// `shoal_abi::PROTECT_FLUSH`).
fn takes_away(entry: u64, bits: u64) -> bool {
    let present = |e: u64| e & x86::PTE_P != 0;
    let writable = |e: u64| present(e) && e & x86::PTE_RW != 0;
    let executable = |e: u64| present(e) && e & x86::PTE_NX == 0;
    (present(entry) && !present(bits)) || (writable(entry) && !writable(bits)) || (executable(entry) && !executable(bits))
}

/// The leaf bits for `PROT_*` bits `prot` (0: not present). `PROT_EXEC`
/// clears NX (a Linux executable's libraries and JIT code; the page is
/// readable, as x86 makes every executable page); every other page keeps
/// NX.
fn bits_of(prot: u64) -> u64 {
    let bits = x86::leaf_bits(if prot & PROT_WRITE != 0 {
        x86::PagePerm::UserRw
    } else if prot & (PROT_READ | PROT_EXEC) != 0 {
        x86::PagePerm::UserRo
    } else {
        x86::PagePerm::None
    });
    if prot & PROT_EXEC != 0 {
        bits & !x86::PTE_NX
    } else {
        bits
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pool_has_one_table_per_2_mib() {
        assert_eq!(pool_size(64 << 20), 32 * PAGE_SIZE);
        assert_eq!(pool_size((64 << 20) + 4096), 33 * PAGE_SIZE);
        const { assert!(POOL_ADDR >= x86::MAX_MEM) };
    }

    #[test]
    fn release_drops_only_guest_free_memory_and_refuses_the_rest() {
        use vm_memory::{GuestAddress, MmapRegion};
        let mem = 4u64 << 20;
        let low = GuestRegionMmap::new(MmapRegion::<()>::new(mem as usize).unwrap(), GuestAddress(0)).unwrap();
        let pool = GuestRegionMmap::new(MmapRegion::<()>::new(pool_size(mem) as usize).unwrap(), GuestAddress(POOL_ADDR)).unwrap();
        let t = Tables { low: &low, pool: &pool, heap_start: 1 << 20, mem_size: mem, run_time_code: false };
        for page in [0u64, 1 << 20, 2 << 20, mem - PAGE_SIZE] {
            low.write_obj(0x5a5a_5a5a_u32, MemoryRegionAddress(page)).unwrap();
        }
        assert_eq!(t.release(2 << 20, 1 << 20), Ok(0));
        assert_eq!(low.read_obj::<u32>(MemoryRegionAddress(2 << 20)).unwrap(), 0, "released pages read as zero");
        assert_eq!(low.read_obj::<u32>(MemoryRegionAddress(1 << 20)).unwrap(), 0x5a5a_5a5a, "the rest is kept");
        let einval = Ok(-i64::from(libc::EINVAL));
        for (addr, len) in [
            (0, PAGE_SIZE),
            ((1 << 20) - PAGE_SIZE, 2 * PAGE_SIZE),
            (mem - PAGE_SIZE, 2 * PAGE_SIZE),
            (2 << 20, 0),
            ((2 << 20) + 1, PAGE_SIZE),
            (2 << 20, 100),
            (u64::MAX - 4095, PAGE_SIZE),
        ] {
            assert_eq!(t.release(addr, len), einval, "{addr:#x}+{len:#x}");
        }
        assert_eq!(low.read_obj::<u32>(MemoryRegionAddress(0)).unwrap(), 0x5a5a_5a5a, "below heap_start: untouched");
        assert_eq!(low.read_obj::<u32>(MemoryRegionAddress(mem - PAGE_SIZE)).unwrap(), 0x5a5a_5a5a);
    }

    /// Taking access away answers PROTECT_FLUSH (the guest flushes and
    /// KVM's shadow is dropped); adding access, or taking it from pages
    /// the guest says were never touched, answers 0.
    #[test]
    fn only_taking_access_away_asks_for_a_flush() {
        use vm_memory::{GuestAddress, MmapRegion};
        let mem = 4u64 << 20;
        let low = GuestRegionMmap::new(MmapRegion::<()>::new(mem as usize).unwrap(), GuestAddress(0)).unwrap();
        let pool = GuestRegionMmap::new(MmapRegion::<()>::new(pool_size(mem) as usize).unwrap(), GuestAddress(POOL_ADDR)).unwrap();
        // A page directory entry mapping [2 MiB, 4 MiB) as one read-write page.
        low.write_obj((2u64 << 20) | x86::PTE_PS | x86::leaf_bits(x86::PagePerm::UserRw), MemoryRegionAddress(x86::pd_entry_addr(1))).unwrap();
        let t = Tables { low: &low, pool: &pool, heap_start: 2 << 20, mem_size: mem, run_time_code: true };
        let p = |prot: u64| ProtectArgs { addr: 2 << 20, len: 2 * PAGE_SIZE, prot, ret: 0 };
        assert_eq!(t.protect(&p(PROT_READ | PROT_WRITE)), Ok(0), "unchanged");
        assert_eq!(t.protect(&p(PROT_READ)), Ok(PROTECT_FLUSH), "read-write to read-only");
        assert_eq!(t.protect(&p(PROT_READ | PROT_WRITE)), Ok(0), "read-only to read-write");
        assert_eq!(t.protect(&p(0)), Ok(PROTECT_FLUSH), "to no access");
        assert_eq!(t.protect(&p(PROT_READ)), Ok(0), "no access to read-only");
        assert_eq!(t.protect(&p(PROTECT_UNTOUCHED)), Ok(0), "untouched pages need no flush");
        assert_eq!(t.protect(&p(PROT_READ | PROT_WRITE | PROTECT_UNTOUCHED)), Ok(0));
        assert_eq!(t.protect(&p(PROT_READ | 1 << 9)), Ok(-i64::from(libc::EINVAL)), "unknown bits");
        // An executable's libraries and run-time code: execute with read,
        // and with write where a JIT asks for it.
        assert_eq!(t.protect(&p(PROT_READ | PROT_EXEC)), Ok(PROTECT_FLUSH), "read-write to read-execute");
        assert_eq!(t.protect(&p(PROT_READ)), Ok(PROTECT_FLUSH), "read-execute to read-only");
        assert_eq!(t.protect(&p(PROT_READ | PROT_WRITE | PROT_EXEC)), Ok(0), "read-only to read-write-execute adds access");
        assert_eq!(t.protect(&p(PROT_READ | PROT_WRITE)), Ok(PROTECT_FLUSH), "taking execute away");
        let image = Tables { run_time_code: false, ..t };
        assert_eq!(image.protect(&p(PROT_READ | PROT_EXEC)), Ok(-i64::from(libc::EINVAL)), "a shoal image's memory never executes");
    }

    /// What KVM is made to forget: the pages that lost access (or that an
    /// alias stopped showing), unless a 2 MiB page was split since the
    /// last time, then everything.
    #[test]
    fn kvm_forgets_only_the_pages_that_lost_access() {
        use vm_memory::{GuestAddress, MmapRegion};
        let mem = 6u64 << 20;
        let low = GuestRegionMmap::new(MmapRegion::<()>::new(mem as usize).unwrap(), GuestAddress(0)).unwrap();
        let pool = GuestRegionMmap::new(MmapRegion::<()>::new(pool_size(mem) as usize).unwrap(), GuestAddress(POOL_ADDR)).unwrap();
        for r in [1u64, 2] {
            low.write_obj((r << 21) | x86::PTE_PS | x86::leaf_bits(x86::PagePerm::UserRw), MemoryRegionAddress(x86::pd_entry_addr(r))).unwrap();
        }
        let t = Tables { low: &low, pool: &pool, heap_start: 2 << 20, mem_size: mem, run_time_code: true };
        let p = |addr: u64, prot: u64| ProtectArgs { addr, len: 2 * PAGE_SIZE, prot, ret: 0 };
        let at = (2 << 20) + 5 * PAGE_SIZE;
        assert_eq!(t.protect_pages(&p(at, PROT_READ | PROT_WRITE)), Ok((0, Forget::Later)), "a split that takes nothing away");
        assert_eq!(t.protect_pages(&p(at, PROT_READ)), Ok((PROTECT_FLUSH, Forget::Pages(at, at + 2 * PAGE_SIZE))));
        assert_eq!(t.protect_pages(&p(at, PROT_READ | PROT_WRITE)), Ok((0, Forget::Nothing)));
        let other = 4 << 20;
        assert_eq!(t.protect_pages(&p(other, 0)), Ok((PROTECT_FLUSH, Forget::All)), "a split and a loss at once");
        assert_eq!(Forget::Later.and(Forget::Pages(0, 4096)), Forget::All);
        assert_eq!(Forget::Pages(8192, 12288).and(Forget::Pages(0, 4096)), Forget::Pages(0, 12288));
        assert_eq!(Forget::Nothing.and(Forget::Later), Forget::Later);
        // An alias forgets the page the entry showed before.
        let a = AliasArgs { dst: at, src: other, len: PAGE_SIZE, prot: PROT_READ, ret: 0 };
        assert_eq!(t.alias_pages(&a), Ok((PROTECT_FLUSH, Forget::Pages(at, at + PAGE_SIZE))));
        let back = AliasArgs { dst: at, src: at, len: PAGE_SIZE, prot: PROT_READ, ret: 0 };
        assert_eq!(t.alias_pages(&back), Ok((PROTECT_FLUSH, Forget::Pages(other, other + PAGE_SIZE))));
    }
}
