//! The `shoal_http` binary.

use std::process::ExitCode;

fn main() -> ExitCode {
    shoal_common::run_cli(&shoal_http::APP, shoal_http::run)
}
