//! WebTorrent tracker statistics.

use shoal_common::metric_names::{
    ERRORS, ERRORS_HELP, INCOMING_BYTES, INCOMING_BYTES_HELP, OUTGOING_BYTES, OUTGOING_BYTES_HELP,
    REFUSED, REFUSED_HELP, REQUESTS, REQUESTS_HELP, RESPONSES, RESPONSES_HELP,
};
use shoal_common::{Observation, Observe};
use shoal_tcp::ConnectionCounters;

shoal_common::counters! {
    /// Counted by each socket worker.
    pub struct SocketCounters, SharedSocketCounters, SocketTotals {
        /// Bytes waiting to be written to connections, writes under way included
        /// (a gauge: set, not added; see `limits.max_outgoing_bytes_per_worker`).
        outgoing_bytes,
        /// Bytes of messages still arriving from connections (a gauge: set, not added;
        /// see `limits.max_incoming_bytes_per_worker`).
        incoming_bytes,
        /// Connections that upgraded to WebSocket.
        upgraded,
        /// Upgrade requests refused (malformed, not WebSocket, too big, too slow).
        bad_handshakes,
        /// Health-check requests answered.
        health_checks,
        /// Announces (answers not included).
        announces,
        /// Of `announces`, those from IPv6 clients.
        announces_v6,
        /// Answers to offers received (relayed or refused).
        answers,
        /// Of `answers`, those from IPv6 clients.
        answers_v6,
        /// Of `scrapes`, those from IPv6 clients.
        scrapes_v6,
        /// Of `health_checks`, those from IPv6 clients.
        health_checks_v6,
        /// Announce replies written.
        announce_responses,
        /// Of `announce_responses`, those to IPv6 clients.
        announce_responses_v6,
        /// Offers written to their recipients.
        offer_responses,
        /// Of `offer_responses`, those to IPv6 clients.
        offer_responses_v6,
        /// Answers written to their offerers.
        answer_responses,
        /// Of `answer_responses`, those to IPv6 clients.
        answer_responses_v6,
        /// Scrape replies written.
        scrape_responses,
        /// Of `scrape_responses`, those to IPv6 clients.
        scrape_responses_v6,
        /// Busy replies written, with the interval to come back after, for requests
        /// shed because a swarm worker's queue was full.
        backoff_responses,
        /// Of `backoff_responses`, those to IPv6 clients.
        backoff_responses_v6,
        /// Error replies written.
        error_responses,
        /// Of `error_responses`, those to IPv6 clients.
        error_responses_v6,
        /// Offers forwarded to peers.
        offers_forwarded,
        /// Offers not forwarded: their sender was past limits.max_offer_bytes_per_second.
        offers_over_budget,
        /// Offers dropped from a full queue of the peer they were for (its oldest
        /// offers give way; offers are disposable, the peer is not closed for them).
        offers_dropped,
        /// Answers relayed to the offering peer.
        answers_relayed,
        /// Answers refused: no such offer was sent to the answering peer, or it expired.
        answers_refused,
        /// Announces refused because another connection owns their peer id.
        peer_ids_taken,
        /// Scrapes.
        scrapes,
        /// Messages that could not be read (malformed JSON, missing fields, binary).
        bad_messages,
        /// Messages over limits.max_message_size or frames over max_frame_size, and
        /// offers or answers over max_description_size (or not a JSON object).
        oversized_messages,
        /// Requests refused by the access list.
        access_denied,
        /// Connections and requests refused by private mode (no or unknown passkey,
        /// a disabled account, an unregistered torrent, a seeding-only account
        /// downloading).
        private_refused,
        /// Announces refused by the client rules (`[clients]`).
        client_refused,
        /// Upgrades refused by the Origin rules (network.origins_path), with a 403.
        origin_refused,
        /// Upgrades refused because their Origin held
        /// network.max_connections_per_origin connections, with a 503.
        origin_full,
        /// Requests refused by limits.max_requests_per_second.
        rate_limited,
        /// Announces refused by limits.max_torrents_per_connection.
        too_many_torrents,
        /// Connections closed because they read too slowly (outgoing queue full).
        slow_readers,
        /// Connections closed because their message under way had been arriving
        /// longest when the worker's incoming budget was exceeded.
        slow_senders,
        /// Connections closed by the idle timeout.
        idle_timeouts,
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
        "announces/s {:.0}, offers/s {:.0}, answers/s {:.0}, scrapes/s {:.0}, new connections/s {:.0}, \
         outgoing bytes {}, incoming bytes {}; per interval: refused answers {}, peer ids taken {}, \
         bad messages {}, oversized {}, denied {}, connection rate-limited {}, too many torrents {}, \
         offers over budget {}, offers dropped {}, slow readers {}, slow senders {}, idle timeouts {}, \
         bad handshakes {}, {}; {}; torrents {}, peers {}",
        rate(d.announces),
        rate(d.offers_forwarded),
        rate(d.answers_relayed),
        rate(d.scrapes),
        rate(d.connections.accepted),
        now.requests.outgoing_bytes,
        now.requests.incoming_bytes,
        d.answers_refused,
        d.peer_ids_taken,
        d.bad_messages,
        d.oversized_messages,
        d.access_denied + d.private_refused + d.client_refused + d.origin_refused + d.origin_full,
        d.rate_limited,
        d.too_many_torrents,
        d.offers_over_budget,
        d.offers_dropped,
        d.slow_readers,
        d.slow_senders,
        d.idle_timeouts,
        d.bad_handshakes,
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
            ("answer", self.answers, self.answers_v6),
            ("scrape", self.scrapes, self.scrapes_v6),
            ("health", self.health_checks, self.health_checks_v6),
        ] {
            out.counter_by_ip_version(REQUESTS, REQUESTS_HELP, &[("action", action)], all, ipv6);
        }
        for (action, all, ipv6) in [
            (
                "announce",
                self.announce_responses,
                self.announce_responses_v6,
            ),
            ("offer", self.offer_responses, self.offer_responses_v6),
            ("answer", self.answer_responses, self.answer_responses_v6),
            ("scrape", self.scrape_responses, self.scrape_responses_v6),
            ("error", self.error_responses, self.error_responses_v6),
            ("backoff", self.backoff_responses, self.backoff_responses_v6),
        ] {
            out.counter_by_ip_version(RESPONSES, RESPONSES_HELP, &[("action", action)], all, ipv6);
        }
        for (kind, value) in [
            ("offer", self.offers_forwarded),
            ("answer", self.answers_relayed),
        ] {
            out.counter(
                "shoal_relayed",
                "WebTorrent offers and answers relayed between peers.",
                &[("kind", kind)],
                value,
            );
        }
        out.counter(
            "shoal_websocket_upgrades",
            "Connections upgraded to WebSocket.",
            &[],
            self.upgraded,
        );
        for (reason, value) in [
            ("bad_request", self.bad_messages),
            ("oversized", self.oversized_messages),
            ("bad_handshake", self.bad_handshakes),
            ("access_list", self.access_denied),
            ("private", self.private_refused),
            ("client", self.client_refused),
            ("origin", self.origin_refused),
            ("origin_connections", self.origin_full),
            ("connection_rate_limit", self.rate_limited),
            ("too_many_torrents", self.too_many_torrents),
            ("peer_id_taken", self.peer_ids_taken),
            ("answer_refused", self.answers_refused),
            ("offer_budget", self.offers_over_budget),
        ] {
            out.counter(REFUSED, REFUSED_HELP, &[("reason", reason)], value);
        }
        for (kind, value) in [
            ("slow_reader", self.slow_readers),
            ("slow_sender", self.slow_senders),
            ("idle_timeout", self.idle_timeouts),
            ("offer_dropped", self.offers_dropped),
        ] {
            out.counter(ERRORS, ERRORS_HELP, &[("kind", kind)], value);
        }
        self.connections.observe(out);
        self.clients.observe(out);
        out.gauge(
            OUTGOING_BYTES,
            OUTGOING_BYTES_HELP,
            &[],
            self.outgoing_bytes as f64,
        );
        out.gauge(
            INCOMING_BYTES,
            INCOMING_BYTES_HELP,
            &[],
            self.incoming_bytes as f64,
        );
    }
}

impl shoal_worker::LoadCounters for SocketTotals {
    /// Shed requests are not counted per family: both families see all of them. A
    /// WebTorrent tracker gives one interval to both (the first family's).
    fn load_counts(&self) -> [shoal_worker::FamilyCounts; 2] {
        let served = self.announce_responses
            + self.offer_responses
            + self.answer_responses
            + self.scrape_responses
            + self.error_responses
            + self.backoff_responses;
        let both = shoal_worker::FamilyCounts {
            announces: self.announce_responses,
            served,
            lost: self.connections.shed,
            ..Default::default()
        };
        [both, both]
    }
}
