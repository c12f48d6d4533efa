//! The instance image: the kernel image's segments, the executable's
//! (its system-call pairs rewritten) and one segment of trampolines, in
//! one ELF file that the loader runs like any shoal image.

use crate::scan::Executable;
use crate::{ExecError, LOWEST_ADDRESS, TRAMPOLINE_SIZE};
use object::elf;
use object::read::elf::{FileHeader, ProgramHeader, SectionHeader};
use object::LittleEndian as LE;
use std::path::{Path, PathBuf};

/// `ExecInfo::magic` of a kernel image with no executable (as linked).
const MAGIC_NONE: u64 = u64::from_le_bytes(*b"SHOALEX0");
/// `ExecInfo::magic` once an executable is combined with it.
const MAGIC_EXEC: u64 = u64::from_le_bytes(*b"SHOALEX1");
/// Words of the kernel's `SHOAL_EXEC_INFO`: magic, entry, phdr, phnum,
/// end of the executable, trampolines start, trampolines end, load bias
/// (where the kernel finds `PT_INTERP`).
const INFO_WORDS: usize = 8;

/// The parts of a kernel image (a shoal image with no application) that
/// an executable is combined with.
pub struct KernelImage {
    path: PathBuf,
    bytes: Vec<u8>,
    /// Its PT_LOAD and PT_TLS headers: (type, flags, offset, vaddr,
    /// filesz, memsz, align).
    phdrs: Vec<[u64; 7]>,
    entry: u64,
    /// File offset of `SHOAL_EXEC_INFO`.
    info_off: usize,
    /// Address of the system-call entry of the trap path (the tender's
    /// SIGSYS, hvt's LSTAR: the image's `.shoal.exec` section).
    syscall_entry: u64,
    /// Address of the entry the trampolines jump to: one that does not
    /// look for a trapped site to patch (`shoal_exec_syscall`'s
    /// `TRAPPED`); the trap path's in a kernel without it.
    call_entry: u64,
    note: Vec<u8>,
}

impl KernelImage {
    /// Reads the kernel image `bytes` (from `path`).
    pub fn parse(path: &Path, bytes: &[u8]) -> Result<KernelImage, ExecError> {
        let e = LE;
        let bad = |what: &str| ExecError::Kernel { path: path.to_path_buf(), what: what.to_string() };
        let h = elf::FileHeader64::<LE>::parse(bytes).map_err(|_| bad("not an ELF file"))?;
        let ph = h.program_headers(e, bytes).map_err(|_| bad("bad program headers"))?;
        let mut phdrs = Vec::new();
        let mut end = 0;
        for p in ph {
            let t = p.p_type(e);
            if t == elf::PT_LOAD || t == elf::PT_TLS {
                phdrs.push([u64::from(t), u64::from(p.p_flags(e)), p.p_offset(e), p.p_vaddr(e), p.p_filesz(e), p.p_memsz(e), p.p_align(e)]);
            }
            if t == elf::PT_LOAD {
                end = end.max(p.p_vaddr(e) + p.p_memsz(e));
            }
        }
        if end > LOWEST_ADDRESS {
            return Err(bad(&format!("it ends at {end:#x}, above {LOWEST_ADDRESS:#x} where executables begin")));
        }
        let sections = h.sections(e, bytes).map_err(|_| bad("bad section headers"))?;
        let note = sections
            .iter()
            .find(|s| sections.section_name(e, s).is_ok_and(|n| n == b".note.shoal"))
            .and_then(|s| s.data(e, bytes).ok())
            .ok_or_else(|| bad("no .note.shoal section"))?
            .to_vec();
        let symbols = sections.symbols(e, bytes, elf::SHT_SYMTAB).map_err(|_| bad("no symbol table"))?;
        let find = |name: &[u8]| symbols.iter().find(|s| symbols.symbol_name(e, s).is_ok_and(|n| n == name)).map(|s| object::read::elf::Sym::st_value(s, e));
        let info = find(b"SHOAL_EXEC_INFO").ok_or_else(|| bad("no SHOAL_EXEC_INFO symbol (a kernel older than executables)"))?;
        let syscall_entry = find(b"shoal_exec_entry").ok_or_else(|| bad("no shoal_exec_entry symbol"))?;
        let call_entry = find(b"shoal_exec_call_entry").unwrap_or(syscall_entry);
        // The light system calls' code runs with the program's vector
        // registers unsaved: it must leave them alone.
        if let Some(light) = symbols.iter().find(|s| symbols.symbol_name(e, s).is_ok_and(|n| n == b"shoal_exec_light")) {
            let (at, size) = (object::read::elf::Sym::st_value(light, e), object::read::elf::Sym::st_size(light, e));
            let code = phdrs
                .iter()
                .filter(|p| p[0] == u64::from(elf::PT_LOAD))
                .find(|p| p[3] <= at && at.saturating_add(size) <= p[3] + p[4])
                .and_then(|p| bytes.get((p[2] + at - p[3]) as usize..(p[2] + at - p[3] + size) as usize))
                .ok_or_else(|| bad("shoal_exec_light is not in the file's data"))?;
            if let Some(why) = light_path_fault(code, at) {
                return Err(bad(&format!("its light system-call path (shoal_exec_light) {why}, so the program's vector registers would not survive it")));
            }
        }
        let info_off = phdrs
            .iter()
            .filter(|p| p[0] == u64::from(elf::PT_LOAD))
            .find(|p| p[3] <= info && info + (INFO_WORDS as u64 * 8) <= p[3] + p[4])
            .map(|p| (p[2] + info - p[3]) as usize)
            .ok_or_else(|| bad("SHOAL_EXEC_INFO is not in the file's data"))?;
        if bytes.get(info_off..info_off + 8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default())) != Some(MAGIC_NONE) {
            return Err(bad("SHOAL_EXEC_INFO does not hold its initial magic"));
        }
        Ok(KernelImage { path: path.to_path_buf(), bytes: bytes.to_vec(), phdrs, entry: h.e_entry(e), info_off, syscall_entry, call_entry, note })
    }
}

/// Why the light system-call path's machine code `code` (at address
/// `at`) could touch a vector register, or `None` if it cannot: it must
/// use none, explicitly or implicitly, and stay inside itself (no call,
/// no jump out, no indirect branch), so that nothing it reaches is
/// unchecked.
pub(crate) fn light_path_fault(code: &[u8], at: u64) -> Option<String> {
    use iced_x86::{Decoder, DecoderOptions, FlowControl, InstructionInfoFactory, Mnemonic as M};
    let end = at + code.len() as u64;
    let mut d = Decoder::with_ip(64, code, at, DecoderOptions::NONE);
    let mut info = InstructionInfoFactory::new();
    while d.can_decode() {
        let i = d.decode();
        if i.is_invalid() {
            return Some(format!("has bytes at {:#x} that are no instruction", i.ip()));
        }
        let vector = info.info(&i).used_registers().iter().any(|r| r.register().is_vector_register())
            || (0..i.op_count()).any(|k| i.op_register(k).is_vector_register())
            // The state saves and restores, whose registers the decoder's
            // list leaves implicit.
            || matches!(
                i.mnemonic(),
                M::Fxsave | M::Fxsave64 | M::Fxrstor | M::Fxrstor64 | M::Xsave | M::Xsave64 | M::Xsaveopt | M::Xsaveopt64 | M::Xsavec | M::Xsavec64 | M::Xsaves | M::Xsaves64 | M::Xrstor | M::Xrstor64 | M::Xrstors | M::Xrstors64 | M::Vzeroupper | M::Vzeroall
            );
        if vector {
            return Some(format!("uses a vector register at {:#x} ({:?})", i.ip(), i.mnemonic()));
        }
        match i.flow_control() {
            FlowControl::Next | FlowControl::Return => {}
            FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch if (at..end).contains(&i.near_branch_target()) => {}
            _ => return Some(format!("leaves itself at {:#x} ({:?})", i.ip(), i.mnemonic())),
        }
    }
    None
}

fn page_up(a: u64) -> u64 {
    (a + 0xfff) & !0xfff
}

fn rel32(from_next: u64, to: u64) -> [u8; 4] {
    (to.wrapping_sub(from_next) as i64 as i32).to_le_bytes()
}

/// One trampoline: the instructions moved from before the site's
/// `syscall` (`moved`, position-independent: see the scanner), then `lea
/// rcx, [rip + back]; jmp entry`, padded with `int3`. `rcx` holds the
/// return address as after a real `syscall` (which clobbers it anyway),
/// so nothing is pushed on the program's stack.
fn trampoline(at: u64, moved: &[u8], back: u64, entry: u64) -> [u8; TRAMPOLINE_SIZE as usize] {
    let mut t = [0xccu8; TRAMPOLINE_SIZE as usize];
    let n = moved.len();
    t[..n].copy_from_slice(moved);
    t[n..n + 3].copy_from_slice(&[0x48, 0x8d, 0x0d]);
    t[n + 3..n + 7].copy_from_slice(&rel32(at + n as u64 + 7, back));
    t[n + 7] = 0xe9;
    t[n + 8..n + 12].copy_from_slice(&rel32(at + n as u64 + 12, entry));
    t
}

/// Most bytes a site may move into its trampoline (what the trampoline
/// has room for besides its `lea` and `jmp`).
const MAX_MOVED: usize = TRAMPOLINE_SIZE as usize - 12;

/// Builds the instance image of `exe` (whose file bytes are
/// `exe_bytes`) on kernel image `k`.
pub fn combine(k: &KernelImage, exe: &Executable, exe_bytes: &[u8]) -> Result<Vec<u8>, ExecError> {
    // The executable's segments with their rewritten sites, and the
    // trampolines after its end.
    let mut segs: Vec<(u32, u64, Vec<u8>, u64)> =
        exe.segments.iter().map(|s| (s.flags, s.vaddr, exe_bytes[s.offset as usize..(s.offset + s.filesz) as usize].to_vec(), s.memsz)).collect();
    let tramp_start = page_up(exe.end()) + 0x1000;
    let mut tramp = Vec::new();
    for site in exe.sites.iter().filter(|s| s.rewritten() && usize::from(s.moved) <= MAX_MOVED) {
        let at = tramp_start + tramp.len() as u64;
        let from = site.addr - u64::from(site.moved);
        let Some(seg) = segs.iter_mut().find(|s| s.1 <= from && site.addr + 2 <= s.1 + s.2.len() as u64) else { continue };
        let off = (from - seg.1) as usize;
        let moved = usize::from(site.moved);
        tramp.extend_from_slice(&trampoline(at, &seg.2[off..off + moved], site.addr + 2, k.call_entry));
        // jmp rel32 over the moved instructions, int3 in what is left of
        // them; the syscall itself stays, so a jump to it (never seen in
        // compiled code, but possible) takes the trap path instead of
        // running garbage.
        seg.2[off] = 0xe9;
        seg.2[off + 1..off + 5].copy_from_slice(&rel32(from + 5, at));
        seg.2[off + 5..off + moved].fill(0xcc);
    }
    if tramp.is_empty() {
        tramp.push(0xcc);
    }
    let tramp_end = tramp_start + tramp.len() as u64;
    segs.push((elf::PF_R | elf::PF_X, tramp_start, tramp.clone(), tramp.len() as u64));

    let mut kernel = k.bytes.clone();
    let info: [u64; INFO_WORDS] = [MAGIC_EXEC, exe.entry, exe.phdr, exe.phnum, page_up(tramp_end), tramp_start, tramp_end, exe.base];
    for (i, w) in info.iter().enumerate() {
        kernel[k.info_off + i * 8..k.info_off + i * 8 + 8].copy_from_slice(&w.to_le_bytes());
    }

    // Layout of the file: header, program headers, then each segment's
    // bytes at an offset congruent to its address modulo the page size.
    let nph = k.phdrs.len() + segs.len();
    let mut out = vec![0u8; 64 + nph * 56];
    let place = |out: &mut Vec<u8>, vaddr: u64, data: &[u8]| -> u64 {
        let start = page_up(out.len() as u64) + vaddr % 0x1000;
        out.resize(start as usize, 0);
        out.extend_from_slice(data);
        start
    };
    let mut ph: Vec<[u64; 7]> = Vec::new();
    let mut kernel_loads: Vec<(u64, u64, u64)> = Vec::new(); // (old offset, filesz, new offset)
    for p in k.phdrs.iter().filter(|p| p[0] == u64::from(elf::PT_LOAD)) {
        let data = &kernel[p[2] as usize..(p[2] + p[4]) as usize];
        let off = place(&mut out, p[3], data);
        kernel_loads.push((p[2], p[4], off));
        ph.push([p[0], p[1], off, p[3], p[4], p[5], 0x1000]);
    }
    for p in k.phdrs.iter().filter(|p| p[0] == u64::from(elf::PT_TLS)) {
        let off = if p[4] == 0 {
            p[2]
        } else {
            kernel_loads
                .iter()
                .find(|(o, f, _)| *o <= p[2] && p[2] + p[4] <= o + f)
                .map(|(o, _, n)| n + (p[2] - o))
                .ok_or_else(|| ExecError::Kernel { path: k.path.clone(), what: "its TLS image is outside its segments".into() })?
        };
        ph.push([p[0], p[1], off, p[3], p[4], p[5], p[6]]);
    }
    for (flags, vaddr, data, memsz) in &segs {
        let off = place(&mut out, *vaddr, data);
        ph.push([u64::from(elf::PT_LOAD), u64::from(*flags), off, *vaddr, data.len() as u64, *memsz, 0x1000]);
    }
    // Sections: null, .note.shoal, .shoal.exec (the system-call entry,
    // for the tender's trap path), .shstrtab.
    let note_off = page_up(out.len() as u64);
    out.resize(note_off as usize, 0);
    out.extend_from_slice(&k.note);
    let exec_off = out.len() as u64;
    out.extend_from_slice(&k.syscall_entry.to_le_bytes());
    let strtab_off = out.len() as u64;
    let strtab = b"\0.note.shoal\0.shoal.exec\0.shstrtab\0";
    out.extend_from_slice(strtab);
    let shoff = (out.len() as u64 + 7) & !7;
    out.resize(shoff as usize, 0);
    let sh = |name: u32, ty: u32, off: u64, size: u64| {
        let mut b = Vec::with_capacity(64);
        b.extend_from_slice(&name.to_le_bytes());
        b.extend_from_slice(&ty.to_le_bytes());
        b.extend_from_slice(&0u64.to_le_bytes()); // flags
        b.extend_from_slice(&0u64.to_le_bytes()); // addr
        b.extend_from_slice(&off.to_le_bytes());
        b.extend_from_slice(&size.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes()); // link
        b.extend_from_slice(&0u32.to_le_bytes()); // info
        b.extend_from_slice(&1u64.to_le_bytes()); // addralign
        b.extend_from_slice(&0u64.to_le_bytes()); // entsize
        b
    };
    out.extend_from_slice(&[0u8; 64]);
    out.extend_from_slice(&sh(1, elf::SHT_PROGBITS, note_off, k.note.len() as u64));
    out.extend_from_slice(&sh(13, elf::SHT_PROGBITS, exec_off, 8));
    out.extend_from_slice(&sh(25, elf::SHT_STRTAB, strtab_off, strtab.len() as u64));

    // The ELF header.
    let mut hdr = [0u8; 64];
    hdr[..16].copy_from_slice(&[0x7f, b'E', b'L', b'F', elf::ELFCLASS64, elf::ELFDATA2LSB, elf::EV_CURRENT, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    hdr[16..18].copy_from_slice(&elf::ET_EXEC.to_le_bytes());
    hdr[18..20].copy_from_slice(&elf::EM_X86_64.to_le_bytes());
    hdr[20..24].copy_from_slice(&1u32.to_le_bytes());
    hdr[24..32].copy_from_slice(&k.entry.to_le_bytes());
    hdr[32..40].copy_from_slice(&64u64.to_le_bytes());
    hdr[40..48].copy_from_slice(&shoff.to_le_bytes());
    hdr[52..54].copy_from_slice(&64u16.to_le_bytes());
    hdr[54..56].copy_from_slice(&56u16.to_le_bytes());
    hdr[56..58].copy_from_slice(&(nph as u16).to_le_bytes());
    hdr[58..60].copy_from_slice(&64u16.to_le_bytes());
    hdr[60..62].copy_from_slice(&4u16.to_le_bytes());
    hdr[62..64].copy_from_slice(&3u16.to_le_bytes());
    out[..64].copy_from_slice(&hdr);
    for (i, p) in ph.iter().enumerate() {
        let b = &mut out[64 + i * 56..64 + (i + 1) * 56];
        b[0..4].copy_from_slice(&(p[0] as u32).to_le_bytes());
        b[4..8].copy_from_slice(&(p[1] as u32).to_le_bytes());
        b[8..16].copy_from_slice(&p[2].to_le_bytes());
        b[16..24].copy_from_slice(&p[3].to_le_bytes());
        b[24..32].copy_from_slice(&p[3].to_le_bytes());
        b[32..40].copy_from_slice(&p[4].to_le_bytes());
        b[40..48].copy_from_slice(&p[5].to_le_bytes());
        b[48..56].copy_from_slice(&p[6].to_le_bytes());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The trampoline decodes as the three instructions it is meant to be,
    /// with their targets.
    #[test]
    fn trampoline_is_mov_lea_jmp() {
        let (at, back, entry) = (0x5b_b000, 0x40_1234, 0x10_2000);
        let t = trampoline(at, &[0xb8, 39, 0, 0, 0], back, entry);
        let mut d = iced_x86::Decoder::with_ip(64, &t, at, iced_x86::DecoderOptions::NONE);
        let mov = d.decode();
        assert_eq!(mov.code(), iced_x86::Code::Mov_r32_imm32);
        assert_eq!(mov.op0_register(), iced_x86::Register::EAX);
        assert_eq!(mov.immediate32(), 39);
        let lea = d.decode();
        assert_eq!(lea.code(), iced_x86::Code::Lea_r64_m);
        assert_eq!(lea.op0_register(), iced_x86::Register::RCX);
        assert!(lea.is_ip_rel_memory_operand());
        assert_eq!(lea.ip_rel_memory_address(), back);
        let jmp = d.decode();
        assert_eq!(jmp.code(), iced_x86::Code::Jmp_rel32_64);
        assert_eq!(jmp.near_branch_target(), entry);
        assert!(t[17..].iter().all(|&b| b == 0xcc), "the rest is int3");
    }

    /// The light path's check passes plain integer code with a jump
    /// inside it and refuses each way out of its promise.
    #[test]
    fn light_path_check_refuses_vector_registers_and_calls() {
        let at = 0x10_0000;
        // mov eax, [rdi]; cmp eax, 39; jne +2; xor eax, eax; ret
        let ok = [0x8b, 0x07, 0x83, 0xf8, 0x27, 0x75, 0x02, 0x31, 0xc0, 0xc3];
        assert_eq!(light_path_fault(&ok, at), None);
        let fault = |b: &[u8]| light_path_fault(b, at).unwrap_or_default();
        // movdqa [rsp], xmm0
        assert!(fault(&[0x66, 0x0f, 0x7f, 0x04, 0x24, 0xc3]).starts_with("uses a vector register at 0x100000"), "{}", fault(&[0x66, 0x0f, 0x7f, 0x04, 0x24]));
        // fxsave [rdi] (implicit: every xmm register)
        assert!(fault(&[0x0f, 0xae, 0x07, 0xc3]).starts_with("uses a vector register"), "{}", fault(&[0x0f, 0xae, 0x07, 0xc3]));
        // call rel32
        assert_eq!(fault(&[0xe8, 0, 0, 0, 0, 0xc3]), "leaves itself at 0x100000 (Call)");
        // jmp rel32 out of the function (a tail call)
        assert_eq!(fault(&[0xe9, 0x00, 0x10, 0, 0]), "leaves itself at 0x100000 (Jmp)");
        // jmp rax
        assert_eq!(fault(&[0xff, 0xe0]), "leaves itself at 0x100000 (Jmp)");
        // a truncated instruction
        assert!(fault(&[0x8b]).starts_with("has bytes at 0x100000"), "{}", fault(&[0x8b]));
    }
}
