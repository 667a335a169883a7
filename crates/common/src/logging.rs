//! Logging to stderr: `2026-11-21T14:05:00.123Z INFO  [socket-0] message`.
//!
//! Under systemd, stderr goes to the journal; the timestamp is still useful when the
//! output is redirected to a file. Thread names tell which worker spoke.

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

struct StderrLogger;

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

impl log::Log for StderrLogger {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        effective_level(metadata) <= log::max_level()
    }

    fn log(&self, record: &log::Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let thread = std::thread::current();
        let line = format!(
            "{} {:<5} [{}] {}\n",
            utc_timestamp(SystemTime::now()),
            effective_level(record.metadata()),
            thread.name().unwrap_or("?"),
            record.args()
        );
        // One write per line keeps lines from different threads whole.
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    fn flush(&self) {
        let _ = std::io::stderr().flush();
    }
}

static LOGGER: StderrLogger = StderrLogger;

/// Installs the logger (once per process; later calls only change the level).
pub fn init(level: LogLevel) {
    let _ = log::set_logger(&LOGGER);
    log::set_max_level(level.filter());
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
    fn timestamps_are_utc_iso_8601() {
        let at = |secs: u64, millis: u64| {
            utc_timestamp(UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_millis(millis))
        };
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(at(951_782_400, 5), "2000-02-29T00:00:00.005Z");
        assert_eq!(at(1_795_219_200 + 3723, 999), "2026-11-21T01:02:03.999Z");
    }
}
