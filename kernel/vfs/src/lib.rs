//! Kernel component `vfs` (docs/design.md "Components and recovery"): file descriptors, paths and the
//! file-system system calls.
//!
//! The instance has one process, so there is one [`Vfs`]: a descriptor
//! table (at most [`MAX_FDS`] descriptors, each with its own `FD_CLOEXEC`
//! flag), the open file descriptions the descriptors share after `dup`
//! (offset and status flags), the working directory, the umask, and the
//! root file system (`shoal-ramfs`), mounted at `/`.
//!
//! Descriptors 0, 1 and 2 start as the instance's standard streams. They
//! behave like the ends of pipes — what a natively run program sees when
//! its output is captured: `fstat` reports `S_IFIFO`, `lseek` fails with
//! `ESPIPE`, `ioctl(TCGETS/TIOCGWINSZ)` fails with `ENOTTY` (so musl's
//! stdio fully buffers stdout). Stdin is the tender's standard input
//! (`shoal_plat::console::Stdin`: reads wait in the kernel, an idle
//! instance waits for input in the tender, end of input is end-of-file);
//! when the host's stdin is a terminal, descriptor 0 answers the terminal
//! ioctls (`isatty(0)` is true). stdout and stderr go to the tender's
//! console.
//!
//! Access control follows the rules Linux applies to root, since the
//! program is the only user and owns every file: permission bits do not
//! deny reading or writing, `X_OK` needs an execute bit on a non-directory.
//! The access mode of a descriptor is enforced (`EBADF` writing a
//! read-only descriptor, `EISDIR` opening a directory for writing).
//!
//! Advisory locks (module `lock`): POSIX record locks, open-file-
//! description locks and `flock`, with Linux's conflicts, `F_GETLK`,
//! waits that block only the calling thread and release on close.
//!
//! Special files (module `dev`): the root always has `/dev/null`,
//! `/dev/zero`, `/dev/full`, `/dev/random`, `/dev/urandom` (character
//! devices with Linux's numbers; the random ones read the kernel's CSPRNG
//! through `shoal_sysinfo::fill_random`), the symbolic links `/dev/stdin`,
//! `/dev/stdout`, `/dev/stderr` and `/dev/fd` into `/proc/self/fd`, and
//! `/proc/self/fd`, whose entry `N` resolves to what descriptor `N` refers
//! to (like Linux's "magic links", but resolved directly: `lstat` reports
//! the file, not a link; listing the directory shows nothing). With a root
//! archive they are added on top (an existing name is left alone).
//!
//! Pipes (module `pipe`): `pipe`/`pipe2` and named FIFOs (`mknod`) share
//! one implementation: a bounded buffer of 64 KiB per pipe inode, Linux's
//! `PIPE_BUF` atomicity, end-of-file when no writer is left, `EPIPE` when
//! no reader is left (the syscall table raises `SIGPIPE`). Where a call
//! would block, it waits through module `wait`, the one place that knows
//! how a thread blocks (see there for what happens with one thread).
//! `poll`, `ppoll`, `select` and `pselect6` are in module `poll`.
//!
//! Objects other components own (sockets, epoll, eventfd, timerfd, in
//! `shoal-net`) have descriptors here too; module [`obj`] is the interface
//! to their owner and the one readiness interface of every descriptor.
//!
//! Modules: [`abi`] (constants and structure layouts), `path` (name
//! resolution), `ops` and `more` (the calls), [`sys`] (the entry points the
//! syscall table names).
#![cfg_attr(not(test), no_std)]

extern crate alloc;

pub mod abi;
mod dev;
pub mod heal;
mod host;
mod lock;
mod mmap;
mod more;
mod notify;
pub mod obj;
mod ops;
mod path;
mod pipe;
mod poll;
mod procfs;
pub mod readylog;
pub mod sys;
mod tracked;
pub mod wait;

use alloc::collections::BTreeMap;
use alloc::vec::Vec;
use shoal_plat::Errno;
use shoal_ramfs::{Fs, Ino, Timespec};
use tracked::Tracked;

pub use more::RWF_NOSIGNAL;
pub use shoal_ramfs::ROOT_INO;

/// Most descriptors the process can have open (the hard `RLIMIT_NOFILE`):
/// as many as net can wait on in one `NetPoll` hypercall
/// (`shoal_abi::NET_MAX_POLL`), so a server that raises its soft limit to
/// it can hold that many connections.
pub const MAX_FDS: usize = 4096;
/// The soft `RLIMIT_NOFILE` an instance starts with, Linux's default.
pub const DEFAULT_NOFILE: usize = 1024;

/// Set when a write or truncation failed with `EFBIG` because of
/// `RLIMIT_FSIZE`: Linux then raises `SIGXFSZ`, which the syscall table
/// does (signals are `process`'s) after [`take_xfsz`].
static XFSZ: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// Whether the last call exceeded `RLIMIT_FSIZE` (and forgets it).
/// A load first, inline: every system call asks, and a swap is a locked
/// instruction.
#[inline]
pub fn take_xfsz() -> bool {
    XFSZ.load(core::sync::atomic::Ordering::Relaxed) && XFSZ.swap(false, core::sync::atomic::Ordering::Relaxed)
}

/// `st_dev` of the root file system (major 0, minor 32).
pub const ROOT_DEV: u64 = 32;
/// `st_dev` of the standard-stream pipes (major 0, minor 12, like pipefs).
pub const PIPE_DEV: u64 = 12;

/// What an open file description refers to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// Standard input: always at end of file.
    Stdin,
    /// Standard output (the console).
    Stdout,
    /// Standard error (the console).
    Stderr,
    /// An inode of the root file system.
    Node(Ino),
    /// A pipe (named or not): its buffer is in `Vfs::pipes`.
    Fifo(Ino),
    /// A character device.
    Dev(Ino, dev::Device),
    /// An object another component owns (a socket, an epoll instance, an
    /// eventfd, a timerfd): see module [`obj`].
    Obj(u64),
}

impl Target {
    /// The inode behind the target (none for the standard streams).
    pub fn ino(self) -> Option<Ino> {
        match self {
            Target::Node(i) | Target::Fifo(i) | Target::Dev(i, _) => Some(i),
            _ => None,
        }
    }
}

/// An open file description: shared by the descriptors `dup` made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Ofd {
    /// Descriptors that refer to it.
    pub refs: u32,
    pub target: Target,
    /// Access mode and status flags (`O_APPEND`, `O_NONBLOCK`, `O_PATH`…).
    pub flags: u32,
    /// File offset (directories: the stream position).
    pub offset: u64,
}

impl Ofd {
    pub fn is_path(&self) -> bool {
        self.flags & abi::O_PATH != 0
    }
    pub fn readable(&self) -> bool {
        !self.is_path() && matches!(self.flags & abi::O_ACCMODE, abi::O_RDONLY | abi::O_RDWR)
    }
    pub fn writable(&self) -> bool {
        !self.is_path() && matches!(self.flags & abi::O_ACCMODE, abi::O_WRONLY | abi::O_RDWR)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FdEntry {
    pub ofd: usize,
    pub cloexec: bool,
}

/// The file-system state of the process.
pub struct Vfs {
    pub(crate) fs: Fs,
    /// Descriptors (changes tracked for the log, module `heal`).
    pub(crate) fds: Tracked<Vec<Option<FdEntry>>>,
    /// Open file descriptions (tracked likewise).
    pub(crate) ofds: Tracked<Vec<Option<Ofd>>>,
    pub(crate) cwd: Ino,
    pub(crate) umask: u32,
    pub(crate) pipe_time: Timespec,
    /// Buffers of the pipes that have an open end, by inode.
    pub(crate) pipes: Tracked<BTreeMap<Ino, pipe::Pipe>>,
    /// Unnamed inodes standing for stdin, stdout and stderr, so that
    /// `/proc/self/fd/N` can name them.
    pub(crate) console: [Ino; 3],
    /// `/proc/self/fd`, if the root has it.
    pub(crate) fd_dir: Option<Ino>,
    /// The `/proc` files regenerated when opened (module `procfs`).
    pub(crate) proc_gen: Vec<(Ino, procfs::Gen)>,
    /// Advisory locks (record, OFD, `flock`).
    pub(crate) locks: Tracked<lock::Locks>,
    /// The guest directories of the read-only host directories (module
    /// `host`) and their mounts.
    pub(crate) mounts: Vec<(Ino, usize)>,
    /// The root mount (guest directory `/`), whose names the root
    /// directory shows beneath its own (module `host`).
    pub(crate) root_mount: Option<usize>,
    /// Mounts on directories of the root mount: each one's path relative
    /// to the root mount's top, and the mount.
    pub(crate) inner_mounts: Vec<(Vec<u8>, usize)>,
    /// `RLIMIT_NOFILE` (soft): descriptors are below it.
    pub(crate) nofile: usize,
    /// `RLIMIT_FSIZE` (soft): regular files do not grow past it.
    pub(crate) fsize: u64,
    /// Set by every change of `cwd`, `umask`, `nofile` or `fsize` (the
    /// log's `Scalars`: `set_cwd`, `umask`, `set_limits`), cleared when
    /// the log has recorded the call: the after-call check
    /// (`heal::changed_nothing`) reads this one word instead of comparing
    /// the four with the log's copy. (In test builds that check also
    /// compares them, so a change that does not set it fails the
    /// property test.)
    pub(crate) scalars_set: bool,
}

impl Vfs {
    /// A process with root file system `fs`, working directory `/`, umask
    /// 022 and the three standard streams.
    pub fn new(mut fs: Fs) -> Vfs {
        let host::MountPoints { at: mounts, root: root_mount, inner: inner_mounts } = host::mount_points(&mut fs);
        let root = fs.root();
        fs.get_ref(root);
        let pipe_time = fs.now();
        let console = [fs.create_unnamed_fifo(), fs.create_unnamed_fifo(), fs.create_unnamed_fifo()];
        let fd_dir = dev::fd_dir(&fs);
        let proc_gen = procfs::generated(&fs);
        let mut v = Vfs {
            fs,
            fds: Tracked::new(Vec::new()),
            ofds: Tracked::new(Vec::new()),
            cwd: root,
            umask: 0o022,
            pipe_time,
            pipes: Tracked::new(BTreeMap::new()),
            console,
            fd_dir,
            proc_gen,
            locks: Tracked::new(lock::Locks::default()),
            mounts,
            root_mount,
            inner_mounts,
            nofile: DEFAULT_NOFILE,
            fsize: u64::MAX,
            scalars_set: false,
        };
        for (t, fl) in [(Target::Stdin, abi::O_RDONLY), (Target::Stdout, abi::O_WRONLY), (Target::Stderr, abi::O_WRONLY)] {
            let o = v.new_ofd(t, fl);
            v.install(0, o, false).expect("standard streams");
        }
        v
    }

    /// The root file system.
    pub fn fs(&self) -> &Fs {
        &self.fs
    }

    pub(crate) fn new_ofd(&mut self, target: Target, flags: u32) -> usize {
        if let Some(ino) = target.ino() {
            self.fs.get_ref(ino);
        }
        // A pipe has no offset (`ESPIPE`): its description keeps there
        // the writers' open count before it was opened (Linux's `f_pipe`),
        // which its readiness compares.
        let mut offset = 0;
        if let Target::Fifo(ino) = target {
            offset = self.pipes.get(&ino).map_or(0, |p| p.w_opened);
            self.pipe_open(ino, flags);
        }
        let ofd = Ofd { refs: 0, target, flags, offset };
        match self.ofds.iter().position(|o| o.is_none()) {
            Some(i) => {
                // One entry marked for the log (module `heal`), not the table.
                if let Some(slot) = self.ofds.at_mut(i) {
                    *slot = Some(ofd);
                }
                i
            }
            None => {
                self.ofds.push(Some(ofd));
                self.ofds.len() - 1
            }
        }
    }

    /// Drops one descriptor's reference to description `i`.
    pub(crate) fn put_ofd(&mut self, i: usize) {
        let mut held = self.put_one_ofd(i);
        while let Some(j) = held.pop() {
            let more = self.put_one_ofd(j);
            held.extend(more);
        }
    }

    /// [`Vfs::put_ofd`] of one reference: the descriptions an object
    /// that went with it held in flight are returned, not dropped.
    fn put_one_ofd(&mut self, i: usize) -> Vec<usize> {
        let gone = match self.ofds.at_mut(i).and_then(|o| o.as_mut()) {
            Some(o) => {
                o.refs = o.refs.saturating_sub(1);
                o.refs == 0
            }
            None => false,
        };
        if gone {
            if let Some(o) = self.ofds.at_mut(i).and_then(|o| o.take()) {
                self.locks_ofd_released(i, o.target);
                if let Target::Fifo(ino) = o.target {
                    self.pipe_close(ino, o.flags);
                }
                if let Some(ino) = o.target.ino() {
                    self.fs.put_ref(ino);
                }
                return self.obj_released(i, o.target);
            }
        }
        Vec::new()
    }

    /// Installs description `ofd` at the lowest free descriptor `>= min`.
    /// A description no descriptor refers to is freed on failure.
    pub(crate) fn install(&mut self, min: usize, ofd: usize, cloexec: bool) -> Result<u64, Errno> {
        let free = (min..self.nofile.min(MAX_FDS)).find(|&fd| self.fds.get(fd).map(|e| e.is_none()).unwrap_or(true));
        let Some(fd) = free else {
            if self.ofds[ofd].as_ref().map(|o| o.refs == 0).unwrap_or(false) {
                self.ofds[ofd].as_mut().expect("ofd").refs = 1;
                self.put_ofd(ofd);
            }
            return Err(Errno::EMFILE);
        };
        self.install_at(fd, ofd, cloexec);
        Ok(fd as u64)
    }

    /// Makes `fd` refer to `ofd`, closing what it referred to.
    pub(crate) fn install_at(&mut self, fd: usize, ofd: usize, cloexec: bool) {
        if self.fds.len() <= fd {
            self.fds.resize(fd + 1, None);
        }
        self.ofds.at_mut(ofd).and_then(|o| o.as_mut()).expect("ofd").refs += 1;
        if let Some(old) = self.fds.at_mut(fd).and_then(|e| e.replace(FdEntry { ofd, cloexec })) {
            self.fd_closing(old.ofd);
            self.put_ofd(old.ofd);
        }
    }

    /// The descriptor-table entry of `fd` (`EBADF`).
    pub(crate) fn entry(&self, fd: i32) -> Result<FdEntry, Errno> {
        if fd < 0 {
            return Err(Errno::EBADF);
        }
        self.fds.get(fd as usize).copied().flatten().ok_or(Errno::EBADF)
    }

    /// The description index behind `fd`.
    pub(crate) fn ofd_of(&self, fd: i32) -> Result<usize, Errno> {
        Ok(self.entry(fd)?.ofd)
    }

    pub(crate) fn ofd(&self, i: usize) -> &Ofd {
        self.ofds[i].as_ref().expect("live ofd")
    }

    /// Moves description `i`'s offset to `off`; an offset that does not
    /// move (an `lseek` to where the file already is: SQLite seeks before
    /// every write) leaves the entry unmarked, so the log has nothing to
    /// look at.
    pub(crate) fn set_offset(&mut self, i: usize, off: u64) {
        if self.ofd(i).offset != off {
            self.ofd_mut(i).offset = off;
        }
    }

    pub(crate) fn ofd_mut(&mut self, i: usize) -> &mut Ofd {
        // Only this entry is marked changed for the log (module `heal`).
        self.ofds.at_mut(i).and_then(|o| o.as_mut()).expect("live ofd")
    }

    /// Closes `fd`.
    pub fn close_fd(&mut self, fd: i32) -> Result<(), Errno> {
        let e = self.entry(fd)?;
        if let Some(slot) = self.fds.at_mut(fd as usize) {
            *slot = None;
        }
        self.fd_closing(e.ofd);
        self.put_ofd(e.ofd);
        Ok(())
    }

    /// A descriptor of description `i` is being closed: the process's
    /// POSIX record locks on its file go, as on Linux.
    fn fd_closing(&mut self, i: usize) {
        if let Some(t) = self.ofds.get(i).and_then(|o| o.as_ref()).map(|o| o.target) {
            self.locks_fd_closed(t);
        }
    }

    /// Sets the enforced `RLIMIT_NOFILE` and `RLIMIT_FSIZE` soft limits
    /// (`process` calls this through the syscall table when they change).
    /// Descriptors already open above a lowered limit stay open, as on
    /// Linux.
    pub fn set_limits(&mut self, nofile: u64, fsize: u64) {
        self.nofile = nofile.min(MAX_FDS as u64) as usize;
        self.fsize = fsize;
        self.scalars_set = true;
    }

    /// `RLIMIT_FSIZE`: a regular file may grow to `end` bytes; otherwise
    /// `EFBIG` and `SIGXFSZ` is due.
    pub(crate) fn fsize_check(&self, end: u64) -> Result<(), Errno> {
        if end > self.fsize {
            XFSZ.store(true, core::sync::atomic::Ordering::Relaxed);
            return Err(Errno::EFBIG);
        }
        Ok(())
    }

    /// Number of open descriptors.
    pub fn open_fds(&self) -> usize {
        self.fds.iter().filter(|e| e.is_some()).count()
    }

    /// Reads regular file `fd` at `off` without moving its offset (for a
    /// private file mapping, `mmap`): `EBADF` if `fd` is not open for
    /// reading, `EACCES` if it is not a regular file.
    pub fn read_file_at(&mut self, fd: i32, off: u64, buf: &mut [u8]) -> Result<usize, Errno> {
        let o = self.ofd(self.ofd_of(fd)?);
        if !o.readable() {
            return Err(Errno::EACCES);
        }
        match o.target {
            Target::Node(ino) if self.fs.file_type(ino)? == shoal_ramfs::FileType::Regular => self.fs.read(ino, off, buf),
            _ => Err(Errno::EACCES),
        }
    }
}

/// The process's file-system state.
// A `ZeroGlobal`: `None` of `Option<Vfs>` is a non-zero niche, which put
// vfs's `.data` on a page of its own in every instance.
static STATE: shoal_plat::ZeroGlobal<Option<Vfs>> = shoal_plat::ZeroGlobal::new();

/// The clock of the file system (file times), through module `heal`,
/// which keeps the boot's readings for a rebuild.
fn clock() -> u64 {
    heal::clock(live_clock)
}

#[cfg(not(test))]
fn live_clock() -> u64 {
    shoal_time::realtime_ns()
}

#[cfg(test)]
fn live_clock() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static T: AtomicU64 = AtomicU64::new(1_700_000_000_000_000_000);
    T.fetch_add(1000, Ordering::Relaxed)
}

/// An empty root: `/tmp` (mode 1777), `/etc`, `/home`, `/dev` with its
/// special files, `/proc/self/fd`.
///
/// Under a root mount (`--mount HOSTDIR:/:ro`) `/etc` and `/home` are made
/// only where HOSTDIR has no such name: the host's own are seen instead
/// (`/tmp`, `/dev`, `/proc` and `/sys` are always the guest's).
fn empty_root() -> Fs {
    let mut fs = Fs::new(clock);
    let root = fs.root();
    for (name, perm) in [(&b"tmp"[..], 0o1777), (b"etc", 0o755), (b"home", 0o755), (b"dev", 0o755)] {
        if matches!(name, b"etc" | b"home") && host::root_has(name) {
            continue;
        }
        let _ = fs.mkdir(root, name, perm);
    }
    dev::populate(&mut fs);
    if !host::root_has(b"etc") {
        default_etc(&mut fs);
    }
    fs
}

/// What `/etc/hosts` holds when the root file system brings none: the
/// loopback names, so that `getaddrinfo("localhost")` answers as on a
/// Linux host without asking a name server.
pub const DEFAULT_HOSTS: &[u8] = b"127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n";

/// What `/etc/passwd` holds when the root file system brings none: root
/// (what the program runs as, see `shoal_user`) and `nobody`, which
/// servers started as root switch to (nginx's default `user nobody`
/// calls `getpwnam("nobody")` and stops without it).
pub const DEFAULT_PASSWD: &[u8] = b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";

/// What `/etc/group` holds when the root file system brings none: the
/// groups of [`DEFAULT_PASSWD`]'s users (`nogroup` as Debian names it).
pub const DEFAULT_GROUP: &[u8] = b"root:x:0:\nnogroup:x:65534:\n";

/// What `/etc/nsswitch.conf` holds when the root file system brings none:
/// users, groups and hosts from the files above first (glibc programs read
/// it; musl ignores it).
pub const DEFAULT_NSSWITCH: &[u8] = b"passwd: files\ngroup: files\nhosts: files dns\n";

/// The files [`default_etc`] adds to `/etc` when the root lacks them.
const DEFAULT_ETC: [(&[u8], &[u8]); 4] =
    [(b"hosts", DEFAULT_HOSTS), (b"passwd", DEFAULT_PASSWD), (b"group", DEFAULT_GROUP), (b"nsswitch.conf", DEFAULT_NSSWITCH)];

/// Adds `/etc/hosts`, `/etc/passwd`, `/etc/group`,
/// `/etc/nsswitch.conf` and the `/etc/localtime` link (and `/etc`) where
/// the root has none: a program finds localhost, root, nobody and its
/// time zone as on a Linux host. A file the root
/// file system brings is never replaced.
fn default_etc(fs: &mut Fs) {
    let root = fs.root();
    let etc = match fs.lookup(root, b"etc") {
        Ok(i) => i,
        Err(_) => match fs.mkdir(root, b"etc", 0o755) {
            Ok(i) => i,
            Err(_) => return,
        },
    };
    for (name, data) in DEFAULT_ETC {
        if fs.lookup(etc, name).is_err() {
            // Borrowed, not written: the bytes stay in the image's
            // read-only data (pooled), not in a heap page of every
            // instance.
            let _ = fs.create_file_static(etc, name, 0o644, data);
        }
    }
    // ICU (Node's `Date`, Python's zoneinfo users) names the local zone
    // from this link's target; without it, it compared every file under
    // /usr/share/zoneinfo to find one: 22,000 host file operations at a
    // Node server's first request, 5 s on hvt. UTC is what glibc assumes
    // when the file is missing, so nothing else changes.
    if fs.lookup(etc, b"localtime").is_err() {
        let _ = fs.symlink(etc, b"localtime", DEFAULT_LOCALTIME);
    }
}

/// Where `/etc/localtime` points when the root file system brings none
/// (as Debian's does for UTC).
pub const DEFAULT_LOCALTIME: &[u8] = b"/usr/share/zoneinfo/Etc/UTC";

/// Halts the instance with a one-line message about the root file system.
fn fatal(what: core::fmt::Arguments<'_>) -> ! {
    use core::fmt::Write;
    let _ = writeln!(shoal_plat::console::Stderr, "shoal: cannot mount the root file system: {what}");
    shoal_plat::halt(1)
}

/// Mounts the root file system and opens the standard streams. Called
/// once at boot, after `plat` and the allocator are up.
///
/// With a root archive in the boot info, `/` is the archive (validated
/// first: a corrupt one halts the instance with a `shoal:` message), plus
/// `/tmp` if the archive has none; without one, an empty root with `/tmp`,
/// `/etc`, `/home` and `/dev`. Either way `/etc/hosts`, `/etc/passwd`,
/// `/etc/group` and `/etc/nsswitch.conf` are there ([`default_etc`])
/// unless the archive brings its own.
pub fn init() {
    let bi = shoal_plat::boot::info();
    heal::record_clock();
    shoal_hostfs::init();
    let mut v = boot_vfs();
    heal::start(&mut v);
    STATE.with(|s| *s = Some(v));
    shoal_mm::file::register(&mmap::OPS);
    if bi.volume_path[0] != 0 || heal::report_at_exit_wanted() {
        shoal_plat::before_halt(at_halt);
    }
}

/// What runs when the instance ends: the log's report (`--log-report`)
/// and the volume's save (`--volume`), each if asked for.
fn at_halt() {
    if heal::report_at_exit_wanted() {
        heal::report_at_exit();
    }
    if shoal_plat::boot::info().volume_path[0] != 0 {
        save_volume();
    }
}

/// The state at boot: the root file system ([`root_fs`]) and the working
/// directory the boot info names (`--cwd`, a container's `process.cwd`;
/// none: `/`). A working directory that is not a directory halts the
/// instance with one line, as a container runtime fails to start it.
pub(crate) fn boot_vfs() -> Vfs {
    let mut v = Vfs::new(root_fs());
    let cwd = shoal_plat::boot::info().cwd;
    let len = cwd.iter().position(|&c| c == 0).unwrap_or(cwd.len());
    if len > 0 {
        let path = &cwd[..len];
        let found = v.resolve_at(abi::AT_FDCWD, path, true, false).and_then(|ino| match v.ftype(ino)? {
            shoal_ramfs::FileType::Directory => Ok(ino),
            _ => Err(Errno::ENOTDIR),
        });
        match found {
            Ok(ino) => {
                v.fs.get_ref(ino);
                let old = core::mem::replace(&mut v.cwd, ino);
                v.fs.put_ref(old);
            }
            Err(e) => {
                use core::fmt::Write;
                let shown = core::str::from_utf8(path).unwrap_or("(not UTF-8)");
                let why = match e {
                    Errno::ENOENT => "no such file or directory",
                    Errno::ENOTDIR => "not a directory",
                    Errno::ELOOP => "too many levels of symbolic links",
                    _ => "it cannot be resolved",
                };
                let _ = writeln!(shoal_plat::console::Stderr, "shoal: cannot start in the working directory {shown}: {why}");
                shoal_plat::halt(1)
            }
        }
    }
    v
}

/// The root file system as the boot info describes it (see [`init`]); a
/// reboot builds it again (module `heal`), from the same archive.
fn root_fs() -> Fs {
    let bi = shoal_plat::boot::info();
    if bi.fs_archive_addr != 0 {
        let bytes = match shoal_plat::umem::slice(bi.fs_archive_addr, bi.fs_archive_size as usize) {
            Ok(b) => b,
            Err(_) => fatal(format_args!("the archive lies outside guest memory")),
        };
        match Fs::from_archive(bytes, clock) {
            Ok(mut fs) => {
                let root = fs.root();
                if fs.lookup(root, b"tmp").is_err() {
                    let _ = fs.mkdir(root, b"tmp", 0o1777);
                }
                dev::populate(&mut fs);
                default_etc(&mut fs);
                fs
            }
            Err(e) => fatal(format_args!("{e}")),
        }
    } else {
        empty_root()
    }
}

/// Takes the state out (a rejuvenation sets it aside: module `heal`).
fn take_state() -> Option<Vfs> {
    STATE.try_with(|s| s.take()).flatten()
}

/// Installs the state a reboot rebuilt (module `heal`) in place of the
/// failed one, which is abandoned, never dropped: its heap objects may be
/// corrupt, and a shared mapping may still map its file pages.
fn install_rebuilt(v: Vfs) {
    STATE.with(|s| {
        // SAFETY: `s` is the valid, exclusive reference `with` gives;
        // writing without dropping the old value only leaks it.
        unsafe { core::ptr::write(s, Some(v)) }
    });
}

/// Packs the volume's guest directory (`shoal run --volume`) and hands it
/// to the tender, which replaces the host directory's contents with it
/// after the instance has ended. Runs once, from `shoal_plat::halt`. The
/// path is looked up without following symlinks; a volume directory the
/// program removed (or replaced by a file) is saved as empty. A save that
/// cannot be made (the file system busy further up the stack, no memory
/// for the copy, too large for the tender) is reported and leaves the
/// host directory as it was.
fn save_volume() {
    use core::fmt::Write;
    let bi = shoal_plat::boot::info();
    let len = bi.volume_path.iter().position(|&c| c == 0).unwrap_or(bi.volume_path.len());
    let path = &bi.volume_path[..len];
    let packed = STATE.try_with(|s| {
        let fs = s.get_or_insert_with(|| Vfs::new(empty_root())).fs();
        let mut ino = Some(fs.root());
        for part in path.split(|&c| c == b'/').filter(|p| !p.is_empty()) {
            ino = ino.and_then(|d| fs.lookup(d, part).ok());
        }
        match ino.filter(|&i| fs.file_type(i) == Ok(shoal_ramfs::FileType::Directory)) {
            Some(dir) => fs.pack(dir),
            None => empty_archive(),
        }
    });
    let why = match packed {
        None => "the file system was in use when the instance ended",
        Some(Err(_)) => "there is not enough guest memory to pack it",
        Some(Ok(bytes)) => match shoal_plat::hypercall::volume_save(&bytes) {
            0 => return,
            r if r == -(shoal_plat::Errno::EFBIG.0 as i64) => "it is larger than the tender takes (the guest memory size)",
            _ => "the tender refused it",
        },
    };
    let _ = writeln!(shoal_plat::console::Stderr, "shoal: the volume {} was not saved: {why}", core::str::from_utf8(path).unwrap_or("?"));
}

/// An archive with no entries (a removed volume directory).
fn empty_archive() -> Result<alloc::vec::Vec<u8>, shoal_plat::Errno> {
    shoal_archive::encode(&mut []).map_err(|_| shoal_plat::Errno::EFBIG)
}

/// Runs `f` on the process's file-system state (an empty root if `init`
/// has not run).
///
/// When `f` changed the size of a file, the shared mappings of that file
/// follow ([`shoal_mm::file::resized`]) before this returns: pages past a
/// new end stop showing the file before its freed pages can be reused,
/// pages inside a grown file start showing it.
pub fn with<R>(f: impl FnOnce(&mut Vfs) -> R) -> R {
    // The code below is vfs's (recover: a failure here reboots vfs), and
    // what the call changed goes to the log before it returns. Entered
    // from another component (net's read and write, mm), this counts as a
    // call into vfs (`--inject vfs:…@N`) and is watched for a hang; from
    // the table's own vfs gate it is neither again.
    let _in = shoal_recover::enter(shoal_recover::id::VFS);
    let r = STATE.with(|s| {
        let v = s.get_or_insert_with(|| Vfs::new(empty_root()));
        let r = f(v);
        heal::commit(v);
        r
    });
    match STATE.with(|s| s.as_mut().map_or(shoal_ramfs::Resized::None, |v| v.fs.take_resized())) {
        shoal_ramfs::Resized::None => {}
        shoal_ramfs::Resized::One(ino) => shoal_mm::file::resized(Some(ino)),
        shoal_ramfs::Resized::Many => shoal_mm::file::resized(None),
    }
    r
}

/// Runs `f` on the process's file-system state without changing it: a
/// look (net asking what object a descriptor is, on every `read` and
/// `write`) that, unlike [`with`], leaves the log alone — a shared
/// borrow changes nothing, so there is nothing to bring up to date — and
/// cannot resize a file. The code is still vfs's (a failure in it reboots
/// vfs).
pub fn with_ref<R>(f: impl FnOnce(&Vfs) -> R) -> R {
    let _in = shoal_recover::enter(shoal_recover::id::VFS);
    STATE.with(|s| f(s.get_or_insert_with(|| Vfs::new(empty_root()))))
}

/// The object behind descriptor `fd` and whether its description is
/// non-blocking ([`Vfs::obj_of`]): a read of the descriptor table, which
/// changes nothing, so it skips what [`with`] does after a call that may
/// have changed something (the recovery log's commit, the resized-file
/// check): [`with_ref`]. net's every socket read, write and `epoll_wait`
/// starts here. Out of line: it reaches vfs's static (see
/// `shoal_recover::log`).
#[inline(never)]
pub fn obj_of_fd(fd: i32) -> Result<(u64, bool), Errno> {
    with_ref(|v| v.obj_of(fd))
}

#[cfg(test)]
mod tests;
