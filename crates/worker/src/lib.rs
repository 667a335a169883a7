//! The worker core every shoal tracker runs on, free of transports, protocols and the
//! process around it.
//!
//! A tracker is protocol code (parsing, answering) plus a [`Shard`]: the torrents one
//! swarm worker owns and how requests change them. Everything between is here, once:
//!
//! ```text
//!  socket worker                                  swarm worker (thread)
//!    route by info hash (shard_for)                 SwarmWorker loop: handle a batch
//!    Outboxes: one open batch per swarm worker ───►  at `now`, publish gauges, clean
//!    sent without blocking; a full queue sheds       on schedule (CleaningSchedule)
//!    ◄──────────── ReplyRoute (+ Wake) ─────────────  one reply message per socket worker
//!
//!  or, with swarm_workers = 0 and one socket worker: LocalSwarm, the shard inside the
//!  socket worker, served in place and cleaned on the same schedule.
//! ```
//!
//! What changes here is how shards are owned, fed and kept: a new duty of every shard
//! owner, a new way to route. What carries requests (UDP sockets in `shoal_udp`, TCP
//! connections in `shoal_tcp`) and what runs a tracker process (`shoal_process`) sit
//! above and are not known here.
//!
//! # Layout
//!
//! Every module is private; what other crates use is re-exported at the root below.
//!
//! * `context`: what every worker of one running tracker shares ([`Context`]), made
//!   once at start (private mode's files loaded, its accounting started).
//! * `startup`: starting a tracker's threads, once for every transport (the
//!   [`Startup`] trait is what a transport adds).
//! * `shard`: the [`Shard`] trait (and [`BitTorrentShard`], which gives it to the
//!   shards that keep a `BitTorrentMap`), [`ByWorker`] grouping of replies and the
//!   cleaning schedule.
//! * `swarm_worker`: swarm worker threads, their channels and how they are started.
//! * `local`: the shard inside a socket worker.
//! * `link`: a socket worker's way to the torrents (batches or the local shard), as
//!   the TCP trackers' routers use it.
//! * `outbox`: routing by info hash and batching towards swarm workers, with load
//!   shedding when a queue is full; [`ScrapeSplit`], a scrape split by shard.
//! * `replica`: a shard owner's part in shared swarms (`[cluster]`): its changes
//!   out, other nodes' changes in, between batches; and [`ShardDuties`], everything a
//!   shard owner does besides serving and cleaning.
//! * `reply`: reply channels back to socket workers that wake them only when they
//!   sleep.
//! * `per_ip`: request rates, bans and the bounded table that tracks clients, for
//!   every transport's socket workers.
//! * `restart_file`: the restart file (a snapshot of every shard), read at start;
//!   `snapshots`: the thread that writes it, a slice of a shard at a time.
//! * `export`: private mode's accounting batches sent to the site (HTTP, a Redis
//!   stream), the export directory as the backlog.
//! * `shared_ledger`: private mode's ledger pairs kept in a cluster's store, so every
//!   node credits a client's bytes once.
//! * `interval`: the announce interval adapted to load ([`AnnounceInterval`], read
//!   per reply; its [`Controller`] and the thread that ticks it).

mod context;
mod export;
mod interval;
mod link;
mod local;
mod outbox;
mod per_ip;
mod replica;
mod reply;
mod restart_file;
mod shard;
mod shared_ledger;
mod snapshots;
mod startup;
mod swarm_worker;

pub use context::Context;
pub use export::{ExportStats, ExportTargets, Exporter, HttpTarget, RedisTarget};
pub use interval::{
    AnnounceInterval, Bounds, Controller, DropWeigher, Family, FamilyCounts, FamilySample,
    IntervalGauges, IntervalSettings, LONGEST_BOUND, LoadCounters, LoadSample,
    TICK as INTERVAL_TICK, spawn_controller,
};
pub use link::SwarmLink;
pub use local::LocalSwarm;
pub use outbox::{Batch, Outboxes, ScrapeSplit, Sent, SwarmWorkerGone, shard_for};
pub use per_ip::{ClientKey, ConnectionSlot, ConnectionsPerIp, OverLimit, RateTable, Verdict};
pub use replica::{REPLICA_POLL, Replica, ShardDuties, start_replicas};
pub use reply::{ReplyRoute, Wake, reply_capacity, reply_channel};
pub use restart_file::{Snapshot, restore_shard, write_snapshot};
pub use shard::{BitTorrentShard, ByWorker, CleaningSchedule, Delivered, Shard, status_of};
pub use shared_ledger::StorePairs;
pub use snapshots::observe as observe_snapshots;
pub use startup::{ReadySocketWorker, Startup, Threads, load_snapshot, start_threads};
pub use swarm_worker::{spawn_swarm_workers, swarm_channels};

/// How many torrents each client and each network may start in one shard once it is
/// half full (`[capacity] new_torrents_per_second`, `network_new_torrents_per_second`),
/// with clients and networks as `[per_ip]` counts them; `None` when off.
pub fn new_torrent_limit<K: shoal_common::TrackerKind>(
    config: &shoal_common::Config<K>,
) -> Option<shoal_swarm::NewTorrentLimit> {
    let capacity = &config.capacity;
    (capacity.new_torrents_per_second > 0).then_some(shoal_swarm::NewTorrentLimit {
        per_second: capacity.new_torrents_per_second,
        burst: capacity.new_torrents_burst,
        clients: config.per_ip.table_size,
        ipv4_prefix_len: config.per_ip.ipv4_prefix_len,
        ipv6_prefix_len: config.per_ip.ipv6_prefix_len,
        network_per_second: capacity.network_new_torrents_per_second,
        network_burst: capacity.network_new_torrents_burst,
        network_ipv4_prefix_len: config.per_ip.network_ipv4_prefix_len,
        network_ipv6_prefix_len: config.per_ip.network_ipv6_prefix_len,
    })
}

/// A shard's empty torrent map with its share of the capacity limits and, when on,
/// the limit on new torrents per client.
pub fn shard_map<K: shoal_common::TrackerKind, X: shoal_swarm::PeerData>(
    config: &shoal_common::Config<K>,
) -> shoal_swarm::BitTorrentMap<X> {
    let map = shoal_swarm::BitTorrentMap::new(config.cleaning.peer_timeout, shard_capacity(config));
    match new_torrent_limit(config) {
        Some(limit) => map.with_new_torrent_limit(limit),
        None => map,
    }
}

/// One shard's share of the configured capacity: the limits split evenly over the
/// swarm workers (rounded up), or all of them for a socket worker that keeps the
/// torrents itself.
pub fn shard_capacity<K: shoal_common::TrackerKind>(
    config: &shoal_common::Config<K>,
) -> shoal_swarm::Capacity {
    let shards = config.swarm_worker_count().max(1);
    let capacity = &config.capacity;
    shoal_swarm::Capacity {
        torrents: capacity.max_torrents.div_ceil(shards),
        peers: capacity.max_peers.div_ceil(shards),
        peers_per_torrent: capacity.max_peers_per_torrent,
    }
}
