//! `shoal run EXECUTABLE` and `shoal inspect EXECUTABLE`: an unmodified
//! Linux executable, combined with a kernel image by `shoal-exec`.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// The program of the kernel image: never run (the executable's entry
/// runs instead), it only makes the link pull in libc's start-up code
/// the kernel's own entry refers to.
const KERNEL_STUB: &str = "int main(void) { return 0; }\n";

/// Whether `path` is a Linux executable rather than a shoal image.
pub fn is_executable(path: &Path) -> bool {
    shoal_exec::is_linux_executable_file(path)
}

/// The kernel image (a shoal image with no application), built when it is
/// missing or older than the kernel library; one per source tree
/// ([`shoal_tender::exec_kernel_image`]).
fn kernel_image(paths: &shoal_toolchain::Paths) -> Result<PathBuf> {
    shoal_toolchain::setup::ensure_kernel(paths, false)?;
    // Where shoal-tender built from this tree looks for it.
    let image = shoal_tender::exec_kernel_image().ok_or_else(|| anyhow::anyhow!("no HOME or SHOAL_CACHE: there is no cache for the kernel image"))?;
    let dir = image.parent().map_or_else(|| paths.cache.join("exec"), Path::to_path_buf);
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let lib_time = std::fs::metadata(paths.kernel_lib()).and_then(|m| m.modified()).ok();
    let img_time = std::fs::metadata(&image).and_then(|m| m.modified()).ok();
    if img_time.is_none() || lib_time.is_some_and(|l| img_time.is_some_and(|i| i < l)) {
        let src = dir.join("kernel-stub.c");
        std::fs::write(&src, KERNEL_STUB).with_context(|| format!("cannot write {}", src.display()))?;
        let tmp = dir.join(format!("kernel.img.{}", std::process::id()));
        shoal_toolchain::cc::cc(paths, &["-O2".into(), "-o".into(), tmp.display().to_string(), src.display().to_string()])?;
        // The image and what `shoal cc` writes beside it (manifest, debug
        // information), each put in place by one rename: a concurrent
        // start sees an old or a new kernel image, never half of one.
        for (from, to) in [
            (shoal_manifest::Manifest::path_for(&tmp), shoal_manifest::Manifest::path_for(&image)),
            (PathBuf::from(format!("{}.debug", tmp.display())), PathBuf::from(format!("{}.debug", image.display()))),
            (tmp.clone(), image.clone()),
        ] {
            if from.exists() {
                std::fs::rename(&from, &to).with_context(|| format!("cannot write {}", to.display()))?;
            }
        }
    }
    Ok(image)
}

/// Builds the kernel image executables run on, if it is missing or
/// stale, where `shoal-tender` looks for it
/// ([`shoal_tender::exec_kernel_image`]).
pub fn ensure_kernel_image() -> Result<PathBuf> {
    let paths = shoal_toolchain::Paths::discover()?;
    kernel_image(&paths)
}

/// The instance image for `exe` (built once, then found in the cache).
pub fn prepare(exe: &Path) -> Result<PathBuf> {
    let paths = shoal_toolchain::Paths::discover()?;
    let kernel = kernel_image(&paths)?;
    Ok(shoal_exec::prepare(exe, &kernel, &paths.cache.join("exec"))?)
}

/// `shoal inspect EXECUTABLE`.
pub fn inspect(exe: &Path) -> Result<()> {
    let bytes = std::fs::read(exe).with_context(|| format!("cannot read {}", exe.display()))?;
    let a = shoal_exec::analyse(exe, &bytes)?;
    let kind = match a.kind {
        shoal_exec::Kind::Static => "static executable (ET_EXEC)".to_string(),
        shoal_exec::Kind::Pie => format!("static-PIE executable, loaded at {:#x}", a.base),
        shoal_exec::Kind::Dynamic => format!(
            "dynamically linked executable, loaded at {:#x}, interpreter {} (from the instance's file system)",
            a.base,
            a.interp.as_deref().unwrap_or("?")
        ),
    };
    println!("executable {}: {kind}, entry {:#x}", exe.display(), a.entry);
    for s in &a.segments {
        let f = |b: u32, c: char| if s.flags & b != 0 { c } else { '-' };
        println!("  segment {:#12x} {:#12x} {}{}{}", s.vaddr, s.vaddr + s.memsz, f(4, 'r'), f(2, 'w'), f(1, 'x'));
    }
    let rewritten = a.rewritten();
    println!("  rewritten: {} `mov eax, imm32; syscall` pairs, {} with other instructions moved to the trampoline", a.pairs(), rewritten - a.pairs());
    println!("system-call sites: {} found, {} rewritten, {} left to the trap path", a.sites.len(), rewritten, a.sites.len() - rewritten);
    Ok(())
}

/// `shoal cache …`.
#[derive(clap::Subcommand)]
pub enum CacheCmd {
    /// Remove the instance images used longest ago until the rest fit in SIZE (default: SHOAL_EXEC_CACHE_MAX, else 2G); they are built again at their next start.
    Prune {
        /// The bound: bytes, or a number with K, M or G (0 empties the cache).
        #[arg(long, value_name = "SIZE")]
        max: Option<String>,
    },
}

/// Runs `shoal cache prune`.
pub fn cache(which: CacheCmd) -> Result<()> {
    let CacheCmd::Prune { max } = which;
    let max = match max {
        Some(m) => shoal_exec::cache::parse_size(&m).context("--max")?,
        None => shoal_exec::cache::limit().context("SHOAL_EXEC_CACHE_MAX")?,
    };
    let dir = shoal_tender::exec_cache_dir().ok_or_else(|| anyhow::anyhow!("no HOME or SHOAL_CACHE: there is no cache"))?;
    if !dir.is_dir() {
        println!("{}: no cache yet", dir.display());
        return Ok(());
    }
    let p = shoal_exec::cache::prune(&dir, max, None).with_context(|| format!("cannot prune {}", dir.display()))?;
    let mib = |b: u64| b as f64 / f64::from(1 << 20);
    println!("{}: removed {} images ({:.1} MiB); {} left ({:.1} MiB, bound {:.1} MiB)", dir.display(), p.removed, mib(p.freed), p.kept, mib(p.size), mib(max));
    Ok(())
}
