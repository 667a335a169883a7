//! Peer changes as bytes, for tracker nodes that share their swarms (`[cluster]`).
//!
//! Each node serves from its own map and tells the others what changed: every stored
//! announce becomes a *change*, and changes from other nodes are applied to the local
//! map as they arrive. A change is a snapshot record ([`crate::snapshot`]) that holds
//! one peer:
//!
//! ```text
//! info hash [20] | downloads added u32 | IPv4 peers u32 | IPv6 peers u32 | the peer
//! peer: address (6 or 18 bytes) | seconds left u32 (0: it left) | seeder u8 | data
//! ```
//!
//! so one reader checks both kinds of bytes, and a batch of changes is just records
//! one after another. Applying is idempotent for peers (the later expiry wins), and
//! downloads are added: each completion is published once, by the node that saw it.

use crate::InfoHash;
use crate::peer::{Peer, PeerAddr, PeerData, PeerKey};
use crate::peer_list::PeerList;
use crate::peer_set::{DualStack, PeerSet as _};
use crate::snapshot::{Record, RecordError, Records, SnapshotData};
use crate::time::ServerTime;
use crate::torrents::{AnnounceEvent, Announced, Torrent, TorrentMap};

/// Changes recorded by one shard owner since they were last taken.
#[derive(Debug, Default)]
pub struct ChangeLog {
    bytes: Vec<u8>,
    changes: usize,
}

impl ChangeLog {
    /// Records that peer `key` of torrent `info_hash` announced: it has `left`
    /// seconds to live (0 when it left), is a seeder or not, carries `extra`, and
    /// added `downloads` to the torrent's count.
    pub fn record<K: PeerAddr, X: SnapshotData>(
        &mut self,
        info_hash: &InfoHash,
        key: &K,
        left: u32,
        seeder: bool,
        extra: &X,
        downloads: u32,
    ) {
        let out = &mut self.bytes;
        let v6 = key.as_bytes().len() != 6;
        out.extend_from_slice(info_hash);
        out.extend_from_slice(&downloads.to_le_bytes());
        out.extend_from_slice(&u32::from(!v6).to_le_bytes());
        out.extend_from_slice(&u32::from(v6).to_le_bytes());
        out.extend_from_slice(key.as_bytes());
        out.extend_from_slice(&left.to_le_bytes());
        out.push(u8::from(seeder));
        extra.write(out);
        self.changes += 1;
    }

    /// Records what an announce of peer `key` to torrent `info_hash` did, as
    /// [`TorrentMap::announce`] reported it (`announced`): a stored peer lives
    /// `peer_timeout` seconds with its seeder state, a stop removes it, a peer the
    /// limits did not store is not a change.
    #[allow(clippy::too_many_arguments)]
    pub fn announced<K: PeerAddr, X: SnapshotData>(
        &mut self,
        info_hash: &InfoHash,
        key: &K,
        event: AnnounceEvent,
        seeder: bool,
        extra: &X,
        announced: &Announced,
        peer_timeout: u32,
    ) {
        if event == AnnounceEvent::Stopped {
            self.record(info_hash, key, 0, false, extra, 0);
        } else if announced.stored {
            let downloads = u32::from(announced.downloaded);
            self.record(info_hash, key, peer_timeout, seeder, extra, downloads);
        }
    }

    /// Records one change in a tracker's own format (WebTorrent's, whose peers are
    /// peer ids on connections): `write` appends its bytes.
    pub fn record_with(&mut self, write: impl FnOnce(&mut Vec<u8>)) {
        write(&mut self.bytes);
        self.changes += 1;
    }

    /// Bytes recorded.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether nothing was recorded since the last [`take`](Self::take).
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Changes recorded.
    pub fn changes(&self) -> usize {
        self.changes
    }

    /// The recorded changes, leaving the log empty.
    pub fn take(&mut self) -> Vec<u8> {
        self.changes = 0;
        std::mem::take(&mut self.bytes)
    }
}

/// What applying changes from other nodes did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Replicated {
    /// Peers this map did not have.
    pub peers_added: usize,
    /// Peers it had, given the newer expiry and seeder state.
    pub peers_refreshed: usize,
    /// Peers removed because they left.
    pub peers_removed: usize,
    /// Changes whose peer's time ran out on the way (old entries read at start).
    pub peers_expired: usize,
    /// Downloads added to torrents' counts.
    pub downloads: usize,
    /// Torrents or peers dropped by the map's capacity limits.
    pub over_capacity: usize,
}

impl Replicated {
    /// Adds `other`'s counts.
    pub fn add(&mut self, other: Replicated) {
        self.peers_added += other.peers_added;
        self.peers_refreshed += other.peers_refreshed;
        self.peers_removed += other.peers_removed;
        self.peers_expired += other.peers_expired;
        self.downloads += other.downloads;
        self.over_capacity += other.over_capacity;
    }
}

/// What one change did to one peer list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PeerChange {
    Added,
    Refreshed,
    Removed,
    Expired,
    Full,
    Nothing,
}

impl PeerChange {
    /// Whether the peer is in the torrent after it.
    fn stored(self) -> bool {
        matches!(self, Self::Added | Self::Refreshed)
    }
}

impl Replicated {
    fn count(&mut self, change: PeerChange) {
        match change {
            PeerChange::Added => self.peers_added += 1,
            PeerChange::Refreshed => self.peers_refreshed += 1,
            PeerChange::Removed => self.peers_removed += 1,
            PeerChange::Expired => self.peers_expired += 1,
            PeerChange::Full => self.over_capacity += 1,
            PeerChange::Nothing => {}
        }
    }
}

impl<X: SnapshotData> TorrentMap<DualStack<X>> {
    /// Applies the changes (or snapshot records) in `records` whose info hash `mine`
    /// accepts, written `elapsed` seconds ago, at `now`. A peer with time left is added
    /// or refreshed (the later expiry wins, its seeder state and data are taken); one
    /// with none left is removed; downloads are added to the torrent's count. The
    /// capacity limits hold as for announces. Records before a damaged one are
    /// applied; the error says where the damage starts.
    pub fn apply_changes(
        &mut self,
        records: &[u8],
        elapsed: u32,
        now: ServerTime,
        mut mine: impl FnMut(&InfoHash) -> bool,
    ) -> Result<Replicated, RecordError> {
        let mut replicated = Replicated::default();
        for record in Records::<X>::new(records) {
            let record = record?;
            if mine(&record.info_hash) {
                self.apply_record(&record, elapsed, now, &mut replicated);
            }
        }
        Ok(replicated)
    }

    fn apply_record(
        &mut self,
        record: &Record<'_, X>,
        elapsed: u32,
        now: ServerTime,
        done: &mut Replicated,
    ) {
        let live_peer = |left: u32| left > elapsed;
        let adds_something = record.downloads > 0
            || record.v4_peers().any(|peer| live_peer(peer.1))
            || record.v6_peers().any(|peer| live_peer(peer.1));
        // One lookup either way: this runs for every other node's announce.
        let torrent = if adds_something {
            let may_add = self.torrents.len() < self.capacity.torrents;
            let Some(torrent) =
                self.torrents
                    .get_or_insert(&record.info_hash, may_add, Torrent::new)
            else {
                done.over_capacity += record.v4_count + record.v6_count;
                return;
            };
            torrent
        } else {
            let Some(torrent) = self.torrents.get_mut(&record.info_hash) else {
                // Leaving a torrent this node never had, or expired on the way.
                let expired = |left: u32| left > 0;
                done.peers_expired += record.v4_peers().filter(|peer| expired(peer.1)).count()
                    + record.v6_peers().filter(|peer| expired(peer.1)).count();
                return;
            };
            torrent
        };
        torrent.downloads.add(record.downloads);
        done.downloads += record.downloads as usize;
        let (capacity, hasher) = (self.capacity, &self.peer_hasher);
        for (key, left, seeder, extra) in record.v4_peers() {
            let room =
                self.peers < capacity.peers && torrent.peers.len() < capacity.peers_per_torrent;
            let client = key.socket_addr().ip();
            let change = PeerUpdate {
                left,
                elapsed,
                seeder,
                now,
                room,
            }
            .apply(&mut torrent.peers.v4, key, extra, hasher);
            self.peers = tally(self.peers, change);
            done.count(change);
            if change.stored() {
                torrent.note_crowd(Some(client));
            }
        }
        for (key, left, seeder, extra) in record.v6_peers() {
            let room =
                self.peers < capacity.peers && torrent.peers.len() < capacity.peers_per_torrent;
            let client = key.socket_addr().ip();
            let list = torrent.peers.v6.get_or_insert_with(Default::default);
            let change = PeerUpdate {
                left,
                elapsed,
                seeder,
                now,
                room,
            }
            .apply(list, key, extra, hasher);
            self.peers = tally(self.peers, change);
            done.count(change);
            if change.stored() {
                torrent.note_crowd(Some(client));
            }
        }
    }
}

/// One peer of another node's change, for maps whose torrents keep one list keyed by
/// peer id (WebTorrent's, whose change records are its own).
#[derive(Debug)]
pub struct RemotePeer<K, X> {
    /// The peer.
    pub key: K,
    /// Seconds it had to live when written; 0: it left.
    pub left: u32,
    /// Whether it is a seeder.
    pub seeder: bool,
    /// What the map keeps with it.
    pub extra: X,
    /// Downloads it added to the torrent's count.
    pub downloads: u32,
}

impl<K: PeerKey, X: PeerData> TorrentMap<PeerList<K, X>> {
    /// Applies one peer of a change written `elapsed` seconds ago, at `now`, as
    /// [`apply_changes`](TorrentMap::apply_changes) does for BitTorrent maps: the later
    /// expiry wins, a peer with no time left is removed, the capacity limits hold, and
    /// a live peer the change may not touch ([`PeerData::may_replicate`]) stays as it is.
    pub fn apply_remote_peer(
        &mut self,
        info_hash: &InfoHash,
        peer: RemotePeer<K, X>,
        elapsed: u32,
        now: ServerTime,
    ) -> Replicated {
        let mut done = Replicated::default();
        let torrent = if peer.downloads > 0 || peer.left > elapsed {
            let may_add = self.torrents.len() < self.capacity.torrents;
            match self
                .torrents
                .get_or_insert(info_hash, may_add, Torrent::new)
            {
                Some(torrent) => torrent,
                None => {
                    done.over_capacity += 1;
                    return done;
                }
            }
        } else {
            match self.torrents.get_mut(info_hash) {
                Some(torrent) => torrent,
                None => {
                    if peer.left > 0 {
                        done.peers_expired += 1;
                    }
                    return done;
                }
            }
        };
        torrent.downloads.add(peer.downloads);
        done.downloads += peer.downloads as usize;
        let room = self.peers < self.capacity.peers
            && torrent.peers.len() < self.capacity.peers_per_torrent;
        let change = PeerUpdate {
            left: peer.left,
            elapsed,
            seeder: peer.seeder,
            now,
            room,
        }
        .apply(&mut torrent.peers, peer.key, peer.extra, &self.peer_hasher);
        self.peers = tally(self.peers, change);
        done.count(change);
        if change.stored() {
            torrent.note_crowd(None);
        }
        done
    }
}

/// The map's peer count after `change`.
fn tally(peers: usize, change: PeerChange) -> usize {
    match change {
        PeerChange::Added => peers + 1,
        PeerChange::Removed => peers - 1,
        _ => peers,
    }
}

/// One peer of a change, as it applies to a list.
struct PeerUpdate {
    /// Seconds it had left when written; 0: it left.
    left: u32,
    /// Seconds since it was written.
    elapsed: u32,
    seeder: bool,
    now: ServerTime,
    /// Whether the limits allow one more peer.
    room: bool,
}

impl PeerUpdate {
    fn apply<K: PeerKey, X: PeerData>(
        self,
        list: &mut PeerList<K, X>,
        key: K,
        extra: X,
        hasher: &impl std::hash::BuildHasher,
    ) -> PeerChange {
        let found = list.find(&key, hasher);
        if let Some(position) = found {
            let peer = &list.peers()[position];
            if peer.expires() > self.now && !peer.extra.may_replicate(&extra) {
                // Someone else's live peer: this node's own, or another node's.
                return PeerChange::Nothing;
            }
        }
        if self.left == 0 {
            return match found {
                Some(position) => {
                    list.remove(position, hasher);
                    PeerChange::Removed
                }
                None => PeerChange::Nothing,
            };
        }
        let Some(live) = self.left.checked_sub(self.elapsed).filter(|live| *live > 0) else {
            return PeerChange::Expired;
        };
        let expires = self.now.plus(live);
        match found {
            Some(position) => {
                let peer = list.get_mut(position);
                if expires > peer.expires() {
                    peer.set_expires(expires);
                }
                peer.extra = extra;
                list.set_seeder(position, self.seeder, hasher);
                PeerChange::Refreshed
            }
            None if self.room => {
                list.insert(Peer::new(key, expires, extra), self.seeder, hasher);
                PeerChange::Added
            }
            None => PeerChange::Full,
        }
    }
}

/// Messages one shard owner recorded for other nodes since they were last taken.
///
/// A WebTorrent offer or answer for a peer on another node is not a peer change: it
/// goes to that node only (the cluster's relay writer appends it to the node's
/// inbox), so it is kept here per destination, beside the [`ChangeLog`] of changes
/// every node reads.
#[derive(Debug, Default)]
pub struct RelayLog {
    /// Per destination node (its origin): the records and how many.
    waiting: Vec<Relayed>,
}

/// Messages for one node.
#[derive(Debug)]
pub struct Relayed {
    /// The node: the origin its entries carry.
    pub node: u64,
    /// Whole records, one after another.
    pub bytes: Vec<u8>,
    /// How many.
    pub count: usize,
}

impl RelayLog {
    /// Records one message for `node`: `write` appends its bytes.
    pub fn record(&mut self, node: u64, write: impl FnOnce(&mut Vec<u8>)) {
        let at = match self.waiting.iter().position(|relayed| relayed.node == node) {
            Some(at) => at,
            None => {
                self.waiting.push(Relayed {
                    node,
                    bytes: Vec::new(),
                    count: 0,
                });
                self.waiting.len() - 1
            }
        };
        let relayed = &mut self.waiting[at];
        write(&mut relayed.bytes);
        relayed.count += 1;
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// The messages recorded, per node, leaving the log empty.
    pub fn take(&mut self) -> Vec<Relayed> {
        std::mem::take(&mut self.waiting)
    }
}

#[cfg(test)]
mod tests;
