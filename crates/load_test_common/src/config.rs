//! The root of every load tester's config, written once: [`load_test_config!`](crate::load_test_config) declares
//! a load tester's `Config` with the keys all three share (log level, server, workers,
//! schedule, summary format, pinning) around the ones it adds, in the same order and
//! with the same documentation in each, and the checks and run shape that go with them.

/// Declares a load tester's `Config`: the shared keys, `$field`s after `workers`,
/// `$section` tables before `cpu_pinning`, its `Default` (the server at
/// `$server_address`), `shape()` and `validate_shared()`.
#[macro_export]
macro_rules! load_test_config {
    (
        $(#[$meta:meta])*
        pub struct Config (server_address = $server_address:literal) {
            $( $(#[$field_meta:meta])* pub $field:ident: $field_type:ty = $field_default:expr, )*
        }
        sections {
            $( $(#[$section_meta:meta])* pub $section:ident: $section_type:ty, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, ::serde::Serialize, ::serde::Deserialize,
            ::shoal_toml_config::TomlConfig)]
        #[serde(default, deny_unknown_fields)]
        pub struct Config {
            /// How much to log to stderr.
            pub log_level: ::shoal_common::LogLevel,
            /// The tracker to load (IP address and port).
            pub server_address: ::std::net::SocketAddr,
            /// Worker threads.
            pub workers: usize,
            $( $(#[$field_meta])* pub $field: $field_type, )*
            /// Seconds to run; 0 runs until Ctrl-C.
            pub duration: u32,
            /// Seconds at the end of the run the summary covers (the start is warm-up);
            /// 0 covers the whole run.
            pub summarize_last: u32,
            /// Seconds between progress lines.
            pub report_interval: u32,
            /// Format of the final summary (`--json` on the command line picks "json").
            pub summary_format: $crate::SummaryFormat,
            $( $(#[$section_meta])* pub $section: $section_type, )*
            /// Pinning workers to CPU cores.
            pub cpu_pinning: ::shoal_common::CpuPinningConfig,
        }

        impl Default for Config {
            fn default() -> Self {
                Self {
                    log_level: ::shoal_common::LogLevel::Info,
                    server_address: $server_address.parse().expect("valid address"),
                    workers: 1,
                    $( $field: $field_default, )*
                    duration: 30,
                    summarize_last: 20,
                    report_interval: 5,
                    summary_format: $crate::SummaryFormat::Text,
                    $( $section: Default::default(), )*
                    cpu_pinning: Default::default(),
                }
            }
        }

        impl Config {
            /// The shape of the run this config asks for.
            pub fn shape(&self) -> $crate::RunShape<'_> {
                $crate::RunShape {
                    workers: self.workers,
                    schedule: $crate::ReportSchedule {
                        duration: self.duration,
                        summarize_last: self.summarize_last,
                        report_interval: self.report_interval,
                    },
                    cpu_pinning: &self.cpu_pinning,
                }
            }

            /// Checks the shared keys.
            fn validate_shared(&self, problems: &mut ::shoal_common::Problems) {
                problems.check(
                    (1..=256).contains(&self.workers),
                    "workers",
                    "must be between 1 and 256",
                );
                $crate::validate_schedule(
                    problems,
                    self.duration,
                    self.summarize_last,
                    self.report_interval,
                );
            }
        }
    };
}
