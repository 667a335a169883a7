//! The torrents of a BitTorrent map as bytes and back: what a tracker writes to its
//! state directory so that a restart keeps its swarms (the file around these records,
//! with its version and checksum, is the daemon's).
//!
//! A snapshot is taken one partition at a time, like cleaning, so a swarm worker never
//! stops answering for longer than one partition takes. Each torrent is one record:
//!
//! ```text
//! info hash [20] | downloads u32 | IPv4 peers u32 | IPv6 peers u32 | peers…
//! peer: address (6 or 18 bytes, wire form) | seconds left u32 | seeder u8 | data
//! ```
//!
//! Integers are little-endian. A peer's lifetime is stored as the seconds it had left
//! when written, so it can be carried over by wall-clock time into a process whose
//! [`ServerTime`] started elsewhere. Records are self-delimiting, so the torrents of
//! several maps can be concatenated and read back into any number of maps (a restart
//! with a different number of swarm workers).

use crate::InfoHash;
use crate::peer::{Peer, PeerAddr, PeerData, V4Addr, V6Addr};
use crate::peer_list::PeerList;
use crate::peer_set::{DualStack, PeerSet as _};
use crate::time::ServerTime;
use crate::torrents::{Torrent, TorrentMap};

/// Per-peer data a snapshot keeps: a fixed number of bytes.
pub trait SnapshotData: PeerData + Sized {
    /// Bytes per peer.
    const WIDTH: usize;
    /// Appends the bytes.
    fn write(&self, out: &mut Vec<u8>);
    /// Reads them back from exactly [`WIDTH`](Self::WIDTH) bytes.
    fn read(bytes: &[u8]) -> Self;
}

impl SnapshotData for () {
    const WIDTH: usize = 0;

    fn write(&self, _: &mut Vec<u8>) {}

    fn read(_: &[u8]) -> Self {}
}

impl SnapshotData for [u8; 20] {
    const WIDTH: usize = 20;

    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self);
    }

    fn read(bytes: &[u8]) -> Self {
        bytes.try_into().expect("20 bytes")
    }
}

/// Why records could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordError {
    /// The bytes end inside a record.
    Truncated {
        /// Where the record that does not fit starts.
        at: usize,
    },
    /// A seeder flag other than 0 or 1: the bytes are not records of this kind.
    BadSeederFlag {
        /// Where the flag is.
        at: usize,
    },
}

impl std::fmt::Display for RecordError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Truncated { at } => write!(f, "the records end inside the one at byte {at}"),
            Self::BadSeederFlag { at } => {
                write!(f, "a peer's seeder flag at byte {at} is not 0 or 1")
            }
        }
    }
}

impl std::error::Error for RecordError {}

/// What loading records into a map did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Restored {
    /// Torrents added.
    pub torrents: usize,
    /// Peers added.
    pub peers: usize,
    /// Peers dropped: their time ran out while the tracker was down.
    pub peers_expired: usize,
    /// Torrents or peers dropped by the map's capacity limits.
    pub over_capacity: usize,
}

impl Restored {
    /// Adds `other`'s counts.
    pub fn add(&mut self, other: Restored) {
        self.torrents += other.torrents;
        self.peers += other.peers;
        self.peers_expired += other.peers_expired;
        self.over_capacity += other.over_capacity;
    }
}

impl<X: SnapshotData> TorrentMap<DualStack<X>> {
    /// Appends a record for every torrent of partition `part` (0 to
    /// [`PARTITIONS`](crate::PARTITIONS) − 1) with its peers' time left at `now`;
    /// returns the number of torrents written. Expired peers are left out; a torrent
    /// with none left is still written for its download count.
    pub fn write_partition(&self, part: usize, now: ServerTime, out: &mut Vec<u8>) -> usize {
        let mut written = 0;
        for (info_hash, torrent) in self.torrents.iter_part(part) {
            write_torrent(info_hash, torrent, now, out);
            written += 1;
        }
        written
    }

    /// Adds the torrents of `records` whose info hash `mine` accepts, each peer with the
    /// time it had left less `elapsed` seconds (the time since the records were
    /// written); peers whose time ran out are dropped. A torrent already here keeps
    /// its peers and gets the larger download count. The map's capacity limits hold:
    /// what does not fit is dropped and counted.
    pub fn restore(
        &mut self,
        records: &[u8],
        elapsed: u32,
        now: ServerTime,
        mut mine: impl FnMut(&InfoHash) -> bool,
    ) -> Result<Restored, RecordError> {
        let mut restored = Restored::default();
        for record in Records::<X>::new(records) {
            let record = record?;
            if mine(&record.info_hash) {
                restored.add(self.restore_torrent(&record, elapsed, now));
            }
        }
        Ok(restored)
    }

    fn restore_torrent(
        &mut self,
        record: &Record<'_, X>,
        elapsed: u32,
        now: ServerTime,
    ) -> Restored {
        let mut restored = Restored::default();
        // A peer lives at most the map's own timeout from now, whatever a file says:
        // a record from a tracker with a longer timeout (or a forged one) cannot make
        // peers outlive cleaning.
        let peer_timeout = self.peer_timeout();
        let live = |left: u32| {
            left.checked_sub(elapsed)
                .filter(|left| *left > 0)
                .map(|left| left.min(peer_timeout))
        };
        let alive = record
            .v4_peers()
            .map(|peer| peer.1)
            .chain(record.v6_peers().map(|peer| peer.1))
            .filter(|left| live(*left).is_some())
            .count();
        restored.peers_expired = record.v4_count + record.v6_count - alive;
        let known = self.torrents.get(&record.info_hash).is_some();
        if !known && alive == 0 && record.downloads == 0 {
            return restored; // nothing worth a torrent
        }
        let capacity = self.capacity;
        let may_add = self.torrents.len() < capacity.torrents;
        let Some(torrent) = self
            .torrents
            .get_or_insert(&record.info_hash, may_add, Torrent::new)
        else {
            restored.over_capacity += alive;
            return restored;
        };
        restored.torrents += usize::from(!known);
        torrent.downloads.raise_to(record.downloads);
        let hasher = &self.peer_hasher;
        let room = |torrent_peers: usize, peers: usize| {
            peers < capacity.peers && torrent_peers < capacity.peers_per_torrent
        };
        for (key, left, seeder, extra) in record.v4_peers() {
            let Some(left) = live(left) else { continue };
            let list = &mut torrent.peers.v4;
            if list.find(&key, hasher).is_some() {
                continue; // announced since: the newer entry stays
            }
            if !room(list.len(), self.peers) {
                restored.over_capacity += 1;
                continue;
            }
            list.insert(Peer::new(key, now.plus(left), extra), seeder, hasher);
            self.peers += 1;
            restored.peers += 1;
        }
        for (key, left, seeder, extra) in record.v6_peers() {
            let Some(left) = live(left) else { continue };
            let total = torrent.peers.len();
            let list = torrent.peers.v6.get_or_insert_with(Default::default);
            if list.find(&key, hasher).is_some() {
                continue;
            }
            if !room(total, self.peers) {
                restored.over_capacity += 1;
                continue;
            }
            list.insert(Peer::new(key, now.plus(left), extra), seeder, hasher);
            self.peers += 1;
            restored.peers += 1;
        }
        torrent.note_crowd(None);
        restored
    }
}

/// Checks that `records` are whole records of peers with `X`'s data, as
/// [`TorrentMap::restore`] would read them; returns how many torrents they hold. A
/// state file is checked so before it is used, so that damage the checksum cannot see
/// (a file written by a buggy or foreign writer) refuses the file instead of leaving
/// a tracker half restored.
pub fn check_records<X: SnapshotData>(records: &[u8]) -> Result<usize, RecordError> {
    let mut torrents = 0;
    for record in Records::<X>::new(records) {
        record?;
        torrents += 1;
    }
    Ok(torrents)
}

fn write_torrent<X: SnapshotData>(
    info_hash: &InfoHash,
    torrent: &Torrent<DualStack<X>>,
    now: ServerTime,
    out: &mut Vec<u8>,
) {
    out.extend_from_slice(info_hash);
    out.extend_from_slice(&torrent.downloads.count().to_le_bytes());
    let counts_at = out.len();
    out.extend_from_slice(&[0; 8]);
    let v4 = write_peers(&torrent.peers.v4, now, out);
    let v6 = torrent
        .peers
        .v6
        .as_deref()
        .map_or(0, |list| write_peers(list, now, out));
    out[counts_at..counts_at + 4].copy_from_slice(&v4.to_le_bytes());
    out[counts_at + 4..counts_at + 8].copy_from_slice(&v6.to_le_bytes());
}

/// Writes the peers of `list` still alive at `now`; returns how many.
fn write_peers<K: PeerAddr, X: SnapshotData>(
    list: &PeerList<K, X>,
    now: ServerTime,
    out: &mut Vec<u8>,
) -> u32 {
    let mut written = 0;
    for (position, peer) in list.peers().iter().enumerate() {
        let Some(left) = peer.expires().seconds_since(now).filter(|left| *left > 0) else {
            continue;
        };
        out.extend_from_slice(peer.key().as_bytes());
        out.extend_from_slice(&left.to_le_bytes());
        out.push(u8::from(list.is_seeder_at(position)));
        peer.extra.write(out);
        written += 1;
    }
    written
}

/// One torrent's record, checked to be whole.
pub(crate) struct Record<'a, X> {
    pub(crate) info_hash: InfoHash,
    pub(crate) downloads: u32,
    pub(crate) v4_count: usize,
    pub(crate) v6_count: usize,
    /// The peers' bytes: IPv4 then IPv6.
    peers: &'a [u8],
    data: std::marker::PhantomData<X>,
}

/// Info hash, downloads and the two peer counts.
pub(crate) const HEAD: usize = 20 + 4 + 4 + 4;
const V4_KEY: usize = 6;
const V6_KEY: usize = 18;

/// Bytes of one peer with a `key`-byte address.
const fn peer_width<X: SnapshotData>(key: usize) -> usize {
    key + 4 + 1 + X::WIDTH
}

impl<X: SnapshotData> Record<'_, X> {
    /// The IPv4 peers: (address, seconds left, seeder, data). A peer on port 0 listens
    /// nowhere and is left out, as an announce from one is never stored: records
    /// written before that rule (a state file, an older node of a cluster) would
    /// otherwise bring such peers back.
    pub(crate) fn v4_peers(&self) -> impl Iterator<Item = (V4Addr, u32, bool, X)> + '_ {
        let width = peer_width::<X>(V4_KEY);
        self.peers[..self.v4_count * width]
            .chunks_exact(width)
            .map(|peer| {
                let key = V4Addr(peer[..V4_KEY].try_into().expect("6 bytes"));
                let (left, seeder, extra) = peer_tail::<X>(&peer[V4_KEY..]);
                (key, left, seeder, extra)
            })
            .filter(|(key, ..)| key.port() != 0)
    }

    /// The IPv6 peers, as [`v4_peers`](Self::v4_peers).
    pub(crate) fn v6_peers(&self) -> impl Iterator<Item = (V6Addr, u32, bool, X)> + '_ {
        let width = peer_width::<X>(V6_KEY);
        self.peers[self.v4_count * peer_width::<X>(V4_KEY)..]
            .chunks_exact(width)
            .map(|peer| {
                let key = V6Addr(peer[..V6_KEY].try_into().expect("18 bytes"));
                let (left, seeder, extra) = peer_tail::<X>(&peer[V6_KEY..]);
                (key, left, seeder, extra)
            })
            .filter(|(key, ..)| key.port() != 0)
    }
}

/// Seconds left, seeder flag and data, after the address.
fn peer_tail<X: SnapshotData>(bytes: &[u8]) -> (u32, bool, X) {
    let left = u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes"));
    (left, bytes[4] == 1, X::read(&bytes[5..5 + X::WIDTH]))
}

/// The records in some bytes, each checked to be whole before it is given out; the
/// first error ends them.
pub(crate) struct Records<'a, X> {
    bytes: &'a [u8],
    at: usize,
    failed: bool,
    data: std::marker::PhantomData<X>,
}

impl<'a, X> Records<'a, X> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Self {
            bytes,
            at: 0,
            failed: false,
            data: std::marker::PhantomData,
        }
    }
}

impl<'a, X: SnapshotData> Iterator for Records<'a, X> {
    type Item = Result<Record<'a, X>, RecordError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.at == self.bytes.len() {
            return None;
        }
        let result = self.read_one();
        self.failed = result.is_err();
        Some(result)
    }
}

impl<'a, X: SnapshotData> Records<'a, X> {
    fn read_one(&mut self) -> Result<Record<'a, X>, RecordError> {
        let start = self.at;
        let truncated = RecordError::Truncated { at: start };
        let head = self.bytes.get(start..start + HEAD).ok_or(truncated)?;
        let u32_at = |at: usize| u32::from_le_bytes(head[at..at + 4].try_into().expect("4 bytes"));
        let (v4_count, v6_count) = (u32_at(24) as usize, u32_at(28) as usize);
        let (v4_width, v6_width) = (peer_width::<X>(V4_KEY), peer_width::<X>(V6_KEY));
        let v4_bytes = v4_count.checked_mul(v4_width).ok_or(truncated)?;
        let length = v6_count
            .checked_mul(v6_width)
            .and_then(|v6_bytes| v6_bytes.checked_add(v4_bytes))
            .ok_or(truncated)?;
        let peers_start = start + HEAD;
        let end = peers_start.checked_add(length).ok_or(truncated)?;
        let peers = self.bytes.get(peers_start..end).ok_or(truncated)?;
        // Every seeder flag is 0 or 1: a cheap check, beyond the file's checksum, that
        // these are records of this kind of peer.
        let flags = (0..v4_count)
            .map(|i| i * v4_width + V4_KEY + 4)
            .chain((0..v6_count).map(|i| v4_bytes + i * v6_width + V6_KEY + 4));
        for flag in flags {
            if peers[flag] > 1 {
                return Err(RecordError::BadSeederFlag {
                    at: peers_start + flag,
                });
            }
        }
        self.at = end;
        Ok(Record {
            info_hash: head[..20].try_into().expect("20 bytes"),
            downloads: u32_at(20),
            v4_count,
            v6_count,
            peers,
            data: std::marker::PhantomData,
        })
    }
}

#[cfg(test)]
mod tests;
