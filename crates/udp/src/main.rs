//! The `shoal_udp` binary.

use std::process::ExitCode;

fn main() -> ExitCode {
    shoal_common::run_cli(&shoal_udp::APP, shoal_udp::run)
}
