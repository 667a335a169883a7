//! When each worker last went round its loop: how a stuck worker is told from an idle
//! one.
//!
//! Every socket and swarm worker wakes at least every `Shutdown::POLL_INTERVAL`, busy
//! or not, and stamps its slot once per round (a relaxed store to a cache line of its
//! own). A worker whose stamp is older than [`STALLED_AFTER`] is in a loop that does not
//! come back: a deadlock, an endless loop, a blocking call that hangs. Then the tracker
//! is not healthy: `/health` answers 503, and systemd's watchdog is no longer pinged,
//! so a unit with `WatchdogSec=` restarts it.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use crate::padded::CachePadded;

/// How long a worker may go without a round before it counts as stuck. Every bounded
/// piece of work (a batch, a cleaning or snapshot slice) takes milliseconds at most.
pub(crate) const STALLED_AFTER: Duration = Duration::from_secs(10);

/// A slot no worker has stamped yet: not watched (a worker that hangs before its
/// first round is caught by the start-up timeout instead).
const NOT_STARTED: u64 = u64::MAX;

/// One stamp per worker, in milliseconds since the set was made, and the time each
/// worker has spent working (not waiting for work), in nanoseconds since it started:
/// how busy it is, for the adaptive interval.
#[derive(Debug)]
pub(crate) struct Heartbeats {
    epoch: Instant,
    slots: Box<[CachePadded<AtomicU64>]>,
    busy: Box<[CachePadded<AtomicU64>]>,
    names: Box<[String]>,
}

impl Heartbeats {
    /// Slots for workers called `names` (`socket-0`, `swarm-1`…), in that order.
    pub(crate) fn new(names: Vec<String>) -> Self {
        Self {
            epoch: Instant::now(),
            slots: names
                .iter()
                .map(|_| CachePadded(AtomicU64::new(NOT_STARTED)))
                .collect(),
            busy: names.iter().map(|_| CachePadded::default()).collect(),
            names: names.into_boxed_slice(),
        }
    }

    /// Worker `index` went round its loop at `now`.
    pub(crate) fn beat(&self, index: usize, now: Instant) {
        let millis = now.saturating_duration_since(self.epoch).as_millis();
        self.slots[index].store(u64::try_from(millis).unwrap_or(NOT_STARTED - 1), Relaxed);
    }

    /// Worker `index` worked for `busy` more (only that worker adds to its slot).
    pub(crate) fn add_busy(&self, index: usize, busy: Duration) {
        let slot = &self.busy[index];
        let nanos = u64::try_from(busy.as_nanos()).unwrap_or(u64::MAX);
        slot.store(slot.load(Relaxed).saturating_add(nanos), Relaxed);
    }

    /// Nanoseconds each worker has worked, in slot order.
    pub(crate) fn busy(&self) -> Vec<u64> {
        self.busy.iter().map(|slot| slot.load(Relaxed)).collect()
    }

    /// The workers that have not gone round their loop for `limit` at `now`, with how
    /// long it has been.
    pub(crate) fn stalled(&self, now: Instant, limit: Duration) -> Vec<(&str, Duration)> {
        let now = now.saturating_duration_since(self.epoch);
        self.slots
            .iter()
            .zip(self.names.iter())
            .filter_map(|(slot, name)| {
                let beat = slot.load(Relaxed);
                if beat == NOT_STARTED {
                    return None;
                }
                let since = now.saturating_sub(Duration::from_millis(beat));
                (since >= limit).then_some((name.as_str(), since))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_that_stops_beating_is_stalled_and_one_never_started_is_not_watched() {
        let beats = Heartbeats::new(vec!["socket-0".into(), "swarm-0".into()]);
        let start = Instant::now();
        let at = |secs: u64| start + Duration::from_secs(secs);
        beats.beat(0, at(0));
        assert!(beats.stalled(at(9), STALLED_AFTER).is_empty());
        let stalled = beats.stalled(at(11), STALLED_AFTER);
        assert_eq!(stalled.len(), 1);
        assert_eq!(stalled[0].0, "socket-0");
        assert!(stalled[0].1 >= Duration::from_secs(11));
        // It goes round again: healthy.
        beats.beat(0, at(11));
        assert!(beats.stalled(at(12), STALLED_AFTER).is_empty());
        // swarm-0 never beat (its torrents are kept by the socket worker): never stalled.
        assert!(
            beats
                .stalled(at(3600), STALLED_AFTER)
                .iter()
                .all(|(name, _)| *name != "swarm-0")
        );
    }
}
