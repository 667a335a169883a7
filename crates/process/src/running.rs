//! A started tracker, whatever its protocol, and how a binary runs one.

use std::sync::Arc;

use anyhow::Context as _;
use std::net::SocketAddr;

use shoal_common::metric_names::{OPEN_CONNECTIONS, PEERS};
use shoal_common::{
    Counters, LargeSwarm, NotStarted, Observation, Observe, ProcessConfig, ReloadHook, Shutdown,
    SignalThread, StatsSample, WorkerStats, notify_ready, notify_stopping, notify_systemd,
    watchdog_interval,
};
use shoal_swarm::Clock;

use shoal_worker::Context;

use crate::Running;
use crate::monitor::Monitored;

/// Something SIGUSR1 reloads (the access list, a TLS certificate), shareable.
pub type Reload = Arc<dyn Fn() -> Option<String> + Send + Sync>;

/// A running tracker; dropping it shuts it down. `E` is what one kind of tracker adds
/// (the TLS config of the TCP trackers).
pub struct RunningTracker<C: Counters, E = ()> {
    running: Running,
    /// Private mode's users and torrents, and the client rules, for the admin API.
    private: Option<Arc<shoal_private::Registry>>,
    clients: Arc<shoal_common::ClientRules>,
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
            private: context.private.clone(),
            clients: context.clients.clone(),
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
    pub fn stats(&self) -> StatsSample<C::Totals> {
        self.stats.sample()
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

    /// What the admin API may change of it; `protocol` names it.
    pub fn admin_target(&self, protocol: &'static str) -> crate::AdminTarget {
        crate::AdminTarget {
            protocol,
            access: self.running.access_control().clone(),
            clients: self.clients.clone(),
            registry: self.private.clone(),
            accounts: self.running.accounts().cloned(),
            interval: self.running.interval().cloned(),
        }
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

/// A prepared tracker of any protocol, as a process that runs one or several sees it.
pub trait Servable: Send {
    /// "UDP tracker", for errors and thread names.
    fn name(&self) -> &'static str;
    /// Logs where it listens.
    fn log_addresses(&self);
    /// Starts serving.
    fn serve(self: Box<Self>) -> anyhow::Result<Box<dyn Served>>;
}

/// A serving tracker of any protocol.
pub trait Served: Send {
    /// What SIGUSR1 reloads for it.
    fn reload_hooks(&self) -> Vec<ReloadHook>;
    /// Its shutdown flag.
    fn shutdown_handle(&self) -> Shutdown;
    /// What the monitoring endpoint asks it.
    fn monitor(&self) -> Arc<dyn Monitored>;
    /// What the admin API may change of it.
    fn admin(&self) -> crate::AdminTarget;
    /// Blocks until it stops; an error if a worker failed.
    fn wait(self: Box<Self>) -> anyhow::Result<()>;
}

/// A [`Prepared`] tracker with its protocol name, ready to run beside others.
struct NamedPrepared<C: Counters, E> {
    name: &'static str,
    protocol: &'static str,
    prepared: Prepared<C, E>,
}

impl<C, E> Servable for NamedPrepared<C, E>
where
    C: Counters + 'static,
    C::Totals: Observe + Send + Sync,
    E: Send + 'static,
{
    fn name(&self) -> &'static str {
        self.name
    }

    fn log_addresses(&self) {
        self.prepared.log_addresses();
    }

    fn serve(self: Box<Self>) -> anyhow::Result<Box<dyn Served>> {
        let tracker = self.prepared.serve()?;
        Ok(Box::new(NamedRunning {
            admin: tracker.admin_target(self.protocol),
            monitor: Arc::new(TrackerMonitor {
                protocol: self.protocol,
                stats: tracker.stats.clone(),
                shutdown: tracker.shutdown_handle().clone(),
                urls: tracker.urls().iter().map(|url| url.to_string()).collect(),
                stall_reported: std::sync::atomic::AtomicBool::new(false),
                accounts: tracker.running.accounts().cloned(),
                exporter: tracker.running.exporter().cloned(),
                interval: tracker.running.interval().cloned(),
            }),
            tracker,
        }))
    }
}

struct NamedRunning<C: Counters, E> {
    tracker: RunningTracker<C, E>,
    monitor: Arc<dyn Monitored>,
    admin: crate::AdminTarget,
}

impl<C: Counters + 'static, E: Send + 'static> Served for NamedRunning<C, E> {
    fn reload_hooks(&self) -> Vec<ReloadHook> {
        self.tracker.reload_hooks()
    }

    fn shutdown_handle(&self) -> Shutdown {
        self.tracker.shutdown_handle().clone()
    }

    fn monitor(&self) -> Arc<dyn Monitored> {
        self.monitor.clone()
    }

    fn admin(&self) -> crate::AdminTarget {
        self.admin.clone()
    }

    fn wait(self: Box<Self>) -> anyhow::Result<()> {
        self.tracker.wait()
    }
}

struct TrackerMonitor<C> {
    protocol: &'static str,
    stats: Arc<WorkerStats<C>>,
    shutdown: Shutdown,
    urls: Vec<String>,
    /// Whether a stalled worker was last reported, so that a stall and its end are
    /// each logged once.
    stall_reported: std::sync::atomic::AtomicBool,
    /// Private mode's accounting, when it is on.
    accounts: Option<Arc<shoal_private::Accounts>>,
    /// Its exporter, when it is on.
    exporter: Option<Arc<shoal_worker::Exporter>>,
    /// The announce interval it gives.
    interval: Option<Arc<shoal_worker::AnnounceInterval>>,
}

impl<C: Counters> Monitored for TrackerMonitor<C>
where
    C::Totals: Observe,
{
    fn protocol(&self) -> &'static str {
        self.protocol
    }

    fn observe(&self, out: &mut Observation) {
        self.stats.sample().observe(out);
        out.gauge(
            "shoal_workers_stalled",
            "Socket and swarm workers that have not gone round their loop for 10 s (stuck).",
            &[],
            self.stats.stalled().len() as f64,
        );
        if let Some(accounts) = &self.accounts {
            observe_accounts(accounts, out);
        }
        if let Some(exporter) = &self.exporter {
            observe_exporter(&exporter.stats, out);
        }
        if let Some(interval) = &self.interval {
            observe_interval(interval, out);
        }
    }

    fn largest_swarms(&self, count: usize) -> Vec<LargeSwarm> {
        self.stats.largest_swarms(count)
    }

    fn healthy(&self) -> bool {
        self.healthy_at(std::time::Instant::now())
    }

    fn urls(&self) -> Vec<String> {
        self.urls.clone()
    }
}

/// The adaptive announce interval: what it is now, and what it is made from.
fn observe_interval(interval: &shoal_worker::AnnounceInterval, out: &mut Observation) {
    use std::sync::atomic::Ordering::Relaxed;
    for family in shoal_worker::Family::ALL {
        out.gauge(
            "shoal_announce_interval_seconds",
            "The announce interval given now, before each reply's jitter: raised under \
             load ([interval]), at most interval.max.",
            &[("ip_version", family.label())],
            f64::from(interval.current(family)),
        );
    }
    out.gauge(
        "shoal_announce_interval_max_seconds",
        "The longest announce interval the tracker gives (interval.max, or what the \
         admin API set).",
        &[],
        f64::from(interval.bounds().max),
    );
    let gauges = interval.gauges();
    out.gauge(
        "shoal_load",
        "The share of its capacity the tracker used in the last second: its busiest \
         worker's busy time, above 1 when requests were shed or dropped (offered over \
         served).",
        &[],
        gauges.load_per_mille.load(Relaxed) as f64 / 1000.0,
    );
    out.gauge(
        "shoal_capacity_announces_per_second",
        "Announces a second the tracker could answer fully busy, as learnt from its \
         announces and busy time over the last minute; 0 until it has seen load.",
        &[],
        gauges.capacity.load(Relaxed) as f64,
    );
}

/// The accounting exporter's counters.
fn observe_exporter(stats: &shoal_worker::ExportStats, out: &mut Observation) {
    use std::sync::atomic::Ordering::Relaxed;
    for (target, outcome, value) in [
        ("http", "sent", &stats.http_sent),
        ("http", "failed", &stats.http_failed),
        ("redis", "sent", &stats.redis_sent),
        ("redis", "failed", &stats.redis_failed),
    ] {
        out.counter(
            "shoal_accounting_exports",
            "Accounting batches sent to the site, and tries that failed (the batch waits \
             in the export directory and is tried again).",
            &[("target", target), ("outcome", outcome)],
            value.load(Relaxed),
        );
    }
    out.gauge(
        "shoal_accounting_backlog_batches",
        "Accounting batches waiting in the export directory to be sent.",
        &[],
        stats.backlog.load(Relaxed) as f64,
    );
}

/// Private mode's accounting counters.
fn observe_accounts(accounts: &shoal_private::Accounts, out: &mut Observation) {
    use std::sync::atomic::Ordering::Relaxed;
    out.counter(
        "shoal_accounting_reports_dropped",
        "Accepted private announces not credited: the accounting queue was full.",
        &[],
        accounts.dropped(),
    );
    out.counter(
        "shoal_accounting_reports_refused",
        "Private announces refused for a total past private.max_session_bytes.",
        &[],
        accounts.refused_totals.load(Relaxed),
    );
    out.counter(
        "shoal_accounting_batches_dropped",
        "Accounting batches deleted unsent: more than private.export_backlog batches, or \
         export_backlog_bytes bytes, were waiting.",
        &[],
        accounts.backlog_dropped.load(Relaxed),
    );
    for (outcome, value) in [
        ("written", accounts.written.load(Relaxed)),
        ("failed", accounts.failed.load(Relaxed)),
    ] {
        out.counter(
            "shoal_accounting_batches",
            "Accounting batch files written, and attempts that failed (the batch is kept \
             and tried again).",
            &[("outcome", outcome)],
            value,
        );
    }
    if !accounts.shared {
        return;
    }
    for (outcome, value) in [
        ("applied", &accounts.shared_applied),
        ("contended", &accounts.shared_contended),
        ("failed", &accounts.shared_failed),
    ] {
        out.counter(
            "shoal_accounting_shared",
            "In a cluster: transactions of accounting reports on the store's ledger \
             (contended: other nodes changed the same pairs at every try; failed: the \
             store did not answer; both keep the reports for the next round).",
            &[("outcome", outcome)],
            value.load(Relaxed),
        );
    }
    out.gauge(
        "shoal_accounting_shared_pending",
        "In a cluster: accounting reports waiting to be applied to the store's ledger.",
        &[],
        accounts.shared_pending.load(Relaxed) as f64,
    );
}

impl<C> TrackerMonitor<C> {
    /// Whether the tracker is serving and no worker is stuck, as seen at `now`; logs
    /// a stall when it is first seen and its end.
    fn healthy_at(&self, now: std::time::Instant) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        if self.shutdown.is_requested() {
            return false;
        }
        let stalled = self.stats.stalled_at(now);
        let was_reported = self.stall_reported.swap(!stalled.is_empty(), Relaxed);
        if let Some((name, since)) = stalled.first()
            && !was_reported
        {
            log::error!(
                "{} tracker: worker {name} has not gone round its loop for {} s (stuck); \
                 the tracker is unhealthy: /health answers 503 and systemd's watchdog, if \
                 on, will restart it",
                self.protocol,
                since.as_secs()
            );
        } else if stalled.is_empty() && was_reported {
            log::warn!(
                "{} tracker: every worker is going round again",
                self.protocol
            );
        }
        stalled.is_empty()
    }
}

impl<C, E> Prepared<C, E>
where
    C: Counters + 'static,
    C::Totals: Observe + Send + Sync,
    E: Send + 'static,
{
    /// This tracker as one of the trackers a process runs; `name` names it in errors
    /// ("UDP tracker"), `protocol` in metrics ("udp").
    pub fn named(self, name: &'static str, protocol: &'static str) -> Box<dyn Servable> {
        Box::new(NamedPrepared {
            name,
            protocol,
            prepared: self,
        })
    }
}

/// What a tracker process does, for one tracker or several: handle signals from the
/// first moment (SIGTERM/SIGINT stop, SIGUSR1 reloads), prepare every tracker (config,
/// files, sockets), bind the monitoring endpoint, give up root if configured before
/// anything is served, start serving, tell systemd it is ready, and wait until
/// shutdown or a failure. Whichever tracker stops first stops the others; the process
/// fails if any failed. An error before serving began carries
/// [`NotStarted`], for the exit status the units do not
/// restart on.
pub fn run_trackers(
    process: &ProcessConfig,
    prepare: impl FnOnce() -> anyhow::Result<Vec<Box<dyn Servable>>>,
) -> anyhow::Result<()> {
    let everything = Shutdown::new();
    let signals = SignalThread::start(everything.clone()).context(NotStarted)?;
    crate::open_files::raise_open_files_limit();
    let prepared = prepare().context(NotStarted)?;
    let monitor_listener = if process.metrics.enabled {
        Some(crate::monitor::bind(process.metrics.address).context(NotStarted)?)
    } else {
        None
    };
    let admin = if process.admin.enabled {
        Some(
            crate::admin::bind(&process.admin)
                .context("cannot start the admin API")
                .context(NotStarted)?,
        )
    } else {
        None
    };
    for tracker in &prepared {
        tracker.log_addresses();
    }
    let trimmer = crate::memory::Trimmer::prepare(&process.memory);
    shoal_common::drop_privileges(&process.privileges)
        .context("cannot drop privileges")
        .context(NotStarted)?;
    let mut served = Vec::with_capacity(prepared.len());
    for tracker in prepared {
        let name = tracker.name();
        served.push((name, tracker.serve().context(name).context(NotStarted)?));
    }
    let monitors: Vec<Arc<dyn Monitored>> = served.iter().map(|(_, s)| s.monitor()).collect();
    if let Some(listener) = monitor_listener {
        crate::monitor::spawn(listener, monitors.clone(), everything.clone())
            .context(NotStarted)?;
    }
    if let Some(admin) = admin {
        let targets = served.iter().map(|(_, s)| s.admin()).collect();
        admin
            .spawn(targets, everything.clone())
            .context(NotStarted)?;
    }
    for (_, tracker) in &served {
        signals.add_reloads(tracker.reload_hooks());
        let stop = tracker.shutdown_handle();
        everything.on_request(move || stop.request());
    }
    everything.on_request(notify_stopping);
    let names: Vec<&str> = served.iter().map(|(name, _)| *name).collect();
    notify_ready(&format!("serving: {}", names.join(", ")));
    if let Some(trimmer) = trimmer
        && let Err(err) = trimmer.spawn(work_in_hand(monitors.clone()), &everything)
    {
        // Serving goes on; only the memory of busy spells stays resident.
        log::warn!("freed memory will not be given back to the system: {err:#}");
    }
    spawn_watchdog(&everything, monitors)?;

    let (done, finished) = std::sync::mpsc::channel();
    let count = served.len();
    for (name, tracker) in served {
        let (done, everything) = (done.clone(), everything.clone());
        std::thread::Builder::new()
            .name(format!("{}-main", name.split(' ').next().unwrap_or(name)))
            .spawn(move || {
                let result = tracker.wait();
                everything.request();
                let _ = done.send(result.context(name));
            })?;
    }
    let mut outcome = Ok(());
    for _ in 0..count {
        let result = finished.recv().context("a tracker thread vanished")?;
        outcome = outcome.and(result);
    }
    outcome
}

/// Pings systemd's watchdog at half the interval it asked for, while every tracker is
/// healthy; no thread without `WatchdogSec=`.
fn spawn_watchdog(everything: &Shutdown, monitors: Vec<Arc<dyn Monitored>>) -> anyhow::Result<()> {
    let Some(interval) = watchdog_interval() else {
        return Ok(());
    };
    let everything = everything.clone();
    std::thread::Builder::new()
        .name("watchdog".into())
        .spawn(move || {
            let mut last = std::time::Instant::now() - interval;
            while !everything.is_requested() {
                if last.elapsed() >= interval / 2 && monitors.iter().all(|m| m.healthy()) {
                    notify_systemd("WATCHDOG=1");
                    last = std::time::Instant::now();
                }
                std::thread::sleep(Shutdown::POLL_INTERVAL.min(interval / 4));
            }
        })
        .context("cannot start the watchdog thread")?;
    Ok(())
}

/// [`run_trackers`] for one tracker: what each single binary does.
pub fn run_until_stopped<C, E>(
    process: &ProcessConfig,
    name: &'static str,
    protocol: &'static str,
    prepare: impl FnOnce() -> anyhow::Result<Prepared<C, E>>,
) -> anyhow::Result<()>
where
    C: Counters + 'static,
    C::Totals: Observe + Send + Sync,
    E: Send + 'static,
{
    run_trackers(process, || Ok(vec![prepare()?.named(name, protocol)]))
}

/// The access list reload every tracker has, logged under `name`.
fn access_list_reload<C>(context: &Context<C>, name: &'static str) -> Reload {
    let access = context.access.clone();
    Arc::new(move || access.reload_and_log(name))
}

/// What SIGUSR1 reloads of every tracker's own lists: the access list, and in private
/// mode the users and torrents files; logged under `name`.
pub fn list_reloads<C>(context: &Context<C>, name: &'static str) -> Vec<Reload> {
    let mut reloads = vec![access_list_reload(context, name)];
    if let Some(registry) = context.private.clone() {
        reloads.push(Arc::new(move || Some(registry.reload_and_log(name))) as Reload);
    }
    reloads
}

/// The peers and connections the trackers hold now: the work in hand the memory
/// policy watches.
fn work_in_hand(monitors: Vec<Arc<dyn Monitored>>) -> impl Fn() -> u64 + Send + 'static {
    move || {
        let mut observation = Observation::default();
        for monitor in &monitors {
            monitor.observe(&mut observation);
        }
        let held = observation.sum(PEERS, &[]) + observation.sum(OPEN_CONNECTIONS, &[]);
        held as u64
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;
    use std::time::{Duration, Instant};

    use super::*;

    shoal_common::counters! {
        /// Counters of a tracker that counts nothing here.
        pub struct Local, Shared, Totals {
            /// Requests.
            requests,
        }
    }

    #[test]
    fn accounting_is_observed() {
        let dir =
            std::env::temp_dir().join(format!("shoal-monitor-accounts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let accounts =
            shoal_private::Accounts::start("udp", &dir, Duration::from_secs(3600), 3600, None)
                .unwrap();
        let mut observation = Observation::default();
        observe_accounts(&accounts, &mut observation);
        let names: Vec<&str> = observation.families().iter().map(|f| f.name).collect();
        assert!(
            names.contains(&"shoal_accounting_reports_dropped")
                && names.contains(&"shoal_accounting_batches"),
            "{names:?}"
        );
        assert_eq!(
            observation.sum("shoal_accounting_batches", &[("outcome", "written")]),
            0.0
        );
        accounts.finish();
        std::fs::remove_dir_all(&dir).unwrap();
        let stats = shoal_worker::ExportStats::default();
        stats
            .http_failed
            .fetch_add(2, std::sync::atomic::Ordering::Relaxed);
        let mut observation = Observation::default();
        observe_exporter(&stats, &mut observation);
        let failed = [("target", "http"), ("outcome", "failed")];
        assert_eq!(observation.sum("shoal_accounting_exports", &failed), 2.0);
        assert_eq!(
            observation.sum("shoal_accounting_backlog_batches", &[]),
            0.0
        );
    }

    #[test]
    fn a_stuck_worker_makes_the_tracker_unhealthy_until_it_goes_round_again() {
        let stats = WorkerStats::<Shared>::new(1, 1);
        let monitor = TrackerMonitor {
            protocol: "udp",
            stats: stats.clone(),
            shutdown: Shutdown::new(),
            urls: Vec::new(),
            stall_reported: AtomicBool::new(false),
            accounts: None,
            exporter: None,
            interval: None,
        };
        let start = Instant::now();
        let at = |secs| start + Duration::from_secs(secs);
        assert!(monitor.healthy_at(at(60)), "no worker started: none stuck");
        stats.socket_beat(0, at(0));
        stats.swarm_beat(0, at(0));
        assert!(monitor.healthy_at(at(9)));
        // The swarm worker goes on; the socket worker does not.
        stats.swarm_beat(0, at(10));
        assert!(!monitor.healthy_at(at(11)));
        assert!(
            monitor
                .stall_reported
                .load(std::sync::atomic::Ordering::Relaxed)
        );
        stats.socket_beat(0, at(11));
        stats.swarm_beat(0, at(11));
        assert!(monitor.healthy_at(at(12)));
        monitor.shutdown.request();
        assert!(!monitor.healthy_at(at(12)));
    }
}
