//! HTTP tracker statistics.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use shoal_common::metrics::CachePadded;

shoal_common::counters! {
    /// Counted by each socket worker.
    pub struct SocketCounters, SharedSocketCounters, SocketTotals {
        /// Connections accepted.
        accepted,
        /// Connections refused at the connection limit.
        refused,
        /// Connections currently open (a gauge: set, not added).
        open_connections,
        /// Announce requests.
        announces,
        /// Scrape requests.
        scrapes,
        /// Full scrapes built.
        full_scrapes,
        /// Malformed, oversized or unsupported requests.
        bad_requests,
        /// Requests refused by the access list.
        access_denied,
        /// Requests answered "busy" because a swarm worker's queue was full.
        shed,
        /// Requests not completed within the idle timeout.
        timeouts,
        /// Failed TLS handshakes.
        tls_failures,
    }
}

/// Sizes each swarm worker reports.
#[derive(Debug, Default)]
pub struct SwarmGauges {
    /// Torrents in the shard.
    pub torrents: AtomicU64,
    /// Peers in the shard.
    pub peers: AtomicU64,
}

/// All workers' statistics.
#[derive(Debug)]
pub struct Stats {
    sockets: Vec<CachePadded<SharedSocketCounters>>,
    swarms: Vec<CachePadded<SwarmGauges>>,
}

/// A sum over all workers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// Socket worker counters.
    pub requests: SocketTotals,
    /// Torrents.
    pub torrents: u64,
    /// Peers.
    pub peers: u64,
}

impl Stats {
    /// Zeroed statistics.
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
    let d = now.requests.since(&before.requests);
    let rate = |count: u64| count as f64 / seconds.max(0.001);
    format!(
        "announces/s {:.0}, scrapes/s {:.0}, new connections/s {:.0}, open connections {}; per interval: \
         bad requests {}, denied {}, busy {}, timeouts {}, TLS failures {}, refused connections {}; torrents {}, peers {}",
        rate(d.announces),
        rate(d.scrapes),
        rate(d.accepted),
        now.requests.open_connections,
        d.bad_requests,
        d.access_denied,
        d.shed,
        d.timeouts,
        d.tls_failures,
        d.refused,
        now.torrents,
        now.peers,
    )
}
