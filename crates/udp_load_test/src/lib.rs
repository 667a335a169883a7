//! shoal_udp_load_test: load for any BEP 15 UDP tracker, measured.
//!
//! # Layout
//!
//! * `config`: what to send, how hard, for how long.
//! * `requests`: the request writer over the simulated torrents and peers
//!   (`shoal_load_test_common` holds the population and the reporting loop).
//! * `worker`: sockets with a window of requests in flight, batched system calls.
//! * `stats`: counters, progress lines and the summary (text or JSON).
//!
//! The load tester is built to cost less CPU per request than the trackers it loads:
//! requests are written into one buffer and sent with `sendmmsg`, replies read with
//! `recvmmsg` and classified from their first bytes, nothing is allocated per request.

mod config;
mod requests;
mod stats;
mod worker;

use std::sync::Arc;
use std::time::Instant;

use shoal_common::{AppInfo, Shutdown};

pub use config::{Config, PeerOrder};
use shoal_load_test_common::Population;
use shoal_load_test_common::run_workers;
use stats::Summary;
use worker::Worker;

/// How `shoal_udp_load_test` introduces itself.
pub const APP: AppInfo = AppInfo {
    name: "shoal_udp_load_test",
    version: env!("CARGO_PKG_VERSION"),
    about: "load tester for BEP 15 UDP BitTorrent trackers",
};

/// Runs a load test until its duration ends or `shutdown` is requested, and returns
/// the summary of its last `summarize_last` seconds.
pub fn run_until(config: Config, shutdown: Shutdown) -> anyhow::Result<Summary> {
    let started = Instant::now();
    let population: Arc<Population> = Arc::new(requests::population(&config.requests));
    log::info!(
        "{} torrents and {} peers ready in {:.1} s; loading {} with {} worker(s) × {} socket(s)",
        config.requests.torrents,
        config.requests.peers,
        started.elapsed().as_secs_f64(),
        config.server_address,
        config.workers,
        config.network.sockets_per_worker
    );
    run_workers(
        config.shape(),
        shutdown.clone(),
        |index, counters, latency| {
            let worker = Worker::new(
                index,
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
        crate::requests::population(&self.requests).write_info_hashes(&mut out)
    }

    type Summary = Summary;

    fn run_until(self, shutdown: Shutdown) -> anyhow::Result<Summary> {
        run_until(self, shutdown)
    }
}
