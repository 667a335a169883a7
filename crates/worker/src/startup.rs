//! Starting a tracker's threads, written once for every transport.
//!
//! Whatever carries its requests (UDP sockets read in batches, TCP connections on epoll or glommio), a
//! tracker starts the same way and in the same order: the snapshot schedule and the
//! cluster replicas, each shard's duties, the shards restored from the state file,
//! the swarm workers' channels, the socket workers (one of them keeping the torrents
//! itself when there are no swarm workers), the swarm worker threads, the log line
//! of what was restored, the socket worker threads and the statistics thread. A
//! tracker says only what is its own through [`Startup`]: its shards and how one of its
//! socket workers is made. A duty added to every shard is added here, once.

use crossbeam_channel::Sender;
use shoal_common::{Config, Counters, SummaryLine, Supervisor, TrackerKind};
use shoal_swarm::{Restored, ServerTime};

use crate::replica::{ShardDuties, start_replicas};
use crate::restart_file::{self, Snapshot};
use crate::snapshots::{Extras, start_snapshots};
use crate::{Context, LocalSwarm, ReplyRoute, Shard, spawn_swarm_workers, swarm_channels};

/// What a tracker adds to the shared start-up.
pub trait Startup {
    /// Its torrents.
    type Shard: Shard;

    /// An empty shard.
    fn shard(&self) -> Self::Shard;

    /// Fills `shard`, number `index` of `shards`, from `snapshot` at `now`.
    fn restore(
        &self,
        shard: &mut Self::Shard,
        snapshot: &Snapshot,
        now: ServerTime,
        index: usize,
        shards: usize,
    ) -> Restored;

    /// Socket worker `index`, which sends to `swarms` or, with `local`, keeps the
    /// torrents itself.
    fn socket_worker(
        &mut self,
        index: usize,
        swarms: Vec<Sender<<Self::Shard as Shard>::Batch>>,
        local: Option<LocalSwarm<Self::Shard>>,
    ) -> anyhow::Result<ReadySocketWorker<<Self::Shard as Shard>::Reply>>;
}

/// A socket worker, ready to run on its own thread.
pub struct ReadySocketWorker<R> {
    /// Runs it until shutdown (pinning its thread when configured).
    pub run: Box<dyn FnOnce() -> anyhow::Result<()> + Send>,
    /// The way swarm workers' replies take back to it.
    pub replies: ReplyRoute<R>,
}

impl<R> std::fmt::Debug for ReadySocketWorker<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadySocketWorker").finish_non_exhaustive()
    }
}

/// How a tracker's threads are to start.
pub struct Threads<'a, K: TrackerKind, C: Counters> {
    /// Its name in logs and metrics ("udp", "http", "ws").
    pub name: &'static str,
    /// Its config.
    pub config: &'a Config<K>,
    /// Clock, access list, statistics and shutdown.
    pub context: &'a Context<C>,
    /// Socket workers to start.
    pub socket_workers: usize,
    /// Batches waiting for each swarm worker.
    pub swarm_queue_len: usize,
    /// What the state file brought back ([`load_snapshot`]).
    pub snapshot: Option<&'a Snapshot>,
    /// What the tracker saves in its snapshots besides the shards.
    pub snapshot_extras: Extras,
    /// Its statistics line.
    pub summary: SummaryLine<C::Totals>,
}

impl<K: TrackerKind, C: Counters> std::fmt::Debug for Threads<'_, K, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Threads")
            .field("name", &self.name)
            .field("socket_workers", &self.socket_workers)
            .finish_non_exhaustive()
    }
}

/// The snapshot a tracker of kind `K` starts from, if it keeps one and one is there
/// (a file larger than the tracker's capacity could have written is refused unread).
pub fn load_snapshot<K: TrackerKind>(config: &Config<K>) -> Option<Snapshot> {
    let limit =
        restart_file::largest_snapshot(config.capacity.max_torrents, config.capacity.max_peers);
    K::STATE.and_then(|kind| restart_file::load_at_start(&config.state, kind, limit))
}

/// Starts every thread of a tracker under a new supervisor, which is returned.
pub fn start_threads<K, C, T>(
    threads: Threads<'_, K, C>,
    tracker: &mut T,
) -> anyhow::Result<Supervisor>
where
    K: TrackerKind,
    C: Counters + 'static,
    C::Totals: crate::LoadCounters,
    T: Startup,
{
    let Threads {
        name,
        config,
        context,
        socket_workers,
        swarm_queue_len,
        snapshot,
        snapshot_extras,
        summary,
    } = threads;
    let swarm_workers = config.swarm_worker_count();
    let shards = swarm_workers.max(1);
    let mut supervisor = Supervisor::new(context.shutdown.clone()).named(name);
    crate::spawn_controller(
        &mut supervisor,
        name,
        context.interval.clone(),
        context.stats.clone(),
    )?;
    let snapshots = match K::STATE {
        Some(kind) => start_snapshots(
            &mut supervisor,
            &config.state,
            kind,
            shards,
            context.clock.now(),
            snapshot_extras,
        )?,
        None => Vec::new(),
    };
    let replicas = start_replicas(
        &mut supervisor,
        config,
        name,
        shards,
        snapshot.map(Snapshot::taken),
        context.stats.cluster(),
    )?;
    let mut duties = ShardDuties::for_shards(shards, snapshots, replicas);
    let mut restored = Restored::default();
    let mut shard = |index: usize| {
        let mut shard = tracker.shard();
        if let Some(snapshot) = snapshot {
            let now = context.clock.now();
            restored.add(tracker.restore(&mut shard, snapshot, now, index, shards));
        }
        shard
    };
    // Shards are made first (the local one, then the swarm workers'), so the socket
    // workers can be made after without `shard` holding `tracker`.
    let mut local_shard = (swarm_workers == 0).then(|| shard(0));
    let swarm_shards: Vec<T::Shard> = (0..swarm_workers).map(&mut shard).collect();
    let (senders, receivers) = swarm_channels(swarm_workers, swarm_queue_len);
    let mut routes = Vec::with_capacity(socket_workers);
    let mut workers = Vec::with_capacity(socket_workers);
    for index in 0..socket_workers {
        let local = local_shard.take().map(|shard| {
            LocalSwarm::new(
                shard,
                context.clock.clone(),
                config.cleaning.interval,
                context.stats.gauge_slot(0),
            )
            .with_duties(duties.pop().unwrap_or_default())
        });
        let worker = tracker.socket_worker(index, senders.clone(), local)?;
        routes.push(worker.replies);
        workers.push(worker.run);
    }
    drop(senders);
    let mut swarm_shards = swarm_shards.into_iter();
    spawn_swarm_workers(
        &mut supervisor,
        context,
        config,
        receivers,
        &routes,
        duties,
        |_| swarm_shards.next().expect("one shard per swarm worker"),
    )?;
    if let (Some(kind), Some(_)) = (K::STATE, snapshot) {
        restart_file::log_restored(kind, restored);
    }
    for (index, worker) in workers.into_iter().enumerate() {
        supervisor.spawn(format!("socket-{index}"), worker)?;
    }
    context
        .stats
        .log_under(&mut supervisor, &config.statistics, summary)?;
    Ok(supervisor)
}
