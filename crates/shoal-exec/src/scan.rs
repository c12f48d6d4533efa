//! Reading an untrusted executable: header checks and the system-call
//! sites of its code.

use crate::{ExecError, LOWEST_ADDRESS, MAX_SPAN, PIE_BASE};
use object::elf;
use object::read::elf::{FileHeader, ProgramHeader, SectionHeader, Sym};
use object::LittleEndian as LE;
use std::path::{Path, PathBuf};

/// How the executable was linked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `ET_EXEC`: at its link address.
    Static,
    /// `ET_DYN` without an interpreter: relocates itself; loaded at
    /// [`PIE_BASE`].
    Pie,
    /// Dynamically linked (`PT_INTERP`): loaded like [`Kind::Static`]
    /// (`ET_EXEC`) or [`Kind::Pie`] (`ET_DYN`, at [`PIE_BASE`]); the
    /// kernel starts its interpreter from the instance's file system, and
    /// `ld.so` maps the libraries.
    Dynamic,
}

/// One loadable segment, at its load address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// Program header index.
    pub index: usize,
    /// Load address (the PIE base added).
    pub vaddr: u64,
    /// Bytes in memory.
    pub memsz: u64,
    /// Bytes from the file.
    pub filesz: u64,
    /// File offset.
    pub offset: u64,
    /// `PF_R`/`PF_W`/`PF_X`.
    pub flags: u32,
}

/// A `syscall` instruction in the executable's code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Site {
    /// Address of the `syscall` instruction (after the PIE base).
    pub addr: u64,
    /// How many bytes right before the `syscall` move into the site's
    /// trampoline (whole instructions, at least the 5 of a `jmp rel32`):
    /// 0 when the site is left to the trap path.
    pub moved: u8,
    /// The system-call number when a moved instruction sets it as a
    /// constant (`mov eax, imm32` or `mov rax, simm32`); `None` when it
    /// comes in a register (Go's `Syscall6`) or the site is not rewritten.
    pub nr: Option<u32>,
}

impl Site {
    /// Whether the site is rewritten (enters the kernel by a jump).
    pub fn rewritten(&self) -> bool {
        self.moved > 0
    }

    /// Whether it is rewritten the simplest way: the one instruction
    /// moved is `mov eax, imm32` (the only shape rewritten at first).
    pub fn is_pair(&self) -> bool {
        self.moved == 5 && self.nr.is_some()
    }
}

/// A checked executable.
#[derive(Clone, Debug)]
pub struct Executable {
    /// Its path.
    pub path: PathBuf,
    /// Static or PIE.
    pub kind: Kind,
    /// What is added to its addresses (0, or [`PIE_BASE`]).
    pub base: u64,
    /// Entry point (after the base).
    pub entry: u64,
    /// Where its program headers are in memory (`AT_PHDR`).
    pub phdr: u64,
    /// How many (`AT_PHNUM`).
    pub phnum: u64,
    /// Its loadable segments, by address.
    pub segments: Vec<Segment>,
    /// Its `syscall` instructions, by address.
    pub sites: Vec<Site>,
    /// The interpreter it asks for (`PT_INTERP`), if dynamically linked.
    pub interp: Option<String>,
}

impl Executable {
    /// End of the last segment in memory (exclusive, not rounded).
    pub fn end(&self) -> u64 {
        self.segments.iter().map(|s| s.vaddr + s.memsz).max().unwrap_or(0)
    }

    /// How many sites are rewritten.
    pub fn rewritten(&self) -> usize {
        self.sites.iter().filter(|s| s.rewritten()).count()
    }

    /// How many are rewritten as `mov eax, imm32; syscall` pairs.
    pub fn pairs(&self) -> usize {
        self.sites.iter().filter(|s| s.is_pair()).count()
    }
}

fn page_down(a: u64) -> u64 {
    a & !0xfff
}

fn page_up(a: u64) -> u64 {
    a.saturating_add(0xfff) & !0xfff
}

/// Checks the executable `bytes` (read from `path`) and finds its
/// system-call sites.
pub fn analyse(path: &Path, bytes: &[u8]) -> Result<Executable, ExecError> {
    let p = || path.to_path_buf();
    let corrupt = |what: &str| ExecError::Corrupt { path: p(), what: what.to_string() };
    if bytes.len() < 4 || &bytes[..4] != b"\x7fELF" {
        return Err(ExecError::NotElf { path: p() });
    }
    match bytes.get(4) {
        Some(&elf::ELFCLASS64) => {}
        Some(&elf::ELFCLASS32) => return Err(ExecError::WrongArch { path: p(), found: "a 32-bit ELF file".into() }),
        _ => return Err(ExecError::WrongArch { path: p(), found: "an ELF file of unknown class".into() }),
    }
    if bytes.get(5) != Some(&elf::ELFDATA2LSB) {
        return Err(ExecError::WrongArch { path: p(), found: "a big-endian ELF file".into() });
    }
    let h = elf::FileHeader64::<LE>::parse(bytes).map_err(|_| corrupt("the ELF header is cut short"))?;
    let e = LE;
    if h.e_machine(e) != elf::EM_X86_64 {
        return Err(ExecError::WrongArch { path: p(), found: format!("an ELF file for machine {}", h.e_machine(e)) });
    }
    let phdrs = h.program_headers(e, bytes).map_err(|_| corrupt("the program headers lie outside the file"))?;
    // A dynamically linked executable: the kernel reads the interpreter's
    // name from the loaded PT_INTERP, so it must be an absolute path,
    // NUL-terminated, inside a loaded segment (checked below).
    let interp = match phdrs.iter().find(|ph| ph.p_type(e) == elf::PT_INTERP) {
        None => None,
        Some(ph) => {
            let d = ph.data(e, bytes).map_err(|_| corrupt("its interpreter name (PT_INTERP) lies outside the file"))?;
            let name = d.split(|&b| b == 0).next().unwrap_or(&[]);
            if d.len() > 4096 || !d.ends_with(&[0]) || name.len() + 1 != d.len() || !name.starts_with(b"/") {
                return Err(corrupt("its interpreter name (PT_INTERP) is not an absolute, NUL-terminated path"));
            }
            Some((String::from_utf8_lossy(name).into_owned(), ph.p_vaddr(e), ph.p_filesz(e)))
        }
    };
    let (kind, base) = match h.e_type(e) {
        elf::ET_EXEC if interp.is_some() => (Kind::Dynamic, 0),
        elf::ET_DYN if interp.is_some() => (Kind::Dynamic, PIE_BASE),
        elf::ET_EXEC => (Kind::Static, 0),
        elf::ET_DYN => (Kind::Pie, PIE_BASE),
        elf::ET_REL => return Err(ExecError::NotExecutable { path: p(), found: "a relocatable object (ET_REL)" }),
        elf::ET_CORE => return Err(ExecError::NotExecutable { path: p(), found: "a core dump" }),
        _ => return Err(ExecError::NotExecutable { path: p(), found: "of an unknown ELF type" }),
    };
    let mut segments = Vec::new();
    for (index, ph) in phdrs.iter().enumerate() {
        if ph.p_type(e) != elf::PT_LOAD {
            continue;
        }
        let bad = |reason: String| ExecError::BadSegment { path: p(), index, reason };
        let (off, filesz, memsz, vaddr) = (ph.p_offset(e), ph.p_filesz(e), ph.p_memsz(e), ph.p_vaddr(e));
        if filesz > memsz {
            return Err(bad(format!("it has more file bytes ({filesz:#x}) than memory ({memsz:#x})")));
        }
        if off.checked_add(filesz).is_none_or(|end| end > bytes.len() as u64) {
            return Err(bad(format!("its file bytes ({filesz:#x} at offset {off:#x}) lie outside the file")));
        }
        if off % 0x1000 != vaddr % 0x1000 {
            return Err(bad(format!("its address {vaddr:#x} and file offset {off:#x} differ within a page")));
        }
        if memsz > MAX_SPAN {
            return Err(ExecError::TooLarge { path: p(), span: memsz });
        }
        let Some(vaddr) = vaddr.checked_add(base).filter(|v| v.checked_add(memsz).is_some_and(|end| end < 1 << 46)) else {
            return Err(bad(format!("it ends beyond the address space ({vaddr:#x} + {memsz:#x})")));
        };
        if vaddr < LOWEST_ADDRESS {
            return Err(ExecError::OverShoal { path: p(), index, vaddr });
        }
        let flags = ph.p_flags(e);
        if flags & elf::PF_W != 0 && flags & elf::PF_X != 0 {
            return Err(ExecError::WritableAndExecutable { path: p(), index, vaddr });
        }
        if memsz == 0 {
            continue;
        }
        segments.push(Segment { index, vaddr, memsz, filesz, offset: off, flags });
    }
    if segments.is_empty() {
        return Err(ExecError::Empty { path: p() });
    }
    segments.sort_by_key(|s| s.vaddr);
    for w in segments.windows(2) {
        if page_up(w[0].vaddr + w[0].memsz) > page_down(w[1].vaddr) {
            return Err(ExecError::Overlap { path: p(), first: w[0].index, second: w[1].index, page: page_down(w[1].vaddr) });
        }
    }
    let lo = segments[0].vaddr;
    let hi = segments.iter().map(|s| s.vaddr + s.memsz).max().unwrap_or(lo);
    if hi - lo > MAX_SPAN {
        return Err(ExecError::TooLarge { path: p(), span: hi - lo });
    }
    let entry = h.e_entry(e).wrapping_add(base);
    if !segments.iter().any(|s| s.flags & elf::PF_X != 0 && s.vaddr <= entry && entry < s.vaddr + s.filesz) {
        return Err(ExecError::BadEntry { path: p(), entry });
    }
    // Linux's AT_PHDR: the program headers' file offset seen through the
    // segment that loads it.
    let phoff = h.e_phoff(e);
    let phsize = u64::from(h.e_phnum(e)) * 56;
    let phdr = segments
        .iter()
        .find(|s| s.offset <= phoff && phoff + phsize <= s.offset + s.filesz)
        .map(|s| s.vaddr + (phoff - s.offset))
        .ok_or(ExecError::NoPhdrs { path: p() })?;
    if let Some((_, vaddr, len)) = &interp {
        let at = vaddr.wrapping_add(base);
        if !segments.iter().any(|s| s.vaddr <= at && at.checked_add(*len).is_some_and(|end| end <= s.vaddr + s.filesz)) {
            return Err(corrupt("its interpreter name (PT_INTERP) is not in a loaded segment"));
        }
    }
    let sites = find_sites(h, bytes, &segments, base);
    Ok(Executable { path: p(), kind, base, entry, phdr, phnum: u64::from(h.e_phnum(e)), segments, sites, interp: interp.map(|i| i.0) })
}

/// The `syscall` instructions of the executable's code. Each executable
/// section (or, without section headers, each executable segment) is
/// decoded from its start, instruction by instruction, so a `0f 05` inside
/// another instruction's bytes is never taken for one.
fn find_sites(h: &elf::FileHeader64<LE>, bytes: &[u8], segments: &[Segment], base: u64) -> Vec<Site> {
    let e = LE;
    // (address, bytes) ranges of code.
    let mut code: Vec<(u64, &[u8])> = Vec::new();
    let in_exec_segment = |a: u64, len: u64| segments.iter().any(|s| s.flags & elf::PF_X != 0 && s.vaddr <= a && a + len <= s.vaddr + s.filesz);
    if let Ok(sections) = h.sections(e, bytes) {
        for s in sections.iter() {
            if s.sh_type(e) != elf::SHT_PROGBITS || s.sh_flags(e) & u64::from(elf::SHF_EXECINSTR) == 0 {
                continue;
            }
            let addr = s.sh_addr(e).wrapping_add(base);
            if let Ok(d) = s.data(e, bytes) {
                if in_exec_segment(addr, d.len() as u64) {
                    code.push((addr, d));
                }
            }
        }
    }
    if code.is_empty() {
        for s in segments.iter().filter(|s| s.flags & elf::PF_X != 0) {
            code.push((s.vaddr, &bytes[s.offset as usize..(s.offset + s.filesz) as usize]));
        }
    }
    sites_in(&code, &functions(h, bytes, base))
}

/// The sites of the code ranges `code` ((address, bytes) each), given
/// the executable's `functions` (see [`functions`]).
fn sites_in(code: &[(u64, &[u8])], functions: &[(u64, u64)]) -> Vec<Site> {
    let mut insns: Vec<iced_x86::Instruction> = Vec::new();
    for (addr, d) in code {
        let mut dec = iced_x86::Decoder::with_ip(64, d, *addr, iced_x86::DecoderOptions::NONE);
        while dec.can_decode() {
            insns.push(dec.decode());
        }
    }
    insns.sort_by_key(|i| i.ip());
    insns.dedup_by_key(|i| i.ip());
    // Every place a direct branch or call of the code lands: no moved
    // instruction but the first may be one.
    let mut targets: Vec<u64> = insns.iter().filter_map(direct_target).collect();
    targets.extend(functions.iter().map(|f| f.0));
    targets.sort_unstable();
    targets.dedup();
    let mut sites = Vec::new();
    for (i, insn) in insns.iter().enumerate() {
        if insn.code() != iced_x86::Code::Syscall {
            continue;
        }
        let (moved, nr) = movable(&insns, i, &targets, functions).unwrap_or((0, None));
        sites.push(Site { addr: insn.ip(), moved, nr });
    }
    sites
}

/// Where a direct (relative) branch or call goes.
fn direct_target(i: &iced_x86::Instruction) -> Option<u64> {
    match i.op0_kind() {
        iced_x86::OpKind::NearBranch64 | iced_x86::OpKind::NearBranch32 | iced_x86::OpKind::NearBranch16 => Some(i.near_branch_target()),
        _ => None,
    }
}

/// The executable's functions from its symbol table: (start, end) of
/// each `STT_FUNC` symbol with a size, by start. Empty for a stripped
/// executable.
fn functions(h: &elf::FileHeader64<LE>, bytes: &[u8], base: u64) -> Vec<(u64, u64)> {
    let e = LE;
    let Ok(sections) = h.sections(e, bytes) else { return Vec::new() };
    let Ok(symbols) = sections.symbols(e, bytes, elf::SHT_SYMTAB) else { return Vec::new() };
    let mut f: Vec<(u64, u64)> = symbols
        .iter()
        .filter(|s| s.st_type() == elf::STT_FUNC && s.st_size(e) > 0)
        .filter_map(|s| {
            let start = s.st_value(e).checked_add(base)?;
            Some((start, start.checked_add(s.st_size(e))?))
        })
        .collect();
    f.sort_unstable();
    f
}

/// Whether `i` may run in a trampoline instead of in place, with the
/// same effect: a data move or simple arithmetic on general registers,
/// immediates and the stack (`[rsp + disp]`, always mapped while the
/// program runs there). Nothing that branches, depends on where it is
/// (RIP-relative), changes `rsp`, or reads memory elsewhere: a fault
/// there would report the trampoline's address to the program's
/// handler instead of its own code's.
fn relocatable(i: &iced_x86::Instruction) -> bool {
    use iced_x86::{Mnemonic as M, OpKind, Register as R};
    if i.is_invalid() || i.has_lock_prefix() || i.has_rep_prefix() || i.has_repne_prefix() {
        return false;
    }
    if !matches!(i.mnemonic(), M::Mov | M::Movzx | M::Movsx | M::Movsxd | M::Lea | M::Xor | M::Or | M::And | M::Add | M::Sub) {
        return false;
    }
    (0..i.op_count()).all(|n| match i.op_kind(n) {
        OpKind::Register => {
            let r = i.op_register(n);
            r.is_gpr() && !(n == 0 && r.full_register() == R::RSP)
        }
        OpKind::Immediate8
        | OpKind::Immediate16
        | OpKind::Immediate32
        | OpKind::Immediate64
        | OpKind::Immediate8to32
        | OpKind::Immediate8to64
        | OpKind::Immediate32to64 => true,
        OpKind::Memory => {
            !i.is_ip_rel_memory_operand()
                && i.memory_index() == R::None
                && i.segment_prefix() == R::None
                && (i.memory_base() == R::RSP || (i.mnemonic() == M::Lea && i.memory_base().is_gpr64()))
        }
        _ => false,
    })
}

/// The system-call number an instruction sets as a constant: `mov eax,
/// imm32` or `mov rax, simm32`.
fn constant_nr(i: &iced_x86::Instruction) -> Option<u32> {
    match i.code() {
        iced_x86::Code::Mov_r32_imm32 if i.op0_register() == iced_x86::Register::EAX => Some(i.immediate32()),
        iced_x86::Code::Mov_rm64_imm32 if i.op0_kind() == iced_x86::OpKind::Register && i.op0_register() == iced_x86::Register::RAX => {
            u32::try_from(i.immediate32to64()).ok()
        }
        _ => None,
    }
}

/// Which instructions right before the `syscall` `insns[site]` can move into a
/// trampoline: the fewest whole relocatable instructions (`before`'s
/// last ones, contiguous, ending at `at`) that make room for a 5-byte
/// `jmp`. Returns their length and the system-call number if one of them
/// sets it. One instruction has no boundary inside the replaced bytes;
/// several need the site's function from the symbol table, no indirect
/// jump in it (a jump table could land anywhere) and no branch, call or
/// symbol anywhere landing between them: otherwise `None` (the trap path).
fn movable(insns: &[iced_x86::Instruction], site: usize, targets: &[u64], functions: &[(u64, u64)]) -> Option<(u8, Option<u32>)> {
    let (before, at) = (&insns[..site], insns[site].ip());
    let mut start = at;
    let mut taken = 0;
    for i in before.iter().rev() {
        if i.next_ip() != start || !relocatable(i) {
            break;
        }
        start = i.ip();
        taken += 1;
        if at - start >= 5 {
            break;
        }
    }
    if at - start < 5 {
        return None;
    }
    let moved = &before[before.len() - taken..];
    // The number is the last constant written to eax/rax by what moves.
    let nr = moved.iter().rev().find(|i| i.op0_kind() == iced_x86::OpKind::Register && i.op0_register().full_register() == iced_x86::Register::RAX);
    let nr = nr.and_then(constant_nr);
    if taken > 1 {
        let f = functions.iter().rev().find(|f| f.0 <= start)?;
        if at + 2 > f.1 {
            return None;
        }
        let inside = targets.partition_point(|&t| t <= start);
        if targets.get(inside).is_some_and(|&t| t < at) {
            return None;
        }
        let (lo, hi) = (insns.partition_point(|i| i.ip() < f.0), insns.partition_point(|i| i.ip() < f.1));
        let indirect = insns[lo..hi]
            .iter()
            .any(|i| i.mnemonic() == iced_x86::Mnemonic::Jmp && matches!(i.op0_kind(), iced_x86::OpKind::Register | iced_x86::OpKind::Memory));
        if indirect {
            return None;
        }
    }
    Some(((at - start) as u8, nr))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF: one R+X segment at `vaddr` holding `code`, entry at
    /// its start, program headers in the segment.
    fn elf(e_type: u16, vaddr: u64, code: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; 0x1000];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        b[6] = 1;
        b[16..18].copy_from_slice(&e_type.to_le_bytes());
        b[18..20].copy_from_slice(&62u16.to_le_bytes());
        b[20..24].copy_from_slice(&1u32.to_le_bytes());
        b[24..32].copy_from_slice(&(vaddr + 0x100).to_le_bytes());
        b[32..40].copy_from_slice(&64u64.to_le_bytes());
        b[52..54].copy_from_slice(&64u16.to_le_bytes());
        b[54..56].copy_from_slice(&56u16.to_le_bytes());
        b[56..58].copy_from_slice(&1u16.to_le_bytes());
        let size = 0x100 + code.len() as u64;
        let ph = &mut b[64..120];
        ph[0..4].copy_from_slice(&1u32.to_le_bytes());
        ph[4..8].copy_from_slice(&5u32.to_le_bytes());
        ph[16..24].copy_from_slice(&vaddr.to_le_bytes());
        ph[24..32].copy_from_slice(&vaddr.to_le_bytes());
        ph[32..40].copy_from_slice(&size.to_le_bytes());
        ph[40..48].copy_from_slice(&size.to_le_bytes());
        ph[48..56].copy_from_slice(&0x1000u64.to_le_bytes());
        b[0x100..0x100 + code.len()].copy_from_slice(code);
        b
    }

    #[test]
    fn sites_come_from_instructions_not_bytes() {
        let code = [
            0xb8, 0x27, 0, 0, 0, 0x0f, 0x05, // mov eax, 39; syscall: rewritten
            0x0f, 0x05, // syscall: trap path
            0x48, 0xb8, 0x0f, 0x05, 0, 0, 0, 0, 0, 0, // mov rax, imm64 holding 0f 05: no site
            0xc3,
        ];
        let a = analyse(Path::new("t"), &elf(elf::ET_EXEC, 0x40_0000, &code)).unwrap();
        assert_eq!(a.kind, Kind::Static);
        assert_eq!(a.sites, vec![Site { addr: 0x40_0105, moved: 5, nr: Some(39) }, Site { addr: 0x40_0107, moved: 0, nr: None }]);
        assert_eq!(a.phdr, 0x40_0040);
    }

    #[test]
    fn a_pie_is_placed_at_the_fixed_base() {
        let a = analyse(Path::new("t"), &elf(elf::ET_DYN, 0, &[0xc3])).unwrap();
        assert_eq!((a.kind, a.base, a.entry), (Kind::Pie, PIE_BASE, PIE_BASE + 0x100));
    }

    #[test]
    fn low_segments_and_bad_entries_are_refused() {
        let low = analyse(Path::new("t"), &elf(elf::ET_EXEC, 0x10_0000, &[0xc3])).unwrap_err();
        assert!(matches!(low, ExecError::OverShoal { vaddr: 0x10_0000, .. }), "{low}");
        let mut b = elf(elf::ET_EXEC, 0x40_0000, &[0xc3]);
        b[24..32].copy_from_slice(&0x50_0000u64.to_le_bytes());
        let e = analyse(Path::new("t"), &b).unwrap_err();
        assert!(matches!(e, ExecError::BadEntry { entry: 0x50_0000, .. }), "{e}");
    }

    /// Go's `internal/runtime/syscall.Syscall6` (Go 1.26): the number
    /// already in rax, the arguments moved into place right before the
    /// `syscall`. The last two moves (6 bytes) go to the trampoline.
    const SYSCALL6: [u8; 23] = [
        0x49, 0x89, 0xf2, // mov r10, rsi
        0x48, 0x89, 0xfa, // mov rdx, rdi
        0x48, 0x89, 0xce, // mov rsi, rcx
        0x48, 0x89, 0xdf, // mov rdi, rbx
        0x0f, 0x05, // syscall
        0x48, 0x3d, 0x01, 0xf0, 0xff, 0xff, // cmp rax, -4095
        0x76, 0x00, // jbe +0
        0xc3, // ret
    ];

    #[test]
    fn go_syscall6_moves_two_register_moves() {
        let f = [(0x40_8c60, 0x40_8c60 + SYSCALL6.len() as u64)];
        let s = sites_in(&[(0x40_8c60, &SYSCALL6)], &f);
        assert_eq!(s, vec![Site { addr: 0x40_8c6c, moved: 6, nr: None }]);
    }

    #[test]
    fn several_moved_instructions_need_a_known_function() {
        let s = sites_in(&[(0x40_8c60, &SYSCALL6)], &[]);
        assert_eq!(s, vec![Site { addr: 0x40_8c6c, moved: 0, nr: None }], "stripped: no function boundaries, the trap path");
        // The site's function ends before its syscall does.
        let s = sites_in(&[(0x40_8c60, &SYSCALL6)], &[(0x40_8c60, 0x40_8c6d)]);
        assert_eq!(s[0].moved, 0);
    }

    #[test]
    fn a_branch_between_moved_instructions_refuses_the_site() {
        // jmp +3 lands on `mov rdi, rbx`, between the two that would move.
        let mut code = vec![0xeb, 0x03];
        code.extend_from_slice(&SYSCALL6[6..]);
        let s = sites_in(&[(0x40_0000, &code)], &[(0x40_0000, 0x40_0000 + code.len() as u64)]);
        assert_eq!(s, vec![Site { addr: 0x40_0008, moved: 0, nr: None }]);
        // A jump to the first moved instruction (the jmp is there) or to
        // the syscall itself (kept) is fine.
        let mut code = vec![0xeb, 0x00];
        code.extend_from_slice(&SYSCALL6[6..]);
        let s = sites_in(&[(0x40_0000, &code)], &[(0x40_0000, 0x40_0000 + code.len() as u64)]);
        assert_eq!(s[0].moved, 6);
        let mut code = vec![0xeb, 0x06];
        code.extend_from_slice(&SYSCALL6[6..]);
        let s = sites_in(&[(0x40_0000, &code)], &[(0x40_0000, 0x40_0000 + code.len() as u64)]);
        assert_eq!(s[0].moved, 6);
    }

    #[test]
    fn an_indirect_jump_in_the_function_refuses_the_site() {
        let mut code = SYSCALL6.to_vec();
        code.extend_from_slice(&[0xff, 0xe0]); // jmp rax: a jump table could land anywhere
        let s = sites_in(&[(0x40_0000, &code)], &[(0x40_0000, 0x40_0000 + code.len() as u64)]);
        assert_eq!(s[0].moved, 0);
    }

    #[test]
    fn stack_loads_and_wide_constants_move() {
        let code = [
            0x48, 0x8b, 0x44, 0x24, 0x08, // mov rax, [rsp+8]: Go's syscall.rawSyscallNoError
            0x0f, 0x05, //
            0x48, 0xc7, 0xc0, 0xe4, 0, 0, 0, // mov rax, 228: Go's nanotime fallback
            0x0f, 0x05, //
            0x8b, 0x54, 0x24, 0x18, // mov edx, [rsp+0x18]
            0xb8, 0x01, 0, 0, 0, // mov eax, 1: Go's write1, a plain pair
            0x0f, 0x05,
        ];
        let s = sites_in(&[(0x40_0000, &code)], &[]);
        assert_eq!(
            s,
            vec![
                Site { addr: 0x40_0005, moved: 5, nr: None },
                Site { addr: 0x40_000e, moved: 7, nr: Some(228) },
                Site { addr: 0x40_0019, moved: 5, nr: Some(1) },
            ]
        );
        assert!(!s[0].is_pair() && !s[1].is_pair() && s[2].is_pair());
    }

    #[test]
    fn position_dependent_or_faulting_instructions_stay() {
        let refused: [&[u8]; 6] = [
            &[0x48, 0x8b, 0x05, 0x10, 0, 0, 0],    // mov rax, [rip+0x10]: RIP-relative
            &[0x48, 0x8b, 0x47, 0x08, 0x90, 0x90], // mov rax, [rdi+8]; nop; nop: not the stack, may fault
            &[0x48, 0x81, 0xc4, 0x08, 0, 0, 0],    // add rsp, 8: changes rsp
            &[0xe8, 0, 0, 0, 0],                   // call: a branch
            &[0x64, 0x48, 0x8b, 0x04, 0x24],       // mov rax, fs:[rsp]: a segment
            &[0x89, 0xc7],                         // mov edi, eax: too few bytes for a jmp
        ];
        for code in refused {
            let mut c = code.to_vec();
            c.extend_from_slice(&[0x0f, 0x05]);
            let s = sites_in(&[(0x40_0000, &c)], &[(0x40_0000, 0x40_0000 + c.len() as u64)]);
            assert!(s.iter().all(|s| !s.rewritten()), "{code:02x?}: {s:?}");
        }
    }
}
