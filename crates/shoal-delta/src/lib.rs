//! The Δ-versioner (docs/design.md "Layout policies"; Spacer-Δ's section IV-A): turns the relocatable
//! x86-64 objects of versions 1..k of **one** library into
//!
//! - `base.o` — version 1, rewritten;
//! - `delta-2.o` … `delta-k.o` — delta j holds the functions that are new or
//!   modified in version j relative to the *effective library* of versions
//!   1..j-1 (base plus deltas 2..j-1), and the data they need;
//! - `delta.json` — per object: new/modified functions, copied data, the
//!   trampolines it uses, statistics and warnings.
//!
//! An image of version j links `delta-j.o … delta-2.o base.o` (newest
//! first) and never the later deltas. Every object is written once and is
//! the same file whichever j it is linked into, and its relocations bind to
//! the same targets in every image, so with the library placed at the same
//! addresses its pages are identical across images.
//!
//! # Design
//!
//! The work is done on relocatable objects, before linking (docs/design.md "Layout policies"
//! allows this instead of the paper's binary rewriting): no disassembler is
//! needed, because every place that names a function is a relocation.
//!
//! 1. **Globalized statics.** Every local function and data symbol gets a
//!    global name `__shoal_s_<ns>_<name>` (`<ns>` is the library namespace,
//!    by default the file stem of version 1's object, so two libraries'
//!    statics never clash; when the object was merged from several files by
//!    `ld -r`, the file name from the preceding `STT_FILE` symbol is added:
//!    `__shoal_s_<ns>_<file>_<name>`; remaining duplicates get `__2`, `__3`
//!    in symbol-table order). Deltas can then name base instances, and
//!    statics are replaced like globals (rule 6). Anonymous data reached
//!    through section symbols or `.LC` labels — strings of
//!    `SHF_MERGE|SHF_STRINGS` sections, constants of `.rodata.cst*`,
//!    symbol-less read-only sections such as jump tables, and read-only
//!    locals whose names GCC numbers (`CSWTCH.12`, `__func__.3`: the number
//!    changes between versions) — is identified by content, never by
//!    offset, and a delta gets its own copy.
//! 2. **Weak definitions, newest first.** All function definitions in base
//!    and deltas are `STB_WEAK`. GNU ld keeps the *first* weak definition it
//!    meets and ignores later weak definitions of the same name without
//!    error, so linking `delta-j … delta-2 base` makes the newest
//!    definition of every function win without rewriting any object per
//!    image. This is verified by the test `weak_first_definition_wins`
//!    (two objects each defining a weak `f`: the first on the command line
//!    wins, in both orders). Caveat: it holds for objects named on the
//!    command line; weak definitions do not pull members out of archives.
//! 3. **Matching.** Functions are matched by (globalized) name. A function
//!    is modified when its size, its bytes with relocation fields zeroed, or
//!    its relocations taken symbolically differ: same offsets and types,
//!    addends relative to the target, targets by name (functions and named
//!    data) or by content (anonymous data, recursively). A function is also
//!    modified when named data it references changed (content compared the
//!    same way), transitively through data referencing data. A data
//!    object's pointer to a function's *entry* goes through the trampoline
//!    and does not make the data change. Functions and data that address
//!    each other's *interior* (a jump table into its function, `f.cold`
//!    jumping back into `f`, computed-goto tables) form a unit and are
//!    replaced together, so interior references always stay within one
//!    version. New functions are those no earlier version has; removed
//!    functions simply stay in the objects that defined them.
//! 4. **Trampolines.** In every object, every relocation in an allocated
//!    section (not `.eh_frame`, not debug info) whose target is the entry
//!    of a library function is retargeted to the undefined symbol
//!    `__shoal_tpl_<name>`; the image's link step defines
//!    `__shoal_tpl_<name>: jmp <name>` (see [`trampoline_asm`]). Code that
//!    calls a function a later version replaces thus stays byte-identical.
//!    References to a function instance (interior addresses) are pinned to
//!    the object's own section symbol. The names each object needs are in
//!    [`ObjectInfo::trampolines`]; an image of version j needs the union
//!    over base and deltas 2..j ([`DeltaSet::trampolines_for`]) — not more,
//!    since a later delta's functions are absent from that image. Other
//!    libraries' references (the application's) are the link step's job
//!    (`--wrap`); [`DeltaSet::exported_functions`] lists the originally
//!    global function names for it.
//! 5. **Data.** A changed data object that a delta's functions use is
//!    copied into the delta as `<name>__v<j>` (a new one keeps its name) and
//!    the delta's relocations point to the copy; relocations inside copied
//!    data are rewritten the same way. Unchanged data is referenced by the
//!    symbol of its current instance (base's globalized symbol or an earlier
//!    delta's copy), so mutable state has one instance. Because every
//!    function that references a changed datum is itself re-emitted, all
//!    live code of version j uses the same instance. Exported (global) data
//!    that changed cannot be redirected for other libraries: they keep
//!    version 1's instance, and `delta.json` warns about it.
//! 6. **Merge sections.** `SHF_MERGE`/`SHF_STRINGS` are cleared in the
//!    outputs: ld would otherwise merge base's strings with those of
//!    whatever deltas are linked into the same output section, moving
//!    base's data between images. Each object keeps its own strings.
//! 7. **Refusals** ([`DeltaError`], always naming the file): not ELF, not
//!    ELF64 little-endian x86-64, not `ET_REL`, corrupt or truncated, a code
//!    section holding several functions (no `-ffunction-sections`), unknown
//!    section types, duplicate version labels. A version identical to the
//!    previous one gives an empty delta.
//!
//! Not carried into deltas: `.eh_frame` (unwind tables) and debug info of
//! the copied functions (base keeps its own), `.init_array`/`.fini_array`
//! entries added by later versions, relocations in data that no symbol
//! covers.
//!
//! # Dependencies
//!
//! - `object` (with `build`): reads, modifies and writes the ELF objects
//!   (`object::build::elf::Builder`), so no ELF is encoded by hand;
//! - `thiserror`: the error type.
//!
//! The CLI entry point for `shoal delta` is [`cli_main`]; `ld` (binutils) is
//! needed only by [`merge_objects`].
#![deny(missing_docs)]

mod emit;
mod model;

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

pub use emit::TPL_PREFIX;

/// The compiler flags for a library that will be versioned, beside
/// `-ffunction-sections -fdata-sections` (`shoal cc --versioned` adds
/// them). The Δ-versioner replaces whole functions, so a delta is as small
/// as the set of functions whose *machine code* changed. With gcc's
/// default `-O2`, one function's code also depends on other functions'
/// bodies: a small or once-called static function is inlined into its
/// callers, partial inlining splits functions across callers,
/// interprocedural register allocation (`-fipa-ra`) lets a caller keep
/// values in the registers its callee happens not to touch, and
/// interprocedural constant propagation, SRA and identical-code folding
/// clone, re-sign or merge functions by what their callers pass. One
/// changed line then changes many callers. These flags keep each
/// function's code a product of its own source (plus the declarations and
/// macros it uses); `inline` and `always_inline` functions are still
/// inlined. On SQLite 3.35.4 → 3.36.0 the delta's code goes from 77% of
/// version 1's to 57% (3.38.0 → 3.38.2: from 27% to 5%), for up to 10%
/// of speedtest1's speed (docs/results/pages.md). Correctness does not
/// depend on them: whatever gcc decides shows in the compiled code the
/// versioner compares.
pub const VERSIONED_CFLAGS: &[&str] = &[
    "-fno-inline-small-functions",
    "-fno-inline-functions",
    "-fno-inline-functions-called-once",
    "-fno-partial-inlining",
    "-fno-ipa-ra",
    "-fno-ipa-cp",
    "-fno-ipa-sra",
    "-fno-ipa-icf",
];

/// Why the Δ-versioner refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum DeltaError {
    /// An input object is unusable.
    #[error("{path}: {msg}")]
    BadObject {
        /// The object.
        path: PathBuf,
        /// What is wrong with it.
        msg: String,
    },
    /// The input uses something a delta cannot express.
    #[error("{path}: unsupported: {msg}")]
    Unsupported {
        /// The object.
        path: PathBuf,
        /// What.
        msg: String,
    },
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Bad arguments (labels, counts, options).
    #[error("{0}")]
    Usage(String),
    /// `ld -r` failed.
    #[error("ld -r failed: {0}")]
    Ld(String),
}

/// Statistics of one output object.
#[derive(Debug, Clone, Default)]
pub struct DeltaStats {
    /// Functions of the library in this version.
    pub functions_in_version: usize,
    /// Functions defined by this object (new plus modified; all of them for
    /// base).
    pub functions_in_delta: usize,
    /// Bytes of code.
    pub text_bytes: u64,
    /// Bytes of read-only data.
    pub rodata_bytes: u64,
    /// Bytes of initialised writable data.
    pub data_bytes: u64,
    /// Bytes of zero-initialised data.
    pub bss_bytes: u64,
    /// Size of the object file.
    pub file_bytes: u64,
}

/// What one delta object holds.
#[derive(Debug, Clone, Default)]
pub struct DeltaInfo {
    /// j: this is delta-j.o, for the j-th version given.
    pub index: usize,
    /// The version label.
    pub label: String,
    /// The object written.
    pub path: PathBuf,
    /// Functions no earlier version had.
    pub new_functions: Vec<String>,
    /// Functions replaced (changed, or using changed data).
    pub modified_functions: Vec<String>,
    /// Data copied under a new name (`<name>__v<j>`).
    pub copied_data: Vec<String>,
    /// Data no earlier version had (keeps its name).
    pub new_data: Vec<String>,
    /// Anonymous data (strings, constants, jump tables) copied.
    pub anon_copies: usize,
    /// Names `n` whose trampoline `__shoal_tpl_n` this object uses.
    pub trampolines: Vec<String>,
    /// Sizes.
    pub stats: DeltaStats,
    /// Things the caller should know (exported data that changed).
    pub warnings: Vec<String>,
}

/// Adds up the allocated sections of a written object the way the deltas'
/// statistics count what they copy: code, read-only data, data, bss
/// (unwind tables are not counted: deltas do not carry them).
fn section_bytes(path: &Path, stats: &mut DeltaStats) -> Result<(), DeltaError> {
    use object::{Object as _, ObjectSection as _, SectionFlags};
    let bytes = std::fs::read(path).map_err(|source| DeltaError::Io { path: path.into(), source })?;
    let file = object::File::parse(&*bytes).map_err(|e| DeltaError::BadObject { path: path.into(), msg: e.to_string() })?;
    for sec in file.sections() {
        let SectionFlags::Elf { sh_flags } = sec.flags() else { continue };
        let (alloc, write, exec) = (u64::from(object::elf::SHF_ALLOC), u64::from(object::elf::SHF_WRITE), u64::from(object::elf::SHF_EXECINSTR));
        if sh_flags & alloc == 0 || sec.name() == Ok(".eh_frame") {
            continue;
        }
        let size = sec.size();
        if sh_flags & exec != 0 {
            stats.text_bytes += size;
        } else if sec.kind() == object::SectionKind::UninitializedData {
            stats.bss_bytes += size;
        } else if sh_flags & write != 0 {
            stats.data_bytes += size;
        } else {
            stats.rodata_bytes += size;
        }
    }
    Ok(())
}

/// Alias used in the crate docs: base and deltas are described alike.
pub type ObjectInfo = DeltaInfo;

/// The outputs of [`make_deltas`].
#[derive(Debug, Clone)]
pub struct DeltaSet {
    /// Version 1 rewritten.
    pub base: PathBuf,
    /// What base.o holds (`index` 1).
    pub base_info: DeltaInfo,
    /// delta-2.o … delta-k.o, in version order.
    pub deltas: Vec<DeltaInfo>,
    /// Union over all objects of the names needing a trampoline.
    pub trampolines: Vec<String>,
    /// Originally global function names of all versions (for the link
    /// step's `--wrap` of other libraries' references).
    pub exported_functions: Vec<String>,
    /// Namespace used in globalized static names.
    pub namespace: String,
    /// `delta.json`.
    pub manifest: PathBuf,
}

impl DeltaSet {
    /// The objects an image of version `j` (1-based) links, in link order
    /// (newest first, base last).
    pub fn objects_for(&self, j: usize) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = self.deltas.iter().filter(|d| d.index <= j).rev().map(|d| d.path.clone()).collect();
        v.push(self.base.clone());
        v
    }

    /// The trampolines an image of version `j` (1-based) needs: the union
    /// over base and deltas 2..j, in a prefix-stable order (base's names
    /// sorted, then each delta's names not seen before, sorted). With
    /// fixed-size entries ([`trampoline_asm`]) at a fixed address, a name
    /// has the same slot in every image that has it, so the table's pages
    /// are shared too as far as the images agree.
    pub fn trampolines_for(&self, j: usize) -> Vec<String> {
        let mut seen: BTreeSet<String> = BTreeSet::new();
        let mut out = Vec::new();
        let objs = std::iter::once(&self.base_info).chain(self.deltas.iter().filter(|d| d.index <= j));
        for o in objs {
            for t in &o.trampolines {
                if seen.insert(t.clone()) {
                    out.push(t.clone());
                }
            }
        }
        out
    }
}

/// Options of [`make_deltas_with`].
#[derive(Debug, Clone, Default)]
pub struct DeltaOptions {
    /// Namespace for globalized statics (`__shoal_s_<ns>_…`); must be the
    /// same every time the same library is processed, and differ between
    /// libraries of one image. Default: the file stem of version 1's
    /// object, sanitized.
    pub namespace: Option<String>,
}

/// Assembly text defining `__shoal_tpl_<n>: jmp <n>` for each name, in
/// section `.text.shoal_tpl`: what an image's link step assembles into its
/// trampoline table. Every entry is 8 bytes (`jmp rel32` and 3 bytes of
/// `int3`), so slot k is at table + 8k whatever the targets.
pub fn trampoline_asm(names: &[String]) -> String {
    let mut s = String::from("\t.section .text.shoal_tpl,\"ax\",@progbits\n\t.p2align 3\n");
    for n in names {
        let _ = writeln!(
            s,
            "\t.globl {TPL_PREFIX}{n}\n\t.type {TPL_PREFIX}{n},@function\n{TPL_PREFIX}{n}:\n\t.byte 0xe9\n\t.long {n} - . - 4\n\t.byte 0xcc, 0xcc, 0xcc"
        );
    }
    s.push_str("\t.section .note.GNU-stack,\"\",@progbits\n");
    s
}

/// Merge several relocatable objects of one version into one with `ld -r`.
pub fn merge_objects(objs: &[PathBuf], out: &Path) -> Result<(), DeltaError> {
    if objs.is_empty() {
        return Err(DeltaError::Usage("merge_objects: no objects".into()));
    }
    let o = std::process::Command::new("ld").arg("-r").arg("-o").arg(out).args(objs).output().map_err(|e| DeltaError::Ld(format!("cannot run ld: {e}")))?;
    if !o.status.success() {
        return Err(DeltaError::Ld(String::from_utf8_lossy(&o.stderr).into_owned()));
    }
    Ok(())
}

/// [`make_deltas_with`] with default options.
pub fn make_deltas(inputs: &[(String, PathBuf)], out_dir: &Path) -> Result<DeltaSet, DeltaError> {
    make_deltas_with(inputs, out_dir, &DeltaOptions::default())
}

/// Build base.o, delta-2.o … delta-k.o and delta.json in `out_dir` from
/// `(label, object)` pairs given oldest first.
pub fn make_deltas_with(inputs: &[(String, PathBuf)], out_dir: &Path, opts: &DeltaOptions) -> Result<DeltaSet, DeltaError> {
    if inputs.is_empty() {
        return Err(DeltaError::Usage("no versions given".into()));
    }
    let mut seen = BTreeSet::new();
    for (l, _) in inputs {
        if l.is_empty() {
            return Err(DeltaError::Usage("empty version label".into()));
        }
        if !seen.insert(l.as_str()) {
            return Err(DeltaError::Usage(format!("version label {l} given twice")));
        }
    }
    let ns = match &opts.namespace {
        Some(n) => model::sanitize(n),
        None => model::sanitize(&inputs[0].1.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "lib".into())),
    };
    std::fs::create_dir_all(out_dir).map_err(|e| DeltaError::Io { path: out_dir.to_path_buf(), source: e })?;
    let datas: Vec<Vec<u8>> =
        inputs.iter().map(|(_, p)| std::fs::read(p).map_err(|e| DeltaError::Io { path: p.clone(), source: e })).collect::<Result<_, _>>()?;
    // Validate every input before writing anything.
    let mut versions = Vec::new();
    for ((l, p), d) in inputs.iter().zip(&datas) {
        versions.push(model::read_version(l, p, d, &ns)?);
    }
    let mut exported: BTreeSet<String> = BTreeSet::new();
    for v in &versions {
        for n in &v.nodes {
            if let model::Kind::Func { global: true, syms } = &n.kind {
                for s in syms {
                    if v.b.symbols.get(*s).st_bind() != object::elf::STB_LOCAL {
                        exported.insert(v.gname[&object::build::Id::index(s)].clone());
                    }
                }
            }
        }
    }
    let mut versions = versions.into_iter();
    let mut v1 = versions.next().ok_or_else(|| DeltaError::Usage("no versions given".into()))?;
    let mut eff = emit::Effective::from_base(&v1);
    let base = out_dir.join("base.o");
    let mut base_info = DeltaInfo { index: 1, label: v1.label.clone(), path: base.clone(), ..Default::default() };
    {
        let funcs: Vec<&model::Node> = v1.nodes.iter().filter(|n| matches!(n.kind, model::Kind::Func { .. })).collect();
        base_info.stats.functions_in_version = funcs.len();
        base_info.stats.functions_in_delta = funcs.len();
    }
    base_info.trampolines = emit::write_base(&mut v1, &base)?.into_iter().collect();
    section_bytes(&base, &mut base_info.stats)?;
    base_info.stats.file_bytes = std::fs::metadata(&base).map(|m| m.len()).unwrap_or(0);
    drop(v1);
    let mut deltas = Vec::new();
    for (k, v) in versions.enumerate() {
        let j = k + 2;
        let p = emit::plan(&v, &eff);
        let out = out_dir.join(format!("delta-{j}.o"));
        deltas.push(emit::write_delta(&v, &p, j, &mut eff, &out)?);
    }
    let mut all_tpl: BTreeSet<String> = base_info.trampolines.iter().cloned().collect();
    for d in &deltas {
        all_tpl.extend(d.trampolines.iter().cloned());
    }
    let set = DeltaSet {
        base,
        base_info,
        deltas,
        trampolines: all_tpl.into_iter().collect(),
        exported_functions: exported.into_iter().collect(),
        namespace: ns,
        manifest: out_dir.join("delta.json"),
    };
    std::fs::write(&set.manifest, to_json(&set)).map_err(|e| DeltaError::Io { path: set.manifest.clone(), source: e })?;
    Ok(set)
}

fn js(s: &str) -> String {
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn jlist(v: &[String]) -> String {
    format!("[{}]", v.iter().map(|s| js(s)).collect::<Vec<_>>().join(", "))
}

fn info_json(d: &DeltaInfo) -> String {
    let s = &d.stats;
    format!(
        "{{\"index\": {}, \"label\": {}, \"file\": {}, \"new_functions\": {}, \"modified_functions\": {}, \"copied_data\": {}, \"new_data\": {}, \"anon_copies\": {}, \"trampolines\": {}, \"warnings\": {}, \"stats\": {{\"functions_in_version\": {}, \"functions_in_object\": {}, \"text_bytes\": {}, \"rodata_bytes\": {}, \"data_bytes\": {}, \"bss_bytes\": {}, \"file_bytes\": {}}}}}",
        d.index,
        js(&d.label),
        js(&d.path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_default()),
        jlist(&d.new_functions),
        jlist(&d.modified_functions),
        jlist(&d.copied_data),
        jlist(&d.new_data),
        d.anon_copies,
        jlist(&d.trampolines),
        jlist(&d.warnings),
        s.functions_in_version,
        s.functions_in_delta,
        s.text_bytes,
        s.rodata_bytes,
        s.data_bytes,
        s.bss_bytes,
        s.file_bytes
    )
}

fn to_json(set: &DeltaSet) -> String {
    let mut o = String::from("{\n");
    let _ = writeln!(o, "  \"namespace\": {},", js(&set.namespace));
    let _ = writeln!(o, "  \"link_order\": \"delta-j.o ... delta-2.o base.o (newest first)\",");
    let _ = writeln!(o, "  \"base\": {},", info_json(&set.base_info));
    let _ = writeln!(o, "  \"deltas\": [\n    {}\n  ],", set.deltas.iter().map(info_json).collect::<Vec<_>>().join(",\n    "));
    let _ = writeln!(o, "  \"trampolines\": {},", jlist(&set.trampolines));
    let _ = writeln!(o, "  \"exported_functions\": {}", jlist(&set.exported_functions));
    o.push_str("}\n");
    o
}

/// `shoal delta --versions L1,L2,… --out DIR [--namespace NS] OBJ1 OBJ2 …`:
/// the whole command line after `delta`. Returns a summary for the user.
pub fn cli_main(args: &[String]) -> Result<String, DeltaError> {
    let mut labels: Option<Vec<String>> = None;
    let mut out: Option<PathBuf> = None;
    let mut opts = DeltaOptions::default();
    let mut objs = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = |name: &str| it.next().cloned().ok_or_else(|| DeltaError::Usage(format!("{name} needs a value")));
        match a.as_str() {
            "--versions" => labels = Some(val("--versions")?.split(',').map(str::to_string).collect()),
            "--out" | "-o" => out = Some(PathBuf::from(val("--out")?)),
            "--namespace" => opts.namespace = Some(val("--namespace")?),
            "-h" | "--help" => {
                return Ok("usage: shoal delta --versions V1,V2,... --out DIR [--namespace NS] OBJ1 OBJ2 ...\n  one relocatable object per version, oldest first (merge several with ld -r)".into())
            }
            s if s.starts_with('-') => return Err(DeltaError::Usage(format!("unknown option {s}"))),
            s => objs.push(PathBuf::from(s)),
        }
    }
    let labels = labels.ok_or_else(|| DeltaError::Usage("--versions V1,V2,... is required (oldest first)".into()))?;
    let out = out.ok_or_else(|| DeltaError::Usage("--out DIR is required".into()))?;
    if labels.len() != objs.len() {
        return Err(DeltaError::Usage(format!("{} version labels for {} objects", labels.len(), objs.len())));
    }
    let inputs: Vec<(String, PathBuf)> = labels.into_iter().zip(objs).collect();
    let set = make_deltas_with(&inputs, &out, &opts)?;
    let mut s = String::new();
    let b = &set.base_info;
    let _ = writeln!(s, "base.o     {:>10}: {} functions, {} bytes", b.label, b.stats.functions_in_version, b.stats.file_bytes);
    for d in &set.deltas {
        let _ = writeln!(
            s,
            "delta-{}.o {:>10}: {} new + {} modified of {} functions, {} data copies, {} bytes",
            d.index,
            d.label,
            d.new_functions.len(),
            d.modified_functions.len(),
            d.stats.functions_in_version,
            d.copied_data.len() + d.new_data.len(),
            d.stats.file_bytes
        );
        for w in &d.warnings {
            let _ = writeln!(s, "  warning: {w}");
        }
    }
    let _ = writeln!(s, "{} trampolines; manifest {}", set.trampolines.len(), set.manifest.display());
    Ok(s)
}
