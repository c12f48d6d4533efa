//! Kernel component `user` (docs/design.md "Components and recovery"): user and group identity.
//!
//! The instance is its own machine, like a container: the program runs as
//! root (uid and gid 0, no supplementary groups) unless the tender names
//! another user (`--user UID:GID`, a container's `process.user`), which is
//! what a program started as a container's entry point sees and what keeps
//! programs that check for privilege (to bind low ports, chown files in
//! their own file system) working. The identity is fixed for the
//! instance's life; the capabilities are root's for uid 0 and none for
//! another user, as Linux gives them.
#![cfg_attr(not(test), no_std)]

pub mod sys {
    //! The identity system calls.
    use shoal_plat::{Args, Errno, SysResult};

    /// The user id of the program (real, effective and saved).
    fn uid() -> u32 {
        shoal_plat::boot::ids().0
    }

    /// The group id of the program.
    fn gid() -> u32 {
        shoal_plat::boot::ids().1
    }

    /// `getuid()`.
    pub fn getuid(_: &Args) -> SysResult {
        Ok(u64::from(uid()))
    }

    /// `geteuid()`.
    pub fn geteuid(_: &Args) -> SysResult {
        Ok(u64::from(uid()))
    }

    /// `getgid()`.
    pub fn getgid(_: &Args) -> SysResult {
        Ok(u64::from(gid()))
    }

    /// `getegid()`.
    pub fn getegid(_: &Args) -> SysResult {
        Ok(u64::from(gid()))
    }

    /// `getgroups(size, list)`: no supplementary groups (returns 0, writes
    /// nothing); a negative size is `EINVAL`.
    pub fn getgroups(a: &Args) -> SysResult {
        if a.int(0) < 0 {
            return Err(Errno::EINVAL);
        }
        Ok(0)
    }

    /// `setuid(uid)`: 0 for the program's own uid (what a program that
    /// drops privileges it does not have does, busybox among them);
    /// `EPERM` for another, root included: the identity is fixed.
    pub fn setuid(a: &Args) -> SysResult {
        if a.u(0) as u32 == uid() {
            Ok(0)
        } else {
            Err(Errno::EPERM)
        }
    }

    /// `setgid(gid)`: as [`setuid`], for the group.
    pub fn setgid(a: &Args) -> SysResult {
        if a.u(0) as u32 == gid() {
            Ok(0)
        } else {
            Err(Errno::EPERM)
        }
    }

    /// Whether each of `ids` is -1 (unchanged) or `own`: what the
    /// `setre*`/`setres*` calls accept, the identity being fixed (`EPERM`
    /// otherwise, root included, as [`setuid`]).
    fn own_or_unchanged(ids: &[u32], own: u32) -> SysResult {
        if ids.iter().all(|&i| i == u32::MAX || i == own) {
            Ok(0)
        } else {
            Err(Errno::EPERM)
        }
    }

    /// `setreuid(ruid, euid)`.
    pub fn setreuid(a: &Args) -> SysResult {
        own_or_unchanged(&[a.uint(0), a.uint(1)], uid())
    }

    /// `setregid(rgid, egid)`.
    pub fn setregid(a: &Args) -> SysResult {
        own_or_unchanged(&[a.uint(0), a.uint(1)], gid())
    }

    /// `setresuid(ruid, euid, suid)`.
    pub fn setresuid(a: &Args) -> SysResult {
        own_or_unchanged(&[a.uint(0), a.uint(1), a.uint(2)], uid())
    }

    /// `setresgid(rgid, egid, sgid)`.
    pub fn setresgid(a: &Args) -> SysResult {
        own_or_unchanged(&[a.uint(0), a.uint(1), a.uint(2)], gid())
    }

    /// `setfsuid(fsuid)`: returns the file-system uid, which stays the
    /// program's uid (Linux returns the old value whether or not it
    /// changed it).
    pub fn setfsuid(_: &Args) -> SysResult {
        Ok(u64::from(uid()))
    }

    /// `setfsgid(fsgid)`: as [`setfsuid`], for the group.
    pub fn setfsgid(_: &Args) -> SysResult {
        Ok(u64::from(gid()))
    }

    /// `setgroups(size, list)`, checked in Linux's order: `EPERM` but for
    /// root, `EINVAL` for a size over `NGROUPS_MAX` (65,536), `EFAULT` for
    /// a list that cannot be read; root may keep the empty list (size 0,
    /// what a daemon dropping privileges does); another list is `EPERM`
    /// (the identity is fixed).
    pub fn setgroups(a: &Args) -> SysResult {
        const NGROUPS_MAX: u32 = 65536;
        if uid() != 0 {
            return Err(Errno::EPERM);
        }
        let n = a.uint(0);
        if n > NGROUPS_MAX {
            return Err(Errno::EINVAL);
        }
        for i in 0..u64::from(n) {
            shoal_plat::umem::read::<u32>(a.u(1).wrapping_add(4 * i))?;
        }
        if n == 0 {
            Ok(0)
        } else {
            Err(Errno::EPERM)
        }
    }

    /// `getresuid(ruid, euid, suid)`: all the program's uid.
    pub fn getresuid(a: &Args) -> SysResult {
        for i in 0..3 {
            shoal_plat::umem::write(a.u(i), uid())?;
        }
        Ok(0)
    }

    /// `getresgid(rgid, egid, sgid)`: all the program's gid.
    pub fn getresgid(a: &Args) -> SysResult {
        for i in 0..3 {
            shoal_plat::umem::write(a.u(i), gid())?;
        }
        Ok(0)
    }

    /// `_LINUX_CAPABILITY_VERSION_1` (one 32-bit set).
    const CAP_V1: u32 = 0x1998_0330;
    /// `_LINUX_CAPABILITY_VERSION_2` and `_3` (two 32-bit sets).
    const CAP_V2: u32 = 0x2007_1026;
    const CAP_V3: u32 = 0x2008_0522;
    /// The capabilities Linux 6.x knows (0 to 40), what root holds.
    const ALL_CAPS: u64 = (1 << 41) - 1;

    /// `capget(header, data)`: root's capabilities (every one, permitted
    /// and effective, none inheritable), for the program itself (pid 0 or
    /// its own pid, 1) as Linux answers a root process; an unknown version
    /// is `EINVAL` with the preferred version written back, as Linux does
    /// (libcap and Node probe that way); `data` NULL asks only the version.
    pub fn capget(a: &Args) -> SysResult {
        let (hdr, data) = (a.u(0), a.u(1));
        let version: u32 = shoal_plat::umem::read(hdr)?;
        let pid: i32 = shoal_plat::umem::read(hdr + 4)?;
        let words = match version {
            CAP_V1 => 1,
            CAP_V2 | CAP_V3 => 2,
            _ => {
                shoal_plat::umem::write(hdr, CAP_V3)?;
                return if data == 0 { Ok(0) } else { Err(Errno::EINVAL) };
            }
        };
        if pid < 0 {
            return Err(Errno::EINVAL);
        }
        if pid != 0 && pid != 1 {
            return Err(Errno::ESRCH);
        }
        if data == 0 {
            return Ok(0);
        }
        let caps = if uid() == 0 { ALL_CAPS } else { 0 };
        for w in 0..words {
            let set = (caps >> (32 * w)) as u32;
            shoal_plat::umem::write(data + 12 * w, [set, set, 0u32])?;
        }
        Ok(0)
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn identity() {
            let z = Args::default();
            assert_eq!(getuid(&z), Ok(0));
            assert_eq!(getegid(&z), Ok(0));
            assert_eq!(getgroups(&Args([u32::MAX as u64, 0, 0, 0, 0, 0])), Err(Errno::EINVAL));
            assert_eq!(getgroups(&Args([4, 0, 0, 0, 0, 0])), Ok(0));
            assert_eq!(setuid(&Args([0, 0, 0, 0, 0, 0])), Ok(0), "its own uid");
            assert_eq!(setgid(&Args([65534, 0, 0, 0, 0, 0])), Err(Errno::EPERM), "the identity is fixed");
            shoal_plat::umem::set_bounds(1, u64::MAX);
            let mut ids = [7u32; 3];
            let p = ids.as_mut_ptr() as u64;
            assert_eq!(getresuid(&Args([p, p + 4, p + 8, 0, 0, 0])), Ok(0));
            assert_eq!(ids, [0; 3]);
            let mut hdr = [CAP_V3, 0u32];
            let mut data = [0u32; 6];
            let c = |h: &mut [u32; 2], d: u64| capget(&Args([h.as_mut_ptr() as u64, d, 0, 0, 0, 0]));
            assert_eq!(c(&mut hdr, data.as_mut_ptr() as u64), Ok(0));
            assert_eq!(data, [u32::MAX, u32::MAX, 0, 0x1ff, 0x1ff, 0]);
            hdr = [7, 0];
            assert_eq!(c(&mut hdr, data.as_mut_ptr() as u64), Err(Errno::EINVAL));
            assert_eq!(hdr[0], CAP_V3, "the preferred version written back");
            hdr = [CAP_V3, 99];
            assert_eq!(c(&mut hdr, data.as_mut_ptr() as u64), Err(Errno::ESRCH));
        }
    }
}
