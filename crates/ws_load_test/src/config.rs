//! `shoal_ws_load_test` configuration (`shoal_ws_load_test -p` prints it commented).

use std::time::Duration;

use serde::{Deserialize, Serialize};
use shoal_common::{LoggingConfig, Problems, TrackerConfig};
use shoal_load_test_common::is_valid_server_name;
use shoal_toml_config::TomlConfig;

shoal_load_test_common::load_test_config! {
    /// shoal_ws_load_test: keeps WebSocket connections busy with announces (carrying
    /// WebRTC offers), answers and scrapes against a WebTorrent (ws or wss) tracker, and
    /// reports what came back.
    ///
    /// Each connection is one simulated browser with its own peer id and a few torrents.
    /// By default it keeps `requests.in_flight` announces or scrapes waiting and sends the
    /// next as soon as a reply arrives, so the load follows what the tracker can serve;
    /// `requests.rate` sends at a fixed rate instead. Offers the tracker forwards are
    /// answered, as a browser would.
    pub struct Config (server_address = "127.0.0.1:8000") {
        /// WebSocket connections per worker thread.
        pub connections_per_worker: usize = 32,
    }
    sections {
        /// Connections, TLS and the WebSocket upgrade.
        pub network: NetworkConfig,
        /// What to send, and how fast.
        pub requests: RequestConfig,
    }
}

/// Connections, TLS and the WebSocket upgrade.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, TomlConfig)]
#[serde(default, deny_unknown_fields)]
pub struct NetworkConfig {
    /// Speak wss:// (WebSocket over TLS). The server's certificate is accepted whoever
    /// signed it (test trackers use self-signed ones); handshake signatures are still
    /// checked.
    pub tls: bool,
    /// Server name sent in the TLS handshake (SNI).
    pub tls_server_name: String,
    /// Host header of the WebSocket upgrade request.
    pub host: String,
    /// Path of the WebSocket upgrade request (the tracker URL's path).
    pub path: String,
    /// Milliseconds a connection may take to open (TCP, TLS and upgrade together), and
    /// to answer a waiting announce or scrape, before it is dropped and reopened. A
    /// slow opening counts as a connect failure, a slow reply as a timeout.
    pub response_timeout_ms: u64,
    /// Milliseconds to wait before reopening a connection that failed or was closed.
    /// Each further failure in a row doubles the wait, up to 64 times this (and never
    /// more than 10 seconds), so a tracker that refuses connections is not hammered.
    /// 0 reopens a connection closed by `close_when_done` at once.
    pub reconnect_delay_ms: u64,
    /// Close each connection once its `requests.requests_per_connection` requests are
    /// answered (with a WebSocket close), and open a new one: every connection is
    /// then one TCP and TLS handshake, one upgrade and that many requests, which
    /// measures how fast a tracker takes new connections (connections opened per
    /// second in the report).
    pub close_when_done: bool,
    /// Resume TLS sessions on reconnection (tickets, or session ids), as browsers
    /// do; false makes every handshake a full one.
    pub tls_resumption: bool,
}

impl Default for NetworkConfig {
    fn default() -> Self {
        Self {
            tls: false,
            tls_server_name: "localhost".into(),
            host: "localhost".into(),
            path: "/".into(),
            response_timeout_ms: 5000,
            reconnect_delay_ms: 100,
            close_when_done: false,
            tls_resumption: true,
        }
    }
}

/// What to send, and how fast.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, TomlConfig)]
#[serde(default, deny_unknown_fields)]
pub struct RequestConfig {
    /// Distinct torrents (random info hashes, the same in every run).
    pub torrents: usize,
    /// Torrents each connection announces in, drawn by popularity when the run starts
    /// (a browser announces all its torrents over one connection). Trackers limit
    /// this per connection (shoal_ws: limits.max_torrents_per_connection, 1000).
    pub torrents_per_connection: usize,
    /// Popularity skew: torrent i is chosen with weight 1/(i+1)^shape (0: uniform,
    /// 1: Zipf's law). Popular torrents have many peers to forward offers to.
    pub popularity_shape: f64,
    /// Probability that a connection is a seeder (`left` = 0) in one of its torrents.
    /// Trackers forward a seeder's offers to leechers only.
    pub seeder_probability: f64,
    /// Relative weight of announces.
    pub weight_announce: u32,
    /// Relative weight of scrapes.
    pub weight_scrape: u32,
    /// A scrape asks about 1 to this many torrents.
    pub scrape_max_torrents: usize,
    /// WebRTC offers in each announce; the tracker forwards each to a different peer
    /// of the torrent. 0 sends announces without offers.
    pub offers_per_announce: usize,
    /// Bytes of the fake session description (SDP) in each offer and answer. Browsers
    /// send 400 to 1500.
    pub offer_size: usize,
    /// `numwant` in announces: how many peers the offers may go to (trackers forward
    /// at most this many of the offers).
    pub numwant: u32,
    /// Answer the offers the tracker forwards (an announce with `answer`, `to_peer_id`
    /// and `offer_id`), so the tracker relays answers too, as between browsers.
    pub answer_offers: bool,
    /// Announces and scrapes each connection keeps waiting for a reply, when `rate`
    /// is 0: the next is sent as soon as a reply arrives.
    pub in_flight: u32,
    /// Announces and scrapes per second per connection, sent on schedule whether or
    /// not replies keep up (fractions allowed: 0.0083 is one per two minutes, as
    /// browsers announce). 0 sends as fast as replies come (see `in_flight`).
    pub rate: f64,
    /// Which of its torrents a connection announces in next.
    pub torrent_order: TorrentOrder,
    /// Requests (announces and scrapes) each connection sends, after which it only
    /// keeps its connection open, so that its peers stay in their swarms; 0: no
    /// limit. With `torrent_order = "sequential"` and this equal to
    /// `torrents_per_connection`, every connection announces in each of its torrents
    /// once: a tracker filled with connections × torrents peers, for as long as the
    /// run lasts (the cleaning bench's WebTorrent fill).
    pub requests_per_connection: u64,
}

/// Which of its torrents a connection announces in next.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, TomlConfig)]
#[serde(rename_all = "lowercase")]
pub enum TorrentOrder {
    /// One drawn at random for each announce: the steady state of browsers.
    #[default]
    Random,
    /// Each in turn, from the first again after the last: every torrent of a
    /// connection is announced once in its first `torrents_per_connection` announces.
    Sequential,
}

impl Default for RequestConfig {
    fn default() -> Self {
        Self {
            torrents: 1000,
            torrents_per_connection: 10,
            popularity_shape: 1.0,
            seeder_probability: 0.25,
            weight_announce: 100,
            weight_scrape: 1,
            scrape_max_torrents: 10,
            offers_per_announce: 5,
            offer_size: 500,
            numwant: 5,
            answer_offers: true,
            in_flight: 1,
            rate: 0.0,
            torrent_order: TorrentOrder::Random,
            requests_per_connection: 0,
        }
    }
}

impl Config {
    /// Connections over all workers.
    pub fn total_connections(&self) -> usize {
        self.workers * self.connections_per_worker
    }

    /// Time between two requests of one connection in fixed-rate mode; `None` when
    /// connections send as fast as replies come.
    pub fn send_period(&self) -> Option<Duration> {
        (self.requests.rate > 0.0).then(|| Duration::from_secs_f64(1.0 / self.requests.rate))
    }
}

impl TrackerConfig for Config {
    fn validate(&self, problems: &mut Problems) {
        self.validate_shared(problems);
        problems.check(
            (1..=100_000).contains(&self.connections_per_worker),
            "connections_per_worker",
            "must be between 1 and 100000",
        );
        problems.check(
            self.total_connections() <= 1_000_000,
            "connections_per_worker",
            "times workers must be at most 1000000",
        );
        let network = &self.network;
        problems.section("network", |p| {
            p.check(
                is_valid_server_name(&network.tls_server_name),
                "tls_server_name",
                "must be a DNS name or an IP address",
            );
            p.check(
                !network.host.is_empty() && !network.host.contains(['\r', '\n']),
                "host",
                "must be a non-empty header value",
            );
            p.check(
                network.path.starts_with('/') && !network.path.contains([' ', '\r', '\n']),
                "path",
                "must start with / and contain no spaces or line breaks",
            );
            p.check(
                network.response_timeout_ms >= 1,
                "response_timeout_ms",
                "must be at least 1",
            );
            let least = u64::from(!network.close_when_done);
            p.check(
                (least..=10_000).contains(&network.reconnect_delay_ms),
                "reconnect_delay_ms",
                format!("must be between {least} and 10000 (0 only with close_when_done)"),
            );
            p.check(
                !network.close_when_done || self.requests.requests_per_connection > 0,
                "close_when_done",
                "needs requests.requests_per_connection: the requests a connection sends before it closes",
            );
        });
        let requests = &self.requests;
        let simulated_peers = self
            .total_connections()
            .saturating_mul(requests.torrents_per_connection);
        problems.section("requests", |p| {
            p.check(
                (1..=100_000_000).contains(&requests.torrents),
                "torrents",
                "must be between 1 and 100000000",
            );
            p.check(
                (1..=10_000).contains(&requests.torrents_per_connection),
                "torrents_per_connection",
                "must be between 1 and 10000",
            );
            p.check(
                simulated_peers <= 10_000_000,
                "torrents_per_connection",
                format!(
                    "times all connections is {simulated_peers}, more than 10000000 simulated peers"
                ),
            );
            p.check(
                requests.popularity_shape.is_finite() && requests.popularity_shape >= 0.0,
                "popularity_shape",
                "must be 0 or more",
            );
            p.check(
                (0.0..=1.0).contains(&requests.seeder_probability),
                "seeder_probability",
                "must be between 0 and 1",
            );
            p.check(
                requests
                    .weight_announce
                    .checked_add(requests.weight_scrape)
                    .is_some_and(|total| total > 0),
                "weight_announce",
                "weight_announce and weight_scrape cannot both be 0 (nor sum past 4294967295)",
            );
            p.check(
                (1..=1000).contains(&requests.scrape_max_torrents),
                "scrape_max_torrents",
                "must be between 1 and 1000",
            );
            p.check(
                requests.offers_per_announce <= 100,
                "offers_per_announce",
                "must be at most 100",
            );
            p.check(
                (1..=65_536).contains(&requests.offer_size),
                "offer_size",
                "must be between 1 and 65536",
            );
            p.check(
                (1..=1000).contains(&requests.in_flight),
                "in_flight",
                "must be between 1 and 1000",
            );
            p.check(
                requests.rate.is_finite() && (0.0..=100_000.0).contains(&requests.rate),
                "rate",
                "must be between 0 and 100000",
            );
        });
        problems.section("cpu_pinning", |p| self.cpu_pinning.validate(p));
    }

    fn logging(&self) -> LoggingConfig {
        LoggingConfig::at(self.log_level)
    }
}

#[cfg(test)]
mod tests {
    use shoal_common::{config_to_toml, parse_config};

    use super::*;

    #[test]
    fn default_config_round_trips() {
        let text = config_to_toml(&Config::default());
        assert_eq!(parse_config::<Config>(&text).unwrap(), Config::default());
        assert!(text.contains("offers_per_announce = 5"), "{text}");
    }

    #[test]
    fn bad_values_name_their_keys() {
        let err = parse_config::<Config>(
            "connections_per_worker = 0\n[network]\npath = \"announce\"\n[requests]\nrate = -1.0\nin_flight = 0\n",
        )
        .unwrap_err()
        .to_string();
        for expected in [
            "connections_per_worker: must be between 1 and 100000",
            "network.path: must start with /",
            "requests.rate: must be between 0 and 100000",
            "requests.in_flight: must be between 1 and 1000",
        ] {
            assert!(err.contains(expected), "{expected} missing from {err}");
        }
    }

    #[test]
    fn rate_gives_the_send_period() {
        let mut config = Config::default();
        assert_eq!(config.send_period(), None);
        config.requests.rate = 4.0;
        assert_eq!(config.send_period(), Some(Duration::from_millis(250)));
    }
}
