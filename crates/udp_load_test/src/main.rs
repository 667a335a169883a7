//! The `shoal_udp_load_test` binary: the shared CLI plus two flags of its own.
//!
//! * `--json`: print the summary as one JSON object.
//! * `--print-info-hashes`: print the run's info hashes (40 hex characters per line,
//!   the access-list format of shoal and opentracker) instead of running, so that a
//!   tracker with an allow list can be loaded.

use std::process::ExitCode;

fn main() -> ExitCode {
    shoal_load_test_common::main::<shoal_udp_load_test::Config>(&shoal_udp_load_test::APP)
}
