//! Kernel component `hostfs` (docs/architecture.md "Host directories"):
//! the files of `--mount HOSTDIR:GUESTDIR:ro` (or `:rw`), served live by
//! the tender through the `HostFs` hypercall.
//!
//! A writable mount's changes (create, write, truncate, remove, make a
//! directory, rename, sync, mode, times) go to the host at once, one call
//! each; a node keeps its path, so a descriptor of a file renamed or
//! removed since it was opened reaches whatever has that path now (or
//! `ENOENT`), unlike Linux, where it follows the file.
//!
//! vfs resolves names: it walks a path one component at a time, and when
//! it reaches a mount's guest directory it continues here. A file beneath
//! a mount is a **node**: the mount and the path relative to its host
//! directory, which never holds `.`, `..` or a symbolic link but perhaps
//! the last component (vfs follows links itself, from the guest's own
//! root, and takes `..` at a mount's top to the guest directory's
//! parent), so the tender can refuse every other path. Nodes get inode
//! numbers of their own from [`HOST_INO_BASE`] up, which vfs uses where
//! it uses ramfs's (descriptors, the working directory); what `stat` and
//! `getdents64` report is the host's own inode and device numbers, as a
//! bind mount shows them.
//!
//! A single-file mount (`--mount HOSTFILE:GUESTFILE`, the `/etc/hosts` a
//! container engine gives every container) is a mount whose top node is
//! a regular file: its only path is the empty one, and vfs puts it on a
//! regular file of the root file system (made if missing), as a bind
//! mount of a file lies on a file.
//!
//! Nothing is cached but a node's file type (from its last `stat`):
//! attributes, contents and listings are asked for each time, so a change
//! on the host is seen at once. The table of nodes only grows (one entry
//! per distinct file looked up, at most [`MAX_NODES`]), which keeps the
//! inode numbers vfs holds valid for the instance's life.
#![cfg_attr(not(test), no_std)]

extern crate alloc;

use alloc::collections::BTreeMap;
use alloc::vec::Vec;
use shoal_abi::{
    HostFsArgs, HostStat, HOSTFS_CHMOD, HOSTFS_CREATE, HOSTFS_FSYNC, HOSTFS_IO_MAX, HOSTFS_IS_FILE, HOSTFS_IS_WRITABLE, HOSTFS_LIST, HOSTFS_MAP,
    HOSTFS_MAP_EXEC, HOSTFS_MKDIR, HOSTFS_MOUNT, HOSTFS_PATH_MAX, HOSTFS_READ, HOSTFS_READLINK, HOSTFS_RENAME, HOSTFS_RMDIR, HOSTFS_STAT, HOSTFS_TRUNCATE,
    HOSTFS_UNLINK, HOSTFS_UNMAP, HOSTFS_UTIMES, HOSTFS_WRITABLE, HOSTFS_WRITE,
};
use shoal_plat::{Errno, ZeroGlobal};

/// The first inode number of a node; ramfs's numbers stay far below.
pub const HOST_INO_BASE: u64 = 1 << 56;
/// Most nodes an instance can look up.
pub const MAX_NODES: usize = 1 << 20;
/// `S_IFMT`.
pub const S_IFMT: u32 = 0o170000;
/// `S_IFDIR`.
pub const S_IFDIR: u32 = 0o040000;
/// `S_IFREG`.
pub const S_IFREG: u32 = 0o100000;
/// `S_IFLNK`.
pub const S_IFLNK: u32 = 0o120000;

struct Node {
    mount: u32,
    /// Relative to the mount's host directory; empty for its top.
    path: Vec<u8>,
    /// `st_mode` at the last `stat`.
    mode: u32,
}

#[derive(Default)]
struct State {
    /// Guest directories of the mounts, in the tender's order.
    mounts: Vec<Vec<u8>>,
    /// Whether each mount is writable.
    writable: Vec<bool>,
    /// Whether each mount is a single regular file.
    files: Vec<bool>,
    nodes: Vec<Node>,
    index: BTreeMap<(u32, Vec<u8>), u64>,
    asked: bool,
}

static STATE: ZeroGlobal<State> = ZeroGlobal::new();

fn with<R>(f: impl FnOnce(&mut State) -> R) -> R {
    STATE.with(f)
}

fn call(a: &mut HostFsArgs) -> Result<u64, Errno> {
    let r = shoal_plat::hypercall::host_fs(a);
    if r < 0 {
        Err(Errno((-r) as i32))
    } else {
        Ok(r as u64)
    }
}

/// Asks the tender for its mounts (once; later calls return the same).
pub fn init() {
    if with(|s| core::mem::replace(&mut s.asked, true)) {
        return;
    }
    let mut found = Vec::new();
    for m in 0..64u64 {
        let mut buf = [0u8; 256];
        let mut a = HostFsArgs { op: HOSTFS_MOUNT, mount: m, buf: buf.as_mut_ptr() as u64, len: buf.len() as u64, ..HostFsArgs::default() };
        match call(&mut a) {
            Ok(n) if (n as usize) <= buf.len() && n >= 1 && buf[0] == b'/' => found.push(buf[..n as usize].to_vec()),
            _ => break,
        }
    }
    let kinds: Vec<u64> = (0..found.len() as u64)
        .map(|m| {
            let mut a = HostFsArgs { op: HOSTFS_WRITABLE, mount: m, ..HostFsArgs::default() };
            // A tender that does not know the call has read-only
            // directories only.
            call(&mut a).unwrap_or(0)
        })
        .collect();
    with(|s| {
        s.mounts = found;
        s.writable = kinds.iter().map(|k| k & HOSTFS_IS_WRITABLE != 0).collect();
        s.files = kinds.iter().map(|k| k & HOSTFS_IS_FILE != 0).collect();
    });
}

/// Whether mount `m` is a single regular file.
pub fn is_file_mount(m: usize) -> bool {
    with(|s| s.files.get(m).copied().unwrap_or(false))
}

/// Whether node `ino` lies in a writable mount.
pub fn writable(ino: u64) -> bool {
    with(|s| ino.checked_sub(HOST_INO_BASE).and_then(|i| s.nodes.get(i as usize)).is_some_and(|n| s.writable.get(n.mount as usize).copied().unwrap_or(false)))
}

/// One changing call on `path` of `mount` (module docs).
fn change(op: u64, mount: u32, path: &[u8], off: u64, buf: u64, len: u64) -> Result<u64, Errno> {
    if path.len() as u64 > HOSTFS_PATH_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    let mut a = HostFsArgs { op, mount: u64::from(mount), path: path.as_ptr() as u64, path_len: path.len() as u64, off, buf, len, ret: 0 };
    call(&mut a)
}

/// The path of `name` (a plain name) in directory node `dir`, and its mount.
fn child(dir: u64, name: &[u8]) -> Result<(u32, Vec<u8>), Errno> {
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0) {
        return Err(Errno::EINVAL);
    }
    if name.len() > 255 {
        return Err(Errno::ENAMETOOLONG);
    }
    let (mount, mut path) = node(dir, |n| (n.mount, n.path.clone()))?;
    if !path.is_empty() {
        path.push(b'/');
    }
    path.extend_from_slice(name);
    Ok((mount, path))
}

/// Creates regular file `name` in directory node `dir` with `mode`
/// (`excl`: it must not exist); its node.
pub fn create(dir: u64, name: &[u8], mode: u32, excl: bool) -> Result<u64, Errno> {
    let (mount, path) = child(dir, name)?;
    change(HOSTFS_CREATE, mount, &path, u64::from(mode & 0o7777), 0, u64::from(excl))?;
    lookup(dir, name)
}

/// Makes directory `name` in directory node `dir`.
pub fn mkdir(dir: u64, name: &[u8], mode: u32) -> Result<(), Errno> {
    let (mount, path) = child(dir, name)?;
    change(HOSTFS_MKDIR, mount, &path, u64::from(mode & 0o7777), 0, 0).map(drop)
}

/// Removes `name` (not a directory) from directory node `dir`.
pub fn unlink(dir: u64, name: &[u8]) -> Result<(), Errno> {
    let (mount, path) = child(dir, name)?;
    change(HOSTFS_UNLINK, mount, &path, 0, 0, 0).map(drop)
}

/// Removes the empty directory `name` from directory node `dir`.
pub fn rmdir(dir: u64, name: &[u8]) -> Result<(), Errno> {
    let (mount, path) = child(dir, name)?;
    change(HOSTFS_RMDIR, mount, &path, 0, 0, 0).map(drop)
}

/// Renames `oname` in `odir` to `nname` in `ndir` (one mount) with
/// `renameat2` `flags`.
pub fn rename(odir: u64, oname: &[u8], ndir: u64, nname: &[u8], flags: u32) -> Result<(), Errno> {
    let (om, op) = child(odir, oname)?;
    let (nm, np) = child(ndir, nname)?;
    if om != nm {
        return Err(Errno::EXDEV);
    }
    change(HOSTFS_RENAME, om, &op, u64::from(flags), np.as_ptr() as u64, np.len() as u64).map(drop)
}

/// Writes `data` into regular file `ino` at `off`; the count.
pub fn write(ino: u64, off: u64, data: &[u8]) -> Result<usize, Errno> {
    let (mount, path) = node(ino, |n| (n.mount, n.path.clone()))?;
    let mut done = 0usize;
    while done < data.len() {
        let want = (data.len() - done).min(HOSTFS_IO_MAX as usize);
        let at = off.checked_add(done as u64).ok_or(Errno::EFBIG)?;
        let src = &data[done..done + want];
        let n = if shoal_plat::hypercall::needs_bounce(src.as_ptr() as u64, want as u64) {
            let tmp = src.to_vec();
            change(HOSTFS_WRITE, mount, &path, at, tmp.as_ptr() as u64, want as u64)?
        } else {
            change(HOSTFS_WRITE, mount, &path, at, src.as_ptr() as u64, want as u64)?
        } as usize;
        if n == 0 {
            break;
        }
        done += n.min(want);
    }
    Ok(done)
}

/// Sets regular file `ino`'s size.
pub fn truncate(ino: u64, len: u64) -> Result<(), Errno> {
    let (mount, path) = node(ino, |n| (n.mount, n.path.clone()))?;
    change(HOSTFS_TRUNCATE, mount, &path, len, 0, 0).map(drop)
}

/// Flushes regular file `ino` to the host's storage.
pub fn fsync(ino: u64) -> Result<(), Errno> {
    let (mount, path) = node(ino, |n| (n.mount, n.path.clone()))?;
    change(HOSTFS_FSYNC, mount, &path, 0, 0, 0).map(drop)
}

/// Sets node `ino`'s permission bits.
pub fn chmod(ino: u64, mode: u32) -> Result<(), Errno> {
    let (mount, path) = node(ino, |n| (n.mount, n.path.clone()))?;
    if path.is_empty() && !is_file_mount(mount as usize) {
        // The mount's top is the host's directory itself, not the guest's
        // (a single file's mode is the guest's to change, as through a
        // writable bind mount of a file).
        return Err(Errno::EPERM);
    }
    change(HOSTFS_CHMOD, mount, &path, u64::from(mode & 0o7777), 0, 0).map(drop)
}

/// Sets node `ino`'s access and modification times (`utimensat`'s
/// `[sec, nsec, sec, nsec]`, `UTIME_NOW`/`UTIME_OMIT` included).
pub fn set_times(ino: u64, ts: [i64; 4]) -> Result<(), Errno> {
    let (mount, path) = node(ino, |n| (n.mount, n.path.clone()))?;
    if path.is_empty() && !is_file_mount(mount as usize) {
        return Err(Errno::EPERM);
    }
    change(HOSTFS_UTIMES, mount, &path, 0, ts.as_ptr() as u64, 32).map(drop)
}

/// The guest directories of the mounts, in order (empty without
/// [`init`]).
pub fn mounts() -> Vec<Vec<u8>> {
    with(|s| s.mounts.clone())
}

/// Whether `ino` is a node's inode number.
pub fn is_host(ino: u64) -> bool {
    ino >= HOST_INO_BASE
}

fn node_ino(s: &mut State, mount: u32, path: &[u8], mode: u32) -> Result<u64, Errno> {
    if let Some(&ino) = s.index.get(&(mount, path.to_vec())) {
        if let Some(n) = s.nodes.get_mut((ino - HOST_INO_BASE) as usize) {
            n.mode = mode;
        }
        return Ok(ino);
    }
    if s.nodes.len() >= MAX_NODES {
        return Err(Errno::ENOMEM);
    }
    let ino = HOST_INO_BASE + s.nodes.len() as u64;
    s.nodes.push(Node { mount, path: path.to_vec(), mode });
    s.index.insert((mount, path.to_vec()), ino);
    Ok(ino)
}

fn node<R>(ino: u64, f: impl FnOnce(&Node) -> R) -> Result<R, Errno> {
    with(|s| ino.checked_sub(HOST_INO_BASE).and_then(|i| s.nodes.get(i as usize)).map(f).ok_or(Errno::ENOENT))
}

fn stat_path(mount: u32, path: &[u8]) -> Result<HostStat, Errno> {
    if path.len() as u64 > HOSTFS_PATH_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    let mut st = HostStat::default();
    let mut a = HostFsArgs {
        op: HOSTFS_STAT,
        mount: u64::from(mount),
        path: path.as_ptr() as u64,
        path_len: path.len() as u64,
        buf: &mut st as *mut HostStat as u64,
        len: core::mem::size_of::<HostStat>() as u64,
        ..HostFsArgs::default()
    };
    call(&mut a)?;
    Ok(st)
}

/// The inode number of mount `m`'s top directory (`ENOENT`: no such
/// mount, `ENOTDIR`: it is not a directory any more).
pub fn root(m: usize) -> Result<u64, Errno> {
    let mount = u32::try_from(m).map_err(|_| Errno::ENOENT)?;
    if m >= with(|s| s.mounts.len()) {
        return Err(Errno::ENOENT);
    }
    if let Some(ino) = with(|s| s.index.get(&(mount, Vec::new())).copied()) {
        return Ok(ino);
    }
    let st = stat_path(mount, b"")?;
    with(|s| node_ino(s, mount, b"", st.mode))
}

/// Looks `name` (an ordinary name: not empty, `.` or `..`, no `/`) up in
/// directory node `dir`.
pub fn lookup(dir: u64, name: &[u8]) -> Result<u64, Errno> {
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0) {
        return Err(Errno::EINVAL);
    }
    if name.len() > 255 {
        return Err(Errno::ENAMETOOLONG);
    }
    let (mount, mut path, mode) = node(dir, |n| (n.mount, n.path.clone(), n.mode))?;
    if mode & S_IFMT != S_IFDIR {
        return Err(Errno::ENOTDIR);
    }
    if !path.is_empty() {
        path.push(b'/');
    }
    path.extend_from_slice(name);
    let st = stat_path(mount, &path)?;
    with(|s| node_ino(s, mount, &path, st.mode))
}

/// The node of `path` (relative, plain names joined by `/`) in mount
/// `m`, looked up one name at a time from the mount's top.
pub fn at_path(m: usize, path: &[u8]) -> Result<u64, Errno> {
    let mut cur = root(m)?;
    for part in path.split(|&c| c == b'/').filter(|p| !p.is_empty()) {
        cur = lookup(cur, part)?;
    }
    Ok(cur)
}

/// The parent directory node of `ino`; `None` for a mount's top.
pub fn parent(ino: u64) -> Result<Option<u64>, Errno> {
    let (mount, path) = node(ino, |n| (n.mount, n.path.clone()))?;
    if path.is_empty() {
        return Ok(None);
    }
    let up = &path[..path.iter().rposition(|&c| c == b'/').unwrap_or(0)];
    // Every node was reached through its parent, which is in the table.
    with(|s| s.index.get(&(mount, up.to_vec())).copied()).map(Some).ok_or(Errno::ENOENT)
}

/// The mount `ino` lies in.
pub fn mount_of(ino: u64) -> Result<usize, Errno> {
    node(ino, |n| n.mount as usize)
}

/// The path of node `ino` relative to its mount's directory.
pub fn rel_path(ino: u64) -> Result<Vec<u8>, Errno> {
    node(ino, |n| n.path.clone())
}

/// The last component of node `ino`'s path (empty for a mount's top).
pub fn name(ino: u64) -> Result<Vec<u8>, Errno> {
    node(ino, |n| n.path.rsplit(|&c| c == b'/').next().unwrap_or(b"").to_vec())
}

/// `st_mode` of node `ino` as of its last `stat` (the file type is what
/// path resolution needs; [`stat`] asks again).
pub fn mode(ino: u64) -> Result<u32, Errno> {
    node(ino, |n| n.mode)
}

/// The host's `lstat` of node `ino`, now.
pub fn stat(ino: u64) -> Result<HostStat, Errno> {
    let (mount, path) = node(ino, |n| (n.mount, n.path.clone()))?;
    let st = stat_path(mount, &path)?;
    with(|s| {
        if let Some(n) = s.nodes.get_mut((ino - HOST_INO_BASE) as usize) {
            n.mode = st.mode;
        }
    });
    Ok(st)
}

/// Reads regular file `ino` from `off` into `buf` until `buf` is full or
/// the file ends; the count.
pub fn read(ino: u64, off: u64, buf: &mut [u8]) -> Result<usize, Errno> {
    let (mount, path) = node(ino, |n| (n.mount, n.path.clone()))?;
    let mut done = 0usize;
    while done < buf.len() {
        let want = (buf.len() - done).min(HOSTFS_IO_MAX as usize);
        let at = off.checked_add(done as u64).ok_or(Errno::EOVERFLOW)?;
        let dst = &mut buf[done..done + want];
        let n = if shoal_plat::hypercall::needs_bounce(dst.as_ptr() as u64, want as u64) {
            let mut tmp = alloc::vec![0u8; want];
            let n = read_once(mount, &path, at, &mut tmp)?;
            dst[..n].copy_from_slice(&tmp[..n]);
            n
        } else {
            read_once(mount, &path, at, dst)?
        };
        if n == 0 {
            break;
        }
        done += n;
    }
    Ok(done)
}

fn read_once(mount: u32, path: &[u8], off: u64, buf: &mut [u8]) -> Result<usize, Errno> {
    let mut a = HostFsArgs {
        op: HOSTFS_READ,
        mount: u64::from(mount),
        path: path.as_ptr() as u64,
        path_len: path.len() as u64,
        off,
        buf: buf.as_mut_ptr() as u64,
        len: buf.len() as u64,
        ret: 0,
    };
    let n = call(&mut a)? as usize;
    Ok(n.min(buf.len()))
}

/// One directory entry of a node.
pub struct Entry<'a> {
    /// The host's inode number.
    pub ino: u64,
    /// The number of the entry after it (the next position).
    pub next: u64,
    /// `d_type`.
    pub dtype: u8,
    /// The name.
    pub name: &'a [u8],
}

/// Calls `f` with directory `ino`'s entries from position `pos` on, until
/// it returns `false` or the directory ends.
pub fn list(ino: u64, mut pos: u64, mut f: impl FnMut(Entry<'_>) -> bool) -> Result<(), Errno> {
    let (mount, path) = node(ino, |n| (n.mount, n.path.clone()))?;
    let mut buf = alloc::vec![0u8; 16 << 10];
    loop {
        let mut a = HostFsArgs {
            op: HOSTFS_LIST,
            mount: u64::from(mount),
            path: path.as_ptr() as u64,
            path_len: path.len() as u64,
            off: pos,
            buf: buf.as_mut_ptr() as u64,
            len: buf.len() as u64,
            ret: 0,
        };
        let n = (call(&mut a)? as usize).min(buf.len());
        if n == 0 {
            return Ok(());
        }
        let mut at = 0;
        while at + 19 <= n {
            let rec = &buf[at..n];
            let reclen = usize::from(u16::from_ne_bytes([rec[16], rec[17]]));
            if reclen < 19 || reclen > rec.len() {
                return Err(Errno::EIO);
            }
            let d_ino = u64::from_ne_bytes(rec[0..8].try_into().map_err(|_| Errno::EIO)?);
            let next = u64::from_ne_bytes(rec[8..16].try_into().map_err(|_| Errno::EIO)?);
            let name = &rec[19..reclen];
            let name = &name[..name.iter().position(|&c| c == 0).unwrap_or(name.len())];
            if !f(Entry { ino: d_ino, next, dtype: rec[18], name }) {
                return Ok(());
            }
            pos = next;
            at += reclen;
        }
    }
}

/// The target of symbolic link node `ino`.
pub fn readlink(ino: u64) -> Result<Vec<u8>, Errno> {
    let (mount, path) = node(ino, |n| (n.mount, n.path.clone()))?;
    let mut buf = alloc::vec![0u8; HOSTFS_PATH_MAX as usize + 1];
    let mut a = HostFsArgs {
        op: HOSTFS_READLINK,
        mount: u64::from(mount),
        path: path.as_ptr() as u64,
        path_len: path.len() as u64,
        buf: buf.as_mut_ptr() as u64,
        len: buf.len() as u64,
        ..HostFsArgs::default()
    };
    let n = (call(&mut a)? as usize).min(buf.len());
    buf.truncate(n);
    Ok(buf)
}

/// Maps regular file `ino` from `off` privately over the program's fresh
/// memory `[addr, addr + len)` (page aligned), read-only or, with `exec`,
/// readable and executable: the host's page cache of the file, shared by
/// every instance that maps it (`HOSTFS_MAP`). Returns the bytes mapped
/// (the whole pages inside the file; the rest of the range is left as it
/// was). Any error leaves the range as it was, and the caller copies the
/// file in instead.
pub fn map(ino: u64, off: u64, addr: u64, len: u64, exec: bool) -> Result<u64, Errno> {
    let (mount, path) = node(ino, |n| (n.mount, n.path.clone()))?;
    let mut a = HostFsArgs {
        op: if exec { HOSTFS_MAP_EXEC } else { HOSTFS_MAP },
        mount: u64::from(mount),
        path: path.as_ptr() as u64,
        path_len: path.len() as u64,
        off,
        buf: addr,
        len,
        ret: 0,
    };
    Ok(call(&mut a)?.min(len))
}

/// Gives `[addr, addr + len)` (page aligned), where [`map`] mapped a
/// file, fresh zero memory with real protection `prot` (`HOSTFS_UNMAP`).
pub fn unmap(addr: u64, len: u64, prot: u64) -> Result<(), Errno> {
    let mut a = HostFsArgs { op: HOSTFS_UNMAP, off: prot, buf: addr, len, ..HostFsArgs::default() };
    call(&mut a).map(|_| ())
}
