//! What both load testers add to the shared command line and config.

use std::ffi::OsString;

use serde::{Deserialize, Serialize};
use shoal_common::config::Problems;
use shoal_toml_config::TomlConfig;

/// Format of the final summary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, TomlConfig)]
#[serde(rename_all = "lowercase")]
pub enum SummaryFormat {
    /// Lines for people.
    #[default]
    Text,
    /// One JSON object on stdout, for scripts.
    Json,
}

/// A summary a load tester prints at the end of a run.
pub trait Summary {
    /// Lines for people.
    fn text(&self) -> String;
    /// One JSON object.
    fn json(&self) -> String;
}

/// Prints `summary` to stdout in `format`.
#[allow(clippy::print_stdout)] // the summary is the output
pub fn print_summary(format: SummaryFormat, summary: &impl Summary) {
    match format {
        SummaryFormat::Text => print!("{}", summary.text()),
        SummaryFormat::Json => println!("{}", summary.json()),
    }
}

/// The load testers' own flags, taken out of the arguments before the shared CLI sees
/// them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExtraFlags {
    /// `--json`: print the summary as JSON.
    pub json: bool,
    /// `--print-info-hashes`: print the run's info hashes (one hex line each, the
    /// access-list format) instead of running.
    pub print_info_hashes: bool,
}

/// Splits the process arguments into the shared CLI's and the load tester's flags.
pub fn take_flags(args: impl IntoIterator<Item = OsString>) -> (Vec<OsString>, ExtraFlags) {
    let mut flags = ExtraFlags::default();
    let rest = args
        .into_iter()
        .filter(|arg| {
            flags.json |= arg == "--json";
            flags.print_info_hashes |= arg == "--print-info-hashes";
            arg != "--json" && arg != "--print-info-hashes"
        })
        .collect();
    (rest, flags)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_are_taken_out() {
        let args = ["-c", "x.toml", "--json", "--print-info-hashes"].map(OsString::from);
        let (rest, flags) = take_flags(args);
        assert_eq!(rest, vec![OsString::from("-c"), OsString::from("x.toml")]);
        assert_eq!(
            flags,
            ExtraFlags {
                json: true,
                print_info_hashes: true
            }
        );
    }
}
