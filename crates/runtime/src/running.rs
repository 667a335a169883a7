//! A started tracker, whatever its protocol, and how a binary runs one.

use std::sync::Arc;

use anyhow::Context as _;
use shoal_common::metrics::{Counters, StatsSnapshot, WorkerStats};
use std::net::SocketAddr;

use shoal_common::signals::{ReloadHook, SignalThread};
use shoal_common::{PrivilegeConfig, Running, Shutdown};
use shoal_swarm::Clock;

use crate::Context;

/// Something SIGUSR1 reloads (the access list, a TLS certificate), shareable.
pub type Reload = Arc<dyn Fn() + Send + Sync>;

/// A running tracker; dropping it shuts it down. `E` is what one kind of tracker adds
/// (the TLS config of the TCP trackers).
pub struct RunningTracker<C: Counters, E = ()> {
    running: Running,
    clock: Arc<Clock>,
    stats: Arc<WorkerStats<C>>,
    listening: Vec<Listening>,
    reloads: Vec<Reload>,
    extra: E,
}

/// One address a tracker listens on, as clients and the log see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listening {
    /// The URL clients use (`udp://…`, `https://…`, `wss://…`).
    pub url: String,
    /// What else the log line says (e.g. the announce URL), or nothing.
    pub note: String,
}

impl<C: Counters, E: std::fmt::Debug> std::fmt::Debug for RunningTracker<C, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningTracker")
            .field("listening", &self.listening)
            .field("extra", &self.extra)
            .finish_non_exhaustive()
    }
}

impl<C: Counters, E> RunningTracker<C, E> {
    /// Wraps a started tracker. `listening` describes each address; `reloads` run on
    /// SIGUSR1.
    pub fn new(
        running: Running,
        context: &Context<C>,
        listening: Vec<Listening>,
        reloads: Vec<Reload>,
        extra: E,
    ) -> Self {
        Self {
            running,
            clock: context.clock.clone(),
            stats: context.stats.clone(),
            listening,
            reloads,
            extra,
        }
    }

    /// The clock (tests advance it to expire peers and connection ids).
    pub fn clock(&self) -> &Arc<Clock> {
        &self.clock
    }

    /// Current statistics, summed over the workers.
    pub fn stats(&self) -> StatsSnapshot<C::Totals> {
        self.stats.snapshot()
    }

    /// The URLs clients use, one per listening address.
    pub fn urls(&self) -> Vec<&str> {
        self.listening.iter().map(|l| l.url.as_str()).collect()
    }

    /// Logs where the tracker listens.
    pub fn log_addresses(&self) {
        log_listening(&self.listening);
    }

    /// What SIGUSR1 should run for this tracker.
    pub fn reload_hooks(&self) -> Vec<ReloadHook> {
        self.reloads
            .iter()
            .map(|reload| {
                let reload = reload.clone();
                Box::new(move || reload()) as ReloadHook
            })
            .collect()
    }

    /// What this kind of tracker adds.
    pub fn extra(&self) -> &E {
        &self.extra
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

impl<C: Counters, E> std::ops::Deref for RunningTracker<C, E> {
    type Target = Running;

    /// Addresses, access list and shutdown flag.
    fn deref(&self) -> &Running {
        &self.running
    }
}

/// A tracker whose config is checked, files loaded and sockets bound, not serving yet:
/// the moment to give up root. [`serve`](Self::serve) starts every thread.
pub struct Prepared<C: Counters, E = ()> {
    addrs: Vec<SocketAddr>,
    listening: Vec<Listening>,
    serve: ServeFn<C, E>,
}

type ServeFn<C, E> = Box<dyn FnOnce(Vec<Listening>) -> anyhow::Result<RunningTracker<C, E>> + Send>;

impl<C: Counters, E> std::fmt::Debug for Prepared<C, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("listening", &self.listening)
            .finish_non_exhaustive()
    }
}

impl<C: Counters, E> Prepared<C, E> {
    /// A tracker bound to `addrs`, described by `listening`, which `serve` starts
    /// (and hands the same description on to its handle).
    pub fn new(
        addrs: Vec<SocketAddr>,
        listening: Vec<Listening>,
        serve: impl FnOnce(Vec<Listening>) -> anyhow::Result<RunningTracker<C, E>> + Send + 'static,
    ) -> Self {
        Self {
            addrs,
            listening,
            serve: Box::new(serve),
        }
    }

    /// The bound addresses (port 0 resolved), IPv4 first.
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    /// Logs where the tracker listens (its sockets are bound and listening: the
    /// kernel queues what arrives until it serves).
    pub fn log_addresses(&self) {
        log_listening(&self.listening);
    }

    /// Starts serving.
    pub fn serve(self) -> anyhow::Result<RunningTracker<C, E>> {
        (self.serve)(self.listening)
    }
}

fn log_listening(listening: &[Listening]) {
    for Listening { url, note } in listening {
        log::info!("listening on {url}");
        if !note.is_empty() {
            log::info!("{url}: {note}");
        }
    }
}

/// What a tracker binary does: handle signals from the first moment (SIGTERM/SIGINT
/// stop, SIGUSR1 reloads), prepare the tracker (config, files, sockets), give up root
/// if configured before anything is served, start serving, say where it listens, and
/// wait until shutdown or a worker failure.
pub fn run_until_stopped<C: Counters, E>(
    privileges: &PrivilegeConfig,
    prepare: impl FnOnce() -> anyhow::Result<Prepared<C, E>>,
) -> anyhow::Result<()> {
    let shutdown = Shutdown::new();
    let signals = SignalThread::start(shutdown.clone())?;
    let prepared = prepare()?;
    prepared.log_addresses();
    shoal_common::privileges::drop_privileges(privileges).context("cannot drop privileges")?;
    let tracker = prepared.serve()?;
    signals.add_reloads(tracker.reload_hooks());
    let stop = tracker.shutdown_handle().clone();
    shutdown.on_request(move || stop.request());
    tracker.wait()
}

/// The access list reload every tracker has, logged under `name`.
pub fn access_list_reload<C>(context: &Context<C>, name: &'static str) -> Reload {
    let access = context.access.clone();
    Arc::new(move || access.reload_and_log(name))
}
