//! The `shoal_ws_load_test` binary: the shared CLI plus `--json` and
//! `--print-info-hashes` (the run's torrents, one hex info hash per line, for trackers
//! with an allow list).

use std::process::ExitCode;

use shoal_load_test_common::cli::{SummaryFormat, take_flags};

fn main() -> ExitCode {
    let (args, flags) = take_flags(std::env::args_os().skip(1));
    shoal_common::cli::run_cli_with_args(
        &shoal_ws_load_test::APP,
        args,
        |mut config: shoal_ws_load_test::Config| {
            if flags.print_info_hashes {
                let population = shoal_ws_load_test::messages::population(&config);
                population
                    .write_info_hashes(&mut std::io::BufWriter::new(std::io::stdout().lock()))?;
                return Ok(());
            }
            if flags.json {
                config.summary_format = SummaryFormat::Json;
            }
            shoal_ws_load_test::run(config)
        },
    )
}
