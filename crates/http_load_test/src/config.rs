//! `shoal_http_load_test` configuration (`shoal_http_load_test -p` prints it commented).

use serde::{Deserialize, Serialize};
use shoal_common::{LoggingConfig, Problems, TrackerConfig};
use shoal_toml_config::TomlConfig;

shoal_load_test_common::load_test_config! {
    /// shoal_http_load_test: keeps connections busy with announces and scrapes against an
    /// HTTP or HTTPS tracker and reports what came back.
    ///
    /// Each connection sends a request, waits for the response and sends the next (or, with
    /// keep-alive off, reconnects), so the load follows what the tracker can serve.
    pub struct Config (server_address = "127.0.0.1:6969") {
        /// Connections, spread over the workers.
        pub connections: usize = 64,
    }
    sections {
        /// Connections and TLS.
        pub network: NetworkConfig,
        /// What to send.
        pub requests: RequestConfig,
        /// Simulated clients that obey the tracker's intervals, over the
        /// connections (each takes the next client due): the load follows what the
        /// tracker says.
        pub clients: shoal_load_test_common::ClientsConfig,
    }
}

/// Connections and TLS.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, TomlConfig)]
#[serde(default, deny_unknown_fields)]
pub struct NetworkConfig {
    /// Keep connections open between requests; off opens a connection per request.
    pub keep_alive: bool,
    /// Speak HTTPS. The server's certificate is accepted whoever signed it (test
    /// trackers use self-signed ones); handshake signatures are still checked.
    pub tls: bool,
    /// Server name sent in the TLS handshake (SNI).
    pub tls_server_name: String,
    /// Resume TLS sessions on new connections (from the server's tickets or session
    /// ids), as browsers and libcurl do; off makes every handshake a full one.
    pub tls_resumption: bool,
    /// Milliseconds to wait for a response before the connection is dropped and
    /// counted as timed out.
    pub response_timeout_ms: u64,
    /// Host header value.
    pub host: String,
}

impl Default for NetworkConfig {
    fn default() -> Self {
        Self {
            keep_alive: true,
            tls: false,
            tls_server_name: "localhost".into(),
            tls_resumption: true,
            response_timeout_ms: 5000,
            host: "localhost".into(),
        }
    }
}

/// What to send.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, TomlConfig)]
#[serde(default, deny_unknown_fields)]
pub struct RequestConfig {
    /// URL path of announces.
    pub announce_path: String,
    /// URL path of scrapes.
    pub scrape_path: String,
    /// Distinct torrents (random info hashes, the same in every run).
    pub torrents: usize,
    /// Distinct simulated peers, each with a fixed torrent, port and seeder status.
    pub peers: usize,
    /// Popularity skew: torrent i is chosen with weight 1/(i+1)^shape (0: uniform,
    /// 1: Zipf's law).
    pub popularity_shape: f64,
    /// `numwant` in announces.
    pub peers_wanted: i32,
    /// Probability that a simulated peer is a seeder.
    pub seeder_probability: f64,
    /// Relative weight of announces.
    pub weight_announce: u32,
    /// Relative weight of scrapes.
    pub weight_scrape: u32,
    /// A scrape asks about 1 to this many torrents.
    pub scrape_max_torrents: usize,
    /// Ask for compact peer lists (`compact=1`).
    pub compact: bool,
}

impl Default for RequestConfig {
    fn default() -> Self {
        Self {
            announce_path: "/announce".into(),
            scrape_path: "/scrape".into(),
            torrents: 100_000,
            peers: 1_000_000,
            popularity_shape: 1.0,
            peers_wanted: 30,
            seeder_probability: 0.75,
            weight_announce: 100,
            weight_scrape: 1,
            scrape_max_torrents: 10,
            compact: true,
        }
    }
}

impl TrackerConfig for Config {
    fn validate(&self, problems: &mut Problems) {
        self.validate_shared(problems);
        problems.check(
            self.connections >= self.workers && self.connections <= 1_000_000,
            "connections",
            "must be at least workers and at most 1000000",
        );
        let network = &self.network;
        problems.section("network", |p| {
            p.check(
                network.response_timeout_ms >= 1,
                "response_timeout_ms",
                "must be at least 1",
            );
            p.check(
                rustls::pki_types::ServerName::try_from(network.tls_server_name.as_str()).is_ok(),
                "tls_server_name",
                "must be a DNS name or an IP address",
            );
        });
        let requests = &self.requests;
        problems.section("clients", |p| self.clients.validate(p, self.requests.peers));
        problems.section("requests", |p| {
            p.check(
                requests.announce_path.starts_with('/'),
                "announce_path",
                "must start with /",
            );
            p.check(
                requests.scrape_path.starts_with('/'),
                "scrape_path",
                "must start with /",
            );
            p.check(requests.torrents >= 1, "torrents", "must be at least 1");
            p.check(requests.peers >= 1, "peers", "must be at least 1");
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
                requests.weight_announce + requests.weight_scrape > 0,
                "weight_announce",
                "weight_announce and weight_scrape cannot both be 0",
            );
            p.check(
                (1..=100).contains(&requests.scrape_max_torrents),
                "scrape_max_torrents",
                "must be between 1 and 100",
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
        assert_eq!(
            parse_config::<Config>(&config_to_toml(&Config::default())).unwrap(),
            Config::default()
        );
    }
}
