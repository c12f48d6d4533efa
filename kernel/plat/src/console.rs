//! The console: stdout and stderr of the instance go to the tender; its
//! standard input comes from the tender's (module docs of [`Stdin`]).
//!
//! On hvt every console write is a VM exit (about 28 µs here, docs/design.md "Host facts"),
//! so stdout is collected in a buffer ([`OutBuf`], on pages of its own,
//! registered with the VMM by [`init_buffer`]) and written with one exit when it fills, at every
//! newline when stdout is a terminal (as stdio does), within about 10 ms of
//! a newline when it is a pipe or a socket ([`FLUSH_GAP_NS`]: a reader may
//! be waiting for the line, but one exit per line made hvt 17 times slower
//! than spt writing 127 MB of short lines into a pipe), before stderr is
//! written, and before
//! any other hypercall — so before the guest blocks, reads its input, sends
//! on a socket or halts, and output keeps its order with everything else
//! the instance does outside. If the guest ends without flushing (a CPU
//! exception, a refused hypercall), the VMM writes what is left before its
//! message. stderr is never held back. spt needs none of this: its console
//! write is a function call and one host `write`.

use core::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use shoal_abi::{ConsoleBufferHeader, CONSOLE_STDERR, CONSOLE_STDOUT};

/// Writes all of `bytes` to the instance's stdout.
pub fn stdout(bytes: &[u8]) -> i64 {
    write(CONSOLE_STDOUT, bytes)
}

/// Writes all of `bytes` to the instance's stderr.
pub fn stderr(bytes: &[u8]) -> i64 {
    write(CONSOLE_STDERR, bytes)
}

/// Room of the stdout buffer: 32 KiB, so that a program printing many short
/// lines into a file or pipe makes one exit per 32 KiB.
pub const OUT_CAP: usize = 32 * 1024;

/// Pending stdout bytes, laid out as the VMM reads them
/// ([`shoal_abi::ConsoleBufferHeader`] then the bytes).
#[repr(C)]
pub struct OutBuf {
    head: ConsoleBufferHeader,
    data: [u8; OUT_CAP],
}

impl OutBuf {
    /// An empty buffer (the stream is set by the first [`OutBuf::add`]).
    /// The kernel's own lies on fresh pages ([`init_buffer`]), written only
    /// as output fills it.
    pub const fn new() -> OutBuf {
        OutBuf { head: ConsoleBufferHeader { stream: 0, len: 0 }, data: [0; OUT_CAP] }
    }

    /// The pending bytes.
    pub fn pending(&self) -> &[u8] {
        &self.data[..self.head.len as usize]
    }

    /// Adds `bytes` for stdout, writing through `sink` what must go out now
    /// (the pending bytes when they would overflow, `bytes` themselves when
    /// they alone would, everything up to a newline on a terminal). Returns
    /// `bytes.len()`, or the first error `sink` reports.
    pub fn add(&mut self, bytes: &[u8], line_buffered: bool, sink: &mut dyn FnMut(&[u8]) -> i64) -> i64 {
        if self.head.len as usize + bytes.len() > OUT_CAP {
            let r = self.flush(sink);
            if r < 0 {
                return r;
            }
        }
        if bytes.len() > OUT_CAP {
            return sink(bytes);
        }
        let at = self.head.len as usize;
        self.head.stream = CONSOLE_STDOUT as u32;
        self.data[at..at + bytes.len()].copy_from_slice(bytes);
        self.head.len += bytes.len() as u32;
        if line_buffered && bytes.contains(&b'\n') {
            let r = self.flush(sink);
            if r < 0 {
                return r;
            }
        }
        bytes.len() as i64
    }

    /// Writes the pending bytes through `sink` and empties the buffer
    /// (also when `sink` fails: the bytes are then lost, as a failed write's
    /// are). Returns 0 or `sink`'s error.
    pub fn flush(&mut self, sink: &mut dyn FnMut(&[u8]) -> i64) -> i64 {
        if self.head.len == 0 {
            return 0;
        }
        let r = sink(self.pending());
        self.head.len = 0;
        if r < 0 {
            r
        } else {
            0
        }
    }
}

impl Default for OutBuf {
    fn default() -> Self {
        OutBuf::new()
    }
}

/// The stdout buffer, on hvt only: pages of its own from mm, taken by
/// [`init_buffer`] after mm is up (in plat's `.bss` its 32 KiB lay between
/// two pages plat writes, one more page in every instance, spt's too).
static OUT: crate::Global<Option<&'static mut OutBuf>> = crate::Global::new(None);
/// Whether stdout is buffered (hvt, after the VMM accepted the buffer).
static BUFFERED: AtomicBool = AtomicBool::new(false);
/// Whether stdout is a terminal (then the buffer is flushed at newlines).
static LINE_BUFFERED: AtomicBool = AtomicBool::new(false);
/// Whether stdout is a pipe or a socket (then a newline is written out
/// within [`FLUSH_GAP_NS`]; see [`newline`]).
static LINES_SOON: AtomicBool = AtomicBool::new(false);
/// The time stamp counter at the last write of stdout to the host.
static LAST_OUT_TSC: AtomicU64 = AtomicU64::new(0);
/// [`FLUSH_GAP_NS`] in time stamp counter ticks (set by [`init_buffer`]).
static GAP_TSC: AtomicU64 = AtomicU64::new(0);
/// Lines are held back and a wake tick was asked for ([`flush_held`]).
static HELD: AtomicBool = AtomicBool::new(false);
/// The scheduler's way to ask for a wake tick (`fn(delay_ns) -> bool`,
/// [`set_wake`]; 0: none).
static WAKE: AtomicUsize = AtomicUsize::new(0);

/// The longest a line written into a pipe or socket waits in the buffer
/// while the program computes: 10 ms (as the preemption tick).
pub const FLUSH_GAP_NS: u64 = 10_000_000;
/// Whether a flush has bytes to write (checked before every hypercall).
static PENDING: AtomicBool = AtomicBool::new(false);
/// An error a flush met, reported by the next stdout write (as a failed
/// write reports its own error, one write later).
static FLUSH_ERROR: AtomicI64 = AtomicI64::new(0);

/// hvt (no hypercall entry function: console writes are exits): takes
/// pages for the stdout buffer from `pages` (mm's page allocator: fresh,
/// zero pages, touched only as output fills them) and registers it with
/// the VMM; stdout is buffered from then on if the VMM accepts it. Does
/// nothing on spt. Called at boot, once mm is up.
#[cfg(not(test))]
pub fn init_buffer(pages: fn(u64) -> Option<u64>) {
    if crate::boot::info().hypercall_entry != 0 {
        return;
    }
    let size = (core::mem::size_of::<OutBuf>() as u64).next_multiple_of(shoal_abi::PAGE_SIZE);
    let Some(addr) = pages(size) else { return };
    // SAFETY: [addr, addr + size) was just handed to the kernel by the page
    // allocator, for good, and is used by nothing else; it is page aligned
    // (OutBuf's alignment is 4) and every byte pattern is a valid OutBuf
    // but for the header, which is written here.
    let buf = unsafe {
        let p = addr as *mut OutBuf;
        core::ptr::addr_of_mut!((*p).head).write(ConsoleBufferHeader { stream: 0, len: 0 });
        &mut *p
    };
    OUT.with(|o| *o = Some(buf));
    if crate::hypercall::console_buffer(addr, OUT_CAP as u64) == 0 {
        let flags = crate::boot::info().console_flags;
        LINE_BUFFERED.store(flags & shoal_abi::CONSOLE_STDOUT_TTY != 0, Ordering::Relaxed);
        LINES_SOON.store(flags & shoal_abi::CONSOLE_STDOUT_LINES != 0, Ordering::Relaxed);
        let hz = crate::boot::info().tsc_hz;
        GAP_TSC.store((u128::from(hz) * u128::from(FLUSH_GAP_NS) / 1_000_000_000).max(1) as u64, Ordering::Relaxed);
        BUFFERED.store(true, Ordering::Relaxed);
    }
}

/// Writes out the buffered stdout bytes, if any (before every hypercall
/// other than a console write, and before stderr).
pub fn flush() {
    if !PENDING.load(Ordering::Relaxed) {
        return;
    }
    // In use further up the stack (a kernel panic while adding): leave it;
    // the VMM writes what is left when the guest ends.
    let r = OUT.try_with(|o| o.as_deref_mut().map_or(0, |b| b.flush(&mut out)));
    if let Some(r) = r {
        PENDING.store(false, Ordering::Relaxed);
        if r < 0 {
            FLUSH_ERROR.store(r, Ordering::Relaxed);
        }
    }
}

fn write(stream: u64, bytes: &[u8]) -> i64 {
    if !BUFFERED.load(Ordering::Relaxed) {
        return host_write(stream, bytes);
    }
    if stream != CONSOLE_STDOUT {
        flush();
        return host_write(stream, bytes);
    }
    let err = FLUSH_ERROR.swap(0, Ordering::Relaxed);
    if err < 0 {
        return err;
    }
    let tty = LINE_BUFFERED.load(Ordering::Relaxed);
    match OUT.try_with(|o| {
        let b = o.as_deref_mut()?;
        let r = b.add(bytes, tty, &mut out);
        Some((r, b.head.len != 0))
    }) {
        Some(Some((r, pending))) => {
            PENDING.store(pending, Ordering::Relaxed);
            if pending && !tty && LINES_SOON.load(Ordering::Relaxed) && bytes.contains(&b'\n') {
                newline();
            }
            r
        }
        Some(None) | None => host_write(stream, bytes),
    }
}

/// Lets the scheduler arm a wake tick: `wake(delay_ns)` makes the kernel
/// call [`flush_held`] once about `delay_ns` from now, even while the
/// program computes, or returns false when it cannot.
pub fn set_wake(wake: fn(u64) -> bool) {
    WAKE.store(wake as usize, Ordering::Relaxed);
}

/// A line went into the buffer while stdout is a pipe or a socket: out
/// now if the last write-out is [`FLUSH_GAP_NS`] old, else held for a
/// wake tick (one asked for at a time; written out now when none can
/// come). So a stream of lines costs at most a write and a wake per
/// period, and a lone line waits at most about a period.
fn newline() {
    let since = crate::cpu::rdtsc().wrapping_sub(LAST_OUT_TSC.load(Ordering::Relaxed));
    if since >= GAP_TSC.load(Ordering::Relaxed) {
        flush();
        return;
    }
    if HELD.load(Ordering::Relaxed) {
        return;
    }
    let wake = WAKE.load(Ordering::Relaxed);
    if wake != 0 {
        // SAFETY: WAKE holds only a `fn(u64) -> bool`, stored by `set_wake`.
        let wake: fn(u64) -> bool = unsafe { core::mem::transmute(wake) };
        if wake(FLUSH_GAP_NS) {
            HELD.store(true, Ordering::Relaxed);
            return;
        }
    }
    flush();
}

/// The wake tick came: writes out the lines [`newline`] held back.
pub fn flush_held() {
    if HELD.swap(false, Ordering::Relaxed) {
        flush();
    }
}

/// Writes buffered stdout bytes to the host, noting when.
fn out(bytes: &[u8]) -> i64 {
    LAST_OUT_TSC.store(crate::cpu::rdtsc(), Ordering::Relaxed);
    host_write(CONSOLE_STDOUT, bytes)
}

#[cfg(not(test))]
fn host_write(stream: u64, bytes: &[u8]) -> i64 {
    crate::hypercall::console_write(stream, bytes)
}

#[cfg(test)]
fn host_write(stream: u64, bytes: &[u8]) -> i64 {
    use std::io::Write;
    let _ = if stream == CONSOLE_STDOUT { std::io::stdout().write_all(bytes) } else { std::io::stderr().write_all(bytes) };
    bytes.len() as i64
}

/// A `core::fmt::Write` sink for kernel messages on stderr, e.g.
/// `write!(plat::console::Stderr, "shoal: …")`.
pub struct Stderr;

impl core::fmt::Write for Stderr {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        stderr(s.as_bytes());
        Ok(())
    }
}

/// The state of the instance's standard input, the tender's stdin.
///
/// Reading never blocks in the tender (`ConsoleRead` answers `EAGAIN` when
/// nothing is there); a reader that must wait blocks in the kernel, and
/// when every thread waits, the scheduler's idle wait (`shoal_net`'s)
/// includes [`shoal_abi::STDIN_HANDLE`] in its `NetPoll` while
/// [`Stdin::wants_wait`] says so. Readiness is cached as for host sockets
/// (`ready`, cleared by an `EAGAIN`), so input nobody reads does not wake
/// an idle instance again and again. End of input is remembered unless
/// stdin is a terminal (where a line after Ctrl-D is new input).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stdin {
    /// Some thread found nothing to read (so waiting for input matters).
    pub wanted: bool,
    /// The tender reported input (or end of input) not read yet.
    pub ready: bool,
    /// End of input was read (never set for a terminal).
    pub eof: bool,
    /// The tender's stdin is a terminal.
    pub tty: bool,
}

const EAGAIN: i64 = 11;

impl Stdin {
    /// Folds the result `rc` of a `ConsoleRead` into the state and turns it
    /// into the read's result.
    pub fn after_read(&mut self, rc: i64) -> Result<usize, crate::Errno> {
        match rc {
            r if r == -EAGAIN => {
                self.ready = false;
                self.wanted = true;
                Err(crate::Errno::EAGAIN)
            }
            0 => {
                self.eof = !self.tty;
                self.ready = false;
                Ok(0)
            }
            r if r > 0 => Ok(r as usize),
            r => Err(crate::Errno((-r).clamp(1, 4095) as i32)),
        }
    }

    /// Whether an idle instance should wait for input.
    pub fn wants_wait(&self) -> bool {
        self.wanted && !self.ready && !self.eof
    }

    /// Records the `revents` of a poll of the tender's stdin.
    pub fn learn(&mut self, revents: i16) {
        if revents != 0 {
            self.ready = true;
        }
    }

    /// Whether a read would not wait.
    pub fn readable(&self) -> bool {
        self.ready || self.eof
    }
}

// (set up, state): all zero at first, so the cell lies in `.bss` (an
// `Option<Stdin>` would take `None` from a bool's niche, a non-zero byte
// that put plat's `.data` on a page of its own in every instance).
static STDIN: crate::Global<(bool, Stdin)> = crate::Global::new((false, Stdin { wanted: false, ready: false, eof: false, tty: false }));

/// Runs `f` on the standard-input state.
pub fn with_stdin<R>(f: impl FnOnce(&mut Stdin) -> R) -> R {
    STDIN.with(|(set, s)| {
        if !*set {
            *s = Stdin { tty: crate::boot::info().console_flags & shoal_abi::CONSOLE_STDIN_TTY != 0, ..Stdin::default() };
            *set = true;
        }
        f(s)
    })
}

/// Whether the tender's stdin is a terminal.
pub fn stdin_is_tty() -> bool {
    with_stdin(|s| s.tty)
}

/// Reads the instance's standard input without blocking: bytes read, 0 at
/// end of input, `EAGAIN` when nothing is there now. Without a tender
/// (unit tests) stdin is empty.
pub fn stdin_read(buf: &mut [u8]) -> Result<usize, crate::Errno> {
    if !crate::boot::booted() || with_stdin(|s| s.eof) {
        return Ok(0);
    }
    let rc = read_host(buf);
    with_stdin(|s| s.after_read(rc))
}

/// Whether a read of stdin would not wait now: asks the tender (a
/// zero-timeout poll) unless input is already known to be there.
pub fn stdin_readable() -> bool {
    if !crate::boot::booted() {
        return true;
    }
    if with_stdin(|s| s.readable()) {
        return true;
    }
    let mut fds = [shoal_abi::NetPollFd { handle: shoal_abi::STDIN_HANDLE, events: 1, revents: 0 }];
    let rc = poll_host(&mut fds);
    with_stdin(|s| {
        s.wanted = true;
        if rc > 0 {
            s.learn(fds[0].revents);
        }
        s.readable()
    })
}

#[cfg(not(test))]
fn read_host(buf: &mut [u8]) -> i64 {
    crate::hypercall::console_read(buf)
}

#[cfg(test)]
fn read_host(_buf: &mut [u8]) -> i64 {
    0
}

#[cfg(not(test))]
fn poll_host(fds: &mut [shoal_abi::NetPollFd]) -> i64 {
    crate::hypercall::net_poll(fds, 0)
}

#[cfg(test)]
fn poll_host(_fds: &mut [shoal_abi::NetPollFd]) -> i64 {
    0
}

#[cfg(test)]
mod tests {
    use super::{OutBuf, Stdin, OUT_CAP};
    use crate::Errno;

    /// A sink that records each write.
    fn recorder(log: &mut std::vec::Vec<std::vec::Vec<u8>>) -> impl FnMut(&[u8]) -> i64 + '_ {
        move |b| {
            log.push(b.to_vec());
            b.len() as i64
        }
    }

    #[test]
    fn stdout_is_written_when_the_buffer_fills_not_before() {
        let mut b = OutBuf::new();
        let mut log = std::vec::Vec::new();
        for _ in 0..OUT_CAP / 2 {
            assert_eq!(b.add(b"x\n", false, &mut recorder(&mut log)), 2);
        }
        assert!(log.is_empty(), "nothing goes out before the buffer is full");
        assert_eq!(b.add(b"y\n", false, &mut recorder(&mut log)), 2);
        assert_eq!(log.len(), 1, "one write for the full buffer");
        assert_eq!(log[0].len(), OUT_CAP);
        assert_eq!(b.pending(), b"y\n");
        assert_eq!(b.flush(&mut recorder(&mut log)), 0);
        assert_eq!(log[1], b"y\n");
        assert_eq!(b.pending(), b"");
        assert_eq!(b.flush(&mut recorder(&mut log)), 0);
        assert_eq!(log.len(), 2, "an empty buffer writes nothing");
    }

    #[test]
    fn a_terminal_gets_every_line_and_big_writes_go_straight_out() {
        let mut b = OutBuf::new();
        let mut log = std::vec::Vec::new();
        b.add(b"partial ", true, &mut recorder(&mut log));
        assert!(log.is_empty(), "no newline yet");
        b.add(b"line\nmore", true, &mut recorder(&mut log));
        assert_eq!(log, [b"partial line\nmore".to_vec()]);
        let big = std::vec![7u8; OUT_CAP + 1];
        let mut b = OutBuf::new();
        let mut log = std::vec::Vec::new();
        b.add(b"first", false, &mut recorder(&mut log));
        assert_eq!(b.add(&big, false, &mut recorder(&mut log)), big.len() as i64);
        assert_eq!(log, [b"first".to_vec(), big], "pending bytes first, in order");
    }

    #[test]
    fn a_failed_flush_reports_its_error_and_empties_the_buffer() {
        let mut b = OutBuf::new();
        b.add(b"lost", false, &mut |_| -32);
        assert_eq!(b.flush(&mut |_| -32), -32);
        assert_eq!(b.pending(), b"");
    }

    #[test]
    fn stdin_waits_only_while_wanted_and_not_known_ready() {
        let mut s = Stdin::default();
        assert!(!s.wants_wait(), "nobody asked for input yet");
        assert_eq!(s.after_read(-11), Err(Errno::EAGAIN));
        assert!(s.wants_wait() && !s.readable());
        s.learn(1);
        assert!(!s.wants_wait() && s.readable(), "known ready: the idle wait does not spin on it");
        assert_eq!(s.after_read(5), Ok(5));
        assert_eq!(s.after_read(-11), Err(Errno::EAGAIN));
        assert!(s.wants_wait(), "an EAGAIN forgets the readiness");
        assert_eq!(s.after_read(0), Ok(0));
        assert!(s.eof && s.readable() && !s.wants_wait(), "end of input is remembered");
        assert_eq!(s.after_read(-9), Err(Errno(9)));
    }

    #[test]
    fn a_terminal_forgets_end_of_input() {
        let mut s = Stdin { tty: true, ..Stdin::default() };
        assert_eq!(s.after_read(0), Ok(0));
        assert!(!s.eof, "a line after Ctrl-D is new input");
    }
}
