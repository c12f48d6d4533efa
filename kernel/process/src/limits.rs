//! Resource limits (`prlimit64`, `getrlimit`, `setrlimit`).
//!
//! Limits are kept here and enforced where the resource lives: the
//! syscall table hands the soft limits to `mm` (`RLIMIT_AS`, `RLIMIT_DATA`:
//! `ENOMEM` from `mmap`, `mremap`, `brk`) and `vfs` (`RLIMIT_NOFILE`:
//! `EMFILE`; `RLIMIT_FSIZE`: `EFBIG` and `SIGXFSZ`) whenever they change.
//! `RLIMIT_SIGPENDING` is the size of the signal queue (soft and hard: it
//! cannot be raised, `EPERM`).
//!
//! Defaults: `RLIMIT_STACK` is the real size of the main thread's stack
//! from the boot information (soft), hard unlimited as on Linux, so a
//! program may raise the soft limit (the main stack is a fixed region and
//! does not grow; musl sizes new threads' stacks itself, as it does on
//! Linux, without consulting the limit); `RLIMIT_AS` and `RLIMIT_DATA` are
//! the size of guest memory (soft; more cannot be had), hard unlimited as
//! on Linux, so a program can lift a lowered soft limit again; `RLIMIT_NOFILE` is 1024 soft (Linux's
//! default) and 4096 hard, the size of vfs's descriptor table (servers
//! raise the soft limit; raising the hard one above 4096 is refused,
//! `EPERM`); `RLIMIT_CORE` is 0; the rest are Linux's defaults, reported
//! but not consulted (nothing in an instance can exceed them or they have
//! no meaning without processes: `CPU`, `RSS`, `NPROC`, `MEMLOCK`, `LOCKS`,
//! `MSGQUEUE`, `NICE`, `RTPRIO`, `RTTIME`).

use shoal_plat::Errno;

/// `struct rlimit`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rlimit {
    /// Soft limit.
    pub cur: u64,
    /// Hard limit.
    pub max: u64,
}

/// `RLIM_INFINITY`.
pub const INF: u64 = u64::MAX;
/// Number of resources (`RLIM_NLIMITS`).
pub const NLIMITS: usize = 16;
/// `RLIMIT_FSIZE`.
pub const RLIMIT_FSIZE: usize = 1;
/// `RLIMIT_DATA`.
pub const RLIMIT_DATA: usize = 2;
/// `RLIMIT_STACK`.
pub const RLIMIT_STACK: usize = 3;
/// `RLIMIT_NOFILE`.
pub const RLIMIT_NOFILE: usize = 7;
/// `RLIMIT_AS`.
pub const RLIMIT_AS: usize = 9;
/// The descriptor limit of vfs (`shoal_vfs::MAX_FDS`).
pub const MAX_FDS: u64 = 4096;
/// `RLIMIT_SIGPENDING`.
pub const RLIMIT_SIGPENDING: usize = 11;
/// Signals that can be queued (`crate::signal::QUEUE_MAX`).
pub const SIGPENDING: u64 = crate::signal::QUEUE_MAX as u64;
/// The soft descriptor limit an instance starts with (`shoal_vfs::DEFAULT_NOFILE`).
pub const DEFAULT_NOFILE: u64 = 1024;

/// The limits table for a machine with `mem` bytes of guest memory and a
/// main stack of `stack` bytes.
pub fn defaults(mem: u64, stack: u64) -> [Rlimit; NLIMITS] {
    let r = |cur, max| Rlimit { cur, max };
    [
        r(INF, INF),                // CPU
        r(INF, INF),                // FSIZE
        r(mem, INF),                // DATA
        r(stack, INF),              // STACK
        r(0, INF),                  // CORE
        r(INF, INF),                // RSS
        r(INF, INF),                // NPROC
        r(DEFAULT_NOFILE, MAX_FDS), // NOFILE
        r(8 << 20, 8 << 20),        // MEMLOCK
        r(mem, INF),                // AS
        r(INF, INF),                // LOCKS
        r(SIGPENDING, SIGPENDING),  // SIGPENDING
        r(819_200, 819_200),        // MSGQUEUE
        r(0, 0),                    // NICE
        r(0, 0),                    // RTPRIO
        r(INF, INF),                // RTTIME
    ]
}

/// Validates a new limit for `resource`.
pub fn check(resource: usize, new: Rlimit) -> Result<(), Errno> {
    if new.cur > new.max {
        return Err(Errno::EINVAL);
    }
    if resource == RLIMIT_NOFILE && new.max > MAX_FDS {
        return Err(Errno::EPERM);
    }
    if resource == RLIMIT_SIGPENDING && new.max > SIGPENDING {
        return Err(Errno::EPERM);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_checks() {
        let _serial = crate::TEST_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let d = defaults(1 << 30, 8 << 20);
        assert_eq!(d[RLIMIT_STACK], Rlimit { cur: 8 << 20, max: INF });
        assert_eq!(check(RLIMIT_STACK, Rlimit { cur: 64 << 20, max: INF }), Ok(()));
        assert_eq!(d[RLIMIT_AS], Rlimit { cur: 1 << 30, max: INF });
        assert_eq!(core::mem::size_of::<Rlimit>(), 16);
        assert_eq!(check(0, Rlimit { cur: 2, max: 1 }), Err(Errno::EINVAL));
        assert_eq!(d[RLIMIT_NOFILE], Rlimit { cur: 1024, max: 4096 });
        assert_eq!(check(RLIMIT_NOFILE, Rlimit { cur: 10, max: 4097 }), Err(Errno::EPERM));
        assert_eq!(check(RLIMIT_NOFILE, Rlimit { cur: 4096, max: 4096 }), Ok(()));
    }
}
