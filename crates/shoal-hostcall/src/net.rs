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

/// How many senders a UDP socket from a bind (a published port,
/// `--net-bind-any`) remembers for replies without `--net-outbound`: a
/// server answers a datagram soon after it came, so a short memory is
/// enough.
pub const MAX_PEERS: usize = 64;

/// The form a datagram's sender is remembered and a reply's destination
/// matched in: family tag and port in the first word, the address in the
/// other two; an IPv4-mapped IPv6 address as IPv4 (a reply may name either
/// form); the IPv6 flow label and scope id ignored (Linux takes a 24-byte
/// `sockaddr_in6` without the scope id). `None` for anything but an
/// `AF_INET`/`AF_INET6` address (`AF_UNSPEC`, which Linux's UDP sends as
/// `AF_INET`, matches nothing).
pub fn peer_key(sa: &[u8]) -> Option<[u64; 3]> {
    let family = i32::from(u16::from_ne_bytes([*sa.first()?, *sa.get(1)?]));
    let port = u64::from(u16::from_be_bytes([*sa.get(2)?, *sa.get(3)?]));
    let v4 = |ip: [u8; 4]| [(4 << 56) | port, u64::from(u32::from_be_bytes(ip)), 0];
    match family {
        libc::AF_INET if sa.len() >= 16 => Some(v4([sa[4], sa[5], sa[6], sa[7]])),
        libc::AF_INET6 if sa.len() >= 24 => {
            let ip = &sa[8..24];
            if ip[..10] == [0; 10] && ip[10..12] == [0xff, 0xff] {
                return Some(v4([ip[12], ip[13], ip[14], ip[15]]));
            }
            let half = |b: &[u8]| u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
            Some([(6 << 56) | port, half(&ip[..8]), half(&ip[8..])])
        }
        _ => None,
    }
}

/// The last [`MAX_PEERS`] senders of a UDP socket (by [`peer_key`]), the
/// least recently heard forgotten first: the only destinations a reply
/// may name without `--net-outbound`. Fixed size, no allocation (spt's
/// instance keeps one per relayed socket in its hypercall handlers; its
/// waiting parent keeps the same, which is what holds).
#[derive(Clone, Copy)]
pub struct RecentPeers {
    keys: [[u64; 3]; MAX_PEERS],
    /// When each entry was last heard (0: empty).
    heard: [u64; MAX_PEERS],
    clock: u64,
}

impl Default for RecentPeers {
    fn default() -> Self {
        Self::EMPTY
    }
}

impl RecentPeers {
    /// No sender recorded.
    pub const EMPTY: RecentPeers = RecentPeers { keys: [[0; 3]; MAX_PEERS], heard: [0; MAX_PEERS], clock: 0 };

    /// Forgets every sender.
    pub fn clear(&mut self) {
        self.heard = [0; MAX_PEERS];
        self.clock = 0;
    }

    /// Records the sender `sa` of a datagram (an address that is not
    /// `AF_INET`/`AF_INET6` is not recorded).
    pub fn heard(&mut self, sa: &[u8]) {
        let Some(k) = peer_key(sa) else { return };
        self.clock += 1;
        let mut oldest = 0;
        for i in 0..MAX_PEERS {
            if self.heard[i] != 0 && self.keys[i] == k {
                self.heard[i] = self.clock;
                return;
            }
            if self.heard[i] < self.heard[oldest] {
                oldest = i;
            }
        }
        self.keys[oldest] = k;
        self.heard[oldest] = self.clock;
    }

    /// Whether `sa` is one of the recorded senders.
    pub fn contains(&self, sa: &[u8]) -> bool {
        let Some(k) = peer_key(sa) else { return false };
        (0..MAX_PEERS).any(|i| self.heard[i] != 0 && self.keys[i] == k)
    }
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

    fn v4(a: [u8; 4], port: u16) -> Vec<u8> {
        let mut s = vec![0u8; 16];
        s[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        s[2..4].copy_from_slice(&port.to_be_bytes());
        s[4..8].copy_from_slice(&a);
        s
    }

    fn v6(a: [u8; 16], port: u16) -> Vec<u8> {
        let mut s = vec![0u8; 28];
        s[..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
        s[2..4].copy_from_slice(&port.to_be_bytes());
        s[8..24].copy_from_slice(&a);
        s
    }

    #[test]
    fn a_mapped_ipv6_sender_is_the_same_peer_as_its_ipv4_form() {
        let mut mapped = [0u8; 16];
        mapped[10] = 0xff;
        mapped[11] = 0xff;
        mapped[12..].copy_from_slice(&[127, 0, 0, 1]);
        assert_eq!(peer_key(&v6(mapped, 53)), peer_key(&v4([127, 0, 0, 1], 53)));
        assert_ne!(peer_key(&v4([127, 0, 0, 1], 53)), peer_key(&v4([127, 0, 0, 1], 54)));
        let mut unspec = v4([127, 0, 0, 1], 53);
        unspec[..2].copy_from_slice(&0u16.to_ne_bytes());
        assert_eq!(peer_key(&unspec), None, "AF_UNSPEC matches nothing");
        assert_eq!(peer_key(&v4([127, 0, 0, 1], 53)[..8]), None, "a short address");
        let one = v6([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1], 53);
        assert_eq!(peer_key(&one[..24]), peer_key(&one), "without the scope id");
    }

    #[test]
    fn recent_peers_keep_the_last_64_senders_heard() {
        let mut p = RecentPeers::default();
        let a = |i: u16| v4([127, 0, 0, 1], 1000 + i);
        assert!(!p.contains(&a(0)));
        for i in 0..64 {
            p.heard(&a(i));
        }
        assert!((0..64).all(|i| p.contains(&a(i))));
        // Heard again, 0 is the newest: 1 is forgotten for 64.
        p.heard(&a(0));
        p.heard(&a(64));
        assert!(p.contains(&a(0)) && p.contains(&a(64)) && !p.contains(&a(1)));
        p.clear();
        assert!(!p.contains(&a(0)));
    }
}
