//! Reading one version's object into a symbolic model: nodes (functions,
//! named data, anonymous data) and relocations whose targets are names or
//! contents rather than section offsets.

use crate::DeltaError;
use object::build::elf::{Builder, SectionData, SectionId, SymbolId};
use object::build::Id;
use object::elf;
use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

/// What a node is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A function: one whole code section (its function symbols in `syms`).
    Func {
        /// Originally global/weak (visible to other libraries).
        global: bool,
        /// The function symbols defined in the section (aliases included).
        syms: Vec<SymbolId>,
    },
    /// A named data object, matched across versions by (globalized) name.
    Data {
        /// Originally global/weak.
        global: bool,
        /// Its symbol (None for a synthetic node covering a symbol-less
        /// writable section).
        sym: Option<SymbolId>,
    },
    /// Anonymous data compared and copied by content: a string or constant
    /// of a merge section, a symbol-less read-only section (jump tables), or
    /// a read-only local object with a compiler-numbered name (`CSWTCH.12`,
    /// `__func__.3`).
    Anon,
}

/// A relocation target, symbolically.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Tgt {
    /// The entry of a library function (global name): goes through its
    /// trampoline.
    Tramp(String),
    /// A specific instance of a function (an interior address or a
    /// non-entry offset): node index.
    Inst(usize),
    /// Named data: node index.
    Data(usize),
    /// Anonymous data: node index.
    Anon(usize),
    /// A symbol outside the library (undefined or common): name and
    /// whether the reference was weak.
    Ext(String, bool),
    /// Anything else (absolute symbols, non-allocated sections).
    Other(String),
}

/// One relocation of a node, canonical.
#[derive(Debug, Clone)]
pub(crate) struct CRel {
    /// Offset from the node's start.
    pub off: u64,
    /// `R_X86_64_*`.
    pub r_type: u32,
    /// Target.
    pub tgt: Tgt,
    /// Addend relative to the target (function entry, node start, section
    /// start for `Inst`, or the raw addend for `Ext`/`Other`).
    pub addend: i64,
}

/// A function, data object or anonymous datum of one version.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    pub kind: Kind,
    /// Globalized name (functions and named data); a descriptive name for
    /// anonymous nodes.
    pub name: String,
    /// Original (pre-globalization) name.
    pub orig: String,
    pub sec: SectionId,
    pub start: u64,
    pub size: u64,
    pub relocs: Vec<CRel>,
    /// Local signature (content and symbolic relocations); for anonymous
    /// nodes this is also their identity.
    pub sig: u64,
}

/// How a section of the input is treated.
#[derive(Debug, Clone)]
pub(crate) enum SecKind {
    Func(usize),
    /// (start, size, node) sorted by start.
    Data(Vec<(u64, u64, usize)>),
    /// Merge section entries (start, len, node), sorted.
    Merge(Vec<(u64, u64, usize)>),
    Ignore,
}

/// One version of the library.
pub(crate) struct Version<'d> {
    pub label: String,
    pub path: PathBuf,
    pub b: Builder<'d>,
    pub nodes: Vec<Node>,
    pub sec_kind: Vec<SecKind>,
    /// Globalized name of each defined function/data symbol (by index).
    pub gname: HashMap<usize, String>,
    /// Symbol index → node (for defined function/data symbols).
    pub sym_node: HashMap<usize, usize>,
}

pub(crate) fn err(path: &Path, msg: impl Into<String>) -> DeltaError {
    DeltaError::BadObject { path: path.to_path_buf(), msg: msg.into() }
}

/// Is `r_type` PC-relative (the addend then includes the distance from
/// the field to the end of the instruction, -4 for the usual forms).
pub(crate) fn is_pcrel(t: u32) -> bool {
    matches!(
        t,
        elf::R_X86_64_PC32
            | elf::R_X86_64_PLT32
            | elf::R_X86_64_PC16
            | elf::R_X86_64_PC8
            | elf::R_X86_64_PC64
            | elf::R_X86_64_GOTPCREL
            | elf::R_X86_64_GOTPCRELX
            | elf::R_X86_64_REX_GOTPCRELX
            | elf::R_X86_64_GOTPC32
    )
}

/// GOT-indirect: the addend applies to the GOT slot, not the symbol.
pub(crate) fn is_got(t: u32) -> bool {
    matches!(
        t,
        elf::R_X86_64_GOT32 | elf::R_X86_64_GOTPCREL | elf::R_X86_64_GOTPCRELX | elf::R_X86_64_REX_GOTPCRELX | elf::R_X86_64_GOTPCREL64 | elf::R_X86_64_GOT64
    )
}

/// Width of the relocated field, zeroed before hashing.
pub(crate) fn field_len(t: u32) -> usize {
    match t {
        elf::R_X86_64_64
        | elf::R_X86_64_PC64
        | elf::R_X86_64_GOTOFF64
        | elf::R_X86_64_DTPOFF64
        | elf::R_X86_64_TPOFF64
        | elf::R_X86_64_DTPMOD64
        | elf::R_X86_64_GOT64
        | elf::R_X86_64_GOTPCREL64
        | elf::R_X86_64_SIZE64 => 8,
        elf::R_X86_64_16 | elf::R_X86_64_PC16 => 2,
        elf::R_X86_64_8 | elf::R_X86_64_PC8 => 1,
        elf::R_X86_64_NONE => 0,
        _ => 4,
    }
}

/// Read-only local object whose name GCC numbered (`name.123`): its number
/// is not stable across versions, so it is compared by content.
fn numbered(name: &str) -> bool {
    match name.rsplit_once('.') {
        Some((a, n)) => !a.is_empty() && !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()),
        None => false,
    }
}

/// `s` with every character other than ASCII letters, digits and `_`
/// replaced by `_`, so it can be part of a symbol name.
pub(crate) fn sanitize(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect()
}

fn is_alloc_data_type(t: u32) -> bool {
    t == elf::SHT_PROGBITS || t == elf::SHT_NOBITS
}

/// Should relocations in this section be rewritten (allocated, not unwind
/// tables or other non-program data)?
pub(crate) fn rewritable_section(name: &[u8], sh_type: u32, sh_flags: u64) -> bool {
    sh_flags & u64::from(elf::SHF_ALLOC) != 0 && sh_type != elf::SHT_X86_64_UNWIND && !name.starts_with(b".eh_frame") && !name.starts_with(b".gcc_except_table")
}

pub(crate) fn section_bytes<'a>(data: &'a SectionData<'_>) -> Option<&'a [u8]> {
    match data {
        SectionData::Data(d) => Some(d.as_slice()),
        _ => None,
    }
}

/// Parse and model one version.
pub(crate) fn read_version<'d>(label: &str, path: &Path, data: &'d [u8], ns: &str) -> Result<Version<'d>, DeltaError> {
    match object::FileKind::parse(data) {
        Ok(object::FileKind::Elf64) => {}
        Ok(object::FileKind::Elf32) => return Err(err(path, "a 32-bit ELF object; shoal-delta needs ELF64 x86-64 relocatable objects")),
        Ok(k) => return Err(err(path, format!("not an ELF object (file kind {k:?})"))),
        Err(e) => return Err(err(path, format!("not an ELF object: {e}"))),
    }
    let b = Builder::read64(data).map_err(|e| err(path, format!("corrupt or unsupported ELF: {e}")))?;
    if b.endian != object::Endianness::Little {
        return Err(err(path, "big-endian ELF; expected x86-64"));
    }
    if b.header.e_machine != elf::EM_X86_64 {
        return Err(err(path, format!("machine {} is not x86-64 (EM_X86_64 = 62)", b.header.e_machine)));
    }
    if b.header.e_type != elf::ET_REL {
        return Err(err(path, format!("ELF type {} is not a relocatable object (ET_REL)", b.header.e_type)));
    }

    let nsec = b.sections.iter().map(|s| s.id().index() + 1).max().unwrap_or(0);
    let nsym = b.symbols.iter().map(|s| s.id().index() + 1).max().unwrap_or(0);

    // --- globalized names -------------------------------------------------
    // Locals following an STT_FILE symbol belong to that file; when the
    // object merges several files, local names are qualified by file.
    let nfiles = b.symbols.iter().filter(|s| s.st_type() == elf::STT_FILE).count();
    let mut cur_file = String::new();
    let mut gname: HashMap<usize, String> = HashMap::new();
    let mut used: HashMap<String, usize> = HashMap::new();
    for s in b.symbols.iter() {
        let t = s.st_type();
        if t == elf::STT_FILE {
            cur_file = sanitize(&String::from_utf8_lossy(&s.name));
            continue;
        }
        if s.section.is_none() || s.name.is_empty() || t == elf::STT_SECTION {
            continue;
        }
        let name = String::from_utf8_lossy(&s.name).into_owned();
        if s.st_bind() == elf::STB_LOCAL {
            if !matches!(t, elf::STT_FUNC | elf::STT_OBJECT | elf::STT_TLS | elf::STT_GNU_IFUNC) {
                continue;
            }
            let base = if nfiles > 1 { format!("__shoal_s_{ns}_{cur_file}_{name}") } else { format!("__shoal_s_{ns}_{name}") };
            let n = used.entry(base.clone()).or_insert(0);
            *n += 1;
            let g = if *n == 1 { base } else { format!("{base}__{n}") };
            gname.insert(s.id().index(), g);
        } else {
            gname.insert(s.id().index(), name);
        }
    }

    // --- sections -> nodes -------------------------------------------------
    let mut nodes: Vec<Node> = Vec::new();
    let mut sec_kind: Vec<SecKind> = vec![SecKind::Ignore; nsec];
    let mut sym_node: HashMap<usize, usize> = HashMap::new();
    // Defined symbols per section.
    let mut by_sec: Vec<Vec<SymbolId>> = vec![Vec::new(); nsec];
    for s in b.symbols.iter() {
        if let Some(sec) = s.section {
            if s.st_type() != elf::STT_SECTION && s.st_type() != elf::STT_FILE {
                by_sec[sec.index()].push(s.id());
            }
        }
    }
    for sec in b.sections.iter() {
        let i = sec.id().index();
        if !is_alloc_data_type(sec.sh_type) || sec.sh_flags & u64::from(elf::SHF_ALLOC) == 0 {
            continue;
        }
        if !rewritable_section(&sec.name, sec.sh_type, sec.sh_flags) {
            continue;
        }
        let size = match &sec.data {
            SectionData::Data(d) => d.len() as u64,
            SectionData::UninitializedData(n) => *n,
            _ => continue,
        };
        let secname = String::from_utf8_lossy(&sec.name).into_owned();
        if sec.sh_flags & u64::from(elf::SHF_EXECINSTR) != 0 {
            let funcs: Vec<SymbolId> =
                by_sec[i].iter().copied().filter(|id| matches!(b.symbols.get(*id).st_type(), elf::STT_FUNC | elf::STT_GNU_IFUNC)).collect();
            let mut starts: Vec<u64> = funcs.iter().map(|id| b.symbols.get(*id)).filter(|s| s.st_size > 0).map(|s| s.st_value).collect();
            starts.sort_unstable();
            starts.dedup();
            if starts.len() > 1 {
                return Err(err(path, format!("code section {secname} holds {} functions: compile with -ffunction-sections", starts.len())));
            }
            if funcs.is_empty() {
                if size == 0 {
                    continue;
                }
                return Err(err(path, format!("code section {secname} ({size} bytes) has no function symbol")));
            }
            // Primary: a global name if any, else the first.
            let mut syms = funcs.clone();
            syms.sort_by_key(|id| (b.symbols.get(*id).st_bind() == elf::STB_LOCAL, id.index()));
            let p = b.symbols.get(syms[0]);
            let global = syms.iter().any(|id| b.symbols.get(*id).st_bind() != elf::STB_LOCAL);
            let n = nodes.len();
            nodes.push(Node {
                kind: Kind::Func { global, syms: syms.clone() },
                name: gname[&p.id().index()].clone(),
                orig: String::from_utf8_lossy(&p.name).into_owned(),
                sec: sec.id(),
                start: 0,
                size,
                relocs: Vec::new(),
                sig: 0,
            });
            for s in &syms {
                sym_node.insert(s.index(), n);
            }
            sec_kind[i] = SecKind::Func(n);
        } else if sec.sh_flags & u64::from(elf::SHF_MERGE) != 0 && sec.sh_type == elf::SHT_PROGBITS {
            let d = section_bytes(&sec.data).unwrap_or(&[]);
            if d.is_empty() {
                continue;
            }
            let mut ents = Vec::new();
            if sec.sh_flags & u64::from(elf::SHF_STRINGS) != 0 {
                let es = sec.sh_entsize.max(1) as usize;
                let mut p = 0usize;
                while p < d.len() {
                    // A string ends with an entsize-wide NUL.
                    let mut q = p;
                    while q + es <= d.len() && d[q..q + es].iter().any(|&c| c != 0) {
                        q += es;
                    }
                    let end = (q + es).min(d.len());
                    ents.push((p as u64, (end - p) as u64));
                    p = end;
                }
            } else {
                let es = sec.sh_entsize.max(1);
                let mut p = 0u64;
                while p < size {
                    ents.push((p, es.min(size - p)));
                    p += es;
                }
            }
            let mut list = Vec::new();
            for (k, (st, len)) in ents.into_iter().enumerate() {
                let n = nodes.len();
                nodes.push(Node {
                    kind: Kind::Anon,
                    name: format!("{secname}#{k}"),
                    orig: String::new(),
                    sec: sec.id(),
                    start: st,
                    size: len,
                    relocs: Vec::new(),
                    sig: 0,
                });
                list.push((st, len, n));
            }
            sec_kind[i] = SecKind::Merge(list);
        } else {
            let objs: Vec<SymbolId> = by_sec[i]
                .iter()
                .copied()
                .filter(|id| {
                    let s = b.symbols.get(*id);
                    matches!(s.st_type(), elf::STT_OBJECT | elf::STT_TLS) || (s.st_type() == elf::STT_NOTYPE && s.st_size > 0)
                })
                .collect();
            let writable = sec.sh_flags & u64::from(elf::SHF_WRITE) != 0;
            let mut list = Vec::new();
            if objs.is_empty() {
                if size == 0 {
                    continue;
                }
                let n = nodes.len();
                let kind = if writable { Kind::Data { global: false, sym: None } } else { Kind::Anon };
                let name = if writable { format!("__shoal_s_{ns}_sec{}", sanitize(&secname)) } else { secname.clone() };
                nodes.push(Node { kind, name, orig: secname.clone(), sec: sec.id(), start: 0, size, relocs: Vec::new(), sig: 0 });
                list.push((0, size, n));
            } else {
                for id in objs {
                    let s = b.symbols.get(id);
                    let orig = String::from_utf8_lossy(&s.name).into_owned();
                    let local = s.st_bind() == elf::STB_LOCAL;
                    let anon = local && !writable && numbered(&orig);
                    let n = nodes.len();
                    let name = gname.get(&id.index()).cloned().unwrap_or_else(|| format!("__shoal_s_{ns}_{}", sanitize(&orig)));
                    nodes.push(Node {
                        kind: if anon { Kind::Anon } else { Kind::Data { global: !local, sym: Some(id) } },
                        name,
                        orig,
                        sec: sec.id(),
                        start: s.st_value,
                        size: s.st_size,
                        relocs: Vec::new(),
                        sig: 0,
                    });
                    sym_node.insert(id.index(), n);
                    list.push((s.st_value, s.st_size, n));
                }
                list.sort_by_key(|e| (e.0, e.2));
            }
            sec_kind[i] = SecKind::Data(list);
        }
    }
    let _ = nsym;

    let mut v = Version { label: label.to_string(), path: path.to_path_buf(), b, nodes, sec_kind, gname, sym_node };

    // --- relocations ------------------------------------------------------
    let mut per_node: Vec<Vec<CRel>> = vec![Vec::new(); v.nodes.len()];
    for rs in v.b.sections.iter() {
        let SectionData::Relocation(rels) = &rs.data else {
            continue;
        };
        let Some(target) = rs.sh_info_section else {
            continue;
        };
        let ts = v.b.sections.get(target);
        let exec = ts.sh_flags & u64::from(elf::SHF_EXECINSTR) != 0;
        let kind = v.sec_kind[target.index()].clone();
        for r in rels {
            let owner = match &kind {
                SecKind::Func(n) => Some(*n),
                SecKind::Data(list) | SecKind::Merge(list) => {
                    list.iter().filter(|(st, sz, _)| r.r_offset >= *st && r.r_offset < st + sz.max(&1)).map(|e| e.2).next()
                }
                SecKind::Ignore => None,
            };
            let Some(owner) = owner else { continue };
            let (tgt, addend) = v.resolve(r.symbol, r.r_type, r.r_addend, exec);
            let start = v.nodes[owner].start;
            per_node[owner].push(CRel { off: r.r_offset - start, r_type: r.r_type, tgt, addend });
        }
    }
    for (n, mut rl) in per_node.into_iter().enumerate() {
        rl.sort_by_key(|r| (r.off, r.r_type));
        v.nodes[n].relocs = rl;
    }
    v.stabilize_numbered_names();
    v.compute_sigs();
    Ok(v)
}

impl<'d> Version<'d> {
    /// Writable locals whose names GCC numbers (`dummy.75`, function-static
    /// variables) get a name that does not depend on the number, so that an
    /// unrelated insertion elsewhere in the file does not make them (and
    /// every function using them) look new: `<name>.s` when the object has
    /// only one `<name>.N`, else `<name>.in.<function>` when exactly one
    /// function references it; otherwise the numbered name stays.
    fn stabilize_numbered_names(&mut self) {
        let mut groups: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, n) in self.nodes.iter().enumerate() {
            if let Kind::Data { global: false, sym: Some(_) } = n.kind {
                if numbered(&n.orig) && n.name.ends_with(&n.orig) {
                    let base = n.orig.rsplit_once('.').map(|x| x.0).unwrap_or("").to_string();
                    groups.entry(base).or_default().push(i);
                }
            }
        }
        if groups.is_empty() {
            return;
        }
        let mut users: HashMap<usize, Vec<usize>> = HashMap::new();
        for (i, n) in self.nodes.iter().enumerate() {
            if matches!(n.kind, Kind::Func { .. }) {
                for r in &n.relocs {
                    if let Tgt::Data(t) = r.tgt {
                        let u = users.entry(t).or_default();
                        if !u.contains(&i) {
                            u.push(i);
                        }
                    }
                }
            }
        }
        let mut taken: std::collections::HashSet<String> = self.nodes.iter().map(|n| n.name.clone()).collect();
        let mut renames = Vec::new();
        for (base, list) in &groups {
            for &i in list {
                let n = &self.nodes[i];
                let prefix = &n.name[..n.name.len() - n.orig.len()];
                let new = if list.len() == 1 {
                    format!("{prefix}{base}.s")
                } else if let Some([f]) = users.get(&i).map(|v| v.as_slice()) {
                    format!("{prefix}{base}.in.{}", self.nodes[*f].orig)
                } else {
                    continue;
                };
                if taken.insert(new.clone()) {
                    renames.push((i, new));
                }
            }
        }
        for (i, new) in renames {
            if let Kind::Data { sym: Some(s), .. } = self.nodes[i].kind {
                self.gname.insert(s.index(), new.clone());
            }
            self.nodes[i].name = new;
        }
    }

    /// Resolve one relocation target symbolically.
    pub(crate) fn resolve(&self, sym: Option<SymbolId>, r_type: u32, a: i64, exec: bool) -> (Tgt, i64) {
        let Some(id) = sym else {
            return (Tgt::Other("<none>".into()), a);
        };
        let s = self.b.symbols.get(id);
        let name = String::from_utf8_lossy(&s.name).into_owned();
        let Some(sec) = s.section else {
            if s.st_shndx == elf::SHN_UNDEF || s.st_shndx == elf::SHN_COMMON {
                return (Tgt::Ext(name, s.st_bind() == elf::STB_WEAK), a);
            }
            return (Tgt::Other(format!("{name}@{}", s.st_shndx)), a);
        };
        let is_sec = s.st_type() == elf::STT_SECTION;
        let val = if is_sec { 0 } else { s.st_value as i64 };
        let bias = if is_pcrel(r_type) && exec { -4 } else { 0 };
        let o = val + a - bias;
        match &self.sec_kind[sec.index()] {
            SecKind::Func(n) => {
                let node = &self.nodes[*n];
                let Kind::Func { syms, .. } = &node.kind else { unreachable!() };
                // The function symbol named, or the primary one.
                let fsym = if !is_sec && self.sym_node.get(&id.index()) == Some(n) { id } else { syms[0] };
                let entry = self.b.symbols.get(fsym).st_value as i64;
                let g = self.gname[&fsym.index()].clone();
                if is_got(r_type) && !is_sec {
                    return (Tgt::Tramp(g), a);
                }
                if o == entry {
                    (Tgt::Tramp(g), val + a - entry)
                } else {
                    (Tgt::Inst(*n), val + a)
                }
            }
            SecKind::Data(list) => {
                let n = if let (false, Some(n)) = (is_sec, self.sym_node.get(&id.index())) { *n } else { pick(list, if is_sec { o } else { val }) };
                let st = self.nodes[n].start as i64;
                let t = if self.nodes[n].kind == Kind::Anon { Tgt::Anon(n) } else { Tgt::Data(n) };
                (t, val + a - st)
            }
            SecKind::Merge(list) => {
                let n = pick(list, if is_sec { o } else { val });
                let st = self.nodes[n].start as i64;
                (Tgt::Anon(n), val + a - st)
            }
            SecKind::Ignore => {
                let sn = String::from_utf8_lossy(&self.b.sections.get(sec).name).into_owned();
                (Tgt::Other(if is_sec { sn } else { format!("{sn}:{name}") }), val + a)
            }
        }
    }

    fn hash_tgt(&self, t: &Tgt, h: &mut DefaultHasher, keys: &[u64]) {
        match t {
            Tgt::Tramp(g) => (0u8, g).hash(h),
            Tgt::Inst(n) => (1u8, &self.nodes[*n].name).hash(h),
            Tgt::Data(n) => (2u8, &self.nodes[*n].name).hash(h),
            Tgt::Anon(n) => (3u8, keys[*n]).hash(h),
            Tgt::Ext(s, w) => (4u8, s, w).hash(h),
            Tgt::Other(s) => (5u8, s).hash(h),
        }
    }

    fn node_bytes(&self, n: usize) -> Option<Vec<u8>> {
        let node = &self.nodes[n];
        let sec = self.b.sections.get(node.sec);
        let d = section_bytes(&sec.data)?;
        let st = (node.start as usize).min(d.len());
        let end = ((node.start + node.size) as usize).min(d.len());
        let mut v = d[st..end].to_vec();
        for r in &node.relocs {
            let o = r.off as usize;
            let l = field_len(r.r_type);
            if o + l <= v.len() {
                v[o..o + l].iter_mut().for_each(|c| *c = 0);
            }
        }
        Some(v)
    }

    fn sig_of(&self, n: usize, keys: &[u64]) -> u64 {
        let node = &self.nodes[n];
        let sec = self.b.sections.get(node.sec);
        let mut h = DefaultHasher::new();
        let kind_tag = match node.kind {
            Kind::Func { .. } => 0u8,
            Kind::Data { .. } => 1,
            Kind::Anon => 2,
        };
        // Merge flags don't matter for content; W/X/TLS/NOBITS do.
        let fl = sec.sh_flags & u64::from(elf::SHF_WRITE | elf::SHF_EXECINSTR | elf::SHF_TLS | elf::SHF_ALLOC);
        (kind_tag, fl, sec.sh_type == elf::SHT_NOBITS, node.size).hash(&mut h);
        // Alignment matters for code and data placement.
        sec.sh_addralign.hash(&mut h);
        self.node_bytes(n).hash(&mut h);
        for r in &node.relocs {
            (r.off, r.r_type, r.addend).hash(&mut h);
            self.hash_tgt(&r.tgt, &mut h, keys);
        }
        h.finish()
    }

    fn compute_sigs(&mut self) {
        // Anonymous nodes first (they can reference each other: resolve in
        // dependency order, cycles broken by a placeholder key).
        let n = self.nodes.len();
        let mut keys = vec![0u64; n];
        let mut state = vec![0u8; n]; // 0 new, 1 in progress, 2 done
        fn visit(v: &Version<'_>, i: usize, keys: &mut Vec<u64>, state: &mut Vec<u8>) {
            if state[i] != 0 {
                return;
            }
            state[i] = 1;
            for r in &v.nodes[i].relocs {
                if let Tgt::Anon(j) = r.tgt {
                    visit(v, j, keys, state);
                }
            }
            keys[i] = v.sig_of(i, keys);
            state[i] = 2;
        }
        for i in 0..n {
            if self.nodes[i].kind == Kind::Anon {
                visit(self, i, &mut keys, &mut state);
            }
        }
        let sigs: Vec<u64> = (0..n).map(|i| self.sig_of(i, &keys)).collect();
        for (node, s) in self.nodes.iter_mut().zip(sigs) {
            node.sig = s;
        }
    }
}

/// The node of a sorted (start, size, node) list containing offset `o`
/// (an end pointer belongs to the object it ends; before the first, the
/// first).
fn pick(list: &[(u64, u64, usize)], o: i64) -> usize {
    let mut best = list[0].2;
    for &(st, sz, n) in list {
        if (st as i64) <= o {
            best = n;
            if o < (st + sz) as i64 {
                return n;
            }
        }
    }
    best
}
