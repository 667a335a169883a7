//! The peers of one torrent (of one address family, for BitTorrent).
//!
//! Peers live in one vector with the seeders first: `peers[..seeders]` are seeders and
//! `peers[seeders..]` leechers. That gives O(1) insert, remove and seeder/leecher
//! changes (by swapping across the boundary), and lets a seeder's reply draw from the
//! leecher slice directly.
//!
//! Most swarms are small, and a linear scan over a few dozen 10-byte records is faster
//! than hashing and costs no memory. Once a list grows past [`INDEX_FROM`] peers it
//! gets a hash index (key → position, `PositionIndex`), kept in step by every move, and
//! drops it again below [`INDEX_UNTIL`].

use std::hash::BuildHasher;

use rand::Rng;

use crate::peer::{Peer, PeerData, PeerKey};
use crate::position_index::PositionIndex;
use crate::selection;
use crate::time::ServerTime;

/// Bytes in a cache line of the processors shoal runs on (x86-64 and most ARM64).
const CACHE_LINE: usize = 64;

/// Lists with more peers than this get a hash index.
pub(crate) const INDEX_FROM: usize = 32;
/// Indexed lists that shrink below this many peers drop their index.
pub(crate) const INDEX_UNTIL: usize = 16;

/// How many slots a full list of `len` peers grows by: an eighth (at least one).
///
/// Most swarms are small and stay so: doubling would leave a quarter of all peer
/// memory empty on average, growing by half a sixth. An eighth leaves about 6%, at one
/// reallocation per new peer while a list is under 8 (a new peer, not a re-announce:
/// the allocator usually grows a small block in place).
fn growth(len: usize) -> usize {
    (len / 8).max(1)
}

/// The peers of one torrent (in one address family), seeders first.
#[derive(Debug)]
pub struct PeerList<K, X> {
    peers: Vec<Peer<K, X>>,
    seeders: u32,
    /// Position of each peer by key; a table only for large lists.
    index: PositionIndex,
}

impl<K, X> Default for PeerList<K, X> {
    fn default() -> Self {
        Self {
            peers: Vec::new(),
            seeders: 0,
            index: PositionIndex::NONE,
        }
    }
}

impl<K: PeerKey, X: PeerData> PeerList<K, X> {
    /// Number of peers.
    pub fn len(&self) -> usize {
        self.peers.len()
    }

    /// Whether the list has no peers.
    pub fn is_empty(&self) -> bool {
        self.peers.is_empty()
    }

    /// Number of seeders.
    pub fn seeders(&self) -> u32 {
        self.seeders
    }

    /// Number of leechers.
    pub fn leechers(&self) -> u32 {
        self.peers.len() as u32 - self.seeders
    }

    /// All peers, seeders first.
    pub fn peers(&self) -> &[Peer<K, X>] {
        &self.peers
    }

    /// Whether the peer at `position` is a seeder.
    pub fn is_seeder_at(&self, position: usize) -> bool {
        position < self.seeders as usize
    }

    /// The position of the peer known by `key`, trying `hint` first (a position
    /// [`prefetch`](Self::prefetch) returned; any position, or none, gives the same
    /// answer, a right one without hashing the key or reading the index).
    pub fn find_hinted(
        &self,
        key: &K,
        hint: Option<usize>,
        hasher: &impl BuildHasher,
    ) -> Option<usize> {
        match hint {
            Some(position) if self.peers.get(position).is_some_and(|p| p.key() == key) => {
                Some(position)
            }
            _ => self.find(key, hasher),
        }
    }

    /// The position of the peer known by `key`.
    pub fn find(&self, key: &K, hasher: &impl BuildHasher) -> Option<usize> {
        if self.index.is_some() {
            let peers = &self.peers;
            self.index.find(hasher.hash_one(key), |position| {
                peers[position].key() == key
            })
        } else {
            self.peers.iter().position(|peer| peer.key() == key)
        }
    }

    /// Starts fetching what [`find`](Self::find) for `key` reads, in two steps (see
    /// [`TorrentMap::prefetch_announce`](crate::TorrentMap::prefetch_announce)).
    ///
    /// Without an index, `find` and [`select`](Self::select) read the first peers:
    /// step 0 fetches them and step 1 has nothing left to do. With one, the peers
    /// are too many to fetch and are read where the index points: step 0 fetches
    /// the index slot `key` is probed at, step 1 the peer that slot names, and
    /// returns its position: probably `key`'s, a hint for
    /// [`find_hinted`](Self::find_hinted).
    pub fn prefetch(&self, step: usize, key: &K, hasher: &impl BuildHasher) -> Option<usize> {
        if !self.index.is_some() {
            if step == 0 {
                crate::prefetch::prefetch_bytes(
                    self.peers.as_ptr().cast(),
                    self.peers.len() * size_of::<Peer<K, X>>(),
                    2,
                );
            }
            return None;
        }
        let hash = hasher.hash_one(key);
        if step == 0 {
            self.index.prefetch(hash);
            return None;
        }
        let position = self.index.find(hash, |_| true)?;
        crate::prefetch::prefetch(self.peers.get(position)?, 1);
        Some(position)
    }

    /// The peer at `position`, mutably (its key cannot change).
    pub fn get_mut(&mut self, position: usize) -> &mut Peer<K, X> {
        &mut self.peers[position]
    }

    /// Adds a peer whose key is not in the list yet; returns its position.
    pub fn insert(&mut self, peer: Peer<K, X>, seeder: bool, hasher: &impl BuildHasher) -> usize {
        debug_assert!(self.find(peer.key(), hasher).is_none(), "duplicate peer");
        let position = self.peers.len();
        if position == self.peers.capacity() {
            self.peers.reserve_exact(growth(position));
        }
        self.peers.push(peer);
        if self.index.is_some() && self.peers.len() <= self.index.room() {
            self.index
                .insert(hasher.hash_one(peer_key(&self.peers, position)), position);
        } else if self.peers.len() > INDEX_FROM {
            // A new index, or a full one rebuilt with two to four slots per peer.
            self.build_index(hasher);
        }
        if seeder {
            self.make_seeder(position, hasher)
        } else {
            position
        }
    }

    /// Removes the peer at `position` and returns it.
    pub fn remove(&mut self, position: usize, hasher: &impl BuildHasher) -> Peer<K, X> {
        let mut position = position;
        if self.is_seeder_at(position) {
            // Move it to the boundary and shrink the seeder region over it.
            let last_seeder = self.seeders as usize - 1;
            self.swap(position, last_seeder, hasher);
            self.seeders -= 1;
            position = last_seeder;
        }
        // Now in the leecher region: swap with the last peer (a leecher) and pop.
        let last = self.peers.len() - 1;
        self.swap(position, last, hasher);
        if self.index.is_some() {
            let peers = &self.peers;
            self.index
                .remove(hasher.hash_one(peer_key(peers, last)), last, |p| {
                    hasher.hash_one(peer_key(peers, p))
                });
        }
        let peer = self.peers.pop().expect("position was in bounds");
        if self.index.is_some() && self.peers.len() < INDEX_UNTIL {
            self.index = PositionIndex::NONE;
        }
        peer
    }

    /// Marks the peer at `position` a seeder or leecher; returns its new position.
    pub fn set_seeder(
        &mut self,
        position: usize,
        seeder: bool,
        hasher: &impl BuildHasher,
    ) -> usize {
        match (self.is_seeder_at(position), seeder) {
            (false, true) => self.make_seeder(position, hasher),
            (true, false) => {
                let last_seeder = self.seeders as usize - 1;
                self.swap(position, last_seeder, hasher);
                self.seeders -= 1;
                last_seeder
            }
            _ => position,
        }
    }

    /// Removes every peer whose expiry is not after `now` and tidies the data of the
    /// others ([`PeerData::tidy`]); returns how many went.
    pub fn remove_expired(&mut self, now: ServerTime, hasher: &impl BuildHasher) -> usize {
        let before = self.peers.len();
        let seeders = self.seeders as usize;
        let mut position = 0;
        let mut seeders_kept = 0;
        // `retain` keeps order, so the seeders-first partition survives.
        self.peers.retain_mut(|peer| {
            let keep = peer.expires() > now;
            if keep {
                peer.extra.tidy(now);
                if position < seeders {
                    seeders_kept += 1;
                }
            }
            position += 1;
            keep
        });
        let removed = before - self.peers.len();
        if removed > 0 {
            self.seeders = seeders_kept;
            self.index = PositionIndex::NONE;
            if self.peers.len() > INDEX_FROM {
                self.build_index(hasher);
            }
        }
        // Give memory back after a swarm shrinks a lot.
        if self.peers.capacity() > 2 * self.peers.len() + 4 {
            self.peers.shrink_to_fit();
        }
        removed
    }

    /// As many records as fit in a cache line: peers are chosen in groups of
    /// neighbours this size (see [`selection`]).
    const GROUP: usize = match CACHE_LINE / size_of::<Peer<K, X>>() {
        0 => 1,
        fits => fits,
    };

    /// Calls `emit` for up to `max` peers chosen at random, never the one at
    /// `exclude`, never expired ones. A seeder (`for_seeder`) is given only leechers
    /// when there are any, since seeders have nothing to give each other; with none,
    /// other seeders if [`PeerData::SEEDERS_MEET_SEEDERS`], else nobody.
    ///
    /// `emit` may change the data of the peers it is given (WebTorrent records the
    /// offer it forwards to each), not their keys.
    pub fn select(
        &mut self,
        exclude: Option<usize>,
        for_seeder: bool,
        max: usize,
        now: ServerTime,
        rng: &mut impl Rng,
        mut emit: impl FnMut(&mut Peer<K, X>),
    ) {
        let start = if for_seeder && (self.leechers() > 0 || !X::SEEDERS_MEET_SEEDERS) {
            self.seeders as usize
        } else {
            0
        };
        let candidates = &mut self.peers[start..];
        let exclude = exclude.and_then(|position| position.checked_sub(start));
        // A hint needs only the address (it reads nothing), so `fetch` holds the
        // list's start as a pointer while `take` borrows the list to write.
        let base = candidates.as_ptr();
        let fetch = |first: usize, len: usize| {
            crate::prefetch::prefetch_bytes(
                base.wrapping_add(first).cast(),
                len * size_of::<Peer<K, X>>(),
                2,
            );
        };
        selection::sample(
            candidates.len(),
            exclude,
            max,
            Self::GROUP,
            rng,
            fetch,
            |offset| {
                let peer = &mut candidates[offset];
                let live = peer.expires() > now;
                if live {
                    emit(peer);
                }
                live
            },
        );
    }

    fn make_seeder(&mut self, position: usize, hasher: &impl BuildHasher) -> usize {
        let boundary = self.seeders as usize;
        self.swap(position, boundary, hasher);
        self.seeders += 1;
        boundary
    }

    /// Swaps two positions, keeping the index in step.
    fn swap(&mut self, a: usize, b: usize, hasher: &impl BuildHasher) {
        if a == b {
            return;
        }
        if self.index.is_some() {
            let hash_a = hasher.hash_one(peer_key(&self.peers, a));
            let hash_b = hasher.hash_one(peer_key(&self.peers, b));
            self.index.swap(hash_a, a, hash_b, b);
        }
        self.peers.swap(a, b);
    }

    fn build_index(&mut self, hasher: &impl BuildHasher) {
        let mut index = PositionIndex::with_room_for(self.peers.len());
        for (position, peer) in self.peers.iter().enumerate() {
            index.insert(hasher.hash_one(peer.key()), position);
        }
        self.index = index;
    }

    /// Checks the invariants (tests only): partition bounds and index consistency.
    #[cfg(test)]
    pub(crate) fn assert_consistent(&self, hasher: &impl BuildHasher) {
        assert!(self.seeders as usize <= self.peers.len());
        if self.index.is_some() {
            assert_eq!(self.index.len(), self.peers.len());
        }
        for (position, peer) in self.peers.iter().enumerate() {
            assert_eq!(self.find(peer.key(), hasher), Some(position));
        }
    }
}

fn peer_key<K, X>(peers: &[Peer<K, X>], position: usize) -> &K {
    peers[position].key()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peer::{V4Addr, V6Addr};

    #[test]
    fn any_hint_finds_the_same_peer() {
        use std::net::Ipv4Addr;

        use crate::time::ServerTime;

        let hasher = hashbrown::DefaultHashBuilder::default();
        let key = |i: u16| V4Addr::new(Ipv4Addr::new(10, 0, 0, 1), i);
        // Both kinds of list: scanned, and indexed (past INDEX_FROM peers).
        for len in [5u16, INDEX_FROM as u16 + 20] {
            let mut list = PeerList::<V4Addr, ()>::default();
            for i in 0..len {
                list.insert(Peer::new(key(i), ServerTime(10), ()), i % 3 == 0, &hasher);
            }
            for i in 0..len + 3 {
                let expected = list.find(&key(i), &hasher);
                assert_eq!(expected.is_some(), i < len);
                let prefetched = list.prefetch(1, &key(i), &hasher);
                let hints = [None, Some(0), Some(1), Some(usize::from(len) - 1)];
                for hint in hints.into_iter().chain([Some(usize::MAX), prefetched]) {
                    assert_eq!(list.find_hinted(&key(i), hint, &hasher), expected);
                }
            }
        }
    }

    #[test]
    fn a_list_is_as_small_as_with_a_boxed_index() {
        // A torrent keeps its IPv4 list inline: every byte here is a byte per torrent.
        assert_eq!(size_of::<PeerList<V4Addr, ()>>(), 40);
        assert_eq!(size_of::<PeerList<V6Addr, ()>>(), 40);
    }
}
