//! A map read on every announce and changed now and then: split in [`SHARDS`] parts,
//! each read without a lock and replaced whole (copied, changed, swapped) when one of
//! its entries changes.
//!
//! One map swapped whole would make a change to one user of a million copy all of
//! them (tens of milliseconds and a second copy's memory); a lock per part would make
//! every read write to a shared cache line. Here a read is one `ArcSwap` load and one
//! lookup, and a change copies one part: at a million entries, about 31,000.
//!
//! Why 32 parts: each part's table header is one more cache line a lookup needs. With
//! 256 parts per table those lines fell out of the caches under a million random
//! lookups, and private-mode announces lost 8% against public mode
//! (documents/benchmarks/private-2026-11-27.md); 32 stay cached.

use std::hash::{BuildHasher, Hash};
use std::sync::Arc;

use arc_swap::ArcSwap;
use hashbrown::HashMap;

/// Parts per map (see the module's notes for why 32).
pub(crate) const SHARDS: usize = 32;

/// A map in [`SHARDS`] parts swapped whole. Writes must not run concurrently (their
/// owner serializes them; see `Registry`): two at once could each copy a part and one
/// of the changes would be lost.
pub(crate) struct CowShards<K, V, S> {
    shards: Box<[ArcSwap<HashMap<K, V, S>>]>,
    build: S,
}

impl<K, V, S> std::fmt::Debug for CowShards<K, V, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CowShards").finish_non_exhaustive()
    }
}

impl<K, V, S> CowShards<K, V, S>
where
    K: Eq + Hash + Clone,
    V: Copy,
    S: BuildHasher + Clone,
{
    /// `map`'s entries, split by the map's own hasher.
    pub(crate) fn from_map(map: HashMap<K, V, S>) -> Self {
        let build = map.hasher().clone();
        let mut parts: Vec<HashMap<K, V, S>> = (0..SHARDS)
            .map(|_| HashMap::with_hasher(build.clone()))
            .collect();
        for (key, value) in map {
            parts[shard_index(&build, &key)].insert(key, value);
        }
        Self {
            shards: parts.into_iter().map(ArcSwap::from_pointee).collect(),
            build,
        }
    }

    /// The value of `key`.
    pub(crate) fn get(&self, key: &K) -> Option<V> {
        self.shards[shard_index(&self.build, key)]
            .load()
            .get(key)
            .copied()
    }

    /// Whether `key` has a value.
    pub(crate) fn contains(&self, key: &K) -> bool {
        self.shards[shard_index(&self.build, key)]
            .load()
            .contains_key(key)
    }

    /// Entries, over every part.
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|shard| shard.load().len()).sum()
    }

    /// Sets `key` to `value`, returning the value it had. Serialized by the caller.
    pub(crate) fn insert(&self, key: K, value: V) -> Option<V> {
        self.change(&key.clone(), |map| map.insert(key, value))
    }

    /// Takes `key` out, returning the value it had. Serialized by the caller.
    pub(crate) fn remove(&self, key: &K) -> Option<V> {
        let shard = &self.shards[shard_index(&self.build, key)];
        if !shard.load().contains_key(key) {
            return None;
        }
        self.change(key, |map| map.remove(key))
    }

    /// Replaces every part with `other`'s. Readers see each part old or new; a key
    /// stays in its part, since both maps split by the same hasher (`other` must
    /// have been made from a map with a clone of this one's hasher).
    pub(crate) fn replace_with(&self, other: Self) {
        for (mine, theirs) in self.shards.iter().zip(other.shards.into_vec()) {
            mine.store(theirs.into_inner());
        }
    }

    /// A map with this one's hasher, for building a replacement.
    pub(crate) fn empty_map(&self) -> HashMap<K, V, S> {
        HashMap::with_hasher(self.build.clone())
    }

    fn change<R>(&self, key: &K, edit: impl FnOnce(&mut HashMap<K, V, S>) -> R) -> R {
        let shard = &self.shards[shard_index(&self.build, key)];
        let mut copy = HashMap::clone(&shard.load());
        let result = edit(&mut copy);
        shard.store(Arc::new(copy));
        result
    }
}

/// The part `key` lives in: bits of its hash that hashbrown uses for neither the
/// bucket (the low bits) nor the tag (the top seven), so each part's table stays as
/// well spread as a whole one.
fn shard_index<K: Hash, S: BuildHasher>(build: &S, key: &K) -> usize {
    (build.hash_one(key) >> 32) as usize % SHARDS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_are_seen_and_a_replacement_keeps_every_key_findable() {
        let map: HashMap<u32, u32> = (0..10_000).map(|n| (n, n * 2)).collect();
        let shards = CowShards::from_map(map);
        assert_eq!(shards.len(), 10_000);
        assert_eq!(shards.get(&77), Some(154));
        assert_eq!(shards.insert(77, 1), Some(154));
        assert_eq!(shards.insert(20_000, 5), None);
        assert_eq!((shards.get(&77), shards.get(&20_000)), (Some(1), Some(5)));
        assert_eq!(shards.remove(&77), Some(1));
        assert_eq!(shards.remove(&77), None);
        assert!(!shards.contains(&77));
        let mut next = shards.empty_map();
        next.extend((0..100).map(|n| (n, n + 1)));
        shards.replace_with(CowShards::from_map(next));
        assert_eq!(shards.len(), 100);
        assert!((0..100).all(|n| shards.get(&n) == Some(n + 1)));
        assert_eq!(shards.get(&20_000), None);
    }

    #[test]
    fn entries_spread_over_the_parts() {
        let map: HashMap<u32, ()> = (0..SHARDS as u32 * 64).map(|n| (n, ())).collect();
        let shards = CowShards::from_map(map);
        let largest = shards.shards.iter().map(|s| s.load().len()).max().unwrap();
        assert!(largest < 64 * 2, "largest part {largest}");
    }
}
