//! Swarm workers: each owns the torrents whose info hashes map to it.
//!
//! A swarm worker takes [`Job`]s from its channel, runs each request against its
//! [`TorrentMap`], encodes the replies into the job and sends the job back to the socket
//! worker it came from. Between jobs it cleans its torrents on schedule. It never
//! touches a socket and shares no data with other workers, so it takes no locks.

use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError, SendTimeoutError};
use rand::rngs::SmallRng;
use shoal_common::{AccessControl, Shutdown};
use shoal_swarm::{Announce, BitTorrentMap, Clock, DualStack, ListIn, PeerAddr, ServerTime};
use shoal_udp_protocol::response::{
    write_announce_header, write_scrape_entry, write_scrape_header,
};

use crate::config::Config;
use crate::messages::{
    AnnounceWork, Job, PeerAddress, PositionedStats, ReplyKind, RequestKind, ScrapePartReply,
};
use crate::socket::ReplyRoute;
use shoal_common::metrics::SwarmGauges;

/// Everything a swarm worker needs.
pub(crate) struct SwarmWorker {
    pub(crate) config: Arc<Config>,
    pub(crate) clock: Arc<Clock>,
    pub(crate) access: Arc<AccessControl>,
    pub(crate) jobs: Receiver<Job>,
    pub(crate) routes: Vec<ReplyRoute>,
    pub(crate) gauges: Arc<crate::stats::Stats>,
    pub(crate) index: usize,
    pub(crate) shutdown: Shutdown,
}

impl SwarmWorker {
    pub(crate) fn run(self) -> anyhow::Result<()> {
        let mut shard = Shard {
            torrents: BitTorrentMap::new(self.config.cleaning.peer_timeout),
            rng: rand::make_rng(),
            interval: self.config.protocol.announce_interval,
        };
        let clean_every = self.config.cleaning.interval;
        let mut next_clean = self.clock.now().plus(clean_every);
        let gauges = self.gauges.swarm(self.index);

        while !self.shutdown.is_requested() {
            match self.jobs.recv_timeout(Shutdown::POLL_INTERVAL) {
                Ok(mut job) => {
                    shard.handle(&mut job, self.clock.now());
                    self.send_back(job)?;
                    publish(gauges, &shard.torrents);
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return Ok(()),
            }
            let now = self.clock.now();
            if now >= next_clean {
                let access = self.access.snapshot();
                let report = shard
                    .torrents
                    .clean(now, |info_hash| access.allows(info_hash));
                log::debug!(
                    "cleaned {} peers and {} torrents; {} torrents and {} peers remain",
                    report.peers_removed,
                    report.torrents_removed,
                    shard.torrents.torrent_count(),
                    shard.torrents.peer_count()
                );
                publish(gauges, &shard.torrents);
                next_clean = now.plus(clean_every);
            }
        }
        Ok(())
    }

    /// Returns a job to its socket worker. The reply channel holds every job that
    /// can be in flight, so this waits only while that worker is busy reading; it
    /// gives up when shutting down.
    fn send_back(&self, mut job: Job) -> anyhow::Result<()> {
        let route = &self.routes[job.socket_worker];
        loop {
            match route.jobs.send_timeout(job, Duration::from_millis(50)) {
                Ok(()) => {
                    route.wake_if_sleeping();
                    return Ok(());
                }
                Err(SendTimeoutError::Timeout(returned)) => {
                    if self.shutdown.is_requested() {
                        return Ok(());
                    }
                    job = returned;
                }
                Err(SendTimeoutError::Disconnected(_)) => return Ok(()),
            }
        }
    }
}

fn publish(gauges: &SwarmGauges, torrents: &BitTorrentMap<()>) {
    gauges.publish(torrents.torrent_count(), torrents.peer_count());
}

/// A swarm worker's state, separate from its channels so it can be driven directly.
pub(crate) struct Shard {
    pub(crate) torrents: BitTorrentMap<()>,
    pub(crate) rng: SmallRng,
    pub(crate) interval: u32,
}

impl Shard {
    /// Runs every request of `job` and leaves the replies in it.
    pub(crate) fn handle(&mut self, job: &mut Job, now: ServerTime) {
        let Job {
            requests,
            scrape_hashes,
            replies,
            ..
        } = job;
        for request in requests.drain(..) {
            match request.kind {
                RequestKind::Announce(work) => {
                    match work.peer {
                        PeerAddress::V4(addr) => self.announce(
                            &work,
                            addr,
                            request.transaction_id,
                            now,
                            &mut replies.bytes,
                        ),
                        PeerAddress::V6(addr) => self.announce(
                            &work,
                            addr,
                            request.transaction_id,
                            now,
                            &mut replies.bytes,
                        ),
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

    fn announce<A: PeerAddr + ListIn<DualStack<()>>>(
        &mut self,
        work: &AnnounceWork,
        addr: A,
        transaction_id: shoal_udp_protocol::TransactionId,
        now: ServerTime,
        out: &mut Vec<u8>,
    ) {
        let header = out.len();
        write_announce_header(out, transaction_id, self.interval, 0, 0);
        let announce = Announce {
            key: addr,
            extra: (),
            event: work.event,
            seeder: Some(work.seeder),
            peers_wanted: usize::from(work.peers_wanted),
        };
        let counts = self
            .torrents
            .announce(&work.info_hash, announce, now, &mut self.rng, |peer| {
                out.extend_from_slice(peer.key().as_bytes());
            })
            .unwrap_or_default(); // BitTorrent peers (addresses) belong to nobody
        // The counts are known only after the update; patch them into the header.
        out[header + 12..header + 16].copy_from_slice(&counts.leechers.to_be_bytes());
        out[header + 16..header + 20].copy_from_slice(&counts.seeders.to_be_bytes());
    }
}

/// The protocol crate's scrape entry for the swarm crate's counts.
pub(crate) fn wire_stats(stats: shoal_swarm::ScrapeStats) -> shoal_udp_protocol::ScrapeStats {
    shoal_udp_protocol::ScrapeStats {
        seeders: stats.seeders,
        completed: stats.downloads,
        leechers: stats.leechers,
    }
}
