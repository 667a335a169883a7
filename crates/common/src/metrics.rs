//! Counters that cost nothing on the hot path.
//!
//! A worker counts in a plain struct of `u64`s it owns (`counters!` generates it)
//! and adds those into its own cache-line-padded block of atomics once per loop
//! iteration. Readers (the statistics logger, tests) sum the blocks. No two workers
//! write the same cache line, and no atomic operation happens per packet.

use crate::metric_names::{LATENCY, LATENCY_HELP, PEERS, REFUSED, REFUSED_HELP};
use crate::padded::CachePadded;

/// Counters shared by one worker, summable into totals (implemented by `counters!`).
pub trait Counters: Default + Send + Sync {
    /// The plain sum readers see.
    type Totals: Default + Copy;
    /// The plain counters a worker counts in and flushes from.
    type Local: Default;
    /// Adds the current values into `totals`.
    fn add_to(&self, totals: &mut Self::Totals);
    /// Adds `local` into these counters and resets it.
    fn flush(&self, local: &mut Self::Local);
}

/// What a shard of torrents reports: its size, and what its capacity limits refused
/// since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShardStatus {
    /// Torrents.
    pub torrents: u64,
    /// Peers.
    pub peers: u64,
    /// Announces refused because the shard held as many torrents as it may.
    pub torrents_refused: u64,
    /// New peers answered but not stored because their torrent or the shard was full.
    pub peers_refused: u64,
    /// Announces refused because their client had started as many torrents as it may
    /// (`[capacity] new_torrents_per_second`).
    pub new_torrents_refused: u64,
    /// Torrents whose peers never came from two clients at once, removed to make room
    /// for a new torrent in a full shard.
    pub torrents_evicted: u64,
    /// Seeders, as the last cleaning pass counted them.
    pub seeders: u64,
    /// Leechers, as the last cleaning pass counted them.
    pub leechers: u64,
}

/// One of the largest swarms, for the statistics page.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LargeSwarm {
    /// The torrent's info hash.
    pub info_hash: [u8; 20],
    /// Seeders.
    pub seeders: u32,
    /// Leechers.
    pub leechers: u32,
    /// Completed downloads.
    pub downloads: u32,
}

impl LargeSwarm {
    /// Seeders and leechers.
    pub fn peers(&self) -> u64 {
        u64::from(self.seeders) + u64::from(self.leechers)
    }
}

/// What a swarm worker reports (stored, not added: the shard keeps the totals).
#[derive(Debug, Default)]
pub struct SwarmGauges {
    /// Torrents in the worker's shard.
    pub torrents: std::sync::atomic::AtomicU64,
    /// Peers in the worker's shard.
    pub peers: std::sync::atomic::AtomicU64,
    /// See [`ShardStatus::torrents_refused`].
    pub torrents_refused: std::sync::atomic::AtomicU64,
    /// See [`ShardStatus::peers_refused`].
    pub peers_refused: std::sync::atomic::AtomicU64,
    /// See [`ShardStatus::new_torrents_refused`].
    pub new_torrents_refused: std::sync::atomic::AtomicU64,
    /// See [`ShardStatus::torrents_evicted`].
    pub torrents_evicted: std::sync::atomic::AtomicU64,
    /// See [`ShardStatus::seeders`].
    pub seeders: std::sync::atomic::AtomicU64,
    /// See [`ShardStatus::leechers`].
    pub leechers: std::sync::atomic::AtomicU64,
    /// The shard's largest swarms, replaced after each cleaning pass (rarely, so a
    /// lock costs nothing here).
    pub largest: std::sync::Mutex<Vec<LargeSwarm>>,
}

impl SwarmGauges {
    /// Records the shard's current status.
    pub fn publish(&self, status: ShardStatus) {
        use std::sync::atomic::Ordering::Relaxed;
        self.torrents.store(status.torrents, Relaxed);
        self.peers.store(status.peers, Relaxed);
        self.torrents_refused
            .store(status.torrents_refused, Relaxed);
        self.peers_refused.store(status.peers_refused, Relaxed);
        self.new_torrents_refused
            .store(status.new_torrents_refused, Relaxed);
        self.torrents_evicted
            .store(status.torrents_evicted, Relaxed);
        self.seeders.store(status.seeders, Relaxed);
        self.leechers.store(status.leechers, Relaxed);
    }

    fn load(&self) -> ShardStatus {
        use std::sync::atomic::Ordering::Relaxed;
        ShardStatus {
            torrents: self.torrents.load(Relaxed),
            peers: self.peers.load(Relaxed),
            torrents_refused: self.torrents_refused.load(Relaxed),
            peers_refused: self.peers_refused.load(Relaxed),
            new_torrents_refused: self.new_torrents_refused.load(Relaxed),
            torrents_evicted: self.torrents_evicted.load(Relaxed),
            seeders: self.seeders.load(Relaxed),
            leechers: self.leechers.load(Relaxed),
        }
    }
}

/// One swarm worker's gauges, owned by whatever keeps its torrents (a swarm worker
/// thread, or a socket worker that keeps them itself).
#[derive(Clone, Debug)]
pub struct GaugeSlot {
    all: std::sync::Arc<[CachePadded<SwarmGauges>]>,
    index: usize,
}

impl GaugeSlot {
    /// Records the shard's current status.
    pub fn publish(&self, status: ShardStatus) {
        self.all[self.index].publish(status);
    }

    /// Records the shard's largest swarms.
    pub fn publish_largest(&self, largest: Vec<LargeSwarm>) {
        *self.all[self.index]
            .largest
            .lock()
            .expect("largest swarms lock") = largest;
    }
}

/// Upper bounds of the request-latency histogram's buckets, in microseconds (a last,
/// unbounded bucket follows). From well under a loopback round trip to a second, so
/// both a healthy tracker and a stalled one land in a bucket that tells them apart.
pub(crate) const LATENCY_BUCKETS_MICROS: [u64; 13] = [
    10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 100_000, 1_000_000,
];

/// Buckets of the latency histogram, the unbounded one included.
const LATENCY_BUCKETS: usize = LATENCY_BUCKETS_MICROS.len() + 1;

/// What every tracker's socket workers count the same way: bytes on the wire and how
/// long requests took from being read to their response being handed to the kernel.
///
/// A worker counts into its own plain `Traffic` and flushes it into its
/// `SharedTraffic` with its other counters; a sample sums them back into a plain
/// `Traffic`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Bytes read from clients (UDP payloads; TCP stream bytes, TLS records included).
    pub bytes_received: u64,
    /// Bytes written to clients, counted as for `bytes_received`.
    pub bytes_sent: u64,
    /// Requests per latency bucket (not cumulative).
    pub latency_buckets: [u64; LATENCY_BUCKETS],
    /// Sum of the latencies, in nanoseconds.
    pub latency_sum_nanos: u64,
}

impl Traffic {
    /// Records that `requests` requests took `elapsed` each.
    pub fn record_latency(&mut self, elapsed: std::time::Duration, requests: u64) {
        if requests == 0 {
            return;
        }
        let micros = elapsed.as_micros();
        let bucket = LATENCY_BUCKETS_MICROS
            .iter()
            .position(|&bound| micros <= u128::from(bound))
            .unwrap_or(LATENCY_BUCKETS_MICROS.len());
        self.latency_buckets[bucket] += requests;
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        self.latency_sum_nanos = self
            .latency_sum_nanos
            .saturating_add(nanos.saturating_mul(requests));
    }

    /// Requests whose latency was recorded.
    pub fn latency_count(&self) -> u64 {
        self.latency_buckets.iter().sum()
    }

    /// Adds these counts into `shared` and resets them.
    pub fn flush_into(&mut self, shared: &SharedTraffic) {
        use std::sync::atomic::Ordering::Relaxed;
        if *self == Self::default() {
            return;
        }
        shared
            .bytes_received
            .fetch_add(self.bytes_received, Relaxed);
        shared.bytes_sent.fetch_add(self.bytes_sent, Relaxed);
        for (shared, &count) in shared.latency_buckets.iter().zip(&self.latency_buckets) {
            if count != 0 {
                shared.fetch_add(count, Relaxed);
            }
        }
        shared
            .latency_sum_nanos
            .fetch_add(self.latency_sum_nanos, Relaxed);
        *self = Self::default();
    }

    fn add(&mut self, shared: &SharedTraffic) {
        use std::sync::atomic::Ordering::Relaxed;
        self.bytes_received += shared.bytes_received.load(Relaxed);
        self.bytes_sent += shared.bytes_sent.load(Relaxed);
        for (total, shared) in self.latency_buckets.iter_mut().zip(&shared.latency_buckets) {
            *total += shared.load(Relaxed);
        }
        self.latency_sum_nanos += shared.latency_sum_nanos.load(Relaxed);
    }
}

/// One socket worker's [`Traffic`], flushed into by it and read by scrapes.
#[derive(Debug, Default)]
pub struct SharedTraffic {
    bytes_received: std::sync::atomic::AtomicU64,
    bytes_sent: std::sync::atomic::AtomicU64,
    latency_buckets: [std::sync::atomic::AtomicU64; LATENCY_BUCKETS],
    latency_sum_nanos: std::sync::atomic::AtomicU64,
}

/// The statistics of a tracker: counters per socket worker, gauges per swarm worker.
#[derive(Debug)]
pub struct WorkerStats<C> {
    sockets: Vec<CachePadded<C>>,
    traffic: Vec<CachePadded<SharedTraffic>>,
    swarms: std::sync::Arc<[CachePadded<SwarmGauges>]>,
    cluster: std::sync::Arc<crate::cluster_stats::ClusterStats>,
    /// Socket workers' then swarm workers' last rounds.
    beats: crate::heartbeat::Heartbeats,
}

/// A point-in-time sum over all workers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatsSample<T> {
    /// Socket worker counters, summed.
    pub requests: T,
    /// Bytes and latencies, summed over socket workers.
    pub traffic: Traffic,
    /// Torrents over all shards.
    pub torrents: u64,
    /// Peers over all shards.
    pub peers: u64,
    /// Announces refused by the torrent limit, over all shards, since start.
    pub torrents_refused: u64,
    /// New peers not stored by the peer limits, over all shards, since start.
    pub peers_refused: u64,
    /// Announces refused by the per-client new-torrent limit, over all shards.
    pub new_torrents_refused: u64,
    /// Torrents that gave way to a new one in a full shard, over all shards.
    pub torrents_evicted: u64,
    /// Seeders over all shards, as of their last cleaning pass.
    pub seeders: u64,
    /// Leechers over all shards, as of their last cleaning pass.
    pub leechers: u64,
    /// Replication to other nodes, when `[cluster]` is on.
    pub cluster: Option<crate::cluster_stats::ClusterTotals>,
}

impl<C> WorkerStats<C> {
    /// Socket worker `index` went round its loop at `now` (`crate::heartbeat`).
    pub fn socket_beat(&self, index: usize, now: std::time::Instant) {
        self.beats.beat(index, now);
    }

    /// Swarm worker `index` went round its loop at `now`.
    pub fn swarm_beat(&self, index: usize, now: std::time::Instant) {
        self.beats.beat(self.sockets.len() + index, now);
    }

    /// Socket worker `index` spent `busy` working (not waiting for requests).
    pub fn socket_busy(&self, index: usize, busy: std::time::Duration) {
        self.beats.add_busy(index, busy);
    }

    /// Swarm worker `index` spent `busy` working.
    pub fn swarm_busy(&self, index: usize, busy: std::time::Duration) {
        self.beats.add_busy(self.sockets.len() + index, busy);
    }

    /// Nanoseconds each socket worker, then each swarm worker, has worked so far.
    pub fn busy_nanos(&self) -> (Vec<u64>, Vec<u64>) {
        let mut all = self.beats.busy();
        let swarms = all.split_off(self.sockets.len().min(all.len()));
        (all, swarms)
    }

    /// The workers that have not gone round their loop for
    /// `heartbeat::STALLED_AFTER`, with how long it has been.
    pub fn stalled(&self) -> Vec<(&str, std::time::Duration)> {
        self.stalled_at(std::time::Instant::now())
    }

    /// [`stalled`](Self::stalled) as seen at `now`.
    pub fn stalled_at(&self, now: std::time::Instant) -> Vec<(&str, std::time::Duration)> {
        self.beats.stalled(now, crate::heartbeat::STALLED_AFTER)
    }
}

impl<C: Counters> WorkerStats<C> {
    /// Zeroed statistics for the given worker counts.
    pub fn new(socket_workers: usize, swarm_workers: usize) -> std::sync::Arc<Self> {
        std::sync::Arc::new(Self {
            sockets: (0..socket_workers)
                .map(|_| CachePadded::default())
                .collect(),
            traffic: (0..socket_workers)
                .map(|_| CachePadded::default())
                .collect(),
            swarms: (0..swarm_workers).map(|_| CachePadded::default()).collect(),
            cluster: Default::default(),
            beats: crate::heartbeat::Heartbeats::new(
                (0..socket_workers)
                    .map(|i| format!("socket-{i}"))
                    .chain((0..swarm_workers).map(|i| format!("swarm-{i}")))
                    .collect(),
            ),
        })
    }

    /// How many socket workers count.
    pub fn socket_workers(&self) -> usize {
        self.sockets.len()
    }

    /// Socket worker `index`'s counters.
    pub fn socket(&self, index: usize) -> &C {
        &self.sockets[index]
    }

    /// Socket worker `index`'s bytes and latencies.
    pub fn traffic(&self, index: usize) -> &SharedTraffic {
        &self.traffic[index]
    }

    /// Swarm worker `index`'s gauges.
    pub fn swarm(&self, index: usize) -> &SwarmGauges {
        &self.swarms[index]
    }

    /// What the cluster threads count.
    pub fn cluster(&self) -> &std::sync::Arc<crate::cluster_stats::ClusterStats> {
        &self.cluster
    }

    /// Swarm worker `index`'s gauges, for the worker to keep.
    pub fn gauge_slot(&self, index: usize) -> GaugeSlot {
        assert!(index < self.swarms.len(), "no swarm worker {index}");
        GaugeSlot {
            all: self.swarms.clone(),
            index,
        }
    }

    /// Sums everything.
    pub fn sample(&self) -> StatsSample<C::Totals> {
        let mut sample = StatsSample::default();
        for counters in &self.sockets {
            counters.add_to(&mut sample.requests);
        }
        for traffic in &self.traffic {
            sample.traffic.add(traffic);
        }
        for gauges in self.swarms.iter() {
            let status = gauges.load();
            sample.torrents += status.torrents;
            sample.peers += status.peers;
            sample.torrents_refused += status.torrents_refused;
            sample.peers_refused += status.peers_refused;
            sample.new_torrents_refused += status.new_torrents_refused;
            sample.torrents_evicted += status.torrents_evicted;
            sample.seeders += status.seeders;
            sample.leechers += status.leechers;
        }
        sample.cluster = self.cluster.totals();
        sample
    }

    /// The `count` largest swarms over all shards, largest first.
    pub fn largest_swarms(&self, count: usize) -> Vec<LargeSwarm> {
        let mut all: Vec<LargeSwarm> = self
            .swarms
            .iter()
            .flat_map(|gauges| gauges.largest.lock().expect("largest swarms lock").clone())
            .collect();
        all.sort_by_key(|swarm| std::cmp::Reverse(swarm.peers()));
        all.truncate(count);
        all
    }
}

impl<T> StatsSample<T> {
    /// The part of a statistics line about capacity limits, between `before` and now.
    pub fn capacity_line(&self, before: &Self) -> String {
        format!(
            "torrents refused {} (new torrents over a client's rate {}), torrents evicted {}, \
             peers not stored {}",
            self.torrents_refused
                .saturating_sub(before.torrents_refused),
            self.new_torrents_refused
                .saturating_sub(before.new_torrents_refused),
            self.torrents_evicted
                .saturating_sub(before.torrents_evicted),
            self.peers_refused.saturating_sub(before.peers_refused),
        )
    }
}

/// Makes a statistics line from two samples and the seconds between them.
pub type SummaryLine<T> = fn(&StatsSample<T>, &StatsSample<T>, f64) -> String;

impl<C: Counters + Send + Sync + 'static> WorkerStats<C>
where
    C::Totals: 'static,
{
    /// Starts the tracker's "statistics" thread under `supervisor`: a
    /// `log_periodically` line made by `summary` every `config.interval` seconds, or
    /// no thread when that is 0.
    pub fn log_under(
        self: &std::sync::Arc<Self>,
        supervisor: &mut crate::Supervisor,
        config: &crate::StatisticsConfig,
        summary: SummaryLine<C::Totals>,
    ) -> anyhow::Result<()> {
        if config.interval == 0 {
            return Ok(());
        }
        let (stats, shutdown) = (self.clone(), supervisor.shutdown().clone());
        let interval = std::time::Duration::from_secs(config.interval.into());
        supervisor.spawn("statistics", move || {
            log_periodically(&shutdown, interval, || stats.sample(), summary);
            Ok(())
        })
    }
}

/// A set of counters [`counters!`](crate::counters) declared, as another set embeds
/// it (`group name: Type` after its own counters): one declaration of counters that
/// several trackers share, such as the TCP connection counters, flushed, summed and
/// observed with the set it is in.
pub trait CounterGroup: Default + Copy {
    /// The atomics the plain counts are flushed into.
    type Shared: Default + std::fmt::Debug + Send + Sync;
    /// A plain sum for readers.
    type Totals: Default + Copy + std::fmt::Debug + PartialEq;
    /// Adds the counts into `shared` and resets them.
    fn flush_into(&mut self, shared: &Self::Shared);
    /// Adds the current values of `shared` to `totals`.
    fn add_to(shared: &Self::Shared, totals: &mut Self::Totals);
    /// Field-wise `now - earlier`.
    fn since(now: &Self::Totals, earlier: &Self::Totals) -> Self::Totals;
}

/// A set of counters that embeds the group `G` (`group name: G;` in [`counters!`](crate::counters),
/// which implements this): code that knows only `G` (the TCP transport's connection
/// counters) reaches it inside any tracker's counters without naming the field.
pub trait Embeds<G: CounterGroup>: Counters {
    /// The group inside the shared set.
    fn group(&self) -> &G::Shared;
    /// The group inside a worker's own set.
    fn local_group(local: &mut Self::Local) -> &mut G;
}

/// Declares a set of counters: `$local` (plain, owned by a worker), `$shared` (atomics
/// the worker flushes into) and `$snapshot` (a plain sum for readers). After the
/// counters, `group name: Type;` lines embed another set (a [`CounterGroup`]) as the
/// field `name` of all three, reached generically through [`Embeds`].
///
/// ```
/// shoal_common::counters! {
///     /// Counted by each connection.
///     pub struct Inner, SharedInner, InnerTotals {
///         /// Connections opened.
///         opened,
///     }
/// }
/// shoal_common::counters! {
///     /// Counted by each socket worker.
///     pub struct Local, Shared, Snapshot {
///         /// Packets received.
///         packets,
///     }
///     group connections: Inner;
/// }
/// let shared = Shared::default();
/// let mut local = Local::default();
/// local.packets += 3;
/// local.connections.opened += 1;
/// local.flush_into(&shared);
/// assert_eq!(local.packets, 0);
/// let mut total = Snapshot::default();
/// total.add(&shared);
/// assert_eq!((total.packets, total.connections.opened), (3, 1));
/// ```
#[macro_export]
macro_rules! counters {
    (
        $(#[$meta:meta])*
        pub struct $local:ident, $shared:ident, $snapshot:ident {
            $( $(#[$field_meta:meta])* $field:ident ),* $(,)?
        }
        $( $(#[$group_meta:meta])* group $group:ident : $group_ty:ty ; )*
    ) => {
        $(#[$meta])*
        #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
        pub struct $local {
            $( $(#[$field_meta])* pub $field: u64, )*
            $( $(#[$group_meta])* pub $group: $group_ty, )*
        }

        $(#[$meta])*
        #[derive(Debug, Default)]
        pub struct $shared {
            $( $(#[$field_meta])* pub $field: ::std::sync::atomic::AtomicU64, )*
            $( $(#[$group_meta])* pub $group: <$group_ty as $crate::CounterGroup>::Shared, )*
        }

        $(#[$meta])*
        #[derive(Debug, Default, Clone, Copy, PartialEq)]
        pub struct $snapshot {
            $( $(#[$field_meta])* pub $field: u64, )*
            $( $(#[$group_meta])* pub $group: <$group_ty as $crate::CounterGroup>::Totals, )*
        }

        impl $local {
            /// Adds the counts into `shared` and resets them.
            pub fn flush_into(&mut self, shared: &$shared) {
                $(
                    if self.$field != 0 {
                        shared.$field.fetch_add(self.$field, ::std::sync::atomic::Ordering::Relaxed);
                        self.$field = 0;
                    }
                )*
                $( $crate::CounterGroup::flush_into(&mut self.$group, &shared.$group); )*
            }
        }

        impl $crate::CounterGroup for $local {
            type Shared = $shared;
            type Totals = $snapshot;

            fn flush_into(&mut self, shared: &$shared) {
                $local::flush_into(self, shared);
            }

            fn add_to(shared: &$shared, totals: &mut $snapshot) {
                totals.add(shared);
            }

            fn since(now: &$snapshot, earlier: &$snapshot) -> $snapshot {
                now.since(earlier)
            }
        }

        impl $crate::Counters for $shared {
            type Totals = $snapshot;
            type Local = $local;

            fn add_to(&self, totals: &mut $snapshot) {
                totals.add(self);
            }

            fn flush(&self, local: &mut $local) {
                local.flush_into(self);
            }
        }

        $(
            impl $crate::Embeds<$group_ty> for $shared {
                fn group(&self) -> &<$group_ty as $crate::CounterGroup>::Shared {
                    &self.$group
                }

                fn local_group(local: &mut $local) -> &mut $group_ty {
                    &mut local.$group
                }
            }
        )*

        impl $snapshot {
            /// Adds the current values of `shared`.
            pub fn add(&mut self, shared: &$shared) {
                $( self.$field += shared.$field.load(::std::sync::atomic::Ordering::Relaxed); )*
                $( <$group_ty as $crate::CounterGroup>::add_to(&shared.$group, &mut self.$group); )*
            }

            /// Field-wise `self - earlier` (for rates between two samples).
            #[must_use]
            pub fn since(&self, earlier: &Self) -> Self {
                Self {
                    $( $field: self.$field.saturating_sub(earlier.$field), )*
                    $( $group: <$group_ty as $crate::CounterGroup>::since(&self.$group, &earlier.$group), )*
                }
            }
        }
    };
}

/// Logs `line(now, before, seconds)` every `interval` until shutdown, with `snapshot`
/// taken at each end; the body of a tracker's "statistics" thread.
pub(crate) fn log_periodically<S>(
    shutdown: &crate::Shutdown,
    interval: std::time::Duration,
    mut snapshot: impl FnMut() -> S,
    mut line: impl FnMut(&S, &S, f64) -> String,
) {
    let mut before = snapshot();
    let mut since = std::time::Instant::now();
    while !shutdown.is_requested() {
        std::thread::sleep(crate::Shutdown::POLL_INTERVAL);
        if since.elapsed() >= interval {
            let now = snapshot();
            log::info!("{}", line(&now, &before, since.elapsed().as_secs_f64()));
            before = now;
            since = std::time::Instant::now();
        }
    }
}

impl<T: crate::observe::Observe> crate::observe::Observe for StatsSample<T> {
    /// The tracker's own counters, then what every tracker has: its torrents and peers,
    /// and what the capacity limits refused.
    fn observe(&self, out: &mut crate::observe::Observation) {
        self.requests.observe(out);
        self.traffic.observe(out);
        for (reason, value) in [
            ("torrent_limit", self.torrents_refused),
            ("new_torrent_limit", self.new_torrents_refused),
            ("peer_limit", self.peers_refused),
        ] {
            out.counter(REFUSED, REFUSED_HELP, &[("reason", reason)], value);
        }
        out.counter(
            "shoal_torrents_evicted",
            "Torrents whose peers never came from two clients at once, removed to make room for a \
             new torrent in a full tracker.",
            &[],
            self.torrents_evicted,
        );
        out.gauge(
            "shoal_torrents",
            "Torrents with at least one peer.",
            &[],
            self.torrents as f64,
        );
        out.gauge(PEERS, "Peers over all torrents.", &[], self.peers as f64);
        out.gauge(
            "shoal_seeders",
            "Seeders over all torrents, as the last cleaning pass counted them.",
            &[],
            self.seeders as f64,
        );
        out.gauge(
            "shoal_leechers",
            "Leechers over all torrents, as the last cleaning pass counted them.",
            &[],
            self.leechers as f64,
        );
        if let Some(cluster) = &self.cluster {
            cluster.observe(out);
        }
    }
}

impl crate::observe::Observe for Traffic {
    /// Bytes each way and the latency histogram.
    fn observe(&self, out: &mut crate::observe::Observation) {
        out.counter(
            "shoal_received_bytes",
            "Bytes read from clients (UDP payloads; TCP bytes, TLS included).",
            &[],
            self.bytes_received,
        );
        out.counter(
            "shoal_sent_bytes",
            "Bytes written to clients (UDP payloads; TCP bytes, TLS included).",
            &[],
            self.bytes_sent,
        );
        let mut buckets: Vec<(f64, u64)> = LATENCY_BUCKETS_MICROS
            .iter()
            .map(|&micros| micros as f64 / 1e6)
            .zip(self.latency_buckets)
            .collect();
        buckets.push((f64::MAX, self.latency_buckets[LATENCY_BUCKETS - 1]));
        out.histogram(
            LATENCY,
            LATENCY_HELP,
            &[],
            crate::observe::Histogram {
                sum: self.latency_sum_nanos as f64 / 1e9,
                count: self.latency_count(),
                buckets,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn latencies_land_in_their_buckets_and_flush_into_totals() {
        let mut local = Traffic::default();
        local.record_latency(Duration::from_micros(7), 3);
        local.record_latency(Duration::from_micros(10), 1);
        local.record_latency(Duration::from_micros(11), 1);
        local.record_latency(Duration::from_secs(5), 2);
        local.record_latency(Duration::from_secs(5), 0);
        local.bytes_received = 100;
        assert_eq!(local.latency_buckets[0], 4);
        assert_eq!(local.latency_buckets[1], 1);
        assert_eq!(local.latency_buckets[LATENCY_BUCKETS - 1], 2);
        assert_eq!(local.latency_count(), 7);
        assert_eq!(
            local.latency_sum_nanos,
            3 * 7_000 + 10_000 + 11_000 + 10_000_000_000
        );
        let shared = SharedTraffic::default();
        let recorded = local;
        local.flush_into(&shared);
        assert_eq!(local, Traffic::default());
        let mut total = Traffic::default();
        total.add(&shared);
        assert_eq!(total, recorded);
    }

    #[test]
    fn peers_are_published_under_the_name_the_memory_thread_reads() {
        let snapshot = StatsSample::<Traffic> {
            peers: 5,
            ..StatsSample::default()
        };
        let mut observation = crate::observe::Observation::default();
        crate::observe::Observe::observe(&snapshot, &mut observation);
        assert_eq!(observation.sum(PEERS, &[]), 5.0);
    }
}
