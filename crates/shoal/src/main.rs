//! `shoal`: every shoal tracker in one binary.
//!
//! ```text
//! shoal                 run every tracker with its built-in defaults
//! shoal udp [OPTIONS]   the UDP tracker, exactly as `shoal_udp [OPTIONS]`
//! ```
//!
//! The HTTP and WebTorrent trackers join as `shoal http` and `shoal ws` when they land.

use std::process::ExitCode;

use shoal_common::cli::run_cli_with_args;
use shoal_common::{AppInfo, logging};

const VERSION: &str = env!("CARGO_PKG_VERSION");

const UDP: AppInfo = AppInfo {
    name: "shoal udp",
    version: VERSION,
    about: shoal_udp::APP.about,
};

#[allow(clippy::print_stdout)] // help and version go to stdout
fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let Some(first) = args.next() else {
        return run_all_with_defaults();
    };
    match first.to_string_lossy().as_ref() {
        "udp" => run_cli_with_args::<shoal_udp::Config>(&UDP, args, shoal_udp::run),
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
  shoal                  Run every tracker with its built-in defaults
                         (UDP on 0.0.0.0:6969 and [::]:6969).
  shoal udp [OPTIONS]    Run the UDP tracker (BEP 15). `shoal udp --help` lists
                         the options: -c FILE, -p, -P, ...
  shoal --version        Print the version.

Configure a tracker: `shoal udp -p > udp.toml`, edit, then `shoal udp -c udp.toml`.
"
    )
}

fn run_all_with_defaults() -> ExitCode {
    let config = shoal_udp::Config::default();
    logging::init(config.log_level);
    log::info!("shoal {VERSION}: no command given, running every tracker with built-in defaults");
    match shoal_udp::run(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            log::error!("{err:#}");
            eprintln!("shoal: {err:#}");
            ExitCode::FAILURE
        }
    }
}
