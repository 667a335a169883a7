//! The WebTorrent load tester against a real shoal_ws tracker started in-process, over
//! ws and wss: announces are answered, offers forwarded and answered, answers relayed,
//! and nothing fails.

use shoal_common::Shutdown;
use shoal_ws_load_test::Config;
use shoal_ws_load_test::Summary;

fn tracker(tls_dir: Option<&std::path::Path>) -> shoal_ws::RunningTracker {
    let mut config = shoal_ws::Config::default();
    // The load comes from one address, far faster than one client may send.
    config.per_ip.requests_per_second = 0;
    config.per_ip.max_connections = 0;
    config.per_ip.max_connections_per_network = 0;
    config.network.address_ipv4 = "127.0.0.1:0".parse().unwrap();
    config.network.use_ipv6 = false;
    config.statistics.interval = 0;
    config.limits.max_requests_per_second = 0;
    config.limits.max_offer_bytes_per_second = 0;
    // Two connections trading offers as fast as they can: at tens of thousands of
    // offers a second an answer can trail more than the default 32 newer offers to the
    // same peer, which the tracker then rightly refuses. This test is about the load
    // tester, so let offers wait.
    config.protocol.max_pending_offers = 1000;
    // Two trackers may run at once in this process; stay far below a 8 MiB memlock.
    config.limits.io_memory = 256 * 1024;
    if let Some(dir) = tls_dir {
        config.network.enable_tls = true;
        config.network.tls_certificate_path = dir.join("cert.pem");
        config.network.tls_private_key_path = dir.join("key.pem");
    }
    shoal_ws::start(config).expect("tracker starts")
}

/// A directory holding a self-signed certificate for localhost (`cert.pem`) and its
/// key (`key.pem`), for a wss tracker.
fn self_signed_dir(label: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("shoal-ws-load-{label}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    std::fs::write(dir.join("cert.pem"), cert.pem()).unwrap();
    std::fs::write(dir.join("key.pem"), key.serialize_pem()).unwrap();
    dir
}

fn load(tracker: &shoal_ws::RunningTracker) -> Config {
    let mut config = Config {
        server_address: shoal_common::testing::ipv4(tracker.local_addrs()),
        connections_per_worker: 2,
        duration: 2,
        summarize_last: 0,
        ..Config::default()
    };
    // Few torrents, all shared by both connections, so offers always find a peer.
    config.requests.torrents = 3;
    config.requests.torrents_per_connection = 3;
    config.requests.seeder_probability = 0.0;
    config.requests.weight_scrape = 10;
    config
}

fn assert_healthy(summary: &Summary) {
    assert!(summary.announce_replies_per_second > 50.0, "{summary:?}");
    assert!(summary.offers_per_second > 50.0, "{summary:?}");
    assert!(summary.answers_per_second > 50.0, "{summary:?}");
    assert!(summary.scrape_replies_per_second > 1.0, "{summary:?}");
    assert!(!summary.has_errors(), "{summary:?}");
    assert_eq!(summary.open_connections, 2, "{summary:?}");
    // Announce and scrape replies are timed (offers and answers come from other peers).
    let replies =
        (summary.announce_replies_per_second + summary.scrape_replies_per_second) * summary.seconds;
    let latency = summary.latency;
    assert!(
        latency.count as f64 > replies * 0.8 && (latency.count as f64) < replies * 1.5,
        "{summary:?}"
    );
    assert!(
        latency.p50_us >= 1 && latency.p50_us <= latency.p99_us && latency.p99_us <= latency.max_us,
        "{summary:?}"
    );
}

#[test]
fn announces_offers_and_answers_over_ws() {
    let tracker = tracker(None);
    let summary = shoal_ws_load_test::run_until(load(&tracker), Shutdown::new()).unwrap();
    assert_healthy(&summary);
    // Every offer reached the other connection and was answered there.
    assert!(summary.answers_sent_per_second > 50.0, "{summary:?}");
    // The tracker agrees: it relayed answers and refused none.
    let stats = tracker.stats().requests;
    assert!(stats.answers_relayed > 100, "{stats:?}");
    assert_eq!(stats.answers_refused + stats.bad_messages, 0, "{stats:?}");
    tracker.stop().unwrap();
}

#[test]
fn fixed_rate_keeps_to_its_rate() {
    let tracker = tracker(None);
    let mut config = load(&tracker);
    config.requests.rate = 100.0;
    let summary = shoal_ws_load_test::run_until(config, Shutdown::new()).unwrap();
    // 2 connections × 100/s, less the first moments of connecting.
    assert!(
        (150.0..=210.0).contains(&summary.requests_per_second),
        "{summary:?}"
    );
    assert!(!summary.has_errors(), "{summary:?}");
    assert_eq!(summary.skipped_per_second, 0.0, "{summary:?}");
    tracker.stop().unwrap();
}

#[test]
fn a_tracker_that_is_not_there_counts_failures() {
    // A port that was just free: connections are refused, counted, retried later.
    let address = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut config = Config {
        server_address: address,
        connections_per_worker: 2,
        duration: 1,
        summarize_last: 0,
        ..Config::default()
    };
    config.network.reconnect_delay_ms = 50;
    let summary = shoal_ws_load_test::run_until(config, Shutdown::new()).unwrap();
    assert!(summary.connect_failures_per_second > 1.0, "{summary:?}");
    // Backing off: 2 slots, 50 ms doubling, cannot reach 40 attempts per second.
    assert!(summary.connect_failures_per_second < 40.0, "{summary:?}");
    assert_eq!(summary.responses_per_second, 0.0);
}

#[test]
fn over_tls() {
    let dir = self_signed_dir("tls");
    let tracker = tracker(Some(&dir));
    let mut config = load(&tracker);
    config.network.tls = true;
    // Several requests waiting per connection, and replies matched to them.
    config.requests.in_flight = 4;
    let summary = shoal_ws_load_test::run_until(config, Shutdown::new()).unwrap();
    assert_healthy(&summary);
    tracker.stop().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn connections_closed_when_done_measure_new_connections_with_and_without_resumption() {
    let dir = self_signed_dir("churn");
    let tracker = tracker(Some(&dir));
    for resumption in [true, false] {
        // The tracker's workers flush their counts every 100 ms: let the last run's in.
        std::thread::sleep(std::time::Duration::from_millis(300));
        let before = tracker.stats().requests.connections;
        let mut config = load(&tracker);
        config.duration = 1;
        // More connections than one shared session store keeps tickets for: each
        // simulated browser resumes from its own.
        config.connections_per_worker = 32;
        config.network.tls = true;
        config.network.close_when_done = true;
        config.network.reconnect_delay_ms = 0;
        config.network.tls_resumption = resumption;
        config.requests.requests_per_connection = 1;
        config.requests.weight_scrape = 0;
        let summary = shoal_ws_load_test::run_until(config, Shutdown::new()).unwrap();
        // Each connection: a handshake, an upgrade, one announce answered, a close.
        assert!(summary.connections_opened_per_second > 50.0, "{summary:?}");
        let announces = summary.announce_replies_per_second;
        let opened = summary.connections_opened_per_second;
        assert!(
            announces >= opened * 0.9 && announces <= opened * 1.1 + 2.0,
            "one announce per connection: {summary:?}"
        );
        assert!(!summary.has_errors(), "{summary:?}");
        assert_eq!(summary.closed_by_server_per_second, 0.0, "{summary:?}");
        std::thread::sleep(std::time::Duration::from_millis(300));
        let after = tracker.stats().requests.connections;
        let resumed = after.tls_resumed - before.tls_resumed;
        let full = after.tls_full - before.tls_full;
        if resumption {
            assert!(resumed > full * 10, "resumed {resumed}, full {full}");
        } else {
            assert!(resumed == 0 && full > 50, "resumed {resumed}, full {full}");
        }
    }
    tracker.stop().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}
