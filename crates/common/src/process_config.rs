//! What belongs to the process rather than to one tracker: logging, the monitoring
//! endpoint, privileges and memory. A single tracker's file and the combined `shoal` file have
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
    /// The admin API: users, torrents and access-list entries changed live, over HTTP
    /// with JSON (documents/admin-api.md).
    pub admin: AdminConfig,
    /// Giving up root after binding.
    pub privileges: PrivilegeConfig,
    /// Giving memory the tracker freed back to the system.
    pub memory: MemoryConfig,
}

impl ProcessConfig {
    /// Records problems, each under its section.
    pub fn validate(&self, problems: &mut Problems) {
        problems.section("admin", |p| self.admin.validate(p));
        problems.section("privileges", |p| self.privileges.validate(p));
        problems.section("memory", |p| self.memory.validate(p));
    }
}

/// Giving memory back to the system after a busy spell. The allocator (glibc's) keeps
/// what the tracker frees, so without this the resident memory of the busiest moment
/// stays for the life of the process: 10,000 WebTorrent connections left about 600 MiB
/// resident after they closed, 24 MiB once given back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, TomlConfig)]
#[serde(default, deny_unknown_fields)]
pub struct MemoryConfig {
    /// Give freed memory back (glibc's `malloc_trim`) once a busy spell is over:
    /// resident memory has grown by `return_after_growth_mib` since the start or the
    /// last return, has not grown for 30 seconds, and the peers and connections held
    /// have fallen to half their peak (and again at each further halving). A return
    /// makes requests that allocate wait while it walks the free memory (tens of
    /// milliseconds for hundreds of MiB), hence the wait for a spell to end. No effect
    /// on other C libraries.
    pub return_freed: bool,
    /// MiB that resident memory must grow by before a return is tried (at least 1; a
    /// quarter of the memory after the last return counts if that is more).
    pub return_after_growth_mib: u64,
}

impl Default for MemoryConfig {
    fn default() -> Self {
        Self {
            return_freed: true,
            return_after_growth_mib: 64,
        }
    }
}

impl MemoryConfig {
    /// Records configuration problems.
    pub fn validate(&self, problems: &mut Problems) {
        problems.check(
            self.return_after_growth_mib >= 1,
            "return_after_growth_mib",
            "must be at least 1",
        );
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

/// The admin API (documents/admin-api.md): `PUT`, `DELETE` and `GET` of private
/// mode's users and torrents and of access-list entries, on an address of its own.
/// Off by default. Every request must carry the token (`Authorization: Bearer
/// TOKEN`); keep the address on loopback or a private network all the same.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, TomlConfig)]
#[serde(default, deny_unknown_fields)]
pub struct AdminConfig {
    /// Serve the API.
    pub enabled: bool,
    /// Address and port it listens on (TCP, plain HTTP: put TLS in front of it if it
    /// must cross a network you do not trust).
    pub address: SocketAddr,
    /// File holding the bearer token, one line of 32 to 256 characters (`openssl rand
    /// -hex 32`). Read at start, before privileges are dropped, so it may be readable
    /// by root only; refused if others may read it.
    pub token_path: std::path::PathBuf,
    /// Largest request body, in bytes (a bulk access-list edit is the largest: about
    /// 45 bytes per info hash, so the default takes the 100,000 hashes a request may
    /// carry). Read only once the request's token is checked.
    pub max_body_bytes: u32,
    /// Request bodies being read at once, over every connection, in bytes: what the
    /// API's connections may make the process hold. A request whose body does not fit
    /// beside the others is answered 503 (try again). At least `max_body_bytes`.
    pub body_budget_bytes: u32,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            address: SocketAddr::from(([127, 0, 0, 1], 9970)),
            token_path: std::path::PathBuf::new(),
            max_body_bytes: 5 << 20,
            body_budget_bytes: 8 << 20,
        }
    }
}

impl AdminConfig {
    /// Records configuration problems.
    pub fn validate(&self, problems: &mut Problems) {
        problems.within("max_body_bytes", self.max_body_bytes, 1024..=(64 << 20));
        problems.within(
            "body_budget_bytes",
            self.body_budget_bytes,
            1024..=(1 << 30),
        );
        if self.body_budget_bytes < self.max_body_bytes {
            problems.add(
                "body_budget_bytes",
                "must be at least max_body_bytes (one largest body must fit)",
            );
        }
        if !self.enabled {
            return;
        }
        if self.token_path.as_os_str().is_empty() {
            problems.add("token_path", "must name a file when enabled = true");
        } else if let Some(problem) = crate::files::unreadable(&self.token_path) {
            problems.add("token_path", problem);
        } else if let Some(mode) = world_readable(&self.token_path) {
            problems.add(
                "token_path",
                format!(
                    "{} may be read by any local user (mode {mode:o}): `chmod o-r` it \
                     (root:shoal 0640 lets the packaged units read it)",
                    self.token_path.display()
                ),
            );
        }
    }
}

/// The permission bits of the file at `path` when every local user may read it (the
/// admin token must not be: the API refuses to start on such a file).
fn world_readable(path: &std::path::Path) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(path).ok()?.permissions().mode() & 0o7777;
    (mode & 0o004 != 0).then_some(mode)
}

/// A tracker's file: the process's sections and the tracker's own keys, side by side.
pub type ProcessAnd<C> = Both<ProcessConfig, C>;

impl<C> ProcessAnd<C> {
    /// The process's sections.
    pub fn process(&self) -> &ProcessConfig {
        &self.first
    }

    /// The tracker's own keys.
    pub fn tracker(&self) -> &C {
        &self.second
    }

    /// The two apart.
    pub fn into_parts(self) -> (ProcessConfig, C) {
        (self.first, self.second)
    }
}

impl<C: TrackerConfig + Clone + std::fmt::Debug + PartialEq> TrackerConfig for ProcessAnd<C> {
    fn validate(&self, problems: &mut Problems) {
        self.process().validate(problems);
        self.tracker().validate(problems);
        // Snapshots are read at start, before the chroot, and written after it, into
        // the same path inside it: a restart would bring back old ones, or none.
        if self.process().privileges.chroot {
            for (key, directory) in self.tracker().snapshot_directories() {
                problems.add(
                    &key,
                    format!(
                        "{} cannot be used with privileges.chroot (snapshots are read before the \
                         chroot and written inside it); use the packaged systemd unit's \
                         sandboxing instead of a chroot, or leave one of them off",
                        directory.display()
                    ),
                );
            }
        }
    }

    fn snapshot_directories(&self) -> Vec<(String, std::path::PathBuf)> {
        self.tracker().snapshot_directories()
    }

    fn privileges(&self) -> Option<&crate::PrivilegeConfig> {
        Some(&self.process().privileges)
    }

    fn logging(&self) -> LoggingConfig {
        self.process().logging.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_returns_need_a_growth_step() {
        let mut config = ProcessConfig::default();
        assert!(config.memory.return_freed);
        let mut problems = Problems::default();
        config.validate(&mut problems);
        assert!(problems.is_empty(), "{problems}");

        config.memory.return_after_growth_mib = 0;
        let mut problems = Problems::default();
        config.validate(&mut problems);
        let message = problems.into_result().unwrap_err().to_string();
        assert!(
            message.contains("memory.return_after_growth_mib"),
            "{message}"
        );
    }
}
