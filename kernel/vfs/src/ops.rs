//! The file-system system calls, as methods of [`Vfs`] taking the raw
//! arguments. Application memory is touched only through
//! `shoal_plat::umem`, so a bad pointer is `EFAULT`.

use alloc::vec::Vec;
use shoal_plat::{umem, Args, Errno, SysResult};
use shoal_ramfs::{Attr, FileType, Ino, RenameFlags, Timespec};

use crate::abi::*;
use crate::{Target, Vfs, MAX_FDS, PIPE_DEV, ROOT_DEV};

/// Reads a path argument.
pub(crate) fn path_arg(addr: u64) -> Result<&'static [u8], Errno> {
    umem::cstr(addr, PATH_MAX - 1)
}

/// What `stat` reports, for inodes and pipes alike.
pub(crate) struct Meta {
    dev: u64,
    ino: u64,
    mode: u32,
    nlink: u32,
    uid: u32,
    gid: u32,
    size: u64,
    blocks: u64,
    atime: Timespec,
    mtime: Timespec,
    ctime: Timespec,
    btime: Timespec,
    rdev: u64,
}

impl Meta {
    fn from_attr(a: Attr) -> Meta {
        Meta {
            dev: ROOT_DEV,
            ino: a.ino,
            mode: a.mode,
            nlink: a.nlink,
            uid: a.uid,
            gid: a.gid,
            size: a.size,
            blocks: a.blocks,
            atime: a.atime,
            mtime: a.mtime,
            ctime: a.ctime,
            btime: a.btime,
            rdev: a.rdev,
        }
    }

    fn stat(&self) -> Stat {
        Stat {
            st_dev: self.dev,
            st_ino: self.ino,
            st_nlink: self.nlink as u64,
            st_mode: self.mode,
            st_uid: self.uid,
            st_gid: self.gid,
            st_rdev: self.rdev,
            st_size: self.size as i64,
            st_blksize: 4096,
            st_blocks: self.blocks as i64,
            st_atime: self.atime.sec,
            st_atime_nsec: self.atime.nsec as i64,
            st_mtime: self.mtime.sec,
            st_mtime_nsec: self.mtime.nsec as i64,
            st_ctime: self.ctime.sec,
            st_ctime_nsec: self.ctime.nsec as i64,
            ..Stat::default()
        }
    }

    fn statx(&self) -> Statx {
        let ts = |t: Timespec| StatxTimestamp { tv_sec: t.sec, tv_nsec: t.nsec, reserved: 0 };
        Statx {
            stx_mask: STATX_BASIC_STATS | STATX_BTIME,
            stx_blksize: 4096,
            stx_nlink: self.nlink,
            stx_uid: self.uid,
            stx_gid: self.gid,
            stx_mode: self.mode as u16,
            stx_ino: self.ino,
            stx_size: self.size,
            stx_blocks: self.blocks,
            stx_atime: ts(self.atime),
            stx_btime: ts(self.btime),
            stx_ctime: ts(self.ctime),
            stx_mtime: ts(self.mtime),
            stx_rdev_major: (((self.rdev >> 32) & 0xffff_f000) | ((self.rdev >> 8) & 0xfff)) as u32,
            stx_rdev_minor: (((self.rdev >> 12) & 0xffff_ff00) | (self.rdev & 0xff)) as u32,
            stx_dev_major: 0,
            stx_dev_minor: self.dev as u32,
            ..Statx::default()
        }
    }
}

/// `S_IFIFO`.
const S_IFIFO: u32 = 0o010000;

impl Vfs {
    pub(crate) fn meta_of_target(&self, t: Target) -> Result<Meta, Errno> {
        let t = match t.ino() {
            Some(i) if i == self.console[0] => Target::Stdin,
            Some(i) if i == self.console[1] => Target::Stdout,
            Some(i) if i == self.console[2] => Target::Stderr,
            _ => t,
        };
        match t {
            Target::Node(ino) if shoal_hostfs::is_host(ino) => {
                let st = shoal_hostfs::stat(ino)?;
                let ts = |t: [i64; 2]| Timespec { sec: t[0], nsec: t[1].clamp(0, 999_999_999) as u32 };
                Ok(Meta {
                    dev: st.dev,
                    ino: st.ino,
                    mode: st.mode,
                    nlink: st.nlink,
                    uid: st.uid,
                    gid: st.gid,
                    size: st.size,
                    blocks: st.blocks,
                    atime: ts(st.atime),
                    mtime: ts(st.mtime),
                    ctime: ts(st.ctime),
                    btime: ts(st.ctime),
                    rdev: st.rdev,
                })
            }
            Target::Node(ino) | Target::Fifo(ino) | Target::Dev(ino, _) => {
                let mut m = Meta::from_attr(self.fs.attr(ino)?);
                if self.fs.is_unlinked(ino) && self.fs.file_type(ino)? == FileType::Fifo {
                    m.dev = PIPE_DEV; // an anonymous pipe lives in pipefs
                }
                Ok(m)
            }
            Target::Obj(id) => {
                let om = crate::obj::ops().ok_or(Errno::EBADF)?.meta(id);
                let t = self.pipe_time;
                Ok(Meta {
                    dev: om.dev,
                    ino: om.ino,
                    mode: om.mode,
                    nlink: 1,
                    uid: 0,
                    gid: 0,
                    size: 0,
                    blocks: 0,
                    atime: t,
                    mtime: t,
                    ctime: t,
                    btime: t,
                    rdev: 0,
                })
            }
            pipe => {
                let t = self.pipe_time;
                Ok(Meta {
                    dev: PIPE_DEV,
                    ino: match pipe {
                        Target::Stdin => 1,
                        Target::Stdout => 2,
                        _ => 3,
                    },
                    mode: S_IFIFO | 0o600,
                    nlink: 1,
                    uid: 0,
                    gid: 0,
                    size: 0,
                    blocks: 0,
                    atime: t,
                    mtime: t,
                    ctime: t,
                    btime: t,
                    rdev: 0,
                })
            }
        }
    }

    /// The target for a `*at` stat-like call, pipes included.
    pub(crate) fn target_at(&self, dirfd: i32, path: &[u8], flags: u32) -> Result<Target, Errno> {
        if path.is_empty() && flags & AT_EMPTY_PATH != 0 && dirfd != AT_FDCWD {
            return Ok(self.ofd(self.ofd_of(dirfd)?).target);
        }
        let ino = self.resolve_at(dirfd, path, flags & AT_SYMLINK_NOFOLLOW == 0, flags & AT_EMPTY_PATH != 0)?;
        Ok(Target::Node(ino))
    }

    // ---- reading and writing -------------------------------------------

    /// Reads into `buf` from description `i` at `pos` (None: its offset).
    pub(crate) fn do_read(&mut self, i: usize, buf: &mut [u8], pos: Option<u64>) -> Result<usize, Errno> {
        let o = self.ofd(i);
        if !o.readable() {
            return Err(Errno::EBADF);
        }
        match o.target {
            Target::Stdin => {
                if pos.is_some() {
                    return Err(Errno::ESPIPE);
                }
                shoal_plat::console::stdin_read(buf)
            }
            Target::Stdout | Target::Stderr => Err(Errno::EBADF),
            Target::Fifo(ino) => {
                if pos.is_some() {
                    return Err(Errno::ESPIPE);
                }
                let n = self.pipe_read(ino, buf)?;
                if n > 0 {
                    self.fs.touch_atime(ino);
                }
                Ok(n)
            }
            Target::Dev(_, d) => Self::dev_read(d, buf),
            Target::Obj(_) if pos.is_some() => Err(Errno::ESPIPE),
            Target::Obj(id) => crate::obj::ops().ok_or(Errno::EBADF)?.read(id, buf),
            Target::Node(ino) => {
                let off = pos.unwrap_or(o.offset);
                let n = if shoal_hostfs::is_host(ino) {
                    if self.ftype(ino)? == FileType::Directory {
                        return Err(Errno::EISDIR);
                    }
                    shoal_hostfs::read(ino, off, buf)?
                } else {
                    self.fs.read(ino, off, buf)?
                };
                if pos.is_none() {
                    self.set_offset(i, off + n as u64);
                }
                Ok(n)
            }
        }
    }

    /// Writes `data` to description `i` at `pos` (None: its offset).
    pub(crate) fn do_write(&mut self, i: usize, data: &[u8], pos: Option<u64>) -> Result<usize, Errno> {
        self.do_write_as(i, data, pos, None)
    }

    /// [`Vfs::do_write`], with the description's `O_APPEND` overridden for
    /// this write by `append` (`RWF_APPEND`, `RWF_NOAPPEND`).
    pub(crate) fn do_write_as(&mut self, i: usize, data: &[u8], pos: Option<u64>, append: Option<bool>) -> Result<usize, Errno> {
        let o = self.ofd(i);
        if !o.writable() {
            return Err(Errno::EBADF);
        }
        let console = |r: i64| if r < 0 { Err(Errno((-r) as i32)) } else { Ok(r as usize) };
        match o.target {
            Target::Stdin => Err(Errno::EBADF),
            Target::Stdout | Target::Stderr if pos.is_some() => Err(Errno::ESPIPE),
            // Nothing to write: 0, as a pipe answers (no console call).
            Target::Stdout | Target::Stderr if data.is_empty() => Ok(0),
            Target::Stdout => console(shoal_plat::console::stdout(data)),
            Target::Stderr => console(shoal_plat::console::stderr(data)),
            Target::Fifo(_) if pos.is_some() => Err(Errno::ESPIPE),
            Target::Fifo(ino) => self.pipe_write(ino, data),
            Target::Dev(_, d) => Self::dev_write(d, data),
            Target::Obj(_) if pos.is_some() => Err(Errno::ESPIPE),
            Target::Obj(id) => crate::obj::ops().ok_or(Errno::EBADF)?.write(id, data),
            Target::Node(ino) => {
                let host = shoal_hostfs::is_host(ino);
                // O_APPEND writes at the end, even for pwrite (as Linux does).
                let off = if append.unwrap_or(o.flags & O_APPEND != 0) { self.size_of(ino)? } else { pos.unwrap_or(o.offset) };
                // RLIMIT_FSIZE: a write starting at or past the limit fails,
                // one crossing it is cut short there (Linux).
                let mut data = data;
                if self.fsize != u64::MAX && !data.is_empty() && self.ftype(ino)? == FileType::Regular {
                    if off >= self.fsize {
                        return self.fsize_check(off.saturating_add(1)).map(|_| 0);
                    }
                    let room = (self.fsize - off).min(data.len() as u64) as usize;
                    data = &data[..room];
                }
                let n = if host { shoal_hostfs::write(ino, off, data)? } else { self.fs.write(ino, off, data)? };
                if pos.is_none() {
                    self.set_offset(i, off + n as u64);
                }
                if n > 0 {
                    self.note_inode(ino, crate::notify::IN_MODIFY);
                }
                Ok(n)
            }
        }
    }

    pub(crate) fn read(&mut self, a: &Args) -> SysResult {
        let i = self.ofd_of(a.int(0))?;
        if !self.ofd(i).readable() {
            return Err(Errno::EBADF);
        }
        let buf = umem::slice_mut(a.u(1), a.usize(2).min(MAX_RW_COUNT))?;
        Ok(self.do_read(i, buf, None)? as u64)
    }

    pub(crate) fn write(&mut self, a: &Args) -> SysResult {
        let i = self.ofd_of(a.int(0))?;
        if !self.ofd(i).writable() {
            return Err(Errno::EBADF);
        }
        let buf = umem::slice(a.u(1), a.usize(2).min(MAX_RW_COUNT))?;
        Ok(self.do_write(i, buf, None)? as u64)
    }

    pub(crate) fn pos_arg(&self, i: usize, off: i64) -> Result<u64, Errno> {
        if matches!(self.ofd(i).target, Target::Stdin | Target::Stdout | Target::Stderr | Target::Fifo(_) | Target::Obj(_)) {
            return Err(Errno::ESPIPE);
        }
        if off < 0 {
            return Err(Errno::EINVAL);
        }
        Ok(off as u64)
    }

    pub(crate) fn pread64(&mut self, a: &Args) -> SysResult {
        let i = self.ofd_of(a.int(0))?;
        if !self.ofd(i).readable() {
            return Err(Errno::EBADF);
        }
        let pos = self.pos_arg(i, a.i(3))?;
        let buf = umem::slice_mut(a.u(1), a.usize(2).min(MAX_RW_COUNT))?;
        Ok(self.do_read(i, buf, Some(pos))? as u64)
    }

    pub(crate) fn pwrite64(&mut self, a: &Args) -> SysResult {
        let i = self.ofd_of(a.int(0))?;
        if !self.ofd(i).writable() {
            return Err(Errno::EBADF);
        }
        let pos = self.pos_arg(i, a.i(3))?;
        let buf = umem::slice(a.u(1), a.usize(2).min(MAX_RW_COUNT))?;
        Ok(self.do_write(i, buf, Some(pos))? as u64)
    }

    /// The `struct iovec` array at `addr`: (base, len) pairs, total capped
    /// at `MAX_RW_COUNT`.
    pub(crate) fn iovecs(addr: u64, cnt: i32) -> Result<Vec<(u64, usize)>, Errno> {
        if cnt < 0 || cnt as usize > IOV_MAX {
            return Err(Errno::EINVAL);
        }
        let mut v = Vec::with_capacity(cnt as usize);
        let mut total = 0usize;
        for k in 0..cnt as u64 {
            let [base, len]: [u64; 2] = umem::read(addr.checked_add(16 * k).ok_or(Errno::EFAULT)?)?;
            if (len as i64) < 0 {
                return Err(Errno::EINVAL);
            }
            let len = (len as usize).min(MAX_RW_COUNT - total);
            umem::check(base, len as u64)?;
            total += len;
            v.push((base, len));
        }
        Ok(v)
    }

    pub(crate) fn readv(&mut self, a: &Args) -> SysResult {
        let i = self.ofd_of(a.int(0))?;
        if !self.ofd(i).readable() {
            return Err(Errno::EBADF);
        }
        let iov = Self::iovecs(a.u(1), a.int(2))?;
        let mut total = 0usize;
        for (base, len) in iov {
            let buf = umem::slice_mut(base, len)?;
            let n = match self.do_read(i, buf, None) {
                Ok(n) => n,
                Err(e) if total == 0 => return Err(e),
                Err(_) => break,
            };
            total += n;
            if n < len {
                break;
            }
        }
        Ok(total as u64)
    }

    pub(crate) fn writev(&mut self, a: &Args) -> SysResult {
        let i = self.ofd_of(a.int(0))?;
        if !self.ofd(i).writable() {
            return Err(Errno::EBADF);
        }
        let iov = Self::iovecs(a.u(1), a.int(2))?;
        if matches!(self.ofd(i).target, Target::Stdout | Target::Stderr) {
            // One console hypercall for the whole vector (an exit is costly
            // on hvt; musl's stdio writes a buffer and the new data).
            let mut all = Vec::new();
            for &(base, len) in &iov {
                all.extend_from_slice(umem::slice(base, len)?);
            }
            return Ok(self.do_write(i, &all, None)? as u64);
        }
        let mut total = 0usize;
        for (base, len) in iov {
            let n = match self.do_write(i, umem::slice(base, len)?, None) {
                Ok(n) => n,
                Err(e) if total == 0 => return Err(e),
                Err(_) => break,
            };
            total += n;
            if n < len {
                break;
            }
        }
        Ok(total as u64)
    }

    pub(crate) fn lseek(&mut self, a: &Args) -> SysResult {
        let i = self.ofd_of(a.int(0))?;
        let o = self.ofd(i);
        if o.is_path() {
            return Err(Errno::EBADF);
        }
        let ino = match o.target {
            Target::Node(ino) => ino,
            // Linux's null and zero devices accept any seek and stay at 0.
            Target::Dev(..) => {
                self.set_offset(i, 0);
                return Ok(0);
            }
            _ => return Err(Errno::ESPIPE),
        };
        let off = a.i(1);
        let whence = a.uint(2);
        let cur = o.offset as i64;
        let ft = self.ftype(ino)?;
        let new = match (ft, whence) {
            (_, SEEK_SET) => off,
            (_, SEEK_CUR) => cur.checked_add(off).ok_or(Errno::EOVERFLOW)?,
            (FileType::Directory, _) => return Err(Errno::EINVAL),
            (_, SEEK_END) => (self.size_of(ino)? as i64).checked_add(off).ok_or(Errno::EOVERFLOW)?,
            (_, SEEK_DATA | SEEK_HOLE) => {
                // No hole tracking is reported: data up to the end, one
                // implicit hole at the end (valid Linux behaviour).
                let size = self.size_of(ino)? as i64;
                if off < 0 || off >= size {
                    return Err(Errno::ENXIO);
                }
                if whence == SEEK_DATA {
                    off
                } else {
                    size
                }
            }
            _ => return Err(Errno::EINVAL),
        };
        if new < 0 {
            return Err(Errno::EINVAL);
        }
        self.set_offset(i, new as u64);
        Ok(new as u64)
    }

    pub(crate) fn ioctl(&mut self, a: &Args) -> SysResult {
        let fd = a.int(0);
        let e = self.entry(fd)?;
        let o = self.ofd(e.ofd);
        if o.is_path() {
            return Err(Errno::EBADF);
        }
        match a.uint(1) {
            FIOCLEX | FIONCLEX => {
                let set = a.uint(1) == FIOCLEX;
                if let Some(Some(en)) = self.fds.get_mut(fd as usize) {
                    en.cloexec = set;
                }
                Ok(0)
            }
            FIONBIO => {
                let on: i32 = umem::read(a.u(2))?;
                let o = self.ofd_mut(e.ofd);
                if on != 0 {
                    o.flags |= O_NONBLOCK;
                } else {
                    o.flags &= !O_NONBLOCK;
                }
                Ok(0)
            }
            FIONREAD => {
                let n: i32 = match o.target {
                    Target::Node(ino) if self.fs.file_type(ino)? == FileType::Regular => {
                        self.fs.size(ino)?.saturating_sub(o.offset).min(i32::MAX as u64) as i32
                    }
                    Target::Node(_) | Target::Dev(..) => return Err(Errno::ENOTTY),
                    Target::Fifo(ino) => self.pipe(ino).map(|p| p.buf.len() as i32).unwrap_or(0),
                    Target::Obj(id) => crate::obj::ops().ok_or(Errno::ENOTTY)?.nread(id)?.min(i32::MAX as usize) as i32,
                    _ => 0,
                };
                umem::write(a.u(2), n)?;
                Ok(0)
            }
            // Standard input is a terminal when the tender's is: answer the
            // terminal ioctls programs ask (isatty is TIOCGWINSZ in musl).
            req if o.target == Target::Stdin && shoal_plat::console::stdin_is_tty() => tty_ioctl(req, a.u(2)),
            // No other descriptor is a terminal: TCGETS, TIOCGWINSZ, … fail.
            _ => Err(Errno::ENOTTY),
        }
    }

    // ---- descriptors ---------------------------------------------------

    pub(crate) fn open(&mut self, a: &Args) -> SysResult {
        self.do_openat(AT_FDCWD, a.u(0), a.uint(1), a.uint(2))
    }

    pub(crate) fn creat(&mut self, a: &Args) -> SysResult {
        self.do_openat(AT_FDCWD, a.u(0), O_CREAT | O_WRONLY | O_TRUNC, a.uint(1))
    }

    pub(crate) fn openat(&mut self, a: &Args) -> SysResult {
        self.do_openat(a.int(0), a.u(1), a.uint(2), a.uint(3))
    }

    /// `memfd_create(name, flags)`: a read-write regular file with no name
    /// in the instance's memory (as `O_TMPFILE`), mode 0777 as Linux's.
    /// `MFD_CLOEXEC` and `MFD_EXEC` are taken; sealing (`MFD_ALLOW_SEALING`,
    /// `MFD_NOEXEC_SEAL`) and `MFD_HUGETLB` are `EINVAL` (neither is
    /// supported: `F_ADD_SEALS`/`F_GET_SEALS` are `EINVAL` on every file, as
    /// Linux answers for a file that cannot be sealed); unknown flags
    /// `EINVAL`; a name longer than 249 bytes `EINVAL`, an unreadable one
    /// `EFAULT` (flags are checked first, as Linux does).
    pub(crate) fn memfd_create(&mut self, a: &Args) -> SysResult {
        const MFD_CLOEXEC: u32 = 1;
        const MFD_EXEC: u32 = 0x10;
        const MFD_NAME_MAX: usize = 249;
        let flags = a.uint(1);
        if flags & !(MFD_CLOEXEC | MFD_EXEC) != 0 {
            return Err(Errno::EINVAL);
        }
        match umem::cstr(a.u(0), MFD_NAME_MAX) {
            Ok(_) => {}
            Err(Errno::ENAMETOOLONG) => return Err(Errno::EINVAL),
            Err(e) => return Err(e),
        }
        let ino = self.fs.create_unnamed(crate::ROOT_INO, 0o777)?;
        let o = self.new_ofd(Target::Node(ino), O_RDWR | O_LARGEFILE);
        self.fs.put_ref(ino); // new_ofd took its own
        self.install(0, o, flags & MFD_CLOEXEC != 0)
    }

    /// Finds or creates the file for `open(O_CREAT)`; returns it and
    /// whether it was created.
    fn open_create(&mut self, dir: Ino, path: &[u8], flags: u32, mode: u32, links: &mut u32) -> Result<(Ino, bool), Errno> {
        let p = self.walk_parent(dir, path, links)?;
        if p.is_special() || p.trailing {
            return Err(Errno::EISDIR);
        }
        match self.lookup(p.dir, p.name) {
            Ok(ino) => {
                if flags & O_EXCL != 0 {
                    return Err(Errno::EEXIST);
                }
                if self.ftype(ino)? == FileType::Symlink {
                    if flags & O_NOFOLLOW != 0 {
                        return Err(Errno::ELOOP);
                    }
                    *links += 1;
                    if *links > MAXSYMLINKS {
                        return Err(Errno::ELOOP);
                    }
                    let target = self.link_target(ino)?;
                    return self.open_create(p.dir, &target, flags, mode, links);
                }
                Ok((ino, false))
            }
            Err(Errno::ENOENT) if shoal_hostfs::is_host(p.dir) && shoal_hostfs::writable(p.dir) => {
                let ino = shoal_hostfs::create(p.dir, p.name, mode & 0o7777 & !self.umask, flags & O_EXCL != 0)?;
                self.note_child(p.dir, crate::notify::IN_CREATE, p.name, 0);
                Ok((ino, true))
            }
            Err(Errno::ENOENT) if shoal_hostfs::is_host(p.dir) => Err(Errno::EROFS),
            Err(Errno::ENOENT) => {
                let ino = self.fs.create_file(p.dir, p.name, mode & 0o7777 & !self.umask)?;
                self.note_child(p.dir, crate::notify::IN_CREATE, p.name, 0);
                Ok((ino, true))
            }
            Err(e) => Err(e),
        }
    }

    pub(crate) fn do_openat(&mut self, dirfd: i32, path_addr: u64, mut flags: u32, mode: u32) -> SysResult {
        let path = path_arg(path_addr)?;
        if path.is_empty() {
            return Err(Errno::ENOENT);
        }
        let cloexec = flags & O_CLOEXEC != 0;
        let start = self.start_dir(dirfd, path)?;
        if flags & O_TMPFILE_BIT != 0 {
            let acc = flags & O_ACCMODE;
            if flags & O_DIRECTORY == 0 || flags & O_CREAT != 0 || !(acc == O_WRONLY || acc == O_RDWR) {
                return Err(Errno::EINVAL);
            }
            let dir = self.walk(start, path, true, &mut 0)?;
            if self.ftype(dir)? != FileType::Directory {
                return Err(Errno::ENOTDIR);
            }
            Self::ro_node(dir)?;
            let ino = self.fs.create_unnamed(dir, mode & 0o7777 & !self.umask)?;
            let o = self.new_ofd(Target::Node(ino), (flags & KEEP_FLAGS) | O_LARGEFILE);
            self.fs.put_ref(ino); // new_ofd took its own
            return self.install(0, o, cloexec);
        }
        if flags & O_PATH != 0 {
            flags &= O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
        }
        let (ino, created) = if flags & O_CREAT != 0 {
            self.open_create(start, path, flags, mode, &mut 0)?
        } else {
            (self.walk(start, path, flags & O_NOFOLLOW == 0, &mut 0)?, false)
        };
        let path_only = flags & O_PATH != 0;
        if shoal_hostfs::is_host(ino) {
            return self.open_host(ino, flags, cloexec);
        }
        if let Some(&(_, g)) = self.proc_gen.iter().find(|(i, _)| *i == ino) {
            if !path_only {
                let data = crate::procfs::content(g);
                self.fs.truncate(ino, 0)?;
                self.fs.write(ino, 0, &data)?;
            }
        }
        let acc = flags & O_ACCMODE;
        match self.fs.file_type(ino)? {
            FileType::Symlink if !path_only => return Err(Errno::ELOOP),
            // A socket is reached with connect, never opened.
            FileType::Socket if !path_only => return Err(Errno::ENXIO),
            FileType::Directory if !path_only && (acc != O_RDONLY || flags & O_CREAT != 0) => return Err(Errno::EISDIR),
            FileType::Regular | FileType::Symlink if flags & O_DIRECTORY != 0 => return Err(Errno::ENOTDIR),
            FileType::Regular if flags & O_TRUNC != 0 && !path_only && !created => {
                self.fs.truncate(ino, 0)?;
                self.note_inode(ino, crate::notify::IN_MODIFY);
            }
            _ => {}
        }
        let mut fifo = false;
        let target = match self.fs.file_type(ino)? {
            _ if path_only => Target::Node(ino),
            FileType::Fifo if ino == self.console[0] => Target::Stdin,
            FileType::Fifo if ino == self.console[1] => Target::Stdout,
            FileType::Fifo if ino == self.console[2] => Target::Stderr,
            FileType::Fifo => {
                self.fifo_open_check(ino, flags)?;
                fifo = true;
                Target::Fifo(ino)
            }
            FileType::CharDevice => Target::Dev(ino, crate::dev::device(self.fs.attr(ino)?.rdev)?),
            _ => Target::Node(ino),
        };
        let o = self.new_ofd(target, (flags & KEEP_FLAGS) | O_LARGEFILE);
        let fd = self.install(0, o, cloexec)?;
        if fifo {
            let w = self.fifo_wait_for(ino, flags).map(|(i, writer, seen)| (fd as i32, i, writer, seen));
            crate::pipe::WAIT_PARTNER.with(|x| *x = w);
        }
        Ok(fd)
    }

    /// The open of node `ino` (module `host`): read-only, or `O_PATH`, or
    /// for writing in a writable mount.
    fn open_host(&mut self, ino: Ino, flags: u32, cloexec: bool) -> SysResult {
        let path_only = flags & O_PATH != 0;
        let acc = flags & O_ACCMODE;
        match crate::host::host_type(shoal_hostfs::mode(ino)?) {
            Some(FileType::Symlink) if !path_only => return Err(Errno::ELOOP),
            Some(FileType::Directory) if !path_only && (acc != O_RDONLY || flags & O_CREAT != 0) => return Err(Errno::EISDIR),
            Some(FileType::Directory) => {}
            _ if flags & O_DIRECTORY != 0 => return Err(Errno::ENOTDIR),
            // A FIFO, socket or device: the mount is `nodev` and serves
            // none of them.
            None if !path_only => return Err(Errno::EACCES),
            _ => {}
        }
        if !path_only && (acc != O_RDONLY || flags & O_TRUNC != 0) {
            Self::ro_node(ino)?;
            if flags & O_TRUNC != 0 && self.ftype(ino)? == FileType::Regular {
                shoal_hostfs::truncate(ino, 0)?;
                self.note_inode(ino, crate::notify::IN_MODIFY);
            }
        }
        let o = self.new_ofd(Target::Node(ino), (flags & KEEP_FLAGS) | O_LARGEFILE);
        self.install(0, o, cloexec)
    }

    /// The size of file `ino` (a node's, asked of the host).
    pub(crate) fn size_of(&self, ino: Ino) -> Result<u64, Errno> {
        if shoal_hostfs::is_host(ino) {
            return Ok(shoal_hostfs::stat(ino)?.size);
        }
        self.fs.size(ino)
    }

    pub(crate) fn close(&mut self, a: &Args) -> SysResult {
        self.close_fd(a.int(0))?;
        Ok(0)
    }

    pub(crate) fn dup(&mut self, a: &Args) -> SysResult {
        let o = self.ofd_of(a.int(0))?;
        self.install(0, o, false)
    }

    fn dup_to(&mut self, old: i32, new: i32, cloexec: bool) -> SysResult {
        let o = self.ofd_of(old)?;
        if new < 0 || new as usize >= self.nofile.min(MAX_FDS) {
            return Err(Errno::EBADF);
        }
        self.install_at(new as usize, o, cloexec);
        Ok(new as u64)
    }

    pub(crate) fn dup2(&mut self, a: &Args) -> SysResult {
        let (old, new) = (a.int(0), a.int(1));
        if old == new {
            self.entry(old)?;
            return Ok(new as u64);
        }
        self.dup_to(old, new, false)
    }

    pub(crate) fn dup3(&mut self, a: &Args) -> SysResult {
        let (old, new, flags) = (a.int(0), a.int(1), a.uint(2));
        if flags & !O_CLOEXEC != 0 || old == new {
            return Err(Errno::EINVAL);
        }
        self.dup_to(old, new, flags & O_CLOEXEC != 0)
    }

    pub(crate) fn fcntl(&mut self, a: &Args) -> SysResult {
        let fd = a.int(0);
        let e = self.entry(fd)?;
        let cmd = a.int(1);
        match cmd {
            F_DUPFD | F_DUPFD_CLOEXEC => {
                let min = a.int(2);
                if min < 0 || min as usize >= self.nofile.min(MAX_FDS) {
                    return Err(Errno::EINVAL);
                }
                self.install(min as usize, e.ofd, cmd == F_DUPFD_CLOEXEC)
            }
            F_GETFD => Ok(if e.cloexec { FD_CLOEXEC } else { 0 }),
            F_SETFD => {
                // The one entry, and only if the flag changes: SQLite sets
                // close-on-exec on descriptors it opened with O_CLOEXEC,
                // and an unmarked table leaves the log nothing to compare.
                let cloexec = a.u(2) & FD_CLOEXEC != 0;
                if e.cloexec != cloexec {
                    if let Some(Some(en)) = self.fds.at_mut(fd as usize) {
                        en.cloexec = cloexec;
                    }
                }
                Ok(0)
            }
            F_GETFL => Ok(self.ofd(e.ofd).flags as u64),
            F_SETFL => {
                let o = self.ofd_mut(e.ofd);
                if o.is_path() {
                    return Err(Errno::EBADF);
                }
                o.flags = (o.flags & !SETFL_FLAGS) | (a.uint(2) & SETFL_FLAGS);
                Ok(0)
            }
            F_GETLK | F_SETLK | F_SETLKW | F_OFD_GETLK | F_OFD_SETLK | F_OFD_SETLKW => self.record_lock(e.ofd, cmd, a.u(2)),
            F_GETOWN | F_SETOWN => Ok(0),
            F_GETPIPE_SZ | F_SETPIPE_SZ => match self.ofd(e.ofd).target {
                Target::Fifo(ino) => {
                    let p = self.pipes.entry(ino).or_default();
                    if cmd == F_GETPIPE_SZ {
                        return Ok(p.cap() as u64);
                    }
                    // The argument is an int, taken unsigned as Linux does.
                    let r = p.set_size(u64::from(a.uint(2)), shoal_plat::boot::ids().0 == 0)?;
                    crate::readylog::note(crate::readylog::pipe_src(ino));
                    crate::wait::wake(ino);
                    Ok(r)
                }
                Target::Node(_) | Target::Dev(..) | Target::Obj(_) => Err(Errno::EBADF),
                _ => Ok(crate::pipe::PIPE_CAP as u64),
            },
            _ => Err(Errno::EINVAL),
        }
    }

    pub(crate) fn sync_fd(&mut self, a: &Args) -> SysResult {
        let o = self.ofd(self.ofd_of(a.int(0))?);
        if o.is_path() {
            return Err(Errno::EBADF);
        }
        match o.target {
            Target::Node(ino) if shoal_hostfs::is_host(ino) && shoal_hostfs::writable(ino) && self.ftype(ino)? == FileType::Regular => {
                shoal_hostfs::fsync(ino).map(|()| 0)
            }
            Target::Node(_) => Ok(0),
            _ => Err(Errno::EINVAL),
        }
    }

    pub(crate) fn fsync(&mut self, a: &Args) -> SysResult {
        self.sync_fd(a)
    }

    pub(crate) fn fdatasync(&mut self, a: &Args) -> SysResult {
        self.sync_fd(a)
    }

    pub(crate) fn sync(&mut self, _a: &Args) -> SysResult {
        Ok(0)
    }

    // ---- metadata ------------------------------------------------------

    pub(crate) fn put_stat(&self, t: Target, addr: u64) -> SysResult {
        let m = self.meta_of_target(t)?;
        umem::write(addr, m.stat())?;
        Ok(0)
    }

    pub(crate) fn stat(&mut self, a: &Args) -> SysResult {
        let ino = self.resolve_at(AT_FDCWD, path_arg(a.u(0))?, true, false)?;
        self.put_stat(Target::Node(ino), a.u(1))
    }

    pub(crate) fn lstat(&mut self, a: &Args) -> SysResult {
        let ino = self.resolve_at(AT_FDCWD, path_arg(a.u(0))?, false, false)?;
        self.put_stat(Target::Node(ino), a.u(1))
    }

    pub(crate) fn fstat(&mut self, a: &Args) -> SysResult {
        let t = self.ofd(self.ofd_of(a.int(0))?).target;
        self.put_stat(t, a.u(1))
    }

    pub(crate) fn newfstatat(&mut self, a: &Args) -> SysResult {
        let flags = a.uint(3);
        if flags & !(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH | AT_NO_AUTOMOUNT) != 0 {
            return Err(Errno::EINVAL);
        }
        let t = self.target_at(a.int(0), path_arg(a.u(1))?, flags)?;
        self.put_stat(t, a.u(2))
    }

    pub(crate) fn statx(&mut self, a: &Args) -> SysResult {
        let (dirfd, flags, mask) = (a.int(0), a.uint(2), a.uint(3));
        if flags & !(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH | AT_NO_AUTOMOUNT | AT_STATX_SYNC_TYPE) != 0
            || flags & AT_STATX_SYNC_TYPE == AT_STATX_SYNC_TYPE
            || mask & STATX_RESERVED != 0
        {
            return Err(Errno::EINVAL);
        }
        let path = if a.u(1) == 0 && flags & AT_EMPTY_PATH != 0 { &b""[..] } else { path_arg(a.u(1))? };
        let t = self.target_at(dirfd, path, flags)?;
        let m = self.meta_of_target(t)?;
        umem::write(a.u(4), m.statx())?;
        Ok(0)
    }

    fn do_access(&mut self, dirfd: i32, path: u64, mode: u32, flags: u32) -> SysResult {
        if mode & !(R_OK | W_OK | X_OK) != 0 || flags & !(AT_EACCESS | AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH) != 0 {
            return Err(Errno::EINVAL);
        }
        let t = self.target_at(dirfd, path_arg(path)?, flags)?;
        let m = self.meta_of_target(t)?;
        let is_dir = m.mode & shoal_ramfs::S_IFMT == shoal_ramfs::S_IFDIR;
        if mode & X_OK != 0 && !is_dir && m.mode & 0o111 == 0 {
            return Err(Errno::EACCES);
        }
        if mode & W_OK != 0 {
            if let Some(ino) = t.ino() {
                Self::ro_node(ino)?;
            }
        }
        Ok(0)
    }

    pub(crate) fn access(&mut self, a: &Args) -> SysResult {
        self.do_access(AT_FDCWD, a.u(0), a.uint(1), 0)
    }

    pub(crate) fn faccessat(&mut self, a: &Args) -> SysResult {
        self.do_access(a.int(0), a.u(1), a.uint(2), 0)
    }

    pub(crate) fn faccessat2(&mut self, a: &Args) -> SysResult {
        self.do_access(a.int(0), a.u(1), a.uint(2), a.uint(3))
    }

    fn do_chmod(&mut self, t: Target, mode: u32) -> SysResult {
        // The standard streams' modes are not kept.
        if let Some(ino) = t.ino() {
            Self::ro_node(ino)?;
            if shoal_hostfs::is_host(ino) {
                shoal_hostfs::chmod(ino, mode & 0o7777)?;
            } else {
                self.fs.chmod(ino, mode & 0o7777)?;
            }
            self.note_inode(ino, crate::notify::IN_ATTRIB);
        }
        Ok(0)
    }

    pub(crate) fn chmod(&mut self, a: &Args) -> SysResult {
        let ino = self.resolve_at(AT_FDCWD, path_arg(a.u(0))?, true, false)?;
        self.do_chmod(Target::Node(ino), a.uint(1))
    }

    pub(crate) fn fchmod(&mut self, a: &Args) -> SysResult {
        let o = self.ofd(self.ofd_of(a.int(0))?);
        if o.is_path() {
            return Err(Errno::EBADF);
        }
        let t = o.target;
        self.do_chmod(t, a.uint(1))
    }

    pub(crate) fn fchmodat(&mut self, a: &Args) -> SysResult {
        let ino = self.resolve_at(a.int(0), path_arg(a.u(1))?, true, false)?;
        self.do_chmod(Target::Node(ino), a.uint(2))
    }

    pub(crate) fn umask(&mut self, a: &Args) -> SysResult {
        let old = self.umask;
        self.umask = a.uint(0) & 0o777;
        self.scalars_set = true;
        Ok(old as u64)
    }

    pub(crate) fn utimensat(&mut self, a: &Args) -> SysResult {
        let (dirfd, path_addr, times, flags) = (a.int(0), a.u(1), a.u(2), a.uint(3));
        if flags & !(AT_SYMLINK_NOFOLLOW | AT_EMPTY_PATH) != 0 {
            return Err(Errno::EINVAL);
        }
        let ts: [i64; 4] = if times == 0 { [0, UTIME_NOW, 0, UTIME_NOW] } else { umem::read(times)? };
        for nsec in [ts[1], ts[3]] {
            if !(0..1_000_000_000).contains(&nsec) && nsec != UTIME_NOW && nsec != UTIME_OMIT {
                return Err(Errno::EINVAL);
            }
        }
        let t = if path_addr == 0 {
            // futimens(): the descriptor itself.
            if dirfd == AT_FDCWD {
                return Err(Errno::EFAULT);
            }
            self.ofd(self.ofd_of(dirfd)?).target
        } else {
            self.target_at(dirfd, path_arg(path_addr)?, flags)?
        };
        let Some(ino) = t.ino() else { return Ok(0) };
        Self::ro_node(ino)?;
        if ts[1] == UTIME_OMIT && ts[3] == UTIME_OMIT {
            return Ok(0);
        }
        // Linux's fsnotify_change: both times are an attribute change,
        // the modification time alone a modification (the access time
        // alone would be IN_ACCESS, not reported).
        let what = match (ts[1] == UTIME_OMIT, ts[3] == UTIME_OMIT) {
            (false, false) => crate::notify::IN_ATTRIB,
            (true, false) => crate::notify::IN_MODIFY,
            _ => 0,
        };
        if shoal_hostfs::is_host(ino) {
            shoal_hostfs::set_times(ino, ts)?;
            if what != 0 {
                self.note_inode(ino, what);
            }
            return Ok(0);
        }
        let now = self.fs.now();
        let pick = |sec: i64, nsec: i64| match nsec {
            UTIME_OMIT => None,
            UTIME_NOW => Some(now),
            n => Some(Timespec { sec, nsec: n as u32 }),
        };
        self.fs.set_times(ino, pick(ts[0], ts[1]), pick(ts[2], ts[3]))?;
        if what != 0 {
            self.note_inode(ino, what);
        }
        Ok(0)
    }

    pub(crate) fn do_truncate(&mut self, ino: Ino, len: i64) -> SysResult {
        if len < 0 {
            return Err(Errno::EINVAL);
        }
        if self.ftype(ino)? == FileType::Directory {
            return Err(Errno::EISDIR);
        }
        Self::ro_node(ino)?;
        if len as u64 > self.size_of(ino)? {
            self.fsize_check(len as u64)?;
        }
        if shoal_hostfs::is_host(ino) {
            shoal_hostfs::truncate(ino, len as u64)?;
        } else {
            self.fs.truncate(ino, len as u64)?;
        }
        self.note_inode(ino, crate::notify::IN_MODIFY);
        Ok(0)
    }

    pub(crate) fn truncate(&mut self, a: &Args) -> SysResult {
        let ino = self.resolve_at(AT_FDCWD, path_arg(a.u(0))?, true, false)?;
        if a.i(1) < 0 {
            return Err(Errno::EINVAL);
        }
        self.do_truncate(ino, a.i(1))
    }

    pub(crate) fn ftruncate(&mut self, a: &Args) -> SysResult {
        let o = self.ofd(self.ofd_of(a.int(0))?);
        if o.is_path() {
            return Err(Errno::EBADF);
        }
        match o.target {
            Target::Node(ino) if o.writable() && self.ftype(ino)? == FileType::Regular => self.do_truncate(ino, a.i(1)),
            _ => Err(Errno::EINVAL),
        }
    }

    // ---- directories ---------------------------------------------------

    pub(crate) fn getdents64(&mut self, a: &Args) -> SysResult {
        self.list_dir(a, push_dirent64, false)
    }

    /// `getdents`/`getdents64`: fills the user buffer with the records
    /// `encode` makes, from the descriptor's position on. A buffer too
    /// small for the next entry is `EINVAL`; with `empty_buffer_fails`
    /// also when the buffer has no room at all.
    pub(crate) fn list_dir(&mut self, a: &Args, encode: DirentEncoder, empty_buffer_fails: bool) -> SysResult {
        let i = self.ofd_of(a.int(0))?;
        let o = self.ofd(i);
        if o.is_path() {
            return Err(Errno::EBADF);
        }
        let Target::Node(dir) = o.target else { return Err(Errno::ENOTDIR) };
        if self.ftype(dir)? != FileType::Directory {
            return Err(Errno::ENOTDIR);
        }
        let cap = a.usize(2).min(i32::MAX as usize);
        let buf = umem::slice_mut(a.u(1), cap)?;
        let mut out = Vec::new();
        let start = o.offset;
        let mut pos = start;
        let mut any = false;
        let mut small = false;
        let mut each = |next: u64, name: &[u8], ino: u64, dtype: u8| {
            if !encode(&mut out, cap, ino, next, dtype, name) {
                // Either the end of the buffer, or no room for even the
                // first entry.
                small = !any;
                return false;
            }
            pos = next;
            any = true;
            true
        };
        if shoal_hostfs::is_host(dir) {
            shoal_hostfs::list(dir, start, |e| each(e.next, e.name, e.ino, e.dtype))?;
        } else if dir == self.fs.root() && self.root_mount.is_some() {
            self.list_union_root(start, &mut each)?;
        } else {
            self.fs.readdir(dir, start, each)?;
        }
        if small && (cap > 0 || empty_buffer_fails) {
            return Err(Errno::EINVAL);
        }
        buf[..out.len()].copy_from_slice(&out);
        self.set_offset(i, pos);
        self.fs.touch_atime(dir);
        Ok(out.len() as u64)
    }

    pub(crate) fn getcwd(&mut self, a: &Args) -> SysResult {
        let p = self.path_of(self.cwd)?;
        if p.len() + 1 > a.usize(1) {
            return Err(Errno::ERANGE);
        }
        let buf = umem::slice_mut(a.u(0), p.len() + 1)?;
        buf[..p.len()].copy_from_slice(&p);
        buf[p.len()] = 0;
        Ok(p.len() as u64 + 1)
    }

    fn set_cwd(&mut self, ino: Ino) -> SysResult {
        if self.ftype(ino)? != FileType::Directory {
            return Err(Errno::ENOTDIR);
        }
        self.fs.get_ref(ino);
        let old = core::mem::replace(&mut self.cwd, ino);
        self.scalars_set = true;
        self.fs.put_ref(old);
        Ok(0)
    }

    pub(crate) fn chdir(&mut self, a: &Args) -> SysResult {
        let ino = self.resolve_at(AT_FDCWD, path_arg(a.u(0))?, true, false)?;
        self.set_cwd(ino)
    }

    pub(crate) fn fchdir(&mut self, a: &Args) -> SysResult {
        match self.ofd(self.ofd_of(a.int(0))?).target {
            Target::Node(ino) => self.set_cwd(ino),
            _ => Err(Errno::ENOTDIR),
        }
    }

    fn do_mkdir(&mut self, dirfd: i32, path: u64, mode: u32) -> SysResult {
        let path = path_arg(path)?;
        let start = self.start_dir(dirfd, path)?;
        let p = self.walk_parent(start, path, &mut 0)?;
        self.ro_parent(&p, true)?;
        if p.is_special() {
            return Err(Errno::EEXIST);
        }
        if shoal_hostfs::is_host(p.dir) {
            shoal_hostfs::mkdir(p.dir, p.name, mode & 0o1777 & !self.umask)?;
        } else {
            self.fs.mkdir(p.dir, p.name, mode & 0o1777 & !self.umask)?;
        }
        self.note_child(p.dir, crate::notify::IN_CREATE | crate::notify::IN_ISDIR, p.name, 0);
        Ok(0)
    }

    pub(crate) fn mkdir(&mut self, a: &Args) -> SysResult {
        self.do_mkdir(AT_FDCWD, a.u(0), a.uint(1))
    }

    pub(crate) fn mkdirat(&mut self, a: &Args) -> SysResult {
        self.do_mkdir(a.int(0), a.u(1), a.uint(2))
    }

    fn do_rmdir(&mut self, dirfd: i32, path: &[u8]) -> SysResult {
        let start = self.start_dir(dirfd, path)?;
        let p = self.walk_parent(start, path, &mut 0)?;
        self.ro_parent(&p, false)?;
        if p.name.is_empty() || self.fs.lookup(p.dir, p.name).is_ok_and(|i| self.mount_at(i).is_some()) {
            return Err(Errno::EBUSY);
        }
        if shoal_hostfs::is_host(p.dir) && p.is_special() {
            return Err(if p.name == b"." { Errno::EINVAL } else { Errno::ENOTEMPTY });
        }
        let gone = self.lookup(p.dir, p.name).ok();
        if shoal_hostfs::is_host(p.dir) {
            shoal_hostfs::rmdir(p.dir, p.name)?;
        } else {
            self.fs.rmdir(p.dir, p.name)?;
        }
        self.note_removed(p.dir, p.name, gone, crate::notify::IN_ISDIR);
        Ok(0)
    }

    fn do_unlink(&mut self, dirfd: i32, path: &[u8]) -> SysResult {
        let start = self.start_dir(dirfd, path)?;
        let p = self.walk_parent(start, path, &mut 0)?;
        self.ro_parent(&p, false)?;
        if p.is_special() {
            return Err(Errno::EISDIR);
        }
        if p.trailing {
            let ino = self.lookup(p.dir, p.name)?;
            return Err(if self.ftype(ino)? == FileType::Directory { Errno::EISDIR } else { Errno::ENOTDIR });
        }
        // A single-file mount's file, as Linux refuses to remove a mount
        // point.
        if self.fs.lookup(p.dir, p.name).is_ok_and(|i| self.mount_at(i).is_some()) || self.inner_at(p.dir, p.name).is_some() {
            return Err(Errno::EBUSY);
        }
        let gone = self.lookup(p.dir, p.name).ok();
        if shoal_hostfs::is_host(p.dir) {
            shoal_hostfs::unlink(p.dir, p.name)?;
        } else {
            self.fs.unlink(p.dir, p.name)?;
        }
        self.note_removed(p.dir, p.name, gone, 0);
        Ok(0)
    }

    pub(crate) fn rmdir(&mut self, a: &Args) -> SysResult {
        self.do_rmdir(AT_FDCWD, path_arg(a.u(0))?)
    }

    pub(crate) fn unlink(&mut self, a: &Args) -> SysResult {
        self.do_unlink(AT_FDCWD, path_arg(a.u(0))?)
    }

    pub(crate) fn unlinkat(&mut self, a: &Args) -> SysResult {
        let flags = a.uint(2);
        if flags & !AT_REMOVEDIR != 0 {
            return Err(Errno::EINVAL);
        }
        let path = path_arg(a.u(1))?;
        if flags & AT_REMOVEDIR != 0 {
            self.do_rmdir(a.int(0), path)
        } else {
            self.do_unlink(a.int(0), path)
        }
    }

    fn do_rename(&mut self, odirfd: i32, old: u64, ndirfd: i32, new: u64, flags: u32) -> SysResult {
        if flags & !(RENAME_NOREPLACE | RENAME_EXCHANGE | RENAME_WHITEOUT) != 0 || flags & RENAME_WHITEOUT != 0 || flags == RENAME_NOREPLACE | RENAME_EXCHANGE {
            return Err(Errno::EINVAL);
        }
        let (old, new) = (path_arg(old)?, path_arg(new)?);
        let ostart = self.start_dir(odirfd, old)?;
        let nstart = self.start_dir(ndirfd, new)?;
        let op = self.walk_parent(ostart, old, &mut 0)?;
        let np = self.walk_parent(nstart, new, &mut 0)?;
        // Across file systems (a mount and the root, or two mounts) Linux
        // answers EXDEV before anything else.
        let fs_of = |d: Ino| if shoal_hostfs::is_host(d) { shoal_hostfs::mount_of(d).ok().map(|m| m + 1) } else { Some(0) };
        if fs_of(op.dir) != fs_of(np.dir) {
            return Err(Errno::EXDEV);
        }
        self.ro_parent(&op, false)?;
        self.ro_parent(&np, false)?;
        let busy =
            |p: &crate::path::Parent<'_>| self.fs.lookup(p.dir, p.name).is_ok_and(|i| self.mount_at(i).is_some()) || self.inner_at(p.dir, p.name).is_some();
        if busy(&op) || busy(&np) {
            return Err(Errno::EBUSY);
        }
        if op.is_special() {
            return Err(Errno::EBUSY);
        }
        if np.is_special() {
            return Err(if flags & RENAME_NOREPLACE != 0 { Errno::EEXIST } else { Errno::EBUSY });
        }
        let oino = self.lookup(op.dir, op.name)?;
        if (op.trailing || np.trailing) && self.ftype(oino)? != FileType::Directory {
            return Err(Errno::ENOTDIR);
        }
        if shoal_hostfs::is_host(op.dir) {
            shoal_hostfs::rename(op.dir, op.name, np.dir, np.name, flags)?;
        } else {
            let rf = RenameFlags { noreplace: flags & RENAME_NOREPLACE != 0, exchange: flags & RENAME_EXCHANGE != 0 };
            self.fs.rename(op.dir, op.name, np.dir, np.name, rf)?;
        }
        // Linux's fsnotify_move (the other side of an exchange is not
        // reported).
        let (cookie, dir) = (self.next_cookie(), self.isdir_bit(oino));
        self.note_child(op.dir, crate::notify::IN_MOVED_FROM | dir, op.name, cookie);
        self.note_child(np.dir, crate::notify::IN_MOVED_TO | dir, np.name, cookie);
        self.note_child(oino, crate::notify::IN_MOVE_SELF | dir, b"", 0);
        Ok(0)
    }

    pub(crate) fn rename(&mut self, a: &Args) -> SysResult {
        self.do_rename(AT_FDCWD, a.u(0), AT_FDCWD, a.u(1), 0)
    }

    pub(crate) fn renameat(&mut self, a: &Args) -> SysResult {
        self.do_rename(a.int(0), a.u(1), a.int(2), a.u(3), 0)
    }

    pub(crate) fn renameat2(&mut self, a: &Args) -> SysResult {
        self.do_rename(a.int(0), a.u(1), a.int(2), a.u(3), a.uint(4))
    }

    fn do_symlink(&mut self, target: u64, dirfd: i32, path: u64) -> SysResult {
        let target = path_arg(target)?;
        let path = path_arg(path)?;
        let start = self.start_dir(dirfd, path)?;
        let p = self.walk_parent(start, path, &mut 0)?;
        self.ro_parent(&p, true)?;
        if p.is_special() {
            return Err(Errno::EEXIST);
        }
        Self::host_refuses(&p)?;
        if p.trailing {
            return Err(if self.fs.lookup(p.dir, p.name).is_ok() { Errno::EEXIST } else { Errno::ENOENT });
        }
        self.fs.symlink(p.dir, p.name, target)?;
        self.note_child(p.dir, crate::notify::IN_CREATE, p.name, 0);
        Ok(0)
    }

    pub(crate) fn symlink(&mut self, a: &Args) -> SysResult {
        self.do_symlink(a.u(0), AT_FDCWD, a.u(1))
    }

    pub(crate) fn symlinkat(&mut self, a: &Args) -> SysResult {
        self.do_symlink(a.u(0), a.int(1), a.u(2))
    }

    fn do_readlink(&mut self, dirfd: i32, path: u64, buf: u64, size: i32) -> SysResult {
        if size <= 0 {
            return Err(Errno::EINVAL);
        }
        let path = path_arg(path)?;
        if let Some(link) = self.fd_link(dirfd, path)? {
            let n = link.len().min(size as usize);
            umem::slice_mut(buf, n)?.copy_from_slice(&link[..n]);
            return Ok(n as u64);
        }
        let ino = if path.is_empty() && dirfd != AT_FDCWD { self.resolve_at(dirfd, path, false, true)? } else { self.resolve_at(dirfd, path, false, false)? };
        if shoal_hostfs::is_host(ino) && self.ftype(ino)? != FileType::Symlink {
            return Err(Errno::EINVAL);
        }
        let target = self.link_target(ino)?;
        let n = target.len().min(size as usize);
        umem::slice_mut(buf, n)?.copy_from_slice(&target[..n]);
        self.fs.touch_atime(ino);
        Ok(n as u64)
    }

    /// What `readlink` of `/proc/self/fd/N` gives, as Linux's magic link
    /// does: the path of the file descriptor `N` has open (`ENOENT` for
    /// none), `pipe:[I]` for a pipe or a standard stream, `anon_inode:[…]`
    /// or `socket:[I]` for another component's object. `None`: `path` is
    /// not such an entry.
    fn fd_link(&self, dirfd: i32, path: &[u8]) -> Result<Option<Vec<u8>>, Errno> {
        let Some(fd_dir) = self.fd_dir else { return Ok(None) };
        if path.is_empty() {
            return Ok(None);
        }
        let start = self.start_dir(dirfd, path)?;
        let Ok(p) = self.walk_parent(start, path, &mut 0) else { return Ok(None) };
        if p.dir != fd_dir || p.trailing || p.name.is_empty() || !p.name.iter().all(u8::is_ascii_digit) || p.name.len() >= 8 {
            return Ok(None);
        }
        let fd: i32 = core::str::from_utf8(p.name).ok().and_then(|s| s.parse().ok()).ok_or(Errno::ENOENT)?;
        let t = self.ofd(self.ofd_of(fd).map_err(|_| Errno::ENOENT)?).target;
        let mut out = Vec::new();
        match t {
            crate::Target::Stdin | crate::Target::Stdout | crate::Target::Stderr => {
                let i = [crate::Target::Stdin, crate::Target::Stdout, crate::Target::Stderr].iter().position(|x| *x == t).unwrap_or(0);
                out.extend_from_slice(alloc::format!("pipe:[{}]", self.console[i]).as_bytes());
            }
            crate::Target::Fifo(i) if self.fs.is_unlinked(i) || self.file_path(i).is_none() => out.extend_from_slice(alloc::format!("pipe:[{i}]").as_bytes()),
            crate::Target::Obj(id) => out.extend_from_slice(alloc::format!("socket:[{id}]").as_bytes()),
            other => {
                let i = other.ino().ok_or(Errno::ENOENT)?;
                // Linux keeps the removed name; ramfs does not know it.
                out = self.file_path(i).unwrap_or_else(|| b"/ (deleted)".to_vec());
            }
        }
        Ok(Some(out))
    }

    /// The absolute path of inode `ino`: a directory's from its parents, a
    /// file's by a depth-first search from the root (the first name found
    /// for a file with several links).
    fn file_path(&self, ino: Ino) -> Option<Vec<u8>> {
        if shoal_hostfs::is_host(ino) {
            return self.host_path(ino).ok();
        }
        if self.fs.file_type(ino) == Ok(FileType::Directory) {
            return self.path_of(ino).ok();
        }
        let root = self.fs.root();
        if ino == root {
            return Some(b"/".to_vec());
        }
        let mut stack: Vec<(Ino, Vec<u8>)> = alloc::vec![(root, Vec::new())];
        let mut visited = 0usize;
        while let Some((dir, prefix)) = stack.pop() {
            let mut found = None;
            let mut subdirs = Vec::new();
            let _ = self.fs.readdir(dir, 0, |_, name, i, t| {
                if name == b"." || name == b".." {
                    return true;
                }
                visited += 1;
                let mut p = prefix.clone();
                p.push(b'/');
                p.extend_from_slice(name);
                if i == ino {
                    found = Some(p);
                    return false;
                }
                if t == FileType::Directory.dirent_type() {
                    subdirs.push((i, p));
                }
                visited < 1 << 20
            });
            if found.is_some() {
                return found;
            }
            stack.extend(subdirs);
        }
        None
    }

    pub(crate) fn readlink(&mut self, a: &Args) -> SysResult {
        self.do_readlink(AT_FDCWD, a.u(0), a.u(1), a.int(2))
    }

    pub(crate) fn readlinkat(&mut self, a: &Args) -> SysResult {
        self.do_readlink(a.int(0), a.u(1), a.u(2), a.int(3))
    }

    fn do_link(&mut self, odirfd: i32, old: u64, ndirfd: i32, new: u64, flags: u32) -> SysResult {
        if flags & !(AT_SYMLINK_FOLLOW | AT_EMPTY_PATH) != 0 {
            return Err(Errno::EINVAL);
        }
        let (old, new) = (path_arg(old)?, path_arg(new)?);
        let ino = self.resolve_at(odirfd, old, flags & AT_SYMLINK_FOLLOW != 0, flags & AT_EMPTY_PATH != 0)?;
        let start = self.start_dir(ndirfd, new)?;
        let p = self.walk_parent(start, new, &mut 0)?;
        self.ro_parent(&p, true)?;
        if shoal_hostfs::is_host(ino) {
            // Another file system (a Linux mount): no hard links across;
            // within a writable mount none are made for a guest.
            return Err(if shoal_hostfs::is_host(p.dir) && shoal_hostfs::mount_of(p.dir) == shoal_hostfs::mount_of(ino) { Errno::EPERM } else { Errno::EXDEV });
        }
        Self::host_refuses(&p).map_err(|_| Errno::EXDEV)?;
        if p.is_special() {
            return Err(Errno::EEXIST);
        }
        if p.trailing {
            return Err(if self.fs.lookup(p.dir, p.name).is_ok() { Errno::EEXIST } else { Errno::ENOENT });
        }
        self.fs.link(p.dir, p.name, ino)?;
        // Linux's fsnotify_link: the link count, then the name.
        self.note_child(ino, crate::notify::IN_ATTRIB | self.isdir_bit(ino), b"", 0);
        self.note_child(p.dir, crate::notify::IN_CREATE, p.name, 0);
        Ok(0)
    }

    pub(crate) fn link(&mut self, a: &Args) -> SysResult {
        self.do_link(AT_FDCWD, a.u(0), AT_FDCWD, a.u(1), 0)
    }

    pub(crate) fn linkat(&mut self, a: &Args) -> SysResult {
        self.do_link(a.int(0), a.u(1), a.int(2), a.u(3), a.uint(4))
    }
}

/// Status flags an open file description keeps.
const KEEP_FLAGS: u32 = O_ACCMODE | O_APPEND | O_NONBLOCK | O_SYNC | O_DSYNC | O_DIRECT | O_NOATIME | O_ASYNC | O_PATH;
/// Status flags `F_SETFL` may change.
const SETFL_FLAGS: u32 = O_APPEND | O_NONBLOCK | O_ASYNC | O_DIRECT | O_NOATIME;

/// Linux's termios of a fresh terminal (`struct termios` as the kernel
/// passes it: four flag words, the line discipline, 19 control characters):
/// `ICRNL|IXON`, `OPOST|ONLCR`, `B38400|CS8|CREAD`,
/// `ISIG|ICANON|ECHO|ECHOE|ECHOK|ECHOCTL|ECHOKE|IEXTEN`, and the usual
/// control characters (^C, ^\\, DEL, ^U, ^D, VTIME 0, VMIN 1, …).
const DEFAULT_TERMIOS: [u8; 36] = {
    let mut t = [0u8; 36];
    let words: [u32; 4] = [0x500, 0x5, 0xbf, 0x8a3b];
    let mut i = 0;
    while i < 4 {
        let b = words[i].to_le_bytes();
        t[i * 4] = b[0];
        t[i * 4 + 1] = b[1];
        t[i * 4 + 2] = b[2];
        t[i * 4 + 3] = b[3];
        i += 1;
    }
    let cc: [u8; 17] = [3, 0x1c, 0x7f, 0x15, 4, 0, 1, 0, 0x11, 0x13, 0x1a, 0, 0x12, 0xf, 0x17, 0x16, 0];
    let mut j = 0;
    while j < cc.len() {
        t[17 + j] = cc[j];
        j += 1;
    }
    t
};

/// The terminal settings the guest last set on stdin. They are kept, not
/// applied to the host's terminal (the tender does not let the guest
/// change the host's terminal), so a program that turns echo off reads
/// them back as set.
/// The terminal settings bytes (a newtype so that the cell can start all
/// zero, in vfs's `.bss`, and hold [`DEFAULT_TERMIOS`] from first use).
#[derive(Clone, Copy)]
struct Termios([u8; 36]);

impl Default for Termios {
    fn default() -> Self {
        Termios(DEFAULT_TERMIOS)
    }
}

static TERMIOS: shoal_plat::ZeroGlobal<Termios> = shoal_plat::ZeroGlobal::new();

/// Counts the changes of the terminal settings (module `heal` copies them
/// when the count moved, not comparing 36 bytes after every call).
static TERMIOS_SET: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

/// How many times the terminal settings were set (module `heal`).
pub(crate) fn termios_changes() -> u64 {
    TERMIOS_SET.load(core::sync::atomic::Ordering::Relaxed)
}

/// The terminal settings descriptor 0 answers with (for module `heal`).
pub(crate) fn termios() -> [u8; 36] {
    TERMIOS.try_with(|t| t.0).unwrap_or(DEFAULT_TERMIOS)
}

/// Puts back terminal settings (module `heal`, after a reboot).
pub(crate) fn set_termios(t: [u8; 36]) {
    TERMIOS.with(|cur| cur.0 = t);
}

const TCGETS: u32 = 0x5401;
const TCSETS: u32 = 0x5402;
const TCSETSW: u32 = 0x5403;
const TCSETSF: u32 = 0x5404;
const TIOCGWINSZ: u32 = 0x5413;
const TIOCSWINSZ: u32 = 0x5414;
const TIOCGPGRP: u32 = 0x540f;
const TCFLSH: u32 = 0x540b;

/// A terminal ioctl on stdin when the host's stdin is a terminal.
fn tty_ioctl(req: u32, arg: u64) -> SysResult {
    match req {
        TCGETS => {
            let t = TERMIOS.with(|t| t.0);
            umem::write(arg, t)?;
            Ok(0)
        }
        TCSETS | TCSETSW | TCSETSF => {
            let t: [u8; 36] = umem::read(arg)?;
            TERMIOS.with(|cur| cur.0 = t);
            TERMIOS_SET.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
            Ok(0)
        }
        // The host terminal's size is not passed in: the classic 80x24.
        TIOCGWINSZ => {
            umem::write(arg, [24u16, 80, 0, 0])?;
            Ok(0)
        }
        TIOCSWINSZ | TCFLSH => Ok(0),
        // The instance's one process is its own process group (pid 1).
        TIOCGPGRP => {
            umem::write(arg, 1i32)?;
            Ok(0)
        }
        _ => Err(Errno::ENOTTY),
    }
}
