//! Starting the HTTP tracker: the start-up is the TCP trackers' shared one
//! (`shoal_tcp::start`), given what makes HTTP a TCP tracker (`socket::HttpTracker`).

use std::sync::Arc;

use shoal_swarm::Clock;
use shoal_tcp::{PreparedTcpTracker, RunningTcpTracker};

use crate::socket::HttpTracker;
use crate::stats::SharedSocketCounters;

/// A running HTTP tracker; dropping it shuts it down.
pub type RunningTracker = RunningTcpTracker<SharedSocketCounters>;

/// Prepares a tracker on `clock`: checks, loads files and binds; serving starts with
/// `serve` on the result.
pub fn prepare(
    config: crate::Config,
    clock: Arc<Clock>,
) -> anyhow::Result<PreparedTcpTracker<SharedSocketCounters>> {
    shoal_tcp::prepare::<HttpTracker>(config, clock)
}

/// Starts a tracker with its own clock.
pub fn start(config: crate::Config) -> anyhow::Result<RunningTracker> {
    start_with_clock(config, Arc::new(Clock::new()))
}

/// Starts a tracker on a given clock (tests share one to move time forward).
pub fn start_with_clock(
    config: crate::Config,
    clock: Arc<Clock>,
) -> anyhow::Result<RunningTracker> {
    shoal_tcp::start::<HttpTracker>(config, clock)
}
