//! Per-request latency as a load tester sees it: from sending a request to reading its
//! reply, loopback and the tracker's queues included.
//!
//! Each worker records into its own [`LatencyRecorder`] (no locking per reply) and adds
//! it to the run's [`Latencies`] when it ends. Only replies read within the summarized
//! window (the last `summarize_last` seconds) count, the same window as the rates.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::report::ReportSchedule;

/// Longest latency kept apart, in microseconds (a minute); longer ones count as this.
const HIGHEST_MICROS: u64 = 60_000_000;

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HIGHEST_MICROS, 3).expect("valid histogram bounds")
}

/// The latencies of a whole run, from every worker.
#[derive(Debug)]
pub(crate) struct Latencies {
    histogram: Mutex<Histogram<u64>>,
    /// Replies read from here on count.
    counted_from: Instant,
}

impl Latencies {
    /// Latencies of a run that starts now on `schedule`.
    pub(crate) fn new(schedule: &ReportSchedule) -> Arc<Self> {
        let skipped = match (schedule.duration, schedule.summarize_last) {
            (0, _) | (_, 0) => 0,
            (duration, last) => duration.saturating_sub(last),
        };
        Arc::new(Self {
            histogram: Mutex::new(histogram()),
            counted_from: Instant::now() + Duration::from_secs(skipped.into()),
        })
    }

    /// A recorder for one worker.
    pub(crate) fn recorder(self: &Arc<Self>) -> LatencyRecorder {
        LatencyRecorder {
            local: histogram(),
            counted_from: self.counted_from,
            run: self.clone(),
        }
    }

    /// Percentiles over everything recorded so far.
    pub(crate) fn summary(&self) -> LatencySummary {
        let histogram = self.histogram.lock().expect("latency lock");
        if histogram.is_empty() {
            return LatencySummary::default();
        }
        LatencySummary {
            count: histogram.len(),
            p50_us: histogram.value_at_quantile(0.5),
            p99_us: histogram.value_at_quantile(0.99),
            p999_us: histogram.value_at_quantile(0.999),
            max_us: histogram.max(),
        }
    }
}

/// One worker's latencies, added to the run's when dropped or flushed.
#[derive(Debug)]
pub struct LatencyRecorder {
    local: Histogram<u64>,
    counted_from: Instant,
    run: Arc<Latencies>,
}

impl LatencyRecorder {
    /// Records a reply read at `now` to a request sent at `sent`.
    pub fn record(&mut self, sent: Instant, now: Instant) {
        self.record_micros(now, now.saturating_duration_since(sent).as_micros() as u64);
    }

    /// Records a reply read at `now` that took `micros`.
    pub fn record_micros(&mut self, now: Instant, micros: u64) {
        if now >= self.counted_from {
            self.local
                .saturating_record(micros.clamp(1, HIGHEST_MICROS));
        }
    }

    /// Adds what was recorded to the run's latencies.
    pub fn flush(&mut self) {
        if self.local.is_empty() {
            return;
        }
        let mut run = self.run.histogram.lock().expect("latency lock");
        // Same bounds on both sides: adding cannot fail.
        let _ = run.add(&self.local);
        self.local.reset();
    }
}

impl Drop for LatencyRecorder {
    fn drop(&mut self) {
        self.flush();
    }
}

/// Latency percentiles of a run, in microseconds (0 when nothing was recorded).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LatencySummary {
    /// Replies timed.
    pub count: u64,
    /// Median.
    pub p50_us: u64,
    /// 99th percentile.
    pub p99_us: u64,
    /// 99.9th percentile.
    pub p999_us: u64,
    /// Slowest.
    pub max_us: u64,
}

impl LatencySummary {
    /// The summary's latency line, for people.
    pub fn text(&self) -> String {
        format!(
            "  latency (µs):       p50 {}, p99 {}, p99.9 {}, max {} ({} replies)\n",
            self.p50_us, self.p99_us, self.p999_us, self.max_us, self.count
        )
    }

    /// The summary's latency as a JSON member: `"latency_us":{…}`.
    pub fn json(&self) -> String {
        format!(
            "\"latency_us\":{{\"count\":{},\"p50\":{},\"p99\":{},\"p999\":{},\"max\":{}}}",
            self.count, self.p50_us, self.p99_us, self.p999_us, self.max_us
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_add_up_and_only_the_window_counts() {
        let schedule = ReportSchedule {
            duration: 0,
            summarize_last: 0,
            report_interval: 1,
        };
        let run = Latencies::new(&schedule);
        let now = Instant::now();
        let mut first = run.recorder();
        let mut second = run.recorder();
        for micros in 1..=990 {
            first.record_micros(now, micros);
        }
        for micros in [5_000; 9].into_iter().chain([70_000_000]) {
            second.record_micros(now, micros);
        }
        first.flush();
        drop(second);
        let summary = run.summary();
        assert_eq!(summary.count, 1000);
        // 1..=990 µs, then nine at 5 ms and one past the top: the 500th, 990th and
        // 999th of 1,000 (to 3 significant digits).
        assert_eq!((summary.p50_us, summary.p99_us), (500, 990), "{summary:?}");
        assert!((4995..=5005).contains(&summary.p999_us), "{summary:?}");
        assert!(
            summary.max_us >= HIGHEST_MICROS - HIGHEST_MICROS / 1000,
            "{summary:?}"
        );
        assert!(
            summary
                .json()
                .starts_with("\"latency_us\":{\"count\":1000,")
        );

        // A run that summarizes its last 5 s of 10 ignores replies before that.
        let windowed = Latencies::new(&ReportSchedule {
            duration: 10,
            summarize_last: 5,
            report_interval: 1,
        });
        let mut recorder = windowed.recorder();
        recorder.record_micros(Instant::now(), 100);
        recorder.record_micros(Instant::now() + Duration::from_secs(6), 200);
        drop(recorder);
        assert_eq!(windowed.summary().count, 1);
        assert_eq!(
            Latencies::new(&schedule).summary(),
            LatencySummary::default()
        );
    }
}
