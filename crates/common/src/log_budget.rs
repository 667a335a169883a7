//! How many messages of one kind a thread may log: a few in a row, then one now and
//! then, with a count of those left out.
//!
//! An attacker can provoke some messages at will: a ban for every spoofed source
//! address, a receive queue that shrinks and grows with a flood in spells, an accept
//! that fails every 50 ms while descriptors run out. Logged each time, they fill the
//! journal, whose own rate limit then drops the lines that matter, and every line is a
//! blocking write on a worker. The events are counted in the metrics either way; the
//! log gets the first few and then a line per period saying how many it missed.

use std::time::{Duration, Instant};

/// Messages of one kind: `burst` in a row, then one more per `refill`.
#[derive(Clone, Debug)]
pub struct LogBudget {
    burst: u32,
    refill: Duration,
    left: u32,
    refilled_at: Option<Instant>,
    unlogged: u32,
}

impl LogBudget {
    /// `burst` messages in a row (at least one), then one per `refill` (at least a
    /// second).
    pub fn new(burst: u32, refill: Duration) -> Self {
        let burst = burst.max(1);
        Self {
            burst,
            refill: refill.max(Duration::from_secs(1)),
            left: burst,
            refilled_at: None,
            unlogged: 0,
        }
    }

    /// For a message at `now`: `Some(messages left out before it)` if it may be
    /// logged, `None` (and counted) if not.
    pub fn take(&mut self, now: Instant) -> Option<u32> {
        self.refill(now);
        if self.left == 0 {
            self.unlogged = self.unlogged.saturating_add(1);
            return None;
        }
        self.left -= 1;
        Some(std::mem::take(&mut self.unlogged))
    }

    /// With nothing to log at `now`: `Some(messages left out)` when there are some and
    /// one more message is allowed, so that a summary can say how many (and the
    /// log's last word is never more than a period out of date).
    pub fn take_for_summary(&mut self, now: Instant) -> Option<u32> {
        if self.unlogged == 0 {
            return None;
        }
        self.refill(now);
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        Some(std::mem::take(&mut self.unlogged))
    }

    fn refill(&mut self, now: Instant) {
        let since = *self.refilled_at.get_or_insert(now);
        let periods = now.duration_since(since).as_nanos() / self.refill.as_nanos();
        if periods > 0 {
            let periods = u32::try_from(periods).unwrap_or(u32::MAX);
            self.left = self.burst.min(self.left.saturating_add(periods));
            self.refilled_at = Some(now);
        }
    }
}

/// " (N more left out)" for a message that follows `unlogged` left-out ones, or
/// nothing.
pub fn left_out(unlogged: u32) -> String {
    if unlogged == 0 {
        String::new()
    } else {
        format!(" ({unlogged} more like it not logged)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_few_in_a_row_then_one_a_period_with_the_count() {
        let start = Instant::now();
        let mut log = LogBudget::new(6, Duration::from_secs(60));
        let at = |ms: u64| start + Duration::from_millis(ms);
        // Six messages 1.3 s apart are logged; the next ones are counted.
        for i in 0..6 {
            assert_eq!(log.take(at(i * 1300)), Some(0), "message {i}");
        }
        for i in 6..20 {
            assert_eq!(log.take(at(i * 1300)), None, "message {i}");
        }
        // No summary before a minute from the first has passed...
        assert_eq!(log.take_for_summary(at(59_000)), None);
        // ...then one, with the count, and the next message waits again.
        assert_eq!(log.take_for_summary(at(60_000)), Some(14));
        assert_eq!(log.take_for_summary(at(60_100)), None);
        assert_eq!(log.take(at(61_000)), None);
        // A minute on, the message is logged with the one left out.
        assert_eq!(log.take(at(120_000)), Some(1));
        // A long quiet spell gives the whole burst back, no more.
        for i in 0..6 {
            assert_eq!(
                log.take(at(3_600_000 + i)),
                Some(0),
                "message {i} after an hour"
            );
        }
        assert_eq!(log.take(at(3_600_010)), None);
    }

    #[test]
    fn at_least_one_message_and_a_second_between() {
        let start = Instant::now();
        let mut log = LogBudget::new(0, Duration::ZERO);
        assert_eq!(log.take(start), Some(0));
        assert_eq!(log.take(start + Duration::from_millis(500)), None);
        assert_eq!(log.take(start + Duration::from_millis(1000)), Some(1));
    }

    #[test]
    fn left_out_says_how_many() {
        assert_eq!(left_out(0), "");
        assert_eq!(left_out(3), " (3 more like it not logged)");
    }
}
