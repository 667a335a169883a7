//! The thread that ticks a tracker's [`Controller`] once a second with what its
//! workers counted, and hands the intervals to [`AnnounceInterval`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use shoal_common::{Counters, Shutdown, Supervisor, WorkerStats};

#[cfg(test)]
use super::Bounds;
use super::{AnnounceInterval, Controller, Family, FamilySample, LoadSample};

/// How often the controller is ticked.
pub const TICK: Duration = Duration::from_secs(1);

/// What a tracker's counters (summed over its socket workers, counted since start)
/// tell the adaptive interval, per family in [`Family`] order.
pub trait LoadCounters {
    /// Announces answered, requests answered, requests lost (shed, or dropped by
    /// the kernel).
    fn load_counts(&self) -> [FamilyCounts; 2];
}

/// Counts of one family since start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FamilyCounts {
    /// Announces answered (a backoff reply is not one).
    pub announces: u64,
    /// Requests of every kind answered, backoff replies included.
    pub served: u64,
    /// Requests shed (answered with a backoff reply or not at all) or dropped by the
    /// kernel: demand the tracker could not take.
    pub lost: u64,
}

/// What the controller saw last, for /metrics and /stats.
#[derive(Debug, Default)]
pub struct IntervalGauges {
    /// The load of the last second, in thousandths of the capacity.
    pub load_per_mille: AtomicU64,
    /// Announces a second the tracker could answer, as learnt; 0 before it knows.
    pub capacity: AtomicU64,
}

/// Starts the controller of the tracker `name` under `supervisor`.
pub fn spawn_controller<C>(
    supervisor: &mut Supervisor,
    name: &str,
    interval: Arc<AnnounceInterval>,
    stats: Arc<WorkerStats<C>>,
) -> anyhow::Result<()>
where
    C: Counters + 'static,
    C::Totals: LoadCounters,
{
    let shutdown = supervisor.shutdown().clone();
    supervisor.spawn(format!("{name}-interval"), move || {
        run(&interval, &stats, &shutdown);
        Ok(())
    })
}

fn run<C>(interval: &AnnounceInterval, stats: &WorkerStats<C>, shutdown: &Shutdown)
where
    C: Counters,
    C::Totals: LoadCounters,
{
    let mut driver = Driver::new(interval, Reading::take(stats));
    let mut next = Instant::now() + TICK;
    while !shutdown.is_requested() {
        let now = Instant::now();
        if now < next {
            std::thread::sleep(
                next.saturating_duration_since(now)
                    .min(Shutdown::POLL_INTERVAL),
            );
            continue;
        }
        next += TICK;
        if next < now {
            // Suspended or starved: start counting from here.
            next = now + TICK;
        }
        driver.step(interval, Reading::take(stats));
    }
}

/// The controller and the last reading: one [`step`](Self::step) a second.
struct Driver {
    controller: Controller,
    before: Reading,
}

impl Driver {
    fn new(interval: &AnnounceInterval, first: Reading) -> Self {
        Self {
            controller: Controller::new(*interval.settings()),
            before: first,
        }
    }

    /// Ticks the controller with what happened since the last reading (under the
    /// bounds in force now) and hands its intervals and gauges to `interval`.
    fn step(&mut self, interval: &AnnounceInterval, reading: Reading) {
        let sample = reading.since(&self.before);
        self.before = reading;
        self.controller.apply(&interval.bounds());
        let given = self.controller.tick(&sample);
        for family in Family::ALL {
            interval.set(family, given[family as usize]);
        }
        let gauges = interval.gauges();
        let load = sample.busy_or_load();
        gauges.load_per_mille.store(
            if load.is_finite() {
                (load * 1000.0) as u64
            } else {
                0
            },
            Relaxed,
        );
        gauges
            .capacity
            .store(self.controller.capacity().map_or(0, |c| c as u64), Relaxed);
    }
}

/// The counters at one moment.
struct Reading {
    at: Instant,
    counts: [FamilyCounts; 2],
    peers: u64,
    socket_busy: Vec<u64>,
    swarm_busy: Vec<u64>,
}

impl Reading {
    fn take<C>(stats: &WorkerStats<C>) -> Self
    where
        C: Counters,
        C::Totals: LoadCounters,
    {
        let sample = stats.sample();
        let (socket_busy, swarm_busy) = stats.busy_nanos();
        Self {
            at: Instant::now(),
            counts: sample.requests.load_counts(),
            peers: sample.peers,
            socket_busy,
            swarm_busy,
        }
    }

    /// What happened between `before` and this reading.
    fn since(&self, before: &Reading) -> LoadSample {
        let elapsed = self
            .at
            .saturating_duration_since(before.at)
            .as_nanos()
            .max(1) as f64;
        let busiest = |now: &[u64], then: &[u64]| {
            now.iter()
                .zip(then)
                .map(|(now, then)| now.saturating_sub(*then) as f64 / elapsed)
                .fold(0.0_f64, f64::max)
                .min(1.0)
        };
        let mut families = [FamilySample::default(); 2];
        for (family, (now, then)) in families
            .iter_mut()
            .zip(self.counts.iter().zip(&before.counts))
        {
            *family = FamilySample {
                announces: now.announces.saturating_sub(then.announces),
                served: now.served.saturating_sub(then.served),
                lost: now.lost.saturating_sub(then.lost),
            };
        }
        LoadSample {
            socket_busy: Some(busiest(&self.socket_busy, &before.socket_busy)),
            swarm_busy: busiest(&self.swarm_busy, &before.swarm_busy),
            peers: self.peers,
            families,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interval::IntervalSettings;

    fn reading(at: Instant, announces: u64, lost: u64, peers: u64, busy: u64) -> Reading {
        Reading {
            at,
            counts: [
                FamilyCounts {
                    announces,
                    served: announces,
                    lost,
                },
                FamilyCounts::default(),
            ],
            peers,
            socket_busy: vec![busy, busy / 2],
            swarm_busy: vec![busy / 4],
        }
    }

    #[test]
    fn a_sample_is_what_happened_between_two_readings() {
        let start = Instant::now();
        let before = reading(start, 1000, 0, 10, 0);
        let after = reading(start + Duration::from_millis(500), 3000, 7, 20, 100_000_000);
        let sample = after.since(&before);
        assert_eq!(sample.families[0].announces, 2000);
        assert_eq!(sample.families[0].lost, 7);
        assert_eq!(sample.peers, 20);
        // The busiest socket worker: 0.1 s of 0.5 s.
        assert!((sample.socket_busy.unwrap() - 0.2).abs() < 1e-9);
        assert!((sample.swarm_busy - 0.05).abs() < 1e-9);
        // Counters that went backwards (a worker's restarted) count nothing; busy
        // time over the elapsed time is all of it; no time elapsed divides by a
        // nanosecond, not by zero.
        let backwards = before.since(&after);
        assert_eq!(backwards.families[0].announces, 0);
        let same_moment = reading(start, 5000, 0, 10, 1_000_000_000).since(&before);
        assert_eq!(same_moment.socket_busy, Some(1.0));
        assert!(same_moment.busy_or_load().is_finite());
    }

    #[test]
    fn each_step_hands_the_controller_s_intervals_and_gauges_to_the_replies() {
        let interval = AnnounceInterval::new(IntervalSettings::adaptive(60, 360));
        let start = Instant::now();
        let mut driver = Driver::new(&interval, reading(start, 0, 0, 0, 0));
        // A busy second with no announce: nothing learnt, the interval at rest.
        driver.step(
            &interval,
            reading(start + TICK, 0, 0, 1_000_000, 900_000_000),
        );
        assert_eq!(interval.current(Family::V4), 60);
        assert_eq!(interval.gauges().capacity.load(Relaxed), 0);
        assert_eq!(interval.gauges().load_per_mille.load(Relaxed), 900);
        // Losing half of what is offered: the interval rises, within the bounds.
        let mut at = start + TICK;
        let (mut announces, mut lost) = (0, 0);
        for _ in 0..30 {
            at += TICK;
            announces += 1000;
            lost += 1000;
            driver.step(
                &interval,
                reading(at, announces, lost, 30_000, 900_000_000 * 30),
            );
        }
        let risen = interval.current(Family::V4);
        assert!(risen > 60 && risen <= 360, "{risen}");
        assert!(interval.gauges().capacity.load(Relaxed) > 0);
        // A lower maximum set through the API is in force at the next step.
        let bounds = Bounds {
            max: 90,
            ..interval.bounds()
        };
        interval.set_bounds(bounds).unwrap();
        at += TICK;
        announces += 1000;
        lost += 1000;
        driver.step(
            &interval,
            reading(at, announces, lost, 30_000, 900_000_000 * 31),
        );
        assert!(interval.current(Family::V4) <= 90);
    }
}
