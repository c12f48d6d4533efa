//! The console: stdout and stderr of the instance go to the tender.

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
