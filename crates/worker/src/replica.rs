//! A shard owner's part in shared swarms (`[cluster]`, crate `shoal_cluster`).
//!
//! Between batches of requests, whoever owns a shard (a swarm worker, or a socket
//! worker that keeps its torrents) calls [`Replica::exchange`]: it hands the changes
//! its announces recorded to the publisher once there are enough of them or they are
//! old enough, and applies the other nodes' changes in slices, as cleaning does, so
//! that a burst of remote changes never holds requests up for long. A slice may last
//! half as long as the owner spent on other work since the last one (at least a
//! cleaning slice): at most a third of its time goes to other nodes' changes, and
//! under load they are still applied as fast as they come. (A fixed 100 µs slice
//! per round fell behind at 110k announces/s per node: the changes waited 0.1–0.7 s
//! in the queue, documents/benchmarks/cluster-2026-11-23.md.)

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::TrySendError;
use shoal_cluster::{Changes, ClusterStart, ShardPorts};
use shoal_common::{ClusterStats, Config, LogBudget, Supervisor, TrackerKind, left_out};
use shoal_swarm::ServerTime;

use crate::outbox::shard_for;
use crate::shard::{CLEANING_SLICE, Shard};
use crate::snapshots::SnapshotSchedule;

/// Changes are handed to the publisher when this many bytes are recorded…
const HAND_OVER_BYTES: usize = 32 << 10;
/// …or when the oldest waited this long.
const HAND_OVER_EVERY: Duration = Duration::from_millis(20);
/// How long an idle shard owner may sleep while it replicates: other nodes' changes
/// are applied within it.
pub const REPLICA_POLL: Duration = Duration::from_millis(10);

/// One shard owner's ends of the cluster.
#[derive(Debug)]
pub struct Replica {
    ports: ShardPorts,
    index: usize,
    shards: usize,
    handed_over: Instant,
    /// When the last slice of other nodes' changes ended.
    applied: Instant,
    stats: Arc<ClusterStats>,
    /// Changes dropped for a full publisher queue: logged a few, then once a minute.
    drops_logged: LogBudget,
}

/// What a shard owner does besides serving requests and cleaning: snapshots for a
/// warm restart, and replication.
#[derive(Debug, Default)]
pub struct ShardDuties {
    /// `[state]`: its part of the snapshots.
    pub snapshots: Option<SnapshotSchedule>,
    /// `[cluster]`: its ends of the cluster.
    pub replica: Option<Replica>,
}

impl ShardDuties {
    /// One set of duties per shard, from what each feature started (either list may
    /// be empty: the feature is off).
    pub fn for_shards(
        shards: usize,
        snapshots: Vec<SnapshotSchedule>,
        replicas: Vec<Replica>,
    ) -> Vec<ShardDuties> {
        let mut snapshots = snapshots.into_iter();
        let mut replicas = replicas.into_iter();
        (0..shards)
            .map(|_| ShardDuties {
                snapshots: snapshots.next(),
                replica: replicas.next(),
            })
            .collect()
    }

    /// Whether a snapshot is being taken (the owner should come back soon).
    pub fn busy(&self) -> bool {
        self.snapshots
            .as_ref()
            .is_some_and(SnapshotSchedule::in_pass)
    }

    /// The longest the owner may wait for requests.
    pub fn longest_wait(&self, otherwise: Duration) -> Duration {
        if self.busy() {
            Duration::ZERO
        } else if self.replica.is_some() {
            otherwise.min(REPLICA_POLL)
        } else {
            otherwise
        }
    }

    /// A step of each duty, between batches.
    pub fn step<S: Shard>(&mut self, shard: &mut S, now: ServerTime) {
        if let Some(snapshots) = &mut self.snapshots {
            snapshots.step(shard, now);
        }
        if let Some(replica) = &mut self.replica {
            replica.exchange(shard, now);
        }
    }

    /// What the owner should also wake for while it waits for requests: the entries of
    /// a replica that relays messages (an offer waits for no poll).
    pub fn wake_on(
        &self,
    ) -> Option<&crossbeam_channel::Receiver<Arc<shoal_cluster::RemoteChanges>>> {
        self.replica
            .as_ref()
            .filter(|replica| replica.ports.relay.is_some())
            .map(|replica| &replica.ports.remote)
    }

    /// Hands the messages its requests recorded for other nodes to the relay at once
    /// (after each batch of an owner that serves between ticks).
    pub fn relay<S: Shard>(&mut self, shard: &mut S) {
        if let Some(replica) = &mut self.replica {
            replica.relay(shard);
        }
    }

    /// At shutdown: the last snapshot, the last changes.
    pub fn finish<S: Shard>(&mut self, shard: &mut S, now: ServerTime) {
        if let Some(snapshots) = self.snapshots.take() {
            snapshots.finish(shard, now);
        }
        if let Some(mut replica) = self.replica.take() {
            replica.hand_over(shard);
        }
    }
}

/// Starts the cluster threads of a tracker when `[cluster]` is on; returns one
/// [`Replica`] per shard (none when it is off). A node restored from its own
/// snapshot reads the stream from the snapshot's time (`restored_at`).
pub fn start_replicas<K: TrackerKind>(
    supervisor: &mut Supervisor,
    config: &Config<K>,
    protocol: &'static str,
    shards: usize,
    restored_at: Option<SystemTime>,
    stats: &Arc<ClusterStats>,
) -> anyhow::Result<Vec<Replica>> {
    if !config.cluster.enabled() {
        return Ok(Vec::new());
    }
    let ports = shoal_cluster::start(
        ClusterStart {
            config: &config.cluster,
            protocol,
            shards,
            peer_timeout: config.cleaning.peer_timeout,
            read_from: restored_at,
            stats: stats.clone(),
            relay: K::relay_lifetime(&config.protocol)
                .map(|seconds| Duration::from_secs(seconds.into())),
        },
        supervisor,
    )?;
    Ok(ports
        .into_iter()
        .enumerate()
        .map(|(index, ports)| Replica {
            ports,
            index,
            shards,
            handed_over: Instant::now(),
            applied: Instant::now(),
            stats: stats.clone(),
            drops_logged: LogBudget::new(3, Duration::from_secs(60)),
        })
        .collect())
}

impl Replica {
    /// Hands over recorded changes when due, then applies other nodes' changes for
    /// a slice: half the time since the last one, at least a `CLEANING_SLICE` (and
    /// at least one entry, so that they always move).
    pub fn exchange<S: Shard>(&mut self, shard: &mut S, now: ServerTime) {
        let due = shard.change_log().is_some_and(|log| {
            log.len() >= HAND_OVER_BYTES
                || (!log.is_empty() && self.handed_over.elapsed() >= HAND_OVER_EVERY)
        });
        if due {
            self.hand_over(shard);
        }
        self.relay(shard);
        let started = Instant::now();
        let slice = CLEANING_SLICE.max(started.duration_since(self.applied) / 2);
        while let Ok(changes) = self.ports.remote.try_recv() {
            let (index, shards) = (self.index, self.shards);
            let elapsed = changes.age(SystemTime::now());
            let mine = &mut |info_hash: &[u8; 20]| shard_for(info_hash, shards) == index;
            if changes.relayed {
                self.take_in_relayed(shard, &changes, now, mine);
            } else {
                match shard.apply_changes(&changes.records, elapsed, changes.origin, now, mine) {
                    Ok(done) => ClusterStats::add(
                        &self.stats.peers_applied,
                        (done.peers_added + done.peers_refreshed + done.peers_removed) as u64,
                    ),
                    // Every shard reads the same entry; the first one counts it.
                    Err(error) if index == 0 => {
                        ClusterStats::add(&self.stats.entries_refused, 1);
                        log::warn!("cluster: an entry from another node is damaged: {error}");
                    }
                    Err(_) => {}
                }
            }
            if started.elapsed() >= slice {
                break;
            }
        }
        self.applied = Instant::now();
        // Messages for other nodes that the relayed ones produced (none today: an
        // answer from another node goes to a connection here), and those of the
        // requests served since the last call, go at once.
        self.relay(shard);
    }

    /// Takes in one entry of messages relayed to this node.
    fn take_in_relayed<S: Shard>(
        &mut self,
        shard: &mut S,
        changes: &shoal_cluster::RemoteChanges,
        now: ServerTime,
        mine: &mut dyn FnMut(&[u8; 20]) -> bool,
    ) {
        match shard.apply_relayed(&changes.records, changes.origin, now, mine) {
            Ok(done) => {
                ClusterStats::add(&self.stats.messages_received, done.delivered as u64);
                ClusterStats::add(
                    &self.stats.messages_undeliverable,
                    done.undeliverable as u64,
                );
            }
            Err(error) if self.index == 0 => {
                ClusterStats::add(&self.stats.entries_refused, 1);
                log::warn!("cluster: messages relayed by another node are damaged: {error}");
            }
            Err(_) => {}
        }
    }

    /// Hands the messages recorded for other nodes to the relay writer, at once:
    /// an offer waits for no interval.
    fn relay<S: Shard>(&mut self, shard: &mut S) {
        let (Some(relay), Some(log)) = (&self.ports.relay, shard.relay_log()) else {
            return;
        };
        if log.is_empty() {
            return;
        }
        for batch in log.take() {
            let count = batch.count as u64;
            if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) =
                relay.try_send(batch)
            {
                ClusterStats::add(&self.stats.messages_dropped_queue, count);
            }
        }
    }

    /// Hands whatever changes are recorded to the publisher; counts them dropped
    /// when its queue is full.
    pub fn hand_over<S: Shard>(&mut self, shard: &mut S) {
        self.handed_over = Instant::now();
        let Some(log) = shard.change_log() else {
            return;
        };
        if log.is_empty() {
            return;
        }
        let count = log.changes();
        let changes = Changes {
            bytes: log.take(),
            count,
        };
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) =
            self.ports.publish.try_send(changes)
        {
            ClusterStats::add(&self.stats.changes_dropped_queue, count as u64);
            if let Some(unlogged) = self.drops_logged.take(Instant::now()) {
                log::warn!(
                    "cluster: the publisher's queue is full: dropped {count} changes of shard {} (other nodes miss those peers until they announce again){}",
                    self.index,
                    left_out(unlogged),
                );
            }
        }
    }
}
