//! A started tracker, whatever its protocol, and how a binary runs one.

use std::sync::Arc;

use anyhow::Context as _;
use shoal_common::metrics::{Counters, StatsSnapshot, WorkerStats};
use shoal_common::signals::{ReloadHook, spawn_signal_thread};
use shoal_common::{PrivilegeConfig, Running};
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
        for Listening { url, note } in &self.listening {
            log::info!("listening on {url}");
            if !note.is_empty() {
                log::info!("{url}: {note}");
            }
        }
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

/// What a tracker binary does once its tracker started: say where it listens, handle
/// signals (SIGTERM/SIGINT stop, SIGUSR1 reloads), give up root if configured, and
/// wait until shutdown or a worker failure.
pub fn run_until_stopped<C: Counters, E>(
    tracker: RunningTracker<C, E>,
    privileges: &PrivilegeConfig,
) -> anyhow::Result<()> {
    tracker.log_addresses();
    spawn_signal_thread(tracker.shutdown_handle().clone(), tracker.reload_hooks())?;
    shoal_common::privileges::drop_privileges(privileges).context("cannot drop privileges")?;
    tracker.wait()
}

/// The access list reload every tracker has, logged under `name`.
pub fn access_list_reload<C>(context: &Context<C>, name: &'static str) -> Reload {
    let access = context.access.clone();
    Arc::new(move || access.reload_and_log(name))
}
