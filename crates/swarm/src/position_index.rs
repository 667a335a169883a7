//! A flat hash index: which position of a vector holds the value of a key.
//!
//! Two tables use it: the torrents of a partition ([`Partitions`](crate::partitions))
//! and the peers of a large list ([`PeerList`](crate::PeerList)). Both keep their
//! values dense in a vector and look them up by a key hashed with a keyed hasher.
//!
//! A general hash table (hashbrown) costs dependent cache misses per lookup: its
//! header (behind a box, for a peer list), the control bytes, the slot and the value.
//! With a million torrents each one is a trip to memory, and none can be fetched
//! ahead of time, because the slot's address is known only after reading the control
//! bytes. This index is one flat array of `u32` slots with linear probing, whose
//! pointer and size sit inline in its owner. The slot a key hashes to is therefore
//! known from the owner alone: the batch prefetch asks for that line early
//! ([`PositionIndex::prefetch`]), then for the value the slot names, and a lookup
//! waits on neither.
//!
//! A slot holds `position + 1` in its low [`bits`](PositionIndex::bits) bits (0 is
//! empty) and, above them, that many top bits of the key's hash as a tag, so a probe
//! compares a value only when the tag matches. A table is built with two to four
//! slots per value (like hashbrown's `with_capacity(2 * n)`) and rebuilt so when its
//! load passes 7/8. Sixteen slots share a cache line, so even the long probes of a
//! nearly full table read one or two lines. Removal shifts the entries behind it back
//! (no tombstones), so lookups never slow down with churn.

use std::alloc::{self, Layout};
use std::fmt;
use std::ptr::NonNull;

/// The smallest table: 16 slots (64 bytes, one cache line). A peer list gets an index
/// only past 32 peers, so its tables start at 64 slots; a partition of a small map
/// holds a few torrents.
const MIN_BITS: u32 = 4;

/// A slot that holds no value.
const EMPTY: u32 = 0;

/// Keys to positions, for one vector; empty (no allocation) until
/// [`with_room_for`](Self::with_room_for).
///
/// Packed to 4-byte alignment so that it fills the 12 bytes a
/// [`PeerList`](crate::PeerList) has after its vector and seeder count: the list stays
/// 40 bytes, as it was with a boxed table, and a torrent no bigger.
#[repr(C, packed(4))]
pub(crate) struct PositionIndex {
    /// `1 << bits` slots; dangling when `bits` is 0.
    slots: NonNull<u32>,
    /// log2 of the number of slots; 0 when there is no table.
    bits: u32,
}

// SAFETY: a `PositionIndex` owns its slots like a `Box<[u32]>` would: nothing else points
// into them, and they are plain integers.
unsafe impl Send for PositionIndex {}
// SAFETY: shared access only reads the slots (see `Send`).
unsafe impl Sync for PositionIndex {}

impl PositionIndex {
    /// No table.
    pub(crate) const NONE: Self = Self {
        slots: NonNull::dangling(),
        bits: 0,
    };

    /// An empty table for `values` positions, with two to four slots for each.
    pub(crate) fn with_room_for(values: usize) -> Self {
        let bits = ((2 * values).next_power_of_two().trailing_zeros()).max(MIN_BITS);
        assert!(bits <= 32, "an index holds fewer than 2^31 values");
        let layout = Self::layout(bits);
        // SAFETY: the layout is not zero-sized (at least 64 slots).
        let slots = unsafe { alloc::alloc_zeroed(layout) }.cast::<u32>();
        let Some(slots) = NonNull::new(slots) else {
            alloc::handle_alloc_error(layout)
        };
        Self { slots, bits }
    }

    fn layout(bits: u32) -> Layout {
        Layout::array::<u32>(1 << bits).expect("at most 2^32 slots")
    }

    /// Whether there is a table.
    pub(crate) fn is_some(&self) -> bool {
        self.bits != 0
    }

    /// How many positions the table takes before it must grow (7/8 of its slots).
    pub(crate) fn room(&self) -> usize {
        if self.is_some() {
            (1 << self.bits) / 8 * 7
        } else {
            0
        }
    }

    /// How many values the table indexes (tests only: it is counted, not stored).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.slots().iter().filter(|&&slot| slot != EMPTY).count()
    }

    /// Starts fetching the slot a key with `hash` is probed at first
    /// ([`prefetch`](crate::prefetch)).
    pub(crate) fn prefetch(&self, hash: u64) {
        if self.is_some() {
            crate::prefetch::prefetch(&self.slots()[self.home(hash)], 1);
        }
    }

    /// The position of the key with `hash` for which `is_key` says yes.
    pub(crate) fn find(&self, hash: u64, mut is_key: impl FnMut(usize) -> bool) -> Option<usize> {
        if !self.is_some() {
            return None;
        }
        let slots = self.slots();
        let tag = self.tag(hash);
        let mut slot = self.home(hash);
        loop {
            let entry = slots[slot];
            if entry == EMPTY {
                return None;
            }
            if entry & !self.low() == tag && is_key(self.position(entry)) {
                return Some(self.position(entry));
            }
            slot = self.next(slot);
        }
    }

    /// Adds `position` for a key with `hash` (not in the table yet); the table must
    /// have [`room`](Self::room) for it.
    pub(crate) fn insert(&mut self, hash: u64, position: usize) {
        debug_assert!(position < self.room(), "the table is full");
        let entry = self.tag(hash) | (position as u32 + 1);
        let mut slot = self.home(hash);
        while self.slots()[slot] != EMPTY {
            slot = self.next(slot);
        }
        self.slots_mut()[slot] = entry;
    }

    /// Records that the keys at positions `a` (hash `hash_a`) and `b` (`hash_b`)
    /// swapped places.
    pub(crate) fn swap(&mut self, hash_a: u64, a: usize, hash_b: u64, b: usize) {
        // Both slots are found before either changes: with equal tags, the entry of
        // `a` rewritten to `b` would look like the entry of `b`.
        let (slot_a, slot_b) = (self.slot_of(hash_a, a), self.slot_of(hash_b, b));
        let low = self.low();
        let slots = self.slots_mut();
        slots[slot_a] = (slots[slot_a] & !low) | (b as u32 + 1);
        slots[slot_b] = (slots[slot_b] & !low) | (a as u32 + 1);
    }

    /// Removes `position`, held by a key with `hash`. `hash_at` gives the hash of the
    /// key at another position, for the entries that shift back into the gap.
    pub(crate) fn remove(&mut self, hash: u64, position: usize, hash_at: impl Fn(usize) -> u64) {
        let mut gap = self.slot_of(hash, position);
        let mut slot = gap;
        let mask = self.mask();
        loop {
            slot = self.next(slot);
            let entry = self.slots()[slot];
            if entry == EMPTY {
                break;
            }
            // The entry may fill the gap if the gap lies on its probe path, from its
            // home slot up to where it sits now.
            let home = self.home(hash_at(self.position(entry)));
            if slot.wrapping_sub(home) & mask >= slot.wrapping_sub(gap) & mask {
                self.slots_mut()[gap] = entry;
                gap = slot;
            }
        }
        self.slots_mut()[gap] = EMPTY;
    }

    /// The slot that holds `position` for a key with `hash`.
    fn slot_of(&self, hash: u64, position: usize) -> usize {
        let wanted = self.tag(hash) | (position as u32 + 1);
        let mut slot = self.home(hash);
        while self.slots()[slot] != wanted {
            assert_ne!(
                self.slots()[slot],
                EMPTY,
                "position {position} is not indexed"
            );
            slot = self.next(slot);
        }
        slot
    }

    fn slots(&self) -> &[u32] {
        let (slots, bits) = (self.slots, self.bits);
        if bits == 0 {
            return &[];
        }
        // SAFETY: with `bits` > 0, `slots` is a live allocation of `1 << bits`
        // initialised `u32`s that this index owns; the borrow of `self` keeps it alive.
        unsafe { std::slice::from_raw_parts(slots.as_ptr(), 1 << bits) }
    }

    fn slots_mut(&mut self) -> &mut [u32] {
        let (slots, bits) = (self.slots, self.bits);
        if bits == 0 {
            return &mut [];
        }
        // SAFETY: as in `slots`, and the mutable borrow of `self` makes it unique.
        unsafe { std::slice::from_raw_parts_mut(slots.as_ptr(), 1 << bits) }
    }

    fn mask(&self) -> usize {
        (1usize << self.bits) - 1
    }

    /// The bits of a slot that hold the position (the rest is the tag).
    fn low(&self) -> u32 {
        self.mask() as u32
    }

    fn home(&self, hash: u64) -> usize {
        hash as usize & self.mask()
    }

    /// The top bits of the hash, above the position: independent of the home slot,
    /// which the hash's low bits pick.
    fn tag(&self, hash: u64) -> u32 {
        (hash >> 32) as u32 & !self.low()
    }

    fn position(&self, entry: u32) -> usize {
        (entry & self.low()) as usize - 1
    }

    fn next(&self, slot: usize) -> usize {
        (slot + 1) & self.mask()
    }
}

impl Drop for PositionIndex {
    fn drop(&mut self) {
        let (slots, bits) = (self.slots, self.bits);
        if bits != 0 {
            // SAFETY: allocated in `with_room_for` with this layout, and dropped once.
            unsafe { alloc::dealloc(slots.as_ptr().cast(), Self::layout(bits)) }
        }
    }
}

impl fmt::Debug for PositionIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let slots = 1usize << self.bits;
        f.debug_struct("PositionIndex")
            .field("slots", &if self.is_some() { slots } else { 0 })
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::hash::BuildHasher;

    use hashbrown::DefaultHashBuilder;
    use rand::rngs::SmallRng;
    use rand::{RngExt, SeedableRng};

    use super::*;

    /// A list of keys by position with its index, kept in step the way `PeerList`
    /// does (remove = swap with the last, then pop).
    struct Indexed {
        keys: Vec<u64>,
        index: PositionIndex,
        hasher: DefaultHashBuilder,
    }

    impl Indexed {
        fn new() -> Self {
            Self {
                keys: Vec::new(),
                index: PositionIndex::with_room_for(1),
                hasher: DefaultHashBuilder::default(),
            }
        }

        fn hash(&self, key: u64) -> u64 {
            self.hasher.hash_one(key)
        }

        fn find(&self, key: u64) -> Option<usize> {
            self.index.find(self.hash(key), |p| self.keys[p] == key)
        }

        fn insert(&mut self, key: u64) {
            if self.keys.len() == self.index.room() {
                self.index = PositionIndex::with_room_for(self.keys.len() + 1);
                for (position, &key) in self.keys.iter().enumerate() {
                    let hash = self.hasher.hash_one(key);
                    self.index.insert(hash, position);
                }
            }
            self.keys.push(key);
            let position = self.keys.len() - 1;
            self.index.insert(self.hash(key), position);
        }

        fn remove(&mut self, position: usize) {
            let last = self.keys.len() - 1;
            if position != last {
                let (a, b) = (self.hash(self.keys[position]), self.hash(self.keys[last]));
                self.index.swap(a, position, b, last);
                self.keys.swap(position, last);
            }
            let (keys, hasher) = (&self.keys, &self.hasher);
            self.index.remove(hasher.hash_one(keys[last]), last, |p| {
                hasher.hash_one(keys[p])
            });
            self.keys.pop();
        }
    }

    #[test]
    fn a_list_under_churn_always_finds_its_keys_and_nothing_else() {
        let mut rng = SmallRng::seed_from_u64(15);
        let mut list = Indexed::new();
        let mut model: HashMap<u64, ()> = HashMap::new();
        for round in 0..60_000u32 {
            // Grow to a few thousand, then shrink and grow again: long probe clusters
            // and many shifts back.
            let grow = (round / 10_000) % 2 == 0;
            if list.keys.is_empty() || rng.random_bool(if grow { 0.7 } else { 0.3 }) {
                let key = rng.random_range(0..1_000_000u64);
                if model.insert(key, ()).is_none() {
                    list.insert(key);
                }
            } else {
                let position = rng.random_range(0..list.keys.len());
                model.remove(&list.keys[position]);
                list.remove(position);
            }
            if round % 997 == 0 {
                assert_eq!(list.index.len(), list.keys.len());
                for (position, &key) in list.keys.iter().enumerate() {
                    assert_eq!(list.find(key), Some(position), "key {key}");
                }
                for _ in 0..100 {
                    let key = rng.random_range(1_000_000..2_000_000u64);
                    assert_eq!(list.find(key), None);
                }
            }
        }
        assert_eq!(model.len(), list.keys.len());
    }

    #[test]
    fn colliding_keys_wrap_around_the_end_of_the_table_and_shift_back() {
        // Every key hashes to the last slot: probes wrap to the start, and removing
        // the first ones must shift the others back across the wrap.
        let mut index = PositionIndex::with_room_for(8);
        let last = index.mask() as u64;
        let hash = |p: usize| last | (p as u64) << 40;
        for position in 0..8 {
            index.insert(hash(position), position);
        }
        for position in 0..8 {
            assert_eq!(
                index.find(hash(position), |p| p == position),
                Some(position)
            );
        }
        index.remove(hash(0), 0, hash);
        index.remove(hash(3), 3, hash);
        assert_eq!(index.len(), 6);
        for position in [1, 2, 4, 5, 6, 7] {
            assert_eq!(
                index.find(hash(position), |p| p == position),
                Some(position)
            );
        }
        assert_eq!(index.find(hash(0), |p| p == 0), None);
        assert_eq!(index.find(hash(3), |p| p == 3), None);
    }

    #[test]
    fn swapping_keys_with_the_same_hash_keeps_each_findable() {
        // The worst case for a swap: equal tags and one probe cluster.
        let mut keys: Vec<u64> = (0..8).collect();
        let mut index = PositionIndex::with_room_for(8);
        let hash = 0x1234_5678_9abc_def0;
        for position in 0..8 {
            index.insert(hash, position);
        }
        for (a, b) in [(2, 5), (0, 7), (5, 0), (3, 4)] {
            index.swap(hash, a, hash, b);
            keys.swap(a, b);
            for (position, &key) in keys.iter().enumerate() {
                assert_eq!(index.find(hash, |p| keys[p] == key), Some(position));
            }
        }
    }

    #[test]
    fn tables_hold_twice_their_values_and_nothing_without_one() {
        // 33 peers: 128 slots, full at 112.
        assert_eq!(PositionIndex::with_room_for(33).room(), 112);
        assert_eq!(PositionIndex::with_room_for(64).room(), 112);
        assert_eq!(PositionIndex::with_room_for(65).room(), 224);
        assert_eq!(PositionIndex::with_room_for(1).room(), 14);
        assert_eq!(PositionIndex::with_room_for(9).room(), 28);
        let none = PositionIndex::NONE;
        assert!(!none.is_some());
        assert_eq!(none.room(), 0);
        assert_eq!(none.find(7, |_| true), None);
        none.prefetch(7);
        assert_eq!(size_of::<PositionIndex>(), 12);
    }
}
