//! Helpers for the trackers' integration tests (feature `testing`).

use std::time::{Duration, Instant};

/// How long [`eventually`] waits. Generous: it returns as soon as the condition holds,
/// and workers flush statistics every 100 ms, so only a failing test waits this long.
pub const EVENTUALLY: Duration = Duration::from_secs(10);

/// Checks `condition` every 10 ms until it holds or [`EVENTUALLY`] passes; returns
/// whether it held. For what a running tracker does on its own time: counters flushed,
/// gauges published, a cleaning pass.
pub fn eventually(mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + EVENTUALLY;
    while Instant::now() < deadline {
        if condition() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    condition()
}
