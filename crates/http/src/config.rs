//! `shoal_http` configuration: every key documented once here (`shoal_http -p`).

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use shoal_common::config::{Problems, available_cpus};
use shoal_common::{
    AccessListConfig, CleaningConfig, CpuPinningConfig, LogLevel, PrivilegeConfig,
    StatisticsConfig, TrackerConfig,
};
use shoal_http_protocol::request::MAX_HEADERS_LIMIT;
use shoal_toml_config::TomlConfig;

/// shoal_http: a BitTorrent tracker over HTTP and HTTPS (BEP 3, 7, 23 and 48).
///
/// Every key is optional; a key left out keeps the default shown here.
/// Durations are in seconds, sizes in bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, TomlConfig)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// How much to log to stderr.
    pub log_level: LogLevel,
    /// Socket workers: threads (glommio executors, io_uring) that accept connections,
    /// parse requests and write responses. 0 means one per available CPU.
    pub socket_workers: usize,
    /// Swarm workers: threads that own the torrents, each a shard chosen by info hash.
    /// 0 chooses: with one socket worker, it keeps the torrents itself (no thread
    /// hand-off per batch of requests, 1.6-1.9x faster on a single core); with more,
    /// one swarm worker per four socket workers.
    pub swarm_workers: usize,
    /// Addresses, TLS and connections.
    pub network: NetworkConfig,
    /// What the tracker tells clients.
    pub protocol: ProtocolConfig,
    /// When peers and torrents are forgotten.
    pub cleaning: CleaningConfig,
    /// Queue and memory sizes.
    pub limits: LimitsConfig,
    /// Periodic statistics in the log.
    pub statistics: StatisticsConfig,
    /// Which torrents are served.
    pub access_list: AccessListConfig,
    /// Giving up root after binding.
    pub privileges: PrivilegeConfig,
    /// Pinning workers to CPU cores.
    pub cpu_pinning: CpuPinningConfig,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            log_level: LogLevel::Info,
            socket_workers: 1,
            swarm_workers: 0,
            network: NetworkConfig::default(),
            protocol: ProtocolConfig::default(),
            cleaning: CleaningConfig::default(),
            limits: LimitsConfig::default(),
            statistics: StatisticsConfig::default(),
            access_list: AccessListConfig::default(),
            privileges: PrivilegeConfig::default(),
            cpu_pinning: CpuPinningConfig::default(),
        }
    }
}

/// Addresses, TLS and connections.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, TomlConfig)]
#[serde(default, deny_unknown_fields)]
pub struct NetworkConfig {
    /// Listen on IPv4.
    pub use_ipv4: bool,
    /// IPv4 address and port to listen on. Port 0 picks a free port.
    pub address_ipv4: SocketAddr,
    /// Listen on IPv6 (an IPv6-only socket).
    pub use_ipv6: bool,
    /// IPv6 address and port to listen on.
    pub address_ipv6: SocketAddr,
    /// Serve HTTPS with the certificate and key below instead of plain HTTP.
    pub enable_tls: bool,
    /// PEM file with the certificate chain, leaf first. Reloaded on SIGUSR1.
    pub tls_certificate_path: PathBuf,
    /// PEM file with the private key (PKCS#8, PKCS#1/RSA or SEC1/EC). Reloaded on SIGUSR1.
    pub tls_private_key_path: PathBuf,
    /// Keep connections open between requests (HTTP keep-alive).
    pub keep_alive: bool,
    /// Most open connections per socket worker; further ones get a 503 and are closed.
    pub max_connections: usize,
    /// Seconds a connection may stay open without completing a request (idle
    /// keep-alive connections and slow clients alike).
    pub idle_timeout: u32,
    /// Seconds a TLS handshake may take.
    pub tls_handshake_timeout: u32,
    /// When behind a reverse proxy (nginx, haproxy): the request header carrying the
    /// client's address, e.g. "X-Forwarded-For". Empty: use the TCP peer address.
    /// When set, requests without a valid header get a failure reply.
    pub reverse_proxy_ip_header: String,
    /// Which address of a multi-address proxy header to use: "first" (the client as
    /// the first proxy saw it) or "last" (the address your own proxy appended).
    pub reverse_proxy_ip_header_position: HeaderPosition,
}

/// Which address of a comma-separated header to take.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, TomlConfig)]
#[serde(rename_all = "lowercase")]
pub enum HeaderPosition {
    /// The first address.
    First,
    /// The last address: the one added by the proxy in front of the tracker, which
    /// a client cannot forge.
    #[default]
    Last,
}

impl Default for NetworkConfig {
    fn default() -> Self {
        Self {
            use_ipv4: true,
            address_ipv4: "0.0.0.0:6969".parse().expect("valid address"),
            use_ipv6: true,
            address_ipv6: "[::]:6969".parse().expect("valid address"),
            enable_tls: false,
            tls_certificate_path: PathBuf::new(),
            tls_private_key_path: PathBuf::new(),
            keep_alive: true,
            max_connections: 10_000,
            idle_timeout: 30,
            tls_handshake_timeout: 10,
            reverse_proxy_ip_header: String::new(),
            reverse_proxy_ip_header_position: HeaderPosition::Last,
        }
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
    /// Peers sent when a client does not say how many it wants.
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

impl Config {
    /// Number of socket workers to start (0 in the file means one per CPU).
    pub fn socket_worker_count(&self) -> usize {
        if self.socket_workers == 0 {
            available_cpus()
        } else {
            self.socket_workers
        }
    }

    /// Number of swarm worker threads to start; 0 means the only socket worker keeps
    /// the torrents itself (see the `swarm_workers` key).
    pub fn swarm_worker_count(&self) -> usize {
        match (self.swarm_workers, self.socket_worker_count()) {
            (0, 1) => 0,
            (0, sockets) => sockets.div_ceil(4),
            (swarms, _) => swarms,
        }
    }
}

impl TrackerConfig for Config {
    fn validate(&self, problems: &mut Problems) {
        problems.check(
            self.socket_workers <= 1024,
            "socket_workers",
            "must be at most 1024",
        );
        problems.check(
            self.swarm_workers <= 1024,
            "swarm_workers",
            "must be at most 1024",
        );

        let network = &self.network;
        problems.section("network", |p| {
            p.check(
                network.use_ipv4 || network.use_ipv6,
                "use_ipv4",
                "use_ipv4 and use_ipv6 cannot both be false",
            );
            p.check(
                network.address_ipv4.is_ipv4(),
                "address_ipv4",
                "must be an IPv4 address",
            );
            p.check(
                network.address_ipv6.is_ipv6(),
                "address_ipv6",
                "must be an IPv6 address",
            );
            if network.enable_tls {
                p.check(
                    !network.tls_certificate_path.as_os_str().is_empty(),
                    "tls_certificate_path",
                    "must name a PEM file when enable_tls is true",
                );
                p.check(
                    !network.tls_private_key_path.as_os_str().is_empty(),
                    "tls_private_key_path",
                    "must name a PEM file when enable_tls is true",
                );
            }
            p.check(
                network.max_connections >= 1,
                "max_connections",
                "must be at least 1",
            );
            p.check(
                network.idle_timeout >= 1,
                "idle_timeout",
                "must be at least 1 second",
            );
            p.check(
                network.tls_handshake_timeout >= 1,
                "tls_handshake_timeout",
                "must be at least 1 second",
            );
            p.check(
                network
                    .reverse_proxy_ip_header
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-'),
                "reverse_proxy_ip_header",
                "must be a header name (letters, digits and dashes)",
            );
        });

        let protocol = &self.protocol;
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
                protocol.announce_interval >= 1,
                "announce_interval",
                "must be at least 1 second",
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
                protocol.default_peers <= protocol.max_peers,
                "default_peers",
                "must not exceed max_peers",
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

        problems.section("cleaning", |p| {
            self.cleaning.validate(p, protocol.announce_interval)
        });

        let limits = &self.limits;
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
            p.check(
                limits.swarm_queue_len >= 1,
                "swarm_queue_len",
                "must be at least 1",
            );
            p.check(
                limits.io_memory >= 64 * 1024,
                "io_memory",
                "must be at least 65536",
            );
        });

        problems.section("access_list", |p| self.access_list.validate(p));
        problems.section("privileges", |p| self.privileges.validate(p));
        problems.section("cpu_pinning", |p| self.cpu_pinning.validate(p));
    }

    fn log_level(&self) -> LogLevel {
        self.log_level
    }
}

#[cfg(test)]
mod tests {
    use shoal_common::config::{parse, to_toml};

    use super::*;

    #[test]
    fn default_config_round_trips() {
        let text = to_toml(&Config::default());
        assert_eq!(parse::<Config>(&text).unwrap(), Config::default());
        assert!(text.contains("reverse_proxy_ip_header_position = \"last\""));
    }

    #[test]
    fn tls_needs_its_files_and_paths_must_look_like_paths() {
        let err = parse::<Config>(
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
}
