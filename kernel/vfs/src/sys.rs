//! The system-call entry points `shoal-syscall` dispatches to: each reads
//! its arguments from user memory through `shoal_plat::umem` and runs on
//! the process's [`Vfs`](crate::Vfs).
//!
//! Beyond the table's current entries, `link`, `linkat` and `flock` are
//! provided for the syscall table to wire up.

use shoal_plat::{Args, SysResult};

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

syscalls!(
    read, write, open, close, stat, fstat, lstat, lseek, ioctl, pread64, pwrite64, readv, writev, access, dup,
    dup2, dup3, fcntl, fsync, fdatasync, truncate, ftruncate, getdents64, getcwd, chdir, fchdir, rename, renameat,
    renameat2, mkdir, mkdirat, rmdir, creat, unlink, unlinkat, readlink, readlinkat, symlink, symlinkat, chmod,
    fchmod, fchmodat, umask, openat, newfstatat, statx, faccessat, faccessat2, utimensat, sync, link, linkat, flock,
);
