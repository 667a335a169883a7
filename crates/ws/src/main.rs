//! The `shoal_ws` binary.

use std::process::ExitCode;

fn main() -> ExitCode {
    shoal_common::run_cli(&shoal_ws::APP, shoal_ws::run)
}
