//! shoal_ws: a WebTorrent tracker over WebSocket (ws and wss).
//!
//! Browsers announce over a WebSocket and send WebRTC offers with their announces;
//! the tracker forwards each offer to a random other peer of the swarm and relays
//! that peer's answer back, after which the browsers talk directly.
//!
//! # Layout
//!
//! ```text
//!   TCP ─► socket::connection (a task per connection: drives a session::Session)
//!               │  socket::router: batch per swarm worker
//!               ▼
//!          crossbeam channel ─► shard::WsShard (on a swarm worker thread) ─┐
//!               ▲                                                           │
//!   connection queues ◄── reply inbox ◄── channel + socket-pair wake-up ◄──┘
//! ```
//!
//! Executors, accept loops, the connection limit, TLS, swarm worker threads and the
//! start-up are `shoal_worker`'s and `shoal_tcp`'s, shared with the HTTP tracker; peers are stored in
//! `shoal_swarm` like every tracker's. This crate is the WebTorrent protocol: the
//! upgrade, messages, and offer/answer bookkeeping.
//!
//! * `config`: the WebTorrent sections of the config, documented once (`-p`).
//! * `session`: a connection's rules after its opening request, without I/O
//!   (sans-IO): fed bytes, queued messages and the time, it says write, wait or
//!   close; WebSocket framing (`shoal_ws_protocol::frames`, in the worker's read
//!   buffer, no buffer per idle connection), per-connection
//!   limits; unit-tested and fuzzed (`ws_session`) without sockets.
//! * `queue`: what waits for one connection (its messages, limited in number and
//!   bytes) and the byte budgets a socket worker's queues share; held by the session
//!   and the router alike.
//! * `socket`: the opening HTTP request, the driver of each session on the socket
//!   worker's executor, the router to swarm workers, and `WsTracker`, what makes
//!   WebTorrent a `shoal_tcp` TCP tracker.
//! * `shard`: the torrents of one swarm worker: peers by peer id (owned by their connection), offer
//!   forwarding and answer checks; no I/O.
//! * `messages`: what socket and swarm workers send each other; both depend on it.
//! * `nodes`: what nodes of a cluster send each other (peer changes, relayed offers
//!   and answers), as bytes.
//! * `origins`: the Origin rules (which web pages may connect) and per-Origin
//!   connection caps every socket worker shares, reloaded on SIGUSR1.
//! * `stats`: counters and the statistics line.
//! * `tracker`: starting the WebTorrent tracker on the shared TCP start-up; [`run`]
//!   adds signals and privileges.

mod config;
mod messages;
mod nodes;
mod origins;
mod queue;
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
    /// `fuzz/fuzz_targets/ws_session.rs`.
    pub fn ws_session(data: &[u8]) {
        crate::session::rig::fuzz(data);
    }

    /// `fuzz/fuzz_targets/ws_cluster.rs`.
    pub fn ws_cluster(data: &[u8]) {
        crate::shard::fuzz_cluster(data);
    }
}

/// How `shoal_ws` introduces itself.
pub const APP: AppInfo = AppInfo {
    name: "shoal_ws",
    version: env!("CARGO_PKG_VERSION"),
    about: "WebTorrent tracker (ws and wss) with WebRTC offer/answer relay",
};

/// Runs the tracker until SIGTERM/SIGINT or a worker failure. SIGUSR1 reloads the
/// access list, the origin rules and the TLS certificate.
pub fn run(file: File) -> anyhow::Result<()> {
    let (process, config) = file.into_parts();
    shoal_process::run_until_stopped(&process, "WebTorrent tracker", "ws", || {
        prepare(config, Arc::new(Clock::new()))
    })
}
