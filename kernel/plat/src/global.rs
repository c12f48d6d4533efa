//! Kernel state cells.

use core::cell::{RefCell, RefMut};

/// A global, mutable piece of kernel state.
///
/// The kernel runs on one vCPU with no interrupts and no signal delivery,
/// and threads switch only cooperatively (inside `sched`), so at any instant
/// only one flow of control runs kernel code. A `RefCell` then suffices; its
/// borrow flag turns an accidental re-entrant use into a clean kernel panic
/// instead of silent aliasing.
pub struct Global<T>(RefCell<T>);

// SAFETY: see the type's documentation: the kernel is single-threaded on one
// vCPU with no preemption, so the RefCell is never accessed concurrently.
unsafe impl<T> Sync for Global<T> {}

impl<T> Global<T> {
    /// A cell holding `v`.
    pub const fn new(v: T) -> Self {
        Global(RefCell::new(v))
    }

    /// Mutable access for the duration of the returned guard. Do not hold
    /// it across a call into another component or a thread switch.
    pub fn borrow_mut(&self) -> RefMut<'_, T> {
        self.0.borrow_mut()
    }

    /// Runs `f` with mutable access.
    pub fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        f(&mut self.0.borrow_mut())
    }

    /// Runs `f` with mutable access, or returns `None` if the cell is in
    /// use further up the stack (a check that may run inside its owner's
    /// own operation).
    pub fn try_with<R>(&self, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        self.0.try_borrow_mut().ok().map(|mut v| f(&mut v))
    }
}
