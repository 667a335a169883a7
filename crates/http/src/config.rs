//! `shoal_http` configuration: every key documented once here (`shoal_http -p`).

use serde::{Deserialize, Serialize};
use shoal_common::{Problems, QueueLimits, ReverseProxy as _, TcpNetwork as _, TrackerKind};
use shoal_http_protocol::request::MAX_HEADERS_LIMIT;
use shoal_toml_config::TomlConfig;

/// The HTTP tracker's sections of the shared [config shape](shoal_common::Config).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Http;

/// `shoal_http`'s configuration file.
pub type Config = shoal_common::Config<Http>;

/// The `shoal_http` file: the process's sections (logging, metrics, privileges) and
/// the tracker's keys.
pub type File = shoal_common::TrackerFile<Http>;

shoal_common::network_config! {
    /// Addresses, TLS and connections.
    pub struct NetworkConfig {
        port: 6969,
        tcp { max_connections: 10_000, idle_timeout: 30 },
        proxy,
        /// Keep connections open between requests (HTTP keep-alive).
        pub keep_alive: bool = true,
    }
}

/// What the tracker tells clients.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, TomlConfig)]
#[serde(default, deny_unknown_fields)]
pub struct ProtocolConfig {
    /// URL path of announce requests.
    pub announce_path: String,
    /// URL path of scrape requests.
    pub scrape_path: String,
    /// Seconds clients are asked to wait between announces ("interval").
    pub announce_interval: u32,
    /// Seconds clients must wait at least ("min interval").
    pub min_announce_interval: u32,
    /// Most peers sent in one announce reply.
    pub max_peers: usize,
    /// Peers sent when a client does not say how many it wants, at most max_peers
    /// (lowering max_peers alone lowers this too).
    pub default_peers: usize,
    /// Most info hashes in one scrape.
    pub max_scrape_torrents: usize,
    /// Answer scrapes that name no info hash with every torrent ("full scrape").
    /// Expensive on a big tracker, so off by default.
    pub full_scrape: bool,
    /// With full_scrape on: seconds a full scrape reply is reused before it is built
    /// again (each socket worker builds at most one per interval).
    pub full_scrape_interval: u32,
}

impl Default for ProtocolConfig {
    fn default() -> Self {
        Self {
            announce_path: "/announce".into(),
            scrape_path: "/scrape".into(),
            announce_interval: 1800,
            min_announce_interval: 900,
            max_peers: 50,
            default_peers: 50,
            max_scrape_torrents: 100,
            full_scrape: false,
            full_scrape_interval: 300,
        }
    }
}

/// Queue and memory sizes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, TomlConfig)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Largest request (request line and headers) in bytes; larger ones get a 431.
    pub max_request_size: usize,
    /// Most headers in a request (at most 64); more get a 431.
    pub max_headers: usize,
    /// Batches of requests waiting for each swarm worker. When full, requests get a
    /// 503 ("tracker busy") instead of waiting.
    pub swarm_queue_len: usize,
    /// io_uring buffer memory per socket worker, in bytes. It is locked memory: the
    /// process's locked-memory limit (ulimit -l, LimitMEMLOCK= in systemd) must cover
    /// socket_workers × this plus 512 KiB.
    pub io_memory: usize,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            max_request_size: 4096,
            max_headers: 32,
            swarm_queue_len: 256,
            io_memory: 1 << 20,
        }
    }
}

impl QueueLimits for LimitsConfig {
    fn swarm_queue_len(&self) -> usize {
        self.swarm_queue_len
    }
}

impl TrackerKind for Http {
    const ABOUT: &'static str =
        "shoal_http: a BitTorrent tracker over HTTP and HTTPS (BEP 3, 7, 23 and 48).";
    const STATE: Option<shoal_common::StateKind> = Some(shoal_common::StateKind::Http);
    const SHARES_SWARMS: bool = true;
    type Network = NetworkConfig;
    type Protocol = ProtocolConfig;
    type Limits = LimitsConfig;

    fn announce_interval(protocol: &ProtocolConfig) -> u32 {
        protocol.announce_interval
    }

    fn min_announce_interval(protocol: &ProtocolConfig) -> u32 {
        protocol.min_announce_interval
    }

    fn validate(config: &Config, problems: &mut Problems) {
        let network = &config.network;
        problems.section("network", |p| {
            network.validate_tcp(p);
            network.validate_reverse_proxy(p);
        });

        let protocol = &config.protocol;
        problems.section("protocol", |p| {
            for (key, path) in [
                ("announce_path", &protocol.announce_path),
                ("scrape_path", &protocol.scrape_path),
            ] {
                p.check(
                    path.starts_with('/') && !path.contains(['?', '#', ' ']),
                    key,
                    "must start with / and contain no ?, # or spaces",
                );
            }
            p.check(
                protocol.announce_path != protocol.scrape_path,
                "scrape_path",
                "must differ from announce_path",
            );
            p.check(
                protocol.min_announce_interval <= protocol.announce_interval,
                "min_announce_interval",
                "must not exceed announce_interval",
            );
            p.check(
                (1..=1000).contains(&protocol.max_peers),
                "max_peers",
                "must be between 1 and 1000",
            );
            p.check(
                (1..=1000).contains(&protocol.max_scrape_torrents),
                "max_scrape_torrents",
                "must be between 1 and 1000",
            );
            p.check(
                protocol.full_scrape_interval >= 1,
                "full_scrape_interval",
                "must be at least 1 second",
            );
        });

        let limits = &config.limits;
        problems.section("limits", |p| {
            p.check(
                (256..=1 << 20).contains(&limits.max_request_size),
                "max_request_size",
                "must be between 256 and 1048576",
            );
            p.check(
                (1..=MAX_HEADERS_LIMIT).contains(&limits.max_headers),
                "max_headers",
                format!("must be between 1 and {MAX_HEADERS_LIMIT}"),
            );
            shoal_tcp::validate_io_memory(p, limits.io_memory);
        });
    }
}

#[cfg(test)]
mod tests {
    use shoal_common::{config_to_toml, parse_config};

    use super::*;

    #[test]
    fn the_retired_handshake_key_still_sets_the_deadline_with_a_notice() {
        use shoal_common::{TcpNetwork as _, TrackerConfig as _};
        let config: Config = parse_config("[network]\ntls_handshake_timeout = 3\n").unwrap();
        assert_eq!(config.network.tcp().handshake_deadline(), 3);
        let notices = config.notices();
        assert_eq!(notices.len(), 1, "{notices:?}");
        assert!(
            notices[0].starts_with("network.tls_handshake_timeout: renamed handshake_timeout"),
            "{notices:?}"
        );
        assert!(!config_to_toml(&Config::default()).contains("tls_handshake_timeout"));
        // The new name, and the shared keys with HTTP's own defaults.
        let config: Config = parse_config("[network]\nhandshake_timeout = 4\n").unwrap();
        assert_eq!(config.network.tcp().handshake_deadline(), 4);
        assert!(config.notices().is_empty());
        assert_eq!(
            (config.network.max_connections, config.network.idle_timeout),
            (10_000, 30)
        );
        // Both names, saying different things: refused.
        let refused =
            parse_config::<Config>("[network]\nhandshake_timeout = 4\ntls_handshake_timeout = 3\n")
                .unwrap_err()
                .to_string();
        assert!(refused.contains("tls_handshake_timeout"), "{refused}");
    }

    #[test]
    fn default_config_round_trips() {
        let text = config_to_toml(&Config::default());
        assert_eq!(parse_config::<Config>(&text).unwrap(), Config::default());
        assert!(text.contains("reverse_proxy_ip_header_position = \"last\""));
    }

    #[test]
    fn tls_needs_its_files_and_paths_must_look_like_paths() {
        let err = parse_config::<Config>(
            "[network]\nenable_tls = true\n[protocol]\nannounce_path = \"announce\"\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("network.tls_certificate_path: must name a PEM file"),
            "{err}"
        );
        assert!(
            err.contains("network.tls_private_key_path: must name a PEM file"),
            "{err}"
        );
        assert!(
            err.contains("protocol.announce_path: must start with /"),
            "{err}"
        );
    }

    #[test]
    fn a_listen_backlog_must_be_one_the_kernel_takes() {
        for backlog in [0, 65536] {
            let err = parse_config::<Config>(&format!("[network]\nlisten_backlog = {backlog}\n"))
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("network.listen_backlog: must be between 1 and 65535"),
                "{err}"
            );
        }
        let config = parse_config::<Config>("[network]\nlisten_backlog = 8192\n").unwrap();
        assert_eq!(config.network.listen_backlog, 8192);
    }
}
