//! Real versions of SQLite for the versioning experiments (Spacer-Δ's): the
//! amalgamations (`sqlite3/sqlite3.c`) bundled by successive releases of the
//! `libsqlite3-sys` crate (docs/design.md "Host facts"). `cargo fetch` puts each crate's
//! source in cargo's registry cache; nothing is committed. Each version is
//! compiled once with `shoal cc -c` into the shoal cache.

use crate::{run, Paths, Result, ToolchainError};
use std::path::{Path, PathBuf};
use std::process::Command;

/// `libsqlite3-sys` releases and the SQLite versions they bundle, oldest
/// first (checked against each crate's `sqlite3.h` when fetched): eight
/// successive releases, each bundling a different SQLite (0.23.1 and 0.24.1
/// re-bundle 3.36.0 and 3.38.0 and are skipped).
pub const VERSIONS: &[(&str, &str)] = &[
    ("0.22.2", "3.35.4"),
    ("0.23.0", "3.36.0"),
    ("0.23.2", "3.37.0"),
    ("0.24.0", "3.38.0"),
    ("0.24.2", "3.38.2"),
    ("0.25.0", "3.39.0"),
    ("0.25.1", "3.39.2"),
    ("0.26.0", "3.41.2"),
];

/// The flags every SQLite version is compiled with: the ones that matter
/// are the same for all versions, so differences come from SQLite itself.
pub const CFLAGS: &[&str] = &["-O2", "-DSQLITE_THREADSAFE=0", "-DSQLITE_OMIT_LOAD_EXTENSION", "-DSQLITE_DEFAULT_MEMSTATUS=0"];

/// Where the compiled objects are kept: one folder per set of compiler
/// flags (shoal's own, [`CFLAGS`] and the versioning flags), so that
/// objects built with other flags by an older shoal are never mixed in.
pub fn object_dir(paths: &Paths) -> Result<PathBuf> {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    let flags = crate::cc::cflags(paths)?;
    for f in flags.iter().map(String::as_str).chain(CFLAGS.iter().copied()).chain(shoal_delta::VERSIONED_CFLAGS.iter().copied()) {
        h.update(f.as_bytes());
        h.update([0]);
    }
    let tag: String = h.finalize().iter().take(6).map(|b| format!("{b:02x}")).collect();
    Ok(paths.cache.join(format!("sqlite-versions/obj-{tag}")))
}

fn cargo_home() -> PathBuf {
    match std::env::var_os("CARGO_HOME") {
        Some(h) => PathBuf::from(h),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cargo"),
    }
}

/// Fetches the `libsqlite3-sys` crate `crate_version` and returns the
/// directory holding its `sqlite3.c` and `sqlite3.h`.
pub fn fetch(paths: &Paths, crate_version: &str) -> Result<PathBuf> {
    let registry = cargo_home().join("registry/src");
    let find = || -> Option<PathBuf> {
        std::fs::read_dir(&registry).ok()?.flatten().find_map(|d| {
            let p = d.path().join(format!("libsqlite3-sys-{crate_version}/sqlite3"));
            p.join("sqlite3.c").is_file().then_some(p)
        })
    };
    if let Some(p) = find() {
        return Ok(p);
    }
    let proj = paths.cache.join("sqlite-versions/fetch").join(crate_version);
    std::fs::create_dir_all(proj.join("src")).map_err(|e| ToolchainError::Io(proj.clone(), e))?;
    let manifest = format!(
        "[package]\nname = \"fetch-sqlite-{}\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\n[dependencies]\nlibsqlite3-sys = {{ version = \"={crate_version}\", features = [\"bundled\"] }}\n\n[workspace]\n",
        crate_version.replace('.', "-")
    );
    std::fs::write(proj.join("Cargo.toml"), manifest).map_err(|e| ToolchainError::Io(proj.clone(), e))?;
    std::fs::write(proj.join("src/lib.rs"), "").map_err(|e| ToolchainError::Io(proj.clone(), e))?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    run(
        &format!("cargo fetch (libsqlite3-sys {crate_version})"),
        Command::new(cargo).arg("fetch").arg("--quiet").arg("--manifest-path").arg(proj.join("Cargo.toml")),
    )?;
    find().ok_or_else(|| ToolchainError::Input(registry, format!("libsqlite3-sys {crate_version} was fetched but has no sqlite3/sqlite3.c")))
}

/// The SQLite version a `sqlite3.h` declares.
pub fn header_version(dir: &Path) -> Result<String> {
    let h = dir.join("sqlite3.h");
    let text = std::fs::read_to_string(&h).map_err(|e| ToolchainError::Io(h.clone(), e))?;
    text.lines()
        .find_map(|l| l.strip_prefix("#define SQLITE_VERSION ").map(|v| v.trim().trim_matches('"').to_string()))
        .ok_or_else(|| ToolchainError::Input(h, "no SQLITE_VERSION in the header".into()))
}

/// One compiled version.
#[derive(Clone, Debug)]
pub struct SqliteVersion {
    /// SQLite version, e.g. `3.35.4`.
    pub version: String,
    /// The object compiled with `shoal cc -c`.
    pub object: PathBuf,
    /// The directory with its `sqlite3.c` and `sqlite3.h`.
    pub source: PathBuf,
}

/// Fetches and compiles every version of [`VERSIONS`] (cached), two
/// compilations at a time.
pub fn prepare_all(paths: &Paths, shoal: &Path) -> Result<Vec<SqliteVersion>> {
    let mut out = Vec::new();
    let mut jobs = Vec::new();
    for (crate_version, expected) in VERSIONS {
        let src = fetch(paths, crate_version)?;
        let version = header_version(&src)?;
        if version != *expected {
            return Err(ToolchainError::Input(src, format!("bundles SQLite {version}, expected {expected}")));
        }
        let dir = object_dir(paths)?;
        std::fs::create_dir_all(&dir).map_err(|e| ToolchainError::Io(dir.clone(), e))?;
        let object = dir.join(format!("sqlite-{version}.o"));
        if !object.is_file() {
            jobs.push((src.clone(), object.clone()));
        }
        out.push(SqliteVersion { version, object, source: src });
    }
    for pair in jobs.chunks(2) {
        let mut children = Vec::new();
        for (src, object) in pair {
            let tmp = object.with_extension("o.tmp");
            // The library is versioned: compiled so that a change stays in
            // the functions it touches (`shoal cc --versioned`).
            let child = Command::new(shoal)
                .arg("cc")
                .arg("--versioned")
                .args(CFLAGS)
                .arg("-c")
                .arg(src.join("sqlite3.c"))
                .arg("-o")
                .arg(&tmp)
                .spawn()
                .map_err(|e| ToolchainError::Spawn("shoal cc".into(), e))?;
            children.push((child, tmp, object.clone()));
        }
        for (mut child, tmp, object) in children {
            let status = child.wait().map_err(|e| ToolchainError::Spawn("shoal cc".into(), e))?;
            if !status.success() {
                return Err(ToolchainError::Failed(format!("shoal cc {}", object.display()), format!("{status}")));
            }
            std::fs::rename(&tmp, &object).map_err(|e| ToolchainError::Io(object.clone(), e))?;
        }
    }
    Ok(out)
}

/// speedtest1 (from Debian's sqlite3 source, via the recipe) compiled once
/// against the oldest version's header, so every image has the same
/// application object.
pub fn speedtest1_object(paths: &Paths, shoal: &Path, oldest: &SqliteVersion) -> Result<PathBuf> {
    let obj = object_dir(paths)?.join("speedtest1.o");
    if obj.is_file() {
        return Ok(obj);
    }
    let recipe = crate::recipe::load(paths, "sqlite-speedtest1")?;
    let lib = recipe.library.as_ref().ok_or_else(|| ToolchainError::Usage("the sqlite-speedtest1 recipe has no library".into()))?;
    let src = crate::recipe::fetch(paths, "sqlite-speedtest1", lib)?;
    let c = src.dir.join("test/speedtest1.c");
    let tmp = obj.with_extension("o.tmp");
    let st = Command::new(shoal)
        .arg("cc")
        .args(CFLAGS)
        .arg("-I")
        .arg(&oldest.source)
        .arg("-c")
        .arg(&c)
        .arg("-o")
        .arg(&tmp)
        .status()
        .map_err(|e| ToolchainError::Spawn("shoal cc".into(), e))?;
    if !st.success() {
        return Err(ToolchainError::Failed(format!("shoal cc {}", c.display()), format!("{st}")));
    }
    std::fs::rename(&tmp, &obj).map_err(|e| ToolchainError::Io(obj.clone(), e))?;
    Ok(obj)
}

/// Writes the workspace file of `policy` for the versions and builds it;
/// returns the images, oldest version first.
/// `app` is the application object every image links (speedtest1, or an
/// idle program for the memory experiment).
pub fn build_policy(paths: &Paths, dir: &Path, policy: &str, versions: &[SqliteVersion], app: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|e| ToolchainError::Io(dir.to_path_buf(), e))?;
    let mut ws = format!("policy = \"{policy}\"\nseed = 7\n\n[[library]]\nname = \"sqlite\"\nversions = [\n");
    for v in versions {
        ws.push_str(&format!("  {{ version = \"{}\", object = \"{}\" }},\n", v.version, v.object.display()));
    }
    ws.push_str("]\n");
    let stem = app.file_stem().map(|s| s.to_string_lossy().to_string()).unwrap_or_else(|| "app".into());
    for v in versions {
        ws.push_str(&format!("\n[[image]]\noutput = \"{stem}-{0}\"\nobjects = [\"{1}\"]\nlibraries = [\"sqlite@{0}\"]\n", v.version, app.display()));
    }
    let file = dir.join("workspace.toml");
    std::fs::write(&file, ws).map_err(|e| ToolchainError::Io(file.clone(), e))?;
    crate::workspace::build_workspace(paths, &file)
}

/// [`build_policy`] for each of `policies`, each into `root/POLICY`, as
/// many at once as the machine has CPUs: one policy's build is a chain of
/// single-threaded compiler and linker runs, so one at a time leaves the
/// other CPUs idle (`shoal bench pages` and `size` build 7 policies × 8
/// images). The results are in the order of `policies`; `started(p)` is
/// called as policy `p`'s build begins (for progress lines).
pub fn build_policies(
    paths: &Paths,
    root: &Path,
    policies: &[&str],
    versions: &[SqliteVersion],
    app: &Path,
    started: &(dyn Fn(&str) + Sync),
) -> Vec<Result<Vec<PathBuf>>> {
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get()).min(policies.len()).max(1);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<std::sync::Mutex<Option<Result<Vec<PathBuf>>>>> = policies.iter().map(|_| std::sync::Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(p) = policies.get(i) else { break };
                started(p);
                let r = build_policy(paths, &root.join(p), p, versions, app);
                *results[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
            });
        }
    });
    results
        .into_iter()
        .zip(policies)
        .map(|(r, p)| {
            r.into_inner()
                .unwrap_or_else(|e| e.into_inner())
                .unwrap_or_else(|| Err(ToolchainError::Failed(format!("building policy {p}"), "its build thread ended without a result".into())))
        })
        .collect()
}
