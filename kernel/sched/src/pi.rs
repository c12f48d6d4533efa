//! Priority-inheritance futexes and robust lists, with Linux's user-space
//! protocol.
//!
//! **PI futexes** (`FUTEX_LOCK_PI`, `FUTEX_LOCK_PI2`, `FUTEX_TRYLOCK_PI`,
//! `FUTEX_UNLOCK_PI`). The futex word holds the owner's tid (bits 0..30),
//! `FUTEX_OWNER_DIED` (bit 30) and `FUTEX_WAITERS` (bit 31); user space
//! takes a free lock by writing its tid and releases an uncontended one by
//! writing 0, and calls the kernel only when that fails. The kernel sets
//! `FUTEX_WAITERS` before a waiter blocks (so the owner's unlock comes to
//! the kernel) and on unlock hands the lock straight to the longest waiter
//! (word = `FUTEX_WAITERS | tid`), as Linux does. Errors as Linux's:
//! `EDEADLK` when the caller already owns the lock, `ESRCH` when the owner
//! named in the word does not exist, `EPERM` when a non-owner unlocks,
//! `EAGAIN` from a contended trylock, `ETIMEDOUT`. With one vCPU and
//! cooperative scheduling there is no priority to inherit: PI reduces to
//! this owner tracking. A signal ends a wait with `EINTR` (Linux restarts
//! it after the handler; musl retries on `EINTR` itself).
//!
//! **Robust lists.** At a thread's exit its `set_robust_list` list is
//! walked as Linux's `exit_robust_list` does (at most 2048 entries, the
//! `list_op_pending` entry too): every futex word that names the exiting
//! thread becomes `FUTEX_OWNER_DIED` (keeping `FUTEX_WAITERS`) and, for a
//! non-PI futex with waiters, one waiter is woken, so the next locker of a
//! robust mutex gets `EOWNERDEAD`. Then every PI futex with blocked waiters
//! that the exiting thread owned (or that its exit left ownerless) goes to
//! its longest waiter, keeping `FUTEX_OWNER_DIED` (Linux's
//! `exit_pi_state_list`).

use crate::table::Block;
use crate::{reschedule, table, wake_result};
use alloc::vec::Vec;
use shoal_plat::{umem, Errno};

/// The word has waiters that wait in the kernel.
pub const FUTEX_WAITERS: u32 = 0x8000_0000;
/// The owner died without unlocking.
pub const FUTEX_OWNER_DIED: u32 = 0x4000_0000;
/// The owner's tid.
pub const FUTEX_TID_MASK: u32 = 0x3fff_ffff;
/// Most robust-list entries walked (Linux's `ROBUST_LIST_LIMIT`).
const ROBUST_LIST_LIMIT: usize = 2048;

/// PI waiters wait on the word's address with this bit set, apart from
/// plain `FUTEX_WAIT` waiters on the same word (below the kernel keys).
const PI_KEY: u64 = 1 << 62;

/// Words of PI futexes that have (or had) blocked waiters, to look at when
/// a thread exits.
static WAITED: shoal_plat::ZeroGlobal<Vec<u64>> = shoal_plat::ZeroGlobal::new();

fn word(addr: u64) -> Result<u32, Errno> {
    if !addr.is_multiple_of(4) {
        return Err(Errno::EINVAL);
    }
    umem::read(addr)
}

fn first_waiter(addr: u64) -> Option<u32> {
    table(|t| t.first_waiter(addr | PI_KEY))
}

/// `FUTEX_LOCK_PI` (`trylock`: `FUTEX_TRYLOCK_PI`) of the word at `addr`
/// by the running thread, waiting until `deadline` (monotonic ns).
pub fn lock(addr: u64, deadline: Option<u64>, trylock: bool) -> Result<(), Errno> {
    let me = crate::current_tid();
    loop {
        let w = word(addr)?;
        let owner = w & FUTEX_TID_MASK;
        if owner == 0 {
            // Free (perhaps after its owner died): take it, keeping
            // OWNER_DIED for the new owner to see.
            let waiters = if first_waiter(addr).is_some() { FUTEX_WAITERS } else { 0 };
            umem::write(addr, (w & FUTEX_OWNER_DIED) | waiters | me)?;
            return Ok(());
        }
        if owner == me {
            return Err(Errno::EDEADLK);
        }
        if !crate::thread_exists(owner) {
            return Err(Errno::ESRCH);
        }
        if trylock {
            return Err(Errno::EAGAIN);
        }
        umem::write(addr, w | FUTEX_WAITERS)?;
        WAITED.with(|v| {
            if !v.contains(&addr) {
                v.push(addr);
            }
        });
        table(|t| t.block_current(Block::Futex { addr: addr | PI_KEY, bitset: u32::MAX }, deadline));
        reschedule();
        let r = wake_result();
        // Handed over by the unlocker (or by the owner's exit)?
        if word(addr)? & FUTEX_TID_MASK == me {
            return Ok(());
        }
        r?;
    }
}

/// Gives the lock at `addr` (word `w`) to its longest waiter; `false` if
/// there is none.
fn hand_over(addr: u64, w: u32) -> Result<bool, Errno> {
    let Some(next) = first_waiter(addr) else { return Ok(false) };
    umem::write(addr, (w & FUTEX_OWNER_DIED) | FUTEX_WAITERS | next)?;
    table(|t| t.wake_tid(next));
    Ok(true)
}

/// `FUTEX_UNLOCK_PI`: the running thread must own the word (`EPERM`);
/// the longest waiter becomes the owner, or the word becomes 0.
pub fn unlock(addr: u64) -> Result<(), Errno> {
    let w = word(addr)?;
    if w & FUTEX_TID_MASK != crate::current_tid() {
        return Err(Errno::EPERM);
    }
    // Linux's wake_futex_pi: FUTEX_WAITERS | new owner (OWNER_DIED goes).
    if !hand_over(addr, 0)? {
        umem::write(addr, 0u32)?;
    }
    Ok(())
}

/// Linux's `handle_futex_death` for the word at `addr` of exiting thread
/// `tid`.
fn futex_death(addr: u64, tid: u32, pi: bool) {
    let Ok(w) = word(addr) else { return };
    if w & FUTEX_TID_MASK != tid {
        return;
    }
    if umem::write(addr, (w & FUTEX_WAITERS) | FUTEX_OWNER_DIED).is_err() {
        return;
    }
    if !pi && w & FUTEX_WAITERS != 0 {
        crate::futex_wake(addr, 1, u32::MAX);
    }
}

/// Walks the robust list at `head` of exiting thread `tid` (nothing if
/// `head` is 0 or unreadable). Entries are user pointers; bit 0 marks a PI
/// futex.
pub fn exit_robust_list(tid: u32, head: u64) {
    if head == 0 {
        return;
    }
    let Ok([first, offset, pending]) = umem::read::<[u64; 3]>(head) else { return };
    let at = |entry: u64| (entry & !1).wrapping_add(offset);
    let mut entry = first;
    let mut n = 0;
    while entry != head && entry & !1 != 0 && n < ROBUST_LIST_LIMIT {
        // The next pointer first: the word's owner may free the entry.
        let Ok(next) = umem::read::<u64>(entry & !1) else { break };
        if entry != pending {
            futex_death(at(entry), tid, entry & 1 != 0);
        }
        entry = next;
        n += 1;
    }
    if pending & !1 != 0 {
        futex_death(at(pending), tid, pending & 1 != 0);
    }
}

/// Hands on the PI futexes with waiters that exiting thread `tid` owned,
/// or that are left without an owner.
pub fn exit_pi_owner(tid: u32) {
    let addrs = WAITED.with(core::mem::take);
    let mut keep = Vec::new();
    for addr in addrs {
        if first_waiter(addr).is_none() {
            continue;
        }
        keep.push(addr);
        let Ok(w) = word(addr) else { continue };
        let owner = w & FUTEX_TID_MASK;
        if owner == tid || owner == 0 || !crate::thread_exists(owner) {
            let _ = hand_over(addr, w);
        }
    }
    WAITED.with(|v| v.extend(keep));
}

#[cfg(test)]
mod tests {
    use super::*;

    // The kernel reads and writes these words through user pointers, so
    // the tests do too (volatile: the compiler cannot see those accesses).
    fn set(p: u64, v: u32) {
        // SAFETY: `p` points to a live, aligned u32 of the test.
        unsafe { core::ptr::write_volatile(p as *mut u32, v) }
    }

    fn get(p: u64) -> u32 {
        // SAFETY: as for `set`.
        unsafe { core::ptr::read_volatile(p as *const u32) }
    }

    #[test]
    fn lock_unlock_errors_single_thread() {
        umem::set_bounds(1, u64::MAX);
        let me = crate::current_tid();
        let w = Box::new(0u32);
        let p = Box::into_raw(w) as u64;
        assert_eq!(lock(p, None, false), Ok(()));
        assert_eq!(get(p), me);
        assert_eq!(lock(p, None, false), Err(Errno::EDEADLK));
        assert_eq!(lock(p, None, true), Err(Errno::EDEADLK));
        assert_eq!(unlock(p), Ok(()));
        assert_eq!(get(p), 0);
        assert_eq!(unlock(p), Err(Errno::EPERM));
        set(p, 0x3fff_fffe);
        assert_eq!(lock(p, None, false), Err(Errno::ESRCH));
        assert_eq!(lock(p, None, true), Err(Errno::ESRCH));
        // A dead owner's lock: taken with OWNER_DIED kept.
        set(p, FUTEX_OWNER_DIED);
        assert_eq!(lock(p, None, true), Ok(()));
        assert_eq!(get(p), FUTEX_OWNER_DIED | me);
        assert_eq!(unlock(p), Ok(()));
        assert_eq!(get(p), 0);
        assert_eq!(lock(p + 1, None, false), Err(Errno::EINVAL));
    }

    #[test]
    fn robust_list_walk_marks_owner_died() {
        umem::set_bounds(1, u64::MAX);
        // Entries are { next: u64, word: u32 } (futex_offset 8), in one
        // buffer: [0..3) the head, then entries a, b, other, pend.
        let buf: &'static mut [u64; 11] = Box::leak(Box::new([0u64; 11]));
        let base = buf.as_mut_ptr() as u64;
        let (hp, a, b, other, pend) = (base, base + 24, base + 40, base + 56, base + 72);
        let put = |at: u64, v: u64| {
            // SAFETY: inside the leaked buffer, 8-byte aligned.
            unsafe { core::ptr::write_volatile(at as *mut u64, v) }
        };
        put(hp, a);
        put(hp + 8, 8);
        put(hp + 16, pend);
        put(a, b);
        set(a + 8, 7);
        put(b, hp);
        set(b + 8, 7 | FUTEX_WAITERS);
        set(other + 8, 8);
        set(pend + 8, 7);
        exit_robust_list(7, hp);
        assert_eq!(get(a + 8), FUTEX_OWNER_DIED);
        assert_eq!(get(b + 8), FUTEX_OWNER_DIED | FUTEX_WAITERS);
        assert_eq!(get(pend + 8), FUTEX_OWNER_DIED);
        assert_eq!(get(other + 8), 8, "not on the list");
        // Another owner's words are left alone.
        set(a + 8, 9);
        exit_robust_list(7, hp);
        assert_eq!(get(a + 8), 9);
        // A loop is cut at the limit; an empty list does nothing.
        put(a, a);
        set(a + 8, 7);
        exit_robust_list(7, hp);
        assert_eq!(get(a + 8), FUTEX_OWNER_DIED);
        put(hp, hp);
        put(hp + 16, 0);
        exit_robust_list(7, hp);
        exit_robust_list(7, 0);
    }
}
