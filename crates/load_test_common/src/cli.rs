//! What the three load testers add to the shared command line and config, and the
//! `main` they share.

use std::io::Write;
use std::process::ExitCode;

use shoal_common::{AppInfo, ExtraFlag, Problems, TrackerConfig, run_cli_with_flags};

use crate::summary::{Summary, SummaryFormat};

/// `--json`: print the summary as JSON.
const JSON: ExtraFlag = ExtraFlag {
    long: "json",
    help: "Print the final summary as one JSON object.",
};

/// `--print-info-hashes`: print the run's info hashes instead of running.
const PRINT_INFO_HASHES: ExtraFlag = ExtraFlag {
    long: "print-info-hashes",
    help: "Print the run's info hashes, one hex line each, then exit.",
};

/// What each load tester's config root says about its tester, so one `main` serves
/// the three of them.
pub trait LoadTester: TrackerConfig {
    /// Where the format of the final summary is kept (`--json` sets it).
    fn summary_format(&mut self) -> &mut SummaryFormat;
    /// Writes the info hashes a run with this config would announce, one hex line
    /// each: the access-list format of shoal and opentracker, so a tracker with an
    /// allow list can be loaded.
    fn write_info_hashes(&self, out: &mut dyn Write) -> std::io::Result<()>;
    /// What a run ends with.
    type Summary: Summary;
    /// Runs the load test until its duration ends or `shutdown` is requested.
    fn run_until(self, shutdown: shoal_common::Shutdown) -> anyhow::Result<Self::Summary>;
    /// Runs the load test, Ctrl-C ending it early; the summary goes to stdout.
    fn run(mut self) -> anyhow::Result<()>
    where
        Self: Sized,
    {
        let format = *self.summary_format();
        crate::run::run_with_signals(format, |shutdown| self.run_until(shutdown))
    }
}

/// The whole `main` of a load tester: the shared command line plus `--json` and
/// `--print-info-hashes`.
pub fn main<C: LoadTester>(app: &AppInfo) -> ExitCode {
    let extras = [JSON, PRINT_INFO_HASHES];
    let args = std::env::args_os().skip(1);
    run_cli_with_flags(app, &extras, args, |mut config: C, flags| {
        if flags.contains(&PRINT_INFO_HASHES.long) {
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            config.write_info_hashes(&mut out)?;
            out.flush()?;
            return Ok(());
        }
        if flags.contains(&JSON.long) {
            *config.summary_format() = SummaryFormat::Json;
        }
        config.run()
    })
}

/// Checks the run-length settings every load tester has.
pub fn validate_schedule(
    problems: &mut Problems,
    duration: u32,
    summarize_last: u32,
    report_interval: u32,
) {
    problems.check(
        duration == 0 || summarize_last <= duration,
        "summarize_last",
        "must not exceed duration",
    );
    problems.check(
        report_interval >= 1,
        "report_interval",
        "must be at least 1 second",
    );
}
