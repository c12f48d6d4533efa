//! The libraries of an image and the linker script that places them
//! (docs/design.md "The image", "Layout policies").
//!
//! Every library gets its own output sections, one per kind: code
//! (`.text.LIB`), read-only data (`.rodata.LIB`), data (`.data.LIB`) and bss
//! (`.bss.LIB`). The sections of one kind are grouped into one ELF segment
//! with that kind's permissions (R+X, R, R+W), so no page is both writable
//! and executable. The application's objects come last and catch every
//! input section not claimed by a library. Deltas of versioned libraries
//! (the `delta` policy) sit in a separate area after everything else, with
//! segments of their own.
//!
//! How the sections are placed is the layout policy:
//! - `default`: the paper's baseline: libraries follow each other with no
//!   page alignment between them (only the three segments start on pages);
//! - `dce`: `default` linked with `--gc-sections`;
//! - `aligned` (what `shoal cc` and `shoal build` use for a single image):
//!   every library region starts on a page; in a workspace every region
//!   gets one fixed address in all images ([`AddressMap`]);
//! - `delta` and `aslr`: see `crate::workspace`.
//!
//! Input sections dropped from every image: `.eh_frame`/`.eh_frame_hdr`
//! and the landing-pad tables `.gcc_except_table*` of precompiled Rust code
//! (shoal runs C and a panic=abort kernel: nothing unwinds, and ld cannot
//! split unwind tables per library), `.note.GNU-stack`, `.note.gnu.property`
//! and build ids.

use shoal_manifest::{LibraryInfo, LibraryKind};
use std::collections::BTreeMap;
use std::fmt::Write;

/// One library of an image: what it is and which linker input files make it.
#[derive(Clone, Debug)]
pub struct LibrarySpec {
    /// Name, version and kind (the name becomes the output-section suffix).
    pub info: LibraryInfo,
    /// ld input-file patterns, e.g. `*shoal-libc.a:*` (an archive's
    /// members) or `*shoal-crt1.o`. Empty: every input not claimed before
    /// (the application).
    pub inputs: Vec<String>,
}

/// The order of the kernel components in the address space (docs/design.md "Components and recovery");
/// components not listed follow in the order found.
pub const COMPONENT_ORDER: &[&str] = &["plat", "mm", "sched", "vfs", "ramfs", "time", "process", "sysinfo", "user", "net", "syscall", "recover", "kernel"];

/// Fixed start addresses, by output-section name (`.text.libc`), plus the
/// pseudo-names [`MISC_RO`], [`MISC_RW`] for the per-image tables.
pub type AddressMap = BTreeMap<String, u64>;

/// Key of [`AddressMap`] for the per-image read-only tables (`.note.shoal`).
pub const MISC_RO: &str = ".misc.ro";
/// Key of [`AddressMap`] for the per-image writable tables (TLS template,
/// init/fini arrays, GOT).
pub const MISC_RW: &str = ".misc.rw";

/// Everything the script generator needs.
#[derive(Clone, Debug)]
pub struct ScriptPlan {
    /// Policy name, written into the script's header comment.
    pub policy: String,
    /// Link address of the first region.
    pub base: u64,
    /// Libraries in address order; the last one (the application) usually
    /// has no inputs, i.e. catches everything left.
    pub libs: Vec<LibrarySpec>,
    /// Delta libraries, placed after everything else.
    pub deltas: Vec<LibrarySpec>,
    /// Start every library region on a page.
    pub page_align: bool,
    /// Fixed addresses (workspace policies); `None`: sequential.
    pub map: Option<AddressMap>,
    /// Bytes of gap before a library's regions (link-time ASLR of the
    /// packed layouts), by library name.
    pub gaps: BTreeMap<String, u64>,
    /// Put each library's read-only data with relocations
    /// (`.data.rel.ro*`: pointer tables, vtables, panic locations) on pages
    /// of its own after its plain read-only data. Under `aslr` those
    /// pointers differ in every image; kept apart, they no longer make the
    /// library's other read-only pages differ too.
    pub split_relro: bool,
}

/// The four region kinds and their input sections.
pub const KINDS: [(&str, &str); 4] =
    [("text", ".text .text.*"), ("rodata", ".rodata .rodata.* .data.rel.ro .data.rel.ro.*"), ("data", ".data .data.*"), ("bss", ".bss .bss.* COMMON")];

/// The rodata kind's input sections without relocations, and with
/// (see [`ScriptPlan::split_relro`]).
const RODATA_PLAIN: &str = ".rodata .rodata.*";
const RODATA_RELRO: &str = ".data.rel.ro .data.rel.ro.*";

fn inputs(l: &LibrarySpec, sections: &str, exclude: &[String]) -> String {
    if l.inputs.is_empty() {
        // The catch-all comes before the delta area in the script, and the
        // first matching statement wins: keep the deltas' files out of it.
        if exclude.is_empty() {
            return format!("*({sections})");
        }
        return format!("EXCLUDE_FILE({}) *({sections})", exclude.join(" "));
    }
    l.inputs.iter().map(|p| format!("{p}({sections})")).collect::<Vec<_>>().join(" ")
}

impl ScriptPlan {
    fn placement(&self, name: &str, lib: &str) -> String {
        match self.map.as_ref().and_then(|m| m.get(name)) {
            Some(a) => format!("{a:#x}"),
            None if self.page_align => "ALIGN(0x1000)".into(),
            None => match self.gaps.get(lib) {
                Some(&g) if g > 0 => format!("(. + {g:#x})"),
                _ => String::new(),
            },
        }
    }

    /// Libraries in the order of their `kind` regions' addresses.
    fn ordered<'a>(&'a self, libs: &'a [LibrarySpec], kind: &str) -> Vec<&'a LibrarySpec> {
        let mut v: Vec<&LibrarySpec> = libs.iter().collect();
        if let Some(m) = &self.map {
            v.sort_by_key(|l| m.get(&format!(".{kind}.{}", l.info.name)).copied().unwrap_or(u64::MAX));
        }
        v
    }

    fn region(&self, s: &mut String, l: &LibrarySpec, kind: &str, sections: &str, phdr: &str) {
        let name = format!(".{kind}.{}", l.info.name);
        let noload = if kind == "bss" { " (NOLOAD)" } else { "" };
        // _init/_fini are assembled from crti.o and crtn.o pieces in
        // command-line order; they belong to libc's code.
        let extra = if kind == "text" && l.info.name == "libc" { " KEEP(*(.init)) KEEP(*(.fini))" } else { "" };
        let exclude: Vec<String> = self.deltas.iter().flat_map(|d| d.inputs.iter().cloned()).collect();
        let body = if kind == "rodata" && self.split_relro {
            format!("{} . = ALIGN(0x1000); {}", inputs(l, RODATA_PLAIN, &exclude), inputs(l, RODATA_RELRO, &exclude))
        } else {
            inputs(l, sections, &exclude)
        };
        // A kernel component's regions are bracketed by symbols
        // (`__shoal_region_LIB_KIND_start`, `…_end` for text, data and
        // bss): the kernel's `recover` component attributes a call to the
        // component whose code it enters, and snapshots and restores the
        // writable regions to reboot the component alone (docs/design.md "Components and recovery").
        let (open, close) = match (kind, l.info.kind) {
            ("text" | "data" | "bss", LibraryKind::Kernel) if l.info.name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') => {
                let sym = format!("__shoal_region_{}_{kind}", l.info.name);
                (format!("{sym}_start = .; "), format!(" {sym}_end = .;"))
            }
            _ => (String::new(), String::new()),
        };
        let _ = writeln!(s, "  {name} {}{noload} : {{ {open}{body}{extra}{close} }} :{phdr}", self.placement(&name, &l.info.name));
    }

    /// The linker script.
    pub fn script(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "/* Generated by `shoal build` (layout policy: {}). */", self.policy);
        let _ = writeln!(s, "ENTRY(_shoal_start)");
        let _ = writeln!(s, "PHDRS\n{{");
        let _ = writeln!(s, "  text PT_LOAD FLAGS(5);\n  rodata PT_LOAD FLAGS(4);\n  data PT_LOAD FLAGS(6);");
        if !self.deltas.is_empty() {
            let _ = writeln!(s, "  dtext PT_LOAD FLAGS(5);\n  drodata PT_LOAD FLAGS(4);\n  ddata PT_LOAD FLAGS(6);");
        }
        let _ = writeln!(s, "  tls PT_TLS;\n}}");
        let _ = writeln!(s, "SECTIONS\n{{");
        let _ = writeln!(s, "  . = {:#x};", self.base);
        let _ = writeln!(s, "  __shoal_image_start = .;");
        let (text, rodata, data, bss) = (KINDS[0].1, KINDS[1].1, KINDS[2].1, KINDS[3].1);
        for l in self.ordered(&self.libs, "text") {
            self.region(&mut s, l, "text", text, "text");
        }
        let _ = writeln!(s, "  . = ALIGN(0x1000);");
        for l in self.ordered(&self.libs, "rodata") {
            self.region(&mut s, l, "rodata", rodata, "rodata");
        }
        let misc_ro = match self.map.as_ref().and_then(|m| m.get(MISC_RO)) {
            Some(a) => format!("{a:#x}"),
            None => "ALIGN(16)".into(),
        };
        // The ABI note is read from the file by the tenders (by section
        // name) and by nothing in the guest: `INFO` keeps it out of every
        // loaded segment. Loaded, it was a page of its own in the workspace
        // policies (at `MISC_RO`), copied into every instance for 16 bytes.
        let _ = writeln!(s, "  .note.shoal {misc_ro} (INFO) : {{ KEEP(*(.note.shoal)) }}");
        let _ = writeln!(s, "  . = ALIGN(0x1000);");
        let misc_rw = match self.map.as_ref().and_then(|m| m.get(MISC_RW)) {
            Some(a) => format!("{a:#x}"),
            None => String::new(),
        };
        let _ = writeln!(s, "  .tdata {misc_rw} : {{ *(.tdata .tdata.*) }} :data :tls");
        let _ = writeln!(s, "  .tbss : {{ *(.tbss .tbss.*) }} :data :tls");
        let _ = writeln!(
            s,
            "  .init_array ALIGN(8) : {{ PROVIDE_HIDDEN(__init_array_start = .); KEEP(*(SORT_BY_INIT_PRIORITY(.init_array.*) SORT_BY_INIT_PRIORITY(.ctors.*))) KEEP(*(.init_array .ctors)) PROVIDE_HIDDEN(__init_array_end = .); }} :data"
        );
        let _ = writeln!(
            s,
            "  .fini_array ALIGN(8) : {{ PROVIDE_HIDDEN(__fini_array_start = .); KEEP(*(SORT_BY_INIT_PRIORITY(.fini_array.*) SORT_BY_INIT_PRIORITY(.dtors.*))) KEEP(*(.fini_array .dtors)) PROVIDE_HIDDEN(__fini_array_end = .); }} :data"
        );
        let _ = writeln!(s, "  .got : {{ *(.got) *(.igot) }} :data");
        let _ = writeln!(s, "  .got.plt : {{ *(.got.plt) *(.igot.plt) }} :data");
        for l in self.ordered(&self.libs, "data") {
            self.region(&mut s, l, "data", data, "data");
        }
        for l in self.ordered(&self.libs, "bss") {
            self.region(&mut s, l, "bss", bss, "data");
        }
        if !self.deltas.is_empty() {
            let _ = writeln!(s, "  . = ALIGN(0x1000);");
            for (kind, secs, phdr) in [("text", text, "dtext"), ("rodata", rodata, "drodata"), ("data", data, "ddata"), ("bss", bss, "ddata")] {
                for l in self.ordered(&self.deltas, kind) {
                    self.region(&mut s, l, kind, secs, phdr);
                }
            }
        }
        let _ = writeln!(s, "  . = ALIGN(0x1000);");
        let _ = writeln!(s, "  _end = .; PROVIDE(end = .);");
        let _ = writeln!(
            s,
            "  /DISCARD/ : {{ *(.eh_frame) *(.eh_frame_hdr) *(.gcc_except_table .gcc_except_table.*) *(.note.GNU-stack) *(.note.gnu.property) *(.note.gnu.build-id) }}"
        );
        let _ = writeln!(s, "}}");
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lib(name: &str, inputs: &[&str], kind: LibraryKind) -> LibrarySpec {
        LibrarySpec { info: LibraryInfo { name: name.into(), version: "1".into(), kind }, inputs: inputs.iter().map(|s| s.to_string()).collect() }
    }

    fn plan(page_align: bool, map: Option<AddressMap>) -> ScriptPlan {
        ScriptPlan {
            policy: "test".into(),
            base: 0x100000,
            libs: vec![
                lib("mm", &["*shoal-kernel.a:shoal_mm-*"], LibraryKind::Kernel),
                lib("libc", &["*shoal-libc.a:*"], LibraryKind::Libc),
                lib("app", &[], LibraryKind::App),
            ],
            deltas: vec![],
            gaps: BTreeMap::new(),
            split_relro: false,
            page_align,
            map,
        }
    }

    #[test]
    fn aligned_places_every_library_in_its_own_aligned_regions() {
        let s = plan(true, None).script();
        for kind in [".text.", ".rodata.", ".data.", ".bss."] {
            for lib in ["mm", "libc", "app"] {
                assert!(s.contains(&format!("  {kind}{lib} ALIGN(0x1000)")), "{kind}{lib} missing:\n{s}");
            }
        }
        assert!(s.contains("*shoal-kernel.a:shoal_mm-*(.text .text.*)"));
        assert!(s.contains(".text.app ALIGN(0x1000) : { *(.text .text.*) }"));
        assert!(s.find(".text.mm").unwrap() < s.find(".text.app").unwrap());
        assert!(s.contains("ENTRY(_shoal_start)"));
        assert!(!s.contains("dtext"));
    }

    #[test]
    fn kernel_components_writable_regions_carry_bounds_symbols() {
        let s = plan(true, None).script();
        assert!(
            s.contains(
                ".data.mm ALIGN(0x1000) : { __shoal_region_mm_data_start = .; *shoal-kernel.a:shoal_mm-*(.data .data.*) __shoal_region_mm_data_end = .; }"
            ),
            "{s}"
        );
        assert!(s.contains(".bss.mm ALIGN(0x1000) (NOLOAD) : { __shoal_region_mm_bss_start = .; *shoal-kernel.a:shoal_mm-*(.bss .bss.* COMMON) __shoal_region_mm_bss_end = .; }"), "{s}");
        assert!(
            s.contains(
                ".text.mm ALIGN(0x1000) : { __shoal_region_mm_text_start = .; *shoal-kernel.a:shoal_mm-*(.text .text.*) __shoal_region_mm_text_end = .; }"
            ),
            "{s}"
        );
        assert!(!s.contains("__shoal_region_mm_rodata"), "{s}");
        assert!(!s.contains("__shoal_region_libc"), "only kernel components: {s}");
    }

    #[test]
    fn default_packs_and_a_map_fixes_addresses() {
        let s = plan(false, None).script();
        assert!(s.contains("  .text.mm  : {"), "{s}");
        let mut m = AddressMap::new();
        // Reverse order in the map: the script follows the addresses.
        m.insert(".text.libc".into(), 0x100000);
        m.insert(".text.mm".into(), 0x200000);
        m.insert(MISC_RO.into(), 0x900000);
        let s = plan(true, Some(m)).script();
        assert!(s.contains(".text.libc 0x100000 : {"));
        assert!(s.contains(".text.mm 0x200000 : {"));
        assert!(s.find(".text.libc").unwrap() < s.find(".text.mm").unwrap());
        assert!(s.contains(".note.shoal 0x900000 (INFO) :"), "{s}");
    }

    #[test]
    fn relro_gets_pages_of_its_own_only_when_asked() {
        let s = plan(true, None).script();
        assert!(s.contains(".rodata.mm ALIGN(0x1000) : { *shoal-kernel.a:shoal_mm-*(.rodata .rodata.* .data.rel.ro .data.rel.ro.*) }"), "{s}");
        let mut p = plan(true, None);
        p.split_relro = true;
        let s = p.script();
        assert!(
            s.contains(".rodata.mm ALIGN(0x1000) : { *shoal-kernel.a:shoal_mm-*(.rodata .rodata.*) . = ALIGN(0x1000); *shoal-kernel.a:shoal_mm-*(.data.rel.ro .data.rel.ro.*) }"),
            "{s}"
        );
        // Other kinds are unchanged.
        assert!(
            s.contains(
                ".text.mm ALIGN(0x1000) : { __shoal_region_mm_text_start = .; *shoal-kernel.a:shoal_mm-*(.text .text.*) __shoal_region_mm_text_end = .; }"
            ),
            "{s}"
        );
    }

    #[test]
    fn deltas_get_their_own_segments() {
        let mut p = plan(true, None);
        p.deltas.push(lib("sqlite-delta2", &["*shoal-obj.sqlite-delta2.*.o"], LibraryKind::Library));
        let s = p.script();
        assert!(s.contains("dtext PT_LOAD FLAGS(5)"));
        assert!(s.contains(".text.sqlite-delta2 ALIGN(0x1000) : { *shoal-obj.sqlite-delta2.*.o(.text .text.*) } :dtext"));
        assert!(s.contains(".bss.sqlite-delta2 ALIGN(0x1000) (NOLOAD) : {"));
        assert!(s.contains(".text.app ALIGN(0x1000) : { EXCLUDE_FILE(*shoal-obj.sqlite-delta2.*.o) *(.text .text.*) }"), "{s}");
    }
}
