//! The `HostFs` hypercall (`--mount HOSTDIR:GUESTDIR:ro`): the host side
//! of a read-only host directory, the same for spt and hvt
//! (docs/architecture.md "Read-only host directories").
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
//! No allocation (spt calls this from its hypercall handler, where the
//! filter forbids `mmap`): paths and directory records go through stack
//! buffers.

use shoal_abi::{
    HostFsArgs, HostStat, HOSTFS_IO_MAX, HOSTFS_LIST, HOSTFS_MAP_EXEC, HOSTFS_MOUNT, HOSTFS_PATH_MAX, HOSTFS_READ, HOSTFS_READLINK, HOSTFS_STAT, HOSTFS_UNMAP,
    PAGE_SIZE, PROT_EXEC, PROT_READ, PROT_WRITE,
};
use shoal_loader::{GuestAddr, GuestMemory};
use std::os::fd::RawFd;

/// Most `--mount`s an instance has.
pub const MAX_MOUNTS: usize = 16;
/// Longest guest directory of a mount.
pub const GUEST_PATH_MAX: usize = 255;

/// The mounts of an instance: the host directory's descriptor (`O_PATH`)
/// and the guest directory of each.
#[derive(Clone, Copy, Debug)]
pub struct Mounts {
    count: usize,
    fds: [RawFd; MAX_MOUNTS],
    paths: [[u8; GUEST_PATH_MAX]; MAX_MOUNTS],
    lens: [usize; MAX_MOUNTS],
}

impl Default for Mounts {
    fn default() -> Self {
        Mounts { count: 0, fds: [-1; MAX_MOUNTS], paths: [[0; GUEST_PATH_MAX]; MAX_MOUNTS], lens: [0; MAX_MOUNTS] }
    }
}

impl Mounts {
    /// Adds a mount; `false` if the table is full or the guest path too
    /// long (the front end refuses both before).
    pub fn push(&mut self, fd: RawFd, guest: &[u8]) -> bool {
        if self.count == MAX_MOUNTS || guest.len() > GUEST_PATH_MAX {
            return false;
        }
        self.fds[self.count] = fd;
        self.paths[self.count][..guest.len()].copy_from_slice(guest);
        self.lens[self.count] = guest.len();
        self.count += 1;
        true
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
    debug_assert_eq!(path.last(), Some(&0));
    // openat2 refuses any flag O_PATH does not take (O_NOCTTY among them).
    let extra = if flags & libc::O_PATH != 0 { libc::O_CLOEXEC } else { libc::O_CLOEXEC | libc::O_NOCTTY };
    let how = OpenHow { flags: (flags | extra) as u64, mode: 0, resolve: RESOLVE };
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
    let dir = m.fd(i).ok_or(libc::EINVAL)?;
    let mut buf = [0u8; HOSTFS_PATH_MAX as usize + 2];
    let path = guest_path(a, mem, &mut buf)?;
    match a.op {
        HOSTFS_STAT => {
            let fd = open_beneath(dir, path, libc::O_PATH | libc::O_NOFOLLOW)?;
            let st = host_stat(&fstat(&fd)?);
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
    let mut buf = [0u8; HOSTFS_PATH_MAX as usize + 2];
    let path = guest_path(a, mem, &mut buf)?;
    let (fd, st) = open_regular(dir, path)?;
    // The whole pages inside the file from `off` on.
    let size = (st.st_size.max(0) as u64).div_ceil(PAGE_SIZE) * PAGE_SIZE;
    let len = size.saturating_sub(a.off).min(a.len);
    if len > 0 {
        mapper.map_file(fd.0, a.off, a.buf, len, prot)?;
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
