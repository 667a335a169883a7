//! What a tracker shows its monitoring endpoint, in one shape for Prometheus and for
//! the statistics page.
//!
//! At each scrape, every tracker sums its workers' counters (no work on the hot path)
//! and writes them here as metric families: a name, a help line, a kind, and samples
//! with labels. Labels have a fixed, small set of values each (protocol, action, IP
//! version, reason), never a client address or an info hash, so the series stay
//! bounded whatever clients send.

/// Counters only go up; gauges are a current value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricKind {
    /// A total since start (exposed with the `_total` suffix).
    Counter,
    /// A current value.
    Gauge,
    /// Counts per bucket of a distribution, with their sum.
    Histogram,
}

/// A histogram's value: buckets as (upper bound, count in that bucket alone), the last
/// bound `f64::MAX` for the unbounded bucket, as `prometheus-client` takes them.
#[derive(Clone, Debug, PartialEq)]
pub struct Histogram {
    /// Sum of the observed values.
    pub sum: f64,
    /// Observed values.
    pub count: u64,
    /// (upper bound, count) per bucket, not cumulative.
    pub buckets: Vec<(f64, u64)>,
}

impl Histogram {
    /// The upper bound of the bucket holding the `quantile` (0 to 1) of the observed
    /// values: a bound the true quantile does not exceed; `None` with no values or when
    /// it falls in the unbounded bucket.
    pub fn quantile_bound(&self, quantile: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let rank = (quantile.clamp(0.0, 1.0) * self.count as f64)
            .ceil()
            .max(1.0) as u64;
        let mut seen = 0;
        for &(bound, count) in &self.buckets {
            seen += count;
            if seen >= rank {
                return (bound != f64::MAX).then_some(bound);
            }
        }
        None
    }
}

/// Label names and values of one sample.
pub(crate) type Labels = Vec<(&'static str, String)>;

/// One metric family: every sample of one name.
#[derive(Clone, Debug, PartialEq)]
pub struct Family {
    /// The name, `shoal_` first (`process_` for the process's own); counters without
    /// `_total` (the encoder adds it).
    pub name: &'static str,
    /// What it measures.
    pub help: &'static str,
    /// Counter, gauge or histogram.
    pub kind: MetricKind,
    /// The samples of a counter or gauge.
    pub samples: Vec<(Labels, f64)>,
    /// The samples of a histogram.
    pub histograms: Vec<(Labels, Histogram)>,
}

/// Families being collected; every sample gets the base labels (the tracker's
/// `protocol`) first.
#[derive(Clone, Debug, Default)]
pub struct Observation {
    families: Vec<Family>,
    base: Labels,
}

impl Observation {
    /// An empty observation whose samples all carry `base`.
    pub fn with_labels(base: &[(&'static str, &str)]) -> Self {
        Self {
            families: Vec::new(),
            base: base.iter().map(|(k, v)| (*k, (*v).to_string())).collect(),
        }
    }

    /// Adds a counter sample.
    pub fn counter(
        &mut self,
        name: &'static str,
        help: &'static str,
        labels: &[(&'static str, &str)],
        value: u64,
    ) {
        debug_assert!(
            !name.ends_with("_total"),
            "{name}: the encoder adds `_total` to a counter's name"
        );
        self.sample(name, help, MetricKind::Counter, labels, value as f64);
    }

    /// Adds a counter of seconds (or any counter with a fraction), without labels of
    /// its own.
    pub fn counter_seconds(&mut self, name: &'static str, help: &'static str, value: f64) {
        self.sample(name, help, MetricKind::Counter, &[], value);
    }

    /// Adds a gauge sample.
    pub fn gauge(
        &mut self,
        name: &'static str,
        help: &'static str,
        labels: &[(&'static str, &str)],
        value: f64,
    ) {
        self.sample(name, help, MetricKind::Gauge, labels, value);
    }

    /// Adds a histogram sample.
    pub fn histogram(
        &mut self,
        name: &'static str,
        help: &'static str,
        labels: &[(&'static str, &str)],
        value: Histogram,
    ) {
        let all = self.labels(labels);
        self.family(name, help, MetricKind::Histogram)
            .histograms
            .push((all, value));
    }

    /// Adds a counter sample for each IP version of a count kept as a total and its
    /// IPv6 share.
    pub fn counter_by_ip_version(
        &mut self,
        name: &'static str,
        help: &'static str,
        labels: &[(&'static str, &str)],
        total: u64,
        ipv6: u64,
    ) {
        for (version, value) in [("4", total.saturating_sub(ipv6)), ("6", ipv6)] {
            let mut with_version = labels.to_vec();
            with_version.push(("ip_version", version));
            self.counter(name, help, &with_version, value);
        }
    }

    fn labels(&self, labels: &[(&'static str, &str)]) -> Labels {
        let mut all = self.base.clone();
        all.extend(labels.iter().map(|(k, v)| (*k, (*v).to_string())));
        all
    }

    fn family(&mut self, name: &'static str, help: &'static str, kind: MetricKind) -> &mut Family {
        let index = match self.families.iter().position(|family| family.name == name) {
            Some(index) => index,
            None => {
                self.families.push(Family {
                    name,
                    help,
                    kind,
                    samples: Vec::new(),
                    histograms: Vec::new(),
                });
                self.families.len() - 1
            }
        };
        let family = &mut self.families[index];
        debug_assert_eq!(family.kind, kind, "{name} observed as two kinds");
        family
    }

    fn sample(
        &mut self,
        name: &'static str,
        help: &'static str,
        kind: MetricKind,
        labels: &[(&'static str, &str)],
        value: f64,
    ) {
        let all = self.labels(labels);
        self.family(name, help, kind).samples.push((all, value));
    }

    /// Adds every sample of `other` (another tracker's), keeping one family per name.
    pub fn merge(&mut self, other: Self) {
        for family in other.families {
            match self.families.iter_mut().find(|f| f.name == family.name) {
                Some(existing) => {
                    existing.samples.extend(family.samples);
                    existing.histograms.extend(family.histograms);
                }
                None => self.families.push(family),
            }
        }
    }

    /// The families, in the order first observed.
    pub fn families(&self) -> &[Family] {
        &self.families
    }

    /// The histogram samples of family `name` whose labels include every one of
    /// `labels`, merged into one (the families share bucket bounds).
    pub fn histogram_sum(&self, name: &str, labels: &[(&str, &str)]) -> Option<Histogram> {
        let mut merged: Option<Histogram> = None;
        let matching = self
            .families
            .iter()
            .filter(|family| family.name == name)
            .flat_map(|family| &family.histograms)
            .filter(|(have, _)| {
                labels
                    .iter()
                    .all(|(k, v)| have.iter().any(|(hk, hv)| hk == k && hv == v))
            });
        for (_, histogram) in matching {
            match &mut merged {
                None => merged = Some(histogram.clone()),
                Some(total) => {
                    total.sum += histogram.sum;
                    total.count += histogram.count;
                    for (bucket, (_, count)) in total.buckets.iter_mut().zip(&histogram.buckets) {
                        bucket.1 += count;
                    }
                }
            }
        }
        merged
    }

    /// The sum of a family's samples whose labels include every one of `labels`.
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.families
            .iter()
            .filter(|family| family.name == name)
            .flat_map(|family| &family.samples)
            .filter(|(have, _)| {
                labels
                    .iter()
                    .all(|(k, v)| have.iter().any(|(hk, hv)| hk == k && hv == v))
            })
            .map(|(_, value)| value)
            .sum()
    }
}

/// A tracker's counter totals, written as metrics.
pub trait Observe {
    /// Adds this tracker's counters to `out`.
    fn observe(&self, out: &mut Observation);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantile_bounds_come_from_the_bucket_holding_the_rank() {
        let histogram = Histogram {
            sum: 0.0,
            count: 100,
            buckets: vec![(0.001, 90), (0.01, 9), (f64::MAX, 1)],
        };
        assert_eq!(histogram.quantile_bound(0.5), Some(0.001));
        assert_eq!(histogram.quantile_bound(0.9), Some(0.001));
        assert_eq!(histogram.quantile_bound(0.99), Some(0.01));
        assert_eq!(histogram.quantile_bound(1.0), None);
        let empty = Histogram {
            count: 0,
            ..histogram
        };
        assert_eq!(empty.quantile_bound(0.5), None);
    }

    #[test]
    fn histograms_merge_across_trackers_and_split_by_ip_version() {
        let value = |count| Histogram {
            sum: 1.0,
            count,
            buckets: vec![(0.1, count), (f64::MAX, 0)],
        };
        let mut udp = Observation::with_labels(&[("protocol", "udp")]);
        udp.histogram("shoal_latency", "Latency.", &[], value(2));
        udp.counter_by_ip_version("shoal_requests", "Requests.", &[("action", "a")], 10, 3);
        let mut http = Observation::with_labels(&[("protocol", "http")]);
        http.histogram("shoal_latency", "Latency.", &[], value(5));
        udp.merge(http);
        let all = udp.histogram_sum("shoal_latency", &[]).unwrap();
        assert_eq!((all.count, all.sum, all.buckets[0].1), (7, 2.0, 7));
        let one = udp
            .histogram_sum("shoal_latency", &[("protocol", "http")])
            .unwrap();
        assert_eq!(one.count, 5);
        assert_eq!(udp.sum("shoal_requests", &[("ip_version", "4")]), 7.0);
        assert_eq!(udp.sum("shoal_requests", &[("ip_version", "6")]), 3.0);
    }

    #[test]
    fn samples_gather_by_name_with_the_base_labels() {
        let mut udp = Observation::with_labels(&[("protocol", "udp")]);
        udp.counter("shoal_requests", "Requests.", &[("action", "announce")], 5);
        udp.counter("shoal_requests", "Requests.", &[("action", "scrape")], 2);
        let mut http = Observation::with_labels(&[("protocol", "http")]);
        http.counter("shoal_requests", "Requests.", &[("action", "announce")], 7);
        http.gauge("shoal_torrents", "Torrents.", &[], 3.0);
        udp.merge(http);
        assert_eq!(udp.families().len(), 2);
        assert_eq!(udp.sum("shoal_requests", &[]), 14.0);
        assert_eq!(udp.sum("shoal_requests", &[("action", "announce")]), 12.0);
        assert_eq!(
            udp.sum(
                "shoal_requests",
                &[("protocol", "udp"), ("action", "scrape")]
            ),
            2.0
        );
        let first = &udp.families()[0].samples[0].0;
        assert_eq!(first[0], ("protocol", "udp".to_string()));
    }
}
