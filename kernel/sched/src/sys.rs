//! The scheduling system calls.

use shoal_plat::{umem, Args, Errno, SysResult};
use shoal_time::sys::Timespec;

/// `sched_yield()`: the only thread keeps running.
pub fn sched_yield(_: &Args) -> SysResult {
    Ok(0)
}

/// `sched_getaffinity(pid, len, mask)`: one CPU (CPU 0); returns the size
/// of the kernel's CPU mask (8 bytes), as Linux does.
pub fn sched_getaffinity(a: &Args) -> SysResult {
    let (pid, len) = (a.int(0), a.u(1));
    if pid != 0 && pid != 1 {
        return Err(Errno::ESRCH);
    }
    if len < 8 || len % 8 != 0 {
        return Err(Errno::EINVAL);
    }
    umem::write(a.u(2), 1u64)?;
    Ok(8)
}

const FUTEX_WAIT: u32 = 0;
const FUTEX_WAKE: u32 = 1;
const FUTEX_FD: u32 = 2;
const FUTEX_REQUEUE: u32 = 3;
const FUTEX_CMP_REQUEUE: u32 = 4;
const FUTEX_WAKE_OP: u32 = 5;
const FUTEX_WAIT_BITSET: u32 = 9;
const FUTEX_WAKE_BITSET: u32 = 10;
const FUTEX_PRIVATE_FLAG: u32 = 128;
const FUTEX_CLOCK_REALTIME: u32 = 256;

fn futex_word(addr: u64) -> Result<u32, Errno> {
    if !addr.is_multiple_of(4) {
        return Err(Errno::EINVAL);
    }
    umem::read::<u32>(addr)
}

/// The new value of a `FUTEX_WAKE_OP` target: `op` applied to `old`.
pub fn wake_op(old: u32, val3: u32) -> Result<u32, Errno> {
    let op = (val3 >> 28) & 0xf;
    let mut oparg = ((val3 << 8) as i32 >> 20) as u32; // sign-extended 12 bits
    if op & 8 != 0 {
        if oparg > 31 {
            return Err(Errno::EINVAL);
        }
        oparg = 1 << oparg;
    }
    Ok(match op & 7 {
        0 => oparg,
        1 => old.wrapping_add(oparg),
        2 => old | oparg,
        3 => old & !oparg,
        4 => old ^ oparg,
        _ => return Err(Errno::ENOSYS),
    })
}

/// `futex(uaddr, op, val, timeout, uaddr2, val3)` with one thread. See the
/// crate documentation for what waiting means; wakes find no waiter (0);
/// `FUTEX_WAKE_OP` still performs its operation on `*uaddr2`; the PI
/// operations are `ENOSYS`.
pub fn futex(a: &Args) -> SysResult {
    let (uaddr, op, val, timeout, uaddr2, val3) = (a.u(0), a.uint(1), a.uint(2), a.u(3), a.u(4), a.uint(5));
    let cmd = op & !(FUTEX_PRIVATE_FLAG | FUTEX_CLOCK_REALTIME);
    if op & FUTEX_CLOCK_REALTIME != 0 && cmd != FUTEX_WAIT && cmd != FUTEX_WAIT_BITSET {
        return Err(Errno::ENOSYS);
    }
    match cmd {
        FUTEX_WAIT | FUTEX_WAIT_BITSET => {
            if cmd == FUTEX_WAIT_BITSET && val3 == 0 {
                return Err(Errno::EINVAL);
            }
            let t: Option<Timespec> = if timeout != 0 { Some(umem::read(timeout)?) } else { None };
            let deadline = match t {
                None => None,
                Some(t) => {
                    let ns = t.to_ns()?;
                    Some(if cmd == FUTEX_WAIT {
                        shoal_time::monotonic_ns().saturating_add(ns)
                    } else if op & FUTEX_CLOCK_REALTIME != 0 {
                        ns.saturating_sub(shoal_time::realtime_offset_ns())
                    } else {
                        ns
                    })
                }
            };
            if futex_word(uaddr)? != val {
                return Err(Errno::EAGAIN);
            }
            match deadline {
                Some(d) => {
                    shoal_time::sleep_until(d);
                    Err(Errno::ETIMEDOUT)
                }
                None => crate::deadlock("a futex"),
            }
        }
        FUTEX_WAKE | FUTEX_WAKE_BITSET => {
            if cmd == FUTEX_WAKE_BITSET && val3 == 0 {
                return Err(Errno::EINVAL);
            }
            futex_word(uaddr)?;
            Ok(0)
        }
        FUTEX_REQUEUE => {
            futex_word(uaddr)?;
            futex_word(uaddr2)?;
            Ok(0)
        }
        FUTEX_CMP_REQUEUE => {
            futex_word(uaddr2)?;
            if futex_word(uaddr)? != val3 {
                return Err(Errno::EAGAIN);
            }
            Ok(0)
        }
        FUTEX_WAKE_OP => {
            futex_word(uaddr)?;
            let old = futex_word(uaddr2)?;
            umem::write(uaddr2, wake_op(old, val3)?)?;
            Ok(0)
        }
        FUTEX_FD => Err(Errno::EINVAL),
        _ => Err(Errno::ENOSYS),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: [u64; 6]) -> Args {
        Args(v)
    }

    #[test]
    fn futex_single_thread() {
        umem::set_bounds(1, u64::MAX);
        let mut w: u32 = 5;
        let p = &mut w as *mut u32 as u64;
        assert_eq!(futex(&args([p, 1 | 128, 1, 0, 0, 0])), Ok(0), "wake: nobody");
        assert_eq!(futex(&args([p, 0, 4, 0, 0, 0])), Err(Errno::EAGAIN), "value changed");
        assert_eq!(futex(&args([p + 1, 0, 5, 0, 0, 0])), Err(Errno::EINVAL), "misaligned");
        let bad = Timespec { tv_sec: 0, tv_nsec: -1 };
        assert_eq!(futex(&args([p, 0, 5, &bad as *const _ as u64, 0, 0])), Err(Errno::EINVAL));
        assert_eq!(futex(&args([p, 9, 5, 0, 0, 0])), Err(Errno::EINVAL), "bitset 0");
        assert_eq!(futex(&args([p, 4, 0, 0, p, 6])), Err(Errno::EAGAIN));
        assert_eq!(futex(&args([p, 4, 0, 0, p, 5])), Ok(0));
        // FUTEX_WAKE_OP: *uaddr2 += 3.
        let mut w2: u32 = 10;
        let p2 = &mut w2 as *mut u32 as u64;
        assert_eq!(futex(&args([p, 5, 1, 0, p2, (1 << 28) | (3 << 12)])), Ok(0));
        assert_eq!(w2, 13);
        assert_eq!(futex(&args([p, 6, 0, 0, 0, 0])), Err(Errno::ENOSYS), "PI");
    }

    #[test]
    fn wake_op_encoding() {
        assert_eq!(wake_op(6, 1 << 12), Ok(1)); // SET 1
        assert_eq!(wake_op(6, 3 << 28 | 2 << 12), Ok(4)); // ANDN 2
        assert_eq!(wake_op(6, 4 << 28 | 0xfff << 12), Ok(!6)); // XOR -1
        assert_eq!(wake_op(0, 10 << 28 | 4 << 12), Ok(16)); // OR with 1<<4
        assert_eq!(wake_op(0, 8 << 28 | 40 << 12), Err(Errno::EINVAL));
    }

    #[test]
    fn affinity() {
        umem::set_bounds(1, u64::MAX);
        let mut m = [0xffu64; 4];
        let p = m.as_mut_ptr() as u64;
        assert_eq!(sched_getaffinity(&args([0, 32, p, 0, 0, 0])), Ok(8));
        assert_eq!(m[0], 1);
        assert_eq!(sched_getaffinity(&args([0, 4, p, 0, 0, 0])), Err(Errno::EINVAL));
        assert_eq!(sched_getaffinity(&args([7, 8, p, 0, 0, 0])), Err(Errno::ESRCH));
    }
}
