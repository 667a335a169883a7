//! shoal_udp: a BEP 15 UDP BitTorrent tracker.
//!
//! # Layout
//!
//! ```text
//!             socket workers                              swarm workers (shoal_worker)
//!  datagram ─► socket::SocketWorker ─► socket::dispatch ──Job──► shard::UdpShard
//!              (recv, send)            parse, check id,          TorrentMap, encodes
//!                                      access list, route        replies into the job
//!  reply   ◄── send ◄──────────────────────────────────────Job──
//! ```
//!
//! Swarm worker threads, the local shard (`swarm_workers = 0`), outboxes and reply
//! routes are `shoal_worker`'s, shared with the other trackers.
//!
//! * `config`: every setting, documented once (printed by `-p`).
//! * `connection_id`: stateless, keyed-MAC connection ids.
//! * `messages`: the `Job` that carries a batch of requests to a swarm worker and the
//!   replies back, reusing its buffers; what both sides depend on.
//! * `socket`: socket workers — sockets, the event loop, per-datagram dispatch, and
//!   scrapes merged from several swarm workers.
//! * `shard`: the torrents of one swarm worker (`shoal_swarm`'s map) and how a job is
//!   served on them; `shoal_worker` runs it on a swarm worker thread, or inside the
//!   only socket worker when `swarm_workers = 0`.
//! * `stats`: counters and the periodic statistics line.
//! * `tracker`: binding, wiring and starting everything; [`run`] adds signals and
//!   privilege dropping for the binary.

mod config;
mod connection_id;
mod messages;
mod shard;
mod socket;
mod stats;
mod tracker;

/// Entry points for the fuzz targets (built only by cargo-fuzz, which sets
/// `--cfg fuzzing`).
#[cfg(fuzzing)]
#[doc(hidden)]
pub mod fuzzing {
    /// Feeds datagrams to a socket worker's dispatcher with real shards; see
    /// `fuzz/fuzz_targets/udp_dispatch.rs`.
    pub fn dispatch(data: &[u8]) {
        crate::socket::dispatch::rig::fuzz(data);
    }
}

use std::sync::Arc;

use shoal_common::AppInfo;
use shoal_swarm::Clock;

pub use config::{Config, File};
pub use tracker::{RunningTracker, prepare, start, start_with_clock};

/// How `shoal_udp` introduces itself.
pub const APP: AppInfo = AppInfo {
    name: "shoal_udp",
    version: env!("CARGO_PKG_VERSION"),
    about: "BEP 15 UDP BitTorrent tracker",
};

/// Runs the tracker until SIGTERM/SIGINT or a worker failure: binds, logs where it
/// listens, installs signal handlers (SIGUSR1 reloads the access list), drops
/// privileges if configured, then waits.
pub fn run(file: File) -> anyhow::Result<()> {
    let (process, config) = file.into_parts();
    shoal_process::run_until_stopped(&process, "UDP tracker", "udp", || {
        prepare(config, Arc::new(Clock::new()))
    })
}
