//! The WebTorrent tracker started in-process on free loopback ports, driven by a
//! real WebSocket client.

mod support;

use shoal_common::testing::eventually;
use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use serde_json::json;
use shoal_common::AccessListMode;
use shoal_ws::RunningTracker;
use shoal_ws_protocol::{Id20, ServerMessage};
use support::*;
use tungstenite::Message;
use tungstenite::protocol::frame::coding::CloseCode;

fn start(config: shoal_ws::Config) -> RunningTracker {
    shoal_ws::start(config).expect("tracker starts")
}

fn v4(tracker: &RunningTracker) -> SocketAddr {
    shoal_common::testing::ipv4(tracker.local_addrs())
}

fn counts(message: ServerMessage) -> (u64, u64) {
    match message {
        ServerMessage::AnnounceResponse(reply) => (reply.complete, reply.incomplete),
        other => panic!("expected an announce reply, got {other:?}"),
    }
}

fn error(message: ServerMessage) -> String {
    match message {
        ServerMessage::Error(error) => error.reason.into_owned(),
        other => panic!("expected an error, got {other:?}"),
    }
}

const TORRENT: &str = "torrent";

/// Offers from one peer reach the other; the answer comes back to the offerer.
fn offer_and_answer(config: shoal_ws::Config) {
    let tracker = start(config);
    let torrent = id(TORRENT);
    let mut alice = connect(v4(&tracker));
    alice.announce(torrent, id("alice"), json!({"event": "started"}));
    assert_eq!(counts(alice.receive()), (0, 1));

    let mut bob = connect(v4(&tracker));
    bob.announce(
        torrent,
        id("bob"),
        json!({"offers": offers("bob", 3), "numwant": 3, "left": 0}),
    );
    assert_eq!(counts(bob.receive()), (1, 1));
    let ServerMessage::Offer(offer) = alice.receive() else {
        panic!("alice gets bob's offer")
    };
    assert_eq!(offer.peer_id, id("bob"));
    assert_eq!(offer.info_hash, torrent);
    assert!(offer.offer.get().contains("v=0 bob"));

    alice.announce(
        torrent,
        id("alice"),
        json!({
            "answer": {"type": "answer", "sdp": "v=0 alice"},
            "to_peer_id": chars(id("bob")),
            "offer_id": chars(offer.offer_id),
        }),
    );
    let ServerMessage::Answer(answer) = bob.receive() else {
        panic!("bob gets alice's answer")
    };
    assert_eq!(answer.peer_id, id("alice"));
    assert_eq!(answer.offer_id, offer.offer_id);
    let description: serde_json::Value = serde_json::from_str(answer.answer.get()).unwrap();
    assert_eq!(description, json!({"type": "answer", "sdp": "v=0 alice"}));
    assert!(eventually(|| {
        let stats = tracker.stats().requests;
        stats.offers_forwarded == 1 && stats.answers_relayed == 1 && stats.announces == 2
    }));
    // Both announces got their reply and were timed; the answer was relayed, not
    // answered, so it has no time of its own.
    assert!(eventually(|| {
        let stats = tracker.stats();
        let counts = stats.requests;
        counts.announce_responses == 2
            && counts.offer_responses == 1
            && counts.answer_responses == 1
            && counts.answers == 1
            && counts.announces_v6 == 0
            && stats.traffic.latency_count() == 2
            && stats.traffic.bytes_received > 0
            && stats.traffic.bytes_sent > 0
    }));
}

#[test]
fn offers_and_answers_are_relayed() {
    offer_and_answer(loopback_config());
}

#[test]
fn offers_and_answers_are_relayed_through_swarm_worker_threads() {
    let mut config = loopback_config();
    config.swarm_workers = 2;
    offer_and_answer(config);
}

#[test]
fn answers_to_offers_never_sent_are_refused() {
    let tracker = start(loopback_config());
    let torrent = id(TORRENT);
    let mut alice = connect(v4(&tracker));
    alice.announce(torrent, id("alice"), json!({}));
    alice.receive();
    let mut bob = connect(v4(&tracker));
    bob.announce(torrent, id("bob"), json!({}));
    bob.receive();
    // Alice answers an offer bob never made.
    alice.announce(
        torrent,
        id("alice"),
        json!({
            "answer": {"type": "answer", "sdp": "forged"},
            "to_peer_id": chars(id("bob")),
            "offer_id": chars(id("made-up")),
        }),
    );
    assert!(error(alice.receive()).starts_with("answer not relayed"));
    // Bob got nothing: his next message is the reply to his own scrape.
    bob.send(json!({"action": "scrape", "info_hash": chars(torrent)}));
    assert!(matches!(bob.receive(), ServerMessage::Scrape(_)));
    assert!(eventually(|| tracker.stats().requests.answers_refused == 1));
}

#[test]
fn scrapes_of_one_and_of_many_torrents() {
    let mut config = loopback_config();
    config.swarm_workers = 3;
    let tracker = start(config);
    let mut client = connect(v4(&tracker));
    let torrents: Vec<Id20> = (0..6).map(|n| id(&format!("t{n}"))).collect();
    for (n, torrent) in torrents.iter().enumerate() {
        // Leeching first: a download counts for a peer seen leeching.
        client.announce(*torrent, id("peer"), json!({"left": 5}));
        client.receive();
        let left = if n % 2 == 0 { 0 } else { 5 };
        client.announce(
            *torrent,
            id("peer"),
            json!({"left": left, "event": "completed"}),
        );
        client.receive();
    }
    client.send(json!({"action": "scrape", "info_hash": chars(torrents[0])}));
    let ServerMessage::Scrape(single) = client.receive() else {
        panic!()
    };
    assert_eq!(single.files.len(), 1);
    assert_eq!(single.files[0].1.complete, 1);
    assert_eq!(single.files[0].1.downloaded, 1);

    let list: Vec<String> = torrents.iter().map(|t| chars(*t)).collect();
    client.send(json!({"action": "scrape", "info_hash": list}));
    let ServerMessage::Scrape(many) = client.receive() else {
        panic!()
    };
    assert_eq!(
        many.files.len(),
        6,
        "parts from every swarm worker are merged"
    );
    for (n, torrent) in torrents.iter().enumerate() {
        let (_, file) = many.files.iter().find(|(hash, _)| hash == torrent).unwrap();
        assert_eq!(
            (file.complete, file.incomplete),
            if n % 2 == 0 { (1, 0) } else { (0, 1) }
        );
    }
    client.send(json!({"action": "scrape"}));
    assert!(error(client.receive()).contains("must name info hashes"));
}

#[test]
fn a_closed_connection_takes_its_peers_along() {
    let tracker = start(loopback_config());
    let torrent = id(TORRENT);
    let mut alice = connect(v4(&tracker));
    alice.announce(torrent, id("alice"), json!({}));
    alice.receive();
    let mut bob = connect(v4(&tracker));
    bob.announce(torrent, id("bob"), json!({}));
    assert_eq!(counts(bob.receive()), (0, 2));
    alice.socket.close(None).unwrap();
    let _ = alice.socket.flush();
    drop(alice);
    assert!(eventually(|| {
        bob.send(json!({"action": "scrape", "info_hash": chars(torrent)}));
        let ServerMessage::Scrape(scrape) = bob.receive() else {
            panic!()
        };
        scrape.files[0].1.incomplete == 1
    }));
}

#[test]
fn malformed_messages_get_errors_and_the_connection_stays() {
    let tracker = start(loopback_config());
    let mut client = connect(v4(&tracker));
    client.socket.send(Message::text("{not json")).unwrap();
    assert!(error(client.receive()).starts_with("invalid message"));
    client.send(json!({"action": "announce", "info_hash": "short", "peer_id": "x"}));
    assert!(error(client.receive()).contains("20 characters"));
    client.send(json!({"action": "announce", "info_hash": chars(id(TORRENT))}));
    let reply = client.receive_text();
    assert!(
        reply.contains(r#""failure reason":"an announce needs a peer_id""#),
        "{reply}"
    );
    assert!(
        reply.contains(r#""info_hash":"torrent"#),
        "errors name the torrent: {reply}"
    );
    client.announce(id(TORRENT), id("peer"), json!({}));
    assert_eq!(counts(client.receive()), (0, 1));
    assert!(eventually(|| tracker.stats().requests.bad_messages == 3));
}

#[test]
fn binary_and_oversized_messages_close_the_connection() {
    let mut config = loopback_config();
    config.limits.max_message_size = 2048;
    let tracker = start(config);
    let mut client = connect(v4(&tracker));
    client.socket.send(Message::binary(vec![1, 2, 3])).unwrap();
    assert_eq!(client.close_frame().unwrap().code, CloseCode::Unsupported);

    let mut client = connect(v4(&tracker));
    client.socket.send(Message::text("x".repeat(4096))).unwrap();
    assert_eq!(client.close_frame().unwrap().code, CloseCode::Size);
    assert!(eventually(
        || tracker.stats().requests.oversized_messages == 1
    ));
}

#[test]
fn a_client_that_does_not_read_is_disconnected_and_counted() {
    let mut config = loopback_config();
    config.limits.max_outgoing_messages = 8;
    let tracker = start(config);
    let torrent = id(TORRENT);
    let _sleeper = joined_small(v4(&tracker), torrent, "sleeper");
    // Offers of 8 KiB for the sleeper until the socket buffers are full and its
    // queue drops offers; the sender reads its own replies as it goes.
    let mut sender = connect(v4(&tracker));
    offer_until(&mut sender, torrent, &big_offer(8192), 4000, || {
        tracker.stats().requests.offers_dropped > 0
    });
    // Offers are disposable, so that alone closes no one; a write that makes no
    // progress for 10 s does.
    let started = std::time::Instant::now();
    while tracker.stats().requests.slow_readers == 0 && started.elapsed() < Duration::from_secs(20)
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(tracker.stats().requests.slow_readers, 1);
    assert!(
        started.elapsed() >= Duration::from_secs(5),
        "closed for its write, not its queue"
    );
}

#[test]
fn the_access_list_and_the_request_rate_are_enforced() {
    let dir = std::env::temp_dir().join(format!("shoal-ws-access-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let list = dir.join("allowed.txt");
    let allowed = id("allowed");
    let hex: String = allowed.0.iter().map(|b| format!("{b:02x}")).collect();
    std::fs::write(&list, format!("{hex}\n")).unwrap();
    let mut config = loopback_config();
    config.access_list.mode = AccessListMode::Allow;
    config.access_list.path = list;
    config.limits.max_requests_per_second = 1;
    config.limits.request_burst = 3;
    let tracker = start(config);
    let mut client = connect(v4(&tracker));
    client.announce(id("other"), id("peer"), json!({}));
    assert_eq!(error(client.receive()), "info hash not allowed");
    client.announce(allowed, id("peer"), json!({}));
    assert_eq!(counts(client.receive()), (0, 1));
    client.send(json!({"action": "scrape", "info_hash": chars(allowed)}));
    assert!(matches!(client.receive(), ServerMessage::Scrape(_)));
    // Three requests in (the burst): within the next few one is refused, however
    // the one-second refill falls.
    let mut limited = false;
    for _ in 0..3 {
        client.announce(allowed, id("peer"), json!({}));
        if let ServerMessage::Error(error) = client.receive() {
            assert_eq!(error.reason, "too many requests, slow down");
            limited = true;
            break;
        }
    }
    assert!(limited);
    assert!(eventually(|| tracker.stats().requests.rate_limited >= 1));
    std::fs::remove_dir_all(&dir).unwrap();
}

fn raw_http(addr: SocketAddr, request: &str) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

#[test]
fn health_checks_and_requests_that_are_not_upgrades() {
    let tracker = start(loopback_config());
    let addr = v4(&tracker);
    let health = raw_http(addr, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(health.starts_with("HTTP/1.1 200 OK"), "{health}");
    assert!(health.ends_with("ok\n"), "{health}");
    let plain = raw_http(addr, "GET /announce HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(plain.starts_with("HTTP/1.1 426"), "{plain}");
    let post = raw_http(addr, "POST / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(post.starts_with("HTTP/1.1 405"), "{post}");
    let garbage = raw_http(addr, "\x16\x03\x01 not http\r\n\r\n");
    assert!(garbage.starts_with("HTTP/1.1 400"), "{garbage}");
    let old = raw_http(
        addr,
        "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 8\r\n\r\n",
    );
    assert!(old.contains("Sec-WebSocket-Version: 13"), "{old}");
    assert!(eventually(|| tracker.stats().requests.health_checks == 1));
}

#[test]
fn idle_connections_are_closed() {
    let mut config = loopback_config();
    config.protocol.announce_interval = 1;
    config.network.idle_timeout = 2;
    let tracker = start(config);
    let mut client = connect(v4(&tracker));
    assert_eq!(client.close_frame().unwrap().code, CloseCode::Away);
    assert!(eventually(|| tracker.stats().requests.idle_timeouts == 1));
}

#[test]
fn ipv6_clients_are_served() {
    let mut config = loopback_config();
    config.network.use_ipv4 = false;
    config.network.use_ipv6 = true;
    config.network.address_ipv6 = "[::1]:0".parse().unwrap();
    if !shoal_common::testing::ipv6_loopback() {
        shoal_common::testing::skip("ipv6", "::1 cannot be bound");
        return;
    }
    let tracker = shoal_ws::start(config).expect("the tracker starts on ::1");
    let addr = tracker.local_addrs()[0];
    assert!(addr.is_ipv6());
    let mut client = connect(addr);
    client.announce(id(TORRENT), id("peer"), json!({}));
    assert_eq!(counts(client.receive()), (0, 1));
}

#[test]
fn runs_on_the_backend_under_test() {
    let tracker = shoal_ws::start(loopback_config()).unwrap();
    let backend = tracker.extra().backend;
    match shoal_common::testing::io_backend_under_test() {
        shoal_common::IoBackend::Epoll => assert_eq!(backend, shoal_tcp::Backend::Epoll),
        shoal_common::IoBackend::IoUring => assert_eq!(backend, shoal_tcp::Backend::IoUring),
        shoal_common::IoBackend::Auto => {}
    }
}

#[test]
fn a_private_tracker_upgrades_registered_keys_only() {
    const KEY: &str = "6f0d1b2c3d4e5f60718293a4b5c6d7e8";
    let dir = std::env::temp_dir().join(format!("shoal-ws-private-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let registered = id("registered");
    let hex: String = registered.0.iter().map(|b| format!("{b:02x}")).collect();
    std::fs::write(dir.join("users"), format!("17 {KEY}\n")).unwrap();
    std::fs::write(dir.join("torrents"), format!("{hex} 1001\n")).unwrap();
    let mut config = loopback_config();
    config.private.enabled = true;
    config.private.users_path = dir.join("users");
    config.private.torrents_path = dir.join("torrents");
    let tracker = start(config);
    let addr = v4(&tracker);
    // No key, or a key no user has: the upgrade itself is refused.
    let upgrade = |path: &str| {
        raw_http(
            addr,
            &format!(
                "GET {path} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                 Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
            ),
        )
    };
    let refused = upgrade("/announce");
    assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");
    assert!(refused.contains("passkey missing"), "{refused}");
    assert!(upgrade("/00000000000000000000000000000bad").contains("passkey not recognised"));
    // The key as the URL's path: registered torrents only.
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut client = support::Client::over(tcp, &format!("ws://{addr}/{KEY}"));
    client.announce(registered, id("peer"), json!({}));
    assert_eq!(counts(client.receive()), (0, 1));
    client.announce(id("other"), id("peer"), json!({}));
    assert_eq!(
        error(client.receive()),
        "torrent not registered with this tracker"
    );
    assert!(eventually(|| tracker.stats().requests.private_refused == 3));
    std::fs::remove_dir_all(&dir).unwrap();
}
