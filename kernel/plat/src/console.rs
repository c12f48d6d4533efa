//! The console: stdout and stderr of the instance go to the tender; its
//! standard input comes from the tender's (module docs of [`Stdin`]).

use shoal_abi::{CONSOLE_STDERR, CONSOLE_STDOUT};

/// Writes all of `bytes` to the instance's stdout.
pub fn stdout(bytes: &[u8]) -> i64 {
    write(CONSOLE_STDOUT, bytes)
}

/// Writes all of `bytes` to the instance's stderr.
pub fn stderr(bytes: &[u8]) -> i64 {
    write(CONSOLE_STDERR, bytes)
}

#[cfg(not(test))]
fn write(stream: u64, bytes: &[u8]) -> i64 {
    crate::hypercall::console_write(stream, bytes)
}

#[cfg(test)]
fn write(stream: u64, bytes: &[u8]) -> i64 {
    use std::io::Write;
    let _ = if stream == CONSOLE_STDOUT {
        std::io::stdout().write_all(bytes)
    } else {
        std::io::stderr().write_all(bytes)
    };
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

static STDIN: crate::Global<Option<Stdin>> = crate::Global::new(None);

/// Runs `f` on the standard-input state.
pub fn with_stdin<R>(f: impl FnOnce(&mut Stdin) -> R) -> R {
    STDIN.with(|s| {
        let s = s.get_or_insert_with(|| Stdin {
            tty: crate::boot::info().console_flags & shoal_abi::CONSOLE_STDIN_TTY != 0,
            ..Stdin::default()
        });
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
    use super::Stdin;
    use crate::Errno;

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
