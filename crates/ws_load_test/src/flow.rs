//! When a connection sends its announces and scrapes, which replies end a wait, and
//! when it has waited too long.
//!
//! Two paces: as fast as replies come (keep `in_flight` requests waiting, send one
//! more per reply: the load follows what the tracker serves, which is how a tracker is
//! saturated), or a fixed rate per connection (requests go out on schedule whatever
//! the replies do, which shows how a tracker copes with a given load).
//!
//! A reply ends the wait of the request it names: an announce reply (or error) names
//! the info hash, a scrape reply is a scrape reply. Matching matters because trackers
//! differ in what else they send: aquatic_ws also replies to each answer (an announce
//! carrying an answer), shoal_ws does not, and both send errors for answers they do
//! not relay. A reply that matches no waiting request is counted but frees nothing, so
//! the number of requests in flight never drifts from what is configured.
//!
//! No clock reads here: callers pass the time, so the tests below need no sleeps.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use shoal_load_test_common::{Due, FixedRate};
use shoal_ws_protocol::Id20;

/// Most requests one connection sends at once to catch up in fixed-rate mode; those
/// further behind are skipped (and counted), so a stalled worker does not burst.
const MAX_CATCH_UP: u64 = 64;
/// Most requests remembered as waiting (fixed-rate mode against a tracker that does
/// not reply); past it the oldest are forgotten.
const MAX_WAITING: usize = 4096;

/// How a connection paces its requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pace {
    /// Keep this many requests waiting for replies.
    Replies {
        /// Requests waiting at once.
        in_flight: u32,
    },
    /// One request every `period`.
    Rate {
        /// Time between two requests.
        period: Duration,
    },
}

/// A request waiting for its reply, or what a reply is to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Request {
    /// An announce in this torrent; a reply without an info hash says `None`.
    Announce(Option<Id20>),
    /// A scrape.
    Scrape,
    /// Any request (an error reply that names no action).
    Any,
}

impl Request {
    /// Whether a reply to `self` ends the wait of `waiting`.
    fn ends(self, waiting: Request) -> bool {
        match (self, waiting) {
            (Self::Any, _) | (Self::Scrape, Self::Scrape) => true,
            (Self::Announce(None), Self::Announce(_)) => true,
            (Self::Announce(Some(replied)), Self::Announce(Some(sent))) => replied == sent,
            _ => false,
        }
    }
}

/// One connection's requests waiting for replies.
#[derive(Clone, Debug)]
pub(crate) struct Flow {
    sending: Sending,
    /// Requests sent and not yet replied to, with when they were sent, oldest first.
    waiting: VecDeque<(Request, Instant)>,
    /// Since when the connection has waited for a reply: the last reply that ended a
    /// wait, or the send that started one.
    waiting_since: Instant,
}

/// What decides when a connection sends: the replies, or the clock.
#[derive(Clone, Copy, Debug)]
enum Sending {
    /// Keep this many requests waiting.
    Replies(usize),
    /// On schedule.
    Rate(FixedRate),
}

impl Flow {
    /// A flow for a connection opened at `now`; in fixed-rate mode the first request
    /// is due at once.
    pub(crate) fn new(pace: Pace, now: Instant) -> Self {
        let (sending, capacity) = match pace {
            Pace::Replies { in_flight } => {
                (Sending::Replies(in_flight as usize), in_flight as usize)
            }
            Pace::Rate { period } => (Sending::Rate(FixedRate::new(period, now, MAX_CATCH_UP)), 4),
        };
        Self {
            sending,
            waiting: VecDeque::with_capacity(capacity),
            waiting_since: now,
        }
    }

    /// Requests waiting for replies.
    pub(crate) fn in_flight(&self) -> usize {
        self.waiting.len()
    }

    /// Notes `request` sent at `now`.
    pub(crate) fn sent(&mut self, request: Request, now: Instant) {
        if self.waiting.is_empty() {
            self.waiting_since = now;
        }
        if self.waiting.len() >= MAX_WAITING {
            self.waiting.pop_front();
        }
        self.waiting.push_back((request, now));
    }

    /// Notes a reply to `request` at `now`; when it ended a wait (the oldest matching
    /// request's), returns when that request was sent.
    pub(crate) fn replied(&mut self, request: Request, now: Instant) -> Option<Instant> {
        let at = self
            .waiting
            .iter()
            .position(|&(waiting, _)| request.ends(waiting))?;
        let (_, sent) = self.waiting.remove(at)?;
        self.waiting_since = now;
        Some(sent)
    }

    /// The requests to send at `now`. `backlogged`: the connection still holds
    /// unsent bytes past its limit, so fixed-rate requests are skipped.
    pub(crate) fn due(&mut self, now: Instant, backlogged: bool) -> Due {
        match &mut self.sending {
            Sending::Replies(in_flight) => Due {
                send: in_flight.saturating_sub(self.waiting.len()) as u64,
                skipped: 0,
            },
            Sending::Rate(schedule) => {
                let due = schedule.due(now);
                if backlogged { due.skip_all() } else { due }
            }
        }
    }

    /// Whether requests have waited longer than `timeout` for a reply.
    pub(crate) fn timed_out(&self, now: Instant, timeout: Duration) -> bool {
        !self.waiting.is_empty() && now.saturating_duration_since(self.waiting_since) > timeout
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn announce(byte: u8) -> Request {
        Request::Announce(Some(Id20([byte; 20])))
    }

    #[test]
    fn reply_paced_connections_keep_their_requests_in_flight() {
        let start = Instant::now();
        let mut flow = Flow::new(Pace::Replies { in_flight: 3 }, start);
        assert_eq!(flow.due(start, false).send, 3);
        for byte in 1..=3 {
            flow.sent(announce(byte), start);
        }
        assert_eq!(flow.due(start, false).send, 0);
        // The reply names the request it ends, and so when that was sent.
        assert_eq!(flow.replied(announce(2), start + MS), Some(start));
        assert_eq!(flow.due(start + MS, false).send, 1);
        flow.sent(Request::Scrape, start + MS);
        assert_eq!(
            flow.replied(Request::Scrape, start + 3 * MS),
            Some(start + MS)
        );
        assert!(
            flow.replied(Request::Scrape, start + MS).is_none(),
            "one reply each"
        );
        assert_eq!(flow.in_flight(), 2);
    }

    #[test]
    fn replies_to_answers_and_refused_answers_free_nothing() {
        let start = Instant::now();
        let mut flow = Flow::new(Pace::Replies { in_flight: 1 }, start);
        flow.sent(announce(1), start);
        // aquatic_ws replies to an answer in torrent 7; shoal_ws refuses one there.
        assert!(flow.replied(announce(7), start).is_none());
        assert_eq!(flow.due(start, false).send, 0);
        // The announce's own reply, or its error, does.
        assert!(flow.replied(announce(1), start).is_some());
        assert_eq!(flow.due(start, false).send, 1);
        flow.sent(announce(1), start);
        assert!(flow.replied(Request::Announce(None), start).is_some());
        flow.sent(Request::Scrape, start);
        assert!(flow.replied(announce(1), start).is_none());
        assert!(flow.replied(Request::Any, start).is_some());
    }

    #[test]
    fn fixed_rate_sends_on_schedule_and_skips_when_far_behind() {
        let start = Instant::now();
        let mut flow = Flow::new(Pace::Rate { period: 10 * MS }, start);
        assert_eq!(flow.due(start, false).send, 1);
        assert_eq!(flow.due(start + 5 * MS, false).send, 0);
        assert_eq!(flow.due(start + 10 * MS, false).send, 1);
        // 35 ms later: due at 20, 30 and 40 ms.
        assert_eq!(flow.due(start + 45 * MS, false).send, 3);
        assert_eq!(
            flow.due(start + 55 * MS, true),
            Due {
                send: 0,
                skipped: 1
            }
        );
        // A second behind: 100 due, 64 sent, the rest skipped.
        let due = flow.due(start + 1059 * MS, false);
        assert_eq!((due.send, due.skipped), (64, 36));
        assert_eq!(flow.due(start + 1060 * MS, false).send, 1);
        // Unanswered requests are remembered up to a bound.
        for _ in 0..MAX_WAITING + 10 {
            flow.sent(Request::Scrape, start);
        }
        assert_eq!(flow.in_flight(), MAX_WAITING);
    }

    #[test]
    fn timeouts_count_from_the_last_reply() {
        let start = Instant::now();
        let timeout = 100 * MS;
        let mut flow = Flow::new(Pace::Replies { in_flight: 2 }, start);
        assert!(
            !flow.timed_out(start + 10 * timeout, timeout),
            "nothing waits"
        );
        flow.sent(announce(1), start);
        flow.sent(announce(2), start + 50 * MS);
        assert!(!flow.timed_out(start + 100 * MS, timeout));
        assert!(flow.timed_out(start + 101 * MS, timeout));
        flow.replied(announce(1), start + 90 * MS);
        assert!(!flow.timed_out(start + 150 * MS, timeout));
        assert!(flow.timed_out(start + 191 * MS, timeout));
    }
}
