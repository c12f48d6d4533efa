//! The system-information calls.

use shoal_plat::{umem, Args, Errno, SysResult};

/// `struct utsname`: six NUL-terminated fields of 65 bytes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Utsname {
    /// Operating system name.
    pub sysname: [u8; 65],
    /// Host name.
    pub nodename: [u8; 65],
    /// Kernel release.
    pub release: [u8; 65],
    /// Kernel version.
    pub version: [u8; 65],
    /// Hardware.
    pub machine: [u8; 65],
    /// NIS domain name.
    pub domainname: [u8; 65],
}

fn field(s: &[u8]) -> [u8; 65] {
    let mut f = [0u8; 65];
    let n = s.len().min(64);
    f[..n].copy_from_slice(&s[..n]);
    f
}

/// The utsname for host name bytes `hostname` (NUL padded; empty: `shoal`).
pub fn utsname(hostname: &[u8]) -> Utsname {
    let len = hostname.iter().position(|&b| b == 0).unwrap_or(hostname.len());
    let host = if len == 0 { &b"shoal"[..] } else { &hostname[..len] };
    Utsname {
        sysname: field(b"Linux"),
        nodename: field(host),
        release: field(crate::RELEASE.as_bytes()),
        version: field(crate::VERSION.as_bytes()),
        machine: field(b"x86_64"),
        domainname: field(b"(none)"),
    }
}

/// `uname(buf)`; see the crate documentation.
pub fn uname(a: &Args) -> SysResult {
    let u = utsname(&crate::hostname());
    umem::write(a.u(0), u)?;
    Ok(0)
}

/// Linux's `__NEW_UTS_LEN`: the longest host name.
const UTS_LEN: usize = 64;

/// `sethostname(name, len)`: the instance's own host name from now on
/// (what `uname` reports), as in a container's UTS namespace. Root only
/// (CAP_SYS_ADMIN is root's alone in a guest, docs of component `user`):
/// `EPERM` otherwise; `EINVAL` for more than 64 bytes, as Linux.
pub fn sethostname(a: &Args) -> SysResult {
    if shoal_plat::boot::ids().0 != 0 {
        return Err(Errno::EPERM);
    }
    let len = a.usize(1);
    if len > UTS_LEN {
        return Err(Errno::EINVAL);
    }
    let mut name = [0u8; UTS_LEN];
    name[..len].copy_from_slice(umem::slice(a.u(0), len)?);
    crate::set_hostname(name);
    Ok(0)
}

/// `struct sysinfo` (x86-64, 112 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sysinfo {
    /// Seconds since boot.
    pub uptime: i64,
    /// 1, 5 and 15 minute load averages (<< 16).
    pub loads: [u64; 3],
    /// Total usable memory (× `mem_unit`).
    pub totalram: u64,
    /// Free memory.
    pub freeram: u64,
    /// Shared memory.
    pub sharedram: u64,
    /// Buffer memory.
    pub bufferram: u64,
    /// Swap size.
    pub totalswap: u64,
    /// Free swap.
    pub freeswap: u64,
    /// Number of processes.
    pub procs: u16,
    /// Padding.
    pub pad: [u16; 3],
    /// High memory size.
    pub totalhigh: u64,
    /// Free high memory.
    pub freehigh: u64,
    /// Memory unit in bytes.
    pub mem_unit: u32,
    /// Padding.
    pub pad2: u32,
}

/// `sysinfo(info)`: uptime from the monotonic clock; total and free RAM
/// are mm's managed memory (what the program can still get); no swap; one
/// process; load averages 0 (not tracked).
pub fn sysinfo(a: &Args) -> SysResult {
    let (total, free) = shoal_mm::stats();
    let info =
        Sysinfo { uptime: (shoal_time::monotonic_ns() / 1_000_000_000) as i64, totalram: total, freeram: free, procs: 1, mem_unit: 1, ..Sysinfo::default() };
    umem::write(a.u(0), info)?;
    Ok(0)
}

const GRND_NONBLOCK: u32 = 1;
const GRND_RANDOM: u32 = 2;
const GRND_INSECURE: u32 = 4;
/// Most bytes one call returns (Linux: `INT_MAX >> 6` for the urandom pool).
pub const GETRANDOM_MAX: usize = 0x1ff_ffff;

/// `getrandom(buf, len, flags)`: never blocks (the generator is seeded at
/// boot); returns at most [`GETRANDOM_MAX`] bytes, as Linux.
pub fn getrandom(a: &Args) -> SysResult {
    let flags = a.uint(2);
    if flags & !(GRND_NONBLOCK | GRND_RANDOM | GRND_INSECURE) != 0 || flags & (GRND_RANDOM | GRND_INSECURE) == (GRND_RANDOM | GRND_INSECURE) {
        return Err(Errno::EINVAL);
    }
    let n = a.usize(1).min(GETRANDOM_MAX);
    let buf = umem::slice_mut(a.u(0), n)?;
    crate::fill_random(buf);
    Ok(n as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts() {
        assert_eq!(core::mem::size_of::<Utsname>(), 390);
        assert_eq!(core::mem::size_of::<Sysinfo>(), 112);
        assert_eq!(core::mem::offset_of!(Sysinfo, procs), 80);
        assert_eq!(core::mem::offset_of!(Sysinfo, totalhigh), 88);
        assert_eq!(core::mem::offset_of!(Sysinfo, mem_unit), 104);
    }

    #[test]
    fn uname_fields() {
        let mut h = [0u8; 64];
        h[..4].copy_from_slice(b"web1");
        let u = utsname(&h);
        assert_eq!(&u.sysname[..6], b"Linux\0");
        assert_eq!(&u.nodename[..5], b"web1\0");
        assert_eq!(&u.machine[..7], b"x86_64\0");
        assert_eq!(&utsname(&[0; 64]).nodename[..6], b"shoal\0");
        assert_eq!(utsname(&[b'x'; 64]).nodename[64], 0, "always NUL-terminated");
    }

    #[test]
    fn sethostname_sets_the_node_name() {
        shoal_plat::umem::set_bounds(1, u64::MAX);
        let name = *b"renamed";
        let set = |len| sethostname(&Args([name.as_ptr() as u64, len, 0, 0, 0, 0]));
        assert_eq!(set(65), Err(Errno::EINVAL));
        assert_eq!(set(7), Ok(0));
        assert_eq!(&crate::hostname()[..8], b"renamed\0");
        assert_eq!(&utsname(&crate::hostname()).nodename[..8], b"renamed\0");
        assert_eq!(sethostname(&Args([0, 5, 0, 0, 0, 0])), Err(Errno::EFAULT));
    }

    #[test]
    fn random_bytes() {
        shoal_plat::umem::set_bounds(1, u64::MAX);
        let mut a = [0u8; 64];
        let mut b = [0u8; 64];
        let args = |p: &mut [u8; 64], f| Args([p.as_mut_ptr() as u64, 64, f, 0, 0, 0]);
        assert_eq!(getrandom(&args(&mut a, 0)), Ok(64));
        assert_eq!(getrandom(&args(&mut b, 1)), Ok(64));
        assert_ne!(a, b);
        assert_ne!(a, [0; 64]);
        assert_eq!(getrandom(&args(&mut a, 6)), Err(Errno::EINVAL));
        assert_eq!(getrandom(&args(&mut a, 8)), Err(Errno::EINVAL));
        assert_eq!(getrandom(&Args([0, 0, 0, 0, 0, 0])), Ok(0));
    }

    #[test]
    fn chacha20_known_answer() {
        // RFC 8439 §2.3.2-style check of the generator with a zero key:
        // the first ChaCha20 block for key 0, nonce 0, counter 0.
        use rand_chacha::rand_core::{RngCore, SeedableRng};
        let mut r = rand_chacha::ChaCha20Rng::from_seed([0; 32]);
        let mut out = [0u8; 16];
        r.fill_bytes(&mut out);
        assert_eq!(out, [0x76, 0xb8, 0xe0, 0xad, 0xa0, 0xf1, 0x3d, 0x90, 0x40, 0x5d, 0x6a, 0xe5, 0x53, 0x86, 0xbd, 0x28]);
    }
}
