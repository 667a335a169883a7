//! The torrent map: announce, scrape and cleaning over the torrents one swarm worker owns.
//!
//! One storage serves every tracker. A torrent keeps its peers in a [`PeerSet`]: for
//! BitTorrent a [`DualStack`] (IPv4 and IPv6 lists, peers keyed by address), for
//! WebTorrent one [`PeerList`] keyed by peer id. What a tracker keeps per peer, and the
//! few rules that depend on it, come from its [`PeerData`]; expiry, selection (never an
//! expired peer), downloads (once per peer) and cleaning are the same for all.

use std::hash::BuildHasher;

use hashbrown::{DefaultHashBuilder, HashMap};
use rand::Rng;

use crate::InfoHash;
use crate::peer::{Peer, PeerData, PeerKey, V4Addr, V6Addr};
use crate::peer_list::PeerList;
use crate::time::ServerTime;

/// What an announce says about the peer's state change.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum AnnounceEvent {
    /// A regular announce.
    #[default]
    None,
    /// The peer started downloading.
    Started,
    /// The peer finished downloading; counts towards the torrent's downloads.
    Completed,
    /// The peer is leaving the swarm.
    Stopped,
}

/// One announce, already checked and resolved by the daemon.
#[derive(Clone, Copy, Debug)]
pub struct Announce<K, X> {
    /// What the peer is known by: where it listens (IP from the packet source, port
    /// from the request) for BitTorrent, its peer id for WebTorrent.
    pub key: K,
    /// Per-peer data to store (e.g. the peer id), `()` when none.
    pub extra: X,
    /// The event the client reported.
    pub event: AnnounceEvent,
    /// Whether the peer has the whole torrent (`left == 0`); `None` when the client
    /// did not say, which keeps what the peer was (a new peer is a leecher).
    pub seeder: Option<bool>,
    /// How many peers to return at most, already capped by configuration.
    pub peers_wanted: usize,
}

/// An announce, stop or leave refused because the peer it names belongs to someone
/// else ([`PeerData::may_change`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerTaken;

/// Seeder and leecher counts of a torrent, over both address families.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SwarmCounts {
    /// Peers with the whole torrent.
    pub seeders: u32,
    /// Peers still downloading.
    pub leechers: u32,
}

/// What a scrape reports for one torrent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScrapeStats {
    /// Peers with the whole torrent ("complete").
    pub seeders: u32,
    /// Peers still downloading ("incomplete").
    pub leechers: u32,
    /// Announces with event=completed seen for this torrent ("downloaded").
    pub downloads: u32,
}

/// The number of peers to return for a client's request, from configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerLimits {
    /// Used when the client asks for zero or a negative number (BEP 15 uses -1).
    pub default: usize,
    /// Upper bound on any reply.
    pub max: usize,
}

impl PeerLimits {
    /// The number of peers to send for a request of `requested`.
    pub fn resolve(&self, requested: i64) -> usize {
        if requested <= 0 {
            self.default.min(self.max)
        } else {
            usize::try_from(requested)
                .unwrap_or(usize::MAX)
                .min(self.max)
        }
    }
}

/// What a cleaning pass removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CleanReport {
    /// Peers that had not announced within the peer timeout, plus the peers of
    /// torrents removed by the access list.
    pub peers_removed: usize,
    /// Torrents that had no peers left or are no longer allowed.
    pub torrents_removed: usize,
}

/// How one torrent keeps its peers: one [`PeerList`] (WebTorrent, peers keyed by peer
/// id), or one per address family ([`DualStack`], BitTorrent).
pub trait PeerSet: Default {
    /// What is kept with each peer.
    type Data: PeerData;
    /// Seeders and leechers over every list.
    fn counts(&self) -> SwarmCounts;
    /// Peers over every list.
    fn len(&self) -> usize;
    /// Whether there are no peers at all.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// [`PeerList::remove_expired`] on every list; returns how many peers went.
    fn remove_expired(&mut self, now: ServerTime, hasher: &impl BuildHasher) -> usize;
}

/// A key type and where peers with such keys live in a [`PeerSet`].
pub trait ListIn<S: PeerSet>: PeerKey {
    /// The list of this key type, if the set has one yet.
    fn list(set: &S) -> Option<&PeerList<Self, S::Data>>;
    /// The list of this key type, created empty if missing.
    fn list_mut(set: &mut S) -> &mut PeerList<Self, S::Data>;
}

impl<K: PeerKey, X: PeerData> PeerSet for PeerList<K, X> {
    type Data = X;

    fn counts(&self) -> SwarmCounts {
        SwarmCounts {
            seeders: self.seeders(),
            leechers: self.leechers(),
        }
    }

    fn len(&self) -> usize {
        PeerList::len(self)
    }

    fn remove_expired(&mut self, now: ServerTime, hasher: &impl BuildHasher) -> usize {
        PeerList::remove_expired(self, now, hasher)
    }
}

impl<K: PeerKey, X: PeerData> ListIn<PeerList<K, X>> for K {
    fn list(set: &PeerList<K, X>) -> Option<&PeerList<K, X>> {
        Some(set)
    }

    fn list_mut(set: &mut PeerList<K, X>) -> &mut PeerList<K, X> {
        set
    }
}

/// A BitTorrent torrent's peers: IPv4 and IPv6 kept apart, so that each family is
/// sent peers it can reach.
#[derive(Debug)]
pub struct DualStack<X> {
    v4: PeerList<V4Addr, X>,
    /// Boxed and created on first use: most torrents never see an IPv6 peer.
    v6: Option<Box<PeerList<V6Addr, X>>>,
}

impl<X> Default for DualStack<X> {
    fn default() -> Self {
        Self {
            v4: PeerList::default(),
            v6: None,
        }
    }
}

impl<X: PeerData> DualStack<X> {
    /// The IPv4 peers.
    pub fn v4(&self) -> &PeerList<V4Addr, X> {
        &self.v4
    }

    /// The IPv6 peers, if any list exists.
    pub fn v6(&self) -> Option<&PeerList<V6Addr, X>> {
        self.v6.as_deref()
    }
}

impl<X: PeerData> PeerSet for DualStack<X> {
    type Data = X;

    fn counts(&self) -> SwarmCounts {
        let (mut seeders, mut leechers) = (self.v4.seeders(), self.v4.leechers());
        if let Some(v6) = &self.v6 {
            seeders += v6.seeders();
            leechers += v6.leechers();
        }
        SwarmCounts { seeders, leechers }
    }

    fn len(&self) -> usize {
        self.v4.len() + self.v6.as_ref().map_or(0, |v6| v6.len())
    }

    fn remove_expired(&mut self, now: ServerTime, hasher: &impl BuildHasher) -> usize {
        let mut removed = self.v4.remove_expired(now, hasher);
        if let Some(v6) = &mut self.v6 {
            removed += v6.remove_expired(now, hasher);
            if v6.is_empty() {
                self.v6 = None;
            }
        }
        removed
    }
}

impl<X: PeerData> ListIn<DualStack<X>> for V4Addr {
    fn list(set: &DualStack<X>) -> Option<&PeerList<Self, X>> {
        Some(&set.v4)
    }

    fn list_mut(set: &mut DualStack<X>) -> &mut PeerList<Self, X> {
        &mut set.v4
    }
}

impl<X: PeerData> ListIn<DualStack<X>> for V6Addr {
    fn list(set: &DualStack<X>) -> Option<&PeerList<Self, X>> {
        set.v6.as_deref()
    }

    fn list_mut(set: &mut DualStack<X>) -> &mut PeerList<Self, X> {
        set.v6.get_or_insert_with(Default::default)
    }
}

/// One torrent: its peers and its downloads counter.
#[derive(Debug, Default)]
pub struct Torrent<S> {
    peers: S,
    downloads: u32,
}

impl<S: PeerSet> Torrent<S> {
    /// Counts over every list.
    pub fn counts(&self) -> SwarmCounts {
        self.peers.counts()
    }

    /// Scrape figures.
    pub fn scrape_stats(&self) -> ScrapeStats {
        let SwarmCounts { seeders, leechers } = self.counts();
        ScrapeStats {
            seeders,
            leechers,
            downloads: self.downloads,
        }
    }

    /// The peers.
    pub fn peers(&self) -> &S {
        &self.peers
    }
}

/// The torrents of one swarm worker, BitTorrent style: peers by address, IPv4 and IPv6
/// apart, with `X` kept per peer.
pub type BitTorrentMap<X> = TorrentMap<DualStack<X>>;

/// The torrents of one swarm worker.
#[derive(Debug)]
pub struct TorrentMap<S> {
    torrents: HashMap<InfoHash, Torrent<S>, DefaultHashBuilder>,
    /// Hashes peer keys for the per-torrent indexes; seeded at random per map so
    /// that keys cannot be chosen to collide.
    pub(crate) peer_hasher: DefaultHashBuilder,
    peer_timeout: u32,
    peers: usize,
}

impl<S: PeerSet> TorrentMap<S> {
    /// An empty map whose peers expire `peer_timeout` seconds after their last announce.
    pub fn new(peer_timeout: u32) -> Self {
        Self {
            torrents: HashMap::default(),
            peer_hasher: DefaultHashBuilder::default(),
            peer_timeout,
            peers: 0,
        }
    }

    /// Number of torrents.
    pub fn torrent_count(&self) -> usize {
        self.torrents.len()
    }

    /// Number of peers over all torrents and lists.
    pub fn peer_count(&self) -> usize {
        self.peers
    }

    /// A torrent, for inspection.
    pub fn get(&self, info_hash: &InfoHash) -> Option<&Torrent<S>> {
        self.torrents.get(info_hash)
    }

    /// When a peer that announces at `now` expires.
    pub fn expiry(&self, now: ServerTime) -> ServerTime {
        now.plus(self.peer_timeout)
    }

    /// The peer known by `key` in torrent `info_hash`.
    pub fn peer<K: ListIn<S>>(&self, info_hash: &InfoHash, key: &K) -> Option<&Peer<K, S::Data>> {
        let list = K::list(&self.torrents.get(info_hash)?.peers)?;
        let position = list.find(key, &self.peer_hasher)?;
        Some(&list.peers()[position])
    }

    /// The peer known by `key` in torrent `info_hash`, to change its expiry or data.
    pub fn peer_mut<K: ListIn<S>>(
        &mut self,
        info_hash: &InfoHash,
        key: &K,
    ) -> Option<&mut Peer<K, S::Data>> {
        let torrent = self.torrents.get_mut(info_hash)?;
        let list = K::list_mut(&mut torrent.peers);
        let position = list.find(key, &self.peer_hasher)?;
        Some(list.get_mut(position))
    }

    /// Records an announce and calls `emit` for each peer chosen for the reply.
    ///
    /// The peer is inserted, refreshed or, on `Stopped`, removed; `Completed` from a
    /// peer not already known as a seeder counts one download. Returns the torrent's
    /// counts after the update, including the announcer, or [`PeerTaken`] when the
    /// peer belongs to someone else (then nothing changed and nobody was emitted). A
    /// peer that timed out belongs to nobody: whoever announces it next takes it over.
    pub fn announce<K: ListIn<S>>(
        &mut self,
        info_hash: &InfoHash,
        announce: Announce<K, S::Data>,
        now: ServerTime,
        rng: &mut impl Rng,
        emit: impl FnMut(&mut Peer<K, S::Data>),
    ) -> Result<SwarmCounts, PeerTaken> {
        let hasher = &self.peer_hasher;
        if announce.event == AnnounceEvent::Stopped {
            // Leaving: never create a torrent for it, and send no peers.
            let Some(torrent) = self.torrents.get_mut(info_hash) else {
                return Ok(SwarmCounts::default());
            };
            let list = K::list_mut(&mut torrent.peers);
            if let Some(position) = list.find(&announce.key, hasher) {
                if !may_change(&list.peers()[position], &announce.extra, now) {
                    return Err(PeerTaken);
                }
                list.remove(position, hasher);
                self.peers -= 1;
            }
            return Ok(torrent.counts());
        }

        let expires = now.plus(self.peer_timeout);
        let torrent = self.torrents.entry(*info_hash).or_default();
        let list = K::list_mut(&mut torrent.peers);
        let (position, seeder, was_seeder) = match list.find(&announce.key, hasher) {
            Some(position) => {
                let was_seeder = list.is_seeder_at(position);
                let peer = list.get_mut(position);
                if peer.expires > now {
                    if !peer.extra.may_change(&announce.extra) {
                        return Err(PeerTaken);
                    }
                    peer.extra.refresh(announce.extra);
                } else {
                    // Timed out, if not cleaned yet: whoever announces it now owns it.
                    peer.extra = announce.extra;
                }
                peer.expires = expires;
                let seeder = announce.seeder.unwrap_or(was_seeder);
                (
                    list.set_seeder(position, seeder, hasher),
                    seeder,
                    was_seeder,
                )
            }
            None => {
                let seeder = announce.seeder.unwrap_or(false);
                let peer = Peer::new(announce.key, expires, announce.extra);
                self.peers += 1;
                (list.insert(peer, seeder, hasher), seeder, false)
            }
        };
        list.select(
            Some(position),
            seeder,
            announce.peers_wanted,
            now,
            rng,
            emit,
        );
        if announce.event == AnnounceEvent::Completed && !was_seeder {
            torrent.downloads = torrent.downloads.saturating_add(1);
        }
        Ok(torrent.counts())
    }

    /// Removes the peer known by `key` from torrent `info_hash` if `by` may
    /// ([`PeerData::may_change`]; anyone may once the peer timed out at `now`); returns
    /// whether it was there and removed. An emptied torrent stays, with its downloads
    /// count, until the next cleaning.
    pub fn remove<K: ListIn<S>>(
        &mut self,
        info_hash: &InfoHash,
        key: &K,
        by: &S::Data,
        now: ServerTime,
    ) -> bool {
        let Some(torrent) = self.torrents.get_mut(info_hash) else {
            return false;
        };
        let list = K::list_mut(&mut torrent.peers);
        match list.find(key, &self.peer_hasher) {
            Some(position) if may_change(&list.peers()[position], by, now) => {
                list.remove(position, &self.peer_hasher);
                self.peers -= 1;
                true
            }
            _ => false,
        }
    }

    /// Scrape figures for one torrent; zeros for an unknown one.
    pub fn scrape(&self, info_hash: &InfoHash) -> ScrapeStats {
        self.torrents
            .get(info_hash)
            .map(Torrent::scrape_stats)
            .unwrap_or_default()
    }

    /// Scrape figures for every torrent (a "full scrape").
    pub fn scrape_all(&self) -> Vec<(InfoHash, ScrapeStats)> {
        self.torrents
            .iter()
            .map(|(hash, torrent)| (*hash, torrent.scrape_stats()))
            .collect()
    }

    /// Removes expired peers, torrents left without peers, and torrents for which
    /// `keep_torrent` says no (e.g. no longer on the access list).
    pub fn clean(
        &mut self,
        now: ServerTime,
        mut keep_torrent: impl FnMut(&InfoHash) -> bool,
    ) -> CleanReport {
        let hasher = &self.peer_hasher;
        let mut report = CleanReport::default();
        self.torrents.retain(|info_hash, torrent| {
            if !keep_torrent(info_hash) {
                report.peers_removed += torrent.peers.len();
                report.torrents_removed += 1;
                return false;
            }
            report.peers_removed += torrent.peers.remove_expired(now, hasher);
            let keep = !torrent.peers.is_empty();
            report.torrents_removed += usize::from(!keep);
            keep
        });
        self.peers -= report.peers_removed;
        if self.torrents.capacity() > 2 * self.torrents.len() + 64 {
            self.torrents.shrink_to_fit();
        }
        report
    }
}

/// Whether `by` may change or remove `peer` at `now`: its owner may, and anyone once
/// it timed out (a peer that stopped announcing belongs to nobody).
fn may_change<K, X: PeerData>(peer: &Peer<K, X>, by: &X, now: ServerTime) -> bool {
    peer.expires <= now || peer.extra.may_change(by)
}

#[cfg(test)]
mod tests;
