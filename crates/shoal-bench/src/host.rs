//! What the experiments need of the host: which systems can run here
//! (KVM, runtimes, root), how shoal's own programs are linked, and builds
//! of a program as a shoal image beside its native twin.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

pub use shoal_serve::tender_binary;

/// How the instance programs beside `shoal` are linked, for the benches'
/// headers, one `NAME LINKING[, musl] (PATH, build id ID)` per program: what a
/// bench measured. `cargo build` links them statically
/// (scripts/rust-link, the workspace's linker); "dynamic" means a build
/// that did not use it (cargo run from outside the tree, another linker
/// set in the environment), and instances start slower and take more
/// memory.
pub fn tender_linking() -> String {
    let exe = std::env::current_exe().unwrap_or_default();
    ["shoal-tender", "shoal-spt"].iter().map(|name| describe_binary(&exe.with_file_name(name))).collect::<Vec<_>>().join("; ")
}

/// `NAME LINKING (PATH, build id ID)` for the program at `path`.
pub fn describe_binary(path: &Path) -> String {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let Some(elf) = ElfFacts::read(path) else {
        return format!("{name} missing or not an ELF program ({})", path.display());
    };
    let how = match (elf.interp, elf.fixed) {
        (true, _) => "dynamic (not built through scripts/rust-link: slower start, more memory per instance)",
        (false, true) => "static at a fixed address",
        (false, false) => "static-pie",
    };
    let libc = if elf.interp || elf.glibc { "" } else { ", musl" };
    let id = if elf.build_id.is_empty() { "none".to_string() } else { elf.build_id.iter().map(|b| format!("{b:02x}")).collect() };
    format!("{name} {how}{libc} ({}, build id {id})", path.display())
}

/// Whether the ELF file at `path` has no program interpreter (no
/// `PT_INTERP`: statically linked); `None` when it cannot be read as a
/// 64-bit little-endian ELF file.
pub fn linked_statically(path: &Path) -> Option<bool> {
    ElfFacts::read(path).map(|e| !e.interp)
}

/// What the benches report of a program's ELF file.
struct ElfFacts {
    /// It has a program interpreter (dynamically linked).
    interp: bool,
    /// It is `ET_EXEC` (linked at a fixed address).
    fixed: bool,
    /// Its GNU build id (empty: none).
    build_id: Vec<u8>,
    /// It carries glibc's ABI tag note (musl's programs do not).
    glibc: bool,
}

impl ElfFacts {
    fn read(path: &Path) -> Option<ElfFacts> {
        const PT_INTERP: u64 = 3;
        const PT_NOTE: u64 = 4;
        const NT_GNU_ABI_TAG: u64 = 1;
        const NT_GNU_BUILD_ID: u64 = 3;
        let bytes = std::fs::read(path).ok()?;
        if bytes.get(..6)? != b"\x7fELF\x02\x01" {
            return None;
        }
        let word = |at: usize, n: usize| -> Option<u64> {
            let b = bytes.get(at..at.checked_add(n)?)?;
            Some(b.iter().rev().fold(0u64, |acc, &x| (acc << 8) | u64::from(x)))
        };
        let fixed = word(0x10, 2)? == 2;
        let phoff = usize::try_from(word(0x20, 8)?).ok()?;
        let phentsize = usize::try_from(word(0x36, 2)?).ok()?;
        let phnum = usize::try_from(word(0x38, 2)?).ok()?;
        let mut facts = ElfFacts { interp: false, fixed, build_id: Vec::new(), glibc: false };
        for i in 0..phnum {
            let ph = phoff.checked_add(i.checked_mul(phentsize)?)?;
            match word(ph, 4)? {
                PT_INTERP => facts.interp = true,
                PT_NOTE => {
                    let mut at = usize::try_from(word(ph + 8, 8)?).ok()?;
                    let end = at.checked_add(usize::try_from(word(ph + 32, 8)?).ok()?)?;
                    while at.checked_add(12)? <= end {
                        let (namesz, descsz, ty) = (word(at, 4)?, word(at + 4, 4)?, word(at + 8, 4)?);
                        let name_at = at + 12;
                        let desc_at = name_at.checked_add(usize::try_from(namesz.next_multiple_of(4)).ok()?)?;
                        let gnu = bytes.get(name_at..name_at.checked_add(4)?) == Some(b"GNU\0");
                        facts.glibc |= gnu && ty == NT_GNU_ABI_TAG;
                        if gnu && ty == NT_GNU_BUILD_ID {
                            facts.build_id = bytes.get(desc_at..desc_at.checked_add(usize::try_from(descsz).ok()?)?)?.to_vec();
                        }
                        at = desc_at.checked_add(usize::try_from(descsz.next_multiple_of(4)).ok()?)?;
                    }
                }
                _ => {}
            }
        }
        Some(facts)
    }
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

/// The Go toolchain: `go` on PATH, else the Go distribution's
/// /usr/local/go/bin/go (not on the default PATH).
pub fn go() -> Option<PathBuf> {
    find_program("go").or_else(|| Some(PathBuf::from("/usr/local/go/bin/go")).filter(|p| p.is_file()))
}

/// `go build` of a single static program (no cgo, no module) with Go's
/// own build cache, the one scripts/setup and the tests fill: a fresh
/// cache compiles the standard library again (`net/http`: ~40 s of CPU
/// here, against ~0.6 s from a warm one). Only when the user has no cache
/// directory for Go to find (no $HOME, no $XDG_CACHE_HOME) is one made in
/// the temporary directory.
pub fn go_build(go: &Path) -> Command {
    let mut c = Command::new(go);
    c.arg("build").env("CGO_ENABLED", "0").env("GO111MODULE", "off");
    if ["GOCACHE", "XDG_CACHE_HOME", "HOME"].iter().all(|v| std::env::var_os(v).is_none()) {
        c.env("GOCACHE", std::env::temp_dir().join("shoal-go-build"));
    }
    c
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
        assert_eq!(describe_binary(&not_elf), format!("not-elf missing or not an ELF program ({})", not_elf.display()));
    }

    #[test]
    fn a_test_program_is_described_as_dynamic_with_its_build_id() {
        let me = std::env::current_exe().unwrap();
        let line = describe_binary(&me);
        let name = me.file_name().unwrap().to_string_lossy();
        let prefix = format!("{name} dynamic (not built through scripts/rust-link: slower start, more memory per instance) ({}, build id ", me.display());
        assert!(line.starts_with(&prefix), "{line}");
        let id = line.strip_prefix(&prefix).unwrap().strip_suffix(')').unwrap();
        assert!(id.len() >= 16 && id.chars().all(|c| c.is_ascii_hexdigit()), "{line}");
    }
}
