//! Loading and checking configuration files.
//!
//! A config type derives serde's traits with `#[serde(default, deny_unknown_fields)]`
//! and [`TomlConfig`], so a file only needs the keys it changes, a misspelt key is an
//! error rather than a silently ignored line, and `-p` can print every key with its
//! documentation. [`TrackerConfig::validate`] then checks what types cannot (ranges,
//! combinations) and reports every problem at once, each with its key.

use std::fmt;
use std::path::Path;

use anyhow::Context as _;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use shoal_toml_config::TomlConfig;

use crate::logging::LoggingConfig;

/// A configuration file (or a section of one that validates on its own).
pub trait TrackerConfig: TomlConfig + Default + Serialize + DeserializeOwned {
    /// Records every value that is out of range or inconsistent with another.
    fn validate(&self, problems: &mut Problems);

    /// How the process logs; a type without logging settings logs at the defaults.
    fn logging(&self) -> LoggingConfig {
        LoggingConfig::default()
    }

    /// Where a tracker of this config writes snapshots (`[state] directory`), with
    /// its key, when it does.
    fn snapshot_directories(&self) -> Vec<(String, std::path::PathBuf)> {
        Vec::new()
    }

    /// Whom the process becomes once it serves, when it starts as root: the file
    /// checks ask about that user too (`-P` as root, and a start that drops
    /// privileges). `None` for a config without a `[privileges]` section.
    fn privileges(&self) -> Option<&crate::PrivilegeConfig> {
        None
    }

    /// Runs [`validate`](Self::validate) and turns any problems into one error.
    fn check(&self) -> anyhow::Result<()> {
        let mut problems = Problems::default();
        self.validate(&mut problems);
        problems.into_result()
    }

    /// What validation found worth a warning but not a refusal (a retired key), as
    /// `key: note` lines; the binaries log them once logging is set up.
    fn notices(&self) -> Vec<String> {
        let mut problems = Problems::default();
        self.validate(&mut problems);
        problems
            .notices
            .into_iter()
            .map(|(key, note)| format!("{key}: {note}"))
            .collect()
    }
}

/// Bad values found by validation, each with the dotted key it belongs to, and
/// notices that do not stop a start.
#[derive(Debug, Default)]
pub struct Problems {
    found: Vec<(String, String)>,
    notices: Vec<(String, String)>,
}

impl Problems {
    /// Records a notice about `key`: worth a warning in the log, not a refusal.
    pub fn notice(&mut self, key: &str, note: impl fmt::Display) {
        self.notices.push((key.to_string(), note.to_string()));
    }

    /// Records a problem with `key` unless `ok`.
    pub fn check(&mut self, ok: bool, key: &str, problem: impl fmt::Display) {
        if !ok {
            self.add(key, problem);
        }
    }

    /// Records a problem with `key` unless `value` is within `range`: every size and
    /// count a config holds has an upper bound too, so that a typo (an extra digit, a
    /// value meant for another key) is refused with its key at start instead of
    /// aborting on an allocation or taking the host's memory later.
    pub fn within<T: PartialOrd + fmt::Display>(
        &mut self,
        key: &str,
        value: T,
        range: std::ops::RangeInclusive<T>,
    ) {
        if !range.contains(&value) {
            let (low, high) = range.into_inner();
            self.add(key, format!("must be between {low} and {high}"));
        }
    }

    /// Records a problem with `key`.
    pub fn add(&mut self, key: &str, problem: impl fmt::Display) {
        self.found.push((key.to_string(), problem.to_string()));
    }

    /// Records the problems of a nested section under `prefix`.
    pub fn section(&mut self, prefix: &str, validate: impl FnOnce(&mut Problems)) {
        let mut nested = Problems::default();
        validate(&mut nested);
        let prefixed = |(key, text): (String, String)| (format!("{prefix}.{key}"), text);
        self.found.extend(nested.found.into_iter().map(prefixed));
        self.notices
            .extend(nested.notices.into_iter().map(prefixed));
    }

    /// Whether nothing was found.
    pub fn is_empty(&self) -> bool {
        self.found.is_empty()
    }

    /// `Ok` when nothing was found, otherwise an error listing every problem.
    pub fn into_result(self) -> anyhow::Result<()> {
        if self.found.is_empty() {
            Ok(())
        } else {
            Err(anyhow::anyhow!("{self}"))
        }
    }
}

impl fmt::Display for Problems {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let plural = if self.found.len() == 1 { "" } else { "s" };
        write!(f, "{} invalid value{plural}:", self.found.len())?;
        for (key, problem) in &self.found {
            write!(f, "\n  {key}: {problem}")?;
        }
        Ok(())
    }
}

/// Parses and validates config text.
pub fn parse<C: TrackerConfig>(text: &str) -> anyhow::Result<C> {
    let config = parse_unchecked::<C>(text)?;
    config.check()?;
    Ok(config)
}

/// Parses config text without checking its values against each other or the files
/// they name: every key must exist and every value have its key's type. For examples
/// in documents, which name files that exist only where they are deployed.
pub fn parse_keys<C: TrackerConfig>(text: &str) -> anyhow::Result<C> {
    parse_unchecked(text)
}

fn parse_unchecked<C: TrackerConfig>(text: &str) -> anyhow::Result<C> {
    toml::from_str(text).map_err(|err| match crate::unknown_keys::find(text, &C::docs()) {
        // Named with its line and a spelling, not as serde reports it.
        Some(unknown) => anyhow::anyhow!("{unknown}"),
        None => anyhow::anyhow!(
            "{}",
            crate::unknown_keys::locate(text, err.to_string().trim_end())
        ),
    })
}

/// The config a binary runs with: the file (or the defaults), then the `SHOAL__…`
/// variables of `vars` on top (see `env_overrides`), validated
/// once everything is in.
pub fn load_effective<C: TrackerConfig>(
    path: Option<&Path>,
    vars: impl IntoIterator<Item = (String, String)>,
) -> anyhow::Result<C> {
    load_effective_with(path, vars, |_| {})
}

/// [`load_effective`], calling `before_checks` with the config read (file and
/// variables) before its values are checked: for what the checks depend on that
/// the config itself says (whom the files are checked for).
pub(crate) fn load_effective_with<C: TrackerConfig>(
    path: Option<&Path>,
    vars: impl IntoIterator<Item = (String, String)>,
    before_checks: impl FnOnce(&C),
) -> anyhow::Result<C> {
    let config = match path {
        Some(path) => {
            let text = crate::files::read_to_string_bounded(path, crate::files::MAX_CONFIG_FILE)
                .with_context(|| format!("cannot read config file {}", path.display()))?;
            parse_unchecked::<C>(&text)
                .with_context(|| format!("in config file {}", path.display()))?
        }
        None => C::default(),
    };
    let vars: Vec<(String, String)> = vars.into_iter().collect();
    let read = toml::Table::try_from(&config).context("config types serialize to TOML")?;
    let mut table = read.clone();
    let applied = crate::env_overrides::apply(&mut table, &C::docs(), vars.iter().cloned())?;
    let config = if applied.is_empty() {
        config
    } else {
        match C::deserialize(toml::Value::Table(table)) {
            Ok(config) => config,
            Err(err) => return Err(bad_variable::<C>(&read, &vars, &applied, &err)),
        }
    };
    before_checks(&config);
    let mut problems = Problems::default();
    config.validate(&mut problems);
    if problems.is_empty() {
        return Ok(config);
    }
    // Each bad value is blamed on where it came from: a variable or the file.
    let from_environment = problems.mark_overridden(&applied);
    let source = match (path, from_environment) {
        (_, Overridden::All) => format!("with {} from the environment", applied.join(", ")),
        (Some(path), Overridden::Some) => {
            format!("in config file {} and the environment", path.display())
        }
        (Some(path), Overridden::None) => format!("in config file {}", path.display()),
        (None, _) if !applied.is_empty() => {
            format!("with {} from the environment", applied.join(", "))
        }
        (None, _) => "in the built-in defaults".to_owned(),
    };
    Err(anyhow::anyhow!("{problems}").context(source))
}

/// The error of variables whose values do not fit their keys' types, in the one
/// format of the environment's errors: the variable, its key, what is wrong (never
/// the value, which may be a password). Each variable is tried alone on the config
/// `read` so that the one at fault is named; `err` is the error of all of them
/// together, for a fault only their combination makes.
fn bad_variable<C: TrackerConfig>(
    read: &toml::Table,
    vars: &[(String, String)],
    applied: &[String],
    err: &toml::de::Error,
) -> anyhow::Error {
    for name in applied {
        let mut table = read.clone();
        let alone = vars.iter().filter(|(var, _)| var == name).cloned();
        if crate::env_overrides::apply(&mut table, &C::docs(), alone).is_err() {
            continue;
        }
        if let Err(own) = C::deserialize(toml::Value::Table(table)) {
            return anyhow::anyhow!(
                "environment variable {name} ({}): {}",
                crate::env_overrides::key_of(name),
                innermost(own.message())
            );
        }
    }
    anyhow::anyhow!(
        "environment variables {}: {}",
        applied.join(", "),
        innermost(err.message())
    )
}

/// A deserializer's message without the "in `key`" lines it adds for every table it
/// was inside (the variable names the key already).
fn innermost(message: &str) -> &str {
    message.split("\nin `").next().unwrap_or(message).trim_end()
}

/// How many of a config's bad values a `SHOAL__` variable set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Overridden {
    None,
    Some,
    All,
}

impl Problems {
    /// Marks each problem whose key one of the `variables` set (`SHOAL__UDP__PROTOCOL__MAX_PEERS`
    /// sets `udp.protocol.max_peers`) with that variable's name.
    fn mark_overridden(&mut self, variables: &[String]) -> Overridden {
        let mut marked = 0;
        for (key, problem) in &mut self.found {
            let set_by = variables.iter().find(|name| {
                let dotted = name[crate::env_overrides::PREFIX.len()..]
                    .to_ascii_lowercase()
                    .replace("__", ".");
                *key == dotted
            });
            if let Some(name) = set_by {
                *problem = format!("{problem} (set by {name})");
                marked += 1;
            }
        }
        match marked {
            0 => Overridden::None,
            n if n == self.found.len() => Overridden::All,
            _ => Overridden::Some,
        }
    }
}

/// The config as commented TOML.
pub fn to_toml<C: TrackerConfig>(config: &C) -> String {
    shoal_toml_config::to_commented_toml(config).expect("config types serialize to TOML")
}

/// Number of CPUs this process may run on (at least 1).
pub(crate) fn available_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// When peers and torrents are forgotten.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, TomlConfig)]
#[serde(default, deny_unknown_fields)]
pub struct CleaningConfig {
    /// Seconds after its last announce that a peer is dropped. Must exceed
    /// protocol.announce_interval, with room for late clients.
    pub peer_timeout: u32,
    /// Seconds between cleaning passes over the torrents.
    pub interval: u32,
}

impl Default for CleaningConfig {
    fn default() -> Self {
        Self {
            peer_timeout: 3600,
            interval: 60,
        }
    }
}

impl CleaningConfig {
    /// Records problems; peers must outlive the announce interval.
    pub fn validate(&self, problems: &mut Problems, announce_interval: u32) {
        problems.check(
            self.peer_timeout > announce_interval,
            "peer_timeout",
            format!("must exceed protocol.announce_interval ({announce_interval}), or peers expire before they re-announce"),
        );
        problems.check(self.interval >= 1, "interval", "must be at least 1 second");
    }
}

/// Which tracker a snapshot belongs to: the records differ between them. A tracker
/// kind that keeps its swarms across restarts says which it writes
/// ([`TrackerKind::STATE`](crate::tracker_config::TrackerKind::STATE)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StateKind {
    /// The UDP tracker: peers by address.
    Udp = 1,
    /// The HTTP tracker: peers by address, with their peer ids.
    Http = 2,
}

impl StateKind {
    /// The kind written as `byte` in a snapshot's header.
    pub fn from_byte(byte: u8) -> Option<Self> {
        match byte {
            1 => Some(Self::Udp),
            2 => Some(Self::Http),
            _ => None,
        }
    }

    /// The tracker's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Udp => "udp",
            Self::Http => "http",
        }
    }

    /// The file's name in the state directory.
    pub fn file_name(self) -> &'static str {
        match self {
            Self::Udp => "udp.snapshot",
            Self::Http => "http.snapshot",
        }
    }
}

/// Swarms kept across restarts: a snapshot of every torrent, its peers with the time
/// they have left, its download count (and the UDP tracker's connection-id key),
/// written at shutdown and every `interval` seconds, read at start.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, TomlConfig)]
#[serde(default, deny_unknown_fields)]
pub struct StateConfig {
    /// Directory for the snapshot (`udp.snapshot`, `http.snapshot`); empty turns
    /// snapshots off and every restart starts with no peers. It must exist and be
    /// writable by the tracker (under systemd: `StateDirectory=shoal` and
    /// "/var/lib/shoal"). The WebTorrent tracker keeps nothing: its peers are its
    /// connections and leave with them.
    pub directory: std::path::PathBuf,
    /// Seconds between snapshots while running, so that a crash loses at most this
    /// much; 0 writes one only at a clean shutdown.
    pub interval: u32,
}

impl Default for StateConfig {
    fn default() -> Self {
        Self {
            directory: std::path::PathBuf::new(),
            interval: 300,
        }
    }
}

impl StateConfig {
    /// Whether snapshots are on.
    pub fn enabled(&self) -> bool {
        !self.directory.as_os_str().is_empty()
    }

    /// Records problems under `[state]` for a tracker that keeps state when
    /// `keeps_state`.
    pub fn validate(&self, problems: &mut Problems, keeps_state: bool) {
        if !self.enabled() {
            return;
        }
        if !keeps_state {
            problems.add(
                "directory",
                "the WebTorrent tracker keeps no state (its peers are its connections); leave it empty",
            );
            return;
        }
        if let Some(problem) = crate::files::unwritable_directory(&self.directory) {
            problems.add(
                "directory",
                format!(
                    "{problem}: create it (writable by the tracker) or leave the key empty \
                     (the package makes /var/lib/shoal for the shoal user)"
                ),
            );
        }
    }
}

/// Swarms shared with other tracker nodes through a Redis (or Valkey) store: each
/// node answers from its own memory and publishes its peers' changes to the store,
/// and applies the other nodes' changes as they arrive (documents/scale-out.md).
/// Requests never wait for the store: while it is slow or down every node keeps
/// serving what it knows, keeps what it could not publish (up to `backlog` bytes) and
/// sends it when the store is back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, TomlConfig)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    /// The store's `host:port` (e.g. "10.0.0.5:6379"); empty turns clustering off.
    /// Keep the store on a private network, with a password: whoever can write to it
    /// can add peers to every node.
    pub store: String,
    /// ACL user name for the store; empty logs in with the password alone.
    pub username: String,
    /// The store's password; empty for none.
    pub password: String,
    /// Database number in the store.
    pub database: u32,
    /// The name of this cluster: the prefix of its keys, so that several clusters can
    /// share one store. Every node of a cluster uses the same name.
    pub name: String,
    /// This node's name in the logs; empty means the host name.
    pub node: String,
    /// Milliseconds between publications of this node's changes (each one a single
    /// stream entry): the larger, the fewer store round trips per announce and the
    /// staler the other nodes' view.
    pub publish_interval_ms: u32,
    /// Milliseconds to wait for the store to connect or to answer before it counts as
    /// down; the node retries every second meanwhile.
    pub timeout_ms: u32,
    /// Bytes of changes kept while the store cannot be reached (about 43 per IPv4
    /// announce, 63 with a peer id); past it the oldest are dropped and counted.
    pub backlog: usize,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            store: String::new(),
            username: String::new(),
            password: String::new(),
            database: 0,
            name: "shoal".into(),
            node: String::new(),
            publish_interval_ms: 100,
            timeout_ms: 1000,
            backlog: 64 << 20,
        }
    }
}

impl ClusterConfig {
    /// Whether clustering is on.
    pub fn enabled(&self) -> bool {
        !self.store.is_empty()
    }

    /// This node's name: the configured one, or the host name.
    pub fn node_name(&self) -> String {
        if !self.node.is_empty() {
            return self.node.clone();
        }
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|name| name.trim().to_string())
            .ok()
            .filter(|name| !name.is_empty())
            .unwrap_or_else(|| "shoal".into())
    }

    /// Records problems under `[cluster]` for a tracker that can share its swarms when
    /// `shares_swarms`.
    pub fn validate(&self, problems: &mut Problems, shares_swarms: bool) {
        if !self.enabled() {
            return;
        }
        if !shares_swarms {
            problems.add(
                "store",
                "this tracker cannot share swarms across nodes; leave it empty",
            );
            return;
        }
        problems.check(
            self.store.rsplit_once(':').is_some_and(|(host, port)| {
                !host.is_empty() && port.parse::<u16>().is_ok_and(|port| port > 0)
            }),
            "store",
            format!(
                "{:?} is not host:port (e.g. \"127.0.0.1:6379\")",
                self.store
            ),
        );
        problems.check(
            !self.name.is_empty()
                && self
                    .name
                    .bytes()
                    .all(|byte| byte.is_ascii_alphanumeric() || b"-_.".contains(&byte)),
            "name",
            "must be letters, digits, '-', '_' or '.'",
        );
        problems.check(
            (1..=10_000).contains(&self.publish_interval_ms),
            "publish_interval_ms",
            "must be 1 to 10000",
        );
        problems.check(
            (10..=60_000).contains(&self.timeout_ms),
            "timeout_ms",
            "must be 10 to 60000",
        );
        problems.within("backlog", self.backlog, 1 << 20..=1 << 36);
    }
}

/// Periodic statistics in the log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, TomlConfig)]
#[serde(default, deny_unknown_fields)]
pub struct StatisticsConfig {
    /// Seconds between statistics lines in the log (request rates, refusals, drops,
    /// torrents, peers); 0 turns them off.
    pub interval: u32,
}

impl Default for StatisticsConfig {
    fn default() -> Self {
        Self { interval: 60 }
    }
}
