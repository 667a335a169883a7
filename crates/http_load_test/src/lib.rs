//! shoal_http_load_test: load for any HTTP or HTTPS BitTorrent tracker, measured.
//!
//! # Layout
//!
//! * `config`: what to send, over how many connections, for how long.
//! * `requests`: announce and scrape requests over the shared simulated population.
//! * `worker`: non-blocking connections (plain or TLS), one request in flight each.
//! * `tls`: a client config that accepts self-signed certificates.
//! * `stats`: counters, progress lines and the summary (text or JSON).

mod config;
mod requests;
mod stats;
mod tls;
mod worker;

use std::sync::Arc;

use shoal_common::{AppInfo, Shutdown};

pub use config::Config;
use shoal_load_test_common::run_workers;
use stats::Summary;
use worker::Worker;

/// How `shoal_http_load_test` introduces itself.
pub const APP: AppInfo = AppInfo {
    name: "shoal_http_load_test",
    version: env!("CARGO_PKG_VERSION"),
    about: "load tester for HTTP/HTTPS BitTorrent trackers",
};

/// Runs a load test until its duration ends or `shutdown` is requested; returns the
/// summary of its last `summarize_last` seconds.
pub fn run_until(config: Config, shutdown: Shutdown) -> anyhow::Result<Summary> {
    let population = Arc::new(requests::population(&config));
    log::info!(
        "loading {} over {} connection(s) ({}, keep-alive {})",
        config.server_address,
        config.connections,
        if config.network.tls { "HTTPS" } else { "HTTP" },
        if config.network.keep_alive {
            "on"
        } else {
            "off"
        }
    );
    run_workers(
        config.shape(),
        shutdown.clone(),
        |index, counters, latency| {
            // Spread connections evenly; the first workers take the remainder.
            let connections = config.connections / config.workers
                + usize::from(index < config.connections % config.workers);
            let worker = Worker::new(
                index,
                connections,
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
        crate::requests::population(self).write_info_hashes(&mut out)
    }

    type Summary = Summary;

    fn run_until(self, shutdown: Shutdown) -> anyhow::Result<Summary> {
        run_until(self, shutdown)
    }
}
