//! The `shoal_http_load_test` binary: the shared CLI plus `--json` and
//! `--print-info-hashes` (the run's torrents, one hex info hash per line, for trackers
//! with an allow list).

use std::ffi::OsString;
use std::process::ExitCode;

use shoal_http_load_test::config::SummaryFormat;

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
        &shoal_http_load_test::APP,
        args,
        |mut config: shoal_http_load_test::Config| {
            if print_info_hashes {
                let population = shoal_http_load_test::requests::population(&config);
                population
                    .write_info_hashes(&mut std::io::BufWriter::new(std::io::stdout().lock()))?;
                return Ok(());
            }
            if json {
                config.summary_format = SummaryFormat::Json;
            }
            shoal_http_load_test::run(config)
        },
    )
}
