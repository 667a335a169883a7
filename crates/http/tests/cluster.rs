//! Shared swarms across HTTP tracker nodes (`[cluster]`), through a real redis-server on
//! loopback: peers (with their peer ids) and download counts announced to one node are
//! served by the other.

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use shoal_common::testing::{RedisServer, credited, eventually};
use shoal_http::RunningTracker;
use shoal_http_protocol::bencode::Value;
use support::*;

const TORRENT: [u8; 20] = [0x6b; 20];

fn node(redis: &RedisServer, name: &str, swarm_workers: usize) -> RunningTracker {
    let mut config = loopback_config(false);
    config.cluster.store = redis.address();
    config.cluster.node = name.into();
    config.cluster.publish_interval_ms = 20;
    config.swarm_workers = swarm_workers;
    shoal_http::start(config).expect("node starts")
}

fn addr(tracker: &RunningTracker) -> SocketAddr {
    shoal_common::testing::ipv4(tracker.local_addrs())
}

/// Peers and their ids from a non-compact announce reply.
fn peers_with_ids(response: &shoal_http_protocol::response::HttpResponse) -> Vec<(u16, Vec<u8>)> {
    let Some(Value::List(peers)) = response.body.get("peers") else {
        panic!("no peer list in {:?}", response.body);
    };
    peers
        .iter()
        .map(|peer| {
            let port = peer.get("port").and_then(Value::as_int).unwrap() as u16;
            let id = peer
                .get("peer id")
                .and_then(Value::as_bytes)
                .unwrap()
                .to_vec();
            (port, id)
        })
        .collect()
}

fn downloads(tracker: &RunningTracker) -> i64 {
    let response = Connection::open(addr(tracker)).get(&scrape(&[TORRENT]));
    let Some(Value::Dict(files)) = response.body.get("files") else {
        return -1;
    };
    files
        .first()
        .and_then(|(_, stats)| stats.get("downloaded").and_then(Value::as_int))
        .unwrap_or(-1)
}

#[test]
fn peers_with_their_ids_and_downloads_reach_the_other_node() {
    let redis = RedisServer::start();
    let a = node(&redis, "a", 0);
    let b = node(&redis, "b", 2);
    let mut on_a = Connection::open(addr(&a));
    on_a.get(&announce(&TORRENT, 8001, ""));
    on_a.get(&announce(&TORRENT, 8001, "&event=completed&left=0"));

    let started = Instant::now();
    let mut on_b = Connection::open(addr(&b));
    let mut seen = Vec::new();
    while started.elapsed() < Duration::from_secs(1) {
        seen = peers_with_ids(&on_b.get(&announce(&TORRENT, 8002, "&compact=0")));
        if !seen.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        seen,
        vec![(8001, b"-SH0001-000000008001".to_vec())],
        "node b did not send node a's peer with its id within a second"
    );
    assert!(
        eventually(|| downloads(&a) == 1 && downloads(&b) == 1),
        "downloads: a {}, b {}",
        downloads(&a),
        downloads(&b)
    );
    // Node a sends b's leecher back.
    let back = eventually(|| {
        let reply = Connection::open(addr(&a)).get(&announce(&TORRENT, 8003, ""));
        compact_v4(bytes(&reply, "peers")).contains(&SocketAddr::from(([127, 0, 0, 1], 8002)))
    });
    assert!(back, "node a never sent node b's leecher");
    a.stop().unwrap();
    b.stop().unwrap();
}

#[test]
fn a_private_client_announcing_to_two_nodes_is_credited_once() {
    const KEY: &str = "0a1b2c3d4e5f60718293a4b5c6d7e8f9";
    let redis = RedisServer::start();
    let dir =
        std::env::temp_dir().join(format!("shoal-http-cluster-private-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let hex: String = TORRENT.iter().map(|b| format!("{b:02x}")).collect();
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("users"), format!("17 {KEY}\n")).unwrap();
    std::fs::write(dir.join("torrents"), format!("{hex} 1001\n")).unwrap();
    let private_node = |name: &str| {
        let export = dir.join(name);
        std::fs::create_dir_all(&export).unwrap();
        let mut config = loopback_config(false);
        config.cluster.store = redis.address();
        config.cluster.node = name.into();
        config.private.enabled = true;
        config.private.users_path = dir.join("users");
        config.private.torrents_path = dir.join("torrents");
        config.private.export_directory = export;
        shoal_http::start(config).expect("node starts")
    };
    let (a, b) = (private_node("a"), private_node("b"));
    // One client (one peer id) announcing every time to both nodes, as a dual-stack
    // client does with round-robin DNS: the same counters at the same moment.
    let keyed = |extra: &str| format!("{}&passkey={KEY}", announce(&TORRENT, 6881, extra));
    let (mut on_a, mut on_b) = (Connection::open(addr(&a)), Connection::open(addr(&b)));
    for extra in [
        "&event=started",
        "&uploaded=3000&downloaded=100",
        "&uploaded=9000&downloaded=100&left=0&event=completed",
    ] {
        for connection in [&mut on_a, &mut on_b] {
            let reply = connection.get(&keyed(extra));
            assert!(
                reply.body.get("failure reason").is_none(),
                "{:?}",
                reply.body
            );
        }
        // Past the accounting thread's round (200 ms): each step applied by both.
        std::thread::sleep(Duration::from_millis(400));
    }
    a.stop().unwrap();
    b.stop().unwrap();
    let (dir_a, dir_b) = (dir.join("a"), dir.join("b"));
    assert_eq!(
        credited(&dir_a, "uploaded") + credited(&dir_b, "uploaded"),
        9000
    );
    assert_eq!(
        credited(&dir_a, "downloaded") + credited(&dir_b, "downloaded"),
        100
    );
    assert_eq!(
        credited(&dir_a, "completed") + credited(&dir_b, "completed"),
        1
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
