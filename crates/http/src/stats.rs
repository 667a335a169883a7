//! HTTP tracker statistics.

shoal_common::counters! {
    /// Counted by each socket worker.
    pub struct SocketCounters, SharedSocketCounters, SocketTotals {
        /// Connections accepted.
        accepted,
        /// Connections refused at the connection limit.
        refused,
        /// Connections refused: their client had per_ip.max_connections open.
        refused_per_ip,
        /// Requests refused: their client was over per_ip.requests_per_second.
        per_ip_limited,
        /// Connections and requests of banned clients, dropped.
        banned,
        /// Bans started.
        bans,
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

/// A sum over all workers.
pub type StatsSnapshot = shoal_common::metrics::StatsSnapshot<SocketTotals>;

/// One log line of rates between two snapshots `seconds` apart.
pub fn summary(now: &StatsSnapshot, before: &StatsSnapshot, seconds: f64) -> String {
    let d = now.requests.since(&before.requests);
    let rate = |count: u64| count as f64 / seconds.max(0.001);
    format!(
        "announces/s {:.0}, scrapes/s {:.0}, new connections/s {:.0}, open connections {}; per interval: \
         bad requests {}, denied {}, busy {}, timeouts {}, TLS failures {}, refused connections {} \
         (per client {}), rate-limited {}, banned {}, new bans {}, {}; torrents {}, peers {}",
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
        d.refused_per_ip,
        d.per_ip_limited,
        d.banned,
        d.bans,
        now.capacity_line(before),
        now.torrents,
        now.peers,
    )
}
