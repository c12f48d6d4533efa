//! `shoal pages`: how many distinct 4 KiB frames a set of images needs for
//! code and read-only data when identical pages are shared — the static
//! version of Spacer-Δ's memory measurement.
//!
//! The manifests list a SHA-256 per page of every library's code and
//! rodata; a frame is a distinct page content. All-zero pages are not
//! counted: the loader never backs them (they are holes of the aligned
//! layouts).

use crate::{Result, ToolchainError};
use shoal_manifest::{Manifest, PageHash, RegionKind};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// The sharing figures of one library (or of everything).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sharing {
    /// Images that contain the library.
    pub images: usize,
    /// Code + rodata pages summed over those images (zero pages excluded).
    pub pages: usize,
    /// Distinct page contents among them.
    pub frames: usize,
    /// The most pages one image has of it.
    pub max_per_image: usize,
    /// The most distinct page contents one image has of it.
    pub max_distinct_per_image: usize,
}

impl Sharing {
    /// Whether every image's pages of this library are shared with the
    /// others (the library needs no more frames than one image has pages).
    pub fn fully_shared(&self) -> bool {
        self.frames <= self.max_distinct_per_image
    }
}

/// The whole analysis.
#[derive(Clone, Debug, Default)]
pub struct PagesReport {
    /// Number of images.
    pub images: usize,
    /// Per library name.
    pub libraries: BTreeMap<String, Sharing>,
    /// All libraries together (a content shared by two libraries counts once).
    pub total: Sharing,
}

fn zero_page_hash() -> PageHash {
    PageHash::of(&[0u8; 4096])
}

/// Analyses the images (their manifests must be next to them).
pub fn analyse(images: &[PathBuf]) -> Result<PagesReport> {
    if images.is_empty() {
        return Err(ToolchainError::Usage("shoal pages: no images given".into()));
    }
    let zero = zero_page_hash();
    let mut libs: BTreeMap<String, (Sharing, BTreeSet<PageHash>)> = BTreeMap::new();
    let mut all = BTreeSet::new();
    let mut total = Sharing { images: images.len(), ..Default::default() };
    // `shoal pages dir/*` also names the manifests: take each image once.
    let list = Manifest::images_named(images);
    total.images = list.len();
    for img in &list {
        if !img.is_file() {
            return Err(ToolchainError::Input(img.clone(), "no such image".into()));
        }
        let m = Manifest::read(&Manifest::path_for(img))?;
        let mut image_pages = 0;
        let mut image_set = BTreeSet::new();
        for l in &m.libraries {
            let entry = libs.entry(l.info.name.clone()).or_default();
            let mut n = 0;
            let mut lib_set = BTreeSet::new();
            for r in &l.regions {
                if !matches!(r.kind, RegionKind::Text | RegionKind::Rodata) {
                    continue;
                }
                for h in &r.page_hashes {
                    if *h == zero {
                        continue;
                    }
                    n += 1;
                    entry.1.insert(*h);
                    all.insert(*h);
                    lib_set.insert(*h);
                    image_set.insert(*h);
                }
            }
            if n > 0 {
                entry.0.images += 1;
                entry.0.pages += n;
                entry.0.max_per_image = entry.0.max_per_image.max(n);
                entry.0.max_distinct_per_image = entry.0.max_distinct_per_image.max(lib_set.len());
            }
            image_pages += n;
        }
        total.pages += image_pages;
        total.max_per_image = total.max_per_image.max(image_pages);
        total.max_distinct_per_image = total.max_distinct_per_image.max(image_set.len());
    }
    total.frames = all.len();
    let libraries = libs
        .into_iter()
        .filter(|(_, (s, _))| s.images > 0)
        .map(|(k, (mut s, set))| {
            s.frames = set.len();
            (k, s)
        })
        .collect();
    Ok(PagesReport { images: list.len(), libraries, total })
}

impl PagesReport {
    /// The report as a table.
    pub fn table(&self) -> String {
        let mut s = format!(
            "{} images; code + rodata pages, all-zero pages excluded\n{:<16} {:>7} {:>8} {:>8} {:>10} {:>8}\n",
            self.images, "library", "images", "pages", "frames", "per image", "shared"
        );
        let row = |name: &str, x: &Sharing| {
            format!(
                "{:<16} {:>7} {:>8} {:>8} {:>10} {:>8}\n",
                name,
                x.images,
                x.pages,
                x.frames,
                x.max_per_image,
                if x.fully_shared() { "100%".to_string() } else { format!("{:.0}%", 100.0 * (x.pages - x.frames) as f64 / x.pages.max(1) as f64) }
            )
        };
        for (n, x) in &self.libraries {
            s.push_str(&row(n, x));
        }
        s.push_str(&row("TOTAL", &self.total));
        s.push_str("(shared: 100% when the library needs no more frames than one image has pages; otherwise the fraction of pages saved by sharing)\n");
        s
    }

    /// The report as JSON.
    pub fn json(&self) -> serde_json::Value {
        let lib = |x: &Sharing| serde_json::json!({"images": x.images, "pages": x.pages, "frames": x.frames, "max_per_image": x.max_per_image, "fully_shared": x.fully_shared()});
        serde_json::json!({
            "images": self.images,
            "total": lib(&self.total),
            "libraries": self.libraries.iter().map(|(k, v)| (k.clone(), lib(v))).collect::<serde_json::Map<_, _>>(),
        })
    }
}
