//! The torrent map: announce, scrape and cleaning over the torrents one swarm worker owns.

use hashbrown::{DefaultHashBuilder, HashMap};
use rand::Rng;

use crate::InfoHash;
use crate::peer::{Peer, PeerAddr, V4Addr, V6Addr};
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
pub struct Announce<A, X> {
    /// Where the peer listens (IP from the packet source, port from the request).
    pub addr: A,
    /// Extra per-peer data to store (e.g. the peer id), `()` when none.
    pub extra: X,
    /// The event the client reported.
    pub event: AnnounceEvent,
    /// Whether the peer has the whole torrent (`left == 0`).
    pub seeder: bool,
    /// How many peers to return at most, already capped by configuration.
    pub peers_wanted: usize,
}

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

/// One torrent: its IPv4 and IPv6 peers, kept apart so that each family is sent
/// peers it can reach, and its downloads counter.
#[derive(Debug)]
pub struct Torrent<X> {
    pub(crate) v4: PeerList<V4Addr, X>,
    /// Boxed and created on first use: most torrents never see an IPv6 peer.
    pub(crate) v6: Option<Box<PeerList<V6Addr, X>>>,
    downloads: u32,
}

impl<X> Default for Torrent<X> {
    fn default() -> Self {
        Self {
            v4: PeerList::default(),
            v6: None,
            downloads: 0,
        }
    }
}

impl<X> Torrent<X> {
    /// Counts over both families.
    pub fn counts(&self) -> SwarmCounts {
        let (mut seeders, mut leechers) = (self.v4.seeders(), self.v4.leechers());
        if let Some(v6) = &self.v6 {
            seeders += v6.seeders();
            leechers += v6.leechers();
        }
        SwarmCounts { seeders, leechers }
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

    /// The IPv4 peers.
    pub fn v4(&self) -> &PeerList<V4Addr, X> {
        &self.v4
    }

    /// The IPv6 peers, if any list exists.
    pub fn v6(&self) -> Option<&PeerList<V6Addr, X>> {
        self.v6.as_deref()
    }

    fn peer_count(&self) -> usize {
        self.v4.len() + self.v6.as_ref().map_or(0, |v6| v6.len())
    }
}

/// The torrents of one swarm worker.
#[derive(Debug)]
pub struct TorrentMap<X> {
    torrents: HashMap<InfoHash, Torrent<X>, DefaultHashBuilder>,
    /// Hashes peer addresses for the per-torrent indexes; seeded at random per map so
    /// that addresses cannot be chosen to collide.
    peer_hasher: DefaultHashBuilder,
    peer_timeout: u32,
    peers: usize,
}

impl<X: Copy> TorrentMap<X> {
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

    /// Number of peers over all torrents and both families.
    pub fn peer_count(&self) -> usize {
        self.peers
    }

    /// A torrent, for inspection.
    pub fn get(&self, info_hash: &InfoHash) -> Option<&Torrent<X>> {
        self.torrents.get(info_hash)
    }

    /// Records an announce and calls `emit` for each peer chosen for the reply.
    ///
    /// The peer (keyed by IP and port) is inserted, refreshed or, on `Stopped`, removed;
    /// `Completed` from a peer not already known as a seeder counts one download.
    /// Returns the torrent's counts after the update, including the announcer.
    pub fn announce<A: PeerAddr>(
        &mut self,
        info_hash: &InfoHash,
        announce: &Announce<A, X>,
        now: ServerTime,
        rng: &mut impl Rng,
        emit: impl FnMut(&Peer<A, X>),
    ) -> SwarmCounts {
        let hasher = &self.peer_hasher;
        if announce.event == AnnounceEvent::Stopped {
            // Leaving: never create a torrent for it, and send no peers.
            let Some(torrent) = self.torrents.get_mut(info_hash) else {
                return SwarmCounts::default();
            };
            let list = A::peers_of_mut(torrent);
            if let Some(position) = list.find(&announce.addr, hasher) {
                list.remove(position, hasher);
                self.peers -= 1;
            }
            return torrent.counts();
        }

        let torrent = self.torrents.entry(*info_hash).or_default();
        let list = A::peers_of_mut(torrent);
        let expires = now.plus(self.peer_timeout);
        let (position, was_seeder) = match list.find(&announce.addr, hasher) {
            Some(position) => {
                let was_seeder = list.is_seeder_at(position);
                let peer = list.get_mut(position);
                peer.expires = expires;
                peer.extra = announce.extra;
                (
                    list.set_seeder(position, announce.seeder, hasher),
                    was_seeder,
                )
            }
            None => {
                let peer = Peer {
                    expires,
                    addr: announce.addr,
                    extra: announce.extra,
                };
                self.peers += 1;
                (list.insert(peer, announce.seeder, hasher), false)
            }
        };
        list.select(
            Some(position),
            announce.seeder,
            announce.peers_wanted,
            now,
            rng,
            emit,
        );
        if announce.event == AnnounceEvent::Completed && !was_seeder {
            torrent.downloads = torrent.downloads.saturating_add(1);
        }
        torrent.counts()
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
                report.peers_removed += torrent.peer_count();
                report.torrents_removed += 1;
                return false;
            }
            report.peers_removed += torrent.v4.remove_expired(now, hasher);
            if let Some(v6) = &mut torrent.v6 {
                report.peers_removed += v6.remove_expired(now, hasher);
                if v6.is_empty() {
                    torrent.v6 = None;
                }
            }
            let keep = torrent.peer_count() > 0;
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

#[cfg(test)]
mod tests;
