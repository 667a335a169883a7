//! The `shoal_udp_load_test` binary: the shared CLI plus two flags of its own.
//!
//! * `--json`: print the summary as one JSON object.
//! * `--print-info-hashes`: print the run's info hashes (40 hex characters per line,
//!   the access-list format of shoal and opentracker) instead of running, so that a
//!   tracker with an allow list can be loaded.

use std::process::ExitCode;

use shoal_load_test_common::cli::SummaryFormat;
use shoal_load_test_common::cli::take_flags;

fn main() -> ExitCode {
    let (args, flags) = take_flags(std::env::args_os().skip(1));
    shoal_common::cli::run_cli_with_args(
        &shoal_udp_load_test::APP,
        args,
        |mut config: shoal_udp_load_test::Config| {
            if flags.print_info_hashes {
                let population = shoal_udp_load_test::requests::population(&config.requests);
                let mut out = std::io::BufWriter::new(std::io::stdout().lock());
                population.write_info_hashes(&mut out)?;
                return Ok(());
            }
            if flags.json {
                config.summary_format = SummaryFormat::Json;
            }
            shoal_udp_load_test::run(config)
        },
    )
}
