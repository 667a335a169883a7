//! What travels between socket workers and swarm workers.
//!
//! A socket worker collects the requests for one swarm worker into a [`Job`] and sends
//! the whole job over the swarm worker's bounded channel: one channel operation per
//! batch of up to [`MAX_JOB_REQUESTS`] requests rather than per request. The swarm
//! worker encodes its replies into the job's [`Replies`] buffers, clears the requests
//! and sends the same job back. The socket worker sends the replies and keeps the job
//! for reuse, so in steady state no buffer is allocated per request or per batch.

use std::net::SocketAddr;
use std::ops::Range;

use shoal_swarm::{AnnounceEvent, InfoHash, PeerAddress, ScrapeStats};
use shoal_udp_protocol::TransactionId;

/// Requests per job before a socket worker sends it off.
pub(crate) const MAX_JOB_REQUESTS: usize = 64;

/// A batch of requests for one swarm worker and the buffers for their replies.
#[derive(Debug, Default)]
pub(crate) struct Job {
    /// Index of the socket worker the job belongs to (and returns to).
    pub socket_worker: usize,
    /// The requests.
    pub requests: Vec<SwarmRequest>,
    /// Info hashes of the job's scrapes, referenced by range.
    pub scrape_hashes: Vec<ScrapeHash>,
    /// Filled in by the swarm worker.
    pub replies: Replies,
    /// When the batch holding the job's first request was read (for the latency
    /// histogram; its other requests were read no earlier).
    pub read_at: Option<std::time::Instant>,
}

impl Job {
    /// An empty job belonging to `socket_worker`.
    pub(crate) fn new(socket_worker: usize) -> Self {
        Self {
            socket_worker,
            ..Self::default()
        }
    }

    /// Empties the job, keeping its buffers.
    pub(crate) fn clear(&mut self) {
        self.requests.clear();
        self.scrape_hashes.clear();
        self.replies.clear();
        self.read_at = None;
    }
}

impl shoal_worker::Batch for Job {
    fn len(&self) -> usize {
        self.requests.len()
    }

    fn clear(&mut self) {
        Job::clear(self);
    }
}

/// One request for a swarm worker.
#[derive(Clone, Debug)]
pub(crate) struct SwarmRequest {
    /// Where the reply goes.
    pub client: SocketAddr,
    /// Echoed in the reply.
    pub transaction_id: TransactionId,
    /// What to do.
    pub kind: RequestKind,
}

/// What a swarm worker is asked to do.
#[derive(Clone, Debug)]
pub(crate) enum RequestKind {
    /// An announce; the swarm worker writes the whole reply.
    Announce(AnnounceWork),
    /// A scrape whose every hash belongs to this swarm worker; it writes the reply.
    Scrape {
        /// Range of [`Job::scrape_hashes`].
        hashes: Range<u32>,
    },
    /// This swarm worker's share of a scrape spanning several; it returns counts the
    /// socket worker merges.
    ScrapePart {
        /// The socket worker's record of the whole scrape.
        slot: ScrapeSlot,
        /// Range of [`Job::scrape_hashes`].
        hashes: Range<u32>,
    },
}

/// An announce, checked and resolved by the socket worker.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AnnounceWork {
    /// The torrent.
    pub info_hash: InfoHash,
    /// The peer: source IP of the packet, port from the request.
    pub peer: PeerAddress,
    /// The event.
    pub event: AnnounceEvent,
    /// `left == 0`.
    pub seeder: bool,
    /// Peers to send, already capped by configuration.
    pub peers_wanted: u16,
}

/// An info hash and its position in the scrape request it came from.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ScrapeHash {
    /// Index in the original request.
    pub position: u8,
    /// The torrent.
    pub info_hash: InfoHash,
}

/// Names a pending scrape in a socket worker's table; the generation tells a late part
/// of an expired scrape from a part of a newer one in the same slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ScrapeSlot {
    /// Slot index.
    pub index: u32,
    /// Slot generation.
    pub generation: u32,
}

/// Replies encoded by a swarm worker.
#[derive(Debug, Default)]
pub(crate) struct Replies {
    /// Encoded packets, back to back.
    pub bytes: Vec<u8>,
    /// Where each packet in `bytes` ends and where it goes.
    pub packets: Vec<ReplyPacket>,
    /// Counts for scrape parts, to merge.
    pub scrape_parts: Vec<ScrapePartReply>,
    /// The counts the parts refer to.
    pub scrape_stats: Vec<PositionedStats>,
}

impl Replies {
    /// Empties the replies, keeping the buffers.
    pub(crate) fn clear(&mut self) {
        self.bytes.clear();
        self.packets.clear();
        self.scrape_parts.clear();
        self.scrape_stats.clear();
    }

    /// The encoded packets with their destinations and kinds (tests and the fuzz rig
    /// read replies so).
    #[cfg(any(test, fuzzing))]
    pub(crate) fn iter_packets(&self) -> impl Iterator<Item = (&[u8], &ReplyPacket)> {
        let mut start = 0;
        self.packets.iter().map(move |packet| {
            let end = packet.end as usize;
            let bytes = &self.bytes[start..end];
            start = end;
            (bytes, packet)
        })
    }
}

/// One encoded reply.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReplyPacket {
    /// Where it goes.
    pub client: SocketAddr,
    /// End offset in [`Replies::bytes`].
    pub end: u32,
    /// What kind of reply, for the counters.
    pub kind: ReplyKind,
}

/// Kinds of replies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReplyKind {
    /// A connect reply.
    Connect,
    /// An announce reply.
    Announce,
    /// A scrape reply.
    Scrape,
    /// An error reply.
    Error,
    /// An announce reply made by a socket worker for an announce it had to shed: the
    /// interval, no peers.
    Backoff,
}

impl Replies {
    /// Records that the bytes written since the previous packet are a packet for `client`.
    pub(crate) fn finish_packet(&mut self, client: SocketAddr, kind: ReplyKind) {
        self.packets.push(ReplyPacket {
            client,
            end: self.bytes.len() as u32,
            kind,
        });
    }
}

/// A swarm worker's counts for its part of a scrape.
#[derive(Clone, Debug)]
pub(crate) struct ScrapePartReply {
    /// Which pending scrape.
    pub slot: ScrapeSlot,
    /// Range of [`Replies::scrape_stats`].
    pub stats: Range<u32>,
}

/// Counts for one info hash of a scrape, with its position in the request.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PositionedStats {
    /// Index in the original request.
    pub position: u8,
    /// The counts.
    pub stats: ScrapeStats,
}

/// The protocol crate's scrape entry for the swarm crate's counts.
pub(crate) fn wire_stats(stats: ScrapeStats) -> shoal_udp_protocol::ScrapeStats {
    shoal_udp_protocol::ScrapeStats {
        seeders: stats.seeders,
        completed: stats.downloads,
        leechers: stats.leechers,
    }
}
