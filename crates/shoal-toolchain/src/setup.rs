//! Building shoal's libc and kernel when they are missing or out of date.

use crate::{run, Paths, Result, ToolchainError};
use std::path::Path;
use std::process::Command;
use std::time::SystemTime;

/// Builds the libc sysroot if it is not there (`libc/build-musl.sh` does
/// the work and is itself quick when nothing changed). `force` runs the
/// script even when the sysroot exists, so it can check its inputs.
pub fn ensure_libc(paths: &Paths, force: bool) -> Result<()> {
    let libc = paths.sysroot().join("lib/libc.a");
    if libc.is_file() && !force && !newer_than(&paths.home.join("libc/overlay"), &libc)? && !newer_than(&paths.home.join("libc/build-musl.sh"), &libc)? {
        return Ok(());
    }
    let script = paths.home.join("libc/build-musl.sh");
    // Its progress goes to stderr: this runs on the first use of any
    // command, and `shoal bench … --json` promises JSON alone on stdout.
    run("libc/build-musl.sh", Command::new("bash").arg(&script).env("SHOAL_CACHE", &paths.cache).stdout(std::io::stderr()))
}

/// Builds the kernel staticlib with cargo if any kernel (or ABI) source is
/// newer than it.
pub fn ensure_kernel(paths: &Paths, force: bool) -> Result<()> {
    let lib = paths.kernel_lib();
    if lib.is_file()
        && !force
        && !newer_than(&paths.kernel_dir(), &lib)?
        && !newer_than(&paths.home.join("crates/shoal-abi"), &lib)?
        && !newer_than(&paths.home.join("crates/shoal-archive"), &lib)?
    {
        return Ok(());
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    run(
        "cargo build (kernel)",
        Command::new(cargo)
            .args(["build", "--release", "--quiet", "--manifest-path"])
            .arg(paths.kernel_dir().join("Cargo.toml"))
            .env_remove("CARGO_TARGET_DIR")
            .env_remove("RUSTFLAGS")
            // As the libc script's: stdout is the command's own output.
            .stdout(std::io::stderr()),
    )?;
    // The precompiled core, alloc and compiler_builtins in the staticlib are
    // position-independent code that reaches other crates through the GOT
    // (plain R_X86_64_GOTPCREL, which ld does not relax). The GOT is one
    // linker-made table whose address moves with the rest of the image, so
    // those calls would make the kernel's pages differ between images of
    // different library versions; made PC-relative they do not.
    crate::tables::write_relaxed_archive(&paths.kernel_cargo_lib(), &lib).map(|_| ())
}

/// Whether the kernel archive is this command's to keep up to date with
/// its sources: `SHOAL_HOME` names a source tree, or this `shoal` is a
/// build of the tree it uses (it runs from the tree's `target/`).
/// Otherwise shoal is installed and uses the kernel archive as it is:
/// `shoal run` of an executable then does not walk the kernel's sources
/// (about 300 system calls, 1.4 ms, at every start); `shoal setup`,
/// `shoal cc` and `shoal build` still do.
pub fn kernel_from_source(paths: &Paths) -> bool {
    if std::env::var_os("SHOAL_HOME").is_some() {
        return true;
    }
    // `current_exe` is the kernel's resolved path, and `paths.home` is
    // canonical.
    std::env::current_exe().ok().is_some_and(|e| e.starts_with(paths.home.join("target")))
}

fn mtime(p: &Path) -> Result<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).map_err(|e| ToolchainError::Io(p.to_path_buf(), e))
}

/// Whether any source file under `dir` (ignoring `target/`) is newer than
/// `output`.
fn newer_than(dir: &Path, output: &Path) -> Result<bool> {
    let out = mtime(output)?;
    if dir.is_file() {
        return Ok(mtime(dir)? > out);
    }
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let rd = match std::fs::read_dir(&d) {
            Ok(rd) => rd,
            Err(_) => continue,
        };
        for ent in rd.flatten() {
            let p = ent.path();
            let name = ent.file_name();
            if name == "target" || name == "fuzz" || name.to_string_lossy().starts_with('.') {
                continue;
            }
            let Ok(ft) = ent.file_type() else { continue };
            if ft.is_dir() {
                stack.push(p);
            } else if mtime(&p)? > out {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// The kernel components in the staticlib: for each `shoal_*` crate, its
/// name without the prefix (`mm`, `vfs`, …; the glue crate `shoal_kernel`
/// is `kernel`). Members of other crates (core, alloc, allocator crates)
/// form the `krt` library.
pub fn kernel_components(lib: &Path) -> Result<Vec<String>> {
    let data = std::fs::read(lib).map_err(|e| ToolchainError::Io(lib.to_path_buf(), e))?;
    let archive = object::read::archive::ArchiveFile::parse(&*data).map_err(|e| ToolchainError::Input(lib.to_path_buf(), format!("not an archive: {e}")))?;
    let mut comps = Vec::new();
    for m in archive.members() {
        let m = m.map_err(|e| ToolchainError::Input(lib.to_path_buf(), format!("bad archive member: {e}")))?;
        let name = String::from_utf8_lossy(m.name()).to_string();
        let krate = name.split('-').next().unwrap_or("");
        if let Some(c) = krate.strip_prefix("shoal_") {
            if !comps.iter().any(|x| x == c) {
                comps.push(c.to_string());
            }
        }
    }
    Ok(comps)
}
