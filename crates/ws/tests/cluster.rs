//! One WebTorrent swarm over two tracker nodes (`[cluster]`), through a real
//! redis-server on loopback: peers announced to one node are counted and offered to by
//! the other, offers and answers between them are relayed through the nodes' inboxes,
//! and the ownership rules hold across nodes.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use shoal_common::testing::{RedisServer, eventually};
use shoal_swarm::Clock;
use shoal_ws::RunningTracker;
use shoal_ws_protocol::ServerMessage;
use support::*;

const TORRENT: &str = "shared";

fn node(
    redis: &RedisServer,
    name: &str,
    swarm_workers: usize,
    clock: &Arc<Clock>,
) -> RunningTracker {
    let mut config = loopback_config();
    config.cluster.store = redis.address();
    config.cluster.node = name.into();
    config.cluster.publish_interval_ms = 20;
    config.cluster.timeout_ms = 200;
    config.swarm_workers = swarm_workers;
    shoal_ws::start_with_clock(config, clock.clone()).expect("node starts")
}

fn addr(tracker: &RunningTracker) -> SocketAddr {
    shoal_common::testing::ipv4(tracker.local_addrs())
}

/// (seeders, leechers) of the torrent as `tracker` scrapes it.
fn scrape(tracker: &RunningTracker) -> (u64, u64) {
    let mut client = connect(addr(tracker));
    client.send(json!({"action": "scrape", "info_hash": chars(id(TORRENT))}));
    match client.receive() {
        ServerMessage::Scrape(scrape) => scrape
            .files
            .first()
            .map_or((0, 0), |(_, file)| (file.complete, file.incomplete)),
        other => panic!("expected a scrape reply, got {other:?}"),
    }
}

fn error(message: ServerMessage) -> String {
    match message {
        ServerMessage::Error(error) => error.reason.into_owned(),
        other => panic!("expected an error, got {other:?}"),
    }
}

#[test]
fn a_peer_on_each_node_exchange_an_offer_and_its_answer() {
    let redis = RedisServer::start();
    let clock = Arc::new(Clock::new());
    // One node keeps its torrents in the socket worker, the other in swarm workers.
    let a = node(&redis, "a", 0, &clock);
    let b = node(&redis, "b", 2, &clock);
    let torrent = id(TORRENT);

    let mut seeder = connect(addr(&a));
    seeder.announce(torrent, id("seeder"), json!({"left": 0}));
    seeder.receive();
    assert!(
        eventually(|| scrape(&b) == (1, 0)),
        "node B counts node A's seeder"
    );

    let mut leecher = connect(addr(&b));
    let sent = Instant::now();
    leecher.announce(
        torrent,
        id("leecher"),
        json!({"offers": offers("leecher", 2), "numwant": 2}),
    );
    let ServerMessage::AnnounceResponse(reply) = leecher.receive() else {
        panic!("an announce reply");
    };
    assert_eq!((reply.complete, reply.incomplete), (1, 1));
    let ServerMessage::Offer(offer) = seeder.receive() else {
        panic!("the seeder on node A gets the leecher's offer");
    };
    let offer_delay = sent.elapsed();
    assert_eq!(offer.peer_id, id("leecher"));
    assert!(offer.offer.get().contains("v=0 leecher"));

    let answered = Instant::now();
    seeder.announce(
        torrent,
        id("seeder"),
        json!({
            "answer": {"type": "answer", "sdp": "v=0 seeder"},
            "to_peer_id": chars(id("leecher")),
            "offer_id": chars(offer.offer_id),
        }),
    );
    let ServerMessage::Answer(answer) = leecher.receive() else {
        panic!("the leecher on node B gets the seeder's answer");
    };
    let answer_delay = answered.elapsed();
    assert_eq!(
        (answer.peer_id, answer.offer_id),
        (id("seeder"), offer.offer_id)
    );
    let description: serde_json::Value = serde_json::from_str(answer.answer.get()).unwrap();
    assert_eq!(description, json!({"type": "answer", "sdp": "v=0 seeder"}));
    eprintln!("relayed offer after {offer_delay:?}, answer after {answer_delay:?}");

    // A second answer to the same offer is refused where the offer was delivered.
    seeder.announce(
        torrent,
        id("seeder"),
        json!({
            "answer": {"type": "answer", "sdp": "again"},
            "to_peer_id": chars(id("leecher")),
            "offer_id": chars(offer.offer_id),
        }),
    );
    assert!(error(seeder.receive()).starts_with("answer not relayed"));

    assert!(eventually(|| {
        let (a, b) = (a.stats().cluster.unwrap(), b.stats().cluster.unwrap());
        a.messages_relayed == 1
            && a.messages_received == 1
            && b.messages_relayed == 1
            && b.messages_received == 1
            && a.store_up == 1
            && b.store_up == 1
    }));
}

#[test]
fn a_peer_id_is_held_by_one_connection_across_nodes() {
    let redis = RedisServer::start();
    let clock = Arc::new(Clock::new());
    let a = node(&redis, "a", 1, &clock);
    let b = node(&redis, "b", 0, &clock);
    let torrent = id(TORRENT);

    let mut holder = connect(addr(&a));
    holder.announce(torrent, id("peer"), json!({}));
    holder.receive();
    assert!(eventually(|| scrape(&b) == (0, 1)));
    let mut other = connect(addr(&b));
    other.announce(torrent, id("peer"), json!({}));
    assert_eq!(
        error(other.receive()),
        "peer_id is in use by another connection"
    );

    // The holder's connection closes: its peer leaves both nodes, and the id is free.
    drop(holder);
    assert!(eventually(|| scrape(&b) == (0, 0)));
    other.announce(torrent, id("peer"), json!({}));
    let ServerMessage::AnnounceResponse(reply) = other.receive() else {
        panic!("the id is taken on node B now");
    };
    assert_eq!((reply.complete, reply.incomplete), (0, 1));
    assert!(eventually(|| scrape(&a) == (0, 1)));
}

#[test]
fn the_peers_of_a_lost_node_leave_the_others_within_the_peer_timeout() {
    let mut redis = RedisServer::start();
    let clock = Arc::new(Clock::new());
    let a = node(&redis, "a", 0, &clock);
    let b = node(&redis, "b", 0, &clock);
    let torrent = id(TORRENT);
    let _peer = joined(addr(&a), torrent, "peer");
    assert!(eventually(|| scrape(&b) == (0, 1)));

    // The store goes: node A is cut off as a crashed node would be (its connection
    // never says goodbye to node B), and node B serves its peer on…
    redis.stop();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(scrape(&b), (0, 1));
    // …until the peer has not been heard of for the peer timeout (an interval and
    // the grace: 300 s by default; an hour is past any setting's default).
    clock.advance(3600);
    let mut newcomer = connect(addr(&b));
    assert!(eventually(|| {
        newcomer.announce(torrent, id("newcomer"), json!({"offers": offers("n", 1)}));
        matches!(newcomer.receive(), ServerMessage::AnnounceResponse(reply) if reply.incomplete == 1)
    }));
    drop(a);
}

/// Private mode with accounting on two nodes of a cluster: the ledger's baselines are
/// the store's, so a client that moves from node A to node B, and one that announces
/// the same counters to both at once (two connections), are credited exactly what
/// they reported, once, whichever node writes the batch.
#[test]
fn a_private_cluster_credits_each_byte_once_whichever_node_hears_it() {
    const KEY: &str = "6f0d1b2c3d4e5f60718293a4b5c6d7e8";
    let redis = RedisServer::start();
    let clock = Arc::new(Clock::new());
    let dir = std::env::temp_dir().join(format!("shoal-ws-private-cluster-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let hex = |id: shoal_ws_protocol::Id20| -> String {
        id.0.iter().map(|b| format!("{b:02x}")).collect()
    };
    std::fs::write(dir.join("users"), format!("17 {KEY}\n")).unwrap();
    std::fs::write(
        dir.join("torrents"),
        format!("{} 1001\n{} 1002\n", hex(id("moving")), hex(id("both"))),
    )
    .unwrap();
    let private_node = |name: &str| {
        let mut config = loopback_config();
        config.cluster.store = redis.address();
        config.cluster.node = name.into();
        config.cluster.publish_interval_ms = 20;
        config.cluster.timeout_ms = 200;
        config.private.enabled = true;
        config.private.users_path = dir.join("users");
        config.private.torrents_path = dir.join("torrents");
        // Each node its own directory: batch ids name the process, and the two nodes
        // share this test's.
        let export = dir.join(format!("batches-{name}"));
        std::fs::create_dir_all(&export).unwrap();
        config.private.export_directory = export;
        config.private.export_interval = 1;
        shoal_ws::start_with_clock(config, clock.clone()).expect("node starts")
    };
    let a = private_node("a");
    let b = private_node("b");
    let open = |tracker: &RunningTracker| {
        let tcp = std::net::TcpStream::connect(addr(tracker)).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        Client::over(tcp, &format!("ws://{}/{KEY}", addr(tracker)))
    };
    let announce =
        |client: &mut Client<std::net::TcpStream>, torrent, uploaded: u64, event: &str| {
            let mut extra = json!({"uploaded": uploaded, "downloaded": 0, "left": 0});
            if !event.is_empty() {
                extra["event"] = json!(event);
            }
            client.announce(torrent, id("client"), extra);
            match client.receive() {
                ServerMessage::AnnounceResponse(_) => {}
                other => panic!("announce refused: {other:?}"),
            }
        };
    // The site: every batch of both nodes, each id once.
    let mut site_a = shoal_common::testing::Site::new(&dir.join("batches-a"));
    let mut site_b = shoal_common::testing::Site::new(&dir.join("batches-b"));
    let credited = |site_a: &mut shoal_common::testing::Site,
                    site_b: &mut shoal_common::testing::Site| {
        site_a.take();
        site_b.take();
        let sum =
            |torrent| site_a.credited(17, torrent).uploaded + site_b.credited(17, torrent).uploaded;
        (sum(1001), sum(1002))
    };
    // A client on node A, then (its connection closed, minutes later as real clients
    // move: here once node A's reports are in the store) on node B.
    let moving = id("moving");
    let mut on_a = open(&a);
    announce(&mut on_a, moving, 0, "started");
    announce(&mut on_a, moving, 1_000, "");
    drop(on_a);
    assert!(eventually(|| credited(&mut site_a, &mut site_b).0 == 1_000));
    // Node B takes over the peer id once node A has let it go.
    let mut on_b = open(&b);
    assert!(eventually(|| {
        on_b.announce(
            moving,
            id("client"),
            json!({"uploaded": 3_000, "downloaded": 0, "left": 0}),
        );
        matches!(on_b.receive(), ServerMessage::AnnounceResponse(_))
    }));
    announce(&mut on_b, moving, 4_500, "stopped");
    // The same counters to both nodes at once, as a client with two connections.
    let both = id("both");
    let (mut first, mut second) = (open(&a), open(&b));
    let other = |client: &mut Client<std::net::TcpStream>, uploaded: u64, event: &str| {
        let mut extra = json!({"uploaded": uploaded, "downloaded": 0, "left": 0});
        if !event.is_empty() {
            extra["event"] = json!(event);
        }
        client.announce(both, id(&format!("twice-{}", uploaded % 2)), extra);
        client.receive();
    };
    for (uploaded, event) in [(0, "started"), (700, ""), (2_000, "")] {
        other(&mut first, uploaded, event);
        other(&mut second, uploaded, event);
        // Real clients announce an interval apart: both nodes' rounds (200 ms) are
        // applied before the next.
        std::thread::sleep(Duration::from_millis(500));
    }
    drop((first, second));
    assert!(
        eventually(|| credited(&mut site_a, &mut site_b) == (4_500, 2_000)),
        "{:?}",
        credited(&mut site_a, &mut site_b)
    );
    // And nothing more comes later.
    std::thread::sleep(Duration::from_millis(2_500));
    assert_eq!(credited(&mut site_a, &mut site_b), (4_500, 2_000));
    drop((a, b));
    let _ = std::fs::remove_dir_all(&dir);
}
