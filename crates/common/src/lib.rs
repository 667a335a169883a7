//! What every shoal binary shares, the trackers and the load testers alike: config
//! files and the command line, access lists, logging, signals and shutdown, and the
//! counters workers keep.
//!
//! What changes here is how shoal is configured and observed. How requests are carried
//! (`shoal_sockets`, `shoal_tcp`), how shards are kept (`shoal_worker`) and how a tracker
//! process runs (`shoal_process`) live in crates above this one.
//!
//! # Layout
//!
//! Every module is private; what other crates use is re-exported at the root below, so
//! the crate's public face is that one list.
//!
//! * `cli`: the command line (`-c`, `-p`, `-P`, `--version`, `--help`) and the
//!   start-up sequence every binary runs: parse, load and validate the config, set up
//!   logging, run, report errors with their whole cause chain, exit non-zero on failure.
//! * `config`: the [`TrackerConfig`] trait, loading TOML with errors that name the
//!   file and key, and validation that reports every bad value.
//! * `tracker_config`: the file every tracker shares in shape ([`Config`] over a
//!   [`TrackerKind`]), and the listening addresses every `[network]` section starts
//!   with.
//! * `process_config`: what belongs to the process, not to one tracker (logging, the
//!   monitoring endpoint, privileges), and `sections`: two config types in one table.
//! * `env_overrides`: `SHOAL__SECTION__KEY` variables over the file.
//! * `unknown_keys`: a key no setting has, named with its line and the nearest known
//!   spelling.
//! * `acme_keys`: the `acme_*` keys of a TLS `[network]` section and their checks.
//! * `private_config`: the `[private]` section (what it does is `shoal_private`'s).
//! * `client_rules`: which BitTorrent clients a tracker serves (`[clients]`), and
//!   which client software announces, counted.
//! * `files`: reading the files an operator names, regular files only, bounded.
//! * `access_list`: allow/deny lists of info hashes, swapped atomically on reload so
//!   workers never wait for it.
//! * `supervisor`: named worker threads; if one panics or returns, the process exits.
//! * `signals`: SIGTERM/SIGINT request shutdown, SIGUSR1 reloads.
//! * `notify`: systemd's `READY=1`, `RELOADING=1`, `STOPPING=1` and watchdog.
//! * `privileges`: chroot and setgid/setuid once sockets are bound.
//! * `cpu`: pinning worker threads to cores.
//! * `ip_net`: IP networks (CIDR) as config values.
//! * `heartbeat`: each worker's last round, to tell a stuck worker from an idle one.
//! * `log_budget`: at most a few messages of a kind in a row, then one a period.
//! * `logging`: a small stderr logger: plain, journald priorities or JSON, filtered by
//!   `SHOAL_LOG`.
//! * `metrics`: per-worker counters flushed into padded atomics;
//!   `cluster_stats`: what the cluster threads count (`[cluster]`).
//! * `padded`: values on cache lines of their own (counters, heartbeats).
//! * `observe`: counters and gauges as metric families for the monitoring endpoint;
//!   [`metric_names`]: the names of the families more than one tracker writes.
//! * `testing` (feature `testing`): the integration tests' `eventually` and a real
//!   `redis-server` to run against.

mod access_list;
mod acme_keys;
mod cli;
mod client_rules;
mod cluster_stats;
mod config;
mod cpu;
mod env_overrides;
mod files;
mod heartbeat;
mod ip_net;
mod log_budget;
mod logging;
pub mod metric_names;
mod metrics;
mod notify;
mod observe;
mod padded;
mod private_config;
mod privileges;
mod process_config;
mod sections;
mod signals;
mod supervisor;
#[cfg(feature = "testing")]
pub mod testing;
mod tracker_config;
mod unknown_keys;

pub use access_list::{
    AccessControl, AccessList, AccessListConfig, AccessListMode, AccessView, ListEdit,
    parse_hex_hash,
};
pub use acme_keys::{AcmeKeys, LETS_ENCRYPT};
pub use cli::{
    AppInfo, EXIT_NOT_STARTED, ExtraFlag, NotStarted, RELOAD_SIGNALS_HELP, config_sections,
    load_cli_config, run_cli, run_cli_with_args, run_cli_with_flags, wrap,
};
pub use client_rules::{
    ClientConfig, ClientCounts, ClientRefusal, ClientRules, KNOWN_CLIENTS, OTHER_CLIENT, RuleSet,
    SharedClientCounts,
};
pub use cluster_stats::ClusterStats;
pub use config::{
    CleaningConfig, ClusterConfig, Problems, StateConfig, StateKind, StatisticsConfig,
    TrackerConfig, load_effective as load_config_effective, parse as parse_config,
    parse_keys as parse_config_keys, to_toml as config_to_toml,
};
pub use cpu::{CpuPinningConfig, maybe_pin_current_thread};
pub use files::{
    FileStamp, FileUser, Reloaded, check_files_for, read_bounded, read_to_string_bounded,
    report_reload, unreadable, unwritable_directory,
};
pub use ip_net::IpNet;
pub use log_budget::{LogBudget, left_out};
pub use logging::{LogLevel, LoggingConfig, utc_timestamp};
pub use metrics::{
    CounterGroup, Counters, Embeds, GaugeSlot, LargeSwarm, ShardStatus, StatsSample, SummaryLine,
    Traffic, WorkerStats,
};
pub use notify::{notify_ready, notify_stopping, notify_systemd, watchdog_interval};
pub use observe::{Family, Histogram, MetricKind, Observation, Observe};
pub use private_config::PrivateConfig;
pub use privileges::{PrivilegeConfig, drop_privileges, file_user};
pub use process_config::{AdminConfig, MemoryConfig, MetricsConfig, ProcessAnd, ProcessConfig};
pub use sections::Both;
pub use signals::{ReloadHook, SignalThread, spawn_signal_thread};
pub use supervisor::{Shutdown, Supervisor};
#[doc(hidden)]
pub use tracker_config::enabled_addresses;
#[doc(hidden)]
pub use tracker_config::loopback_networks;
#[doc(hidden)]
pub use tracker_config::validate_addresses;
pub use tracker_config::{
    Config, DEFAULT_HANDSHAKE_TIMEOUT, HeaderPosition, IntervalConfig, IoBackend, LONGEST_INTERVAL,
    Listen, PerIpConfig, QueueLimits, ReverseProxy, TcpKeys, TcpNetwork, TrackerFile, TrackerKind,
};
