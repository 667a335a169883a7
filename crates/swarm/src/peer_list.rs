//! The peers of one torrent and one address family.
//!
//! Peers live in one vector with the seeders first: `peers[..seeders]` are seeders and
//! `peers[seeders..]` leechers. That gives O(1) insert, remove and seeder/leecher
//! changes (by swapping across the boundary), and lets a seeder's reply draw from the
//! leecher slice directly.
//!
//! Most swarms are small, and a linear scan over a few dozen 12-byte records is faster
//! than hashing and costs no memory. Once a list grows past [`INDEX_FROM`] peers it
//! gets a hash index (address → position), kept in step by every move, and drops it
//! again below [`INDEX_UNTIL`].

use std::hash::BuildHasher;

use hashbrown::HashTable;
use rand::Rng;

use crate::peer::{Peer, PeerAddr};
use crate::selection;
use crate::time::ServerTime;

/// Lists with more peers than this get a hash index.
pub const INDEX_FROM: usize = 32;
/// Indexed lists that shrink below this many peers drop their index.
pub const INDEX_UNTIL: usize = 16;

/// The peers of one torrent in one address family, seeders first.
#[derive(Debug)]
pub struct PeerList<A, X> {
    peers: Vec<Peer<A, X>>,
    seeders: u32,
    /// Position of each peer by address; present only for large lists.
    index: Option<Box<HashTable<u32>>>,
}

impl<A, X> Default for PeerList<A, X> {
    fn default() -> Self {
        Self {
            peers: Vec::new(),
            seeders: 0,
            index: None,
        }
    }
}

impl<A: PeerAddr, X> PeerList<A, X> {
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
    pub fn peers(&self) -> &[Peer<A, X>] {
        &self.peers
    }

    /// Whether the peer at `position` is a seeder.
    pub fn is_seeder_at(&self, position: usize) -> bool {
        position < self.seeders as usize
    }

    /// Heap bytes held by this list (for memory statistics).
    pub fn heap_bytes(&self) -> usize {
        let index = self.index.as_ref().map_or(0, |index| {
            size_of::<HashTable<u32>>() + index.allocation_size()
        });
        self.peers.capacity() * size_of::<Peer<A, X>>() + index
    }

    /// The position of the peer with address `addr`.
    pub fn find(&self, addr: &A, hasher: &impl BuildHasher) -> Option<usize> {
        match &self.index {
            Some(index) => index
                .find(hasher.hash_one(addr), |&pos| {
                    self.peers[pos as usize].addr == *addr
                })
                .map(|&pos| pos as usize),
            None => self.peers.iter().position(|peer| peer.addr == *addr),
        }
    }

    /// The peer at `position`, mutably (for refreshing its expiry and extra data; its
    /// address must not change).
    pub fn get_mut(&mut self, position: usize) -> &mut Peer<A, X> {
        &mut self.peers[position]
    }

    /// Adds a peer whose address is not in the list yet; returns its position.
    pub fn insert(&mut self, peer: Peer<A, X>, seeder: bool, hasher: &impl BuildHasher) -> usize {
        debug_assert!(self.find(&peer.addr, hasher).is_none(), "duplicate peer");
        let position = self.peers.len();
        if position == self.peers.capacity() {
            // Grow by half rather than double: most swarms are small and stay so, and
            // doubling would leave a quarter of all peer memory empty on average.
            self.peers.reserve_exact((position / 2).max(1));
        }
        self.peers.push(peer);
        if let Some(index) = &mut self.index {
            let peers = &self.peers;
            index.insert_unique(
                hasher.hash_one(peer_addr(peers, position)),
                position as u32,
                |&p| hasher.hash_one(peer_addr(peers, p as usize)),
            );
        } else if self.peers.len() > INDEX_FROM {
            self.build_index(hasher);
        }
        if seeder {
            self.make_seeder(position, hasher)
        } else {
            position
        }
    }

    /// Removes the peer at `position` and returns it.
    pub fn remove(&mut self, position: usize, hasher: &impl BuildHasher) -> Peer<A, X> {
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
        if let Some(index) = &mut self.index {
            let hash = hasher.hash_one(peer_addr(&self.peers, last));
            if let Ok(entry) = index.find_entry(hash, |&p| p as usize == last) {
                entry.remove();
            }
        }
        let peer = self.peers.pop().expect("position was in bounds");
        if self.index.is_some() && self.peers.len() < INDEX_UNTIL {
            self.index = None;
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

    /// Removes every peer whose expiry is not after `now`; returns how many went.
    pub fn remove_expired(&mut self, now: ServerTime, hasher: &impl BuildHasher) -> usize {
        let before = self.peers.len();
        let seeders = self.seeders as usize;
        let mut position = 0;
        let mut seeders_kept = 0;
        // `retain` keeps order, so the seeders-first partition survives.
        self.peers.retain(|peer| {
            let keep = peer.expires > now;
            if keep && position < seeders {
                seeders_kept += 1;
            }
            position += 1;
            keep
        });
        let removed = before - self.peers.len();
        if removed > 0 {
            self.seeders = seeders_kept;
            self.index = None;
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

    /// Calls `emit` for up to `max` peers chosen at random, never the one at
    /// `exclude`, never expired ones. A seeder (`for_seeder`) is given only leechers
    /// when there are any, since seeders have nothing to give each other.
    pub fn select(
        &self,
        exclude: Option<usize>,
        for_seeder: bool,
        max: usize,
        now: ServerTime,
        rng: &mut impl Rng,
        mut emit: impl FnMut(&Peer<A, X>),
    ) {
        let start = if for_seeder && self.leechers() > 0 {
            self.seeders as usize
        } else {
            0
        };
        let candidates = &self.peers[start..];
        let exclude = exclude.and_then(|position| position.checked_sub(start));
        selection::sample(candidates.len(), exclude, max, rng, |offset| {
            let peer = &candidates[offset];
            let live = peer.expires > now;
            if live {
                emit(peer);
            }
            live
        });
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
        if let Some(index) = &mut self.index {
            let bucket_a = index
                .find_bucket_index(hasher.hash_one(peer_addr(&self.peers, a)), |&p| {
                    p as usize == a
                })
                .expect("indexed peer");
            let bucket_b = index
                .find_bucket_index(hasher.hash_one(peer_addr(&self.peers, b)), |&p| {
                    p as usize == b
                })
                .expect("indexed peer");
            *index.get_bucket_mut(bucket_a).expect("bucket") = b as u32;
            *index.get_bucket_mut(bucket_b).expect("bucket") = a as u32;
        }
        self.peers.swap(a, b);
    }

    fn build_index(&mut self, hasher: &impl BuildHasher) {
        let peers = &self.peers;
        let mut index = HashTable::with_capacity(peers.len() * 2);
        for position in 0..peers.len() {
            index.insert_unique(
                hasher.hash_one(peer_addr(peers, position)),
                position as u32,
                |&p| hasher.hash_one(peer_addr(peers, p as usize)),
            );
        }
        self.index = Some(Box::new(index));
    }

    /// Checks the invariants (tests only): partition bounds and index consistency.
    #[cfg(test)]
    pub(crate) fn assert_consistent(&self, hasher: &impl BuildHasher) {
        assert!(self.seeders as usize <= self.peers.len());
        if let Some(index) = &self.index {
            assert_eq!(index.len(), self.peers.len());
        }
        for (position, peer) in self.peers.iter().enumerate() {
            assert_eq!(self.find(&peer.addr, hasher), Some(position));
        }
    }
}

fn peer_addr<A, X>(peers: &[Peer<A, X>], position: usize) -> &A {
    &peers[position].addr
}
