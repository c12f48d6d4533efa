//! The x86-64 machine state the VMM prepares in tender-private low memory
//! `[0, TENDER_PRIVATE_END)`: identity page tables, GDT, IDT, TSS with an I/O
//! permission bitmap, the CPL-0 exception stub and its stack.
//!
//! Everything here is pure: [`build`] fills a byte buffer that the VMM then
//! copies to guest address 0, so it can be unit-tested without KVM.
//!
//! # Tender-private memory
//!
//! | guest address | what | page permissions |
//! |---|---|---|
//! | `0x0000` | nothing (null guard) | not present |
//! | `0x1000` | GDT, TSS (+ I/O bitmap), IDT | supervisor, RW, NX |
//! | `0x2000` | exception entry stubs and their common tail | supervisor, read-only, executable |
//! | `0x3000` | CPL-0 stack (TSS.RSP0 = `0x4000`); the fault report is built at its top | supervisor, RW, NX |
//! | `0x4000` | PML4, then PDPT, then page directories and page tables | supervisor, RW, NX |
//!
//! The guest runs at CPL 3 and cannot read or write any of it (U/S = 0).
//!
//! # Guest page permissions
//!
//! Guest memory `[TENDER_PRIVATE_END, mem_size)` is identity mapped with U/S =
//! 1: executable image segments read-only and executable, read-only segments
//! read-only and NX, everything else (boot info, arguments, writable
//! segments, archive, heap, stack) read-write and NX. Pages between image
//! segments and everything at or above `mem_size` are not present. 2 MiB
//! pages are used wherever a 2 MiB region has one permission throughout;
//! regions that mix permissions get a 4 KiB page table. CR0.WP is set, so
//! even the CPL-0 stub cannot write read-only pages.

use shoal_abi::{Hypercall, HYPERCALL_MAX, HYPERCALL_PORT_BASE, PAGE_SIZE, TENDER_PRIVATE_END};

/// Guest address of the GDT.
pub const GDT_ADDR: u64 = 0x1000;
/// Guest address of the TSS (within the GDT's page).
pub const TSS_ADDR: u64 = 0x1080;
/// Guest address of the IDT (within the GDT's page).
pub const IDT_ADDR: u64 = 0x1200;
/// Guest address of the exception stubs.
pub const STUB_ADDR: u64 = 0x2000;
/// Lowest address of the CPL-0 stack.
pub const STACK0_BASE: u64 = 0x3000;
/// TSS.RSP0: the top of the CPL-0 stack.
pub const STACK0_TOP: u64 = 0x4000;
/// Guest address of the PML4 (CR3).
pub const PML4_ADDR: u64 = 0x4000;
/// Guest address of the page-directory-pointer table.
pub const PDPT_ADDR: u64 = 0x5000;
/// First page available for page directories and page tables.
const TABLES_START: u64 = 0x6000;

/// Where the CPL-0 stub builds its [`shoal_abi::FaultArgs`] report: the
/// exception frame the CPU pushes on the RSP0 stack (ss, rsp, rflags, cs,
/// rip, error code) plus the vector the stub pushes, seven quadwords below
/// [`STACK0_TOP`]. The stub rewrites the `cs` and `rflags` slots with rsp
/// and cr2 so that the five lowest quadwords read as a `FaultArgs`.
pub const FAULT_REPORT_ADDR: u64 = STACK0_TOP - 7 * 8;

/// Where the stub saves, before it uses them, the interrupted rflags, rdx
/// and rax (lowest first): just below the report.
pub const FAULT_SAVED_ADDR: u64 = FAULT_REPORT_ADDR - 3 * 8;

/// Where `syscall` lands if a CPU ignores EFER.SCE (this nested KVM does):
/// MSR LSTAR points here, in the not-present null page, so a `syscall`
/// becomes a page fault with rip = cr2 = this address and rcx = the address
/// after the `syscall` instruction, which the VMM recognises.
pub const SYSCALL_TRAP: u64 = 0xff0;

/// Kernel code selector (GDT entry 1).
pub const KERNEL_CS: u16 = 0x08;
/// Kernel data selector (GDT entry 2).
pub const KERNEL_DS: u16 = 0x10;
/// User data selector with RPL 3 (GDT entry 3).
pub const USER_DS: u16 = 0x18 | 3;
/// User code selector with RPL 3 (GDT entry 4).
pub const USER_CS: u16 = 0x20 | 3;
/// TSS selector (GDT entries 5 and 6).
pub const TSS_SEL: u16 = 0x28;
/// Number of GDT entries (the TSS takes two).
const GDT_ENTRIES: u64 = 7;
/// GDT limit (size - 1).
pub const GDT_LIMIT: u16 = (GDT_ENTRIES * 8 - 1) as u16;

/// Number of exception vectors with an IDT gate.
pub const VECTORS: u64 = 32;
/// IDT limit (size - 1).
pub const IDT_LIMIT: u16 = (VECTORS * 16 - 1) as u16;
/// Offset, within the stub page, of the #BP entry that flushes the TLB
/// when `rax` holds `shoal_abi::HVT_TLB_FLUSH_MAGIC`.
const FLUSH_CODE: u64 = 0x800;
/// Size of one per-vector entry stub.
const STUB_SLOT: u64 = 16;
/// Offset of the common tail within the stub page.
const STUB_COMMON: u64 = VECTORS * STUB_SLOT;

/// Size of the hardware part of a 64-bit TSS; the I/O bitmap follows it.
const TSS_HW_SIZE: u64 = 104;
/// Bytes of I/O permission bitmap: enough to cover the highest hypercall
/// port and the three after it (a 32-bit `out` checks the bits of all four
/// ports it touches), plus the all-ones byte the CPU requires after the
/// bitmap.
const IOPB_BYTES: u64 = (HYPERCALL_PORT_BASE as u64 + HYPERCALL_MAX + 3) / 8 + 2;
/// TSS limit (size - 1), including the I/O bitmap.
pub const TSS_LIMIT: u32 = (TSS_HW_SIZE + IOPB_BYTES - 1) as u32;

/// CR0: PE, MP, ET, NE, WP, PG.
pub const CR0: u64 = 1 | (1 << 1) | (1 << 4) | (1 << 5) | (1 << 16) | (1 << 31);
/// CR4: PAE, OSFXSR, OSXMMEXCPT, FSGSBASE, OSXSAVE.
pub const CR4: u64 = (1 << 5) | (1 << 9) | (1 << 10) | (1 << 16) | (1 << 18);
/// EFER: LME, LMA, NXE. SCE stays clear, so `syscall` raises #UD.
pub const EFER: u64 = (1 << 8) | (1 << 10) | (1 << 11);
/// RFLAGS at entry: the reserved bit 1 and IOPL 3; interrupts off.
pub const RFLAGS: u64 = 0x2 | (3 << 12);

/// Page-table entry bits the VMM's `Protect` handler uses.
pub(crate) const PTE_P: u64 = 1;
pub(crate) const PTE_RW: u64 = 1 << 1;
const PTE_US: u64 = 1 << 2;
const PTE_A: u64 = 1 << 5;
const PTE_D: u64 = 1 << 6;
pub(crate) const PTE_PS: u64 = 1 << 7;
/// The physical-address bits of a page-table entry.
pub(crate) const ADDR_MASK: u64 = 0x000f_ffff_ffff_f000;
/// Bits of a page-directory entry pointing to a page table.
pub(crate) const DIR_BITS: u64 = PTE_P | PTE_RW | PTE_US | PTE_A;

/// The bits of a 4 KiB page-table entry with permission `p` (0: not present).
pub(crate) fn leaf_bits(p: PagePerm) -> u64 {
    p.entry_bits()
}

/// Guest-physical address of the page-directory entry of 2 MiB region
/// `region` (the page directories follow each other from TABLES_START, as
/// [`build`] lays them out).
pub(crate) fn pd_entry_addr(region: u64) -> u64 {
    TABLES_START + (region / 512) * PAGE_SIZE + (region % 512) * 8
}
pub(crate) const PTE_NX: u64 = 1 << 63;

const MIB2: u64 = 2 << 20;
const GIB: u64 = 1 << 30;

/// Largest guest memory hvt supports: hypercalls pass 32-bit addresses.
pub const MAX_MEM: u64 = 4 * GIB;

/// Why the tender-private structures could not be built.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum SetupError {
    /// Guest memory larger than 4 GiB or not page aligned.
    #[error("guest memory of {0:#x} bytes cannot be mapped by hvt (it must be a multiple of 4 KiB and at most 4 GiB)")]
    MemSize(u64),
    /// Too many 2 MiB regions mix page permissions for the page tables to
    /// fit in tender-private memory.
    #[error("the image needs {needed} page tables but tender-private memory holds only {room}; align its segments to 2 MiB or merge them")]
    TooManyTables {
        /// Page-table pages needed.
        needed: u64,
        /// Pages available.
        room: u64,
    },
}

/// The permissions of one guest page, as the page tables express them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PagePerm {
    /// Not mapped.
    None,
    /// CPL 3 may read and execute.
    UserRx,
    /// CPL 3 may read.
    UserRo,
    /// CPL 3 may read and write.
    UserRw,
    /// CPL 0 only: read and execute.
    KernelRx,
    /// CPL 0 only: read and write.
    KernelRw,
}

impl PagePerm {
    fn entry_bits(self) -> u64 {
        match self {
            PagePerm::None => 0,
            PagePerm::UserRx => PTE_P | PTE_US | PTE_A,
            PagePerm::UserRo => PTE_P | PTE_US | PTE_A | PTE_NX,
            PagePerm::UserRw => PTE_P | PTE_RW | PTE_US | PTE_A | PTE_D | PTE_NX,
            PagePerm::KernelRx => PTE_P | PTE_A,
            PagePerm::KernelRw => PTE_P | PTE_RW | PTE_A | PTE_D | PTE_NX,
        }
    }
}

/// A page-aligned range of the image with one permission.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    /// First byte (page aligned).
    pub start: u64,
    /// End (page aligned, exclusive).
    pub end: u64,
    /// Its permission.
    pub perm: PagePerm,
}

/// The permission of guest page `addr` given the image regions (sorted,
/// non-overlapping, within `[image_start, image_end)`).
fn perm_at(addr: u64, mem_size: u64, image: &[Region], image_start: u64, image_end: u64) -> PagePerm {
    if addr >= mem_size {
        return PagePerm::None;
    }
    match addr {
        0..GDT_ADDR => PagePerm::None,
        GDT_ADDR..STUB_ADDR => PagePerm::KernelRw,
        STUB_ADDR..STACK0_BASE => PagePerm::KernelRx,
        STACK0_BASE..TENDER_PRIVATE_END => PagePerm::KernelRw,
        _ if addr >= image_start && addr < image_end => image.iter().find(|r| addr >= r.start && addr < r.end).map_or(PagePerm::None, |r| r.perm),
        _ => PagePerm::UserRw,
    }
}

/// The permission map the page tables were built from.
#[derive(Clone, Debug)]
pub struct PermMap {
    mem_size: u64,
    image: Vec<Region>,
    image_start: u64,
    image_end: u64,
}

impl PermMap {
    /// The permission of the page holding `addr`.
    pub fn perm(&self, addr: u64) -> PagePerm {
        perm_at(addr & !(PAGE_SIZE - 1), self.mem_size, &self.image, self.image_start, self.image_end)
    }
}

/// The result of [`build`]: the bytes of `[0, TENDER_PRIVATE_END)` and what
/// the page tables cost.
pub struct Private {
    /// What the page tables say about each page.
    pub map: PermMap,
    /// The bytes to copy to guest address 0.
    pub bytes: Vec<u8>,
    /// Number of page-table pages used (PML4, PDPT, PDs, PTs).
    pub table_pages: u64,
    /// Number of 2 MiB regions mapped with a 4 KiB page table.
    pub split_regions: u64,
}

fn put(bytes: &mut [u8], addr: u64, v: &[u8]) {
    let a = addr as usize;
    bytes[a..a + v.len()].copy_from_slice(v);
}

fn put_u64(bytes: &mut [u8], addr: u64, v: u64) {
    put(bytes, addr, &v.to_le_bytes());
}

/// Builds the tender-private memory for guest memory of `mem_size` bytes and
/// an image made of `image` regions spanning `[image_start, image_end)`.
pub fn build(mem_size: u64, image: &[Region], image_start: u64, image_end: u64) -> Result<Private, SetupError> {
    if mem_size == 0 || mem_size > MAX_MEM || !mem_size.is_multiple_of(PAGE_SIZE) || mem_size < TENDER_PRIVATE_END {
        return Err(SetupError::MemSize(mem_size));
    }
    let mut b = vec![0u8; TENDER_PRIVATE_END as usize];
    let perm = |a: u64| perm_at(a, mem_size, image, image_start, image_end);

    // --- Page tables -----------------------------------------------------
    // Which 2 MiB regions need a 4 KiB table: those where a permission
    // boundary falls strictly inside. Boundaries: the tender-private pages,
    // the image regions and their gaps, and the end of memory.
    let regions = mem_size.div_ceil(MIB2);
    let mut boundaries: Vec<u64> = vec![GDT_ADDR, STUB_ADDR, STACK0_BASE, TENDER_PRIVATE_END, image_start, image_end, mem_size];
    for r in image {
        boundaries.push(r.start);
        boundaries.push(r.end);
    }
    let mut split: Vec<u64> = boundaries.iter().filter(|&&a| !a.is_multiple_of(MIB2) && a < mem_size.next_multiple_of(MIB2)).map(|&a| a / MIB2).collect();
    split.sort_unstable();
    split.dedup();
    let pds = mem_size.div_ceil(GIB);
    let room = (TENDER_PRIVATE_END - TABLES_START) / PAGE_SIZE;
    let needed = pds + split.len() as u64;
    if needed > room {
        return Err(SetupError::TooManyTables { needed: needed + 2, room: room + 2 });
    }
    let table = |i: u64| TABLES_START + i * PAGE_SIZE;
    let dir_bits = DIR_BITS;
    put_u64(&mut b, PML4_ADDR, PDPT_ADDR | dir_bits);
    for g in 0..pds {
        put_u64(&mut b, PDPT_ADDR + g * 8, table(g) | dir_bits);
    }
    let mut next_pt = pds;
    for r in 0..regions {
        let base = r * MIB2;
        let pde = table(r / 512) + (r % 512) * 8;
        if split.binary_search(&r).is_ok() {
            let pt = table(next_pt);
            next_pt += 1;
            put_u64(&mut b, pde, pt | dir_bits);
            for i in 0..512 {
                let a = base + i * PAGE_SIZE;
                let p = perm(a);
                if p != PagePerm::None {
                    put_u64(&mut b, pt + i * 8, a | p.entry_bits());
                }
            }
        } else {
            let p = perm(base);
            if p != PagePerm::None {
                put_u64(&mut b, pde, base | p.entry_bits() | PTE_PS);
            }
        }
    }

    // --- GDT ---------------------------------------------------------------
    let gdt: [u64; 5] = [
        0,
        0x00af_9a00_0000_ffff, // kernel code: 64-bit, DPL 0, execute/read
        0x00cf_9200_0000_ffff, // kernel data: DPL 0, read/write
        0x00cf_f200_0000_ffff, // user data: DPL 3, read/write
        0x00af_fa00_0000_ffff, // user code: 64-bit, DPL 3, execute/read
    ];
    for (i, d) in gdt.iter().enumerate() {
        put_u64(&mut b, GDT_ADDR + i as u64 * 8, *d);
    }
    // The TSS descriptor (16 bytes): base TSS_ADDR, limit TSS_LIMIT, type 0xb
    // (busy 64-bit TSS, as KVM and VMX expect TR to be), present, DPL 0.
    let tss_lo = (u64::from(TSS_LIMIT) & 0xffff)
        | ((TSS_ADDR & 0xff_ffff) << 16)
        | (0x8b << 40)
        | ((u64::from(TSS_LIMIT) >> 16 & 0xf) << 48)
        | ((TSS_ADDR >> 24 & 0xff) << 56);
    put_u64(&mut b, GDT_ADDR + 5 * 8, tss_lo);
    put_u64(&mut b, GDT_ADDR + 6 * 8, TSS_ADDR >> 32);

    // --- TSS ---------------------------------------------------------------
    put_u64(&mut b, TSS_ADDR + 4, STACK0_TOP); // RSP0
    put(&mut b, TSS_ADDR + 102, &(TSS_HW_SIZE as u16).to_le_bytes()); // I/O map base
    let iopb = TSS_ADDR + TSS_HW_SIZE;
    for i in 0..IOPB_BYTES {
        b[(iopb + i) as usize] = 0xff; // every port denied ...
    }
    for port in allowed_ports() {
        // ... except the hypercall ports.
        b[(iopb + port / 8) as usize] &= !(1u8 << (port % 8));
    }

    // --- Exception stubs ---------------------------------------------------
    // Entry for vector v (16-byte slot at STUB_ADDR + 16 v):
    //   6a 00         push 0          (only for vectors without an error code)
    //   6a vv         push v
    //   e9 rel32      jmp common
    for v in 0..VECTORS {
        let slot = STUB_ADDR + v * STUB_SLOT;
        let mut code = Vec::with_capacity(STUB_SLOT as usize);
        if !has_error_code(v) {
            code.extend_from_slice(&[0x6a, 0x00]);
        }
        code.extend_from_slice(&[0x6a, v as u8]);
        let after_jmp = slot + code.len() as u64 + 5;
        let rel = (STUB_ADDR + STUB_COMMON) as i64 - after_jmp as i64;
        code.push(0xe9);
        code.extend_from_slice(&(rel as i32).to_le_bytes());
        put(&mut b, slot, &code);
    }
    // The common tail. On entry the RSP0 stack holds, from rsp upwards:
    // vector, error code, rip, cs, rflags, rsp, ss. It turns the first five
    // into a FaultArgs {vector, error_code, rip, rsp, cr2} and reports it.
    // (Hand-assembled; checked with `as` + `objdump -d -M intel`.)
    let common: [u8; 49] = [
        0x48, 0x89, 0x44, 0x24, 0xf8, // mov [rsp-8], rax      ; saved rax
        0x48, 0x89, 0x54, 0x24, 0xf0, // mov [rsp-16], rdx     ; saved rdx
        0x48, 0x8b, 0x44, 0x24, 0x20, // mov rax, [rsp+0x20]   ; rflags
        0x48, 0x89, 0x44, 0x24, 0xe8, // mov [rsp-24], rax     ; saved rflags
        0x48, 0x8b, 0x44, 0x24, 0x28, // mov rax, [rsp+0x28]   ; interrupted rsp
        0x48, 0x89, 0x44, 0x24, 0x18, // mov [rsp+0x18], rax   ; over the cs slot
        0x0f, 0x20, 0xd0, //             mov rax, cr2
        0x48, 0x89, 0x44, 0x24, 0x20, // mov [rsp+0x20], rax   ; over the rflags slot
        0x89, 0xe0, //                   mov eax, esp          ; report address (< 4 GiB)
        0x66, 0xba, 0x04, 0x05, //       mov dx, 0x504         ; Fault hypercall port
        0xef, //                         out dx, eax
        0xf4, //                         1: hlt                ; never resumed
        0xeb, 0xfd, //                   jmp 1b
        0x90, //                         nop (padding)
    ];
    debug_assert_eq!(u16::from_le_bytes([common[42], common[43]]), HYPERCALL_PORT_BASE + Hypercall::Fault as u16);
    put(&mut b, STUB_ADDR + STUB_COMMON, &common);

    // --- IDT ---------------------------------------------------------------
    for v in 0..VECTORS {
        let target = if v == 3 { STUB_ADDR + FLUSH_CODE } else { STUB_ADDR + v * STUB_SLOT };
        // Interrupt gate, present; DPL 3 for int3/into so that those
        // instructions report #BP/#OF rather than #GP, DPL 0 otherwise.
        let dpl: u64 = if v == 3 || v == 4 { 3 } else { 0 };
        let lo = (target & 0xffff) | (u64::from(KERNEL_CS) << 16) | ((0x8e | dpl << 5) << 40) | ((target >> 16 & 0xffff) << 48);
        put_u64(&mut b, IDT_ADDR + v * 16, lo);
        put_u64(&mut b, IDT_ADDR + v * 16 + 8, target >> 32);
    }

    // The TLB flush: the guest at CPL 3 cannot invlpg or write CR3, and
    // after the VMM changed its page tables (`Protect`) it must not use
    // stale translations. #BP (int3, DPL 3) enters here: with the magic in
    // rax it reloads CR3 (which flushes every non-global translation; no
    // page is global) and returns with every register as it was; otherwise
    // it goes on to the ordinary #BP stub, which reports the breakpoint.
    let mut flush: Vec<u8> = vec![0x53]; //       push rbx
    flush.extend_from_slice(&[0x48, 0xbb]); //      movabs rbx, MAGIC
    flush.extend_from_slice(&shoal_abi::HVT_TLB_FLUSH_MAGIC.to_le_bytes());
    flush.extend_from_slice(&[0x48, 0x39, 0xd8]); // cmp rax, rbx
    flush.push(0x5b); //                             pop rbx (flags kept)
    flush.extend_from_slice(&[0x0f, 0x85]); //      jne rel32 -> the #BP stub
    let after_jne = STUB_ADDR + FLUSH_CODE + flush.len() as u64 + 4;
    flush.extend_from_slice(&(((STUB_ADDR + 3 * STUB_SLOT) as i64 - after_jne as i64) as i32).to_le_bytes());
    flush.extend_from_slice(&[
        0x50, //             push rax
        0x0f, 0x20, 0xd8, // mov rax, cr3
        0x0f, 0x22, 0xd8, // mov cr3, rax
        0x58, //             pop rax
        0x48, 0xcf, //       iretq
    ]);
    put(&mut b, STUB_ADDR + FLUSH_CODE, &flush);

    let map = PermMap { mem_size, image: image.to_vec(), image_start, image_end };
    Ok(Private { map, bytes: b, table_pages: 2 + next_pt, split_regions: split.len() as u64 })
}

/// The ports the I/O permission bitmap allows: each hypercall port and the
/// three above it, because a 32-bit `out dx, eax` to port P is allowed only
/// if the bits of P..P+3 are all clear. (The VMM refuses writes to the
/// in-between ports that are not hypercalls.)
pub fn allowed_ports() -> impl Iterator<Item = u64> {
    let base = u64::from(HYPERCALL_PORT_BASE);
    (base..base + HYPERCALL_MAX + 3).filter(move |&p| (0..4).any(|k| p >= base + k && Hypercall::from_nr(p - base - k).is_some()))
}

/// Whether the CPU pushes an error code for exception `vector`.
pub fn has_error_code(vector: u64) -> bool {
    matches!(vector, 8 | 10..=14 | 17 | 21 | 29 | 30)
}

/// The name of exception `vector`.
pub fn vector_name(vector: u64) -> &'static str {
    match vector {
        0 => "divide error",
        1 => "debug exception",
        2 => "non-maskable interrupt",
        3 => "breakpoint",
        4 => "overflow",
        5 => "bound range exceeded",
        6 => "invalid opcode",
        7 => "device not available",
        8 => "double fault",
        9 => "coprocessor segment overrun",
        10 => "invalid TSS",
        11 => "segment not present",
        12 => "stack-segment fault",
        13 => "general protection fault",
        14 => "page fault",
        16 => "x87 floating-point error",
        17 => "alignment check",
        18 => "machine check",
        19 => "SIMD floating-point error",
        20 => "virtualization exception",
        21 => "control protection fault",
        _ => "reserved exception",
    }
}

/// The signal Linux would send a process for exception `vector`; hvt exits
/// with 128 + that signal, as spt does for an instance killed by a signal.
pub fn vector_signal(vector: u64) -> i32 {
    match vector {
        0 | 7 | 9 | 16 | 19 => libc::SIGFPE,
        1 | 3 => libc::SIGTRAP,
        6 => libc::SIGILL,
        11 | 12 | 17 | 18 => libc::SIGBUS,
        _ => libc::SIGSEGV,
    }
}

/// What a page fault at `cr2` with error code `error` was, in a few words,
/// given the permission the page tables give that page.
pub fn page_fault_cause(error: u64, perm: PagePerm) -> &'static str {
    let write = error & 2 != 0;
    let fetch = error & 16 != 0;
    match perm {
        PagePerm::None if write => "write to an unmapped address",
        PagePerm::None if fetch => "instruction fetch from an unmapped address",
        PagePerm::None => "read of an unmapped address",
        PagePerm::KernelRx | PagePerm::KernelRw => "access to tender-private memory",
        PagePerm::UserRx if write => "write to the image's code, which is read-only",
        PagePerm::UserRo if write => "write to read-only data",
        _ if fetch => "instruction fetch from a non-executable page",
        _ => "access not allowed by the page's permissions",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_u64(b: &[u8], a: u64) -> u64 {
        u64::from_le_bytes(b[a as usize..a as usize + 8].try_into().unwrap())
    }

    /// Walks the page tables in `b` for `addr`; returns the leaf entry.
    fn walk(b: &[u8], addr: u64) -> Option<u64> {
        let pml4e = read_u64(b, PML4_ADDR + (addr >> 39 & 511) * 8);
        if pml4e & PTE_P == 0 {
            return None;
        }
        let pdpte = read_u64(b, (pml4e & 0xf_ffff_f000) + (addr >> 30 & 511) * 8);
        if pdpte & PTE_P == 0 {
            return None;
        }
        let pde = read_u64(b, (pdpte & 0xf_ffff_f000) + (addr >> 21 & 511) * 8);
        if pde & PTE_P == 0 {
            return None;
        }
        if pde & PTE_PS != 0 {
            assert_eq!(pde & 0xf_ffe0_0000, addr & !(MIB2 - 1));
            return Some(pde);
        }
        let pte = read_u64(b, (pde & 0xf_ffff_f000) + (addr >> 12 & 511) * 8);
        if pte & PTE_P == 0 {
            return None;
        }
        assert_eq!(pte & 0xf_ffff_f000, addr & !0xfff);
        Some(pte)
    }

    #[test]
    fn page_tables_follow_the_image() {
        let image = [
            Region { start: 0x100000, end: 0x105000, perm: PagePerm::UserRx },
            Region { start: 0x106000, end: 0x108000, perm: PagePerm::UserRo },
            Region { start: 0x108000, end: 0x30a000, perm: PagePerm::UserRw },
        ];
        let mem = 64 << 20;
        let p = build(mem, &image, 0x100000, 0x30a000).unwrap();
        let b = &p.bytes;
        assert_eq!(walk(b, 0), None);
        assert_eq!(walk(b, 0x1000).unwrap() & (PTE_US | PTE_RW | PTE_NX), PTE_RW | PTE_NX);
        assert_eq!(walk(b, 0x2000).unwrap() & (PTE_US | PTE_RW | PTE_NX), 0);
        assert_eq!(walk(b, 0x4000).unwrap() & PTE_US, 0);
        assert_eq!(walk(b, 0x10000).unwrap() & (PTE_US | PTE_RW | PTE_NX), PTE_US | PTE_RW | PTE_NX);
        assert_eq!(walk(b, 0x104fff & !0xfff).unwrap() & (PTE_US | PTE_RW | PTE_NX), PTE_US);
        assert_eq!(walk(b, 0x105000), None, "gap between segments");
        assert_eq!(walk(b, 0x107000).unwrap() & (PTE_RW | PTE_NX), PTE_NX);
        assert_eq!(walk(b, 0x200000).unwrap() & (PTE_RW | PTE_NX), PTE_RW | PTE_NX);
        assert_eq!(walk(b, 0x309000).unwrap() & (PTE_RW | PTE_NX | PTE_PS), PTE_RW | PTE_NX);
        assert_eq!(walk(b, 0x30a000).unwrap() & (PTE_RW | PTE_NX | PTE_US), PTE_RW | PTE_NX | PTE_US);
        assert_eq!(walk(b, 0x3e00000).unwrap() & PTE_PS, PTE_PS);
        assert_eq!(walk(b, mem - 0x1000).unwrap() & PTE_RW, PTE_RW);
        assert_eq!(walk(b, mem), None);
        assert_eq!(p.split_regions, 2);
    }

    #[test]
    fn odd_memory_end_and_limits() {
        let image = [Region { start: 0x100000, end: 0x101000, perm: PagePerm::UserRx }];
        let mem = (4 << 20) + 0x3000;
        let p = build(mem, &image, 0x100000, 0x101000).unwrap();
        assert!(walk(&p.bytes, mem - 0x1000).is_some());
        assert_eq!(walk(&p.bytes, mem), None);
        let p = build(MAX_MEM, &image, 0x100000, 0x101000).unwrap();
        assert!(walk(&p.bytes, MAX_MEM - 0x1000).is_some());
        assert_eq!(build(MAX_MEM + 0x1000, &image, 0x100000, 0x101000).err(), Some(SetupError::MemSize(MAX_MEM + 0x1000)));
        let many: Vec<Region> = (0..12).map(|i| Region { start: 0x100000 + i * MIB2, end: 0x101000 + i * MIB2, perm: PagePerm::UserRo }).collect();
        assert!(matches!(build(64 << 20, &many, 0x100000, many[11].end), Err(SetupError::TooManyTables { .. })));
    }

    #[test]
    fn io_bitmap_allows_exactly_the_hypercall_ports() {
        let p = build(16 << 20, &[], 0x100000, 0x100000).unwrap();
        let iopb = (TSS_ADDR + TSS_HW_SIZE) as usize;
        let allowed = |port: u64| {
            let i = iopb + (port / 8) as usize;
            (i as u64) < TSS_ADDR + u64::from(TSS_LIMIT) + 1 && p.bytes[i] & (1 << (port % 8)) == 0
        };
        let base = u64::from(HYPERCALL_PORT_BASE);
        for port in 0..0x10000u64 {
            // 32-bit writes to every hypercall port pass; nothing outside
            // [first hypercall port, last + 3] does.
            let first = base + 1;
            let last = base + HYPERCALL_MAX - 1 + 3;
            assert_eq!(allowed(port), (first..=last).contains(&port), "port {port:#x}");
        }
        for nr in 1..HYPERCALL_MAX {
            assert!(Hypercall::from_nr(nr).is_some());
            assert!((0..4).all(|k| allowed(base + nr + k)));
        }
        assert_eq!(p.bytes[iopb + IOPB_BYTES as usize - 1], 0xff);
    }
}
