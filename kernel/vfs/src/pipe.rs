//! Pipes: `pipe`, `pipe2` and named FIFOs.

use alloc::collections::VecDeque;
use shoal_plat::{umem, Args, Errno, SysResult};
use shoal_ramfs::Ino;

use crate::abi::*;
use crate::{Target, Vfs};

/// Bytes a pipe holds (Linux's default pipe size, `F_GETPIPE_SZ`).
pub const PIPE_CAP: usize = 65536;
/// Writes of at most this many bytes are atomic.
pub const PIPE_BUF: usize = 4096;

/// The state of one pipe with at least one open end.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Pipe {
    pub buf: VecDeque<u8>,
    /// Open file descriptions that can read / write it.
    pub readers: u32,
    pub writers: u32,
    /// Counts changes that can make an end newly ready (data, space, an
    /// end opened or closed): edge-triggered epoll reports on a change.
    pub gen: u64,
    /// Its capacity set by `F_SETPIPE_SZ` (0: [`PIPE_CAP`]).
    pub size: u32,
    /// Descriptions opened for reading / writing so far (Linux's
    /// `r_counter`, `w_counter`): a blocking open of a FIFO waits for the
    /// other one to move.
    pub r_opened: u64,
    pub w_opened: u64,
}

/// The largest pipe size a program that is not root may set
/// (`/proc/sys/fs/pipe-max-size`'s default).
pub const PIPE_MAX_SIZE: u64 = 1 << 20;

impl Pipe {
    /// Bytes it holds at most.
    pub fn cap(&self) -> usize {
        if self.size == 0 {
            PIPE_CAP
        } else {
            self.size as usize
        }
    }

    pub fn space(&self) -> usize {
        self.cap().saturating_sub(self.buf.len())
    }

    /// `F_SETPIPE_SZ`: `want` rounded up to a power of two of pages (one
    /// page at least); `EPERM` past [`PIPE_MAX_SIZE`] unless `root`,
    /// `EINVAL` past 2 GiB, `EBUSY` if it holds more than that; returns
    /// the new size, as Linux.
    pub fn set_size(&mut self, want: u64, root: bool) -> Result<u64, Errno> {
        let size = want.max(4096).checked_next_power_of_two().filter(|&s| s <= 1 << 31).ok_or(Errno::EINVAL)?;
        if size > PIPE_MAX_SIZE && !root {
            return Err(Errno::EPERM);
        }
        if (self.buf.len() as u64) > size {
            return Err(Errno::EBUSY);
        }
        self.size = size as u32;
        self.gen += 1;
        Ok(size)
    }
}

impl Vfs {
    /// Counts a new description of pipe `ino`.
    pub(crate) fn pipe_open(&mut self, ino: Ino, flags: u32) {
        let p = self.pipes.entry(ino).or_default();
        match flags & O_ACCMODE {
            O_RDONLY => p.readers += 1,
            O_WRONLY => p.writers += 1,
            _ => {
                p.readers += 1;
                p.writers += 1;
            }
        }
        if flags & O_ACCMODE != O_WRONLY {
            p.r_opened += 1;
        }
        if flags & O_ACCMODE != O_RDONLY {
            p.w_opened += 1;
        }
        p.gen += 1;
        crate::readylog::note(crate::readylog::pipe_src(ino));
        crate::wait::wake(ino);
    }

    /// Drops a description of pipe `ino`; the data goes when the last end
    /// is closed.
    pub(crate) fn pipe_close(&mut self, ino: Ino, flags: u32) {
        let Some(p) = self.pipes.get_mut(&ino) else { return };
        match flags & O_ACCMODE {
            O_RDONLY => p.readers -= 1,
            O_WRONLY => p.writers -= 1,
            _ => {
                p.readers -= 1;
                p.writers -= 1;
            }
        }
        p.gen += 1;
        crate::readylog::note(crate::readylog::pipe_src(ino));
        if p.readers == 0 && p.writers == 0 {
            self.pipes.remove(&ino);
        }
        crate::wait::wake(ino);
    }

    pub(crate) fn pipe(&self, ino: Ino) -> Option<&Pipe> {
        self.pipes.get(&ino)
    }

    /// Reads from pipe `ino`: `EAGAIN` when empty with a writer left (the
    /// caller decides whether to wait), 0 at end of file.
    pub(crate) fn pipe_read(&mut self, ino: Ino, buf: &mut [u8]) -> Result<usize, Errno> {
        let p = self.pipes.get_mut(&ino).ok_or(Errno::EBADF)?;
        if buf.is_empty() {
            return Ok(0);
        }
        if p.buf.is_empty() {
            return if p.writers == 0 { Ok(0) } else { Err(Errno::EAGAIN) };
        }
        let n = buf.len().min(p.buf.len());
        for (d, s) in buf.iter_mut().zip(p.buf.drain(..n)) {
            *d = s;
        }
        p.gen += 1;
        crate::readylog::note(crate::readylog::pipe_src(ino));
        crate::wait::wake(ino);
        Ok(n)
    }

    /// Writes to pipe `ino`: `EPIPE` without readers; writes of at most
    /// `PIPE_BUF` bytes go in whole or not at all; `EAGAIN` when nothing
    /// can be written now.
    pub(crate) fn pipe_write(&mut self, ino: Ino, data: &[u8]) -> Result<usize, Errno> {
        let p = self.pipes.get_mut(&ino).ok_or(Errno::EBADF)?;
        if p.readers == 0 {
            return Err(Errno::EPIPE);
        }
        if data.is_empty() {
            return Ok(0);
        }
        let space = p.space();
        if space == 0 || (data.len() <= PIPE_BUF && space < data.len()) {
            return Err(Errno::EAGAIN);
        }
        let n = data.len().min(space);
        p.buf.extend(&data[..n]);
        p.gen += 1;
        crate::readylog::note(crate::readylog::pipe_src(ino));
        crate::wait::wake(ino);
        Ok(n)
    }

    /// Whether an `EAGAIN` from `fd` means "wait and retry": a pipe, an
    /// object (module `obj`) or stdin, opened without `O_NONBLOCK`.
    pub(crate) fn would_block(&self, fd: i32) -> bool {
        match self.ofd_of(fd) {
            Ok(i) => {
                let o = self.ofd(i);
                matches!(o.target, Target::Fifo(_) | Target::Obj(_) | Target::Stdin) && o.flags & O_NONBLOCK == 0
            }
            Err(_) => false,
        }
    }

    /// `pipe2(fds, flags)`.
    pub(crate) fn pipe2(&mut self, a: &Args) -> SysResult {
        let flags = a.uint(1);
        if flags & !(O_CLOEXEC | O_NONBLOCK | O_DIRECT) != 0 {
            return Err(Errno::EINVAL);
        }
        // Checked before the pipe exists, so that a bad pointer leaks no
        // descriptors: writable, as the two fds are written there.
        umem::check_write(a.u(0), 8)?;
        let ino = self.fs.create_unnamed_fifo();
        let st = flags & (O_NONBLOCK | O_DIRECT);
        let r = self.new_ofd(Target::Fifo(ino), O_RDONLY | st);
        let w = self.new_ofd(Target::Fifo(ino), O_WRONLY | st);
        self.fs.put_ref(ino); // the descriptions hold their own
        let cloexec = flags & O_CLOEXEC != 0;
        let rfd = match self.install(0, r, cloexec) {
            Ok(fd) => fd,
            Err(e) => {
                self.ofds[w].as_mut().expect("ofd").refs = 1;
                self.put_ofd(w);
                return Err(e);
            }
        };
        let wfd = match self.install(0, w, cloexec) {
            Ok(fd) => fd,
            Err(e) => {
                let _ = self.close_fd(rfd as i32);
                return Err(e);
            }
        };
        umem::write(a.u(0), [rfd as i32, wfd as i32])?;
        Ok(0)
    }

    /// `pipe(fds)`.
    pub(crate) fn pipe_(&mut self, a: &Args) -> SysResult {
        self.pipe2(&Args([a.u(0), 0, 0, 0, 0, 0]))
    }

    /// Opening a FIFO with access `flags`: `ENXIO` for a non-blocking
    /// writer without readers (Linux semantics). A blocking open with no
    /// other end is made first and then waits for one (as Linux counts the
    /// opener as a reader or writer while it waits, so two threads opening
    /// the two ends meet): noted in [`WAIT_PARTNER`] for `sys`'s open.
    pub(crate) fn fifo_open_check(&self, ino: Ino, flags: u32) -> Result<(), Errno> {
        let r = self.pipes.get(&ino).map_or(0, |p| p.readers);
        match flags & O_ACCMODE {
            O_WRONLY if r == 0 && flags & O_NONBLOCK != 0 => Err(Errno::ENXIO),
            _ => Ok(()),
        }
    }

    /// After a blocking open of FIFO `ino` for `flags` made its end: what
    /// it must wait for, if the other end is not open (see
    /// [`Vfs::fifo_partner_came`]).
    pub(crate) fn fifo_wait_for(&self, ino: Ino, flags: u32) -> Option<(Ino, bool, u64)> {
        let p = self.pipes.get(&ino)?;
        match flags & O_ACCMODE {
            _ if flags & O_NONBLOCK != 0 => None,
            O_RDONLY if p.writers == 0 => Some((ino, true, p.w_opened)),
            O_WRONLY if p.readers == 0 => Some((ino, false, p.r_opened)),
            _ => None,
        }
    }

    /// Whether a writer (`writer`) or reader opened FIFO `ino` since its
    /// count was `seen` (Linux's `wait_for_partner`).
    pub(crate) fn fifo_partner_came(&self, ino: Ino, writer: bool, seen: u64) -> bool {
        self.pipes.get(&ino).is_none_or(|p| if writer { p.w_opened != seen } else { p.r_opened != seen })
    }
}

/// The FIFO end the last open on this vCPU made without its other end
/// (descriptor, inode, waiting for a writer, the other end's open count
/// then), taken by `sys`'s open right after the call (kernel code is not
/// preempted in between).
pub(crate) static WAIT_PARTNER: shoal_plat::Global<Option<(i32, Ino, bool, u64)>> = shoal_plat::Global::new(None);

/// The end of a blocking open of a FIFO (`sys`): returns `fd` once the
/// other end was opened; interrupted (a signal), closes it again.
pub(crate) fn await_partner(fd: u64) -> shoal_plat::SysResult {
    let Some((fd, ino, writer, seen)) = WAIT_PARTNER.with(|x| x.take()) else { return Ok(fd) };
    loop {
        if crate::with_ref(|v| v.fifo_partner_came(ino, writer, seen)) {
            return Ok(fd as u64);
        }
        if let Err(e) = crate::wait::block("opening a FIFO", None) {
            let _ = crate::with(|v| v.close_fd(fd));
            return Err(e);
        }
    }
}

impl Vfs {}
