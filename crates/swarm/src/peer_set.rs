//! How a torrent keeps its peers: one list, or one list per address family.

use std::hash::BuildHasher;

use crate::counts::SwarmCounts;
use crate::peer::{PeerData, PeerKey, V4Addr, V6Addr};
use crate::peer_list::PeerList;
use crate::time::ServerTime;

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
    /// Whether other peers could reach a peer known by this key, so that it is worth
    /// storing and handing out. A BitTorrent peer that announces port 0 listens
    /// nowhere: it is sent peers, never stored (see
    /// [`TorrentMap::announce`](crate::TorrentMap::announce)).
    fn reachable(&self) -> bool {
        true
    }

    /// The address of the client a peer known by this key announced from, when the
    /// key carries it (BitTorrent peers are their addresses; a WebTorrent peer id
    /// says nothing of it).
    fn client(&self) -> Option<std::net::IpAddr> {
        None
    }
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
    pub(crate) v4: PeerList<V4Addr, X>,
    /// Boxed and created on first use: most torrents never see an IPv6 peer.
    pub(crate) v6: Option<Box<PeerList<V6Addr, X>>>,
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

    fn reachable(&self) -> bool {
        self.port() != 0
    }

    fn client(&self) -> Option<std::net::IpAddr> {
        Some(crate::PeerAddr::socket_addr(self).ip())
    }
}

impl<X: PeerData> ListIn<DualStack<X>> for V6Addr {
    fn list(set: &DualStack<X>) -> Option<&PeerList<Self, X>> {
        set.v6.as_deref()
    }

    fn list_mut(set: &mut DualStack<X>) -> &mut PeerList<Self, X> {
        set.v6.get_or_insert_with(Default::default)
    }

    fn reachable(&self) -> bool {
        self.port() != 0
    }

    fn client(&self) -> Option<std::net::IpAddr> {
        Some(crate::PeerAddr::socket_addr(self).ip())
    }
}
