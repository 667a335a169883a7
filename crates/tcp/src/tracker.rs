//! What makes a TCP tracker (HTTP, WebTorrent) its own, and what every connection
//! task of a socket worker sees.
//!
//! A tracker says what is its own through [`TcpTracker`]: its config, its shard, what
//! its connection tasks share ([`TcpTracker::PerWorker`], the router), how it serves a
//! connection and takes replies from swarm workers. Everything else is written once
//! for both: the start-up (`start`) and the accept path (`accept`).

use std::cell::RefCell;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use futures_lite::{AsyncRead, AsyncWrite};
use shoal_common::{Config, Counters, Embeds, SummaryLine, TcpNetwork, TrackerKind, Traffic};
use shoal_swarm::{Restored, ServerTime};

use shoal_process::{Listening, Prepared, Reload, RunningTracker};
use shoal_worker::{
    AnnounceInterval, ConnectionsPerIp, Context, LocalSwarm, RateTable, Shard, Snapshot, Verdict,
};

use crate::admission::{Admission, Limits};
use crate::backend::Backend;
use crate::counters::ConnectionCounters;
use crate::eviction::Place;
use crate::memlock::MemlockClaim;
use crate::tls::TlsConfig;

/// What a running TCP tracker adds to [`RunningTracker`].
#[derive(Debug)]
pub struct TcpExtra {
    /// The TLS config, when serving TLS (tests reload it).
    pub tls: Option<Arc<TlsConfig>>,
    /// What its socket workers run on.
    pub backend: Backend,
    /// Its share of the locked-memory limit, on io_uring; given back when it stops.
    pub(crate) _memlock: Option<MemlockClaim>,
    /// The ACME thread, when the tracker obtains its certificate; stopped with it.
    pub(crate) _acme: Option<shoal_acme::Acme>,
}

/// A TCP tracker's running handle.
pub type RunningTcpTracker<C> = RunningTracker<C, TcpExtra>;

/// A TCP tracker bound and ready to serve.
pub type PreparedTcpTracker<C> = Prepared<C, TcpExtra>;

/// The sizes and deadlines the shared TCP code needs from a tracker's config.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TcpSettings {
    /// io_uring buffer memory per socket worker (locked).
    pub io_memory: usize,
    /// Batches waiting for each swarm worker.
    pub swarm_queue_len: usize,
    /// Most open connections per socket worker.
    pub max_connections: usize,
    /// How long a TLS handshake may take (and, for WebTorrent, the upgrade after it).
    pub handshake_timeout: Duration,
    /// TLS handshakes under way per socket worker; past it the oldest gives way.
    pub max_tls_handshakes: usize,
    /// TLS handshakes under way per client; past it a newcomer is closed.
    pub max_tls_handshakes_per_client: usize,
    /// Kernel send and receive buffer of each connection, in bytes (0: the kernel's
    /// autotuning).
    pub connection_buffers: (usize, usize),
}

impl TcpSettings {
    /// The settings of tracker `T` from its config: the connection keys every TCP
    /// tracker has ([`TcpNetwork::tcp`]), its swarm queues and io_uring memory.
    pub(crate) fn of<T: TcpTracker>(config: &Config<T::Kind>) -> Self {
        let keys = config.network.tcp();
        Self {
            io_memory: T::io_memory(config),
            swarm_queue_len: shoal_common::QueueLimits::swarm_queue_len(&config.limits),
            max_connections: keys.max_connections,
            handshake_timeout: Duration::from_secs(keys.handshake_deadline().into()),
            max_tls_handshakes: keys.max_tls_handshakes,
            max_tls_handshakes_per_client: keys.max_tls_handshakes_per_client,
            connection_buffers: keys.connection_buffers,
        }
    }

    /// The limits admission applies.
    pub(crate) fn limits(&self) -> Limits {
        Limits {
            max_connections: self.max_connections,
            max_tls_handshakes: self.max_tls_handshakes,
            max_tls_handshakes_per_client: self.max_tls_handshakes_per_client,
        }
    }
}

/// How often a socket worker that keeps the torrents of a relaying tracker (WebTorrent
/// in a cluster) takes in what other nodes relayed: the wait an offer from another
/// node may add, about 500 short wake-ups a second.
pub(crate) const RELAY_TICK: Duration = Duration::from_millis(2);

/// What makes a TCP tracker its own.
pub trait TcpTracker: Sized + 'static {
    /// Its config sections.
    type Kind: TrackerKind<Network: TcpNetwork>;
    /// Its torrents.
    type Shard: Shard;
    /// Its shared counters, which embed the [`ConnectionCounters`] every TCP tracker keeps
    /// (`group connections: ConnectionCounters;` in its `counters!`).
    type Counters: Embeds<ConnectionCounters>
        + shoal_common::Counters<Totals: shoal_worker::LoadCounters>
        + 'static;
    /// What the tracker keeps per socket worker, which its connection tasks share
    /// besides [`Worker`]'s fields:
    /// the router, caches.
    type PerWorker: 'static;
    /// What the tracker keeps once for all its socket workers that the shared start-up does
    /// not know of (WebTorrent's Origin rules); `()` for none.
    type PerTracker: Send + Sync + 'static;

    /// Its name in logs ("http", "ws").
    const NAME: &'static str;

    /// `limits.io_memory`: io_uring buffer memory per socket worker.
    fn io_memory(config: &Config<Self::Kind>) -> usize;

    /// The tracker-wide state, made once before the workers start (its files read,
    /// so that a bad one stops the start with the reason), and what SIGUSR1 reloads
    /// of it.
    fn per_tracker(
        config: &Config<Self::Kind>,
    ) -> anyhow::Result<(Arc<Self::PerTracker>, Vec<Reload>)>;

    /// An empty shard, giving `interval` (adapted to load).
    fn shard(config: &Config<Self::Kind>, interval: &Arc<AnnounceInterval>) -> Self::Shard;

    /// Fills `shard`, number `index` of `shards`, from `snapshot` at `now`.
    fn restore(
        shard: &mut Self::Shard,
        snapshot: &Snapshot,
        now: ServerTime,
        index: usize,
        shards: usize,
    ) -> Restored {
        let _ = (shard, snapshot, now, index, shards);
        Restored::default()
    }

    /// At shutdown, on the socket worker's thread: saves the torrents it keeps itself
    /// ([`LocalSwarm::finish`]), when it does.
    fn finish(worker: &Worker<Self>) {
        let _ = worker;
    }

    /// The statistics line.
    fn summary() -> SummaryLine<<Self::Counters as Counters>::Totals>;

    /// How clients and the log name a listening address (`http://…`, `wss://…`).
    fn describe(config: &Config<Self::Kind>, tls: bool, addr: SocketAddr) -> Listening;

    /// What the connection tasks of socket worker `index` share; it sends to `swarms`
    /// or, with `local`, keeps the torrents itself. Made on the worker's own thread.
    fn per_worker(
        index: usize,
        config: &Config<Self::Kind>,
        per_tracker: &Arc<Self::PerTracker>,
        swarms: Vec<Sender<<Self::Shard as Shard>::Batch>>,
        local: Option<LocalSwarm<Self::Shard>>,
    ) -> Self::PerWorker;

    /// Answers a connection over the connection limit, then it is closed.
    fn refuse<S: AsyncWrite + Unpin>(stream: &mut S) -> impl Future<Output = ()>;

    /// Serves a connection (after TLS, when on) until it ends; `deadline` is when the
    /// handshake time runs out. `place` is the connection's place among those that
    /// give way to newcomers when the worker is full, held since it was accepted:
    /// the tracker keeps it while the connection is quiet, moves it on
    /// ([`Place::touch`]) when it is heard from, drops it while the connection must not
    /// be cut off, and closes the connection once it is evicted.
    fn serve<'w, S: AsyncRead + AsyncWrite + Unpin>(
        worker: &'w Worker<Self>,
        stream: S,
        peer: SocketAddr,
        deadline: Instant,
        place: Place<'w>,
    ) -> impl Future<Output = ()>;

    /// Takes a reply from a swarm worker.
    fn deliver(worker: &Worker<Self>, reply: <Self::Shard as Shard>::Reply);

    /// Whether connections from `peer` skip the per-client limits (a trusted reverse
    /// proxy speaks for many clients; its requests are limited by the address it
    /// forwards).
    fn exempt(config: &Config<Self::Kind>, peer: IpAddr) -> bool {
        let _ = (config, peer);
        false
    }

    /// Runs every [`shoal_common::Shutdown::POLL_INTERVAL`]: retry what waits, clean the local shard,
    /// move the router's counts into the counters.
    fn tick(worker: &Worker<Self>);
}

/// One socket worker, on its own executor: what every connection task
/// of the worker sees.
pub struct Worker<T: TcpTracker> {
    /// The worker's index.
    pub index: usize,
    /// The config.
    pub config: Arc<Config<T::Kind>>,
    /// Clock, access list, statistics and shutdown flag.
    pub context: Context<T::Counters>,
    /// TLS, when on.
    pub tls: Option<Arc<TlsConfig>>,
    /// Counters, flushed into the shared statistics every tick.
    pub counters: RefCell<<T::Counters as Counters>::Local>,
    /// Bytes (counted by the connection's stream) and request latencies (recorded by
    /// the tracker), flushed with `counters`.
    pub traffic: RefCell<Traffic>,
    /// Request rates and bans of this worker's clients.
    pub clients: RefCell<RateTable>,
    /// Open connections per client, over every worker.
    pub connections_per_ip: Arc<ConnectionsPerIp>,
    /// Connections and TLS handshakes, as the accept path counts them.
    pub(crate) admission: Admission,
    /// What the tracker adds.
    pub per_worker: T::PerWorker,
}

impl<T: TcpTracker> Worker<T> {
    /// Counts a request from `ip` against its client's rate; the connection layer
    /// answers or closes by the verdict. A new ban is counted and logged here.
    pub fn check_rate(&self, ip: IpAddr) -> Verdict {
        let mut clients = self.clients.borrow_mut();
        let verdict = clients.check(ip, self.context.clock.now());
        self.count(|counters| match verdict {
            Verdict::Allow => {}
            Verdict::Limited => counters.per_ip_limited += 1,
            Verdict::Banned => counters.banned += 1,
            Verdict::NewBan => {
                counters.banned += 1;
                counters.bans += 1;
            }
        });
        if verdict == Verdict::NewBan {
            clients.log_ban(ip, "too many requests", ip);
        }
        verdict
    }

    /// A place among the connections that may give way to a newcomer when the worker
    /// is full (quiet the longest first): a connection holds one while it waits for
    /// its client, and gives it up while it is served.
    pub fn quiet_place(&self) -> Place<'_> {
        self.admission.quiet_place()
    }

    /// Counts into this worker's connection counters.
    pub fn count(&self, count: impl FnOnce(&mut ConnectionCounters)) {
        count(<T::Counters as Embeds<ConnectionCounters>>::local_group(
            &mut self.counters.borrow_mut(),
        ));
    }
}

impl<T: TcpTracker> std::fmt::Debug for Worker<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("index", &self.index)
            .field("connections", &self.admission.open())
            .finish_non_exhaustive()
    }
}
