//! Logging to stderr, in the shape the reader wants.
//!
//! * plain: `2026-11-21T14:05:00.123Z INFO  [udp-socket-0] message` (a terminal, a file);
//! * journald: `<6>[udp-socket-0] message`: under systemd the journal reads the priority
//!   from the prefix (so `journalctl -p err` picks out errors) and keeps its own
//!   timestamp; chosen by itself when stderr is the journal (`JOURNAL_STREAM`);
//! * JSON: one object per line, for log shippers.
//!
//! The level comes from `[logging] level`; the `SHOAL_LOG` environment variable
//! overrides it and can filter per module (`SHOAL_LOG=info,shoal_udp::socket=debug`,
//! the syntax of `RUST_LOG`). Thread names tell which worker spoke.

use std::io::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use shoal_toml_config::TomlConfig;

/// How much to log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, TomlConfig)]
#[serde(rename_all = "lowercase")]
pub enum LogLevel {
    /// Nothing at all.
    Off,
    /// Failures only.
    Error,
    /// Failures and things an operator should look at.
    Warn,
    /// Start-up, shutdown, reloads and periodic statistics.
    #[default]
    Info,
    /// Per-event detail; noisy under load.
    Debug,
    /// Everything.
    Trace,
}

impl LogLevel {
    fn filter(self) -> log::LevelFilter {
        match self {
            Self::Off => log::LevelFilter::Off,
            Self::Error => log::LevelFilter::Error,
            Self::Warn => log::LevelFilter::Warn,
            Self::Info => log::LevelFilter::Info,
            Self::Debug => log::LevelFilter::Debug,
            Self::Trace => log::LevelFilter::Trace,
        }
    }
}

/// How log lines look.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, TomlConfig)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// journald when stderr is the journal (systemd sets `JOURNAL_STREAM`), plain
    /// otherwise.
    #[default]
    Auto,
    /// `2026-11-23T14:05:00.123Z INFO  [udp-socket-0] message`.
    Plain,
    /// `<6>[udp-socket-0] message`: the journal reads the priority and adds the time.
    Journald,
    /// One JSON object per line: `time`, `level`, `thread`, `target`, `message`.
    Json,
}

/// Logging settings.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, TomlConfig)]
#[serde(default, deny_unknown_fields)]
pub struct LoggingConfig {
    /// How much to log. The SHOAL_LOG environment variable overrides it and may
    /// filter per module, e.g. SHOAL_LOG=info,shoal_udp::socket=debug.
    pub level: LogLevel,
    /// How lines look.
    pub format: LogFormat,
}

impl LoggingConfig {
    /// Logging at `level` in the automatic format (the load testers' one setting).
    pub fn at(level: LogLevel) -> Self {
        Self {
            level,
            format: LogFormat::Auto,
        }
    }
}

/// The environment variable that overrides the level, with filters per module.
pub(crate) const FILTER_VARIABLE: &str = "SHOAL_LOG";

/// The format `Auto` stands for here: journald if stderr is the journal's stream.
fn resolve(format: LogFormat) -> LogFormat {
    match format {
        LogFormat::Auto if stderr_is_journal() => LogFormat::Journald,
        LogFormat::Auto => LogFormat::Plain,
        other => other,
    }
}

/// Prints an error that stops the process before (or after) logging runs, such as a
/// bad config file: to stderr, and under systemd with the journal's priority prefix
/// on every line, so that `journalctl -p err` (or `-p warning`) shows the reason a
/// start failed.
#[allow(clippy::print_stderr)] // this is the printing
pub(crate) fn print_error(text: &str) {
    let prefix = if stderr_is_journal() { "<3>" } else { "" };
    for line in text.lines() {
        eprintln!("{prefix}{line}");
    }
}

/// Whether stderr is the stream systemd connected to the journal: `JOURNAL_STREAM` is
/// `DEVICE:INODE` of that stream, and is inherited by children whose stderr may be
/// something else, so the descriptor is compared.
fn stderr_is_journal() -> bool {
    let Ok(value) = std::env::var("JOURNAL_STREAM") else {
        return false;
    };
    let Some((device, inode)) = value.split_once(':') else {
        return false;
    };
    let (Ok(device), Ok(inode)) = (device.parse::<u64>(), inode.parse::<u64>()) else {
        return false;
    };
    // SAFETY: fstat writes into the zeroed struct we own; fd 2 needs no ownership.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let ok = unsafe { libc::fstat(2, &mut stat) } == 0;
    ok && stat.st_dev as u64 == device && stat.st_ino as u64 == inode
}

struct StderrLogger {
    format: LogFormat,
    filter: env_filter::Filter,
}

/// Libraries whose warnings are about one client's misbehaviour (e.g. rustls: "Illegal
/// SNI extension" whenever a client sends an IP address as the server name, which
/// libtorrent does), not about the tracker. On a public tracker they would flood the
/// log at the default level, so they show only at debug.
const CLIENT_NOISE_TARGETS: &[&str] = &["rustls", "tungstenite"];

/// The level a record is logged at: client noise from libraries drops to debug.
fn effective_level(metadata: &log::Metadata<'_>) -> log::Level {
    let noisy = CLIENT_NOISE_TARGETS
        .iter()
        .any(|target| metadata.target().starts_with(target));
    if noisy && metadata.level() > log::Level::Error {
        metadata.level().max(log::Level::Debug)
    } else {
        metadata.level()
    }
}

/// The journald priority of a level (syslog's numbers).
fn priority(level: log::Level) -> u8 {
    match level {
        log::Level::Error => 3,
        log::Level::Warn => 4,
        log::Level::Info => 6,
        log::Level::Debug | log::Level::Trace => 7,
    }
}

/// One line in `format` (with its newline).
fn format_line(
    format: LogFormat,
    level: log::Level,
    thread: &str,
    target: &str,
    message: &str,
) -> String {
    match format {
        LogFormat::Journald => format!("<{}>[{thread}] {message}\n", priority(level)),
        LogFormat::Json => {
            let mut line = serde_json::json!({
                "time": utc_timestamp(SystemTime::now()),
                "level": level.as_str(),
                "thread": thread,
                "target": target,
                "message": message,
            })
            .to_string();
            line.push('\n');
            line
        }
        LogFormat::Plain | LogFormat::Auto => format!(
            "{} {level:<5} [{thread}] {message}\n",
            utc_timestamp(SystemTime::now())
        ),
    }
}

impl StderrLogger {
    fn effective<'a>(metadata: &log::Metadata<'a>) -> log::Metadata<'a> {
        log::Metadata::builder()
            .level(effective_level(metadata))
            .target(metadata.target())
            .build()
    }
}

impl log::Log for StderrLogger {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        self.filter.enabled(&Self::effective(metadata))
    }

    fn log(&self, record: &log::Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let thread = std::thread::current();
        let line = format_line(
            self.format,
            effective_level(record.metadata()),
            thread.name().unwrap_or("?"),
            record.target(),
            &record.args().to_string(),
        );
        // One write per line keeps lines from different threads whole.
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    fn flush(&self) {
        let _ = std::io::stderr().flush();
    }
}

/// The filter for `level`, or for `spec` (the `SHOAL_LOG` syntax) when given.
fn build_filter(level: LogLevel, spec: Option<&str>) -> env_filter::Filter {
    let mut builder = env_filter::Builder::new();
    match spec {
        Some(spec) if !spec.trim().is_empty() => builder.parse(spec),
        _ => builder.filter_level(level.filter()),
    };
    builder.build()
}

/// Installs the logger for the process (the first call wins; logging is set up once,
/// before any thread starts). `SHOAL_LOG`, when set, replaces `config.level`.
pub(crate) fn init(config: &LoggingConfig) {
    let spec = std::env::var(FILTER_VARIABLE).ok();
    let filter = build_filter(config.level, spec.as_deref());
    log::set_max_level(filter.filter());
    let logger = StderrLogger {
        format: resolve(config.format),
        filter,
    };
    let _ = log::set_boxed_logger(Box::new(logger));
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` for a system time.
pub fn utc_timestamp(time: SystemTime) -> String {
    let since_epoch = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let seconds = since_epoch.as_secs();
    let (year, month, day) = civil_from_days((seconds / 86_400) as i64);
    let in_day = seconds % 86_400;
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        in_day / 3600,
        in_day % 3600 / 60,
        in_day % 60,
        since_epoch.subsec_millis()
    )
}

/// Gregorian date of a day count since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn client_noise_from_libraries_drops_to_debug() {
        let level = |target: &str, level: log::Level| {
            effective_level(&log::Metadata::builder().target(target).level(level).build())
        };
        assert_eq!(
            level("rustls::server::hs", log::Level::Warn),
            log::Level::Debug
        );
        assert_eq!(level("rustls::conn", log::Level::Error), log::Level::Error);
        assert_eq!(level("shoal_http::tls", log::Level::Warn), log::Level::Warn);
        assert_eq!(
            level("tungstenite::protocol", log::Level::Trace),
            log::Level::Trace
        );
    }

    #[test]
    fn lines_carry_what_their_reader_needs() {
        let journald = format_line(LogFormat::Journald, log::Level::Error, "main", "x", "bad");
        assert_eq!(journald, "<3>[main] bad\n");
        let info = format_line(LogFormat::Journald, log::Level::Info, "main", "x", "ok");
        assert!(info.starts_with("<6>"));
        let json = format_line(
            LogFormat::Json,
            log::Level::Warn,
            "socket-0",
            "shoal_udp",
            "a \"quote\"",
        );
        let value: serde_json::Value = serde_json::from_str(&json).expect("one JSON object");
        assert_eq!(value["level"], "WARN");
        assert_eq!(value["thread"], "socket-0");
        assert_eq!(value["message"], "a \"quote\"");
        let plain = format_line(LogFormat::Plain, log::Level::Info, "main", "x", "hello");
        assert!(plain.ends_with("INFO  [main] hello\n"), "{plain}");
    }

    #[test]
    fn the_environment_filters_per_module() {
        let filter = build_filter(LogLevel::Info, Some("warn,shoal_udp::socket=debug"));
        let enabled = |target: &str, level: log::Level| {
            filter.enabled(&log::Metadata::builder().target(target).level(level).build())
        };
        assert!(enabled("shoal_udp::socket::dispatch", log::Level::Debug));
        assert!(!enabled("shoal_udp::tracker", log::Level::Info));
        assert!(enabled("shoal_udp::tracker", log::Level::Warn));
        let plain = build_filter(LogLevel::Debug, None);
        assert_eq!(plain.filter(), log::LevelFilter::Debug);
    }

    #[test]
    fn timestamps_are_utc_iso_8601() {
        let at = |secs: u64, millis: u64| {
            utc_timestamp(UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_millis(millis))
        };
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(at(951_782_400, 5), "2000-02-29T00:00:00.005Z");
        assert_eq!(at(1_795_219_200 + 3723, 999), "2026-11-21T01:02:03.999Z");
    }
}
