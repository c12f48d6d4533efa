//! The few system calls shoal-oci needs that std does not wrap: the FIFO
//! that holds a created container, the pseudo-terminal and its hand-over
//! over the console socket (SCM_RIGHTS, as runc's `--console-socket`),
//! signal names, walking a process's descendants for `kill --all`, and
//! opening a file beneath the root file system (`openat2`).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Turns a -1 return into the errno.
pub fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// A path as a C string (paths from config.json or the command line have
/// no NUL; one that does is refused as invalid input).
pub fn cstr(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))
}

/// Opens `path` (relative, or absolute meaning relative) beneath the
/// directory `root` with `openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)`:
/// every symlink and `..` on the way is resolved as if `root` were `/`, so
/// no symlink of the root file system can name a host file outside it, and
/// the descriptor is the file found (no path is resolved again later).
/// Read-only, close-on-exec.
pub fn open_beneath(root: &std::fs::File, path: &Path) -> io::Result<std::fs::File> {
    let c = cstr(path)?;
    // SAFETY: an all-zero open_how is valid (no flags, mode or resolve bits).
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOCTTY | libc::O_NONBLOCK) as u64;
    how.resolve = libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: `c` is NUL-terminated and `how` a valid open_how whose size
    // is passed; the result is a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_openat2, root.as_raw_fd(), c.as_ptr(), &how as *const libc::open_how, std::mem::size_of::<libc::open_how>()) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned here.
    Ok(unsafe { std::fs::File::from_raw_fd(fd as libc::c_int) })
}

/// Makes directory `name` (one plain name) in directory `dir`.
pub fn mkdir_in(dir: &std::fs::File, name: &std::ffi::OsStr, mode: libc::mode_t) -> io::Result<()> {
    let c = CString::new(name.as_bytes()).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a name with a NUL byte"))?;
    // SAFETY: `c` is NUL-terminated and `dir` an open descriptor.
    check(unsafe { libc::mkdirat(dir.as_raw_fd(), c.as_ptr(), mode) }).map(drop)
}

/// Makes regular file `name` (one plain name, never through a link) in
/// directory `dir`, empty, if it is missing.
pub fn create_in(dir: &std::fs::File, name: &std::ffi::OsStr, mode: libc::mode_t) -> io::Result<()> {
    let c = CString::new(name.as_bytes()).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a name with a NUL byte"))?;
    // SAFETY: `c` is NUL-terminated and `dir` an open descriptor; the
    // descriptor made is closed at once.
    let fd = check(unsafe {
        libc::openat(dir.as_raw_fd(), c.as_ptr(), libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY | libc::O_NOFOLLOW | libc::O_CLOEXEC, libc::c_uint::from(mode))
    })?;
    // SAFETY: `fd` was just made and is owned here.
    drop(unsafe { OwnedFd::from_raw_fd(fd) });
    Ok(())
}

/// A duplicate of `fd` at the lowest free number `>= min`, close-on-exec.
pub fn dup_at_least(fd: &impl AsRawFd, min: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC takes an integer; the result is a new
    // descriptor or -1.
    let n = check(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, min) })?;
    // SAFETY: `n` was just made and is owned here.
    Ok(unsafe { OwnedFd::from_raw_fd(n) })
}

/// Makes the FIFO a created container waits on.
pub fn mkfifo(p: &Path) -> io::Result<()> {
    let c = cstr(p)?;
    // SAFETY: `c` is a valid NUL-terminated path.
    check(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }).map(drop)
}

/// A pipe, both ends close-on-exec.
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors.
    check(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: pipe2 succeeded, so both descriptors are open and ours.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// A pseudo-terminal: (master, slave), both close-on-exec; the slave gets
/// `size` (rows, columns) when given.
pub fn openpty(size: Option<(u16, u16)>) -> io::Result<(OwnedFd, OwnedFd)> {
    // SAFETY: posix_openpt takes flags only and returns a new descriptor
    // or -1.
    let m = check(unsafe { libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC) })?;
    // SAFETY: m was just opened and is owned here.
    let master = unsafe { OwnedFd::from_raw_fd(m) };
    // SAFETY: grantpt/unlockpt take the master descriptor.
    check(unsafe { libc::grantpt(m) })?;
    // SAFETY: as above.
    check(unsafe { libc::unlockpt(m) })?;
    let mut name = [0 as libc::c_char; 128];
    // SAFETY: the buffer is 128 bytes and its length is passed.
    let r = unsafe { libc::ptsname_r(m, name.as_mut_ptr(), name.len()) };
    if r != 0 {
        return Err(io::Error::from_raw_os_error(r));
    }
    // SAFETY: ptsname_r wrote a NUL-terminated path into `name`.
    let s = check(unsafe { libc::open(name.as_ptr(), libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC) })?;
    // SAFETY: s was just opened and is owned here.
    let slave = unsafe { OwnedFd::from_raw_fd(s) };
    if let Some((rows, cols)) = size {
        let ws = libc::winsize { ws_row: rows, ws_col: cols, ws_xpixel: 0, ws_ypixel: 0 };
        // SAFETY: TIOCSWINSZ reads one winsize from the pointer.
        check(unsafe { libc::ioctl(s, libc::TIOCSWINSZ, &ws) })?;
    }
    Ok((master, slave))
}

/// Sends `fd` over the unix socket at `socket` with SCM_RIGHTS; the
/// message's bytes are the terminal's name, as runc sends them.
pub fn send_fd(socket: &Path, fd: &OwnedFd, name: &str) -> io::Result<()> {
    let stream = std::os::unix::net::UnixStream::connect(socket)?;
    let mut payload = name.as_bytes().to_vec();
    let mut iov = libc::iovec { iov_base: payload.as_mut_ptr().cast(), iov_len: payload.len() };
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<libc::c_int>() as u32) } as usize;
    // u64 elements keep the control buffer aligned for cmsghdr.
    let mut control = vec![0u64; space.div_ceil(8)];
    // SAFETY: a zeroed msghdr is valid; the pointers set below point at
    // live buffers of the given lengths for the whole sendmsg call.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::c_int>(), fd.as_raw_fd());
        check(libc::sendmsg(stream.as_raw_fd(), &msg, 0) as libc::c_int)?;
    }
    Ok(())
}

/// A signal given by number or by name, with or without `SIG`.
pub fn parse_signal(s: &str) -> Option<libc::c_int> {
    if let Ok(n) = s.parse::<libc::c_int>() {
        return (1..=64).contains(&n).then_some(n);
    }
    let name = s.to_ascii_uppercase();
    let name = name.strip_prefix("SIG").unwrap_or(&name);
    Some(match name {
        "HUP" => libc::SIGHUP,
        "INT" => libc::SIGINT,
        "QUIT" => libc::SIGQUIT,
        "ILL" => libc::SIGILL,
        "TRAP" => libc::SIGTRAP,
        "ABRT" | "IOT" => libc::SIGABRT,
        "BUS" => libc::SIGBUS,
        "FPE" => libc::SIGFPE,
        "KILL" => libc::SIGKILL,
        "USR1" => libc::SIGUSR1,
        "SEGV" => libc::SIGSEGV,
        "USR2" => libc::SIGUSR2,
        "PIPE" => libc::SIGPIPE,
        "ALRM" => libc::SIGALRM,
        "TERM" => libc::SIGTERM,
        "STKFLT" => libc::SIGSTKFLT,
        "CHLD" => libc::SIGCHLD,
        "CONT" => libc::SIGCONT,
        "STOP" => libc::SIGSTOP,
        "TSTP" => libc::SIGTSTP,
        "TTIN" => libc::SIGTTIN,
        "TTOU" => libc::SIGTTOU,
        "URG" => libc::SIGURG,
        "XCPU" => libc::SIGXCPU,
        "XFSZ" => libc::SIGXFSZ,
        "VTALRM" => libc::SIGVTALRM,
        "PROF" => libc::SIGPROF,
        "WINCH" => libc::SIGWINCH,
        "IO" | "POLL" => libc::SIGIO,
        "PWR" => libc::SIGPWR,
        "SYS" => libc::SIGSYS,
        _ => return None,
    })
}

/// Every descendant of `pid` (children first found by their parent pid in
/// /proc), for `kill --all`.
pub fn descendants(pid: i32) -> Vec<i32> {
    let mut parents: Vec<(i32, i32)> = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.filter_map(Result::ok) {
            let Some(p) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
                continue;
            };
            let Ok(text) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
                continue;
            };
            let ppid = text.rfind(')').and_then(|i| text[i + 1..].split_whitespace().nth(1)).and_then(|v| v.parse().ok());
            if let Some(pp) = ppid {
                parents.push((p, pp));
            }
        }
    }
    let mut out = Vec::new();
    let mut frontier = vec![pid];
    while let Some(q) = frontier.pop() {
        for &(p, pp) in &parents {
            if pp == q && !out.contains(&p) {
                out.push(p);
                frontier.push(p);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_by_name_and_number() {
        assert_eq!(parse_signal("KILL"), Some(9));
        assert_eq!(parse_signal("SIGTERM"), Some(15));
        assert_eq!(parse_signal("term"), Some(15));
        assert_eq!(parse_signal("9"), Some(9));
        assert_eq!(parse_signal("0"), None);
        assert_eq!(parse_signal("BOGUS"), None);
    }
}
