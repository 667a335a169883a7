//! The HTTP tracker started in-process on free loopback ports, driven over real TCP.

mod support;

use shoal_common::testing::eventually;
use std::io::Write as _;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use shoal_common::AccessListMode;
use shoal_http::RunningTracker;
use shoal_http_protocol::bencode::Value;
use support::*;

const TORRENT: [u8; 20] = [0x21; 20];

fn start(config: shoal_http::Config) -> RunningTracker {
    shoal_http::start(config).expect("tracker starts")
}

fn v4(tracker: &RunningTracker) -> SocketAddr {
    shoal_common::testing::ipv4(tracker.local_addrs())
}

#[test]
fn compact_announces_and_scrape() {
    let tracker = start(loopback_config(false));
    let mut client = Connection::open(v4(&tracker));
    let first = client.get(&announce(&TORRENT, 7001, "&compact=1&event=started"));
    assert_eq!(first.status, 200);
    assert_eq!((int(&first, "complete"), int(&first, "incomplete")), (0, 1));
    // The configured 1,800 s and 900 s, each reply moved by up to 10% (jitter).
    let (interval, min_interval) = (int(&first, "interval"), int(&first, "min interval"));
    assert!((1620..=1980).contains(&interval), "{interval}");
    assert_eq!(min_interval, interval / 2);
    assert_eq!(bytes(&first, "peers"), b"");

    let second = client.get(&announce(&TORRENT, 7002, "&left=0"));
    assert_eq!(
        (int(&second, "complete"), int(&second, "incomplete")),
        (1, 1)
    );
    assert_eq!(
        compact_v4(bytes(&second, "peers")),
        vec!["127.0.0.1:7001".parse::<SocketAddr>().unwrap()]
    );

    let other = [0x22; 20];
    let response = client.get(&scrape(&[TORRENT, other]));
    let Some(Value::Dict(files)) = response.body.get("files") else {
        panic!("{response:?}")
    };
    assert_eq!(files.len(), 2);
    let stats = &files.iter().find(|(k, _)| k == &TORRENT).unwrap().1;
    assert_eq!(stats.get("complete").and_then(Value::as_int), Some(1));
    assert_eq!(stats.get("incomplete").and_then(Value::as_int), Some(1));
    assert_eq!(stats.get("downloaded").and_then(Value::as_int), Some(0));
    assert!(eventually(|| tracker.stats().requests.announces == 2));
}

#[test]
fn non_compact_announces_with_and_without_peer_ids() {
    let tracker = start(loopback_config(false));
    let mut client = Connection::open(v4(&tracker));
    client.get(&announce(&TORRENT, 7001, ""));
    let response = client.get(&announce(&TORRENT, 7002, "&compact=0"));
    let Some(Value::List(peers)) = response.body.get("peers") else {
        panic!("{response:?}")
    };
    assert_eq!(peers.len(), 1);
    assert_eq!(
        peers[0].get("ip").and_then(Value::as_bytes),
        Some(&b"127.0.0.1"[..])
    );
    assert_eq!(peers[0].get("port").and_then(Value::as_int), Some(7001));
    assert_eq!(
        peers[0].get("peer id").and_then(Value::as_bytes),
        Some(&b"-SH0001-000000007001"[..])
    );

    let response = client.get(&announce(&TORRENT, 7003, "&compact=0&no_peer_id=1"));
    let Some(Value::List(peers)) = response.body.get("peers") else {
        panic!("{response:?}")
    };
    assert_eq!(peers.len(), 2);
    assert!(peers.iter().all(|peer| peer.get("peer id").is_none()));
}

#[test]
fn a_client_announcing_port_0_gets_peers_and_is_never_handed_out() {
    let tracker = start(loopback_config(false));
    let mut client = Connection::open(v4(&tracker));
    client.get(&announce(&TORRENT, 7001, "&event=started"));
    let reply = client.get(&announce(&TORRENT, 0, "&left=0"));
    assert_eq!(reply.status, 200);
    assert_eq!(
        compact_v4(bytes(&reply, "peers")),
        vec!["127.0.0.1:7001".parse::<SocketAddr>().unwrap()]
    );
    assert_eq!((int(&reply, "complete"), int(&reply, "incomplete")), (0, 1));
    let reply = client.get(&announce(&TORRENT, 7001, ""));
    assert_eq!(bytes(&reply, "peers"), b"", "sent a peer on port 0");
}

#[test]
fn completed_downloads_and_stopped_peers() {
    let tracker = start(loopback_config(false));
    let mut client = Connection::open(v4(&tracker));
    client.get(&announce(&TORRENT, 7001, "&event=started"));
    client.get(&announce(&TORRENT, 7001, "&event=completed&left=0"));
    let response = client.get(&scrape(&[TORRENT]));
    let files = response.body.get("files").unwrap();
    let Value::Dict(files) = files else { panic!() };
    assert_eq!(
        files[0].1.get("downloaded").and_then(Value::as_int),
        Some(1)
    );
    let stopped = client.get(&announce(&TORRENT, 7001, "&event=stopped&left=0"));
    assert_eq!(int(&stopped, "complete"), 0);
}

#[test]
fn keep_alive_and_pipelining() {
    let tracker = start(loopback_config(false));
    let mut client = Connection::open(v4(&tracker));
    // Three requests in one write; three responses in order.
    let mut batch = Vec::new();
    for port in [7001, 7002, 7003] {
        batch.extend_from_slice(
            format!(
                "GET {} HTTP/1.1\r\nHost: t\r\n\r\n",
                announce(&TORRENT, port, "")
            )
            .as_bytes(),
        );
    }
    client.send(&batch);
    for expected_leechers in 1..=3 {
        let response = client.response().expect("pipelined response");
        assert_eq!(int(&response, "incomplete"), expected_leechers);
        assert!(!response.close);
    }
    // HTTP/1.0 without keep-alive closes after the response.
    client.send(format!("GET {} HTTP/1.0\r\n\r\n", announce(&TORRENT, 7004, "")).as_bytes());
    let response = client.response().unwrap();
    assert!(response.close);
    assert!(client.closed());
}

#[test]
fn keep_alive_can_be_turned_off() {
    let mut config = loopback_config(false);
    config.network.keep_alive = false;
    let tracker = start(config);
    let mut client = Connection::open(v4(&tracker));
    let response = client.get(&announce(&TORRENT, 7001, ""));
    assert!(response.close);
    assert!(client.closed());
}

#[test]
fn every_listener_queues_the_configured_backlog() {
    let mut config = loopback_config(false);
    config.network.listen_backlog = 55;
    let tracker = start(config);
    let port = v4(&tracker).port();
    let output = std::process::Command::new("ss")
        .args(["-ltnH", &format!("sport = :{port}")])
        .output()
        .expect("ss (iproute2) runs");
    let text = String::from_utf8_lossy(&output.stdout);
    let backlogs: Vec<&str> = text
        .lines()
        .filter_map(|line| line.split_whitespace().nth(2))
        .collect();
    // One listener per socket worker; each column is Send-Q, a listener's backlog.
    assert!(!backlogs.is_empty(), "{text}");
    assert!(backlogs.iter().all(|&backlog| backlog == "55"), "{text}");
}

#[test]
fn malformed_requests_get_4xx_and_a_closed_connection() {
    let tracker = start(loopback_config(false));
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (
            b"GET /announce?port=1 HTTP/1.1\r\n\r\n".to_vec(),
            400,
            "missing info_hash",
        ),
        (b"GET /nowhere HTTP/1.1\r\n\r\n".to_vec(), 404, "not found"),
        (
            b"DELETE /announce HTTP/1.1\r\n\r\n".to_vec(),
            405,
            "only GET requests are served",
        ),
        (
            b"\x16\x03\x01\x02\x00 not http\r\n\r\n".to_vec(),
            400,
            "malformed HTTP request",
        ),
        (
            format!("GET /announce?{} HTTP/1.1\r\n\r\n", "a".repeat(5000)).into_bytes(),
            431,
            "request too large",
        ),
    ];
    for (request, status, reason) in cases {
        let mut client = Connection::open(v4(&tracker));
        client.send(&request);
        let response = client.response().expect("an error response");
        assert_eq!(
            (response.status, failure(&response)),
            (status, reason.to_string())
        );
        assert!(response.close);
        assert!(client.closed(), "closed after {status}");
    }
    assert!(eventually(|| tracker.stats().requests.bad_requests == 5));
}

#[test]
fn slow_and_idle_connections_time_out() {
    let mut config = loopback_config(false);
    config.network.idle_timeout = 1;
    let tracker = start(config);
    // A request that never completes gets a 408 and the connection closes.
    let mut slow = Connection::open(v4(&tracker));
    slow.send(b"GET /announce?info_hash=");
    let response = slow.response().expect("408");
    assert_eq!(response.status, 408);
    assert!(slow.closed());
    // An idle keep-alive connection is closed without a response.
    let mut idle = Connection::open(v4(&tracker));
    assert_eq!(idle.get(&announce(&TORRENT, 1, "")).status, 200);
    assert!(idle.response().is_none());
    assert!(eventually(|| tracker.stats().requests.timeouts >= 1));
}

#[test]
fn reverse_proxy_header() {
    let mut config = loopback_config(false);
    config.network.reverse_proxy_ip_header = "X-Forwarded-For".into();
    let tracker = start(config);
    let mut client = Connection::open(v4(&tracker));
    let send = |client: &mut Connection<TcpStream>, port: u16, header: &str| {
        client.send(
            format!(
                "GET {} HTTP/1.1\r\n{header}\r\n",
                announce(&TORRENT, port, "")
            )
            .as_bytes(),
        );
        client.response().expect("a response")
    };
    send(
        &mut client,
        7001,
        "X-Forwarded-For: 10.9.8.7, 203.0.113.5\r\n",
    );
    let response = send(&mut client, 7002, "x-forwarded-for: 198.51.100.1\r\n");
    assert_eq!(
        compact_v4(bytes(&response, "peers")),
        vec!["203.0.113.5:7001".parse::<SocketAddr>().unwrap()]
    );

    let response = send(&mut client, 7003, "");
    assert_eq!(response.status, 400);
    assert_eq!(
        failure(&response),
        "missing or invalid X-Forwarded-For header"
    );
    let mut client = Connection::open(v4(&tracker));
    let response = send(&mut client, 7003, "X-Forwarded-For: garbage\r\n");
    assert_eq!(response.status, 400);
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("shoal-http-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn access_list_allow_with_reload() {
    let dir = temp_dir("allow");
    let list = dir.join("list");
    let hex = |hash: &[u8; 20]| hash.iter().map(|b| format!("{b:02x}")).collect::<String>();
    std::fs::write(&list, hex(&TORRENT)).unwrap();
    let mut config = loopback_config(false);
    config.access_list.mode = AccessListMode::Allow;
    config.access_list.path = list.clone();
    let tracker = start(config);
    let mut client = Connection::open(v4(&tracker));
    assert_eq!(
        int(&client.get(&announce(&TORRENT, 1, "")), "incomplete"),
        1
    );
    let other = [0x99; 20];
    let refused = client.get(&announce(&other, 1, ""));
    assert_eq!(
        (refused.status, failure(&refused).as_str()),
        (200, "info hash not allowed")
    );
    assert!(!refused.close, "a refusal keeps the connection");
    assert_eq!(
        failure(&client.get(&scrape(&[other]))),
        "info hash not allowed"
    );

    std::fs::write(&list, format!("{}\n{}\n", hex(&TORRENT), hex(&other))).unwrap();
    assert_eq!(tracker.access_control().reload().unwrap(), 2);
    assert_eq!(int(&client.get(&announce(&other, 1, "")), "incomplete"), 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn full_scrape_is_off_by_default_and_cached_when_on() {
    let tracker = start(loopback_config(false));
    let mut client = Connection::open(v4(&tracker));
    assert_eq!(failure(&client.get("/scrape")), "full scrape is disabled");
    drop(tracker);

    let mut config = loopback_config(false);
    config.protocol.full_scrape = true;
    config.swarm_workers = 3;
    let tracker = start(config);
    let mut client = Connection::open(v4(&tracker));
    for i in 0..10u8 {
        client.get(&announce(&[i; 20], 1000, ""));
    }
    let Some(Value::Dict(files)) = client.get("/scrape").body.get("files").cloned() else {
        panic!()
    };
    assert_eq!(files.len(), 10);
    client.get(&announce(&[0xaa; 20], 1000, ""));
    let Some(Value::Dict(files)) = client.get("/scrape").body.get("files").cloned() else {
        panic!()
    };
    assert_eq!(
        files.len(),
        10,
        "served from the cache within full_scrape_interval"
    );
    tracker.clock().advance(301);
    let Some(Value::Dict(files)) = client.get("/scrape").body.get("files").cloned() else {
        panic!()
    };
    assert_eq!(files.len(), 11, "rebuilt once the interval passed");
    assert!(eventually(|| tracker.stats().requests.full_scrapes == 2));
}

#[test]
fn scrapes_across_swarm_workers() {
    let mut config = loopback_config(false);
    config.swarm_workers = 4;
    config.socket_workers = 2;
    let tracker = start(config);
    let mut client = Connection::open(v4(&tracker));
    let hashes: Vec<[u8; 20]> = (0..40u8)
        .map(|i| [i.wrapping_mul(29).wrapping_add(3); 20])
        .collect();
    for (i, hash) in hashes.iter().enumerate().filter(|(i, _)| i % 2 == 0) {
        client.get(&announce(hash, 2000 + i as u16, ""));
    }
    let Some(Value::Dict(files)) = client.get(&scrape(&hashes)).body.get("files").cloned() else {
        panic!()
    };
    assert_eq!(files.len(), 40);
    for (hash, stats) in &files {
        let index = hashes.iter().position(|h| h == &hash[..]).unwrap();
        assert_eq!(
            stats.get("incomplete").and_then(Value::as_int),
            Some(i64::from(index % 2 == 0))
        );
    }
}

#[test]
fn ipv6_on_loopback() {
    if !shoal_common::testing::ipv6_loopback() {
        shoal_common::testing::skip("ipv6", "::1 cannot be bound");
        return;
    }
    let tracker = start(loopback_config(true));
    let v6 = shoal_common::testing::ipv6(tracker.local_addrs());
    let mut a = Connection::open(v6);
    a.get(&announce(&TORRENT, 6881, ""));
    let mut b = Connection::open(v6);
    let response = b.get(&announce(&TORRENT, 6882, ""));
    assert_eq!(bytes(&response, "peers"), b"");
    let peers6 = bytes(&response, "peers6");
    assert_eq!(peers6.len(), 18);
    assert_eq!(&peers6[..16], &std::net::Ipv6Addr::LOCALHOST.octets());
    assert_eq!(&peers6[16..], &6881u16.to_be_bytes());
    // An IPv4 client is not sent the IPv6 peers, but counts include them.
    let mut c = Connection::open(v4(&tracker));
    let response = c.get(&announce(&TORRENT, 6883, ""));
    assert_eq!(bytes(&response, "peers"), b"");
    assert_eq!(int(&response, "incomplete"), 3);
}

#[test]
fn connection_limit() {
    let mut config = loopback_config(false);
    // The limit is per socket worker: one, so that every connection meets it.
    config.socket_workers = 1;
    config.network.max_connections = 2;
    let tracker = start(config);
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut client = Connection::open(v4(&tracker));
        assert_eq!(client.get(&announce(&TORRENT, 1, "")).status, 200);
        held.push(client);
    }
    // Full of connections waiting for requests: a newcomer takes the place of the one
    // that waited longest (attacks.rs; the 503 for a worker whose connections are all
    // busy is in tls.rs).
    let mut third = Connection::open(v4(&tracker));
    assert_eq!(third.get(&announce(&TORRENT, 3, "")).status, 200);
    drop(third);
    drop(held);
    // Slots free up once connections close.
    let fresh = std::time::Instant::now();
    loop {
        let mut client = Connection::open(v4(&tracker));
        client.send(format!("GET {} HTTP/1.1\r\n\r\n", announce(&TORRENT, 2, "")).as_bytes());
        if client.response().is_some_and(|r| r.status == 200) {
            break;
        }
        assert!(
            fresh.elapsed() < Duration::from_secs(5),
            "connections were not released"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The third got in by an eviction (and a newcomer above may have made another
    // give way before the tracker noticed the dropped ones close).
    assert!(eventually(|| tracker
        .stats()
        .requests
        .connections
        .idle_evicted
        >= 1));
    assert_eq!(tracker.stats().requests.connections.refused, 0);
}

#[test]
fn client_closing_mid_request_does_not_hurt() {
    let tracker = start(loopback_config(false));
    for _ in 0..20 {
        let mut stream = TcpStream::connect(v4(&tracker)).unwrap();
        stream.write_all(b"GET /announce?info").unwrap();
    }
    let mut client = Connection::open(v4(&tracker));
    assert_eq!(client.get(&announce(&TORRENT, 1, "")).status, 200);
}

#[test]
fn both_worker_layouts_expire_peers_and_report_sizes() {
    // swarm_workers = 0: the socket worker keeps and cleans the torrents; 2: threads do.
    for swarm_workers in [0, 2] {
        let mut config = loopback_config(false);
        config.swarm_workers = swarm_workers;
        config.protocol.announce_interval = 10;
        config.protocol.min_announce_interval = 5;
        config.cleaning.peer_timeout = 20;
        config.cleaning.interval = 1;
        let tracker = start(config);
        let mut client = Connection::open(v4(&tracker));
        for i in 0..4u8 {
            client.get(&announce(&[i; 20], 7000 + u16::from(i), ""));
        }
        assert!(
            eventually(|| tracker.stats().torrents == 4 && tracker.stats().peers == 4),
            "{swarm_workers}"
        );
        tracker.clock().advance(21);
        assert!(
            eventually(|| tracker.stats().torrents == 0 && tracker.stats().peers == 0),
            "swarm_workers = {swarm_workers}: {:?}",
            tracker.stats()
        );
        let response = client.get(&scrape(&[[0; 20]]));
        let Some(Value::Dict(files)) = response.body.get("files") else {
            panic!("{response:?}")
        };
        assert_eq!(
            files[0].1.get("incomplete").and_then(Value::as_int),
            Some(0)
        );
    }
}

#[test]
fn swarm_workers_zero_means_automatic() {
    let layout = |sockets, swarms| {
        let config = shoal_http::Config {
            socket_workers: sockets,
            swarm_workers: swarms,
            ..shoal_http::Config::default()
        };
        config.swarm_worker_count()
    };
    assert_eq!(layout(1, 0), 0, "one socket worker keeps the torrents");
    assert_eq!(layout(2, 0), 1);
    assert_eq!(layout(8, 0), 2);
    assert_eq!(layout(9, 0), 3);
    assert_eq!(layout(1, 2), 2);
    // Two socket workers with the automatic setting share one swarm worker.
    let mut config = loopback_config(false);
    config.socket_workers = 2;
    let tracker = start(config);
    let mut client = Connection::open(v4(&tracker));
    assert_eq!(
        int(&client.get(&announce(&TORRENT, 1, "")), "incomplete"),
        1
    );
}

#[test]
fn runs_on_the_backend_under_test() {
    let tracker = shoal_http::start(loopback_config(false)).unwrap();
    let backend = tracker.extra().backend;
    match shoal_common::testing::io_backend_under_test() {
        shoal_common::IoBackend::Epoll => assert_eq!(backend, shoal_tcp::Backend::Epoll),
        shoal_common::IoBackend::IoUring => assert_eq!(backend, shoal_tcp::Backend::IoUring),
        shoal_common::IoBackend::Auto => {}
    }
    let mut connection = Connection::open(shoal_common::testing::ipv4(tracker.local_addrs()));
    let response = connection.get(&announce(&[3; 20], 6881, ""));
    assert_eq!(response.status, 200);
}

#[test]
fn private_mode_serves_keys_in_path_or_query_and_refuses_with_an_interval() {
    const KEY: &str = "6f0d1b2c3d4e5f60718293a4b5c6d7e8";
    let dir = temp_dir("private");
    let hex: String = TORRENT.iter().map(|b| format!("{b:02x}")).collect();
    std::fs::write(dir.join("users"), format!("17 {KEY}\n")).unwrap();
    std::fs::write(dir.join("torrents"), format!("{hex} 1001\n")).unwrap();
    let mut config = loopback_config(false);
    config.private.enabled = true;
    config.private.users_path = dir.join("users");
    config.private.torrents_path = dir.join("torrents");
    let tracker = start(config);
    let mut client = Connection::open(v4(&tracker));
    let path_key = announce(&TORRENT, 1, "").replacen("/announce", &format!("/{KEY}/announce"), 1);
    assert_eq!(int(&client.get(&path_key), "incomplete"), 1);
    let query_key = announce(&TORRENT, 2, &format!("&passkey={KEY}"));
    assert_eq!(int(&client.get(&query_key), "incomplete"), 2);
    // Refused: no key, with the interval to come back after.
    let refused = client.get(&announce(&TORRENT, 3, ""));
    assert_eq!(refused.status, 200);
    assert!(failure(&refused).starts_with("passkey missing"));
    let interval = int(&refused, "interval");
    assert!((1620..=1980).contains(&interval), "{interval}");
    assert_eq!(int(&refused, "min interval"), interval / 2);
    assert!(!refused.close, "a refusal keeps the connection");
    // A scrape with the key in the path BEP 48 derives from /KEY/announce.
    let keyed_scrape = scrape(&[TORRENT]).replacen("/scrape", &format!("/{KEY}/scrape"), 1);
    assert!(client.get(&keyed_scrape).body.get("files").is_some());
    assert!(failure(&client.get(&scrape(&[TORRENT]))).starts_with("passkey missing"));
    assert!(shoal_common::testing::eventually(|| tracker
        .stats()
        .requests
        .private_refused
        == 2));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A tracker stopped and started again in one process (as the tests do, and a
/// supervisor could) gets its port back at once. On io_uring the accept in flight
/// kept the old listening socket alive after the stop, and the new start was refused
/// ("another process listens on ...").
#[test]
fn a_tracker_stopped_and_started_again_in_one_process_gets_its_port_back() {
    let tracker = start(loopback_config(false));
    let addr = v4(&tracker);
    let mut client = Connection::open(addr);
    assert_eq!(client.get(&announce(&TORRENT, 7100, "")).status, 200);
    tracker.stop().unwrap();
    let mut config = loopback_config(false);
    config.network.address_ipv4 = addr;
    let tracker = shoal_http::start(config).expect("the same port, free again");
    let mut client = Connection::open(addr);
    assert_eq!(client.get(&announce(&TORRENT, 7101, "")).status, 200);
    tracker.stop().unwrap();
}
