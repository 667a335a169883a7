//! Fixed-rate sending: how many requests are due now, and how many to give up on
//! when the sender has fallen far behind.
//!
//! A fixed rate (an open loop) sends on schedule whatever the replies do, which shows
//! how a tracker copes with a given load; a load paced by replies can only show how
//! much it serves at most. A sender that stalls (descheduled, or slower than its rate)
//! must not make up for it in one burst the tracker never sees in real traffic, so
//! only a bounded number of late requests is sent and the rest are skipped, counted.
//!
//! No clock reads here: callers pass the time, so the tests need no sleeps.

use std::time::{Duration, Instant};

/// Requests due at one look at the clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Due {
    /// To send now.
    pub send: u64,
    /// Not sent: too far behind (or the caller could not send them).
    pub skipped: u64,
}

impl Due {
    /// Everything due skipped (the caller cannot send now).
    pub fn skip_all(self) -> Self {
        Self {
            send: 0,
            skipped: self.send + self.skipped,
        }
    }
}

/// `per_second` requests a second from a start time on. Requests are counted from the
/// start rather than by adding up a rounded period, so the rate holds exactly over a
/// long run.
#[derive(Clone, Copy, Debug)]
pub struct FixedRate {
    start: Instant,
    per_second: f64,
    /// Requests due so far (sent or skipped).
    issued: u64,
    max_catch_up: u64,
}

impl FixedRate {
    /// One request every `period`, the first due at `start`. At most `max_catch_up`
    /// requests are sent at one look; older ones are skipped.
    pub fn new(period: Duration, start: Instant, max_catch_up: u64) -> Self {
        Self::per_second(1.0 / period.as_secs_f64().max(1e-12), start, max_catch_up)
    }

    /// `per_second` requests a second, the first due at `start`. The rate is kept
    /// between one request in about 30 years (1e-9 a second; also what a rate that is
    /// not a positive number becomes) and 1e12 a second, so that every time computed
    /// from it stays a valid `Duration`.
    pub fn per_second(per_second: f64, start: Instant, max_catch_up: u64) -> Self {
        debug_assert!(
            per_second.is_finite() && per_second > 0.0,
            "rate {per_second}"
        );
        Self {
            start,
            per_second: if per_second.is_nan() {
                1e-9
            } else {
                per_second.clamp(1e-9, 1e12)
            },
            issued: 0,
            max_catch_up: max_catch_up.max(1),
        }
    }

    /// When the next request is due (rounded up to the nanosecond, so that [`due`]
    /// counts it then).
    ///
    /// [`due`]: Self::due
    pub fn next(&self) -> Instant {
        self.start
            + Duration::from_secs_f64(self.issued as f64 / self.per_second)
            + Duration::from_nanos(1)
    }

    /// The requests due at `now`; the schedule moves past them.
    pub fn due(&mut self, now: Instant) -> Due {
        let Some(elapsed) = now.checked_duration_since(self.start) else {
            return Due::default();
        };
        let total = ((elapsed.as_secs_f64() * self.per_second) as u64).saturating_add(1);
        let behind = total.saturating_sub(self.issued);
        self.issued = self.issued.max(total);
        let send = behind.min(self.max_catch_up);
        Due {
            send,
            skipped: behind - send,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn sends_on_schedule_and_skips_when_far_behind() {
        let start = Instant::now();
        let mut rate = FixedRate::new(10 * MS, start, 64);
        assert_eq!(rate.due(start).send, 1);
        assert_eq!(rate.due(start + 5 * MS), Due::default());
        assert_eq!(rate.next(), start + 10 * MS + Duration::from_nanos(1));
        assert_eq!(rate.due(start + 10 * MS).send, 1);
        // 35 ms later: due at 20, 30 and 40 ms.
        assert_eq!(rate.due(start + 45 * MS).send, 3);
        assert_eq!(
            rate.due(start + 55 * MS).skip_all(),
            Due {
                send: 0,
                skipped: 1
            }
        );
        // A second behind: 100 due, 64 sent, the rest skipped.
        assert_eq!(
            rate.due(start + 1059 * MS),
            Due {
                send: 64,
                skipped: 36
            }
        );
        assert_eq!(rate.due(start + 1060 * MS).send, 1);
    }

    #[test]
    fn high_rates_come_due_in_proportion() {
        let start = Instant::now();
        let mut rate = FixedRate::per_second(300_000.0, start, 1_000_000);
        let mut sent = 0;
        for ms in 0..=1000 {
            sent += rate.due(start + ms * MS).send;
        }
        // Due at 0, 3.33 µs, ... up to 1 s: 300,001 requests, none skipped.
        assert!((299_990..=300_010).contains(&sent), "{sent}");
    }
}
