//! The front end's last step: hand the prepared instance over to a fresh
//! `exec` of the instance program ([`crate::INSTANCE_PROGRAM`]), so that
//! the process the guest lives in starts from a clean image: no
//! environment (but one fixed malloc tunable: [`INSTANCE_ENV`]), no arguments, no heap or stack of the caller's command
//! line, and no descriptor but the console and what [`crate::spec`] lists
//! (issue "Harden the tenders", item 2; Firecracker's jailer does the same
//! for its VMM).
//!
//! [`Handover::new`] does everything that allocates before the child starts:
//! memfds for the spec and the archive, close-on-exec copies of every
//! descriptor at high numbers, the argv array. The child (which shares
//! this process's memory until its `exec`: `sys::spawn_with`; or, in
//! place, the caller itself) then only moves descriptors to their fixed
//! numbers with `dup3`, closes the rest with `close_range` and calls
//! `execveat` on the instance program's descriptor: async-signal-safe
//! system calls only.

use crate::child::Errno;
use crate::hypercall::say;
use crate::{confine, spec, sys, SptError, EXIT_TENDER_FAILED};
use std::io::{Seek, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// The instance program's whole environment: glibc's per-thread malloc
/// cache off (see `Handover::exec`); it holds nothing of the host.
pub const INSTANCE_ENV: &std::ffi::CStr = c"GLIBC_TUNABLES=glibc.malloc.tcache_count=0";

/// What the instance process is given.
pub(crate) struct Parts<'a> {
    /// The instance program.
    pub program: &'a Path,
    /// The encoded boot spec.
    pub spec: &'a [u8],
    /// The image file (opened again here: the instance checks it again).
    pub image: &'a Path,
    /// The image already open (a [`crate::Prepared`] function's): passed
    /// instead of opening `image` again.
    pub image_fd: Option<&'a OwnedFd>,
    /// The packed root file-system archive (empty: none).
    pub archive: &'a [u8],
    /// The archive already in a sealed memfd (a [`crate::Prepared`]
    /// function's, shared by all its instances): passed instead of `archive`.
    pub archive_fd: Option<&'a OwnedFd>,
    /// The instance program already open (a [`crate::Prepared`] function's).
    pub program_fd: Option<&'a OwnedFd>,
    /// Where the instance's stdin comes from, if not this process's fd 0.
    pub stdin: Option<&'a OwnedFd>,
    /// The report page's memfd, when a parent waits.
    pub report: Option<&'a OwnedFd>,
    /// Pass a pidfd of this process at [`spec::PARENT_FD`] without a
    /// report page (`shoal serve`'s instances; with `report` it is passed
    /// anyway).
    pub parent_pidfd: bool,
    /// Verified pool files, in the spec's order.
    pub pool: &'a [OwnedFd],
    /// Listening sockets, in the spec's order.
    pub listeners: &'a [OwnedFd],
    /// The instance's end of the bind channel (`--net-bind-any`), placed
    /// right after the listening sockets.
    pub channel: Option<&'a OwnedFd>,
    /// The `O_PATH` descriptors of the read-only host directories
    /// (`--mount`), placed right after the bind channel.
    pub mounts: &'a [OwnedFd],
    /// Where the guest's stdout goes, if not this process's fd 1.
    pub stdout: Option<&'a OwnedFd>,
    /// Where the guest's stderr goes, if not this process's fd 2.
    pub stderr: Option<&'a OwnedFd>,
    /// A network namespace to enter (root: the shared empty one).
    pub netns: Option<OwnedFd>,
}

/// A prepared hand-over: descriptors at high numbers and where they go.
pub(crate) struct Handover {
    /// Close-on-exec copies; kept open until the exec.
    held: Vec<OwnedFd>,
    /// (source, target, dup3 flags) for each move.
    moves: Vec<(i32, i32, libc::c_int)>,
    /// Where the instance program's descriptor lands (the highest kept).
    program_fd: i32,
    program: PathBuf,
    parent: libc::pid_t,
    netns: Option<OwnedFd>,
}

fn sys_err(what: &'static str) -> impl Fn(std::io::Error) -> SptError {
    move |source| SptError::Sys { what, source }
}

fn memfd_with(name: &core::ffi::CStr, bytes: &[u8]) -> Result<OwnedFd, SptError> {
    let fd = sys::memfd(name).map_err(sys_err("make a memory file for the instance"))?;
    let mut f = std::fs::File::from(fd);
    f.write_all(bytes).map_err(sys_err("fill a memory file for the instance"))?;
    f.rewind().map_err(sys_err("fill a memory file for the instance"))?;
    Ok(OwnedFd::from(f))
}

/// A memfd holding `bytes`, sealed with [`sys::ARCHIVE_SEALS`].
pub(crate) fn memfd_sealed(name: &core::ffi::CStr, bytes: &[u8]) -> Result<OwnedFd, SptError> {
    let fd = sys::memfd_sealable(name).map_err(sys_err("make a memory file for the instance"))?;
    let mut f = std::fs::File::from(fd);
    f.write_all(bytes).map_err(sys_err("fill a memory file for the instance"))?;
    sys::add_seals(f.as_raw_fd(), sys::ARCHIVE_SEALS).map_err(sys_err("seal a memory file for the instance"))?;
    Ok(OwnedFd::from(f))
}

impl Handover {
    /// Prepares everything the hand-over needs (allocates; call before the
    /// child starts).
    pub(crate) fn new(p: Parts<'_>) -> Result<Handover, SptError> {
        let listen_fd0 = spec::POOL_FD0 + p.pool.len() as i32;
        let mount_fd0 = listen_fd0 + p.listeners.len() as i32 + i32::from(p.channel.is_some());
        let program_fd = mount_fd0 + p.mounts.len() as i32;
        // Sources sit above every target, so no move overwrites a source.
        let high = program_fd + 1;
        let mut held = Vec::new();
        let mut moves = Vec::new();
        let mut hold = |fd: i32, target: i32, flags: libc::c_int| -> Result<(), SptError> {
            let copy = sys::dup_at_least(fd, high).map_err(sys_err("pass a descriptor to the instance"))?;
            moves.push((copy.as_raw_fd(), target, flags));
            held.push(copy);
            Ok(())
        };
        if let Some(fd) = p.stdin {
            hold(fd.as_raw_fd(), 0, 0)?;
        }
        if let Some(fd) = p.stdout {
            hold(fd.as_raw_fd(), 1, 0)?;
        }
        if let Some(fd) = p.stderr {
            hold(fd.as_raw_fd(), 2, 0)?;
        }
        let spec_fd = memfd_with(c"shoal-spec", p.spec)?;
        hold(spec_fd.as_raw_fd(), spec::SPEC_FD, 0)?;
        match p.image_fd {
            Some(fd) => hold(fd.as_raw_fd(), spec::IMAGE_FD, 0)?,
            None => {
                let image = std::fs::File::open(p.image).map_err(sys_err("open the image for the instance"))?;
                hold(image.as_raw_fd(), spec::IMAGE_FD, 0)?;
            }
        }
        if let Some(fd) = p.archive_fd {
            hold(fd.as_raw_fd(), spec::ARCHIVE_FD, 0)?;
        } else if !p.archive.is_empty() {
            // Sealed: the instance maps it into guest memory instead of
            // reading it (a private mapping of a file that never changes).
            let a = memfd_sealed(c"shoal-archive", p.archive)?;
            hold(a.as_raw_fd(), spec::ARCHIVE_FD, 0)?;
        }
        if let Some(fd) = p.report {
            hold(fd.as_raw_fd(), spec::REPORT_FD, 0)?;
        }
        if p.report.is_some() || p.parent_pidfd {
            let me = sys::pidfd_self().map_err(sys_err("make a pidfd of the instance's parent"))?;
            hold(me.as_raw_fd(), spec::PARENT_FD, 0)?;
        }
        for (i, fd) in p.pool.iter().enumerate() {
            hold(fd.as_raw_fd(), spec::POOL_FD0 + i as i32, 0)?;
        }
        for (i, fd) in p.listeners.iter().enumerate() {
            hold(fd.as_raw_fd(), listen_fd0 + i as i32, 0)?;
        }
        if let Some(fd) = p.channel {
            hold(fd.as_raw_fd(), listen_fd0 + p.listeners.len() as i32, 0)?;
        }
        for (i, fd) in p.mounts.iter().enumerate() {
            hold(fd.as_raw_fd(), mount_fd0 + i as i32, 0)?;
        }
        // Close-on-exec: execveat runs it from the descriptor, which the
        // new program then does not inherit.
        match p.program_fd {
            Some(fd) => hold(fd.as_raw_fd(), program_fd, libc::O_CLOEXEC)?,
            None => {
                let program = std::fs::File::open(p.program).map_err(sys_err("open the instance program"))?;
                hold(program.as_raw_fd(), program_fd, libc::O_CLOEXEC)?;
            }
        }
        Ok(Handover { held, moves, program_fd, program: p.program.to_path_buf(), parent: sys::getpid(), netns: p.netns })
    }

    /// In the child (`sys::spawn_with`): dies with the parent, then [`Self::exec`].
    pub(crate) fn exec_child(&self) -> ! {
        sys::reset_signals();
        // If the parent is gone already, PDEATHSIG will never come: leave.
        // In a new PID namespace the parent is outside it and reads as 0.
        let ppid = sys::getppid();
        if sys::die_with_parent().is_err() || (ppid != self.parent && ppid != 0) {
            sys::exit(EXIT_TENDER_FAILED);
        }
        self.exec()
    }

    /// In place: this process becomes the instance (a root-started one in
    /// its own mount, IPC and network namespaces first).
    pub(crate) fn become_instance(&self, root: bool) -> ! {
        sys::reset_signals();
        if root {
            if let Err(e) = sys::unshare(confine::UNSHARE_NAMESPACES) {
                say(format_args!("cannot confine the instance: cannot make its namespaces: {}", Errno(e)));
                sys::exit(EXIT_TENDER_FAILED);
            }
        }
        self.exec()
    }

    /// Moves the descriptors, closes every other one and runs the instance
    /// program with an environment of [`INSTANCE_ENV`] only. Async-signal-safe.
    fn exec(&self) -> ! {
        debug_assert!(!self.held.is_empty());
        // Before the moves, which may land on the namespace's descriptor.
        if let Some(ns) = &self.netns {
            if let Err(e) = sys::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) {
                say(format_args!("cannot confine the instance: cannot enter its network namespace: {}", Errno(e)));
                sys::exit(EXIT_TENDER_FAILED);
            }
        }
        for &(from, to, flags) in &self.moves {
            if let Err(e) = sys::dup3(from, to, flags) {
                say(format_args!("cannot pass descriptor {to} to the instance: {}", Errno(e)));
                sys::exit(EXIT_TENDER_FAILED);
            }
        }
        if let Err(e) = sys::close_from(self.program_fd as u32 + 1) {
            say(format_args!("cannot close inherited descriptors: {}", Errno(e)));
            sys::exit(EXIT_TENDER_FAILED);
        }
        let argv: [*const libc::c_char; 2] = [c"shoal-spt".as_ptr(), core::ptr::null()];
        // One fixed variable, nothing of the host's: glibc's malloc without
        // its per-thread cache, which would keep the chunks booting freed
        // (tens of KiB here) looking allocated, out of `malloc_trim`'s reach,
        // for the instance's whole life (it cannot be turned off after
        // start: tunables are read once, at exec).
        let envp: [*const libc::c_char; 2] = [INSTANCE_ENV.as_ptr(), core::ptr::null()];
        // SAFETY: both arrays are null-terminated and point at static C
        // strings.
        let e = unsafe { sys::execveat(self.program_fd, argv.as_ptr(), envp.as_ptr()) };
        say(format_args!("cannot start the instance program {}: {}", self.program.display(), Errno(e)));
        sys::exit(EXIT_TENDER_FAILED)
    }
}
