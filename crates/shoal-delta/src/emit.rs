//! Planning a delta (what changed) and writing base.o and delta-j.o.

use crate::model::{rewritable_section, section_bytes, Kind, Tgt, Version};
use crate::{DeltaError, DeltaInfo};
use object::build::elf::{Builder, SectionData, SectionId, SymbolId};
use object::build::Id;
use object::elf;
use std::collections::{BTreeSet, HashMap};
use std::path::Path;

/// Prefix of trampoline symbols.
pub const TPL_PREFIX: &str = "__shoal_tpl_";

/// The effective library of versions 1..j-1: per function its signature,
/// per named datum its signature and the symbol its current instance has.
#[derive(Default)]
pub(crate) struct Effective {
    pub funcs: HashMap<String, u64>,
    pub data: HashMap<String, (u64, String)>,
}

impl Effective {
    pub(crate) fn from_base(v: &Version<'_>) -> Self {
        let mut e = Effective::default();
        for n in &v.nodes {
            match n.kind {
                Kind::Func { .. } => {
                    e.funcs.insert(n.name.clone(), n.sig);
                }
                Kind::Data { .. } => {
                    e.data.insert(n.name.clone(), (n.sig, n.name.clone()));
                }
                Kind::Anon => {}
            }
        }
        e
    }
}

/// What version j contributes.
pub(crate) struct Plan {
    pub dirty: Vec<bool>,
    pub emit: Vec<bool>,
    pub new: Vec<bool>,
}

struct Uf(Vec<usize>);
impl Uf {
    fn find(&mut self, mut i: usize) -> usize {
        while self.0[i] != i {
            self.0[i] = self.0[self.0[i]];
            i = self.0[i];
        }
        i
    }
    fn union(&mut self, a: usize, b: usize) {
        let (a, b) = (self.find(a), self.find(b));
        if a != b {
            self.0[a.max(b)] = a.min(b);
        }
    }
}

pub(crate) fn plan(v: &Version<'_>, eff: &Effective) -> Plan {
    let n = v.nodes.len();
    let mut dirty = vec![false; n];
    let mut new = vec![false; n];
    for (i, node) in v.nodes.iter().enumerate() {
        match node.kind {
            Kind::Func { .. } => match eff.funcs.get(&node.name) {
                None => {
                    dirty[i] = true;
                    new[i] = true;
                }
                Some(s) => dirty[i] = *s != node.sig,
            },
            Kind::Data { .. } => match eff.data.get(&node.name) {
                None => {
                    dirty[i] = true;
                    new[i] = true;
                }
                Some((s, _)) => dirty[i] = *s != node.sig,
            },
            Kind::Anon => {}
        }
    }
    // Reverse edges through data references; units through instance
    // references (a function and its jump tables / cold part / anything
    // addressing its interior are replaced together).
    let mut rev: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut uf = Uf((0..n).collect());
    for (i, node) in v.nodes.iter().enumerate() {
        for r in &node.relocs {
            match r.tgt {
                Tgt::Data(t) | Tgt::Anon(t) => rev[t].push(i),
                Tgt::Inst(t) => uf.union(i, t),
                _ => {}
            }
        }
    }
    for (i, node) in v.nodes.iter().enumerate() {
        if node.kind == Kind::Anon && node.relocs.iter().any(|r| matches!(r.tgt, Tgt::Inst(_))) {
            for x in rev[i].clone() {
                uf.union(i, x);
            }
        }
    }
    let mut members: HashMap<usize, Vec<usize>> = HashMap::new();
    for i in 0..n {
        let r = uf.find(i);
        members.entry(r).or_default().push(i);
    }
    let mut work: Vec<usize> = (0..n).filter(|&i| dirty[i]).collect();
    while let Some(i) = work.pop() {
        let r = uf.find(i);
        for &x in rev[i].iter().chain(members[&r].iter()) {
            if !dirty[x] {
                dirty[x] = true;
                work.push(x);
            }
        }
    }
    // What goes into the delta: dirty functions, new exported data, and
    // everything they need that is dirty or anonymous.
    let mut emit = vec![false; n];
    let mut work: Vec<usize> = Vec::new();
    for (i, node) in v.nodes.iter().enumerate() {
        let root = match node.kind {
            Kind::Func { .. } => dirty[i],
            Kind::Data { global, .. } => new[i] && global,
            Kind::Anon => false,
        };
        if root {
            emit[i] = true;
            work.push(i);
        }
    }
    while let Some(i) = work.pop() {
        for r in &v.nodes[i].relocs {
            let t = match r.tgt {
                Tgt::Data(t) if dirty[t] => t,
                Tgt::Anon(t) | Tgt::Inst(t) => t,
                _ => continue,
            };
            if !emit[t] {
                emit[t] = true;
                work.push(t);
            }
        }
    }
    Plan { dirty, emit, new }
}

fn sym_type(b: &Builder<'_>, id: Option<SymbolId>, default: u8) -> u8 {
    id.map(|id| b.symbols.get(id).st_type()).unwrap_or(default)
}

/// Rewrite version 1 into base.o. Returns the trampoline names it uses.
pub(crate) fn write_base(v: &mut Version<'_>, out: &Path) -> Result<BTreeSet<String>, DeltaError> {
    let path = v.path.clone();
    // 1. Relocation rewrites, computed first (resolution reads the model).
    enum Fix {
        Tpl(String, i64),
        Inst(SectionId, i64),
    }
    let mut fixes: Vec<(SectionId, usize, Fix)> = Vec::new();
    let mut tpls = BTreeSet::new();
    for rs in v.b.sections.iter() {
        let SectionData::Relocation(rels) = &rs.data else {
            continue;
        };
        let Some(target) = rs.sh_info_section else {
            continue;
        };
        let ts = v.b.sections.get(target);
        if !rewritable_section(&ts.name, ts.sh_type, ts.sh_flags) {
            continue;
        }
        let exec = ts.sh_flags & u64::from(elf::SHF_EXECINSTR) != 0;
        for (k, r) in rels.iter().enumerate() {
            match v.resolve(r.symbol, r.r_type, r.r_addend, exec) {
                (Tgt::Tramp(g), a) => {
                    tpls.insert(g.clone());
                    fixes.push((rs.id(), k, Fix::Tpl(g, a)));
                }
                (Tgt::Inst(n), a) => {
                    // Pin the instance: a weak function symbol could bind
                    // to a newer version.
                    let sym = r.symbol.map(|s| v.b.symbols.get(s).st_type());
                    if sym != Some(elf::STT_SECTION) {
                        fixes.push((rs.id(), k, Fix::Inst(v.nodes[n].sec, a)));
                    }
                }
                _ => {}
            }
        }
    }
    // Symbols to create.
    let mut tpl_sym: HashMap<String, SymbolId> = HashMap::new();
    for g in &tpls {
        let s = v.b.symbols.add();
        s.name = format!("{TPL_PREFIX}{g}").into_bytes().into();
        s.set_st_info(elf::STB_GLOBAL, elf::STT_NOTYPE);
        s.st_shndx = elf::SHN_UNDEF;
        tpl_sym.insert(g.clone(), s.id());
    }
    let mut sec_sym: HashMap<usize, SymbolId> = HashMap::new();
    for s in v.b.symbols.iter() {
        if s.st_type() == elf::STT_SECTION {
            if let Some(sec) = s.section {
                sec_sym.insert(sec.index(), s.id());
            }
        }
    }
    for (_, _, f) in &fixes {
        if let Fix::Inst(sec, _) = f {
            sec_sym.entry(sec.index()).or_insert_with(|| {
                let s = v.b.symbols.add();
                s.section = Some(*sec);
                s.set_st_info(elf::STB_LOCAL, elf::STT_SECTION);
                s.id()
            });
        }
    }
    for (rs, k, f) in fixes {
        if let SectionData::Relocation(rels) = &mut v.b.sections.get_mut(rs).data {
            match f {
                Fix::Tpl(g, a) => {
                    rels[k].symbol = Some(tpl_sym[&g]);
                    rels[k].r_addend = a;
                }
                Fix::Inst(sec, a) => {
                    rels[k].symbol = Some(sec_sym[&sec.index()]);
                    rels[k].r_addend = a;
                }
            }
        }
    }
    // 2. Globalize and weaken.
    for s in v.b.symbols.iter_mut() {
        let Some(g) = v.gname.get(&s.id().index()) else {
            continue;
        };
        let t = s.st_type();
        let is_func = matches!(t, elf::STT_FUNC | elf::STT_GNU_IFUNC);
        if s.st_bind() == elf::STB_LOCAL {
            s.name = g.clone().into_bytes().into();
            s.set_st_info(if is_func { elf::STB_WEAK } else { elf::STB_GLOBAL }, t);
            // Hidden would be fine too; default keeps them visible to the
            // image's other libraries, which never name them.
        } else if is_func {
            s.set_st_info(elf::STB_WEAK, t);
        }
    }
    // Synthetic data nodes (symbol-less writable sections) get a symbol.
    let synth: Vec<(SectionId, String, u64)> =
        v.nodes.iter().filter(|n| matches!(n.kind, Kind::Data { sym: None, .. })).map(|n| (n.sec, n.name.clone(), n.size)).collect();
    for (sec, name, size) in synth {
        let s = v.b.symbols.add();
        s.name = name.into_bytes().into();
        s.section = Some(sec);
        s.set_st_info(elf::STB_GLOBAL, elf::STT_OBJECT);
        s.st_size = size;
    }
    // 3. No merging across objects: keeps base's layout independent of
    // what else is linked.
    for sec in v.b.sections.iter_mut() {
        if sec.sh_flags & u64::from(elf::SHF_ALLOC) != 0 {
            sec.sh_flags &= !u64::from(elf::SHF_MERGE | elf::SHF_STRINGS);
        }
    }
    let b = std::mem::replace(&mut v.b, Builder::new(object::Endianness::Little, true));
    write_builder(b, out, &path)?;
    Ok(tpls)
}

fn write_builder(b: Builder<'_>, out: &Path, src: &Path) -> Result<(), DeltaError> {
    let mut buf = Vec::new();
    b.write(&mut buf).map_err(|e| DeltaError::BadObject { path: src.to_path_buf(), msg: format!("cannot write {}: {e}", out.display()) })?;
    std::fs::write(out, &buf).map_err(|e| DeltaError::Io { path: out.to_path_buf(), source: e })
}

/// Write delta j of version `v` according to `p`; update `eff`.
pub(crate) fn write_delta(v: &Version<'_>, p: &Plan, j: usize, eff: &mut Effective, out: &Path) -> Result<DeltaInfo, DeltaError> {
    let mut o = Builder::new(object::Endianness::Little, true);
    o.header.e_type = elf::ET_REL;
    o.header.e_machine = elf::EM_X86_64;
    let mut info = DeltaInfo { index: j, label: v.label.clone(), path: out.to_path_buf(), ..Default::default() };
    info.stats.functions_in_version = v.nodes.iter().filter(|n| matches!(n.kind, Kind::Func { .. })).count();

    // Emitted names of data copies.
    let mut data_name: HashMap<usize, String> = HashMap::new();
    for (i, n) in v.nodes.iter().enumerate() {
        if p.emit[i] && matches!(n.kind, Kind::Data { .. }) {
            let name = if p.new[i] { n.name.clone() } else { format!("{}__v{j}", n.name) };
            data_name.insert(i, name);
        }
    }
    // Sections.
    let mut new_sec: HashMap<usize, SectionId> = HashMap::new(); // node -> section
    let mut anon_by_sig: HashMap<u64, SectionId> = HashMap::new();
    let mut sec_symbol: HashMap<usize, SymbolId> = HashMap::new(); // new section index -> section symbol
    let mut defined: HashMap<String, SymbolId> = HashMap::new();
    for (i, n) in v.nodes.iter().enumerate() {
        if !p.emit[i] {
            continue;
        }
        if n.kind == Kind::Anon {
            if let Some(s) = anon_by_sig.get(&n.sig) {
                new_sec.insert(i, *s);
                continue;
            }
        }
        let src = v.b.sections.get(n.sec);
        let data = match &src.data {
            SectionData::UninitializedData(_) => SectionData::UninitializedData(n.size),
            d => {
                let bytes = section_bytes(d).unwrap_or(&[]);
                let st = (n.start as usize).min(bytes.len());
                let end = ((n.start + n.size) as usize).min(bytes.len());
                SectionData::Data(bytes[st..end].to_vec().into())
            }
        };
        let bytes_len = n.size;
        let sec = o.sections.add();
        sec.name = src.name.to_vec().into();
        sec.sh_type = src.sh_type;
        sec.sh_flags = src.sh_flags & !u64::from(elf::SHF_MERGE | elf::SHF_STRINGS | elf::SHF_GROUP);
        sec.sh_addralign = src.sh_addralign.max(1);
        sec.data = data;
        let sid = sec.id();
        let flags = sec.sh_flags;
        new_sec.insert(i, sid);
        if n.kind == Kind::Anon {
            anon_by_sig.insert(n.sig, sid);
        }
        let ss = o.symbols.add();
        ss.section = Some(sid);
        ss.set_st_info(elf::STB_LOCAL, elf::STT_SECTION);
        sec_symbol.insert(sid.index(), ss.id());
        // Statistics.
        if flags & u64::from(elf::SHF_EXECINSTR) != 0 {
            info.stats.text_bytes += bytes_len;
        } else if src.sh_type == elf::SHT_NOBITS {
            info.stats.bss_bytes += bytes_len;
        } else if flags & u64::from(elf::SHF_WRITE) != 0 {
            info.stats.data_bytes += bytes_len;
        } else {
            info.stats.rodata_bytes += bytes_len;
        }
        match &n.kind {
            Kind::Func { syms, .. } => {
                for s in syms {
                    let os = v.b.symbols.get(*s);
                    let g = v.gname[&s.index()].clone();
                    let ns = o.symbols.add();
                    ns.name = g.clone().into_bytes().into();
                    ns.section = Some(sid);
                    ns.set_st_info(elf::STB_WEAK, os.st_type());
                    ns.st_other = os.st_other;
                    ns.st_value = os.st_value;
                    ns.st_size = os.st_size;
                    defined.insert(g, ns.id());
                }
                if p.new[i] {
                    info.new_functions.push(n.name.clone());
                } else {
                    info.modified_functions.push(n.name.clone());
                }
            }
            Kind::Data { sym, .. } => {
                let name = data_name[&i].clone();
                let ns = o.symbols.add();
                ns.name = name.clone().into_bytes().into();
                ns.section = Some(sid);
                let t = sym_type(&v.b, *sym, elf::STT_OBJECT);
                ns.set_st_info(elf::STB_GLOBAL, t);
                ns.st_size = n.size;
                defined.insert(name.clone(), ns.id());
                if p.new[i] {
                    info.new_data.push(name);
                } else {
                    info.copied_data.push(name);
                    if matches!(n.kind, Kind::Data { global: true, .. }) {
                        info.warnings.push(format!(
                            "exported data `{}` changed: this version's code uses the copy `{}__v{j}`; other libraries keep the earlier instance",
                            n.orig, n.name
                        ));
                    }
                }
            }
            Kind::Anon => info.anon_copies += 1,
        }
    }
    // Changed exported data nobody in the library references.
    for (i, n) in v.nodes.iter().enumerate() {
        if p.dirty[i] && !p.emit[i] && matches!(n.kind, Kind::Data { global: true, .. }) {
            info.warnings.push(format!(
                "exported data `{}` changed but no function of the library uses it: not copied; other libraries keep the earlier instance",
                n.orig
            ));
        }
    }
    // Relocations.
    let mut undef: HashMap<(String, bool), SymbolId> = HashMap::new();
    let mut get_undef = |o: &mut Builder<'_>, name: String, weak: bool| -> SymbolId {
        if let Some(id) = defined.get(&name) {
            return *id;
        }
        *undef.entry((name.clone(), weak)).or_insert_with(|| {
            let s = o.symbols.add();
            s.name = name.into_bytes().into();
            s.set_st_info(if weak { elf::STB_WEAK } else { elf::STB_GLOBAL }, elf::STT_NOTYPE);
            s.st_shndx = elf::SHN_UNDEF;
            s.id()
        })
    };
    let mut relsecs: Vec<(SectionId, Vec<object::build::elf::Relocation>)> = Vec::new();
    let mut tpls = BTreeSet::new();
    let mut done_secs: BTreeSet<usize> = BTreeSet::new();
    for (i, n) in v.nodes.iter().enumerate() {
        if !p.emit[i] || n.relocs.is_empty() {
            continue;
        }
        let sid = new_sec[&i];
        if !done_secs.insert(sid.index()) {
            continue; // a deduplicated anonymous copy
        }
        let mut rels = Vec::new();
        for r in &n.relocs {
            let (sym, addend) = match &r.tgt {
                Tgt::Tramp(g) => {
                    tpls.insert(g.clone());
                    (get_undef(&mut o, format!("{TPL_PREFIX}{g}"), false), r.addend)
                }
                Tgt::Inst(t) => {
                    let Some(ts) = new_sec.get(t) else {
                        return Err(DeltaError::Unsupported {
                            path: v.path.clone(),
                            msg: format!("{} refers into {} which is not in the delta", n.name, v.nodes[*t].name),
                        });
                    };
                    (sec_symbol[&ts.index()], r.addend)
                }
                Tgt::Data(t) => {
                    if let Some(name) = data_name.get(t) {
                        (defined[name], r.addend)
                    } else {
                        let tn = &v.nodes[*t].name;
                        let Some((_, cur)) = eff.data.get(tn) else {
                            return Err(DeltaError::Unsupported {
                                path: v.path.clone(),
                                msg: format!("{} refers to data {tn} that no version defines", n.name),
                            });
                        };
                        (get_undef(&mut o, cur.clone(), false), r.addend)
                    }
                }
                Tgt::Anon(t) => (sec_symbol[&new_sec[t].index()], r.addend),
                Tgt::Ext(name, weak) => (get_undef(&mut o, name.clone(), *weak), r.addend),
                Tgt::Other(what) => {
                    return Err(DeltaError::Unsupported {
                        path: v.path.clone(),
                        msg: format!("{} has a relocation against {what}, which a delta cannot reproduce", n.name),
                    })
                }
            };
            rels.push(object::build::elf::Relocation { r_offset: r.off, symbol: Some(sym), r_type: r.r_type, r_addend: addend });
        }
        relsecs.push((sid, rels));
    }
    // Metadata sections.
    let symtab = {
        let s = o.sections.add();
        s.name = b".symtab".to_vec().into();
        s.sh_type = elf::SHT_SYMTAB;
        s.sh_addralign = 8;
        s.sh_entsize = 24;
        s.data = SectionData::Symbol;
        s.id()
    };
    for (sid, rels) in relsecs {
        let name = [b".rela".as_slice(), &o.sections.get(sid).name].concat();
        let s = o.sections.add();
        s.name = name.into();
        s.sh_type = elf::SHT_RELA;
        s.sh_flags = u64::from(elf::SHF_INFO_LINK);
        s.sh_addralign = 8;
        s.sh_entsize = 24;
        s.sh_link_section = Some(symtab);
        s.sh_info_section = Some(sid);
        s.data = SectionData::Relocation(rels);
    }
    {
        let s = o.sections.add();
        s.name = b".note.GNU-stack".to_vec().into();
        s.sh_type = elf::SHT_PROGBITS;
        s.sh_addralign = 1;
    }
    {
        let s = o.sections.add();
        s.name = b".strtab".to_vec().into();
        s.sh_type = elf::SHT_STRTAB;
        s.sh_addralign = 1;
        s.data = SectionData::String;
    }
    {
        let s = o.sections.add();
        s.name = b".shstrtab".to_vec().into();
        s.sh_type = elf::SHT_STRTAB;
        s.sh_addralign = 1;
        s.data = SectionData::SectionString;
    }
    info.trampolines = tpls.into_iter().collect();
    info.stats.functions_in_delta = info.new_functions.len() + info.modified_functions.len();
    write_builder(o, out, &v.path)?;
    info.stats.file_bytes = std::fs::metadata(out).map(|m| m.len()).unwrap_or(0);

    // The effective library now includes this delta.
    for (i, n) in v.nodes.iter().enumerate() {
        match n.kind {
            Kind::Func { .. } if p.dirty[i] => {
                eff.funcs.insert(n.name.clone(), n.sig);
            }
            Kind::Data { .. } if p.emit[i] => {
                eff.data.insert(n.name.clone(), (n.sig, data_name[&i].clone()));
            }
            _ => {}
        }
    }
    Ok(info)
}
