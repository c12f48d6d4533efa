//! shoal's toolchain: from C sources to a shoal image (docs/design.md "The image").
//!
//! - [`paths`]: where shoal's sources (kernel, libc overlay) and its cache
//!   (musl sources, the libc sysroot) live;
//! - [`setup`]: builds shoal's libc (musl 1.2.3 whose syscalls are function
//!   calls) and the kernel staticlib, each only when out of date;
//! - [`layout`]: the libraries of an image and the linker script that gives
//!   each of them its own page-aligned code, rodata, data and bss regions;
//! - [`link`]: `shoal build`: links objects and libraries into an image and
//!   writes its manifest;
//! - [`cc`]: `shoal cc`, a drop-in C compiler whose link step makes images;
//! - [`workspace`]: sets of images built together under a layout policy
//!   (`aligned`, `delta`, `aslr`, …), with [`delta`] for the Δ-versioner;
//! - [`recipe`]: `shoal recipe`, real programs (SQLite, Lua, PCRE2, …)
//!   built from Debian source packages, for shoal and natively;
//! - [`pages`]: `shoal pages`, the distinct frames a set of images needs.
//!
//! Host-side code; it runs the system's `gcc` and `ld` (binutils) and, for
//! the kernel, `cargo`.
#![deny(missing_docs)]

pub mod cc;
pub mod delta;
pub mod layout;
pub mod link;
pub mod pages;
pub mod paths;
pub mod recipe;
pub mod setup;
pub mod sqlite_versions;
pub mod tables;
pub mod workspace;

pub use paths::Paths;

/// Why a toolchain step failed.
#[derive(Debug, thiserror::Error)]
pub enum ToolchainError {
    /// shoal's own source tree (kernel/, libc/) was not found.
    #[error("cannot find shoal's source tree (looked in {0}); set SHOAL_HOME to the repository")]
    NoHome(std::path::PathBuf),
    /// A file could not be read or written.
    #[error("cannot access {0}: {1}")]
    Io(std::path::PathBuf, std::io::Error),
    /// An external program could not be started.
    #[error("cannot run {0}: {1}")]
    Spawn(String, std::io::Error),
    /// An external program failed.
    #[error("{0} failed ({1})")]
    Failed(String, String),
    /// The command line of `shoal cc` or `shoal build` is not usable.
    #[error("{0}")]
    Usage(String),
    /// An input file is missing or of the wrong kind.
    #[error("{0}: {1}")]
    Input(std::path::PathBuf, String),
    /// A recipe (`shoal recipe`) is unknown or cannot be built as written.
    #[error("{0}")]
    Recipe(String),
    /// The Δ-versioner refused its input.
    #[error(transparent)]
    Delta(#[from] shoal_delta::DeltaError),
    /// The manifest could not be written.
    #[error(transparent)]
    Manifest(#[from] shoal_manifest::ManifestError),
}

/// Result of toolchain operations.
pub type Result<T> = std::result::Result<T, ToolchainError>;

/// Runs `cmd`, turning a spawn failure or a non-zero exit into an error
/// that names `what`. Output is inherited (compiler diagnostics reach the
/// user).
pub(crate) fn run(what: &str, cmd: &mut std::process::Command) -> Result<()> {
    let status = cmd.status().map_err(|e| ToolchainError::Spawn(what.to_string(), e))?;
    if !status.success() {
        let why = match status.code() {
            Some(c) => format!("exit status {c}"),
            None => "killed by a signal".to_string(),
        };
        return Err(ToolchainError::Failed(what.to_string(), why));
    }
    Ok(())
}
