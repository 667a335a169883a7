//! The HTTP load tester against a real shoal_http tracker started in-process.

use shoal_common::Shutdown;
use shoal_http_load_test::Config;

/// A tracker on IPv4 loopback without per-client limits: the load comes from one
/// address, far faster than one client may send.
fn tracker_config() -> shoal_http::Config {
    let mut config = shoal_http::Config::default();
    config.per_ip.requests_per_second = 0;
    config.per_ip.max_connections = 0;
    config.per_ip.max_connections_per_network = 0;
    config.network.address_ipv4 = "127.0.0.1:0".parse().unwrap();
    config.network.use_ipv6 = false;
    config.statistics.interval = 0;
    config.limits.io_memory = 256 * 1024;
    config
}

fn tracker(tls_dir: Option<&std::path::Path>) -> shoal_http::RunningTracker {
    let mut config = tracker_config();
    config.swarm_workers = 2;
    if let Some(dir) = tls_dir {
        config.network.enable_tls = true;
        config.network.tls_certificate_path = dir.join("cert.pem");
        config.network.tls_private_key_path = dir.join("key.pem");
    }
    shoal_http::start(config).expect("tracker starts")
}

fn load(tracker: &shoal_http::RunningTracker) -> Config {
    let mut config = Config {
        server_address: shoal_common::testing::ipv4(tracker.local_addrs()),
        duration: 2,
        summarize_last: 1,
        connections: 8,
        ..Config::default()
    };
    config.requests.torrents = 50;
    config.requests.peers = 500;
    config.requests.weight_scrape = 20;
    config
}

#[test]
fn keep_alive_and_fresh_connections() {
    let tracker = tracker(None);
    for keep_alive in [true, false] {
        let mut config = load(&tracker);
        config.network.keep_alive = keep_alive;
        let summary = shoal_http_load_test::run_until(config, Shutdown::new()).unwrap();
        assert!(
            summary.announce_per_second > 50.0,
            "keep-alive {keep_alive}: {summary:?}"
        );
        assert!(summary.scrape_per_second > 5.0, "{summary:?}");
        assert_eq!(
            summary.failures_per_second
                + summary.http_errors_per_second
                + summary.errors_per_second,
            0.0
        );
        assert!(summary.peers_per_announce > 5.0, "{summary:?}");
        // Every response in the window was timed.
        let (latency, responses) = (
            summary.latency,
            summary.responses_per_second * summary.seconds,
        );
        assert!(
            latency.count as f64 > responses * 0.8 && (latency.count as f64) < responses * 1.5,
            "{summary:?}"
        );
        assert!(
            latency.p50_us >= 1
                && latency.p50_us <= latency.p999_us
                && latency.p999_us <= latency.max_us,
            "{summary:?}"
        );
        if !keep_alive {
            assert!(
                summary.connections_per_second >= summary.responses_per_second * 0.9,
                "{summary:?}"
            );
        }
    }
}

#[test]
fn over_tls() {
    let dir = std::env::temp_dir().join(format!("shoal-http-load-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    std::fs::write(dir.join("cert.pem"), cert.pem()).unwrap();
    std::fs::write(dir.join("key.pem"), key.serialize_pem()).unwrap();
    let tracker = tracker(Some(&dir));
    let mut config = load(&tracker);
    config.network.tls = true;
    let summary = shoal_http_load_test::run_until(config, Shutdown::new()).unwrap();
    assert!(summary.announce_per_second > 50.0, "{summary:?}");
    assert_eq!(summary.errors_per_second, 0.0, "{summary:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Obeying clients come back after the interval the tracker gives: at a fixed 3 s,
/// 1,500 clients announce 500 times a second; at 6 s, half as often.
#[test]
fn obeying_clients_follow_the_interval_they_are_given() {
    for interval in [3u32, 6] {
        let mut config = tracker_config();
        config.protocol.announce_interval = interval;
        config.protocol.min_announce_interval = interval / 2;
        config.cleaning.peer_timeout = 4 * interval;
        config.interval.adaptive = false;
        config.interval.jitter_percent = 0;
        let tracker = shoal_http::start(config).expect("tracker starts");
        let mut load = load(&tracker);
        load.requests.weight_scrape = 0;
        load.requests.peers = 1_500;
        load.clients.count = 1_500;
        load.clients.spread = interval;
        load.duration = 2 * interval;
        load.summarize_last = interval;
        let summary = shoal_http_load_test::run_until(load, Shutdown::new()).unwrap();
        let expected = 1_500.0 / f64::from(interval);
        assert!(
            (expected * 0.8..=expected * 1.2).contains(&summary.announce_per_second),
            "interval {interval}: expected about {expected}/s: {summary:?}"
        );
        assert_eq!(summary.mean_interval, f64::from(interval), "{summary:?}");
        assert_eq!(summary.client_timeouts_per_second, 0.0, "{summary:?}");
    }
}

/// Clients wait for a connection as real ones wait for a tracker to accept theirs:
/// their timeout runs from when they came due, so a tracker that takes no requests
/// loses every client, not only those the load tester had a connection for.
#[test]
fn obeying_clients_waiting_for_a_connection_time_out() {
    // Accepts (through the kernel's backlog) and never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut config = Config {
        server_address: silent.local_addr().unwrap(),
        duration: 3,
        summarize_last: 3,
        connections: 2,
        ..Config::default()
    };
    config.requests.peers = 200;
    config.requests.weight_scrape = 0;
    config.clients.count = 200;
    config.clients.spread = 0;
    // Timeout at its 2 s floor, backoff in milliseconds.
    config.clients.time_scale = 1000.0;
    let summary = shoal_http_load_test::run_until(config, Shutdown::new()).unwrap();
    let timeouts = summary.client_timeouts_per_second * 3.0;
    assert!(
        timeouts >= 190.0,
        "{timeouts} of 200 timed out: {summary:?}"
    );
    assert_eq!(summary.in_time_per_second, 0.0, "{summary:?}");
    drop(silent);
}
