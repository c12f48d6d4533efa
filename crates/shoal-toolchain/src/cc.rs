//! `shoal cc`: a drop-in C compiler for shoal.
//!
//! "Building a unikernel is choosing another target" (UKL): `shoal cc`
//! takes gcc's usual arguments. Compiling (`-c`, `-S`, `-E`) runs gcc
//! against shoal's libc headers with `-ffunction-sections -fdata-sections`;
//! linking compiles any sources given, then links an image with
//! [`crate::link::build`] (which also writes the manifest). `-lm`,
//! `-lpthread`, `-lc`, `-lrt`, `-ldl`, `-lutil`, `-lcrypt`, `-lxnet`
//! resolve to shoal's libc; other `-lNAME` are looked up as `libNAME.a` in
//! the `-L` directories and become application libraries of the image.
//! `--versioned` (shoal's own option) compiles a library that will be
//! versioned by the Δ-versioner with [`shoal_delta::VERSIONED_CFLAGS`].

use crate::link::{build, BuildSpec, UserLibrary};
use crate::setup::ensure_libc;
use crate::{run, Paths, Result, ToolchainError};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Libraries that musl folds into libc.
const LIBC_PARTS: &[&str] = &["c", "m", "pthread", "rt", "dl", "util", "crypt", "xnet", "resolv"];

/// The compiler flags every shoal compilation gets.
pub fn cflags(paths: &Paths) -> Result<Vec<String>> {
    let gcc_include = crate::link::gcc_file("-print-file-name=include")?.display().to_string();
    Ok(vec![
        "-nostdinc".into(),
        "-isystem".into(),
        paths.sysroot().join("include").display().to_string(),
        "-isystem".into(),
        gcc_include,
        "-ffunction-sections".into(),
        "-fdata-sections".into(),
        // Position-independent code (linked into a non-PIE image): a
        // library's code then addresses its own data and its trampoline
        // table PC-relatively, so the `aslr` layouts can move it and keep
        // its pages identical (docs/design.md "Layout policies"). Elsewhere it costs nothing: on
        // x86-64 a static link relaxes the few GOT loads it adds.
        "-fPIE".into(),
        "-fno-plt".into(),
    ])
}

#[derive(Default, Debug)]
struct Parsed {
    compile_only: bool,
    versioned: bool,
    output: Option<PathBuf>,
    sources: Vec<PathBuf>,
    objects: Vec<PathBuf>,
    archives: Vec<PathBuf>,
    libs: Vec<String>,
    lib_dirs: Vec<PathBuf>,
    compile_args: Vec<String>,
    link_args: Vec<String>,
}

/// What `shoal cc --help` prints.
pub const CC_HELP: &str = "\
usage: shoal cc [GCC OPTIONS] FILE...

A C compiler for shoal: gcc with shoal's libc (musl 1.2.3, whose system
calls are function calls into shoal's kernel) and -ffunction-sections
-fdata-sections. With -c, -S or -E it compiles as gcc does; otherwise it
links a shoal image (and IMAGE.manifest.json) that `shoal run` runs.

  -o FILE         the object or image to write
  -lNAME, -LDIR   libNAME.a from the -L directories (-lm, -lpthread, -lrt and
                  -ldl are shoal's libc)
  --versioned     compile a library whose versions a workspace shares with
                  the delta layout (fewer inlining optimisations)
  --version       shoal's version and gcc's

C only: C++ sources, -shared and -rdynamic are refused (images are static).
";

/// A C++ source (`shoal cc` refuses it: shoal's libc has no C++ runtime).
fn is_cplusplus(p: &str) -> bool {
    [".cpp", ".cc", ".cxx", ".c++", ".C", ".cp", ".CPP", ".ii"].iter().any(|e| p.ends_with(e))
}

fn is_source(p: &str) -> bool {
    [".c", ".s", ".S", ".i"].iter().any(|e| p.ends_with(e))
}

fn parse(args: &[String]) -> Result<Parsed> {
    let mut p = Parsed::default();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let a = a.as_str();
        let mut value =
            |flag: &str| -> Result<String> { it.next().cloned().ok_or_else(|| ToolchainError::Usage(format!("shoal cc: {flag} needs an argument"))) };
        match a {
            "-c" | "-S" | "-E" | "-M" | "-MM" => {
                p.compile_only = true;
                p.compile_args.push(a.into());
            }
            "--versioned" => p.versioned = true,
            "-o" => p.output = Some(PathBuf::from(value("-o")?)),
            "-l" => p.libs.push(value("-l")?),
            "-L" => p.lib_dirs.push(PathBuf::from(value("-L")?)),
            "-shared" | "-rdynamic" => return Err(ToolchainError::Usage(format!("shoal cc: {a} is not supported: shoal images are static"))),
            "-static" | "-pie" | "-no-pie" | "-static-pie" | "-pthread" => {
                if a == "-pthread" {
                    p.compile_args.push(a.into());
                }
            }
            "-I" | "-D" | "-U" | "-include" | "-isystem" | "-x" | "-MF" | "-MT" | "-MQ" | "-idirafter" | "-iquote" => {
                let v = value(a)?;
                p.compile_args.push(a.into());
                p.compile_args.push(v);
            }
            _ if a.starts_with("-l") => p.libs.push(a[2..].to_string()),
            _ if a.starts_with("-L") => p.lib_dirs.push(PathBuf::from(&a[2..])),
            _ if a.starts_with("-Wl,") => p.link_args.push(a.into()),
            _ if a.starts_with('-') => p.compile_args.push(a.into()),
            _ if is_cplusplus(a) => {
                return Err(ToolchainError::Usage(format!("shoal cc: {a}: C++ is not supported (shoal's libc has no C++ runtime); shoal cc compiles C")))
            }
            _ if is_source(a) => p.sources.push(PathBuf::from(a)),
            _ if a.ends_with(".a") => p.archives.push(PathBuf::from(a)),
            _ => p.objects.push(PathBuf::from(a)),
        }
    }
    Ok(p)
}

fn find_lib(name: &str, dirs: &[PathBuf]) -> Option<PathBuf> {
    dirs.iter().map(|d| d.join(format!("lib{name}.a"))).find(|p| p.is_file())
}

fn lib_name_of(archive: &Path) -> String {
    let stem = archive.file_stem().map(|s| s.to_string_lossy().to_string()).unwrap_or_default();
    let stem = stem.strip_prefix("lib").unwrap_or(&stem).to_string();
    stem.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect()
}

/// Runs `shoal cc ARGS…`.
pub fn cc(paths: &Paths, args: &[String]) -> Result<()> {
    if args.is_empty() {
        return Err(ToolchainError::Usage("shoal cc: no input files".into()));
    }
    if args.iter().any(|a| a == "--help" || a == "-h") {
        print!("{CC_HELP}");
        return Ok(());
    }
    if args.iter().any(|a| a == "--version") {
        // shoal's version first: the compiler a bug report is about.
        println!("shoal cc {} (shoal's libc: musl 1.2.3, system calls as function calls); the C compiler:", env!("CARGO_PKG_VERSION"));
        return run("gcc", Command::new("gcc").arg("--version"));
    }
    // Other queries (-print-*, -dumpmachine) go to gcc as they are.
    if args.iter().any(|a| a.starts_with("-print-") || a.starts_with("-dump")) {
        return run("gcc", Command::new("gcc").args(args));
    }
    ensure_libc(paths, false)?;
    let p = parse(args)?;
    let mut flags = cflags(paths)?;
    if p.versioned {
        flags.extend(shoal_delta::VERSIONED_CFLAGS.iter().map(|f| f.to_string()));
    }
    if p.compile_only {
        let mut cmd = Command::new("gcc");
        cmd.args(&flags).args(&p.compile_args).args(&p.sources).args(&p.objects);
        if let Some(o) = &p.output {
            cmd.arg("-o").arg(o);
        }
        return run("gcc", &mut cmd);
    }
    if p.sources.is_empty() && p.objects.is_empty() && p.archives.is_empty() {
        return Err(ToolchainError::Usage("shoal cc: no input files".into()));
    }
    let tmp = tempfile::Builder::new().prefix("shoal-cc-").tempdir().map_err(|e| ToolchainError::Io(std::env::temp_dir(), e))?;
    let mut objects = Vec::new();
    for (i, src) in p.sources.iter().enumerate() {
        if !src.is_file() {
            return Err(ToolchainError::Input(src.clone(), "no such file".into()));
        }
        let stem = src.file_stem().map(|s| s.to_string_lossy().to_string()).unwrap_or_default();
        let obj = tmp.path().join(format!("{i}-{stem}.o"));
        run("gcc", Command::new("gcc").args(&flags).args(&p.compile_args).arg("-c").arg(src).arg("-o").arg(&obj))?;
        objects.push(obj);
    }
    objects.extend(p.objects.iter().cloned());
    let mut libraries = Vec::new();
    for a in &p.archives {
        libraries.push(UserLibrary { name: lib_name_of(a), version: "unversioned".into(), path: a.clone() });
    }
    for l in &p.libs {
        if LIBC_PARTS.contains(&l.as_str()) {
            continue;
        }
        match find_lib(l, &p.lib_dirs) {
            Some(path) => libraries.push(UserLibrary { name: lib_name_of(&path), version: "unversioned".into(), path }),
            None => return Err(ToolchainError::Usage(format!("shoal cc: cannot find -l{l} (no lib{l}.a in the -L directories)"))),
        }
    }
    let mut spec = BuildSpec::new(p.output.clone().unwrap_or_else(|| PathBuf::from("a.out")), objects, libraries);
    spec.extra_link_args = p.link_args.clone();
    build(paths, &spec)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn parses_gcc_style_arguments() {
        let p = parse(&s(&["-O2", "-g", "-Iinc", "-D", "X=1", "a.c", "b.o", "-o", "out", "-lm", "-L", "d", "-lfoo", "libz.a"])).unwrap();
        assert!(!p.compile_only);
        assert_eq!(p.output, Some(PathBuf::from("out")));
        assert_eq!(p.sources, vec![PathBuf::from("a.c")]);
        assert_eq!(p.objects, vec![PathBuf::from("b.o")]);
        assert_eq!(p.archives, vec![PathBuf::from("libz.a")]);
        assert_eq!(p.libs, vec!["m".to_string(), "foo".to_string()]);
        assert_eq!(p.lib_dirs, vec![PathBuf::from("d")]);
        assert_eq!(p.compile_args, s(&["-O2", "-g", "-Iinc", "-D", "X=1"]));
        assert!(parse(&s(&["-c", "x.c"])).unwrap().compile_only);
        assert!(!p.versioned);
        let v = parse(&s(&["--versioned", "-c", "x.c"])).unwrap();
        assert!(v.versioned && v.compile_args == s(&["-c"]));
        assert!(parse(&s(&["-shared", "x.c"])).is_err());
        let e = parse(&s(&["-O2", "hi.cpp"])).unwrap_err().to_string();
        assert_eq!(e, "shoal cc: hi.cpp: C++ is not supported (shoal's libc has no C++ runtime); shoal cc compiles C");
        assert!(parse(&s(&["x.cc"])).is_err() && parse(&s(&["x.cxx", "-c"])).is_err());
        assert!(parse(&s(&["x.c", "-o"])).is_err());
        assert_eq!(lib_name_of(Path::new("/x/libsqlite3.a")), "sqlite3");
    }
}
