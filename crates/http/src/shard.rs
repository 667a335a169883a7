//! The torrents of one swarm worker, as the HTTP tracker serves them.
//!
//! [`HttpShard::serve`] answers one request; as a [`Shard`](shoal_worker::Shard)
//! (through [`BitTorrentShard`]) it answers a batch and returns the replies to the
//! socket workers they belong to. The worker core
//! (`shoal_worker`) runs it on a swarm worker thread, or inside the only socket
//! worker when that keeps the torrents itself.

use rand::rngs::SmallRng;
use shoal_http_protocol::PeerId;
use shoal_swarm::{
    Announce, BitTorrentMap, ChangeLog, DualStack, InfoHash, ListIn, Peer, PeerAddr, PeerAddress,
    ScrapeStats, ServerTime,
};
use shoal_worker::{BitTorrentShard, ByWorker};

use crate::messages::{
    AnnounceAnswer, AnnounceWork, AnnouncedPeers, ScrapeWork, SwarmReply, SwarmReplyKind,
    SwarmRequest, SwarmRequestKind, TRACKER_FULL,
};

/// The torrents of one swarm worker.
#[derive(Debug)]
pub(crate) struct HttpShard {
    pub(crate) torrents: BitTorrentMap<PeerId>,
    rng: SmallRng,
    /// Replies of the batch being served, by socket worker.
    replies: ByWorker<SwarmReply>,
    /// Changes for the other nodes, when the swarms are shared (`[cluster]`).
    changes: Option<ChangeLog>,
    /// The announce interval given now: peers outlive it.
    interval: Option<std::sync::Arc<shoal_worker::AnnounceInterval>>,
}

impl BitTorrentShard for HttpShard {
    type Batch = Vec<SwarmRequest>;
    type Reply = Vec<SwarmReply>;
    type Extra = PeerId;

    fn handle(
        &mut self,
        batch: Vec<SwarmRequest>,
        now: ServerTime,
        reply: &mut impl FnMut(usize, Vec<SwarmReply>),
    ) {
        // Peers live as long as the longest interval a reply gives now, plus the grace.
        if let Some(interval) = &self.interval {
            self.torrents.set_peer_timeout(interval.peer_timeout());
        }
        for request in batch {
            let kind = self.serve(request.kind, now);
            let to = request.reply_to;
            self.replies.push(
                usize::from(to.socket_worker),
                SwarmReply {
                    slot: to.slot,
                    kind,
                },
            );
        }
        self.replies.send_all(reply);
    }

    fn torrents(&self) -> &BitTorrentMap<PeerId> {
        &self.torrents
    }

    fn torrents_mut(&mut self) -> &mut BitTorrentMap<PeerId> {
        &mut self.torrents
    }

    fn changes(&mut self) -> Option<&mut ChangeLog> {
        self.changes.as_mut()
    }
}

impl HttpShard {
    /// No torrents yet; peers expire `peer_timeout` seconds after their last announce;
    /// at most `capacity`; changes are recorded for other nodes when `shared`.
    pub(crate) fn new(torrents: BitTorrentMap<PeerId>, shared: bool) -> Self {
        Self {
            torrents,
            rng: rand::make_rng(),
            replies: ByWorker::default(),
            changes: shared.then(ChangeLog::default),
            interval: None,
        }
    }

    /// With the announce interval the tracker gives (peers outlive it).
    pub(crate) fn with_interval(
        mut self,
        interval: std::sync::Arc<shoal_worker::AnnounceInterval>,
    ) -> Self {
        self.interval = Some(interval);
        self
    }

    /// Answers one request at `now`.
    pub(crate) fn serve(&mut self, request: SwarmRequestKind, now: ServerTime) -> SwarmReplyKind {
        match request {
            SwarmRequestKind::Announce(work) => SwarmReplyKind::Announce(self.answer(&work, now)),
            SwarmRequestKind::Scrape(work) => SwarmReplyKind::Scrape(self.scrape(work)),
        }
    }

    /// Answers an announce at `now`.
    pub(crate) fn answer(&mut self, work: &AnnounceWork, now: ServerTime) -> AnnounceAnswer {
        match work.peer {
            PeerAddress::V4(addr) => self.announce(work, addr, now),
            PeerAddress::V6(addr) => self.announce(work, addr, now),
        }
    }

    /// Counts for a share of a scrape.
    pub(crate) fn scrape(&self, work: ScrapeWork) -> Vec<(InfoHash, ScrapeStats)> {
        match work {
            ScrapeWork::Torrents(info_hashes) => info_hashes
                .into_iter()
                .map(|hash| (hash, self.torrents.scrape(&hash)))
                .collect(),
            ScrapeWork::All => self.torrents.scrape_all(),
        }
    }

    fn announce<A: PeerAddr + ListIn<DualStack<PeerId>>>(
        &mut self,
        work: &AnnounceWork,
        addr: A,
        now: ServerTime,
    ) -> AnnounceAnswer {
        let announce = Announce {
            key: addr,
            extra: work.peer_id,
            event: work.event,
            seeder: Some(work.seeder),
            peers_wanted: usize::from(work.peers_wanted),
        };
        let mut compact = Vec::new();
        let mut with_ids = Vec::new();
        let result = self.torrents.announce(
            &work.info_hash,
            announce,
            now,
            &mut self.rng,
            |peer: &mut Peer<A, PeerId>| {
                if work.with_peer_ids {
                    with_ids.push((peer.key().socket_addr(), peer.extra));
                } else {
                    compact.extend_from_slice(peer.key().as_bytes());
                }
            },
        );
        // BitTorrent peers (addresses) belong to nobody, so the only refusals are of
        // a new torrent.
        let announced = match result {
            Ok(announced) => announced,
            Err(refused) => {
                let reason = refused.new_torrent_reason();
                return AnnounceAnswer::Refused(reason.unwrap_or(TRACKER_FULL));
            }
        };
        if let Some(changes) = &mut self.changes {
            let timeout = self.torrents.peer_timeout();
            let (info_hash, peer_id) = (&work.info_hash, &work.peer_id);
            changes.announced(
                info_hash,
                &addr,
                work.event,
                work.seeder,
                peer_id,
                &announced,
                timeout,
            );
        }
        let counts = announced.counts;
        let peers = if work.with_peer_ids {
            AnnouncedPeers::WithIds(with_ids)
        } else {
            AnnouncedPeers::Compact(compact)
        };
        AnnounceAnswer::Peers {
            complete: counts.seeders,
            incomplete: counts.leechers,
            peers,
            full: announced.full,
        }
    }
}
