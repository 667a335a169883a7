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

use std::sync::Arc;

use anyhow::Context as _;
use shoal_common::{AccessControl, ClientRules, Shutdown};
use shoal_common::{Counters, WorkerStats};
use shoal_private::{Accounts, Registry, Sessions};
use shoal_swarm::Clock;

/// What every worker of one running tracker shares.
#[derive(Debug)]
pub struct Context<C> {
    /// The tracker's clock.
    pub clock: Arc<Clock>,
    /// The access list.
    pub access: Arc<AccessControl>,
    /// Which clients are served (`[clients]`), replaceable through the admin API.
    pub clients: Arc<ClientRules>,
    /// The announce interval given now, adapted to load (`[interval]`).
    pub interval: Arc<AnnounceInterval>,
    /// Private mode's users and torrents; `None` for a public tracker.
    pub private: Option<Arc<Registry>>,
    /// Private mode's clients per user and torrent (the peer cap, the enforced
    /// minimum interval); `None` for a public tracker.
    pub sessions: Option<Arc<Sessions>>,
    /// Private mode's accounting, when `private.export_directory` is set.
    pub accounts: Option<Arc<Accounts>>,
    /// The exporter of its batches to the site, when `private.export_url` or
    /// `export_redis` is set.
    pub exporter: Option<Arc<Exporter>>,
    /// Statistics: counters per socket worker, gauges per swarm worker.
    pub stats: Arc<WorkerStats<C>>,
    /// The shutdown flag.
    pub shutdown: Shutdown,
}

impl<C> Clone for Context<C> {
    fn clone(&self) -> Self {
        Self {
            clock: self.clock.clone(),
            access: self.access.clone(),
            clients: self.clients.clone(),
            interval: self.interval.clone(),
            private: self.private.clone(),
            accounts: self.accounts.clone(),
            sessions: self.sessions.clone(),
            exporter: self.exporter.clone(),
            stats: self.stats.clone(),
            shutdown: self.shutdown.clone(),
        }
    }
}

impl<C: Counters> Context<C> {
    /// A tracker's shared state: its access list, client rules and (in private mode)
    /// its users and torrents loaded, statistics for its workers, a fresh shutdown flag.
    pub fn new<K: shoal_common::TrackerKind>(
        name: &str,
        config: &shoal_common::Config<K>,
        clock: Arc<Clock>,
        socket_workers: usize,
        swarm_gauges: usize,
    ) -> anyhow::Result<Self> {
        let peer_timeout = config.cleaning.peer_timeout;
        let access = AccessControl::from_config(&config.access_list).context(
            "cannot load the access list (access_list.path: a readable file of hex info \
                 hashes, one per line; or access_list.mode = \"off\")",
        )?;
        let clients = ClientRules::from_config(&config.clients)
            .map_err(|problem| anyhow::anyhow!("clients.{problem}"))?;
        let settings = &config.private;
        if settings.enabled && !settings.key_secret_path.as_os_str().is_empty() {
            let path = &settings.key_secret_path;
            let secret = shoal_common::read_bounded(path, 4096).with_context(|| {
                format!("cannot read private.key_secret_path {}", path.display())
            })?;
            let secret = shoal_private::secret_of_file(&secret);
            shoal_private::set_secret(secret)
                .map_err(|problem| anyhow::anyhow!("private.key_secret_path: {problem}"))?;
            log::info!(
                "{name}: private mode: stateless keys accepted (private.key_secret_path), secret \
                 fingerprint {} (the first 8 hex digits of its SHA-256)",
                shoal_private::fingerprint_hex(secret)
            );
        }
        let private = if settings.enabled {
            let registry = Registry::open(&settings.users_path, &settings.torrents_path)
                .context("cannot load private mode's users and torrents (private.users_path, private.torrents_path)")?;
            let (users, torrents) = registry.counts();
            // Trackers of one process naming the same files share one registry: the
            // first loads it, the others say they share it.
            if Arc::strong_count(&registry) > 1 {
                log::info!(
                    "{name}: private mode: {users} users, {torrents} torrents registered \
                     (the registry another tracker of this process loaded from the same files)"
                );
            } else {
                log::info!("{name}: private mode: {users} users, {torrents} torrents registered");
            }
            Some(registry)
        } else {
            None
        };
        let accounts = if settings.enabled && !settings.export_directory.as_os_str().is_empty() {
            // In a cluster the ledger's pairs are the store's, shared by every node.
            let shared = config
                .cluster
                .enabled()
                .then(|| Box::new(StorePairs::new(&config.cluster)) as shoal_private::SharedStore);
            if shared.is_some() {
                log::info!(
                    "{name}: accounting shared with the cluster's other nodes through {}",
                    config.cluster.store
                );
            }
            let accounts = Accounts::start_with(
                name,
                &settings.export_directory,
                shoal_private::AccountsSettings {
                    interval: std::time::Duration::from_secs(settings.export_interval.into()),
                    peer_timeout: peer_timeout.into(),
                    max_session_bytes: settings.max_session_bytes,
                    backlog_batches: settings.export_backlog as usize,
                    backlog_bytes: settings.export_backlog_bytes,
                    max_ledger_bytes: shoal_private::AccountsSettings::ledger_bytes_for(
                        config.capacity.max_peers,
                    ),
                },
                shared,
            )
            .context("cannot start the accounting thread")?;
            log::info!(
                "{name}: accounting batches every {} s into {}",
                settings.export_interval,
                settings.export_directory.display()
            );
            Some(accounts)
        } else {
            None
        };
        let exporter = match &accounts {
            Some(_) => start_exporter(name, settings)?,
            None => None,
        };
        let sessions = settings.enabled.then(|| {
            Arc::new(Sessions::new(
                peer_timeout,
                settings.min_interval,
                settings.peer_lists_per_minute,
            ))
        });
        let interval = AnnounceInterval::new(AnnounceInterval::settings_for(
            config,
            K::min_announce_interval(&config.protocol),
            K::interval_ceiling(&config.network),
        ));
        Ok(Self {
            clock,
            exporter,
            sessions,
            access: Arc::new(access),
            clients: Arc::new(clients),
            interval: Arc::new(interval),
            private,
            accounts,
            stats: WorkerStats::new(socket_workers, swarm_gauges),
            shutdown: Shutdown::new(),
        })
    }
}

/// Starts the exporter of private mode's batches when a target is configured.
fn start_exporter(
    name: &str,
    settings: &shoal_common::PrivateConfig,
) -> anyhow::Result<Option<Arc<Exporter>>> {
    let mut targets = ExportTargets::default();
    if !settings.export_url.is_empty() {
        let target = HttpTarget::parse(&settings.export_url)
            .map_err(|problem| anyhow::anyhow!("private.export_url: {problem}"))?;
        targets.http = Some(target);
    }
    if !settings.export_redis.is_empty() {
        let target = RedisTarget::parse(&settings.export_redis, &settings.export_redis_stream)
            .map_err(|problem| anyhow::anyhow!("private.export_redis: {problem}"))?;
        targets.redis = Some(target);
    }
    if !targets.any() {
        return Ok(None);
    }
    let exporter = Exporter::start(name, &settings.export_directory, targets)
        .context("cannot start the accounting exporter")?;
    let mut to = Vec::new();
    if !settings.export_url.is_empty() {
        to.push("the site's HTTP endpoint");
    }
    if !settings.export_redis.is_empty() {
        to.push("a Redis stream");
    }
    log::info!(
        "{name}: accounting batches exported to {}",
        to.join(" and ")
    );
    Ok(Some(exporter))
}

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
