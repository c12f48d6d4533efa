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

/// Tells apart versions of how a kernel image is made from its inputs:
/// part of every kernel image's name.
const KERNEL_IMAGE_FORMAT: &[u8] = b"shoal kernel image 1\0";

/// What a kernel image is linked from: the kernel archive, and the libc
/// and start files of the sysroot.
fn kernel_image_inputs(paths: &shoal_toolchain::Paths) -> Vec<PathBuf> {
    let lib = paths.sysroot().join("lib");
    vec![paths.kernel_lib(), lib.join("libc.a"), lib.join("crt1.o"), lib.join("crti.o"), lib.join("crtn.o")]
}

/// The kernel image's name for these inputs' content: `kernel-<SHA-256>.img`
/// of the format, the hypercall ABI, the program linked and every input's
/// bytes. Same kernel, same name (nothing rebuilt, whatever the files'
/// times); another kernel, another name (never a stale image).
fn kernel_image_name(inputs: &[PathBuf]) -> Result<String> {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(KERNEL_IMAGE_FORMAT);
    h.update(shoal_abi::ABI_VERSION.to_le_bytes());
    h.update(KERNEL_STUB.as_bytes());
    for p in inputs {
        let bytes = std::fs::read(p).with_context(|| format!("cannot read {}", p.display()))?;
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(&bytes);
    }
    Ok(format!("kernel-{}.img", h.finalize().iter().map(|b| format!("{b:02x}")).collect::<String>()))
}

/// Whether `name` is a content-named kernel image's.
fn kernel_image_file(name: &str) -> bool {
    name.strip_prefix("kernel-").and_then(|n| n.strip_suffix(".img")).is_some_and(|k| k.len() == 64 && k.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The note under `by-stat/` that remembers the kernel image name of
/// `inputs` by their paths, inodes, sizes and times, so that a start
/// reads and hashes the 21 MB kernel archive only after it changed.
fn kernel_note(dir: &Path, inputs: &[PathBuf]) -> Option<PathBuf> {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(b"shoal kernel stat 1\0");
    h.update(KERNEL_IMAGE_FORMAT);
    h.update(shoal_abi::ABI_VERSION.to_le_bytes());
    for p in inputs {
        // The path as given (absolute, from `Paths`): resolving it cost
        // a `readlink` per component, and the device and inode below
        // already name the file.
        h.update(p.as_os_str().as_encoded_bytes());
        h.update(b"\0");
        h.update(shoal_exec::stat_key(p)?.as_bytes());
        h.update(b"\0");
    }
    Some(dir.join("by-stat").join(format!("kernel-{}", h.finalize()[..16].iter().map(|b| format!("{b:02x}")).collect::<String>())))
}

/// Puts `to` in place at `at` by one rename (a concurrent reader sees
/// the old or the new file, never half of one); best effort for a
/// symbolic link, which only saves the next start some work.
fn replace_link(at: &Path, to: &str) {
    if std::fs::read_link(at).is_ok_and(|t| t.as_os_str() == to) {
        return;
    }
    let tmp = at.with_extension(format!("{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    if std::os::unix::fs::symlink(to, &tmp).is_ok() && std::fs::rename(&tmp, at).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

/// The kernel image (a shoal image with no application) of the kernel
/// archive at hand, built when no image of that content is in the
/// cache. The kernel's sources are checked for changes (and the archive
/// rebuilt) only by a `shoal` built from the source tree it uses
/// ([`shoal_toolchain::setup::kernel_from_source`]); an installed one
/// runs the archive it has. The image is also what this process's
/// tender runs ([`shoal_tender::use_exec_kernel`]) and what
/// [`shoal_tender::exec_kernel_link`] points at.
fn kernel_image(paths: &shoal_toolchain::Paths) -> Result<PathBuf> {
    if shoal_toolchain::setup::kernel_from_source(paths) || !paths.kernel_lib().is_file() {
        shoal_toolchain::setup::ensure_kernel(paths, false)?;
    }
    let link = shoal_tender::exec_kernel_link().ok_or_else(|| anyhow::anyhow!("no HOME or SHOAL_CACHE: there is no cache for the kernel image"))?;
    let dir = link.parent().map_or_else(|| paths.cache.join("exec"), Path::to_path_buf);
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let inputs = kernel_image_inputs(paths);
    let note = kernel_note(&dir, &inputs);
    let noted = note.as_ref().and_then(|n| std::fs::read_to_string(n).ok()).filter(|n| kernel_image_file(n) && dir.join(n).is_file());
    let name = match noted {
        Some(n) => n,
        None => {
            let name = kernel_image_name(&inputs)?;
            let image = dir.join(&name);
            if !image.is_file() {
                build_kernel_image(paths, &dir, &image)?;
            }
            if let Some(n) = &note {
                // Best effort: without the note the next start hashes again.
                let tmp = n.with_extension(format!("{}.tmp", std::process::id()));
                if std::fs::create_dir_all(dir.join("by-stat")).is_ok() && std::fs::write(&tmp, &name).is_ok() {
                    let _ = std::fs::rename(&tmp, n);
                }
            }
            name
        }
    };
    replace_link(&link, &name);
    let image = dir.join(name);
    shoal_tender::use_exec_kernel(image.clone());
    Ok(image)
}

/// Links the kernel image `image` (in `dir`).
fn build_kernel_image(paths: &shoal_toolchain::Paths, dir: &Path, image: &Path) -> Result<()> {
    let src = dir.join(format!("kernel-stub.{}.c", std::process::id()));
    std::fs::write(&src, KERNEL_STUB).with_context(|| format!("cannot write {}", src.display()))?;
    let tmp = dir.join(format!("kernel.img.{}", std::process::id()));
    let built = shoal_toolchain::cc::cc(paths, &["-O2".into(), "-o".into(), tmp.display().to_string(), src.display().to_string()]);
    let _ = std::fs::remove_file(&src);
    built?;
    // The image and what `shoal cc` writes beside it (manifest, debug
    // information), each put in place by one rename: a concurrent start
    // sees no image or a whole one.
    for (from, to) in [
        (shoal_manifest::Manifest::path_for(&tmp), shoal_manifest::Manifest::path_for(image)),
        (PathBuf::from(format!("{}.debug", tmp.display())), PathBuf::from(format!("{}.debug", image.display()))),
        (tmp.clone(), image.to_path_buf()),
    ] {
        if from.exists() {
            std::fs::rename(&from, &to).with_context(|| format!("cannot write {}", to.display()))?;
        }
    }
    Ok(())
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
