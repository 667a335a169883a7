//! Starting and stopping a tracker: bind sockets, wire channels, start workers.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use shoal_common::cpu::maybe_pin_current_thread;
use shoal_common::{Running, Supervisor, TrackerConfig};
use shoal_swarm::Clock;

use shoal_common::sockets::bind_per_worker;
use shoal_common::tracker_config::Listen as _;
use shoal_runtime::snapshots::start_snapshots;
use shoal_runtime::state::{self, StateKind};
use shoal_runtime::{
    Context, Listening, LocalSwarm, Prepared, ShardDuties, access_list_reload, reply_capacity,
    spawn_swarm_workers, start_replicas, swarm_channels,
};
use shoal_swarm::{BitTorrentMap, ChangeLog, Restored};

use crate::config::Config;
use crate::connection_id::ConnectionIds;
use crate::messages::Job;
use crate::shard::UdpShard;
use crate::socket::dispatch::Dispatcher;
use crate::socket::{
    LocalTorrents, QueueSizes, SocketWorker, SocketWorkerParts, WorkerSockets, bind_socket,
    recv_slot_len,
};
use crate::stats::{SharedSocketCounters, summary};

/// The snapshot the UDP tracker keeps, as its config kind declares it.
const STATE: StateKind =
    match <crate::config::Udp as shoal_common::tracker_config::TrackerKind>::STATE {
        Some(kind) => kind,
        None => panic!("the UDP tracker keeps its swarms"),
    };

/// A tracker whose sockets are bound and whose workers are running.
///
/// Dropping it shuts the tracker down and waits (briefly) for its threads.
pub type RunningTracker = shoal_runtime::RunningTracker<SharedSocketCounters>;

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
        &config.access_list,
        clock,
        config.socket_worker_count(),
        config.swarm_worker_count().max(1),
    )?;
    let (sockets, addrs) = bind_all(&config)?;
    // Read now: the tracker may run in a chroot without /proc once it has started.
    let queue_sizes = QueueSizes {
        overload: config.network.overload_recv_buffer_size,
        rmem_max: shoal_common::sockets::rmem_max(),
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
    let socket_workers = sockets.len();
    let swarm_workers = config.swarm_worker_count();
    let Context {
        clock,
        access,
        stats,
        shutdown,
    } = context.clone();
    let mut supervisor = Supervisor::new(shutdown.clone());
    let lifetime = config.protocol.connection_id_lifetime;
    // A snapshot brings back the swarms and the connection-id key, so that clients
    // keep both their peers and their connection ids across a restart.
    let snapshot = state::load_at_start(&config.state, STATE);
    let ids = snapshot
        .as_ref()
        .and_then(|snapshot| {
            let age = snapshot.age(std::time::SystemTime::now());
            ConnectionIds::restore(&snapshot.extras, age, clock.now(), lifetime)
        })
        .unwrap_or_else(|| ConnectionIds::new(lifetime));
    let shards = swarm_workers.max(1);
    let (saved_ids, saved_clock) = (ids.clone(), clock.clone());
    let snapshots = start_snapshots(
        &mut supervisor,
        &config.state,
        STATE,
        shards,
        clock.now(),
        Box::new(move || saved_ids.to_bytes(saved_clock.now()).to_vec()),
    )?;
    let replicas = start_replicas(
        &mut supervisor,
        &config,
        "udp",
        shards,
        snapshot.as_ref().map(state::Snapshot::taken),
        stats.cluster(),
    )?;
    let mut duties = ShardDuties::for_shards(shards, snapshots, replicas);
    let queue_len = config.limits.swarm_queue_len;
    let mut restored = Restored::default();
    let mut shard = |index: usize| {
        let mut torrents: BitTorrentMap<()> = shoal_runtime::shard_map(&config);
        if let Some(snapshot) = &snapshot {
            restored.add(state::restore_shard(
                &mut torrents,
                snapshot,
                clock.now(),
                index,
                shards,
            ));
        }
        UdpShard::new(
            torrents,
            rand::make_rng(),
            config.protocol.announce_interval,
            config.cluster.enabled().then(ChangeLog::default),
        )
    };

    let (job_senders, job_receivers) = swarm_channels::<Job>(swarm_workers, queue_len);
    let mut routes = Vec::with_capacity(socket_workers);
    let mut socket_threads = Vec::with_capacity(socket_workers);
    for (index, sockets) in sockets.into_iter().enumerate() {
        // A socket worker that keeps the torrents sends its jobs to itself.
        let (senders, local) = if swarm_workers == 0 {
            let (senders, mut receivers) = swarm_channels::<Job>(1, queue_len);
            let local = LocalTorrents {
                requests: receivers.remove(0),
                swarm: LocalSwarm::new(
                    shard(0),
                    clock.clone(),
                    config.cleaning.interval,
                    stats.gauge_slot(0),
                )
                .with_duties(duties.pop().unwrap_or_default()),
                access: access.clone(),
            };
            (senders, Some(local))
        } else {
            (job_senders.clone(), None)
        };
        let dispatcher = Dispatcher::new(index, &config, ids.clone(), access.clone(), senders);
        let (worker, route) = SocketWorker::new(SocketWorkerParts {
            index,
            sockets,
            reply_capacity: reply_capacity(swarm_workers, queue_len),
            local,
            dispatcher,
            clock: clock.clone(),
            shutdown: shutdown.clone(),
            stats: stats.clone(),
            send_queue_len: config.limits.send_queue_len,
            recv_slot_len: recv_slot_len(config.protocol.max_scrape_torrents),
            queue_sizes,
        })?;
        routes.push(route);
        socket_threads.push(worker);
    }
    drop(job_senders);

    spawn_swarm_workers(
        &mut supervisor,
        &context,
        &config,
        job_receivers,
        &routes,
        duties,
        &mut shard,
    )?;
    if snapshot.is_some() {
        state::log_restored(STATE, restored);
    }
    for (index, worker) in socket_threads.into_iter().enumerate() {
        let core = config.cpu_pinning.core_for(index);
        supervisor.spawn(format!("socket-{index}"), move || {
            maybe_pin_current_thread(core);
            worker.run()
        })?;
    }
    stats.log_under(&mut supervisor, &config.statistics, summary)?;

    let reloads = vec![access_list_reload(&context, "udp")];
    let running = Running::new(addrs, supervisor, access);
    Ok(RunningTracker::new(
        running,
        &context,
        listening,
        reloads,
        (),
    ))
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
