//! What the experiments need of the host: which systems can run here
//! (KVM, runtimes, root), how shoal's own programs are linked, and builds
//! of a program as a shoal image beside its native twin.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

pub use shoal_serve::tender_binary;

/// How the instance programs beside `shoal` are linked, for the benches'
/// headers: "shoal-tender static, shoal-spt static" (what scripts/setup
/// leaves) or "dynamic" (what a plain `cargo build` leaves; slower start).
pub fn tender_linking() -> String {
    let exe = std::env::current_exe().unwrap_or_default();
    ["shoal-tender", "shoal-spt"]
        .iter()
        .map(|name| {
            let how = match linked_statically(&exe.with_file_name(name)) {
                Some(true) => "static",
                Some(false) => "dynamic",
                None => "missing",
            };
            format!("{name} {how}")
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether the ELF file at `path` has no program interpreter (no
/// `PT_INTERP`: statically linked); `None` when it cannot be read as a
/// 64-bit little-endian ELF file.
pub fn linked_statically(path: &Path) -> Option<bool> {
    const PT_INTERP: u32 = 3;
    let bytes = std::fs::read(path).ok()?;
    if bytes.get(..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let word = |at: usize, n: usize| -> Option<u64> {
        let b = bytes.get(at..at.checked_add(n)?)?;
        Some(b.iter().rev().fold(0u64, |acc, &x| (acc << 8) | u64::from(x)))
    };
    let phoff = usize::try_from(word(0x20, 8)?).ok()?;
    let phentsize = usize::try_from(word(0x36, 2)?).ok()?;
    let phnum = usize::try_from(word(0x38, 2)?).ok()?;
    for i in 0..phnum {
        if word(phoff.checked_add(i.checked_mul(phentsize)?)?, 4)? == u64::from(PT_INTERP) {
            return Some(false);
        }
    }
    Some(true)
}

/// Builds `apps/SRC` as a shoal image and as a native static musl program
/// in `dir`; returns (image, native).
pub fn build_pair(src: &Path, dir: &Path, cflags: &[&str]) -> Result<(PathBuf, PathBuf)> {
    let paths = shoal_toolchain::Paths::discover()?;
    let stem = src.file_stem().map(|s| s.to_string_lossy().to_string()).unwrap_or_default();
    let image = dir.join(format!("{stem}.shoal"));
    let native = dir.join(format!("{stem}.native"));
    let mut args: Vec<String> = cflags.iter().map(|s| s.to_string()).collect();
    args.extend([src.display().to_string(), "-o".into(), image.display().to_string()]);
    shoal_toolchain::cc::cc(&paths, &args)?;
    let status = Command::new("musl-gcc")
        .args(["-static"])
        .args(cflags)
        .arg(src)
        .arg("-o")
        .arg(&native)
        .status()
        .context("cannot run musl-gcc (install Debian's musl-tools)")?;
    if !status.success() {
        bail!("musl-gcc failed to build {}", src.display());
    }
    Ok((image, native))
}

/// Whether hvt can run here (`/dev/kvm` opens read-write), or why not:
/// the reason a bench prints beside an unavailable hvt column.
pub fn kvm_usable() -> Result<(), String> {
    std::fs::OpenOptions::new().read(true).write(true).open("/dev/kvm").map(|_| ()).map_err(|e| format!("/dev/kvm is not usable: {e}"))
}

/// `name` in PATH or in the sbin directories (runc lives in /usr/sbin).
pub fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path).chain(["/usr/local/sbin", "/usr/sbin", "/sbin"].map(PathBuf::from)).map(|d| d.join(name)).find(|p| p.is_file())
}

/// The effective uid, from `/proc/self/status` (root runs runc/runsc).
pub fn effective_uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

/// Copies `shoal` and the programs beside it that run instances
/// (`shoal-tender`, `shoal-spt`) into `dir`: the servers run from these
/// copies, so a rebuild of the tree during a long run (an ABI change)
/// cannot change the tender under the images halfway through.
pub fn pin_binaries(dir: &Path) -> Result<PathBuf> {
    pin_build(&std::env::current_exe()?, dir)
}

/// Copies the `shoal` at `bin` (this one, or another build's for
/// `--shoal-bin`) and the tenders beside it into `dir`; returns the copy.
pub fn pin_build(bin: &Path, dir: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let shoal = dir.join("shoal");
    let _ = std::fs::remove_file(&shoal);
    std::fs::copy(bin, &shoal).with_context(|| format!("cannot copy {} to {}", bin.display(), shoal.display()))?;
    for name in ["shoal-tender", "shoal-spt"] {
        let from = bin.with_file_name(name);
        let to = dir.join(name);
        let _ = std::fs::remove_file(&to);
        // One that was not built is reported by `shoal run` when needed.
        if from.is_file() {
            std::fs::copy(&from, &to).with_context(|| format!("cannot copy {} to {}", from.display(), to.display()))?;
        }
    }
    Ok(shoal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linking_of_elf_files() {
        // The test program itself: cargo links tests dynamically.
        let me = std::env::current_exe().unwrap();
        assert_eq!(linked_statically(&me), Some(false));
        let dir = tempfile::tempdir().unwrap();
        let not_elf = dir.path().join("not-elf");
        std::fs::write(&not_elf, b"#!/bin/sh\n").unwrap();
        assert_eq!(linked_statically(&not_elf), None);
        assert_eq!(linked_statically(&dir.path().join("missing")), None);
        // An ELF header whose program headers lie outside the file.
        let mut bad = b"\x7fELF\x02\x01".to_vec();
        bad.resize(64, 0);
        bad[0x20] = 0xff;
        bad[0x38] = 1;
        std::fs::write(&not_elf, &bad).unwrap();
        assert_eq!(linked_statically(&not_elf), None);
    }
}
