//! The few CPU instructions the kernel uses directly.
//!
//! All of them run at user privilege on both tenders (docs/design.md "Host facts"): `rdtsc`
//! always, `rd/wrfsbase` and `rd/wrgsbase` because FSGSBASE is enabled for
//! user mode on the host and in the hvt guest's CR4.

/// Reads the time-stamp counter.
#[inline]
pub fn rdtsc() -> u64 {
    // SAFETY: `rdtsc` has no memory effects; it is allowed at CPL 3 (the
    // tenders do not set CR4.TSD).
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Sets the FS base (the thread pointer of the x86-64 TLS ABI).
///
/// # Safety
/// Code that uses `%fs`-relative addressing (libc's thread-local storage,
/// Rust's `#[thread_local]`) will afterwards address memory at `base`.
#[inline]
pub unsafe fn wrfsbase(base: u64) {
    // SAFETY: the caller accepts the new thread pointer; the instruction
    // itself only writes the FS base register.
    unsafe { core::arch::asm!("wrfsbase {}", in(reg) base, options(nostack, preserves_flags)) }
}

/// Reads the FS base.
#[inline]
pub fn rdfsbase() -> u64 {
    let v: u64;
    // SAFETY: reads a register; no memory effects.
    unsafe { core::arch::asm!("rdfsbase {}", out(reg) v, options(nomem, nostack, preserves_flags)) };
    v
}

/// Sets the GS base.
///
/// # Safety
/// As [`wrfsbase`], for `%gs`-relative addressing.
#[inline]
pub unsafe fn wrgsbase(base: u64) {
    // SAFETY: the caller accepts the new GS base; the instruction only
    // writes the GS base register.
    unsafe { core::arch::asm!("wrgsbase {}", in(reg) base, options(nostack, preserves_flags)) }
}

/// Reads the GS base.
#[inline]
pub fn rdgsbase() -> u64 {
    let v: u64;
    // SAFETY: reads a register; no memory effects.
    unsafe { core::arch::asm!("rdgsbase {}", out(reg) v, options(nomem, nostack, preserves_flags)) };
    v
}

#[cfg(test)]
mod tests {
    #[test]
    fn tsc_advances() {
        let a = super::rdtsc();
        let b = super::rdtsc();
        assert!(b >= a);
    }
}
