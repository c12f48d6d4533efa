//! Kernel component `syscall` (DESIGN §6): the Linux x86-64 system-call
//! table.
//!
//! shoal's libc turns every system call into a call of
//! [`__shoal_syscall`]; this crate maps the Linux syscall number to the
//! component that implements it. Each component exposes its syscalls as
//! `sys::NAME(&Args) -> SysResult` functions. A number nobody implements
//! returns `-ENOSYS` and is reported once on stderr.
#![cfg_attr(not(test), no_std)]

use shoal_plat::{Args, Errno, Global, SyscallFn};

pub use shoal_abi::linux as nr;

fn lookup(n: u64) -> Option<SyscallFn> {
    use shoal_mm::sys as mm;
    use shoal_process::sys as process;
    use shoal_sched::sys as sched;
    use shoal_sysinfo::sys as sysinfo;
    use shoal_time::sys as time;
    use shoal_user::sys as user;
    use shoal_vfs::sys as vfs;
    let f: SyscallFn = match n {
        // files (vfs, ramfs behind it)
        nr::READ => vfs::read,
        nr::WRITE => vfs::write,
        nr::OPEN => vfs::open,
        nr::CLOSE => vfs::close,
        nr::STAT => vfs::stat,
        nr::FSTAT => vfs::fstat,
        nr::LSTAT => vfs::lstat,
        nr::LSEEK => vfs::lseek,
        nr::IOCTL => vfs::ioctl,
        nr::PREAD64 => vfs::pread64,
        nr::PWRITE64 => vfs::pwrite64,
        nr::READV => vfs::readv,
        nr::WRITEV => vfs::writev,
        nr::ACCESS => vfs::access,
        nr::DUP => vfs::dup,
        nr::DUP2 => vfs::dup2,
        nr::DUP3 => vfs::dup3,
        nr::FCNTL => vfs::fcntl,
        nr::FSYNC => vfs::fsync,
        nr::FDATASYNC => vfs::fdatasync,
        nr::TRUNCATE => vfs::truncate,
        nr::FTRUNCATE => vfs::ftruncate,
        nr::GETDENTS64 => vfs::getdents64,
        nr::GETCWD => vfs::getcwd,
        nr::CHDIR => vfs::chdir,
        nr::FCHDIR => vfs::fchdir,
        nr::RENAME => vfs::rename,
        nr::RENAMEAT => vfs::renameat,
        nr::RENAMEAT2 => vfs::renameat2,
        nr::MKDIR => vfs::mkdir,
        nr::MKDIRAT => vfs::mkdirat,
        nr::RMDIR => vfs::rmdir,
        nr::CREAT => vfs::creat,
        nr::UNLINK => vfs::unlink,
        nr::UNLINKAT => vfs::unlinkat,
        nr::READLINK => vfs::readlink,
        nr::READLINKAT => vfs::readlinkat,
        nr::SYMLINK => vfs::symlink,
        nr::SYMLINKAT => vfs::symlinkat,
        nr::CHMOD => vfs::chmod,
        nr::FCHMOD => vfs::fchmod,
        nr::FCHMODAT => vfs::fchmodat,
        nr::UMASK => vfs::umask,
        nr::OPENAT => vfs::openat,
        nr::NEWFSTATAT => vfs::newfstatat,
        nr::STATX => vfs::statx,
        nr::FACCESSAT => vfs::faccessat,
        nr::FACCESSAT2 => vfs::faccessat2,
        nr::UTIMENSAT => vfs::utimensat,
        nr::SYNC => vfs::sync,
        nr::LINK => vfs::link,
        nr::LINKAT => vfs::linkat,
        nr::FLOCK => vfs::flock,
        nr::CHOWN => vfs::chown,
        nr::FCHOWN => vfs::fchown,
        nr::LCHOWN => vfs::lchown,
        nr::FCHOWNAT => vfs::fchownat,
        nr::STATFS => vfs::statfs,
        nr::FSTATFS => vfs::fstatfs,
        nr::UTIMES => vfs::utimes,
        nr::FUTIMESAT => vfs::futimesat,
        nr::FALLOCATE => vfs::fallocate,
        nr::PREADV => vfs::preadv,
        nr::PWRITEV => vfs::pwritev,
        nr::PREADV2 => vfs::preadv2,
        nr::PWRITEV2 => vfs::pwritev2,
        nr::SENDFILE => vfs::sendfile,
        nr::COPY_FILE_RANGE => vfs::copy_file_range,
        nr::READAHEAD => vfs::readahead,
        nr::FADVISE64 => vfs::fadvise64,
        nr::MKNOD => vfs::mknod,
        nr::MKNODAT => vfs::mknodat,
        nr::GETDENTS => vfs::getdents,
        nr::SYNC_FILE_RANGE => vfs::sync_file_range,
        nr::SYNCFS => vfs::syncfs,
        // pipes and readiness
        nr::PIPE => vfs::pipe,
        nr::PIPE2 => vfs::pipe2,
        nr::POLL => vfs::poll,
        nr::PPOLL => vfs::ppoll,
        nr::SELECT => vfs::select,
        nr::PSELECT6 => vfs::pselect6,
        // memory
        nr::BRK => mm::brk,
        nr::MMAP => mm::mmap,
        nr::MUNMAP => mm::munmap,
        nr::MREMAP => mm::mremap,
        nr::MPROTECT => mm::mprotect,
        nr::MADVISE => mm::madvise,
        nr::MSYNC => mm::msync,
        nr::MINCORE => mm::mincore,
        // time
        nr::CLOCK_GETTIME => time::clock_gettime,
        nr::CLOCK_GETRES => time::clock_getres,
        nr::GETTIMEOFDAY => time::gettimeofday,
        nr::TIME => time::time,
        nr::NANOSLEEP => sched::nanosleep,
        nr::CLOCK_NANOSLEEP => sched::clock_nanosleep,
        // scheduling
        nr::SCHED_YIELD => sched::sched_yield,
        nr::FUTEX => sched::futex,
        nr::SCHED_GETAFFINITY => sched::sched_getaffinity,
        // process
        nr::EXIT => process::exit,
        nr::EXIT_GROUP => process::exit_group,
        nr::GETPID => process::getpid,
        nr::GETPPID => process::getppid,
        nr::GETTID => process::gettid,
        nr::SET_TID_ADDRESS => process::set_tid_address,
        nr::ARCH_PRCTL => process::arch_prctl,
        nr::RT_SIGACTION => process::rt_sigaction,
        nr::RT_SIGPROCMASK => process::rt_sigprocmask,
        nr::SIGALTSTACK => process::sigaltstack,
        nr::PRLIMIT64 => process::prlimit64,
        nr::GETRLIMIT => process::getrlimit,
        nr::SETRLIMIT => process::setrlimit,
        nr::GETRUSAGE => process::getrusage,
        nr::SET_ROBUST_LIST => process::set_robust_list,
        nr::TGKILL => process::tgkill,
        nr::KILL => process::kill,
        nr::TKILL => process::tkill,
        nr::RT_SIGPENDING => process::rt_sigpending,
        // identity
        nr::GETUID => user::getuid,
        nr::GETEUID => user::geteuid,
        nr::GETGID => user::getgid,
        nr::GETEGID => user::getegid,
        nr::GETGROUPS => user::getgroups,
        nr::GETRESUID => user::getresuid,
        nr::GETRESGID => user::getresgid,
        // system information
        nr::UNAME => sysinfo::uname,
        nr::SYSINFO => sysinfo::sysinfo,
        nr::GETRANDOM => sysinfo::getrandom,
        _ => return None,
    };
    Some(f)
}

/// Numbers already reported as unknown (one bit each, numbers below 1024).
static REPORTED: Global<[u64; 16]> = Global::new([0; 16]);

fn report_unknown(n: u64) {
    let first = REPORTED.with(|r| {
        if n >= 1024 {
            return true;
        }
        let (w, b) = ((n / 64) as usize, n % 64);
        let first = r[w] & (1 << b) == 0;
        r[w] |= 1 << b;
        first
    });
    if first {
        use core::fmt::Write;
        let _ = writeln!(
            shoal_plat::console::Stderr,
            "shoal: unsupported system call {n} ({}), returning ENOSYS",
            nr::name(n).unwrap_or("?")
        );
    }
}

/// Linux raises `SIGPIPE` for the thread whose write to a pipe without
/// readers fails with `EPIPE` (default action: terminate). The pipe is
/// vfs's, the signal process's: the table joins them.
fn sigpipe(n: u64, r: shoal_plat::SysResult) -> shoal_plat::SysResult {
    const SIGPIPE: i32 = 13;
    if r == Err(Errno::EPIPE)
        && matches!(n, nr::WRITE | nr::WRITEV | nr::PWRITEV | nr::PWRITEV2 | nr::SENDFILE | nr::COPY_FILE_RANGE)
    {
        shoal_process::signal::send_self(SIGPIPE, shoal_process::signal::SI_USER);
    }
    r
}

/// Runs system call `n` with arguments `args`; returns the result or a
/// negative errno. Signals another thread sent the caller while it was
/// blocked are delivered before the result returns (`shoal_process::signal`).
pub fn dispatch(n: u64, args: &Args) -> i64 {
    let r = match lookup(n) {
        Some(f) => match sigpipe(n, f(args)) {
            Ok(v) => v as i64,
            Err(e) => e.to_ret(),
        },
        None => {
            report_unknown(n);
            Errno::ENOSYS.to_ret()
        }
    };
    if shoal_sched::has_deliverable() {
        shoal_process::signal::deliver_pending();
    }
    r
}

/// The entry point shoal's libc calls instead of the `syscall` instruction.
#[cfg(not(test))]
#[no_mangle]
pub extern "C" fn __shoal_syscall(n: i64, a: i64, b: i64, c: i64, d: i64, e: i64, f: i64) -> i64 {
    let args = Args([a as u64, b as u64, c as u64, d as u64, e as u64, f as u64]);
    dispatch(n as u64, &args)
}
