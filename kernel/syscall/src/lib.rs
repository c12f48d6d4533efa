//! Kernel component `syscall` (docs/design.md "Components and recovery"): the Linux x86-64 system-call
//! table.
//!
//! shoal's libc turns every system call into a call of
//! [`__shoal_syscall`]; this crate maps the Linux syscall number to the
//! component that implements it. Each component exposes its syscalls as
//! `sys::NAME(&Args) -> SysResult` functions. A number nobody implements
//! returns `-ENOSYS` and is reported once on stderr.
#![cfg_attr(not(test), no_std)]

extern crate alloc;

use shoal_plat::{Args, Errno, Global, SyscallFn};

pub mod exec;
pub mod fault;
pub mod interp;
pub mod patch;
pub mod preempt;
pub mod vdso;

pub use shoal_abi::linux as nr;

/// Numbers of the System V IPC calls (x86-64), which `shoal_abi::linux`
/// does not name.
mod nr_ipc {
    pub const SHMGET: u64 = 29;
    pub const SHMAT: u64 = 30;
    pub const SHMCTL: u64 = 31;
    pub const SEMGET: u64 = 64;
    pub const SEMOP: u64 = 65;
    pub const SEMCTL: u64 = 66;
    pub const SHMDT: u64 = 67;
    pub const MSGGET: u64 = 68;
    pub const MSGSND: u64 = 69;
    pub const MSGRCV: u64 = 70;
    pub const MSGCTL: u64 = 71;
    pub const SEMTIMEDOP: u64 = 220;
}

/// Numbers of the calls that wait for a signal, which `shoal_abi::linux`
/// does not name (x86-64).
mod nr_signal {
    pub const PAUSE: u64 = 34;
    pub const RT_SIGSUSPEND: u64 = 130;
    pub const RT_SIGTIMEDWAIT: u64 = 128;
    pub const RT_SIGQUEUEINFO: u64 = 129;
    pub const RT_TGSIGQUEUEINFO: u64 = 297;
}

/// Numbers of the scheduling calls that `shoal_abi::linux` does not name
/// (x86-64).
mod nr_sched {
    pub const SCHED_SETAFFINITY: u64 = 203;
    pub const GETCPU: u64 = 309;
    pub const GETPRIORITY: u64 = 140;
    pub const SETPRIORITY: u64 = 141;
    pub const SCHED_GET_PRIORITY_MAX: u64 = 146;
    pub const SCHED_GET_PRIORITY_MIN: u64 = 147;
}

/// Numbers of the interval-timer calls, which `shoal_abi::linux` does not
/// name (x86-64).
mod nr_time {
    pub const GETITIMER: u64 = 36;
    pub const ALARM: u64 = 37;
    pub const SETITIMER: u64 = 38;
}

/// Numbers of the socket and readiness calls that `shoal_abi::linux` does
/// not name (x86-64).
mod nr_net {
    pub const SENDMSG: u64 = 46;
    pub const RECVMSG: u64 = 47;
    pub const SHUTDOWN: u64 = 48;
    pub const BIND: u64 = 49;
    pub const LISTEN: u64 = 50;
    pub const GETSOCKNAME: u64 = 51;
    pub const GETPEERNAME: u64 = 52;
    pub const SOCKETPAIR: u64 = 53;
    pub const SETSOCKOPT: u64 = 54;
    pub const GETSOCKOPT: u64 = 55;
    pub const EPOLL_CREATE: u64 = 213;
    pub const EPOLL_WAIT: u64 = 232;
    pub const EPOLL_CTL: u64 = 233;
    pub const EPOLL_PWAIT: u64 = 281;
    pub const SIGNALFD: u64 = 282;
    pub const TIMERFD_CREATE: u64 = 283;
    pub const EVENTFD: u64 = 284;
    pub const TIMERFD_SETTIME: u64 = 286;
    pub const TIMERFD_GETTIME: u64 = 287;
    pub const ACCEPT4: u64 = 288;
    pub const SIGNALFD4: u64 = 289;
    pub const EVENTFD2: u64 = 290;
    pub const EPOLL_CREATE1: u64 = 291;
    pub const RECVMMSG: u64 = 299;
    pub const SENDMMSG: u64 = 307;
    pub const EPOLL_PWAIT2: u64 = 441;
    pub const WAIT4: u64 = 61;
    pub const WAITID: u64 = 247;
    pub const PIDFD_SEND_SIGNAL: u64 = 424;
    pub const PIDFD_OPEN: u64 = 434;
    pub const PIDFD_GETFD: u64 = 438;
    pub const INOTIFY_INIT: u64 = 253;
    pub const INOTIFY_ADD_WATCH: u64 = 254;
    pub const INOTIFY_RM_WATCH: u64 = 255;
    pub const INOTIFY_INIT1: u64 = 294;
}

/// The table's `match`, which also names the component of each entry (the
/// `sys` module it calls into) for recover's gate: a new entry names its
/// module, so the attribution cannot drift from the table.
macro_rules! table {
    ($n:expr; $($p:pat => $m:ident :: $f:ident,)*) => {
        match $n {
            $($p => (component!($m), $m::$f),)*
            _ => return None,
        }
    };
}

/// The component of each `sys` module the table calls into.
macro_rules! component {
    (vfs) => {
        shoal_recover::id::VFS
    };
    (net) => {
        shoal_recover::id::NET
    };
    (pidfd) => {
        shoal_recover::id::NET
    };
    (inotify) => {
        shoal_recover::id::NET
    };
    (mm) => {
        shoal_recover::id::MM
    };
    (time) => {
        shoal_recover::id::TIME
    };
    (sched) => {
        shoal_recover::id::SCHED
    };
    (itimer) => {
        shoal_recover::id::SCHED
    };
    (process) => {
        shoal_recover::id::PROCESS
    };
    (ipc) => {
        shoal_recover::id::PROCESS
    };
    (user) => {
        shoal_recover::id::USER
    };
    (sysinfo) => {
        shoal_recover::id::SYSINFO
    };
}

/// The function for system call `n` and the component it belongs to.
fn lookup(n: u64) -> Option<(shoal_recover::Component, SyscallFn)> {
    use nr_net as nn;
    use shoal_mm::sys as mm;
    use shoal_net::inotify;
    use shoal_net::pidfd;
    use shoal_net::sys as net;
    use shoal_process::ipc;
    use shoal_process::sys as process;
    use shoal_sched::itimer;
    use shoal_sched::sys as sched;
    use shoal_sysinfo::sys as sysinfo;
    use shoal_time::sys as time;
    use shoal_user::sys as user;
    use shoal_vfs::sys as vfs;
    let e: (shoal_recover::Component, SyscallFn) = table! { n;
        // files (vfs, ramfs behind it); reads and writes pass through net,
        // which serves its own descriptors and hands the rest to vfs
        nr::READ => net::read,
        nr::WRITE => net::write,
        nr::OPEN => vfs::open,
        nr::CLOSE => vfs::close,
        nr::STAT => vfs::stat,
        nr::FSTAT => vfs::fstat,
        nr::LSTAT => vfs::lstat,
        nr::LSEEK => vfs::lseek,
        nr::IOCTL => net::ioctl,
        nr::PREAD64 => vfs::pread64,
        nr::PWRITE64 => vfs::pwrite64,
        nr::READV => net::readv,
        nr::WRITEV => net::writev,
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
        319 => vfs::memfd_create,
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
        436 => vfs::close_range,
        // extended attributes: none kept
        188 => vfs::setxattr,
        189 => vfs::lsetxattr,
        190 => vfs::fsetxattr,
        191 => vfs::getxattr,
        192 => vfs::lgetxattr,
        193 => vfs::fgetxattr,
        194 => vfs::listxattr,
        195 => vfs::llistxattr,
        196 => vfs::flistxattr,
        197 => vfs::removexattr,
        198 => vfs::lremovexattr,
        199 => vfs::fremovexattr,
        // pipes and readiness
        nr::PIPE => vfs::pipe,
        nr::PIPE2 => vfs::pipe2,
        nr::POLL => vfs::poll,
        nr::PPOLL => vfs::ppoll,
        nr::SELECT => vfs::select,
        nr::PSELECT6 => vfs::pselect6,
        // sockets, epoll, eventfd, timerfd (net)
        nr::SOCKET => net::socket,
        nr::CONNECT => net::connect,
        nr::ACCEPT => net::accept,
        nr::SENDTO => net::sendto,
        nr::RECVFROM => net::recvfrom,
        nn::SENDMSG => net::sendmsg,
        nn::RECVMSG => net::recvmsg,
        nn::SHUTDOWN => net::shutdown,
        nn::BIND => net::bind,
        nn::LISTEN => net::listen,
        nn::GETSOCKNAME => net::getsockname,
        nn::GETPEERNAME => net::getpeername,
        nn::SOCKETPAIR => net::socketpair,
        nn::SETSOCKOPT => net::setsockopt,
        nn::GETSOCKOPT => net::getsockopt,
        nn::ACCEPT4 => net::accept4,
        nn::SENDMMSG => net::sendmmsg,
        nn::RECVMMSG => net::recvmmsg,
        nn::EPOLL_CREATE => net::epoll_create,
        nn::EPOLL_CREATE1 => net::epoll_create1,
        nn::EPOLL_CTL => net::epoll_ctl,
        nn::EPOLL_WAIT => net::epoll_wait,
        nn::EPOLL_PWAIT => net::epoll_pwait,
        nn::EPOLL_PWAIT2 => net::epoll_pwait2,
        nn::EVENTFD => net::eventfd,
        nn::EVENTFD2 => net::eventfd2,
        nn::SIGNALFD => net::signalfd,
        nn::SIGNALFD4 => net::signalfd4,
        nn::TIMERFD_CREATE => net::timerfd_create,
        nn::TIMERFD_SETTIME => net::timerfd_settime,
        nn::TIMERFD_GETTIME => net::timerfd_gettime,
        // process descriptors and waits (net holds the descriptors' objects)
        nn::PIDFD_OPEN => pidfd::pidfd_open,
        nn::PIDFD_SEND_SIGNAL => pidfd::pidfd_send_signal,
        nn::PIDFD_GETFD => pidfd::pidfd_getfd,
        nn::WAIT4 => pidfd::wait4,
        nn::WAITID => pidfd::waitid,
        // inotify (net holds the instances; vfs reports the changes)
        nn::INOTIFY_INIT => inotify::inotify_init,
        nn::INOTIFY_INIT1 => inotify::inotify_init1,
        nn::INOTIFY_ADD_WATCH => inotify::inotify_add_watch,
        nn::INOTIFY_RM_WATCH => inotify::inotify_rm_watch,
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
        227 => time::clock_settime,
        nr::GETTIMEOFDAY => time::gettimeofday,
        nr::TIME => time::time,
        nr_time::GETITIMER => itimer::getitimer,
        nr_time::ALARM => itimer::alarm,
        nr_time::SETITIMER => itimer::setitimer,
        nr::NANOSLEEP => sched::nanosleep,
        nr_signal::PAUSE => sched::pause,
        nr_signal::RT_SIGSUSPEND => sched::rt_sigsuspend,
        nr::CLOCK_NANOSLEEP => sched::clock_nanosleep,
        // scheduling
        nr::SCHED_YIELD => sched::sched_yield,
        nr::FUTEX => sched::futex,
        nr::SCHED_GETAFFINITY => sched::sched_getaffinity,
        nr_sched::SCHED_SETAFFINITY => sched::sched_setaffinity,
        nr_sched::GETCPU => sched::getcpu,
        nr_sched::GETPRIORITY => sched::getpriority,
        nr_sched::SETPRIORITY => sched::setpriority,
        nr_sched::SCHED_GET_PRIORITY_MAX => sched::sched_get_priority_max,
        nr_sched::SCHED_GET_PRIORITY_MIN => sched::sched_get_priority_min,
        nr::MEMBARRIER => sched::membarrier,
        // process
        nr::EXIT => process::exit,
        nr::EXIT_GROUP => process::exit_group,
        nr::GETPID => process::getpid,
        nr::GETPPID => process::getppid,
        nr::GETTID => process::gettid,
        nr::SET_TID_ADDRESS => process::set_tid_address,
        nr::ARCH_PRCTL => process::arch_prctl,
        nr::PRCTL => process::prctl,
        nr::RT_SIGRETURN => process::rt_sigreturn,
        nr::RT_SIGACTION => process::rt_sigaction,
        nr::RT_SIGPROCMASK => process::rt_sigprocmask,
        nr::SIGALTSTACK => process::sigaltstack,
        nr::PRLIMIT64 => process::prlimit64,
        nr::GETRLIMIT => process::getrlimit,
        nr::SETRLIMIT => process::setrlimit,
        nr::GETRUSAGE => process::getrusage,
        100 => process::times,
        nr::SET_ROBUST_LIST => process::set_robust_list,
        nr::GET_ROBUST_LIST => process::get_robust_list,
        nr::TGKILL => process::tgkill,
        nr::KILL => process::kill,
        nr::TKILL => process::tkill,
        nr::RT_SIGPENDING => process::rt_sigpending,
        nr_signal::RT_SIGTIMEDWAIT => process::rt_sigtimedwait,
        nr_signal::RT_SIGQUEUEINFO => process::rt_sigqueueinfo,
        nr_signal::RT_TGSIGQUEUEINFO => process::rt_tgsigqueueinfo,
        // System V IPC (process)
        nr_ipc::SHMGET => ipc::shmget,
        nr_ipc::SHMAT => ipc::shmat,
        nr_ipc::SHMDT => ipc::shmdt,
        nr_ipc::SHMCTL => ipc::shmctl,
        nr_ipc::SEMGET => ipc::semget,
        nr_ipc::SEMOP => ipc::semop,
        nr_ipc::SEMTIMEDOP => ipc::semtimedop,
        nr_ipc::SEMCTL => ipc::semctl,
        nr_ipc::MSGGET => ipc::msgget,
        nr_ipc::MSGSND => ipc::msgsnd,
        nr_ipc::MSGRCV => ipc::msgrcv,
        nr_ipc::MSGCTL => ipc::msgctl,
        // identity
        nr::GETUID => user::getuid,
        nr::GETEUID => user::geteuid,
        nr::GETGID => user::getgid,
        nr::GETEGID => user::getegid,
        nr::GETGROUPS => user::getgroups,
        nr::GETRESUID => user::getresuid,
        nr::GETRESGID => user::getresgid,
        nr::SETUID => user::setuid,
        nr::SETGID => user::setgid,
        113 => user::setreuid,
        114 => user::setregid,
        116 => user::setgroups,
        117 => user::setresuid,
        119 => user::setresgid,
        122 => user::setfsuid,
        123 => user::setfsgid,
        125 => user::capget,
        // system information
        nr::UNAME => sysinfo::uname,
        nr::SYSINFO => sysinfo::sysinfo,
        nr::GETRANDOM => sysinfo::getrandom,
        170 => sysinfo::sethostname,
    };
    Some(e)
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
        let _ = writeln!(shoal_plat::console::Stderr, "shoal: unsupported system call {n} ({}), returning ENOSYS", nr::name(n).unwrap_or("?"));
    }
}

/// Linux raises `SIGPIPE` for the thread whose write to a pipe or socket
/// without readers fails with `EPIPE` (default action: terminate), unless
/// a send asked for `MSG_NOSIGNAL`. The pipe is vfs's, the socket net's,
/// the signal process's: the table joins them.
fn sigpipe(n: u64, args: &Args, r: shoal_plat::SysResult) -> shoal_plat::SysResult {
    const SIGPIPE: i32 = 13;
    const MSG_NOSIGNAL: u64 = 0x4000;
    let send_flags = match n {
        nr::SENDTO | nr_net::SENDMMSG => Some(args.u(3)),
        nr_net::SENDMSG => Some(args.u(2)),
        // pwritev2's RWF_NOSIGNAL says the same as MSG_NOSIGNAL.
        nr::PWRITEV2 if args.uint(5) & shoal_vfs::RWF_NOSIGNAL != 0 => Some(MSG_NOSIGNAL),
        _ => None,
    };
    let raises = match send_flags {
        Some(f) => f & MSG_NOSIGNAL == 0,
        None => matches!(n, nr::WRITE | nr::WRITEV | nr::PWRITEV | nr::PWRITEV2 | nr::SENDFILE | nr::COPY_FILE_RANGE),
    };
    if r == Err(Errno::EPIPE) && raises {
        shoal_process::signal::send_self(SIGPIPE, shoal_process::signal::SI_USER);
    }
    r
}

/// Resource limits are `process`'s, the resources mm's and vfs's: when a
/// limit may have changed, the table hands the enforced soft limits to
/// them; when vfs reports that a write or truncation exceeded
/// `RLIMIT_FSIZE`, it raises `SIGXFSZ` as Linux does.
fn limits(n: u64, r: shoal_plat::SysResult) -> shoal_plat::SysResult {
    use shoal_process::limits as l;
    use shoal_process::sys::soft_limit;
    if matches!(n, nr::SETRLIMIT | nr::PRLIMIT64) && r.is_ok() {
        shoal_mm::set_limits(soft_limit(l::RLIMIT_AS), soft_limit(l::RLIMIT_DATA));
        shoal_vfs::with(|v| v.set_limits(soft_limit(l::RLIMIT_NOFILE), soft_limit(l::RLIMIT_FSIZE)));
    }
    if shoal_vfs::take_xfsz() {
        const SIGXFSZ: i32 = 25;
        shoal_process::signal::send_self(SIGXFSZ, shoal_process::signal::SI_USER);
    }
    r
}

/// Runs system call `n` with arguments `args`; returns the result or a
/// negative errno. Signals another thread sent the caller while it was
/// blocked are delivered before the result returns (`shoal_process::signal`).
pub fn dispatch(n: u64, args: &Args) -> i64 {
    let r = match lookup(n) {
        // Through the gate of its component (recover: a rebootable
        // component that fails is rebooted and the call retried).
        Some((c, f)) => match limits(n, sigpipe(n, args, shoal_recover::call_in(c, f, args))) {
            Ok(v) => v as i64,
            Err(e) => e.to_ret(),
        },
        None => {
            report_unknown(n);
            Errno::ENOSYS.to_ret()
        }
    };
    // Signals the tender forwarded (SIGTERM) while the program ran.
    shoal_sched::raise_host_signals_after_call();
    // A ppoll/pselect6 interrupted under its temporary mask: deliver with
    // that mask, then restore the caller's (Linux's saved sigmask).
    let (saved, deliverable) = shoal_sched::after_call();
    if deliverable {
        shoal_process::signal::deliver_pending();
    }
    if let Some(m) = saved {
        let (_, pending) = shoal_sched::sig_state();
        shoal_sched::set_sig_state(m, pending);
        if shoal_sched::has_deliverable() {
            shoal_process::signal::deliver_pending();
        }
    }
    r
}

// The entry point shoal's libc calls instead of the `syscall` instruction,
// `__shoal_syscall(n, a, b, c, d, e, f)`: it aligns the stack to 16 bytes
// and calls `shoal_syscall_aligned` with the same arguments (the seventh,
// on the stack, copied). The program may call with the stack misaligned —
// code a preemption tick entered at whatever alignment it interrupted
// (a SIGCANCEL handler, a hostile program's own redirect) — and kernel
// code must not depend on it: the compiler keeps 16-byte values on the
// stack with aligned SSE moves, which fault on a misaligned stack.
#[cfg(not(test))]
core::arch::global_asm!(
    ".section .text.__shoal_syscall,\"ax\",@progbits",
    ".globl __shoal_syscall",
    ".type __shoal_syscall,@function",
    "__shoal_syscall:",
    "    push rbp",
    "    mov rbp, rsp",
    "    and rsp, -16",
    "    sub rsp, 16",
    "    mov rax, [rbp + 16]",
    "    mov [rsp], rax",
    "    call {aligned}",
    "    leave",
    "    ret",
    ".size __shoal_syscall, . - __shoal_syscall",
    aligned = sym shoal_syscall_aligned,
);

#[cfg(not(test))]
extern "C" {
    /// The entry point shoal's libc calls (the assembly above).
    pub fn __shoal_syscall(n: i64, a: i64, b: i64, c: i64, d: i64, e: i64, f: i64) -> i64;
}

/// The system call, on a 16-byte aligned stack (from `__shoal_syscall`).
#[cfg(not(test))]
extern "C" fn shoal_syscall_aligned(n: i64, a: i64, b: i64, c: i64, d: i64, e: i64, f: i64) -> i64 {
    if n as u64 == nr::RT_SIGRETURN {
        // A handler returns to the kernel code that entered it, which is
        // outside this call: nothing here may be entered first (the
        // preemption state, a recovery gate).
        shoal_process::signal::sigreturn_from_image();
    }
    // Kernel code from here to the return: no preemption (see `preempt`).
    shoal_sched::preempt::enter();
    let args = Args([a as u64, b as u64, c as u64, d as u64, e as u64, f as u64]);
    if let Some(r) = clock_read(n as u64, &args) {
        preempt::leave_syscall();
        return r;
    }
    shoal_plat::next_syscall_epoch();
    let r = match refused(n as u64) {
        Some(r) => r,
        None => dispatch(n as u64, &args),
    };
    preempt::leave_syscall();
    r
}

/// The program's seccomp profile (`BootInfo::syscall_errno`, a
/// container's `linux.seccomp`): the negative errno a refused call
/// returns without running. Checked where the program's calls come in
/// (not in [`dispatch`], which the kernel's own loading of an interpreter
/// uses too, as Linux's execve is not filtered); the clock reads that
/// Linux answers in the vDSO are not filtered either, as on Linux.
#[cfg(not(test))]
#[inline]
pub(crate) fn refused(n: u64) -> Option<i64> {
    match shoal_plat::boot::syscall_errno(n) {
        0 => None,
        e => Some(Errno(i32::from(e)).to_ret()),
    }
}

/// The clock reads `clock_gettime` and `gettimeofday`, answered without
/// the table's gate and signal handling when nothing is waiting for
/// them: on Linux the vDSO answers them in the process, without entering
/// the kernel, and a server reads the clock several times per request
/// (Redis: around each command, and in its event loop). Taken only when
/// no signal is pending or deliverable and no interval timer is armed
/// (the full path raises and delivers those, and a program may poll the
/// clock waiting for them), and when recover lets the call go ungated
/// (`shoal_recover::ungated_call`: not with an `--inject` into `time`).
/// `None`: take the full path.
#[cfg(not(test))]
fn clock_read(n: u64, args: &Args) -> Option<i64> {
    use shoal_time::sys as time;
    let f: SyscallFn = match n {
        nr::CLOCK_GETTIME => time::clock_gettime,
        nr::GETTIMEOFDAY => time::gettimeofday,
        _ => return None,
    };
    if shoal_plat::hostsig::pending() || shoal_sched::itimer::deadline().is_some() || shoal_sched::has_deliverable() {
        return None;
    }
    if !shoal_recover::ungated_call(shoal_recover::id::TIME) {
        return None;
    }
    Some(match f(args) {
        Ok(v) => v as i64,
        Err(e) => e.to_ret(),
    })
}

#[cfg(test)]
mod tests {
    /// Every x86-64 system call number the kernel answers with `ENOSYS` is
    /// listed, with its reason, in docs/syscalls.md, and nothing else is:
    /// the list cannot go stale.
    #[test]
    fn docs_list_exactly_the_unimplemented_system_calls() {
        let doc = include_str!("../../../docs/syscalls.md");
        let listed: std::collections::BTreeSet<u64> =
            doc.lines().filter_map(|l| l.strip_prefix("| ")).filter_map(|l| l.split(' ').next()).filter_map(|n| n.parse().ok()).collect();
        // 0..=335 and 424..=462: the x86-64 table (335..424 are unused).
        let missing: std::collections::BTreeSet<u64> = (0..=335u64).chain(424..=462).filter(|&n| super::lookup(n).is_none()).collect();
        let undocumented: Vec<u64> = missing.difference(&listed).copied().collect();
        let stale: Vec<u64> = listed.difference(&missing).copied().collect();
        assert!(undocumented.is_empty(), "answered with ENOSYS but not in docs/syscalls.md: {undocumented:?}");
        assert!(stale.is_empty(), "listed in docs/syscalls.md but implemented: {stale:?}");
    }
}
