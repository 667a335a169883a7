//! `shoal_ws` configuration: every key documented once here (`shoal_ws -p`).

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use shoal_common::config::{Problems, available_cpus};
use shoal_common::{
    AccessListConfig, CleaningConfig, CpuPinningConfig, LogLevel, PrivilegeConfig,
    StatisticsConfig, TrackerConfig,
};
use shoal_toml_config::TomlConfig;

/// shoal_ws: a WebTorrent tracker over WebSocket (ws and wss) that relays WebRTC
/// offers and answers between browsers.
///
/// Every key is optional; a key left out keeps the default shown here.
/// Durations are in seconds, sizes in bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, TomlConfig)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// How much to log to stderr.
    pub log_level: LogLevel,
    /// Socket workers: threads (glommio executors, io_uring) that accept connections,
    /// run the WebSocket protocol and write messages. 0 means one per available CPU.
    pub socket_workers: usize,
    /// Swarm workers: threads that own the torrents, each a shard chosen by info hash.
    /// 0 chooses: with one socket worker, it keeps the torrents itself (no thread
    /// hand-off); with more, one swarm worker per four socket workers.
    pub swarm_workers: usize,
    /// Addresses, TLS and connections.
    pub network: NetworkConfig,
    /// What the tracker tells clients and how offers are relayed.
    pub protocol: ProtocolConfig,
    /// When peers and torrents are forgotten.
    pub cleaning: CleaningConfig,
    /// Limits on messages, rates and queues.
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
            cleaning: CleaningConfig {
                peer_timeout: 300,
                interval: 30,
            },
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
    /// Serve wss:// (WebSocket over TLS) with the certificate and key below instead
    /// of ws://. Browsers on https:// pages can only use wss:// trackers.
    pub enable_tls: bool,
    /// PEM file with the certificate chain, leaf first. Reloaded on SIGUSR1.
    pub tls_certificate_path: PathBuf,
    /// PEM file with the private key (PKCS#8, PKCS#1/RSA or SEC1/EC). Reloaded on SIGUSR1.
    pub tls_private_key_path: PathBuf,
    /// Most open connections per socket worker; further ones get a 503 and are
    /// closed. Each open connection also needs a file descriptor (LimitNOFILE=).
    pub max_connections: usize,
    /// Seconds the TLS handshake and the WebSocket upgrade request may take together.
    pub handshake_timeout: u32,
    /// Seconds a connection may stay open without sending anything. Must exceed
    /// protocol.announce_interval: clients only talk when they announce.
    pub idle_timeout: u32,
    /// A plain HTTP GET of this path answers "200 ok" (for load balancers and
    /// monitoring); every other path upgrades to WebSocket. Empty turns it off.
    pub health_check_path: String,
}

impl Default for NetworkConfig {
    fn default() -> Self {
        Self {
            use_ipv4: true,
            address_ipv4: "0.0.0.0:8000".parse().expect("valid address"),
            use_ipv6: true,
            address_ipv6: "[::]:8000".parse().expect("valid address"),
            enable_tls: false,
            tls_certificate_path: PathBuf::new(),
            tls_private_key_path: PathBuf::new(),
            max_connections: 50_000,
            handshake_timeout: 10,
            idle_timeout: 300,
            health_check_path: "/health".into(),
        }
    }
}

/// What the tracker tells clients and how offers are relayed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, TomlConfig)]
#[serde(default, deny_unknown_fields)]
pub struct ProtocolConfig {
    /// Seconds clients are asked to wait between announces ("interval").
    pub announce_interval: u32,
    /// Most offers forwarded from one announce (each to a different peer); a client
    /// sending more has the rest ignored.
    pub max_offers: usize,
    /// Seconds an offer can be answered after it was forwarded. Browsers give up
    /// waiting after about 50 seconds.
    pub offer_lifetime: u32,
    /// Offers waiting for an answer one peer may have (each costs 16 bytes); when a
    /// peer is sent more, the oldest give way and their answers are refused.
    pub max_pending_offers: usize,
    /// Most info hashes in one scrape.
    pub max_scrape_torrents: usize,
}

impl Default for ProtocolConfig {
    fn default() -> Self {
        Self {
            announce_interval: 120,
            max_offers: 10,
            offer_lifetime: 60,
            max_pending_offers: 32,
            max_scrape_torrents: 100,
        }
    }
}

/// Limits on messages, rates and queues. Each one is counted when it triggers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, TomlConfig)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Largest WebSocket message in bytes (after joining fragments). A larger one
    /// closes the connection with code 1009. Offers with session descriptions are
    /// about 1-2 KiB each.
    pub max_message_size: usize,
    /// Largest WebSocket frame payload in bytes.
    pub max_frame_size: usize,
    /// Largest WebSocket upgrade request (request line and headers) in bytes.
    pub max_handshake_size: usize,
    /// Announces and scrapes a connection may send per second, on average; more get
    /// an error reply instead of being served. Answers are not counted (they only
    /// follow offers the tracker sent). 0 turns the limit off.
    pub max_requests_per_second: u32,
    /// How many requests a connection may send in a burst above that rate (a browser
    /// starting many torrents at once announces them all together).
    pub request_burst: u32,
    /// Most torrents one connection may announce in (a browser uses one connection
    /// per tracker for all its torrents).
    pub max_torrents_per_connection: usize,
    /// Messages waiting to be written to one connection. A client that reads too
    /// slowly to keep the queue under this is disconnected (and the reason logged),
    /// so other peers' offers and answers are never dropped silently.
    pub max_outgoing_messages: usize,
    /// Batches of requests waiting for each swarm worker. When full, requests get a
    /// "tracker busy" error instead of waiting.
    pub swarm_queue_len: usize,
    /// io_uring buffer memory per socket worker, in bytes. It is locked memory: the
    /// process's locked-memory limit (ulimit -l, LimitMEMLOCK= in systemd) must cover
    /// socket_workers × this plus 512 KiB.
    pub io_memory: usize,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            max_message_size: 64 * 1024,
            max_frame_size: 64 * 1024,
            max_handshake_size: 4096,
            max_requests_per_second: 10,
            request_burst: 100,
            max_torrents_per_connection: 1000,
            max_outgoing_messages: 256,
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
        let protocol = &self.protocol;
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
                network.handshake_timeout >= 1,
                "handshake_timeout",
                "must be at least 1 second",
            );
            p.check(
                network.idle_timeout > protocol.announce_interval,
                "idle_timeout",
                format!(
                    "must exceed protocol.announce_interval ({}), or quiet clients are cut off between announces",
                    protocol.announce_interval
                ),
            );
            let path = &network.health_check_path;
            p.check(
                path.is_empty() || (path.starts_with('/') && !path.contains(['?', '#', ' '])),
                "health_check_path",
                "must be empty or start with / and contain no ?, # or spaces",
            );
        });
        problems.section("protocol", |p| {
            p.check(
                protocol.announce_interval >= 1,
                "announce_interval",
                "must be at least 1 second",
            );
            p.check(
                (1..=100).contains(&protocol.max_offers),
                "max_offers",
                "must be between 1 and 100",
            );
            p.check(
                protocol.offer_lifetime >= 1,
                "offer_lifetime",
                "must be at least 1 second",
            );
            p.check(
                (1..=1000).contains(&protocol.max_pending_offers),
                "max_pending_offers",
                "must be between 1 and 1000",
            );
            p.check(
                (1..=1000).contains(&protocol.max_scrape_torrents),
                "max_scrape_torrents",
                "must be between 1 and 1000",
            );
        });
        problems.section("cleaning", |p| {
            self.cleaning.validate(p, protocol.announce_interval)
        });
        let limits = &self.limits;
        problems.section("limits", |p| {
            p.check(
                (1024..=16 << 20).contains(&limits.max_message_size),
                "max_message_size",
                "must be between 1024 and 16777216",
            );
            p.check(
                (1024..=16 << 20).contains(&limits.max_frame_size),
                "max_frame_size",
                "must be between 1024 and 16777216",
            );
            p.check(
                (256..=65536).contains(&limits.max_handshake_size),
                "max_handshake_size",
                "must be between 256 and 65536",
            );
            p.check(
                limits.max_requests_per_second == 0 || limits.request_burst >= 1,
                "request_burst",
                "must be at least 1 when max_requests_per_second is set",
            );
            p.check(
                limits.max_torrents_per_connection >= 1,
                "max_torrents_per_connection",
                "must be at least 1",
            );
            p.check(
                limits.max_outgoing_messages >= 1,
                "max_outgoing_messages",
                "must be at least 1",
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
        assert!(text.contains("max_outgoing_messages = 256"), "{text}");
    }

    #[test]
    fn bad_values_name_their_keys() {
        let err = parse::<Config>(
            "[network]\nenable_tls = true\nidle_timeout = 60\nhealth_check_path = \"health\"\n[protocol]\nmax_offers = 0\n",
        )
        .unwrap_err()
        .to_string();
        for expected in [
            "network.tls_certificate_path: must name a PEM file",
            "network.idle_timeout: must exceed protocol.announce_interval (120)",
            "network.health_check_path: must be empty or start with /",
            "protocol.max_offers: must be between 1 and 100",
        ] {
            assert!(err.contains(expected), "{expected} missing from {err}");
        }
    }
}
