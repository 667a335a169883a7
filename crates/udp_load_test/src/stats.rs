//! What the load tester counts, and the summary it prints.

use shoal_load_test_common::LatencySummary;
use shoal_load_test_common::RunSummary;
use shoal_load_test_common::{Figure, Unit};

shoal_common::counters! {
    /// Counted by each worker.
    pub struct Counters, SharedCounters, Totals {
        /// Connect requests sent.
        connect_sent,
        /// Announce requests sent.
        announce_sent,
        /// Scrape requests sent.
        scrape_sent,
        /// Connect replies received.
        connect_replies,
        /// Announce replies received.
        announce_replies,
        /// Scrape replies received.
        scrape_replies,
        /// Error replies received.
        error_replies,
        /// Replies that were not valid BEP 15 responses.
        invalid_replies,
        /// Peers in all announce replies.
        peers_received,
        /// Windows given up on after the response timeout; with obeying clients,
        /// announces given up on.
        timeouts,
        /// Obeying clients: the intervals of the announce replies that came in time,
        /// summed (seconds).
        interval_sum,
        /// Obeying clients: announce replies that came in time (before their client
        /// gave up on them).
        intervals,
        /// Requests not sent at a fixed rate: the worker fell too far behind, or the
        /// send failed (a full send buffer, or an error such as ECONNREFUSED left by an
        /// ICMP message).
        skipped,
    }
}

impl Totals {
    /// Requests sent.
    pub fn requests(&self) -> u64 {
        self.connect_sent + self.announce_sent + self.scrape_sent
    }

    /// Replies received.
    pub fn replies(&self) -> u64 {
        self.connect_replies + self.announce_replies + self.scrape_replies + self.error_replies
    }
}

/// Rates over a stretch of the run.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Summary {
    /// Seconds covered.
    pub seconds: f64,
    /// Requests sent per second.
    pub requests_per_second: f64,
    /// Replies received per second.
    pub replies_per_second: f64,
    /// Connect replies per second.
    pub connect_per_second: f64,
    /// Announce replies per second.
    pub announce_per_second: f64,
    /// Scrape replies per second.
    pub scrape_per_second: f64,
    /// Error replies per second.
    pub errors_per_second: f64,
    /// Average peers per announce reply.
    pub peers_per_announce: f64,
    /// Share of requests that got no reply (0 to 1).
    pub unanswered: f64,
    /// Requests skipped per second (fixed-rate mode).
    pub skipped_per_second: f64,
    /// Requests given up on per second (obeying clients: announces unanswered within
    /// their timeout).
    pub timeouts_per_second: f64,
    /// Obeying clients: the average interval announce replies gave, in seconds.
    pub mean_interval: f64,
    /// Obeying clients: announce replies per second that came before their client
    /// gave up on them.
    pub in_time_per_second: f64,
    /// Reply latency over the same stretch (filled in at the end of the run).
    pub latency: LatencySummary,
}

impl RunSummary for Summary {
    type Totals = Totals;

    /// Rates from the difference of two totals `seconds` apart.
    fn between(earlier: &Totals, later: &Totals, seconds: f64) -> Self {
        let d = later.since(earlier);
        let per_second = |count: u64| count as f64 / seconds.max(1e-9);
        let requests = d.requests();
        Self {
            seconds,
            requests_per_second: per_second(requests),
            replies_per_second: per_second(d.replies()),
            connect_per_second: per_second(d.connect_replies),
            announce_per_second: per_second(d.announce_replies),
            scrape_per_second: per_second(d.scrape_replies),
            errors_per_second: per_second(d.error_replies),
            peers_per_announce: if d.announce_replies == 0 {
                0.0
            } else {
                d.peers_received as f64 / d.announce_replies as f64
            },
            unanswered: if requests == 0 {
                0.0
            } else {
                (1.0 - d.replies() as f64 / requests as f64).max(0.0)
            },
            skipped_per_second: per_second(d.skipped),
            timeouts_per_second: per_second(d.timeouts),
            in_time_per_second: per_second(d.intervals),
            mean_interval: if d.intervals == 0 {
                0.0
            } else {
                d.interval_sum as f64 / d.intervals as f64
            },
            latency: LatencySummary::default(),
        }
    }

    /// One progress line.
    fn line(&self) -> String {
        let mut skipped = if self.skipped_per_second > 0.0 {
            format!(", {:.0}/s skipped", self.skipped_per_second)
        } else {
            String::new()
        };
        if self.mean_interval > 0.0 {
            skipped += &format!(
                ", {:.1}/s timed out, {:.0}/s in time, interval {:.0} s",
                self.timeouts_per_second, self.in_time_per_second, self.mean_interval
            );
        }
        format!(
            "requests {:.0}/s, replies {:.0}/s (connect {:.0}, announce {:.0}, scrape {:.0}, error {:.0}), \
             {:.1} peers/announce, {:.2}% unanswered{skipped}",
            self.requests_per_second,
            self.replies_per_second,
            self.connect_per_second,
            self.announce_per_second,
            self.scrape_per_second,
            self.errors_per_second,
            self.peers_per_announce,
            self.unanswered * 100.0
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
                "replies_per_second",
                "replies received",
                self.replies_per_second,
                Unit::PerSecond,
            ),
            Figure::new(
                "connect_per_second",
                "  connect",
                self.connect_per_second,
                Unit::PerSecond,
            ),
            Figure::new(
                "announce_per_second",
                "  announce",
                self.announce_per_second,
                Unit::PerSecond,
            ),
            Figure::new(
                "scrape_per_second",
                "  scrape",
                self.scrape_per_second,
                Unit::PerSecond,
            ),
            Figure::new(
                "errors_per_second",
                "  error",
                self.errors_per_second,
                Unit::PerSecond,
            ),
            Figure::new(
                "peers_per_announce",
                "peers per announce",
                self.peers_per_announce,
                Unit::Average,
            ),
            Figure::new("unanswered", "unanswered", self.unanswered, Unit::Fraction),
            Figure::new(
                "skipped_per_second",
                "skipped (fixed rate)",
                self.skipped_per_second,
                Unit::PerSecond,
            ),
            Figure::new(
                "timeouts_per_second",
                "timed out",
                self.timeouts_per_second,
                Unit::PerSecond,
            ),
            Figure::new(
                "in_time_per_second",
                "answered in time (obeying clients)",
                self.in_time_per_second,
                Unit::PerSecond,
            ),
            Figure::new(
                "mean_interval",
                "interval given (obeying clients)",
                self.mean_interval,
                Unit::Average,
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
    fn rates_and_shares() {
        let earlier = Totals::default();
        let later = Totals {
            announce_sent: 1000,
            announce_replies: 900,
            error_replies: 50,
            peers_received: 2700,
            skipped: 20,
            ..Totals::default()
        };
        let summary = Summary::between(&earlier, &later, 2.0);
        assert_eq!(summary.requests_per_second, 500.0);
        assert_eq!(summary.replies_per_second, 475.0);
        assert_eq!(summary.peers_per_announce, 3.0);
        assert!((summary.unanswered - 0.05).abs() < 1e-9);
        assert_eq!(summary.skipped_per_second, 10.0);
        assert!(summary.json().contains("\"replies_per_second\":475.0"));
        assert!(summary.json().contains("\"skipped_per_second\":10.0"));
    }
}
