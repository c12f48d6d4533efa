//! `shoal build`: links application objects, application libraries, shoal's
//! libc, the compiler runtime and the kernel into one static image, and
//! writes the image manifest next to it (docs/design.md "The image", "Memory and sharing").

use crate::layout::{AddressMap, LibrarySpec, ScriptPlan, COMPONENT_ORDER};
use crate::setup::{ensure_kernel, ensure_libc, kernel_components};
use crate::{run, Paths, Result, ToolchainError};
use shoal_manifest::{LibraryInfo, LibraryKind, Manifest};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The policies one link can apply (`delta` and `aslr` need a workspace,
/// see `crate::workspace`, which drives this link with a map).
pub const SINGLE_IMAGE_POLICIES: &[&str] = &["default", "dce", "aligned", "delta", "aslr"];

/// The libc version string recorded in manifests.
pub const LIBC_VERSION: &str = "musl-1.2.3+shoal1";

/// An application library given to the build.
#[derive(Clone, Debug)]
pub struct UserLibrary {
    /// Library name (becomes its region names; letters, digits, `_`, `-`).
    pub name: String,
    /// Version string.
    pub version: String,
    /// An archive (`.a`), linked as an archive (members on demand), or a
    /// relocatable object (`.o`), linked whole.
    pub path: PathBuf,
}

/// A trampoline: `symbol: jmp target`, in a trampoline table; an empty
/// `target` makes a placeholder slot (`ud2`) that defines nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trampoline {
    /// The symbol the table defines.
    pub symbol: String,
    /// Where it jumps.
    pub target: String,
    /// Whose table: empty for the image's table (library `tpl`), else the
    /// name of the library that calls through it (library `tpl-NAME`, the
    /// `aslr` policy's table per library).
    pub table: String,
}

/// The name of the library holding `table`'s trampolines.
pub fn table_library(table: &str) -> String {
    if table.is_empty() {
        "tpl".into()
    } else {
        format!("tpl-{table}")
    }
}

/// Replacements for the libraries every image links (libc with its start
/// files, the kernel staticlib, the compiler runtime), e.g. copies whose
/// calls go through per-library trampoline tables (`crate::tables`).
/// Archive member names must be those of the originals.
#[derive(Clone, Debug)]
pub struct SharedInputs {
    /// `crt1.o`, `crti.o`, `crtn.o`.
    pub crt: [PathBuf; 3],
    /// musl's `libc.a`.
    pub libc: PathBuf,
    /// The kernel staticlib.
    pub kernel: PathBuf,
    /// `libgcc.a`.
    pub libgcc: PathBuf,
}

/// What to link.
#[derive(Clone, Debug, Default)]
pub struct BuildSpec {
    /// The image to write.
    pub output: PathBuf,
    /// The application's own objects (`.o`).
    pub objects: Vec<PathBuf>,
    /// Application libraries, in link order.
    pub libraries: Vec<UserLibrary>,
    /// Deltas of versioned libraries (objects, newest first: ld keeps the
    /// first of several weak definitions), placed in the delta area.
    pub deltas: Vec<UserLibrary>,
    /// Layout policy (see [`SINGLE_IMAGE_POLICIES`]).
    pub layout: String,
    /// Extra arguments for the linker driver (e.g. `-Wl,…` from `shoal cc`).
    pub extra_link_args: Vec<String>,
    /// Fixed region addresses (workspace policies).
    pub map: Option<AddressMap>,
    /// Symbols whose undefined references are redirected with `--wrap`.
    pub wrap: Vec<String>,
    /// Trampoline tables: the image's (`tpl`) and per-library ones.
    pub trampolines: Vec<Trampoline>,
    /// Link these instead of the sysroot's libc, the kernel and libgcc.
    pub shared: Option<SharedInputs>,
    /// `default`/`dce` only: link-time ASLR with this seed — the libraries
    /// in a random order with a random gap of 0–15 pages before each
    /// (the ASLR variants of Spacer-Δ's baselines, its section V).
    pub shuffle: Option<u64>,
    /// Symbols forced into the link (`-u`), so that every image of a
    /// workspace takes the same members from the shared archives.
    pub undefined: Vec<String>,
    /// Write ld's link map here (which archive members were taken).
    pub map_file: Option<PathBuf>,
}

impl BuildSpec {
    /// A spec with the default policy of single-image builds (`aligned`).
    pub fn new(output: PathBuf, objects: Vec<PathBuf>, libraries: Vec<UserLibrary>) -> BuildSpec {
        BuildSpec { output, objects, libraries, layout: "aligned".into(), ..Default::default() }
    }
}

fn valid_name(n: &str) -> bool {
    !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

fn symlink(target: &Path, link: &Path) -> Result<()> {
    std::os::unix::fs::symlink(target, link).map_err(|e| ToolchainError::Io(link.to_path_buf(), e))
}

/// Asks gcc where one of its files is (`-print-libgcc-file-name`,
/// `-print-file-name=include`). The answers are kept for the life of the
/// process: a workspace build links many images and a recipe compiles many
/// files, and each question would otherwise start gcc again.
pub(crate) fn gcc_file(arg: &str) -> Result<PathBuf> {
    static ANSWERS: std::sync::Mutex<Vec<(String, PathBuf)>> = std::sync::Mutex::new(Vec::new());
    if let Ok(answers) = ANSWERS.lock() {
        if let Some((_, p)) = answers.iter().find(|(a, _)| a == arg) {
            return Ok(p.clone());
        }
    }
    let out = Command::new("gcc").arg(arg).output().map_err(|e| ToolchainError::Spawn("gcc".into(), e))?;
    let p = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim().to_string());
    if !out.status.success() || !p.is_absolute() {
        return Err(ToolchainError::Failed(format!("gcc {arg}"), "no answer".into()));
    }
    if let Ok(mut answers) = ANSWERS.lock() {
        answers.push((arg.to_string(), p.clone()));
    }
    Ok(p)
}

/// Assembles one trampoline table into `dir/shoal-LIBRARY.o`.
fn trampoline_object(dir: &Path, library: &str, tpl: &[&Trampoline]) -> Result<PathBuf> {
    let mut asm = format!("# Generated by shoal build: the trampoline table {library}.\n");
    asm.push_str(&format!(".section .text.__shoal_{library},\"ax\",@progbits\n"));
    // Every slot is 8 bytes, so a slot's address depends only on its index:
    // images of different versions keep the same slots even when a version
    // lacks a function (its slot is a `ud2`).
    for t in tpl {
        if t.target.is_empty() {
            asm.push_str(".p2align 3\n  ud2\n");
        } else {
            asm.push_str(&format!(".p2align 3\n.globl {0}\n.type {0},@function\n{0}:\n  jmp {1}\n", t.symbol, t.target));
        }
    }
    let src = dir.join(format!("shoal-{library}.s"));
    let obj = dir.join(format!("shoal-{library}.o"));
    std::fs::write(&src, asm).map_err(|e| ToolchainError::Io(src.clone(), e))?;
    run("as (trampoline table)", Command::new("as").arg("--64").arg("-o").arg(&obj).arg(&src))?;
    Ok(obj)
}

/// Links the image described by `spec`, then writes its manifest. Builds
/// the libc and the kernel first if they are missing or stale.
pub fn build(paths: &Paths, spec: &BuildSpec) -> Result<Manifest> {
    if !SINGLE_IMAGE_POLICIES.contains(&spec.layout.as_str()) {
        return Err(ToolchainError::Usage(format!("unknown layout policy `{}` (this shoal knows: {})", spec.layout, SINGLE_IMAGE_POLICIES.join(", "))));
    }
    for o in &spec.objects {
        if !o.is_file() {
            return Err(ToolchainError::Input(o.clone(), "no such object file".into()));
        }
    }
    for l in spec.libraries.iter().chain(&spec.deltas) {
        if !valid_name(&l.name) {
            return Err(ToolchainError::Usage(format!("invalid library name `{}`", l.name)));
        }
        if !l.path.is_file() {
            return Err(ToolchainError::Input(l.path.clone(), "no such library archive or object".into()));
        }
    }
    ensure_libc(paths, false)?;
    ensure_kernel(paths, false)?;

    let tmp = tempfile::Builder::new().prefix("shoal-build-").tempdir().map_err(|e| ToolchainError::Io(std::env::temp_dir(), e))?;
    let t = tmp.path();
    let shared = match &spec.shared {
        Some(s) => s.clone(),
        None => default_shared_inputs(paths)?,
    };
    for (f, target) in ["crt1.o", "crti.o", "crtn.o"].iter().zip(&shared.crt) {
        symlink(target, &t.join(format!("shoal-{f}")))?;
    }
    symlink(&shared.libc, &t.join("shoal-libc.a"))?;
    let kernel = shared.kernel.clone();
    symlink(&kernel, &t.join("shoal-kernel.a"))?;
    symlink(&shared.libgcc, &t.join("shoal-libgcc.a"))?;

    let kernel_version = format!("shoal-kernel-{}", env!("CARGO_PKG_VERSION"));
    let mut comps = kernel_components(&kernel)?;
    comps.sort_by_key(|c| COMPONENT_ORDER.iter().position(|o| o == c).unwrap_or(usize::MAX));
    let mut libs: Vec<LibrarySpec> = comps
        .iter()
        .map(|c| LibrarySpec {
            info: LibraryInfo { name: c.clone(), version: kernel_version.clone(), kind: LibraryKind::Kernel },
            inputs: vec![format!("*shoal-kernel.a:shoal_{c}-*")],
        })
        .collect();
    // The kernel's Rust runtime is every other member of the staticlib;
    // naming the components' members as exclusions (rather than relying on
    // statement order) lets layouts put the regions in any order.
    let krt_exclude: Vec<String> = comps.iter().map(|c| format!("*shoal-kernel.a:shoal_{c}-*")).collect();
    libs.push(LibrarySpec {
        info: LibraryInfo { name: "krt".into(), version: kernel_version.clone(), kind: LibraryKind::Kernel },
        inputs: vec![format!("EXCLUDE_FILE({}) *shoal-kernel.a:*", krt_exclude.join(" "))],
    });
    libs.push(LibrarySpec {
        info: LibraryInfo { name: "libc".into(), version: LIBC_VERSION.into(), kind: LibraryKind::Libc },
        inputs: vec!["*shoal-crt1.o".into(), "*shoal-crti.o".into(), "*shoal-crtn.o".into(), "*shoal-libc.a:*".into()],
    });
    libs.push(LibrarySpec {
        info: LibraryInfo { name: "libgcc".into(), version: "gcc".into(), kind: LibraryKind::Runtime },
        inputs: vec!["*shoal-libgcc.a:*".into()],
    });
    let mut user_links = Vec::new();
    let mut add_user = |l: &UserLibrary, libs: &mut Vec<LibrarySpec>, i: usize| -> Result<()> {
        let target = l.path.canonicalize().map_err(|e| ToolchainError::Io(l.path.clone(), e))?;
        let is_archive = l.path.extension().is_some_and(|e| e == "a");
        // Library names contain no '.', so `shoal-lib.NAME.` patterns
        // cannot match another library's files.
        let (file, pattern) = if is_archive {
            (format!("shoal-lib.{}.{i}.a", l.name), format!("*shoal-lib.{}.*.a:*", l.name))
        } else {
            (format!("shoal-obj.{}.{i}.o", l.name), format!("*shoal-obj.{}.*.o", l.name))
        };
        let link = t.join(file);
        symlink(&target, &link)?;
        user_links.push(link);
        libs.push(LibrarySpec { info: LibraryInfo { name: l.name.clone(), version: l.version.clone(), kind: LibraryKind::Library }, inputs: vec![pattern] });
        Ok(())
    };
    let mut delta_libs = Vec::new();
    for (i, l) in spec.deltas.iter().enumerate() {
        add_user(l, &mut delta_libs, i)?;
    }
    for (i, l) in spec.libraries.iter().enumerate() {
        add_user(l, &mut libs, i)?;
    }
    let mut tables: Vec<&str> = spec.trampolines.iter().map(|t| t.table.as_str()).collect();
    tables.sort();
    tables.dedup();
    for table in tables {
        let library = table_library(table);
        let entries: Vec<&Trampoline> = spec.trampolines.iter().filter(|t| t.table == table).collect();
        let obj = trampoline_object(t, &library, &entries)?;
        user_links.push(obj);
        libs.push(LibrarySpec {
            info: LibraryInfo { name: library.clone(), version: "image".into(), kind: LibraryKind::Library },
            inputs: vec![format!("*shoal-{library}.o")],
        });
    }
    let app = LibraryInfo { name: "app".into(), version: "0".into(), kind: LibraryKind::App };
    let packed = matches!(spec.layout.as_str(), "default" | "dce");
    let mut gaps = std::collections::BTreeMap::new();
    if spec.shuffle.is_some() && !packed {
        return Err(ToolchainError::Usage(format!("link-time ASLR of a single link applies to the default and dce layouts, not `{}`", spec.layout)));
    }
    let mut objects = spec.objects.clone();
    if packed {
        // A plain static link lays code out in command-line order: the
        // application, its libraries, then libc, the kernel and the compiler
        // runtime. The application's objects get names of their own so its
        // statement can come first; a trailing catch-all (`rest`, normally
        // empty) takes anything unclaimed.
        objects.clear();
        for (i, o) in spec.objects.iter().enumerate() {
            let target = o.canonicalize().map_err(|e| ToolchainError::Io(o.clone(), e))?;
            let link = t.join(format!("shoal-app.{i}.o"));
            symlink(&target, &link)?;
            objects.push(link);
        }
        let rank = |l: &LibrarySpec| match l.info.kind {
            LibraryKind::App => 0,
            LibraryKind::Library => 1,
            LibraryKind::Libc => 2,
            LibraryKind::Kernel => 3,
            LibraryKind::Runtime => 4,
        };
        libs.push(LibrarySpec { info: app, inputs: vec!["*shoal-app.*.o".into()] });
        libs.sort_by_key(rank);
        if let Some(seed) = spec.shuffle {
            let mut rng = crate::workspace::SplitMix::new(seed);
            for i in (1..libs.len()).rev() {
                let j = rng.below(i as u64 + 1) as usize;
                libs.swap(i, j);
            }
            for l in &libs {
                gaps.insert(l.info.name.clone(), rng.below(16) * 4096);
            }
        }
        libs.push(LibrarySpec { info: LibraryInfo { name: "rest".into(), version: "0".into(), kind: LibraryKind::App }, inputs: vec![] });
    } else {
        libs.push(LibrarySpec { info: app, inputs: vec![] });
    }
    let plan = ScriptPlan {
        policy: spec.layout.clone(),
        base: shoal_abi_image_base(),
        libs,
        deltas: delta_libs,
        page_align: !packed,
        gaps,
        split_relro: spec.layout == "aslr",
        map: spec.map.clone(),
    };
    let script = plan.script();
    let script_path = t.join("image.ld");
    std::fs::write(&script_path, &script).map_err(|e| ToolchainError::Io(script_path.clone(), e))?;
    if let Ok(keep) = std::env::var("SHOAL_KEEP_LINKER_SCRIPT") {
        let _ = std::fs::write(keep, &script);
    }

    let mut cmd = Command::new("gcc");
    cmd.args(["-nostdlib", "-static", "-no-pie", "-Wl,--build-id=none", "-Wl,-z,noexecstack"])
        .arg(format!("-Wl,-T,{}", script_path.display()))
        .args(["-Wl,-u,_shoal_start", "-Wl,--no-warn-rwx-segments"]);
    if spec.layout == "dce" {
        cmd.arg("-Wl,--gc-sections");
    }
    for w in &spec.wrap {
        cmd.arg(format!("-Wl,--wrap={w}"));
    }
    for u in &spec.undefined {
        cmd.arg(format!("-Wl,-u,{u}"));
    }
    if let Some(m) = &spec.map_file {
        cmd.arg(format!("-Wl,-Map={}", m.display()));
    }
    cmd.arg("-o")
        .arg(&spec.output)
        .arg(t.join("shoal-crt1.o"))
        .arg(t.join("shoal-crti.o"))
        .args(&objects)
        .args(&user_links)
        .arg("-Wl,--start-group")
        .arg(t.join("shoal-libc.a"))
        .arg(t.join("shoal-kernel.a"))
        .arg(t.join("shoal-libgcc.a"))
        .arg("-Wl,--end-group")
        .arg(t.join("shoal-crtn.o"))
        .args(&spec.extra_link_args);
    run("the link", &mut cmd)?;
    split_debug(&spec.output)?;

    let data = std::fs::read(&spec.output).map_err(|e| ToolchainError::Io(spec.output.clone(), e))?;
    let infos: Vec<LibraryInfo> = plan.libs.iter().chain(&plan.deltas).map(|l| l.info.clone()).collect();
    let manifest = Manifest::describe(&spec.output, &data, &infos, &spec.layout)?;
    manifest.write(&Manifest::path_for(&spec.output))?;
    Ok(manifest)
}

/// Moves the image's debug information into `IMAGE.debug` beside it (with
/// a `.gnu_debuglink` in the image, so gdb finds it): most of a linked
/// image is DWARF (a hello world is 7.3 MB with it, 1.0 MB without), which
/// no instance loads but every copy, upload and container layer would
/// carry. The symbol table stays, for crash reports and `shoal inspect`.
/// The manifest is written after this, so it describes the image as it
/// is shipped.
fn split_debug(image: &Path) -> Result<()> {
    let mut debug = image.as_os_str().to_owned();
    debug.push(".debug");
    let debug = PathBuf::from(debug);
    run("objcopy (keep the debug information)", Command::new("objcopy").arg("--only-keep-debug").arg(image).arg(&debug))?;
    // objcopy names the link by the file name alone and finds the file
    // from the current directory: run it beside the image.
    let dir = image.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = |p: &Path| p.file_name().map(PathBuf::from).ok_or_else(|| ToolchainError::Usage(format!("{} names no file", p.display())));
    run(
        "objcopy (strip the debug information)",
        Command::new("objcopy").current_dir(dir).arg("--strip-debug").arg(format!("--add-gnu-debuglink={}", name(&debug)?.display())).arg(name(image)?),
    )
}

/// The libraries every image links, from the sysroot, the kernel build and
/// gcc.
pub fn default_shared_inputs(paths: &Paths) -> Result<SharedInputs> {
    let lib = paths.sysroot().join("lib");
    Ok(SharedInputs {
        crt: [lib.join("crt1.o"), lib.join("crti.o"), lib.join("crtn.o")],
        libc: lib.join("libc.a"),
        kernel: paths.kernel_lib(),
        libgcc: gcc_file("-print-libgcc-file-name")?,
    })
}

/// The link address of every image (`shoal_abi::IMAGE_BASE`; repeated here
/// so the toolchain does not depend on the guest ABI crate for one number).
fn shoal_abi_image_base() -> u64 {
    0x100000
}
