//! Torrents in partitions, so that cleaning can go one partition at a time.
//!
//! A swarm worker must not stop answering while it cleans a map of millions of
//! torrents. The map is split into [`PARTITIONS`] tables by bits of a keyed hash of
//! the info hash; a cleaning step walks one partition, and a pass is [`PARTITIONS`]
//! steps with requests served in between. The hash is keyed (random per map) because
//! info hashes are chosen by clients: with the plain bytes, an attacker could put
//! every torrent into one partition and make its step as long as a pass.
//!
//! A partition keeps its torrents dense in a vector, found by a [`PositionIndex`]
//! whose slot for a key is known from the hash alone. That is what lets a batch of
//! announces fetch its torrents ahead in steps without waiting on any of them
//! ([`Partitions::prefetch_slot`], [`Partitions::prefetch_value`]); a hashbrown table
//! must be read (its control bytes) before the slot's address is known. Dense
//! values cost less memory too: no empty slot is the size of a torrent.
//!
//! Each lookup hashes once: the same hash picks the partition and probes its index.

use std::hash::BuildHasher;

use hashbrown::DefaultHashBuilder;

use crate::InfoHash;
use crate::position_index::PositionIndex;

/// Partitions per map: a cleaning step walks 1/2048 of the torrents (at 10M peers
/// about 5,000 peers, tens of microseconds; with 256 a step took about 400 µs and
/// showed in the p99.9 reply latency: documents/benchmarks/cleaning-2026-11-23.md).
pub const PARTITIONS: usize = 2048;

/// How many values a full partition of `len` grows by: an eighth, at least 4.
///
/// Doubling would leave a quarter of the torrent memory empty on average; an eighth
/// leaves about 6%, at the cost of copying a partition (tens of kilobytes at a
/// million torrents) once per eighth it grows.
fn growth(len: usize) -> usize {
    (len / 8).max(4)
}

/// An info hash with its hash in one map ([`TorrentMap::locate`]): what finds its
/// partition and its index slot. A batch of announces locates each torrent once and
/// hands the result to every prefetch step and to the announce, instead of hashing
/// the info hash at each of them.
///
/// It belongs to the map that made it: the hash is keyed per map, so in another map
/// it leads to the wrong partition.
///
/// [`TorrentMap::locate`]: crate::TorrentMap::locate
// No `PartialEq`: two `Located` of one key may carry different guesses.
#[derive(Clone, Copy, Debug)]
pub struct Located {
    key: InfoHash,
    hash: u64,
    /// Where the value probably is in its partition, as [`Partitions::prefetch_value`]
    /// found it ([`NO_HINT`] before): the announce and the later prefetch steps check
    /// that position's key instead of probing the index again. Only a guess, checked
    /// every time: a stale or wrong one costs one comparison.
    hint: u32,
    /// Likewise for the announcing peer in the torrent's list, as
    /// [`TorrentMap::prefetch_announce`](crate::TorrentMap::prefetch_announce) found
    /// it in a list with an index ([`NO_HINT`] otherwise).
    pub(crate) peer_hint: u32,
}

/// No position guessed yet.
pub(crate) const NO_HINT: u32 = u32::MAX;

impl Located {
    /// The info hash.
    pub fn info_hash(&self) -> &InfoHash {
        &self.key
    }

    /// Where the announcing peer probably is in the torrent's list.
    pub(crate) fn peer_hint(&self) -> Option<usize> {
        (self.peer_hint != NO_HINT).then_some(self.peer_hint as usize)
    }

    fn part(&self) -> usize {
        // The index takes its home slot from the low bits (fewer than 21 below a
        // billion torrents) and its tag from the top ones (from bit 32 up); the
        // partition takes 11 bits between them, so both vary within a partition.
        (self.hash >> 21) as usize % PARTITIONS
    }
}

/// A value that carries its info hash.
///
/// A partition stores its values whole rather than as (key, value) pairs, so that a
/// value can lay its fields out around the key: a BitTorrent torrent record is 72
/// bytes that way, where a pair with the same fields is padded to 80.
pub(crate) trait Keyed {
    /// The info hash the value is stored under.
    fn key(&self) -> &InfoHash;
}

/// One partition: its values, dense, and the index that finds them.
#[derive(Debug)]
struct Partition<T> {
    values: Vec<T>,
    /// Position of each value by key; no table while the partition is empty.
    index: PositionIndex,
}

impl<T> Default for Partition<T> {
    fn default() -> Self {
        Self {
            values: Vec::new(),
            index: PositionIndex::NONE,
        }
    }
}

impl<T: Keyed> Partition<T> {
    fn find(&self, hash: u64, key: &InfoHash) -> Option<usize> {
        let values = &self.values;
        self.index
            .find(hash, |position| values[position].key() == key)
    }

    /// The position of a located key: its hint if that holds the key, else found.
    fn position_of(&self, at: &Located) -> Option<usize> {
        let hint = at.hint as usize;
        if self
            .values
            .get(hint)
            .is_some_and(|value| value.key() == &at.key)
        {
            return Some(hint);
        }
        self.find(at.hash, &at.key)
    }

    /// Indexes every value again, in a table with two to four slots for each.
    fn rebuild_index(&mut self, hasher: &impl BuildHasher) {
        self.index = PositionIndex::NONE;
        if self.values.is_empty() {
            return;
        }
        let mut index = PositionIndex::with_room_for(self.values.len());
        for (position, value) in self.values.iter().enumerate() {
            index.insert(hasher.hash_one(value.key()), position);
        }
        self.index = index;
    }
}

/// Values keyed by info hash, in [`PARTITIONS`] tables.
#[derive(Debug)]
pub(crate) struct Partitions<T> {
    parts: Box<[Partition<T>]>,
    hasher: DefaultHashBuilder,
    len: usize,
}

impl<T> Default for Partitions<T> {
    fn default() -> Self {
        Self {
            parts: (0..PARTITIONS).map(|_| Partition::default()).collect(),
            hasher: DefaultHashBuilder::default(),
            len: 0,
        }
    }
}

impl<T: Keyed> Partitions<T> {
    /// Number of values.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// `key` with its hash, which picks its partition and its index slot.
    pub(crate) fn locate(&self, key: &InfoHash) -> Located {
        Located {
            key: *key,
            hash: self.hasher.hash_one(key),
            hint: NO_HINT,
            peer_hint: NO_HINT,
        }
    }

    fn part(&self, at: &Located) -> &Partition<T> {
        &self.parts[at.part()]
    }

    /// The value of `key`.
    pub(crate) fn get(&self, key: &InfoHash) -> Option<&T> {
        self.get_at(&self.locate(key))
    }

    /// The value of a located key.
    pub(crate) fn get_at(&self, at: &Located) -> Option<&T> {
        let part = self.part(at);
        part.position_of(at).map(|position| &part.values[position])
    }

    /// Starts fetching the index slot a located key is probed at first (see
    /// [`prefetch`](crate::prefetch)); its address is known without reading memory.
    pub(crate) fn prefetch_slot(&self, at: &Located) {
        self.part(at).index.prefetch(at.hash);
    }

    /// Starts fetching the value of a located key, reading the index slots only (best
    /// after [`prefetch_slot`](Self::prefetch_slot) had time to bring them in). The
    /// first entry whose tag matches is taken, so a tag shared with another key costs a
    /// wasted fetch, never a wrong answer. Its position becomes the located key's hint,
    /// checked by every later lookup with it.
    pub(crate) fn prefetch_value(&self, at: &mut Located) {
        let part = self.part(at);
        let Some(position) = part.index.find(at.hash, |_| true) else {
            return;
        };
        if let Some(value) = part.values.get(position) {
            crate::prefetch::prefetch(value, 2);
            at.hint = position as u32;
        }
    }

    /// The value of `key`, mutably.
    pub(crate) fn get_mut(&mut self, key: &InfoHash) -> Option<&mut T> {
        self.get_mut_at(&self.locate(key))
    }

    /// The value of a located key, mutably.
    pub(crate) fn get_mut_at(&mut self, at: &Located) -> Option<&mut T> {
        let part = &mut self.parts[at.part()];
        let position = part.position_of(at)?;
        Some(&mut part.values[position])
    }

    /// The value of `key`, inserted with `make` if missing and `may_insert` allows;
    /// `None` when it is missing and may not be inserted.
    pub(crate) fn get_or_insert(
        &mut self,
        key: &InfoHash,
        may_insert: bool,
        make: impl FnOnce(InfoHash) -> T,
    ) -> Option<&mut T> {
        self.get_or_insert_at(&self.locate(key), may_insert, make)
    }

    /// The value of a located key, inserted with `make` (given the key, which the value
    /// must carry) if missing and `may_insert` allows; `None` when it is missing and may
    /// not be inserted.
    pub(crate) fn get_or_insert_at(
        &mut self,
        at: &Located,
        may_insert: bool,
        make: impl FnOnce(InfoHash) -> T,
    ) -> Option<&mut T> {
        let part = &mut self.parts[at.part()];
        if let Some(position) = part.position_of(at) {
            return Some(&mut part.values[position]);
        }
        if !may_insert {
            return None;
        }
        let position = part.values.len();
        if position == part.values.capacity() {
            part.values.reserve_exact(growth(position));
        }
        let value = make(at.key);
        assert!(
            value.key() == &at.key,
            "a value carries the key it is stored under"
        );
        part.values.push(value);
        if part.values.len() <= part.index.room() {
            part.index.insert(at.hash, position);
        } else {
            part.rebuild_index(&self.hasher);
        }
        self.len += 1;
        Some(&mut part.values[position])
    }

    /// Removes the value of a located key and returns it: the partition's last value
    /// takes its place.
    pub(crate) fn remove_at(&mut self, at: &Located) -> Option<T> {
        let hasher = &self.hasher;
        let part = &mut self.parts[at.part()];
        let position = part.position_of(at)?;
        let last = part.values.len() - 1;
        if position != last {
            let moved = hasher.hash_one(part.values[last].key());
            part.index.swap(at.hash, position, moved, last);
            part.values.swap(position, last);
        }
        let values = &part.values;
        part.index
            .remove(at.hash, last, |p| hasher.hash_one(values[p].key()));
        let value = part.values.pop();
        self.len -= 1;
        if part.values.is_empty() {
            part.index = PositionIndex::NONE;
        }
        value
    }

    /// Keeps only the values of partition `part` for which `keep` says so, and gives
    /// memory back when the partition shrank a lot.
    pub(crate) fn retain_part(
        &mut self,
        part: usize,
        mut keep: impl FnMut(&InfoHash, &mut T) -> bool,
    ) {
        let part = &mut self.parts[part];
        let before = part.values.len();
        part.values.retain_mut(|value| {
            let key = *value.key();
            keep(&key, value)
        });
        let removed = before - part.values.len();
        if removed == 0 {
            return;
        }
        self.len -= removed;
        if part.values.capacity() > 2 * part.values.len() + 16 {
            part.values.shrink_to_fit();
        }
        // The values that stay moved up over the gaps: index them again (a few
        // hundred keys per partition at a million torrents, microseconds).
        part.rebuild_index(&self.hasher);
    }

    /// The keys and values of partition `part`.
    pub(crate) fn iter_part(&self, part: usize) -> impl Iterator<Item = (&InfoHash, &T)> {
        self.parts[part]
            .values
            .iter()
            .map(|value| (value.key(), value))
    }

    /// Every key and value.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&InfoHash, &T)> {
        (0..PARTITIONS).flat_map(|part| self.iter_part(part))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A number stored under an info hash.
    #[derive(Debug, PartialEq)]
    struct Numbered {
        key: InfoHash,
        number: u32,
    }

    impl Keyed for Numbered {
        fn key(&self) -> &InfoHash {
            &self.key
        }
    }

    fn zero(key: InfoHash) -> Numbered {
        Numbered { key, number: 0 }
    }

    fn number(value: Option<&Numbered>) -> Option<u32> {
        value.map(|value| value.number)
    }

    #[test]
    fn values_spread_over_the_partitions_and_are_found_again() {
        let mut map = Partitions::default();
        // About 80 per partition on average.
        let count = 80 * PARTITIONS as u32;
        for i in 0..count {
            let mut key = [0u8; 20];
            // Chosen keys: only the first bytes vary, as an attacker might send.
            key[..4].copy_from_slice(&i.to_be_bytes());
            map.get_or_insert(&key, true, zero).unwrap().number += i;
        }
        assert_eq!(map.len(), count as usize);
        let sizes: Vec<usize> = map.parts.iter().map(|part| part.values.len()).collect();
        assert!(sizes.iter().all(|&n| (30..150).contains(&n)), "{sizes:?}");
        let mut key = [0u8; 20];
        key[..4].copy_from_slice(&77u32.to_be_bytes());
        assert_eq!(number(map.get(&key)), Some(77));
        assert!(map.get_or_insert(&[9; 20], false, zero).is_none());
        assert_eq!(map.len(), count as usize);
    }

    #[test]
    fn removed_values_are_gone_and_the_others_still_found() {
        let mut map = Partitions::default();
        let key_of = |i: u32| {
            let mut key = [0u8; 20];
            key[..4].copy_from_slice(&i.to_be_bytes());
            key
        };
        // Enough per partition for an index with collisions.
        let count = 40 * PARTITIONS as u32;
        for i in 0..count {
            map.get_or_insert(&key_of(i), true, zero).unwrap().number = i;
        }
        for i in (0..count).step_by(3) {
            let removed = map.remove_at(&map.locate(&key_of(i)));
            assert_eq!(number(removed.as_ref()), Some(i));
            assert!(map.remove_at(&map.locate(&key_of(i))).is_none());
        }
        assert_eq!(map.len(), count as usize - (count as usize).div_ceil(3));
        for i in 0..count {
            let expected = (i % 3 != 0).then_some(i);
            assert_eq!(number(map.get(&key_of(i))), expected, "key {i}");
        }
    }

    #[test]
    fn a_wrong_hint_changes_no_answer() {
        let mut map = Partitions::default();
        let key_of = |i: u32| {
            let mut key = [0u8; 20];
            key[..4].copy_from_slice(&i.to_be_bytes());
            key
        };
        for i in 0..5_000u32 {
            map.get_or_insert(&key_of(i), true, zero).unwrap().number = i;
        }
        // Hints at other keys' places, past the end and none, for keys that are there
        // and one that is not.
        for i in (0..5_000u32).step_by(7).chain([9_999]) {
            let key = key_of(i);
            let expected = (i < 5_000).then_some(i);
            for hint in [0, 1, 3, 200, 4_999, NO_HINT - 1, NO_HINT] {
                let mut at = map.locate(&key);
                at.hint = hint;
                assert_eq!(number(map.get_at(&at)), expected);
                assert_eq!(number(map.get_mut_at(&at).map(|v| &*v)), expected);
                let found = map.get_or_insert_at(&at, false, zero);
                assert_eq!(number(found.map(|v| &*v)), expected);
            }
            // And the hint the prefetch leaves.
            let mut at = map.locate(&key);
            map.prefetch_value(&mut at);
            assert_eq!(number(map.get_at(&at)), expected);
        }
        assert_eq!(map.len(), 5_000);
    }

    #[test]
    fn retaining_a_partition_touches_only_it() {
        let mut map = Partitions::default();
        for i in 0..5_000u32 {
            let mut key = [0u8; 20];
            key[..4].copy_from_slice(&i.to_be_bytes());
            map.get_or_insert(&key, true, zero);
        }
        let first = map.parts[0].values.len();
        let mut visited = 0;
        map.retain_part(0, |_, _| {
            visited += 1;
            false
        });
        assert_eq!(visited, first);
        assert_eq!(map.len(), 5_000 - first);
        assert_eq!(map.parts[0].values.len(), 0);
        assert!(!map.parts[0].index.is_some());
    }

    #[test]
    fn inserts_and_cleanings_keep_every_value_findable() {
        use std::collections::HashMap;

        use rand::rngs::SmallRng;
        use rand::{RngExt, SeedableRng};

        // Few partitions used heavily: keys that differ in one byte, grown past
        // several index rebuilds, then partitions retained at random.
        let mut rng = SmallRng::seed_from_u64(15);
        let mut map = Partitions::default();
        let mut model: HashMap<InfoHash, u32> = HashMap::new();
        for round in 0..40u32 {
            for _ in 0..2_000 {
                let mut key = [0u8; 20];
                key[..3].copy_from_slice(&rng.random_range(0..60_000u32).to_be_bytes()[1..]);
                let value = rng.random::<u32>();
                map.get_or_insert(&key, true, zero).unwrap().number = value;
                model.insert(key, value);
            }
            for part in 0..PARTITIONS {
                if rng.random_bool(0.3) {
                    let drop_odd = round % 2 == 0;
                    map.retain_part(part, |key, value| {
                        let keep = (value.number % 2 == 1) != drop_odd;
                        if !keep {
                            model.remove(key);
                        }
                        keep
                    });
                }
            }
            assert_eq!(map.len(), model.len());
            for (key, value) in &model {
                assert_eq!(number(map.get(key)), Some(*value));
                let mut at = map.locate(key);
                assert_eq!(at.info_hash(), key);
                map.prefetch_slot(&at);
                map.prefetch_value(&mut at);
                assert_eq!(number(map.get_at(&at)), Some(*value));
            }
            let missing = [0xff; 20];
            assert_eq!(map.get(&missing), None);
            assert!(map.get_or_insert(&missing, false, zero).is_none());
        }
        assert_eq!(map.iter().count(), model.len());
    }
}
