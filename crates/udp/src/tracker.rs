//! Starting and stopping a tracker: bind sockets, wire channels, start workers.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use shoal_common::cpu::maybe_pin_current_thread;
use shoal_common::{AccessControl, Running, Shutdown, Supervisor, TrackerConfig};
use shoal_swarm::Clock;

use crate::config::Config;
use crate::connection_id::ConnectionIds;
use crate::messages::Job;
use crate::socket::dispatch::Dispatcher;
use crate::socket::{
    ReplyRoute, SocketWorker, SocketWorkerParts, WorkerSockets, bind_socket, recv_slot_len,
};
use crate::stats::{Stats, StatsSnapshot, summary};
use crate::swarm_worker::SwarmWorker;

/// A tracker whose sockets are bound and whose workers are running.
///
/// Dropping it shuts the tracker down and waits (briefly) for its threads.
#[derive(Debug)]
pub struct RunningTracker {
    running: Running,
    clock: Arc<Clock>,
    stats: Arc<Stats>,
}

impl RunningTracker {
    /// The tracker's clock; tests advance it to expire peers and connection ids.
    pub fn clock(&self) -> &Arc<Clock> {
        &self.clock
    }

    /// Current statistics.
    pub fn stats(&self) -> StatsSnapshot {
        self.stats.snapshot()
    }

    /// Blocks until shutdown is requested or a worker fails.
    pub fn wait(self) -> anyhow::Result<()> {
        self.running.wait()
    }

    /// Requests shutdown and waits for the workers.
    pub fn stop(self) -> anyhow::Result<()> {
        self.running.stop()
    }
}

impl std::ops::Deref for RunningTracker {
    type Target = Running;

    /// Addresses, access list and shutdown flag.
    fn deref(&self) -> &Running {
        &self.running
    }
}

/// Starts a tracker with its own clock.
pub fn start(config: Config) -> anyhow::Result<RunningTracker> {
    start_with_clock(config, Arc::new(Clock::new()))
}

/// Starts a tracker on a given clock (tests share one to move time forward).
pub fn start_with_clock(config: Config, clock: Arc<Clock>) -> anyhow::Result<RunningTracker> {
    config.check().context("invalid configuration")?;
    let config = Arc::new(config);
    let access = Arc::new(
        AccessControl::from_config(&config.access_list).context("cannot load the access list")?,
    );
    let (sockets, addrs) = bind_all(&config)?;

    let socket_workers = sockets.len();
    let swarm_workers = config.swarm_worker_count().max(1);
    let stats = Stats::new(socket_workers, swarm_workers);
    let shutdown = Shutdown::new();
    let mut supervisor = Supervisor::new(shutdown.clone());
    let ids = ConnectionIds::new(config.protocol.connection_id_lifetime);

    let (job_senders, job_receivers): (Vec<_>, Vec<_>) = (0..swarm_workers)
        .map(|_| crossbeam_channel::bounded::<Job>(config.limits.swarm_queue_len))
        .unzip();
    // Every job a socket worker has in flight fits in its reply channel, so a swarm
    // worker returning a job never waits for long.
    let reply_capacity = swarm_workers * (config.limits.swarm_queue_len + 1) + 64;

    let mut routes = Vec::with_capacity(socket_workers);
    let mut socket_threads = Vec::with_capacity(socket_workers);
    for (index, sockets) in sockets.into_iter().enumerate() {
        let (reply_sender, returned_jobs) = crossbeam_channel::bounded(reply_capacity);
        let dispatcher = Dispatcher::new(
            index,
            &config,
            ids.clone(),
            access.clone(),
            job_senders.clone(),
        );
        let (worker, wake) = SocketWorker::new(SocketWorkerParts {
            index,
            sockets,
            returned_jobs,
            dispatcher,
            clock: clock.clone(),
            shutdown: shutdown.clone(),
            stats: stats.clone(),
            send_queue_len: config.limits.send_queue_len,
            recv_slot_len: recv_slot_len(config.protocol.max_scrape_torrents),
        })?;
        routes.push(ReplyRoute {
            jobs: reply_sender,
            wake,
        });
        socket_threads.push(worker);
    }
    drop(job_senders);

    for (index, jobs) in job_receivers.into_iter().enumerate() {
        let worker = SwarmWorker {
            config: config.clone(),
            clock: clock.clone(),
            access: access.clone(),
            jobs,
            routes: routes.clone(),
            gauges: stats.clone(),
            index,
            shutdown: shutdown.clone(),
        };
        let core = config.cpu_pinning.core_for(socket_workers + index);
        supervisor.spawn(format!("swarm-{index}"), move || {
            maybe_pin_current_thread(core);
            worker.run()
        })?;
    }
    for (index, worker) in socket_threads.into_iter().enumerate() {
        let core = config.cpu_pinning.core_for(index);
        supervisor.spawn(format!("socket-{index}"), move || {
            maybe_pin_current_thread(core);
            worker.run()
        })?;
    }
    stats.log_under(&mut supervisor, &config.statistics, summary)?;

    Ok(RunningTracker {
        running: Running::new(addrs, supervisor, access),
        clock,
        stats,
    })
}

/// Binds every socket worker's sockets; returns them and the bound addresses.
fn bind_all(config: &Config) -> anyhow::Result<(Vec<WorkerSockets>, Vec<SocketAddr>)> {
    let workers = config.socket_worker_count();
    let network = &config.network;
    let mut sockets: Vec<WorkerSockets> = (0..workers).map(|_| WorkerSockets::default()).collect();
    let mut addrs = Vec::new();
    for (enabled, configured) in [
        (network.use_ipv4, network.address_ipv4),
        (network.use_ipv6, network.address_ipv6),
    ] {
        if !enabled {
            continue;
        }
        // With port 0 the first bind picks the port; the others join it.
        let mut addr = configured;
        for worker in &mut sockets {
            let socket = bind_socket(addr, network.socket_recv_buffer_size)?;
            if addrs.len() < 2 && addr == configured {
                addr = socket
                    .local_addr()
                    .context("cannot read the bound address")?;
                addrs.push(addr);
            }
            if addr.is_ipv4() {
                worker.v4 = Some(socket);
            } else {
                worker.v6 = Some(socket);
            }
        }
    }
    Ok((sockets, addrs))
}
