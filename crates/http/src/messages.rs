//! What travels between socket workers and swarm workers.
//!
//! Socket workers send batches (`Vec<SwarmRequest>`) over each swarm worker's bounded
//! channel; swarm workers send batches of replies back over the socket worker's
//! channel. A request names the socket worker and the slot its reply belongs to; a
//! scrape spanning several swarm workers is several requests to one slot.

use std::net::SocketAddr;

use shoal_http_protocol::{InfoHash, PeerId};
use shoal_swarm::{AnnounceEvent, PeerAddress, ScrapeStats};

/// Where a reply goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ReplyTo {
    /// The socket worker.
    pub socket_worker: u16,
    /// The slot in that worker's table.
    pub slot: Slot,
}

/// A slot in a socket worker's table of requests waiting for swarm workers. The
/// generation tells a reply for an abandoned request (the client went away) from one
/// for the slot's next user.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Slot {
    /// Index.
    pub index: u32,
    /// Generation.
    pub generation: u32,
}

/// One request for a swarm worker.
#[derive(Clone, Debug)]
pub(crate) struct SwarmRequest {
    /// Where the reply goes.
    pub reply_to: ReplyTo,
    /// What to do.
    pub kind: SwarmRequestKind,
}

/// What a swarm worker is asked.
#[derive(Clone, Debug)]
pub(crate) enum SwarmRequestKind {
    /// An announce.
    Announce(AnnounceWork),
    /// This worker's share of a scrape.
    Scrape(ScrapeWork),
}

/// This worker's share of a scrape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ScrapeWork {
    /// Counts for these torrents.
    Torrents(Vec<InfoHash>),
    /// Counts for every torrent of this worker (a full scrape).
    All,
}

/// An announce, checked and resolved by the socket worker.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AnnounceWork {
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

/// A reply from a swarm worker.
#[derive(Clone, Debug)]
pub(crate) struct SwarmReply {
    /// The slot it belongs to.
    pub slot: Slot,
    /// The answer.
    pub kind: SwarmReplyKind,
}

/// The answer of a swarm worker.
#[derive(Clone, Debug)]
pub(crate) enum SwarmReplyKind {
    /// For an announce.
    Announce(AnnounceAnswer),
    /// For a scrape or full scrape: counts per torrent.
    Scrape(Vec<(InfoHash, ScrapeStats)>),
}

/// A swarm worker's answer to an announce.
#[derive(Clone, Debug)]
pub(crate) enum AnnounceAnswer {
    /// The swarm's counts and the peers chosen.
    Peers {
        /// Seeders.
        complete: u32,
        /// Leechers.
        incomplete: u32,
        /// The peers chosen.
        peers: AnnouncedPeers,
        /// Whether the peer asked to be stored and was not: new, and its torrent or
        /// the tracker full (a `stopped` or port 0 announce is not stored and not
        /// full).
        full: bool,
    },
    /// The announce would start a torrent and may not: the tracker is full, or the
    /// client started as many as it may lately (the reason).
    Refused(&'static str),
}

/// Peers for an announce reply.
#[derive(Clone, Debug)]
pub(crate) enum AnnouncedPeers {
    /// Compact: 6 or 18 bytes each, all of the announcer's family.
    Compact(Vec<u8>),
    /// With peer ids, for dictionary-model replies.
    WithIds(Vec<(SocketAddr, PeerId)>),
}

/// Why a call to swarm workers has no answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CallError {
    /// A swarm worker's queue was full: the request was shed.
    Busy,
}

/// Scrape counts from every part of a call, in arrival order.
pub(crate) type ScrapeCounts = Vec<(InfoHash, ScrapeStats)>;

/// Reply to an announce that would start a torrent while the tracker is full.
pub(crate) const TRACKER_FULL: &str = "tracker full: no new torrents accepted";
