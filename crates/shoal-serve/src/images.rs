//! Uploaded images: `POST /images` stores an image sent as the request
//! body under `--state/images/`, named by its SHA-256, and a deploy can
//! then name it as `"image": "sha256:HEX"` instead of a path on the
//! gateway's machine (the way a registry's digest names an image).
//!
//! The body is streamed to a scratch file (never held in memory whole),
//! hashed on the way, checked like a deployed path (a shoal image the
//! loader accepts, or an ELF executable for the native backends) and only
//! then moved into the state directory with one rename: a corrupt,
//! truncated or oversized upload leaves nothing there. An image that a
//! removed or updated function no longer uses, and no other function uses,
//! is deleted ([`ImageStore::forget_unused`]); so is, at the gateway's
//! start and after each removal or update, any upload no function uses
//! (at a removal or update only once it is older than [`UPLOAD_GRACE`], so
//! an upload is not taken away between its `POST` and its deploy). All
//! uploads together, stored and streaming, stay within a quota
//! (`--upload-quota`): before, each was capped but not their sum.
//!
//! Runtime functions' directories (`STATE/runtimes/SHA256/`, the
//! bootstrap and the handler) go the same way: the one a removed or
//! updated function used is deleted once no function uses it and no
//! deploy in progress holds it ([`ImageStore::hold_runtime`]); at start,
//! every one no function uses.

use super::error::ApiError;
use super::spec::Function;
use axum::body::Body;
use http_body_util::BodyExt;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::AsyncWriteExt;

/// The largest image an upload may carry (a shoal image of SQLite with its
/// kernel is about 3 MiB; a native build with a big runtime stays far below).
pub const MAX_IMAGE: u64 = 512 << 20;

/// How old an upload no function uses must be before a removal or update
/// of another function deletes it.
pub const UPLOAD_GRACE: std::time::Duration = std::time::Duration::from_secs(600);

/// The prefix that names an uploaded image in a deploy request.
pub const REF_PREFIX: &str = "sha256:";

/// What kind of program an uploaded image is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A shoal image (spt, hvt).
    Shoal,
    /// A native ELF executable (process, runc, runsc; a static Linux
    /// executable also spt and hvt, as the instance image built around it).
    Native,
}

/// The uploaded images under `STATE/images`.
pub struct ImageStore {
    dir: PathBuf,
    scratch: PathBuf,
    /// The most bytes all uploads may hold.
    quota: u64,
    /// Bytes of the stored uploads (recounted after each change).
    stored: AtomicU64,
    /// Bytes of the uploads streaming now.
    inflight: AtomicU64,
    /// Runtime directories that deploys in progress use, with how many:
    /// not deleted while held (a deploy of the same handler as a function
    /// being removed reuses its directory before it is saved).
    held: Arc<Mutex<HashMap<PathBuf, usize>>>,
}

/// A deploy's hold on its runtime directory ([`ImageStore::hold_runtime`]),
/// given back when dropped (after the deploy is saved, or failed).
pub struct RuntimeHold {
    held: Arc<Mutex<HashMap<PathBuf, usize>>>,
    dir: Option<PathBuf>,
}

impl Drop for RuntimeHold {
    fn drop(&mut self) {
        let Some(d) = self.dir.take() else { return };
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = held.get_mut(&d) {
            *n -= 1;
            if *n == 0 {
                held.remove(&d);
            }
        }
    }
}

/// An upload's share of the quota while it streams; given back when
/// dropped (the stored file, if any, is counted in `stored` by then).
struct Reservation<'a> {
    store: &'a ImageStore,
    bytes: u64,
}

impl Reservation<'_> {
    /// Adds `n` bytes, or 413 if all uploads would exceed the quota.
    fn grow(&mut self, n: u64) -> Result<(), ApiError> {
        let s = self.store;
        let before = s.inflight.fetch_add(n, Ordering::SeqCst);
        self.bytes += n;
        if s.stored.load(Ordering::SeqCst) + before + n > s.quota {
            return Err(ApiError::TooLarge(format!(
                "the uploads would exceed the gateway's quota of {} MiB ({} MiB stored): remove functions whose images are uploads, \
                 or start the gateway with a larger --upload-quota",
                s.quota >> 20,
                s.stored.load(Ordering::SeqCst) >> 20
            )));
        }
        Ok(())
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.store.inflight.fetch_sub(self.bytes, Ordering::SeqCst);
    }
}

/// An image stored by [`ImageStore::upload`].
#[derive(Debug, serde::Serialize)]
pub struct Stored {
    /// `sha256:HEX`, the name a deploy gives as its image.
    pub image: String,
    /// Where the gateway keeps it.
    pub path: PathBuf,
    /// Its size in bytes.
    pub size: u64,
    /// Which backends can run it.
    pub kind: Kind,
    /// Whether this upload added it (false: it was already stored).
    pub created: bool,
}

fn internal(what: &str, e: impl std::fmt::Display) -> ApiError {
    ApiError::Internal(format!("{what}: {e}"))
}

/// Whether `s` is 64 lowercase hexadecimal digits.
fn is_digest(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// What `path` holds: a shoal image, a native ELF executable, or neither
/// (422 with the loader's reason).
pub fn kind_of(path: &Path) -> Result<Kind, ApiError> {
    let mut head = [0u8; 4];
    let elf = std::fs::File::open(path).and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head)).is_ok() && head == *b"\x7fELF";
    if !elf {
        return Err(ApiError::Unprocessable("the uploaded file is neither a shoal image nor an ELF executable".into()));
    }
    // Any ELF file the loader refuses is taken for a native build; a
    // deploy on spt or hvt checks it again and says why it is unusable.
    Ok(if shoal_loader::Image::open(path).is_ok() { Kind::Shoal } else { Kind::Native })
}

impl ImageStore {
    /// The store under `state` (its `images` directory is made on the first
    /// upload); uploads are spooled in `scratch`.
    /// All uploads together may hold `quota` bytes.
    pub fn new(state: &Path, scratch: &Path, quota: u64) -> ImageStore {
        let s = ImageStore {
            dir: state.join("images"),
            scratch: scratch.to_path_buf(),
            quota,
            stored: AtomicU64::new(0),
            inflight: AtomicU64::new(0),
            held: Arc::default(),
        };
        s.recount();
        s
    }

    /// Counts the stored uploads' bytes again.
    fn recount(&self) {
        let total =
            std::fs::read_dir(&self.dir).map(|rd| rd.flatten().filter_map(|e| e.metadata().ok()).filter(|m| m.is_file()).map(|m| m.len()).sum()).unwrap_or(0);
        self.stored.store(total, Ordering::SeqCst);
    }

    /// Deletes every upload none of `functions` uses that is older than
    /// `grace` (and scratch copies left by a crash); returns how many.
    pub fn collect_garbage(&self, functions: &[Function], grace: std::time::Duration) -> usize {
        self.remove_unused_runtimes(functions, None, grace);
        let Ok(rd) = std::fs::read_dir(&self.dir) else { return 0 };
        let now = std::time::SystemTime::now();
        let mut n = 0;
        for e in rd.flatten() {
            let p = e.path();
            let name = e.file_name();
            let name = name.to_string_lossy();
            let upload = is_digest(&name) || (name.starts_with('.') && name.ends_with(".tmp"));
            if !upload || functions.iter().any(|f| f.image == p || f.executable.as_ref() == Some(&p)) {
                continue;
            }
            let age = e.metadata().and_then(|m| m.modified()).ok().and_then(|m| now.duration_since(m).ok()).unwrap_or_default();
            if age >= grace && std::fs::remove_file(&p).is_ok() {
                n += 1;
            }
        }
        self.recount();
        n
    }

    /// Holds `f`'s runtime directory (if it has one) until the hold is
    /// dropped: a removal meanwhile does not delete it. 409 if it was
    /// deleted between the deploy's check and this hold (the deploy can be
    /// sent again).
    pub fn hold_runtime(&self, f: &Function) -> Result<RuntimeHold, ApiError> {
        let Some(d) = f.runtime_dir.clone() else { return Ok(RuntimeHold { held: self.held.clone(), dir: None }) };
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if !d.is_dir() {
            return Err(ApiError::Conflict(format!("the runtime directory of {} was deleted by a removal while it was deployed; deploy it again", f.name)));
        }
        *held.entry(d.clone()).or_default() += 1;
        Ok(RuntimeHold { held: self.held.clone(), dir: Some(d) })
    }

    /// Deletes the runtime directories none of `functions` uses and no
    /// deploy holds: `only` that one, or (None) every one under
    /// [`ImageStore::runtimes_dir`] older than `grace` (a deploy makes its
    /// directory before it holds it), with what a failed deploy left
    /// (`.HEX.tmp`). Returns how many.
    fn remove_unused_runtimes(&self, functions: &[Function], only: Option<&Path>, grace: std::time::Duration) -> usize {
        let root = self.runtimes_dir();
        let dirs: Vec<PathBuf> = match only {
            Some(d) => vec![d.to_path_buf()],
            None => std::fs::read_dir(&root).map(|rd| rd.flatten().map(|e| e.path()).collect()).unwrap_or_default(),
        };
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let mut n = 0;
        for d in dirs {
            // Only what runtime_dir makes: a digest (or its scratch name)
            // directly under the runtimes directory.
            let name = d.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let ours =
                d.parent() == Some(root.as_path()) && (is_digest(&name) || name.strip_prefix('.').and_then(|n| n.strip_suffix(".tmp")).is_some_and(is_digest));
            if !ours || held.contains_key(&d) || functions.iter().any(|f| f.runtime_dir.as_ref() == Some(&d)) {
                continue;
            }
            let age = || std::fs::metadata(&d).and_then(|m| m.modified()).ok().and_then(|m| m.elapsed().ok()).unwrap_or_default();
            if only.is_none() && age() < grace {
                continue;
            }
            if std::fs::remove_dir_all(&d).is_ok() {
                n += 1;
            }
        }
        n
    }

    /// Where runtime functions' directories (bootstrap + handler) are
    /// kept: `runtimes` beside `images` in the state directory.
    pub fn runtimes_dir(&self) -> PathBuf {
        self.dir.with_file_name("runtimes")
    }

    /// The stored file a deploy's `sha256:HEX` names; 422 if the reference
    /// is malformed or nothing was uploaded under it.
    pub fn resolve(&self, reference: &str) -> Result<PathBuf, ApiError> {
        let hex = reference.strip_prefix(REF_PREFIX).unwrap_or(reference);
        if !is_digest(hex) {
            return Err(ApiError::Unprocessable(format!("image {reference:?}: an uploaded image is named sha256: and 64 lowercase hex digits")));
        }
        let p = self.dir.join(hex);
        if !p.is_file() {
            return Err(ApiError::Unprocessable(format!("image {reference}: no image with that digest was uploaded (POST /images first)")));
        }
        Ok(p)
    }

    /// Streams `body` into the store: at most [`MAX_IMAGE`] bytes, hashed,
    /// checked, then renamed into place (mode 0700: native images are run
    /// as programs).
    pub async fn upload(&self, body: Body) -> Result<Stored, ApiError> {
        let spool =
            tempfile::Builder::new().prefix("upload-").tempfile_in(&self.scratch).map_err(|e| internal("cannot make a scratch file for the upload", e))?;
        let mut file = tokio::fs::File::from_std(spool.reopen().map_err(|e| internal("cannot open the scratch file", e))?);
        let mut hash = Sha256::new();
        let mut size = 0u64;
        let mut body = body;
        let mut share = Reservation { store: self, bytes: 0 };
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| ApiError::BadRequest(format!("the upload was cut off: {e}")))?;
            let Ok(chunk) = frame.into_data() else { continue };
            size += chunk.len() as u64;
            if size > MAX_IMAGE {
                return Err(ApiError::TooLarge(format!("the image is larger than the limit of {} MiB", MAX_IMAGE >> 20)));
            }
            share.grow(chunk.len() as u64)?;
            hash.update(&chunk);
            file.write_all(&chunk).await.map_err(|e| internal("cannot write the scratch file", e))?;
        }
        if size == 0 {
            return Err(ApiError::BadRequest("the upload is empty: send the image as the request body".into()));
        }
        file.sync_all().await.map_err(|e| internal("cannot write the scratch file", e))?;
        drop(file);
        let hex: String = hash.finalize().iter().map(|b| format!("{b:02x}")).collect();
        let dir = self.dir.clone();
        let stored = tokio::task::spawn_blocking(move || -> Result<Stored, ApiError> {
            let kind = kind_of(spool.path())?;
            let path = dir.join(&hex);
            let image = format!("{REF_PREFIX}{hex}");
            if path.is_file() {
                // Uploaded again: young again, so an update elsewhere does
                // not collect it before its deploy (see UPLOAD_GRACE).
                let _ = std::fs::File::options().write(true).open(&path).and_then(|f| f.set_modified(std::time::SystemTime::now()));
                return Ok(Stored { image, path, size, kind, created: false });
            }
            make_private_dir(&dir)?;
            // Across file systems a rename fails: copy into the store's own
            // directory first, then rename there.
            let tmp = dir.join(format!(".{hex}.tmp"));
            std::fs::copy(spool.path(), &tmp).map_err(|e| internal("cannot copy the image into the state directory", e))?;
            let done = set_mode(&tmp, 0o700).and_then(|_| std::fs::File::open(&tmp)?.sync_all()).and_then(|_| std::fs::rename(&tmp, &path));
            if let Err(e) = done {
                let _ = std::fs::remove_file(&tmp);
                return Err(internal("cannot store the image", e));
            }
            let _ = std::fs::File::open(&dir).and_then(|d| d.sync_all());
            Ok(Stored { image, path, size, kind, created: true })
        })
        .await
        .map_err(|e| internal("the upload failed", e))?;
        // The stored file counts from now on (before the reservation goes).
        self.recount();
        drop(share);
        stored
    }

    /// Deletes the stored image `old` used, unless it is still the image
    /// of one of `now` (the functions after a removal or an update).
    /// Other uploads no function uses go too once older than [`UPLOAD_GRACE`].
    pub fn forget_unused(&self, old: &Function, now: &[Function]) {
        if old.image.parent() == Some(self.dir.as_path()) && !now.iter().any(|f| f.image == old.image) {
            let _ = std::fs::remove_file(&old.image);
        }
        if let Some(d) = &old.runtime_dir {
            self.remove_unused_runtimes(now, Some(d), std::time::Duration::ZERO);
        }
        self.collect_garbage(now, UPLOAD_GRACE);
    }
}

fn set_mode(p: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
}

fn make_private_dir(dir: &Path) -> Result<(), ApiError> {
    use std::os::unix::fs::DirBuilderExt;
    if !dir.is_dir() {
        std::fs::DirBuilder::new().mode(0o700).create(dir).map_err(|e| internal("cannot make the images directory", e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_are_64_lowercase_hex_digits() {
        assert!(is_digest(&"a".repeat(64)));
        assert!(is_digest(&"0123456789abcdef".repeat(4)));
        assert!(!is_digest(&"A".repeat(64)));
        assert!(!is_digest(&"a".repeat(63)));
        assert!(!is_digest(&format!("{}/", "a".repeat(63))));
        assert!(!is_digest("../../etc/passwd"));
    }

    #[test]
    fn a_malformed_or_unknown_reference_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let s = ImageStore::new(d.path(), d.path(), 2 << 30);
        assert!(matches!(s.resolve("sha256:../x"), Err(ApiError::Unprocessable(_))));
        assert!(matches!(s.resolve(&format!("sha256:{}", "b".repeat(64))), Err(ApiError::Unprocessable(_))));
        assert!(!d.path().join("images").exists());
    }
}
