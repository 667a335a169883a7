//! Torrents in partitions, so that cleaning can go one partition at a time.
//!
//! A swarm worker must not stop answering while it cleans a map of millions of
//! torrents. The map is split into [`PARTITIONS`] hash tables by the top bits of a
//! keyed hash of the info hash; a cleaning step walks one partition, and a pass is
//! [`PARTITIONS`] steps with requests served in between. The hash is keyed (random per
//! map) because info hashes are chosen by clients: with the plain bytes, an attacker
//! could put every torrent into one partition and make its step as long as a pass.
//!
//! Each lookup hashes once: the same hash picks the partition and probes its table.

use std::hash::BuildHasher;

use hashbrown::{DefaultHashBuilder, HashTable};

use crate::InfoHash;

/// Partitions per map: a cleaning step walks 1/2048 of the torrents (at 10M peers
/// about 5,000 peers, tens of microseconds; with 256 a step took about 400 µs and
/// showed in the p99.9 reply latency: documents/benchmarks/cleaning-2026-11-23.md).
pub const PARTITIONS: usize = 2048;

/// Values keyed by info hash, in [`PARTITIONS`] tables.
#[derive(Debug)]
pub(crate) struct Partitions<T> {
    tables: Box<[HashTable<(InfoHash, T)>]>,
    hasher: DefaultHashBuilder,
    len: usize,
}

impl<T> Default for Partitions<T> {
    fn default() -> Self {
        Self {
            tables: (0..PARTITIONS).map(|_| HashTable::new()).collect(),
            hasher: DefaultHashBuilder::default(),
            len: 0,
        }
    }
}

impl<T> Partitions<T> {
    /// Number of values.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn locate(&self, key: &InfoHash) -> (u64, usize) {
        let hash = self.hasher.hash_one(key);
        // hashbrown probes with the low bits and tags with the top 7; the partition
        // takes the 8 bits below those.
        (hash, ((hash >> 49) as usize) % PARTITIONS)
    }

    /// The value of `key`.
    pub(crate) fn get(&self, key: &InfoHash) -> Option<&T> {
        let (hash, part) = self.locate(key);
        self.tables[part]
            .find(hash, |(k, _)| k == key)
            .map(|(_, value)| value)
    }

    /// Starts fetching the slot `key` is in, for a lookup soon after (see
    /// [`prefetch`](crate::prefetch)). Only the table's control bytes are read: the
    /// first slot whose tag matches is taken, so a tag shared with another key costs a
    /// wasted fetch, never a wrong answer.
    pub(crate) fn prefetch(&self, key: &InfoHash) {
        let (hash, part) = self.locate(key);
        if let Some(slot) = self.tables[part].find(hash, |_| true) {
            crate::prefetch::prefetch(slot, 2);
        }
    }

    /// The value of `key`, mutably.
    pub(crate) fn get_mut(&mut self, key: &InfoHash) -> Option<&mut T> {
        let (hash, part) = self.locate(key);
        self.tables[part]
            .find_mut(hash, |(k, _)| k == key)
            .map(|(_, value)| value)
    }

    /// The value of `key`, inserted with `make` if missing and `may_insert` allows;
    /// `None` when it is missing and may not be inserted.
    pub(crate) fn get_or_insert(
        &mut self,
        key: &InfoHash,
        may_insert: bool,
        make: impl FnOnce() -> T,
    ) -> Option<&mut T> {
        let (hash, part) = self.locate(key);
        let hasher = &self.hasher;
        let table = &mut self.tables[part];
        match table.entry(hash, |(k, _)| k == key, |(k, _)| hasher.hash_one(k)) {
            hashbrown::hash_table::Entry::Occupied(entry) => Some(&mut entry.into_mut().1),
            hashbrown::hash_table::Entry::Vacant(entry) if may_insert => {
                self.len += 1;
                Some(&mut entry.insert((*key, make())).into_mut().1)
            }
            hashbrown::hash_table::Entry::Vacant(_) => None,
        }
    }

    /// Keeps only the values of partition `part` for which `keep` says so, and gives
    /// memory back when the partition shrank a lot.
    pub(crate) fn retain_part(
        &mut self,
        part: usize,
        mut keep: impl FnMut(&InfoHash, &mut T) -> bool,
    ) {
        let table = &mut self.tables[part];
        let before = table.len();
        table.retain(|(key, value)| keep(key, value));
        self.len -= before - table.len();
        if table.capacity() > 2 * table.len() + 16 {
            let hasher = &self.hasher;
            table.shrink_to_fit(|(k, _)| hasher.hash_one(k));
        }
    }

    /// The keys and values of partition `part`.
    pub(crate) fn iter_part(&self, part: usize) -> impl Iterator<Item = (&InfoHash, &T)> {
        self.tables[part].iter().map(|(key, value)| (key, value))
    }

    /// Every key and value.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&InfoHash, &T)> {
        self.tables
            .iter()
            .flat_map(|table| table.iter().map(|(key, value)| (key, value)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_spread_over_the_partitions_and_are_found_again() {
        let mut map = Partitions::default();
        // About 80 per partition on average.
        let count = 80 * PARTITIONS as u32;
        for i in 0..count {
            let mut key = [0u8; 20];
            // Chosen keys: only the first bytes vary, as an attacker might send.
            key[..4].copy_from_slice(&i.to_be_bytes());
            *map.get_or_insert(&key, true, || 0).unwrap() += i;
        }
        assert_eq!(map.len(), count as usize);
        let sizes: Vec<usize> = map.tables.iter().map(HashTable::len).collect();
        assert!(sizes.iter().all(|&n| (30..150).contains(&n)), "{sizes:?}");
        let mut key = [0u8; 20];
        key[..4].copy_from_slice(&77u32.to_be_bytes());
        assert_eq!(map.get(&key), Some(&77));
        assert!(map.get_or_insert(&[9; 20], false, || 0).is_none());
        assert_eq!(map.len(), count as usize);
    }

    #[test]
    fn retaining_a_partition_touches_only_it() {
        let mut map = Partitions::default();
        for i in 0..5_000u32 {
            let mut key = [0u8; 20];
            key[..4].copy_from_slice(&i.to_be_bytes());
            map.get_or_insert(&key, true, || ());
        }
        let first = map.tables[0].len();
        let mut visited = 0;
        map.retain_part(0, |_, _| {
            visited += 1;
            false
        });
        assert_eq!(visited, first);
        assert_eq!(map.len(), 5_000 - first);
        assert_eq!(map.tables[0].len(), 0);
    }
}
