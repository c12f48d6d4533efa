//! Reading an untrusted executable: header checks and the system-call
//! sites of its code.

use crate::{ExecError, LOWEST_ADDRESS, MAX_SPAN, PIE_BASE};
use object::elf;
use object::read::elf::{FileHeader, ProgramHeader, SectionHeader};
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
    /// `Some(nr)` when the instruction right before it is `mov eax,
    /// imm32` (5 bytes): the pair is rewritten. `None`: the trap path.
    pub nr: Option<u32>,
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
}

impl Executable {
    /// End of the last segment in memory (exclusive, not rounded).
    pub fn end(&self) -> u64 {
        self.segments.iter().map(|s| s.vaddr + s.memsz).max().unwrap_or(0)
    }

    /// How many sites are rewritten.
    pub fn rewritten(&self) -> usize {
        self.sites.iter().filter(|s| s.nr.is_some()).count()
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
    if let Some(interp) = phdrs.iter().find(|ph| ph.p_type(e) == elf::PT_INTERP) {
        let name = interp.data(e, bytes).ok().map(|d| String::from_utf8_lossy(d.split(|&b| b == 0).next().unwrap_or(&[])).into_owned()).unwrap_or_default();
        return Err(ExecError::Dynamic { path: p(), interp: name });
    }
    let (kind, base) = match h.e_type(e) {
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
    let sites = find_sites(h, bytes, &segments, base);
    Ok(Executable { path: p(), kind, base, entry, phdr, phnum: u64::from(h.e_phnum(e)), segments, sites })
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
    let mut sites = Vec::new();
    for (addr, d) in code {
        let mut dec = iced_x86::Decoder::with_ip(64, d, addr, iced_x86::DecoderOptions::NONE);
        let mut prev: Option<iced_x86::Instruction> = None;
        while dec.can_decode() {
            let insn = dec.decode();
            if insn.code() == iced_x86::Code::Syscall {
                let nr = prev
                    .filter(|m| {
                        m.code() == iced_x86::Code::Mov_r32_imm32 && m.op0_register() == iced_x86::Register::EAX && m.len() == 5 && m.next_ip() == insn.ip()
                    })
                    .map(|m| m.immediate32());
                sites.push(Site { addr: insn.ip(), nr });
            }
            prev = if insn.is_invalid() { None } else { Some(insn) };
        }
    }
    sites.sort_by_key(|s| s.addr);
    sites.dedup_by_key(|s| s.addr);
    sites
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
        assert_eq!(a.sites, vec![Site { addr: 0x40_0105, nr: Some(39) }, Site { addr: 0x40_0107, nr: None }]);
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
}
