//! More file-system calls: owners, file-system statistics, old time
//! calls, space allocation, positioned vector I/O, in-kernel copies,
//! advice, `mknod`, the old `getdents`.

use shoal_plat::{umem, Args, Errno, SysResult};
use shoal_ramfs::{FileType, Ino, Timespec};

use crate::abi::*;
use crate::{Target, Vfs};

/// `f_type` of tmpfs (what shoal's root is most like).
pub const TMPFS_MAGIC: i64 = 0x0102_1994;
/// `f_type` of pipefs (pipes, and the standard streams, which behave
/// like pipes).
pub const PIPEFS_MAGIC: i64 = 0x5049_5045;

/// `struct statfs` of x86-64 Linux (120 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Statfs {
    pub f_type: i64,
    pub f_bsize: i64,
    pub f_blocks: u64,
    pub f_bfree: u64,
    pub f_bavail: u64,
    pub f_files: u64,
    pub f_ffree: u64,
    pub f_fsid: [i32; 2],
    pub f_namelen: i64,
    pub f_frsize: i64,
    pub f_flags: i64,
    pub f_spare: [i64; 4],
}

const S_IFMT: u32 = 0o170000;
const S_IFREG: u32 = 0o100000;
const S_IFDIR: u32 = 0o040000;
const S_IFCHR: u32 = 0o020000;
const S_IFBLK: u32 = 0o060000;
const S_IFIFO: u32 = 0o010000;
const S_IFSOCK: u32 = 0o140000;
/// `EADDRINUSE` and `ECONNREFUSED`, which `Errno` does not name.
const EADDRINUSE: Errno = Errno(98);
const ECONNREFUSED: Errno = Errno(111);

impl Vfs {
    // ---- owners --------------------------------------------------------

    fn do_chown(&mut self, t: Target, uid: u32, gid: u32) -> SysResult {
        let (u, g) = ((uid != u32::MAX).then_some(uid), (gid != u32::MAX).then_some(gid));
        let Some(ino) = t.ino() else { return Ok(0) };
        if u.is_none() && g.is_none() {
            // Linux still updates the change time.
            self.fs.chown(ino, None, None)?;
            self.note_inode(ino, crate::notify::IN_ATTRIB);
            return Ok(0);
        }
        let a = self.fs.attr(ino)?;
        self.fs.chown(ino, u, g)?;
        // A change of owner clears set-user-ID, and set-group-ID when the
        // group can execute, on non-directories (as Linux does, for root too).
        if a.ftype != FileType::Directory && a.mode & 0o6000 != 0 {
            let mut perm = a.mode & 0o7777 & !0o4000;
            if a.mode & 0o010 != 0 {
                perm &= !0o2000;
            }
            self.fs.chmod(ino, perm)?;
        }
        self.note_inode(ino, crate::notify::IN_ATTRIB);
        Ok(0)
    }

    pub(crate) fn chown(&mut self, a: &Args) -> SysResult {
        let ino = self.resolve_at(AT_FDCWD, path(a.u(0))?, true, false)?;
        self.do_chown(Target::Node(ino), a.uint(1), a.uint(2))
    }

    pub(crate) fn lchown(&mut self, a: &Args) -> SysResult {
        let ino = self.resolve_at(AT_FDCWD, path(a.u(0))?, false, false)?;
        self.do_chown(Target::Node(ino), a.uint(1), a.uint(2))
    }

    pub(crate) fn fchown(&mut self, a: &Args) -> SysResult {
        let o = self.ofd(self.ofd_of(a.int(0))?);
        if o.is_path() {
            return Err(Errno::EBADF);
        }
        let t = o.target;
        self.do_chown(t, a.uint(1), a.uint(2))
    }

    pub(crate) fn fchownat(&mut self, a: &Args) -> SysResult {
        let flags = a.uint(4);
        if flags & !(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH) != 0 {
            return Err(Errno::EINVAL);
        }
        let t = self.target_at(a.int(0), path(a.u(1))?, flags)?;
        self.do_chown(t, a.uint(2), a.uint(3))
    }

    // ---- statfs --------------------------------------------------------

    fn statfs_of(&self, t: Target) -> Statfs {
        let pipe = match t {
            Target::Stdin | Target::Stdout | Target::Stderr => true,
            Target::Fifo(ino) => self.fs.is_unlinked(ino),
            _ => false,
        };
        let (total, free) = shoal_mm::stats();
        let (blocks, bfree) = (total / 4096, free / 4096);
        let used = self.fs.inode_count() as u64;
        Statfs {
            f_type: if pipe { PIPEFS_MAGIC } else { TMPFS_MAGIC },
            f_bsize: 4096,
            f_blocks: if pipe { 0 } else { blocks },
            f_bfree: if pipe { 0 } else { bfree },
            f_bavail: if pipe { 0 } else { bfree },
            f_files: if pipe { 0 } else { used + bfree },
            f_ffree: if pipe { 0 } else { bfree },
            f_fsid: [0, 0],
            f_namelen: 255,
            f_frsize: 4096,
            // ST_VALID | ST_RELATIME (tmpfs mounted with defaults).
            f_flags: 0x20 | 0x400,
            f_spare: [0; 4],
        }
    }

    pub(crate) fn statfs(&mut self, a: &Args) -> SysResult {
        let ino = self.resolve_at(AT_FDCWD, path(a.u(0))?, true, false)?;
        umem::write(a.u(1), self.statfs_of(Target::Node(ino)))?;
        Ok(0)
    }

    pub(crate) fn fstatfs(&mut self, a: &Args) -> SysResult {
        let t = self.ofd(self.ofd_of(a.int(0))?).target;
        umem::write(a.u(1), self.statfs_of(t))?;
        Ok(0)
    }

    // ---- old time calls ------------------------------------------------

    fn do_utimes(&mut self, dirfd: i32, path_addr: u64, times: u64) -> SysResult {
        let t = self.target_at(dirfd, path(path_addr)?, 0)?;
        let Some(ino) = t.ino() else { return Ok(0) };
        let (at, mt) = if times == 0 {
            let now = self.fs.now();
            (now, now)
        } else {
            let tv: [i64; 4] = umem::read(times)?;
            for us in [tv[1], tv[3]] {
                if !(0..1_000_000).contains(&us) {
                    return Err(Errno::EINVAL);
                }
            }
            (Timespec { sec: tv[0], nsec: tv[1] as u32 * 1000 }, Timespec { sec: tv[2], nsec: tv[3] as u32 * 1000 })
        };
        self.fs.set_times(ino, Some(at), Some(mt))?;
        self.note_inode(ino, crate::notify::IN_ATTRIB);
        Ok(0)
    }

    pub(crate) fn utimes(&mut self, a: &Args) -> SysResult {
        self.do_utimes(AT_FDCWD, a.u(0), a.u(1))
    }

    pub(crate) fn futimesat(&mut self, a: &Args) -> SysResult {
        self.do_utimes(a.int(0), a.u(1), a.u(2))
    }

    // ---- space ---------------------------------------------------------

    /// `fallocate(fd, mode, offset, len)`: mode 0 only (others
    /// `EOPNOTSUPP`); extends the file to `offset + len` if shorter.
    pub(crate) fn fallocate(&mut self, a: &Args) -> SysResult {
        let (mode, off, len) = (a.int(1), a.i(2), a.i(3));
        let o = self.ofd(self.ofd_of(a.int(0))?);
        if off < 0 || len <= 0 {
            return Err(Errno::EINVAL);
        }
        if !o.writable() {
            return Err(Errno::EBADF);
        }
        let ino = match o.target {
            Target::Node(ino) => match self.fs.file_type(ino)? {
                FileType::Regular => ino,
                FileType::Directory => return Err(Errno::EISDIR),
                _ => return Err(Errno::ENODEV),
            },
            Target::Fifo(_) | Target::Stdin | Target::Stdout | Target::Stderr => return Err(Errno::ESPIPE),
            Target::Dev(..) | Target::Obj(_) => return Err(Errno::ENODEV),
        };
        if mode != 0 {
            return Err(Errno::EOPNOTSUPP);
        }
        let end = off.checked_add(len).ok_or(Errno::EFBIG)? as u64;
        if end > self.fs.size(ino)? {
            self.fsize_check(end)?;
            self.fs.truncate(ino, end)?;
        }
        self.note_inode(ino, crate::notify::IN_MODIFY);
        Ok(0)
    }

    // ---- positioned vector I/O ------------------------------------------

    /// What the `RWF_*` flags of `preadv2`/`pwritev2` mean for description
    /// `i`, as Linux 6.18 decides them for tmpfs, pipes, sockets and the
    /// memory devices (`kiocb_set_rw_flags`): unknown flags and
    /// `RWF_ATOMIC`/`RWF_DONTCACHE` (which tmpfs cannot do) are
    /// `EOPNOTSUPP`, as is `RWF_NOWAIT` on a file that cannot promise not to
    /// wait (regular files and directories of tmpfs, `/dev/full`);
    /// `RWF_APPEND` with `RWF_NOAPPEND` is `EINVAL`. `RWF_HIPRI`,
    /// `RWF_DSYNC` and `RWF_SYNC` ask nothing of memory-backed files.
    /// `RWF_NOSIGNAL` (no `SIGPIPE`) is the syscall table's. Returns the
    /// append mode this call overrides the description's with, if any.
    fn rw_flags(&self, i: usize, flags: u32, write: bool) -> Result<Option<bool>, Errno> {
        if flags == 0 {
            return Ok(None);
        }
        if flags & !RWF_SUPPORTED != 0 {
            return Err(Errno::EOPNOTSUPP);
        }
        if flags & RWF_APPEND != 0 && flags & RWF_NOAPPEND != 0 {
            return Err(Errno::EINVAL);
        }
        let target = self.ofd(i).target;
        // /dev/full writes without iterators: only RWF_HIPRI is allowed.
        let full = matches!(target, Target::Dev(_, crate::dev::Device::Full));
        if full && write && flags & !RWF_HIPRI != 0 {
            return Err(Errno::EOPNOTSUPP);
        }
        let nowait_ok = !full && !matches!(target, Target::Node(_));
        if flags & RWF_NOWAIT != 0 && !nowait_ok {
            return Err(Errno::EOPNOTSUPP);
        }
        if flags & (RWF_ATOMIC | RWF_DONTCACHE) != 0 {
            return Err(Errno::EOPNOTSUPP);
        }
        Ok(if flags & RWF_APPEND != 0 {
            Some(true)
        } else if flags & RWF_NOAPPEND != 0 {
            Some(false)
        } else {
            None
        })
    }

    /// Vector I/O on `a`'s descriptor: at `pos` (`None`: the description's
    /// offset, which then moves), with `RWF_*` `flags`.
    fn vec_io(&mut self, a: &Args, pos: Option<i64>, flags: u32, write: bool) -> SysResult {
        if pos.is_some_and(|p| p < 0) {
            return Err(Errno::EINVAL);
        }
        let i = self.ofd_of(a.int(0))?;
        let o = self.ofd(i);
        if (write && !o.writable()) || (!write && !o.readable()) {
            return Err(Errno::EBADF);
        }
        let mut pos = match pos {
            None => None,
            Some(p) => Some(self.pos_arg(i, p)?),
        };
        let iov = Self::iovecs(a.u(1), a.int(2))?;
        let append = self.rw_flags(i, flags, write)?;
        let mut total = 0usize;
        for (base, len) in iov {
            let r = if write { self.do_write_as(i, umem::slice(base, len)?, pos, append) } else { self.do_read(i, umem::slice_mut(base, len)?, pos) };
            let n = match r {
                Ok(n) => n,
                Err(e) if total == 0 => return Err(e),
                Err(_) => break,
            };
            total += n;
            if let Some(p) = pos.as_mut() {
                *p += n as u64;
            }
            if n < len {
                break;
            }
        }
        Ok(total as u64)
    }

    pub(crate) fn preadv(&mut self, a: &Args) -> SysResult {
        self.vec_io(a, Some(a.i(3)), 0, false)
    }

    pub(crate) fn pwritev(&mut self, a: &Args) -> SysResult {
        self.vec_io(a, Some(a.i(3)), 0, true)
    }

    /// `preadv2`: offset -1 means the description's offset.
    pub(crate) fn preadv2(&mut self, a: &Args) -> SysResult {
        self.vec_io(a, Some(a.i(3)).filter(|&p| p != -1), a.uint(5), false)
    }

    /// `pwritev2`: offset -1 means the description's offset.
    pub(crate) fn pwritev2(&mut self, a: &Args) -> SysResult {
        self.vec_io(a, Some(a.i(3)).filter(|&p| p != -1), a.uint(5), true)
    }

    // ---- in-kernel copies ----------------------------------------------

    /// Copies up to `count` bytes from description `src` (at `*src_pos`
    /// if given, else its offset) to `dst` (at `dst_pos`, else its offset).
    fn copy(
        &mut self,
        src: usize,
        mut src_pos: Option<u64>,
        dst: usize,
        mut dst_pos: Option<u64>,
        count: usize,
    ) -> Result<(usize, Option<u64>, Option<u64>), Errno> {
        let mut buf = alloc::vec::Vec::new();
        let mut total = 0;
        while total < count {
            // A file still as the root archive has it (what `static`
            // servers send) is written straight from the archive's bytes
            // in guest memory: no copy through `buf` (the process backend's
            // sendfile sends from the page cache without one either).
            if let Some(data) = self.archive_bytes(src, src_pos, count - total) {
                let n = data.len();
                let w = match self.do_write(dst, data, dst_pos) {
                    Ok(w) => w,
                    Err(e) if total == 0 => return Err(e),
                    Err(_) => 0,
                };
                total += w;
                match src_pos.as_mut() {
                    Some(p) => *p += w as u64,
                    None => self.ofd_mut(src).offset += w as u64,
                }
                if let Some(p) = dst_pos.as_mut() {
                    *p += w as u64;
                }
                if let Target::Node(ino) = self.ofd(src).target {
                    self.fs.touch_atime(ino);
                }
                if w < n {
                    break;
                }
                continue;
            }
            if buf.is_empty() {
                buf = alloc::vec![0u8; count.min(65536)];
            }
            let want = (count - total).min(buf.len());
            let n = match self.do_read(src, &mut buf[..want], src_pos) {
                Ok(n) => n,
                Err(e) if total == 0 => return Err(e),
                Err(_) => break,
            };
            if n == 0 {
                break;
            }
            let w = match self.do_write(dst, &buf[..n], dst_pos) {
                Ok(w) => w,
                Err(e) if total == 0 => return Err(e),
                Err(_) => 0,
            };
            total += w;
            if let Some(p) = src_pos.as_mut() {
                *p += w as u64;
            }
            if let Some(p) = dst_pos.as_mut() {
                *p += w as u64;
            }
            if w < n {
                // Give back what was read but not written.
                if src_pos.is_none() {
                    let o = self.ofd_mut(src);
                    if matches!(o.target, Target::Node(_)) {
                        o.offset -= (n - w) as u64;
                    }
                }
                break;
            }
        }
        Ok((total, src_pos, dst_pos))
    }

    /// Up to `max` bytes of description `src` at `pos` (else its offset)
    /// as a slice of the read-only root archive, if `src` is a regular
    /// file whose bytes there still come from the archive.
    fn archive_bytes(&self, src: usize, pos: Option<u64>, max: usize) -> Option<&'static [u8]> {
        let o = self.ofd(src);
        match o.target {
            Target::Node(ino) => self.fs.base_slice(ino, pos.unwrap_or(o.offset), max),
            _ => None,
        }
    }

    /// `sendfile(out_fd, in_fd, offset, count)`: the input must be a
    /// regular file or a device (`EINVAL` otherwise, as Linux), the output
    /// anything writable but an `O_APPEND` file.
    pub(crate) fn sendfile(&mut self, a: &Args) -> SysResult {
        let (out_fd, in_fd, off_addr) = (a.int(0), a.int(1), a.u(2));
        let src = self.ofd_of(in_fd)?;
        let dst = self.ofd_of(out_fd)?;
        if !self.ofd(src).readable() || !self.ofd(dst).writable() {
            return Err(Errno::EBADF);
        }
        match self.ofd(src).target {
            // `ftype`: a mounted file (a container's root mount) is sent too.
            Target::Node(ino) if self.ftype(ino)? == FileType::Regular => {}
            Target::Dev(..) => {}
            _ => return Err(Errno::EINVAL),
        }
        if self.ofd(dst).flags & O_APPEND != 0 {
            return Err(Errno::EINVAL);
        }
        let pos = if off_addr != 0 {
            let p: i64 = umem::read(off_addr)?;
            if p < 0 {
                return Err(Errno::EINVAL);
            }
            Some(p as u64)
        } else {
            None
        };
        let (n, pos, _) = self.copy(src, pos, dst, None, a.usize(3).min(MAX_RW_COUNT))?;
        if let Some(p) = pos {
            umem::write(off_addr, p as i64)?;
        }
        Ok(n as u64)
    }

    /// `copy_file_range(fd_in, off_in, fd_out, off_out, len, flags)`
    /// between regular files.
    pub(crate) fn copy_file_range(&mut self, a: &Args) -> SysResult {
        if a.uint(5) != 0 {
            return Err(Errno::EINVAL);
        }
        let src = self.ofd_of(a.int(0))?;
        let dst = self.ofd_of(a.int(2))?;
        if !self.ofd(src).readable() || !self.ofd(dst).writable() || self.ofd(dst).flags & O_APPEND != 0 {
            return Err(Errno::EBADF);
        }
        let (si, di) = match (self.ofd(src).target, self.ofd(dst).target) {
            (Target::Node(s), Target::Node(d)) => (s, d),
            _ => return Err(Errno::EINVAL),
        };
        for ino in [si, di] {
            match self.ftype(ino)? {
                FileType::Regular => {}
                FileType::Directory => return Err(Errno::EISDIR),
                _ => return Err(Errno::EINVAL),
            }
        }
        let rd = |addr: u64| -> Result<Option<u64>, Errno> {
            if addr == 0 {
                return Ok(None);
            }
            let p: i64 = umem::read(addr)?;
            if p < 0 {
                return Err(Errno::EINVAL);
            }
            Ok(Some(p as u64))
        };
        let (sp, dp) = (rd(a.u(1))?, rd(a.u(3))?);
        let len = a.usize(4).min(MAX_RW_COUNT);
        if si == di {
            let s = sp.unwrap_or(self.ofd(src).offset);
            let d = dp.unwrap_or(self.ofd(dst).offset);
            if s < d.saturating_add(len as u64) && d < s.saturating_add(len as u64) {
                return Err(Errno::EINVAL);
            }
        }
        let (n, sp2, dp2) = self.copy(src, sp, dst, dp, len)?;
        if let Some(p) = sp2 {
            umem::write(a.u(1), p as i64)?;
        }
        if let Some(p) = dp2 {
            umem::write(a.u(3), p as i64)?;
        }
        Ok(n as u64)
    }

    // ---- advice and syncing ----------------------------------------------

    /// A descriptor that advice applies to: `EBADF` if not open (or a
    /// path descriptor), `ESPIPE` for pipes.
    fn advice_target(&self, fd: i32) -> Result<Target, Errno> {
        let o = self.ofd(self.ofd_of(fd)?);
        if o.is_path() {
            return Err(Errno::EBADF);
        }
        match o.target {
            Target::Fifo(_) | Target::Stdin | Target::Stdout | Target::Stderr | Target::Obj(_) => Err(Errno::ESPIPE),
            t => Ok(t),
        }
    }

    pub(crate) fn readahead(&mut self, a: &Args) -> SysResult {
        let o = self.ofd(self.ofd_of(a.int(0))?);
        if !o.readable() {
            return Err(Errno::EBADF);
        }
        match o.target {
            Target::Node(ino) if self.fs.file_type(ino)? == FileType::Regular => Ok(0),
            _ => Err(Errno::EINVAL),
        }
    }

    pub(crate) fn fadvise64(&mut self, a: &Args) -> SysResult {
        self.advice_target(a.int(0))?;
        if a.i(2) < 0 || !(0..=5).contains(&a.int(3)) {
            return Err(Errno::EINVAL);
        }
        Ok(0)
    }

    pub(crate) fn sync_file_range(&mut self, a: &Args) -> SysResult {
        if a.uint(3) & !7 != 0 || a.i(1) < 0 || a.i(2) < 0 {
            return Err(Errno::EINVAL);
        }
        self.advice_target(a.int(0))?;
        Ok(0)
    }

    pub(crate) fn syncfs(&mut self, a: &Args) -> SysResult {
        self.ofd_of(a.int(0))?;
        Ok(0)
    }

    // ---- mknod ---------------------------------------------------------

    /// `mknod`: regular files, FIFOs and sockets' names; devices and
    /// directories are `EPERM` (shoal's devices are the ones in `/dev`).
    fn do_mknod(&mut self, dirfd: i32, path_addr: u64, mode: u32) -> SysResult {
        let path = path(path_addr)?;
        self.make_node(dirfd, path, mode).map(|_| 0)
    }

    /// Creates the node `mode` names at `path` (see [`Self::do_mknod`]).
    fn make_node(&mut self, dirfd: i32, path: &[u8], mode: u32) -> Result<Ino, Errno> {
        let kind = mode & S_IFMT;
        match kind {
            0 | S_IFREG | S_IFIFO | S_IFSOCK => {}
            S_IFCHR | S_IFBLK | S_IFDIR => return Err(Errno::EPERM),
            _ => return Err(Errno::EINVAL),
        }
        let start = self.start_dir(dirfd, path)?;
        let p = self.walk_parent(start, path, &mut 0)?;
        if p.is_special() || p.trailing {
            return Err(Errno::EEXIST);
        }
        let perm = mode & 0o7777 & !self.umask;
        if shoal_hostfs::is_host(p.dir) {
            self.ro_parent(&p, true)?;
            if kind == S_IFIFO || kind == S_IFSOCK {
                // No FIFOs or sockets are made on the host for a guest
                // (module host).
                return Err(Errno::EPERM);
            }
            shoal_hostfs::create(p.dir, p.name, perm, true)?;
            self.note_child(p.dir, crate::notify::IN_CREATE, p.name, 0);
            return self.lookup(p.dir, p.name);
        }
        let ino = match kind {
            S_IFIFO => self.fs.mkfifo(p.dir, p.name, perm),
            S_IFSOCK => self.fs.mksock(p.dir, p.name, perm),
            _ => self.fs.create_file(p.dir, p.name, perm),
        }?;
        self.note_child(p.dir, crate::notify::IN_CREATE, p.name, 0);
        Ok(ino)
    }

    /// `bind` of an `AF_UNIX` socket to `path` (absolute): makes the
    /// socket's node (`S_IFSOCK`, `0777` less the umask, as Linux makes
    /// it) and returns its inode; `EADDRINUSE` if the name exists.
    pub fn bind_socket_file(&mut self, path: &[u8]) -> Result<Ino, Errno> {
        self.make_node(AT_FDCWD, path, S_IFSOCK | 0o777).map_err(|e| if e == Errno::EEXIST { EADDRINUSE } else { e })
    }

    /// The socket node `path` (absolute) names, symbolic links followed,
    /// for `connect` and `sendto`: `ECONNREFUSED` for a node that is not a
    /// socket (and for a host's socket, which no guest socket serves).
    pub fn socket_file(&self, path: &[u8]) -> Result<Ino, Errno> {
        let ino = self.walk(self.fs.root(), path, true, &mut 0)?;
        if shoal_hostfs::is_host(ino) || self.ftype(ino)? != FileType::Socket {
            return Err(ECONNREFUSED);
        }
        Ok(ino)
    }

    /// Removes the socket node `ino` at `path` again (a `bind` that failed
    /// after making it).
    pub fn unbind_socket_file(&mut self, path: &[u8], ino: Ino) {
        let Ok(p) = self.walk_parent(self.fs.root(), path, &mut 0) else { return };
        if self.fs.lookup(p.dir, p.name).ok() == Some(ino) {
            let _ = self.fs.unlink(p.dir, p.name);
        }
    }

    pub(crate) fn mknod(&mut self, a: &Args) -> SysResult {
        self.do_mknod(AT_FDCWD, a.u(0), a.uint(1))
    }

    pub(crate) fn mknodat(&mut self, a: &Args) -> SysResult {
        self.do_mknod(a.int(0), a.u(1), a.uint(2))
    }

    // ---- the old getdents ------------------------------------------------

    /// `getdents(fd, buf, count)` with `struct linux_dirent` (`d_type` in
    /// the record's last byte).
    pub(crate) fn getdents(&mut self, a: &Args) -> SysResult {
        self.list_dir(a, push_dirent, true)
    }
}

/// `RWF_*` flags of `preadv2`/`pwritev2` (Linux 6.18).
pub const RWF_HIPRI: u32 = 0x01;
/// Per-write `O_DSYNC`.
pub const RWF_DSYNC: u32 = 0x02;
/// Per-write `O_SYNC`.
pub const RWF_SYNC: u32 = 0x04;
/// Fail with `EAGAIN` instead of waiting.
pub const RWF_NOWAIT: u32 = 0x08;
/// Per-write `O_APPEND`.
pub const RWF_APPEND: u32 = 0x10;
/// Per-write clearing of `O_APPEND`.
pub const RWF_NOAPPEND: u32 = 0x20;
/// Untorn writes (needs direct I/O support).
pub const RWF_ATOMIC: u32 = 0x40;
/// Drop the page cache after the I/O (not for tmpfs).
pub const RWF_DONTCACHE: u32 = 0x80;
/// No `SIGPIPE` on `EPIPE`.
pub const RWF_NOSIGNAL: u32 = 0x100;
/// Every flag Linux knows.
const RWF_SUPPORTED: u32 = RWF_HIPRI | RWF_DSYNC | RWF_SYNC | RWF_NOWAIT | RWF_APPEND | RWF_NOAPPEND | RWF_ATOMIC | RWF_DONTCACHE | RWF_NOSIGNAL;

// ---- extended attributes and close_range ---------------------------

/// Longest extended attribute name (`XATTR_NAME_MAX`).
const XATTR_NAME_MAX: usize = 255;
/// `close_range` flags.
const CLOSE_RANGE_UNSHARE: u32 = 2;
const CLOSE_RANGE_CLOEXEC: u32 = 4;

impl Vfs {
    /// The file an `*xattr` call names: `fd` for the `f` variants, else
    /// the path (its last link followed unless `l`), after the name's
    /// checks (`ERANGE` for an empty or too long name).
    fn xattr_target(&self, a: &Args, f: bool, l: bool, named: bool) -> Result<Target, Errno> {
        if named {
            let name = umem::cstr(a.u(1), XATTR_NAME_MAX + 1)?;
            if name.is_empty() || name.len() > XATTR_NAME_MAX {
                return Err(Errno::ERANGE);
            }
        }
        if f {
            return Ok(self.ofd(self.ofd_of(a.int(0))?).target);
        }
        self.target_at(AT_FDCWD, path(a.u(0))?, if l { AT_SYMLINK_NOFOLLOW } else { 0 })
    }

    /// `setxattr`, `getxattr`, `removexattr` and their `l`/`f` variants
    /// (`f`, `l`): shoal's file systems keep no extended attributes, so,
    /// as Linux answers for a file system without xattr handlers, every
    /// name is `EOPNOTSUPP` once the file is found (Python's `shutil`
    /// then copies without them).
    pub(crate) fn xattr_unsupported(&mut self, a: &Args, f: bool, l: bool) -> SysResult {
        self.xattr_target(a, f, l, true)?;
        Err(Errno::EOPNOTSUPP)
    }

    /// `listxattr` and its variants: an empty list (Linux's answer for a
    /// file system without xattr handlers and no security module).
    pub(crate) fn xattr_list(&mut self, a: &Args, f: bool, l: bool) -> SysResult {
        self.xattr_target(a, f, l, false)?;
        Ok(0)
    }

    /// `close_range(first, last, flags)`: closes (or, with
    /// `CLOSE_RANGE_CLOEXEC`, marks close-on-exec) every open descriptor
    /// from `first` to `last`; `CLOSE_RANGE_UNSHARE` changes nothing (one
    /// table per instance).
    pub(crate) fn close_range(&mut self, a: &Args) -> SysResult {
        let (first, last, flags) = (a.uint(0), a.uint(1), a.uint(2));
        if flags & !(CLOSE_RANGE_UNSHARE | CLOSE_RANGE_CLOEXEC) != 0 || first > last {
            return Err(Errno::EINVAL);
        }
        let end = (last as usize).min(self.fds.len().saturating_sub(1));
        for fd in first as usize..=end {
            if self.fds.get(fd).copied().flatten().is_none() {
                continue;
            }
            if flags & CLOSE_RANGE_CLOEXEC != 0 {
                if let Some(Some(e)) = self.fds.at_mut(fd) {
                    e.cloexec = true;
                }
            } else {
                self.close_fd(fd as i32)?;
            }
        }
        Ok(0)
    }
}

fn path(addr: u64) -> Result<&'static [u8], Errno> {
    umem::cstr(addr, PATH_MAX - 1)
}
