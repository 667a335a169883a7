//! What every worker of one running tracker shares ([`Context`]), made once at start:
//! the access list, client rules, the adaptive interval, statistics, the shutdown
//! flag and, in private mode, the registry, sessions and accounting.

use std::sync::Arc;

use anyhow::Context as _;
use shoal_common::{AccessControl, ClientRules, Shutdown};
use shoal_common::{Counters, WorkerStats};
use shoal_private::{Accounts, Registry, Sessions};
use shoal_swarm::Clock;

use crate::{AnnounceInterval, ExportTargets, Exporter, HttpTarget, RedisTarget, StorePairs};

/// What every worker of one running tracker shares.
#[derive(Debug)]
pub struct Context<C> {
    /// The tracker's clock.
    pub clock: Arc<Clock>,
    /// The access list.
    pub access: Arc<AccessControl>,
    /// Which clients are served (`[clients]`), replaceable through the admin API.
    pub clients: Arc<ClientRules>,
    /// The announce interval given now, adapted to load (`[interval]`).
    pub interval: Arc<AnnounceInterval>,
    /// Private mode's users and torrents; `None` for a public tracker.
    pub private: Option<Arc<Registry>>,
    /// Private mode's clients per user and torrent (the peer cap, the enforced
    /// minimum interval); `None` for a public tracker.
    pub sessions: Option<Arc<Sessions>>,
    /// Private mode's accounting, when `private.export_directory` is set.
    pub accounts: Option<Arc<Accounts>>,
    /// The exporter of its batches to the site, when `private.export_url` or
    /// `export_redis` is set.
    pub exporter: Option<Arc<Exporter>>,
    /// Statistics: counters per socket worker, gauges per swarm worker.
    pub stats: Arc<WorkerStats<C>>,
    /// The shutdown flag.
    pub shutdown: Shutdown,
}

impl<C> Clone for Context<C> {
    fn clone(&self) -> Self {
        Self {
            clock: self.clock.clone(),
            access: self.access.clone(),
            clients: self.clients.clone(),
            interval: self.interval.clone(),
            private: self.private.clone(),
            accounts: self.accounts.clone(),
            sessions: self.sessions.clone(),
            exporter: self.exporter.clone(),
            stats: self.stats.clone(),
            shutdown: self.shutdown.clone(),
        }
    }
}

impl<C: Counters> Context<C> {
    /// A tracker's shared state: its access list, client rules and (in private mode)
    /// its users and torrents loaded, statistics for its workers, a fresh shutdown flag.
    pub fn new<K: shoal_common::TrackerKind>(
        name: &str,
        config: &shoal_common::Config<K>,
        clock: Arc<Clock>,
        socket_workers: usize,
        swarm_gauges: usize,
    ) -> anyhow::Result<Self> {
        let peer_timeout = config.cleaning.peer_timeout;
        let access = AccessControl::from_config(&config.access_list).context(
            "cannot load the access list (access_list.path: a readable file of hex info \
                 hashes, one per line; or access_list.mode = \"off\")",
        )?;
        let clients = ClientRules::from_config(&config.clients)
            .map_err(|problem| anyhow::anyhow!("clients.{problem}"))?;
        let settings = &config.private;
        if settings.enabled && !settings.key_secret_path.as_os_str().is_empty() {
            let path = &settings.key_secret_path;
            let secret = shoal_common::read_bounded(path, 4096).with_context(|| {
                format!("cannot read private.key_secret_path {}", path.display())
            })?;
            let secret = shoal_private::secret_of_file(&secret);
            shoal_private::set_secret(secret)
                .map_err(|problem| anyhow::anyhow!("private.key_secret_path: {problem}"))?;
            log::info!(
                "{name}: private mode: stateless keys accepted (private.key_secret_path), secret \
                 fingerprint {} (the first 8 hex digits of its SHA-256)",
                shoal_private::fingerprint_hex(secret)
            );
        }
        let private = if settings.enabled {
            let registry = Registry::open(&settings.users_path, &settings.torrents_path)
                .context("cannot load private mode's users and torrents (private.users_path, private.torrents_path)")?;
            let (users, torrents) = registry.counts();
            // Trackers of one process naming the same files share one registry: the
            // first loads it, the others say they share it.
            if Arc::strong_count(&registry) > 1 {
                log::info!(
                    "{name}: private mode: {users} users, {torrents} torrents registered \
                     (the registry another tracker of this process loaded from the same files)"
                );
            } else {
                log::info!("{name}: private mode: {users} users, {torrents} torrents registered");
            }
            Some(registry)
        } else {
            None
        };
        let accounts = if settings.enabled && !settings.export_directory.as_os_str().is_empty() {
            // In a cluster the ledger's pairs are the store's, shared by every node.
            let shared = config
                .cluster
                .enabled()
                .then(|| Box::new(StorePairs::new(&config.cluster)) as shoal_private::SharedStore);
            if shared.is_some() {
                log::info!(
                    "{name}: accounting shared with the cluster's other nodes through {}",
                    config.cluster.store
                );
            }
            let accounts = Accounts::start_with(
                name,
                &settings.export_directory,
                shoal_private::AccountsSettings {
                    interval: std::time::Duration::from_secs(settings.export_interval.into()),
                    peer_timeout: peer_timeout.into(),
                    max_session_bytes: settings.max_session_bytes,
                    backlog_batches: settings.export_backlog as usize,
                    backlog_bytes: settings.export_backlog_bytes,
                    max_ledger_bytes: shoal_private::AccountsSettings::ledger_bytes_for(
                        config.capacity.max_peers,
                    ),
                },
                shared,
            )
            .context("cannot start the accounting thread")?;
            log::info!(
                "{name}: accounting batches every {} s into {}",
                settings.export_interval,
                settings.export_directory.display()
            );
            Some(accounts)
        } else {
            None
        };
        let exporter = match &accounts {
            Some(_) => start_exporter(name, settings)?,
            None => None,
        };
        let sessions = settings.enabled.then(|| {
            Arc::new(Sessions::new(
                peer_timeout,
                settings.min_interval,
                settings.peer_lists_per_minute,
            ))
        });
        let interval = AnnounceInterval::new(AnnounceInterval::settings_for(
            config,
            K::min_announce_interval(&config.protocol),
            K::interval_ceiling(&config.network),
        ));
        Ok(Self {
            clock,
            exporter,
            sessions,
            access: Arc::new(access),
            clients: Arc::new(clients),
            interval: Arc::new(interval),
            private,
            accounts,
            stats: WorkerStats::new(socket_workers, swarm_gauges),
            shutdown: Shutdown::new(),
        })
    }
}

/// Starts the exporter of private mode's batches when a target is configured.
fn start_exporter(
    name: &str,
    settings: &shoal_common::PrivateConfig,
) -> anyhow::Result<Option<Arc<Exporter>>> {
    let mut targets = ExportTargets::default();
    if !settings.export_url.is_empty() {
        let target = HttpTarget::parse(&settings.export_url)
            .map_err(|problem| anyhow::anyhow!("private.export_url: {problem}"))?;
        targets.http = Some(target);
    }
    if !settings.export_redis.is_empty() {
        let target = RedisTarget::parse(&settings.export_redis, &settings.export_redis_stream)
            .map_err(|problem| anyhow::anyhow!("private.export_redis: {problem}"))?;
        targets.redis = Some(target);
    }
    if !targets.any() {
        return Ok(None);
    }
    let exporter = Exporter::start(name, &settings.export_directory, targets)
        .context("cannot start the accounting exporter")?;
    let mut to = Vec::new();
    if !settings.export_url.is_empty() {
        to.push("the site's HTTP endpoint");
    }
    if !settings.export_redis.is_empty() {
        to.push("a Redis stream");
    }
    log::info!(
        "{name}: accounting batches exported to {}",
        to.join(" and ")
    );
    Ok(Some(exporter))
}
