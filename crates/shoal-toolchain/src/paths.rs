//! Where things are: shoal's source tree and its cache.
//!
//! The source tree (`SHOAL_HOME`, by default the repository this binary was
//! built from) holds the kernel sources and the libc overlay. The cache
//! (`SHOAL_CACHE`, by default `~/.cache/shoal`) holds everything fetched or
//! built from fetched sources: Debian's musl source and the libc sysroot.
//! Nothing in the cache is committed.

use crate::{Result, ToolchainError};
use std::path::PathBuf;

/// The directories shoal works with.
#[derive(Clone, Debug)]
pub struct Paths {
    /// shoal's source tree (contains `kernel/` and `libc/`).
    pub home: PathBuf,
    /// The cache of fetched and built things.
    pub cache: PathBuf,
}

impl Paths {
    /// Finds the source tree and the cache from the environment.
    pub fn discover() -> Result<Paths> {
        let home = match std::env::var_os("SHOAL_HOME") {
            Some(h) => PathBuf::from(h),
            None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.."),
        };
        if !home.join("kernel/Cargo.toml").is_file() || !home.join("libc/build-musl.sh").is_file() {
            return Err(ToolchainError::NoHome(home));
        }
        let home = home.canonicalize().map_err(|e| ToolchainError::Io(home.clone(), e))?;
        let cache = match std::env::var_os("SHOAL_CACHE") {
            Some(c) => PathBuf::from(c),
            None => match std::env::var_os("HOME") {
                Some(h) => PathBuf::from(h).join(".cache/shoal"),
                None => home.join("build/cache"),
            },
        };
        // Absolute once, here: cached objects are named in workspace files,
        // whose relative paths are resolved against the workspace file's own
        // directory, so a relative SHOAL_CACHE would be resolved twice.
        let cache = std::path::absolute(&cache).map_err(|e| ToolchainError::Io(cache.clone(), e))?;
        Ok(Paths { home, cache })
    }

    /// The libc sysroot (`include/`, `lib/`).
    pub fn sysroot(&self) -> PathBuf {
        self.cache.join("sysroot")
    }

    /// The kernel workspace.
    pub fn kernel_dir(&self) -> PathBuf {
        self.home.join("kernel")
    }

    /// The kernel staticlib as cargo builds it.
    pub fn kernel_cargo_lib(&self) -> PathBuf {
        self.home.join("kernel/target/release/libshoal_kernel.a")
    }

    /// The kernel staticlib images link: cargo's, with its GOT references
    /// made PC-relative (built by [`crate::setup::ensure_kernel`]).
    pub fn kernel_lib(&self) -> PathBuf {
        self.home.join("kernel/target/release/libshoal_kernel.linkable.a")
    }
}
