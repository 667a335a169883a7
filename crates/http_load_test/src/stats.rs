//! What the HTTP load tester counts and the summary it prints.

use shoal_load_test_common::RunSummary;
use shoal_load_test_common::{Figure, Unit};

use shoal_load_test_common::LatencySummary;

shoal_common::counters! {
    /// Counted by each worker.
    pub struct Counters, SharedCounters, Totals {
        /// Announce requests sent.
        announces_sent,
        /// Scrape requests sent.
        scrapes_sent,
        /// 200 responses to announces without a failure reason.
        announce_responses,
        /// 200 responses to scrapes without a failure reason.
        scrape_responses,
        /// Responses carrying a bencoded failure reason.
        failures,
        /// Responses with a status other than 200.
        http_errors,
        /// Connections that failed, closed early, or sent something unparsable.
        connection_errors,
        /// Requests without a response within the response timeout.
        timeouts,
        /// Connections opened.
        connections_opened,
        /// Peers in announce responses.
        peers_received,
        /// Obeying clients: announces given up on (no response within the clients'
        /// timeout).
        client_timeouts,
        /// Obeying clients: the intervals of the responses, summed (seconds).
        interval_sum,
        /// Obeying clients: responses that came in time (before their client gave up
        /// on them) with an interval.
        intervals,
    }
}

/// Rates over a stretch of the run.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Summary {
    /// Seconds covered.
    pub seconds: f64,
    /// Requests sent per second.
    pub requests_per_second: f64,
    /// Responses of any kind per second.
    pub responses_per_second: f64,
    /// Good announce responses per second.
    pub announce_per_second: f64,
    /// Good scrape responses per second.
    pub scrape_per_second: f64,
    /// Failure responses per second.
    pub failures_per_second: f64,
    /// Non-200 responses per second.
    pub http_errors_per_second: f64,
    /// Connection errors and timeouts per second.
    pub errors_per_second: f64,
    /// Connections opened per second.
    pub connections_per_second: f64,
    /// Average peers per announce response.
    pub peers_per_announce: f64,
    /// Obeying clients: announces given up on per second.
    pub client_timeouts_per_second: f64,
    /// Obeying clients: the average interval responses gave, in seconds.
    pub mean_interval: f64,
    /// Obeying clients: responses per second that came before their client gave up
    /// on them.
    pub in_time_per_second: f64,
    /// Response latency over the same stretch (filled in at the end of the run).
    pub latency: LatencySummary,
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
            responses_per_second: per_second(
                d.announce_responses + d.scrape_responses + d.failures + d.http_errors,
            ),
            announce_per_second: per_second(d.announce_responses),
            scrape_per_second: per_second(d.scrape_responses),
            failures_per_second: per_second(d.failures),
            http_errors_per_second: per_second(d.http_errors),
            errors_per_second: per_second(d.connection_errors + d.timeouts),
            connections_per_second: per_second(d.connections_opened),
            peers_per_announce: if d.announce_responses == 0 {
                0.0
            } else {
                d.peers_received as f64 / d.announce_responses as f64
            },
            client_timeouts_per_second: per_second(d.client_timeouts),
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
        let clients = if self.mean_interval > 0.0 {
            format!(
                ", {:.1}/s timed out, {:.0}/s in time, interval {:.0} s",
                self.client_timeouts_per_second, self.in_time_per_second, self.mean_interval
            )
        } else {
            String::new()
        };
        format!(
            "requests {:.0}/s, responses {:.0}/s (announce {:.0}, scrape {:.0}, failure {:.0}, HTTP error {:.0}), errors {:.0}/s, \
             new connections {:.0}/s, {:.1} peers/announce{clients}",
            self.requests_per_second,
            self.responses_per_second,
            self.announce_per_second,
            self.scrape_per_second,
            self.failures_per_second,
            self.http_errors_per_second,
            self.errors_per_second,
            self.connections_per_second,
            self.peers_per_announce
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
                "responses_per_second",
                "responses",
                self.responses_per_second,
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
                "failures_per_second",
                "  failure reason",
                self.failures_per_second,
                Unit::PerSecond,
            ),
            Figure::new(
                "http_errors_per_second",
                "  HTTP error",
                self.http_errors_per_second,
                Unit::PerSecond,
            ),
            Figure::new(
                "errors_per_second",
                "connection errors",
                self.errors_per_second,
                Unit::PerSecond,
            ),
            Figure::new(
                "connections_per_second",
                "new connections",
                self.connections_per_second,
                Unit::PerSecond,
            ),
            Figure::new(
                "peers_per_announce",
                "peers per announce",
                self.peers_per_announce,
                Unit::Average,
            ),
            Figure::new(
                "client_timeouts_per_second",
                "timed out (obeying clients)",
                self.client_timeouts_per_second,
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
