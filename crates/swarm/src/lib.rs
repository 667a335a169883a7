//! Torrent and peer storage shared by the shoal trackers. No I/O, no threads, no clock
//! reads: every operation takes the current [`ServerTime`] and a random number
//! generator as arguments, so the behaviour is a pure function of its inputs and the
//! tests are deterministic.
//!
//! # Layout
//!
//! * `time`: seconds since start ([`ServerTime`]) and the [`Clock`] daemons read it from.
//! * `peer`: peer keys (compact addresses in their BEP 23 wire form, or any other
//!   small key such as a WebTorrent peer id), what a tracker keeps per peer
//!   ([`PeerData`]) and the peer record.
//! * `peer_list`: the peers of one torrent (and address family), seeders first,
//!   with a hash index once a swarm grows large.
//! * `peer_set`: how a torrent keeps its peers: [`DualStack`] (BitTorrent: IPv4 and
//!   IPv6 apart) or one [`PeerList`] (WebTorrent: by peer id).
//! * `torrents`: the map from info hash to torrent: announce, scrape, cleaning one
//!   partition at a time, and the [`Capacity`] limits of a full tracker.
//! * `snapshot`: torrents as records, for the state file of a warm restart.
//! * `replication`: peer changes as the same records, for nodes that share swarms.
//! * `counts`: [`SwarmCounts`] and [`ScrapeStats`], what announces and scrapes report.
//! * `census`: seeders, leechers and the largest swarms, counted by each cleaning
//!   pass.
//! * `client_table`: per-client state (request rates, new-torrent budgets) in a
//!   fixed amount of memory.
//! * `partitions`: torrents in partitions, so cleaning goes one partition at a time;
//!   `position_index`: the flat hash index partitions and large peer lists use.
//! * `selection`: which peers go into a reply; `prefetch`: cache hints for serving a
//!   batch of announces without waiting on memory once per request.
//!
//! A tracker runs one [`TorrentMap`] per swarm worker; which info hashes a worker owns
//! is the daemon's business, not this crate's.

mod census;
mod client_table;
mod counts;
mod partitions;
mod peer;
mod peer_list;
mod peer_set;
mod position_index;
mod prefetch;
mod replication;
mod selection;
mod snapshot;
mod time;
mod torrents;

pub use census::{Census, LARGEST_SWARMS, SwarmSummary};
pub use client_table::{Bucket, ClientState, ClientTable, client_key};
pub use counts::{ScrapeStats, SwarmCounts};
pub use partitions::{Located, PARTITIONS};
pub use peer::{Peer, PeerAddr, PeerAddress, PeerData, PeerKey, V4Addr, V6Addr};
pub use peer_list::PeerList;
pub use peer_set::{DualStack, ListIn, PeerSet};
pub use replication::{ChangeLog, RelayLog, Relayed, RemotePeer, Replicated};
pub use snapshot::{RecordError, Restored, SnapshotData, check_records};
pub use time::{Clock, ServerTime};
pub use torrents::{
    Announce, AnnounceEvent, Announced, BitTorrentMap, Capacity, CleanReport, NewTorrentLimit,
    PREFETCH_STEPS, PeerLimits, Refusals, Refused, Torrent, TorrentMap,
};

/// A 20-byte SHA-1 info hash, the key of a torrent.
pub type InfoHash = [u8; 20];
