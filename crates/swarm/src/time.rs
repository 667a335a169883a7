//! Time as the swarm sees it: whole seconds since the tracker started.
//!
//! Seconds are fine-grained enough for announce intervals and expiry, fit peers into
//! four bytes each, and make tests exact: a test advances a [`Clock`] instead of sleeping.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

/// Whole seconds since the tracker's [`Clock`] started. Wraps after 136 years.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServerTime(pub u32);

impl ServerTime {
    /// This time plus `seconds`, saturating rather than wrapping.
    #[must_use]
    pub fn plus(self, seconds: u32) -> Self {
        Self(self.0.saturating_add(seconds))
    }

    /// Seconds from `earlier` to `self`, or `None` if `earlier` is in the future.
    pub fn seconds_since(self, earlier: ServerTime) -> Option<u32> {
        self.0.checked_sub(earlier.0)
    }
}

/// The time source the daemons share: monotonic, starts at zero.
///
/// [`Clock::advance`] moves it forward without waiting, which is how integration tests
/// expire peers and connection ids without sleeping.
#[derive(Debug)]
pub struct Clock {
    start: Instant,
    skipped_seconds: AtomicU32,
}

impl Clock {
    /// A clock that reads zero now.
    pub fn new() -> Self {
        Self {
            start: Instant::now(),
            skipped_seconds: AtomicU32::new(0),
        }
    }

    /// The current time.
    pub fn now(&self) -> ServerTime {
        let elapsed = self.start.elapsed().as_secs().min(u64::from(u32::MAX)) as u32;
        ServerTime(elapsed.saturating_add(self.skipped_seconds.load(Ordering::Relaxed)))
    }

    /// Jumps the clock forward by `seconds` (for tests and simulations).
    pub fn advance(&self, seconds: u32) {
        self.skipped_seconds.fetch_add(seconds, Ordering::Relaxed);
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advance_moves_now_forward() {
        let clock = Clock::new();
        let before = clock.now();
        clock.advance(100);
        assert!(clock.now().seconds_since(before).unwrap() >= 100);
    }

    #[test]
    fn arithmetic_saturates() {
        assert_eq!(ServerTime(u32::MAX - 1).plus(10), ServerTime(u32::MAX));
        assert_eq!(ServerTime(5).seconds_since(ServerTime(7)), None);
        assert_eq!(ServerTime(7).seconds_since(ServerTime(5)), Some(2));
    }
}
