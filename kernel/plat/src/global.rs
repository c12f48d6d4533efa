//! Kernel state cells.

use core::cell::{RefCell, RefMut};
use core::mem::MaybeUninit;

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

/// A [`Global`] that starts all zero: it holds `T::default()`, made on
/// first use.
///
/// A static's initial bytes decide where it lies: all zero, in the
/// component's `.bss` (pages nothing touches cost nothing); anything else,
/// in its `.data`, which the loader copies into every instance. A
/// `Vec::new()` (a dangling, non-null pointer), an `Option` whose `None`
/// is a niche value, or any non-zero default is enough to give the
/// component's data region a page of its own in every instance (docs/design.md "The image"
/// puts each library's data on its own pages). This cell keeps a flag and
/// zeroed room instead, so the value costs room in the bss page the
/// component touches anyway. A reboot of the component restores the cell's
/// bytes (flag and value) like any other state.
pub struct ZeroGlobal<T>(RefCell<(bool, MaybeUninit<T>)>);

// SAFETY: as for `Global`: one flow of control runs kernel code at a time.
unsafe impl<T> Sync for ZeroGlobal<T> {}

impl<T: Default> ZeroGlobal<T> {
    /// An empty cell (all zero); `T::default()` is made on first use.
    pub const fn new() -> Self {
        ZeroGlobal(RefCell::new((false, MaybeUninit::zeroed())))
    }

    fn value(cell: &mut (bool, MaybeUninit<T>)) -> &mut T {
        if !cell.0 {
            cell.1.write(T::default());
            cell.0 = true;
        }
        // SAFETY: the flag is set only once the value was written (just
        // above or on an earlier use).
        unsafe { cell.1.assume_init_mut() }
    }

    /// Mutable access for the duration of the returned guard (as
    /// [`Global::borrow_mut`]).
    pub fn borrow_mut(&self) -> RefMut<'_, T> {
        RefMut::map(self.0.borrow_mut(), Self::value)
    }

    /// Runs `f` with mutable access.
    pub fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        f(Self::value(&mut self.0.borrow_mut()))
    }

    /// Runs `f` with mutable access, or returns `None` if the cell is in
    /// use further up the stack (as [`Global::try_with`]).
    pub fn try_with<R>(&self, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        self.0.try_borrow_mut().ok().map(|mut v| f(Self::value(&mut v)))
    }

    /// Runs `f` with mutable access if the value was made and the cell is
    /// not in use; never makes it. Inline and free of calls, for the light
    /// system calls (`shoal_syscall::exec`), whose code may call nothing
    /// that could touch the program's vector registers.
    #[inline]
    pub fn try_with_made<R>(&self, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        let mut cell = self.0.try_borrow_mut().ok()?;
        if !cell.0 {
            return None;
        }
        // SAFETY: the flag is set only once the value was written.
        Some(f(unsafe { cell.1.assume_init_mut() }))
    }
}

impl<T: Default> Default for ZeroGlobal<T> {
    fn default() -> Self {
        Self::new()
    }
}
