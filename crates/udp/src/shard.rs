//! The torrents of one swarm worker, as the UDP tracker serves them.
//!
//! A [`UdpShard`] takes a [`Job`], runs each request against its torrent map, encodes
//! the replies straight into the job's buffers and hands the same job back to the
//! socket worker it came from. The worker core (`shoal_worker`) runs it on a swarm worker
//! thread, or inside the socket worker when that keeps the torrents itself.

use std::sync::Arc;

use rand::RngExt as _;
use rand::rngs::SmallRng;
use shoal_swarm::{
    Announce, BitTorrentMap, ChangeLog, DualStack, ListIn, Located, PREFETCH_STEPS, PeerAddr,
    PeerAddress, ServerTime,
};
use shoal_udp_protocol::TransactionId;
use shoal_udp_protocol::response::{
    write_announce_header, write_scrape_entry, write_scrape_header,
};
use shoal_worker::{AnnounceInterval, BitTorrentShard, Family};

use crate::messages::{
    AnnounceWork, Job, PositionedStats, ReplyKind, RequestKind, ScrapePartReply, wire_stats,
};

/// The torrents of one swarm worker.
#[derive(Debug)]
pub(crate) struct UdpShard {
    pub(crate) torrents: BitTorrentMap<()>,
    pub(crate) rng: SmallRng,
    /// The announce interval told to clients now (adapted to load).
    pub(crate) interval: Arc<AnnounceInterval>,
    /// Changes for the other nodes, when the swarms are shared (`[cluster]`).
    pub(crate) changes: Option<ChangeLog>,
    /// The torrent of each announce of the batch being served, hashed once for the
    /// prefetch steps and the announce; kept to reuse its memory.
    located: Vec<Located>,
}

impl BitTorrentShard for UdpShard {
    type Batch = Job;
    type Reply = Job;
    type Extra = ();

    fn handle(&mut self, mut job: Job, now: ServerTime, reply: &mut impl FnMut(usize, Job)) {
        self.serve(&mut job, now);
        reply(job.socket_worker, job);
    }

    fn torrents(&self) -> &BitTorrentMap<()> {
        &self.torrents
    }

    fn torrents_mut(&mut self) -> &mut BitTorrentMap<()> {
        &mut self.torrents
    }

    fn changes(&mut self) -> Option<&mut ChangeLog> {
        self.changes.as_mut()
    }
}

impl UdpShard {
    /// A shard with `torrents`, telling clients to announce every `interval`.
    pub(crate) fn new(
        torrents: BitTorrentMap<()>,
        rng: SmallRng,
        interval: Arc<AnnounceInterval>,
        changes: Option<ChangeLog>,
    ) -> Self {
        Self {
            torrents,
            rng,
            interval,
            changes,
            located: Vec::new(),
        }
    }

    /// Runs every request of `job` and leaves the replies in it.
    pub(crate) fn serve(&mut self, job: &mut Job, now: ServerTime) {
        let Job {
            requests,
            scrape_hashes,
            replies,
            ..
        } = job;
        // Peers live as long as the longest interval a reply gives now, plus the
        // grace: one told to come back later is not forgotten before it does.
        self.torrents.set_peer_timeout(self.interval.peer_timeout());
        // With a million torrents nearly every announce misses the cache on its
        // torrent's slot and again on its peers: ask for the batch's memory level by
        // level first, so the misses overlap instead of queueing one request at a time
        // (documents/benchmarks/floor-2026-11-23.md).
        self.located.clear();
        for request in requests.iter() {
            if let RequestKind::Announce(work) = &request.kind {
                self.located.push(self.torrents.locate(&work.info_hash));
            }
        }
        for step in 0..PREFETCH_STEPS {
            let announces = requests.iter().filter_map(|request| match &request.kind {
                RequestKind::Announce(work) => Some(&work.peer),
                _ => None,
            });
            for (peer, torrent) in announces.zip(&mut self.located) {
                let torrents = &self.torrents;
                match peer {
                    PeerAddress::V4(addr) => torrents.prefetch_announce(step, torrent, addr),
                    PeerAddress::V6(addr) => torrents.prefetch_announce(step, torrent, addr),
                }
            }
        }
        let mut located = 0;
        for request in requests.drain(..) {
            match request.kind {
                RequestKind::Announce(work) => {
                    let (transaction_id, out) = (request.transaction_id, &mut replies.bytes);
                    let torrent = self.located[located];
                    located += 1;
                    match work.peer {
                        PeerAddress::V4(addr) => {
                            self.announce(&work, &torrent, addr, transaction_id, now, out)
                        }
                        PeerAddress::V6(addr) => {
                            self.announce(&work, &torrent, addr, transaction_id, now, out)
                        }
                    }
                    replies.finish_packet(request.client, ReplyKind::Announce);
                }
                RequestKind::Scrape { hashes } => {
                    write_scrape_header(&mut replies.bytes, request.transaction_id);
                    for hash in &scrape_hashes[hashes.start as usize..hashes.end as usize] {
                        write_scrape_entry(
                            &mut replies.bytes,
                            wire_stats(self.torrents.scrape(&hash.info_hash)),
                        );
                    }
                    replies.finish_packet(request.client, ReplyKind::Scrape);
                }
                RequestKind::ScrapePart { slot, hashes } => {
                    let start = replies.scrape_stats.len() as u32;
                    for hash in &scrape_hashes[hashes.start as usize..hashes.end as usize] {
                        replies.scrape_stats.push(PositionedStats {
                            position: hash.position,
                            stats: self.torrents.scrape(&hash.info_hash),
                        });
                    }
                    let end = replies.scrape_stats.len() as u32;
                    replies.scrape_parts.push(ScrapePartReply {
                        slot,
                        stats: start..end,
                    });
                }
            }
        }
        scrape_hashes.clear();
    }

    /// Writes the announce reply into `out`. A client the tracker is too full to take (a new torrent it may not
    /// start, a new peer it does not store) is told the longest interval, so it does
    /// not come back before there may be room: BEP 15's error reply has no interval,
    /// and libtorrent retries one within 17.5 s.
    fn announce<A: PeerAddr + ListIn<DualStack<()>>>(
        &mut self,
        work: &AnnounceWork,
        torrent: &Located,
        addr: A,
        transaction_id: TransactionId,
        now: ServerTime,
        out: &mut Vec<u8>,
    ) {
        let header = out.len();
        let family = if addr.socket_addr().is_ipv6() {
            Family::V6
        } else {
            Family::V4
        };
        let interval = self.interval.for_reply(family, self.rng.random::<u32>());
        write_announce_header(out, transaction_id, interval, 0, 0);
        let announce = Announce {
            key: addr,
            extra: (),
            event: work.event,
            seeder: Some(work.seeder),
            peers_wanted: usize::from(work.peers_wanted),
        };
        let result =
            self.torrents
                .announce_located(torrent, announce, now, &mut self.rng, |peer| {
                    out.extend_from_slice(peer.key().as_bytes());
                });
        // BitTorrent peers (addresses) belong to nobody, so the only refusals are of
        // a new torrent.
        let announced = match result {
            Ok(announced) => announced,
            Err(_) => {
                out.truncate(header);
                let interval = self.interval.for_full(self.rng.random::<u32>());
                write_announce_header(out, transaction_id, interval, 0, 0);
                return;
            }
        };
        if announced.full {
            let interval = self.interval.for_full(self.rng.random::<u32>());
            out[header + 8..header + 12].copy_from_slice(&interval.to_be_bytes());
        }
        if let Some(changes) = &mut self.changes {
            let timeout = self.torrents.peer_timeout();
            let info_hash = &work.info_hash;
            changes.announced(
                info_hash,
                &addr,
                work.event,
                work.seeder,
                &(),
                &announced,
                timeout,
            );
        }
        let counts = announced.counts;
        // The counts are known only after the update; patch them into the header.
        out[header + 12..header + 16].copy_from_slice(&counts.leechers.to_be_bytes());
        out[header + 16..header + 20].copy_from_slice(&counts.seeders.to_be_bytes());
    }
}
