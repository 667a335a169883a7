//! What every shoal tracker binary shares.
//!
//! # Layout
//!
//! * [`cli`]: the command line (`-c`, `-p`, `-P`, `--version`, `--help`) and the
//!   start-up sequence every binary runs: parse, load and validate the config, set up
//!   logging, run, report errors with their whole cause chain, exit non-zero on failure.
//! * [`config`]: the [`config::TrackerConfig`] trait, loading TOML with
//!   errors that name the file and key, and validation that reports every bad value.
//! * [`tracker_config`]: the file every tracker shares in shape
//!   ([`Config`](tracker_config::Config) over a [`TrackerKind`](tracker_config::TrackerKind)),
//!   and the listening addresses every `[network]` section starts with.
//! * [`process_config`]: what belongs to the process, not to one tracker (logging, the
//!   monitoring endpoint, privileges), and [`sections`]: two config types in one table.
//! * [`process_metrics`]: the process's memory, CPU and file descriptors under the
//!   standard `process_*` metric names, read from `/proc` when scraped.
//! * [`env_overrides`]: `SHOAL__SECTION__KEY` variables over the file.
//! * [`files`]: reading the files an operator names, regular files only, bounded.
//! * [`access_list`]: allow/deny lists of info hashes, swapped atomically on reload so
//!   workers never wait for it.
//! * [`supervisor`]: named worker threads; if one panics or returns, the process exits.
//! * [`signals`]: SIGTERM/SIGINT request shutdown, SIGUSR1 reloads.
//! * [`notify`]: systemd's `READY=1`, `RELOADING=1`, `STOPPING=1` and watchdog.
//! * [`privileges`]: chroot and setgid/setuid once sockets are bound.
//! * [`running`]: the handle of a started tracker: addresses, stop, wait.
//! * [`cpu`]: pinning worker threads to cores.
//! * [`ip_net`]: IP networks (CIDR) as config values.
//! * [`heartbeat`]: each worker's last round, to tell a stuck worker from an idle one.
//! * [`http_head`]: when a request head read in pieces is worth parsing.
//! * [`log_budget`]: at most a few messages of a kind in a row, then one a period.
//! * [`logging`]: a small stderr logger: plain, journald priorities or JSON, filtered by
//!   `SHOAL_LOG`.
//! * [`metrics`]: per-worker counters flushed into padded atomics;
//!   [`cluster_stats`]: what the cluster threads count (`[cluster]`).
//! * `padded`: values on cache lines of their own (counters, heartbeats).
//! * [`observe`]: counters and gauges as metric families for the monitoring endpoint.
//! * `testing` (feature `testing`): the integration tests' `eventually`.
//! * [`udp_batch`]: many datagrams per system call (`recvmmsg`/`sendmmsg`).
//! * [`sockets`]: binding each socket worker's own sockets to the same addresses
//!   (SO_REUSEPORT), TCP listeners.
//! * [`io_uring`]: whether the kernel lets this process use io_uring, and why not.
//! * [`memlock`]: the locked-memory check io_uring (glommio) needs before any
//!   executor starts.
//! * [`executor`] (feature `glommio`): socket workers' glommio executors and accept
//!   loops.
//! * [`tls`] (feature `glommio`): certificates from PEM files, reloaded on SIGUSR1.

pub mod access_list;
pub mod cli;
pub mod cluster_stats;
pub mod config;
pub mod cpu;
pub mod env_overrides;
#[cfg(feature = "glommio")]
pub mod executor;
pub mod files;
pub mod heartbeat;
pub mod http_head;
pub mod io_uring;
pub mod ip_net;
pub mod log_budget;
pub mod logging;
pub mod memlock;
pub mod metrics;
pub mod notify;
pub mod observe;
mod padded;
pub mod privileges;
pub mod process_config;
pub mod process_metrics;
pub mod running;
pub mod sections;
pub mod signals;
pub mod sockets;
pub mod supervisor;
#[cfg(feature = "testing")]
pub mod testing;
#[cfg(feature = "glommio")]
pub mod tls;
pub mod tracker_config;
pub mod udp_batch;

pub use access_list::{AccessControl, AccessListConfig, AccessListMode};
pub use cli::{AppInfo, run_cli};
pub use config::{
    CleaningConfig, ClusterConfig, Problems, StateConfig, StatisticsConfig, TrackerConfig,
};
pub use cpu::CpuPinningConfig;
pub use logging::{LogLevel, LoggingConfig};
pub use privileges::PrivilegeConfig;
pub use process_config::{MetricsConfig, ProcessConfig};
pub use running::Running;
pub use supervisor::{Shutdown, Supervisor};
