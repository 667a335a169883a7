//! What travels between socket workers and swarm workers.
//!
//! Socket workers send batches (`Vec<SwarmRequest>`) over each swarm worker's bounded
//! channel; swarm workers send batches of replies back over the socket worker's
//! channel. A request names the socket worker and the slot its reply belongs to; a
//! scrape spanning several swarm workers is several requests to one slot.

use std::net::SocketAddr;

use shoal_http_protocol::{InfoHash, PeerId};
use shoal_swarm::{AnnounceEvent, ScrapeStats, V4Addr, V6Addr};

/// Where a reply goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplyTo {
    /// The socket worker.
    pub socket_worker: u16,
    /// The slot in that worker's table.
    pub slot: Slot,
}

/// A slot in a socket worker's table of requests waiting for swarm workers. The
/// generation tells a reply for an abandoned request (the client went away) from one
/// for the slot's next user.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    /// Index.
    pub index: u32,
    /// Generation.
    pub generation: u32,
}

/// One request for a swarm worker.
#[derive(Clone, Debug)]
pub struct SwarmRequest {
    /// Where the reply goes.
    pub reply_to: ReplyTo,
    /// What to do.
    pub kind: SwarmRequestKind,
}

/// What a swarm worker is asked.
#[derive(Clone, Debug)]
pub enum SwarmRequestKind {
    /// An announce.
    Announce(AnnounceWork),
    /// Counts for these torrents (this worker's share of a scrape).
    Scrape(Vec<InfoHash>),
    /// Counts for every torrent of this worker.
    FullScrape,
}

/// An announce, checked and resolved by the socket worker.
#[derive(Clone, Copy, Debug)]
pub struct AnnounceWork {
    /// The torrent.
    pub info_hash: InfoHash,
    /// Where the peer listens.
    pub peer: PeerAddress,
    /// Its peer id (kept for dictionary-model replies).
    pub peer_id: PeerId,
    /// The event.
    pub event: AnnounceEvent,
    /// Whether it has the whole torrent.
    pub seeder: bool,
    /// Peers to send, capped by configuration.
    pub peers_wanted: u16,
    /// Whether the reply lists peers as dictionaries with peer ids (`compact=0`
    /// without `no_peer_id`) rather than as compact bytes.
    pub with_peer_ids: bool,
}

/// A peer address of either family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerAddress {
    /// IPv4.
    V4(V4Addr),
    /// IPv6.
    V6(V6Addr),
}

impl PeerAddress {
    /// The address of a client at `ip` listening on `port` (mapped IPv4 addresses are
    /// IPv4 peers).
    pub fn new(ip: std::net::IpAddr, port: u16) -> Self {
        match ip.to_canonical() {
            std::net::IpAddr::V4(ip) => Self::V4(V4Addr::new(ip, port)),
            std::net::IpAddr::V6(ip) => Self::V6(V6Addr::new(ip, port)),
        }
    }
}

/// A reply from a swarm worker.
#[derive(Clone, Debug)]
pub struct SwarmReply {
    /// The slot it belongs to.
    pub slot: Slot,
    /// The answer.
    pub kind: SwarmReplyKind,
}

/// The answer of a swarm worker.
#[derive(Clone, Debug)]
pub enum SwarmReplyKind {
    /// For an announce.
    Announce {
        /// Seeders.
        complete: u32,
        /// Leechers.
        incomplete: u32,
        /// The peers chosen.
        peers: AnnouncedPeers,
    },
    /// For a scrape or full scrape: counts per torrent.
    Scrape(Vec<(InfoHash, ScrapeStats)>),
}

/// Peers for an announce reply.
#[derive(Clone, Debug)]
pub enum AnnouncedPeers {
    /// Compact: 6 or 18 bytes each, all of the announcer's family.
    Compact(Vec<u8>),
    /// With peer ids, for dictionary-model replies.
    WithIds(Vec<(SocketAddr, PeerId)>),
}

/// The swarm worker that owns `info_hash` among `swarm_workers`.
pub fn swarm_worker_for(info_hash: &InfoHash, swarm_workers: usize) -> usize {
    // Info hashes are SHA-1 digests: any four bytes are uniformly distributed.
    u32::from_le_bytes([info_hash[0], info_hash[1], info_hash[2], info_hash[3]]) as usize
        % swarm_workers
}
