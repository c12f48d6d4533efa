//! A value that remembers whether it was borrowed mutably since the last
//! look: how vfs's call log (module `heal`) learns which of the
//! descriptor tables, the pipes and the locks a call may have changed
//! without comparing each of them with its copy after every call.
//!
//! Every mutable access goes through [`DerefMut`], which sets the flag,
//! so no change can slip past it (the flag may be set by a borrow that
//! changed nothing: then the log compares, finds the copy equal and
//! moves on). Reads through [`Deref`] leave it alone.

use core::ops::{Deref, DerefMut};

/// `T` with a "mutably borrowed since [`Tracked::take_dirty`]" flag.
#[derive(Default)]
pub(crate) struct Tracked<T> {
    value: T,
    dirty: bool,
}

impl<T> Tracked<T> {
    /// `value`, not dirty.
    pub(crate) const fn new(value: T) -> Self {
        Tracked { value, dirty: false }
    }

    /// Whether it was borrowed mutably since the last call; clears the
    /// flag.
    #[inline]
    pub(crate) fn take_dirty(&mut self) -> bool {
        core::mem::replace(&mut self.dirty, false)
    }
}

/// Shows the value only: the flag is bookkeeping, not state.
impl<T: core::fmt::Debug> core::fmt::Debug for Tracked<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.value.fmt(f)
    }
}

impl<T> Deref for Tracked<T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T> DerefMut for Tracked<T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        self.dirty = true;
        &mut self.value
    }
}

#[cfg(test)]
mod tests {
    use super::Tracked;
    use alloc::vec::Vec;

    #[test]
    fn only_mutable_borrows_set_the_flag() {
        let mut t = Tracked::new(Vec::<u32>::new());
        assert!(!t.take_dirty());
        assert_eq!(t.len(), 0);
        assert!(!t.take_dirty(), "a read leaves it clean");
        t.push(1);
        assert!(t.take_dirty());
        assert!(!t.take_dirty(), "taking the flag clears it");
        t[0] = 2;
        assert!(t.take_dirty());
        assert_eq!(*t, [2]);
    }
}
