//! `shoal_udp` configuration: every key, its unit and its default, documented once here.
//! `shoal_udp -p` prints these doc comments as the comments of a TOML file.

use serde::{Deserialize, Serialize};
use shoal_common::{Problems, QueueLimits, TrackerKind};
use shoal_toml_config::TomlConfig;
use shoal_udp_protocol::response::{ANNOUNCE_RESPONSE_HEADER_LEN, V6_PEER_LEN};

/// Largest UDP payload over IPv4.
const MAX_UDP_PAYLOAD: usize = 65_507;

/// The largest scrape accepted, in info hashes; bounded by the receive buffer.
pub(crate) const MAX_SCRAPE_TORRENTS_LIMIT: usize = 255;

/// The UDP tracker's sections of the shared [config shape](shoal_common::Config).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Udp;

/// `shoal_udp`'s configuration file.
pub type Config = shoal_common::Config<Udp>;

/// The `shoal_udp` file: the process's sections (logging, metrics, privileges) and
/// the tracker's keys.
pub type File = shoal_common::TrackerFile<Udp>;

shoal_common::network_config! {
    /// Addresses and sockets.
    pub struct NetworkConfig {
        port: 6969,
        /// Kernel receive buffer per socket, in bytes; 0 keeps the system default. A large
        /// buffer absorbs bursts; under overload that lasts, a full one only delays
        /// every request and makes it cost more, so overload_recv_buffer_size takes
        /// over then (see deployment.md). Linux caps it at net.core.rmem_max unless
        /// the tracker starts as root; the size obtained is logged.
        pub socket_recv_buffer_size: usize = 8 * 1024 * 1024,
        /// Receive buffer per socket while its queue overflows, in bytes; 0 never
        /// changes it. Once the kernel has dropped datagrams for 0.3 s with the queue
        /// at least half full, the buffer shrinks to this: a full deep queue only
        /// makes each request wait longer and cost more, and what does not fit is
        /// dropped either way. After a second with the queue at most a quarter full
        /// at every check, the buffer the socket had comes back
        /// (socket_recv_buffer_size as granted, or the kernel's default). It needs
        /// that size within net.core.rmem_max, or CAP_NET_ADMIN, to grow back;
        /// without either the buffer is never shrunk (logged once). Counted in
        /// shoal_receive_queue_changes_total; logged, a few changes in a row and
        /// then one message a minute at most.
        pub overload_recv_buffer_size: usize = 1024 * 1024,
    }
}

/// The smallest `network.overload_recv_buffer_size`: a queue that holds a few batches.
pub(crate) const MIN_OVERLOAD_RECV_BUFFER: usize = 64 * 1024;

/// What the tracker tells clients.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, TomlConfig)]
#[serde(default, deny_unknown_fields)]
pub struct ProtocolConfig {
    /// Seconds clients are asked to wait between announces.
    pub announce_interval: u32,
    /// Most peers sent in one announce reply. 50 IPv6 peers make a 920-byte reply,
    /// which fits in one unfragmented packet.
    pub max_peers: usize,
    /// Peers sent when a client asks for the default (num_want -1 or 0), at most
    /// max_peers (lowering max_peers alone lowers this too).
    pub default_peers: usize,
    /// Most info hashes accepted in one scrape (at most 255); larger scrapes get an
    /// error reply. 74 is the most that fits a 1500-byte packet.
    pub max_scrape_torrents: usize,
    /// Seconds a connection id stays valid after it is issued. BEP 15 clients reuse an
    /// id for up to a minute; 120 leaves room for slow clients.
    pub connection_id_lifetime: u32,
}

impl Default for ProtocolConfig {
    fn default() -> Self {
        Self {
            announce_interval: 1800,
            max_peers: 50,
            default_peers: 50,
            max_scrape_torrents: 74,
            connection_id_lifetime: 120,
        }
    }
}

/// Queue sizes. When a queue is full, work is dropped and counted, never waited for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, TomlConfig)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Batches of requests (up to 64 each) waiting for each swarm worker. When full,
    /// socket workers drop new requests (counted as shed) instead of waiting.
    pub swarm_queue_len: usize,
    /// Scrapes spanning several swarm workers that each socket worker tracks while
    /// their parts come back; further ones are dropped (counted as shed).
    pub max_pending_scrapes: usize,
    /// Replies each socket worker holds while the kernel's send buffer is full; further
    /// ones are dropped (counted).
    pub send_queue_len: usize,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            swarm_queue_len: 256,
            max_pending_scrapes: 4096,
            send_queue_len: 4096,
        }
    }
}

impl QueueLimits for LimitsConfig {
    fn swarm_queue_len(&self) -> usize {
        self.swarm_queue_len
    }
}

impl TrackerKind for Udp {
    const ABOUT: &'static str = "shoal_udp: a BEP 15 UDP BitTorrent tracker.";
    const STATE: Option<shoal_common::StateKind> = Some(shoal_common::StateKind::Udp);
    const SHARES_SWARMS: bool = true;
    type Network = NetworkConfig;
    type Protocol = ProtocolConfig;
    type Limits = LimitsConfig;

    fn announce_interval(protocol: &ProtocolConfig) -> u32 {
        protocol.announce_interval
    }

    fn validate(config: &Config, problems: &mut Problems) {
        let protocol = &config.protocol;
        let most_peers = (MAX_UDP_PAYLOAD - ANNOUNCE_RESPONSE_HEADER_LEN) / V6_PEER_LEN;
        problems.section("protocol", |p| {
            p.check(
                (1..=most_peers).contains(&protocol.max_peers),
                "max_peers",
                format!("must be between 1 and {most_peers} (a reply must fit in one datagram)"),
            );
            p.check(
                (1..=MAX_SCRAPE_TORRENTS_LIMIT).contains(&protocol.max_scrape_torrents),
                "max_scrape_torrents",
                format!("must be between 1 and {MAX_SCRAPE_TORRENTS_LIMIT}"),
            );
            p.check(
                protocol.connection_id_lifetime >= 1,
                "connection_id_lifetime",
                "must be at least 1 second",
            );
        });

        let network = &config.network;
        problems.section("network", |p| {
            // The kernel takes an int, doubled (SO_RCVBUF); 1 GiB is far past any
            // rmem_max a host sets.
            p.within(
                "socket_recv_buffer_size",
                network.socket_recv_buffer_size,
                0..=1 << 30,
            );
            let overload = network.overload_recv_buffer_size;
            p.check(
                overload == 0
                    || (overload >= MIN_OVERLOAD_RECV_BUFFER
                        && (network.socket_recv_buffer_size == 0
                            || overload < network.socket_recv_buffer_size)),
                "overload_recv_buffer_size",
                format!(
                    "must be 0 (never shrink) or from {MIN_OVERLOAD_RECV_BUFFER} bytes up to \
                     below socket_recv_buffer_size ({})",
                    network.socket_recv_buffer_size
                ),
            );
        });

        let limits = &config.limits;
        problems.section("limits", |p| {
            for (key, value) in [
                ("max_pending_scrapes", limits.max_pending_scrapes),
                ("send_queue_len", limits.send_queue_len),
            ] {
                p.within(key, value, 1..=1 << 20);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use shoal_common::{config_to_toml, parse_config};

    use shoal_common::CleaningConfig;

    use super::*;

    #[test]
    fn default_config_round_trips_through_its_commented_toml() {
        let text = config_to_toml(&Config::default());
        let parsed: Config = parse_config(&text).unwrap();
        assert_eq!(parsed, Config::default());
        assert!(text.contains(
            "# Seconds clients are asked to wait between announces.\nannounce_interval = 1800"
        ));
        assert!(
            text.contains("[access_list]") && text.contains("\"allow\": Serve only the torrents")
        );
    }

    #[test]
    fn changed_values_round_trip() {
        let mut config = Config {
            socket_workers: 3,
            ..Config::default()
        };
        config.network.address_ipv4 = "127.0.0.1:0".parse().unwrap();
        config.protocol.max_peers = 80;
        config.access_list.mode = shoal_common::AccessListMode::Deny;
        // A file that exists: checking a config reads the files it names.
        let list = std::env::temp_dir().join(format!("shoal-udp-deny-{}", std::process::id()));
        std::fs::write(&list, "").unwrap();
        config.access_list.path = list.clone();
        let parsed: Config = parse_config(&config_to_toml(&config)).unwrap();
        assert_eq!(parsed, config);
        std::fs::remove_file(&list).unwrap();
    }

    #[test]
    fn max_peers_alone_may_be_lowered_below_the_default_peers() {
        // default_peers (50) is never written here: it is capped, not refused.
        let config: Config = parse_config("[protocol]\nmax_peers = 20\n").unwrap();
        let limits = shoal_swarm::PeerLimits {
            default: config.protocol.default_peers,
            max: config.protocol.max_peers,
        };
        assert_eq!(limits.resolve(-1), 20);
    }

    #[test]
    fn a_file_needs_only_the_keys_it_changes() {
        let config: Config =
            parse_config("socket_workers = 2\n[protocol]\nmax_peers = 10\ndefault_peers = 5\n")
                .unwrap();
        assert_eq!(config.socket_workers, 2);
        assert_eq!(config.protocol.max_peers, 10);
        assert_eq!(config.cleaning, CleaningConfig::default());
    }

    #[test]
    fn a_retired_key_still_loads_with_a_notice_and_is_not_printed_by_default() {
        use shoal_common::TrackerConfig as _;
        let config: Config =
            parse_config("[per_ip]\nbad_connection_ids_per_minute = 600\n").unwrap();
        let notices = config.notices();
        assert_eq!(notices.len(), 1, "{notices:?}");
        assert!(
            notices[0].starts_with("per_ip.bad_connection_ids_per_minute: retired"),
            "{notices:?}"
        );
        assert!(Config::default().notices().is_empty());
        assert!(!config_to_toml(&Config::default()).contains("bad_connection_ids"));
    }

    #[test]
    fn misspelt_keys_are_rejected_with_their_name() {
        let err = parse_config::<Config>("[protocol]\nannounce_intervall = 10\n").unwrap_err();
        let text = format!("{err:#}");
        assert!(
            text.contains(
                "line 2: unknown key `protocol.announce_intervall`; did you mean \
                 `protocol.announce_interval`?"
            ),
            "{text}"
        );
    }

    #[test]
    fn bad_values_are_all_reported_with_their_keys() {
        let err = parse_config::<Config>(
            "swarm_workers = 2000\n[protocol]\nmax_peers = 0\nannounce_interval = 5000\n[network]\naddress_ipv4 = \"[::1]:1\"\n",
        )
        .unwrap_err();
        let text = err.to_string();
        for expected in [
            "swarm_workers: must be at most 1024",
            "network.address_ipv4: must be an IPv4 address",
            "protocol.max_peers: must be between 1 and",
            "cleaning.peer_timeout: must exceed protocol.announce_interval (5000)",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
        }
        for (network, ok) in [
            ("overload_recv_buffer_size = 0", true),
            ("overload_recv_buffer_size = 65536", true),
            ("overload_recv_buffer_size = 65535", false),
            (
                "socket_recv_buffer_size = 1048576\noverload_recv_buffer_size = 1048576",
                false,
            ),
            (
                "socket_recv_buffer_size = 0\noverload_recv_buffer_size = 1048576",
                true,
            ),
        ] {
            let parsed = parse_config::<Config>(&format!("[network]\n{network}\n"));
            assert_eq!(parsed.is_ok(), ok, "{network}: {parsed:?}");
        }
        let text = parse_config::<Config>("[network]\noverload_recv_buffer_size = 8388608\n")
            .unwrap_err()
            .to_string();
        let expected = "network.overload_recv_buffer_size: must be 0 (never shrink) or from \
                        65536 bytes up to below socket_recv_buffer_size (8388608)";
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }

    #[test]
    fn sizes_past_any_machine_are_refused_with_their_key() {
        // Found by an attack: this aborted on a 32 TiB allocation at start.
        let err = parse_config::<Config>(
            "[limits]\nswarm_queue_len = 4294967296\nsend_queue_len = 4294967296\n\
             [capacity]\nmax_torrents = 99999999999999\n\
             [network]\nsocket_recv_buffer_size = 4294967296\n\
             [per_ip]\nmax_connections = 4294967296\n",
        )
        .unwrap_err()
        .to_string();
        for expected in [
            "limits.swarm_queue_len: must be between 1 and 65536",
            "limits.send_queue_len: must be between 1 and 1048576",
            "capacity.max_torrents: must be between 1 and 4294967296",
            "network.socket_recv_buffer_size: must be between 0 and 1073741824",
            "per_ip.max_connections: must be between 0 and 16777216",
        ] {
            assert!(err.contains(expected), "missing {expected:?} in:\n{err}");
        }
    }

    #[test]
    fn bad_cluster_keys_are_all_reported() {
        let err = parse_config::<Config>(
            "[cluster]\nstore = \"redis\"\nname = \"a b\"\npublish_interval_ms = 0\ntimeout_ms = 5\nbacklog = 10\n",
        )
        .unwrap_err()
        .to_string();
        for expected in [
            "cluster.store: \"redis\" is not host:port",
            "cluster.name: must be letters, digits",
            "cluster.publish_interval_ms: must be 1 to 10000",
            "cluster.timeout_ms: must be 10 to 60000",
            "cluster.backlog: must be between 1048576 and 68719476736",
        ] {
            assert!(err.contains(expected), "missing {expected:?} in:\n{err}");
        }
        // Off (the default), nothing is checked.
        let off: Config = parse_config("[cluster]\nstore = \"\"\ntimeout_ms = 5\n").unwrap();
        assert!(!off.cluster.enabled());
    }

    #[test]
    fn type_errors_name_the_key() {
        let err = parse_config::<Config>("[network]\nuse_ipv4 = \"yes\"\n").unwrap_err();
        let text = format!("{err:#}");
        assert!(
            text.contains("use_ipv4") && text.contains("invalid type"),
            "{text}"
        );
    }
}
