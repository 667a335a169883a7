//! Tracker statistics: what each worker counted, summed on demand.

use shoal_common::metric_names::{
    BANS, BANS_HELP, ERRORS, ERRORS_HELP, REFUSED, REFUSED_HELP, REQUESTS, REQUESTS_HELP,
    RESPONSES, RESPONSES_HELP,
};
use shoal_common::{Observation, Observe, WorkerStats};

shoal_common::counters! {
    /// Counted by each socket worker.
    pub struct SocketCounters, SharedSocketCounters, SocketTotals {
        /// Datagrams received.
        received,
        /// Of `received`, those over IPv6.
        received_v6,
        /// Connect requests.
        connect_requests,
        /// Announce requests (valid ones, before connection id checks).
        announce_requests,
        /// Scrape requests (valid ones, before connection id checks).
        scrape_requests,
        /// Of `connect_requests`, those over IPv6.
        connect_requests_v6,
        /// Of `announce_requests`, those over IPv6.
        announce_requests_v6,
        /// Of `scrape_requests`, those over IPv6.
        scrape_requests_v6,
        /// Datagrams that were not valid requests.
        invalid_requests,
        /// Requests ignored for an unknown, forged or expired connection id.
        bad_connection_ids,
        /// Requests refused by the access list.
        access_denied,
        /// Requests refused by private mode (no or unknown passkey, a disabled
        /// account, an unregistered torrent, a seeding-only account downloading).
        private_refused,
        /// Announces refused by the client rules (`[clients]`).
        client_refused,
        /// Requests dropped because their client was over per_ip.requests_per_second.
        per_ip_limited,
        /// Requests dropped because their client was banned.
        banned,
        /// Bans started (sustained abuse from a proven address).
        bans,
        /// Requests shed because a swarm worker's queue or the pending-scrape table
        /// was full (announces among them answered with a backoff reply).
        shed,
        /// Of `shed`, those over IPv6.
        shed_v6,
        /// Shed announces answered with a backoff reply: the current interval spread
        /// over one to two, no peers, nothing stored.
        backoff_replies,
        /// Of `backoff_replies`, those over IPv6.
        backoff_replies_v6,
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
        /// Of `connect_replies`, those over IPv6.
        connect_replies_v6,
        /// Of `announce_replies`, those over IPv6.
        announce_replies_v6,
        /// Of `scrape_replies`, those over IPv6.
        scrape_replies_v6,
        /// Of `error_replies`, those over IPv6.
        error_replies_v6,
        /// Replies that could not be sent (send-queue full or a send error).
        send_failures,
        /// Datagrams the kernel dropped, mostly for a full receive queue.
        kernel_drops,
        /// Of `kernel_drops`, those of the IPv6 socket.
        kernel_drops_v6,
        /// Of `kernel_drops`, those that were demand, as weighed by what the worker
        /// read around them (`shoal_worker::DropWeigher`): the adaptive interval's
        /// reading of them.
        kernel_drops_demand,
        /// Of `kernel_drops_demand`, those of the IPv6 socket.
        kernel_drops_demand_v6,
        /// Receive buffers shrunk for a queue that kept overflowing.
        queue_shrinks,
        /// Receive buffers set back to their configured size after an overload.
        queue_restores,
    }
    /// Announces by client software.
    group clients: shoal_common::ClientCounts;
}

/// All workers' statistics.
pub(crate) type Stats = WorkerStats<SharedSocketCounters>;

/// A point-in-time sum over all workers.
pub(crate) type StatsSample = shoal_common::StatsSample<SocketTotals>;

/// One log line of rates between two samples `seconds` apart.
pub(crate) fn summary(now: &StatsSample, before: &StatsSample, seconds: f64) -> String {
    let delta = now.requests.since(&before.requests);
    let rate = |count: u64| count as f64 / seconds.max(0.001);
    format!(
        "requests/s: {:.0} (connect {:.0}, announce {:.0}, scrape {:.0}); replies/s: {:.0}; \
         per interval: invalid {}, bad connection id {}, denied {}, rate-limited {}, banned {}, \
         new bans {}, shed {}, send failures {}, dropped by the kernel {}, {}; torrents {}, \
         peers {}",
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
        delta.access_denied + delta.private_refused + delta.client_refused,
        delta.per_ip_limited,
        delta.banned,
        delta.bans,
        delta.shed,
        delta.send_failures,
        delta.kernel_drops,
        now.capacity_line(before),
        now.torrents,
        now.peers,
    )
}

impl Observe for SocketTotals {
    fn observe(&self, out: &mut Observation) {
        out.counter(
            "shoal_datagrams_received",
            "UDP datagrams received.",
            &[],
            self.received,
        );
        for (action, all, ipv6) in [
            ("connect", self.connect_requests, self.connect_requests_v6),
            (
                "announce",
                self.announce_requests,
                self.announce_requests_v6,
            ),
            ("scrape", self.scrape_requests, self.scrape_requests_v6),
        ] {
            out.counter_by_ip_version(REQUESTS, REQUESTS_HELP, &[("action", action)], all, ipv6);
        }
        for (action, all, ipv6) in [
            ("connect", self.connect_replies, self.connect_replies_v6),
            ("announce", self.announce_replies, self.announce_replies_v6),
            ("scrape", self.scrape_replies, self.scrape_replies_v6),
            ("error", self.error_replies, self.error_replies_v6),
            ("backoff", self.backoff_replies, self.backoff_replies_v6),
        ] {
            out.counter_by_ip_version(RESPONSES, RESPONSES_HELP, &[("action", action)], all, ipv6);
        }
        for (reason, value) in [
            ("bad_request", self.invalid_requests),
            ("bad_connection_id", self.bad_connection_ids),
            ("access_list", self.access_denied),
            ("private", self.private_refused),
            ("client", self.client_refused),
            ("rate_limit", self.per_ip_limited),
            ("banned", self.banned),
            ("shed", self.shed),
        ] {
            out.counter(REFUSED, REFUSED_HELP, &[("reason", reason)], value);
        }
        for (kind, value) in [
            ("send_failure", self.send_failures),
            ("scrape_timeout", self.scrapes_timed_out),
        ] {
            out.counter(ERRORS, ERRORS_HELP, &[("kind", kind)], value);
        }
        out.counter(BANS, BANS_HELP, &[], self.bans);
        self.clients.observe(out);
        out.counter(
            "shoal_datagrams_dropped",
            "UDP datagrams the kernel dropped before the tracker could read them, mostly \
             because a socket's receive queue was full.",
            &[],
            self.kernel_drops,
        );
        for (change, value) in [
            ("shrink", self.queue_shrinks),
            ("restore", self.queue_restores),
        ] {
            out.counter(
                "shoal_receive_queue_changes",
                "Receive buffers shrunk to network.overload_recv_buffer_size for a queue \
                 that kept overflowing, and set back after.",
                &[("change", change)],
                value,
            );
        }
    }
}

impl shoal_worker::LoadCounters for SocketTotals {
    fn load_counts(&self) -> [shoal_worker::FamilyCounts; 2] {
        let served_v6 = self.connect_replies_v6
            + self.announce_replies_v6
            + self.scrape_replies_v6
            + self.error_replies_v6
            + self.backoff_replies_v6;
        let served = self.connect_replies
            + self.announce_replies
            + self.scrape_replies
            + self.error_replies
            + self.backoff_replies;
        let v6 = shoal_worker::FamilyCounts {
            announces: self.announce_replies_v6,
            served: served_v6,
            lost: self.shed_v6,
            dropped: self.kernel_drops_demand_v6,
            read: self.received_v6,
        };
        let v4 = shoal_worker::FamilyCounts {
            announces: self.announce_replies.saturating_sub(v6.announces),
            served: served.saturating_sub(served_v6),
            lost: self.shed.saturating_sub(v6.lost),
            dropped: self.kernel_drops_demand.saturating_sub(v6.dropped),
            read: self.received.saturating_sub(v6.read),
        };
        [v4, v6]
    }
}
