//! shoal_http: a BitTorrent tracker over HTTP and HTTPS (BEP 3, 7, 23, 48).
//!
//! # Layout
//!
//! ```text
//!   TCP ─► socket::connection (a task per connection: drives a session::Session)
//!               │  socket::router: batch per swarm worker, typed table per pending call
//!               ▼
//!          crossbeam channel ─► shard (HttpShard on a swarm worker thread) ─┐
//!               ▲                                                             │
//!   reply pump ◄┴─────────── crossbeam channel + socket-pair wake-up ◄───────┘
//! ```
//!
//! Executors, accept loops, the connection limit, TLS, swarm worker threads and the
//! start-up are `shoal_worker`'s and `shoal_tcp`'s, shared with the WebTorrent tracker; this crate is
//! the HTTP protocol and its shard.
//!
//! * `config`: the HTTP sections of the config, documented once (printed by `-p`).
//! * `session`: a connection's rules without I/O (sans-IO): fed bytes, swarm workers'
//!   answers and the time, it says read, ask, write or close; unit-tested and fuzzed
//!   (`http_session`) without sockets.
//! * `socket`: the driver of each session on the socket worker's executor, the router that batches
//!   requests to swarm workers and matches their replies to typed calls, and
//!   `HttpTracker`, what makes HTTP a `shoal_tcp` TCP tracker.
//! * `shard`: the torrents of one swarm worker (`shoal_swarm`) and how a request is
//!   answered on them; with `swarm_workers = 0` the only socket worker keeps it.
//! * `messages`: what socket and swarm workers send each other; both depend on it.
//! * `stats`: counters and the statistics line.
//! * `tracker`: starting the HTTP tracker on the shared TCP start-up; [`run`] adds
//!   signals and privileges.

mod config;
mod messages;
mod session;
mod shard;
mod socket;
mod stats;
mod tracker;

use std::sync::Arc;

use shoal_common::AppInfo;
use shoal_swarm::Clock;

pub use config::{Config, File};
pub use tracker::{RunningTracker, prepare, start, start_with_clock};

/// Entry points for the fuzz targets (built only by cargo-fuzz, which sets
/// `--cfg fuzzing`).
#[cfg(fuzzing)]
#[doc(hidden)]
pub mod fuzzing {
    /// `fuzz/fuzz_targets/http_session.rs`.
    pub fn http_session(data: &[u8]) {
        crate::session::rig::fuzz(data);
    }
}

/// How `shoal_http` introduces itself.
pub const APP: AppInfo = AppInfo {
    name: "shoal_http",
    version: env!("CARGO_PKG_VERSION"),
    about: "HTTP/HTTPS BitTorrent tracker (BEP 3, 7, 23, 48)",
};

/// Runs the tracker until SIGTERM/SIGINT or a worker failure. SIGUSR1 reloads the
/// access list and the TLS certificate.
pub fn run(file: File) -> anyhow::Result<()> {
    let (process, config) = file.into_parts();
    shoal_process::run_until_stopped(&process, "HTTP tracker", "http", || {
        prepare(config, Arc::new(Clock::new()))
    })
}
