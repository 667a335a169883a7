//! The monitoring endpoint (`[metrics]`): plain HTTP on its own address, one thread,
//! nothing on the request path.
//!
//! * `GET /metrics`: every counter and gauge of every tracker in the process, gathered
//!   when scraped, written by the `prometheus-client` crate: OpenMetrics when the
//!   client asks for it (Prometheus does), the classic text format otherwise.
//! * `GET /stats`: a small page for people; `GET /stats.json` the same as JSON:
//!   uptime, request rates over the last [`RATE_WINDOW`], torrents, peers, and the
//!   largest swarms (at most [`LARGEST`]).
//! * `GET /health`: `200 ok` while every tracker serves, `503` once one stops or has a
//!   worker stuck (`shoal_common::heartbeat`).
//!
//! It is for a scraper and an operator, not for the public (the configuration says to
//! keep it private), but it must stay answerable wherever its port is reachable: many
//! connections at once on one thread, each with a deadline, and a cap at which the
//! oldest gives way.
//!
//! The connections, their deadlines and the cap are `crate::clients`; here are the
//! answers (metrics, statistics, health).

use std::fmt::Write as _;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric as _, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use shoal_common::{Family, MetricKind, Observation, Shutdown};

/// A running tracker, as the monitoring endpoint sees it.
pub trait Monitored: Send + Sync {
    /// `udp`, `http` or `ws`: the `protocol` label of its metrics.
    fn protocol(&self) -> &'static str;
    /// Its counters and gauges, summed over its workers now.
    fn observe(&self, out: &mut Observation);
    /// Its `count` largest swarms, largest first.
    fn largest_swarms(&self, count: usize) -> Vec<shoal_common::LargeSwarm>;
    /// Serving, not shutting down.
    fn healthy(&self) -> bool;
    /// The URLs clients use.
    fn urls(&self) -> Vec<String>;
}

/// Rates on the statistics page are averaged over this long.
pub(crate) const RATE_WINDOW: Duration = Duration::from_secs(10);
/// Largest swarms listed on the statistics page.
pub(crate) const LARGEST: usize = 10;

/// Binds the endpoint (before privileges are dropped, so a low port works).
pub(crate) fn bind(address: SocketAddr) -> anyhow::Result<TcpListener> {
    let listener = TcpListener::bind(address).with_context(|| {
        format!(
            "cannot listen on {address} for [metrics] (is the port in use? change metrics.address)"
        )
    })?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// Serves `trackers` on `listener` from a thread of its own until `shutdown`.
pub(crate) fn spawn(
    listener: TcpListener,
    trackers: Vec<Arc<dyn Monitored>>,
    shutdown: Shutdown,
) -> anyhow::Result<()> {
    let address = listener.local_addr()?;
    log::info!("metrics, statistics and health on http://{address}/ (/metrics, /stats, /health)");
    let endpoint = Endpoint {
        trackers,
        started: Instant::now(),
        rates: Rates::default(),
    };
    std::thread::Builder::new()
        .name("monitor".into())
        .spawn(move || {
            let endpoint = std::cell::RefCell::new(endpoint);
            let served = crate::clients::serve(
                listener,
                &shutdown,
                crate::clients::Limits::MONITOR,
                |_head, _from| None,
                |head, _body| endpoint.borrow().respond(head),
                || {
                    let mut endpoint = endpoint.borrow_mut();
                    let Endpoint {
                        rates, trackers, ..
                    } = &mut *endpoint;
                    rates.sample(trackers);
                },
            );
            if let Err(err) = served {
                log::error!("monitoring endpoint stopped: {err}");
            }
        })
        .context("cannot start the monitoring thread")?;
    Ok(())
}

/// Request counts per protocol at two moments, for rates.
#[derive(Default)]
struct Rates {
    previous: Option<(Instant, Vec<f64>)>,
    latest: Option<(Instant, Vec<f64>)>,
}

impl Rates {
    fn sample(&mut self, trackers: &[Arc<dyn Monitored>]) {
        let due = self
            .latest
            .as_ref()
            .is_none_or(|(at, _)| at.elapsed() >= RATE_WINDOW);
        if due {
            let counts = trackers.iter().map(|t| requests_of(t.as_ref())).collect();
            self.previous = self.latest.take();
            self.latest = Some((Instant::now(), counts));
        }
    }

    /// Requests per second of tracker `index` over the last window, if one passed.
    fn per_second(&self, index: usize) -> Option<f64> {
        let ((before, old), (after, new)) = (self.previous.as_ref()?, self.latest.as_ref()?);
        let seconds = after.duration_since(*before).as_secs_f64().max(0.001);
        Some((new[index] - old[index]).max(0.0) / seconds)
    }
}

fn requests_of(tracker: &dyn Monitored) -> f64 {
    let mut observation = Observation::default();
    tracker.observe(&mut observation);
    observation.sum(shoal_common::metric_names::REQUESTS, &[])
}

struct Endpoint {
    trackers: Vec<Arc<dyn Monitored>>,
    started: Instant,
    rates: Rates,
}

/// An answer: status line, content type, body.
struct Answer {
    status: &'static str,
    content_type: &'static str,
    body: String,
}

impl Answer {
    fn text(status: &'static str, body: impl Into<String>) -> Self {
        Self {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.into(),
        }
    }
}

impl Endpoint {
    /// The whole answer to a request `head`, status line to body.
    fn respond(&self, head: &[u8]) -> Vec<u8> {
        let text = String::from_utf8_lossy(head);
        let line = text.lines().next().unwrap_or_default();
        let openmetrics = text.lines().any(|header| {
            header.to_ascii_lowercase().starts_with("accept:")
                && header.contains("application/openmetrics-text")
        });
        let mut parts = line.split(' ');
        let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let path = target.split('?').next().unwrap_or("");
        let answer = if method != "GET" && method != "HEAD" {
            Answer::text("405 Method Not Allowed", "only GET\n")
        } else {
            self.answer(path, openmetrics)
        };
        let mut out = format!(
            "HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
            answer.status,
            answer.content_type,
            answer.body.len()
        );
        if method != "HEAD" {
            out.push_str(&answer.body);
        }
        out.into_bytes()
    }

    /// The answer for `path`; `openmetrics` when the client accepts that format.
    fn answer(&self, path: &str, openmetrics: bool) -> Answer {
        match path {
            "/metrics" if openmetrics => Answer {
                status: "200 OK",
                content_type: "application/openmetrics-text; version=1.0.0; charset=utf-8",
                body: self.metrics(),
            },
            "/metrics" => Answer {
                status: "200 OK",
                content_type: "text/plain; version=0.0.4; charset=utf-8",
                body: classic_text(&self.metrics()),
            },
            "/stats.json" => Answer {
                status: "200 OK",
                content_type: "application/json",
                body: self.stats_json().to_string(),
            },
            "/stats" | "/" => Answer {
                status: "200 OK",
                content_type: "text/html; charset=utf-8",
                body: self.stats_page(),
            },
            "/health" => {
                let unhealthy: Vec<&str> = self
                    .trackers
                    .iter()
                    .filter(|t| !t.healthy())
                    .map(|t| t.protocol())
                    .collect();
                if unhealthy.is_empty() {
                    Answer::text("200 OK", "ok\n")
                } else {
                    Answer::text(
                        "503 Service Unavailable",
                        format!(
                            "unhealthy (stopping, or a worker stuck): {}\n",
                            unhealthy.join(", ")
                        ),
                    )
                }
            }
            _ => Answer::text(
                "404 Not Found",
                "not found: try /metrics, /stats, /stats.json or /health\n",
            ),
        }
    }

    /// Every tracker's families, one per name, plus the process's own.
    fn observe(&self) -> Observation {
        let mut all = Observation::default();
        for tracker in &self.trackers {
            let mut one = Observation::with_labels(&[("protocol", tracker.protocol())]);
            tracker.observe(&mut one);
            all.merge(one);
        }
        all.gauge(
            "shoal_uptime_seconds",
            "Seconds since the process started serving.",
            &[],
            self.started.elapsed().as_secs_f64(),
        );
        crate::process_metrics::observe(&mut all);
        crate::memory::observe(&mut all);
        shoal_worker::observe_snapshots(&mut all);
        all.gauge(
            "shoal_build_info",
            "Always 1; the labels say which shoal runs.",
            &[("version", env!("CARGO_PKG_VERSION"))],
            1.0,
        );
        all
    }

    fn metrics(&self) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Families(self.observe())));
        let mut out = String::new();
        if let Err(err) = prometheus_client::encoding::text::encode(&mut out, &registry) {
            log::warn!("cannot encode metrics: {err}");
        }
        out
    }

    fn stats_json(&self) -> serde_json::Value {
        let trackers: Vec<serde_json::Value> = self
            .trackers
            .iter()
            .enumerate()
            .map(|(index, tracker)| {
                let mut observation = Observation::default();
                tracker.observe(&mut observation);
                let gauge = |name: &str| observation.sum(name, &[]) as u64;
                let latency = observation.histogram_sum(shoal_common::metric_names::LATENCY, &[]);
                let bound = |quantile: f64| latency.as_ref().and_then(|h| h.quantile_bound(quantile));
                serde_json::json!({
                    "protocol": tracker.protocol(),
                    "urls": tracker.urls(),
                    "healthy": tracker.healthy(),
                    "requests_per_second": self.rates.per_second(index).map(|r| r.round()),
                    "requests": gauge(shoal_common::metric_names::REQUESTS),
                    "torrents": gauge("shoal_torrents"),
                    "peers": gauge("shoal_peers"),
                    "seeders": gauge("shoal_seeders"),
                    "leechers": gauge("shoal_leechers"),
                    "refused": gauge(shoal_common::metric_names::REFUSED),
                    "announce_interval_seconds": {
                        "ipv4": observation.sum("shoal_announce_interval_seconds", &[("ip_version", "4")]) as u64,
                        "ipv6": observation.sum("shoal_announce_interval_seconds", &[("ip_version", "6")]) as u64,
                        "max": gauge("shoal_announce_interval_max_seconds"),
                    },
                    "load": observation.sum("shoal_load", &[]),
                    "latency_seconds": {
                        "requests": latency.as_ref().map_or(0, |h| h.count),
                        "p50_at_most": bound(0.5),
                        "p99_at_most": bound(0.99),
                        "p999_at_most": bound(0.999),
                    },
                    "cluster": cluster_json(&observation),
                    "clients": clients_json(&observation),
                    "largest_swarms": tracker.largest_swarms(LARGEST).iter().map(|swarm| serde_json::json!({
                        "info_hash": hex(&swarm.info_hash),
                        "seeders": swarm.seeders,
                        "leechers": swarm.leechers,
                        "downloads": swarm.downloads,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        serde_json::json!({
            "version": env!("CARGO_PKG_VERSION"),
            "uptime_seconds": self.started.elapsed().as_secs(),
            "rate_window_seconds": RATE_WINDOW.as_secs(),
            "trackers": trackers,
        })
    }

    fn stats_page(&self) -> String {
        let json = self.stats_json();
        let mut page = String::from(
            "<!doctype html><meta charset=utf-8><title>shoal statistics</title>\
             <style>body{font-family:sans-serif;margin:2em}td,th{padding:.2em .8em;text-align:right}\
             td:first-child,th:first-child{text-align:left}</style><h1>shoal</h1>",
        );
        let _ = write!(
            page,
            "<p>version {}, up {} s. <a href=/stats.json>JSON</a>, <a href=/metrics>metrics</a>.</p>",
            json["version"].as_str().unwrap_or(""),
            json["uptime_seconds"]
        );
        page.push_str(
            "<table><tr><th>tracker</th><th>requests/s</th><th>torrents</th><th>peers</th>\
             <th>seeders</th><th>leechers</th><th>refused</th><th>p99 latency</th>\
             <th>interval (IPv4, IPv6)</th><th>load</th><th>state</th></tr>",
        );
        let trackers = json["trackers"].as_array().cloned().unwrap_or_default();
        for t in &trackers {
            let rate = t["requests_per_second"]
                .as_f64()
                .map_or_else(|| "…".to_string(), |r| format!("{r:.0}"));
            let p99 = match (
                t["latency_seconds"]["p99_at_most"].as_f64(),
                t["latency_seconds"]["requests"].as_u64(),
            ) {
                (Some(seconds), _) => format!("≤ {} µs", (seconds * 1e6).round()),
                (None, Some(0) | None) => "…".to_string(),
                (None, Some(_)) => "over 1 s".to_string(),
            };
            let _ = write!(
                page,
                "<tr><td>{}</td><td>{rate}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{p99}</td><td>{} s, {} s</td><td>{:.0}%</td><td>{}</td></tr>",
                t["protocol"].as_str().unwrap_or(""),
                t["torrents"],
                t["peers"],
                t["seeders"],
                t["leechers"],
                t["refused"],
                t["announce_interval_seconds"]["ipv4"],
                t["announce_interval_seconds"]["ipv6"],
                t["load"].as_f64().unwrap_or(0.0) * 100.0,
                if t["healthy"].as_bool() == Some(true) {
                    "serving"
                } else {
                    "stopping"
                },
            );
        }
        page.push_str("</table><h2>Largest swarms</h2><p>As of the last cleaning pass.</p><table><tr><th>tracker</th><th>info hash</th><th>seeders</th><th>leechers</th><th>downloads</th></tr>");
        for t in &trackers {
            for swarm in t["largest_swarms"].as_array().into_iter().flatten() {
                let _ = write!(
                    page,
                    "<tr><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    t["protocol"].as_str().unwrap_or(""),
                    swarm["info_hash"].as_str().unwrap_or(""),
                    swarm["seeders"],
                    swarm["leechers"],
                    swarm["downloads"],
                );
            }
        }
        page.push_str("</table><h2>Clients</h2><p>Announces by client software, told by the peer id.</p><table><tr><th>tracker</th><th>client</th><th>announces</th></tr>");
        for t in &trackers {
            for client in t["clients"].as_array().into_iter().flatten() {
                let _ = write!(
                    page,
                    "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                    t["protocol"].as_str().unwrap_or(""),
                    client["client"].as_str().unwrap_or(""),
                    client["announces"],
                );
            }
        }
        page.push_str("</table>\n");
        page
    }
}

/// The OpenMetrics text `prometheus-client` writes, as the classic Prometheus text
/// format (0.0.4) that `promtool check metrics`, older scrapers and people with curl
/// read: a counter's `# HELP` and `# TYPE` lines name it with its `_total` suffix, as
/// its samples do, and the `# EOF` line goes. Prometheus itself asks for OpenMetrics
/// and gets it unchanged.
/// Announces by client software in `/stats.json`: the clients seen, most first.
fn clients_json(observation: &Observation) -> serde_json::Value {
    let names = shoal_common::KNOWN_CLIENTS
        .iter()
        .map(|(_, name)| *name)
        .chain([shoal_common::OTHER_CLIENT]);
    let mut seen: Vec<(&str, u64)> = names
        .map(|name| {
            let count = observation.sum(
                shoal_common::metric_names::ANNOUNCES_BY_CLIENT,
                &[("client", name)],
            );
            (name, count as u64)
        })
        .filter(|&(_, count)| count > 0)
        .collect();
    seen.sort_by_key(|&(_, count)| std::cmp::Reverse(count));
    seen.into_iter()
        .map(|(name, count)| serde_json::json!({ "client": name, "announces": count }))
        .collect()
}

/// A tracker's replication (`[cluster]`) in `/stats.json`; `null` while it is off.
fn cluster_json(observation: &Observation) -> serde_json::Value {
    let on = observation
        .families()
        .iter()
        .any(|family| family.name == "shoal_cluster_store_up");
    if !on {
        return serde_json::Value::Null;
    }
    let value = |name: &str| observation.sum(name, &[]);
    serde_json::json!({
        "store_up": value("shoal_cluster_store_up") == 1.0,
        "backlog_bytes": value("shoal_cluster_backlog_bytes") as u64,
        "delay_seconds": value("shoal_cluster_delay_seconds"),
        "published_changes": value("shoal_cluster_published_changes") as u64,
        "applied_peers": value("shoal_cluster_applied_peers") as u64,
        "dropped_changes": value("shoal_cluster_dropped_changes") as u64,
    })
}

fn classic_text(openmetrics: &str) -> String {
    let counters: Vec<&str> = openmetrics
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len() + 16 * counters.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let described = ["# HELP ", "# TYPE "].iter().find_map(|prefix| {
            let rest = line.strip_prefix(prefix)?;
            let name = rest.split(' ').next()?;
            counters
                .contains(&name)
                .then(|| format!("{prefix}{name}_total{}", &rest[name.len()..]))
        });
        out.push_str(described.as_deref().unwrap_or(line));
        out.push('\n');
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .fold(String::with_capacity(40), |mut out, byte| {
            let _ = write!(out, "{byte:02x}");
            out
        })
}

/// An observation as a `prometheus-client` collector, encoded once per scrape.
#[derive(Debug)]
struct Families(Observation);

impl Collector for Families {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        for Family {
            name,
            help,
            kind,
            samples,
            histograms,
        } in self.0.families()
        {
            let metric_type = match kind {
                MetricKind::Counter => MetricType::Counter,
                MetricKind::Gauge => MetricType::Gauge,
                MetricKind::Histogram => MetricType::Histogram,
            };
            let mut family = encoder.encode_descriptor(name, help, None, metric_type)?;
            for (labels, histogram) in histograms {
                let labels: Vec<(&str, &str)> =
                    labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
                family
                    .encode_family(&labels)?
                    .encode_histogram::<NoLabelSet>(
                        histogram.sum,
                        histogram.count,
                        &histogram.buckets,
                        None,
                    )?;
            }
            for (labels, value) in samples {
                let labels: Vec<(&str, &str)> =
                    labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
                let sample = family.encode_family(&labels)?;
                match kind {
                    // Whole counts as integers; a counter of seconds keeps its fraction.
                    MetricKind::Counter if value.fract() == 0.0 => {
                        ConstCounter::new(*value as u64).encode(sample)?
                    }
                    MetricKind::Counter => ConstCounter::new(*value).encode(sample)?,
                    MetricKind::Gauge | MetricKind::Histogram => {
                        ConstGauge::new(*value).encode(sample)?
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_written_with_cumulative_buckets() {
        let mut observation = Observation::with_labels(&[("protocol", "udp")]);
        observation.histogram(
            "shoal_request_duration_seconds",
            "Latency.",
            &[],
            shoal_common::Histogram {
                sum: 0.5,
                count: 3,
                buckets: vec![(0.001, 2), (0.01, 0), (f64::MAX, 1)],
            },
        );
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Families(observation)));
        let mut openmetrics = String::new();
        prometheus_client::encoding::text::encode(&mut openmetrics, &registry).unwrap();
        let classic = classic_text(&openmetrics);
        for line in [
            "# TYPE shoal_request_duration_seconds histogram",
            "shoal_request_duration_seconds_sum{protocol=\"udp\"} 0.5",
            "shoal_request_duration_seconds_count{protocol=\"udp\"} 3",
            "shoal_request_duration_seconds_bucket{le=\"0.001\",protocol=\"udp\"} 2",
            "shoal_request_duration_seconds_bucket{le=\"0.01\",protocol=\"udp\"} 2",
            "shoal_request_duration_seconds_bucket{le=\"+Inf\",protocol=\"udp\"} 3",
        ] {
            assert!(
                classic.lines().any(|l| l == line),
                "{line} missing:\n{classic}"
            );
        }
    }

    #[test]
    fn classic_text_names_counters_with_their_suffix() {
        let mut observation = Observation::with_labels(&[("protocol", "udp")]);
        observation.counter("shoal_requests", "Requests.", &[("action", "announce")], 3);
        observation.gauge("shoal_peers", "Peers.", &[], 2.0);
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Families(observation)));
        let mut openmetrics = String::new();
        prometheus_client::encoding::text::encode(&mut openmetrics, &registry).unwrap();
        assert!(
            openmetrics.contains("# TYPE shoal_requests counter"),
            "{openmetrics}"
        );
        let classic = classic_text(&openmetrics);
        assert_eq!(
            classic,
            "# HELP shoal_requests_total Requests.\n\
             # TYPE shoal_requests_total counter\n\
             shoal_requests_total{protocol=\"udp\",action=\"announce\"} 3\n\
             # HELP shoal_peers Peers.\n\
             # TYPE shoal_peers gauge\n\
             shoal_peers{protocol=\"udp\"} 2.0\n"
        );
    }

    #[test]
    fn a_counter_of_seconds_keeps_its_fraction() {
        let mut observation = Observation::default();
        observation.counter_seconds("process_cpu_seconds", "CPU time.", 12.25);
        observation.counter("shoal_bans", "Bans.", &[], 7);
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Families(observation)));
        let mut openmetrics = String::new();
        prometheus_client::encoding::text::encode(&mut openmetrics, &registry).unwrap();
        let classic = classic_text(&openmetrics);
        assert!(
            classic
                .lines()
                .any(|l| l == "process_cpu_seconds_total{} 12.25"),
            "{classic}"
        );
        assert!(
            classic.lines().any(|l| l == "shoal_bans_total{} 7"),
            "{classic}"
        );
    }

    #[test]
    fn the_process_reports_its_own_memory_and_descriptors() {
        let mut observation = Observation::default();
        crate::process_metrics::observe(&mut observation);
        assert!(
            !observation.families().is_empty(),
            "/proc/self is readable (Linux)"
        );
        assert!(observation.sum("process_resident_memory_bytes", &[]) > 1e6);
        assert!(observation.sum("process_open_fds", &[]) >= 1.0);
        assert!(observation.sum("process_start_time_seconds", &[]) > 1.5e9);
        let kinds: Vec<_> = observation
            .families()
            .iter()
            .map(|family| (family.name, family.kind))
            .collect();
        assert!(kinds.contains(&("process_cpu_seconds", MetricKind::Counter)));
    }
}
