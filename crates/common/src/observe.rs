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
}

/// Label names and values of one sample.
pub type Labels = Vec<(&'static str, String)>;

/// One metric family: every sample of one name.
#[derive(Clone, Debug, PartialEq)]
pub struct Family {
    /// The name, `shoal_` first; counters without `_total` (the encoder adds it).
    pub name: &'static str,
    /// What it measures.
    pub help: &'static str,
    /// Counter or gauge.
    pub kind: MetricKind,
    /// The samples.
    pub samples: Vec<(Labels, f64)>,
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
        self.sample(name, help, MetricKind::Counter, labels, value as f64);
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

    fn sample(
        &mut self,
        name: &'static str,
        help: &'static str,
        kind: MetricKind,
        labels: &[(&'static str, &str)],
        value: f64,
    ) {
        let mut all = self.base.clone();
        all.extend(labels.iter().map(|(k, v)| (*k, (*v).to_string())));
        match self.families.iter_mut().find(|family| family.name == name) {
            Some(family) => {
                debug_assert_eq!(family.kind, kind, "{name} observed as two kinds");
                family.samples.push((all, value));
            }
            None => self.families.push(Family {
                name,
                help,
                kind,
                samples: vec![(all, value)],
            }),
        }
    }

    /// Adds every sample of `other` (another tracker's), keeping one family per name.
    pub fn merge(&mut self, other: Self) {
        for family in other.families {
            match self.families.iter_mut().find(|f| f.name == family.name) {
                Some(existing) => existing.samples.extend(family.samples),
                None => self.families.push(family),
            }
        }
    }

    /// The families, in the order first observed.
    pub fn families(&self) -> &[Family] {
        &self.families
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
