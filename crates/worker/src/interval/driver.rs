//! The thread that ticks a tracker's [`Controller`] once a second with what its
//! workers counted, and hands the intervals to [`AnnounceInterval`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use shoal_common::{Counters, Shutdown, Supervisor, WorkerStats};

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
    let mut controller = Controller::new(*interval.settings());
    let mut before = Reading::take(stats);
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
        let reading = Reading::take(stats);
        let sample = reading.since(&before);
        before = reading;
        controller.apply(&interval.bounds());
        let given = controller.tick(&sample);
        for family in Family::ALL {
            interval.set(family, given[family as usize]);
        }
        let gauges = interval.gauges();
        gauges
            .load_per_mille
            .store((sample.busy_or_load() * 1000.0) as u64, Relaxed);
        gauges
            .capacity
            .store(controller.capacity().map_or(0, |c| c as u64), Relaxed);
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
