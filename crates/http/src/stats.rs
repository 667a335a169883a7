//! HTTP tracker statistics.

use shoal_common::metrics::{
    BANS, BANS_HELP, CONNECTIONS, CONNECTIONS_HELP, ERRORS, ERRORS_HELP, OPEN_CONNECTIONS,
    OPEN_CONNECTIONS_HELP, REFUSED, REFUSED_HELP, REQUESTS, REQUESTS_HELP, RESPONSES,
    RESPONSES_HELP,
};
use shoal_common::observe::{Observation, Observe};

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
        /// Of `announces`, those from IPv6 clients.
        announces_v6,
        /// Of `scrapes`, those from IPv6 clients.
        scrapes_v6,
        /// Responses to announces written (peers or a failure reason).
        announce_responses,
        /// Of `announce_responses`, those to IPv6 clients.
        announce_responses_v6,
        /// Responses to scrapes written.
        scrape_responses,
        /// Of `scrape_responses`, those to IPv6 clients.
        scrape_responses_v6,
        /// Error responses written (malformed, late, over the rate, busy).
        error_responses,
        /// Of `error_responses`, those to IPv6 clients.
        error_responses_v6,
        /// Malformed, oversized or unsupported requests.
        bad_requests,
        /// Requests refused by the access list.
        access_denied,
        /// Requests answered "busy" because a swarm worker's queue was full.
        shed,
        /// Requests not completed within the idle timeout.
        timeouts,
        /// Connections waiting for a request closed to make room for a newcomer at
        /// network.max_connections (the one that had waited longest, TLS handshakes
        /// counted as waiting since accepted), and TLS handshakes closed for a
        /// newcomer past network.max_tls_handshakes (the one under way longest).
        idle_evicted,
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
         bad requests {}, denied {}, busy {}, timeouts {}, TLS failures {}, idle connections closed \
         for newcomers {}, refused connections {} (per client {}), rate-limited {}, banned {}, new \
         bans {}, {}; torrents {}, peers {}",
        rate(d.announces),
        rate(d.scrapes),
        rate(d.accepted),
        now.requests.open_connections,
        d.bad_requests,
        d.access_denied,
        d.shed,
        d.timeouts,
        d.tls_failures,
        d.idle_evicted,
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

impl Observe for SocketTotals {
    fn observe(&self, out: &mut Observation) {
        for (action, all, ipv6) in [
            ("announce", self.announces, self.announces_v6),
            ("scrape", self.scrapes, self.scrapes_v6),
        ] {
            out.counter_by_ip_version(REQUESTS, REQUESTS_HELP, &[("action", action)], all, ipv6);
        }
        for (action, all, ipv6) in [
            (
                "announce",
                self.announce_responses,
                self.announce_responses_v6,
            ),
            ("scrape", self.scrape_responses, self.scrape_responses_v6),
            ("error", self.error_responses, self.error_responses_v6),
        ] {
            out.counter_by_ip_version(RESPONSES, RESPONSES_HELP, &[("action", action)], all, ipv6);
        }
        out.counter(
            "shoal_full_scrapes",
            "Full scrapes built (answers from the cache not counted).",
            &[],
            self.full_scrapes,
        );
        for (reason, value) in [
            ("bad_request", self.bad_requests),
            ("access_list", self.access_denied),
            ("rate_limit", self.per_ip_limited),
            ("banned", self.banned),
            ("shed", self.shed),
            ("connection_limit", self.refused),
            ("connection_limit_per_ip", self.refused_per_ip),
        ] {
            out.counter(REFUSED, REFUSED_HELP, &[("reason", reason)], value);
        }
        for (kind, value) in [
            ("timeout", self.timeouts),
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
            self.open_connections as f64,
        );
    }
}
