//! A value that remembers whether it was borrowed mutably since the last
//! look: how vfs's call log (module `heal`) learns which of the
//! descriptor tables, the pipes and the locks a call may have changed
//! without comparing each of them with its copy after every call.
//!
//! Every mutable access goes through [`DerefMut`], which sets the mark,
//! so no change can slip past it (the mark may be set by a borrow that
//! changed nothing: then the log compares, finds the copy equal and
//! moves on). Reads through [`Deref`] leave it alone.

use core::ops::{Deref, DerefMut};

/// `T` with a "mutably borrowed since [`Tracked::take_dirty`]" mark.
pub(crate) struct Tracked<T> {
    value: T,
    /// What was borrowed mutably since the last look, in one word (so
    /// that vfs's after-call check, `heal::changed_nothing`, reads one
    /// word per table): [`CLEAN`], [`ALL`], or for a table
    /// (`Tracked<Vec<_>>`) the index of the one entry borrowed through
    /// [`Tracked::at_mut`].
    mark: usize,
}

/// [`Tracked::mark`]: nothing borrowed mutably. All ones, so several
/// marks are all clean exactly when their bitwise and is `CLEAN` (every
/// other mark has a zero bit): [`Tracked::mark`].
pub(crate) const CLEAN: usize = usize::MAX;
/// [`Tracked::mark`]: the whole value borrowed mutably (or two entries
/// of a table). No table has this many entries (a `Vec`'s length is at
/// most `isize::MAX`).
const ALL: usize = usize::MAX - 1;

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
        Tracked { value, mark: CLEAN }
    }

    /// Whether it was borrowed mutably (the whole value, or one entry
    /// of a table) since the last look, without clearing anything: one
    /// load and a compare.
    #[inline]
    pub(crate) fn is_dirty(&self) -> bool {
        self.mark != CLEAN
    }

    /// The mark itself ([`CLEAN`] when nothing was borrowed mutably),
    /// for a check of several tables at once without a branch per table
    /// (`heal::changed_nothing`: `a.mark() & b.mark() == CLEAN`).
    #[inline]
    pub(crate) fn mark(&self) -> usize {
        self.mark
    }

    /// Whether it was borrowed mutably since the last call; clears the
    /// mark.
    #[inline]
    pub(crate) fn take_dirty(&mut self) -> bool {
        core::mem::replace(&mut self.mark, CLEAN) != CLEAN
    }
}

impl<T> Tracked<alloc::vec::Vec<T>> {
    /// Entry `i` for changing it: only it is marked (unless another entry
    /// or the whole table already is), so the log compares that entry
    /// alone.
    #[inline]
    pub(crate) fn at_mut(&mut self, i: usize) -> Option<&mut T> {
        if self.mark == CLEAN {
            self.mark = i;
        } else if self.mark != i {
            self.mark = ALL;
        }
        self.value.get_mut(i)
    }

    /// What was borrowed mutably since the last look; clears it.
    #[inline]
    pub(crate) fn take_dirty_entries(&mut self) -> Dirty {
        match core::mem::replace(&mut self.mark, CLEAN) {
            CLEAN => Dirty::Clean,
            ALL => Dirty::All,
            i => Dirty::One(i),
        }
    }
}

impl<T: Default> Default for Tracked<T> {
    fn default() -> Self {
        Tracked::new(T::default())
    }
}

/// Shows the value only: the mark is bookkeeping, not state.
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
        self.mark = ALL;
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
