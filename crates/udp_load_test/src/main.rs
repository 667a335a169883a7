//! The `shoal_udp_load_test` binary: the shared CLI plus two flags of its own.
//!
//! * `--json`: print the summary as one JSON object.
//! * `--print-info-hashes`: print the run's info hashes (40 hex characters per line,
//!   the access-list format of shoal and opentracker) instead of running, so that a
//!   tracker with an allow list can be loaded.

use std::ffi::OsString;
use std::process::ExitCode;

use shoal_udp_load_test::config::SummaryFormat;

fn main() -> ExitCode {
    let mut json = false;
    let mut print_info_hashes = false;
    let args: Vec<OsString> = std::env::args_os()
        .skip(1)
        .filter(|arg| {
            json |= arg == "--json";
            print_info_hashes |= arg == "--print-info-hashes";
            arg != "--json" && arg != "--print-info-hashes"
        })
        .collect();
    shoal_common::cli::run_cli_with_args(
        &shoal_udp_load_test::APP,
        args,
        |mut config: shoal_udp_load_test::Config| {
            if print_info_hashes {
                let population = shoal_udp_load_test::requests::population(&config.requests);
                let mut out = std::io::BufWriter::new(std::io::stdout().lock());
                population.write_info_hashes(&mut out)?;
                return Ok(());
            }
            if json {
                config.summary_format = SummaryFormat::Json;
            }
            shoal_udp_load_test::run(config)
        },
    )
}
