//! Unit tests with small ELF files made byte by byte (with the field
//! layout of `object::elf::FileHeader64`/`ProgramHeader64`/`SectionHeader64`),
//! so each test controls exactly the field it breaks.

use super::*;
use object::elf;
use shoal_abi::{AbiNote, BootInfo, TenderKind, ABI_VERSION, ARGS_ADDR, BOOT_INFO_ADDR, BOOT_INFO_MAGIC, IMAGE_BASE};
use std::ffi::OsString;
use std::path::Path;

#[derive(Clone)]
struct Seg {
    ptype: u32,
    vaddr: u64,
    memsz: u64,
    data: Vec<u8>,
    flags: u32,
}

#[derive(Clone)]
struct Spec {
    class: u8,
    machine: u16,
    etype: u16,
    entry: u64,
    segs: Vec<Seg>,
    note: Option<Vec<u8>>,
}

fn note_bytes(version: u32) -> Vec<u8> {
    let n = AbiNote { abi_version: version, ..AbiNote::CURRENT };
    let mut b = n.magic.to_le_bytes().to_vec();
    b.extend(n.abi_version.to_le_bytes());
    b.extend(n.reserved.to_le_bytes());
    b
}

fn good() -> Spec {
    Spec {
        class: elf::ELFCLASS64,
        machine: elf::EM_X86_64,
        etype: elf::ET_EXEC,
        entry: IMAGE_BASE,
        segs: vec![
            Seg { ptype: elf::PT_LOAD, vaddr: IMAGE_BASE, memsz: 0x10, data: vec![0xf4; 0x10], flags: elf::PF_R | elf::PF_X },
            Seg { ptype: elf::PT_LOAD, vaddr: IMAGE_BASE + 0x1000, memsz: 0x8, data: b"rodata!!".to_vec(), flags: elf::PF_R },
            Seg { ptype: elf::PT_LOAD, vaddr: IMAGE_BASE + 0x2000, memsz: 0x3000, data: vec![0x55; 0x20], flags: elf::PF_R | elf::PF_W },
            Seg { ptype: elf::PT_TLS, vaddr: IMAGE_BASE + 0x2000, memsz: 0x40, data: vec![0x55; 0x10], flags: elf::PF_R },
        ],
        note: Some(note_bytes(ABI_VERSION)),
    }
}

fn build(s: &Spec) -> Vec<u8> {
    let phnum = s.segs.len();
    let phoff = 64u64;
    let mut data_off = phoff + 56 * phnum as u64;
    let mut body: Vec<u8> = Vec::new();
    let mut phdrs: Vec<u8> = Vec::new();
    for seg in &s.segs {
        let off = data_off;
        body.extend(&seg.data);
        data_off += seg.data.len() as u64;
        phdrs.extend(seg.ptype.to_le_bytes());
        phdrs.extend(seg.flags.to_le_bytes());
        phdrs.extend(off.to_le_bytes());
        phdrs.extend(seg.vaddr.to_le_bytes());
        phdrs.extend(seg.vaddr.to_le_bytes());
        phdrs.extend((seg.data.len() as u64).to_le_bytes());
        phdrs.extend(seg.memsz.to_le_bytes());
        phdrs.extend(0x1000u64.to_le_bytes());
    }
    // Sections: null, [.note.shoal], .shstrtab.
    let shstrtab = b"\0.note.shoal\0.shstrtab\0".to_vec();
    let note_off = data_off;
    let note = s.note.clone().unwrap_or_default();
    let strtab_off = note_off + note.len() as u64;
    let shoff = (strtab_off + shstrtab.len() as u64 + 7) & !7;
    let mut sh: Vec<u8> = vec![0; 64];
    let mut section = |name: u32, ty: u32, off: u64, size: u64| {
        let mut h = Vec::new();
        h.extend(name.to_le_bytes());
        h.extend(ty.to_le_bytes());
        h.extend(0u64.to_le_bytes()); // flags
        h.extend(0u64.to_le_bytes()); // addr
        h.extend(off.to_le_bytes());
        h.extend(size.to_le_bytes());
        h.extend(0u32.to_le_bytes()); // link
        h.extend(0u32.to_le_bytes()); // info
        h.extend(1u64.to_le_bytes()); // align
        h.extend(0u64.to_le_bytes()); // entsize
        sh.extend(h);
    };
    let mut shnum = 1u16;
    if s.note.is_some() {
        section(1, elf::SHT_NOTE, note_off, note.len() as u64);
        shnum += 1;
    }
    section(13, elf::SHT_STRTAB, strtab_off, shstrtab.len() as u64);
    shnum += 1;

    let mut f = Vec::new();
    f.extend(elf::ELFMAG);
    f.extend([s.class, elf::ELFDATA2LSB, elf::EV_CURRENT, 0]);
    f.extend([0u8; 8]);
    f.extend(s.etype.to_le_bytes());
    f.extend(s.machine.to_le_bytes());
    f.extend(1u32.to_le_bytes());
    f.extend(s.entry.to_le_bytes());
    f.extend(phoff.to_le_bytes());
    f.extend(shoff.to_le_bytes());
    f.extend(0u32.to_le_bytes());
    f.extend(64u16.to_le_bytes()); // ehsize
    f.extend(56u16.to_le_bytes());
    f.extend((phnum as u16).to_le_bytes());
    f.extend(64u16.to_le_bytes());
    f.extend(shnum.to_le_bytes());
    f.extend((shnum - 1).to_le_bytes()); // shstrndx: the last section
    assert_eq!(f.len(), 64);
    f.extend(phdrs);
    f.extend(body);
    f.extend(note);
    f.extend(shstrtab);
    f.resize(shoff as usize, 0);
    f.extend(sh);
    f
}

fn parse(s: &Spec) -> Result<Image, ImageError> {
    Image::parse(Path::new("/x/y.img"), &build(s))
}

#[test]
fn accepts_a_good_image() {
    let img = parse(&good()).unwrap();
    assert_eq!(img.entry(), IMAGE_BASE);
    assert_eq!(img.segments().len(), 3);
    assert_eq!(img.phnum(), 4);
    assert_eq!(img.phdrs().len(), 4 * 56);
    assert_eq!(img.tls(), Some(Tls { vaddr: IMAGE_BASE + 0x2000, filesz: 0x10, memsz: 0x40, align: 0x1000 }));
    assert_eq!(img.start(), IMAGE_BASE);
    assert_eq!(img.end(), IMAGE_BASE + 0x5000);
    assert!(img.segments()[0].perms.exec && !img.segments()[0].perms.write);
}

fn err(s: &Spec) -> String {
    let e = parse(s).unwrap_err().to_string();
    assert!(e.contains("/x/y.img"), "message does not name the file: {e}");
    e
}

#[test]
fn refuses_non_elf_and_truncated() {
    let e = Image::parse(Path::new("/x/y.img"), b"#!/bin/sh\n").unwrap_err().to_string();
    assert!(e.contains("not an ELF file"), "{e}");
    let e = Image::parse(Path::new("/x/y.img"), b"").unwrap_err().to_string();
    assert!(e.contains("not an ELF file"), "{e}");
    let full = build(&good());
    for cut in [10, 40, 64, 100, 64 + 56 * 4 + 8, full.len() - 10] {
        let e = Image::parse(Path::new("/x/y.img"), &full[..cut]).unwrap_err().to_string();
        assert!(e.contains("truncated"), "cut at {cut}: {e}");
    }
    // Every prefix is refused without a panic.
    for cut in 0..full.len() {
        assert!(Image::parse(Path::new("/x/y.img"), &full[..cut]).is_err());
    }
}

#[test]
fn refuses_segment_beyond_file() {
    let mut b = build(&good());
    // p_offset of the first program header → far beyond the end.
    b[64 + 8..64 + 16].copy_from_slice(&0xffff_0000u64.to_le_bytes());
    let e = Image::parse(Path::new("/x/y.img"), &b).unwrap_err().to_string();
    assert!(e.contains("truncated") && e.contains("segment 0"), "{e}");
}

#[test]
fn refuses_wrong_class_machine_type() {
    let mut s = good();
    s.class = elf::ELFCLASS32;
    assert!(err(&s).contains("32-bit"));
    let mut s = good();
    s.machine = elf::EM_AARCH64;
    assert!(err(&s).contains("machine 183"));
    let mut s = good();
    s.etype = elf::ET_DYN;
    assert!(err(&s).contains("ET_DYN"));
    let mut s = good();
    s.etype = elf::ET_REL;
    assert!(err(&s).contains("relocatable"));
}

#[test]
fn refuses_missing_or_foreign_note() {
    let mut s = good();
    s.note = None;
    assert!(err(&s).contains("not a shoal image"));
    let mut s = good();
    s.note = Some(b"garbage garbage!".to_vec());
    assert!(err(&s).contains("not a shoal image"));
    let mut s = good();
    s.note = Some(note_bytes(ABI_VERSION + 41));
    let e = err(&s);
    assert!(e.contains(&format!("built for shoal ABI version {}, this tender speaks {ABI_VERSION}", ABI_VERSION + 41)), "{e}");
}

#[test]
fn refuses_bad_segments() {
    let mut s = good();
    s.segs[2].flags = elf::PF_R | elf::PF_W | elf::PF_X;
    assert!(err(&s).contains("W+X"));

    let mut s = good();
    s.segs[1].memsz = 4; // data is 8 bytes
    assert!(err(&s).contains("file size 0x8 exceeds its memory size 0x4"));

    let mut s = good();
    s.segs[1].vaddr = IMAGE_BASE + 0x800; // shares the code's page
    assert!(err(&s).contains("overlapping"));

    let mut s = good();
    s.segs[0].vaddr = 0x8000;
    s.entry = 0x8000;
    assert!(err(&s).contains("below the image base"));

    let mut s = good();
    s.segs[2].vaddr = u64::MAX - 0x10;
    assert!(err(&s).contains("ends beyond"));

    let mut s = good();
    s.segs[2].memsz = IMAGE_ADDR_LIMIT;
    assert!(err(&s).contains("ends beyond"));

    let mut s = good();
    s.entry = IMAGE_BASE + 0x1000; // rodata
    assert!(err(&s).contains("entry point"));

    let mut s = good();
    s.segs.retain(|g| g.ptype != elf::PT_LOAD);
    assert!(err(&s).contains("no loadable segment"));

    let mut s = good();
    s.segs.push(Seg { ptype: elf::PT_INTERP, vaddr: 0, memsz: 0, data: vec![], flags: 0 });
    assert!(err(&s).contains("dynamically linked"));

    let mut s = good();
    for _ in 0..MAX_PHNUM {
        s.segs.push(Seg { ptype: elf::PT_NOTE, vaddr: 0, memsz: 0, data: vec![], flags: 0 });
    }
    assert!(err(&s).contains("program headers"));
}

#[test]
fn tls_header_outside_segments_is_refused() {
    // libc copies the TLS image into every thread: one outside the loaded
    // segments would make it read memory the image never loaded.
    let tls = |s: &Spec| -> usize { s.segs.iter().position(|g| g.ptype == elf::PT_TLS).unwrap() };
    let mut s = good();
    let i = tls(&s);
    s.segs[i].vaddr = 0x4000_0000; // far above the image
    assert_eq!(err(&s), format!("image /x/y.img has its TLS image (0x10 bytes at 0x40000000, program header {i}) outside its loaded segments"));
    let mut s = good();
    let i = tls(&s);
    s.segs[i].vaddr = IMAGE_BASE + 0x5000 - 0x8; // runs past the RW segment's end
    assert!(err(&s).contains("outside its loaded segments"), "{}", err(&s));
    let mut s = good();
    let i = tls(&s);
    s.segs[i].vaddr = IMAGE_BASE + 0x1004; // straddles the rodata segment's end
    assert!(err(&s).contains("outside its loaded segments"));
    let mut s = good();
    let i = tls(&s);
    s.segs[i].vaddr = 0x1000; // below the image, in the boot area
    assert!(err(&s).contains("outside its loaded segments"));
    // An empty TLS image (.tbss only) at the very end of a segment is fine.
    let mut s = good();
    let i = tls(&s);
    s.segs[i].vaddr = IMAGE_BASE + 0x5000;
    s.segs[i].data.clear();
    assert!(parse(&s).is_ok());
    // Nor is one at 0 (what ld emits for an image whose libc has a PT_TLS
    // but no initialised TLS data): there is nothing to copy.
    let mut s = good();
    let i = tls(&s);
    s.segs[i].vaddr = 0;
    s.segs[i].memsz = 0;
    s.segs[i].data.clear();
    assert!(parse(&s).is_ok());
}

#[test]
fn open_names_missing_file() {
    let e = Image::open(Path::new("/nonexistent/z.img")).unwrap_err().to_string();
    assert!(e.starts_with("cannot read image /nonexistent/z.img"), "{e}");
}

fn args(v: &[&str]) -> Vec<OsString> {
    v.iter().map(OsString::from).collect()
}

#[test]
fn plans_layout() {
    let img = parse(&good()).unwrap();
    let mem = 64 << 20;
    let l = plan(&img, mem, 10_000, &args(&["prog", "-v"]), &args(&["A=b"])).unwrap();
    assert_eq!(l.image_end, IMAGE_BASE + 0x5000);
    assert_eq!(l.archive_addr, l.image_end);
    assert_eq!(l.heap_start, l.image_end + 0x3000);
    assert_eq!(l.stack_top, mem);
    assert_eq!(l.stack_base, mem - (8 << 20));
    assert_eq!(l.heap_end, l.stack_base);
    assert_eq!(l.args_len, 5 + 3 + 4);

    let l = plan(&img, 3 << 20, 0, &args(&["p"]), &[]).unwrap();
    assert_eq!(l.archive_addr, 0);
    assert_eq!(l.heap_start, l.image_end);
    assert_eq!(l.stack_top - l.stack_base, (3 << 20) / 8);
    assert_eq!(stack_size(256 << 10), MIN_STACK);

    let e = plan(&img, 1 << 20, 0, &args(&["p"]), &[]).unwrap_err().to_string();
    assert_eq!(e, "--mem 1M is too small for image /x/y.img (needs at least 3M)");
    // The suggestion works.
    assert!(plan(&img, 3 << 20, 0, &args(&["p"]), &[]).is_ok());
    let e = plan(&img, 64 << 20, 200 << 20, &args(&["p"]), &[]).unwrap_err().to_string();
    assert!(e.contains("needs at least 211M"), "{e}");

    assert!(matches!(plan(&img, (4 << 20) + 1, 0, &[], &[]), Err(LayoutError::Unaligned(_))));
    let big = vec![OsString::from("x".repeat(1 << 20))];
    assert!(matches!(plan(&img, 64 << 20, 0, &big, &[]), Err(LayoutError::ArgsTooLarge(_))));
    assert!(matches!(plan(&img, 64 << 20, 0, &args(&["a\0b"]), &[]), Err(LayoutError::Nul(_))));
    let many = vec![OsString::from("x"); 100_000];
    assert!(matches!(plan(&img, 4 << 20, 0, &many, &[]), Err(LayoutError::TooManyArgs(_))));
}

#[test]
fn min_memory_suggestion_is_tight_for_many_sizes() {
    let img = parse(&good()).unwrap();
    for archive in [0u64, 1, 5 << 20, 100 << 20, 1 << 30] {
        let e = plan(&img, 1 << 20, archive, &[], &[]).unwrap_err();
        let LayoutError::TooSmall { need, .. } = e else { panic!("{e}") };
        let mib: u64 = need.trim_end_matches(['M', 'G']).parse().unwrap();
        let need = if need.ends_with('G') { mib << 30 } else { mib << 20 };
        assert!(plan(&img, need, archive, &[], &[]).is_ok(), "{need}");
        assert!(plan(&img, need - (1 << 20), archive, &[], &[]).is_err(), "{need}");
    }
}

#[test]
fn writes_boot_state() {
    let img = parse(&good()).unwrap();
    let mem_size: u64 = 4 << 20;
    let argv = args(&["prog", "hello"]);
    let env = args(&["HOME=/"]);
    let l = plan(&img, mem_size, 100, &argv, &env).unwrap();
    let mut backing = vec![0u8; (mem_size - GuestMemory::LOW) as usize];
    // SAFETY: the vector outlives the view and is not otherwise used while
    // the view is.
    let m = unsafe { GuestMemory::new(backing.as_mut_ptr(), mem_size) };
    load_segments(&m, &img).unwrap();
    load_archive(&m, &l, &[7u8; 100]).unwrap();
    let clock = Clock { tsc_hz: 3_000_000_000, tsc_at_boot: 5, realtime_ns_at_boot: 6 };
    let params = BootParams::new(TenderKind::Spt, 0xdead, clock).unwrap();
    let e = write_boot_state(&m, &img, &l, &argv, &env, &params).unwrap();
    assert_eq!(e.rip, IMAGE_BASE);
    assert_eq!(e.rdi, BOOT_INFO_ADDR);
    assert_eq!(e.rsp % 16, 0);
    assert!(e.rsp > l.stack_base && e.rsp < l.stack_top);

    let bi: BootInfo = m.read_obj(GuestAddr(BOOT_INFO_ADDR)).unwrap();
    assert_eq!(bi.magic, BOOT_INFO_MAGIC);
    assert_eq!(bi.abi_version, ABI_VERSION);
    assert_eq!(bi.tender, TenderKind::Spt as u32);
    assert_eq!(bi.hypercall_entry, 0xdead);
    assert_eq!((bi.mem_size, bi.heap_start, bi.heap_end), (mem_size, l.heap_start, l.heap_end));
    assert_eq!((bi.fs_archive_addr, bi.fs_archive_size), (l.archive_addr, 100));
    assert_eq!((bi.tsc_hz, bi.tsc_at_boot, bi.realtime_ns_at_boot), (3_000_000_000, 5, 6));
    assert_eq!(bi.phnum, 4);
    assert_eq!(&bi.hostname[..6], b"shoal\0");
    let mut ph = vec![0u8; img.phdrs().len()];
    m.read(GuestAddr(bi.phdr_addr), &mut ph).unwrap();
    assert_eq!(ph, img.phdrs());

    // Segments, bss and archive.
    let mut b = [0u8; 8];
    m.read(GuestAddr(IMAGE_BASE + 0x1000), &mut b).unwrap();
    assert_eq!(&b, b"rodata!!");
    assert_eq!(m.read_obj::<[u8; 4]>(GuestAddr(IMAGE_BASE + 0x2020)).unwrap(), [0; 4]);
    assert_eq!(m.read_obj::<[u8; 4]>(GuestAddr(l.archive_addr)).unwrap(), [7; 4]);

    // The initial stack.
    let word = |i: u64| m.read_obj::<u64>(GuestAddr(e.rsp + 8 * i)).unwrap();
    let cstr = |a: u64| {
        let mut v = Vec::new();
        let mut a = a;
        loop {
            let c = m.read_obj::<[u8; 1]>(GuestAddr(a)).unwrap()[0];
            if c == 0 {
                break String::from_utf8(v).unwrap();
            }
            v.push(c);
            a += 1;
        }
    };
    assert_eq!(word(0), 2);
    // Few and short: the strings lie on the stack's top page, above the frame.
    assert!(word(1) > e.rsp && word(1) < l.stack_top - 16 && word(1) >= l.stack_top - shoal_abi::PAGE_SIZE);
    assert_eq!(cstr(word(1)), "prog");
    assert_eq!(cstr(word(2)), "hello");
    assert_eq!(word(3), 0);
    assert_eq!(cstr(word(4)), "HOME=/");
    assert_eq!(word(5), 0);
    let mut aux = std::collections::HashMap::new();
    let mut i = 6;
    loop {
        let (k, v) = (word(i), word(i + 1));
        if k == auxv::AT_NULL {
            break;
        }
        aux.insert(k, v);
        i += 2;
    }
    assert_eq!(aux[&auxv::AT_PHDR], bi.phdr_addr);
    assert_eq!(aux[&auxv::AT_PHENT], 56);
    assert_eq!(aux[&auxv::AT_PHNUM], 4);
    assert_eq!(aux[&auxv::AT_PAGESZ], 4096);
    assert_eq!(aux[&auxv::AT_ENTRY], IMAGE_BASE);
    assert_eq!(aux[&auxv::AT_SECURE], 0);
    assert_eq!(aux[&auxv::AT_CLKTCK], 100);
    assert_eq!(aux[&auxv::AT_HWCAP], hwcap());
    let r = aux[&auxv::AT_RANDOM];
    assert!(r + 16 <= l.stack_top && r > e.rsp + 8 * i);
    assert_eq!(m.read_obj::<[u8; 16]>(GuestAddr(r)).unwrap(), params.at_random);
    drop(backing);
}

/// An image whose data segment spans several load chunks, starts inside a
/// page and has an all-zero page in the middle; written to a file.
fn big_image_file(name: &str) -> (std::path::PathBuf, Vec<u8>) {
    let mut s = good();
    let mut data: Vec<u8> = (0..0x13_456u32).map(|i| (i % 251) as u8 | 1).collect();
    data[0xff0..0x1ff0].fill(0); // the guest page at +0x3000
    s.segs[2].vaddr = IMAGE_BASE + 0x2010;
    s.segs[2].memsz = 0x20_000;
    s.segs[2].data = data.clone();
    s.segs[3].vaddr = IMAGE_BASE + 0x2010;
    let path = std::env::temp_dir().join(format!("shoal-loader-{name}-{}.img", std::process::id()));
    std::fs::write(&path, build(&s)).unwrap();
    (path, data)
}

#[test]
fn loads_segments_from_the_file_without_copying_them_first() {
    let (path, data) = big_image_file("load");
    let img = Image::open(&path).unwrap();
    let seg = img.segments()[2].clone();
    assert_eq!((seg.filesz, img.segment_bytes(&seg).unwrap()), (data.len() as u64, data.clone()));
    let mem_size: u64 = 4 << 20;
    let mut backing = vec![0u8; (mem_size - GuestMemory::LOW) as usize];
    // SAFETY: the vector outlives the view and is not otherwise used while
    // the view is.
    let m = unsafe { GuestMemory::new(backing.as_mut_ptr(), mem_size) };
    // Mark the zero page: a loader that wrote it would overwrite the mark.
    m.write(GuestAddr(IMAGE_BASE + 0x3000), &[0xee]).unwrap();
    // And the bss after the file bytes, in the same page: must be zeroed.
    let file_end = IMAGE_BASE + 0x2010 + data.len() as u64;
    m.write(GuestAddr(file_end), &[0xee]).unwrap();
    load_segments(&m, &img).unwrap();
    let mut got = vec![0u8; data.len()];
    m.read(GuestAddr(IMAGE_BASE + 0x2010), &mut got).unwrap();
    got[0xff0] = 0; // the mark, left alone
    assert_eq!(got, data);
    assert_eq!(m.read_obj::<[u8; 1]>(GuestAddr(IMAGE_BASE + 0x3000)).unwrap(), [0xee]);
    assert_eq!(m.read_obj::<[u8; 1]>(GuestAddr(file_end)).unwrap(), [0]);
    let mut text = [0u8; 4];
    m.read(GuestAddr(IMAGE_BASE), &mut text).unwrap();
    assert_eq!(&text, b"\xf4\xf4\xf4\xf4");
    drop(backing);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn an_image_that_shrinks_after_its_check_fails_to_load() {
    let (path, _) = big_image_file("shrink");
    let mut img = Image::open(&path).unwrap();
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(0x1000).unwrap();
    let mem_size: u64 = 4 << 20;
    let mut backing = vec![0u8; (mem_size - GuestMemory::LOW) as usize];
    // SAFETY: as above.
    let m = unsafe { GuestMemory::new(backing.as_mut_ptr(), mem_size) };
    let e = load_segments(&m, &img).unwrap_err();
    assert!(e.to_string().contains("cannot read the image's segments"), "{e}");
    img.release_data();
    assert!(img.segment_bytes(&img.segments()[0].clone()).is_err());
    drop(backing);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn argument_strings_go_to_the_stack_top_page_when_they_fit_there() {
    use crate::boot::initial_frame;
    let top = 32 << 20;
    let page = shoal_abi::PAGE_SIZE;
    // Short strings: right below the 16 random bytes, the frame below them.
    let (rsp, strings) = initial_frame(top, 20, 300);
    assert_eq!(strings, top - 16 - 20);
    assert!(rsp + 300 <= strings && rsp.is_multiple_of(16) && rsp >= top - page);
    // Exactly filling the page still fits; one more byte does not.
    let (rsp, strings) = initial_frame(top, page - 16 - 304, 304);
    assert_eq!((rsp, strings), (top - page, top - page + 304));
    let (rsp, strings) = initial_frame(top, page - 16 - 304 + 1, 304);
    assert_eq!(strings, ARGS_ADDR);
    assert_eq!(rsp, (top - 16 - 304) & !15);
    // Long ones: below the image, as before.
    assert_eq!(initial_frame(top, 100_000, 300).1, ARGS_ADDR);
}

/// The trampoline tables are pooled page by page, so a table page that is
/// the same in two images is one pool file; other regions in runs.
#[test]
fn trampoline_tables_are_pooled_page_by_page() {
    use shoal_manifest::{Library, LibraryInfo, LibraryKind, Manifest, PageHash, Region, RegionKind};
    let manifest = |tpl_pages: &[&[u8]]| Manifest {
        format: shoal_manifest::FORMAT,
        layout: "delta".into(),
        entry: 0x100000,
        image_sha256: "00".into(),
        libraries: vec![
            Library {
                info: LibraryInfo { name: "libc".into(), version: "1".into(), kind: LibraryKind::Libc },
                regions: vec![Region { kind: RegionKind::Text, start: 0x100000, end: 0x10a000, page_hashes: (0..10u8).map(|i| PageHash::of(&[i])).collect() }],
            },
            Library {
                info: LibraryInfo { name: "tpl".into(), version: "image".into(), kind: LibraryKind::Library },
                regions: vec![Region {
                    kind: RegionKind::Text,
                    start: 0x200000,
                    end: 0x200000 + 0x1000 * tpl_pages.len() as u64,
                    page_hashes: tpl_pages.iter().map(|p| PageHash::of(p)).collect(),
                }],
            },
        ],
    };
    let a = pool::pool_libs(&manifest(&[b"same", b"a1", b"a2"]));
    let b = pool::pool_libs(&manifest(&[b"same", b"b1", b"b2"]));
    let libc: Vec<_> = a.iter().filter(|l| l.lib == "libc@1").map(|l| (l.addr, l.pages)).collect();
    assert_eq!(libc, vec![(0x100000, 8), (0x108000, 2)], "other libraries in runs of PAGES_PER_FILE");
    let tpl = |v: &[pool::PoolLib]| v.iter().filter(|l| l.lib == "tpl@image").map(|l| (l.addr, l.pages, l.file_name.clone())).collect::<Vec<_>>();
    let (ta, tb) = (tpl(&a), tpl(&b));
    assert_eq!(ta.iter().map(|t| (t.0, t.1)).collect::<Vec<_>>(), vec![(0x200000, 1), (0x201000, 1), (0x202000, 1)]);
    assert_eq!(ta[0].2, tb[0].2, "the page both images share is one pool file");
    assert_ne!(ta[1].2, tb[1].2);
}

/// An executable's segments (library `exec`) are pooled in 2 MiB runs:
/// `node`'s 80 MiB in runs of 8 pages were more files than an instance
/// maps.
#[test]
fn executables_are_pooled_in_long_runs() {
    use shoal_manifest::{Library, LibraryInfo, LibraryKind, Manifest, PageHash, Region, RegionKind};
    let pages = 2 * pool::EXEC_PAGES_PER_FILE + 3;
    let m = Manifest {
        format: shoal_manifest::FORMAT,
        layout: "delta".into(),
        entry: 0x400000,
        image_sha256: "00".into(),
        libraries: vec![Library {
            info: LibraryInfo { name: "exec".into(), version: "abc".into(), kind: LibraryKind::App },
            regions: vec![Region {
                kind: RegionKind::Text,
                start: 0x400000,
                end: 0x400000 + pages * 0x1000,
                page_hashes: (0..pages).map(|i| PageHash::of(&i.to_le_bytes())).collect(),
            }],
        }],
    };
    let runs: Vec<_> = pool::pool_libs(&m).iter().map(|l| (l.addr, l.pages)).collect();
    assert_eq!(runs, vec![(0x400000, 512), (0x600000, 512), (0x800000, 3)]);
}
