//! shoal_ws: a WebTorrent tracker over WebSocket (ws and wss).
//!
//! Browsers announce over a WebSocket and send WebRTC offers with their announces;
//! the tracker forwards each offer to a random other peer of the swarm and relays
//! that peer's answer back, after which the browsers talk directly.
//!
//! # Layout
//!
//! ```text
//!   TCP ─► socket::connection (glommio task per connection: upgrade, frames, JSON)
//!               │  socket::router: batch per swarm worker
//!               ▼
//!          crossbeam channel ─► swarm_worker (thread, swarm::Swarms shard) ─┐
//!               ▲                                                            │
//!   connection queues ◄── reply inbox ◄── channel + socket-pair wake-up ◄────┘
//! ```
//!
//! * [`config`]: every setting, documented once (printed by `-p`).
//! * [`socket`]: socket workers (glommio executors): accepting, the opening HTTP
//!   request, WebSocket framing (tungstenite), per-connection limits and queues.
//! * [`swarm`]: peers by peer id, offer forwarding and answer checks; no I/O.
//! * [`swarm_worker`]: swarm worker threads, one shard of torrents each.
//! * [`messages`]: what socket and swarm workers send each other.
//! * [`stats`]: counters and the statistics line.
//! * [`tracker`]: binding, wiring and starting; [`run`] adds signals and privileges.

pub mod config;
pub mod messages;
pub mod socket;
pub mod stats;
pub mod swarm;
pub(crate) mod swarm_worker;
pub mod tracker;

use std::sync::Arc;

use anyhow::Context as _;
use shoal_common::AppInfo;
use shoal_common::signals::{ReloadHook, spawn_signal_thread};

pub use config::Config;
pub use tracker::{RunningTracker, start, start_with_clock};

/// How `shoal_ws` introduces itself.
pub const APP: AppInfo = AppInfo {
    name: "shoal_ws",
    version: env!("CARGO_PKG_VERSION"),
    about: "WebTorrent tracker (ws and wss) with WebRTC offer/answer relay",
};

/// Runs the tracker until SIGTERM/SIGINT or a worker failure. SIGUSR1 reloads the
/// access list and the TLS certificate.
pub fn run(config: Config) -> anyhow::Result<()> {
    let privileges = config.privileges.clone();
    let tracker = start(config)?;
    tracker.log_addresses();
    let access = Arc::clone(tracker.access_control());
    let mut hooks: Vec<ReloadHook> = vec![Box::new(move || access.reload_and_log("ws"))];
    if let Some(tls) = tracker.tls() {
        let tls = Arc::clone(tls);
        hooks.push(Box::new(move || tls.reload_and_log()));
    }
    spawn_signal_thread(tracker.shutdown_handle().clone(), hooks)?;
    shoal_common::privileges::drop_privileges(&privileges).context("cannot drop privileges")?;
    tracker.wait()
}
