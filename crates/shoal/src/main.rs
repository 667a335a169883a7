//! `shoal`: every shoal tracker in one binary.
//!
//! ```text
//! shoal                  run every tracker with its built-in defaults
//! shoal -c shoal.toml    run every enabled tracker of one config file
//! shoal -p / -P          print the default / effective config
//! shoal udp [OPTIONS]    the UDP tracker, exactly as `shoal_udp [OPTIONS]`
//! shoal http [OPTIONS]   the HTTP(S) tracker, exactly as `shoal_http [OPTIONS]`
//! shoal ws [OPTIONS]     the WebTorrent tracker, exactly as `shoal_ws [OPTIONS]`
//! shoal health [-c FILE] ask a running shoal's monitoring endpoint for /health
//! shoal check-host [-c FILE]  is this host set up for a busy tracker of that config?
//! ```

mod check_host;
mod config;
mod health;

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use shoal_common::{AppInfo, load_cli_config, run_cli_with_args};
use shoal_swarm::Clock;

use crate::config::{SectionParts as _, ShoalConfig};

const VERSION: &str = env!("CARGO_PKG_VERSION");

const SHOAL: AppInfo = AppInfo {
    name: "shoal",
    version: VERSION,
    about: "the UDP, HTTP(S) and WebTorrent trackers in one process",
};
const UDP: AppInfo = AppInfo {
    name: "shoal udp",
    version: VERSION,
    about: shoal_udp::APP.about,
};
const HTTP: AppInfo = AppInfo {
    name: "shoal http",
    version: VERSION,
    about: shoal_http::APP.about,
};
const CHECK_HOST: AppInfo = AppInfo {
    name: "shoal check-host",
    version: VERSION,
    about: "is this host set up for a busy tracker of this config?",
};
const HEALTH: AppInfo = AppInfo {
    name: "shoal health",
    version: VERSION,
    about: "ask a running shoal whether every tracker is healthy",
};
const WS: AppInfo = AppInfo {
    name: "shoal ws",
    version: VERSION,
    about: shoal_ws::APP.about,
};

#[allow(clippy::print_stdout)] // help goes to stdout
fn main() -> ExitCode {
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    let first = args.first().map(|arg| arg.to_string_lossy().into_owned());
    let rest = args.iter().skip(1).cloned();
    match first.as_deref() {
        Some("udp") => run_cli_with_args::<shoal_udp::File>(&UDP, rest, shoal_udp::run),
        Some("http") => run_cli_with_args::<shoal_http::File>(&HTTP, rest, shoal_http::run),
        Some("ws") => run_cli_with_args::<shoal_ws::File>(&WS, rest, shoal_ws::run),
        Some("check-host") => {
            match load_cli_config::<ShoalConfig>(&CHECK_HOST, check_host::USAGE, rest) {
                Ok(config) => check_host::run(&config),
                Err(status) => status,
            }
        }
        Some("health") => match load_cli_config::<ShoalConfig>(&HEALTH, health::USAGE, rest) {
            Ok(config) => health::run(&config.process().metrics),
            Err(status) => status,
        },
        Some("-h" | "--help" | "help") => {
            print!("{}", usage());
            ExitCode::SUCCESS
        }
        Some(other) if !other.starts_with('-') => {
            eprintln!("shoal: unknown command {other:?}\n\n{}", usage());
            ExitCode::from(2)
        }
        _ => run_cli_with_args::<ShoalConfig>(&SHOAL, args, run_all),
    }
}

fn usage() -> String {
    let others: Vec<String> = shoal_common::config_sections::<ShoalConfig>()
        .into_iter()
        .filter(|section| !["[udp]", "[http]", "[ws]"].contains(&section.as_str()))
        .collect();
    let sections = shoal_common::wrap(
        &format!(
            "Load the configuration from FILE (TOML): one section per tracker ([udp], \
             [http], [ws]), each can be disabled, plus {}.",
            others.join(", ")
        ),
        31,
    );
    let signals = shoal_common::wrap(shoal_common::RELOAD_SIGNALS_HELP, 0);
    format!(
        "shoal {VERSION}: BitTorrent trackers

Usage:
  shoal [OPTIONS]        Run every enabled tracker in one process. With no config
                         file: UDP on 0.0.0.0:6969 and [::]:6969, HTTP on the same
                         TCP ports, WebTorrent (ws://) on TCP port 8000.
  shoal udp [OPTIONS]    Run the UDP tracker (BEP 15) alone.
  shoal http [OPTIONS]   Run the HTTP/HTTPS tracker (BEP 3, 7, 23, 48) alone.
  shoal ws [OPTIONS]     Run the WebTorrent tracker (ws and wss) alone.
  shoal health [-c FILE] Ask the running shoal's monitoring endpoint ([metrics])
                         for /health: exit 0 when every tracker is healthy (for
                         container health checks; `shoal health --help`).
  shoal check-host [-c FILE]
                         Check this host for a busy tracker of that config:
                         buffer ceilings, conntrack, locked memory, open files,
                         io_uring, CPUs; each finding with its fix.

Options:
  -c, --config FILE            {sections}
  -p, --print-default-config   Print the default configuration with every key
                               documented, then exit: `shoal -p > shoal.toml`.
  -P, --print-config           Print the configuration that would be used, then exit.
  -V, --version                Print the version and exit.
  -h, --help                   Print this help and exit.

Environment: SHOAL__SECTION__KEY=value overrides a key of the file, e.g.
SHOAL__UDP__NETWORK__ADDRESS_IPV4=0.0.0.0:6969 or SHOAL__WS__ENABLED=false;
SHOAL_LOG=LEVEL or SHOAL_LOG=info,module=debug overrides the log level.
{signals}
`shoal udp --help` (and http, ws) lists one tracker's options.
"
    )
}

/// Runs every enabled tracker of `config` in this process: one signal thread, one
/// monitoring endpoint, privileges dropped once every tracker is bound, and if any
/// tracker fails, all stop and the process fails.
fn run_all(config: ShoalConfig) -> anyhow::Result<()> {
    let (process, trackers) = config.into_parts();
    let clock = Arc::new(Clock::new());
    shoal_process::run_trackers(&process, || {
        // A tracker's errors name its keys as in its own binary's config
        // (`network.address_ipv4`); the context says which section they are under here.
        let mut all = Vec::new();
        if trackers.udp.enabled() {
            let udp = shoal_udp::prepare(trackers.udp.into_tracker(), clock.clone())
                .context("UDP tracker (under [udp] in the config)")?;
            all.push(udp.named("UDP tracker", "udp"));
        }
        if trackers.http.enabled() {
            let http = shoal_http::prepare(trackers.http.into_tracker(), clock.clone())
                .context("HTTP tracker (under [http] in the config)")?;
            all.push(http.named("HTTP tracker", "http"));
        }
        if trackers.ws.enabled() {
            let ws = shoal_ws::prepare(trackers.ws.into_tracker(), clock)
                .context("WebTorrent tracker (under [ws] in the config)")?;
            all.push(ws.named("WebTorrent tracker", "ws"));
        }
        Ok(all)
    })
}
