//! The dispatcher with real channels and real shards, no sockets.

use shoal_common::{AccessList, AccessListMode};
use shoal_udp_protocol::*;

use super::rig::{client, rig, rig_with};
use super::*;

fn announce_packet(
    connection_id: ConnectionId,
    info_hash: [u8; 20],
    port: u16,
    left: u64,
) -> Vec<u8> {
    let request = AnnounceRequest {
        connection_id,
        transaction_id: TransactionId(port.into()),
        info_hash: InfoHash(info_hash),
        peer_id: PeerId([1; 20]),
        downloaded: 0,
        left,
        uploaded: 0,
        event: shoal_udp_protocol::AnnounceEvent::Started,
        ip_address: 0,
        key: 0,
        peers_wanted: -1,
        port,
        options: AnnounceOptions(&[]),
    };
    let mut packet = Vec::new();
    Request::Announce(request).write(&mut packet);
    packet
}

fn scrape_packet(connection_id: ConnectionId, hashes: &[[u8; 20]]) -> Vec<u8> {
    let flat = hashes.concat();
    let mut packet = Vec::new();
    Request::Scrape(ScrapeRequest {
        connection_id,
        transaction_id: TransactionId(77),
        info_hashes: InfoHashes::new(&flat),
    })
    .write(&mut packet);
    packet
}

#[test]
fn announces_reach_the_swarm_and_peers_find_each_other() {
    let mut rig = rig(2);
    let a = rig.connect(client(1));
    let b = rig.connect(client(2));
    let replies = rig.exchange(&announce_packet(a, [5; 20], 1001, 10), client(1));
    let [(_, Response::Announce(first))] = &replies[..] else {
        panic!("{replies:?}")
    };
    assert_eq!(
        (first.leechers, first.seeders, first.peers.len()),
        (1, 0, 0)
    );
    assert_eq!(first.interval, 1800);

    let replies = rig.exchange(&announce_packet(b, [5; 20], 1002, 0), client(2));
    let [(to, Response::Announce(second))] = &replies[..] else {
        panic!("{replies:?}")
    };
    assert_eq!(*to, client(2));
    assert_eq!((second.leechers, second.seeders), (1, 1));
    assert_eq!(
        second.peers,
        vec![SocketAddr::from(([10, 0, 0, 1], 1001))],
        "port from the request, IP from the packet"
    );
}

#[test]
fn bad_connection_ids_get_no_reply() {
    let mut rig = rig(1);
    let genuine = rig.connect(client(1));
    assert!(
        rig.exchange(
            &announce_packet(ConnectionId(12345), [5; 20], 1, 1),
            client(1)
        )
        .is_empty()
    );
    assert!(
        rig.exchange(&announce_packet(genuine, [5; 20], 1, 1), client(2))
            .is_empty(),
        "id of another address"
    );
    rig.now = rig.now.plus(121);
    assert!(
        rig.exchange(&announce_packet(genuine, [5; 20], 1, 1), client(1))
            .is_empty(),
        "expired"
    );
    assert!(
        rig.exchange(&scrape_packet(ConnectionId(1), &[[5; 20]]), client(1))
            .is_empty()
    );
    assert_eq!(rig.dispatcher.counters.bad_connection_ids, 4);
}

#[test]
fn malformed_requests_are_answered_only_for_connected_clients() {
    let mut rig = rig(1);
    let id = rig.connect(client(1));
    let mut truncated = announce_packet(id, [5; 20], 1, 1);
    truncated.truncate(60);
    let replies = rig.exchange(&truncated, client(1));
    let [(_, Response::Error(error))] = &replies[..] else {
        panic!("{replies:?}")
    };
    assert_eq!(error.message, "announce request too short");

    assert!(
        rig.exchange(&truncated, client(9)).is_empty(),
        "no error to an unproven address"
    );
    assert!(rig.exchange(b"garbage", client(1)).is_empty());
    assert_eq!(rig.dispatcher.counters.invalid_requests, 3);
}

#[test]
fn the_access_list_refuses_announces_and_scrapes() {
    let list = AccessList::parse(&"05".repeat(20)).unwrap();
    let mut rig = rig_with(
        2,
        16,
        AccessControl::with_list(AccessListMode::Allow, list),
        Config::default(),
    );
    let id = rig.connect(client(1));
    let replies = rig.exchange(&announce_packet(id, [6; 20], 1, 1), client(1));
    let [(_, Response::Error(error))] = &replies[..] else {
        panic!("{replies:?}")
    };
    assert_eq!(error.message, NOT_ALLOWED);
    let replies = rig.exchange(&scrape_packet(id, &[[5; 20], [6; 20]]), client(1));
    assert!(
        matches!(&replies[..], [(_, Response::Error(e))] if e.message == NOT_ALLOWED),
        "{replies:?}"
    );

    let replies = rig.exchange(&announce_packet(id, [5; 20], 1, 1), client(1));
    assert!(
        matches!(&replies[..], [(_, Response::Announce(_))]),
        "{replies:?}"
    );
    assert_eq!(rig.dispatcher.counters.access_denied, 2);
}

#[test]
fn scrapes_over_several_swarm_workers_are_merged_in_order() {
    let mut rig = rig(3);
    let id = rig.connect(client(1));
    let hashes: Vec<[u8; 20]> = (0..30u8).map(|i| [i.wrapping_mul(37); 20]).collect();
    // One leecher on every other torrent, a seeder on every third.
    for (i, hash) in hashes.iter().enumerate() {
        if i % 2 == 0 {
            rig.exchange(&announce_packet(id, *hash, 1000 + i as u16, 5), client(1));
        }
        if i % 3 == 0 {
            rig.exchange(&announce_packet(id, *hash, 2000 + i as u16, 0), client(1));
        }
    }
    let replies = rig.exchange(&scrape_packet(id, &hashes), client(1));
    let [(_, Response::Scrape(scrape))] = &replies[..] else {
        panic!("{replies:?}")
    };
    assert_eq!(scrape.transaction_id, TransactionId(77));
    assert_eq!(scrape.torrents.len(), 30);
    for (i, stats) in scrape.torrents.iter().enumerate() {
        assert_eq!(stats.leechers, u32::from(i % 2 == 0), "torrent {i}");
        assert_eq!(stats.seeders, u32::from(i % 3 == 0), "torrent {i}");
    }
    assert_eq!(rig.dispatcher.scrapes.len(), 0);
}

#[test]
fn oversized_scrapes_get_an_error() {
    let mut rig = rig(1);
    let id = rig.connect(client(1));
    let hashes = vec![[1u8; 20]; 75];
    let replies = rig.exchange(&scrape_packet(id, &hashes), client(1));
    let [(_, Response::Error(error))] = &replies[..] else {
        panic!("{replies:?}")
    };
    assert_eq!(error.message, "too many info hashes in scrape (at most 74)");
}

#[test]
fn a_full_swarm_queue_answers_announces_with_a_backoff_reply_without_waiting() {
    let mut rig = rig_with(
        1,
        1,
        AccessControl::with_list(AccessListMode::Off, AccessList::default()),
        Config::default(),
    );
    let mut out = Replies::default();
    let ids = ConnectionIds::with_keys((7, 8), 120);
    let id = ids.issue(client(1).ip(), rig.now);
    for port in 1..=5u16 {
        // Nobody drains the queue: the first job fits, the next four are shed.
        rig.dispatcher.handle_packet(
            &announce_packet(id, [5; 20], port, 1),
            client(1),
            rig.now,
            &mut out,
        );
        rig.dispatcher.flush_jobs(&mut out).unwrap();
    }
    assert_eq!(rig.dispatcher.counters.shed, 4);
    assert_eq!(rig.queues[0].len(), 1);
    // The four shed announces are answered here: the interval spread over one to two
    // (1,800 to 3,600 s), no peers; libtorrent waits that long.
    assert_eq!(out.packets.len(), 4);
    let mut intervals = Vec::new();
    for (bytes, packet) in out.iter_packets() {
        assert_eq!(packet.kind, ReplyKind::Backoff);
        let Ok(Response::Announce(reply)) = Response::parse(bytes, PeerFamily::V4) else {
            panic!("{bytes:?}")
        };
        assert!(reply.peers.is_empty());
        assert_eq!((reply.leechers, reply.seeders), (0, 0));
        intervals.push(reply.interval);
    }
    assert!(
        intervals.iter().all(|i| (1800..=3600).contains(i)),
        "{intervals:?}"
    );
    intervals.dedup();
    assert!(intervals.len() > 1, "spread: {intervals:?}");
    let mut out = Replies::default();

    // Connects are still answered while the swarm worker is stuck.
    let mut connect = Vec::new();
    Request::Connect(ConnectRequest {
        transaction_id: TransactionId(3),
    })
    .write(&mut connect);
    rig.dispatcher
        .handle_packet(&connect, client(1), rig.now, &mut out);
    assert_eq!(out.packets.len(), 1);
}

#[test]
fn a_shed_scrape_part_frees_its_pending_slot() {
    let mut rig = rig_with(
        2,
        1,
        AccessControl::with_list(AccessListMode::Off, AccessList::default()),
        Config::default(),
    );
    let id = ConnectionIds::with_keys((7, 8), 120).issue(client(1).ip(), rig.now);
    let hashes: Vec<[u8; 20]> = (0..16u8).map(|i| [i; 20]).collect();
    let mut out = Replies::default();
    rig.dispatcher
        .handle_packet(&scrape_packet(id, &hashes), client(1), rig.now, &mut out);
    rig.dispatcher.flush_jobs(&mut out).unwrap();
    assert_eq!(rig.dispatcher.scrapes.len(), 1);
    rig.dispatcher
        .handle_packet(&scrape_packet(id, &hashes), client(1), rig.now, &mut out);
    rig.dispatcher.flush_jobs(&mut out).unwrap();
    assert_eq!(
        rig.dispatcher.counters.shed, 2,
        "both parts of the second scrape"
    );
    assert_eq!(
        rig.dispatcher.scrapes.len(),
        1,
        "the second scrape's slot was freed"
    );
}

#[test]
fn ipv6_clients_get_ipv6_peers() {
    let mut rig = rig(1);
    let a: SocketAddr = "[2001:db8::1]:5000".parse().unwrap();
    let b: SocketAddr = "[2001:db8::2]:5000".parse().unwrap();
    let id_a = rig.connect(a);
    let id_b = rig.connect(b);
    rig.exchange(&announce_packet(id_a, [5; 20], 6881, 1), a);
    let replies = rig.exchange(&announce_packet(id_b, [5; 20], 6882, 1), b);
    let [(_, Response::Announce(reply))] = &replies[..] else {
        panic!("{replies:?}")
    };
    assert_eq!(
        reply.peers,
        vec!["[2001:db8::1]:6881".parse::<SocketAddr>().unwrap()]
    );
}

#[test]
fn the_fuzz_seeds_run_clean() {
    // The udp_dispatch fuzz target's committed inputs; inputs that once crashed it
    // go there too, and so become regression tests here.
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fuzz/seeds/udp_dispatch");
    let mut ran = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        super::rig::fuzz(&std::fs::read(entry.unwrap().path()).unwrap());
        ran += 1;
    }
    assert!(ran >= 2);
    // Odd shapes: nothing, a record longer than the input, a lone flags byte.
    for data in [&[][..], &[0x10, 200, 1, 2, 3], &[0xff]] {
        super::rig::fuzz(data);
    }
}

/// An announce carrying `url` as BEP 41 URL data (split over options when long).
fn keyed_announce(
    connection_id: ConnectionId,
    info_hash: [u8; 20],
    left: u64,
    url: &str,
) -> Vec<u8> {
    let mut options = Vec::new();
    AnnounceOptions::write_url_data(url.as_bytes(), &mut options);
    let request = AnnounceRequest {
        connection_id,
        transaction_id: TransactionId(9),
        info_hash: InfoHash(info_hash),
        peer_id: PeerId([1; 20]),
        downloaded: 0,
        left,
        uploaded: 0,
        event: shoal_udp_protocol::AnnounceEvent::Started,
        ip_address: 0,
        key: 0,
        peers_wanted: -1,
        port: 6881,
        options: AnnounceOptions(&options),
    };
    let mut packet = Vec::new();
    Request::Announce(request).write(&mut packet);
    packet
}

#[test]
fn private_mode_serves_registered_users_and_torrents_only() {
    const SEEDER_ONLY: &str = "a1b2c3d4e5f60718293a4b5c6d7e8f90";
    let registry = shoal_private::Registry::parse(
        &format!("17 {KEY}\n18 {SEEDER_ONLY} noleech\n"),
        &format!("{} 1001\n", "05".repeat(20)),
    )
    .unwrap();
    let mut rig = super::rig::rig_private(
        1,
        16,
        AccessControl::with_list(AccessListMode::Off, AccessList::default()),
        Config::default(),
        Some(Arc::new(registry)),
    );
    let id = rig.connect(client(1));
    let refused = |rig: &mut super::rig::Rig, packet: &[u8]| -> String {
        let replies = rig.exchange(packet, client(1));
        match &replies[..] {
            [(_, Response::Error(error))] => error.message.to_string(),
            other => panic!("not refused: {other:?}"),
        }
    };
    // The key in each place a site puts it, and a URL split over several options.
    for url in [
        format!("/{KEY}/announce"),
        format!("/announce/{KEY}"),
        format!("/announce?passkey={KEY}"),
        format!("/{KEY}"),
        format!("/announce?{}&passkey={KEY}", "x=1&".repeat(80)),
    ] {
        let replies = rig.exchange(&keyed_announce(id, [5; 20], 1, &url), client(1));
        assert!(
            matches!(&replies[..], [(_, Response::Announce(_))]),
            "{url}: {replies:?}"
        );
    }
    let no_key = keyed_announce(id, [5; 20], 1, "/announce");
    assert_eq!(
        refused(&mut rig, &no_key),
        shoal_private::Refusal::MissingKey.reason()
    );
    let unknown = keyed_announce(id, [5; 20], 1, "/00000000000000000000000000000bad/announce");
    assert_eq!(
        refused(&mut rig, &unknown),
        shoal_private::Refusal::UnknownKey.reason()
    );
    let unregistered = keyed_announce(id, [6; 20], 1, &format!("/{KEY}/announce"));
    assert_eq!(
        refused(&mut rig, &unregistered),
        shoal_private::Refusal::Unregistered.reason()
    );
    let leeching = keyed_announce(id, [5; 20], 1, &format!("/{SEEDER_ONLY}/announce"));
    assert_eq!(
        refused(&mut rig, &leeching),
        shoal_private::Refusal::CannotLeech.reason()
    );
    let seeding = keyed_announce(id, [5; 20], 0, &format!("/{SEEDER_ONLY}/announce"));
    assert!(matches!(
        &rig.exchange(&seeding, client(1))[..],
        [(_, Response::Announce(_))]
    ));
    // A scrape has no room for a key.
    assert_eq!(
        refused(&mut rig, &scrape_packet(id, &[[5; 20]])),
        PRIVATE_SCRAPE
    );
    assert_eq!(rig.dispatcher.counters.private_refused, 5);
    // Refusals touched no swarm: one torrent, the seeder only (the leecher's announces
    // and the seeder's share a peer id and address: one peer).
    let replies = rig.exchange(
        &keyed_announce(id, [5; 20], 0, &format!("/{KEY}")),
        client(1),
    );
    let [(_, Response::Announce(announce))] = &replies[..] else {
        panic!("{replies:?}")
    };
    assert_eq!((announce.seeders, announce.leechers), (1, 0));
}

#[test]
fn client_rules_refuse_by_peer_id_and_every_announce_is_counted_by_client() {
    let mut config = Config::default();
    config.clients.deny_peer_ids = vec!["-XL".into()];
    let mut rig = super::rig::rig_with(
        1,
        16,
        AccessControl::with_list(AccessListMode::Off, AccessList::default()),
        config,
    );
    let id = rig.connect(client(1));
    let announce_as = |peer_id: &[u8]| with_peer_id(keyed_announce(id, [5; 20], 1, ""), peer_id);
    let replies = rig.exchange(&announce_as(b"-XL0012-"), client(1));
    match &replies[..] {
        [(_, Response::Error(error))] => {
            assert_eq!(error.message, shoal_common::ClientRefusal::PeerId.reason());
        }
        other => panic!("not refused: {other:?}"),
    }
    let replies = rig.exchange(&announce_as(b"-qB4650-"), client(1));
    assert!(
        matches!(&replies[..], [(_, Response::Announce(_))]),
        "{replies:?}"
    );
    let counters = rig.dispatcher.counters;
    assert_eq!(counters.client_refused, 1);
    let index = |name| {
        shoal_common::KNOWN_CLIENTS
            .iter()
            .position(|(_, known)| *known == name)
            .unwrap()
    };
    assert_eq!(counters.clients.0[index("Xunlei")], 1);
    assert_eq!(counters.clients.0[index("qBittorrent")], 1);
}

/// The passkey of the one user of [`one_user_rig`].
const KEY: &str = "6f0d1b2c3d4e5f60718293a4b5c6d7e8";

/// A private rig with the users file `users` and torrent `05…05` registered.
fn one_user_rig(users: &str, config: Config) -> super::rig::Rig {
    let torrents = format!("{} 1001\n", "05".repeat(20));
    let registry = shoal_private::Registry::parse(users, &torrents).unwrap();
    super::rig::rig_private(
        1,
        16,
        AccessControl::with_list(AccessListMode::Off, AccessList::default()),
        config,
        Some(Arc::new(registry)),
    )
}

/// `packet`, an announce, with the peer id `peer_id` starts with (BEP 15: the peer
/// id follows the connection id, action, transaction id and info hash, at 36).
fn with_peer_id(mut packet: Vec<u8>, peer_id: &[u8]) -> Vec<u8> {
    packet[36..36 + peer_id.len()].copy_from_slice(peer_id);
    packet
}

#[test]
fn private_mode_caps_a_users_clients_and_refuses_announces_too_early() {
    let mut config = Config::default();
    config.private.min_interval = 900;
    let mut rig = one_user_rig(&format!("17 {KEY} peers=1\n"), config);
    let id = rig.connect(client(1));
    // BEP 15: the event at 80 (0: none, 2: started).
    let announce = |id, peer: u8, event: u8| {
        let packet = keyed_announce(id, [5; 20], 0, &format!("/{KEY}/announce"));
        let mut packet = with_peer_id(packet, &[peer; 20]);
        packet[80..84].copy_from_slice(&u32::from(event).to_be_bytes());
        packet
    };
    let answer = |rig: &mut super::rig::Rig, packet: &[u8]| -> Option<String> {
        match &rig.exchange(packet, client(1))[..] {
            [(_, Response::Announce(_))] => None,
            [(_, Response::Error(error))] => Some(error.message.to_string()),
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(answer(&mut rig, &announce(id, 1, 2)), None);
    assert_eq!(
        answer(&mut rig, &announce(id, 2, 2)).as_deref(),
        Some(shoal_private::Refusal::OverCap.reason())
    );
    assert_eq!(
        answer(&mut rig, &announce(id, 1, 0)).as_deref(),
        Some(shoal_private::Refusal::TooEarly.reason())
    );
    // The interval later (with a new connection id: the old one expired).
    rig.now = ServerTime(rig.now.0 + 900);
    let id = rig.connect(client(1));
    assert_eq!(answer(&mut rig, &announce(id, 1, 0)), None);
    assert_eq!(rig.dispatcher.counters.private_refused, 2);
}

#[test]
fn a_user_past_their_peer_lists_per_minute_is_served_without_peers() {
    let mut config = Config::default();
    config.private.peer_lists_per_minute = 2;
    let mut rig = one_user_rig(&format!("17 {KEY}\n"), config);
    // Three clients of one user, each from its own address, leeching (left = 1).
    let peers_sent = (1..=3u8)
        .map(|n| {
            let id = rig.connect(client(n));
            let packet = keyed_announce(id, [5; 20], 1, &format!("/{KEY}/announce"));
            let packet = with_peer_id(packet, &[n; 20]);
            match &rig.exchange(&packet, client(n))[..] {
                [(_, Response::Announce(announce))] => (announce.peers.len(), announce.leechers),
                other => panic!("{other:?}"),
            }
        })
        .collect::<Vec<_>>();
    // The first finds no one, the second the first; the third is in the swarm
    // (three leechers) but past the allowance: no peers.
    assert_eq!(peers_sent, [(0, 1), (1, 2), (0, 3)]);
}
