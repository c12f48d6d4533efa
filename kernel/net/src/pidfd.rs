//! Process descriptors (`pidfd_open`, `pidfd_send_signal`, `pidfd_getfd`)
//! and the waits for children (`wait4`, `waitid`), answered for the
//! instance's one process as Linux answers them.
//!
//! The instance is process 1 and has no children (`fork` is `ENOSYS`),
//! so the only process a pidfd can name is the instance itself, or with
//! `PIDFD_THREAD` one of its threads; any other pid is `ESRCH`, a thread
//! that does not lead its group without `PIDFD_THREAD` is `ENOENT`. A
//! pidfd is an object of this component (descriptors live in vfs, like
//! an eventfd's): never readable (the process it names is the caller, so
//! it has not exited), `read` is `EINVAL`, `fstat` shows Linux's pidfs
//! mode `0700`. Every wait is `ECHILD`, after Linux's checks of its
//! arguments.

use shoal_plat::{Args, Errno, SysResult};

use crate::Obj;

/// `PIDFD_NONBLOCK` (`O_NONBLOCK`) and `PIDFD_THREAD` (`O_EXCL`).
const PIDFD_NONBLOCK: u32 = 0o4000;
const PIDFD_THREAD: u32 = 0o200;
/// `pidfd_send_signal`'s flags: to the thread, its group, its process group.
const PIDFD_SIGNAL_THREAD: u32 = 1;
const PIDFD_SIGNAL_SCOPES: u32 = 1 | 2 | 4;
/// `F_DUPFD_CLOEXEC`.
const F_DUPFD_CLOEXEC: u64 = 1030;

/// What a pidfd names.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Pidfd {
    /// The thread (the process's first thread for the process).
    tid: u32,
    /// Opened with `PIDFD_THREAD`: signals go to the thread alone.
    thread: bool,
}

/// `pidfd_open(pid, flags)`.
pub fn pidfd_open(a: &Args) -> SysResult {
    let (pid, flags) = (a.int(0), a.uint(1));
    if flags & !(PIDFD_NONBLOCK | PIDFD_THREAD) != 0 || pid <= 0 {
        return Err(Errno::EINVAL);
    }
    let pid = pid as u32;
    let leader = pid as u64 == shoal_process::PID;
    if !leader && !shoal_sched::thread_exists(pid) {
        return Err(Errno::ESRCH);
    }
    if !leader && flags & PIDFD_THREAD == 0 {
        return Err(Errno::ENOENT);
    }
    let p = Pidfd { tid: pid, thread: flags & PIDFD_THREAD != 0 };
    let id = crate::with(|n| n.add(Obj::Pid(p)));
    // Linux makes every pidfd close-on-exec.
    let fd = shoal_vfs::with(|v| v.install_obj(id, flags & PIDFD_NONBLOCK != 0, true))?;
    Ok(fd as u64)
}

/// The pidfd behind descriptor `fd` (`EBADF` for any other descriptor).
fn pidfd_of(fd: i32) -> Result<Pidfd, Errno> {
    let (id, _) = shoal_vfs::obj_of_fd(fd).map_err(|_| Errno::EBADF)?;
    crate::with(|n| match n.objs.get(&id) {
        Some(Obj::Pid(p)) => Ok(*p),
        _ => Err(Errno::EBADF),
    })
}

/// `pidfd_send_signal(pidfd, sig, info, flags)`.
pub fn pidfd_send_signal(a: &Args) -> SysResult {
    let (fd, sig, info, flags) = (a.int(0), a.int(1), a.u(2), a.uint(3));
    if flags & !PIDFD_SIGNAL_SCOPES != 0 || (flags & PIDFD_SIGNAL_SCOPES).count_ones() > 1 {
        return Err(Errno::EINVAL);
    }
    let p = pidfd_of(fd)?;
    let pid = shoal_process::PID;
    let to_thread = if flags == 0 { p.thread } else { flags == PIDFD_SIGNAL_THREAD };
    match (info, to_thread) {
        (0, false) => shoal_process::sys::kill(&Args([pid, sig as u64, 0, 0, 0, 0])),
        (0, true) => shoal_process::sys::tgkill(&Args([pid, p.tid as u64, sig as u64, 0, 0, 0])),
        (i, false) => shoal_process::sys::rt_sigqueueinfo(&Args([pid, sig as u64, i, 0, 0, 0])),
        (i, true) => shoal_process::sys::rt_tgsigqueueinfo(&Args([pid, p.tid as u64, sig as u64, i, 0, 0])),
    }
}

/// `pidfd_getfd(pidfd, targetfd, flags)`: the instance's own descriptor,
/// duplicated close-on-exec.
pub fn pidfd_getfd(a: &Args) -> SysResult {
    if a.uint(2) != 0 {
        return Err(Errno::EINVAL);
    }
    pidfd_of(a.int(0))?;
    shoal_vfs::sys::fcntl(&Args([a.u(1), F_DUPFD_CLOEXEC, 0, 0, 0, 0]))
}

/// `wait4`'s and `waitid`'s options Linux knows (`WNOHANG`, `WUNTRACED`/
/// `WSTOPPED`, `WEXITED`, `WCONTINUED`, `WNOWAIT`, `__WNOTHREAD`,
/// `__WALL`, `__WCLONE`).
const WNOHANG: u32 = 1;
const WSTOPPED: u32 = 2;
const WEXITED: u32 = 4;
const WCONTINUED: u32 = 8;
const WNOWAIT: u32 = 0x0100_0000;
const W_KERNEL: u32 = 0x2000_0000 | 0x4000_0000 | 0x8000_0000;

/// `wait4(pid, status, options, rusage)`: no children.
pub fn wait4(a: &Args) -> SysResult {
    if a.uint(2) & !(WNOHANG | WSTOPPED | WCONTINUED | W_KERNEL) != 0 {
        return Err(Errno::EINVAL);
    }
    Err(Errno::ECHILD)
}

/// `waitid(idtype, id, infop, options, rusage)`: no children; a pidfd
/// (`P_PIDFD`) names the instance itself, which is no child either.
pub fn waitid(a: &Args) -> SysResult {
    let (idtype, id, options) = (a.uint(0), a.int(1), a.uint(3));
    if options & !(WNOHANG | WNOWAIT | WEXITED | WSTOPPED | WCONTINUED | W_KERNEL) != 0 || options & (WEXITED | WSTOPPED | WCONTINUED) == 0 {
        return Err(Errno::EINVAL);
    }
    match idtype {
        // P_ALL; P_PID and P_PGID of no process there can be
        0 => {}
        1 if id <= 0 => return Err(Errno::EINVAL),
        2 if id < 0 => return Err(Errno::EINVAL),
        1 | 2 => {}
        // P_PIDFD
        3 => {
            pidfd_of(id)?;
        }
        _ => return Err(Errno::EINVAL),
    }
    Err(Errno::ECHILD)
}
