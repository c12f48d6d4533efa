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
pub(crate) struct Tracked<T> {
    value: T,
    dirty: bool,
    /// For a table (`Tracked<Vec<_>>`): the one entry borrowed mutably
    /// through [`Tracked::at_mut`] while `dirty` is clear (`NONE`: none).
    one: usize,
}

const NONE: usize = usize::MAX;

/// What of a tracked table was borrowed mutably since the last look
/// ([`Tracked::take_dirty_entries`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dirty {
    /// Nothing.
    Clean,
    /// Only this entry (a read or write moving one description's offset).
    One(usize),
    /// Anything.
    All,
}

impl<T> Tracked<T> {
    /// `value`, not dirty.
    pub(crate) const fn new(value: T) -> Self {
        Tracked { value, dirty: false, one: NONE }
    }

    /// Whether it was borrowed mutably (the whole value, or one entry
    /// of a table) since the last look, without clearing anything.
    #[inline]
    pub(crate) fn is_dirty(&self) -> bool {
        self.dirty || self.one != NONE
    }

    /// Whether it was borrowed mutably since the last call; clears the
    /// flag.
    #[inline]
    pub(crate) fn take_dirty(&mut self) -> bool {
        (core::mem::replace(&mut self.one, NONE) != NONE) | core::mem::replace(&mut self.dirty, false)
    }
}

impl<T> Tracked<alloc::vec::Vec<T>> {
    /// Entry `i` for changing it: only it is marked (unless another entry
    /// or the whole table already is), so the log compares that entry
    /// alone.
    #[inline]
    pub(crate) fn at_mut(&mut self, i: usize) -> Option<&mut T> {
        if !self.dirty {
            if self.one == NONE || self.one == i {
                self.one = i;
            } else {
                self.dirty = true;
            }
        }
        self.value.get_mut(i)
    }

    /// What was borrowed mutably since the last look; clears it.
    #[inline]
    pub(crate) fn take_dirty_entries(&mut self) -> Dirty {
        let one = core::mem::replace(&mut self.one, NONE);
        if core::mem::replace(&mut self.dirty, false) {
            Dirty::All
        } else if one != NONE {
            Dirty::One(one)
        } else {
            Dirty::Clean
        }
    }
}

impl<T: Default> Default for Tracked<T> {
    fn default() -> Self {
        Tracked::new(T::default())
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

    #[test]
    fn one_entry_borrowed_is_told_apart_from_the_table() {
        use super::Dirty;
        let mut t = Tracked::new(alloc::vec![1u32, 2, 3]);
        *t.at_mut(1).unwrap() = 5;
        *t.at_mut(1).unwrap() = 6;
        assert_eq!(t.take_dirty_entries(), Dirty::One(1));
        assert_eq!(t.take_dirty_entries(), Dirty::Clean);
        *t.at_mut(0).unwrap() = 5;
        *t.at_mut(2).unwrap() = 5;
        assert_eq!(t.take_dirty_entries(), Dirty::All, "two entries: the table");
        *t.at_mut(0).unwrap() = 7;
        t.push(1);
        assert_eq!(t.take_dirty_entries(), Dirty::All);
        *t.at_mut(0).unwrap() = 8;
        assert!(t.take_dirty(), "take_dirty sees an entry too");
        assert_eq!(t.take_dirty_entries(), Dirty::Clean);
    }
}
