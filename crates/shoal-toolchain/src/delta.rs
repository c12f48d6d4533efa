//! The `delta` policy's use of the Δ-versioner (the `shoal-delta` crate):
//! turns the objects of a versioned library's versions into a base object
//! and one delta object per later version, kept next to the workspace.
//! The Δ-versioner is deterministic and fast (SQLite's 8 versions take a
//! fraction of a second), so it simply runs on every workspace build.

use crate::workspace::LibrarySpec;
use crate::{Result, ToolchainError};
use std::path::Path;

pub use shoal_delta::DeltaSet;

/// Runs the Δ-versioner over `lib`'s versions into `dir`.
pub fn prepare(lib: &LibrarySpec, dir: &Path) -> Result<DeltaSet> {
    std::fs::create_dir_all(dir).map_err(|e| ToolchainError::Io(dir.to_path_buf(), e))?;
    let inputs: Vec<(String, std::path::PathBuf)> = lib.versions.iter().map(|v| (v.version.clone(), v.object.clone())).collect();
    let opts = shoal_delta::DeltaOptions { namespace: Some(lib.name.replace('-', "_")) };
    Ok(shoal_delta::make_deltas_with(&inputs, dir, &opts)?)
}
