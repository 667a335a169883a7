//! The `shoal_http_load_test` binary: the shared CLI plus `--json` and
//! `--print-info-hashes` (the run's torrents, one hex info hash per line, for trackers
//! with an allow list).

use std::process::ExitCode;

fn main() -> ExitCode {
    shoal_load_test_common::main::<shoal_http_load_test::Config>(&shoal_http_load_test::APP)
}
