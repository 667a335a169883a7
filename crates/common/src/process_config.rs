//! What belongs to the process rather than to one tracker: logging, the monitoring
//! endpoint and privileges. A single tracker's file and the combined `shoal` file have
//! these sections once, at the top level.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};
use shoal_toml_config::TomlConfig;

use crate::config::{Problems, TrackerConfig};
use crate::logging::LoggingConfig;
use crate::privileges::PrivilegeConfig;
use crate::sections::Both;

/// The process's sections.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, TomlConfig)]
#[serde(default, deny_unknown_fields)]
pub struct ProcessConfig {
    /// Logging to stderr (the journal, under systemd).
    pub logging: LoggingConfig,
    /// The monitoring endpoint: Prometheus metrics, a statistics page and a health
    /// check over HTTP.
    pub metrics: MetricsConfig,
    /// Giving up root after binding.
    pub privileges: PrivilegeConfig,
}

impl ProcessConfig {
    /// Records problems, each under its section.
    pub fn validate(&self, problems: &mut Problems) {
        problems.section("privileges", |p| self.privileges.validate(p));
    }
}

/// The monitoring endpoint: `GET /metrics` (Prometheus text format), `/stats` (a page
/// for people), `/stats.json` and `/health`. Off by default. It says what the tracker
/// holds and how busy it is, so keep it on loopback or a private network, or behind a
/// proxy with access control.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, TomlConfig)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    /// Serve the endpoint.
    pub enabled: bool,
    /// Address and port it listens on (TCP, plain HTTP).
    pub address: SocketAddr,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            address: SocketAddr::from(([127, 0, 0, 1], 9969)),
        }
    }
}

/// A tracker's file: the process's sections and the tracker's own keys, side by side.
pub type ProcessAnd<C> = Both<ProcessConfig, C>;

impl<C: TrackerConfig + Clone + std::fmt::Debug + PartialEq> TrackerConfig for ProcessAnd<C> {
    fn validate(&self, problems: &mut Problems) {
        self.first.validate(problems);
        self.second.validate(problems);
    }

    fn logging(&self) -> LoggingConfig {
        self.first.logging.clone()
    }
}
