//! What the instance process gives up before the guest's first
//! instruction, beyond the seccomp filter (issue "Harden the tenders",
//! Firecracker's jailer): the host's file system, its user, its
//! capabilities and its namespaces.
//!
//! The filter is the boundary: a guest can make only `write` to fds 1/2,
//! `exit_group`, a relative monotonic `clock_nanosleep` and
//! `restart_syscall`. What is here makes the process hold less should the
//! filter ever let something through, and is what a host administrator
//! sees in `ps` and `/proc`:
//!
//! - **every run**: a fresh process image (`exec` of `shoal-spt` with an
//!   environment of one fixed malloc tunable and no arguments; the front end in `crate::front`),
//!   no inherited descriptor but the console and what the instance needs
//!   to boot (closed after use), no core dumps, `no_new_privs`.
//! - **when started as root** (what a FaaS host or `sudo shoal run` does),
//!   in addition: new PID, mount and IPC namespaces (made by the front's
//!   `clone`; an in-place instance cannot enter a PID namespace of its own
//!   and keeps the caller's) and, unless `--net-outbound` asks for the
//!   host's network, a network namespace with no interface but a loopback
//!   that is down (published ports are host sockets opened before, in the
//!   caller's namespace, so they work from inside it, as do the sockets
//!   the waiting parent binds for `--net-bind-any`): one such namespace, made once and kept at
//!   [`EMPTY_NETNS`] as `ip netns add` keeps its own, which every instance
//!   enters with `setns` (making a network namespace costs about 2 ms on
//!   this host, entering one a few µs; instances cannot use it to reach
//!   each other, since the filter forbids every socket call); then here:
//!   the root becomes an empty
//!   read-only tmpfs (the host's file system is unmounted from the
//!   instance's view), the process drops to `nobody` (uid and gid 65534,
//!   no supplementary groups), enters a new user namespace, and clears
//!   every capability, bounding set included.
//!
//! Not as root, the process already runs as the caller, who owns it; it
//! cannot make namespaces without a user namespace and gains nothing a
//! filtered guest could use from them, so none are made (docs/design.md "Host facts": a
//! namespace costs start-up time and buys nothing where seccomp already
//! denies).

use crate::sys;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::OpenOptionsExt;

/// The user and group a root-started instance runs as (`nobody`).
pub const NOBODY: u32 = 65534;

/// Namespaces the front end's `clone` makes for a root-started,
/// supervised instance (the network namespace is entered, not made).
pub const CLONE_NAMESPACES: libc::c_int = libc::CLONE_NEWPID | libc::CLONE_NEWNS | libc::CLONE_NEWIPC;

/// Namespaces an in-place root-started instance makes for itself before
/// its `exec` (no PID namespace: only children would enter it).
pub const UNSHARE_NAMESPACES: libc::c_int = libc::CLONE_NEWNS | libc::CLONE_NEWIPC;

/// Where the shared empty network namespace is kept (a bind mount of a
/// namespace file, like `ip netns add`), under a root-only directory.
pub const EMPTY_NETNS: &str = "/run/shoal/netns-empty";

/// `NSFS_MAGIC`: the file-system type of namespace files.
const NSFS_MAGIC: i64 = 0x6e73_6673;

/// Opens the shared empty network namespace, making it on first use.
/// Root only.
pub fn empty_netns() -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::AsRawFd;
    let path = std::path::Path::new(EMPTY_NETNS);
    let dir = path.parent().unwrap_or(std::path::Path::new("/"));
    shoal_loader::hostdir::ensure_private_dir(dir).map_err(std::io::Error::other)?;
    let is_netns = |f: &std::fs::File| -> bool {
        // SAFETY: `st` is a valid out-pointer for fstatfs.
        let mut st: libc::statfs = unsafe { core::mem::zeroed() };
        // SAFETY: as above; `f` is an open descriptor.
        unsafe { libc::fstatfs(f.as_raw_fd(), &mut st) == 0 && st.f_type as i64 == NSFS_MAGIC }
    };
    let open = || std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC).open(path);
    if let Ok(f) = open() {
        if is_netns(&f) {
            return Ok(f.into());
        }
    }
    // Made under a lock so that concurrent first starts make one.
    let lock =
        std::fs::OpenOptions::new().create(true).write(true).mode(0o600).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC).open(dir.join("netns.lock"))?;
    // SAFETY: flock on an open descriptor; released when `lock` closes.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if let Ok(f) = open() {
        if is_netns(&f) {
            return Ok(f.into());
        }
    }
    std::fs::OpenOptions::new().create(true).truncate(true).write(true).mode(0o400).custom_flags(libc::O_NOFOLLOW).open(path)?;
    // A network namespace is per thread: a short-lived thread makes one and
    // binds it to the file, leaving this process's own untouched.
    let target = std::ffi::CString::new(EMPTY_NETNS).map_err(std::io::Error::other)?;
    std::thread::spawn(move || -> std::io::Result<()> {
        // SAFETY: unshare and mount on valid C strings; they change only
        // this thread's network namespace and bind a file over `target`.
        unsafe {
            if libc::unshare(libc::CLONE_NEWNET) != 0
                || libc::mount(c"/proc/thread-self/ns/net".as_ptr(), target.as_ptr(), core::ptr::null(), libc::MS_BIND, core::ptr::null()) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    })
    .join()
    .map_err(|_| std::io::Error::other("the thread making the network namespace panicked"))??;
    let f = open()?;
    if !is_netns(&f) {
        return Err(std::io::Error::other("the network namespace file is not a namespace"));
    }
    Ok(f.into())
}

/// Why confinement failed (the instance does not start).
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    /// A step failed.
    #[error("cannot confine the instance: cannot {what}: {err}")]
    Step {
        /// The step, as a verb phrase.
        what: &'static str,
        /// The errno.
        err: crate::child::Errno,
    },
}

fn step(what: &'static str, rc: libc::c_int) -> Result<(), ConfineError> {
    if rc < 0 {
        Err(ConfineError::Step { what, err: crate::child::Errno(sys::errno()) })
    } else {
        Ok(())
    }
}

/// Whether this process runs as root (and so is confined further).
pub fn is_root() -> bool {
    sys::geteuid() == 0
}

/// Replaces each mount's descriptor (`--mount`, an `O_PATH` descriptor of
/// the host directory) with one of a detached, read-only, `nosuid`,
/// `nodev` clone of that directory (`open_tree(OPEN_TREE_CLONE)`, not
/// recursive: file systems mounted beneath it are left out). A detached
/// mount has no parent: `..` at its top stays there, whatever path a
/// guest that calls `openat2` itself gives (the hypercall's own
/// `RESOLVE_BENEATH` is then not the only fence); an absolute path or a
/// symbolic link resolves in the instance's root, which [`drop_root`]
/// empties; nothing can be written through it (`EROFS`). A single-file
/// mount (its descriptor an open regular file) is cloned the same way and
/// its file opened again on the clone, read-only or, `:rw`, for reading
/// and writing: a read-only one then refuses `fchmod` and `futimens` too
/// (`EROFS`), which its read-only descriptor alone would not. Root only,
/// in the instance's own mount namespace, before [`drop_root`].
pub fn jail_mounts(fds: &[i32], writable: u64) -> Result<(), ConfineError> {
    for (i, &fd) in fds.iter().enumerate() {
        let file = is_regular(fd);
        // The descriptor names a mount of the front end's namespace, which
        // open_tree cannot clone from here: the same directory is opened
        // again in this namespace, by the path the kernel gives for the
        // descriptor, and must be the same file.
        let same = reopen_here(fd, file)
            .map_err(|e| ConfineError::Step { what: "open a --mount directory or file in the instance's namespace", err: crate::child::Errno(e) })?;
        let tree = sys::open_tree_clone(same.as_raw_fd());
        drop(same);
        let tree = tree.map_err(|e| ConfineError::Step { what: "clone a --mount directory", err: crate::child::Errno(e) })?;
        // A writable mount (`:rw`) keeps its clone writable: Landlock
        // grants writing beneath it alone (crate::landlock).
        let rw = writable & (1 << i) != 0;
        let ro = if rw { 0 } else { sys::MOUNT_ATTR_RDONLY };
        let attrs = ro | sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV;
        let r = sys::mount_setattr(tree, attrs).and_then(|()| if file { reopen_file(tree, fd, rw) } else { sys::dup3(tree, fd, libc::O_CLOEXEC) });
        sys::close(tree);
        r.map_err(|e| ConfineError::Step { what: "make a --mount directory or file read-only", err: crate::child::Errno(e) })?;
    }
    Ok(())
}

/// Whether `fd` is a regular file (a single-file mount's descriptor).
pub fn is_regular(fd: i32) -> bool {
    // SAFETY: `fd` is open for the whole call (the caller holds it).
    let f = std::mem::ManuallyDrop::new(std::fs::File::from(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }));
    f.metadata().is_ok_and(|m| m.file_type().is_file())
}

/// Opens the file on the detached clone `tree` (an `O_PATH` descriptor)
/// for reading (and writing, `rw`) at descriptor `fd`, the same file as
/// `fd` was.
fn reopen_file(tree: i32, fd: i32, rw: bool) -> Result<(), i32> {
    use std::os::unix::fs::MetadataExt;
    let errno = |e: std::io::Error| e.raw_os_error().unwrap_or(libc::EIO);
    // The clone's root is the file itself, which only its magic link
    // reaches (no path names a detached mount).
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(rw)
        .custom_flags(libc::O_NOCTTY | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(format!("/proc/self/fd/{tree}"))
        .map_err(errno)?;
    // SAFETY: `fd` is open for the whole call (the caller holds it).
    let theirs = std::mem::ManuallyDrop::new(std::fs::File::from(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }));
    let (a, b) = (file.metadata().map_err(errno)?, theirs.metadata().map_err(errno)?);
    if (a.dev(), a.ino()) != (b.dev(), b.ino()) || !a.file_type().is_file() {
        return Err(libc::ESTALE);
    }
    sys::dup3(file.as_raw_fd(), fd, libc::O_CLOEXEC)
}

/// Opens the directory (or, `file`, the regular file) `fd` names again,
/// in this mount namespace, and checks it is the same one (device and
/// inode).
fn reopen_here(fd: i32, file: bool) -> Result<std::os::fd::OwnedFd, i32> {
    use std::os::unix::fs::MetadataExt;
    let errno = |e: std::io::Error| e.raw_os_error().unwrap_or(libc::EIO);
    let path = std::fs::read_link(format!("/proc/self/fd/{fd}")).map_err(errno)?;
    let kind = if file { libc::O_NOFOLLOW } else { libc::O_DIRECTORY };
    let dir = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_PATH | kind | libc::O_CLOEXEC).open(&path).map_err(errno)?;
    // SAFETY: `fd` is open for the whole call (the caller holds it).
    let theirs = std::fs::File::from(unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) }.try_clone_to_owned().map_err(errno)?).metadata().map_err(errno)?;
    let ours = dir.metadata().map_err(errno)?;
    if (ours.dev(), ours.ino()) != (theirs.dev(), theirs.ino()) {
        return Err(libc::ESTALE);
    }
    Ok(dir.into())
}

/// Replaces the root with an empty read-only tmpfs, drops to uid and gid
/// `uid` ([`NOBODY`], or one of `--uid-range` claimed by the waiting
/// parent), enters a new user namespace and clears every capability. Only
/// for a process started as root, already in its own mount namespace. `parent`:
/// a pidfd of the waiting parent, whose death must still kill this process
/// after the change of credentials (which clears the parent-death signal).
pub fn drop_root(parent: Option<i32>, ids: (u32, u32)) -> Result<(), ConfineError> {
    // SAFETY: plain system calls on constant, valid, NUL-terminated strings
    // or null pointers, and on the capability structures below; they change
    // only this process's mounts (in its own mount namespace), credentials
    // and namespaces.
    unsafe {
        // Mount events must not propagate back to the host's namespace.
        step("make mounts private", libc::mount(core::ptr::null(), c"/".as_ptr(), core::ptr::null(), libc::MS_REC | libc::MS_PRIVATE, core::ptr::null()))?;
        // An empty tmpfs on any directory that exists, made the root with
        // pivot_root(".", ".") and the old root detached below it.
        let dir = c"/tmp";
        step(
            "mount an empty root",
            libc::mount(
                c"shoal".as_ptr(),
                dir.as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC | libc::MS_RDONLY,
                c"size=4k,nr_inodes=2,mode=0555".as_ptr().cast(),
            ),
        )?;
        step("enter the empty root", libc::chdir(dir.as_ptr()))?;
        step("pivot to the empty root", libc::syscall(libc::SYS_pivot_root, c".".as_ptr(), c".".as_ptr()) as libc::c_int)?;
        step("detach the host's file system", libc::umount2(c".".as_ptr(), libc::MNT_DETACH))?;
        sys::start_step("instance: in the empty root (mount namespace private, tmpfs, pivot_root, host detached)");
        step("enter the empty root", libc::chdir(c"/".as_ptr()))?;
        // Drop to the instance's user: with no keep-caps, setresuid from
        // root to non-root clears every capability. Uid 0 never comes here
        // (a range starts at 1; the spec's default is nobody; a guest's
        // own user for a writable mount is never root), nor group 0.
        let (uid, gid) = if ids.0 == 0 { (NOBODY, NOBODY) } else { (ids.0, if ids.1 == 0 { NOBODY } else { ids.1 }) };
        step("drop supplementary groups", libc::setgroups(0, core::ptr::null()))?;
        step("switch to the instance's group", libc::setresgid(gid, gid, gid))?;
        step("switch to the instance's user", libc::setresuid(uid, uid, uid))?;
        // A user namespace of its own: whatever the process could still
        // reach through the host's user namespace (keyrings, the
        // namespaces made above as root) is owned by another namespace now.
        step("enter a new user namespace", libc::unshare(libc::CLONE_NEWUSER))?;
        // The new namespace gives its first process every capability
        // inside it: give them all back, bounding set first (which needs
        // CAP_SETPCAP, held until the capset below).
        for cap in 0..=63 {
            if libc::prctl(libc::PR_CAPBSET_READ, cap, 0, 0, 0) == 1 {
                step("drop a capability from the bounding set", libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0))?;
            }
        }
        step("clear ambient capabilities", libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0))?;
        #[repr(C)]
        struct CapHeader {
            version: u32,
            pid: i32,
        }
        #[repr(C)]
        #[derive(Clone, Copy)]
        struct CapData {
            effective: u32,
            permitted: u32,
            inheritable: u32,
        }
        const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
        let header = CapHeader { version: LINUX_CAPABILITY_VERSION_3, pid: 0 };
        let data = [CapData { effective: 0, permitted: 0, inheritable: 0 }; 2];
        step("clear capabilities", libc::syscall(libc::SYS_capset, &header as *const CapHeader, data.as_ptr()) as libc::c_int)?;
        // Each change of credentials above (user, user namespace) cleared
        // the parent-death signal: arm it again, then make sure the parent
        // did not die in between.
        step("ask to die with the parent", libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0))?;
        if parent.is_some_and(sys::pidfd_ended) {
            sys::exit(crate::EXIT_TENDER_FAILED);
        }
    }
    Ok(())
}
