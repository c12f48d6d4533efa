//! `shoal recipe`: real programs built from Debian source packages.
//!
//! A recipe (`recipes/NAME.json` in shoal's source tree) names an optional
//! **library** — a Debian source package (`apt-get source`, unpacked in the
//! cache next to musl's, never committed), the commands that prepare it
//! (generating a header or an amalgamation with the package's own tooling),
//! its sources and flags — and an **application**: sources (from the package
//! or from `apps/recipes/`) linked against the library. It also says how to
//! run the application, with small arguments for the tests and full ones for
//! `shoal bench apps`.
//!
//! Building a recipe compiles every source twice, in parallel: with shoal's
//! flags (what `shoal cc -c` does) and with `musl-gcc` (same flags without
//! shoal's), archives the library objects as `lib<name>.a`, links the shoal
//! image with [`crate::link::build`] (the manifest records the library as
//! `name@version`, the Debian upstream version) and the native static
//! musl program with `musl-gcc -static`. Everything but the image link is
//! cached under `SHOAL_CACHE/recipes`, keyed on the recipe, the Debian
//! source package, the application sources, the compiler and the libc.

use crate::cc::cflags;
use crate::link::{build as link_image, BuildSpec, UserLibrary};
use crate::setup::ensure_libc;
use crate::{Paths, Result, ToolchainError};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// Bumped whenever the way recipes are built changes (invalidates caches).
const FORMAT: &str = "shoal-recipe-1";

/// A recipe, as read from `recipes/NAME.json`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Recipe {
    /// The recipe's name (`shoal recipe build NAME`); the file's stem.
    pub name: String,
    /// One line for `shoal recipe list`.
    pub description: String,
    /// The library the application links, if any.
    #[serde(default)]
    pub library: Option<LibraryRecipe>,
    /// The application.
    pub app: AppRecipe,
    /// How to run the application.
    pub run: RunRecipe,
}

/// A library built from a Debian source package.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LibraryRecipe {
    /// The library's name in images (`sqlite`, `lua`, `pcre2`).
    pub name: String,
    /// The Debian source package (`apt-get source PACKAGE`).
    pub package: String,
    /// The upstream version the recipe expects, as a prefix (`3.40`).
    pub version: String,
    /// Host programs the preparation needs, as `[program, Debian package]`.
    #[serde(default)]
    pub tools: Vec<(String, String)>,
    /// Shell commands run in the generated-sources directory (`{gen}`)
    /// with `$SRC` (the unpacked package) and `$GEN` set.
    #[serde(default)]
    pub prepare: Vec<String>,
    /// The library's sources: paths under `{src}` or `{gen}`; the last
    /// component may hold `*` wildcards.
    pub sources: Vec<String>,
    /// File names left out of the wildcard matches.
    #[serde(default)]
    pub exclude: Vec<String>,
    /// Compiler flags (both builds).
    #[serde(default)]
    pub cflags: Vec<String>,
}

/// The application of a recipe.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppRecipe {
    /// Sources: under `{src}`, `{gen}` (the library's) or `{home}` (shoal's tree).
    pub sources: Vec<String>,
    /// Compiler flags (both builds).
    #[serde(default)]
    pub cflags: Vec<String>,
    /// Extra arguments for the native link (`-lm`, `-lpthread`); shoal's
    /// libc holds these parts already.
    #[serde(default)]
    pub native_libs: Vec<String>,
}

/// How to run a recipe's application.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunRecipe {
    /// A directory served as the instance's root file system (`--fs`);
    /// natively, `{root}` is this directory.
    #[serde(default)]
    pub fs: Option<String>,
    /// The instance's memory (`--mem`).
    pub mem: String,
    /// Arguments for the parity tests (small inputs).
    pub test_args: Vec<String>,
    /// Arguments for `shoal bench apps` (full size).
    pub bench_args: Vec<String>,
}

/// An unpacked Debian source package.
#[derive(Clone, Debug)]
pub struct Source {
    /// The source package's name.
    pub package: String,
    /// The full Debian version (`3.40.1-2+deb12u2`).
    pub debian_version: String,
    /// The upstream version (`3.40.1`).
    pub upstream_version: String,
    /// The unpacked tree.
    pub dir: PathBuf,
    /// The `.dsc` file it was unpacked from.
    pub dsc: PathBuf,
}

/// A library built by a recipe, for shoal and natively.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BuiltLibrary {
    /// The library's name (`sqlite`).
    pub name: String,
    /// The Debian upstream version, recorded in image manifests.
    pub version: String,
    /// The Debian source package.
    pub package: String,
    /// The full Debian version of the source package.
    pub debian_version: String,
    /// The unpacked source package.
    pub src_dir: PathBuf,
    /// Generated sources (headers, amalgamation).
    pub gen_dir: PathBuf,
    /// The library's objects compiled for shoal.
    pub objects: Vec<PathBuf>,
    /// `lib<name>.a` of those objects.
    pub archive: PathBuf,
    /// The same library compiled with `musl-gcc`.
    pub native_archive: PathBuf,
    /// The compiler flags used (besides shoal's own).
    pub cflags: Vec<String>,
}

/// A built recipe: the shoal image and the native static musl program
/// made from the same sources.
#[derive(Clone, Debug)]
pub struct Built {
    /// The recipe.
    pub recipe: Recipe,
    /// The library, if the recipe has one.
    pub library: Option<BuiltLibrary>,
    /// The shoal image (its manifest is next to it).
    pub image: PathBuf,
    /// The native static musl program (in the cache).
    pub native: PathBuf,
}

/// Which side a recipe's application runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// As a shoal image: `{tmp}` is `/tmp`, `{root}` the instance's root.
    Shoal,
    /// As a native process: `{tmp}` and `{root}` are host directories.
    Native,
}

/// How to run a recipe's application on one side.
#[derive(Clone, Debug)]
pub struct Invocation {
    /// `argv[1..]`.
    pub args: Vec<String>,
    /// The directory to serve as the root (`shoal run --fs`), if any.
    pub fs: Option<PathBuf>,
    /// The instance's memory (`shoal run --mem`).
    pub mem: String,
}

fn err(msg: String) -> ToolchainError {
    ToolchainError::Recipe(msg)
}

fn io<T>(p: &Path, r: std::io::Result<T>) -> Result<T> {
    r.map_err(|e| ToolchainError::Io(p.to_path_buf(), e))
}

/// The directory of recipe files.
pub fn recipes_dir(paths: &Paths) -> PathBuf {
    paths.home.join("recipes")
}

/// All recipes, sorted by name.
pub fn list(paths: &Paths) -> Result<Vec<Recipe>> {
    let dir = recipes_dir(paths);
    let mut names = Vec::new();
    for ent in io(&dir, fs::read_dir(&dir))? {
        let p = io(&dir, ent)?.path();
        if p.extension().is_some_and(|e| e == "json") {
            if let Some(stem) = p.file_stem() {
                names.push(stem.to_string_lossy().to_string());
            }
        }
    }
    names.sort();
    names.iter().map(|n| load(paths, n)).collect()
}

/// Reads the recipe `name`.
pub fn load(paths: &Paths, name: &str) -> Result<Recipe> {
    let file = recipes_dir(paths).join(format!("{name}.json"));
    let valid = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !valid || !file.is_file() {
        let known = list_names(paths).join(", ");
        return Err(err(format!("there is no recipe named `{name}` (the recipes are: {known})")));
    }
    let text = io(&file, fs::read_to_string(&file))?;
    let recipe: Recipe = serde_json::from_str(&text).map_err(|e| ToolchainError::Input(file.clone(), format!("not a valid recipe: {e}")))?;
    if recipe.name != name {
        return Err(ToolchainError::Input(file, format!("the recipe calls itself `{}`, not `{name}`", recipe.name)));
    }
    Ok(recipe)
}

fn list_names(paths: &Paths) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(recipes_dir(paths))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let p = e.path();
            (p.extension()? == "json").then(|| p.file_stem().map(|s| s.to_string_lossy().to_string()))?
        })
        .collect();
    v.sort();
    v
}

/// An exclusive lock on `path` (created), released when dropped.
fn lock(path: &Path) -> Result<File> {
    if let Some(d) = path.parent() {
        io(d, fs::create_dir_all(d))?;
    }
    let f = io(path, File::create(path))?;
    io(path, f.lock())?;
    Ok(f)
}

/// A log file under `SHOAL_CACHE/logs`, shared by the threads of a build.
struct Log {
    path: PathBuf,
    file: Mutex<File>,
}

impl Log {
    fn new(paths: &Paths, name: &str) -> Result<Log> {
        let dir = paths.cache.join("logs");
        io(&dir, fs::create_dir_all(&dir))?;
        let path = dir.join(format!("recipe-{name}.log"));
        let file = io(&path, fs::OpenOptions::new().create(true).append(true).open(&path))?;
        Ok(Log { path, file: Mutex::new(file) })
    }

    fn write(&self, text: &str) {
        if let Ok(mut f) = self.file.lock() {
            let _ = f.write_all(text.as_bytes());
        }
    }

    /// Runs `cmd` with its output in the log; a failure names `what` and
    /// quotes the end of the output.
    fn run(&self, what: &str, cmd: &mut Command) -> Result<()> {
        let out = cmd.output().map_err(|e| ToolchainError::Spawn(what.to_string(), e))?;
        let mut text = format!("+ {cmd:?}\n");
        text.push_str(&String::from_utf8_lossy(&out.stdout));
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        self.write(&text);
        if !out.status.success() {
            let why = match out.status.code() {
                Some(c) => format!("exit status {c}"),
                None => "killed by a signal".to_string(),
            };
            let stderr = String::from_utf8_lossy(&out.stderr);
            let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
            let tail = lines[lines.len().saturating_sub(3)..].join(" | ");
            return Err(ToolchainError::Failed(what.to_string(), format!("{why}: {tail}; log: {}", self.path.display())));
        }
        Ok(())
    }
}

fn has_program(name: &str) -> bool {
    std::env::var_os("PATH").map(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file())).unwrap_or(false)
}

fn require_tool(recipe: &str, program: &str, package: &str) -> Result<()> {
    if has_program(program) {
        Ok(())
    } else {
        Err(err(format!("recipe {recipe} needs `{program}` on the PATH (Debian package {package})")))
    }
}

/// Upstream version of a Debian version: no epoch, no Debian revision.
fn upstream_of(debian_version: &str) -> String {
    let v = debian_version.split_once(':').map(|(_, v)| v).unwrap_or(debian_version);
    match v.rfind('-') {
        Some(i) => v[..i].to_string(),
        None => v.to_string(),
    }
}

/// The newest `.dsc` of `package` in `dir`.
fn newest_dsc(dir: &Path, package: &str) -> Option<PathBuf> {
    let prefix = format!("{package}_");
    let mut v: Vec<PathBuf> = fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let n = p.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
            n.starts_with(&prefix) && n.ends_with(".dsc")
        })
        .collect();
    v.sort();
    v.pop()
}

fn dsc_version(dsc: &Path) -> Result<String> {
    let text = io(dsc, fs::read_to_string(dsc))?;
    text.lines()
        .find_map(|l| l.strip_prefix("Version:").map(|v| v.trim().to_string()))
        .ok_or_else(|| ToolchainError::Input(dsc.to_path_buf(), "no Version: field".into()))
}

/// Fetches (`apt-get source --download-only`) and unpacks (`dpkg-source
/// -x`) the Debian source package of `lib` into `SHOAL_CACHE/src`, unless
/// it is there already. `recipe` names the recipe in messages.
pub fn fetch(paths: &Paths, recipe: &str, lib: &LibraryRecipe) -> Result<Source> {
    let src_dir = paths.cache.join("src");
    io(&src_dir, fs::create_dir_all(&src_dir))?;
    let _lock = lock(&src_dir.join(format!(".fetch-{}.lock", lib.package)))?;
    let log = Log::new(paths, recipe)?;
    let pkg = &lib.package;
    let dsc = match newest_dsc(&src_dir, pkg) {
        Some(d) => d,
        None => {
            for (p, d) in [("apt-get", "apt"), ("dpkg-source", "dpkg-dev")] {
                require_tool(recipe, p, d)?;
            }
            let what = format!("fetching Debian source package {pkg} for recipe {recipe} (apt-get source)");
            let get = |spec: &str| log.run(&what, Command::new("apt-get").args(["source", "--download-only", spec]).current_dir(&src_dir));
            if get(pkg).is_err() {
                // Stale package lists, or a security update whose source is
                // not on the mirror: update, then try every listed version.
                log.run("apt-get update", Command::new("apt-get").arg("update"))?;
                if let Err(e) = get(pkg) {
                    let out = Command::new("apt-cache").args(["showsrc", pkg]).output().map_err(|e| ToolchainError::Spawn("apt-cache".into(), e))?;
                    let versions: Vec<String> =
                        String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| l.strip_prefix("Version:").map(|v| v.trim().to_string())).collect();
                    if !versions.iter().any(|v| get(&format!("{pkg}={v}")).is_ok()) {
                        return Err(e);
                    }
                }
            }
            newest_dsc(&src_dir, pkg).ok_or_else(|| err(format!("apt-get source {pkg} (recipe {recipe}) left no {pkg}_*.dsc in {}", src_dir.display())))?
        }
    };
    let debian_version = dsc_version(&dsc)?;
    let upstream_version = upstream_of(&debian_version);
    let dir = src_dir.join(format!("{pkg}-{upstream_version}"));
    let stamp = dir.join(".shoal-unpacked");
    let dsc_name = dsc.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
    if fs::read_to_string(&stamp).ok().as_deref() != Some(dsc_name.as_str()) {
        require_tool(recipe, "dpkg-source", "dpkg-dev")?;
        if dir.exists() {
            io(&dir, fs::remove_dir_all(&dir))?;
        }
        log.run(
            &format!("unpacking {} for recipe {recipe} (dpkg-source -x)", dsc.display()),
            Command::new("dpkg-source").arg("-x").arg(&dsc).arg(&dir).current_dir(&src_dir),
        )?;
        io(&stamp, fs::write(&stamp, &dsc_name))?;
    }
    let wanted = &lib.version;
    let matches = upstream_version == *wanted || upstream_version.strip_prefix(wanted.as_str()).is_some_and(|rest| rest.starts_with('.'));
    if !matches {
        return Err(err(format!("recipe {recipe} expects {} {wanted}, but Debian's source package {pkg} is {upstream_version} ({})", lib.name, dsc.display())));
    }
    Ok(Source { package: pkg.clone(), debian_version, upstream_version, dir, dsc })
}

/// Substitutes `{home}`, `{src}`, `{gen}` in `s`.
fn expand(s: &str, home: &Path, src: Option<&Path>, gen: Option<&Path>) -> String {
    let mut out = s.replace("{home}", &home.display().to_string());
    if let Some(p) = src {
        out = out.replace("{src}", &p.display().to_string());
    }
    if let Some(p) = gen {
        out = out.replace("{gen}", &p.display().to_string());
    }
    out
}

/// Whether `name` matches `pattern`, whose `*` match any run of characters.
fn wildcard(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == name;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !name.starts_with(first) || name.len() < first.len() + last.len() || !name.ends_with(last) {
        return false;
    }
    let mut rest = &name[first.len()..name.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    true
}

/// Expands the source list: placeholders, then wildcards in the last
/// component (sorted), minus `exclude`.
fn source_files(recipe: &str, list: &[String], exclude: &[String], home: &Path, src: Option<&Path>, gen: Option<&Path>) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for s in list {
        let p = PathBuf::from(expand(s, home, src, gen));
        let name = p.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
        if name.contains('*') {
            let dir = p.parent().unwrap_or(Path::new("."));
            let mut found: Vec<PathBuf> = io(dir, fs::read_dir(dir))?
                .flatten()
                .map(|e| e.path())
                .filter(|q| {
                    let n = q.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
                    wildcard(&name, &n) && !exclude.contains(&n)
                })
                .collect();
            if found.is_empty() {
                return Err(err(format!("recipe {recipe}: no source matches {}", p.display())));
            }
            found.sort();
            files.extend(found);
        } else if !p.is_file() {
            return Err(ToolchainError::Input(p, format!("a source of recipe {recipe} is missing")));
        } else {
            files.push(p);
        }
    }
    Ok(files)
}

/// Object names for `sources`: their stems, made unique.
fn object_names(sources: &[PathBuf]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for s in sources {
        let stem = s.file_stem().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
        let mut name = format!("{stem}.o");
        let mut i = 1;
        while names.contains(&name) {
            i += 1;
            name = format!("{stem}-{i}.o");
        }
        names.push(name);
    }
    names
}

/// One compilation.
struct Job {
    what: String,
    cmd: Command,
}

/// Runs `jobs` on as many threads as the machine has CPUs; stops at the
/// first failure.
fn run_jobs(jobs: Vec<Job>, log: &Log) -> Result<()> {
    let n = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).min(jobs.len().max(1));
    let queue = Mutex::new(jobs.into_iter());
    let failure: Mutex<Option<ToolchainError>> = Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..n {
            s.spawn(|| loop {
                if failure.lock().map(|f| f.is_some()).unwrap_or(true) {
                    return;
                }
                let job = match queue.lock() {
                    Ok(mut q) => q.next(),
                    Err(_) => None,
                };
                let Some(mut job) = job else { return };
                if let Err(e) = log.run(&job.what, &mut job.cmd) {
                    if let Ok(mut f) = failure.lock() {
                        f.get_or_insert(e);
                    }
                    return;
                }
            });
        }
    });
    match failure.into_inner() {
        Ok(Some(e)) => Err(e),
        _ => Ok(()),
    }
}

/// Compile jobs for `sources` into `shoal_dir` (shoal's flags) and
/// `native_dir` (musl-gcc); returns the object paths (shoal, native).
fn compile_jobs(
    recipe: &str,
    sources: &[PathBuf],
    flags: &[String],
    shoal_flags: &[String],
    shoal_dir: &Path,
    native_dir: &Path,
) -> (Vec<Job>, Vec<PathBuf>, Vec<PathBuf>) {
    let mut jobs = Vec::new();
    let (mut so, mut no) = (Vec::new(), Vec::new());
    for (src, name) in sources.iter().zip(object_names(sources)) {
        let s_obj = shoal_dir.join(&name);
        let n_obj = native_dir.join(&name);
        let mut cmd = Command::new("gcc");
        cmd.args(shoal_flags).args(flags).arg("-c").arg(src).arg("-o").arg(&s_obj);
        jobs.push(Job { what: format!("compiling {} for shoal (recipe {recipe})", src.display()), cmd });
        let mut cmd = Command::new("musl-gcc");
        cmd.args(flags).arg("-c").arg(src).arg("-o").arg(&n_obj);
        jobs.push(Job { what: format!("compiling {} natively with musl-gcc (recipe {recipe})", src.display()), cmd });
        so.push(s_obj);
        no.push(n_obj);
    }
    (jobs, so, no)
}

fn hex(d: impl AsRef<[u8]>) -> String {
    d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// What every compilation depends on besides its sources: shoal's flags,
/// the libc build, the compiler.
fn toolchain_identity(paths: &Paths, shoal_flags: &[String]) -> String {
    let gcc = Command::new("gcc").arg("-dumpfullversion").output().map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string()).unwrap_or_default();
    let stamp = fs::read_to_string(paths.sysroot().join(".shoal-stamp")).unwrap_or_default();
    format!("{FORMAT}\n{}\ngcc {gcc}\nlibc {}\n", shoal_flags.join(" "), stamp.trim())
}

fn ar(log: &Log, what: &str, archive: &Path, objects: &[PathBuf]) -> Result<()> {
    if archive.exists() {
        io(archive, fs::remove_file(archive))?;
    }
    log.run(what, Command::new("ar").arg("rcs").arg(archive).args(objects))
}

fn fresh_dir(d: &Path) -> Result<()> {
    if d.exists() {
        io(d, fs::remove_dir_all(d))?;
    }
    io(d, fs::create_dir_all(d))
}

/// Removes the stale builds next to `keep`: `prefix` followed by another key.
fn remove_stale(keep: &Path, prefix: &str) {
    let Some(root) = keep.parent() else { return };
    for ent in fs::read_dir(root).into_iter().flatten().flatten() {
        let p = ent.path();
        let n = ent.file_name().to_string_lossy().to_string();
        let other_key = n.strip_prefix(prefix).is_some_and(|k| k.len() == 16 && k.chars().all(|c| c.is_ascii_hexdigit()));
        if p != keep && other_key && p.is_dir() {
            let _ = fs::remove_dir_all(&p);
        }
    }
}

fn require_musl_gcc(recipe: &str) -> Result<()> {
    require_tool(recipe, "musl-gcc", "musl-tools")
}

/// Fetches and builds the library of `recipe` (for shoal and natively),
/// or finds it in the cache. `None` if the recipe has no library.
pub fn build_library(paths: &Paths, recipe: &Recipe) -> Result<Option<BuiltLibrary>> {
    let Some(lib) = &recipe.library else { return Ok(None) };
    ensure_libc(paths, false)?;
    require_musl_gcc(&recipe.name)?;
    let source = fetch(paths, &recipe.name, lib)?;
    let shoal_flags = cflags(paths)?;
    let mut h = Sha256::new();
    h.update(toolchain_identity(paths, &shoal_flags));
    h.update(serde_json::to_string(lib).unwrap_or_default());
    h.update(io(&source.dsc, fs::read(&source.dsc))?);
    let key = hex(h.finalize());
    let root = paths.cache.join("recipes");
    let dir = root.join(format!("{}-{}-{}", lib.name, source.upstream_version, &key[..16]));
    let meta_path = dir.join("library.json");
    let _lock = lock(&root.join(format!(".{}.lock", lib.name)))?;
    if let Ok(text) = fs::read_to_string(&meta_path) {
        if let Ok(meta) = serde_json::from_str::<BuiltLibrary>(&text) {
            if meta.archive.is_file() && meta.native_archive.is_file() {
                return Ok(Some(meta));
            }
        }
    }
    let log = Log::new(paths, &recipe.name)?;
    log.write(&format!("== library {} {} for recipe {} in {}\n", lib.name, source.upstream_version, recipe.name, dir.display()));
    remove_stale(&dir, &format!("{}-{}-", lib.name, source.upstream_version));
    fresh_dir(&dir)?;
    let gen = dir.join("gen");
    let (s_dir, n_dir) = (dir.join("shoal"), dir.join("native"));
    for d in [&gen, &s_dir, &n_dir] {
        io(d, fs::create_dir_all(d))?;
    }
    for (program, package) in &lib.tools {
        require_tool(&recipe.name, program, package)?;
    }
    for step in &lib.prepare {
        log.run(
            &format!("preparing the sources of {} for recipe {recipe} (`{step}`)", lib.name, recipe = recipe.name),
            Command::new("sh").arg("-ec").arg(step).current_dir(&gen).env("SRC", &source.dir).env("GEN", &gen).env_remove("CFLAGS").env_remove("MAKEFLAGS"),
        )?;
    }
    let sources = source_files(&recipe.name, &lib.sources, &lib.exclude, &paths.home, Some(&source.dir), Some(&gen))?;
    let flags: Vec<String> = lib.cflags.iter().map(|f| expand(f, &paths.home, Some(&source.dir), Some(&gen))).collect();
    let (jobs, objects, native_objects) = compile_jobs(&recipe.name, &sources, &flags, &shoal_flags, &s_dir, &n_dir);
    run_jobs(jobs, &log)?;
    let archive = s_dir.join(format!("lib{}.a", lib.name));
    let native_archive = n_dir.join(format!("lib{}.a", lib.name));
    ar(&log, &format!("archiving lib{}.a (recipe {})", lib.name, recipe.name), &archive, &objects)?;
    ar(&log, &format!("archiving the native lib{}.a (recipe {})", lib.name, recipe.name), &native_archive, &native_objects)?;
    let meta = BuiltLibrary {
        name: lib.name.clone(),
        version: source.upstream_version.clone(),
        package: source.package.clone(),
        debian_version: source.debian_version.clone(),
        src_dir: source.dir.clone(),
        gen_dir: gen,
        objects,
        archive,
        native_archive,
        cflags: flags,
    };
    let text = serde_json::to_string_pretty(&meta).unwrap_or_default();
    io(&meta_path, fs::write(&meta_path, text))?;
    Ok(Some(meta))
}

/// The application's cached build: its shoal objects and the native program.
struct BuiltApp {
    objects: Vec<PathBuf>,
    native: PathBuf,
}

fn build_app(paths: &Paths, recipe: &Recipe, library: Option<&BuiltLibrary>) -> Result<BuiltApp> {
    ensure_libc(paths, false)?;
    require_musl_gcc(&recipe.name)?;
    let src = library.map(|l| l.src_dir.as_path());
    let gen = library.map(|l| l.gen_dir.as_path());
    let sources = source_files(&recipe.name, &recipe.app.sources, &[], &paths.home, src, gen)?;
    let flags: Vec<String> = recipe.app.cflags.iter().map(|f| expand(f, &paths.home, src, gen)).collect();
    let shoal_flags = cflags(paths)?;
    let mut h = Sha256::new();
    h.update(toolchain_identity(paths, &shoal_flags));
    h.update(serde_json::to_string(&recipe.app).unwrap_or_default());
    if let Some(l) = library {
        h.update(io(&l.archive, fs::read(&l.archive))?);
        h.update(io(&l.native_archive, fs::read(&l.native_archive))?);
    }
    for s in &sources {
        h.update(s.display().to_string());
        h.update(io(s, fs::read(s))?);
    }
    let key = hex(h.finalize());
    let root = paths.cache.join("recipes");
    let dir = root.join(format!("app-{}-{}", recipe.name, &key[..16]));
    let (s_dir, n_dir) = (dir.join("shoal"), dir.join("native"));
    let native = dir.join(format!("{}.native", recipe.name));
    let done = dir.join(".done");
    let names = object_names(&sources);
    let objects: Vec<PathBuf> = names.iter().map(|n| s_dir.join(n)).collect();
    let _lock = lock(&root.join(format!(".app-{}.lock", recipe.name)))?;
    if done.is_file() && native.is_file() && objects.iter().all(|o| o.is_file()) {
        return Ok(BuiltApp { objects, native });
    }
    let log = Log::new(paths, &recipe.name)?;
    log.write(&format!("== application of recipe {} in {}\n", recipe.name, dir.display()));
    remove_stale(&dir, &format!("app-{}-", recipe.name));
    fresh_dir(&dir)?;
    for d in [&s_dir, &n_dir] {
        io(d, fs::create_dir_all(d))?;
    }
    let (jobs, objects, native_objects) = compile_jobs(&recipe.name, &sources, &flags, &shoal_flags, &s_dir, &n_dir);
    run_jobs(jobs, &log)?;
    let mut cmd = Command::new("musl-gcc");
    cmd.arg("-static").arg("-o").arg(&native).args(&native_objects);
    if let Some(l) = library {
        cmd.arg(&l.native_archive);
    }
    cmd.args(&recipe.app.native_libs);
    log.run(&format!("linking the native program of recipe {} (musl-gcc -static)", recipe.name), &mut cmd)?;
    io(&done, fs::write(&done, &key))?;
    Ok(BuiltApp { objects, native })
}

/// Fetches and compiles everything `recipe` needs (library and
/// application, for shoal and natively) without linking an image: what
/// `shoal recipe fetch` does ahead of time.
pub fn prepare(paths: &Paths, recipe: &Recipe) -> Result<()> {
    let library = build_library(paths, recipe)?;
    build_app(paths, recipe, library.as_ref())?;
    Ok(())
}

/// Builds `recipe`: the shoal image at `image` (relinked every time, so
/// it follows the kernel; everything else comes from the cache when up to
/// date) and the native static musl program (in the cache).
pub fn build(paths: &Paths, recipe: &Recipe, image: &Path) -> Result<Built> {
    let library = build_library(paths, recipe)?;
    let app = build_app(paths, recipe, library.as_ref())?;
    let libraries = library.iter().map(|l| UserLibrary { name: l.name.clone(), version: l.version.clone(), path: l.archive.clone() }).collect();
    let spec = BuildSpec::new(image.to_path_buf(), app.objects, libraries);
    link_image(paths, &spec)?;
    Ok(Built { recipe: recipe.clone(), library, image: image.to_path_buf(), native: app.native })
}

/// Writes the library of `recipe` alone into `dir`: `lib<name>.a`, its
/// objects under `obj/`, and `library.json` (name, version, Debian source
/// package and version, flags, objects).
pub fn export_library(paths: &Paths, recipe: &Recipe, dir: &Path) -> Result<BuiltLibrary> {
    let Some(lib) = build_library(paths, recipe)? else {
        return Err(err(format!("recipe {} has no library (it is an application of shoal's own)", recipe.name)));
    };
    let obj_dir = dir.join("obj");
    io(&obj_dir, fs::create_dir_all(&obj_dir))?;
    let archive = dir.join(format!("lib{}.a", lib.name));
    io(&archive, fs::copy(&lib.archive, &archive))?;
    let mut objects = Vec::new();
    for o in &lib.objects {
        let to = obj_dir.join(o.file_name().unwrap_or_default());
        io(&to, fs::copy(o, &to))?;
        objects.push(to);
    }
    let out = BuiltLibrary { objects, archive, ..lib.clone() };
    let meta = dir.join("library.json");
    io(&meta, fs::write(&meta, serde_json::to_string_pretty(&out).unwrap_or_default()))?;
    Ok(out)
}

/// How to run `recipe`'s application on `side`: with the benchmark's
/// full-size arguments if `full`, else the tests' small ones. `tmp` is the
/// native side's scratch directory (`{tmp}`); on shoal `{tmp}` is `/tmp`.
/// `{ncpu}` is the host's number of CPUs.
pub fn invocation(paths: &Paths, recipe: &Recipe, side: Side, full: bool, tmp: &Path) -> Invocation {
    let fs_dir = recipe.run.fs.as_ref().map(|f| PathBuf::from(expand(f, &paths.home, None, None)));
    let ncpu = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).to_string();
    let (tmp_s, root_s) = match side {
        Side::Shoal => ("/tmp".to_string(), String::new()),
        Side::Native => (tmp.display().to_string(), fs_dir.as_ref().map(|d| d.display().to_string()).unwrap_or_default()),
    };
    let list = if full { &recipe.run.bench_args } else { &recipe.run.test_args };
    let args = list.iter().map(|a| a.replace("{tmp}", &tmp_s).replace("{root}", &root_s).replace("{ncpu}", &ncpu)).collect();
    Invocation { args, fs: fs_dir, mem: recipe.run.mem.clone() }
}

/// Masks timings in an application's output, so that runs can be
/// compared: every `DIGITS.DIGITSs` word (speedtest1's `0.123s`) becomes
/// `#s`.
pub fn mask_timings(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let mut last = 0;
    while i < b.len() {
        let starts = b[i].is_ascii_digit() && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'.'));
        if starts {
            let mut j = i;
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
            if j < b.len() && b[j] == b'.' {
                let mut k = j + 1;
                while k < b.len() && b[k].is_ascii_digit() {
                    k += 1;
                }
                if k > j + 1 && k < b.len() && b[k] == b's' && (k + 1 == b.len() || !b[k + 1].is_ascii_alphanumeric()) {
                    out.push_str(&text[last..i]);
                    out.push_str("#s");
                    i = k + 1;
                    last = i;
                    continue;
                }
            }
            i = j.max(i + 1);
            continue;
        }
        i += 1;
    }
    out.push_str(&text[last..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_timings_only() {
        assert_eq!(
            mask_timings(" 100 - 50000 INSERTs........   0.123s\nTOTAL...  12.5s\nv3.40.1 1.5x 2.0 3.25sec"),
            " 100 - 50000 INSERTs........   #s\nTOTAL...  #s\nv3.40.1 1.5x 2.0 3.25sec"
        );
    }

    #[test]
    fn versions_and_wildcards() {
        assert_eq!(upstream_of("3.40.1-2+deb12u2"), "3.40.1");
        assert_eq!(upstream_of("1:5.4.4-3"), "5.4.4");
        assert_eq!(upstream_of("10.42"), "10.42");
        assert!(wildcard("*.c", "lapi.c"));
        assert!(wildcard("pcre2_*.c", "pcre2_match.c"));
        assert!(!wildcard("*.c", "lapi.h"));
        assert!(!wildcard("l*.c", "x.c"));
        let names = object_names(&[PathBuf::from("a/x.c"), PathBuf::from("b/x.c"), PathBuf::from("y.c")]);
        assert_eq!(names, vec!["x.o", "x-2.o", "y.o"]);
    }

    #[test]
    fn the_recipes_parse() {
        let home = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
        let paths = Paths { home: home.clone(), cache: std::env::temp_dir() };
        let all = list(&paths).unwrap();
        let names: Vec<&str> = all.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["lua", "lua-fn", "matmul", "nginx", "pcre2-grep", "redis", "sqlite-shell", "sqlite-speedtest1"]);
        let lua = load(&paths, "lua").unwrap();
        let inv = invocation(&paths, &lua, Side::Shoal, false, Path::new("/x"));
        assert_eq!(inv.args[0], "/sort.lua");
        let inv = invocation(&paths, &lua, Side::Native, false, Path::new("/x"));
        assert!(inv.args[0].ends_with("apps/recipes/lua/sort.lua"));
        assert!(load(&paths, "nope").is_err());
        assert!(load(&paths, "../x").is_err());
    }
}
