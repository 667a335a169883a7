//! `shoal`: every shoal tracker in one binary.
//!
//! ```text
//! shoal                  run every tracker with its built-in defaults
//! shoal udp [OPTIONS]    the UDP tracker, exactly as `shoal_udp [OPTIONS]`
//! shoal http [OPTIONS]   the HTTP(S) tracker, exactly as `shoal_http [OPTIONS]`
//! shoal ws [OPTIONS]     the WebTorrent tracker, exactly as `shoal_ws [OPTIONS]`
//! ```

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use shoal_common::cli::run_cli_with_args;
use shoal_common::metrics::Counters;
use shoal_common::signals::{ReloadHook, SignalThread};
use shoal_common::{AppInfo, Shutdown, logging};
use shoal_runtime::Prepared;
use shoal_swarm::Clock;

const VERSION: &str = env!("CARGO_PKG_VERSION");

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
const WS: AppInfo = AppInfo {
    name: "shoal ws",
    version: VERSION,
    about: shoal_ws::APP.about,
};

#[allow(clippy::print_stdout)] // help and version go to stdout
fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let Some(first) = args.next() else {
        return run_all_with_defaults();
    };
    match first.to_string_lossy().as_ref() {
        "udp" => run_cli_with_args::<shoal_udp::Config>(&UDP, args, shoal_udp::run),
        "http" => run_cli_with_args::<shoal_http::Config>(&HTTP, args, shoal_http::run),
        "ws" => run_cli_with_args::<shoal_ws::Config>(&WS, args, shoal_ws::run),
        "-h" | "--help" | "help" => {
            print!("{}", usage());
            ExitCode::SUCCESS
        }
        "-V" | "--version" => {
            println!("shoal {VERSION}");
            ExitCode::SUCCESS
        }
        other => {
            eprintln!("shoal: unknown command {other:?}\n\n{}", usage());
            ExitCode::from(2)
        }
    }
}

fn usage() -> String {
    format!(
        "shoal {VERSION}: BitTorrent trackers

Usage:
  shoal                  Run every tracker with its built-in defaults: UDP on
                         0.0.0.0:6969 and [::]:6969, HTTP on the same TCP ports,
                         WebTorrent (ws://) on TCP port 8000.
  shoal udp [OPTIONS]    Run the UDP tracker (BEP 15).
  shoal http [OPTIONS]   Run the HTTP/HTTPS tracker (BEP 3, 7, 23, 48).
  shoal ws [OPTIONS]     Run the WebTorrent tracker (ws and wss).
  shoal --version        Print the version.

`shoal udp --help` (and http, ws) lists the options: -c FILE, -p, -P, ...
Configure a tracker: `shoal udp -p > udp.toml`, edit, then `shoal udp -c udp.toml`.
"
    )
}

fn run_all_with_defaults() -> ExitCode {
    let udp = shoal_udp::Config::default();
    logging::init(udp.log_level);
    log::info!("shoal {VERSION}: no command given, running every tracker with built-in defaults");
    match run_all(
        udp,
        shoal_http::Config::default(),
        shoal_ws::Config::default(),
    ) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            log::error!("{err:#}");
            eprintln!("shoal: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// A started tracker, seen from the combined binary.
struct Started {
    name: &'static str,
    shutdown: Shutdown,
    reload: Vec<ReloadHook>,
    wait: Box<dyn FnOnce() -> anyhow::Result<()> + Send>,
}

impl Started {
    fn serve<C, E>(name: &'static str, prepared: Prepared<C, E>) -> anyhow::Result<Self>
    where
        C: Counters + 'static,
        E: Send + 'static,
    {
        let tracker = prepared.serve().context(name)?;
        Ok(Self {
            name,
            shutdown: tracker.shutdown_handle().clone(),
            reload: tracker.reload_hooks(),
            wait: Box::new(move || tracker.wait()),
        })
    }
}

/// Runs the UDP, HTTP and WebTorrent trackers in one process: one signal thread
/// (SIGTERM stops all, SIGUSR1 reloads all) from the first moment, every tracker bound
/// before privileges are dropped and before any serves, and if any fails, all stop and
/// the process fails.
fn run_all(
    udp_config: shoal_udp::Config,
    http_config: shoal_http::Config,
    ws_config: shoal_ws::Config,
) -> anyhow::Result<()> {
    let everything = Shutdown::new();
    let signals = SignalThread::start(everything.clone())?;
    let clock = Arc::new(Clock::new());
    let udp = shoal_udp::prepare(udp_config, clock.clone()).context("UDP tracker")?;
    let http = shoal_http::prepare(http_config, clock.clone()).context("HTTP tracker")?;
    let ws = shoal_ws::prepare(ws_config, clock).context("WebTorrent tracker")?;
    udp.log_addresses();
    http.log_addresses();
    ws.log_addresses();
    let started = vec![
        Started::serve("UDP tracker", udp)?,
        Started::serve("HTTP tracker", http)?,
        Started::serve("WebTorrent tracker", ws)?,
    ];

    let (done, finished) = std::sync::mpsc::channel();
    let mut waiting = Vec::new();
    for tracker in started {
        let shutdown = tracker.shutdown;
        everything.on_request(move || shutdown.request());
        signals.add_reloads(tracker.reload);
        waiting.push((tracker.name, tracker.wait));
    }

    // Whichever tracker stops first (shutdown or failure) stops the others.
    let count = waiting.len();
    for (name, wait) in waiting {
        let (done, everything) = (done.clone(), everything.clone());
        std::thread::Builder::new()
            .name(format!("{}-main", name.split(' ').next().unwrap_or(name)))
            .spawn(move || {
                let result = wait();
                everything.request();
                let _ = done.send(result.context(name));
            })?;
    }
    let mut outcome = Ok(());
    for _ in 0..count {
        let result = finished.recv().context("a tracker thread vanished")?;
        outcome = outcome.and(result);
    }
    outcome
}
