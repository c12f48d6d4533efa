//! The `HostFs` hypercall (`--mount HOSTDIR:GUESTDIR:ro` or `:rw`): the
//! host side of a host directory, the same for spt and hvt
//! (docs/architecture.md "Host directories").
//!
//! The guest's kernel resolves names itself (symbolic links, `..`, other
//! mounts) and asks for one file at a time by a path relative to the
//! mount's directory. That path is hostile: it is opened only with
//! `openat2` beneath the directory's descriptor with `RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV`, so
//! `..` that would climb out, an absolute path, any symbolic link on the
//! way (`/proc/self/fd/N` magic links included) and another file system
//! mounted beneath the directory are all refused by the host kernel
//! (`EXDEV`, `ELOOP`), whatever the guest's kernel does. A file is read
//! only once an `O_PATH` look at it says it is a regular file (so no
//! device or FIFO is ever opened), then opened read-only with
//! `O_NONBLOCK | O_NOCTTY` and checked to be the same file; only
//! directories are listed. Each
//! call opens, uses and closes its descriptor: the tender keeps no state
//! per guest file, so nothing the guest does can exhaust its descriptors,
//! and a file replaced on the host is seen at the next call ("served
//! live").
//!
//! A writable mount (`:rw`) also creates, writes, truncates, removes,
//! makes, renames, syncs and changes the mode and times of names beneath
//! it. Each such call opens the *parent* directory of the name with the
//! same `openat2` confinement and acts on one plain name in it (`unlinkat`,
//! `mkdirat`, `renameat2`, …: never `.`, `..`, empty or with a `/`), or
//! opens the file itself with `O_NOFOLLOW`, so neither `..` nor a link
//! (one the guest made itself included) leads out. A read-only mount
//! answers every one of them `EROFS`, before the host is asked. Files and
//! directories made on an hvt guest's behalf by a tender running as root
//! are given the owner the guest runs as (`--user`); spt's instance runs
//! as that user itself (crate `shoal-spt`).
//!
//! A single-file mount (`--mount HOSTFILE:GUESTFILE:ro` or `:rw`, the
//! `/etc/hosts` a container engine gives every container) has no
//! directory: its descriptor is the file itself, opened once before the
//! guest runs (for reading, or reading and writing), and its one path is
//! the empty one. Every call on it acts on that descriptor (`fstat`,
//! `pread`, `pwrite`, `ftruncate`, `fsync`, `fchmod`, `futimens`, a
//! private `mmap`); any other path is `ENOTDIR` and nothing is ever opened
//! by name, so no other host file is reachable through it.
//!
//! No allocation (spt calls this from its hypercall handler, where the
//! filter forbids `mmap`): paths and directory records go through stack
//! buffers.

use shoal_abi::{
    HostFsArgs, HostStat, HOSTFS_CHMOD, HOSTFS_CREATE, HOSTFS_FSYNC, HOSTFS_IO_MAX, HOSTFS_IS_FILE, HOSTFS_IS_WRITABLE, HOSTFS_LIST, HOSTFS_MAP_EXEC,
    HOSTFS_MKDIR, HOSTFS_MOUNT, HOSTFS_PATH_MAX, HOSTFS_READ, HOSTFS_READLINK, HOSTFS_RENAME, HOSTFS_RMDIR, HOSTFS_STAT, HOSTFS_TRUNCATE, HOSTFS_UNLINK,
    HOSTFS_UNMAP, HOSTFS_UTIMES, HOSTFS_WRITABLE, HOSTFS_WRITE, PAGE_SIZE, PROT_EXEC, PROT_READ, PROT_WRITE,
};
use shoal_loader::{GuestAddr, GuestMemory};
use std::os::fd::RawFd;

/// Most `--mount`s an instance has.
pub const MAX_MOUNTS: usize = 16;
/// Longest guest directory of a mount.
pub const GUEST_PATH_MAX: usize = 255;

/// The mounts of an instance: the host directory's descriptor (`O_PATH`),
/// or the host file's (open), and the guest directory or file of each.
#[derive(Clone, Copy, Debug)]
pub struct Mounts {
    count: usize,
    fds: [RawFd; MAX_MOUNTS],
    paths: [[u8; GUEST_PATH_MAX]; MAX_MOUNTS],
    lens: [usize; MAX_MOUNTS],
    /// Bit `i`: mount `i` is writable.
    writable: u32,
    /// Bit `i`: mount `i` is a single regular file.
    files: u32,
    /// The owner given to what is made on the guest's behalf (`None`:
    /// the tender's own, as on spt, whose instance runs as the guest's user).
    owner: Option<(u32, u32)>,
}

impl Default for Mounts {
    fn default() -> Self {
        Mounts { count: 0, fds: [-1; MAX_MOUNTS], paths: [[0; GUEST_PATH_MAX]; MAX_MOUNTS], lens: [0; MAX_MOUNTS], writable: 0, files: 0, owner: None }
    }
}

impl Mounts {
    /// Adds a mount (`writable`: `:rw`; `file`: `fd` is one regular
    /// file, open for reading, and for writing too if `writable`); `false`
    /// if the table is full or the guest path too long (the front end
    /// refuses both before).
    pub fn push(&mut self, fd: RawFd, guest: &[u8], writable: bool, file: bool) -> bool {
        if self.count == MAX_MOUNTS || guest.len() > GUEST_PATH_MAX {
            return false;
        }
        if writable {
            self.writable |= 1 << self.count;
        }
        if file {
            self.files |= 1 << self.count;
        }
        self.fds[self.count] = fd;
        self.paths[self.count][..guest.len()].copy_from_slice(guest);
        self.lens[self.count] = guest.len();
        self.count += 1;
        true
    }

    /// Gives what is made beneath a writable mount to `uid`:`gid`
    /// (hvt's tender as root, for `--user`).
    pub fn set_owner(&mut self, uid: u32, gid: u32) {
        self.owner = Some((uid, gid));
    }

    /// Whether mount `i` is writable.
    pub fn is_writable(&self, i: usize) -> bool {
        i < self.count && self.writable & (1 << i) != 0
    }

    /// Whether mount `i` is a single regular file.
    pub fn is_file(&self, i: usize) -> bool {
        i < self.count && self.files & (1 << i) != 0
    }

    /// Whether any mount is writable.
    pub fn any_writable(&self) -> bool {
        self.writable != 0
    }

    /// How many mounts there are.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The host directory descriptor of mount `i`.
    pub fn fd(&self, i: usize) -> Option<RawFd> {
        (i < self.count).then(|| self.fds[i])
    }

    /// Replaces the descriptor of mount `i` (spt: the read-only clone of
    /// the directory the instance made).
    pub fn set_fd(&mut self, i: usize, fd: RawFd) {
        if i < self.count {
            self.fds[i] = fd;
        }
    }
}

/// `-errno` as a hypercall result.
fn neg(e: i32) -> i64 {
    -i64::from(e)
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}

/// `struct open_how` of `openat2(2)`.
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// What confines every open beneath a mount.
const RESOLVE: u64 = 0x08 /* RESOLVE_BENEATH */ | 0x04 /* RESOLVE_NO_SYMLINKS */ | 0x02 /* RESOLVE_NO_MAGICLINKS */ | 0x01 /* RESOLVE_NO_XDEV */;

/// A descriptor closed when dropped.
struct Fd(RawFd);

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: closing a descriptor this module opened and owns.
        unsafe { libc::syscall(libc::SYS_close, self.0) };
    }
}

/// `openat2(dir, path, flags, RESOLVE)`; `path` is NUL-terminated.
fn open_beneath(dir: RawFd, path: &[u8], flags: i32) -> Result<Fd, i32> {
    open_beneath_mode(dir, path, flags, 0)
}

/// [`open_beneath`] with the mode a created file gets.
fn open_beneath_mode(dir: RawFd, path: &[u8], flags: i32, mode: libc::mode_t) -> Result<Fd, i32> {
    debug_assert_eq!(path.last(), Some(&0));
    // openat2 refuses any flag O_PATH does not take (O_NOCTTY among them).
    let extra = if flags & libc::O_PATH != 0 { libc::O_CLOEXEC } else { libc::O_CLOEXEC | libc::O_NOCTTY };
    let how = OpenHow { flags: (flags | extra) as u64, mode: u64::from(mode), resolve: RESOLVE };
    // SAFETY: `path` is NUL-terminated, `how` a valid open_how of the size
    // passed; the kernel only reads both.
    let r = unsafe { libc::syscall(libc::SYS_openat2, dir, path.as_ptr(), &how as *const OpenHow, core::mem::size_of::<OpenHow>()) };
    if r < 0 {
        Err(errno())
    } else {
        Ok(Fd(r as RawFd))
    }
}

/// `fstat(fd)`.
fn fstat(fd: &Fd) -> Result<libc::stat, i32> {
    // SAFETY: an all-zero `stat` is valid; fstat writes into it.
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // By number: libc's fstat may be newfstatat(fd, "", AT_EMPTY_PATH),
    // which spt's filter does not allow (it takes a path).
    // SAFETY: `st` is a valid, writable `stat`.
    if unsafe { libc::syscall(libc::SYS_fstat, fd.0, &mut st as *mut libc::stat) } < 0 {
        return Err(errno());
    }
    Ok(st)
}

/// `pread(fd, buf, off)`.
fn pread(fd: &Fd, buf: &mut [u8], off: u64) -> Result<usize, i32> {
    let off = i64::try_from(off).map_err(|_| libc::EINVAL)?;
    // SAFETY: `buf` is valid for writes of its length.
    let r = unsafe { libc::syscall(libc::SYS_pread64, fd.0, buf.as_mut_ptr(), buf.len(), off) };
    if r < 0 {
        Err(errno())
    } else {
        Ok(r as usize)
    }
}

/// `getdents64(fd, buf)`.
fn getdents64(fd: &Fd, buf: &mut [u8]) -> Result<usize, i32> {
    // SAFETY: `buf` is valid for writes of its length.
    let r = unsafe { libc::syscall(libc::SYS_getdents64, fd.0, buf.as_mut_ptr(), buf.len()) };
    if r < 0 {
        Err(errno())
    } else {
        Ok(r as usize)
    }
}

/// `readlinkat(fd, "", buf)`: the target of the symbolic link `fd` is.
fn readlink_fd(fd: &Fd, buf: &mut [u8]) -> Result<usize, i32> {
    // SAFETY: an empty NUL-terminated path and a buffer valid for writes
    // of its length.
    let r = unsafe { libc::syscall(libc::SYS_readlinkat, fd.0, c"".as_ptr(), buf.as_mut_ptr(), buf.len()) };
    if r < 0 {
        Err(errno())
    } else {
        Ok(r as usize)
    }
}

fn host_stat(st: &libc::stat) -> HostStat {
    HostStat {
        dev: st.st_dev,
        ino: st.st_ino,
        mode: st.st_mode,
        nlink: st.st_nlink as u32,
        uid: st.st_uid,
        gid: st.st_gid,
        rdev: st.st_rdev,
        size: st.st_size as u64,
        blocks: st.st_blocks as u64,
        blksize: st.st_blksize as u64,
        atime: [st.st_atime, st.st_atime_nsec],
        mtime: [st.st_mtime, st.st_mtime_nsec],
        ctime: [st.st_ctime, st.st_ctime_nsec],
    }
}

/// A guest buffer the tender may write: `[ptr, ptr + len)` in writable
/// guest memory, checked by [`out_buf`].
struct GuestBuf {
    ptr: *mut u8,
    len: usize,
}

impl GuestBuf {
    fn slice(&mut self) -> &mut [u8] {
        // SAFETY: `[ptr, ptr + len)` lies in guest memory (checked by
        // `out_buf`), which is mapped writable for the tender for the
        // whole call; the guest may change it meanwhile, which only
        // garbles its own result.
        unsafe { core::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

/// `[buf, buf + len)` if it lies in writable guest memory (`writable` is
/// the tender's check).
fn out_buf(mem: &GuestMemory, writable: &dyn Fn(u64, u64) -> bool, buf: u64, len: u64) -> Result<GuestBuf, i32> {
    if !writable(buf, len) {
        return Err(libc::EFAULT);
    }
    let ptr = mem.host_ptr(GuestAddr(buf), len).map_err(|_| libc::EFAULT)?;
    Ok(GuestBuf { ptr, len: len as usize })
}

/// Serves one `HostFs` hypercall; returns its result (`ret`).
pub fn serve(m: &Mounts, a: &HostFsArgs, mem: &GuestMemory, writable: &dyn Fn(u64, u64) -> bool) -> i64 {
    match serve_inner(m, a, mem, writable) {
        Ok(n) => n as i64,
        Err(e) => neg(e),
    }
}

fn serve_inner(m: &Mounts, a: &HostFsArgs, mem: &GuestMemory, writable: &dyn Fn(u64, u64) -> bool) -> Result<u64, i32> {
    if m.is_empty() {
        return Err(libc::ENOSYS);
    }
    let i = usize::try_from(a.mount).map_err(|_| libc::EINVAL)?;
    if a.op == HOSTFS_MOUNT {
        if i >= m.count {
            return Err(libc::ENOENT);
        }
        let p = &m.paths[i][..m.lens[i]];
        let mut out = out_buf(mem, writable, a.buf, a.len.min(p.len() as u64))?;
        let out = out.slice();
        out.copy_from_slice(&p[..out.len()]);
        return Ok(p.len() as u64);
    }
    if a.op == HOSTFS_WRITABLE {
        let mut bits = 0;
        if m.is_writable(i) {
            bits |= HOSTFS_IS_WRITABLE;
        }
        if m.is_file(i) {
            bits |= HOSTFS_IS_FILE;
        }
        return if i < m.count { Ok(bits) } else { Err(libc::ENOENT) };
    }
    let dir = m.fd(i).ok_or(libc::EINVAL)?;
    if m.is_file(i) {
        return serve_file(m.is_writable(i), dir, a, mem, writable);
    }
    let mut buf = [0u8; HOSTFS_PATH_MAX as usize + 2];
    let path = guest_path(a, mem, &mut buf)?;
    if (HOSTFS_CREATE..=HOSTFS_UTIMES).contains(&a.op) {
        if !m.is_writable(i) {
            return Err(libc::EROFS);
        }
        return serve_write(m, dir, path, a, mem);
    }
    match a.op {
        HOSTFS_STAT => {
            let fd = open_beneath(dir, path, libc::O_PATH | libc::O_NOFOLLOW)?;
            stat_out(&fd, a, mem, writable)
        }
        HOSTFS_READLINK => {
            let fd = open_beneath(dir, path, libc::O_PATH | libc::O_NOFOLLOW)?;
            let mut out = out_buf(mem, writable, a.buf, a.len.min(HOSTFS_PATH_MAX + 1))?;
            readlink_fd(&fd, out.slice()).map(|n| n as u64)
        }
        HOSTFS_READ => {
            let (fd, _) = open_regular(dir, path)?;
            let mut out = out_buf(mem, writable, a.buf, a.len.min(HOSTFS_IO_MAX))?;
            pread(&fd, out.slice(), a.off).map(|n| n as u64)
        }
        HOSTFS_LIST => {
            let fd = open_beneath(dir, path, libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW)?;
            let mut out = out_buf(mem, writable, a.buf, a.len.min(HOSTFS_IO_MAX))?;
            list(&fd, a.off, out.slice())
        }
        _ => Err(libc::EINVAL),
    }
}

/// `HOSTFS_STAT`'s answer: `fd`'s status written to the guest's buffer
/// (`EINVAL` if it is too small, `EFAULT` if not the guest's to write).
fn stat_out(fd: &Fd, a: &HostFsArgs, mem: &GuestMemory, writable: &dyn Fn(u64, u64) -> bool) -> Result<u64, i32> {
    let st = host_stat(&fstat(fd)?);
    let size = core::mem::size_of::<HostStat>() as u64;
    if a.len < size {
        return Err(libc::EINVAL);
    }
    if !writable(a.buf, size) {
        return Err(libc::EFAULT);
    }
    mem.write_obj(GuestAddr(a.buf), &st).map_err(|_| libc::EFAULT)?;
    Ok(0)
}

/// A call on single-file mount `fd` (module docs): its one path is the
/// empty one, and every call acts on the descriptor itself.
fn serve_file(rw: bool, fd: RawFd, a: &HostFsArgs, mem: &GuestMemory, writable: &dyn Fn(u64, u64) -> bool) -> Result<u64, i32> {
    if a.path_len != 0 {
        return Err(libc::ENOTDIR);
    }
    // Borrowed: the mount's descriptor lives as long as the instance.
    let file = core::mem::ManuallyDrop::new(Fd(fd));
    let file: &Fd = &file;
    if (HOSTFS_CREATE..=HOSTFS_UTIMES).contains(&a.op) && !rw {
        return Err(libc::EROFS);
    }
    match a.op {
        HOSTFS_STAT => stat_out(file, a, mem, writable),
        HOSTFS_READ => {
            let mut out = out_buf(mem, writable, a.buf, a.len.min(HOSTFS_IO_MAX))?;
            pread(file, out.slice(), a.off).map(|n| n as u64)
        }
        HOSTFS_READLINK => Err(libc::EINVAL),
        HOSTFS_WRITE => {
            let len = a.len.min(HOSTFS_IO_MAX);
            let src = mem.host_ptr(GuestAddr(a.buf), len).map_err(|_| libc::EFAULT)?;
            let off = i64::try_from(a.off).map_err(|_| libc::EFBIG)?;
            // SAFETY: `[src, src + len)` lies in guest memory (checked),
            // mapped readable for the tender; the host kernel only reads it.
            check(unsafe { libc::syscall(libc::SYS_pwrite64, fd, src, len as usize, off) })
        }
        HOSTFS_TRUNCATE => {
            let len = i64::try_from(a.off).map_err(|_| libc::EFBIG)?;
            // SAFETY: a plain call on the mount's descriptor.
            check(unsafe { libc::syscall(libc::SYS_ftruncate, fd, len) })
        }
        // SAFETY: a plain call on the mount's descriptor.
        HOSTFS_FSYNC => check(unsafe { libc::syscall(libc::SYS_fsync, fd) }),
        // SAFETY: a plain call on the mount's descriptor.
        HOSTFS_CHMOD => check(unsafe { libc::syscall(libc::SYS_fchmod, fd, (a.off & 0o7777) as libc::mode_t) }),
        HOSTFS_UTIMES => {
            let ts = guest_timespecs(a, mem)?;
            // SAFETY: futimens: a null path acts on the descriptor itself;
            // `ts` is two timespecs' worth of memory (the host checks them).
            check(unsafe { libc::syscall(libc::SYS_utimensat, fd, core::ptr::null::<libc::c_char>(), ts.as_ptr(), 0) })
        }
        // Nothing lies beneath a file.
        HOSTFS_LIST | HOSTFS_CREATE | HOSTFS_UNLINK | HOSTFS_MKDIR | HOSTFS_RMDIR | HOSTFS_RENAME => Err(libc::ENOTDIR),
        _ => Err(libc::EINVAL),
    }
}

/// The two timespecs (`utimensat`'s times) of a `HOSTFS_UTIMES` request
/// `a`, copied out of guest memory; their values are the host's to check.
fn guest_timespecs(a: &HostFsArgs, mem: &GuestMemory) -> Result<[i64; 4], i32> {
    if a.len < 32 {
        return Err(libc::EINVAL);
    }
    let src = mem.host_ptr(GuestAddr(a.buf), 32).map_err(|_| libc::EFAULT)?;
    let mut ts = [0i64; 4];
    // SAFETY: 32 bytes at `src` lie in guest memory (checked).
    unsafe { core::ptr::copy_nonoverlapping(src, ts.as_mut_ptr().cast::<u8>(), 32) };
    Ok(ts)
}

/// The NUL-terminated path of request `a` (`.` for an empty one), copied
/// out of guest memory into `buf`.
fn guest_path<'b>(a: &HostFsArgs, mem: &GuestMemory, buf: &'b mut [u8; HOSTFS_PATH_MAX as usize + 2]) -> Result<&'b [u8], i32> {
    if a.path_len > HOSTFS_PATH_MAX {
        return Err(libc::ENAMETOOLONG);
    }
    let n = a.path_len as usize;
    if n == 0 {
        buf[0] = b'.';
    } else {
        let src = mem.host_ptr(GuestAddr(a.path), a.path_len).map_err(|_| libc::EFAULT)?;
        // SAFETY: `[src, src + n)` lies in guest memory (checked), mapped
        // readable for the tender; `buf` has room for n + 1 bytes.
        unsafe { core::ptr::copy_nonoverlapping(src, buf.as_mut_ptr(), n) };
        if buf[..n].contains(&0) {
            return Err(libc::EINVAL);
        }
    }
    buf[n.max(1)] = 0;
    Ok(&buf[..n.max(1) + 1])
}

/// Opens regular file `path` beneath `dir` for reading. The type first,
/// on an `O_PATH` descriptor: opening a device or a FIFO for reading can
/// have effects of its own.
fn open_regular(dir: RawFd, path: &[u8]) -> Result<(Fd, libc::stat), i32> {
    let probe = open_beneath(dir, path, libc::O_PATH | libc::O_NOFOLLOW)?;
    let st = fstat(&probe)?;
    match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => {}
        libc::S_IFDIR => return Err(libc::EISDIR),
        // A link is never followed here (the guest's kernel does).
        libc::S_IFLNK => return Err(libc::ELOOP),
        _ => return Err(libc::EINVAL),
    }
    let fd = open_beneath(dir, path, libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK)?;
    let now = fstat(&fd)?;
    if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) {
        // Replaced in between: the guest asks again.
        return Err(libc::EAGAIN);
    }
    Ok((fd, now))
}

/// What a tender does for [`shoal_abi::HOSTFS_MAP`] and [`shoal_abi::HOSTFS_UNMAP`]: the
/// mapping itself, which differs (spt maps at the guest address, which is
/// a host address; hvt over its own mapping of guest-physical memory).
pub trait Mapper {
    /// Whether page-aligned `[addr, addr + len)` (no overflow) lies in the
    /// guest's free memory and stack: never the image, the boot-info page,
    /// the kernel's tables or anything of the tender's.
    fn free_memory(&self, addr: u64, len: u64) -> bool;
    /// Whether the guest may have executable pages (an unmodified
    /// executable's instance).
    fn exec_allowed(&self) -> bool;
    /// Maps `fd` (a regular file opened read-only beneath a mount) from
    /// `off` privately over `[addr, addr + len)` with `prot`
    /// (`PROT_READ`, perhaps with `PROT_EXEC`); a positive errno.
    fn map_file(&self, fd: RawFd, off: u64, addr: u64, len: u64, prot: u64) -> Result<(), i32>;
    /// Gives `[addr, addr + len)` fresh zero memory with `prot`.
    fn map_zero(&self, addr: u64, len: u64, prot: u64) -> Result<(), i32>;
}

/// Serves [`shoal_abi::HOSTFS_MAP`], [`shoal_abi::HOSTFS_MAP_EXEC`] and [`shoal_abi::HOSTFS_UNMAP`]; the
/// result (`ret`). Every argument is the guest's: the range must be page
/// aligned, non-empty, without overflow and inside the guest's free
/// memory ([`Mapper::free_memory`]), the file a regular file beneath the
/// mount (the same confinement as [`shoal_abi::HOSTFS_READ`]) and the offset page
/// aligned; only the file's whole pages are mapped, so no page past its
/// end (which would raise `SIGBUS`) is ever mapped.
pub fn serve_map(m: &Mounts, a: &HostFsArgs, mem: &GuestMemory, mapper: &dyn Mapper) -> i64 {
    match serve_map_inner(m, a, mem, mapper) {
        Ok(n) => n as i64,
        Err(e) => neg(e),
    }
}

fn serve_map_inner(m: &Mounts, a: &HostFsArgs, mem: &GuestMemory, mapper: &dyn Mapper) -> Result<u64, i32> {
    if m.is_empty() {
        return Err(libc::ENOSYS);
    }
    let aligned = |x: u64| x.is_multiple_of(PAGE_SIZE);
    if a.len == 0 || !aligned(a.buf) || !aligned(a.len) {
        return Err(libc::EINVAL);
    }
    if a.buf.checked_add(a.len).is_none() || !mapper.free_memory(a.buf, a.len) {
        return Err(libc::EFAULT);
    }
    if a.op == HOSTFS_UNMAP {
        let prot = a.off;
        if prot & !(PROT_READ | PROT_WRITE | PROT_EXEC) != 0 || (prot & PROT_EXEC != 0 && !mapper.exec_allowed()) {
            return Err(libc::EINVAL);
        }
        mapper.map_zero(a.buf, a.len, prot)?;
        return Ok(0);
    }
    let prot = if a.op == HOSTFS_MAP_EXEC { PROT_READ | PROT_EXEC } else { PROT_READ };
    if (prot & PROT_EXEC != 0 && !mapper.exec_allowed()) || !aligned(a.off) {
        return Err(libc::EINVAL);
    }
    let i = usize::try_from(a.mount).map_err(|_| libc::EINVAL)?;
    let dir = m.fd(i).ok_or(libc::EINVAL)?;
    let opened;
    let (fd, st) = if m.is_file(i) {
        // A single-file mount: its own descriptor, never another file.
        if a.path_len != 0 {
            return Err(libc::ENOTDIR);
        }
        let file = core::mem::ManuallyDrop::new(Fd(dir));
        (dir, fstat(&file)?)
    } else {
        let mut buf = [0u8; HOSTFS_PATH_MAX as usize + 2];
        let path = guest_path(a, mem, &mut buf)?;
        let (fd, st) = open_regular(dir, path)?;
        opened = fd;
        (opened.0, st)
    };
    // The whole pages inside the file from `off` on.
    let size = (st.st_size.max(0) as u64).div_ceil(PAGE_SIZE) * PAGE_SIZE;
    let len = size.saturating_sub(a.off).min(a.len);
    if len > 0 {
        mapper.map_file(fd, a.off, a.buf, len, prot)?;
    }
    Ok(len)
}

/// Copies the directory's `linux_dirent64` records from entry number
/// `skip` on into `out`, each record's `d_off` rewritten to the number of
/// the entry after it.
fn list(fd: &Fd, skip: u64, out: &mut [u8]) -> Result<u64, i32> {
    let mut chunk = [0u8; 8192];
    let mut index = 0u64;
    let mut written = 0usize;
    loop {
        let n = getdents64(fd, &mut chunk)?;
        if n == 0 {
            return Ok(written as u64);
        }
        let mut at = 0usize;
        while at + 19 <= n {
            let reclen = usize::from(u16::from_ne_bytes([chunk[at + 16], chunk[at + 17]]));
            if reclen < 19 || at + reclen > n {
                return Err(libc::EIO);
            }
            if index >= skip {
                if written + reclen > out.len() {
                    return if written == 0 { Err(libc::EINVAL) } else { Ok(written as u64) };
                }
                let rec = &mut out[written..written + reclen];
                rec.copy_from_slice(&chunk[at..at + reclen]);
                rec[8..16].copy_from_slice(&(index + 1).to_ne_bytes());
                written += reclen;
            }
            index += 1;
            at += reclen;
        }
    }
}

/// `path` (NUL-terminated) split into its parent (NUL-terminated, `.` for
/// the mount's top) and its last name, which must be a plain name.
fn split_last<'b>(path: &[u8], parent: &'b mut [u8; HOSTFS_PATH_MAX as usize + 2]) -> Result<(&'b [u8], [u8; 256]), i32> {
    let body = &path[..path.len() - 1];
    let (up, name) = match body.iter().rposition(|&c| c == b'/') {
        Some(k) => (&body[..k], &body[k + 1..]),
        None => (&b"."[..], body),
    };
    if name.is_empty() || name == b"." || name == b".." || name.len() > 255 || up.is_empty() {
        return Err(libc::EINVAL);
    }
    parent[..up.len()].copy_from_slice(up);
    parent[up.len()] = 0;
    let mut n = [0u8; 256];
    n[..name.len()].copy_from_slice(name);
    Ok((&parent[..up.len() + 1], n))
}

/// A regular file beneath `dir` opened with `flags` (never a link, a
/// device or a FIFO: checked on an `O_PATH` look first, as for reading).
fn open_regular_for(dir: RawFd, path: &[u8], flags: i32) -> Result<Fd, i32> {
    let probe = open_beneath(dir, path, libc::O_PATH | libc::O_NOFOLLOW)?;
    let st = fstat(&probe)?;
    match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => {}
        libc::S_IFDIR => return Err(libc::EISDIR),
        libc::S_IFLNK => return Err(libc::ELOOP),
        _ => return Err(libc::EINVAL),
    }
    let fd = open_beneath(dir, path, flags | libc::O_NOFOLLOW | libc::O_NONBLOCK)?;
    let now = fstat(&fd)?;
    if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) {
        return Err(libc::EAGAIN);
    }
    Ok(fd)
}

/// `r` of a system call as a result.
fn check(r: i64) -> Result<u64, i32> {
    if r < 0 {
        Err(errno())
    } else {
        Ok(r as u64)
    }
}

/// The calls that change a writable mount (module docs).
fn serve_write(m: &Mounts, dir: RawFd, path: &[u8], a: &HostFsArgs, mem: &GuestMemory) -> Result<u64, i32> {
    let mode = (a.off & 0o7777) as libc::mode_t;
    // What was just made gets exactly the guest's mode (the tender's
    // umask must not cut it again) and, on hvt as root, the guest's owner.
    let given = |fd: &Fd, mode: libc::mode_t| -> Result<u64, i32> {
        if let Some((uid, gid)) = m.owner {
            // SAFETY: a plain call on a descriptor this module owns.
            check(unsafe { libc::syscall(libc::SYS_fchown, fd.0, uid, gid) })?;
        }
        // SAFETY: a plain call on a descriptor this module owns.
        check(unsafe { libc::syscall(libc::SYS_fchmod, fd.0, mode) }).map(|_| 0)
    };
    match a.op {
        HOSTFS_CREATE => {
            let made = open_beneath_mode(dir, path, libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK, mode);
            match made {
                Ok(fd) => given(&fd, mode),
                // Kept as it is (Linux's open(O_CREAT) of an existing file),
                // if it is a regular file.
                Err(libc::EEXIST) if a.len & 1 == 0 => open_regular_for(dir, path, libc::O_RDONLY).map(|_| 0),
                Err(e) => Err(e),
            }
        }
        HOSTFS_WRITE => {
            let fd = open_regular_for(dir, path, libc::O_WRONLY)?;
            let len = a.len.min(HOSTFS_IO_MAX);
            let src = mem.host_ptr(GuestAddr(a.buf), len).map_err(|_| libc::EFAULT)?;
            let off = i64::try_from(a.off).map_err(|_| libc::EFBIG)?;
            // SAFETY: `[src, src + len)` lies in guest memory (checked),
            // mapped readable for the tender; the host kernel only reads it.
            check(unsafe { libc::syscall(libc::SYS_pwrite64, fd.0, src, len as usize, off) })
        }
        HOSTFS_TRUNCATE => {
            let fd = open_regular_for(dir, path, libc::O_WRONLY)?;
            let len = i64::try_from(a.off).map_err(|_| libc::EFBIG)?;
            // SAFETY: a plain call on a descriptor this module owns.
            check(unsafe { libc::syscall(libc::SYS_ftruncate, fd.0, len) })
        }
        HOSTFS_FSYNC => {
            let fd = open_regular_for(dir, path, libc::O_RDONLY)?;
            // SAFETY: a plain call on a descriptor this module owns.
            check(unsafe { libc::syscall(libc::SYS_fsync, fd.0) })
        }
        HOSTFS_UNLINK | HOSTFS_RMDIR | HOSTFS_MKDIR | HOSTFS_CHMOD | HOSTFS_UTIMES => {
            let mut up = [0u8; HOSTFS_PATH_MAX as usize + 2];
            let (up, name) = split_last(path, &mut up)?;
            let pfd = open_beneath(dir, up, libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW)?;
            let name = name.as_ptr().cast::<libc::c_char>();
            match a.op {
                // SAFETY: `name` is one plain NUL-terminated name, removed
                // from `pfd` (a link itself, never what it points at).
                HOSTFS_UNLINK => check(unsafe { libc::syscall(libc::SYS_unlinkat, pfd.0, name, 0) }),
                // SAFETY: as above, for an empty directory.
                HOSTFS_RMDIR => check(unsafe { libc::syscall(libc::SYS_unlinkat, pfd.0, name, libc::AT_REMOVEDIR) }),
                HOSTFS_MKDIR => {
                    // SAFETY: one plain NUL-terminated name made in `pfd`.
                    check(unsafe { libc::syscall(libc::SYS_mkdirat, pfd.0, name, mode) })?;
                    let fd = open_beneath(dir, path, libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW)?;
                    given(&fd, mode)
                }
                HOSTFS_CHMOD => {
                    // chmod follows a last link and fchmod needs a real
                    // descriptor: open the file or directory itself (never
                    // a link, device or FIFO) and change that.
                    let probe = open_beneath(dir, path, libc::O_PATH | libc::O_NOFOLLOW)?;
                    let st = fstat(&probe)?;
                    let extra = match st.st_mode & libc::S_IFMT {
                        libc::S_IFREG => 0,
                        libc::S_IFDIR => libc::O_DIRECTORY,
                        libc::S_IFLNK => return Err(libc::EOPNOTSUPP),
                        _ => return Err(libc::EINVAL),
                    };
                    let fd = open_beneath(dir, path, libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | extra)?;
                    let now = fstat(&fd)?;
                    if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) {
                        return Err(libc::EAGAIN);
                    }
                    // SAFETY: a plain call on a descriptor this module owns.
                    check(unsafe { libc::syscall(libc::SYS_fchmod, fd.0, mode) })
                }
                _ => {
                    let ts = guest_timespecs(a, mem)?;
                    // SAFETY: one plain NUL-terminated name in `pfd`, not
                    // followed if a link; `ts` is two valid timespecs'
                    // worth of memory (the host checks their values).
                    check(unsafe { libc::syscall(libc::SYS_utimensat, pfd.0, name, ts.as_ptr(), libc::AT_SYMLINK_NOFOLLOW) })
                }
            }
        }
        HOSTFS_RENAME => {
            let mut to = [0u8; HOSTFS_PATH_MAX as usize + 2];
            let to = guest_path(&HostFsArgs { path: a.buf, path_len: a.len, ..*a }, mem, &mut to)?;
            let mut up1 = [0u8; HOSTFS_PATH_MAX as usize + 2];
            let mut up2 = [0u8; HOSTFS_PATH_MAX as usize + 2];
            let (up1, n1) = split_last(path, &mut up1)?;
            let (up2, n2) = split_last(to, &mut up2)?;
            let p1 = open_beneath(dir, up1, libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW)?;
            let p2 = open_beneath(dir, up2, libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW)?;
            let flags = (a.off & u64::from(libc::RENAME_NOREPLACE | libc::RENAME_EXCHANGE)) as u32;
            // SAFETY: two plain NUL-terminated names, each in a directory
            // opened beneath the mount; renameat2 follows no link in them.
            check(unsafe { libc::syscall(libc::SYS_renameat2, p1.0, n1.as_ptr(), p2.0, n2.as_ptr(), flags) })
        }
        _ => Err(libc::EINVAL),
    }
}
