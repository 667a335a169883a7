//! The tracker started in-process on free loopback ports, driven by a real UDP client.
//! Readiness: `start` returns once the sockets are bound, so datagrams sent after it
//! are queued by the kernel even before the workers poll. Time moves by advancing the
//! tracker's clock, never by sleeping.

mod support;

use shoal_common::testing::eventually;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use shoal_common::AccessListMode;
use shoal_swarm::Clock;
use shoal_udp::{RunningTracker, start_with_clock};
use shoal_udp_protocol::*;
use support::*;

const TORRENT: [u8; 20] = [0x11; 20];

fn start(config: shoal_udp::Config) -> RunningTracker {
    start_with_clock(config, Arc::new(Clock::new())).expect("tracker starts")
}

fn v4(tracker: &RunningTracker) -> SocketAddr {
    shoal_common::testing::ipv4(tracker.local_addrs())
}

#[test]
fn connect_announce_and_scrape() {
    let tracker = start(loopback_config(false));
    let mut alice = Client::new(v4(&tracker));
    let mut bob = Client::new(v4(&tracker));
    let alice_id = alice.connect();
    let bob_id = bob.connect();

    let first = alice.announce(alice_id, Announce::new(TORRENT, 6881));
    // 1,800 s, moved by up to 10% (jitter).
    assert!(
        (1620..=1980).contains(&first.interval),
        "{}",
        first.interval
    );
    assert_eq!((first.leechers, first.seeders), (1, 0));
    assert!(first.peers.is_empty(), "a lone peer is not sent itself");

    let second = bob.announce(bob_id, Announce::new(TORRENT, 6882).seeding());
    assert_eq!((second.leechers, second.seeders), (1, 1));
    assert_eq!(
        second.peers,
        vec!["127.0.0.1:6881".parse::<SocketAddr>().unwrap()]
    );

    let stats = alice.scrape_stats(alice_id, TORRENT);
    assert_eq!((stats.seeders, stats.leechers, stats.completed), (1, 1, 0));
    let unknown = alice.scrape_stats(alice_id, [0x99; 20]);
    assert_eq!(unknown, ScrapeStats::default());

    let snapshot = tracker.stats();
    assert_eq!(snapshot.requests.connect_requests, 2);
    assert_eq!(snapshot.requests.announce_replies, 2);
    tracker.stop().unwrap();
}

#[test]
fn stopped_removes_the_peer() {
    let tracker = start(loopback_config(false));
    let mut alice = Client::new(v4(&tracker));
    let mut bob = Client::new(v4(&tracker));
    let (a, b) = (alice.connect(), bob.connect());
    alice.announce(a, Announce::new(TORRENT, 7001));
    bob.announce(b, Announce::new(TORRENT, 7002));

    let stopped = alice.announce(
        a,
        Announce::new(TORRENT, 7001).event(AnnounceEvent::Stopped),
    );
    assert!(stopped.peers.is_empty());
    assert_eq!(stopped.leechers, 1);
    let reply = bob.announce(b, Announce::new(TORRENT, 7002).event(AnnounceEvent::None));
    assert!(reply.peers.is_empty(), "alice left: {:?}", reply.peers);
    assert_eq!(bob.scrape_stats(b, TORRENT).leechers, 1);
}

#[test]
fn a_client_announcing_port_0_gets_peers_and_is_never_handed_out() {
    let tracker = start(loopback_config(false));
    let mut alice = Client::new(v4(&tracker));
    let mut nobody = Client::new(v4(&tracker));
    let (a, n) = (alice.connect(), nobody.connect());
    alice.announce(a, Announce::new(TORRENT, 7001));

    let reply = nobody.announce(n, Announce::new(TORRENT, 0).seeding());
    assert_eq!(
        reply.peers,
        vec!["127.0.0.1:7001".parse::<SocketAddr>().unwrap()]
    );
    assert_eq!((reply.leechers, reply.seeders), (1, 0), "not counted");
    let reply = alice.announce(a, Announce::new(TORRENT, 7001));
    assert!(
        reply.peers.is_empty(),
        "sent a peer on port 0: {:?}",
        reply.peers
    );
    assert_eq!(alice.scrape_stats(a, TORRENT).seeders, 0);

    let elsewhere = nobody.announce(n, Announce::new([0x22; 20], 0));
    assert_eq!((elsewhere.leechers, elsewhere.seeders), (0, 0));
    let settled = || {
        let stats = tracker.stats();
        stats.peers == 1 && stats.torrents == 1
    };
    assert!(
        eventually(settled),
        "port 0 stored no peer, started no torrent"
    );
}

#[test]
fn completed_counts_downloads() {
    let tracker = start(loopback_config(false));
    let mut client = Client::new(v4(&tracker));
    let id = client.connect();
    client.announce(id, Announce::new(TORRENT, 7001));
    client.announce(
        id,
        Announce::new(TORRENT, 7001)
            .seeding()
            .event(AnnounceEvent::Completed),
    );
    // A peer first seen with completed was never seen leeching: no download.
    client.announce(
        id,
        Announce::new(TORRENT, 7002)
            .seeding()
            .event(AnnounceEvent::Completed),
    );
    let stats = client.scrape_stats(id, TORRENT);
    assert_eq!((stats.seeders, stats.leechers, stats.completed), (2, 0, 1));
}

#[test]
fn peers_expire_and_their_torrents_are_cleaned() {
    let mut config = loopback_config(false);
    config.protocol.announce_interval = 10;
    config.cleaning.peer_timeout = 20;
    config.cleaning.interval = 1;
    let tracker = start(config);
    let mut client = Client::new(v4(&tracker));
    let id = client.connect();
    client.announce(id, Announce::new(TORRENT, 7001));
    assert_eq!(client.scrape_stats(id, TORRENT).leechers, 1);
    assert!(eventually(|| tracker.stats().peers == 1));

    tracker.clock().advance(21);
    let id = client.connect();
    assert!(
        eventually(|| client.scrape_stats(id, TORRENT).leechers == 0),
        "the expired peer is cleaned within a cleaning interval"
    );
    assert!(eventually(
        || tracker.stats().torrents == 0 && tracker.stats().peers == 0
    ));
}

/// Sends `forged`, then a genuine announce, and checks the only reply is to the
/// genuine one: the socket worker handles datagrams in order, so a reply to the
/// forged request would have come first.
fn assert_ignored(client: &mut Client, forged: &[u8], genuine_id: ConnectionId) {
    client.send(forged);
    let transaction_id = client.send_announce(genuine_id, Announce::new([0x22; 20], 9000));
    let reply = client.recv();
    assert_eq!(
        reply.transaction_id(),
        transaction_id,
        "unexpected reply {reply:?}"
    );
}

fn announce_packet(id: ConnectionId) -> Vec<u8> {
    let mut packet = Vec::new();
    Request::Announce(Announce::new(TORRENT, 7001).request(id, TransactionId(4242)))
        .write(&mut packet);
    packet
}

#[test]
fn forged_connection_ids_get_no_reply() {
    let tracker = start(loopback_config(false));
    let mut client = Client::new(v4(&tracker));
    let genuine = client.connect();
    assert_ignored(
        &mut client,
        &announce_packet(ConnectionId(0xdead_beef)),
        genuine,
    );
    assert_ignored(
        &mut client,
        &announce_packet(ConnectionId(genuine.0 ^ 1)),
        genuine,
    );
    // Another client's id is not valid from this address... it is the same IP here,
    // so use a forged time instead.
    assert_ignored(
        &mut client,
        &announce_packet(ConnectionId(genuine.0 + (1 << 32))),
        genuine,
    );
    assert_eq!(tracker.stats().requests.bad_connection_ids, 3);
}

#[test]
fn expired_connection_ids_get_no_reply() {
    let tracker = start(loopback_config(false));
    let mut client = Client::new(v4(&tracker));
    let old = client.connect();
    tracker.clock().advance(121);
    let fresh = client.connect();
    assert_ignored(&mut client, &announce_packet(old), fresh);
    assert_eq!(tracker.stats().requests.bad_connection_ids, 1);
}

#[test]
fn garbage_and_truncated_packets() {
    let tracker = start(loopback_config(false));
    let mut client = Client::new(v4(&tracker));
    let id = client.connect();

    // Unauthenticated garbage of every kind: silence.
    for garbage in [&b""[..], b"x", &[0u8; 15], &[0xffu8; 16], &[0u8; 1400]] {
        assert_ignored(&mut client, garbage, id);
    }
    let mut wrong_magic = Vec::new();
    Request::Connect(ConnectRequest {
        transaction_id: TransactionId(1),
    })
    .write(&mut wrong_magic);
    wrong_magic[0] ^= 0xff;
    assert_ignored(&mut client, &wrong_magic, id);

    // Malformed requests from a connected client: an error reply saying what is wrong.
    let mut truncated = announce_packet(id);
    truncated.truncate(50);
    client.send(&truncated);
    match client.recv() {
        Response::Error(error) => {
            assert_eq!(error.transaction_id, TransactionId(4242));
            assert_eq!(error.message, "announce request too short");
        }
        other => panic!("expected an error, got {other:?}"),
    }
    let mut unknown_action = announce_packet(id);
    unknown_action[8..12].copy_from_slice(&9u32.to_be_bytes());
    client.send(&unknown_action);
    assert!(matches!(client.recv(), Response::Error(e) if e.message == "unknown action"));
    let mut partial_scrape = Vec::new();
    partial_scrape.extend_from_slice(&id.0.to_be_bytes());
    partial_scrape.extend_from_slice(&2u32.to_be_bytes());
    partial_scrape.extend_from_slice(&5u32.to_be_bytes());
    partial_scrape.extend_from_slice(&[1; 25]);
    client.send(&partial_scrape);
    assert!(matches!(client.recv(), Response::Error(e) if e.message.contains("partial info hash")));

    // The tracker is still fine.
    assert_eq!(client.announce(id, Announce::new(TORRENT, 1)).leechers, 1);
    assert!(tracker.stats().requests.invalid_requests >= 9);
}

#[test]
fn long_announces_with_bep_41_options_are_accepted() {
    let tracker = start(loopback_config(false));
    let mut client = Client::new(v4(&tracker));
    let id = client.connect();
    let mut packet = announce_packet(id);
    AnnounceOptions::write_url_data(b"/announce?passkey=0123456789abcdef", &mut packet);
    packet.extend_from_slice(&[0x09, 0x05, 1, 2]); // after end-of-options: ignored
    client.send(&packet);
    assert!(
        matches!(client.recv(), Response::Announce(reply) if reply.transaction_id == TransactionId(4242))
    );
}

#[test]
fn scrapes_over_several_swarm_workers() {
    let mut config = loopback_config(false);
    config.swarm_workers = 4;
    config.socket_workers = 2;
    let tracker = start(config);
    let mut client = Client::new(v4(&tracker));
    let id = client.connect();
    let hashes: Vec<[u8; 20]> = (0..74u8)
        .map(|i| [i.wrapping_mul(53).wrapping_add(1); 20])
        .collect();
    for (i, hash) in hashes.iter().enumerate().filter(|(i, _)| i % 3 == 0) {
        client.announce(id, Announce::new(*hash, 1000 + i as u16));
    }
    let Response::Scrape(reply) = client.scrape(id, &hashes) else {
        panic!()
    };
    for (i, stats) in reply.torrents.iter().enumerate() {
        assert_eq!(stats.leechers, u32::from(i % 3 == 0), "torrent {i}");
    }
    let too_many = vec![[1u8; 20]; 75];
    assert!(matches!(client.scrape(id, &too_many), Response::Error(_)));
}

fn write_list(dir: &std::path::Path, hashes: &[[u8; 20]]) -> std::path::PathBuf {
    let path = dir.join("access-list");
    let text: String = hashes
        .iter()
        .map(|hash| hash.iter().map(|b| format!("{b:02x}")).collect::<String>() + "\n")
        .collect();
    std::fs::write(&path, format!("# test list\n{text}")).unwrap();
    path
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("shoal-udp-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn allow_list_with_reload() {
    let dir = temp_dir("allow");
    let allowed = [0x0a; 20];
    let other = [0x0b; 20];
    let mut config = loopback_config(false);
    config.access_list.mode = AccessListMode::Allow;
    config.access_list.path = write_list(&dir, &[allowed]);
    let tracker = start(config);
    let mut client = Client::new(v4(&tracker));
    let id = client.connect();

    assert_eq!(client.announce(id, Announce::new(allowed, 1)).leechers, 1);
    client.send_announce(id, Announce::new(other, 1));
    assert!(matches!(client.recv(), Response::Error(e) if e.message == "info hash not allowed"));
    assert!(
        matches!(client.scrape(id, &[other]), Response::Error(e) if e.message == "info hash not allowed")
    );

    // Swap the list: now only `other` is allowed.
    write_list(&dir, &[other]);
    assert_eq!(tracker.access_control().reload().unwrap(), 1);
    assert_eq!(client.announce(id, Announce::new(other, 1)).leechers, 1);
    client.send_announce(id, Announce::new(allowed, 1));
    assert!(matches!(client.recv(), Response::Error(e) if e.message == "info hash not allowed"));

    // A broken file keeps the current list.
    std::fs::write(dir.join("access-list"), "not a hash\n").unwrap();
    assert!(tracker.access_control().reload().is_err());
    assert_eq!(client.announce(id, Announce::new(other, 2)).leechers, 2);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn deny_list() {
    let dir = temp_dir("deny");
    let denied = [0x0c; 20];
    let mut config = loopback_config(false);
    config.access_list.mode = AccessListMode::Deny;
    config.access_list.path = write_list(&dir, &[denied]);
    let tracker = start(config);
    let mut client = Client::new(v4(&tracker));
    let id = client.connect();
    client.send_announce(id, Announce::new(denied, 1));
    assert!(matches!(client.recv(), Response::Error(e) if e.message == "info hash not allowed"));
    assert_eq!(
        client.announce(id, Announce::new([0x0d; 20], 1)).leechers,
        1
    );
    assert_eq!(tracker.stats().requests.access_denied, 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn ipv6_on_loopback() {
    if !shoal_common::testing::ipv6_loopback() {
        shoal_common::testing::skip("ipv6", "::1 cannot be bound");
        return;
    }
    let tracker = start(loopback_config(true));
    let v6 = shoal_common::testing::ipv6(tracker.local_addrs());
    let mut alice = Client::new(v6);
    let mut bob = Client::new(v6);
    let mut carol = Client::new(v4(&tracker));
    let (a, b, c) = (alice.connect(), bob.connect(), carol.connect());
    alice.announce(a, Announce::new(TORRENT, 6881));
    carol.announce(c, Announce::new(TORRENT, 6883));
    let reply = bob.announce(b, Announce::new(TORRENT, 6882));
    assert_eq!(
        reply.peers,
        vec!["[::1]:6881".parse::<SocketAddr>().unwrap()],
        "IPv6 peers only"
    );
    assert_eq!(reply.leechers, 3, "counts cover both families");
    let reply = carol.announce(c, Announce::new(TORRENT, 6883));
    assert!(
        reply.peers.is_empty(),
        "an IPv4 client is not sent IPv6 peers"
    );
    assert_eq!(bob.scrape_stats(b, TORRENT).leechers, 3);
}

/// A UDP port free on both 127.0.0.1 and ::1 right now.
fn free_port_on_both_loopbacks() -> u16 {
    loop {
        let v4 = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = v4.local_addr().unwrap().port();
        if std::net::UdpSocket::bind(("::1", port)).is_ok() {
            return port;
        }
    }
}

#[test]
fn a_fixed_port_with_two_workers_reports_and_serves_both_families() {
    if !shoal_common::testing::ipv6_loopback() {
        shoal_common::testing::skip("ipv6", "::1 cannot be bound");
        return;
    }
    let port = free_port_on_both_loopbacks();
    let mut config = loopback_config(true);
    config.socket_workers = 2;
    config.network.address_ipv4 = SocketAddr::from(([127, 0, 0, 1], port));
    config.network.address_ipv6 = SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, port));
    let tracker = start(config.clone());
    assert_eq!(
        tracker.local_addrs(),
        [config.network.address_ipv4, config.network.address_ipv6],
        "one address per family, as configured"
    );
    for server in tracker.local_addrs() {
        // Clients from several source ports land on both workers' sockets.
        for source in 0..4 {
            let mut client = Client::new(*server);
            let id = client.connect();
            let reply = client.announce(id, Announce::new(TORRENT, 7000 + source));
            assert!(
                (1620..=1980).contains(&reply.interval),
                "{}",
                reply.interval
            );
        }
    }
    tracker.stop().unwrap();
}

#[test]
fn no_request_is_lost_silently_under_load() {
    // A tiny swarm queue and a burst far larger than it: every announce that reached
    // the tracker is either answered or counted as shed, and the tracker stays up.
    let mut config = loopback_config(false);
    config.limits.swarm_queue_len = 1;
    // One address, far over a client's rate: the queue is what this is about.
    config.per_ip.requests_per_second = 0;
    let tracker = start(config);
    let mut client = Client::new(v4(&tracker));
    let id = client.connect();
    let burst = 5000;
    let mut packet = Vec::new();
    for i in 0..burst {
        packet.clear();
        let announce = Announce::new([(i % 200) as u8; 20], 1000 + (i % 5000) as u16);
        Request::Announce(announce.request(id, TransactionId(i))).write(&mut packet);
        client.send(&packet);
    }
    let settled = eventually(|| {
        let requests = tracker.stats().requests;
        requests.announce_requests > 0
            && requests.announce_requests
                == requests.announce_replies + requests.shed + requests.send_failures
    });
    let requests = tracker.stats().requests;
    assert!(settled, "announces unaccounted for: {requests:?}");
    eprintln!(
        "burst of {burst}: {} received, {} answered, {} shed",
        requests.announce_requests, requests.announce_replies, requests.shed
    );
    // Drain what was answered, then check the tracker still answers.
    while client.recv_within(Duration::from_millis(50)).is_some() {}
    assert_eq!(
        client.announce(id, Announce::new([0xee; 20], 1)).leechers,
        1
    );
}

#[test]
fn shutdown_is_quick() {
    let tracker = start(loopback_config(false));
    let started = std::time::Instant::now();
    tracker.stop().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "took {:?}",
        started.elapsed()
    );
}

#[test]
fn private_mode_needs_a_registered_key_and_torrent_and_reloads() {
    const KEY: &str = "6f0d1b2c3d4e5f60718293a4b5c6d7e8";
    const LATER: &str = "a1b2c3d4e5f60718293a4b5c6d7e8f90";
    let dir = temp_dir("private");
    let hex: String = TORRENT.iter().map(|b| format!("{b:02x}")).collect();
    std::fs::write(dir.join("users"), format!("17 {KEY}\n")).unwrap();
    std::fs::write(dir.join("torrents"), format!("{hex} 1001\n")).unwrap();
    let mut config = loopback_config(false);
    config.private.enabled = true;
    config.private.users_path = dir.join("users");
    config.private.torrents_path = dir.join("torrents");
    let tracker = start(config);
    let mut client = Client::new(v4(&tracker));
    let id = client.connect();
    let keyed = |key: &str| Announce::new(TORRENT, 6881).url(&format!("/{key}/announce"));
    assert_eq!(client.announce(id, keyed(KEY)).leechers, 1);
    let refused = |client: &mut Client, announce: Announce| {
        client.send_announce(id, announce);
        match client.recv() {
            Response::Error(error) => error.message.to_string(),
            other => panic!("not refused: {other:?}"),
        }
    };
    assert!(refused(&mut client, Announce::new(TORRENT, 6882)).starts_with("passkey missing"));
    assert!(refused(&mut client, keyed(LATER)).starts_with("passkey not recognised"));
    assert!(
        matches!(client.scrape(id, &[TORRENT]), Response::Error(e) if e.message.contains("scrape over HTTP"))
    );
    // The site adds a user: SIGUSR1's reload takes it.
    std::fs::write(dir.join("users"), format!("17 {KEY}\n18 {LATER}\n")).unwrap();
    let said: Vec<Option<String>> = tracker.reload_hooks().iter().map(|hook| hook()).collect();
    assert!(
        said.contains(&Some("udp registry: 2 users, 1 torrents".into())),
        "{said:?}"
    );
    assert_eq!(client.announce(id, keyed(LATER).seeding()).seeders, 1);
    assert_eq!(tracker.stats().requests.private_refused, 3);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn private_mode_writes_accounting_batches_of_deltas() {
    const KEY: &str = "6f0d1b2c3d4e5f60718293a4b5c6d7e8";
    let dir = temp_dir("accounting");
    let export = dir.join("export");
    std::fs::create_dir_all(&export).unwrap();
    let hex: String = TORRENT.iter().map(|b| format!("{b:02x}")).collect();
    std::fs::write(dir.join("users"), format!("17 {KEY}\n")).unwrap();
    std::fs::write(dir.join("torrents"), format!("{hex} 1001 up=200\n")).unwrap();
    let mut config = loopback_config(false);
    config.private.enabled = true;
    config.private.users_path = dir.join("users");
    config.private.torrents_path = dir.join("torrents");
    config.private.export_directory = export.clone();
    config.private.export_interval = 1;
    let tracker = start(config);
    let mut client = Client::new(v4(&tracker));
    let id = client.connect();
    let announce = |uploaded| {
        let mut announce = Announce::new(TORRENT, 6881).url(&format!("/{KEY}/announce"));
        announce.uploaded = uploaded;
        announce
    };
    client.announce(id, announce(0));
    client.announce(id, announce(4096));
    // The same totals again (a dual-stack client's second family): nothing more.
    client.announce(id, announce(4096));
    let batch = (0..50)
        .find_map(|_| {
            std::thread::sleep(std::time::Duration::from_millis(100));
            let file = std::fs::read_dir(&export)
                .ok()?
                .flatten()
                .find(|entry| entry.path().extension().is_some_and(|ext| ext == "json"))?;
            std::fs::read_to_string(file.path()).ok()
        })
        .expect("a batch file within 5 s");
    assert!(
        batch.contains("\"user\":17,\"torrent\":1001,\"uploaded\":4096,\"downloaded\":0,\"credited_uploaded\":8192"),
        "{batch}"
    );
    drop(tracker);
    std::fs::remove_dir_all(&dir).unwrap();
}
