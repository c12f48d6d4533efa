//! Kernel component `plat` (docs/design.md "Components and recovery"): the platform layer every other
//! component builds on.
//!
//! It holds the image entry point (`_shoal_start`, [`boot`]), the binding to
//! the tender's hypercalls ([`hypercall`]), the console ([`console`]),
//! checked access to application memory ([`umem`]), the few CPU instructions
//! the kernel needs ([`cpu`]), the size of the FPU state save on the CPU it
//! really runs on ([`xsave`]), and the vocabulary of system calls: [`Errno`],
//! [`Args`], [`SysResult`] and [`SyscallFn`]. State cells are [`Global`]s.
#![cfg_attr(not(test), no_std)]

pub mod boot;
pub mod console;
pub mod cpu;
mod errno;
mod global;
pub mod hostsig;
pub mod hypercall;
pub mod umem;
pub mod xsave;

pub use errno::Errno;

static SYSCALL_EPOCH: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

/// Counts system calls: a component that caches state of the world outside
/// the guest (net's host-socket readiness) refreshes it at most once per
/// system call by comparing epochs.
pub fn syscall_epoch() -> u64 {
    SYSCALL_EPOCH.load(core::sync::atomic::Ordering::Relaxed)
}

/// Starts a new system-call epoch (the dispatcher, at every call). A
/// load and a store, not a locked add (tens of cycles per call): the one
/// vCPU is the only writer, in kernel code no tick switches away from.
pub fn next_syscall_epoch() {
    let e = SYSCALL_EPOCH.load(core::sync::atomic::Ordering::Relaxed);
    SYSCALL_EPOCH.store(e.wrapping_add(1), core::sync::atomic::Ordering::Relaxed);
}

/// [`next_syscall_epoch`], inline: for the system-call table's light
/// calls, which may call nothing (components call the out-of-line one,
/// as for `hostsig::pending_inline`).
#[inline]
pub fn next_syscall_epoch_inline() {
    let e = SYSCALL_EPOCH.load(core::sync::atomic::Ordering::Relaxed);
    SYSCALL_EPOCH.store(e.wrapping_add(1), core::sync::atomic::Ordering::Relaxed);
}
pub use global::{Global, ZeroGlobal};

/// The six raw argument registers of a system call (`rdi, rsi, rdx, r10,
/// r8, r9` in the Linux x86-64 convention).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Args(pub [u64; 6]);

impl Args {
    /// Argument `i` (0..6) as the raw 64-bit register value.
    #[inline]
    pub fn u(&self, i: usize) -> u64 {
        self.0[i]
    }

    /// Argument `i` as a signed 64-bit value (`long`, `off_t`, `ssize_t`).
    #[inline]
    pub fn i(&self, i: usize) -> i64 {
        self.0[i] as i64
    }

    /// Argument `i` as a C `int` (the low 32 bits, as Linux reads it).
    #[inline]
    pub fn int(&self, i: usize) -> i32 {
        self.0[i] as u32 as i32
    }

    /// Argument `i` as a C `unsigned int` (the low 32 bits).
    #[inline]
    pub fn uint(&self, i: usize) -> u32 {
        self.0[i] as u32
    }

    /// Argument `i` as a `size_t`.
    #[inline]
    pub fn usize(&self, i: usize) -> usize {
        self.0[i] as usize
    }
}

/// What a system call returns: a value (returned to libc as is, reinterpreted
/// as `long`) or an error (returned as `-errno`).
pub type SysResult = Result<u64, Errno>;

/// The type of every `sys::NAME` function the syscall table dispatches to.
pub type SyscallFn = fn(&Args) -> SysResult;

/// What runs once before the instance halts (the vfs saves a volume's
/// tree there: `shoal run --volume`); 0 when nothing is registered.
static BEFORE_HALT: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);

/// Registers `f` to run once when the instance halts. Components above
/// `plat` register here because every end (exit, a signal's default
/// action, a deadlock) comes through [`halt`]; a CPU fault does not, since
/// the kernel's state is then in doubt.
pub fn before_halt(f: fn()) {
    BEFORE_HALT.store(f as usize, core::sync::atomic::Ordering::SeqCst);
}

/// Stops the instance with exit status `status` (see [`hypercall::halt`]),
/// after the function registered with [`before_halt`], if any.
pub fn halt(status: i64) -> ! {
    // Taken, not read: a halt from inside the function does not run it again.
    let f = BEFORE_HALT.swap(0, core::sync::atomic::Ordering::SeqCst);
    if f != 0 {
        // SAFETY: the only non-zero value ever stored is a `fn()` (in
        // `before_halt`), and fn pointers and usize have the same size.
        let f: fn() = unsafe { core::mem::transmute::<usize, fn()>(f) };
        f();
    }
    hypercall::halt(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_views() {
        let a = Args([u64::MAX, 0xffff_ffff_0000_0005, 3, 0, 0, 7]);
        assert_eq!(a.i(0), -1);
        assert_eq!(a.int(0), -1);
        assert_eq!(a.int(1), 5);
        assert_eq!(a.uint(1), 5);
        assert_eq!(a.u(2), 3);
        assert_eq!(a.usize(5), 7);
    }

    #[test]
    fn errno_ret() {
        assert_eq!(Errno::ENOSYS.to_ret(), -38);
        assert_eq!(Errno::EINVAL.to_ret(), -22);
    }
}
