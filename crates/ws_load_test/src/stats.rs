//! What the WebTorrent load tester counts and the summary it prints.
//!
//! "Responses" are all messages the tracker sent: announce replies, forwarded offers,
//! relayed answers and scrape replies (as aquatic_ws_load_test counts them), so the
//! figure compares across tools. Error replies ("failure reason") are counted apart.

use shoal_load_test_common::RunSummary;
use shoal_load_test_common::{Figure, Unit};

use shoal_load_test_common::LatencySummary;

shoal_common::counters! {
    /// Counted by each worker.
    pub struct Counters, SharedCounters, Totals {
        /// Announces sent (not counting answers).
        announces_sent,
        /// Scrapes sent.
        scrapes_sent,
        /// Answers to forwarded offers sent.
        answers_sent,
        /// Replies to announces.
        announce_replies,
        /// Offers from other peers, forwarded by the tracker.
        offers_received,
        /// Answers to this tester's offers, relayed by the tracker.
        answers_received,
        /// Replies to scrapes.
        scrape_replies,
        /// Messages with a "failure reason".
        error_replies,
        /// Messages that were not WebTorrent JSON (or binary).
        unreadable,
        /// Connections upgraded to WebSocket.
        connections_opened,
        /// Connections that failed before the upgrade: refused, TLS or upgrade
        /// failure, or timed out.
        connect_failures,
        /// Open connections the tracker closed.
        closed_by_server,
        /// Open connections that broke: I/O or WebSocket protocol errors.
        connection_errors,
        /// Open connections dropped because a reply took too long.
        timeouts,
        /// Requests not sent in fixed-rate mode: the connection could not keep up.
        skipped,
        /// Bytes written to sockets (TLS records included).
        bytes_sent,
        /// Bytes read from sockets (TLS records included).
        bytes_received,
    }
}

/// Rates over a stretch of the run.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Summary {
    /// Seconds covered.
    pub seconds: f64,
    /// Announces and scrapes sent per second.
    pub requests_per_second: f64,
    /// Answers sent per second.
    pub answers_sent_per_second: f64,
    /// Messages from the tracker per second: announce replies, offers, answers and
    /// scrape replies.
    pub responses_per_second: f64,
    /// Announce replies per second.
    pub announce_replies_per_second: f64,
    /// Forwarded offers received per second.
    pub offers_per_second: f64,
    /// Relayed answers received per second.
    pub answers_per_second: f64,
    /// Scrape replies per second.
    pub scrape_replies_per_second: f64,
    /// Error replies ("failure reason") per second.
    pub errors_per_second: f64,
    /// Unreadable messages per second.
    pub unreadable_per_second: f64,
    /// Connections opened (upgraded) per second.
    pub connections_opened_per_second: f64,
    /// Failed connection attempts per second.
    pub connect_failures_per_second: f64,
    /// Connections the tracker closed per second.
    pub closed_by_server_per_second: f64,
    /// Broken or timed-out connections per second.
    pub connection_errors_per_second: f64,
    /// Requests skipped per second (fixed-rate mode).
    pub skipped_per_second: f64,
    /// Connections open at the end.
    pub open_connections: u64,
    /// Megabits per second sent.
    pub megabits_sent_per_second: f64,
    /// Megabits per second received.
    pub megabits_received_per_second: f64,
    /// Reply latency over the same stretch (filled in at the end of the run).
    pub latency: LatencySummary,
}

impl Summary {
    /// Whether anything went wrong in the stretch (for tests and scripts).
    pub fn has_errors(&self) -> bool {
        self.errors_per_second
            + self.unreadable_per_second
            + self.connect_failures_per_second
            + self.closed_by_server_per_second
            + self.connection_errors_per_second
            > 0.0
    }
}

impl RunSummary for Summary {
    type Totals = Totals;

    /// Rates from two totals `seconds` apart.
    fn between(earlier: &Totals, later: &Totals, seconds: f64) -> Self {
        let d = later.since(earlier);
        let per_second = |count: u64| count as f64 / seconds.max(1e-9);
        Self {
            seconds,
            requests_per_second: per_second(d.announces_sent + d.scrapes_sent),
            answers_sent_per_second: per_second(d.answers_sent),
            responses_per_second: per_second(
                d.announce_replies + d.offers_received + d.answers_received + d.scrape_replies,
            ),
            announce_replies_per_second: per_second(d.announce_replies),
            offers_per_second: per_second(d.offers_received),
            answers_per_second: per_second(d.answers_received),
            scrape_replies_per_second: per_second(d.scrape_replies),
            errors_per_second: per_second(d.error_replies),
            unreadable_per_second: per_second(d.unreadable),
            connections_opened_per_second: per_second(d.connections_opened),
            connect_failures_per_second: per_second(d.connect_failures),
            closed_by_server_per_second: per_second(d.closed_by_server),
            connection_errors_per_second: per_second(d.connection_errors + d.timeouts),
            skipped_per_second: per_second(d.skipped),
            open_connections: later
                .connections_opened
                .saturating_sub(later.closed_by_server + later.connection_errors + later.timeouts),
            megabits_sent_per_second: per_second(d.bytes_sent) * 8.0 / 1e6,
            megabits_received_per_second: per_second(d.bytes_received) * 8.0 / 1e6,
            latency: LatencySummary::default(),
        }
    }

    /// One progress line.
    fn line(&self) -> String {
        format!(
            "responses {:.0}/s (announce {:.0}, offer {:.0}, answer {:.0}, scrape {:.0}), \
             errors {:.0}/s, sent {:.0}/s + {:.0} answers/s, connections {} open \
             (+{:.1}/s, failed {:.1}/s, closed by server {:.1}/s, broken {:.1}/s)",
            self.responses_per_second,
            self.announce_replies_per_second,
            self.offers_per_second,
            self.answers_per_second,
            self.scrape_replies_per_second,
            self.errors_per_second,
            self.requests_per_second,
            self.answers_sent_per_second,
            self.open_connections,
            self.connections_opened_per_second,
            self.connect_failures_per_second,
            self.closed_by_server_per_second,
            self.connection_errors_per_second,
        )
    }

    fn set_latency(&mut self, latency: LatencySummary) {
        self.latency = latency;
    }
}

impl shoal_load_test_common::Summary for Summary {
    fn seconds(&self) -> f64 {
        self.seconds
    }

    fn figures(&self) -> Vec<Figure> {
        vec![
            Figure::new(
                "requests_per_second",
                "requests sent",
                self.requests_per_second,
                Unit::PerSecond,
            ),
            Figure::new(
                "answers_sent_per_second",
                "answers sent",
                self.answers_sent_per_second,
                Unit::PerSecond,
            ),
            Figure::new(
                "responses_per_second",
                "responses",
                self.responses_per_second,
                Unit::PerSecond,
            ),
            Figure::new(
                "announce_replies_per_second",
                "  announce replies",
                self.announce_replies_per_second,
                Unit::PerSecond,
            ),
            Figure::new(
                "offers_per_second",
                "  offers",
                self.offers_per_second,
                Unit::PerSecond,
            ),
            Figure::new(
                "answers_per_second",
                "  answers",
                self.answers_per_second,
                Unit::PerSecond,
            ),
            Figure::new(
                "scrape_replies_per_second",
                "  scrape replies",
                self.scrape_replies_per_second,
                Unit::PerSecond,
            ),
            Figure::new(
                "errors_per_second",
                "error replies",
                self.errors_per_second,
                Unit::PerSecond,
            ),
            Figure::new(
                "unreadable_per_second",
                "unreadable messages",
                self.unreadable_per_second,
                Unit::PerSecond,
            ),
            Figure::new(
                "connections_opened_per_second",
                "connections opened",
                self.connections_opened_per_second,
                Unit::PerSecond,
            ),
            Figure::new(
                "connect_failures_per_second",
                "connect failures",
                self.connect_failures_per_second,
                Unit::PerSecond,
            ),
            Figure::new(
                "closed_by_server_per_second",
                "closed by server",
                self.closed_by_server_per_second,
                Unit::PerSecond,
            ),
            Figure::new(
                "connection_errors_per_second",
                "broken or timed out",
                self.connection_errors_per_second,
                Unit::PerSecond,
            ),
            Figure::new(
                "skipped_per_second",
                "skipped (fixed rate)",
                self.skipped_per_second,
                Unit::PerSecond,
            ),
            Figure::new(
                "open_connections",
                "open at the end",
                self.open_connections as f64,
                Unit::Count,
            ),
            Figure::new(
                "megabits_sent_per_second",
                "sent",
                self.megabits_sent_per_second,
                Unit::MegabitsPerSecond,
            ),
            Figure::new(
                "megabits_received_per_second",
                "received",
                self.megabits_received_per_second,
                Unit::MegabitsPerSecond,
            ),
        ]
    }

    fn latency(&self) -> &LatencySummary {
        &self.latency
    }
}

#[cfg(test)]
mod tests {
    use shoal_load_test_common::Summary as _;

    use super::*;

    #[test]
    fn responses_are_every_message_from_the_tracker() {
        let earlier = Totals::default();
        let later = Totals {
            announce_replies: 20,
            offers_received: 40,
            answers_received: 30,
            scrape_replies: 10,
            error_replies: 2,
            announces_sent: 22,
            scrapes_sent: 10,
            connections_opened: 5,
            closed_by_server: 1,
            timeouts: 1,
            ..Totals::default()
        };
        let summary = Summary::between(&earlier, &later, 2.0);
        assert_eq!(summary.responses_per_second, 50.0);
        assert_eq!(summary.requests_per_second, 16.0);
        assert_eq!(summary.errors_per_second, 1.0);
        assert_eq!(summary.open_connections, 3);
        assert!(summary.has_errors());
        let json: serde_json::Value = serde_json::from_str(&summary.json()).unwrap();
        assert_eq!(json["offers_per_second"], 20.0);
        assert_eq!(json["open_connections"], 3);
        assert!(summary.text().contains("offers"));
    }
}
