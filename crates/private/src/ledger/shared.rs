//! A ledger shared by the nodes of a cluster.
//!
//! A client may announce to several nodes: over IPv4 to one and IPv6 to another (a
//! dual-stack client behind round-robin DNS does, with the same counters at the same
//! moment), to one node and later to another, or to a node's UDP and HTTP trackers.
//! Ledgers kept per node would each credit what they saw: the same bytes twice. So in
//! a cluster the pairs (each user's peer ids per torrent, with their last totals)
//! live in the store, and a node applies its reports as a transaction:
//!
//! 1. load the stored pairs its reports name;
//! 2. apply the reports to them with the same rules as a local ledger ([`Pair`]);
//! 3. store the changed pairs only if none changed since step 1 (one atomic
//!    compare-and-replace in the store); if one did, another node credited
//!    something of them meanwhile: start again from step 1.
//!
//! A delta is credited by the node whose transaction took it, and by no other, so
//! each is in exactly one batch of one node. A node that stops after its transaction
//! and before its batch is written loses those credits (never doubles them), as a
//! local ledger loses what it holds when its process is killed.

#[cfg(test)]
use hashbrown::HashMap;

use super::{Book, Ledger, Pair, Report};

/// Tries of one transaction before its reports wait for the next round (every one
/// lost means another node changed the same pairs in between).
pub const MAX_SHARED_ATTEMPTS: u32 = 8;

/// Where a cluster keeps its ledger's pairs: one value per (user, torrent), in the
/// compact binary form the ledger writes (versioned; see documents/private.md), opaque
/// to the store.
pub trait SharedPairs {
    /// The stored value of each of `keys`, in order (`None`: nothing stored).
    fn load(&mut self, keys: &[(u32, u32)]) -> Result<Vec<Option<Vec<u8>>>, String>;

    /// Stores `new` for `keys` (`None` deletes), each kept `ttl` seconds after its
    /// last change, if and only if every key still holds what `expected` says; all
    /// or nothing. `Ok(false)` when one changed (nothing stored).
    fn replace(
        &mut self,
        keys: &[(u32, u32)],
        expected: &[Option<Vec<u8>>],
        new: &[Option<Vec<u8>>],
        ttl: u64,
    ) -> Result<bool, String>;
}

/// Why reports could not be applied to the shared pairs; they are kept for the next
/// round.
#[derive(Debug, PartialEq, Eq)]
pub enum SharedError {
    /// The store failed or could not be reached.
    Store(String),
    /// Other nodes changed the same pairs at every try.
    Contended,
}

impl std::fmt::Display for SharedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SharedError::Store(problem) => write!(f, "the store failed: {problem}"),
            SharedError::Contended => write!(
                f,
                "other nodes changed the same pairs at each of {MAX_SHARED_ATTEMPTS} tries"
            ),
        }
    }
}

impl Ledger {
    /// Applies `reports` (in order) to the pairs kept in `store` at `now`, as one
    /// transaction (see the module's notes), and adds what they earned to this
    /// ledger's credits. Returns the tries it took.
    pub fn record_shared(
        &mut self,
        reports: &[Report],
        store: &mut dyn SharedPairs,
        now: u64,
    ) -> Result<u32, SharedError> {
        let mut keys: Vec<(u32, u32)> = reports
            .iter()
            .map(|report| (report.user, report.torrent))
            .collect();
        keys.sort_unstable();
        keys.dedup();
        if keys.is_empty() {
            return Ok(0);
        }
        // A peer is forgotten a while after its last announce; the store may keep the
        // pair a little longer, its expired peers are dropped when it is read.
        let ttl = self.peer_timeout.saturating_add(60);
        for attempt in 1..=MAX_SHARED_ATTEMPTS {
            let stored = store.load(&keys).map_err(SharedError::Store)?;
            let mut scratch = Book::default();
            for (&key, value) in keys.iter().zip(&stored) {
                let Some(mut pair) = value.as_deref().and_then(Pair::decode) else {
                    continue;
                };
                pair.expire(now, self.peer_timeout);
                if !pair.peers.is_empty() {
                    scratch.pairs.insert(key, pair);
                }
            }
            for report in reports {
                scratch.record(report, self.peer_timeout, None);
            }
            let new: Vec<Option<Vec<u8>>> = keys
                .iter()
                .map(|key| scratch.pairs.get(key).map(Pair::encode))
                .collect();
            if !store
                .replace(&keys, &stored, &new, ttl)
                .map_err(SharedError::Store)?
            {
                continue;
            }
            self.take_in(scratch, &keys);
            return Ok(attempt);
        }
        Err(SharedError::Contended)
    }

    /// Takes a committed transaction's credits, and its pairs as this node last saw
    /// them (for the live state the admin API tells).
    fn take_in(&mut self, scratch: Book, keys: &[(u32, u32)]) {
        let Book {
            mut pairs,
            credits,
            untracked,
        } = scratch;
        for (key, credit) in credits {
            self.book.credits.entry(key).or_default().merge(&credit);
        }
        self.book.untracked += untracked;
        for key in keys {
            match pairs.remove(key) {
                Some(pair) => {
                    self.book.pairs.insert(*key, pair);
                }
                None => {
                    self.book.pairs.remove(key);
                }
            }
        }
    }
}

/// What another node does to the store between a load and the next replace.
#[cfg(test)]
pub(super) type Interference = Box<dyn FnMut(&mut HashMap<(u32, u32), Vec<u8>>)>;

/// Pairs in memory, for tests: what a store does, in one process.
#[cfg(test)]
#[derive(Default)]
pub(super) struct MemoryPairs {
    pub(super) values: HashMap<(u32, u32), Vec<u8>>,
    pub(super) interfere: Option<Interference>,
    pub(super) replaces: u32,
}

#[cfg(test)]
impl SharedPairs for MemoryPairs {
    fn load(&mut self, keys: &[(u32, u32)]) -> Result<Vec<Option<Vec<u8>>>, String> {
        Ok(keys
            .iter()
            .map(|key| self.values.get(key).cloned())
            .collect())
    }

    fn replace(
        &mut self,
        keys: &[(u32, u32)],
        expected: &[Option<Vec<u8>>],
        new: &[Option<Vec<u8>>],
        _ttl: u64,
    ) -> Result<bool, String> {
        self.replaces += 1;
        if let Some(interfere) = &mut self.interfere {
            interfere(&mut self.values);
        }
        if keys
            .iter()
            .zip(expected)
            .any(|(key, expected)| self.values.get(key) != expected.as_ref())
        {
            return Ok(false);
        }
        for (key, value) in keys.iter().zip(new) {
            match value {
                Some(value) => self.values.insert(*key, value.clone()),
                None => self.values.remove(key),
            };
        }
        Ok(true)
    }
}
