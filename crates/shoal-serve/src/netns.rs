//! A network namespace of its own for each runc and runsc instance.
//!
//! Before, runc containers had none and runsc ran with `--network=host`:
//! the function shared the gateway's loopback, so it could call the
//! management API and every other instance's port. Now the
//! gateway makes an empty namespace per instance (only `lo`, brought up
//! here) and names it in the container's `config.json`; runc joins it,
//! and runsc's sandbox does too (still `--network=host`: gVisor's own
//! network stack would keep the function's listener inside the sandbox,
//! out of the namespace's loopback; with host networking its sockets are
//! the namespace's). The gateway reaches the function by making each
//! connection's socket inside that namespace ([`NetNs::tcp_socket`]):
//! a socket stays in the namespace it was made in, whichever thread then
//! connects it. Nothing is routed into or out of the namespace, so the
//! function can reach no host address and no other instance, and the port
//! it listens on is its own (no race with other processes for it).
//!
//! Chosen over a veth pair with a published port (addresses, routes and a
//! firewall rule per instance, all of them to undo) and over a listening
//! socket handed in (runsc 2022 has no `--preserve-fds`).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::OnceLock;

/// Notes the gateway's own network namespace (at its start, before any
/// thread has entered another).
pub fn init() -> io::Result<()> {
    home().map(|_| ())
}

/// The gateway's own network namespace, to return to after each entry.
fn home() -> io::Result<&'static OwnedFd> {
    static HOME: OnceLock<OwnedFd> = OnceLock::new();
    if let Some(h) = HOME.get() {
        return Ok(h);
    }
    // The main thread never changes namespace: its is the gateway's.
    let fd = open_cloexec(c"/proc/self/ns/net")?;
    Ok(HOME.get_or_init(|| fd))
}

fn open_cloexec(path: &std::ffi::CStr) -> io::Result<OwnedFd> {
    // SAFETY: open with a NUL-terminated path; the result is a new descriptor.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `setns(fd, CLONE_NEWNET)` for the calling thread.
fn setns_net(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: setns takes a descriptor and a flag; it changes only the
    // calling thread's network namespace.
    if unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `socket(domain, type | SOCK_CLOEXEC, 0)`.
fn socket(domain: i32, ty: i32) -> io::Result<OwnedFd> {
    // SAFETY: socket takes no pointers; the result is a new descriptor.
    let fd = unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Runs `f` with the calling thread in `ns`, then returns it home. A
/// thread that cannot return would make the gateway's later sockets in
/// the function's namespace: the gateway stops rather than go on.
fn inside<T>(ns: Option<&OwnedFd>, f: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
    let home = home()?;
    match ns {
        Some(ns) => setns_net(ns)?,
        None => {
            // SAFETY: unshare takes a flag; it gives only the calling
            // thread a new network namespace.
            if unsafe { libc::unshare(libc::CLONE_NEWNET) } < 0 {
                return Err(io::Error::last_os_error());
            }
        }
    }
    let r = f();
    if let Err(e) = setns_net(home) {
        eprintln!("shoal serve: cannot return a thread to the gateway's network namespace ({e}); stopping");
        std::process::abort();
    }
    r
}

/// Brings the loopback interface up in the calling thread's namespace.
fn loopback_up() -> io::Result<()> {
    let s = socket(libc::AF_INET, libc::SOCK_DGRAM)?;
    // SAFETY: an all-zero ifreq is valid; the name fits with its NUL.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, b) in ifr.ifr_name.iter_mut().zip(b"lo\0") {
        *d = *b as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS/SIOCSIFFLAGS read and write only `ifr`.
    unsafe {
        if libc::ioctl(s.as_raw_fd(), libc::SIOCGIFFLAGS, &mut ifr) < 0 {
            return Err(io::Error::last_os_error());
        }
        ifr.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        if libc::ioctl(s.as_raw_fd(), libc::SIOCSIFFLAGS, &ifr) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// An instance's network namespace, alive while this handle is (and while
/// the container's processes are in it).
pub struct NetNs {
    fd: OwnedFd,
}

impl NetNs {
    /// A new, empty namespace with `lo` up (needs CAP_SYS_ADMIN and
    /// CAP_NET_ADMIN: the container backends run as root anyway).
    pub fn new() -> io::Result<NetNs> {
        let fd = inside(None, || {
            loopback_up()?;
            open_cloexec(c"/proc/thread-self/ns/net")
        })?;
        Ok(NetNs { fd })
    }

    /// A path naming the namespace while the gateway runs (for the
    /// container's `config.json`, and `nsenter --net=PATH` by hand).
    pub fn path(&self) -> String {
        format!("/proc/{}/fd/{}", std::process::id(), self.fd.as_raw_fd())
    }

    /// A non-blocking TCP/IPv4 socket in the namespace, to connect to the
    /// instance.
    pub fn tcp_socket(&self) -> io::Result<OwnedFd> {
        inside(Some(&self.fd), || socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_NONBLOCK))
    }
}
