//! Starting and stopping the HTTP tracker.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use shoal_common::cpu::maybe_pin_current_thread;
use shoal_common::memlock;
use shoal_common::tls::TlsConfig;
use shoal_common::tracker_config::Listen as _;
use shoal_common::{AccessControl, Running, Shutdown, Supervisor, TrackerConfig};
use shoal_swarm::Clock;

use crate::config::Config;
use crate::socket::router::LocalSwarm;
use crate::socket::{Listeners, socket_worker};
use crate::stats::{Stats, StatsSnapshot, summary};
use crate::swarm_worker::SwarmWorker;

/// A running HTTP tracker; dropping it shuts it down.
#[derive(Debug)]
pub struct RunningTracker {
    running: Running,
    tls: Option<Arc<TlsConfig>>,
    clock: Arc<Clock>,
    stats: Arc<Stats>,
}

impl RunningTracker {
    /// The clock (tests advance it).
    pub fn clock(&self) -> &Arc<Clock> {
        &self.clock
    }

    /// The TLS config, when serving HTTPS.
    pub fn tls(&self) -> Option<&Arc<TlsConfig>> {
        self.tls.as_ref()
    }

    /// Current statistics.
    pub fn stats(&self) -> StatsSnapshot {
        self.stats.snapshot()
    }

    /// Blocks until shutdown or a worker failure.
    pub fn wait(self) -> anyhow::Result<()> {
        self.running.wait()
    }

    /// Requests shutdown and waits.
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

/// Starts a tracker on a given clock.
pub fn start_with_clock(config: Config, clock: Arc<Clock>) -> anyhow::Result<RunningTracker> {
    config.check().context("invalid configuration")?;
    let socket_workers = config.socket_worker_count();
    memlock::ensure_for(socket_workers, config.limits.io_memory)?;
    let config = Arc::new(config);
    let access = Arc::new(
        AccessControl::from_config(&config.access_list).context("cannot load the access list")?,
    );
    let network = &config.network;
    let tls = TlsConfig::load_if(
        "http",
        network.enable_tls,
        &network.tls_certificate_path,
        &network.tls_private_key_path,
    )?;
    let (listeners, addrs) = bind_all(&config, socket_workers)?;

    let swarm_workers = config.swarm_worker_count();
    // With swarm_workers = 0 the only socket worker keeps the torrents; it reports
    // their size as swarm worker 0.
    let stats = Stats::new(socket_workers, swarm_workers.max(1));
    let shutdown = Shutdown::new();
    let mut supervisor = Supervisor::new(shutdown.clone());
    let (request_senders, request_receivers): (Vec<_>, Vec<_>) = (0..swarm_workers)
        .map(|_| crossbeam_channel::bounded(config.limits.swarm_queue_len))
        .unzip();

    let mut routes = Vec::with_capacity(socket_workers);
    let mut workers = Vec::with_capacity(socket_workers);
    for (index, listeners) in listeners.into_iter().enumerate() {
        let (worker, route) = socket_worker(
            index,
            config.clone(),
            listeners,
            request_senders.clone(),
            (swarm_workers == 0).then(|| {
                LocalSwarm::new(
                    config.cleaning.peer_timeout,
                    config.cleaning.interval,
                    clock.clone(),
                )
            }),
            access.clone(),
            tls.clone(),
            clock.clone(),
            stats.clone(),
            shutdown.clone(),
        )?;
        routes.push(route);
        workers.push(worker);
    }
    drop(request_senders);

    for (index, requests) in request_receivers.into_iter().enumerate() {
        let worker = SwarmWorker {
            config: config.clone(),
            clock: clock.clone(),
            access: access.clone(),
            requests,
            routes: routes.clone(),
            stats: stats.clone(),
            index,
            shutdown: shutdown.clone(),
        };
        let core = config.cpu_pinning.core_for(socket_workers + index);
        supervisor.spawn(format!("swarm-{index}"), move || {
            maybe_pin_current_thread(core);
            worker.run()
        })?;
    }
    for (index, worker) in workers.into_iter().enumerate() {
        // The executor pins itself (glommio placement) when pinning is on.
        supervisor.spawn(format!("socket-{index}"), move || worker.run())?;
    }
    stats.log_under(&mut supervisor, &config.statistics, summary)?;
    Ok(RunningTracker {
        running: Running::new(addrs, supervisor, access),
        tls,
        clock,
        stats,
    })
}

/// Binds every socket worker's listeners; returns them and the bound addresses.
fn bind_all(config: &Config, workers: usize) -> anyhow::Result<(Vec<Listeners>, Vec<SocketAddr>)> {
    let network = &config.network;
    let addresses = network.addresses();
    let (sockets, bound) = shoal_common::sockets::bind_listeners(&addresses, workers)?;
    let listeners = sockets
        .into_iter()
        .map(|sockets| Listeners { sockets })
        .collect();
    Ok((listeners, bound))
}
