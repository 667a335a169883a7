//! Sampling a run's counters once a second and summarizing its last seconds.

use std::time::{Duration, Instant};

use shoal_common::{Shutdown, Supervisor};

/// When to report and what to summarize.
#[derive(Clone, Copy, Debug)]
pub struct ReportSchedule {
    /// Seconds to run; 0 runs until shutdown.
    pub duration: u32,
    /// Seconds at the end the summary covers; 0 covers the whole run.
    pub summarize_last: u32,
    /// Seconds between progress lines.
    pub report_interval: u32,
}

/// Samples `total()` every second, logs `line(rates)` every `report_interval` seconds,
/// and when the run ends returns `rates` over the last `summarize_last` seconds.
/// `rates(earlier, later, seconds)` turns two samples into a summary.
pub(crate) fn report<T: Copy, S>(
    schedule: ReportSchedule,
    shutdown: &Shutdown,
    mut total: impl FnMut() -> T,
    rates: impl Fn(&T, &T, f64) -> S,
    line: impl Fn(&S) -> String,
) -> S {
    let start = Instant::now();
    let mut samples: Vec<(f64, T)> = vec![(0.0, total())];
    let mut next_second = 1u64;
    let duration = u64::from(schedule.duration);
    let interval = u64::from(schedule.report_interval.max(1));
    while !shutdown.is_requested() && (duration == 0 || next_second <= duration) {
        let due = start + Duration::from_secs(next_second);
        let now = Instant::now();
        if now < due {
            std::thread::sleep((due - now).min(Shutdown::POLL_INTERVAL));
            continue;
        }
        samples.push((start.elapsed().as_secs_f64(), total()));
        if next_second.is_multiple_of(interval) {
            let (t0, earlier) = samples[samples.len() - 1 - interval as usize];
            let (t1, later) = samples[samples.len() - 1];
            log::info!(
                "{next_second:>4} s: {}",
                line(&rates(&earlier, &later, t1 - t0))
            );
        }
        next_second += 1;
    }
    let last = samples.len() - 1;
    let window = if schedule.summarize_last == 0 {
        last
    } else {
        (schedule.summarize_last as usize).min(last)
    };
    let (t0, earlier) = samples[last - window];
    let (t1, later) = samples[last];
    rates(&earlier, &later, t1 - t0)
}

/// Runs [`report`] on a "report" thread under `supervisor` (whose workers generate the
/// load), ends the run when the schedule does, waits for every worker and returns the
/// summary.
pub(crate) fn run_reported<T: Copy + 'static, S: Send + 'static>(
    mut supervisor: Supervisor,
    schedule: ReportSchedule,
    total: impl FnMut() -> T + Send + 'static,
    rates: impl Fn(&T, &T, f64) -> S + Send + 'static,
    line: impl Fn(&S) -> String + Send + 'static,
) -> anyhow::Result<S> {
    let shutdown = supervisor.shutdown().clone();
    let (summary_sender, summary) = std::sync::mpsc::channel();
    supervisor.spawn("report", move || {
        let _ = summary_sender.send(report(schedule, &shutdown, total, rates, line));
        shutdown.request();
        Ok(())
    })?;
    supervisor.wait()?;
    summary
        .recv()
        .map_err(|_| anyhow::anyhow!("the run ended without a summary"))
}
