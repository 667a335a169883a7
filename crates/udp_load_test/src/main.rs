//! The `shoal_udp_load_test` binary: the shared CLI plus `--json`.

use std::ffi::OsString;
use std::process::ExitCode;

use shoal_udp_load_test::config::SummaryFormat;

fn main() -> ExitCode {
    let mut json = false;
    let args: Vec<OsString> = std::env::args_os()
        .skip(1)
        .filter(|arg| {
            let is_json = arg == "--json";
            json |= is_json;
            !is_json
        })
        .collect();
    shoal_common::cli::run_cli_with_args(
        &shoal_udp_load_test::APP,
        args,
        |mut config: shoal_udp_load_test::Config| {
            if json {
                config.summary_format = SummaryFormat::Json;
            }
            shoal_udp_load_test::run(config)
        },
    )
}
