//! A container's state under `--root` (default `/run/shoal-oci`): one
//! directory per container id holding `state.json` (what create decided),
//! `config.json` (the hooks, fixed at create as the spec asks) and, while
//! the container waits for `start`, the FIFO `exec.fifo` its process is
//! blocked on. Files are written to a temporary name and renamed, so a
//! reader never sees half a file.
//!
//! The status is derived, as runc derives it, from the process itself: no
//! process (or a zombie, or a different process that reuses the pid: the
//! start time is kept) → `stopped`; the FIFO still there → `created`;
//! else `running`.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The spec version shoal-oci implements.
pub const OCI_VERSION: &str = "1.0.2";

/// Why a container's state cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// runc's wording for an unknown id.
    #[error("container does not exist")]
    NotFound,
    /// runc's wording for a duplicate id.
    #[error("container with given ID already exists")]
    Exists,
    /// An id that could not be a directory name.
    #[error("invalid id format: {0:?} (letters, digits, '_', '+', '-' and '.' only)")]
    BadId(String),
    /// A file system error.
    #[error("cannot {what} {path}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// Where.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// state.json is damaged.
    #[error("the state of container {0} is damaged: {1}")]
    Damaged(String, serde_json::Error),
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> StateError + 'a {
    move |source| StateError::Io { what, path: path.to_path_buf(), source }
}

/// What is kept about a container.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Saved {
    /// The container id.
    pub id: String,
    /// The tender process (0 while creating).
    pub pid: i32,
    /// Its start time in clock ticks since boot (/proc/PID/stat field 22),
    /// to tell it from a later process with the same pid.
    pub pid_start: u64,
    /// The bundle directory.
    pub bundle: PathBuf,
    /// The root file system.
    pub rootfs: PathBuf,
    /// When create ran (RFC 3339).
    pub created: String,
    /// Annotations from config.json.
    pub annotations: BTreeMap<String, String>,
    /// Cgroup directories the tender was put in (removed by delete).
    pub cgroups: Vec<PathBuf>,
    /// True until create has finished.
    pub creating: bool,
}

/// The state JSON of the runtime spec (`state` prints it; hooks get it
/// on stdin).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OciState {
    /// Spec version.
    pub oci_version: &'static str,
    /// Container id.
    pub id: String,
    /// creating, created, running or stopped.
    pub status: &'static str,
    /// The tender's pid (0 once stopped, as runc reports).
    pub pid: i32,
    /// The bundle.
    pub bundle: PathBuf,
    /// The root file system (runc reports it too).
    pub rootfs: PathBuf,
    /// When create ran.
    pub created: String,
    /// Annotations.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// A container's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// create has not finished.
    Creating,
    /// Waiting for start.
    Created,
    /// The tender runs the guest.
    Running,
    /// The tender has exited.
    Stopped,
}

impl Status {
    /// The spec's word.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Creating => "creating",
            Status::Created => "created",
            Status::Running => "running",
            Status::Stopped => "stopped",
        }
    }
}

/// The state directory of all containers.
#[derive(Debug, Clone)]
pub struct Root(pub PathBuf);

/// Checks a container id, as runc does (it becomes a directory name).
pub fn check_id(id: &str) -> Result<(), StateError> {
    let ok = !id.is_empty() && id != "." && id != ".." && id.chars().all(|c| c.is_ascii_alphanumeric() || "_+-.".contains(c));
    if ok {
        Ok(())
    } else {
        Err(StateError::BadId(id.into()))
    }
}

impl Root {
    /// The directory of container `id`.
    pub fn dir(&self, id: &str) -> PathBuf {
        self.0.join(id)
    }

    /// Claims `id`: makes its directory, failing if it exists.
    pub fn claim(&self, id: &str) -> Result<PathBuf, StateError> {
        check_id(id)?;
        create_private_dir_all(&self.0)?;
        let dir = self.dir(id);
        match std::fs::create_dir(&dir) {
            Ok(()) => Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(StateError::Exists),
            Err(e) => Err(io("make the state directory", &dir)(e)),
        }
    }

    /// Loads container `id`.
    pub fn load(&self, id: &str) -> Result<Saved, StateError> {
        check_id(id).map_err(|_| StateError::NotFound)?;
        let path = self.dir(id).join("state.json");
        let text = match std::fs::read(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(StateError::NotFound),
            Err(e) => return Err(io("read", &path)(e)),
        };
        serde_json::from_slice(&text).map_err(|e| StateError::Damaged(id.into(), e))
    }

    /// Writes container state atomically.
    pub fn save(&self, s: &Saved) -> Result<(), StateError> {
        let text = serde_json::to_vec_pretty(s).map_err(|e| StateError::Damaged(s.id.clone(), e))?;
        write_atomic(&self.dir(&s.id).join("state.json"), &text)
    }

    /// The FIFO a created container waits on.
    pub fn fifo(&self, id: &str) -> PathBuf {
        self.dir(id).join("exec.fifo")
    }

    /// The container's status now.
    pub fn status(&self, s: &Saved) -> Status {
        if s.creating {
            return Status::Creating;
        }
        if !alive(s.pid, s.pid_start) {
            return Status::Stopped;
        }
        if self.fifo(&s.id).exists() {
            Status::Created
        } else {
            Status::Running
        }
    }

    /// The spec's state JSON.
    pub fn oci_state(&self, s: &Saved) -> OciState {
        let status = self.status(s);
        OciState {
            oci_version: OCI_VERSION,
            id: s.id.clone(),
            status: status.as_str(),
            pid: if status == Status::Stopped { 0 } else { s.pid },
            bundle: s.bundle.clone(),
            rootfs: s.rootfs.clone(),
            created: s.created.clone(),
            annotations: s.annotations.clone(),
        }
    }

    /// Removes container `id`'s directory.
    pub fn remove(&self, id: &str) -> Result<(), StateError> {
        let dir = self.dir(id);
        match std::fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io("remove", &dir)(e)),
            _ => Ok(()),
        }
    }
}

/// Makes a directory (and its parents) that only root reads: container
/// state names bundles and pids.
fn create_private_dir_all(dir: &Path) -> Result<(), StateError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(io("make the state directory", dir))
}

/// Writes `path` through a temporary file in the same directory and a
/// rename, so readers see the old or the new content, never a part.
pub fn write_atomic(path: &Path, data: &[u8]) -> Result<(), StateError> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(data)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io("write", path)(e)
    })
}

/// A process's start time (clock ticks since boot) and whether it is a
/// zombie, from /proc/PID/stat.
pub fn proc_stat(pid: i32) -> Option<(u64, bool)> {
    if pid <= 0 {
        return None;
    }
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields start
    // after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state); field 22 (starttime) is index 19.
    let zombie = matches!(fields.first(), Some(&"Z") | Some(&"X"));
    Some((fields.get(19)?.parse().ok()?, zombie))
}

/// Whether process `pid` started at `start` still runs.
pub fn alive(pid: i32, start: u64) -> bool {
    matches!(proc_stat(pid), Some((t, false)) if t == start)
}

/// Now, in RFC 3339 with nanoseconds (UTC), as runc writes `created`.
pub fn now_rfc3339() -> String {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's days-to-civil algorithm.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:09}Z", rem / 3600, rem % 3600 / 60, rem % 60, d.subsec_nanos())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_checked() {
        assert!(check_id("abc-1.2_x+y").is_ok());
        for bad in ["", ".", "..", "a/b", "a b"] {
            assert!(check_id(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn this_process_is_alive_and_its_start_time_matters() {
        let me = std::process::id() as i32;
        let (start, zombie) = proc_stat(me).unwrap();
        assert!(!zombie);
        assert!(alive(me, start));
        assert!(!alive(me, start + 1));
        assert!(!alive(0, 0));
    }

    #[test]
    fn timestamps_look_like_rfc3339() {
        let t = now_rfc3339();
        assert_eq!(t.len(), "2026-01-01T00:00:00.000000000Z".len(), "{t}");
        assert!(t.starts_with("20") && t.ends_with('Z') && t.as_bytes()[10] == b'T', "{t}");
    }
}
