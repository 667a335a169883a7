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

/// What a socket worker's counters (counted since start) tell the adaptive interval,
/// per family in [`Family`] order.
pub trait LoadCounters {
    /// Announces answered, requests answered, requests shed, datagrams the kernel
    /// dropped, requests read.
    fn load_counts(&self) -> [FamilyCounts; 2];
}

/// Counts of one family since start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FamilyCounts {
    /// Announces answered (a backoff reply is not one).
    pub announces: u64,
    /// Requests of every kind answered, backoff replies included.
    pub served: u64,
    /// Requests shed (answered with a backoff reply or not at all): demand the
    /// tracker read and could not take.
    pub lost: u64,
    /// Datagrams the kernel dropped (a full receive queue) that were demand, as the
    /// socket worker weighed them at each queue check by what it read around them
    /// ([`DropWeigher`](super::DropWeigher)).
    pub dropped: u64,
    /// Requests (datagrams) read, valid or not; 0 where the transport does not count
    /// them, and everything it reads is a request.
    pub read: u64,
}

/// The demand the tracker could not take: requests shed, and the kernel's drops that
/// were demand (weighed by their worker, so that a flood of junk, one that
/// `SO_REUSEPORT` sends to one worker included, counts as the little demand it is).
/// Kernel drops hit every sender alike, so this is also the estimate of the honest
/// announces lost.
pub(crate) fn demand_lost(counts: &FamilyCounts) -> f64 {
    counts.lost.saturating_add(counts.dropped) as f64
}

/// The share of what was read that was demand (announces answered, requests shed);
/// `None` where nothing read was counted.
pub(crate) fn demand_share(counts: &FamilyCounts) -> Option<f64> {
    (counts.read > 0).then(|| {
        let demand = counts.announces.saturating_add(counts.lost);
        (demand as f64 / counts.read as f64).min(1.0)
    })
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
    /// Per socket worker.
    counts: Vec<[FamilyCounts; 2]>,
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
        let counts = (0..stats.socket_workers())
            .map(|index| {
                let mut totals = C::Totals::default();
                stats.socket(index).add_to(&mut totals);
                totals.load_counts()
            })
            .collect();
        Self {
            at: Instant::now(),
            counts,
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
        // Each worker's counts since, its kernel drops weighed by its own reading.
        let mut families = [FamilySample::default(); 2];
        let mut busiest_share = None;
        let mut busiest_busy = -1.0;
        for (worker, (now, then)) in self.counts.iter().zip(&before.counts).enumerate() {
            let mut worker_total = FamilyCounts::default();
            for (family, (now, then)) in families.iter_mut().zip(now.iter().zip(then)) {
                let delta = FamilyCounts {
                    announces: now.announces.saturating_sub(then.announces),
                    served: now.served.saturating_sub(then.served),
                    lost: now.lost.saturating_sub(then.lost),
                    dropped: now.dropped.saturating_sub(then.dropped),
                    read: now.read.saturating_sub(then.read),
                };
                family.announces = family.announces.saturating_add(delta.announces);
                family.served = family.served.saturating_add(delta.served);
                family.lost += demand_lost(&delta);
                worker_total.announces += delta.announces;
                worker_total.lost += delta.lost;
                worker_total.read += delta.read;
            }
            let busy = self
                .socket_busy
                .get(worker)
                .zip(before.socket_busy.get(worker))
                .map_or(0, |(now, then)| now.saturating_sub(*then));
            if busy as f64 > busiest_busy {
                busiest_busy = busy as f64;
                busiest_share = demand_share(&worker_total);
            }
        }
        LoadSample {
            socket_busy: Some(busiest(&self.socket_busy, &before.socket_busy)),
            swarm_busy: busiest(&self.swarm_busy, &before.swarm_busy),
            peers: self.peers,
            socket_demand_share: busiest_share,
            families,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interval::IntervalSettings;

    /// Two socket workers, the first with all the counts.
    fn reading(at: Instant, announces: u64, lost: u64, peers: u64, busy: u64) -> Reading {
        Reading {
            at,
            counts: vec![
                [
                    FamilyCounts {
                        announces,
                        served: announces,
                        lost,
                        ..FamilyCounts::default()
                    },
                    FamilyCounts::default(),
                ],
                [FamilyCounts::default(); 2],
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
        assert_eq!(sample.families[0].lost, 7.0);
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

    /// Each worker's weighed kernel drops add to the demand lost; the share of demand
    /// the busy weighing uses is the busiest worker's own reading.
    #[test]
    fn weighed_drops_are_demand_lost_and_the_busiest_worker_s_share_weighs_busy() {
        let start = Instant::now();
        let counts = |announces: u64, dropped: u64, read: u64| FamilyCounts {
            announces,
            served: announces * 2,
            lost: 5,
            dropped,
            read,
        };
        let at = |seconds: u64, workers: [FamilyCounts; 2], busy: [u64; 2]| Reading {
            at: start + Duration::from_secs(seconds),
            counts: workers
                .iter()
                .map(|w| [*w, FamilyCounts::default()])
                .collect(),
            peers: 0,
            socket_busy: busy.to_vec(),
            swarm_busy: vec![0],
        };
        let zero = FamilyCounts::default();
        let before = at(0, [zero; 2], [0, 0]);
        // Worker 0: honest, half announces, 50 of its drops weighed as demand. Worker
        // 1: 150,000 junk datagrams read, 10 announces among them, 20 drops demand.
        let after = at(
            1,
            [counts(1_000, 50, 2_000), counts(10, 20, 150_010)],
            [300_000_000, 1_000_000_000],
        );
        let sample = after.since(&before);
        assert_eq!(sample.families[0].lost, 50.0 + 20.0 + 5.0 + 5.0);
        // The busiest worker read junk.
        let share = sample.socket_demand_share.unwrap();
        assert!(share < 0.001, "{share}");
        // Where nothing read is counted (HTTP, WebTorrent), the busy share is not
        // weighed.
        let unread = at(1, [counts(1_000, 100, 0), zero], [1, 0]).since(&before);
        assert_eq!(unread.families[0].lost, 105.0);
        assert_eq!(unread.socket_demand_share, None);
    }
}
