//! Swarm workers: each owns the torrents whose info hashes map to it and answers
//! batches of requests from the socket workers. No sockets, no shared data, no locks.

use std::sync::Arc;

use crossbeam_channel::{Receiver, RecvTimeoutError};
use rand::rngs::SmallRng;
use shoal_common::{AccessControl, Shutdown};
use shoal_http_protocol::PeerId;
use shoal_swarm::{Announce, BitTorrentMap, Clock, DualStack, ListIn, Peer, PeerAddr, ServerTime};

use crate::config::Config;
use crate::messages::{
    AnnounceWork, AnnouncedPeers, PeerAddress, SwarmReply, SwarmReplyKind, SwarmRequest,
    SwarmRequestKind,
};
use crate::socket::ReplyRoute;
use crate::stats::Stats;

/// Everything a swarm worker needs.
pub(crate) struct SwarmWorker {
    pub(crate) config: Arc<Config>,
    pub(crate) clock: Arc<Clock>,
    pub(crate) access: Arc<AccessControl>,
    pub(crate) requests: Receiver<Vec<SwarmRequest>>,
    pub(crate) routes: Vec<ReplyRoute>,
    pub(crate) stats: Arc<Stats>,
    pub(crate) index: usize,
    pub(crate) shutdown: Shutdown,
}

impl SwarmWorker {
    pub(crate) fn run(self) -> anyhow::Result<()> {
        let mut shard = Shard::new(self.config.cleaning.peer_timeout);
        let clean_every = self.config.cleaning.interval;
        let mut next_clean = self.clock.now().plus(clean_every);
        let gauges = self.stats.swarm(self.index);
        // Replies grouped by the socket worker they go to.
        let mut outgoing: Vec<Vec<SwarmReply>> = self.routes.iter().map(|_| Vec::new()).collect();

        while !self.shutdown.is_requested() {
            match self.requests.recv_timeout(Shutdown::POLL_INTERVAL) {
                Ok(batch) => {
                    let now = self.clock.now();
                    for request in batch {
                        let kind = shard.handle(request.kind, now);
                        outgoing[usize::from(request.reply_to.socket_worker)].push(SwarmReply {
                            slot: request.reply_to.slot,
                            kind,
                        });
                    }
                    for (worker, replies) in outgoing.iter_mut().enumerate() {
                        if !replies.is_empty() {
                            self.send_back(worker, std::mem::take(replies));
                        }
                    }
                    gauges.publish(shard.torrents.torrent_count(), shard.torrents.peer_count());
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return Ok(()),
            }
            let now = self.clock.now();
            if now >= next_clean {
                let access = self.access.snapshot();
                shard
                    .torrents
                    .clean(now, |info_hash| access.allows(info_hash));
                gauges.publish(shard.torrents.torrent_count(), shard.torrents.peer_count());
                next_clean = now.plus(clean_every);
            }
        }
        Ok(())
    }

    /// Returns replies to a socket worker; waits only while that worker is busy, and
    /// not at all once shutting down.
    fn send_back(&self, worker: usize, replies: Vec<SwarmReply>) {
        self.routes[worker].send(replies, &self.shutdown);
    }
}

/// A swarm worker's torrents.
pub(crate) struct Shard {
    pub(crate) torrents: BitTorrentMap<PeerId>,
    pub(crate) rng: SmallRng,
}

impl Shard {
    pub(crate) fn new(peer_timeout: u32) -> Self {
        Self {
            torrents: BitTorrentMap::new(peer_timeout),
            rng: rand::make_rng(),
        }
    }

    pub(crate) fn handle(&mut self, request: SwarmRequestKind, now: ServerTime) -> SwarmReplyKind {
        match request {
            SwarmRequestKind::Announce(work) => match work.peer {
                PeerAddress::V4(addr) => self.announce(&work, addr, now),
                PeerAddress::V6(addr) => self.announce(&work, addr, now),
            },
            SwarmRequestKind::Scrape(info_hashes) => SwarmReplyKind::Scrape(
                info_hashes
                    .into_iter()
                    .map(|hash| (hash, self.torrents.scrape(&hash)))
                    .collect(),
            ),
            SwarmRequestKind::FullScrape => SwarmReplyKind::Scrape(self.torrents.scrape_all()),
        }
    }

    fn announce<A: PeerAddr + ListIn<DualStack<PeerId>>>(
        &mut self,
        work: &AnnounceWork,
        addr: A,
        now: ServerTime,
    ) -> SwarmReplyKind {
        let announce = Announce {
            key: addr,
            extra: work.peer_id,
            event: work.event,
            seeder: Some(work.seeder),
            peers_wanted: usize::from(work.peers_wanted),
        };
        let mut compact = Vec::new();
        let mut with_ids = Vec::new();
        let counts = self
            .torrents
            .announce(
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
            )
            .unwrap_or_default(); // BitTorrent peers (addresses) belong to nobody
        let peers = if work.with_peer_ids {
            AnnouncedPeers::WithIds(with_ids)
        } else {
            AnnouncedPeers::Compact(compact)
        };
        SwarmReplyKind::Announce {
            complete: counts.seeders,
            incomplete: counts.leechers,
            peers,
        }
    }
}
