//! Torrent and peer storage shared by the shoal trackers. No I/O, no threads, no clock
//! reads: every operation takes the current [`ServerTime`] and a random number
//! generator as arguments, so the behaviour is a pure function of its inputs and the
//! tests are deterministic.
//!
//! # Layout
//!
//! * [`time`]: seconds since start ([`ServerTime`]) and the [`Clock`] daemons read it from.
//! * [`peer`]: peer keys (compact addresses in their BEP 23 wire form, or any other
//!   small key such as a WebTorrent peer id), what a tracker keeps per peer
//!   ([`PeerData`]) and the peer record.
//! * [`peer_list`]: the peers of one torrent (and address family), seeders first,
//!   with a hash index once a swarm grows large.
//! * [`torrents`]: the map from info hash to torrent: announce, scrape, cleaning, for
//!   BitTorrent ([`DualStack`]: IPv4 and IPv6 apart) and WebTorrent (one list by
//!   peer id) alike.
//!
//! A tracker runs one [`TorrentMap`] per swarm worker; which info hashes a worker owns
//! is the daemon's business, not this crate's.

pub mod peer;
pub mod peer_list;
mod selection;
pub mod time;
pub mod torrents;

pub use peer::{Peer, PeerAddr, PeerAddress, PeerData, PeerKey, V4Addr, V6Addr};
pub use peer_list::PeerList;
pub use time::{Clock, ServerTime};
pub use torrents::{
    Announce, AnnounceEvent, BitTorrentMap, CleanReport, DualStack, ListIn, PeerLimits, PeerSet,
    PeerTaken, ScrapeStats, SwarmCounts, Torrent, TorrentMap,
};

/// A 20-byte SHA-1 info hash, the key of a torrent.
pub type InfoHash = [u8; 20];
