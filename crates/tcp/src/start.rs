//! The TCP trackers' shared start-up and socket workers: an executor a thread
//! (shoal's epoll executor by default, glommio on io_uring where
//! `network.io_backend` asks for it) that accepts connections on its own
//! SO_REUSEPORT listeners and runs one task per connection.
//!
//! Here once for both trackers: checking locked memory, loading the access list and
//! TLS, binding, wiring the swarm workers or the local shard, the reply pump,
//! flushing counters, and the statistics thread.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;

use anyhow::Context as _;
use crossbeam_channel::Sender;
use shoal_common::{
    Config, Counters, Embeds, Listen as _, Shutdown, TcpNetwork, TrackerConfig as _,
};
use shoal_process::Running;
use shoal_swarm::{Clock, Restored, ServerTime};

use shoal_process::{Listening, Prepared, Reload, RunningTracker, list_reloads};
use shoal_worker::{
    ConnectionsPerIp, Context, LocalSwarm, RateTable, ReadySocketWorker, Shard, Snapshot, Startup,
    Threads, load_snapshot, reply_capacity, start_threads,
};

use crate::admission::Admission;
use crate::backend::{Backend, accept_connections, run_executor, sleep, spawn_local};
use crate::inbox::{ReplyInbox, executor_reply_channel};
use crate::memlock::MemlockClaim;
use crate::tls::TlsConfig;

use crate::accept::connection;
use crate::tracker::{
    PreparedTcpTracker, RELAY_TICK, RunningTcpTracker, TcpExtra, TcpSettings, TcpTracker, Worker,
};

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
    let per_tracker = T::per_tracker(&config)?;
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
            per_tracker,
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
    (per_tracker, per_tracker_reloads): (Arc<T::PerTracker>, Vec<Reload>),
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
        per_tracker,
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
    reloads.extend(per_tracker_reloads);
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
    per_tracker: Arc<T::PerTracker>,
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
            per_tracker: self.per_tracker.clone(),
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
    per_tracker: Arc<T::PerTracker>,
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
        let per_worker = T::per_worker(
            self.index,
            &self.config,
            &self.per_tracker,
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
            per_worker,
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
