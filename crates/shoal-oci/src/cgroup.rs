//! Cgroups for the tender process, as runc's cgroupfs driver applies them
//! (docs/design.md "Serving functions": the container's limits bound the whole instance, tender and
//! guest). cgroup v2 (one hierarchy) and v1 (one per controller, each
//! mounted under /sys/fs/cgroup) are both handled; the tender joins the
//! container's cgroup in every hierarchy, and memory, CPU and pid limits
//! are written where the config sets them. systemd's `slice:prefix:name`
//! form of `cgroupsPath` (`--systemd-cgroup`) is placed where systemd would
//! put it, `/slice/prefix-name.scope`, without asking systemd.

use crate::config::Resources;
use std::path::{Path, PathBuf};

const MOUNT: &str = "/sys/fs/cgroup";

/// A cgroup that could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("cgroup {path}: cannot {what}: {source}")]
pub struct CgroupError {
    what: &'static str,
    path: PathBuf,
    source: std::io::Error,
}

fn err<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> CgroupError + 'a {
    move |source| CgroupError { what, path: path.to_path_buf(), source }
}

/// The relative cgroup path for `cgroups_path` (absent: `/shoal-oci/ID`).
pub fn relative_path(cgroups_path: Option<&str>, id: &str) -> PathBuf {
    match cgroups_path {
        None | Some("") => PathBuf::from(format!("shoal-oci/{id}")),
        Some(p) if !p.starts_with('/') && p.split(':').count() == 3 => {
            let parts: Vec<&str> = p.split(':').collect();
            let slice = if parts[0].is_empty() { "system.slice" } else { parts[0] };
            PathBuf::from(format!("{slice}/{}-{}.scope", parts[1], parts[2]))
        }
        Some(p) => PathBuf::from(p.trim_start_matches('/')),
    }
}

/// The hierarchies to join: the unified one (v2), or each v1 mount point
/// (a directory with a `cgroup.procs`; the cpu,cpuacct-style symlinks are
/// skipped, their target is listed on its own).
fn hierarchies() -> Vec<PathBuf> {
    let root = Path::new(MOUNT);
    if root.join("cgroup.controllers").exists() {
        return vec![root.to_path_buf()];
    }
    let mut v: Vec<PathBuf> = std::fs::read_dir(root)
        .map(|d| {
            d.filter_map(Result::ok).filter(|e| e.file_type().is_ok_and(|t| t.is_dir())).map(|e| e.path()).filter(|p| p.join("cgroup.procs").exists()).collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Makes `hier/rel` level by level; new cpuset levels inherit their
/// parent's CPUs and memory nodes (an empty cpuset takes no tasks).
fn make(hier: &Path, rel: &Path) -> Result<PathBuf, CgroupError> {
    let mut dir = hier.to_path_buf();
    let cpuset = hier.join("cpuset.cpus").exists();
    for c in rel.components() {
        let parent = dir.clone();
        dir.push(c);
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(err("make the directory", &dir)(e)),
        }
        if cpuset {
            for f in ["cpuset.cpus", "cpuset.mems"] {
                let v = std::fs::read_to_string(parent.join(f)).map_err(err("read", &parent))?;
                std::fs::write(dir.join(f), v.trim()).map_err(err("copy the parent's cpuset to", &dir))?;
            }
        }
    }
    Ok(dir)
}

fn set(dir: &Path, file: &str, value: String) -> Result<(), CgroupError> {
    let p = dir.join(file);
    std::fs::write(&p, value).map_err(err("write", &p))
}

/// Puts `pid` into the container's cgroup in every hierarchy and writes
/// the limits; returns the directories made (for [`remove`]).
pub fn apply(rel: &Path, pid: i32, res: &Resources) -> Result<Vec<PathBuf>, CgroupError> {
    let mut made = Vec::new();
    // Limits go to the unified hierarchy only when it is the only one; in
    // a hybrid set-up (/sys/fs/cgroup/unified beside v1 controllers) the
    // controllers live in v1 and the unified tree is only joined.
    let pure_v2 = Path::new(MOUNT).join("cgroup.controllers").exists();
    for hier in hierarchies() {
        let v2 = pure_v2;
        let name = hier.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let dir = match make(&hier, rel) {
            Ok(d) => d,
            Err(e) => {
                // Hierarchies that a limit does not need may be read-only
                // here (a nested container); the ones that carry limits may not.
                let needed = v2 || matches!(name.as_str(), "memory" | "pids" | "cpu");
                if needed {
                    remove(&made);
                    return Err(e);
                }
                continue;
            }
        };
        made.push(dir.clone());
        let limits = || -> Result<(), CgroupError> {
            write_limits(&dir, v2, res)?;
            set(&dir, "cgroup.procs", pid.to_string())
        };
        if let Err(e) = limits() {
            remove(&made);
            return Err(e);
        }
    }
    Ok(made)
}

/// Writes the limits `res` sets into the container's cgroup `dir` (`v2`:
/// of the unified hierarchy, else one v1 controller's directory, which
/// takes only its own controller's files).
fn write_limits(dir: &Path, v2: bool, res: &Resources) -> Result<(), CgroupError> {
    let name = dir.strip_prefix(MOUNT).ok().and_then(|r| r.components().next()).map(|c| c.as_os_str().to_string_lossy().into_owned()).unwrap_or_default();
    if let Some(limit) = res.memory.as_ref().and_then(|m| m.limit).filter(|l| *l > 0) {
        if v2 {
            set(dir, "memory.max", limit.to_string())?;
        } else if name == "memory" {
            set(dir, "memory.limit_in_bytes", limit.to_string())?;
        }
    }
    if let Some(p) = res.pids.as_ref().filter(|p| p.limit > 0) {
        if v2 || name == "pids" {
            set(dir, "pids.max", p.limit.to_string())?;
        }
    }
    if let Some(cpu) = &res.cpu {
        if v2 {
            if let Some(q) = cpu.quota.filter(|q| *q > 0) {
                set(dir, "cpu.max", format!("{q} {}", cpu.period.unwrap_or(100_000)))?;
            }
        } else if dir.join("cpu.shares").exists() {
            if let Some(s) = cpu.shares.filter(|s| *s > 0) {
                set(dir, "cpu.shares", s.to_string())?;
            }
            if let Some(p) = cpu.period.filter(|p| *p > 0) {
                set(dir, "cpu.cfs_period_us", p.to_string())?;
            }
            if let Some(q) = cpu.quota.filter(|q| *q != 0) {
                set(dir, "cpu.cfs_quota_us", q.to_string())?;
            }
        }
    }
    Ok(())
}

/// `update`: writes new limits into a running container's cgroups (the
/// directories [`apply`] made). The guest's memory size was fixed when it
/// booted: a lower memory limit bounds the instance (one that uses more is
/// killed by the kernel's OOM killer, as a runc container would be), a
/// higher one only lets the tender grow.
pub fn update(dirs: &[PathBuf], res: &Resources) -> Result<(), CgroupError> {
    let pure_v2 = Path::new(MOUNT).join("cgroup.controllers").exists();
    for d in dirs {
        write_limits(d, pure_v2, res)?;
    }
    Ok(())
}

/// The processes in the container's cgroups (its tender and instance, and
/// the instances `exec` started beside them), for `ps` and `kill --all`.
/// A directory that is a hierarchy's root (a `cgroupsPath` of `/`) is not
/// read: its processes are the host's, not the container's.
pub fn procs(dirs: &[PathBuf]) -> Vec<i32> {
    let levels = if Path::new(MOUNT).join("cgroup.controllers").exists() { 1 } else { 2 };
    let mut out: Vec<i32> = Vec::new();
    for d in dirs.iter().filter(|d| d.strip_prefix(MOUNT).is_ok_and(|r| r.components().count() >= levels)) {
        let text = std::fs::read_to_string(d.join("cgroup.procs")).unwrap_or_default();
        for p in text.lines().filter_map(|l| l.trim().parse().ok()) {
            if !out.contains(&p) {
                out.push(p);
            }
        }
    }
    out
}

/// Removes the directories [`apply`] made (their tasks must have ended).
/// The parents it made (e.g. `shoal-oci/`) stay for the next container.
pub fn remove(dirs: &[PathBuf]) {
    for d in dirs {
        // A cgroup with a task that is still exiting refuses rmdir with
        // EBUSY for a moment.
        for _ in 0..100 {
            match std::fs::remove_dir(d) {
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => std::thread::sleep(std::time::Duration::from_millis(10)),
                _ => break,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_paths_follow_runc() {
        assert_eq!(relative_path(None, "c1"), PathBuf::from("shoal-oci/c1"));
        assert_eq!(relative_path(Some("/libpod_parent/libpod-x"), "c1"), PathBuf::from("libpod_parent/libpod-x"));
        assert_eq!(relative_path(Some("machine.slice:libpod:abc"), "c1"), PathBuf::from("machine.slice/libpod-abc.scope"));
        assert_eq!(relative_path(Some(":cri-containerd:abc"), "c1"), PathBuf::from("system.slice/cri-containerd-abc.scope"));
    }
}
