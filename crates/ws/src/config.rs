//! `shoal_ws` configuration: every key documented once here (`shoal_ws -p`).

use serde::{Deserialize, Serialize};
use shoal_common::{
    CleaningConfig, Problems, QueueLimits, ReverseProxy as _, TcpNetwork as _, TrackerKind,
};
use shoal_toml_config::TomlConfig;

/// The WebTorrent tracker's sections of the shared [config shape](shoal_common::Config).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ws;

/// `shoal_ws`'s configuration file.
pub type Config = shoal_common::Config<Ws>;

/// The `shoal_ws` file: the process's sections (logging, metrics, privileges) and
/// the tracker's keys.
pub type File = shoal_common::TrackerFile<Ws>;

shoal_common::network_config! {
    /// Addresses, TLS and connections.
    pub struct NetworkConfig {
        port: 8000,
        tcp { max_connections: 50_000, idle_timeout: 300 },
        proxy,
        /// A plain HTTP GET of this path answers "200 ok" (for load balancers and
        /// monitoring); every other path upgrades to WebSocket. Empty turns it off.
        pub health_check_path: String = "/health".into(),
        /// File of Origin rules: which web pages may open connections (a browser
        /// names the page in the upgrade's Origin header and scripts cannot change
        /// it). One rule per line, `allow PATTERN` or `deny PATTERN`; a pattern is an
        /// origin (https://app.example.com), a host (example.com), *.example.com, *
        /// (any Origin), null, or none (clients without an Origin: not browsers). An
        /// upgrade a deny rule matches, or that no allow rule matches when there are
        /// some, gets a 403. Read at start and on SIGUSR1 with the access list. Empty:
        /// every Origin is served. See documents/deployment.md, "Origin rules".
        pub origins_path: std::path::PathBuf = std::path::PathBuf::new(),
        /// Most open connections per Origin (one web page's visitors, from however
        /// many addresses), over every socket worker; past it, upgrades from that
        /// Origin get a 503. Clients without an Origin are not counted. 0 turns it
        /// off.
        pub max_connections_per_origin: usize = 0,
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
    /// peer is sent more, the oldest give way and their answers are refused. One
    /// sending connection holds a quarter of them at most (its own oldest give way
    /// past that), so a flood of offers cannot push out everyone else's.
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
    /// Largest offer or answer session description in bytes (its JSON), which must
    /// be a JSON object. A larger offer is not forwarded and a larger answer is
    /// refused: browsers' descriptions are 1-4 KiB, and each forwarded one is queued
    /// for its recipient, so a connection must not push 64 KiB ones at its peers.
    pub max_description_size: usize,
    /// Largest WebSocket upgrade request (request line and headers) in bytes.
    pub max_handshake_size: usize,
    /// Announces, answers and scrapes a connection may send per second, on average;
    /// more get an error reply instead of being served (an answer is a message the
    /// tracker relays, so it counts too). 0 turns the limit off.
    pub max_requests_per_second: u32,
    /// How many requests a connection may send in a burst above that rate (a browser
    /// starting many torrents at once announces them all together).
    pub request_burst: u32,
    /// Bytes of offers (their session descriptions) one connection may have relayed
    /// per second, on average; offers past it are not forwarded (the announce is
    /// served). A browser's offers are a few KiB per torrent every announce_interval;
    /// a connection flooding a swarm with large offers stops at this. 0 turns the
    /// limit off.
    pub max_offer_bytes_per_second: u32,
    /// Bytes of offers a connection may send in a burst above that rate (a browser
    /// starting many torrents at once sends all their offers together).
    pub offer_bytes_burst: u32,
    /// Most torrents one connection may announce in (a browser uses one connection
    /// per tracker for all its torrents).
    pub max_torrents_per_connection: usize,
    /// Messages waiting to be written to one connection. A client that reads too
    /// slowly to keep the queue under this is disconnected (and the reason logged),
    /// so other peers' offers and answers are never dropped silently.
    pub max_outgoing_messages: usize,
    /// Bytes waiting to be written to one connection (offers and answers counted with
    /// their session descriptions). A client that reads too slowly to keep under this
    /// is disconnected, like one over max_outgoing_messages.
    pub max_outgoing_bytes: usize,
    /// Bytes waiting to be written over all connections of one socket worker. Without
    /// it, clients that never read could make every connection hold max_outgoing_bytes.
    /// A message that would go past it first disconnects the connection holding the
    /// most (counted and logged as a slow reader); a client that keeps up holds next
    /// to nothing.
    pub max_outgoing_bytes_per_worker: usize,
    /// Bytes of messages still arriving over all connections of one socket worker,
    /// each frame under way counted whole from its header on. A client can send most
    /// of a message and stop until its idle timeout; without this, every connection
    /// could hold a message's size that way. Past it, the connection whose message has
    /// been arriving longest is closed (counted and logged as a slow sender); a
    /// browser's messages arrive whole at once and hold nothing for long.
    pub max_incoming_bytes_per_worker: usize,
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
            max_description_size: 16 * 1024,
            max_handshake_size: 4096,
            max_requests_per_second: 10,
            request_burst: 100,
            max_offer_bytes_per_second: 64 * 1024,
            offer_bytes_burst: 1 << 20,
            max_torrents_per_connection: 1000,
            max_outgoing_messages: 256,
            max_outgoing_bytes: 1 << 20,
            max_outgoing_bytes_per_worker: 256 << 20,
            max_incoming_bytes_per_worker: 256 << 20,
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

impl TrackerKind for Ws {
    const ABOUT: &'static str = "shoal_ws: a WebTorrent tracker over WebSocket (ws and wss) that relays WebRTC\n\
        offers and answers between browsers.";
    /// Peers announced to one node get offers from the peers of every node: offers
    /// and answers for another node's peer are relayed through its inbox.
    const SHARES_SWARMS: bool = true;
    type Network = NetworkConfig;
    type Protocol = ProtocolConfig;
    type Limits = LimitsConfig;

    /// An offer is worth relaying for as long as it can be answered.
    fn relay_lifetime(protocol: &ProtocolConfig) -> Option<u32> {
        Some(protocol.offer_lifetime)
    }

    /// Browsers re-announce every two minutes; their peers need not live an hour.
    fn default_cleaning() -> CleaningConfig {
        CleaningConfig {
            peer_timeout: 300,
            interval: 30,
        }
    }

    /// A browser holds one connection per tracker for all its torrents, for as long
    /// as its page is open: 32 per address lets a household or an office share one,
    /// while holding a socket worker's 50,000 takes more than 1,500 addresses from more
    /// than 24 networks (1,024 connections each; a /24 or an IPv6 /48), not the 196
    /// addresses or one IPv6 /56 that 256 per address allowed.
    fn default_per_ip() -> shoal_common::PerIpConfig {
        shoal_common::PerIpConfig {
            max_connections: 32,
            max_connections_per_network: 1024,
            ..Default::default()
        }
    }

    fn announce_interval(protocol: &ProtocolConfig) -> u32 {
        protocol.announce_interval
    }

    /// A connection quiet for `idle_timeout` is closed: the interval stays under it.
    fn interval_ceiling(network: &Self::Network) -> u32 {
        network.idle_timeout.saturating_sub(1)
    }

    fn validate(config: &Config, problems: &mut Problems) {
        let protocol = &config.protocol;
        let network = &config.network;
        problems.section("network", |p| {
            network.validate_tcp(p);
            network.validate_reverse_proxy(p);
            p.check(
                network.idle_timeout > protocol.announce_interval,
                "idle_timeout",
                format!(
                    "must exceed protocol.announce_interval ({}), or quiet clients are cut off between announces",
                    protocol.announce_interval
                ),
            );
            if !network.origins_path.as_os_str().is_empty()
                && let Some(problem) = shoal_common::unreadable(&network.origins_path)
            {
                p.add("origins_path", problem);
            }
            p.within(
                "max_connections_per_origin",
                network.max_connections_per_origin,
                0..=1 << 24,
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
        let limits = &config.limits;
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
            p.within(
                "max_description_size",
                limits.max_description_size,
                256..=16 << 20,
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
                limits.max_offer_bytes_per_second == 0
                    || limits.offer_bytes_burst as usize >= limits.max_description_size,
                "offer_bytes_burst",
                "must be at least max_description_size when max_offer_bytes_per_second is set \
                 (one offer of that size must fit)",
            );
            p.within(
                "max_torrents_per_connection",
                limits.max_torrents_per_connection,
                1..=1 << 24,
            );
            p.within(
                "max_outgoing_messages",
                limits.max_outgoing_messages,
                1..=1 << 20,
            );
            p.within("max_outgoing_bytes", limits.max_outgoing_bytes, 0..=1 << 30);
            for (key, value) in [
                (
                    "max_outgoing_bytes_per_worker",
                    limits.max_outgoing_bytes_per_worker,
                ),
                (
                    "max_incoming_bytes_per_worker",
                    limits.max_incoming_bytes_per_worker,
                ),
            ] {
                p.within(key, value, 0..=1 << 40);
            }
            p.check(
                limits.max_outgoing_bytes >= limits.max_message_size,
                "max_outgoing_bytes",
                "must be at least max_message_size (one forwarded offer can be that big)",
            );
            p.check(
                limits.max_outgoing_bytes_per_worker >= limits.max_message_size,
                "max_outgoing_bytes_per_worker",
                "must be at least max_message_size (one forwarded offer can be that big)",
            );
            p.check(
                limits.max_incoming_bytes_per_worker
                    >= limits
                        .max_message_size
                        .saturating_add(limits.max_frame_size),
                "max_incoming_bytes_per_worker",
                "must be at least max_message_size + max_frame_size (one message under way \
                 can hold its fragments and the frame being read)",
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
    fn default_config_round_trips() {
        let text = config_to_toml(&Config::default());
        assert_eq!(parse_config::<Config>(&text).unwrap(), Config::default());
        assert!(text.contains("max_outgoing_messages = 256"), "{text}");
    }

    #[test]
    fn bad_values_name_their_keys() {
        let err = parse_config::<Config>(
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

    #[test]
    fn a_cluster_store_is_taken_and_checked_like_the_other_trackers() {
        let config = parse_config::<Config>("[cluster]\nstore = \"127.0.0.1:6379\"\n").unwrap();
        assert!(config.cluster.enabled());
        let err = parse_config::<Config>("[cluster]\nstore = \"nowhere\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("cluster.store"), "{err}");
    }
}
