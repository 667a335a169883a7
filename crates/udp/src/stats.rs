//! Tracker statistics: what each worker counted, summed on demand.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use shoal_common::metrics::CachePadded;

shoal_common::counters! {
    /// Counted by each socket worker.
    pub struct SocketCounters, SharedSocketCounters, SocketTotals {
        /// Datagrams received.
        received,
        /// Connect requests.
        connect_requests,
        /// Announce requests (valid ones, before connection id checks).
        announce_requests,
        /// Scrape requests (valid ones, before connection id checks).
        scrape_requests,
        /// Datagrams that were not valid requests.
        invalid_requests,
        /// Requests ignored for an unknown, forged or expired connection id.
        bad_connection_ids,
        /// Requests refused by the access list.
        access_denied,
        /// Requests dropped because a swarm worker's queue or the pending-scrape table
        /// was full.
        shed,
        /// Scrapes whose parts did not all come back in time.
        scrapes_timed_out,
        /// Connect replies sent.
        connect_replies,
        /// Announce replies sent.
        announce_replies,
        /// Scrape replies sent.
        scrape_replies,
        /// Error replies sent.
        error_replies,
        /// Replies that could not be sent (send-queue full or a send error).
        send_failures,
    }
}

/// Sizes each swarm worker reports after every cleaning pass.
#[derive(Debug, Default)]
pub struct SwarmGauges {
    /// Torrents in the worker's shard.
    pub torrents: AtomicU64,
    /// Peers in the worker's shard.
    pub peers: AtomicU64,
}

/// All workers' statistics.
#[derive(Debug)]
pub struct Stats {
    sockets: Vec<CachePadded<SharedSocketCounters>>,
    swarms: Vec<CachePadded<SwarmGauges>>,
}

/// A point-in-time sum over all workers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// Socket worker counters, summed.
    pub requests: SocketTotals,
    /// Torrents over all shards (as of each shard's last cleaning).
    pub torrents: u64,
    /// Peers over all shards (as of each shard's last cleaning).
    pub peers: u64,
}

impl Stats {
    /// Zeroed statistics for the given worker counts.
    pub fn new(socket_workers: usize, swarm_workers: usize) -> Arc<Self> {
        Arc::new(Self {
            sockets: (0..socket_workers)
                .map(|_| CachePadded::default())
                .collect(),
            swarms: (0..swarm_workers).map(|_| CachePadded::default()).collect(),
        })
    }

    /// Socket worker `index`'s counters.
    pub fn socket(&self, index: usize) -> &SharedSocketCounters {
        &self.sockets[index]
    }

    /// Swarm worker `index`'s gauges.
    pub fn swarm(&self, index: usize) -> &SwarmGauges {
        &self.swarms[index]
    }

    /// Sums everything.
    pub fn snapshot(&self) -> StatsSnapshot {
        let mut snapshot = StatsSnapshot::default();
        for counters in &self.sockets {
            snapshot.requests.add(counters);
        }
        for gauges in &self.swarms {
            snapshot.torrents += gauges.torrents.load(Ordering::Relaxed);
            snapshot.peers += gauges.peers.load(Ordering::Relaxed);
        }
        snapshot
    }
}

/// One log line of rates between two snapshots `seconds` apart.
pub fn summary(now: &StatsSnapshot, before: &StatsSnapshot, seconds: f64) -> String {
    let delta = now.requests.since(&before.requests);
    let rate = |count: u64| count as f64 / seconds.max(0.001);
    format!(
        "requests/s: {:.0} (connect {:.0}, announce {:.0}, scrape {:.0}); replies/s: {:.0}; \
         per interval: invalid {}, bad connection id {}, denied {}, shed {}, send failures {}; \
         torrents {}, peers {}",
        rate(delta.received),
        rate(delta.connect_requests),
        rate(delta.announce_requests),
        rate(delta.scrape_requests),
        rate(
            delta.connect_replies
                + delta.announce_replies
                + delta.scrape_replies
                + delta.error_replies
        ),
        delta.invalid_requests,
        delta.bad_connection_ids,
        delta.access_denied,
        delta.shed,
        delta.send_failures,
        now.torrents,
        now.peers,
    )
}
