//! The image manifest (docs/design.md "Memory and sharing"; Spacer-Δ's "description file").
//!
//! `shoal build` writes `IMAGE.manifest.json` next to every image. It lists
//! each library the image holds (kernel components, libc, the compiler
//! runtime, application libraries, the application), its version, the
//! page-aligned regions it occupies (code, read-only data, data, bss) and a
//! hash of every page of its code and read-only data. `shoal pages`, the
//! library pool and the loader use it to find identical pages across images.
//!
//! The linker script names output sections `.text.LIB`, `.rodata.LIB`,
//! `.data.LIB` and `.bss.LIB`, so the regions are read back from the linked
//! image's section headers rather than predicted.
#![deny(missing_docs)]

use object::read::elf::{ElfFile64, ProgramHeader};
use object::{Object, ObjectSection};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// Version of the manifest format.
pub const FORMAT: u32 = 1;
/// Page size the hashes are computed over.
pub const PAGE: u64 = 4096;
/// Largest region a manifest describes (guest memory is at most 4 GiB).
const MAX_REGION: u64 = 4 << 30;

/// Why a manifest could not be made, read or written.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The image is not an ELF file the manifest can describe.
    #[error("cannot describe image {0}: {1}")]
    BadImage(PathBuf, String),
    /// Reading or writing a file failed.
    #[error("cannot access {0}: {1}")]
    Io(PathBuf, std::io::Error),
    /// The manifest file is not valid JSON of the expected shape.
    #[error("manifest {0} is invalid: {1}")]
    Parse(PathBuf, serde_json::Error),
    /// The manifest uses another format version.
    #[error("manifest {0} has format {1}, this shoal reads format {FORMAT}")]
    Format(PathBuf, u32),
}

/// What part of the image a library is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LibraryKind {
    /// A kernel component (docs/design.md "Components and recovery") or the kernel's Rust runtime.
    Kernel,
    /// shoal's libc.
    Libc,
    /// The C compiler's runtime (libgcc).
    Runtime,
    /// An application library (e.g. SQLite).
    Library,
    /// The application's own objects.
    App,
}

/// The kind of a region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RegionKind {
    /// Code (read + execute).
    Text,
    /// Read-only data.
    Rodata,
    /// Initialised writable data.
    Data,
    /// Zero-initialised writable data.
    Bss,
}

impl RegionKind {
    /// The output-section prefix the linker script uses for this kind.
    pub fn section_prefix(self) -> &'static str {
        match self {
            RegionKind::Text => ".text.",
            RegionKind::Rodata => ".rodata.",
            RegionKind::Data => ".data.",
            RegionKind::Bss => ".bss.",
        }
    }

    const ALL: [RegionKind; 4] = [RegionKind::Text, RegionKind::Rodata, RegionKind::Data, RegionKind::Bss];
}

/// One page-aligned region of a library.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Region {
    /// What the region holds.
    pub kind: RegionKind,
    /// First address (page aligned).
    pub start: u64,
    /// One past the last used address.
    pub end: u64,
    /// SHA-256 of each 4 KiB page `[start, align_up(end))` as it is in
    /// memory (text and rodata only; empty for data and bss).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub page_hashes: Vec<PageHash>,
}

/// The SHA-256 of one page, written in the manifest as 64 hex digits.
///
/// Kept as bytes, not as a `String` each: a manifest has thousands of them,
/// and a tender reading it in pool mode would otherwise leave thousands of
/// small freed allocations behind, some of which glibc's per-thread cache
/// keeps — pinning their heap pages in every instance for its whole life.
/// Parsing also checks the form (64 hex digits), as for any untrusted input.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PageHash(pub [u8; 32]);

impl PageHash {
    /// The hash of `page`'s bytes.
    pub fn of(page: &[u8]) -> PageHash {
        PageHash(Sha256::digest(page).into())
    }
}

impl std::fmt::Display for PageHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl std::fmt::Debug for PageHash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PageHash({self})")
    }
}

impl Serialize for PageHash {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for PageHash {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<PageHash, D::Error> {
        struct Hex;
        impl serde::de::Visitor<'_> for Hex {
            type Value = PageHash;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a SHA-256 as 64 hex digits")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<PageHash, E> {
                let digit = |c: u8| -> Option<u8> { (c as char).to_digit(16).map(|d| d as u8) };
                let b = v.as_bytes();
                if b.len() != 64 {
                    return Err(E::invalid_value(serde::de::Unexpected::Str(v), &self));
                }
                let mut out = [0u8; 32];
                for (i, pair) in b.chunks_exact(2).enumerate() {
                    match (digit(pair[0]), digit(pair[1])) {
                        (Some(h), Some(l)) => out[i] = h << 4 | l,
                        _ => return Err(E::invalid_value(serde::de::Unexpected::Str(v), &self)),
                    }
                }
                Ok(PageHash(out))
            }
        }
        d.deserialize_str(Hex)
    }
}

/// A library as the build describes it (before linking).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LibraryInfo {
    /// Name, also the suffix of its output sections (`.text.NAME`).
    pub name: String,
    /// Version string.
    pub version: String,
    /// What it is.
    pub kind: LibraryKind,
}

/// A library in a linked image.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Library {
    /// Name, version and kind.
    #[serde(flatten)]
    pub info: LibraryInfo,
    /// Its regions, in address order.
    pub regions: Vec<Region>,
}

/// The manifest of one image.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// [`FORMAT`].
    pub format: u32,
    /// The layout policy the image was linked with.
    pub layout: String,
    /// ELF entry point.
    pub entry: u64,
    /// SHA-256 of the image file.
    pub image_sha256: String,
    /// Libraries, in address order of their code.
    pub libraries: Vec<Library>,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes of guest page `addr` as the loader would put them in memory.
fn page_bytes(elf: &ElfFile64, data: &[u8], addr: u64) -> Vec<u8> {
    let mut page = vec![0u8; PAGE as usize];
    let endian = elf.endian();
    for ph in elf.elf_program_headers() {
        if ph.p_type(endian) != object::elf::PT_LOAD {
            continue;
        }
        let (va, fsz, off) = (ph.p_vaddr(endian), ph.p_filesz(endian), ph.p_offset(endian));
        let lo = addr.max(va);
        let hi = addr.saturating_add(PAGE).min(va.saturating_add(fsz));
        if lo >= hi {
            continue;
        }
        let Some(src) = off.checked_add(lo - va).and_then(|s| usize::try_from(s).ok()) else { continue };
        let len = (hi - lo) as usize;
        if let Some(s) = src.checked_add(len).and_then(|end| data.get(src..end)) {
            let dst = (lo - addr) as usize;
            page[dst..dst + len].copy_from_slice(s);
        }
    }
    page
}

impl Manifest {
    /// Describes the linked image `data` (read from `path`), whose
    /// libraries are `libs`.
    pub fn describe(path: &Path, data: &[u8], libs: &[LibraryInfo], layout: &str) -> Result<Manifest, ManifestError> {
        let bad = |e: String| ManifestError::BadImage(path.to_path_buf(), e);
        let elf = ElfFile64::<object::Endianness>::parse(data).map_err(|e| bad(e.to_string()))?;
        let mut libraries = Vec::new();
        for info in libs {
            let mut regions = Vec::new();
            for kind in RegionKind::ALL {
                let name = format!("{}{}", kind.section_prefix(), info.name);
                let Some(sec) = elf.section_by_name(&name) else { continue };
                if sec.size() == 0 {
                    continue;
                }
                let start = sec.address();
                let end =
                    start.checked_add(sec.size()).filter(|_| sec.size() <= MAX_REGION).ok_or_else(|| bad(format!("section {name} is implausibly large")))?;
                let mut page_hashes = Vec::new();
                if matches!(kind, RegionKind::Text | RegionKind::Rodata) {
                    let mut a = start & !(PAGE - 1);
                    while a < end {
                        page_hashes.push(PageHash::of(&page_bytes(&elf, data, a)));
                        a += PAGE;
                    }
                }
                regions.push(Region { kind, start, end, page_hashes });
            }
            libraries.push(Library { info: info.clone(), regions });
        }
        Ok(Manifest { format: FORMAT, layout: layout.to_string(), entry: elf.entry(), image_sha256: hex(&Sha256::digest(data)), libraries })
    }

    /// Whether this manifest was written for the image whose bytes are
    /// `image` (its `image_sha256`).
    pub fn describes(&self, image: &[u8]) -> bool {
        hex(&Sha256::digest(image)) == self.image_sha256
    }

    /// The images a command line names, each once and in order: a shell
    /// glob such as `out/*` also names the manifests and the debug
    /// information, and a manifest (`IMAGE.manifest.json`) or an image's
    /// debug information (`IMAGE.debug`, which `shoal build` keeps beside
    /// it) stands for its image.
    pub fn images_named(paths: &[PathBuf]) -> Vec<PathBuf> {
        let mut list: Vec<PathBuf> = Vec::new();
        for p in paths {
            let companion = p.to_str().and_then(|s| s.strip_suffix(".manifest.json").or_else(|| s.strip_suffix(".debug")));
            let img = match companion {
                Some(stem) => PathBuf::from(stem),
                None => p.clone(),
            };
            if !list.contains(&img) {
                list.push(img);
            }
        }
        list
    }

    /// The manifest path that belongs to `image`.
    pub fn path_for(image: &Path) -> PathBuf {
        let mut s = image.as_os_str().to_owned();
        s.push(".manifest.json");
        PathBuf::from(s)
    }

    /// Writes the manifest as pretty JSON to `path`.
    pub fn write(&self, path: &Path) -> Result<(), ManifestError> {
        let text = serde_json::to_string_pretty(self).map_err(|e| ManifestError::Parse(path.to_path_buf(), e))?;
        std::fs::write(path, text + "\n").map_err(|e| ManifestError::Io(path.to_path_buf(), e))
    }

    /// Reads and checks a manifest.
    pub fn read(path: &Path) -> Result<Manifest, ManifestError> {
        let text = std::fs::read(path).map_err(|e| ManifestError::Io(path.to_path_buf(), e))?;
        Self::parse(path, &text)
    }

    /// Parses manifest bytes (`path` only names them in errors).
    pub fn parse(path: &Path, text: &[u8]) -> Result<Manifest, ManifestError> {
        let m: Manifest = serde_json::from_slice(text).map_err(|e| ManifestError::Parse(path.to_path_buf(), e))?;
        if m.format != FORMAT {
            return Err(ManifestError::Format(path.to_path_buf(), m.format));
        }
        Ok(m)
    }

    /// The library called `name`.
    pub fn library(&self, name: &str) -> Option<&Library> {
        self.libraries.iter().find(|l| l.info.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_garbage() {
        let m = Manifest {
            format: FORMAT,
            layout: "default".into(),
            entry: 0x100000,
            image_sha256: "00".into(),
            libraries: vec![Library {
                info: LibraryInfo { name: "libc".into(), version: "1".into(), kind: LibraryKind::Libc },
                regions: vec![Region { kind: RegionKind::Text, start: 0x100000, end: 0x100010, page_hashes: vec![PageHash::of(b"page")] }],
            }],
        };
        let text = serde_json::to_vec(&m).unwrap();
        assert_eq!(Manifest::parse(Path::new("m"), &text).unwrap(), m);
        assert!(Manifest::parse(Path::new("m"), b"{").is_err());
        let mut other = m.clone();
        other.format = 99;
        let text = serde_json::to_vec(&other).unwrap();
        assert!(matches!(Manifest::parse(Path::new("m"), &text), Err(ManifestError::Format(_, 99))));
    }

    #[test]
    fn page_hashes_are_64_hex_digits() {
        let h = PageHash::of(&[0u8; 4096]);
        let text = serde_json::to_string(&h).unwrap();
        assert_eq!(text, "\"ad7facb2586fc6e966c004d7d1d16b024f5805ff7cb47c7a85dabd8b48892ca7\"");
        assert_eq!(serde_json::from_str::<PageHash>(&text).unwrap(), h);
        assert_eq!(serde_json::from_str::<PageHash>(&text.to_uppercase()).unwrap(), h);
        for bad in ["\"ab\"", "\"\"", "12", &format!("\"{}zz\"", &text[1..63])] {
            let e = serde_json::from_str::<PageHash>(bad).unwrap_err().to_string();
            assert!(e.contains("64 hex digits") || e.contains("invalid type"), "{bad}: {e}");
        }
    }

    #[test]
    fn refuses_a_non_elf_image() {
        let e = Manifest::describe(Path::new("x"), b"not an elf", &[], "default").unwrap_err();
        assert!(e.to_string().contains("cannot describe image x"));
    }
}
