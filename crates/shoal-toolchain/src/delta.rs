//! The `delta` policy's use of the Δ-versioner: turns the objects of a
//! versioned library's versions into a base object and one delta object
//! per later version (kept next to the workspace, rebuilt when stale).

use crate::workspace::LibrarySpec;
use crate::{Result, ToolchainError};
use std::path::{Path, PathBuf};

/// The objects the `delta` policy links for one versioned library.
#[derive(Clone, Debug)]
pub struct DeltaSet {
    /// Version 1, rewritten (weak definitions, calls through trampolines).
    pub base: PathBuf,
    /// The deltas of versions 2..k, in version order.
    pub deltas: Vec<PathBuf>,
    /// Names `n` for which images need a trampoline `__shoal_tpl_n`.
    pub trampolines: Vec<String>,
}

/// Runs the Δ-versioner over `lib`'s versions into `dir`.
pub fn prepare(lib: &LibrarySpec, dir: &Path) -> Result<DeltaSet> {
    let _ = (lib, dir);
    Err(ToolchainError::Usage("the delta policy is not available yet".into()))
}
