//! Swarms shared by several tracker nodes through one Redis (or Valkey) stream
//! (`[cluster]`; the design and its measured costs are in documents/scale-out.md).
//!
//! Every node keeps serving from its own memory. Shard owners record each stored
//! announce as a change (`shoal_swarm::ChangeLog`) and hand the bytes to this
//! crate's **publisher** thread, which appends them to the stream as one entry every
//! `publish_interval_ms` (one round trip for all the announces of that interval). The
//! **reader** thread follows the stream and hands the other nodes' entries to every
//! shard owner, which applies the changes to the torrents it owns. Nothing on the
//! request path touches the network or waits for the store.
//!
//! ```text
//!  shard owners ──changes──► publisher ──XADD (MINID trims, PEXPIRE)──► stream
//!  shard owners ◄──entries── reader    ◄──XREAD BLOCK───────────────────┘
//! ```
//!
//! The stream holds `peer_timeout` seconds of changes (older entries can only name
//! expired peers), so its size is bounded by the announce rate, and the key expires
//! when no node writes. A node that starts reads the whole stream and so learns every
//! live peer; a node that loses the store keeps what it could not publish (up to
//! `backlog` bytes) and publishes it when the store is back; entries carry the time
//! they were written, so late ones still give peers their right lifetime.
//!
//! # Layout
//!
//! * `resp`: the RESP2 protocol, both ways, bounded.
//! * `store`: one blocking connection with timeouts.
//! * `values`: keys several nodes read and then replace together, or not at all
//!   (private mode's ledger in a cluster).
//! * `relay`: messages for one other node (WebTorrent's offers and answers)
//!   through per-node inbox streams, and the thread that writes them.
//! * `publisher`, `reader`: the two threads every clustered tracker runs (the reader
//!   runs twice when messages are relayed: the shared stream and the inbox).

mod relay;
mod resp;
mod store;
mod values;

mod publisher;
mod reader;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{Receiver, Sender};
use shoal_common::ClusterStats;
use shoal_common::{ClusterConfig, Shutdown, Supervisor};

pub use resp::{Reply, encode as encode_command};

/// Entry points for the fuzz targets (built only by cargo-fuzz, which sets
/// `--cfg fuzzing`).
#[cfg(fuzzing)]
#[doc(hidden)]
pub mod fuzzing {
    use crate::resp::{Parsed, complete_length, parse};

    /// `fuzz/fuzz_targets/resp_reply.rs`: any bytes from a store; the parser never
    /// panics, and measuring a reply agrees with parsing it.
    pub fn resp_reply(data: &[u8]) {
        let measured = complete_length(data);
        match parse(data) {
            Ok(Parsed::Reply(_, used)) => {
                assert_eq!(measured, Ok(Some(used)));
                assert!(used <= data.len());
            }
            Ok(Parsed::Incomplete) => assert_eq!(measured, Ok(None)),
            Err(_) => assert!(measured.is_err()),
        }
    }
}
pub use store::{Connection, StoreAddress};
pub use values::SharedValues;

/// Changes one shard owner hands to the publisher.
#[derive(Debug)]
pub struct Changes {
    /// Whole change records.
    pub bytes: Vec<u8>,
    /// How many.
    pub count: usize,
}

/// An entry of another node's changes, or of messages it relayed to this node, as
/// every shard owner gets it.
#[derive(Debug)]
pub struct RemoteChanges {
    /// Change records (or relayed messages); each shard owner applies those of its
    /// torrents.
    pub records: Vec<u8>,
    /// When the other node wrote them.
    pub written: SystemTime,
    /// The other node's run (a random id per process, never 0): where its peers are.
    pub origin: u64,
    /// Whether these are messages from this node's inbox rather than changes.
    pub relayed: bool,
}

impl RemoteChanges {
    /// Whole seconds since they were written (0 if the writer's clock is ahead).
    pub fn age(&self, now: SystemTime) -> u32 {
        now.duration_since(self.written)
            .map_or(0, |age| u32::try_from(age.as_secs()).unwrap_or(u32::MAX))
    }
}

/// A shard owner's two ends of the cluster.
#[derive(Debug)]
pub struct ShardPorts {
    /// Where its changes go.
    pub publish: Sender<Changes>,
    /// Where the other nodes' changes (and messages relayed here) come from.
    pub remote: Receiver<Arc<RemoteChanges>>,
    /// Where messages for other nodes go, when the tracker relays them.
    pub relay: Option<Sender<shoal_swarm::Relayed>>,
}

/// What starting the cluster threads of one tracker needs.
#[derive(Debug)]
pub struct ClusterStart<'a> {
    /// The `[cluster]` section.
    pub config: &'a ClusterConfig,
    /// `udp` or `http`: trackers of different protocols keep different swarms.
    pub protocol: &'static str,
    /// Shard owners (swarm workers, or 1 for a socket worker that keeps the torrents).
    pub shards: usize,
    /// Seconds a peer lives without announcing: how long the stream keeps changes.
    pub peer_timeout: u32,
    /// Read the stream from this time on (a node restored from its own snapshot
    /// already has what came before); `None` reads all of it.
    pub read_from: Option<SystemTime>,
    /// Where the threads count.
    pub stats: Arc<ClusterStats>,
    /// For a tracker whose peers are connections (WebTorrent): relay messages between
    /// nodes through per-node inboxes, each worth delivering for this long.
    pub relay: Option<Duration>,
}

/// Batches of changes waiting for the publisher, per shard owner; past this the
/// owner drops and counts them (the publisher never blocks longer than the store
/// timeout, so this is seconds of changes).
const PUBLISH_QUEUE: usize = 1024;
/// Entries waiting for each shard owner; the reader waits when they are full.
const REMOTE_QUEUE: usize = 64;
/// Batches of messages waiting for the relay writer (from every shard owner); past
/// this they are dropped and counted.
const RELAY_QUEUE: usize = 4096;
/// How long either thread waits before it tries a store that failed again.
pub const RETRY_AFTER: Duration = Duration::from_secs(1);

impl ClusterStart<'_> {
    /// The store's address and login.
    fn store(&self) -> StoreAddress {
        store_address(self.config)
    }

    /// The stream this tracker's nodes share.
    pub fn key(&self) -> String {
        stream_key(&self.config.name, self.protocol)
    }
}

/// The store `[cluster]` names, and how to log in.
pub fn store_address(config: &ClusterConfig) -> StoreAddress {
    StoreAddress {
        address: config.store.clone(),
        username: config.username.clone(),
        password: config.password.clone(),
        database: config.database,
        timeout: Duration::from_millis(u64::from(config.timeout_ms)),
    }
}

/// Where cluster `name` keeps private mode's ledger pair of (`user`, `torrent`):
/// one key for the UDP and HTTP trackers alike, so a client announcing to both is
/// credited once.
pub fn ledger_key(name: &str, user: u32, torrent: u32) -> Vec<u8> {
    format!("{name}:ledger:{user}:{torrent}").into_bytes()
}

/// The stream of cluster `name`'s `protocol` tracker.
pub fn stream_key(name: &str, protocol: &str) -> String {
    format!("{name}:{protocol}:changes")
}

/// Starts the publisher and reader threads of one tracker under `supervisor`; returns
/// one pair of ports per shard owner.
pub fn start(
    start: ClusterStart<'_>,
    supervisor: &mut Supervisor,
) -> anyhow::Result<Vec<ShardPorts>> {
    // Entries are told apart by this run's origin, not the node's name: two nodes
    // that share a name (or a restarted node) still get each other's changes.
    let origin_id = loop {
        // 0 means "this node" in the relay's records.
        let id = rand::random::<u64>();
        if id != 0 {
            break id;
        }
    };
    let origin = format!("{origin_id:016x}");
    let node = start.config.node_name();
    let connections = if start.relay.is_some() { 0b1111 } else { 0b11 };
    start.stats.enable(connections);
    let (publish, changes) = crossbeam_channel::bounded(PUBLISH_QUEUE);
    let (remote_senders, remote_receivers): (Vec<_>, Vec<_>) = (0..start.shards)
        .map(|_| crossbeam_channel::bounded(REMOTE_QUEUE))
        .unzip();
    let shutdown = supervisor.shutdown().clone();
    let publisher = publisher::Publisher {
        store: start.store(),
        key: start.key(),
        origin: origin.clone(),
        node: node.clone(),
        retention: Duration::from_secs(u64::from(start.peer_timeout)),
        interval: Duration::from_millis(u64::from(start.config.publish_interval_ms)),
        backlog_limit: start.config.backlog,
        changes,
        stats: start.stats.clone(),
        shutdown: shutdown.clone(),
    };
    let reader = reader::Reader {
        store: start.store(),
        key: start.key(),
        origin: origin.clone(),
        shards: remote_senders.clone(),
        from: start.read_from,
        relayed: false,
        stats: start.stats.clone(),
        shutdown: shutdown.clone(),
    };
    log::info!(
        "{} tracker: sharing swarms as node {node:?} through {} (stream {})",
        start.protocol,
        start.config.store,
        start.key()
    );
    supervisor.spawn(format!("{}-publish", start.protocol), move || {
        publisher.run();
        Ok(())
    })?;
    supervisor.spawn(format!("{}-replicas", start.protocol), move || {
        reader.run();
        Ok(())
    })?;
    let relay = match start.relay {
        Some(lifetime) => {
            let (relay, messages) = crossbeam_channel::bounded(RELAY_QUEUE);
            let inbox = relay::inbox_key(&start.config.name, start.protocol, origin_id);
            let writer = relay::RelayWriter {
                store: start.store(),
                name: start.config.name.clone(),
                protocol: start.protocol,
                origin: origin.clone(),
                lifetime,
                messages,
                stats: start.stats.clone(),
                shutdown: shutdown.clone(),
            };
            let inbox_reader = reader::Reader {
                store: start.store(),
                key: inbox,
                origin,
                shards: remote_senders,
                from: None,
                relayed: true,
                stats: start.stats.clone(),
                shutdown,
            };
            supervisor.spawn(format!("{}-relay", start.protocol), move || {
                writer.run();
                Ok(())
            })?;
            supervisor.spawn(format!("{}-inbox", start.protocol), move || {
                inbox_reader.run();
                Ok(())
            })?;
            Some(relay)
        }
        None => None,
    };
    Ok(remote_receivers
        .into_iter()
        .map(|remote| ShardPorts {
            publish: publish.clone(),
            remote,
            relay: relay.clone(),
        })
        .collect())
}

/// Milliseconds since the Unix epoch.
pub(crate) fn unix_millis(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |since| {
        u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
    })
}

/// Waits `duration` unless shutdown comes first; returns whether it did.
pub(crate) fn pause(shutdown: &Shutdown, duration: Duration) -> bool {
    let until = std::time::Instant::now() + duration;
    while !shutdown.is_requested() {
        let left = until.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return false;
        }
        std::thread::sleep(left.min(Shutdown::POLL_INTERVAL));
    }
    true
}
