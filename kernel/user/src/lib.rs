//! Kernel component `user` (docs/design.md "Components and recovery"): user and group identity.
//!
//! The instance is its own machine, like a container: the program runs as
//! root (uid and gid 0, no supplementary groups), which is what a program
//! started as a container's entry point sees and what keeps programs that
//! check for privilege (to bind low ports, chown files in their own file
//! system) working. The identity is fixed.
#![cfg_attr(not(test), no_std)]

pub mod sys {
    //! The identity system calls.
    use shoal_plat::{Args, Errno, SysResult};

    /// The user id of the program.
    pub const UID: u64 = 0;
    /// The group id of the program.
    pub const GID: u64 = 0;

    /// `getuid()`: 0.
    pub fn getuid(_: &Args) -> SysResult {
        Ok(UID)
    }

    /// `geteuid()`: 0.
    pub fn geteuid(_: &Args) -> SysResult {
        Ok(UID)
    }

    /// `getgid()`: 0.
    pub fn getgid(_: &Args) -> SysResult {
        Ok(GID)
    }

    /// `getegid()`: 0.
    pub fn getegid(_: &Args) -> SysResult {
        Ok(GID)
    }

    /// `getgroups(size, list)`: no supplementary groups (returns 0, writes
    /// nothing); a negative size is `EINVAL`.
    pub fn getgroups(a: &Args) -> SysResult {
        if a.int(0) < 0 {
            return Err(Errno::EINVAL);
        }
        Ok(0)
    }

    /// `getresuid(ruid, euid, suid)` and `getresgid`: all 0.
    pub fn getresuid(a: &Args) -> SysResult {
        for i in 0..3 {
            shoal_plat::umem::write(a.u(i), UID as u32)?;
        }
        Ok(0)
    }

    /// `getresgid(rgid, egid, sgid)`: all 0.
    pub fn getresgid(a: &Args) -> SysResult {
        for i in 0..3 {
            shoal_plat::umem::write(a.u(i), GID as u32)?;
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
            shoal_plat::umem::set_bounds(1, u64::MAX);
            let mut ids = [7u32; 3];
            let p = ids.as_mut_ptr() as u64;
            assert_eq!(getresuid(&Args([p, p + 4, p + 8, 0, 0, 0])), Ok(0));
            assert_eq!(ids, [0; 3]);
        }
    }
}
