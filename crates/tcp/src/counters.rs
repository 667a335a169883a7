//! What every TCP tracker counts about its connections and clients: one set of
//! counters, embedded in each tracker's own (`group connections: ConnectionCounters;`)
//! and observed here once, so the HTTP and WebTorrent trackers name them alike.

use shoal_common::metric_names::{
    BANS, BANS_HELP, CONNECTIONS, CONNECTIONS_HELP, ERRORS, ERRORS_HELP, OPEN_CONNECTIONS,
    OPEN_CONNECTIONS_HELP, REFUSED, REFUSED_HELP,
};
use shoal_common::{Observation, Observe};

shoal_common::counters! {
    /// Connections and clients, counted by each socket worker of a TCP tracker.
    pub struct ConnectionCounters, SharedConnectionCounters, ConnectionTotals {
        /// Connections accepted.
        accepted,
        /// Connections refused at network.max_connections with none to give way.
        refused,
        /// Connections refused: their client had per_ip.max_connections open, their
        /// network per_ip.max_connections_per_network, or their client its most TLS
        /// handshakes under way.
        refused_per_ip,
        /// The connection quiet the longest closed to make room for a newcomer at
        /// network.max_connections, and TLS handshakes closed for a newcomer past
        /// network.max_tls_handshakes (the one under way longest).
        idle_evicted,
        /// Requests refused: their client was over per_ip.requests_per_second.
        per_ip_limited,
        /// Connections and requests of banned clients, dropped.
        banned,
        /// Bans started.
        bans,
        /// Failed TLS handshakes.
        tls_failures,
        /// Requests answered "busy" because a swarm worker's queue was full.
        shed,
        /// Connections open now (a gauge: set, not added).
        open,
    }
}

impl SharedConnectionCounters {
    /// Sets the gauge of open connections.
    pub fn set_open(&self, open: usize) {
        self.open
            .store(open as u64, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Observe for ConnectionTotals {
    fn observe(&self, out: &mut Observation) {
        for (reason, value) in [
            ("rate_limit", self.per_ip_limited),
            ("banned", self.banned),
            ("shed", self.shed),
            ("connection_limit", self.refused),
            ("connection_limit_per_ip", self.refused_per_ip),
        ] {
            out.counter(REFUSED, REFUSED_HELP, &[("reason", reason)], value);
        }
        for (kind, value) in [
            ("tls_handshake", self.tls_failures),
            ("idle_evicted", self.idle_evicted),
        ] {
            out.counter(ERRORS, ERRORS_HELP, &[("kind", kind)], value);
        }
        out.counter(BANS, BANS_HELP, &[], self.bans);
        out.counter(CONNECTIONS, CONNECTIONS_HELP, &[], self.accepted);
        out.gauge(
            OPEN_CONNECTIONS,
            OPEN_CONNECTIONS_HELP,
            &[],
            self.open as f64,
        );
    }
}

impl ConnectionTotals {
    /// The part of a statistics line about connections and clients, for the interval
    /// `self` (a difference of snapshots) with `open` connections now.
    pub fn line(&self, open: u64) -> String {
        format!(
            "open connections {open}, TLS failures {}, quiet connections closed for newcomers {}, \
             refused connections {} (per client {}), rate-limited {}, banned {}, new bans {}, busy {}",
            self.tls_failures,
            self.idle_evicted,
            self.refused,
            self.refused_per_ip,
            self.per_ip_limited,
            self.banned,
            self.bans,
            self.shed,
        )
    }
}
