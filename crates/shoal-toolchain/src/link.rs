//! `shoal build`: links application objects, application libraries, shoal's
//! libc, the compiler runtime and the kernel into one static image, and
//! writes the image manifest next to it (DESIGN §2, §4).

use crate::layout::{linker_script, LibrarySpec, COMPONENT_ORDER, POLICIES};
use crate::setup::{ensure_kernel, ensure_libc, kernel_components};
use crate::{run, Paths, Result, ToolchainError};
use shoal_manifest::{LibraryInfo, LibraryKind, Manifest};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The libc version string recorded in manifests.
pub const LIBC_VERSION: &str = "musl-1.2.3+shoal1";

/// An application library given to the build (an archive of objects).
#[derive(Clone, Debug)]
pub struct UserLibrary {
    /// Library name (becomes its region names; letters, digits, `_`, `-`).
    pub name: String,
    /// Version string.
    pub version: String,
    /// The archive (`.a`).
    pub path: PathBuf,
}

/// What to link.
#[derive(Clone, Debug)]
pub struct BuildSpec {
    /// The image to write.
    pub output: PathBuf,
    /// The application's own objects (`.o`).
    pub objects: Vec<PathBuf>,
    /// Application libraries, in link order.
    pub libraries: Vec<UserLibrary>,
    /// Layout policy (see [`POLICIES`]).
    pub layout: String,
    /// Extra arguments for the linker driver (e.g. `-Wl,…` from `shoal cc`).
    pub extra_link_args: Vec<String>,
}

fn valid_name(n: &str) -> bool {
    !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

fn symlink(target: &Path, link: &Path) -> Result<()> {
    std::os::unix::fs::symlink(target, link).map_err(|e| ToolchainError::Io(link.to_path_buf(), e))
}

fn gcc_file(arg: &str) -> Result<PathBuf> {
    let out = Command::new("gcc")
        .arg(arg)
        .output()
        .map_err(|e| ToolchainError::Spawn("gcc".into(), e))?;
    let p = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim().to_string());
    if !out.status.success() || !p.is_absolute() {
        return Err(ToolchainError::Failed(format!("gcc {arg}"), "no answer".into()));
    }
    Ok(p)
}

/// Links the image described by `spec`, then writes its manifest. Builds
/// the libc and the kernel first if they are missing or stale.
pub fn build(paths: &Paths, spec: &BuildSpec) -> Result<Manifest> {
    if !POLICIES.contains(&spec.layout.as_str()) {
        return Err(ToolchainError::Usage(format!(
            "unknown layout policy `{}` (this shoal knows: {})",
            spec.layout,
            POLICIES.join(", ")
        )));
    }
    for o in &spec.objects {
        if !o.is_file() {
            return Err(ToolchainError::Input(o.clone(), "no such object file".into()));
        }
    }
    for l in &spec.libraries {
        if !valid_name(&l.name) {
            return Err(ToolchainError::Usage(format!("invalid library name `{}`", l.name)));
        }
        if !l.path.is_file() {
            return Err(ToolchainError::Input(l.path.clone(), "no such library archive".into()));
        }
    }
    ensure_libc(paths, false)?;
    ensure_kernel(paths, false)?;

    let tmp = tempfile::Builder::new()
        .prefix("shoal-build-")
        .tempdir()
        .map_err(|e| ToolchainError::Io(std::env::temp_dir(), e))?;
    let t = tmp.path();
    let sysroot = paths.sysroot();
    for f in ["crt1.o", "crti.o", "crtn.o", "libc.a"] {
        symlink(&sysroot.join("lib").join(f), &t.join(format!("shoal-{f}")))?;
    }
    let kernel = paths.kernel_lib();
    symlink(&kernel, &t.join("shoal-kernel.a"))?;
    symlink(&gcc_file("-print-libgcc-file-name")?, &t.join("shoal-libgcc.a"))?;

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
    libs.push(LibrarySpec {
        info: LibraryInfo { name: "krt".into(), version: kernel_version.clone(), kind: LibraryKind::Kernel },
        inputs: vec!["*shoal-kernel.a:*".into()],
    });
    libs.push(LibrarySpec {
        info: LibraryInfo { name: "libc".into(), version: LIBC_VERSION.into(), kind: LibraryKind::Libc },
        inputs: vec![
            "*shoal-crt1.o".into(),
            "*shoal-crti.o".into(),
            "*shoal-crtn.o".into(),
            "*shoal-libc.a:*".into(),
        ],
    });
    libs.push(LibrarySpec {
        info: LibraryInfo { name: "libgcc".into(), version: "gcc".into(), kind: LibraryKind::Runtime },
        inputs: vec!["*shoal-libgcc.a:*".into()],
    });
    let mut user_links = Vec::new();
    for l in &spec.libraries {
        let link = t.join(format!("shoal-lib-{}.a", l.name));
        let target = l.path.canonicalize().map_err(|e| ToolchainError::Io(l.path.clone(), e))?;
        symlink(&target, &link)?;
        user_links.push(link);
        libs.push(LibrarySpec {
            info: LibraryInfo { name: l.name.clone(), version: l.version.clone(), kind: LibraryKind::Library },
            inputs: vec![format!("*shoal-lib-{}.a:*", l.name)],
        });
    }
    let app = LibraryInfo { name: "app".into(), version: "0".into(), kind: LibraryKind::App };
    let script = linker_script(&libs, &app, shoal_abi_image_base());
    let script_path = t.join("image.ld");
    std::fs::write(&script_path, &script).map_err(|e| ToolchainError::Io(script_path.clone(), e))?;
    if let Ok(keep) = std::env::var("SHOAL_KEEP_LINKER_SCRIPT") {
        let _ = std::fs::write(keep, &script);
    }

    let mut cmd = Command::new("gcc");
    cmd.args(["-nostdlib", "-static", "-no-pie", "-Wl,--build-id=none", "-Wl,-z,noexecstack"])
        .arg(format!("-Wl,-T,{}", script_path.display()))
        .args(["-Wl,-u,_shoal_start", "-Wl,--no-warn-rwx-segments"])
        .arg("-o")
        .arg(&spec.output)
        .arg(t.join("shoal-crt1.o"))
        .arg(t.join("shoal-crti.o"))
        .args(&spec.objects)
        .args(&user_links)
        .arg("-Wl,--start-group")
        .arg(t.join("shoal-libc.a"))
        .arg(t.join("shoal-kernel.a"))
        .arg(t.join("shoal-libgcc.a"))
        .arg("-Wl,--end-group")
        .arg(t.join("shoal-crtn.o"))
        .args(&spec.extra_link_args);
    run("the link", &mut cmd)?;

    let data = std::fs::read(&spec.output).map_err(|e| ToolchainError::Io(spec.output.clone(), e))?;
    let mut infos: Vec<LibraryInfo> = libs.into_iter().map(|l| l.info).collect();
    infos.push(app);
    let manifest = Manifest::describe(&spec.output, &data, &infos, &spec.layout)?;
    manifest.write(&Manifest::path_for(&spec.output))?;
    Ok(manifest)
}

/// The link address of every image (`shoal_abi::IMAGE_BASE`; repeated here
/// so the toolchain does not depend on the guest ABI crate for one number).
fn shoal_abi_image_base() -> u64 {
    0x100000
}
