//! shoal_http: a BitTorrent tracker over HTTP and HTTPS (BEP 3, 7, 23, 48).
//!
//! # Layout
//!
//! ```text
//!   TCP ─► socket::connection (glommio task per connection: read, parse, answer, write)
//!               │  socket::router: batch per swarm worker, slot per pending request
//!               ▼
//!          crossbeam channel ─► swarm_worker (thread, TorrentMap shard) ─┐
//!               ▲                                                          │
//!   reply pump ◄┴──────────── crossbeam channel + socket-pair wake-up ◄───┘
//! ```
//!
//! * [`config`]: every setting, documented once (printed by `-p`).
//! * [`socket`]: socket workers (glommio executors): accepting, connections, TLS,
//!   routing requests to swarm workers and their replies back.
//! * [`swarm_worker`]: swarm workers, one shard of torrents each (`shoal_swarm`).
//! * [`stats`]: counters and the statistics line.
//! * [`tracker`]: binding, wiring and starting; [`run`] adds signals and privileges.

pub mod config;
pub mod messages;
pub mod socket;
pub mod stats;
pub mod swarm_worker;
pub mod tracker;

use std::sync::Arc;

use anyhow::Context as _;
use shoal_common::AppInfo;
use shoal_common::signals::{ReloadHook, spawn_signal_thread};

pub use config::Config;
pub use tracker::{RunningTracker, start, start_with_clock};

/// How `shoal_http` introduces itself.
pub const APP: AppInfo = AppInfo {
    name: "shoal_http",
    version: env!("CARGO_PKG_VERSION"),
    about: "HTTP/HTTPS BitTorrent tracker (BEP 3, 7, 23, 48)",
};

/// Runs the tracker until SIGTERM/SIGINT or a worker failure. SIGUSR1 reloads the
/// access list and the TLS certificate.
pub fn run(config: Config) -> anyhow::Result<()> {
    let privileges = config.privileges.clone();
    let scheme = if config.network.enable_tls {
        "https"
    } else {
        "http"
    };
    let path = config.protocol.announce_path.clone();
    let tracker = start(config)?;
    for addr in tracker.local_addrs() {
        log::info!("listening on {scheme}://{addr} (announce at {scheme}://{addr}{path})");
    }
    let access = Arc::clone(tracker.access_control());
    let mut hooks: Vec<ReloadHook> = vec![Box::new(move || access.reload_and_log("http"))];
    if let Some(tls) = tracker.tls() {
        let tls = Arc::clone(tls);
        hooks.push(Box::new(move || tls.reload_and_log()));
    }
    spawn_signal_thread(tracker.shutdown_handle().clone(), hooks)?;
    shoal_common::privileges::drop_privileges(&privileges).context("cannot drop privileges")?;
    tracker.wait()
}
