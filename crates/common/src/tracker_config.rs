//! The shape every tracker's configuration file shares.
//!
//! A tracker's keys and sections are the same whatever the protocol: worker counts,
//! `[network]`, `[protocol]`, `[cleaning]`, `[capacity]`, `[per_ip]`, `[limits]`,
//! `[statistics]`, `[access_list]` and `[cpu_pinning]`. Three of them
//! differ in content (`network`, `protocol`, `limits`); a [`TrackerKind`] names those
//! and adds its own checks, and [`Config`] is the file, written and validated once
//! here. Keys mean the same in every tracker (`socket_workers = 0`, `swarm_workers = 0`
//! included), and a misspelt key is still rejected by name: every section keeps
//! serde's `deny_unknown_fields`.
//!
//! The listening addresses every `[network]` starts with are declared once, in
//! [`network_config!`](crate::network_config).
//!
//! A single tracker's file is a [`TrackerFile`]: the process's sections (`[logging]`,
//! `[metrics]`, `[privileges]`) and these keys at the top level; the combined `shoal`
//! file has the process's sections once and these keys under `[udp]`, `[http]` and
//! `[ws]`.

use std::fmt::Debug;
use std::net::SocketAddr;
use std::path::Path;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use shoal_toml_config::TomlConfig;

use crate::config::{
    CleaningConfig, ClusterConfig, Problems, StateConfig, StatisticsConfig, TrackerConfig,
    available_cpus,
};
use crate::process_config::ProcessAnd;
use crate::{AccessListConfig, CpuPinningConfig, PrivateConfig};

/// What the printed file says under the tracker's own header.
const FILE_NOTE: &str = "Every key is optional; a key left out keeps the default shown here.\n\
                         Durations are in seconds, sizes in bytes.";

/// The most socket or swarm workers a config may ask for.
pub(crate) const MAX_WORKERS: usize = 1024;

/// The longest queue of batches a swarm worker may have (`limits.swarm_queue_len`):
/// each slot is allocated up front, and a swarm worker that many batches behind is
/// seconds behind already.
pub(crate) const MAX_SWARM_QUEUE_LEN: usize = 1 << 16;

/// One config section: what serde, `-p` and equality need.
pub trait Section:
    Clone + Debug + Default + PartialEq + Eq + Serialize + DeserializeOwned + TomlConfig + 'static
{
}

impl<T> Section for T where
    T: Clone
        + Debug
        + Default
        + PartialEq
        + Eq
        + Serialize
        + DeserializeOwned
        + TomlConfig
        + 'static
{
}

/// What makes one tracker's file its own: three sections, a few defaults and the
/// checks that look at them.
pub trait TrackerKind: Clone + Debug + Default + PartialEq + Eq + Send + Sync + 'static {
    /// The comment at the top of the printed file: what the tracker is.
    const ABOUT: &'static str;
    /// The snapshot it keeps its swarms in across restarts (`[state]`), if it can:
    /// the one declaration of that, which the start-up reads too.
    const STATE: Option<crate::config::StateKind> = None;
    /// Whether its swarms can be shared with other nodes (`[cluster]`).
    const SHARES_SWARMS: bool = false;
    /// Addresses and sockets.
    type Network: Section + Listen + Send + Sync;
    /// What the tracker tells clients.
    type Protocol: Section + Send + Sync;
    /// Limits and queue sizes.
    type Limits: Section + QueueLimits + Send + Sync;

    /// For a tracker whose peers are connections (WebTorrent's), how many seconds a
    /// message for a peer on another node (an offer, an answer) is worth relaying
    /// (`[cluster]`); `None` for trackers that relay nothing.
    fn relay_lifetime(protocol: &Self::Protocol) -> Option<u32> {
        let _ = protocol;
        None
    }

    /// The `[cleaning]` defaults (WebTorrent peers re-announce far more often).
    fn default_cleaning() -> CleaningConfig {
        CleaningConfig::default()
    }

    /// The `[capacity]` defaults: what one such peer and torrent cost decides them.
    fn default_capacity() -> CapacityConfig {
        CapacityConfig::default()
    }

    /// The `[per_ip]` defaults: how long its clients stay connected decides them.
    fn default_per_ip() -> PerIpConfig {
        PerIpConfig::default()
    }

    /// Seconds between announces that clients are told, which peers must outlive.
    fn announce_interval(protocol: &Self::Protocol) -> u32;

    /// The shortest time between announces clients are told to keep (HTTP's
    /// `min interval`); half the interval where the protocol has no such key.
    fn min_announce_interval(protocol: &Self::Protocol) -> u32 {
        Self::announce_interval(protocol) / 2
    }

    /// The longest interval the transport allows, jitter included (WebTorrent closes
    /// connections quiet for longer than its idle timeout).
    fn interval_ceiling(_network: &Self::Network) -> u32 {
        u32::MAX
    }

    /// Checks the tracker's own sections; `problems` is at the top level, so keys are
    /// named with their section (`problems.section("network", …)`).
    fn validate(config: &Config<Self>, problems: &mut Problems);
}

/// A `[limits]` section: every tracker has swarm worker queues.
pub trait QueueLimits {
    /// Batches of requests waiting for each swarm worker.
    fn swarm_queue_len(&self) -> usize;
}

/// A `[network]` section: where the tracker listens.
pub trait Listen {
    /// The addresses to listen on, IPv4 first, those turned off left out.
    fn addresses(&self) -> Vec<SocketAddr>;
    /// Checks the address keys.
    fn validate_addresses(&self, problems: &mut Problems);
}

/// A tracker's configuration file.
///
/// Every key is optional; a key left out keeps the default shown here.
/// Durations are in seconds, sizes in bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, TomlConfig)]
#[serde(default, deny_unknown_fields, bound = "")]
#[toml_config(about = format!("{}\n\n{}", T::ABOUT, FILE_NOTE))]
pub struct Config<T: TrackerKind> {
    /// Socket workers: threads that own the sockets, parse requests and send every
    /// reply. 0 means the available CPUs that swarm workers leave: socket and swarm
    /// workers together then never outnumber the CPUs.
    pub socket_workers: usize,
    /// Swarm workers: threads that own the torrents, each a shard chosen by info hash.
    /// 0 chooses: with one socket worker, it keeps the torrents itself (no hand-off to
    /// another thread per batch of requests, fastest on a single core); with more, one
    /// swarm worker per four socket workers (with socket_workers = 0: one per five
    /// CPUs, the rest socket workers).
    pub swarm_workers: usize,
    /// Addresses and sockets.
    pub network: T::Network,
    /// What the tracker tells clients.
    pub protocol: T::Protocol,
    /// When peers and torrents are forgotten.
    pub cleaning: CleaningConfig,
    /// How many torrents and peers the tracker keeps at most, so that memory stays
    /// bounded whatever clients send. Refusals are counted in the statistics.
    pub capacity: CapacityConfig,
    /// Limits per client address (or IPv6 network): request rate, connections, and
    /// temporary bans for abuse. Counted in the statistics.
    pub per_ip: PerIpConfig,
    /// Limits and queue sizes. Each one is counted when it triggers; work over a limit
    /// is refused or dropped, never waited for.
    pub limits: T::Limits,
    /// The announce interval, adapted to load: raised when the tracker is busy, so
    /// clients come back later instead of being dropped, and lowered when it is not
    /// (documents/overload.md).
    pub interval: IntervalConfig,
    /// Periodic statistics in the log.
    pub statistics: StatisticsConfig,
    /// Which torrents are served.
    pub access_list: AccessListConfig,
    /// Private mode: passkeys, registered users and torrents.
    pub private: PrivateConfig,
    /// Which BitTorrent clients are served, by peer-id prefix (and User-Agent over
    /// HTTP). Replaced live through the admin API.
    pub clients: crate::ClientConfig,
    /// Pinning workers to CPU cores.
    pub cpu_pinning: CpuPinningConfig,
    /// Swarms kept across restarts.
    pub state: StateConfig,
    /// Swarms shared with other tracker nodes through a Redis or Valkey store
    /// (documents/scale-out.md); off while `store` is empty. Requests never wait for
    /// the store.
    pub cluster: ClusterConfig,
}

impl<T: TrackerKind> Default for Config<T> {
    fn default() -> Self {
        Self {
            socket_workers: 1,
            swarm_workers: 0,
            network: T::Network::default(),
            protocol: T::Protocol::default(),
            cleaning: T::default_cleaning(),
            capacity: T::default_capacity(),
            per_ip: T::default_per_ip(),
            limits: T::Limits::default(),
            interval: IntervalConfig::default(),
            statistics: StatisticsConfig::default(),
            access_list: AccessListConfig::default(),
            private: PrivateConfig::default(),
            clients: crate::ClientConfig::default(),
            cpu_pinning: CpuPinningConfig::default(),
            state: StateConfig::default(),
            cluster: ClusterConfig::default(),
        }
    }
}

impl<T: TrackerKind> Config<T> {
    /// Number of socket workers to start (see the `socket_workers` key).
    pub fn socket_worker_count(&self) -> usize {
        self.worker_counts(available_cpus()).0
    }

    /// Number of swarm worker threads to start; 0 means the only socket worker keeps
    /// the torrents itself (see the `swarm_workers` key).
    pub fn swarm_worker_count(&self) -> usize {
        self.worker_counts(available_cpus()).1
    }

    fn worker_counts(&self, cpus: usize) -> (usize, usize) {
        worker_counts(self.socket_workers, self.swarm_workers, cpus)
    }
}

/// Socket and swarm workers for the configured counts on a machine of `cpus` CPUs.
/// With `socket_workers = 0` the two together are the CPUs: a swarm worker is as
/// busy as a socket worker under load, and one thread more than cores makes two of
/// them share one.
fn worker_counts(socket_workers: usize, swarm_workers: usize, cpus: usize) -> (usize, usize) {
    let cpus = cpus.max(1);
    if socket_workers == 0 {
        let swarms = match swarm_workers {
            0 if cpus == 1 => 0,
            0 => cpus.div_ceil(5),
            swarms => swarms,
        };
        return (cpus.saturating_sub(swarms).max(1), swarms);
    }
    let swarms = match (swarm_workers, socket_workers) {
        (0, 1) => 0,
        (0, sockets) => sockets.div_ceil(4),
        (swarms, _) => swarms,
    };
    (socket_workers, swarms)
}

#[cfg(test)]
mod tests {
    use super::worker_counts;

    #[test]
    fn automatic_workers_never_outnumber_the_cpus() {
        assert_eq!(
            worker_counts(0, 0, 1),
            (1, 0),
            "one core: the socket worker keeps them"
        );
        assert_eq!(worker_counts(0, 0, 2), (1, 1));
        assert_eq!(worker_counts(0, 0, 4), (3, 1));
        assert_eq!(worker_counts(0, 0, 16), (12, 4));
        for cpus in 1..=256 {
            let (sockets, swarms) = worker_counts(0, 0, cpus);
            assert_eq!(sockets + swarms, cpus, "{cpus} CPUs");
        }
        // Swarm workers chosen, socket workers not: the rest of the CPUs, at least one.
        assert_eq!(worker_counts(0, 3, 16), (13, 3));
        assert_eq!(worker_counts(0, 8, 4), (1, 8));
        // Both chosen, or socket workers chosen: as before.
        assert_eq!(worker_counts(1, 0, 16), (1, 0));
        assert_eq!(worker_counts(8, 0, 2), (8, 2));
        assert_eq!(worker_counts(4, 3, 2), (4, 3));
    }
}

impl<T: TrackerKind> TrackerConfig for Config<T> {
    fn validate(&self, problems: &mut Problems) {
        for (key, value) in [
            ("socket_workers", self.socket_workers),
            ("swarm_workers", self.swarm_workers),
        ] {
            problems.check(
                value <= MAX_WORKERS,
                key,
                format!("must be at most {MAX_WORKERS}"),
            );
        }
        problems.section("network", |p| self.network.validate_addresses(p));
        let interval = T::announce_interval(&self.protocol);
        problems.section("protocol", |p| {
            p.check(
                interval >= 1,
                "announce_interval",
                "must be at least 1 second",
            );
        });
        problems.section("limits", |p| {
            p.within(
                "swarm_queue_len",
                self.limits.swarm_queue_len(),
                1..=MAX_SWARM_QUEUE_LEN,
            );
        });
        T::validate(self, problems);
        problems.section("cleaning", |p| self.cleaning.validate(p, interval));
        problems.section("capacity", |p| self.capacity.validate(p));
        problems.section("interval", |p| self.interval.validate(p, interval));
        problems.section("per_ip", |p| self.per_ip.validate(p));
        problems.section("access_list", |p| self.access_list.validate(p));
        let access_list_on = self.access_list.mode != crate::AccessListMode::Off;
        problems.section("private", |p| self.private.validate(p, access_list_on));
        problems.section("clients", |p| self.clients.validate(p));
        problems.section("cpu_pinning", |p| {
            self.cpu_pinning.validate(p);
            let (sockets, swarms) = self.worker_counts(available_cpus());
            let cpus = available_cpus();
            p.check(
                !self.cpu_pinning.active || self.cpu_pinning.core_offset + sockets + swarms <= cpus,
                "active",
                format!(
                    "would put two workers on one core: {sockets} socket and {swarms} swarm \
                     worker(s) from core {} on {cpus} cores; lower the worker counts or \
                     core_offset",
                    self.cpu_pinning.core_offset
                ),
            );
        });
        problems.section("state", |p| self.state.validate(p, T::STATE.is_some()));
        problems.section("cluster", |p| self.cluster.validate(p, T::SHARES_SWARMS));
    }

    fn snapshot_directories(&self) -> Vec<(String, std::path::PathBuf)> {
        if T::STATE.is_some() && self.state.enabled() {
            vec![("state.directory".to_string(), self.state.directory.clone())]
        } else {
            Vec::new()
        }
    }
}

/// A single tracker's file: the process's sections and the tracker's keys.
pub type TrackerFile<T> = ProcessAnd<Config<T>>;

/// How many torrents and peers a tracker keeps at most.
///
/// When full, swarms that exist keep working: a new torrent takes the place of the
/// oldest torrent whose peers never came from two clients at once (what a flood of
/// fresh info hashes leaves behind, even from two ports of each address), and only
/// when there is none is it refused with an error
/// ("tracker full"); a new peer in a full swarm (or a full tracker) is answered with
/// peers but not stored until others leave. Limits are split evenly over the swarm
/// workers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, TomlConfig)]
#[serde(default, deny_unknown_fields)]
pub struct CapacityConfig {
    /// Most torrents (all swarm workers together). An announce that would start
    /// another gets a "tracker full" error; known torrents keep working.
    pub max_torrents: usize,
    /// Most peers over all torrents. New peers past it are sent peers but not stored.
    pub max_peers: usize,
    /// Most peers in one torrent. New peers past it are sent peers but not stored.
    pub max_peers_per_torrent: usize,
    /// Once a swarm worker holds half of its share of max_torrents: new torrents one
    /// client (an address or network, as the per_ip section counts clients) may start per
    /// second there, on average; an announce past it that would start one is refused
    /// ("too many new torrents from your address") and counted. Below half, starting
    /// torrents costs nothing (after a restart without state every client starts its
    /// torrents again). UDP and HTTP; 0 turns the limit off.
    pub new_torrents_per_second: u32,
    /// New torrents a client may start at once above that rate.
    pub new_torrents_burst: u32,
    /// Once half full, as new_torrents_per_second: new torrents one network (an IPv4
    /// /network_ipv4_prefix_len or IPv6 /network_ipv6_prefix_len of the per_ip
    /// section: a /24 and a /48 by default) may start per second there, on average, so
    /// that filling the tracker takes many networks, not the addresses of one IPv6
    /// allocation. 0 counts clients only.
    pub network_new_torrents_per_second: u32,
    /// New torrents a network may start at once above that rate.
    pub network_new_torrents_burst: u32,
}

impl Default for CapacityConfig {
    /// About 2.7 GB of torrents and peers for a UDP tracker (≈ 150 bytes per torrent
    /// and 24 per peer, measured), far above the busiest public trackers.
    fn default() -> Self {
        Self {
            max_torrents: 10_000_000,
            max_peers: 50_000_000,
            max_peers_per_torrent: 200_000,
            new_torrents_per_second: 1,
            new_torrents_burst: 100,
            network_new_torrents_per_second: 8,
            network_new_torrents_burst: 800,
        }
    }
}

impl CapacityConfig {
    /// Records problems: every limit must allow something, and no more than a
    /// machine could hold (about 140 bytes a torrent, 24 a peer).
    pub fn validate(&self, problems: &mut Problems) {
        problems.within("max_torrents", self.max_torrents, 1..=1 << 32);
        problems.within("max_peers", self.max_peers, 1..=1 << 36);
        problems.within(
            "max_peers_per_torrent",
            self.max_peers_per_torrent,
            1..=1 << 32,
        );
        problems.check(
            self.new_torrents_per_second == 0 || self.new_torrents_burst >= 1,
            "new_torrents_burst",
            "must be at least 1 when new_torrents_per_second is set",
        );
        problems.check(
            self.network_new_torrents_per_second == 0 || self.network_new_torrents_burst >= 1,
            "network_new_torrents_burst",
            "must be at least 1 when network_new_torrents_per_second is set",
        );
    }
}

/// The announce interval, adapted to load.
///
/// Each second the tracker measures how much of its capacity it used (its busiest
/// worker, requests it had to shed or the kernel dropped) and how many peers it
/// keeps, and sets the interval at which those peers would use `target_load_percent`
/// of it: never under the protocol's `announce_interval`, never over `max`. It rises
/// at once and falls slowly (as fast as the spare capacity allows), so clients told a
/// shorter interval never crowd in together. Peers live as long as the interval they
/// were given plus the grace `cleaning.peer_timeout` leaves over `announce_interval`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, TomlConfig)]
#[serde(default, deny_unknown_fields)]
pub struct IntervalConfig {
    /// Adapt the interval to load; false always gives `announce_interval` (jitter
    /// still applies).
    pub adaptive: bool,
    /// The longest interval given, in seconds. 0: six times `announce_interval`, at
    /// most 10800 (3 hours, the longest newTrackon lists a tracker with).
    pub max: u32,
    /// The share of its capacity the tracker aims to use, in percent (10 to 95): the
    /// rest absorbs bursts.
    pub target_load_percent: u32,
    /// Each announce reply's interval is moved at random by up to this percentage
    /// either way (0 to 50), so clients that announce together (libtorrent announces
    /// all torrents that share a tracker at once) spread out.
    pub jitter_percent: u32,
}

impl Default for IntervalConfig {
    fn default() -> Self {
        Self {
            adaptive: true,
            max: 0,
            target_load_percent: 70,
            jitter_percent: 10,
        }
    }
}

/// The longest interval newTrackon accepts, and the default bound.
pub const LONGEST_INTERVAL: u32 = 10_800;

impl IntervalConfig {
    /// The longest interval given with `announce_interval` as the shortest.
    pub fn max_for(&self, announce_interval: u32) -> u32 {
        match self.max {
            0 => announce_interval
                .saturating_mul(6)
                .min(LONGEST_INTERVAL)
                .max(announce_interval),
            max => max,
        }
    }

    /// Records problems; `announce_interval` is the protocol's.
    pub fn validate(&self, problems: &mut Problems, announce_interval: u32) {
        problems.check(
            self.max == 0 || (announce_interval..=86_400).contains(&self.max),
            "max",
            format!("must be 0 or from announce_interval ({announce_interval}) to 86400"),
        );
        problems.within("target_load_percent", self.target_load_percent, 10..=95);
        problems.within("jitter_percent", self.jitter_percent, 0..=50);
    }
}

/// Limits per client. A client is an IPv4 address, or an IPv6 network of
/// `ipv6_prefix_len` bits (one IPv6 host usually has a whole /64 to choose addresses
/// from); the lengths are configurable for networks behind carrier-grade NAT.
///
/// Each socket worker keeps its own table of `table_size` clients (a fixed amount of
/// memory whatever sources send, spoofed ones included), so with several socket
/// workers a client can get up to that many times its rate.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, TomlConfig)]
#[serde(default, deny_unknown_fields)]
pub struct PerIpConfig {
    /// Requests (announces, scrapes, connects) a client may make per second, on
    /// average; more are refused (UDP: dropped; HTTP: 429; WebTorrent: an error
    /// message). Opening a TCP connection counts as one too (one over the rate is
    /// closed at once, before any TLS). A BitTorrent client announces a torrent every half hour, so this is
    /// generous even for many users behind one address. 0 turns the limit off.
    pub requests_per_second: u32,
    /// Requests a client may make in a burst above that rate (a client starting many
    /// torrents at once announces them all together).
    pub burst: u32,
    /// Seconds over the rate, with no calm second between, after which a client is
    /// banned. 0: never ban for the rate.
    pub ban_after: u32,
    /// Seconds a ban lasts; its requests are dropped meanwhile. 0 turns bans off.
    pub ban_duration: u32,
    /// Retired: older versions banned a UDP client for sending bad connection ids,
    /// which let anyone get any address banned with forged packets. A request with a
    /// bad connection id is now dropped without counting against anyone; the key is
    /// still read (with a warning) so that older config files start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bad_connection_ids_per_minute: Option<u32>,
    /// TCP (HTTP, WebTorrent): open connections one client may have at once; more are
    /// refused with a 503 (closed, on a TLS port). 0 turns the limit off.
    pub max_connections: usize,
    /// TCP (HTTP, WebTorrent): open connections one network may have at once (an IPv4
    /// /network_ipv4_prefix_len or IPv6 /network_ipv6_prefix_len), so that holding
    /// every connection takes addresses from many networks, not one IPv6 allocation.
    /// 0 turns the limit off.
    pub max_connections_per_network: usize,
    /// Bits of an IPv4 address that make one network for max_connections_per_network.
    pub network_ipv4_prefix_len: u8,
    /// Bits of an IPv6 address that make one network for max_connections_per_network
    /// (48: a site's usual allocation).
    pub network_ipv6_prefix_len: u8,
    /// Bits of an IPv4 address that make one client (32: each address).
    pub ipv4_prefix_len: u8,
    /// Bits of an IPv6 address that make one client (64: each /64 network).
    pub ipv6_prefix_len: u8,
    /// Clients each socket worker keeps track of (about 64 bytes each); the one idle
    /// the longest gives way to a newcomer, a banned one last.
    pub table_size: usize,
}

impl Default for PerIpConfig {
    fn default() -> Self {
        Self {
            requests_per_second: 100,
            burst: 1000,
            ban_after: 30,
            ban_duration: 600,
            bad_connection_ids_per_minute: None,
            max_connections: 256,
            max_connections_per_network: 2048,
            network_ipv4_prefix_len: 24,
            network_ipv6_prefix_len: 48,
            ipv4_prefix_len: 32,
            ipv6_prefix_len: 64,
            table_size: 65_536,
        }
    }
}

impl PerIpConfig {
    /// Records problems.
    pub fn validate(&self, problems: &mut Problems) {
        if self.bad_connection_ids_per_minute.is_some() {
            problems.notice(
                "bad_connection_ids_per_minute",
                "retired and ignored (bad connection ids no longer count against the \
                 address they claim, which may be forged); remove the line",
            );
        }
        problems.check(
            self.requests_per_second == 0 || self.burst >= 1,
            "burst",
            "must be at least 1 when requests_per_second is set",
        );
        problems.check(
            (1..=32).contains(&self.ipv4_prefix_len),
            "ipv4_prefix_len",
            "must be between 1 and 32",
        );
        problems.check(
            (1..=128).contains(&self.ipv6_prefix_len),
            "ipv6_prefix_len",
            "must be between 1 and 128",
        );
        problems.check(
            (16..=1 << 24).contains(&self.table_size),
            "table_size",
            "must be between 16 and 16777216",
        );
        problems.within("max_connections", self.max_connections, 0..=1 << 24);
        problems.within(
            "max_connections_per_network",
            self.max_connections_per_network,
            0..=1 << 24,
        );
        problems.within(
            "network_ipv4_prefix_len",
            self.network_ipv4_prefix_len,
            1..=32,
        );
        problems.within(
            "network_ipv6_prefix_len",
            self.network_ipv6_prefix_len,
            1..=128,
        );
    }
}

/// Declares a tracker's `[network]` section: the listening addresses every tracker
/// has (declared, defaulted and checked here once), then the tracker's own keys with
/// their defaults.
///
/// ```
/// shoal_common::network_config! {
///     /// Addresses and sockets.
///     pub struct NetworkConfig {
///         port: 6969,
///         /// Kernel receive buffer per socket, in bytes.
///         pub socket_recv_buffer_size: usize = 1 << 20,
///     }
/// }
/// use shoal_common::Listen as _;
/// let network = NetworkConfig::default();
/// assert_eq!(network.addresses().len(), 2);
/// assert_eq!(network.socket_recv_buffer_size, 1 << 20);
/// ```
///
/// With `tcp { max_connections: N, idle_timeout: S },` after the port, the section also
/// gets the keys every TCP tracker has (connections, deadlines, buffers, TLS with its
/// PEM files or ACME, the I/O backend), declared once here with that tracker's
/// defaults for the two that differ, and implements [`TcpNetwork`]; `proxy,` after it
/// adds the reverse-proxy keys.
#[macro_export]
macro_rules! network_config {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            port: $port:literal,
            tcp { max_connections: $max_connections:expr, idle_timeout: $idle_timeout:expr $(,)? },
            proxy,
            $( $(#[$field_meta:meta])* pub $field:ident : $ty:ty = $default:expr ),* $(,)?
        }
    ) => {
        $crate::network_config! {
            $(#[$meta])*
            pub struct $name {
                port: $port,
                tcp { max_connections: $max_connections, idle_timeout: $idle_timeout },
                $( $(#[$field_meta])* pub $field: $ty = $default, )*
                /// When behind a reverse proxy (nginx, haproxy): the request header carrying
                /// the client's address, e.g. "X-Forwarded-For". Empty: use the TCP peer
                /// address. Only connections from reverse_proxy_trusted may set it: a request
                /// (for WebTorrent, the opening request) through them without a valid header
                /// is refused, and anyone else (who reached the port directly) is served with
                /// their own address. Per-client limits then apply to the forwarded address.
                pub reverse_proxy_ip_header: ::std::string::String = ::std::string::String::new(),
                /// The addresses or networks (CIDR) of your reverse proxies: the only
                /// connections whose proxy header is believed, and which skip the per-client
                /// limits themselves (their clients are limited by the forwarded address).
                pub reverse_proxy_trusted: ::std::vec::Vec<$crate::IpNet> =
                    $crate::loopback_networks(),
                /// Which address of a multi-address proxy header to use: "last" (the address
                /// your own proxy appended) or "first" (the client as the first proxy saw it:
                /// only behind a proxy that replaces the header, for any client can put
                /// an address there).
                pub reverse_proxy_ip_header_position: $crate::HeaderPosition =
                    $crate::HeaderPosition::Last,
            }
        }

        impl $crate::ReverseProxy for $name {
            fn proxy_header(&self) -> &str {
                &self.reverse_proxy_ip_header
            }

            fn trusted_proxies(&self) -> &[$crate::IpNet] {
                &self.reverse_proxy_trusted
            }

            fn header_position(&self) -> $crate::HeaderPosition {
                self.reverse_proxy_ip_header_position
            }
        }
    };
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            port: $port:literal,
            tcp { max_connections: $max_connections:expr, idle_timeout: $idle_timeout:expr $(,)? },
            $( $(#[$field_meta:meta])* pub $field:ident : $ty:ty = $default:expr ),* $(,)?
        }
    ) => {
        $crate::network_config! {
            $(#[$meta])*
            pub struct $name {
                port: $port,
                /// Most open connections per socket worker (each also needs a file
                /// descriptor: LimitNOFILE=). At the limit a newcomer takes the place of
                /// the connection that has waited longest for its client (a whole HTTP
                /// request, a WebTorrent message), which is closed; only when every one
                /// is in its TLS handshake or being answered is a newcomer refused (a
                /// 503, or closed on a TLS port).
                pub max_connections: usize = $max_connections,
                /// Seconds a connection may stay open without completing a request: idle
                /// keep-alive connections and slow clients alike (HTTP), or without
                /// sending anything (WebTorrent, where it must exceed
                /// protocol.announce_interval: clients only talk when they announce).
                pub idle_timeout: u32 = $idle_timeout,
                /// Seconds the TLS handshake may take from the accept, however slowly
                /// its bytes come (and for WebTorrent the upgrade request with it; as
                /// long again after the upgrade for the first message).
                pub handshake_timeout: u32 = $crate::DEFAULT_HANDSHAKE_TIMEOUT,
                /// Retired name of handshake_timeout (the HTTP tracker's until
                /// 2026-11): still read, with a notice, so that older files start.
                #[serde(skip_serializing_if = "Option::is_none")]
                pub tls_handshake_timeout: ::std::option::Option<u32> = ::std::option::Option::None,
                /// Kernel send buffer of each connection, in bytes (the kernel counts
                /// twice this for its bookkeeping). Replies that a client does not read
                /// wait here and then in the tracker; a fixed size stops the kernel from
                /// growing it to megabytes for clients that never read. 0 leaves it to
                /// the kernel.
                pub socket_send_buffer_size: usize = 64 * 1024,
                /// Kernel receive buffer of each connection, in bytes: what a client can
                /// send ahead (pipelined requests) before the tracker reads it. 0 leaves
                /// it to the kernel.
                pub socket_recv_buffer_size: usize = 64 * 1024,
                /// Serve TLS (HTTPS, or wss:// for WebTorrent) with the certificate and key
                /// below. Browsers on https:// pages can only use wss:// trackers.
                pub enable_tls: bool = false,
                /// PEM file with the certificate chain, leaf first. Reloaded on SIGUSR1.
                pub tls_certificate_path: ::std::path::PathBuf = ::std::path::PathBuf::new(),
                /// PEM file with the private key (PKCS#8, PKCS#1/RSA or SEC1/EC). Reloaded on
                /// SIGUSR1.
                pub tls_private_key_path: ::std::path::PathBuf = ::std::path::PathBuf::new(),
                /// Names (e.g. ["tracker.example.com"]) to obtain a certificate for from an
                /// ACME CA (Let's Encrypt by default) instead of the two files above, which
                /// then stay empty: the tracker orders it at start, renews it before it
                /// ends and keeps serving with the old one while the CA is unreachable.
                /// The CA validates each name by connecting to it on port 443 (TLS-ALPN-01),
                /// so the tracker must listen on port 443 of every name's address. Setting
                /// this accepts the CA's terms of service. Empty: certificates from files.
                pub acme_names: ::std::vec::Vec<::std::string::String> = ::std::vec::Vec::new(),
                /// The CA's ACME directory. Try Let's Encrypt's staging CA first
                /// ("https://acme-staging-v02.api.letsencrypt.org/directory", whose
                /// certificates browsers do not trust) to stay clear of the production rate
                /// limits while setting up.
                pub acme_directory_url: ::std::string::String = $crate::LETS_ENCRYPT.to_owned(),
                /// E-mail address for the CA account (problems with the account); empty for
                /// none.
                pub acme_contact_email: ::std::string::String = ::std::string::String::new(),
                /// Directory for the ACME account key, certificate and key (each tracker in
                /// a subdirectory of its name; created with mode 0700, and refused if other
                /// users may read it). Under systemd, StateDirectory=shoal creates
                /// /var/lib/shoal.
                pub acme_storage_path: ::std::path::PathBuf = ::std::path::PathBuf::from("/var/lib/shoal/acme"),
                /// PEM file of the CA certificates trusted when talking to the ACME CA.
                pub acme_ca_certificates_path: ::std::path::PathBuf =
                    ::std::path::PathBuf::from("/etc/ssl/certs/ca-certificates.crt"),
                /// Renew the certificate this many days before it ends (or a third of its
                /// lifetime before, for short-lived certificates).
                pub acme_renew_days_before: u32 = 30,
                /// Seconds to wait after a failed order before trying again; the wait
                /// doubles after each failure, up to six hours.
                pub acme_retry_seconds: u32 = 60,
                /// TLS handshakes under way per socket worker. A newcomer past it closes the
                /// handshake under way longest, so connections that send a few bytes of a
                /// handshake and stall cannot lock others out (an honest handshake takes a
                /// round trip or two).
                pub max_tls_handshakes: usize = 1024,
                /// TLS handshakes one client (as the per_ip section counts clients) may have under way
                /// on a socket worker; one more is closed at once.
                pub max_tls_handshakes_per_client: usize = 32,
                /// Connections the kernel queues on each socket worker's listener before
                /// the tracker accepts them. A burst past it (clients coming back together
                /// after a restart or a network cut) has SYNs dropped, and those clients
                /// retry after a second or more. The kernel caps it at
                /// net.core.somaxconn (4096 by default since Linux 5.4; the log says when
                /// it does): raise both for bursts of many thousands.
                pub listen_backlog: u32 = 1024,
                /// What the socket workers run on: "epoll" (the default: measured
                /// faster than io_uring, with or without keep-alive and TLS, and it
                /// runs everywhere, containers included), "io_uring" (glommio; starting
                /// fails, saying why, where it cannot be set up) or "auto" (io_uring
                /// where it can be set up, epoll where Docker's or containerd's default
                /// seccomp profile, kernel.io_uring_disabled or a locked-memory limit
                /// too low for its buffers refuses it; the log says which, and why).
                pub io_backend: $crate::IoBackend = $crate::IoBackend::Epoll,
                $( $(#[$field_meta])* pub $field: $ty = $default, )*
            }
        }

        impl $crate::TcpNetwork for $name {
            fn io_backend(&self) -> $crate::IoBackend {
                self.io_backend
            }

            fn tls_files(&self) -> ::std::option::Option<(&::std::path::Path, &::std::path::Path)> {
                self.enable_tls
                    .then(|| (self.tls_certificate_path.as_path(), self.tls_private_key_path.as_path()))
            }

            fn acme(&self) -> ::std::option::Option<$crate::AcmeKeys<'_>> {
                (!self.acme_names.is_empty()).then(|| $crate::AcmeKeys {
                    names: &self.acme_names,
                    directory_url: &self.acme_directory_url,
                    contact_email: &self.acme_contact_email,
                    storage: &self.acme_storage_path,
                    ca_certificates: &self.acme_ca_certificates_path,
                    renew_days_before: self.acme_renew_days_before,
                    retry_seconds: self.acme_retry_seconds,
                })
            }

            fn tcp(&self) -> $crate::TcpKeys {
                $crate::TcpKeys {
                    max_connections: self.max_connections,
                    idle_timeout: self.idle_timeout,
                    handshake_timeout: self.handshake_timeout,
                    retired_handshake_timeout: self.tls_handshake_timeout,
                    connection_buffers: (self.socket_send_buffer_size, self.socket_recv_buffer_size),
                    max_tls_handshakes: self.max_tls_handshakes,
                    max_tls_handshakes_per_client: self.max_tls_handshakes_per_client,
                    listen_backlog: self.listen_backlog,
                }
            }
        }
    };
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            port: $port:literal,
            $( $(#[$field_meta:meta])* pub $field:ident : $ty:ty = $default:expr ),* $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(
            Clone, Debug, PartialEq, Eq,
            ::serde::Serialize, ::serde::Deserialize, ::shoal_toml_config::TomlConfig,
        )]
        #[serde(default, deny_unknown_fields)]
        pub struct $name {
            /// Listen on IPv4.
            pub use_ipv4: bool,
            /// IPv4 address and port to listen on. Port 0 picks a free port.
            pub address_ipv4: ::std::net::SocketAddr,
            /// Listen on IPv6 (an IPv6-only socket; IPv4 clients use the IPv4 socket).
            pub use_ipv6: bool,
            /// IPv6 address and port to listen on.
            pub address_ipv6: ::std::net::SocketAddr,
            $( $(#[$field_meta])* pub $field: $ty, )*
        }

        impl ::std::default::Default for $name {
            fn default() -> Self {
                Self {
                    use_ipv4: true,
                    address_ipv4: ::std::net::SocketAddr::from(([0, 0, 0, 0], $port)),
                    use_ipv6: true,
                    address_ipv6: ::std::net::SocketAddr::from(([0u16; 8], $port)),
                    $( $field: $default, )*
                }
            }
        }

        impl $crate::Listen for $name {
            fn addresses(&self) -> ::std::vec::Vec<::std::net::SocketAddr> {
                $crate::enabled_addresses(
                    self.use_ipv4,
                    self.address_ipv4,
                    self.use_ipv6,
                    self.address_ipv6,
                )
            }

            fn validate_addresses(&self, problems: &mut $crate::Problems) {
                $crate::validate_addresses(
                    problems,
                    (self.use_ipv4, self.address_ipv4),
                    (self.use_ipv6, self.address_ipv6),
                );
            }
        }
    };
}

/// Which address of a comma-separated header to take.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    shoal_toml_config::TomlConfig,
)]
#[serde(rename_all = "lowercase")]
pub enum HeaderPosition {
    /// The first address.
    First,
    /// The last address: the one added by the proxy in front of the tracker, which
    /// a client cannot forge.
    #[default]
    Last,
}

/// 127.0.0.0/8 and ::1: the reverse proxies trusted by default (one on the same host).
pub fn loopback_networks() -> Vec<crate::ip_net::IpNet> {
    vec![
        "127.0.0.0/8".parse().expect("valid network"),
        "::1".parse().expect("valid network"),
    ]
}

/// A `[network]` section with reverse-proxy keys (see
/// [`network_config!`](crate::network_config)).
pub trait ReverseProxy {
    /// `reverse_proxy_ip_header`: empty when not behind a proxy.
    fn proxy_header(&self) -> &str;
    /// `reverse_proxy_trusted`.
    fn trusted_proxies(&self) -> &[crate::ip_net::IpNet];
    /// `reverse_proxy_ip_header_position`.
    fn header_position(&self) -> HeaderPosition;

    /// Whether requests on a connection from `peer` carry the client's address in the
    /// proxy header (it is set, and `peer` is a trusted proxy).
    fn proxy_header_from(&self, peer: std::net::IpAddr) -> bool {
        !self.proxy_header().is_empty()
            && self.trusted_proxies().iter().any(|net| net.contains(peer))
    }

    /// Checks the reverse-proxy keys.
    fn validate_reverse_proxy(&self, problems: &mut Problems) {
        problems.check(
            self.proxy_header()
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-'),
            "reverse_proxy_ip_header",
            "must be a header name (letters, digits and dashes)",
        );
        problems.check(
            self.proxy_header().is_empty() || !self.trusted_proxies().is_empty(),
            "reverse_proxy_trusted",
            "must list your reverse proxies' addresses when reverse_proxy_ip_header is set",
        );
    }
}

/// The connection keys every TCP tracker's `[network]` has, declared once by
/// [`network_config!`](crate::network_config) (with each tracker's own defaults) and
/// read through [`TcpNetwork::tcp`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpKeys {
    /// `max_connections`: open connections per socket worker.
    pub max_connections: usize,
    /// `idle_timeout`, in seconds.
    pub idle_timeout: u32,
    /// `handshake_timeout`, in seconds.
    pub handshake_timeout: u32,
    /// `tls_handshake_timeout`, its retired name, where a file still sets it.
    pub retired_handshake_timeout: Option<u32>,
    /// `socket_send_buffer_size` and `socket_recv_buffer_size`.
    pub connection_buffers: (usize, usize),
    /// `max_tls_handshakes` and `max_tls_handshakes_per_client`.
    pub max_tls_handshakes: usize,
    pub max_tls_handshakes_per_client: usize,
    /// `listen_backlog`.
    pub listen_backlog: u32,
}

/// `network.handshake_timeout`'s default, in seconds.
pub const DEFAULT_HANDSHAKE_TIMEOUT: u32 = 10;

impl TcpKeys {
    /// Seconds a TLS handshake (and WebTorrent's upgrade) may take: the retired name's
    /// value where a file still sets it, else `handshake_timeout`.
    pub fn handshake_deadline(&self) -> u32 {
        self.retired_handshake_timeout
            .unwrap_or(self.handshake_timeout)
    }
}

/// Which executor a TCP tracker's socket workers run on (`network.io_backend`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, TomlConfig)]
#[serde(rename_all = "snake_case")]
pub enum IoBackend {
    /// io_uring when it can be set up here, else epoll.
    Auto,
    /// io_uring (glommio); starting fails, saying why, where it cannot be set up.
    IoUring,
    /// epoll, wherever the tracker runs; no locked memory needed. The default: it
    /// answered more requests a second than io_uring at less CPU each in every
    /// measurement (documents/benchmarks/backends-2026-11-29.md).
    #[default]
    Epoll,
}

/// The `[network]` section of a TCP tracker: TLS keys and the I/O backend (see
/// [`network_config!`](crate::network_config), whose `tls` sections implement it).
pub trait TcpNetwork {
    /// Which executor the socket workers run on.
    fn io_backend(&self) -> IoBackend;

    /// The certificate chain and private key files, when TLS is on (unused when the
    /// certificate comes from ACME).
    fn tls_files(&self) -> Option<(&Path, &Path)>;

    /// The ACME keys, when certificates are obtained from an ACME CA.
    fn acme(&self) -> Option<crate::AcmeKeys<'_>>;

    /// The connection keys every TCP tracker has, read in one place.
    fn tcp(&self) -> TcpKeys;

    /// Checks the connection keys, the listeners' backlog, that TLS, when on, names
    /// its files, and the handshake limits.
    fn validate_tcp(&self, problems: &mut Problems) {
        let keys = self.tcp();
        problems.within("max_connections", keys.max_connections, 1..=1 << 20);
        let (send, receive) = keys.connection_buffers;
        problems.within("socket_send_buffer_size", send, 0..=1 << 30);
        problems.within("socket_recv_buffer_size", receive, 0..=1 << 30);
        problems.check(
            keys.idle_timeout >= 1,
            "idle_timeout",
            "must be at least 1 second",
        );
        let deadline_key = match keys.retired_handshake_timeout {
            Some(retired) => {
                problems.notice(
                    "tls_handshake_timeout",
                    "renamed handshake_timeout (read as it for now); rename the line",
                );
                problems.check(
                    keys.handshake_timeout == DEFAULT_HANDSHAKE_TIMEOUT
                        || keys.handshake_timeout == retired,
                    "tls_handshake_timeout",
                    "is the retired name of handshake_timeout, which is set too: keep one",
                );
                "tls_handshake_timeout"
            }
            None => "handshake_timeout",
        };
        problems.check(
            keys.handshake_deadline() >= 1,
            deadline_key,
            "must be at least 1 second",
        );
        problems.within("listen_backlog", keys.listen_backlog, 1..=65535);
        problems.within("max_tls_handshakes", keys.max_tls_handshakes, 1..=1 << 20);
        problems.within(
            "max_tls_handshakes_per_client",
            keys.max_tls_handshakes_per_client,
            1..=1 << 20,
        );
        if let Some(acme) = self.acme() {
            acme.validate(problems);
            match self.tls_files() {
                None => problems.add(
                    "acme_names",
                    "certificates are for TLS: set enable_tls = true as well",
                ),
                Some((certificate, key)) => {
                    for (name, path) in [
                        ("tls_certificate_path", certificate),
                        ("tls_private_key_path", key),
                    ] {
                        problems.check(
                            path.as_os_str().is_empty(),
                            name,
                            "must stay empty with acme_names: the certificate ACME obtains is \
                             kept in acme_storage_path",
                        );
                    }
                }
            }
        } else if let Some((certificate, key)) = self.tls_files() {
            for (name, path) in [
                ("tls_certificate_path", certificate),
                ("tls_private_key_path", key),
            ] {
                if path.as_os_str().is_empty() {
                    problems.add(
                        name,
                        "must name a PEM file when enable_tls is true (or set acme_names to \
                         obtain a certificate from an ACME CA)",
                    );
                } else if let Some(problem) = crate::files::unreadable(path) {
                    problems.add(name, problem);
                }
            }
        }
    }
}

/// The addresses a tracker listens on: IPv4 and/or IPv6, as enabled.
pub fn enabled_addresses(
    use_ipv4: bool,
    ipv4: SocketAddr,
    use_ipv6: bool,
    ipv6: SocketAddr,
) -> Vec<SocketAddr> {
    [(use_ipv4, ipv4), (use_ipv6, ipv6)]
        .into_iter()
        .filter_map(|(enabled, addr)| enabled.then_some(addr))
        .collect()
}

/// The checks of [`network_config!`]'s address keys.
pub fn validate_addresses(
    problems: &mut Problems,
    (use_ipv4, ipv4): (bool, SocketAddr),
    (use_ipv6, ipv6): (bool, SocketAddr),
) {
    problems.check(
        use_ipv4 || use_ipv6,
        "use_ipv4",
        "use_ipv4 and use_ipv6 cannot both be false",
    );
    problems.check(ipv4.is_ipv4(), "address_ipv4", "must be an IPv4 address");
    problems.check(ipv6.is_ipv6(), "address_ipv6", "must be an IPv6 address");
}
