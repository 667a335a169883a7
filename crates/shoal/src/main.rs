//! `shoal`: every shoal tracker in one binary.
//!
//! ```text
//! shoal                  run every tracker with its built-in defaults
//! shoal udp [OPTIONS]    the UDP tracker, exactly as `shoal_udp [OPTIONS]`
//! shoal http [OPTIONS]   the HTTP(S) tracker, exactly as `shoal_http [OPTIONS]`
//! ```
//!
//! The WebTorrent tracker joins as `shoal ws` when it lands.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context as _;
use shoal_common::cli::run_cli_with_args;
use shoal_common::signals::{ReloadHook, spawn_signal_thread};
use shoal_common::{AppInfo, Shutdown, logging};

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

#[allow(clippy::print_stdout)] // help and version go to stdout
fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let Some(first) = args.next() else {
        return run_all_with_defaults();
    };
    match first.to_string_lossy().as_ref() {
        "udp" => run_cli_with_args::<shoal_udp::Config>(&UDP, args, shoal_udp::run),
        "http" => run_cli_with_args::<shoal_http::Config>(&HTTP, args, shoal_http::run),
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
                         0.0.0.0:6969 and [::]:6969, HTTP on the same TCP ports.
  shoal udp [OPTIONS]    Run the UDP tracker (BEP 15).
  shoal http [OPTIONS]   Run the HTTP/HTTPS tracker (BEP 3, 7, 23, 48).
  shoal --version        Print the version.

`shoal udp --help` and `shoal http --help` list the options: -c FILE, -p, -P, ...
Configure a tracker: `shoal udp -p > udp.toml`, edit, then `shoal udp -c udp.toml`.
"
    )
}

fn run_all_with_defaults() -> ExitCode {
    let udp = shoal_udp::Config::default();
    let http = shoal_http::Config::default();
    logging::init(udp.log_level);
    log::info!("shoal {VERSION}: no command given, running every tracker with built-in defaults");
    match run_all(udp, http) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            log::error!("{err:#}");
            eprintln!("shoal: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the UDP and HTTP trackers in one process: one signal thread (SIGTERM stops
/// both, SIGUSR1 reloads both), and if either fails, both stop and the process fails.
fn run_all(udp_config: shoal_udp::Config, http_config: shoal_http::Config) -> anyhow::Result<()> {
    let udp = shoal_udp::start(udp_config).context("UDP tracker")?;
    let http = shoal_http::start(http_config).context("HTTP tracker")?;
    for addr in udp.local_addrs() {
        log::info!("listening on udp://{addr}");
    }
    for addr in http.local_addrs() {
        log::info!("listening on http://{addr}");
    }
    let everything = Shutdown::new();
    for tracker_shutdown in [
        udp.shutdown_handle().clone(),
        http.shutdown_handle().clone(),
    ] {
        everything.on_request(move || tracker_shutdown.request());
    }
    let udp_access = Arc::clone(udp.access_control());
    let http_access = Arc::clone(http.access_control());
    let hooks: Vec<ReloadHook> = vec![
        Box::new(move || udp_access.reload_and_log("udp")),
        Box::new(move || http_access.reload_and_log("http")),
    ];
    spawn_signal_thread(everything.clone(), hooks)?;

    // Whichever tracker stops first (shutdown or failure) stops the other.
    let (done, finished) = std::sync::mpsc::channel();
    let udp_done = done.clone();
    let udp_everything = everything.clone();
    std::thread::Builder::new()
        .name("udp-main".into())
        .spawn(move || {
            let result = udp.wait();
            udp_everything.request();
            let _ = udp_done.send(result.context("UDP tracker"));
        })?;
    let http_everything = everything.clone();
    std::thread::Builder::new()
        .name("http-main".into())
        .spawn(move || {
            let result = http.wait();
            http_everything.request();
            let _ = done.send(result.context("HTTP tracker"));
        })?;
    let first = finished.recv().context("a tracker thread vanished")?;
    let second = finished.recv().context("a tracker thread vanished")?;
    first.and(second)
}
