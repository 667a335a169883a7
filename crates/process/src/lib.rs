//! The process around shoal's trackers: how a binary runs one tracker or several, and
//! what it does for them while they serve.
//!
//! A started tracker is a [`RunningTracker`], whatever carries its requests. Around it
//! the process handles signals (stop, reload), drops privileges once the sockets are
//! bound, tells systemd it is ready and alive, serves the monitoring endpoint and gives
//! memory back after a busy spell. What changes here is how a tracker is operated; the
//! workers themselves (`shoal_worker`) and the transports (`shoal_udp`, `shoal_tcp`)
//! are not touched by it.
//!
//! # Layout
//!
//! Every module is private; what other crates use is re-exported at the root below.
//!
//! * `running`: a started tracker's handle, and what a tracker process does with one
//!   or several (signals, privileges, systemd notifications, monitoring, waiting).
//! * `handle`: what every running tracker has: its addresses, its workers and the
//!   way to stop them.
//! * `monitor`: the monitoring endpoint: Prometheus metrics, statistics page and
//!   JSON, health.
//! * `admin`: the admin API: users, torrents and access-list entries changed live.
//! * `clients`: the connections of both (deadlines, bounded requests, a cap).
//! * `process_metrics`: the process's own figures (CPU, memory, open files).
//! * `open_files`: the open-files limit raised to what the connections need.
//! * `memory`: giving memory the tracker freed back to the system after a busy
//!   spell.

mod admin;
mod clients;
mod handle;
mod memory;
mod monitor;
mod open_files;
mod process_metrics;
mod running;

pub use admin::{AdminApi, AdminTarget};
pub use handle::Running;
pub use monitor::Monitored;
pub use running::{
    Listening, Prepared, Reload, RunningTracker, Servable, Served, list_reloads, run_trackers,
    run_until_stopped,
};
