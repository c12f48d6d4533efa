//! A map that remembers which of its entries a call may have changed,
//! for the recovery log (`crate::heal`): every mutable access, insertion
//! or removal notes its key, so bringing the log up to date after a call
//! costs time in proportion to the entries the call touched, not to all
//! of them (a server's idle connections cost nothing).
//!
//! Keys are noted only while the log runs ([`crate::heal::logging`]);
//! the list is bounded: past twice the map's size plus 64 it is replaced
//! by "everything" (the log then compares every entry once).

use alloc::collections::btree_map::{self, BTreeMap};
use alloc::vec::Vec;
use core::borrow::Borrow;

/// A `BTreeMap` whose changed keys are noted (module documentation).
pub(crate) struct TrackedMap<K, V> {
    map: BTreeMap<K, V>,
    dirty: Vec<K>,
    all: bool,
}

impl<K, V> Default for TrackedMap<K, V> {
    fn default() -> Self {
        TrackedMap { map: BTreeMap::new(), dirty: Vec::new(), all: false }
    }
}

impl<K: Clone, V: Clone> Clone for TrackedMap<K, V> {
    fn clone(&self) -> Self {
        TrackedMap { map: self.map.clone(), dirty: Vec::new(), all: false }
    }
}

impl<K: PartialEq, V: PartialEq> PartialEq for TrackedMap<K, V> {
    fn eq(&self, other: &Self) -> bool {
        self.map == other.map
    }
}

impl<K: Ord + Clone, V> TrackedMap<K, V> {
    fn note(&mut self, k: &K) {
        if self.all || !crate::heal::logging() {
            return;
        }
        if self.dirty.len() > 2 * self.map.len() + 64 {
            self.dirty.clear();
            self.all = true;
        } else {
            self.dirty.push(k.clone());
        }
    }

    pub fn get<Q: Ord + ?Sized>(&self, k: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
    {
        self.map.get(k)
    }

    /// The entry of `k`, noted as changed.
    pub fn get_mut<Q: Ord + ?Sized>(&mut self, k: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
    {
        if let Some(key) = self.map.get_key_value(k).map(|(key, _)| key.clone()) {
            self.note(&key);
        }
        self.map.get_mut(k)
    }

    pub fn contains_key<Q: Ord + ?Sized>(&self, k: &Q) -> bool
    where
        K: Borrow<Q>,
    {
        self.map.contains_key(k)
    }

    pub fn insert(&mut self, k: K, v: V) -> Option<V> {
        self.note(&k);
        self.map.insert(k, v)
    }

    pub fn remove<Q: Ord + ?Sized>(&mut self, k: &Q) -> Option<V>
    where
        K: Borrow<Q>,
    {
        let (key, v) = self.map.remove_entry(k)?;
        self.note(&key);
        Some(v)
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn iter(&self) -> btree_map::Iter<'_, K, V> {
        self.map.iter()
    }

    pub fn keys(&self) -> btree_map::Keys<'_, K, V> {
        self.map.keys()
    }

    pub fn values(&self) -> btree_map::Values<'_, K, V> {
        self.map.values()
    }

    /// Runs `f` on every entry; those for which it returns `true` (it
    /// changed them) are noted.
    pub fn update_each(&mut self, mut f: impl FnMut(&mut V) -> bool) {
        let mut changed = Vec::new();
        for (k, v) in self.map.iter_mut() {
            if f(v) {
                changed.push(k.clone());
            }
        }
        for k in &changed {
            self.note(k);
        }
    }

    /// Brings `log` up to date with this map's entries (only those noted
    /// since the last call, unless the list overflowed) and forgets the
    /// notes.
    pub fn sync_into(&mut self, log: &mut BTreeMap<K, V>)
    where
        V: PartialEq + Clone,
    {
        if core::mem::take(&mut self.all) {
            self.dirty.clear();
            crate::heal::sync_map(log, &self.map);
            return;
        }
        self.dirty.sort_unstable();
        self.dirty.dedup();
        for k in self.dirty.drain(..) {
            match (self.map.get(&k), log.get_mut(&k)) {
                (Some(v), Some(l)) => {
                    if l != v {
                        l.clone_from(v);
                    }
                }
                (Some(v), None) => {
                    log.insert(k, v.clone());
                }
                (None, _) => {
                    log.remove(&k);
                }
            }
        }
    }

    /// The entries, for the recovery log's own copy (which notes
    /// nothing: it is brought up to date by [`Self::sync_into`]).
    pub fn raw_mut(&mut self) -> &mut BTreeMap<K, V> {
        &mut self.map
    }

    /// Forgets what was noted (a whole copy was just taken).
    pub fn forget_notes(&mut self) {
        self.dirty.clear();
        self.all = false;
    }

    /// A plain copy of the entries (the recovery log's).
    pub fn to_map(&self) -> BTreeMap<K, V>
    where
        V: Clone,
    {
        self.map.clone()
    }

    /// A map holding `m`'s entries, nothing noted (a rebuild).
    pub fn from_map(m: BTreeMap<K, V>) -> Self {
        TrackedMap { map: m, dirty: Vec::new(), all: false }
    }
}

impl<'a, K, V> IntoIterator for &'a TrackedMap<K, V> {
    type Item = (&'a K, &'a V);
    type IntoIter = btree_map::Iter<'a, K, V>;
    fn into_iter(self) -> Self::IntoIter {
        self.map.iter()
    }
}
