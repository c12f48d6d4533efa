//! What an instance may reach on the network, decided by the caller before
//! the first guest instruction (docs/design.md "Networking"), and the listening host
//! sockets a tender opens for it. Shared by spt and hvt.
//!
//! - inbound: `--publish [HOSTADDR:]HOSTPORT:GUESTPORT[/udp]` ([`Publish`]):
//!   the tender opens, binds and (TCP) listens on the host socket itself;
//!   the guest's `bind` + `listen` on GUESTPORT is attached to it. A
//!   connection that arrives before the guest accepts waits in the host's
//!   backlog, so nothing is lost during a cold start. Or a listening socket
//!   handed over by the caller (`--listen-fd N`), attached to the guest's
//!   first `listen` whatever its port: how a FaaS gateway gives an instance
//!   its port.
//! - inbound on demand: with [`NetConfig::bind_any`] (`--net-bind-any`)
//!   a guest `bind` that no published port or handed-over socket takes
//!   makes the tender open a host socket and bind it to the same address
//!   and port right then ([`bind_new`]), with the tender's own rights: the
//!   host's answer (`EADDRINUSE`, `EACCES` for a privileged port the
//!   tender's user may not bind, an ephemeral port for port 0) is the
//!   guest's. Meant for an instance that owns its network namespace (an
//!   OCI container: the engine forwards its ports into that namespace);
//!   on the host's own namespace it lets the guest take any free port.
//! - outbound: none unless [`NetConfig::outbound`]; on hvt optionally
//!   limited to destinations of an allow-list (`--net-allow CIDR[:PORT]`,
//!   [`Allow`]), which the VMM enforces on every `connect` and `sendto`.

use shoal_abi::{Listener, LISTENER_ANY_PORT, MAX_LISTENERS};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// One `--publish` rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Publish {
    /// Host address to bind (default 127.0.0.1: nothing is exposed beyond
    /// the host unless asked for).
    pub host: IpAddr,
    /// Host port (0: any free port).
    pub host_port: u16,
    /// The port the guest binds.
    pub guest_port: u16,
    /// UDP instead of TCP.
    pub udp: bool,
}

/// The network configuration of a run.
#[derive(Debug, Default)]
pub struct NetConfig {
    /// Ports to publish.
    pub publish: Vec<Publish>,
    /// Listening sockets handed over by the caller (`--listen-fd`).
    pub listen_fds: Vec<OwnedFd>,
    /// Whether the guest may open sockets of its own and connect out.
    pub outbound: bool,
    /// `--net-allow`: when not empty, the only destinations `connect` and
    /// `sendto` may name (hvt enforces it; spt cannot, see the threat model).
    pub allow: Vec<Allow>,
    /// `--net-bind-any`: the guest may bind any port; the tender binds the
    /// host socket when the guest binds ([`bind_new`]).
    pub bind_any: bool,
}

/// One `--net-allow` rule: a network and, optionally, one port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allow {
    /// The network address (host bits are cleared by [`Allow::parse`]).
    pub net: IpAddr,
    /// Prefix length: 0–32 for IPv4, 0–128 for IPv6.
    pub prefix: u8,
    /// The one port allowed, or any port.
    pub port: Option<u16>,
}

impl Allow {
    /// Parses `ADDR[/PREFIX][:PORT]`, an IPv6 network in brackets when it
    /// has a port (`[2001:db8::/32]:443`); a bare address is one host.
    pub fn parse(spec: &str) -> Result<Allow, NetError> {
        let bad = || NetError::BadAllow(spec.to_string());
        let (cidr, port) = if let Some(r) = spec.strip_prefix('[') {
            let (c, rest) = r.split_once(']').ok_or_else(bad)?;
            let port = match rest {
                "" => None,
                p => Some(p.strip_prefix(':').ok_or_else(bad)?),
            };
            (c, port)
        } else if spec.matches(':').count() == 1 {
            // IPv4 with a port (an IPv6 address has at least two colons).
            let (c, p) = spec.split_once(':').ok_or_else(bad)?;
            (c, Some(p))
        } else {
            (spec, None)
        };
        let port = match port {
            None => None,
            Some(p) => Some(p.parse::<u16>().ok().filter(|&p| p != 0).ok_or_else(bad)?),
        };
        let (addr, prefix) = match cidr.split_once('/') {
            Some((a, n)) => (a, Some(n)),
            None => (cidr, None),
        };
        let net: IpAddr = addr.parse().map_err(|_| bad())?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(n) => n.parse::<u8>().ok().filter(|&n| n <= max).ok_or_else(bad)?,
        };
        Ok(Allow { net: mask(net, prefix), prefix, port })
    }

    /// Whether `dest` is inside this rule. An IPv4-mapped IPv6 address
    /// (`::ffff:a.b.c.d`) is matched as the IPv4 address it reaches.
    pub fn matches(&self, dest: &SocketAddr) -> bool {
        if self.port.is_some_and(|p| p != dest.port()) {
            return false;
        }
        let ip = match dest.ip() {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
            v4 => v4,
        };
        ip.is_ipv4() == self.net.is_ipv4() && mask(ip, self.prefix) == self.net
    }
}

/// `ip` with all but its first `prefix` bits cleared.
fn mask(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V4(a) => {
            let m = u32::MAX.checked_shl(32 - u32::from(prefix.min(32))).unwrap_or(0);
            IpAddr::V4((u32::from(a) & m).into())
        }
        IpAddr::V6(a) => {
            let m = u128::MAX.checked_shl(128 - u32::from(prefix.min(128))).unwrap_or(0);
            IpAddr::V6((u128::from(a) & m).into())
        }
    }
}

/// Why the network could not be set up; the instance does not start.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// A `--publish` value that does not parse.
    #[error("--publish {0}: expected [HOSTADDR:]HOSTPORT:GUESTPORT[/udp] (e.g. 8080:80, 127.0.0.1:8080:80, [::1]:5353:53/udp)")]
    BadPublish(String),
    /// The host port could not be bound.
    #[error("cannot publish {addr}{proto}: {reason}")]
    Bind {
        /// The host address.
        addr: SocketAddr,
        /// "" or "/udp".
        proto: &'static str,
        /// Why, in words.
        reason: String,
    },
    /// A `--listen-fd` that is not a listening socket.
    #[error("--listen-fd {fd}: {reason}")]
    BadListenFd {
        /// The descriptor.
        fd: i32,
        /// Why.
        reason: &'static str,
    },
    /// A `--net-allow` value that does not parse.
    #[error("--net-allow {0}: expected CIDR[:PORT] (e.g. 10.0.0.0/8, 127.0.0.1/32:8080, [2001:db8::/32]:443)")]
    BadAllow(String),
    /// Too many listening sockets.
    #[error("an instance takes at most {MAX_LISTENERS} published ports and listening sockets")]
    TooMany,
}

impl Publish {
    /// Parses `[HOSTADDR:]HOSTPORT:GUESTPORT[/udp|/tcp]`; an IPv6 host
    /// address goes in brackets.
    pub fn parse(spec: &str) -> Result<Publish, NetError> {
        let bad = || NetError::BadPublish(spec.to_string());
        let (rest, udp) = match spec.rsplit_once('/') {
            Some((r, "udp")) => (r, true),
            Some((r, "tcp")) => (r, false),
            Some(_) => return Err(bad()),
            None => (spec, false),
        };
        let (host_part, ports) = if let Some(r) = rest.strip_prefix('[') {
            let (h, p) = r.split_once("]:").ok_or_else(bad)?;
            (Some(h), p)
        } else {
            match rest.matches(':').count() {
                1 => (None, rest),
                2 => {
                    let (h, p) = rest.split_once(':').ok_or_else(bad)?;
                    (Some(h), p)
                }
                _ => return Err(bad()),
            }
        };
        let host = match host_part {
            None => IpAddr::V4(Ipv4Addr::LOCALHOST),
            Some(h) => h.parse().map_err(|_| bad())?,
        };
        let (hp, gp) = ports.split_once(':').ok_or_else(bad)?;
        let host_port: u16 = hp.parse().map_err(|_| bad())?;
        let guest_port: u16 = gp.parse().map_err(|_| bad())?;
        if guest_port == 0 {
            return Err(bad());
        }
        Ok(Publish { host, host_port, guest_port, udp })
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}

fn reason(e: i32, port: u16) -> String {
    match e {
        libc::EADDRINUSE => "the address is already in use".into(),
        libc::EACCES if port < 1024 => format!("port {port} is privileged and this user may not bind it"),
        libc::EADDRNOTAVAIL => "the address is not one of this host's".into(),
        _ => std::io::Error::from_raw_os_error(e).to_string(),
    }
}

/// Opens, binds and (TCP) listens on the host socket of `p`: non-blocking,
/// close-on-exec, `SO_REUSEADDR` (a restarted instance rebinds at once).
pub fn open_published(p: &Publish) -> Result<(OwnedFd, Listener), NetError> {
    let addr = SocketAddr::new(p.host, p.host_port);
    let proto = if p.udp { "/udp" } else { "" };
    let fail = |e: i32| NetError::Bind { addr, proto, reason: reason(e, p.host_port) };
    let family = if p.host.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 };
    let ty = if p.udp { libc::SOCK_DGRAM } else { libc::SOCK_STREAM };
    // SAFETY: socket takes no pointers.
    let fd = unsafe { libc::socket(family, ty | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(fail(errno()));
    }
    // SAFETY: `fd` was just created and is owned by nobody else.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    let one: libc::c_int = 1;
    // SAFETY: a valid int option of its size.
    unsafe {
        libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, (&one as *const libc::c_int).cast(), 4);
    }
    let (sa, len) = sockaddr(&addr);
    // SAFETY: `sa` holds a sockaddr of `len` bytes.
    if unsafe { libc::bind(fd, (&sa as *const libc::sockaddr_storage).cast(), len) } != 0 {
        return Err(fail(errno()));
    }
    // SAFETY: listen takes no pointers.
    if !p.udp && unsafe { libc::listen(fd, 4096) } != 0 {
        return Err(fail(errno()));
    }
    let l = Listener { handle: -1, port: u32::from(p.guest_port), sock_type: ty as u32, family: family as u32, reserved: 0 };
    Ok((sock, l))
}

/// Checks a `--listen-fd` socket and describes it; sets it non-blocking
/// (the flag is on the open file description the caller shares).
pub fn adopt_listen_fd(fd: &OwnedFd) -> Result<Listener, NetError> {
    let raw = fd.as_raw_fd();
    let bad = |reason| NetError::BadListenFd { fd: raw, reason };
    let get = |opt: libc::c_int| -> Option<libc::c_int> {
        let mut v: libc::c_int = 0;
        let mut len = 4 as libc::socklen_t;
        // SAFETY: valid out-parameters for an int option.
        let rc = unsafe { libc::getsockopt(raw, libc::SOL_SOCKET, opt, (&mut v as *mut libc::c_int).cast(), &mut len) };
        (rc == 0).then_some(v)
    };
    let ty = get(libc::SO_TYPE).ok_or_else(|| bad("not a socket (or not open)"))?;
    let family = get(libc::SO_DOMAIN).ok_or_else(|| bad("not a socket"))?;
    if family != libc::AF_INET && family != libc::AF_INET6 {
        return Err(bad("not an IPv4 or IPv6 socket"));
    }
    if ty == libc::SOCK_STREAM && get(libc::SO_ACCEPTCONN) != Some(1) {
        return Err(bad("a TCP socket that is not listening"));
    }
    if ty != libc::SOCK_STREAM && ty != libc::SOCK_DGRAM {
        return Err(bad("neither a TCP nor a UDP socket"));
    }
    // SAFETY: fcntl on an open descriptor.
    unsafe {
        let fl = libc::fcntl(raw, libc::F_GETFL);
        if fl < 0 || libc::fcntl(raw, libc::F_SETFL, fl | libc::O_NONBLOCK) < 0 {
            return Err(bad("cannot make it non-blocking"));
        }
    }
    Ok(Listener { handle: -1, port: LISTENER_ANY_PORT, sock_type: ty as u32, family: family as u32, reserved: 0 })
}

/// Opens every published port and adopts every handed-over socket, in
/// that order (the guest matches them by port and kind).
pub fn open_listeners(cfg: &NetConfig) -> Result<Vec<(OwnedFd, Listener)>, NetError> {
    if cfg.publish.len() + cfg.listen_fds.len() > MAX_LISTENERS {
        return Err(NetError::TooMany);
    }
    let mut out = Vec::new();
    for p in &cfg.publish {
        out.push(open_published(p)?);
    }
    for fd in &cfg.listen_fds {
        let l = adopt_listen_fd(fd)?;
        let dup = fd.try_clone().map_err(|_| NetError::BadListenFd { fd: fd.as_raw_fd(), reason: "cannot duplicate it" })?;
        out.push((dup, l));
    }
    Ok(out)
}

/// The host half of a guest's `bind` under `--net-bind-any`
/// (`net_op::BIND_NEW`): a non-blocking, close-on-exec socket of `domain`
/// (`AF_INET`/`AF_INET6`) and `ty` (`SOCK_STREAM`/`SOCK_DGRAM`), with the
/// options of `flags` (`net_op::BIND_REUSEADDR`, on TCP only; `net_op::BIND_V6ONLY`),
/// bound to the guest's `addr` (a `sockaddr` of at most 128 bytes, which
/// the host checks). Every value comes from the guest: anything else is the
/// errno Linux gives (`EAFNOSUPPORT`, `EINVAL`); the host's own refusals
/// (`EADDRINUSE`, `EACCES`, `EADDRNOTAVAIL`) pass through.
pub fn bind_new(domain: i32, ty: i32, flags: u32, addr: &[u8]) -> Result<OwnedFd, i32> {
    use shoal_abi::net_op::{BIND_REUSEADDR, BIND_V6ONLY};
    if domain != libc::AF_INET && domain != libc::AF_INET6 {
        return Err(libc::EAFNOSUPPORT);
    }
    if ty != libc::SOCK_STREAM && ty != libc::SOCK_DGRAM {
        return Err(libc::EINVAL);
    }
    if addr.len() > core::mem::size_of::<libc::sockaddr_storage>() || flags & !(BIND_REUSEADDR | BIND_V6ONLY) != 0 {
        return Err(libc::EINVAL);
    }
    // SAFETY: socket takes no pointers.
    let fd = unsafe { libc::socket(domain, ty | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: `fd` was just created and is owned by nobody else.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    let one: libc::c_int = 1;
    let set = |level: libc::c_int, name: libc::c_int| -> Result<(), i32> {
        // SAFETY: a valid int option of its size.
        let rc = unsafe { libc::setsockopt(fd, level, name, (&one as *const libc::c_int).cast(), 4) };
        if rc != 0 {
            return Err(errno());
        }
        Ok(())
    };
    // On UDP, SO_REUSEADDR lets a socket share a port another process
    // bound (with no owner check, and the newest takes the unicast
    // datagrams): never for the guest. On TCP it only reuses a port in
    // TIME_WAIT, which a server restarting needs.
    if flags & BIND_REUSEADDR != 0 && ty == libc::SOCK_STREAM {
        set(libc::SOL_SOCKET, libc::SO_REUSEADDR)?;
    }
    if flags & BIND_V6ONLY != 0 && domain == libc::AF_INET6 {
        set(libc::IPPROTO_IPV6, libc::IPV6_V6ONLY)?;
    }
    // A local copy in a sockaddr_storage: aligned, and as long as Linux
    // reads for any family.
    // SAFETY: an all-zero sockaddr_storage is valid.
    let mut ss: libc::sockaddr_storage = unsafe { core::mem::zeroed() };
    // SAFETY: `addr` fits in `ss` (checked above); the regions are distinct.
    unsafe { core::ptr::copy_nonoverlapping(addr.as_ptr(), (&mut ss as *mut libc::sockaddr_storage).cast::<u8>(), addr.len()) };
    // SAFETY: `ss` holds `addr.len()` initialised bytes.
    if unsafe { libc::bind(fd, (&ss as *const libc::sockaddr_storage).cast(), addr.len() as libc::socklen_t) } != 0 {
        return Err(errno());
    }
    Ok(sock)
}

/// `addr` as a `sockaddr_storage` and its length.
pub fn sockaddr(addr: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: an all-zero sockaddr_storage is valid.
    let mut ss: libc::sockaddr_storage = unsafe { core::mem::zeroed() };
    match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(a.ip().octets()) },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_in fits in sockaddr_storage, which is
            // aligned for it.
            unsafe { core::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin) };
            (ss, core::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t)
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr { s6_addr: a.ip().octets() },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: as above, for sockaddr_in6.
            unsafe { core::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin6) };
            (ss, core::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publish_specs_parse_and_bad_ones_are_one_sentence() {
        let p = Publish::parse("8080:80").unwrap();
        assert_eq!(p, Publish { host: "127.0.0.1".parse().unwrap(), host_port: 8080, guest_port: 80, udp: false });
        let p = Publish::parse("0.0.0.0:53:5353/udp").unwrap();
        assert!(p.udp && p.host_port == 53 && p.guest_port == 5353);
        let p = Publish::parse("[::1]:8443:443").unwrap();
        assert_eq!(p.host, "::1".parse::<IpAddr>().unwrap());
        for bad in ["80", "a:b", "1:2:3:4", "8080:0", "8080:80/sctp", "[::1:80:80", "99999:80", "host:80:80"] {
            let e = Publish::parse(bad).unwrap_err().to_string();
            assert!(e.starts_with(&format!("--publish {bad}: expected")), "{e}");
        }
    }

    #[test]
    fn allow_rules_parse_match_and_bad_ones_are_one_sentence() {
        let sa = |s: &str| s.parse::<SocketAddr>().unwrap();
        let a = Allow::parse("10.1.2.3/8").unwrap();
        assert_eq!(a, Allow { net: "10.0.0.0".parse().unwrap(), prefix: 8, port: None });
        assert!(a.matches(&sa("10.200.0.1:80")) && !a.matches(&sa("11.0.0.1:80")));
        assert!(a.matches(&sa("[::ffff:10.9.9.9]:1")), "an IPv4-mapped address is its IPv4 address");
        assert!(!a.matches(&sa("[::1]:80")));
        let h = Allow::parse("127.0.0.1:8080").unwrap();
        assert_eq!((h.prefix, h.port), (32, Some(8080)));
        assert!(h.matches(&sa("127.0.0.1:8080")) && !h.matches(&sa("127.0.0.1:8081")) && !h.matches(&sa("127.0.0.2:8080")));
        let all = Allow::parse("0.0.0.0/0:53").unwrap();
        assert!(all.matches(&sa("8.8.8.8:53")) && !all.matches(&sa("8.8.8.8:54")));
        let v6 = Allow::parse("[2001:db8::/32]:443").unwrap();
        assert!(v6.matches(&sa("[2001:db8:1::5]:443")) && !v6.matches(&sa("[2001:db9::5]:443")));
        let v6any = Allow::parse("::1").unwrap();
        assert!(v6any.matches(&sa("[::1]:9")) && v6any.port.is_none() && v6any.prefix == 128);
        assert_eq!(Allow::parse("[::/0]").unwrap().prefix, 0);
        for bad in ["", "10.0.0.0/33", "10.0.0.0/8:0", "10.0.0.0/8:99999", "host:80", "[::1", "[::1]80", "::1/129", "1.2.3.4/x", "1.2.3/8"] {
            let e = Allow::parse(bad).unwrap_err().to_string();
            assert!(e.starts_with(&format!("--net-allow {bad}: expected CIDR[:PORT]")) && !e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn publishing_a_port_in_use_says_so() {
        let (_held, _) = open_published(&Publish::parse("0:80").unwrap()).unwrap();
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = taken.local_addr().unwrap().port();
        let e = open_published(&Publish::parse(&format!("{port}:80")).unwrap()).unwrap_err().to_string();
        assert_eq!(e, format!("cannot publish 127.0.0.1:{port}: the address is already in use"));
    }

    #[test]
    fn bind_new_gives_the_hosts_answers() {
        use shoal_abi::net_op::BIND_REUSEADDR;
        let bytes = |a: &str| {
            let (ss, len) = sockaddr(&a.parse().unwrap());
            // SAFETY: `ss` is a sockaddr_storage of at least `len` bytes.
            unsafe { core::slice::from_raw_parts((&ss as *const libc::sockaddr_storage).cast::<u8>(), len as usize) }.to_vec()
        };
        let s = bind_new(libc::AF_INET, libc::SOCK_STREAM, BIND_REUSEADDR, &bytes("127.0.0.1:0")).unwrap();
        let l = std::net::TcpListener::from(s);
        let port = l.local_addr().unwrap().port();
        assert_ne!(port, 0, "port 0 is an ephemeral port");
        // SAFETY: listen on an owned socket.
        assert_eq!(unsafe { libc::listen(l.as_raw_fd(), 1) }, 0);
        let taken = format!("127.0.0.1:{port}");
        assert_eq!(bind_new(libc::AF_INET, libc::SOCK_STREAM, BIND_REUSEADDR, &bytes(&taken)).unwrap_err(), libc::EADDRINUSE);
        assert!(bind_new(libc::AF_INET6, libc::SOCK_DGRAM, 0, &bytes("[::1]:0")).is_ok());
        assert_eq!(bind_new(libc::AF_UNIX, libc::SOCK_STREAM, 0, &bytes("127.0.0.1:0")).unwrap_err(), libc::EAFNOSUPPORT);
        assert_eq!(bind_new(libc::AF_INET, libc::SOCK_RAW, 0, &bytes("127.0.0.1:0")).unwrap_err(), libc::EINVAL);
        assert_eq!(bind_new(libc::AF_INET, libc::SOCK_STREAM, 0, &[0u8; 200]).unwrap_err(), libc::EINVAL);
        assert_eq!(bind_new(libc::AF_INET, libc::SOCK_STREAM, 0, &[2, 0]).unwrap_err(), libc::EINVAL, "too short");
    }

    #[test]
    fn listen_fd_must_be_a_listening_socket() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let fd = OwnedFd::from(l);
        let d = adopt_listen_fd(&fd).unwrap();
        assert_eq!((d.port, d.sock_type), (LISTENER_ANY_PORT, libc::SOCK_STREAM as u32));
        let f = OwnedFd::from(std::fs::File::open("/dev/null").unwrap());
        assert!(adopt_listen_fd(&f).unwrap_err().to_string().contains("not a socket"));
    }
}
