//! The TCP trackers' shared start-up and socket workers (HTTP and WebTorrent): an
//! executor a thread (shoal's epoll executor by default, glommio on io_uring where
//! `network.io_backend` asks for it) that accepts connections on its own
//! SO_REUSEPORT listeners and runs one task per connection.
//!
//! A tracker says what is its own through [`TcpTracker`]: its config, its shard, what
//! its connection tasks share ([`TcpTracker::Shared`], the router), how it serves a
//! connection and takes replies from swarm workers. Everything else is here once:
//! checking locked memory, loading the access list and TLS, binding, wiring the swarm
//! workers or the local shard, the connection limit, the TLS handshake under its
//! deadline, the reply pump, flushing counters, and the statistics thread.
//!
//! No slot can be held: at `network.max_connections` a newcomer takes the place of
//! the connection quiet the longest ([`crate::eviction`]; what is quiet is the
//! tracker's to say through the [`Place`] it is handed). TLS handshakes hold such a
//! place from the moment they were accepted, are capped per client and per worker
//! (past the cap the one under way longest gives way), and must finish by a deadline
//! set at accept, which a drip of bytes cannot extend. A connection refused on a TLS
//! port is closed, never answered in plaintext.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use crossbeam_channel::Sender;
use futures_lite::{AsyncRead, AsyncWrite, AsyncWriteExt as _};
use rustls::HandshakeKind;
use shoal_common::{
    Config, Counters, Embeds, Listen as _, Shutdown, SummaryLine, TcpNetwork, TrackerConfig as _,
    TrackerKind, Traffic,
};
use shoal_process::Running;
use shoal_swarm::{Clock, Restored, ServerTime};

use shoal_process::{Listening, Prepared, Reload, RunningTracker, list_reloads};
use shoal_worker::{
    AnnounceInterval, ConnectionsPerIp, Context, LocalSwarm, RateTable, ReadySocketWorker, Shard,
    Snapshot, Startup, Threads, Verdict, load_snapshot, reply_capacity, start_threads,
};

use crate::admission::{Admission, Admitted, Limits, Refused};
use crate::backend::{
    Backend, TcpStream, accept_connections, run_executor, sleep, spawn_local, within,
};
use crate::counted::Counted;
use crate::counters::ConnectionCounters;
use crate::eviction::Place;
use crate::inbox::{ReplyInbox, executor_reply_channel};
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
    _memlock: Option<MemlockClaim>,
    /// The ACME thread, when the tracker obtains its certificate; stopped with it.
    _acme: Option<shoal_acme::Acme>,
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
    fn limits(&self) -> Limits {
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
const RELAY_TICK: Duration = Duration::from_millis(2);

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
    /// What one socket worker's connection tasks share besides [`Worker`]'s fields:
    /// the router, caches.
    type Shared: 'static;
    /// What every socket worker of the tracker shares that the shared start-up does
    /// not know of (WebTorrent's Origin rules); `()` for none.
    type Common: Send + Sync + 'static;

    /// Its name in logs ("http", "ws").
    const NAME: &'static str;

    /// `limits.io_memory`: io_uring buffer memory per socket worker.
    fn io_memory(config: &Config<Self::Kind>) -> usize;

    /// The tracker-wide state, made once before the workers start (its files read,
    /// so that a bad one stops the start with the reason), and what SIGUSR1 reloads
    /// of it.
    fn common(config: &Config<Self::Kind>) -> anyhow::Result<(Arc<Self::Common>, Vec<Reload>)>;

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
    fn shared(
        index: usize,
        config: &Config<Self::Kind>,
        common: &Arc<Self::Common>,
        swarms: Vec<Sender<<Self::Shard as Shard>::Batch>>,
        local: Option<LocalSwarm<Self::Shard>>,
    ) -> Self::Shared;

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

    /// Runs every [`Shutdown::POLL_INTERVAL`]: retry what waits, clean the local shard,
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
    admission: Admission,
    /// What the tracker adds.
    pub shared: T::Shared,
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

/// Starts a TCP tracker on `clock`: checks, binds, wires and starts every worker.
pub fn start<T: TcpTracker>(
    config: Config<T::Kind>,
    clock: Arc<Clock>,
) -> anyhow::Result<RunningTcpTracker<T::Counters>> {
    prepare::<T>(config, clock)?.serve()
}

/// Prepares a TCP tracker on `clock`: checks the config and the locked-memory limit,
/// loads the access list and TLS files and binds the listeners; serving (every
/// thread) starts with [`Prepared::serve`].
pub fn prepare<T: TcpTracker>(
    config: Config<T::Kind>,
    clock: Arc<Clock>,
) -> anyhow::Result<PreparedTcpTracker<T::Counters>> {
    config.check().context("invalid configuration")?;
    let settings = TcpSettings::of::<T>(&config);
    let socket_workers = config.socket_worker_count();
    let swarm_workers = config.swarm_worker_count();
    let (backend, memlock) = crate::backend::choose(
        config.network.io_backend(),
        T::NAME,
        socket_workers,
        settings.io_memory,
    )?;
    let config = Arc::new(config);
    // With swarm_workers = 0 the only socket worker keeps the torrents; it reports
    // their size as swarm worker 0.
    let context = Context::<T::Counters>::new(
        T::NAME,
        &config,
        clock,
        socket_workers,
        swarm_workers.max(1),
    )?;
    let (tls, acme) = crate::certificates::set_up(T::NAME, &config.network)?;
    let common = T::common(&config)?;
    let backlog = config.network.tcp().listen_backlog;
    if let Some(cap) = shoal_sockets::somaxconn().filter(|&cap| cap < backlog) {
        log::warn!(
            "{}: network.listen_backlog = {backlog}, but the kernel queues at most {cap} \
             (net.core.somaxconn): raise it (sysctl -w net.core.somaxconn={backlog}) for \
             the backlog asked for",
            T::NAME
        );
    }
    let (listeners, addrs) =
        shoal_sockets::bind_listeners(&config.network.addresses(), socket_workers, backlog)?;
    if acme.is_some()
        && let Some(warning) = crate::certificates::acme_port_warning(T::NAME, &addrs)
    {
        log::warn!("{warning}");
    }
    let (send, receive) = settings.connection_buffers;
    for listener in listeners.iter().flatten() {
        shoal_sockets::cap_connection_buffers(listener, send, receive).context(
            "cannot set the connections' buffer sizes (network.socket_send_buffer_size, \
             network.socket_recv_buffer_size)",
        )?;
    }
    let listening = addrs
        .iter()
        .map(|&addr| T::describe(&config, tls.is_some(), addr))
        .collect();
    Ok(Prepared::new(addrs.clone(), listening, move |listening| {
        serve::<T>(
            config,
            context,
            common,
            (tls, acme, backend, memlock),
            listeners,
            addrs,
            listening,
        )
    }))
}

/// Starts every worker of a prepared TCP tracker.
fn serve<T: TcpTracker>(
    config: Arc<Config<T::Kind>>,
    context: Context<T::Counters>,
    (common, common_reloads): (Arc<T::Common>, Vec<Reload>),
    (tls, acme, backend, memlock): (
        Option<Arc<TlsConfig>>,
        Option<crate::certificates::AcmeStart>,
        Backend,
        Option<MemlockClaim>,
    ),
    listeners: Vec<Vec<std::net::TcpListener>>,
    addrs: Vec<SocketAddr>,
    listening: Vec<Listening>,
) -> anyhow::Result<RunningTcpTracker<T::Counters>> {
    let settings = TcpSettings::of::<T>(&config);
    let snapshot = load_snapshot(&config);
    let threads = Threads {
        name: T::NAME,
        config: &config,
        context: &context,
        socket_workers: listeners.len(),
        swarm_queue_len: settings.swarm_queue_len,
        snapshot: snapshot.as_ref(),
        snapshot_extras: Box::new(Vec::new),
        summary: T::summary(),
    };
    let mut startup = TcpStartup::<T> {
        config: config.clone(),
        context: context.clone(),
        common,
        tls: tls.clone(),
        backend,
        listeners: listeners.into_iter(),
        connections_per_ip: ConnectionsPerIp::new(&config.per_ip),
        reply_capacity: reply_capacity(config.swarm_worker_count(), settings.swarm_queue_len),
    };
    let supervisor = start_threads(threads, &mut startup)?;
    // ACME once the workers serve: the CA validates through the tracker's own port.
    let acme = acme.map(|acme| acme.start()).transpose()?;
    let mut reloads = list_reloads(&context, T::NAME);
    reloads.extend(common_reloads);
    if let Some(tls) = &tls {
        let tls = tls.clone();
        reloads.push(Arc::new(move || tls.reload_and_log()) as Reload);
    }
    let running = Running::new(addrs, supervisor, context.access.clone())
        .with_accounting(context.accounts.clone(), context.exporter.clone())
        .with_interval(context.interval.clone());
    Ok(RunningTracker::new(
        running,
        &context,
        listening,
        reloads,
        TcpExtra {
            tls,
            backend,
            _memlock: memlock,
            _acme: acme,
        },
    ))
}

/// What the TCP trackers add to the shared start-up: their shards, and socket workers
/// that each run an executor (io_uring or epoll) on their own listeners.
struct TcpStartup<T: TcpTracker> {
    config: Arc<Config<T::Kind>>,
    context: Context<T::Counters>,
    common: Arc<T::Common>,
    tls: Option<Arc<TlsConfig>>,
    backend: Backend,
    /// Each socket worker's listeners, in turn.
    listeners: std::vec::IntoIter<Vec<std::net::TcpListener>>,
    connections_per_ip: Arc<ConnectionsPerIp>,
    reply_capacity: usize,
}

impl<T: TcpTracker> Startup for TcpStartup<T> {
    type Shard = T::Shard;

    fn shard(&self) -> T::Shard {
        T::shard(&self.config, &self.context.interval)
    }

    fn restore(
        &self,
        shard: &mut T::Shard,
        snapshot: &Snapshot,
        now: ServerTime,
        index: usize,
        shards: usize,
    ) -> Restored {
        T::restore(shard, snapshot, now, index, shards)
    }

    fn socket_worker(
        &mut self,
        index: usize,
        swarms: Vec<Sender<<T::Shard as Shard>::Batch>>,
        local: Option<LocalSwarm<T::Shard>>,
    ) -> anyhow::Result<ReadySocketWorker<<T::Shard as Shard>::Reply>> {
        let (route, inbox) = executor_reply_channel(self.reply_capacity)?;
        let worker = SocketWorker::<T> {
            index,
            config: self.config.clone(),
            listeners: self.listeners.next().unwrap_or_default(),
            swarms,
            inbox,
            local,
            context: self.context.clone(),
            common: self.common.clone(),
            tls: self.tls.clone(),
            backend: self.backend,
            connections_per_ip: self.connections_per_ip.clone(),
        };
        Ok(ReadySocketWorker {
            // The executor pins its thread when pinning is on.
            run: Box::new(move || worker.run()),
            replies: route,
        })
    }
}

/// A socket worker, ready to run on its own thread.
struct SocketWorker<T: TcpTracker> {
    index: usize,
    config: Arc<Config<T::Kind>>,
    listeners: Vec<std::net::TcpListener>,
    swarms: Vec<Sender<<T::Shard as Shard>::Batch>>,
    inbox: ReplyInbox<<T::Shard as Shard>::Reply>,
    local: Option<LocalSwarm<T::Shard>>,
    context: Context<T::Counters>,
    common: Arc<T::Common>,
    tls: Option<Arc<TlsConfig>>,
    backend: Backend,
    connections_per_ip: Arc<ConnectionsPerIp>,
}

impl<T: TcpTracker> SocketWorker<T> {
    /// Runs the executor on the calling thread until shutdown.
    fn run(self) -> anyhow::Result<()> {
        let name = format!("{}-socket-{}", T::NAME, self.index);
        let core = self.config.cpu_pinning.core_for(self.index);
        let io_memory = T::io_memory(&self.config);
        run_executor(self.backend, &name, core, io_memory, self.serve())
    }

    async fn serve(self) -> anyhow::Result<()> {
        let local_kept = self.local.is_some();
        let shared = T::shared(
            self.index,
            &self.config,
            &self.common,
            self.swarms,
            self.local,
        );
        let state_config = self.config.clone();
        let worker = Rc::new(Worker::<T> {
            index: self.index,
            config: self.config,
            context: self.context,
            tls: self.tls,
            counters: RefCell::default(),
            traffic: RefCell::default(),
            clients: RefCell::new(RateTable::new(&state_config.per_ip)),
            connections_per_ip: self.connections_per_ip,
            admission: Admission::default(),
            shared,
        });
        // Duplicates of the listeners, to stop them when the worker ends
        // (`shoal_sockets::stop_listening` says why).
        let stop: Vec<std::net::TcpListener> = self
            .listeners
            .iter()
            .filter_map(|listener| listener.try_clone().ok())
            .collect();
        for listener in self.listeners {
            let worker = worker.clone();
            let accepting = accept_connections(listener, move |stream, peer| {
                spawn_local(connection(worker.clone(), stream, peer));
            });
            spawn_local(async move {
                if let Err(err) = accepting.await {
                    log::error!("{err:#}");
                }
            });
        }
        let pumped = worker.clone();
        let pump = (self.inbox)
            .pump(move |reply| T::deliver(&pumped, reply))
            .context("cannot watch the reply channel's wake-up socket")?;
        spawn_local(pump);

        let shared = worker.context.stats.socket(worker.index);
        let traffic = worker.context.stats.traffic(worker.index);
        // A socket worker that keeps replicated torrents applies other nodes' changes
        // on its tick: then it ticks more often.
        let every = if worker.config.cluster.enabled() && local_kept {
            if <T::Kind as shoal_common::TrackerKind>::relay_lifetime(&worker.config.protocol)
                .is_some()
            {
                // Messages other nodes relay to its peers are taken in on the tick:
                // a short one keeps an offer's wait short.
                RELAY_TICK
            } else {
                shoal_worker::REPLICA_POLL
            }
        } else {
            Shutdown::POLL_INTERVAL
        };
        let mut busy = crate::backend::BusyClock::start();
        while !worker.context.shutdown.is_requested() {
            sleep(every).await;
            // Stamped only when the executor gets round to this task: a connection
            // task that never yields stalls it (shoal_common::heartbeat).
            let now = std::time::Instant::now();
            worker.context.stats.socket_beat(worker.index, now);
            // Busy time, for the adaptive interval.
            worker
                .context
                .stats
                .socket_busy(worker.index, busy.since_last());
            T::tick(&worker);
            shared.flush(&mut worker.counters.borrow_mut());
            worker.traffic.borrow_mut().flush_into(traffic);
            shared.group().set_open(worker.admission.open());
            if worker.index == 0
                && let Some(tls) = &worker.tls
            {
                // Tracker-wide values, set by one worker so that the sum over workers
                // is the value.
                shared.group().set_certificate(tls);
            }
        }
        T::finish(&worker);
        for listener in &stop {
            if let Err(err) = shoal_sockets::stop_listening(listener) {
                log::warn!("{}: a listener did not stop: {err}", T::NAME);
            }
        }
        Ok(())
    }
}

/// One accepted connection: the connection limit, TLS under the handshake deadline,
/// then the tracker's own protocol.
async fn connection<T: TcpTracker>(worker: Rc<Worker<T>>, stream: TcpStream, peer: SocketAddr) {
    let mut stream = Counted::new(stream, &worker.traffic);
    let settings = TcpSettings::of::<T>(&worker.config);
    let exempt = T::exempt(&worker.config, peer.ip());
    // A connection counts against its client's rate like a request (UDP's connect
    // does too): else a client could open and abort TLS handshakes, each a key
    // exchange and a signature for the tracker, or send malformed requests, without
    // ever spending a token or earning a ban.
    let admitted = worker.admission.admit(
        peer.ip(),
        exempt,
        settings.limits(),
        |ip| worker.check_rate(ip),
        &worker.connections_per_ip,
    );
    let Admitted {
        evicted,
        place,
        held: _held,
    } = match admitted {
        Ok(admitted) => admitted,
        // No reply, not even TLS: a ban or a client over its rate costs the tracker
        // as little as possible (counted by `check_rate`).
        Err(Refused::Rate(_)) => return,
        Err(refused) => {
            worker.count(|counters| match refused {
                Refused::PerClient(_) => counters.refused_per_ip += 1,
                _ => counters.refused += 1,
            });
            let refusing = Box::pin(refuse(&worker, &mut stream));
            refusing.await;
            return;
        }
    };
    worker.count(|counters| {
        counters.idle_evicted += u64::from(evicted);
        counters.accepted += 1;
    });
    let _ = stream.get_mut().set_nodelay();
    let deadline = Instant::now() + settings.handshake_timeout;
    // Each way of serving is its own boxed future, sized for itself: inline, every
    // connection's task would be as large as the largest (a TLS stream and its
    // handshake: 17 KiB a connection, plain ones included). Made in statements of
    // their own: a temporary of the statement that awaits it would be kept in this
    // future's state too.
    match &worker.tls {
        None => {
            let serving = Box::pin(serve_and_close(&worker, stream, peer, deadline, place));
            serving.await;
        }
        Some(tls) => {
            let tls = TlsStart {
                config: tls.current(),
                settings: &settings,
                deadline,
                exempt,
            };
            // The handshake's future (3 KiB) is let go once it is done: an open
            // connection keeps only what serves it.
            let serving = {
                let handshake = Box::pin(tls_handshake(&worker, tls, stream, peer, place));
                handshake.await
            };
            if let Some(serving) = serving {
                serving.await;
            }
        }
    }
}

/// What a TLS connection's handshake needs.
struct TlsStart<'a> {
    config: Arc<rustls::ServerConfig>,
    settings: &'a TcpSettings,
    deadline: Instant,
    exempt: bool,
}

/// A connection boxed for serving, as [`TcpTracker::serve`] and [`serve_and_close`]
/// make it.
type Serving<'w> = Pin<Box<dyn Future<Output = ()> + 'w>>;

/// The TLS handshake, and then, unless it failed or was ACME's validation, the
/// connection's serving future: made here, run by the caller once this future (and
/// the handshake's state) is gone.
async fn tls_handshake<'w, T: TcpTracker>(
    worker: &'w Worker<T>,
    tls: TlsStart<'_>,
    stream: Counted<'w, TcpStream>,
    peer: SocketAddr,
    place: Place<'w>,
) -> Option<Serving<'w>> {
    let limits = (tls.settings, tls.deadline, tls.exempt);
    let spent = Cell::new(Duration::ZERO);
    let accept = Box::pin(timed(
        async { crate::tls_stream::accept(stream, tls.config).await.ok() },
        &spent,
    ));
    let handshake = handshake(worker, limits, peer.ip(), &place, accept).await;
    let micros = spent.get().as_micros() as u64;
    worker.count(|counters| counters.tls_handshake_micros += micros);
    match handshake {
        Some(mut stream) if crate::tls::is_acme_validation(stream.alpn_protocol()) => {
            // The CA has seen the validation certificate: nothing to serve.
            worker.count(|counters| counters.acme_validations += 1);
            let _ = within(Duration::from_secs(1), stream.close()).await;
            None
        }
        Some(stream) => {
            let resumed = stream.handshake_kind() == Some(HandshakeKind::Resumed);
            worker.count(|counters| {
                counters.tls_resumed += u64::from(resumed);
                counters.tls_full += u64::from(!resumed);
            });
            Some(Box::pin(serve_and_close(
                worker,
                stream,
                peer,
                tls.deadline,
                place,
            )))
        }
        None => {
            worker.count(|counters| counters.tls_failures += 1);
            None
        }
    }
}

/// Answers a refused connection the tracker's way, then it closes; on a TLS port it
/// is only closed: plaintext there reads as garbage to the client ("wrong version
/// number"), and answering in TLS would cost a handshake.
async fn refuse<T: TcpTracker, S: AsyncWrite + Unpin>(worker: &Worker<T>, stream: &mut S) {
    if worker.tls.is_none() {
        let _ = within(Duration::from_secs(1), T::refuse(stream)).await;
    }
}

/// Runs a TLS handshake (`accept`) from `ip` by `deadline`, as one of the worker's
/// handshakes under way: `None` when it failed, took too long, or gave way to a
/// newcomer (the connection's `place` was evicted, or it was the worker's oldest
/// handshake when a newcomer found `max_tls_handshakes` under way), or when the
/// client already had `max_tls_handshakes_per_client` under way (`exempt`: a trusted
/// proxy, never counted).
async fn handshake<T: TcpTracker, S>(
    worker: &Worker<T>,
    (settings, deadline, exempt): (&TcpSettings, Instant, bool),
    ip: IpAddr,
    place: &Place<'_>,
    accept: impl Future<Output = Option<S>>,
) -> Option<S> {
    let key = worker.clients.borrow().key(ip);
    let Some(under_way) = worker
        .admission
        .start_handshake(key, exempt, settings.limits())
    else {
        worker.count(|counters| counters.refused_per_ip += 1);
        return None;
    };
    if under_way.evicted {
        worker.count(|counters| counters.idle_evicted += 1);
    }
    let left = deadline.saturating_duration_since(Instant::now());
    let evicted = async {
        futures_lite::future::or(place.evicted(), under_way.place.evicted()).await;
        None
    };
    within(left, futures_lite::future::or(accept, evicted))
        .await
        .flatten()
}

/// Runs `future`, adding the time spent inside its polls to `spent`: the CPU time of
/// a TLS handshake, not its waits for the client's bytes.
async fn timed<F: Future>(future: F, spent: &Cell<Duration>) -> F::Output {
    let mut future = std::pin::pin!(future);
    std::future::poll_fn(|cx| {
        let start = Instant::now();
        let poll = future.as_mut().poll(cx);
        spent.set(spent.get() + start.elapsed());
        poll
    })
    .await
}

/// Serves a connection, then ends it properly: TLS sends close_notify (clients may
/// otherwise take the close for a truncation attack), and TCP gets a FIN.
///
/// Not an `async fn`: that would move its parameters into locals of its future, and
/// the future would hold the stream twice (rustc keeps the places of both).
#[allow(clippy::manual_async_fn)]
fn serve_and_close<'w, T: TcpTracker, S: AsyncRead + AsyncWrite + Unpin + 'w>(
    worker: &'w Worker<T>,
    mut stream: S,
    peer: SocketAddr,
    deadline: Instant,
    place: Place<'w>,
) -> impl Future<Output = ()> + 'w {
    async move {
        T::serve(worker, &mut stream, peer, deadline, place).await;
        let _ = within(Duration::from_secs(1), stream.close()).await;
    }
}
