//! The bound on the cache of built instance images (`$SHOAL_CACHE/exec`,
//! by default `~/.cache/shoal/exec`).
//!
//! Every distinct executable (and every kernel it was combined with)
//! leaves an image there, as large as the executable plus the kernel:
//! left alone the directory only grows (3.2 GB on a build machine after a
//! few weeks of tests). It is bounded by size, least recently used first:
//! a start that finds an image marks it used (its modification time, at
//! most once an hour, so a start costs no write), and after every build
//! [`prune`] removes the images used longest ago until the rest fit in
//! [`limit`] (`SHOAL_EXEC_CACHE_MAX`, default [`DEFAULT_MAX`]). `shoal
//! cache prune [--max SIZE]` does the same on demand. An image removed
//! is only built again at its next start. Kernel images
//! (`kernel-<SHA-256>.img`, named by the content they are built from) are
//! removed the same way once no source tree's link (`kernel-TREE.img`)
//! points at them; the links and anything that is not the cache's own
//! are never removed.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// The default bound on the cache's instance images: 2 GiB.
pub const DEFAULT_MAX: u64 = 2 << 30;

/// How stale a use-mark may get before a start renews it.
const MARK_EVERY: Duration = Duration::from_secs(3600);

/// Leftovers of a build that died between writing and renaming are
/// removed once older than this.
const TMP_AGE: Duration = Duration::from_secs(3600);

/// A size that could not be read (`SHOAL_EXEC_CACHE_MAX`, `--max`).
#[derive(Debug, thiserror::Error)]
#[error("{0:?} is not a size: give bytes, or a number with K, M or G (e.g. 2G)")]
pub struct BadSize(pub String);

/// `N`, `NK`, `NM` or `NG` (binary units; `KiB`, `MB`… are read the
/// same) in bytes.
pub fn parse_size(s: &str) -> Result<u64, BadSize> {
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (n, unit) = t.split_at(digits);
    let n: u64 = n.parse().map_err(|_| BadSize(s.to_string()))?;
    let shift = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        _ => return Err(BadSize(s.to_string())),
    };
    n.checked_mul(1 << shift).ok_or_else(|| BadSize(s.to_string()))
}

/// The bound: `SHOAL_EXEC_CACHE_MAX` if set, else [`DEFAULT_MAX`].
pub fn limit() -> Result<u64, BadSize> {
    match std::env::var("SHOAL_EXEC_CACHE_MAX") {
        Ok(v) => parse_size(&v),
        Err(_) => Ok(DEFAULT_MAX),
    }
}

/// Marks the built image `img` as used now (its modification time), if
/// the mark is older than an hour. Best effort: a cache on a read-only
/// file system still serves.
pub fn mark_used(img: &Path) {
    let Ok(m) = std::fs::metadata(img) else { return };
    let now = SystemTime::now();
    if m.modified().ok().and_then(|t| now.duration_since(t).ok()).is_some_and(|age| age < MARK_EVERY) {
        return;
    }
    if let Ok(f) = std::fs::File::open(img) {
        let _ = f.set_modified(now);
    }
}

/// What [`prune`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Images removed.
    pub removed: usize,
    /// Bytes they held (with their manifests).
    pub freed: u64,
    /// Images left.
    pub kept: usize,
    /// Bytes those hold.
    pub size: u64,
}

/// One built image: its key's files and when it was last used.
struct Entry {
    img: PathBuf,
    bytes: u64,
    used: SystemTime,
}

/// Whether `name` is a built image's (`<64 hex digits>.img`).
fn image_name(name: &str) -> bool {
    name.len() == 68 && name.ends_with(".img") && name[..64].bytes().all(|b| b.is_ascii_hexdigit())
}

/// Whether `name` is a kernel image's (`kernel-<64 hex digits>.img`).
fn kernel_name(name: &str) -> bool {
    name.strip_prefix("kernel-").is_some_and(image_name)
}

/// The kernel images some `kernel-TREE.img` link in `dir` points at.
fn linked_kernels(dir: &Path) -> std::io::Result<Vec<std::ffi::OsString>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        if e.file_type().is_ok_and(|t| t.is_symlink()) {
            if let Ok(t) = std::fs::read_link(e.path()) {
                out.push(t.into_os_string());
            }
        }
    }
    Ok(out)
}

/// Removes the images of `dir` used longest ago until the rest hold at
/// most `max` bytes, never `keep` (the image a start is about to run);
/// then the start-by-stat notes that name a removed image and build
/// leftovers older than an hour.
pub fn prune(dir: &Path, max: u64, keep: Option<&Path>) -> std::io::Result<Pruned> {
    let mut entries = Vec::new();
    let now = SystemTime::now();
    let linked = linked_kernels(dir)?;
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        let path = e.path();
        if name.starts_with('.') && name.ends_with(".tmp") {
            let old = e.metadata().ok().and_then(|m| m.modified().ok()).and_then(|t| now.duration_since(t).ok()).is_some_and(|a| a > TMP_AGE);
            if old {
                let _ = std::fs::remove_file(&path);
            }
            continue;
        }
        let kernel = kernel_name(name);
        if !(image_name(name) || kernel && !linked.iter().any(|l| l == name)) {
            continue;
        }
        let Ok(m) = e.metadata() else { continue };
        let manifest = shoal_manifest::Manifest::path_for(&path);
        let mut extra = std::fs::metadata(&manifest).map(|m| m.len()).unwrap_or(0);
        if kernel {
            extra += std::fs::metadata(debug_for(&path)).map(|m| m.len()).unwrap_or(0);
        }
        entries.push(Entry { img: path, bytes: m.len() + extra, used: m.modified().unwrap_or(SystemTime::UNIX_EPOCH) });
    }
    // Oldest first; the name breaks ties so the order is the same every time.
    entries.sort_by(|a, b| a.used.cmp(&b.used).then_with(|| a.img.cmp(&b.img)));
    let mut p = Pruned { kept: entries.len(), size: entries.iter().map(|e| e.bytes).sum(), ..Pruned::default() };
    for e in &entries {
        if p.size <= max {
            break;
        }
        if keep.is_some_and(|k| k == e.img) {
            continue;
        }
        match std::fs::remove_file(&e.img) {
            Ok(()) => {}
            // Another prune got there first.
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
            Err(err) => return Err(err),
        }
        let _ = std::fs::remove_file(shoal_manifest::Manifest::path_for(&e.img));
        let _ = std::fs::remove_file(debug_for(&e.img));
        p.removed += 1;
        p.freed += e.bytes;
        p.kept -= 1;
        p.size -= e.bytes;
    }
    if let Ok(notes) = std::fs::read_dir(dir.join("by-stat")) {
        for n in notes.flatten() {
            let target = std::fs::read_to_string(n.path()).ok();
            if target.is_some_and(|t| image_name(&t) && !dir.join(&t).is_file()) {
                let _ = std::fs::remove_file(n.path());
            }
        }
    }
    Ok(p)
}

/// The debug information `shoal cc` writes beside a kernel image.
fn debug_for(img: &Path) -> PathBuf {
    let mut s = img.as_os_str().to_owned();
    s.push(".debug");
    PathBuf::from(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn key(n: u8) -> String {
        format!("{:064x}.img", n)
    }

    /// An image of `bytes` bytes (and a 100-byte manifest) last used
    /// `age` seconds ago.
    fn image(dir: &Path, n: u8, bytes: usize, age: u64) -> PathBuf {
        let p = dir.join(key(n));
        std::fs::write(&p, vec![0u8; bytes]).unwrap();
        std::fs::write(shoal_manifest::Manifest::path_for(&p), vec![b'{'; 100]).unwrap();
        let f = std::fs::File::options().write(true).open(&p).unwrap();
        f.set_modified(SystemTime::now() - Duration::from_secs(age)).unwrap();
        p
    }

    #[test]
    fn removes_least_recently_used_images_down_to_the_bound() {
        let d = std::env::temp_dir().join(format!("shoal-exec-cache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("by-stat")).unwrap();
        let oldest = image(&d, 1, 1000, 40_000);
        let kept_old = image(&d, 2, 1000, 30_000);
        let middle = image(&d, 3, 1000, 20_000);
        let newest = image(&d, 4, 1000, 10_000);
        std::fs::write(d.join("kernel-0123456789abcdef.img"), vec![0u8; 5000]).unwrap();
        // A kernel image a tree's link points at stays; one no link
        // points at is an image like the others (used longest ago here).
        let (linked, unlinked) = (format!("kernel-{}", key(5)), format!("kernel-{}", key(6)));
        std::fs::write(d.join(&linked), vec![0u8; 5000]).unwrap();
        std::os::unix::fs::symlink(&linked, d.join("kernel-00000000000000aa.img")).unwrap();
        let stale = image(&d, 6, 1000, 50_000);
        std::fs::rename(&stale, d.join(&unlinked)).unwrap();
        std::fs::rename(shoal_manifest::Manifest::path_for(&stale), shoal_manifest::Manifest::path_for(&d.join(&unlinked))).unwrap();
        std::fs::write(super::debug_for(&d.join(&unlinked)), [0u8; 100]).unwrap();
        assert_eq!(prune(&d, 4400, None).unwrap(), Pruned { removed: 1, freed: 1200, kept: 4, size: 4400 });
        assert!(!d.join(&unlinked).exists() && !super::debug_for(&d.join(&unlinked)).exists());
        assert!(d.join(&linked).exists() && d.join("kernel-00000000000000aa.img").exists());
        std::fs::write(d.join("notes.txt"), "not the cache's").unwrap();
        std::fs::write(d.join("by-stat/a"), key(1)).unwrap();
        std::fs::write(d.join("by-stat/b"), key(4)).unwrap();
        // Four images of 1100 bytes; a bound of 2300 keeps two: the
        // oldest goes, `keep` stays although next oldest, then the middle.
        let p = prune(&d, 2300, Some(&kept_old)).unwrap();
        assert_eq!(p, Pruned { removed: 2, freed: 2200, kept: 2, size: 2200 });
        assert!(!oldest.exists() && !shoal_manifest::Manifest::path_for(&oldest).exists());
        assert!(!middle.exists());
        assert!(kept_old.exists() && newest.exists() && shoal_manifest::Manifest::path_for(&newest).exists());
        assert!(d.join("kernel-0123456789abcdef.img").exists() && d.join("notes.txt").exists());
        assert!(!d.join("by-stat/a").exists(), "the note of a removed image stays");
        assert!(d.join("by-stat/b").exists());
        // Within the bound: nothing more.
        assert_eq!(prune(&d, 2200, None).unwrap(), Pruned { removed: 0, freed: 0, kept: 2, size: 2200 });
        // A use renews the mark: the older image is now the newer one.
        mark_used(&kept_old);
        assert_eq!(prune(&d, 1100, None).unwrap().removed, 1);
        assert!(kept_old.exists() && !newest.exists());
        assert_eq!(prune(&d, 0, None).unwrap(), Pruned { removed: 1, freed: 1100, kept: 0, size: 0 });
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn sizes_read_as_bytes_or_binary_units() {
        assert_eq!(parse_size("0").unwrap(), 0);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("2G").unwrap(), 2 << 30);
        assert_eq!(parse_size("512M").unwrap(), 512 << 20);
        assert_eq!(parse_size("64 KiB").unwrap(), 64 << 10);
        for bad in ["", "G", "-1", "1T", "1.5G", "99999999999999999999G"] {
            assert!(parse_size(bad).is_err(), "{bad:?}");
        }
    }
}
