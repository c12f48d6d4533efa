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
        // One tree search when the log is off (the common case: a
        // server's every request looks up its socket here).
        if !self.all && crate::heal::logging() {
            if let Some(key) = self.map.get_key_value(k).map(|(key, _)| key.clone()) {
                self.note(&key);
            }
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

    pub fn keys(&self) -> btree_map::Keys<'_, K, V> {
        self.map.keys()
    }

    pub fn values(&self) -> btree_map::Values<'_, K, V> {
        self.map.values()
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
            let live = self.map.get(&k);
            sync_entry(log, k, live);
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
}

impl<'a, K, V> IntoIterator for &'a TrackedMap<K, V> {
    type Item = (&'a K, &'a V);
    type IntoIter = btree_map::Iter<'a, K, V>;
    fn into_iter(self) -> Self::IntoIter {
        self.map.iter()
    }
}

/// Bits of an object id that name its slot (plus one); the bits above
/// hold the serial number of its creation, so an id is never reused
/// while slots are.
const SLOT_BITS: u32 = 32;

/// The slot of id `id` (`None` for 0 and ids without a slot part).
fn slot_of(id: u64) -> Option<usize> {
    ((id & ((1 << SLOT_BITS) - 1)) as usize).checked_sub(1)
}

/// A table of values by id, noting changed ids as [`TrackedMap`] does,
/// where a lookup is an index instead of a tree search: the id names its
/// slot (low 32 bits, plus one) and the serial number of its creation
/// (the bits above), so freed slots are reused (the table stays as big as
/// the most values ever live at once) while ids stay unique. A lookup
/// with a stale id (its slot reused since) finds nothing.
pub(crate) struct TrackedSlab<V> {
    /// Each slot: the id it holds and the value.
    slots: Vec<Option<(u64, V)>>,
    /// Free slots, the most recently freed last (reused first).
    free: Vec<u32>,
    len: usize,
    dirty: Vec<u64>,
    all: bool,
}

impl<V> Default for TrackedSlab<V> {
    fn default() -> Self {
        TrackedSlab { slots: Vec::new(), free: Vec::new(), len: 0, dirty: Vec::new(), all: false }
    }
}

impl<V> TrackedSlab<V> {
    fn note(&mut self, id: u64) {
        if self.all || !crate::heal::logging() {
            return;
        }
        if self.dirty.len() > 2 * self.len + 64 {
            self.dirty.clear();
            self.all = true;
        } else {
            self.dirty.push(id);
        }
    }

    pub fn get(&self, id: &u64) -> Option<&V> {
        match self.slots.get(slot_of(*id)?)? {
            Some((i, v)) if i == id => Some(v),
            _ => None,
        }
    }

    /// The value of `id`, noted as changed.
    pub fn get_mut(&mut self, id: &u64) -> Option<&mut V> {
        let k = slot_of(*id)?;
        if !matches!(self.slots.get(k), Some(Some((i, _))) if i == id) {
            return None;
        }
        self.note(*id);
        match self.slots.get_mut(k) {
            Some(Some((_, v))) => Some(v),
            _ => None,
        }
    }

    /// Adds `v` with creation serial number `serial`; returns its id.
    pub fn add(&mut self, serial: u64, v: V) -> u64 {
        let k = match self.free.pop() {
            Some(k) => k as usize,
            None => {
                self.slots.push(None);
                self.slots.len() - 1
            }
        };
        let id = (serial << SLOT_BITS) | (k as u64 + 1);
        self.slots[k] = Some((id, v));
        self.len += 1;
        self.note(id);
        id
    }

    pub fn remove(&mut self, id: &u64) -> Option<V> {
        let k = slot_of(*id)?;
        let slot = self.slots.get_mut(k)?;
        if !matches!(slot, Some((i, _)) if i == id) {
            return None;
        }
        let (_, v) = slot.take()?;
        self.free.push(k as u32);
        self.len -= 1;
        self.note(*id);
        Some(v)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// The values with their ids, in slot order.
    pub fn iter(&self) -> impl Iterator<Item = (&u64, &V)> {
        self.slots.iter().filter_map(|s| s.as_ref().map(|(i, v)| (i, v)))
    }

    /// Runs `f` on every value; those for which it returns `true` (it
    /// changed them) are noted.
    pub fn update_each(&mut self, mut f: impl FnMut(&mut V) -> bool) {
        let mut changed = Vec::new();
        for (i, v) in self.slots.iter_mut().flatten() {
            if f(v) {
                changed.push(*i);
            }
        }
        for i in changed {
            self.note(i);
        }
    }

    /// Brings `log` up to date with this table's values (only those noted
    /// since the last call, unless the list overflowed) and forgets the
    /// notes.
    pub fn sync_into(&mut self, log: &mut BTreeMap<u64, V>)
    where
        V: PartialEq + Clone,
    {
        if core::mem::take(&mut self.all) {
            self.dirty.clear();
            if log.len() > self.len || log.keys().any(|k| self.get(k).is_none()) {
                log.retain(|k, _| self.get(k).is_some());
            }
            for (i, v) in self.slots.iter().flatten() {
                match log.get_mut(i) {
                    Some(l) if l == v => {}
                    Some(l) => l.clone_from(v),
                    None => {
                        log.insert(*i, v.clone());
                    }
                }
            }
            return;
        }
        self.dirty.sort_unstable();
        self.dirty.dedup();
        let dirty = core::mem::take(&mut self.dirty);
        for &k in &dirty {
            let live = self.get(&k);
            sync_entry(log, k, live);
        }
        self.dirty = dirty;
        self.dirty.clear();
    }

    /// Brings `log`, a copy of this table kept by the recovery log (which
    /// never adds to it), up to date: only the ids noted since the last
    /// call, unless the list overflowed (then a whole copy); forgets the
    /// notes. Each value goes to the slot its id names; the copy's list of
    /// free slots is not kept ([`Self::from_map`] rebuilds a table from it).
    pub fn sync_into_slab(&mut self, log: &mut TrackedSlab<V>)
    where
        V: PartialEq + Clone,
    {
        if core::mem::take(&mut self.all) {
            self.dirty.clear();
            log.clone_from(self);
            return;
        }
        self.dirty.sort_unstable();
        self.dirty.dedup();
        let dirty = core::mem::take(&mut self.dirty);
        for &id in &dirty {
            let Some(k) = slot_of(id) else { continue };
            if log.slots.len() <= k {
                log.slots.resize_with(k + 1, || None);
            }
            let cur = self.get(&id);
            let slot = &mut log.slots[k];
            match (cur, slot.as_mut()) {
                (Some(v), Some((i, l))) if *i == id => {
                    if l != v {
                        l.clone_from(v);
                    }
                }
                (Some(v), _) => {
                    if slot.replace((id, v.clone())).is_none() {
                        log.len += 1;
                    }
                }
                (None, Some((i, _))) if *i == id => {
                    *slot = None;
                    log.len -= 1;
                }
                (None, _) => {}
            }
        }
        self.dirty = dirty;
        self.dirty.clear();
    }

    /// Forgets what was noted (a whole copy was just taken).
    pub fn forget_notes(&mut self) {
        self.dirty.clear();
        self.all = false;
    }

    /// A plain copy of the values by id (the recovery log's).
    pub fn to_map(&self) -> BTreeMap<u64, V>
    where
        V: Clone,
    {
        self.iter().map(|(i, v)| (*i, v.clone())).collect()
    }

    /// A table holding `m`'s values in the slots their ids name, nothing
    /// noted (a rebuild); the other slots are free, lowest reused first.
    /// Ids without a slot part (none are made) are dropped.
    pub fn from_map(m: BTreeMap<u64, V>) -> Self {
        let mut t = TrackedSlab::default();
        for (i, v) in m {
            let Some(k) = slot_of(i) else { continue };
            if t.slots.len() <= k {
                t.slots.resize_with(k + 1, || None);
            }
            if t.slots[k].replace((i, v)).is_none() {
                t.len += 1;
            }
        }
        t.free = (0..t.slots.len()).rev().filter(|&k| t.slots[k].is_none()).map(|k| k as u32).collect();
        t
    }
}

impl<V: Clone> Clone for TrackedSlab<V> {
    /// A copy of the values (nothing noted in it).
    fn clone(&self) -> Self {
        TrackedSlab { slots: self.slots.clone(), free: self.free.clone(), len: self.len, dirty: Vec::new(), all: false }
    }

    fn clone_from(&mut self, src: &Self) {
        self.slots.clone_from(&src.slots);
        self.free.clone_from(&src.free);
        self.len = src.len;
    }
}

impl<V: PartialEq> PartialEq for TrackedSlab<V> {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().all(|(i, v)| other.get(i) == Some(v))
    }
}

/// Makes the log's entry for `k` what the live table holds (`None`: the
/// entry is gone), copying only when it differs.
fn sync_entry<K: Ord, V: PartialEq + Clone>(log: &mut BTreeMap<K, V>, k: K, live: Option<&V>) {
    match (live, log.get_mut(&k)) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slab_ids_are_unique_while_slots_are_reused_and_stale_ids_find_nothing() {
        let mut t: TrackedSlab<&str> = TrackedSlab::default();
        let a = t.add(1, "a");
        let b = t.add(2, "b");
        assert_ne!(a, b);
        assert_eq!((t.get(&a), t.get(&b)), (Some(&"a"), Some(&"b")));
        assert_eq!(t.remove(&a), Some("a"));
        assert_eq!(t.remove(&a), None, "removed once");
        let c = t.add(3, "c");
        assert_eq!(slot_of(c), slot_of(a), "the freed slot is reused");
        assert_ne!(c, a, "with a new id");
        assert_eq!(t.get(&a), None, "the stale id finds nothing");
        assert_eq!(t.get_mut(&a), None);
        assert_eq!(t.remove(&a), None);
        assert_eq!(t.get(&c), Some(&"c"));
        assert_eq!(t.slots.len(), 2, "no growth: at most two values lived at once");
        assert_eq!(t.get(&0), None);
        assert_eq!(t.get(&(7 << SLOT_BITS)), None, "no slot part");
        assert_eq!(t.get(&u64::MAX), None);
        *t.get_mut(&b).unwrap() = "B";
        assert_eq!(t.iter().map(|(i, v)| (*i, *v)).collect::<Vec<_>>(), alloc::vec![(c, "c"), (b, "B")]);
    }

    #[test]
    fn slab_rebuilt_from_its_map_keeps_ids_and_reuses_the_free_slots() {
        let mut t: TrackedSlab<u32> = TrackedSlab::default();
        let ids: Vec<u64> = (0..5).map(|k| t.add(k + 1, k as u32)).collect();
        t.remove(&ids[1]);
        t.remove(&ids[3]);
        let m = t.to_map();
        assert_eq!(m.len(), 3);
        let mut r = TrackedSlab::from_map(m.clone());
        assert!(r == t);
        assert_eq!(r.to_map(), m);
        for &i in &[ids[0], ids[2], ids[4]] {
            assert_eq!(r.get(&i), t.get(&i));
        }
        let n = r.add(9, 9);
        assert_eq!(slot_of(n), slot_of(ids[1]), "the lowest free slot first");
        let n2 = r.add(10, 10);
        assert_eq!(slot_of(n2), slot_of(ids[3]));
        assert_eq!(r.slots.len(), 5);
    }

    #[test]
    fn slab_brings_a_log_up_to_date_from_its_notes_or_whole() {
        let mut t: TrackedSlab<u32> = TrackedSlab::default();
        let a = t.add(1, 1);
        let b = t.add(2, 2);
        let mut log = BTreeMap::new();
        // Everything (as after an overflow of the notes).
        t.all = true;
        t.sync_into(&mut log);
        assert_eq!(log, t.to_map());
        // Notes (pushed by hand: they are taken only while net's log runs).
        *t.get_mut(&a).unwrap() = 10;
        t.remove(&b);
        let c = t.add(3, 3);
        t.dirty.extend([a, b, c, a]);
        t.sync_into(&mut log);
        assert_eq!(log, t.to_map());
        assert!(t.dirty.is_empty());
        // An overflowed list drops entries gone from the table.
        log.insert(99, 0);
        t.all = true;
        t.sync_into(&mut log);
        assert_eq!(log, t.to_map());
        // Into a copy that is itself a table (the host backend's log).
        let mut copy = t.clone();
        let d = t.add(4, 4);
        *t.get_mut(&c).unwrap() = 30;
        t.remove(&a);
        let e = t.add(5, 5);
        t.dirty.extend([d, c, a, e]);
        t.sync_into_slab(&mut copy);
        assert!(copy == t);
        assert_eq!(copy.to_map(), t.to_map());
        assert_eq!(TrackedSlab::from_map(copy.to_map()).add(6, 6) >> SLOT_BITS, 6);
        t.all = true;
        t.remove(&d);
        t.sync_into_slab(&mut copy);
        assert!(copy == t);
    }
}
