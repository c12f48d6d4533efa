//! The system-call entry points `shoal-syscall` dispatches to: each reads
//! its arguments from user memory through `shoal_plat::umem` and runs on
//! the process's [`Vfs`](crate::Vfs).
//!
//! Calls that can block (reads and writes of pipes, opening a FIFO) run
//! their operation on the state, and when it answers `EAGAIN` for a
//! blocking descriptor, wait in [`crate::wait`] with the state released,
//! then try again.

use shoal_plat::{Args, Errno, SysResult};

pub use crate::poll::{poll, ppoll, pselect6, select};

macro_rules! syscalls {
    ($($name:ident),* $(,)?) => {
        $(
            #[doc = concat!("The `", stringify!($name), "` system call.")]
            pub fn $name(a: &Args) -> SysResult {
                crate::with(|v| v.$name(a))
            }
        )*
    };
}

/// Runs `f`; while it answers `EAGAIN` on a blocking pipe `fd`, waits and
/// runs it again.
fn blocking(a: &Args, fd: i32, what: &str, f: fn(&mut crate::Vfs, &Args) -> SysResult) -> SysResult {
    loop {
        match crate::with(|v| f(v, a)) {
            Err(Errno::EAGAIN) if crate::with(|v| v.would_block(fd)) => crate::wait::block(what, None)?,
            r => return r,
        }
    }
}

macro_rules! blocking_io {
    ($($name:ident),* $(,)?) => {
        $(
            #[doc = concat!("The `", stringify!($name), "` system call (may wait on a pipe).")]
            pub fn $name(a: &Args) -> SysResult {
                blocking(a, a.int(0), "a pipe", crate::Vfs::$name)
            }
        )*
    };
}

blocking_io!(read, write, readv, writev);

/// `sendfile(out_fd, in_fd, offset, count)` (may wait on an output pipe).
pub fn sendfile(a: &Args) -> SysResult {
    blocking(a, a.int(0), "a pipe", crate::Vfs::sendfile)
}

macro_rules! opening {
    ($($name:ident),* $(,)?) => {
        $(
            #[doc = concat!("The `", stringify!($name), "` system call (may wait for the other end of a FIFO).")]
            pub fn $name(a: &Args) -> SysResult {
                loop {
                    match crate::with(|v| v.$name(a)) {
                        Err(Errno::EAGAIN) => crate::wait::block("opening a FIFO", None)?,
                        Ok(fd) => return crate::pipe::await_partner(fd),
                        r => return r,
                    }
                }
            }
        )*
    };
}

opening!(open, openat, creat);

/// `fcntl(fd, cmd, arg)`. `F_SETLKW` and `F_OFD_SETLKW` wait for a
/// conflicting lock to go, blocking only the calling thread (module
/// `lock`); a signal ends the wait with `EINTR`.
pub fn fcntl(a: &Args) -> SysResult {
    use crate::abi::{F_OFD_SETLKW, F_SETLKW};
    let wait = matches!(a.int(1), F_SETLKW | F_OFD_SETLKW);
    loop {
        match crate::with(|v| v.fcntl(a)) {
            Err(Errno::EAGAIN) if wait => crate::wait::block("a file lock", None)?,
            r => return r,
        }
    }
}

/// `flock(fd, op)`: without `LOCK_NB`, waits for a conflicting lock to
/// go (only the calling thread blocks).
pub fn flock(a: &Args) -> SysResult {
    const LOCK_NB: u32 = 4;
    let wait = a.uint(1) & LOCK_NB == 0;
    loop {
        match crate::with(|v| v.flock(a)) {
            Err(Errno::EAGAIN) if wait => crate::wait::block("a file lock", None)?,
            r => return r,
        }
    }
}

/// `preadv2(fd, iov, cnt, pos_l, pos_h, flags)`: at offset -1 on a pipe
/// or socket it waits for data unless the descriptor is non-blocking or
/// `RWF_NOWAIT` says not to.
pub fn preadv2(a: &Args) -> SysResult {
    if a.uint(5) & crate::more::RWF_NOWAIT != 0 {
        return crate::with(|v| v.preadv2(a));
    }
    blocking(a, a.int(0), "a pipe", crate::Vfs::preadv2)
}

/// `pwritev2(fd, iov, cnt, pos_l, pos_h, flags)`: waits for room as
/// `write` does, unless `RWF_NOWAIT`.
pub fn pwritev2(a: &Args) -> SysResult {
    if a.uint(5) & crate::more::RWF_NOWAIT != 0 {
        return crate::with(|v| v.pwritev2(a));
    }
    blocking(a, a.int(0), "a pipe", crate::Vfs::pwritev2)
}

/// `pipe(fds)`.
pub fn pipe(a: &Args) -> SysResult {
    crate::with(|v| v.pipe_(a))
}

syscalls!(
    memfd_create,
    close,
    stat,
    fstat,
    lstat,
    lseek,
    ioctl,
    pread64,
    pwrite64,
    access,
    dup,
    dup2,
    dup3,
    fsync,
    fdatasync,
    truncate,
    ftruncate,
    getdents64,
    getcwd,
    chdir,
    fchdir,
    rename,
    renameat,
    renameat2,
    mkdir,
    mkdirat,
    rmdir,
    unlink,
    unlinkat,
    readlink,
    readlinkat,
    symlink,
    symlinkat,
    chmod,
    fchmod,
    fchmodat,
    umask,
    newfstatat,
    statx,
    faccessat,
    faccessat2,
    utimensat,
    sync,
    link,
    linkat,
    pipe2,
    chown,
    fchown,
    lchown,
    fchownat,
    statfs,
    fstatfs,
    utimes,
    futimesat,
    fallocate,
    preadv,
    pwritev,
    copy_file_range,
    readahead,
    fadvise64,
    mknod,
    mknodat,
    getdents,
    sync_file_range,
    syncfs,
    close_range,
);

macro_rules! xattr_calls {
    ($($name:ident => $method:ident($f:expr, $l:expr),)*) => {
        $(
            #[doc = concat!("The `", stringify!($name), "` system call (no extended attributes are kept).")]
            pub fn $name(a: &Args) -> SysResult {
                crate::with(|v| v.$method(a, $f, $l))
            }
        )*
    };
}

xattr_calls!(
    setxattr => xattr_unsupported(false, false),
    lsetxattr => xattr_unsupported(false, true),
    fsetxattr => xattr_unsupported(true, false),
    getxattr => xattr_unsupported(false, false),
    lgetxattr => xattr_unsupported(false, true),
    fgetxattr => xattr_unsupported(true, false),
    removexattr => xattr_unsupported(false, false),
    lremovexattr => xattr_unsupported(false, true),
    fremovexattr => xattr_unsupported(true, false),
    listxattr => xattr_list(false, false),
    llistxattr => xattr_list(false, true),
    flistxattr => xattr_list(true, false),
);
