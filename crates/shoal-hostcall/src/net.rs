//! The `Net` hypercall's shared part, for both tenders: how a batch of
//! operations is read from and written back to guest memory, the bounds on
//! what is copied, and the checks of a new socket's arguments. Each
//! tender supplies how one operation is carried out on its host sockets
//! (spt: the guest's descriptors, raw system calls; hvt: a handle table
//! with an allow-list).
//!
//! Like every hypercall handler, nothing here allocates: spt runs it with
//! the guest's thread pointer loaded.

use shoal_abi::{NetArgs, NetOp, NET_MAX_OPS};
use shoal_loader::{GuestAddr, GuestMemory};

/// Largest `sockaddr` copied (`sizeof(struct sockaddr_storage)`).
pub const MAX_ADDR: u64 = 128;
/// Largest socket option value copied.
pub const MAX_OPT: u64 = 256;
/// Largest single transfer (Linux caps one call near 2 GiB anyway).
pub const MAX_IO: u64 = 1 << 30;

/// `-e`, as a hypercall returns an errno.
pub fn neg(e: i32) -> i64 {
    -i64::from(e)
}

/// Whether a guest socket of type `ty` (`SOCK_STREAM`/`SOCK_DGRAM`) may
/// have protocol `proto`: the default, TCP or UDP only. Anything else
/// (`IPPROTO_MPTCP`, whose ports Landlock's TCP rules do not cover on spt;
/// `IPPROTO_ICMP` ping sockets; `IPPROTO_UDPLITE`, `IPPROTO_SCTP`) is
/// `EPROTONOSUPPORT`, what Linux answers for a protocol it lacks and what
/// Go falls back from when it probes MPTCP. spt's seccomp filter pins the
/// same rule.
pub fn protocol_allowed(ty: i32, proto: i32) -> bool {
    proto == 0 || (ty == libc::SOCK_STREAM && proto == libc::IPPROTO_TCP) || (ty == libc::SOCK_DGRAM && proto == libc::IPPROTO_UDP)
}

/// The checked arguments of a `SOCKET` operation: `(domain, type,
/// protocol)`, the type without its flags (the tender adds
/// `SOCK_NONBLOCK | SOCK_CLOEXEC`). Only with `outbound` (else `EACCES`);
/// IPv4 or IPv6 (`EAFNOSUPPORT`), stream or datagram (`EINVAL`), the
/// protocols of [`protocol_allowed`] (`EPROTONOSUPPORT`).
pub fn socket_args(op: &NetOp, outbound: bool) -> Result<(i32, i32, i32), i64> {
    if !outbound {
        return Err(neg(libc::EACCES));
    }
    let domain = op.a as i32;
    if domain != libc::AF_INET && domain != libc::AF_INET6 {
        return Err(neg(libc::EAFNOSUPPORT));
    }
    let ty = (op.b as i32) & 0xf;
    if ty != libc::SOCK_STREAM && ty != libc::SOCK_DGRAM {
        return Err(neg(libc::EINVAL));
    }
    if !protocol_allowed(ty, op.flags as i32) {
        return Err(neg(libc::EPROTONOSUPPORT));
    }
    Ok((domain, ty, op.flags as i32))
}

/// How many bytes of an address the host returned (`len`, in a buffer of
/// `buf_len`) go back to the guest's `op.addr`: at most `op.addrlen`, as
/// Linux truncates.
pub fn addr_out_len(op: &NetOp, len: u32, buf_len: usize) -> u64 {
    u64::from(len).min(op.addrlen).min(buf_len as u64)
}

/// The `Net` hypercall: reads each operation of the batch `a` from guest
/// memory, carries it out with `one` (its result, or a negative errno, is
/// written into its `ret`) and writes it back. `writable` says whether the
/// guest may write a range (the tender's read-only regions). Returns how
/// many were carried out, or a negative errno for a batch that cannot be
/// read.
pub fn batch(mem: &GuestMemory, writable: impl Fn(u64, u64) -> bool, a: &NetArgs, mut one: impl FnMut(&mut NetOp) -> Result<i64, i64>) -> i64 {
    if a.count > NET_MAX_OPS {
        return neg(libc::EINVAL);
    }
    let size = core::mem::size_of::<NetOp>() as u64;
    // No overflow: count <= NET_MAX_OPS.
    if !writable(a.ops, a.count * size) {
        return neg(libc::EFAULT);
    }
    for i in 0..a.count {
        let at = GuestAddr(a.ops + i * size);
        let Ok(mut op) = mem.read_obj::<NetOp>(at) else {
            return neg(libc::EFAULT);
        };
        op.ret = match one(&mut op) {
            Ok(v) | Err(v) => v,
        };
        // Checked writable above, as a whole.
        if mem.write_obj(at, &op).is_err() {
            return neg(libc::EFAULT);
        }
    }
    a.count as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(domain: i32, ty: i32, proto: i32) -> NetOp {
        NetOp { a: domain as u64, b: ty as u64, flags: proto as u32, ..Default::default() }
    }

    #[test]
    fn socket_arguments_get_linux_errnos() {
        let tcp = op(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert_eq!(socket_args(&tcp, true), Ok((libc::AF_INET, libc::SOCK_STREAM, 0)));
        assert_eq!(socket_args(&tcp, false), Err(neg(libc::EACCES)), "outbound only");
        assert_eq!(socket_args(&op(libc::AF_UNIX, libc::SOCK_STREAM, 0), true), Err(neg(libc::EAFNOSUPPORT)));
        assert_eq!(socket_args(&op(libc::AF_INET6, libc::SOCK_RAW, 0), true), Err(neg(libc::EINVAL)));
        assert_eq!(socket_args(&op(libc::AF_INET, libc::SOCK_STREAM, libc::IPPROTO_MPTCP), true), Err(neg(libc::EPROTONOSUPPORT)));
        assert_eq!(socket_args(&op(libc::AF_INET, libc::SOCK_DGRAM, libc::IPPROTO_TCP), true), Err(neg(libc::EPROTONOSUPPORT)));
        assert_eq!(socket_args(&op(libc::AF_INET6, libc::SOCK_DGRAM, libc::IPPROTO_UDP), true), Ok((libc::AF_INET6, libc::SOCK_DGRAM, libc::IPPROTO_UDP)));
    }

    #[test]
    fn a_returned_address_is_truncated_as_linux_does() {
        let o = NetOp { addrlen: 8, ..Default::default() };
        assert_eq!(addr_out_len(&o, 16, 128), 8);
        assert_eq!(addr_out_len(&o, 4, 128), 4);
        assert_eq!(addr_out_len(&NetOp { addrlen: 1 << 40, ..Default::default() }, 200, 128), 128);
    }
}
