//! Shared swarms across UDP tracker nodes (`[cluster]`), through a real redis-server on
//! loopback: what one node learns, the others serve; a node or the store going away
//! loses nothing that is still alive.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use shoal_common::testing::{RedisServer, eventually};
use shoal_swarm::Clock;
use shoal_udp::{RunningTracker, start_with_clock};
use shoal_udp_protocol::*;
use support::*;

const TORRENT: [u8; 20] = [0x5a; 20];

/// The delay the cluster promises between an announce on one node and its peer on
/// another: the publish interval (here 20 ms), the read and the apply, with margin
/// for a loaded test machine. documents/scale-out.md states it.
const STATED_DELAY: Duration = Duration::from_secs(1);

fn node(redis: &RedisServer, name: &str, swarm_workers: usize) -> (RunningTracker, Arc<Clock>) {
    let mut config = loopback_config(false);
    config.cluster.store = redis.address();
    config.cluster.node = name.into();
    config.cluster.publish_interval_ms = 20;
    config.cluster.timeout_ms = 200;
    config.swarm_workers = swarm_workers;
    let clock = Arc::new(Clock::new());
    let tracker = start_with_clock(config, clock.clone()).expect("node starts");
    (tracker, clock)
}

fn addr(tracker: &RunningTracker) -> SocketAddr {
    shoal_common::testing::ipv4(tracker.local_addrs())
}

/// Announces `announce` to `tracker` from a fresh client until `wanted` is among the
/// peers it is sent; returns how long that took (None: not within `within`).
fn announce_until_sent(
    tracker: &RunningTracker,
    announce: Announce,
    wanted: SocketAddr,
    within: Duration,
) -> Option<Duration> {
    let started = Instant::now();
    let mut client = Client::new(addr(tracker));
    let id = client.connect();
    while started.elapsed() < within {
        if client
            .announce(id, announce.clone())
            .peers
            .contains(&wanted)
        {
            return Some(started.elapsed());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}

fn scrape(tracker: &RunningTracker) -> ScrapeStats {
    let mut client = Client::new(addr(tracker));
    let id = client.connect();
    client.scrape_stats(id, TORRENT)
}

fn peer(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

#[test]
fn a_peer_announced_to_one_node_is_sent_by_the_other_within_the_stated_delay() {
    let redis = RedisServer::start();
    // One node keeps its torrents in its socket worker, the other in 3 swarm workers:
    // the changes go to whichever shard owns the torrent.
    let (a, _) = node(&redis, "a", 0);
    let (b, _) = node(&redis, "b", 3);
    let mut seeder = Client::new(addr(&a));
    let id = seeder.connect();
    seeder.announce(id, Announce::new(TORRENT, 6881).seeding());
    let took = announce_until_sent(&b, Announce::new(TORRENT, 6882), peer(6881), STATED_DELAY);
    assert!(
        took.is_some(),
        "node b did not send node a's peer within {STATED_DELAY:?}"
    );
    // And back: a sends b's leecher.
    let back = announce_until_sent(&a, Announce::new(TORRENT, 6883), peer(6882), STATED_DELAY);
    assert!(back.is_some(), "node a did not send node b's peer");
    let (a_stats, b_stats) = (a.stats().cluster.unwrap(), b.stats().cluster.unwrap());
    assert!(a_stats.changes_published >= 1 && b_stats.peers_applied >= 1);
    assert_eq!(a_stats.store_up, 1);
    a.stop().unwrap();
    b.stop().unwrap();
}

#[test]
fn downloads_and_scrapes_agree_across_nodes_and_a_stop_leaves_everywhere() {
    let redis = RedisServer::start();
    let (a, _) = node(&redis, "a", 0);
    let (b, _) = node(&redis, "b", 0);
    let mut on_a = Client::new(addr(&a));
    let a_id = on_a.connect();
    on_a.announce(a_id, Announce::new(TORRENT, 7001));
    on_a.announce(
        a_id,
        Announce::new(TORRENT, 7001)
            .seeding()
            .event(AnnounceEvent::Completed),
    );
    let mut on_b = Client::new(addr(&b));
    let b_id = on_b.connect();
    on_b.announce(b_id, Announce::new(TORRENT, 7002));
    on_b.announce(
        b_id,
        Announce::new(TORRENT, 7002)
            .seeding()
            .event(AnnounceEvent::Completed),
    );
    on_b.announce(b_id, Announce::new(TORRENT, 7003));
    let both = |seeders: u32, leechers: u32, completed: u32| {
        let wanted = ScrapeStats {
            seeders,
            completed,
            leechers,
        };
        eventually(|| scrape(&a) == wanted && scrape(&b) == wanted)
    };
    assert!(both(2, 1, 2), "a: {:?}, b: {:?}", scrape(&a), scrape(&b));
    // A stop on one node removes the peer on both.
    on_b.announce(
        b_id,
        Announce::new(TORRENT, 7003).event(AnnounceEvent::Stopped),
    );
    assert!(both(2, 0, 2), "a: {:?}, b: {:?}", scrape(&a), scrape(&b));
    a.stop().unwrap();
    b.stop().unwrap();
}

#[test]
fn a_stopped_node_leaves_its_peers_served_by_the_other_until_they_expire() {
    let redis = RedisServer::start();
    let (a, _) = node(&redis, "a", 0);
    let (b, b_clock) = node(&redis, "b", 0);
    let mut on_a = Client::new(addr(&a));
    let id = on_a.connect();
    on_a.announce(id, Announce::new(TORRENT, 7101).seeding());
    assert!(
        announce_until_sent(&b, Announce::new(TORRENT, 7102), peer(7101), STATED_DELAY).is_some()
    );
    a.stop().unwrap();
    // Node a is gone; node b keeps sending its peer…
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        announce_until_sent(&b, Announce::new(TORRENT, 7103), peer(7101), STATED_DELAY).is_some()
    );
    // …until it expires (the default peer timeout), when cleaning drops it.
    b_clock.advance(shoal_common::CleaningConfig::default().peer_timeout + 1);
    let gone = eventually(|| scrape(&b).seeders == 0);
    assert!(
        gone,
        "node a's seeder outlived its timeout: {:?}",
        scrape(&b)
    );
    b.stop().unwrap();
}

#[test]
fn both_nodes_answer_while_the_store_is_down_and_catch_up_when_it_is_back() {
    let mut redis = RedisServer::start();
    let (a, _) = node(&redis, "a", 0);
    let (b, _) = node(&redis, "b", 0);
    let mut on_a = Client::new(addr(&a));
    let a_id = on_a.connect();
    on_a.announce(a_id, Announce::new(TORRENT, 7201).seeding());
    assert!(
        announce_until_sent(&b, Announce::new(TORRENT, 7202), peer(7201), STATED_DELAY).is_some()
    );

    redis.stop();
    // Both serve what they know, and what is announced meanwhile waits in a's backlog.
    on_a.announce(a_id, Announce::new(TORRENT, 7203));
    assert!(
        eventually(|| {
            let cluster = a.stats().cluster.unwrap();
            cluster.store_up == 0 && cluster.backlog_bytes > 0
        }),
        "node a did not notice the outage: {:?}",
        a.stats().cluster
    );
    let during = announce_until_sent(&b, Announce::new(TORRENT, 7204), peer(7201), STATED_DELAY);
    assert!(
        during.is_some(),
        "node b forgot a's seeder while the store was down"
    );
    let reply = on_a.announce(a_id, Announce::new(TORRENT, 7203));
    assert!(reply.peers.contains(&peer(7201)));

    redis.restart();
    // The changes made during the outage reach b once the store is back (the nodes
    // retry every second).
    let caught_up = announce_until_sent(
        &b,
        Announce::new(TORRENT, 7205),
        peer(7203),
        Duration::from_secs(5),
    );
    assert!(
        caught_up.is_some(),
        "node b never learnt a's peer from the outage"
    );
    assert!(eventually(|| {
        let cluster = a.stats().cluster.unwrap();
        cluster.store_up == 1 && cluster.backlog_bytes == 0
    }));
    assert!(a.stats().cluster.unwrap().store_errors >= 1);
    a.stop().unwrap();
    b.stop().unwrap();
}

#[test]
fn a_node_started_later_learns_the_live_swarms_from_the_stream() {
    let redis = RedisServer::start();
    let (a, _) = node(&redis, "a", 0);
    let mut on_a = Client::new(addr(&a));
    let id = on_a.connect();
    on_a.announce(id, Announce::new(TORRENT, 7301).seeding());
    assert!(eventually(
        || a.stats().cluster.unwrap().changes_published >= 1
    ));
    let (c, _) = node(&redis, "c", 2);
    // Before any traffic of its own, it shows the store as up.
    assert!(eventually(|| c.stats().cluster.unwrap().store_up == 1));
    let took = announce_until_sent(&c, Announce::new(TORRENT, 7302), peer(7301), STATED_DELAY);
    assert!(took.is_some(), "a new node did not learn the swarm");
    a.stop().unwrap();
    c.stop().unwrap();
}

/// Sends one inline command to the store and returns its first reply line.
fn redis_command(redis: &RedisServer, command: &str) -> String {
    use std::io::{BufRead as _, BufReader, Write as _};
    let mut stream = std::net::TcpStream::connect(redis.address()).unwrap();
    stream
        .write_all(format!("{command}\r\n").as_bytes())
        .unwrap();
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).unwrap();
    line
}

#[test]
fn bad_entries_in_the_stream_are_skipped_and_counted_and_replication_goes_on() {
    let redis = RedisServer::start();
    let (a, _) = node(&redis, "a", 0);
    let (b, _) = node(&redis, "b", 0);
    // Whoever writes to the store can write anything: an entry whose time is not a
    // number, and one whose records are not records.
    for fields in ["o x n evil t soon c x", "o x n evil t 1 c garbage"] {
        let reply = redis_command(&redis, &format!("XADD shoal:udp:changes * {fields}"));
        assert!(!reply.starts_with('-'), "{reply}");
    }
    let mut on_a = Client::new(addr(&a));
    let id = on_a.connect();
    on_a.announce(id, Announce::new(TORRENT, 7401).seeding());
    let took = announce_until_sent(&b, Announce::new(TORRENT, 7402), peer(7401), STATED_DELAY);
    assert!(took.is_some(), "replication stopped at the bad entries");
    assert!(eventually(
        || b.stats().cluster.unwrap().entries_refused == 2
    ));
    a.stop().unwrap();
    b.stop().unwrap();
}
