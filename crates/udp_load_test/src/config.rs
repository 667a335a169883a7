//! `shoal_udp_load_test` configuration (`shoal_udp_load_test -p` prints it commented).

use std::net::IpAddr;

use serde::{Deserialize, Serialize};
use shoal_common::{LoggingConfig, Problems, TrackerConfig};
use shoal_toml_config::TomlConfig;

shoal_load_test_common::load_test_config! {
    /// shoal_udp_load_test: sends BEP 15 requests to a UDP tracker, as fast as it answers
    /// or at a fixed rate, and reports what came back.
    ///
    /// By default each socket keeps `network.requests_in_flight` requests outstanding and
    /// sends a new one for every reply, so the load follows what the tracker can serve.
    /// With `network.requests_per_second` the requests go out on schedule instead,
    /// whatever comes back.
    pub struct Config (server_address = "127.0.0.1:6969") {
    }
    sections {
        /// Sockets and addresses.
        pub network: NetworkConfig,
        /// What to send.
        pub requests: RequestConfig,
        /// Simulated clients that obey the tracker's intervals (instead of a window
        /// of requests or a fixed rate): the load follows what the tracker says.
        pub clients: shoal_load_test_common::ClientsConfig,
    }
}

/// Sockets and addresses.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, TomlConfig)]
#[serde(default, deny_unknown_fields)]
pub struct NetworkConfig {
    /// Sockets per worker. Each has its own source port and connection id.
    pub sockets_per_worker: usize,
    /// Local addresses to send from, spread over the sockets. Several loopback
    /// addresses (127.0.0.1, 127.0.0.2, ...) make a tracker's SO_REUSEPORT sockets
    /// share the load the way many clients would. Empty: let the system choose.
    pub source_ips: Vec<IpAddr>,
    /// Requests each socket keeps outstanding (when `requests_per_second` is 0).
    pub requests_in_flight: usize,
    /// Milliseconds without any reply after which a socket's outstanding requests
    /// count as lost and it sends a fresh window (when `requests_per_second` is 0),
    /// and after which an unanswered connect is sent again (always).
    pub response_timeout_ms: u64,
    /// Requests per second in all (over every worker and socket), sent on schedule
    /// whether or not replies keep up: how a tracker copes with a given load. They
    /// go out in ticks of about a millisecond; a worker that falls more than 10 ms
    /// behind (or 64 requests, if more) skips the rest and counts them ("skipped").
    /// 0 sends as fast as the tracker answers instead (see `requests_in_flight`).
    pub requests_per_second: u64,
    /// Kernel receive buffer per socket, in bytes; 0 keeps the system default.
    pub recv_buffer_size: usize,
}

impl Default for NetworkConfig {
    fn default() -> Self {
        Self {
            sockets_per_worker: 4,
            source_ips: Vec::new(),
            requests_in_flight: 256,
            response_timeout_ms: 500,
            requests_per_second: 0,
            recv_buffer_size: 8 * 1024 * 1024,
        }
    }
}

/// What to send.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, TomlConfig)]
#[serde(default, deny_unknown_fields)]
pub struct RequestConfig {
    /// Distinct torrents (random info hashes, the same in every run).
    pub torrents: usize,
    /// Distinct simulated peers. Each has a fixed torrent (drawn by popularity), port
    /// and seeder status; an announce is sent for a peer chosen at random.
    pub peers: usize,
    /// Popularity skew: torrent i is chosen with weight 1/(i+1)^shape. 0 makes every
    /// torrent equally popular; 1 follows Zipf's law, as public trackers see; larger
    /// values concentrate the load on fewer torrents.
    pub popularity_shape: f64,
    /// `num_want` in announces.
    pub peers_wanted: i32,
    /// Probability that a simulated peer is a seeder.
    pub seeder_probability: f64,
    /// Relative weight of connect requests among generated requests.
    pub weight_connect: u32,
    /// Relative weight of announce requests.
    pub weight_announce: u32,
    /// Relative weight of scrape requests.
    pub weight_scrape: u32,
    /// A scrape asks about 1 to this many torrents.
    pub scrape_max_torrents: usize,
    /// Which simulated peer each announce is for.
    pub peer_order: PeerOrder,
    /// Private trackers: announces carry the passkey of one of this many users in
    /// BEP 41 URL data, `/KEY/announce`: peer i is user i modulo passkeys, whose key
    /// is the user number as 32 lowercase hex digits (users file line: `7
    /// 00000000000000000000000000000007`). 0: no URL data.
    pub passkeys: usize,
}

/// Which simulated peer each announce is for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, TomlConfig)]
#[serde(rename_all = "lowercase")]
pub enum PeerOrder {
    /// A peer drawn at random: the steady state of a busy tracker.
    #[default]
    Random,
    /// Every peer in turn, each worker taking its share: after `peers` announces the
    /// tracker has seen every peer once (for measuring memory per peer).
    Sequential,
}

impl Default for RequestConfig {
    fn default() -> Self {
        Self {
            torrents: 1_000_000,
            peers: 2_000_000,
            popularity_shape: 1.0,
            peers_wanted: 30,
            seeder_probability: 0.75,
            weight_connect: 1,
            weight_announce: 100,
            weight_scrape: 1,
            scrape_max_torrents: 10,
            peer_order: PeerOrder::Random,
            passkeys: 0,
        }
    }
}

/// The highest fixed rate accepted: far above what one machine can send.
pub(crate) const MAX_REQUESTS_PER_SECOND: u64 = 100_000_000;

impl TrackerConfig for Config {
    fn validate(&self, problems: &mut Problems) {
        self.validate_shared(problems);
        let network = &self.network;
        let server_v6 = self.server_address.is_ipv6();
        problems.section("network", |p| {
            p.check(
                (1..=1024).contains(&network.sockets_per_worker),
                "sockets_per_worker",
                "must be between 1 and 1024",
            );
            p.check(
                network
                    .source_ips
                    .iter()
                    .all(|ip| ip.is_ipv6() == server_v6),
                "source_ips",
                "must all be of the server address's family",
            );
            p.check(
                (1..=65_536).contains(&network.requests_in_flight),
                "requests_in_flight",
                "must be between 1 and 65536",
            );
            p.check(
                network.response_timeout_ms >= 1,
                "response_timeout_ms",
                "must be at least 1",
            );
            p.check(
                network.requests_per_second <= MAX_REQUESTS_PER_SECOND,
                "requests_per_second",
                format!("must be at most {MAX_REQUESTS_PER_SECOND} (0: as fast as replies come)"),
            );
        });
        let requests = &self.requests;
        problems.section("clients", |p| {
            self.clients.validate(p, self.requests.peers);
            p.check(
                self.clients.count == 0 || self.network.requests_per_second == 0,
                "count",
                "obeying clients send when they are due: leave network.requests_per_second at 0",
            );
        });
        problems.section("requests", |p| {
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
                requests.weight_connect + requests.weight_announce + requests.weight_scrape > 0,
                "weight_announce",
                "at least one of the weights must be above 0",
            );
            p.check(
                (1..=shoal_udp_protocol::MAX_SCRAPE_HASHES_PER_PACKET)
                    .contains(&requests.scrape_max_torrents),
                "scrape_max_torrents",
                format!(
                    "must be between 1 and {}",
                    shoal_udp_protocol::MAX_SCRAPE_HASHES_PER_PACKET
                ),
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

    #[test]
    fn bad_values_are_reported_with_their_keys() {
        let err = parse_config::<Config>(
            "duration = 10\nsummarize_last = 20\n[requests]\nweight_connect = 0\nweight_announce = 0\nweight_scrape = 0\n\
             [network]\nsource_ips = [\"::1\"]\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("summarize_last: must not exceed duration"),
            "{err}"
        );
        assert!(
            err.contains("requests.weight_announce: at least one"),
            "{err}"
        );
        assert!(err.contains("network.source_ips: must all be"), "{err}");
        let err = parse_config::<Config>("[network]\nrequests_per_second = 100000001\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("network.requests_per_second: must be at most 100000000"),
            "{err}"
        );
    }
}
