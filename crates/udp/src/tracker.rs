//! Starting and stopping a tracker: bind sockets, wire channels, start workers.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use crossbeam_channel::Sender;
use shoal_common::{TrackerConfig, maybe_pin_current_thread};
use shoal_process::Running;
use shoal_swarm::Clock;

use shoal_common::Listen as _;
use shoal_process::{Listening, Prepared, list_reloads};
use shoal_sockets::bind_per_worker;
use shoal_swarm::{ChangeLog, Restored, ServerTime};
use shoal_worker::{
    Context, LocalSwarm, ReadySocketWorker, Snapshot, Startup, Threads, load_snapshot,
    reply_capacity, restore_shard, start_threads, swarm_channels,
};

use crate::config::Config;
use crate::connection_id::ConnectionIds;
use crate::messages::Job;
use crate::shard::UdpShard;
use crate::socket::dispatch::{Dispatcher, Gates};
use crate::socket::{
    LocalTorrents, QueueSizes, SocketWorker, SocketWorkerParts, WorkerSockets, bind_socket,
    recv_slot_len,
};
use crate::stats::{SharedSocketCounters, summary};

/// A tracker whose sockets are bound and whose workers are running.
///
/// Dropping it shuts the tracker down and waits (briefly) for its threads.
pub type RunningTracker = shoal_process::RunningTracker<SharedSocketCounters>;

/// Starts a tracker with its own clock.
pub fn start(config: Config) -> anyhow::Result<RunningTracker> {
    start_with_clock(config, Arc::new(Clock::new()))
}

/// Starts a tracker on a given clock (tests share one to move time forward).
pub fn start_with_clock(config: Config, clock: Arc<Clock>) -> anyhow::Result<RunningTracker> {
    prepare(config, clock)?.serve()
}

/// Prepares a tracker on `clock`: checks the config, loads the access list and binds
/// the sockets; serving (every thread) starts with [`Prepared::serve`].
pub fn prepare(
    config: Config,
    clock: Arc<Clock>,
) -> anyhow::Result<Prepared<SharedSocketCounters>> {
    config.check().context("invalid configuration")?;
    let config = Arc::new(config);
    // With swarm_workers = 0 the only socket worker keeps the torrents; it reports
    // their size as swarm worker 0.
    let context = Context::<SharedSocketCounters>::new(
        "udp",
        &config,
        clock,
        config.socket_worker_count(),
        config.swarm_worker_count().max(1),
    )?;
    let (sockets, addrs) = bind_all(&config)?;
    // Read now: the tracker may run in a chroot without /proc once it has started.
    let queue_sizes = QueueSizes {
        overload: config.network.overload_recv_buffer_size,
        rmem_max: shoal_sockets::rmem_max(),
    };
    let listening = addrs
        .iter()
        .map(|addr| Listening {
            url: format!("udp://{addr}"),
            note: String::new(),
        })
        .collect();
    Ok(Prepared::new(addrs.clone(), listening, move |listening| {
        serve(config, context, (sockets, queue_sizes), addrs, listening)
    }))
}

/// Starts every worker of a prepared tracker.
fn serve(
    config: Arc<Config>,
    context: Context<SharedSocketCounters>,
    (sockets, queue_sizes): (Vec<WorkerSockets>, QueueSizes),
    addrs: Vec<SocketAddr>,
    listening: Vec<Listening>,
) -> anyhow::Result<RunningTracker> {
    let clock = &context.clock;
    let lifetime = config.protocol.connection_id_lifetime;
    // A snapshot brings back the swarms and the connection-id key, so that clients
    // keep both their peers and their connection ids across a restart.
    let snapshot = load_snapshot(&config);
    let ids = snapshot
        .as_ref()
        .and_then(|snapshot| {
            let age = snapshot.age(std::time::SystemTime::now());
            ConnectionIds::restore(&snapshot.extras, age, clock.now(), lifetime)
        })
        .unwrap_or_else(|| ConnectionIds::new(lifetime));
    let (saved_ids, saved_clock) = (ids.clone(), clock.clone());
    let threads = Threads {
        name: "udp",
        config: &config,
        context: &context,
        socket_workers: sockets.len(),
        swarm_queue_len: config.limits.swarm_queue_len,
        snapshot: snapshot.as_ref(),
        snapshot_extras: Box::new(move || saved_ids.to_bytes(saved_clock.now()).to_vec()),
        summary,
    };
    let mut startup = UdpStartup {
        config: config.clone(),
        context: context.clone(),
        ids,
        sockets: sockets.into_iter(),
        queue_sizes,
    };
    let supervisor = start_threads(threads, &mut startup)?;
    let reloads = list_reloads(&context, "udp");
    let running = Running::new(addrs, supervisor, context.access.clone())
        .with_accounting(context.accounts.clone(), context.exporter.clone())
        .with_interval(context.interval.clone());
    Ok(RunningTracker::new(
        running,
        &context,
        listening,
        reloads,
        (),
    ))
}

/// What the UDP tracker adds to the shared start-up: its shards, and socket workers
/// that each read their own sockets in batches and sleep in poll(2) when idle.
struct UdpStartup {
    config: Arc<Config>,
    context: Context<SharedSocketCounters>,
    ids: ConnectionIds,
    /// Each socket worker's sockets, in turn.
    sockets: std::vec::IntoIter<WorkerSockets>,
    queue_sizes: QueueSizes,
}

impl Startup for UdpStartup {
    type Shard = UdpShard;

    fn shard(&self) -> UdpShard {
        UdpShard::new(
            shoal_worker::shard_map(&self.config),
            rand::make_rng(),
            self.context.interval.clone(),
            self.config.cluster.enabled().then(ChangeLog::default),
        )
    }

    fn restore(
        &self,
        shard: &mut UdpShard,
        snapshot: &Snapshot,
        now: ServerTime,
        index: usize,
        shards: usize,
    ) -> Restored {
        restore_shard(&mut shard.torrents, snapshot, now, index, shards)
    }

    fn socket_worker(
        &mut self,
        index: usize,
        swarms: Vec<Sender<Job>>,
        local: Option<LocalSwarm<UdpShard>>,
    ) -> anyhow::Result<ReadySocketWorker<Job>> {
        let config = &self.config;
        let queue_len = config.limits.swarm_queue_len;
        let access = &self.context.access;
        let private = &self.context.private;
        // A socket worker that keeps the torrents sends its jobs to itself.
        let (senders, local) = match local {
            Some(swarm) => {
                let (senders, mut receivers) = swarm_channels::<Job>(1, queue_len);
                let local = LocalTorrents {
                    requests: receivers.remove(0),
                    swarm,
                    access: access.clone(),
                };
                (senders, Some(local))
            }
            None => (swarms, None),
        };
        let dispatcher = Dispatcher::new(
            index,
            config,
            self.ids.clone(),
            Gates {
                access: access.clone(),
                client_rules: self.context.clients.clone(),
                private: private.clone(),
                sessions: self.context.sessions.clone(),
                accounts: self.context.accounts.clone(),
                interval: self.context.interval.clone(),
            },
            senders,
        );
        let (worker, route) = SocketWorker::new(SocketWorkerParts {
            index,
            sockets: self.sockets.next().unwrap_or_default(),
            reply_capacity: reply_capacity(config.swarm_worker_count(), queue_len),
            local,
            dispatcher,
            clock: self.context.clock.clone(),
            shutdown: self.context.shutdown.clone(),
            stats: self.context.stats.clone(),
            send_queue_len: config.limits.send_queue_len,
            recv_slot_len: recv_slot_len(config.protocol.max_scrape_torrents),
            queue_sizes: self.queue_sizes,
        })?;
        let core = config.cpu_pinning.core_for(index);
        let run = move || {
            maybe_pin_current_thread(core);
            worker.run()
        };
        Ok(ReadySocketWorker {
            run: Box::new(run),
            replies: route,
        })
    }
}

/// Binds every socket worker's sockets; returns them and the bound addresses.
fn bind_all(config: &Config) -> anyhow::Result<(Vec<WorkerSockets>, Vec<SocketAddr>)> {
    let network = &config.network;
    let (per_worker, bound) = bind_per_worker(
        &network.addresses(),
        config.socket_worker_count(),
        socket2::Type::DGRAM,
        |addr| bind_socket(addr, network.socket_recv_buffer_size),
        std::net::UdpSocket::local_addr,
    )?;
    if network.socket_recv_buffer_size > 0
        && let Some(first) = per_worker.iter().flatten().next()
    {
        // Linux reports double the usable size it granted.
        let granted = socket2::SockRef::from(first)
            .recv_buffer_size()
            .unwrap_or(0)
            / 2;
        shoal_sockets::report_recv_buffer(
            "UDP",
            granted,
            network.socket_recv_buffer_size,
            Config::default().network.socket_recv_buffer_size,
        );
    }
    let sockets = per_worker
        .into_iter()
        .map(|sockets| {
            let mut worker = WorkerSockets::default();
            for socket in sockets {
                let family = socket.local_addr().map(|addr| addr.is_ipv4());
                match family {
                    Ok(true) => worker.v4 = Some(socket),
                    _ => worker.v6 = Some(socket),
                }
            }
            worker
        })
        .collect();
    Ok((sockets, bound))
}
