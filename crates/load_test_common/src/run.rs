//! The run every load tester makes: workers on their own (pinned) threads counting
//! into shared counters, a report thread printing progress and making the summary,
//! Ctrl-C ending it early. A load tester says how to make one worker; the rest is here
//! once.

use std::sync::Arc;

use shoal_common::{
    Counters, CpuPinningConfig, Shutdown, Supervisor, maybe_pin_current_thread, spawn_signal_thread,
};

use crate::latency::{Latencies, LatencyRecorder, LatencySummary};
use crate::report::{ReportSchedule, run_reported};
use crate::summary::SummaryFormat;
use crate::summary::{Summary as PrintedSummary, print_summary};

/// The shape of a run, from the keys every load tester's config has.
#[derive(Clone, Copy, Debug)]
pub struct RunShape<'a> {
    /// Worker threads.
    pub workers: usize,
    /// Duration, the part the summary covers, and progress lines.
    pub schedule: ReportSchedule,
    /// Which core each worker is pinned to.
    pub cpu_pinning: &'a CpuPinningConfig,
}

/// A run's summary between two samples of the counters' totals.
pub trait RunSummary: Send + 'static {
    /// The counters' totals it is made from.
    type Totals: Copy + Default + 'static;
    /// The rates between `earlier` and `later`, `seconds` apart.
    fn between(earlier: &Self::Totals, later: &Self::Totals, seconds: f64) -> Self;
    /// One progress line.
    fn line(&self) -> String;
    /// Adds the latency percentiles of the summarized seconds.
    fn set_latency(&mut self, latency: LatencySummary);
}

/// Runs `shape.workers` workers, each made by `make(index, its counters, a latency
/// recorder)` and run on its own thread (pinned when configured), until the schedule
/// ends or `shutdown` is requested; returns the summary of its last seconds.
pub fn run_workers<C, S, W>(
    shape: RunShape<'_>,
    shutdown: Shutdown,
    mut make: impl FnMut(usize, Arc<C>, LatencyRecorder) -> anyhow::Result<W>,
) -> anyhow::Result<S>
where
    C: Counters<Totals = S::Totals> + 'static,
    S: RunSummary,
    W: FnOnce() -> anyhow::Result<()> + Send + 'static,
{
    let mut supervisor = Supervisor::new(shutdown);
    let latencies = Latencies::new(&shape.schedule);
    // One allocation per worker keeps workers' counters on separate cache lines.
    let counters: Vec<Arc<C>> = (0..shape.workers).map(|_| Arc::default()).collect();
    for (index, shared) in counters.iter().enumerate() {
        let work = make(index, Arc::clone(shared), latencies.recorder())?;
        let core = shape.cpu_pinning.core_for(index);
        supervisor.spawn(format!("load-{index}"), move || {
            maybe_pin_current_thread(core);
            work()
        })?;
    }
    let total = move || {
        let mut totals = S::Totals::default();
        for shared in &counters {
            shared.add_to(&mut totals);
        }
        totals
    };
    let mut summary = run_reported(supervisor, shape.schedule, total, S::between, S::line)?;
    summary.set_latency(latencies.summary());
    Ok(summary)
}

/// Runs a load test with Ctrl-C ending it early: `run_until` runs it until a shutdown;
/// the summary goes to stdout in `format`.
pub(crate) fn run_with_signals<S: PrintedSummary>(
    format: SummaryFormat,
    run_until: impl FnOnce(Shutdown) -> anyhow::Result<S>,
) -> anyhow::Result<()> {
    let shutdown = Shutdown::new();
    spawn_signal_thread(shutdown.clone(), Vec::new())?;
    let summary = run_until(shutdown)?;
    print_summary(format, &summary);
    Ok(())
}
