//! Workspaces: a set of images built together under one layout policy
//! (docs/design.md "Layout policies", the Spacer-Δ pipeline; `shoal build --workspace W.toml`).
//!
//! ```toml
//! policy = "delta"          # default | dce | aligned | delta | aslr | default-aslr | dce-aslr
//! seed = 1                  # *aslr: the layout randomisation seed
//!
//! [[library]]               # a versioned library: one object per version, oldest first
//! name = "sqlite"
//! versions = [
//!   { version = "3.35.4", object = "obj/sqlite-3.35.4.o" },
//!   { version = "3.38.2", object = "obj/sqlite-3.38.2.o" },
//! ]
//!
//! [[image]]
//! output = "out/speedtest1-3.35.4"
//! objects = ["obj/speedtest1.o"]
//! libraries = ["sqlite@3.35.4"]
//! ```
//! Relative paths are relative to the workspace file.
//!
//! How each policy builds the images:
//! - `default`, `dce`: every image on its own, libraries packed one after
//!   the other (`dce` adds `--gc-sections`).
//! - `aligned`: two passes. The first links every image with page-aligned
//!   regions and measures them; the workspace then gets one address map in
//!   which every library region has the largest size any image needs, at
//!   the same address in every image (an image without the library leaves a
//!   hole, which costs address space but no memory: the loader skips zero
//!   pages); the second pass links every image with that map. Calls from
//!   other libraries into a versioned library go through the image's
//!   trampoline table (ld `--wrap`), so the calling pages stay identical.
//! - `delta`: like `aligned`, but a versioned library is linked as its
//!   first version (`base.o`) plus one delta object per later version
//!   (`crate::delta` / the `shoal-delta` crate), each delta in its own
//!   page-aligned regions in the delta area after all other regions; every
//!   reference to a function of the library, from inside it or from other
//!   libraries, goes through the trampoline table, so base and caller pages
//!   are byte-identical across versions.
//! - `aslr`: like `delta`, but every image gets its own address map with
//!   the libraries in a random order and a random gap of 0–15 pages before
//!   each (seeded, reproducible). Each library is a slot whose regions keep
//!   the same distances in every image (`Sizes::map_aslr`), and every
//!   call it makes into another library goes through its own trampoline
//!   table (`crate::tables`), so its code pages stay identical wherever it
//!   lands; what differs is what link-time ASLR really costs: the tables,
//!   read-only data holding absolute addresses, and data references
//!   between libraries.
//! - `default-aslr`, `dce-aslr`: the ASLR variants of the baselines, each
//!   image a plain link with its libraries shuffled and a random gap of
//!   0–15 pages before each.

use crate::layout::{AddressMap, KINDS, MISC_RO, MISC_RW};
use crate::link::{build, BuildSpec, Trampoline, UserLibrary};
use crate::{Paths, Result, ToolchainError};
use object::{Object, ObjectSection, ObjectSymbol};
use serde::Deserialize;
use shoal_manifest::LibraryKind;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One version of a versioned library.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VersionSpec {
    /// Version label.
    pub version: String,
    /// The relocatable object of that version.
    pub object: PathBuf,
}

/// A versioned library of the workspace.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LibrarySpec {
    /// Library name.
    pub name: String,
    /// Its versions, oldest first.
    pub versions: Vec<VersionSpec>,
}

/// One image of the workspace.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImageSpec {
    /// The image to write.
    pub output: PathBuf,
    /// The application's objects.
    #[serde(default)]
    pub objects: Vec<PathBuf>,
    /// Versioned libraries it uses, as `NAME@VERSION`.
    #[serde(default)]
    pub libraries: Vec<String>,
}

/// A workspace file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workspace {
    /// Layout policy.
    pub policy: String,
    /// Randomisation seed (`aslr`).
    #[serde(default)]
    pub seed: u64,
    /// Versioned libraries.
    #[serde(default, rename = "library")]
    pub libraries: Vec<LibrarySpec>,
    /// Images.
    #[serde(default, rename = "image")]
    pub images: Vec<ImageSpec>,
}

/// The policies a workspace can use.
pub const POLICIES: &[&str] = &["default", "dce", "aligned", "delta", "aslr", "default-aslr", "dce-aslr"];

impl Workspace {
    /// Reads a workspace file; relative paths become relative to its folder.
    pub fn read(path: &Path) -> Result<Workspace> {
        let text = std::fs::read_to_string(path).map_err(|e| ToolchainError::Io(path.to_path_buf(), e))?;
        let mut ws: Workspace = toml::from_str(&text).map_err(|e| ToolchainError::Input(path.to_path_buf(), format!("invalid workspace: {}", e.message())))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let fix = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = dir.join(&*p);
            }
        };
        for l in &mut ws.libraries {
            for v in &mut l.versions {
                fix(&mut v.object);
            }
        }
        for i in &mut ws.images {
            fix(&mut i.output);
            i.objects.iter_mut().for_each(fix);
        }
        ws.check(path)?;
        Ok(ws)
    }

    fn check(&self, path: &Path) -> Result<()> {
        let bad = |m: String| Err(ToolchainError::Input(path.to_path_buf(), m));
        if !POLICIES.contains(&self.policy.as_str()) {
            return bad(format!("unknown policy `{}` (known: {})", self.policy, POLICIES.join(", ")));
        }
        if self.images.is_empty() {
            return bad("the workspace has no [[image]]".into());
        }
        let mut names = BTreeSet::new();
        for l in &self.libraries {
            if !names.insert(&l.name) {
                return bad(format!("library `{}` is listed twice", l.name));
            }
            let mut seen = BTreeSet::new();
            for v in &l.versions {
                if !seen.insert(&v.version) {
                    return bad(format!("library `{}` lists version {} twice", l.name, v.version));
                }
            }
            if l.versions.is_empty() {
                return bad(format!("library `{}` has no versions", l.name));
            }
        }
        for i in &self.images {
            for r in &i.libraries {
                if self.find(r).is_none() {
                    return bad(format!("image {} uses `{r}`, which no [[library]] provides", i.output.display()));
                }
            }
        }
        Ok(())
    }

    /// (library, index of the version) for a `NAME@VERSION` reference.
    fn find(&self, r: &str) -> Option<(&LibrarySpec, usize)> {
        let (name, version) = r.split_once('@')?;
        let l = self.libraries.iter().find(|l| l.name == name)?;
        let i = l.versions.iter().position(|v| v.version == version)?;
        Some((l, i))
    }
}

/// The global function symbols an object defines (what other libraries
/// can call).
pub fn defined_functions(obj: &Path) -> Result<BTreeSet<String>> {
    let data = std::fs::read(obj).map_err(|e| ToolchainError::Io(obj.to_path_buf(), e))?;
    let file = object::File::parse(&*data).map_err(|e| ToolchainError::Input(obj.to_path_buf(), format!("not an object file: {e}")))?;
    let mut out = BTreeSet::new();
    for s in file.symbols() {
        if s.is_global() && s.is_definition() && s.kind() == object::SymbolKind::Text {
            if let Ok(n) = s.name() {
                out.insert(n.to_string());
            }
        }
    }
    Ok(out)
}

/// The alignment of every allocated section of a linked image (for an
/// output section: the largest alignment of its input sections).
pub fn section_aligns(image: &Path) -> Result<BTreeMap<String, u64>> {
    let data = std::fs::read(image).map_err(|e| ToolchainError::Io(image.to_path_buf(), e))?;
    let file = object::File::parse(&*data).map_err(|e| ToolchainError::Input(image.to_path_buf(), format!("not an image: {e}")))?;
    let mut out = BTreeMap::new();
    for s in file.sections() {
        if s.address() != 0 {
            if let Ok(n) = s.name() {
                out.insert(n.to_string(), s.align().max(1));
            }
        }
    }
    Ok(out)
}

/// The alignment of a packed writable region at least (a cache line:
/// components' state does not share lines).
const PACKED_ALIGN: u64 = 64;

/// Address and size of every allocated section of a linked image.
pub fn section_extents(image: &Path) -> Result<BTreeMap<String, (u64, u64)>> {
    let data = std::fs::read(image).map_err(|e| ToolchainError::Io(image.to_path_buf(), e))?;
    let file = object::File::parse(&*data).map_err(|e| ToolchainError::Input(image.to_path_buf(), format!("not an image: {e}")))?;
    let mut out = BTreeMap::new();
    for s in file.sections() {
        if s.address() != 0 {
            if let Ok(n) = s.name() {
                out.insert(n.to_string(), (s.address(), s.size()));
            }
        }
    }
    Ok(out)
}

const PAGE: u64 = 4096;

fn page_up(x: u64) -> u64 {
    x.div_ceil(PAGE) * PAGE
}

/// The per-image tables of one kind, as the script places them.
const MISC_RW_SECTIONS: &[&str] = &[".tdata", ".tbss", ".init_array", ".fini_array", ".got", ".got.plt"];

/// Extent of the per-image writable tables in a linked image.
fn misc_rw_size(ext: &BTreeMap<String, (u64, u64)>) -> u64 {
    let mut lo = u64::MAX;
    let mut hi = 0;
    for n in MISC_RW_SECTIONS {
        if let Some(&(a, s)) = ext.get(*n) {
            lo = lo.min(a);
            hi = hi.max(a + s);
        }
    }
    if lo == u64::MAX {
        0
    } else {
        // .tbss takes no room in the segment but its alignment can shift
        // what follows: leave a little slack.
        hi - lo + 64
    }
}

/// A deterministic generator for the `aslr` policy (splitmix64: a fixed
/// algorithm, so the same seed gives the same layouts in every shoal
/// version).
pub(crate) struct SplitMix(u64);

impl SplitMix {
    /// A generator seeded with `seed`.
    pub(crate) fn new(seed: u64) -> SplitMix {
        SplitMix(seed)
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
}

/// The randomisation seed of image `i` of a workspace seeded `seed`.
fn image_seed(seed: u64, i: usize) -> u64 {
    seed ^ (i as u64 + 1).wrapping_mul(0x2545_f491_4f6c_dd1d)
}

/// Region sizes measured over the workspace: output-section name → the
/// largest size any image needs.
#[derive(Default, Debug)]
struct Sizes {
    /// `.KIND.LIB` → size, and the order libraries were first seen in.
    regions: BTreeMap<String, u64>,
    /// `.KIND.LIB` → the largest alignment any image's section needs.
    aligns: BTreeMap<String, u64>,
    lib_order: Vec<String>,
    delta_order: Vec<String>,
    /// The kernel's libraries (components and krt): their writable
    /// regions keep pages of their own ([`Sizes::map`]).
    kernel: BTreeSet<String>,
    misc_ro: u64,
    misc_rw: u64,
}

impl Sizes {
    fn measure(&mut self, ext: &BTreeMap<String, (u64, u64)>, libs: &[String], deltas: &[String]) {
        for l in libs {
            if !self.lib_order.contains(l) {
                self.lib_order.push(l.clone());
            }
        }
        for d in deltas {
            if !self.delta_order.contains(d) {
                self.delta_order.push(d.clone());
            }
        }
        for (name, &(_, size)) in ext {
            let e = self.regions.entry(name.clone()).or_default();
            *e = (*e).max(size);
        }
        self.misc_ro = self.misc_ro.max(ext.get(".note.shoal").map(|x| x.1).unwrap_or(0));
        self.misc_rw = self.misc_rw.max(misc_rw_size(ext));
    }

    /// Records the sections' alignments (see [`section_aligns`]).
    fn measure_aligns(&mut self, aligns: &BTreeMap<String, u64>) {
        for (name, &a) in aligns {
            let e = self.aligns.entry(name.clone()).or_insert(1);
            *e = (*e).max(a);
        }
    }

    /// Where a writable (data or bss) region `name` goes after
    /// `cursor`: the first of an area on a page of its own (the pages
    /// before it are read-only), the others packed after it at their
    /// alignment. Writable pages are private to every instance whatever
    /// their layout (only KSM merges those written alike, at a scanner's
    /// cost), so a page per library costs memory and shares nothing under
    /// the pool. Kernel libraries are not packed ([`Sizes::map`]); `first`
    /// is also set for the region after a kernel library's.
    fn packed_at(&self, name: &str, cursor: u64, first: bool) -> u64 {
        if first {
            return page_up(cursor);
        }
        let align = self.aligns.get(name).copied().unwrap_or(PAGE).max(PACKED_ALIGN);
        cursor.next_multiple_of(align)
    }

    /// Assigns addresses: text, rodata, misc ro, misc rw, data, bss, then
    /// the delta area. `rng` (aslr) shuffles the library order and adds
    /// random gaps.
    fn map(&self, base: u64, mut rng: Option<&mut SplitMix>) -> AddressMap {
        let mut order = self.lib_order.clone();
        if let Some(r) = rng.as_deref_mut() {
            // The application stays last: its sections are the script's
            // catch-all, which must come after every library's statement.
            let shuffled = order.len().saturating_sub(1);
            for i in (1..shuffled).rev() {
                let j = r.below(i as u64 + 1) as usize;
                order.swap(i, j);
            }
        }
        let mut m = AddressMap::new();
        let mut cursor = base;
        let place = |m: &mut AddressMap, name: String, size: u64, rng: &mut Option<&mut SplitMix>, cursor: &mut u64| {
            if size == 0 {
                return;
            }
            let gap = rng.as_deref_mut().map(|r| r.below(16) * PAGE).unwrap_or(0);
            let at = page_up(*cursor) + gap;
            m.insert(name, at);
            *cursor = at + size;
        };
        let pack = |m: &mut AddressMap, name: String, size: u64, first: bool, cursor: &mut u64| {
            let at = self.packed_at(&name, *cursor, first);
            m.insert(name, at);
            *cursor = at + size;
        };
        for (kind, _) in &KINDS[..2] {
            for l in &order {
                let name = format!(".{kind}.{l}");
                let size = self.regions.get(&name).copied().unwrap_or(0);
                place(&mut m, name, size, &mut rng, &mut cursor);
            }
        }
        place(&mut m, MISC_RO.into(), self.misc_ro.max(16), &mut None, &mut cursor);
        place(&mut m, MISC_RW.into(), self.misc_rw.max(16), &mut None, &mut cursor);
        // Data and bss right after the writable tables, packed (unless
        // randomised: then every region keeps its page and random gap).
        let packed = rng.is_none();
        let mut after_kernel = false;
        for (kind, _) in &KINDS[2..] {
            for l in &order {
                let name = format!(".{kind}.{l}");
                let size = self.regions.get(&name).copied().unwrap_or(0);
                if size == 0 {
                    continue;
                }
                // A kernel library's data and bss keep pages of their
                // own, and the region after one starts a fresh page:
                // docs/design.md "Components and recovery" gives every component its own protection key,
                // which needs page-separated regions (the copies a packed
                // kernel would save are written per instance anyway).
                let kernel = self.kernel.contains(l);
                if packed && !kernel {
                    pack(&mut m, name, size, after_kernel, &mut cursor);
                } else {
                    place(&mut m, name, size, &mut rng, &mut cursor);
                }
                after_kernel = kernel;
            }
        }
        let mut first_rw = true;
        for (kind, _) in &KINDS {
            for d in &self.delta_order {
                let name = format!(".{kind}.{d}");
                let size = self.regions.get(&name).copied().unwrap_or(0);
                if packed && size > 0 && matches!(*kind, "data" | "bss") {
                    pack(&mut m, name, size, first_rw, &mut cursor);
                    first_rw = false;
                } else {
                    place(&mut m, name, size, &mut None, &mut cursor);
                }
            }
        }
        m
    }
}

impl Sizes {
    /// The `aslr` map of one image (Spacer-Δ's section V, after Spacer): every
    /// library is a *slot* — its regions, its own trampoline table right
    /// after its code, and (versioned libraries) its deltas — and the slots
    /// come in a random order with a random gap of 0–15 pages before each
    /// (the application stays last: its sections are the script's
    /// catch-all). A library's regions keep the same distances to each
    /// other in every image: each kind of region gets a span as large as
    /// the largest possible sequence of slots, at the same address in
    /// every image, and a slot sits at the same offset in every span. So a
    /// library's references to its own data and table do not change with
    /// its position; only its table's entries do.
    fn map_aslr(&self, base: u64, rng: &mut SplitMix) -> AddressMap {
        let owner = |n: &str| -> String {
            if let Some(t) = n.strip_prefix("tpl-") {
                return t.to_string();
            }
            if let Some((l, d)) = n.rsplit_once("-delta") {
                if !d.is_empty() && d.chars().all(|c| c.is_ascii_digit()) {
                    return l.to_string();
                }
            }
            n.to_string()
        };
        let size = |kind: &str, lib: &str| page_up(self.regions.get(&format!(".{kind}.{lib}")).copied().unwrap_or(0));
        let mut owners: Vec<String> = Vec::new();
        for n in self.lib_order.iter().chain(&self.delta_order) {
            let o = owner(n);
            if o != "tpl" && !owners.contains(&o) {
                owners.push(o);
            }
        }
        let main_members = |o: &str| vec![o.to_string(), format!("tpl-{o}")];
        let delta_members = |o: &str| -> Vec<String> { self.delta_order.iter().filter(|d| owner(d) == o).cloned().collect() };
        let extent = |members: &[String], kind: &str| members.iter().map(|m| size(kind, m)).sum::<u64>();
        let slot = |o: &str| KINDS.iter().map(|(k, _)| extent(&main_members(o), k)).max().unwrap_or(0);
        // Shuffle (Fisher–Yates), the application last.
        let mut order: Vec<String> = owners.iter().filter(|o| *o != "app").cloned().collect();
        for i in (1..order.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            order.swap(i, j);
        }
        if owners.iter().any(|o| o == "app") {
            order.push("app".into());
        }
        let total: u64 = owners.iter().map(|o| slot(o) + 16 * PAGE).sum();
        let mut offsets = BTreeMap::new();
        let mut cursor = 0;
        for o in &order {
            cursor += rng.below(16) * PAGE;
            offsets.insert(o.clone(), cursor);
            cursor += slot(o);
        }
        // Span bases: text, rodata (+ the misc read-only tables after the
        // slots), data (after the misc writable tables), bss, then the
        // four kinds of the delta area.
        let misc_ro = page_up(self.misc_ro.max(16));
        let misc_rw = page_up(self.misc_rw.max(16));
        let mut m = AddressMap::new();
        let mut kind_base = [0u64; 4];
        kind_base[0] = base;
        kind_base[1] = kind_base[0] + total;
        m.insert(MISC_RO.into(), kind_base[1] + total);
        let rw = kind_base[1] + total + misc_ro;
        m.insert(MISC_RW.into(), rw);
        kind_base[2] = rw + misc_rw;
        kind_base[3] = kind_base[2] + total;
        let mut next = kind_base[3] + total;
        for (k, (kind, _)) in KINDS.iter().enumerate() {
            for o in &order {
                let mut at = kind_base[k] + offsets[o];
                for member in main_members(o) {
                    let sz = size(kind, &member);
                    if sz > 0 {
                        m.insert(format!(".{kind}.{member}"), at);
                        at += sz;
                    }
                }
            }
        }
        for (kind, _) in KINDS.iter() {
            let widest = owners.iter().map(|o| extent(&delta_members(o), kind)).max().unwrap_or(0);
            if widest == 0 {
                continue;
            }
            for o in &order {
                let mut at = next + offsets[o];
                for member in delta_members(o) {
                    let sz = size(kind, &member);
                    if sz > 0 {
                        m.insert(format!(".{kind}.{member}"), at);
                        at += sz;
                    }
                }
            }
            next += total + widest;
        }
        m
    }
}

/// Orders trampoline names for a table: grouped by the versions that
/// (re)define the function (never-changed functions first, then by the
/// list of deltas that hold a version of it), by name within a group. An
/// entry's bytes depend on which object defines its target in the image,
/// so entries with the same history are identical in the same images, and
/// a page holding only such entries is shared by those images. In name
/// order, nearly every page held an entry that changes somewhere, and no
/// table page was shared.
fn by_change_history(set: Option<&shoal_delta::DeltaSet>, names: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut history: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for d in set.map(|s| s.deltas.as_slice()).unwrap_or_default() {
        for f in d.new_functions.iter().chain(&d.modified_functions) {
            history.entry(f.as_str()).or_default().push(d.index);
        }
    }
    let mut keyed: Vec<(Vec<usize>, String)> = names.into_iter().map(|n| (history.get(n.as_str()).cloned().unwrap_or_default(), n)).collect();
    keyed.sort();
    keyed.into_iter().map(|(_, n)| n).collect()
}

/// Makes the images of an `aslr` workspace call other libraries through
/// per-library tables (`crate::tables`): their inputs become the routed
/// copies, `--wrap` is dropped (the application has its own table now) and
/// each image gets every library's table, one slot per function in one
/// order for the whole workspace, a placeholder where its version lacks
/// the function.
fn route_through_library_tables(
    paths: &Paths,
    ws: &Workspace,
    delta_sets: &BTreeMap<String, shoal_delta::DeltaSet>,
    externals: &BTreeMap<(String, usize), BTreeSet<String>>,
    members: &BTreeSet<(String, String)>,
    scratch: &Path,
    planned: &mut [Planned],
) -> Result<()> {
    let mut owned: Vec<(String, Vec<PathBuf>)> = Vec::new();
    for l in &ws.libraries {
        let mut objs = Vec::new();
        match delta_sets.get(&l.name) {
            Some(set) => {
                objs.push(set.base.clone());
                objs.extend(set.deltas.iter().map(|d| d.path.clone()));
            }
            None => objs.extend(l.versions.iter().map(|v| v.object.clone())),
        }
        owned.push((l.name.clone(), objs));
    }
    let mut app: Vec<PathBuf> = Vec::new();
    for p in planned.iter() {
        for o in &p.spec.objects {
            if !app.contains(o) {
                app.push(o.clone());
            }
        }
    }
    owned.push(("app".into(), app));
    let routing = crate::tables::route(paths, &std::env::var_os("SHOAL_DEBUG_ROUTED").map(PathBuf::from).unwrap_or(scratch.join("routed")), &owned, members)?;
    let versioned: BTreeSet<&str> = ws.libraries.iter().map(|l| l.name.as_str()).collect();
    let map = |p: &PathBuf| routing.objects.get(p).cloned().unwrap_or_else(|| p.clone());
    for p in planned.iter_mut() {
        let spec = &mut p.spec;
        spec.shared = Some(routing.shared.clone());
        spec.objects = spec.objects.iter().map(map).collect();
        for l in spec.libraries.iter_mut().chain(spec.deltas.iter_mut()) {
            l.path = map(&l.path);
        }
        spec.wrap.clear();
        // The Δ-versioner's own trampolines move into the library's table;
        // the image table of `--wrap` entries is not needed any more.
        let own: Vec<Trampoline> = spec
            .trampolines
            .drain(..)
            .filter(|t| t.symbol.starts_with(shoal_delta::TPL_PREFIX))
            .map(|t| {
                let name = t.symbol.trim_start_matches(shoal_delta::TPL_PREFIX).to_string();
                let lib = delta_sets.iter().find(|(_, s)| s.trampolines.contains(&name)).map(|(l, _)| l.clone()).unwrap_or_default();
                let target = if t.target.is_empty() { String::new() } else { name };
                Trampoline { symbol: t.symbol, target, table: lib }
            })
            .collect();
        spec.trampolines = own;
        let present = |f: &str| -> bool {
            let Some(owners) = routing.defs.get(f) else { return false };
            owners.iter().any(|o| !versioned.contains(o.as_str()))
                || p.versions.iter().any(|(l, i)| externals.get(&(l.clone(), *i)).is_some_and(|e| e.contains(f)))
        };
        for (lib, names) in &routing.tables {
            for f in names {
                let target = if present(f) { f.clone() } else { String::new() };
                spec.trampolines.push(Trampoline { symbol: crate::tables::entry_symbol(lib, f), target, table: lib.clone() });
            }
        }
    }
    Ok(())
}

/// What one image links, before the policy's address map is applied.
struct Planned {
    spec: BuildSpec,
    deltas: Vec<String>,
    /// (versioned library, index of its version) the image uses.
    versions: Vec<(String, usize)>,
}

/// Builds every image of the workspace file `path`; returns the images.
pub fn build_workspace(paths: &Paths, path: &Path) -> Result<Vec<PathBuf>> {
    let ws = Workspace::read(path)?;
    for l in &ws.libraries {
        for v in &l.versions {
            if !v.object.is_file() {
                return Err(ToolchainError::Input(v.object.clone(), format!("no such object ({}@{})", l.name, v.version)));
            }
        }
    }
    let scratch = tempfile::Builder::new().prefix("shoal-ws-").tempdir().map_err(|e| ToolchainError::Io(std::env::temp_dir(), e))?;
    let delta_sets = if matches!(ws.policy.as_str(), "delta" | "aslr") {
        let mut sets = BTreeMap::new();
        for l in &ws.libraries {
            let dir = delta_dir(path, &l.name);
            sets.insert(l.name.clone(), crate::delta::prepare(l, &dir)?);
        }
        sets
    } else {
        BTreeMap::new()
    };
    // Which functions each version of a versioned library defines, i.e.
    // what other libraries may call (through trampolines).
    let mut externals: BTreeMap<(String, usize), BTreeSet<String>> = BTreeMap::new();
    if matches!(ws.policy.as_str(), "aligned" | "delta" | "aslr") {
        for l in &ws.libraries {
            for (i, v) in l.versions.iter().enumerate() {
                externals.insert((l.name.clone(), i), defined_functions(&v.object)?);
            }
        }
    }

    // Each table's order, one for the whole workspace (every image gives
    // every name the same slot): the Δ-versioner's trampolines of each
    // versioned library, and the `--wrap` entries of every function any
    // version of a library defines.
    let tpl_order: BTreeMap<&str, Vec<String>> = delta_sets
        .iter()
        .filter_map(|(name, set)| {
            let versions = ws.libraries.iter().find(|l| &l.name == name)?.versions.len();
            Some((name.as_str(), by_change_history(Some(set), set.trampolines_for(versions))))
        })
        .collect();
    let mut wrap_order: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for ((name, _), fs) in &externals {
        wrap_order.entry(name.as_str()).or_default().extend(fs.iter().cloned());
    }
    for (name, fs) in wrap_order.iter_mut() {
        let all: BTreeSet<String> = std::mem::take(fs).into_iter().collect();
        *fs = by_change_history(delta_sets.get(*name), all);
    }

    let mut planned = Vec::new();
    for img in &ws.images {
        let mut spec = BuildSpec::new(img.output.clone(), img.objects.clone(), vec![]);
        spec.layout = ws.policy.trim_end_matches("-aslr").to_string();
        if ws.policy.ends_with("-aslr") {
            spec.shuffle = Some(image_seed(ws.seed, planned.len()));
        }
        let mut deltas = Vec::new();
        let mut versions = Vec::new();
        for r in &img.libraries {
            let Some((lib, idx)) = ws.find(r) else { continue };
            versions.push((lib.name.clone(), idx));
            let version = &lib.versions[idx];
            match delta_sets.get(&lib.name) {
                Some(set) => {
                    let j = idx + 1;
                    // The base is version 1's code in every image: label it
                    // so, or the pool would keep one identical copy per label.
                    spec.libraries.push(UserLibrary { name: lib.name.clone(), version: lib.versions[0].version.clone(), path: set.base.clone() });
                    // Newest first: ld keeps the first weak definition.
                    for d in set.deltas.iter().filter(|d| d.index <= j).rev() {
                        let name = format!("{}-delta{}", lib.name, d.index);
                        spec.deltas.push(UserLibrary { name: name.clone(), version: d.label.clone(), path: d.path.clone() });
                        deltas.push(name);
                    }
                    // Every image has a slot for every trampoline of the
                    // workspace, in one order, so a name keeps its address;
                    // names this version lacks get placeholder slots.
                    let ext = externals.get(&(lib.name.clone(), idx));
                    let mine: BTreeSet<String> = set.trampolines_for(j).into_iter().collect();
                    for t in tpl_order.get(lib.name.as_str()).into_iter().flatten() {
                        let symbol = format!("__shoal_tpl_{t}");
                        let target = if !mine.contains(t) {
                            String::new()
                        } else if ext.is_some_and(|e| e.contains(t)) {
                            format!("__real_{t}")
                        } else {
                            t.clone()
                        };
                        spec.trampolines.push(Trampoline { symbol, target, table: String::new() });
                    }
                }
                None => {
                    spec.libraries.push(UserLibrary { name: lib.name.clone(), version: version.version.clone(), path: version.object.clone() });
                }
            }
            if let Some(ext) = externals.get(&(lib.name.clone(), idx)) {
                // One slot per function any version defines.
                for f in wrap_order.get(lib.name.as_str()).into_iter().flatten() {
                    if ext.contains(f) {
                        spec.wrap.push(f.clone());
                        spec.trampolines.push(Trampoline { symbol: format!("__wrap_{f}"), target: format!("__real_{f}"), table: String::new() });
                    } else {
                        spec.trampolines.push(Trampoline { symbol: format!("__wrap_{f}"), target: String::new(), table: String::new() });
                    }
                }
            }
        }
        planned.push(Planned { spec, deltas, versions });
    }

    match ws.policy.as_str() {
        "default" | "dce" | "default-aslr" | "dce-aslr" => {
            for p in &planned {
                build(paths, &p.spec)?;
            }
        }
        _ => {
            // Pass 1: which members of the shared archives each image
            // takes. Images of different versions may take different
            // members (a newer SQLite calls more of libc); every image
            // then takes the union, so the shared libraries hold the same
            // code everywhere.
            let mut members = BTreeSet::new();
            for (i, p) in planned.iter().enumerate() {
                let mut spec = p.spec.clone();
                spec.output = scratch.path().join(format!("pass0-{i}"));
                let map = scratch.path().join(format!("pass0-{i}.map"));
                spec.map_file = Some(map.clone());
                build(paths, &spec)?;
                members.extend(archive_members_taken(&map)?);
            }
            let undefined = forcing_symbols(paths, &members)?;
            for p in &mut planned {
                p.spec.undefined = undefined.clone();
            }
            if ws.policy == "aslr" {
                route_through_library_tables(paths, &ws, &delta_sets, &externals, &members, scratch.path(), &mut planned)?;
            }
            // Pass 2: measure.
            let mut sizes = Sizes::default();
            for (i, p) in planned.iter().enumerate() {
                let mut spec = p.spec.clone();
                spec.output = scratch.path().join(format!("pass1-{i}"));
                let m = build(paths, &spec)?;
                let all: Vec<String> = m.libraries.iter().map(|l| l.info.name.clone()).filter(|n| !p.deltas.contains(n)).collect();
                sizes.kernel.extend(m.libraries.iter().filter(|l| l.info.kind == LibraryKind::Kernel).map(|l| l.info.name.clone()));
                sizes.measure(&section_extents(&spec.output)?, &all, &p.deltas);
                sizes.measure_aligns(&section_aligns(&spec.output)?);
            }
            // Canonical order: the first image's libraries (kernel, libc,
            // runtime first), then libraries only later images have, the
            // trampoline table and the application last.
            sizes.lib_order.retain(|n| n != "app" && n != "tpl");
            sizes.lib_order.push("tpl".into());
            sizes.lib_order.push("app".into());
            let shared_map = sizes.map(0x100000, None);
            for (i, p) in planned.iter().enumerate() {
                let mut spec = p.spec.clone();
                spec.map = Some(if ws.policy == "aslr" {
                    let mut rng = SplitMix(image_seed(ws.seed, i));
                    sizes.map_aslr(0x100000, &mut rng)
                } else {
                    shared_map.clone()
                });
                build(paths, &spec)?;
            }
        }
    }
    Ok(planned.into_iter().map(|p| p.spec.output).collect())
}

/// The shared archives whose members every image of a workspace takes
/// alike, by the file names `crate::link` gives them.
const SHARED_ARCHIVES: &[&str] = &["shoal-libc.a", "shoal-kernel.a", "shoal-libgcc.a"];

/// (archive, member) pairs a link took, from ld's link map.
fn archive_members_taken(map: &Path) -> Result<BTreeSet<(String, String)>> {
    let text = std::fs::read_to_string(map).map_err(|e| ToolchainError::Io(map.to_path_buf(), e))?;
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if line.starts_with("Discarded input sections") || line.starts_with("Memory Configuration") {
            break;
        }
        if line.starts_with(char::is_whitespace) || !line.ends_with(')') {
            continue;
        }
        let Some(open) = line.find(".a(") else { continue };
        let archive_path = &line[..open + 2];
        let member = &line[open + 3..line.len() - 1];
        let archive = archive_path.rsplit('/').next().unwrap_or(archive_path);
        if SHARED_ARCHIVES.contains(&archive) {
            out.insert((archive.to_string(), member.to_string()));
        }
    }
    Ok(out)
}

/// One global symbol defined by each of `members`, so that `-u SYMBOL`
/// takes that member into every link.
fn forcing_symbols(paths: &Paths, members: &BTreeSet<(String, String)>) -> Result<Vec<String>> {
    let files = [("shoal-libc.a", paths.sysroot().join("lib/libc.a")), ("shoal-kernel.a", paths.kernel_lib())];
    let mut out = Vec::new();
    for (name, file) in files {
        let wanted: BTreeSet<&str> = members.iter().filter(|(a, _)| a == name).map(|(_, m)| m.as_str()).collect();
        if wanted.is_empty() {
            continue;
        }
        let data = std::fs::read(&file).map_err(|e| ToolchainError::Io(file.clone(), e))?;
        let ar = object::read::archive::ArchiveFile::parse(&*data).map_err(|e| ToolchainError::Input(file.clone(), format!("not an archive: {e}")))?;
        let mut offsets = BTreeMap::new();
        for m in ar.members() {
            let m = m.map_err(|e| ToolchainError::Input(file.clone(), format!("bad member: {e}")))?;
            offsets.insert(m.file_range().0, String::from_utf8_lossy(m.name()).to_string());
        }
        let mut found = BTreeSet::new();
        if let Ok(Some(symbols)) = ar.symbols() {
            for sym in symbols.flatten() {
                // The symbol table points at member headers; match by the
                // member whose data follows the header.
                let at = sym.offset().0;
                let member = offsets.range(at..).next().map(|(_, n)| n.clone());
                if let Some(member) = member {
                    if wanted.contains(member.as_str()) && found.insert(member) {
                        out.push(String::from_utf8_lossy(sym.name()).to_string());
                    }
                }
            }
        }
    }
    // libgcc members are taken on demand; its helpers are tiny and only
    // the application libraries call them.
    Ok(out)
}

/// Where the delta objects of `lib` for the workspace `ws_path` are kept
/// (with their `delta.json`).
pub fn delta_dir(ws_path: &Path, lib: &str) -> PathBuf {
    let stem = ws_path.file_stem().map(|s| s.to_string_lossy().to_string()).unwrap_or_else(|| "workspace".into());
    ws_path.parent().unwrap_or(Path::new(".")).join(format!("{stem}.delta")).join(lib)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_checks_workspaces() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("w.toml");
        std::fs::write(
            &p,
            "policy = \"aligned\"\n[[library]]\nname = \"s\"\nversions = [{ version = \"1\", object = \"s1.o\" }]\n\
             [[image]]\noutput = \"out/a\"\nobjects = [\"a.o\"]\nlibraries = [\"s@1\"]\n",
        )
        .unwrap();
        let ws = Workspace::read(&p).unwrap();
        assert_eq!(ws.images[0].output, dir.path().join("out/a"));
        assert_eq!(ws.libraries[0].versions[0].object, dir.path().join("s1.o"));
        std::fs::write(&p, "policy = \"nope\"\n[[image]]\noutput = \"a\"\n").unwrap();
        assert!(Workspace::read(&p).unwrap_err().to_string().contains("unknown policy"));
        std::fs::write(&p, "policy = \"aligned\"\n[[image]]\noutput = \"a\"\nlibraries = [\"x@1\"]\n").unwrap();
        assert!(Workspace::read(&p).unwrap_err().to_string().contains("no [[library]]"));
        std::fs::write(&p, "policy = \"aligned\"\nbogus = 1\n").unwrap();
        assert!(Workspace::read(&p).is_err());
    }

    #[test]
    fn maps_are_page_aligned_and_shared_or_randomised() {
        let mut s = Sizes::default();
        let mut ext = BTreeMap::new();
        ext.insert(".text.libc".to_string(), (0, 5000));
        ext.insert(".text.app".to_string(), (0, 100));
        ext.insert(".rodata.libc".to_string(), (0, 10));
        ext.insert(".data.libc".to_string(), (0, 10));
        s.measure(&ext, &["libc".into(), "app".into()], &[]);
        ext.insert(".text.libc".to_string(), (0, 9000));
        s.measure(&ext, &["libc".into(), "app".into()], &[]);
        let m = s.map(0x100000, None);
        assert_eq!(m[".text.libc"], 0x100000);
        assert_eq!(m[".text.app"], 0x100000 + 3 * 4096, "the largest libc decides");
        assert!(m.iter().filter(|(n, _)| !n.starts_with(".data.") && !n.starts_with(".bss.")).all(|(_, a)| a % 4096 == 0));
        let r1 = s.map(0x100000, Some(&mut SplitMix(1)));
        let r1b = s.map(0x100000, Some(&mut SplitMix(1)));
        assert_eq!(r1, r1b, "a seed gives one layout");
        let differs = (2..20).any(|seed| s.map(0x100000, Some(&mut SplitMix(seed))) != r1);
        assert!(differs, "seeds give different layouts");
        assert!(r1.values().all(|a| a % 4096 == 0), "randomised maps keep every region on its pages");
    }

    #[test]
    fn writable_regions_are_packed_at_their_alignment() {
        let mut s = Sizes::default();
        let mut ext = BTreeMap::new();
        ext.insert(".text.mm".to_string(), (0, 100));
        ext.insert(".data.mm".to_string(), (0, 0x38));
        ext.insert(".data.libc".to_string(), (0, 0x220));
        ext.insert(".bss.mm".to_string(), (0, 0x6c0));
        ext.insert(".bss.libc".to_string(), (0, 0x10));
        ext.insert(".text.s-delta2".to_string(), (0, 50));
        ext.insert(".data.s-delta2".to_string(), (0, 0x628));
        ext.insert(".bss.s-delta2".to_string(), (0, 0x10));
        ext.insert(".data.app".to_string(), (0, 0x20));
        ext.insert(".bss.app".to_string(), (0, 0x30));
        s.measure(&ext, &["mm".into(), "libc".into(), "app".into()], &["s-delta2".into()]);
        s.kernel.insert("mm".into());
        let mut aligns = BTreeMap::new();
        for (n, a) in
            [(".data.mm", 8), (".data.libc", 32), (".bss.libc", 32), (".data.app", 16), (".bss.app", 8), (".data.s-delta2", 32), (".bss.s-delta2", 16)]
        {
            aligns.insert(n.to_string(), a);
        }
        aligns.insert(".bss.mm".to_string(), 0x1000);
        s.measure_aligns(&aligns);
        let m = s.map(0x100000, None);
        let rw = m[MISC_RW];
        assert_eq!(rw % 4096, 0);
        assert_eq!(m[".data.mm"], rw + 4096, "a kernel component's data on a page of its own");
        assert_eq!(m[".data.libc"], rw + 2 * 4096, "the region after a kernel component's starts a page");
        assert_eq!(m[".data.app"], rw + 2 * 4096 + 0x240, "packed after libc's, at a cache line");
        assert_eq!(m[".bss.mm"], rw + 3 * 4096, "a kernel component's bss on a page of its own");
        assert_eq!(m[".bss.libc"], rw + 4 * 4096);
        assert_eq!(m[".bss.app"], rw + 4 * 4096 + 64, "at a cache line at least");
        let dtext = m[".text.s-delta2"];
        assert_eq!(dtext % 4096, 0);
        assert_eq!(m[".data.s-delta2"], dtext + 4096, "the delta area's first writable region starts a page");
        assert_eq!(m[".bss.s-delta2"], dtext + 4096 + 0x640);
    }
}
