//! The gateway's connection to an instance: a TCP stream that acknowledges
//! at once whatever it reads.
//!
//! A function that writes its response head and body in two small
//! `write`s (a common shape) has Nagle's algorithm on its side hold the
//! body until the head is acknowledged. Linux delays that ACK when the
//! connection looks interactive (the gateway wrote the request just
//! before), by up to 40 ms: measured, 40 ms on every such request
//! (`shoal bench faas --only two-write`). `TCP_NODELAY` (set where the
//! connection is made) only covers the gateway's own writes; the ACK is
//! the gateway's part of the function's wait, and `TCP_QUICKACK` sends it.
//!
//! `TCP_QUICKACK` is not sticky on Linux: the kernel goes back to delayed
//! ACKs ("pingpong" mode) as soon as the gateway sends data soon after
//! receiving, i.e. on the next request. So it is set again after every
//! read that returned data: setting it also sends an ACK the kernel had
//! scheduled and delayed, which is exactly the one the function's Nagle
//! waits for (the head was just read; the body is behind that ACK).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// Sets `TCP_QUICKACK` on a TCP socket: leave delayed-ACK mode and send
/// any ACK that is pending now.
pub fn set_quickack(fd: BorrowedFd<'_>) -> io::Result<()> {
    let one: libc::c_int = 1;
    // SAFETY: `fd` is an open descriptor for the borrow's lifetime; the
    // option value points to a live c_int and its exact size is passed.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_QUICKACK,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// A connection to an instance that re-arms `TCP_QUICKACK` after each read
/// (see the module's documentation).
pub struct Upstream {
    inner: TcpStream,
}

impl Upstream {
    /// Wraps a connected stream, with `TCP_NODELAY` (the gateway's request
    /// head and body must not wait for the instance's ACK either) and
    /// `TCP_QUICKACK` (for the first response).
    pub fn new(inner: TcpStream) -> io::Result<Upstream> {
        inner.set_nodelay(true)?;
        set_quickack(inner.as_fd())?;
        Ok(Upstream { inner })
    }
}

impl AsyncRead for Upstream {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            // Failing only costs the delay this avoids; the read stands.
            let _ = set_quickack(self.inner.as_fd());
        }
        r
    }
}

impl AsyncWrite for Upstream {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(mut self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
