//! Per-library trampoline tables for the `aslr` policy (docs/design.md "Layout policies"; Spacer-Δ,
//! section V: "ASLR approaches require a dedicated trampoline table for each
//! library").
//!
//! Under `aslr` every image places its libraries in its own random order
//! with random gaps, so a call from one library into another has a
//! different displacement in every image. To keep a library's code pages
//! identical anyway, each library gets its own table (library `tpl-NAME`,
//! placed by `crate::workspace` at a fixed distance after the library's
//! code) and every call it makes into *another* library goes through it:
//! the table entry `__shoal_tpl_NAME__f: jmp f` is the only byte that
//! depends on where `f` landed.
//!
//! The redirection is done on the relocatable inputs, before linking, like
//! the Δ-versioner's: in each object of library NAME, the undefined
//! symbol `f` (a function that some other library defines and NAME does
//! not) is renamed `__shoal_tpl_NAME__f` with `objcopy --redefine-syms`,
//! which retargets every relocation naming it. Only undefined symbols are
//! renamed, so no definition moves; weak undefined references are left
//! alone (their "is it linked?" test must keep its meaning). The shared
//! archives are rewritten as copies with the same member names, so the
//! link's input patterns and the `-u` member forcing still apply.
//!
//! What stays position dependent, and is measured rather than hidden: data
//! references between libraries and absolute addresses (shoal compiles
//! with `-fno-pie`, as Unikraft does), so pages holding them differ between
//! images — the paper's "non-shareable (read-only) data".

use crate::link::{default_shared_inputs, SharedInputs};
use crate::setup::kernel_components;
use crate::{run, Paths, Result, ToolchainError};
use object::{Object, ObjectSymbol};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The symbol of `f`'s entry in `library`'s table.
pub fn entry_symbol(library: &str, f: &str) -> String {
    format!("__shoal_tpl_{}__{f}", library.replace('-', "_"))
}

/// The routed inputs of a workspace.
#[derive(Clone, Debug)]
pub struct Routing {
    /// Copies of libc (with its start files), the kernel and libgcc.
    pub shared: SharedInputs,
    /// Original object → its copy, for the objects of versioned libraries
    /// and of the application.
    pub objects: BTreeMap<PathBuf, PathBuf>,
    /// Library → the functions of other libraries it calls (its table).
    pub tables: BTreeMap<String, BTreeSet<String>>,
    /// Function → the libraries that define it.
    pub defs: BTreeMap<String, BTreeSet<String>>,
}

/// One object file's symbols: defined functions, strong undefined names.
struct Unit {
    library: String,
    defined: Vec<String>,
    undefined: Vec<String>,
    /// Whether its references feed the tables (it is linked).
    linked: bool,
}

/// Whether `s` is defined in an executable section.
fn in_code(file: &object::File<'_>, s: &object::Symbol<'_, '_>) -> bool {
    use object::{Object, ObjectSection, ObjectSymbol};
    s.section_index().and_then(|i| file.section_by_index(i).ok()).is_some_and(|sec| sec.kind() == object::SectionKind::Text)
}

fn scan(path: &Path, data: &[u8], library: &str, linked: bool) -> Result<Unit> {
    let file = object::File::parse(data).map_err(|e| ToolchainError::Input(path.to_path_buf(), format!("not an object file: {e}")))?;
    let mut unit = Unit { library: library.to_string(), defined: Vec::new(), undefined: Vec::new(), linked };
    for s in file.symbols() {
        let Ok(name) = s.name() else { continue };
        if name.is_empty() || s.is_local() {
            continue;
        }
        if s.is_undefined() {
            if !s.is_weak() {
                unit.undefined.push(name.to_string());
            }
        } else if s.kind() == object::SymbolKind::Text || (s.kind() == object::SymbolKind::Unknown && in_code(&file, &s)) {
            // Hand-written assembly often leaves out `.type f, @function`
            // (musl's `_start`): a global label in code is a function too.
            unit.defined.push(name.to_string());
        }
    }
    Ok(unit)
}

/// The member names of an archive with their bytes.
fn members(path: &Path, data: &[u8]) -> Result<Vec<(String, Vec<u8>)>> {
    let ar = object::read::archive::ArchiveFile::parse(data).map_err(|e| ToolchainError::Input(path.to_path_buf(), format!("not an archive: {e}")))?;
    let mut out = Vec::new();
    for m in ar.members() {
        let m = m.map_err(|e| ToolchainError::Input(path.to_path_buf(), format!("bad archive member: {e}")))?;
        let bytes = m.data(data).map_err(|e| ToolchainError::Input(path.to_path_buf(), format!("bad archive member: {e}")))?;
        out.push((String::from_utf8_lossy(m.name()).to_string(), bytes.to_vec()));
    }
    Ok(out)
}

/// Removes GOT references where a PC-relative one says the same. rustc
/// emits plain `R_X86_64_GOTPCREL` for `call *f@GOTPCREL(%rip)` and
/// `mov v@GOTPCREL(%rip), %reg`, which ld must leave going through the
/// image's one GOT, at a distance from the library that changes with its
/// random position: such indirect calls and jumps (`ff 15`, `ff 25`) are
/// marked relaxable (`R_X86_64_GOTPCRELX`), which ld turns into
/// `addr32 call f`. A 64-bit load of a GOT entry (`REX.W 8b /r`,
/// RIP-relative; rustc's, and gcc's `-fPIE` loads of symbols it cannot
/// assume local) becomes the `lea` of the symbol (`REX.W 8d /r` with
/// `R_X86_64_PC32`) here, because ld, linking a non-PIE executable, would
/// relax it to an *absolute* `mov $v, %reg`. Arithmetic with a GOT entry
/// (`add v@GOTPCREL(%rip), %rcx`: core's Unicode tables) is marked
/// `R_X86_64_REX_GOTPCRELX`, which ld relaxes to the same operation with
/// the symbol's address as an immediate: otherwise the code would depend on
/// where in the GOT the entry lands, which moves with the other libraries'
/// GOT entries. A static link resolves every symbol inside the image, so
/// the address is the same; undefined weak symbols (address 0) keep their
/// GOT entry. Anything else is left alone. Returns how many
/// relocations were changed.
pub fn relax_got_relocations(path: &Path, data: &mut [u8]) -> Result<usize> {
    use object::elf;
    use object::read::elf::{FileHeader, SectionHeader};
    let bad = |m: &str| ToolchainError::Input(path.to_path_buf(), m.to_string());
    let endian = object::Endianness::Little;
    let mut patches = Vec::new();
    {
        let header = elf::FileHeader64::<object::Endianness>::parse(&*data).map_err(|_| bad("not an ELF64 object"))?;
        let sections = header.section_headers(endian, &*data).map_err(|_| bad("bad section headers"))?;
        for rela in sections.iter().filter(|s| s.sh_type(endian) == elf::SHT_RELA) {
            let Some(target) = sections.get(rela.sh_info(endian) as usize) else { continue };
            if target.sh_type(endian) != elf::SHT_PROGBITS {
                continue;
            }
            let (t_off, t_size) = (target.sh_offset(endian), target.sh_size(endian));
            let (off, size) = (rela.sh_offset(endian) as usize, rela.sh_size(endian) as usize);
            let entries = data.get(off..off.saturating_add(size)).ok_or_else(|| bad("relocations outside the file"))?;
            let symtab = sections.get(rela.sh_link(endian) as usize).ok_or_else(|| bad("relocations without a symbol table"))?;
            let sym_off = symtab.sh_offset(endian) as usize;
            let weak_undefined = |index: u64| -> bool {
                let at = sym_off + index as usize * 24;
                match data.get(at..at + 24) {
                    Some(sym) => sym[4] >> 4 == elf::STB_WEAK && u16::from_le_bytes([sym[6], sym[7]]) == elf::SHN_UNDEF,
                    None => true,
                }
            };
            for (i, e) in entries.chunks_exact(24).enumerate() {
                let r_offset = u64::from_le_bytes(e[0..8].try_into().unwrap_or_default());
                let r_info = u64::from_le_bytes(e[8..16].try_into().unwrap_or_default());
                let r_type = (r_info & 0xffff_ffff) as u32;
                if !matches!(r_type, elf::R_X86_64_GOTPCREL | elf::R_X86_64_GOTPCRELX | elf::R_X86_64_REX_GOTPCRELX) || r_offset < 2 || r_offset + 4 > t_size {
                    continue;
                }
                let at = (t_off + r_offset) as usize;
                let Some(code) = data.get(at - 2..at) else { continue };
                // The byte before the opcode, if the section has one (a
                // REX prefix when the instruction has one).
                let prefix = if r_offset >= 3 { data.get(at - 3).copied().unwrap_or(0) } else { 0 };
                let (new, lea) = match (prefix, code[0], code[1]) {
                    (_, 0xff, 0x15 | 0x25) if r_type == elf::R_X86_64_GOTPCREL => (elf::R_X86_64_GOTPCRELX, false),
                    (rex, 0x8b, modrm) if rex & 0xf8 == 0x48 && modrm & 0xc7 == 0x05 && !weak_undefined(r_info >> 32) => (elf::R_X86_64_PC32, true),
                    // add/or/adc/sbb/and/sub/xor/cmp of a GOT entry into a
                    // 64-bit register (`REX.W op /r`, RIP-relative): no
                    // `lea` form exists; marked relaxable, ld turns it into
                    // the same operation on the symbol's address as an
                    // immediate (`REX.W 81 /n imm32`), which for a static
                    // image below 2 GiB is exact.
                    (rex, 0x03 | 0x0b | 0x13 | 0x1b | 0x23 | 0x2b | 0x33 | 0x3b, modrm)
                        if rex & 0xf8 == 0x48 && modrm & 0xc7 == 0x05 && r_type == elf::R_X86_64_GOTPCREL && !weak_undefined(r_info >> 32) =>
                    {
                        (elf::R_X86_64_REX_GOTPCRELX, false)
                    }
                    _ => continue,
                };
                patches.push((off + i * 24 + 8, (r_info & !0xffff_ffff) | u64::from(new), lea.then_some(at - 2)));
            }
        }
    }
    for (at, info, opcode) in &patches {
        data[*at..*at + 8].copy_from_slice(&info.to_le_bytes());
        if let Some(op) = opcode {
            data[*op] = 0x8d;
        }
    }
    Ok(patches.len())
}

/// [`relax_got_relocations`] on every ELF member of the archive `data`, in
/// place: only relocation types and opcodes change, never a size or a
/// symbol, so the archive's layout and symbol index stay valid. Returns how
/// many relocations were changed.
pub fn relax_archive(path: &Path, data: &mut [u8]) -> Result<usize> {
    let ranges: Vec<(usize, usize)> = {
        let ar = object::read::archive::ArchiveFile::parse(&*data).map_err(|e| ToolchainError::Input(path.to_path_buf(), format!("not an archive: {e}")))?;
        let mut ranges = Vec::new();
        for m in ar.members() {
            let m = m.map_err(|e| ToolchainError::Input(path.to_path_buf(), format!("bad archive member: {e}")))?;
            let (off, size) = m.file_range();
            ranges.push((off as usize, size as usize));
        }
        ranges
    };
    let mut changed = 0;
    for (off, size) in ranges {
        let Some(member) = data.get_mut(off..off.saturating_add(size)) else {
            return Err(ToolchainError::Input(path.to_path_buf(), "an archive member lies outside the file".into()));
        };
        if member.starts_with(b"\x7fELF") {
            // Members are only 2-byte aligned in an archive; the ELF reader
            // wants its headers aligned, so the member is patched in a copy.
            let mut copy = member.to_vec();
            let n = relax_got_relocations(path, &mut copy)?;
            if n > 0 {
                member.copy_from_slice(&copy);
                changed += n;
            }
        }
    }
    Ok(changed)
}

/// Writes `input` (an archive) to `output` with [`relax_archive`] applied;
/// `output` is replaced atomically.
pub fn write_relaxed_archive(input: &Path, output: &Path) -> Result<usize> {
    let mut bytes = read(input)?;
    let changed = relax_archive(input, &mut bytes)?;
    let tmp = output.with_extension("a.tmp");
    write(&tmp, &bytes)?;
    std::fs::rename(&tmp, output).map_err(|e| ToolchainError::Io(output.to_path_buf(), e))?;
    Ok(changed)
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| ToolchainError::Io(path.to_path_buf(), e))
}

fn write(path: &Path, data: &[u8]) -> Result<()> {
    std::fs::write(path, data).map_err(|e| ToolchainError::Io(path.to_path_buf(), e))
}

/// Copies `input` to `output`, renaming `names` to their entries in
/// `library`'s table. `strip_bitcode` drops the LLVM bitcode that rustc
/// embeds in the objects of precompiled Rust libraries (`.llvmbc`): with it,
/// binutils hands the object to the LLVM plugin, which cannot read this
/// rustc's bitcode, and `ar` would then index none of its symbols.
fn redefine(dir: &Path, input: &Path, output: &Path, library: &str, names: &BTreeSet<String>, strip_bitcode: bool) -> Result<()> {
    if names.is_empty() && !strip_bitcode {
        std::fs::copy(input, output).map_err(|e| ToolchainError::Io(output.to_path_buf(), e))?;
        return Ok(());
    }
    let mut cmd = Command::new("objcopy");
    if !names.is_empty() {
        let list = dir.join(format!("redefine-{}.txt", library.replace('-', "_")));
        let text: String = names.iter().map(|f| format!("{f} {}\n", entry_symbol(library, f))).collect();
        write(&list, text.as_bytes())?;
        cmd.arg(format!("--redefine-syms={}", list.display()));
    }
    if strip_bitcode {
        cmd.args(["--remove-section=.llvmbc", "--remove-section=.llvmcmd"]);
    }
    run(&format!("objcopy (trampoline table of {library})"), cmd.arg(input).arg(output))
}

/// Routes every library's calls into other libraries through its own
/// table. `owned` lists the libraries that are not shared (versioned
/// libraries, the application) with their objects; `taken` the
/// (archive, member) pairs the images link from the shared archives
/// (`shoal-libc.a`, `shoal-kernel.a`, `shoal-libgcc.a`), so that tables
/// hold only what linked code calls. Writes the copies under `dir`.
pub fn route(paths: &Paths, dir: &Path, owned: &[(String, Vec<PathBuf>)], taken: &BTreeSet<(String, String)>) -> Result<Routing> {
    std::fs::create_dir_all(dir).map_err(|e| ToolchainError::Io(dir.to_path_buf(), e))?;
    let orig = default_shared_inputs(paths)?;
    let comps = kernel_components(&orig.kernel)?;
    let kernel_library =
        |member: &str| -> String { comps.iter().find(|c| member.starts_with(&format!("shoal_{c}-"))).cloned().unwrap_or_else(|| "krt".into()) };
    let is_taken = |archive: &str, member: &str| taken.contains(&(archive.to_string(), member.to_string()));

    // Every unit, with the library it belongs to.
    let mut units = Vec::new();
    for crt in &orig.crt {
        units.push(scan(crt, &read(crt)?, "libc", true)?);
    }
    let libc = read(&orig.libc)?;
    let libc_members = members(&orig.libc, &libc)?;
    for (name, bytes) in &libc_members {
        units.push(scan(&orig.libc, bytes, "libc", is_taken("shoal-libc.a", name))?);
    }
    let kernel = read(&orig.kernel)?;
    let kernel_members = members(&orig.kernel, &kernel)?;
    for (name, bytes) in &kernel_members {
        units.push(scan(&orig.kernel, bytes, &kernel_library(name), is_taken("shoal-kernel.a", name))?);
    }
    let libgcc = read(&orig.libgcc)?;
    let libgcc_members = members(&orig.libgcc, &libgcc)?;
    for (name, bytes) in &libgcc_members {
        units.push(scan(&orig.libgcc, bytes, "libgcc", is_taken("shoal-libgcc.a", name))?);
    }
    let shared_units = units.len();
    for (library, objects) in owned {
        for o in objects {
            units.push(scan(o, &read(o)?, library, true)?);
        }
    }

    let mut defs: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for u in &units {
        for d in &u.defined {
            defs.entry(d.clone()).or_default().insert(u.library.clone());
        }
    }
    // What each library renames (all its units, linked or not, so that no
    // copy still names the original) and what its table holds (linked units).
    let mut renames: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut tables: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for u in &units {
        for f in &u.undefined {
            let Some(owners) = defs.get(f) else { continue };
            if owners.contains(&u.library) {
                continue;
            }
            renames.entry(u.library.clone()).or_default().insert(f.clone());
            if u.linked {
                tables.entry(u.library.clone()).or_default().insert(f.clone());
            }
        }
    }
    // A name is renamed in a unit only if that unit references it, and a
    // table entry exists only for linked references: keep the rename sets
    // to what the tables define, or a copy would name an entry no table has.
    for (lib, set) in renames.iter_mut() {
        let table = tables.get(lib).cloned().unwrap_or_default();
        set.retain(|f| table.contains(f));
    }
    let empty = BTreeSet::new();
    let names_of = |lib: &str| renames.get(lib).unwrap_or(&empty);

    // The copies: every unit has its GOT loads made PC-relative and its
    // calls into other libraries renamed; archives are rebuilt member by
    // member in the original order with the original names (`ar q` keeps
    // musl's duplicate member names).
    let copy = |what: &str| dir.join(what);
    let unit_copy = |sub: &Path, name: &str, bytes: &[u8], unit: &Unit, strip: bool| -> Result<PathBuf> {
        std::fs::create_dir_all(sub).map_err(|e| ToolchainError::Io(sub.to_path_buf(), e))?;
        let out = sub.join(name);
        let mut bytes = bytes.to_vec();
        relax_got_relocations(&out, &mut bytes)?;
        let mine: BTreeSet<String> = unit.undefined.iter().filter(|f| names_of(&unit.library).contains(*f)).cloned().collect();
        if mine.is_empty() && !strip {
            write(&out, &bytes)?;
        } else {
            let raw = sub.join(format!("{name}.in"));
            write(&raw, &bytes)?;
            redefine(sub, &raw, &out, &unit.library, &mine, strip)?;
        }
        Ok(out)
    };
    let mut next = 0;
    let mut crt = orig.crt.clone();
    for (i, c) in orig.crt.iter().enumerate() {
        let name = c.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
        crt[i] = unit_copy(&copy(&format!("crt/{i}")), &name, &read(c)?, &units[next], false)?;
        next += 1;
    }
    let mut archive = |out_name: &str, list: &[(String, Vec<u8>)], strip: bool| -> Result<PathBuf> {
        let mut files = Vec::new();
        for (i, (name, bytes)) in list.iter().enumerate() {
            files.push(unit_copy(&copy(&format!("{out_name}.d/{i}")), name, bytes, &units[next], strip)?);
            next += 1;
        }
        let out = copy(out_name);
        let _ = std::fs::remove_file(&out);
        run(&format!("ar (routed {out_name})"), Command::new("ar").arg("qcsD").arg(&out).args(&files))?;
        Ok(out)
    };
    let libc_out = archive("libc.a", &libc_members, false)?;
    // rustc embeds bitcode in the precompiled runtime's objects: dropped.
    let kernel_out = archive("libshoal_kernel.a", &kernel_members, true)?;
    let libgcc_out = archive("libgcc.a", &libgcc_members, false)?;

    let mut objects = BTreeMap::new();
    let mut i = shared_units;
    for (library, objs) in owned {
        for o in objs {
            debug_assert_eq!(&units[i].library, library);
            let name = o.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
            let out = unit_copy(&copy(&format!("objects/{}", i - shared_units)), &name, &read(o)?, &units[i], false)?;
            objects.insert(o.clone(), out);
            i += 1;
        }
    }
    Ok(Routing { shared: SharedInputs { crt, libc: libc_out, kernel: kernel_out, libgcc: libgcc_out }, objects, tables, defs })
}

#[cfg(test)]
mod tests {
    use super::*;
    use object::{ObjectSection, RelocationFlags};

    /// Assembles `src` as rustc's objects are: GOT references with the
    /// plain `R_X86_64_GOTPCREL` type (`-mrelax-relocations=no`).
    fn assemble(dir: &Path, src: &str) -> Vec<u8> {
        let s = dir.join("t.s");
        let o = dir.join("t.o");
        std::fs::write(&s, src).unwrap();
        let st = Command::new("as").args(["--64", "-mrelax-relocations=no", "-o"]).arg(&o).arg(&s).status().unwrap();
        assert!(st.success());
        std::fs::read(&o).unwrap()
    }

    fn relocations(data: &[u8]) -> Vec<(u64, u32)> {
        let file = object::File::parse(data).unwrap();
        let text = file.section_by_name(".text").unwrap();
        let mut v: Vec<(u64, u32)> = text
            .relocations()
            .map(|(off, r)| match r.flags() {
                RelocationFlags::Elf { r_type } => (off, r_type),
                _ => unreachable!(),
            })
            .collect();
        v.sort();
        v
    }

    #[test]
    fn got_calls_become_relaxable_and_got_loads_become_lea() {
        let dir = tempfile::tempdir().unwrap();
        let mut data = assemble(
            dir.path(),
            ".text\n.weak maybe\ncall *f@GOTPCREL(%rip)\njmp *g@GOTPCREL(%rip)\nmov v@GOTPCREL(%rip), %rax\nmov w@GOTPCREL(%rip), %r12\nmov maybe@GOTPCREL(%rip), %rbx\nadd v@GOTPCREL(%rip), %rcx\n",
        );
        let before = relocations(&data);
        assert!(before.iter().all(|&(_, t)| t == object::elf::R_X86_64_GOTPCREL), "{before:?}");
        let changed = relax_got_relocations(Path::new("t.o"), &mut data).unwrap();
        assert_eq!(changed, 5);
        let after = relocations(&data);
        use object::elf::{R_X86_64_GOTPCREL as GOT, R_X86_64_GOTPCRELX as X, R_X86_64_PC32 as PC, R_X86_64_REX_GOTPCRELX as RX};
        let types: Vec<u32> = after.iter().map(|&(_, t)| t).collect();
        // call, jmp: relaxable; two loads: lea + PC32; the weak symbol's
        // load keeps the GOT; the `add` is relaxable for ld.
        assert_eq!(types, vec![X, X, PC, PC, GOT, RX]);
        let file = object::File::parse(&*data).unwrap();
        let code = file.section_by_name(".text").unwrap().data().unwrap().to_vec();
        // mov v@GOTPCREL(%rip),%rax is at 12: 48 8b 05 → 48 8d 05.
        assert_eq!(&code[12..15], &[0x48, 0x8d, 0x05]);
        assert_eq!(&code[19..22], &[0x4c, 0x8d, 0x25]);
        // The weak one is still a load.
        assert_eq!(&code[26..29], &[0x48, 0x8b, 0x1d]);
    }

    #[test]
    fn archives_are_relaxed_in_place_and_keep_their_index() {
        let dir = tempfile::tempdir().unwrap();
        let obj = assemble(dir.path(), ".text\n.globl entry\nentry:\ncall *f@GOTPCREL(%rip)\nmov v@GOTPCREL(%rip), %rax\n");
        // An odd-sized first member puts the object at an offset that is
        // not 8-byte aligned, as in real archives.
        std::fs::write(dir.path().join("odd.txt"), b"abc").unwrap();
        std::fs::write(dir.path().join("t.o"), &obj).unwrap();
        let ar = dir.path().join("lib.a");
        let st = Command::new("ar").arg("qcs").arg(&ar).arg(dir.path().join("odd.txt")).arg(dir.path().join("t.o")).status().unwrap();
        assert!(st.success());
        let mut bytes = std::fs::read(&ar).unwrap();
        let len = bytes.len();
        assert_eq!(relax_archive(&ar, &mut bytes).unwrap(), 2);
        assert_eq!(bytes.len(), len);
        let parsed = object::read::archive::ArchiveFile::parse(&*bytes).unwrap();
        let symbols: Vec<String> = parsed.symbols().unwrap().unwrap().map(|s| String::from_utf8_lossy(s.unwrap().name()).into_owned()).collect();
        assert_eq!(symbols, ["entry"]);
        let member = parsed.members().nth(1).unwrap().unwrap();
        let types: Vec<u32> = relocations(member.data(&*bytes).unwrap().to_vec().as_slice()).into_iter().map(|(_, t)| t).collect();
        assert_eq!(types, [object::elf::R_X86_64_GOTPCRELX, object::elf::R_X86_64_PC32]);
        // Relaxing again changes nothing; garbage is refused with the path.
        assert_eq!(relax_archive(&ar, &mut bytes).unwrap(), 0);
        let err = relax_archive(&ar, &mut b"not an archive".to_vec()).unwrap_err().to_string();
        assert!(err.contains("lib.a") && err.contains("not an archive"), "{err}");
    }

    #[test]
    fn entry_symbols_are_valid_assembler_names() {
        assert_eq!(entry_symbol("sqlite-x", "malloc"), "__shoal_tpl_sqlite_x__malloc");
    }
}
