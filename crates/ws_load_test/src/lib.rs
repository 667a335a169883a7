//! shoal_ws_load_test: load for any WebTorrent (ws or wss) tracker, measured.
//!
//! Each connection plays one browser: it upgrades to WebSocket, announces in its
//! torrents with WebRTC offers, answers the offers the tracker forwards from other
//! connections, and sometimes scrapes. What comes back is counted by kind, and the
//! summary reports it per second.
//!
//! # Layout
//!
//! * `config`: what to send, over how many connections, how fast, for how long.
//! * `messages`: the simulated browsers and the JSON they send (reused templates).
//! * `replies`: what a message from the tracker is, and its counter.
//! * `flow`: requests in flight, fixed-rate schedules and reply timeouts; no I/O.
//! * `handshake`: the client side of the WebSocket upgrade.
//! * `transport`: a non-blocking TCP or TLS connection as a byte stream.
//! * `connection`: one connection's life: upgrade, tungstenite framing, requests,
//!   answers.
//! * `worker`: a thread's connections over epoll, reconnects with back-off.
//! * `stats`: counters, progress lines and the summary (text or JSON).

mod config;
mod connection;
mod flow;
mod handshake;
mod messages;
mod replies;
mod stats;
mod transport;
mod worker;

use std::sync::Arc;

use shoal_common::{AppInfo, Shutdown};

pub use config::Config;
use shoal_load_test_common::run_workers;
pub use stats::Summary;
use worker::Worker;

/// How `shoal_ws_load_test` introduces itself.
pub const APP: AppInfo = AppInfo {
    name: "shoal_ws_load_test",
    version: env!("CARGO_PKG_VERSION"),
    about: "load tester for WebTorrent (ws/wss) trackers",
};

/// Runs a load test until its duration ends or `shutdown` is requested; returns the
/// summary of its last `summarize_last` seconds.
pub fn run_until(config: Config, shutdown: Shutdown) -> anyhow::Result<Summary> {
    let population = Arc::new(messages::population(&config));
    let id_base = messages::peer_id_base();
    log::info!(
        "loading {}://{}{} over {} connection(s) in {} worker(s), {}",
        if config.network.tls { "wss" } else { "ws" },
        config.server_address,
        config.network.path,
        config.total_connections(),
        config.workers,
        match config.send_period() {
            Some(_) => format!("{} requests/s per connection", config.requests.rate),
            None => format!(
                "{} request(s) in flight per connection",
                config.requests.in_flight
            ),
        }
    );
    run_workers(
        config.shape(),
        shutdown.clone(),
        |index, counters, latency| {
            let worker = Worker::new(
                index,
                id_base,
                &config,
                population.clone(),
                counters,
                latency,
                shutdown.clone(),
            )?;
            Ok(move || worker.run())
        },
    )
}

impl shoal_load_test_common::LoadTester for Config {
    fn summary_format(&mut self) -> &mut shoal_load_test_common::SummaryFormat {
        &mut self.summary_format
    }

    fn write_info_hashes(&self, mut out: &mut dyn std::io::Write) -> std::io::Result<()> {
        crate::messages::population(self).write_info_hashes(&mut out)
    }

    type Summary = Summary;

    fn run_until(self, shutdown: Shutdown) -> anyhow::Result<Summary> {
        run_until(self, shutdown)
    }
}
