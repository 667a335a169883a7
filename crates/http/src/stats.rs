//! HTTP tracker statistics.

use shoal_common::metric_names::{
    ERRORS, ERRORS_HELP, REFUSED, REFUSED_HELP, REQUESTS, REQUESTS_HELP, RESPONSES, RESPONSES_HELP,
};
use shoal_common::{Observation, Observe};
use shoal_tcp::ConnectionCounters;

shoal_common::counters! {
    /// Counted by each socket worker.
    pub struct SocketCounters, SharedSocketCounters, SocketTotals {
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
        /// Failures with an interval to come back after, for requests shed because a
        /// swarm worker's queue was full.
        backoff_responses,
        /// Of `backoff_responses`, those to IPv6 clients.
        backoff_responses_v6,
        /// Error responses written (malformed, late, over the rate).
        error_responses,
        /// Of `error_responses`, those to IPv6 clients.
        error_responses_v6,
        /// Malformed, oversized or unsupported requests.
        bad_requests,
        /// Requests refused by the access list.
        access_denied,
        /// Requests refused by private mode (no or unknown passkey, a disabled
        /// account, an unregistered torrent, a seeding-only account downloading).
        private_refused,
        /// Announces refused by the client rules (`[clients]`).
        client_refused,
        /// Requests not completed within the idle timeout.
        timeouts,
    }
    /// Connections and clients, as every TCP tracker counts them.
    group connections: ConnectionCounters;
    /// Announces by client software.
    group clients: shoal_common::ClientCounts;
}

/// A sum over all workers.
pub(crate) type StatsSample = shoal_common::StatsSample<SocketTotals>;

/// One log line of rates between two samples `seconds` apart.
pub(crate) fn summary(now: &StatsSample, before: &StatsSample, seconds: f64) -> String {
    let d = now.requests.since(&before.requests);
    let rate = |count: u64| count as f64 / seconds.max(0.001);
    format!(
        "announces/s {:.0}, scrapes/s {:.0}, new connections/s {:.0}; per interval: bad requests \
         {}, denied {}, timeouts {}, {}; {}; torrents {}, peers {}",
        rate(d.announces),
        rate(d.scrapes),
        rate(d.connections.accepted),
        d.bad_requests,
        d.access_denied + d.private_refused + d.client_refused,
        d.timeouts,
        d.connections.line(now.requests.connections.open),
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
            ("backoff", self.backoff_responses, self.backoff_responses_v6),
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
            ("private", self.private_refused),
            ("client", self.client_refused),
        ] {
            out.counter(REFUSED, REFUSED_HELP, &[("reason", reason)], value);
        }
        out.counter(ERRORS, ERRORS_HELP, &[("kind", "timeout")], self.timeouts);
        self.connections.observe(out);
        self.clients.observe(out);
    }
}

impl shoal_worker::LoadCounters for SocketTotals {
    /// Shed requests are not counted per family: both families see all of them.
    fn load_counts(&self) -> [shoal_worker::FamilyCounts; 2] {
        let served_v6 = self.announce_responses_v6
            + self.scrape_responses_v6
            + self.error_responses_v6
            + self.backoff_responses_v6;
        let served = self.announce_responses
            + self.scrape_responses
            + self.error_responses
            + self.backoff_responses;
        let lost = self.connections.shed;
        [
            shoal_worker::FamilyCounts {
                announces: self.announce_responses - self.announce_responses_v6,
                served: served - served_v6,
                lost,
                ..Default::default()
            },
            shoal_worker::FamilyCounts {
                announces: self.announce_responses_v6,
                served: served_v6,
                lost,
                ..Default::default()
            },
        ]
    }
}
