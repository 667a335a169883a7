//! Simulated clients that obey the tracker the way libtorrent does, so the load a
//! tracker sees depends on what it tells them, as in the wild.
//!
//! Each client is one peer of the population announcing one torrent. It announces,
//! then:
//!
//! * answered: comes back after the reply's interval (never sooner than
//!   `interval_floor`; libtorrent keeps at least its `min_announce_interval`);
//! * refused with an interval (a failure that carries one, a busy reply): comes back
//!   after the longer of that interval and its backoff;
//! * unanswered for `timeout`, or refused without an interval (a UDP error): counts a
//!   failure and comes back after its backoff, libtorrent's
//!   `retry_min + fails² × retry_min × backoff_percent / 100`, at most `retry_max`.
//!
//! No clock and no I/O: the caller says what time it is, sends the clients
//! [`due`](Obeying::due) hands out, and reports what came back. Times are
//! microseconds since the population was made.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use shoal_toml_config::TomlConfig;

/// Simulated clients that obey the tracker, as libtorrent does: the load follows
/// what the tracker tells them. Off while `count` is 0.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, TomlConfig)]
#[serde(default, deny_unknown_fields)]
pub struct ClientsConfig {
    /// Clients in all (over every worker); 0 turns this mode off. Each is one peer
    /// of the population announcing its torrent, coming back after the interval the
    /// tracker gives (or the interval of a refusal), backing off after a timeout or
    /// an error as libtorrent does (5 s, then 17.5, 55, 117.5 s ..., at most an
    /// hour).
    pub count: usize,
    /// Seconds over which their first announces are spread (a population at rest
    /// that announces every this many seconds); 0 starts them all at once.
    pub spread: u32,
    /// The clients' own timings (the 15 s timeout, the backoff) divided by this:
    /// against a tracker whose intervals are scaled down alike, a run covers hours in
    /// minutes. The timeout stays at least 2 s (the tracker's queueing is not
    /// scaled).
    pub time_scale: f64,
    /// Seconds into the run at which one client in `restart_every` announces again
    /// at once, over a second (a wave of restarted clients); 0: none.
    pub restart_at: u32,
    /// See `restart_at`.
    pub restart_every: usize,
    /// Seconds an announce may wait for its answer, not scaled by `time_scale` (a
    /// tracker's queueing is real time); 0: libtorrent's 15 s over `time_scale`, at
    /// least 2 s. libtorrent waits up to 10 s for an HTTP tracker's response
    /// (`tracker_receive_timeout`) and 15 s over UDP.
    pub timeout: u32,
}

impl Default for ClientsConfig {
    fn default() -> Self {
        Self {
            count: 0,
            spread: 1800,
            time_scale: 1.0,
            restart_at: 0,
            restart_every: 2,
            timeout: 0,
        }
    }
}

impl ClientsConfig {
    /// Checks the keys; `peers` is the population's size.
    pub fn validate(&self, problems: &mut shoal_common::Problems, peers: usize) {
        problems.check(
            self.count <= peers,
            "count",
            format!("must be at most requests.peers ({peers}): each client is one peer"),
        );
        problems.check(
            self.time_scale > 0.0 && self.time_scale <= 1000.0,
            "time_scale",
            "must be above 0 and at most 1000",
        );
        problems.check(
            self.restart_every >= 1,
            "restart_every",
            "must be at least 1",
        );
        problems.check(
            self.timeout <= 3600,
            "timeout",
            "must be at most 3600 seconds",
        );
    }

    /// The clients of worker `worker` of `workers`: the first one's index, and their
    /// settings.
    pub fn share(&self, worker: usize, workers: usize) -> (usize, ObeyingSettings) {
        let first = self.count * worker / workers.max(1);
        let end = self.count * (worker + 1) / workers.max(1);
        let mut settings = ObeyingSettings::libtorrent(
            end - first,
            Duration::from_secs(u64::from(self.spread)),
            self.time_scale,
        );
        if self.timeout > 0 {
            settings.timeout = Duration::from_secs(u64::from(self.timeout));
        }
        (first, settings)
    }
}

/// The shortest timeout scaled timings keep (see [`ObeyingSettings::libtorrent`]).
pub const MIN_TIMEOUT: Duration = Duration::from_secs(2);

/// How the clients behave.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ObeyingSettings {
    /// Clients in this population.
    pub clients: usize,
    /// Their first announces are spread evenly over this long (a population at
    /// rest); zero starts them all at once (a lockstep start).
    pub spread: Duration,
    /// An announce not answered within this long has failed (libtorrent: 15 s over
    /// UDP).
    pub timeout: Duration,
    /// The backoff after failures: libtorrent's `tracker_retry_delay_min` (5 s),
    /// `tracker_retry_delay_max` (an hour) and `tracker_backoff` (250).
    pub retry_min: Duration,
    pub retry_max: Duration,
    pub backoff_percent: u32,
    /// The shortest interval a client waits after an answer, whatever the tracker
    /// says.
    pub interval_floor: Duration,
}

impl ObeyingSettings {
    /// libtorrent's timings for `clients` spread over `spread`, every duration
    /// divided by `time_scale` (10 runs a 30-minute interval in 3 minutes), except
    /// that the timeout stays at least [`MIN_TIMEOUT`]: a tracker's own queueing (tens
    /// to hundreds of milliseconds when overloaded) is not scaled, and against 15 s
    /// it is nothing, so a scaled timeout must not turn it into lost answers.
    pub fn libtorrent(clients: usize, spread: Duration, time_scale: f64) -> Self {
        let scale = |seconds: f64| Duration::from_secs_f64(seconds / time_scale.max(1e-3));
        Self {
            clients,
            spread,
            timeout: scale(15.0).max(MIN_TIMEOUT),
            retry_min: scale(5.0),
            retry_max: scale(3600.0),
            backoff_percent: 250,
            interval_floor: Duration::ZERO,
        }
    }

    /// The wait after `fails` failures in a row.
    pub fn backoff(&self, fails: u32) -> Duration {
        let fails = u64::from(fails);
        let min = self.retry_min.as_millis() as u64;
        let wait = min + fails * fails * min * u64::from(self.backoff_percent) / 100;
        Duration::from_millis(wait).min(self.retry_max)
    }
}

/// One client's state.
#[derive(Clone, Copy, Debug, Default)]
struct Client {
    /// Bumped at every send and every answer: heap entries of older generations are
    /// stale.
    generation: u32,
    /// Failures in a row.
    fails: u32,
    /// Whether an announce is waiting for its answer.
    in_flight: bool,
    /// When the announce in flight was sent, in microseconds.
    sent_at: u64,
}

/// What happened to announces since the caller last looked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcomes {
    /// Announces given up on: no answer within the timeout.
    pub timeouts: u64,
}

/// A population of obeying clients (see the module's notes).
#[derive(Debug)]
pub struct Obeying {
    settings: ObeyingSettings,
    clients: Vec<Client>,
    /// (when, client, generation): a send due, or the timeout of one in flight.
    events: BinaryHeap<Reverse<(u64, u32, u32)>>,
    outcomes: Outcomes,
}

impl Obeying {
    /// Clients whose first announces are spread over `settings.spread` from time 0.
    pub fn new(settings: ObeyingSettings) -> Self {
        let count = settings.clients;
        let spread = settings.spread.as_micros() as u64;
        let events = (0..count)
            .map(|client| {
                let at = spread * client as u64 / count.max(1) as u64;
                Reverse((at, client as u32, 0))
            })
            .collect();
        Self {
            settings,
            clients: vec![Client::default(); count],
            events,
            outcomes: Outcomes::default(),
        }
    }

    /// The settings.
    pub fn settings(&self) -> &ObeyingSettings {
        &self.settings
    }

    /// When the next send or timeout is due, in microseconds; `None` when nothing
    /// is scheduled.
    pub fn next_event(&self) -> Option<u64> {
        self.events.peek().map(|Reverse((at, _, _))| *at)
    }

    /// Clients due to announce at `now`, up to `limit`, into `out`; announces past
    /// their timeout are counted as failed on the way.
    pub fn due(&mut self, now: u64, limit: usize, out: &mut Vec<u32>) {
        while out.len() < limit {
            let Some(&Reverse((at, client, generation))) = self.events.peek() else {
                break;
            };
            if at > now {
                break;
            }
            self.events.pop();
            let state = self.clients[client as usize];
            if state.generation != generation {
                continue;
            }
            if state.in_flight {
                self.outcomes.timeouts += 1;
                self.fail(client, None, now);
            } else {
                out.push(client);
            }
        }
    }

    /// `client`'s announce went out at `now` (or began to wait for a way out: its
    /// timeout runs from here). Returns a ticket for [`waiting`](Self::waiting).
    pub fn sent(&mut self, client: u32, now: u64) -> u32 {
        let state = &mut self.clients[client as usize];
        state.generation = state.generation.wrapping_add(1);
        state.in_flight = true;
        state.sent_at = now;
        let timeout = now + self.settings.timeout.as_micros() as u64;
        self.events
            .push(Reverse((timeout, client, state.generation)));
        state.generation
    }

    /// Whether the announce [`sent`](Self::sent) gave `ticket` for still waits for
    /// its answer (not timed out, answered or restarted since).
    pub fn waiting(&self, client: u32, ticket: u32) -> bool {
        self.clients
            .get(client as usize)
            .is_some_and(|state| state.in_flight && state.generation == ticket)
    }

    /// `client`'s announce was answered at `now` with `interval` seconds; returns its
    /// latency in microseconds, or `None` for an answer that came too late (the
    /// client had given up on it).
    pub fn answered(&mut self, client: u32, interval: u32, now: u64) -> Option<u64> {
        let state = self.clients.get_mut(client as usize)?;
        if !state.in_flight {
            return None;
        }
        let latency = now.saturating_sub(state.sent_at);
        state.in_flight = false;
        state.fails = 0;
        state.generation = state.generation.wrapping_add(1);
        let wait = Duration::from_secs(u64::from(interval)).max(self.settings.interval_floor);
        let at = now + wait.as_micros() as u64;
        self.events.push(Reverse((at, client, state.generation)));
        Some(latency)
    }

    /// `client`'s announce was refused at `now`, with the interval to come back after
    /// when the reply carried one; returns its latency as [`answered`](Self::answered)
    /// does.
    pub fn refused(&mut self, client: u32, retry_interval: Option<u32>, now: u64) -> Option<u64> {
        let state = self.clients.get(client as usize)?;
        if !state.in_flight {
            return None;
        }
        let latency = now.saturating_sub(state.sent_at);
        self.fail(client, retry_interval, now);
        Some(latency)
    }

    fn fail(&mut self, client: u32, retry_interval: Option<u32>, now: u64) {
        let state = &mut self.clients[client as usize];
        state.in_flight = false;
        state.fails = state.fails.saturating_add(1);
        state.generation = state.generation.wrapping_add(1);
        let retry = Duration::from_secs(u64::from(retry_interval.unwrap_or(0)));
        let wait = self.settings.backoff(state.fails).max(retry);
        let at = now + wait.as_micros() as u64;
        self.events.push(Reverse((at, client, state.generation)));
    }

    /// One client in `every` (from the first) announces again from `now`, spread
    /// over `over` (a wave of restarted clients); returns how many.
    pub fn restart(&mut self, now: u64, every: usize, over: Duration) -> usize {
        let every = every.max(1);
        let chosen: Vec<u32> = (0..self.clients.len() as u32).step_by(every).collect();
        let over = over.as_micros() as u64;
        for (i, &client) in chosen.iter().enumerate() {
            let state = &mut self.clients[client as usize];
            state.in_flight = false;
            state.generation = state.generation.wrapping_add(1);
            let at = now + over * i as u64 / chosen.len().max(1) as u64;
            self.events.push(Reverse((at, client, state.generation)));
        }
        chosen.len()
    }

    /// What happened since the last call, and starts counting again.
    pub fn take_outcomes(&mut self) -> Outcomes {
        std::mem::take(&mut self.outcomes)
    }

    /// Clients waiting for an answer now.
    pub fn in_flight(&self) -> usize {
        self.clients
            .iter()
            .filter(|client| client.in_flight)
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(clients: usize) -> ObeyingSettings {
        ObeyingSettings::libtorrent(clients, Duration::from_secs(10), 1.0)
    }

    #[test]
    fn backoff_grows_as_libtorrent_s_and_stops_at_an_hour() {
        let settings = settings(1);
        let waits: Vec<u64> = (1..=4)
            .map(|f| settings.backoff(f).as_millis() as u64)
            .collect();
        assert_eq!(waits, [17_500, 55_000, 117_500, 205_000]);
        assert_eq!(settings.backoff(100), Duration::from_secs(3600));
    }

    #[test]
    fn clients_start_spread_and_come_back_after_the_interval() {
        let mut clients = Obeying::new(settings(10));
        let mut due = Vec::new();
        clients.due(4_999_999, 100, &mut due);
        assert_eq!(due, [0, 1, 2, 3, 4], "one a second over 10 s");
        for &client in &due {
            clients.sent(client, 5_000_000);
        }
        assert_eq!(clients.answered(0, 1800, 5_020_000), Some(20_000));
        assert_eq!(clients.answered(0, 1800, 5_030_000), None, "answered once");
        due.clear();
        clients.due(5_000_000 + 1_799_999_999, 100, &mut due);
        assert!(!due.contains(&0), "{due:?}");
        due.clear();
        clients.due(5_020_000 + 1_800_000_000, 100, &mut due);
        assert!(due.contains(&0));
    }

    #[test]
    fn unanswered_announces_back_off_and_a_refusal_s_interval_is_kept() {
        let mut clients = Obeying::new(settings(2));
        let mut due = Vec::new();
        clients.due(5_000_000, 100, &mut due);
        assert_eq!(due, [0, 1]);
        clients.sent(0, 5_000_000);
        clients.sent(1, 5_000_000);
        // Client 1 is told to come back in an hour; client 0 hears nothing.
        assert_eq!(clients.refused(1, Some(3600), 5_010_000), Some(10_000));
        due.clear();
        clients.due(20_000_000, 100, &mut due);
        assert!(due.is_empty());
        assert_eq!(clients.take_outcomes().timeouts, 1);
        // 15 s timeout, then 17.5 s of backoff.
        clients.due(20_000_000 + 17_499_999, 100, &mut due);
        assert!(due.is_empty());
        clients.due(20_000_000 + 17_500_000, 100, &mut due);
        assert_eq!(due, [0]);
        due.clear();
        clients.due(5_010_000 + 3_600_000_000, 100, &mut due);
        assert_eq!(due, [1]);
    }

    #[test]
    fn a_restart_wave_brings_clients_back_at_once() {
        let mut clients = Obeying::new(settings(100));
        let mut due = Vec::new();
        clients.due(10_000_000, 1000, &mut due);
        for &client in &due {
            clients.sent(client, 10_000_000);
            clients.answered(client, 1800, 10_000_000);
        }
        due.clear();
        assert_eq!(clients.restart(20_000_000, 2, Duration::from_secs(1)), 50);
        clients.due(21_000_000, 1000, &mut due);
        assert_eq!(due.len(), 50);
        assert_eq!(clients.in_flight(), 0);
    }
}
