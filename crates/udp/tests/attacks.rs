//! Attacks on a running UDP tracker, each with the defence it must meet: floods of
//! fresh info hashes and peers against the capacity limits, one proven address over
//! its request rate, connects and guessed connection ids forged from a victim's
//! address, a flood that overflows the receive queue, and a tracker prepared but not
//! yet serving.
//! Small scale, a second or two each; time moves by advancing the tracker's clock.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use shoal_common::testing::eventually;
use shoal_swarm::Clock;
use shoal_udp::{RunningTracker, start_with_clock};
use shoal_udp_protocol::*;
use support::*;

fn start(config: shoal_udp::Config) -> RunningTracker {
    start_with_clock(config, Arc::new(Clock::new())).expect("tracker starts")
}

/// A config without per-client limits, for the tests of other limits.
fn unlimited() -> shoal_udp::Config {
    let mut config = loopback_config(false);
    config.per_ip.requests_per_second = 0;
    config
}

fn hash(n: u32) -> [u8; 20] {
    let mut hash = [0u8; 20];
    hash[..4].copy_from_slice(&n.to_be_bytes());
    hash
}

#[test]
fn a_full_tracker_refuses_only_when_every_torrent_is_a_real_swarm() {
    let mut config = unlimited();
    config.capacity.max_torrents = 50;
    config.capacity.new_torrents_per_second = 0;
    let tracker = start(config);
    let server = shoal_common::testing::ipv4(tracker.local_addrs());
    let mut client = Client::new(server);
    let id = client.connect();
    let mut other = Client::from("127.0.0.2:0", server);
    let other_id = other.connect();
    // Fifty swarms of two peers of two clients: none gives way.
    for n in 0..50 {
        client.announce(id, Announce::new(hash(n), 1));
        other.announce(other_id, Announce::new(hash(n), 2));
    }
    // A new torrent is refused with the longest interval (6 x 1,800 s, jittered by
    // up to 10%) and no peers: an error reply has no interval, and libtorrent would
    // retry it within 17.5 s.
    for n in 50..60 {
        client.send_announce(id, Announce::new(hash(n), 1));
        match client.recv() {
            Response::Announce(reply) => {
                assert!(
                    (9720..=11880).contains(&reply.interval),
                    "{}",
                    reply.interval
                );
                assert!(reply.peers.is_empty());
                assert_eq!((reply.leechers, reply.seeders), (0, 0));
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
    // Known torrents keep working.
    assert_eq!(client.announce(id, Announce::new(hash(7), 3)).leechers, 3);
    assert!(eventually(|| {
        let stats = tracker.stats();
        stats.torrents == 50 && stats.torrents_refused == 10 && stats.torrents_evicted == 0
    }));
}

/// The attack of issue 41: fresh info hashes from many addresses filled the tracker
/// (4.65M torrents in 45 s from 2,000 addresses), after which every new honest torrent
/// was refused. Now each address may start only so many once the tracker is half
/// full, and a full tracker makes room with what the flood left behind (torrents with
/// one peer that never had a second, oldest first): a new torrent announced by two
/// honest peers is stored and served, and the count never passes the limit.
/// Four threads, each flooding `server` from `per_thread` addresses in turn (address
/// `n` bound at `local(n)`, counted over all threads): `flood` sends what address `n`
/// sends on its connection and returns how many announces; what comes back is read
/// and dropped. The announces sent in all.
fn flood_from_addresses(
    server: SocketAddr,
    per_thread: u32,
    local: fn(u32) -> String,
    flood: fn(&mut Client, ConnectionId, u32) -> u32,
) -> u32 {
    let flooders: Vec<_> = (0..4u32)
        .map(|thread| {
            std::thread::spawn(move || {
                let mut sent = 0;
                for address in 0..per_thread {
                    let n = thread * per_thread + address;
                    let mut flooder = Client::from(&local(n), server);
                    // The flood of the other threads may drop a connect.
                    let id = flooder.connect_retrying(3);
                    sent += flood(&mut flooder, id, n);
                    while flooder.recv_within(Duration::from_millis(20)).is_some() {}
                }
                sent
            })
        })
        .collect();
    flooders.into_iter().map(|f| f.join().unwrap()).sum()
}

#[test]
fn a_fresh_hash_flood_from_many_addresses_cannot_keep_an_honest_torrent_out() {
    let mut config = unlimited();
    config.capacity.max_torrents = 2_000;
    config.capacity.new_torrents_burst = 20;
    let tracker = start(config);
    let server = shoal_common::testing::ipv4(tracker.local_addrs());
    let sent = flood_from_addresses(
        server,
        50,
        |n| format!("127.0.{}.{}:0", 12 + n / 250, n % 250 + 1),
        |flooder, id, n| {
            for fresh in 0..100u32 {
                let mut info_hash = hash(n * 1000 + fresh);
                info_hash[19] = 0xf1;
                flooder.send_announce(id, Announce::new(info_hash, 1));
            }
            100
        },
    );
    assert_eq!(sent, 20_000);
    // The addresses are of two /24s: past half full, their networks' allowances (800
    // each at once) stop them before the per-address ones would.
    assert!(eventually(|| tracker.stats().new_torrents_refused > 0));
    let stats = tracker.stats();
    assert!(stats.torrents <= 2_000, "{} torrents", stats.torrents);
    // Two honest peers start a torrent: stored, and they find each other.
    let honest = hash(999_999);
    let mut first = Client::from("127.0.20.1:0", server);
    let id = first.connect();
    assert_eq!(first.announce(id, Announce::new(honest, 7001)).leechers, 1);
    let mut second = Client::from("127.0.20.2:0", server);
    let id = second.connect();
    let reply = second.announce(id, Announce::new(honest, 7002));
    assert_eq!(reply.leechers, 2);
    assert_eq!(reply.peers.len(), 1, "the first honest peer");
}

/// The attack of issue 52: fresh info hashes each announced from two ports of one
/// address, so that each looks like a real two-peer swarm, from addresses in many
/// /24s, with `max_torrents = 4000` and every other limit at its default. It filled
/// the tracker in a second, after which every new honest torrent was refused with the
/// longest interval. Now a swarm whose peers all come from one client gives way like
/// a lone peer's, and a network's new torrents are counted too: two honest peers
/// starting a torrent are stored and served, at the usual interval.
#[test]
fn swarms_of_one_client_from_many_networks_cannot_fill_the_tracker() {
    let mut config = loopback_config(false);
    config.capacity.max_torrents = 4_000;
    let tracker = start(config);
    let server = shoal_common::testing::ipv4(tracker.local_addrs());
    let sent = flood_from_addresses(
        server,
        16,
        // One address in each of 64 /24s.
        |n| format!("127.{}.{}.1:0", 40 + n / 32, n % 32),
        |flooder, id, n| {
            for fresh in 0..450u32 {
                let mut info_hash = hash(n * 1000 + fresh);
                info_hash[19] = 0xf2;
                for port in [6881, 6882] {
                    flooder.send_announce(id, Announce::new(info_hash, port));
                }
                if fresh % 50 == 49 {
                    while flooder.recv_within(Duration::from_millis(5)).is_some() {}
                }
            }
            900
        },
    );
    assert_eq!(sent, 64 * 900);
    assert!(eventually(|| tracker.stats().torrents >= 3_000));
    let stats = tracker.stats();
    assert!(stats.torrents <= 4_000, "{} torrents", stats.torrents);
    // Two honest peers start a torrent: stored, told the interval every client is
    // (the flood's load may have raised it), not a refusal's longest (6 x 1,800 s,
    // less 10% at most), and they find each other.
    let honest = hash(888_888);
    let mut first = Client::from("127.0.21.1:0", server);
    let first_id = first.connect();
    let reply = first.announce(first_id, Announce::new(honest, 7001));
    assert_eq!(reply.leechers, 1, "stored");
    assert!(reply.interval < 9_720, "interval {}", reply.interval);
    let mut second = Client::from("127.0.22.1:0", server);
    let id = second.connect();
    let reply = second.announce(id, Announce::new(honest, 7002));
    assert_eq!(reply.leechers, 2);
    assert_eq!(reply.peers.len(), 1, "the first honest peer");
    // And it stays while the flood goes on.
    let mut flooder = Client::from("127.0.60.1:0", server);
    let id = flooder.connect();
    for fresh in 0..900u32 {
        let mut info_hash = hash(5_000_000 + fresh);
        info_hash[19] = 0xf3;
        flooder.send_announce(id, Announce::new(info_hash, 6881));
        flooder.send_announce(id, Announce::new(info_hash, 6882));
        if fresh % 50 == 49 {
            while flooder.recv_within(Duration::from_millis(5)).is_some() {}
        }
    }
    while flooder.recv_within(Duration::from_millis(20)).is_some() {}
    let reply = first.announce(first_id, Announce::new(honest, 7001));
    assert_eq!(reply.leechers, 2);
    let stats = tracker.stats();
    assert!(stats.torrents_evicted > 0, "{stats:?}");
}

#[test]
fn a_full_swarm_answers_newcomers_without_keeping_them() {
    let mut config = unlimited();
    config.capacity.max_peers_per_torrent = 3;
    let tracker = start(config);
    let mut client = Client::new(shoal_common::testing::ipv4(tracker.local_addrs()));
    let id = client.connect();
    for port in 1..=3 {
        client.announce(id, Announce::new(hash(1), port));
    }
    let late = client.announce(id, Announce::new(hash(1), 99));
    assert_eq!(late.leechers, 3, "not stored");
    assert_eq!(late.peers.len(), 3, "but sent the swarm's peers");
    assert!(eventually(|| tracker.stats().peers_refused == 1));
}

fn connect_packet(transaction: u32) -> Vec<u8> {
    let mut connect = Vec::new();
    Request::Connect(ConnectRequest {
        transaction_id: TransactionId(transaction),
    })
    .write(&mut connect);
    connect
}

#[test]
fn one_proven_address_over_its_rate_is_dropped_then_banned_and_others_are_served() {
    let mut config = loopback_config(false);
    config.per_ip.requests_per_second = 10;
    config.per_ip.burst = 10;
    config.per_ip.ban_after = 2;
    let tracker = start(config);
    let server = shoal_common::testing::ipv4(tracker.local_addrs());
    let mut abuser = Client::from("127.0.0.1:0", server);
    // Connecting counts against nothing: only requests with a connection id do.
    let id = abuser.connect();
    let mut answered = 0;
    for second in 0..3 {
        for _ in 0..50 {
            abuser.send_announce(id, Announce::new(hash(1), 1));
        }
        while abuser.recv_within(Duration::from_millis(100)).is_some() {
            answered += 1;
        }
        if second < 2 {
            tracker.clock().advance(1);
        }
    }
    assert!(answered <= 30, "{answered} of 150 answered");
    assert!(eventually(|| {
        let requests = tracker.stats().requests;
        requests.bans == 1 && requests.per_ip_limited > 0
    }));
    // Banned: even a connect gets nothing now.
    tracker.clock().advance(5);
    abuser.send(&connect_packet(1));
    assert!(abuser.recv_within(Duration::from_millis(300)).is_none());
    // Another address is another client.
    let mut other = Client::from("127.0.0.2:0", server);
    other.connect();
}

/// The attack of issue 41: packets forged "from" a victim's address (here: sent from
/// the victim's IP on another port, which is all a forger needs) must never get the
/// victim limited or banned. 700 scrapes with guessed connection ids got a victim
/// banned before; so did 36 s of connects at 300 a second.
#[test]
fn forged_connects_and_bad_connection_ids_ban_no_one() {
    let tracker = start(loopback_config(false));
    let server = shoal_common::testing::ipv4(tracker.local_addrs());
    let forger = Client::from("127.0.0.5:0", server);
    let mut bad_scrape = Vec::new();
    for guess in 0..700u64 {
        bad_scrape.clear();
        Request::Scrape(ScrapeRequest {
            connection_id: ConnectionId(0x5eed_0000_0000 + guess),
            transaction_id: TransactionId(guess as u32),
            info_hashes: InfoHashes::new(&hash(1)),
        })
        .write(&mut bad_scrape);
        forger.send(&bad_scrape);
    }
    // 40 "seconds" of 300 connects each: the tracker's clock moves on between them.
    for second in 0..40u32 {
        for n in 0..300 {
            forger.send(&connect_packet(second * 300 + n));
        }
        // The replies go to the forged address, which a real forger never reads.
        while forger.recv_within(Duration::from_millis(5)).is_some() {}
        tracker.clock().advance(1);
    }
    // Everything sent was read, or dropped by the kernel when it came too fast.
    let settled = eventually(|| {
        let requests = tracker.stats().requests;
        requests.received + requests.kernel_drops == 12_700
    });
    let requests = tracker.stats().requests;
    assert!(settled, "{requests:?}");
    // Far over the default rate (100 a second, 1,000 at once) for far longer than
    // `ban_after` (30 s): what used to ban the victim.
    assert!(requests.connect_requests >= 8_000, "{requests:?}");
    assert_eq!(requests.bans, 0, "{requests:?}");
    assert_eq!(requests.per_ip_limited, 0, "{requests:?}");
    // The victim itself is served as if nothing had happened.
    let mut victim = Client::from("127.0.0.5:0", server);
    let id = victim.connect();
    assert_eq!(victim.announce(id, Announce::new(hash(2), 1)).leechers, 1);
    assert!(matches!(victim.scrape(id, &[hash(2)]), Response::Scrape(_)));
}

#[test]
fn a_prepared_tracker_serves_nothing_until_it_is_started() {
    // The binaries drop privileges between the two steps: nothing may be served as
    // root.
    let prepared = shoal_udp::prepare(unlimited(), Arc::new(Clock::new())).unwrap();
    let addr = prepared
        .local_addrs()
        .first()
        .copied()
        .expect("bound before serving");
    let mut client = Client::new(addr);
    client.send(&connect_packet(5));
    assert!(client.recv_within(Duration::from_millis(300)).is_none());
    let tracker = prepared.serve().unwrap();
    // The request sent before is answered now, from the kernel's queue.
    assert!(matches!(client.recv(), Response::Connect(_)));
    client.connect();
    tracker.stop().unwrap();
}

#[test]
fn a_flood_that_overflows_the_receive_queue_shrinks_it_until_calm() {
    let mut config = unlimited();
    // Within any host's net.core.rmem_max (212,992 by default), so that the queue can
    // grow back without privileges.
    config.network.socket_recv_buffer_size = 200 * 1024;
    config.network.overload_recv_buffer_size = 64 * 1024;
    config.socket_workers = 1;
    let tracker = start(config);
    let server = shoal_common::testing::ipv4(tracker.local_addrs());
    let mut connect = Vec::new();
    Request::Connect(ConnectRequest {
        transaction_id: TransactionId(9),
    })
    .write(&mut connect);
    // Four senders that never read their replies outrun the one socket worker, on
    // two cores (CI's) as on many: its queue overflows.
    let stop = Arc::new(AtomicBool::new(false));
    let senders: Vec<_> = (0..4)
        .map(|_| {
            let (stop, connect) = (stop.clone(), connect.clone());
            std::thread::spawn(move || {
                let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
                let started = Instant::now();
                while !stop.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(5) {
                    let _ = socket.send_to(&connect, server);
                }
            })
        })
        .collect();
    let shrunk = eventually(|| tracker.stats().requests.queue_shrinks >= 1);
    stop.store(true, Ordering::Relaxed);
    for sender in senders {
        sender.join().unwrap();
    }
    let requests = tracker.stats().requests;
    assert!(shrunk, "not shrunk: {requests:?}");
    assert!(requests.kernel_drops > 0, "{requests:?}");
    assert!(requests.connect_replies > 0, "served while flooded");
    // Calm again: the configured size comes back a second later.
    assert!(eventually(|| {
        let requests = tracker.stats().requests;
        requests.queue_restores == requests.queue_shrinks
    }));
    // And it serves as before.
    let mut client = Client::new(server);
    client.connect();
    tracker.stop().unwrap();
}
