//! Who may use the gateway: the management API answers only requests that
//! carry the gateway's token (`Authorization: Bearer TOKEN`), and the
//! operator's policy decides which backends and host paths a deploy may
//! name.
//!
//! The token is made at the gateway's first start from the kernel's
//! random source and kept in `STATE/token` (mode 0600, in the 0700 state
//! directory), so it survives restarts and `shoal fn` on the same machine
//! and account reads it there; a client elsewhere is given it by hand
//! (`--token`, `SHOAL_TOKEN`). Before, any local user (and any function
//! sharing the host's network) could deploy a `process` function that ran
//! as the gateway's user.

use super::error::ApiError;
use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::Response;
use std::io::{Read, Write};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

/// The token file's name in the state directory.
pub const TOKEN_FILE: &str = "token";

/// Random bytes in a token (written as 64 hex digits).
const TOKEN_BYTES: usize = 32;

/// Why the token cannot be made or read.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The file could not be read, made or written.
    #[error("cannot {0} the token file {1}: {2}")]
    Io(&'static str, PathBuf, std::io::Error),
    /// Others may read it, or it is not a regular file of this user.
    #[error("the token file {0} is {1}: delete it (a new token is made at the next start) or make it a file of this user with mode 0600")]
    Unsafe(PathBuf, String),
    /// It holds something else than 64 hex digits.
    #[error("the token file {0} does not hold a token (64 hex digits): delete it and a new one is made at the next start")]
    Malformed(PathBuf),
    /// The kernel's random source failed.
    #[error("cannot read random bytes for the token: {0}")]
    Random(std::io::Error),
}

/// Fills `buf` from the kernel's random source (`getrandom(2)`, blocking
/// only until the pool is initialised at boot).
fn getrandom(buf: &mut [u8]) -> std::io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        // SAFETY: getrandom writes at most `len - done` bytes into the
        // rest of `buf`, which is valid for writes of that length.
        let n = unsafe { libc::getrandom(buf[done..].as_mut_ptr().cast(), buf.len() - done, 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        done += n as usize;
    }
    Ok(())
}

fn is_token(s: &str) -> bool {
    s.len() == TOKEN_BYTES * 2 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The gateway's token: read from `STATE/token`, or made and written
/// there (mode 0600, created exclusively) if there is none yet.
pub fn load_or_create(state: &Path) -> Result<String, TokenError> {
    let path = state.join(TOKEN_FILE);
    if let Some(t) = read_checked(&path)? {
        return Ok(t);
    }
    let mut raw = [0u8; TOKEN_BYTES];
    getrandom(&mut raw).map_err(TokenError::Random)?;
    let token: String = raw.iter().map(|b| format!("{b:02x}")).collect();
    // A private temporary name, then a link to the final one: the file is
    // never seen half written, and a token made at the same moment by
    // another gateway on this state directory wins (link fails: EEXIST).
    let tmp = state.join(format!(".token.{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let write = || -> std::io::Result<()> {
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).custom_flags(libc::O_NOFOLLOW).open(&tmp)?;
        f.write_all(token.as_bytes())?;
        f.write_all(b"\n")?;
        f.sync_all()?;
        std::fs::hard_link(&tmp, &path)
    };
    let r = write();
    let _ = std::fs::remove_file(&tmp);
    match r {
        Ok(()) => Ok(token),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => read_checked(&path)?.ok_or(TokenError::Malformed(path)),
        Err(e) => Err(TokenError::Io("write", path, e)),
    }
}

/// The token in `path`, after checking that only its owner, this user,
/// can read it; `None` if there is no such file.
fn read_checked(path: &Path) -> Result<Option<String>, TokenError> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let mut f = match std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(TokenError::Io("read", path.into(), e)),
    };
    let m = f.metadata().map_err(|e| TokenError::Io("read", path.into(), e))?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if !m.is_file() {
        return Err(TokenError::Unsafe(path.into(), "not a regular file".into()));
    }
    if m.uid() != me {
        return Err(TokenError::Unsafe(path.into(), format!("owned by uid {}, not this user (uid {me})", m.uid())));
    }
    if m.mode() & 0o077 != 0 {
        return Err(TokenError::Unsafe(path.into(), format!("readable or writable by others (mode {:o})", m.mode() & 0o777)));
    }
    let mut s = String::new();
    Read::by_ref(&mut f).take(256).read_to_string(&mut s).map_err(|e| TokenError::Io("read", path.into(), e))?;
    let t = s.trim();
    if !is_token(t) {
        return Err(TokenError::Malformed(path.into()));
    }
    Ok(Some(t.to_string()))
}

/// The token a client on this machine finds in the gateway's state
/// directory, if it may read it (`shoal fn`).
pub fn read_token(state: &Path) -> Option<String> {
    let s = std::fs::read_to_string(state.join(TOKEN_FILE)).ok()?;
    let t = s.trim();
    is_token(t).then(|| t.to_string())
}

/// Whether `a` and `b` are equal, in a time that depends only on their
/// lengths (the token's length is public: 64), so that a client cannot
/// find the token byte by byte from answer times.
pub fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// Whether `req` carries the token.
fn authorized(token: &str, req: &Request) -> bool {
    let Some(v) = req.headers().get(header::AUTHORIZATION) else { return false };
    let v = v.as_bytes();
    // The scheme is case-insensitive (RFC 9110 §11.1).
    if v.len() < 7 || !v[..7].eq_ignore_ascii_case(b"bearer ") {
        return false;
    }
    let given = v[7..].trim_ascii();
    same(given, token.as_bytes())
}

/// What the authentication layer needs.
pub struct Guard {
    /// The token.
    pub token: String,
    /// Whether `/fn/NAME` invocations need it too (`--auth-invoke`).
    pub invocations: bool,
}

/// The middleware: every request but an invocation (unless
/// `--auth-invoke`) must carry the token; others are answered 401.
pub async fn require_token(State(g): State<Arc<Guard>>, req: Request, next: Next) -> Response {
    let invocation = req.uri().path().starts_with("/fn/");
    if (invocation && !g.invocations) || authorized(&g.token, &req) {
        return next.run(req).await;
    }
    let mut r = axum::response::IntoResponse::into_response(ApiError::Unauthorized(
        "this request needs the gateway's token: send `Authorization: Bearer TOKEN` (the token is the file `token` in the gateway's state directory; \
         `shoal fn` reads it there on the same machine, or takes --token or SHOAL_TOKEN)"
            .into(),
    ));
    r.headers_mut().insert(header::WWW_AUTHENTICATE, axum::http::HeaderValue::from_static("Bearer"));
    r
}

/// What a deploy may name: the operator's choices at the gateway's start.
#[derive(Clone, Debug, Default)]
pub struct Policy {
    /// Whether the `process` backend (no sandbox: the program runs as the
    /// gateway's user) may be deployed (`--allow-process`).
    pub allow_process: bool,
    /// Directories (canonical) beneath which a deploy's `image` and `fs`
    /// paths must lie (`--allow-path`).
    pub allowed: Vec<PathBuf>,
    /// The uploaded images (always allowed as images).
    pub images: PathBuf,
}

/// Why a `--allow-path` cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("--allow-path {0}: {1}")]
pub struct PolicyError(PathBuf, std::io::Error);

impl Policy {
    /// The policy from the command line: each allowed directory resolved
    /// now (it must exist), so later checks compare canonical paths.
    pub fn new(allow_process: bool, allow_paths: &[PathBuf], images: PathBuf) -> Result<Policy, PolicyError> {
        let mut allowed = Vec::new();
        for p in allow_paths {
            let c = p.canonicalize().map_err(|e| PolicyError(p.clone(), e))?;
            if !c.is_dir() {
                return Err(PolicyError(p.clone(), std::io::Error::other("not a directory")));
            }
            allowed.push(c);
        }
        Ok(Policy { allow_process, allowed, images })
    }

    /// 403 unless `backend` may be deployed.
    pub fn check_backend(&self, backend: super::spec::Backend) -> Result<(), ApiError> {
        if backend == super::spec::Backend::Process && !self.allow_process {
            return Err(ApiError::Forbidden(
                "the process backend is not enabled on this gateway: it runs the program unsandboxed as the gateway's user \
                 (a comparison backend); start `shoal serve` with --allow-process to enable it"
                    .into(),
            ));
        }
        Ok(())
    }

    /// 403 unless `path` (a deploy's `what`: "image" or "fs") lies beneath
    /// an allowed directory, both as written and with every symbolic link
    /// resolved (uploads, in the images directory, are always allowed as
    /// images). Checked before the path is opened, so a refused deploy
    /// tells nothing about the file (not even whether it exists).
    pub fn check_path(&self, what: &str, path: &Path) -> Result<(), ApiError> {
        let forbidden = |why: &str| {
            ApiError::Forbidden(format!(
                "{what} {}: {why}; the gateway reads only paths beneath the directories it was started with (--allow-path DIR){}",
                path.display(),
                if what == "image" { ", or images uploaded with POST /images (shoal fn deploy --upload)" } else { "" }
            ))
        };
        if path.components().any(|c| c == Component::ParentDir) {
            return Err(forbidden("a path with `..` is not accepted"));
        }
        let mut roots: Vec<&Path> = self.allowed.iter().map(PathBuf::as_path).collect();
        if what == "image" {
            roots.push(&self.images);
        }
        // With every link resolved (a link beneath an allowed directory may
        // point out of it); a path that does not resolve must lie beneath
        // one as written, and the deploy's own checks then say what is
        // wrong with it. Outside, both answer the same 403.
        let inside = match path.canonicalize() {
            Ok(real) => roots.iter().any(|r| real.starts_with(r)),
            Err(_) => roots.iter().any(|r| path.starts_with(r)),
        };
        if !inside {
            return Err(forbidden("not beneath an allowed directory"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_whole() {
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd"));
        assert!(!same(b"abc", b"ab"));
        assert!(!same(b"", b"a"));
    }

    #[test]
    fn a_token_is_made_once_private_and_read_back() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let t = load_or_create(d.path()).unwrap();
        assert!(is_token(&t));
        let m = std::fs::metadata(d.path().join(TOKEN_FILE)).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o600);
        assert_eq!(load_or_create(d.path()).unwrap(), t);
        assert_eq!(read_token(d.path()).as_deref(), Some(t.as_str()));
        std::fs::set_permissions(d.path().join(TOKEN_FILE), std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(load_or_create(d.path()), Err(TokenError::Unsafe(..))));
    }

    #[test]
    fn paths_outside_the_allowed_directories_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let ok = d.path().join("ok");
        std::fs::create_dir(&ok).unwrap();
        std::fs::write(ok.join("img"), b"x").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", ok.join("link")).unwrap();
        let p = Policy::new(false, std::slice::from_ref(&ok), d.path().join("images")).unwrap();
        let ok = ok.canonicalize().unwrap();
        assert!(p.check_path("image", &ok.join("img")).is_ok());
        assert!(p.check_path("image", &ok.join("missing")).is_ok());
        assert!(matches!(p.check_path("image", &ok.join("link")), Err(ApiError::Forbidden(_))));
        assert!(matches!(p.check_path("image", &ok.join("../ok/img")), Err(ApiError::Forbidden(_))));
        assert!(matches!(p.check_path("fs", Path::new("/etc")), Err(ApiError::Forbidden(_))));
        assert!(matches!(p.check_path("image", Path::new("/nonexistent/x")), Err(ApiError::Forbidden(_))));
        assert!(matches!(p.check_backend(super::super::spec::Backend::Process), Err(ApiError::Forbidden(_))));
    }
}
