//! Attacks on a running WebTorrent tracker, each with the defence it must meet: taking
//! over another browser's peer id, answering or stopping for it, answering without
//! limit, keeping a connection with pings, flooding a reader that never reads with big
//! offers, many readers that never read holding the worker's memory, one address
//! taking every connection or sending too much over several, and
//! a flood of fresh info hashes.

mod support;

use std::io::Write as _;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde_json::json;
use shoal_common::testing::eventually;
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

fn unlimited() -> shoal_ws::Config {
    let mut config = loopback_config();
    config.per_ip.requests_per_second = 0;
    config
}

fn error(message: ServerMessage) -> String {
    match message {
        ServerMessage::Error(error) => error.reason.into_owned(),
        other => panic!("expected an error, got {other:?}"),
    }
}

/// A TCP connection from the loopback address `local` (another client for the limits).
fn tcp_from(local: &str, server: SocketAddr) -> TcpStream {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let local: SocketAddr = format!("{local}:0").parse().unwrap();
    socket.bind(&local.into()).unwrap();
    socket.connect(&server.into()).unwrap();
    let stream: TcpStream = socket.into();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    stream
}

/// A ws:// connection from the loopback address `local`.
fn connect_from(local: &str, server: SocketAddr) -> Client<TcpStream> {
    Client::over(tcp_from(local, server), &format!("ws://{server}/announce"))
}

#[test]
fn a_peer_id_cannot_be_taken_over_stopped_or_answered_for_by_another_connection() {
    let tracker = start(unlimited());
    let torrent = id("torrent");
    let mut owner = connect(v4(&tracker));
    owner.announce(torrent, id("victim"), json!({}));
    owner.receive();

    let mut thief = connect(v4(&tracker));
    thief.announce(torrent, id("victim"), json!({}));
    assert_eq!(
        error(thief.receive()),
        "peer_id is in use by another connection"
    );
    thief.announce(torrent, id("victim"), json!({"event": "stopped"}));
    assert_eq!(
        error(thief.receive()),
        "peer_id is in use by another connection"
    );

    // Offers for the victim still reach the owner, and only the owner may answer.
    let mut offerer = connect(v4(&tracker));
    offerer.announce(torrent, id("offerer"), json!({"offers": offers("o", 1)}));
    offerer.receive();
    let ServerMessage::Offer(offer) = owner.receive() else {
        panic!("the owner gets the offer")
    };
    let answer = json!({
        "to_peer_id": chars(id("offerer")),
        "offer_id": chars(offer.offer_id),
        "answer": {"type": "answer", "sdp": "stolen"},
    });
    thief.announce(torrent, id("victim"), answer.clone());
    assert!(error(thief.receive()).starts_with("answer not relayed"));
    owner.announce(torrent, id("victim"), answer);
    assert!(matches!(offerer.receive(), ServerMessage::Answer(_)));
    assert!(eventually(|| tracker.stats().requests.peer_ids_taken == 2));
}

#[test]
fn an_answer_that_says_stopped_leaves_no_peer_behind() {
    // An answer is relayed, nothing more: its event must not end the connection's
    // part in a torrent while the peer stays in the swarm, or the connection could
    // leave peers behind (and past its torrent limit) that outlive it.
    let tracker = start(unlimited());
    let torrent = id("torrent");
    let mut attacker = connect(v4(&tracker));
    attacker.announce(torrent, id("first"), json!({}));
    attacker.receive();
    let stopping_answer = json!({
        "event": "stopped",
        "to_peer_id": chars(id("nobody")),
        "offer_id": chars(id("offer")),
        "answer": {"type": "answer", "sdp": "x"},
    });
    attacker.announce(torrent, id("first"), stopping_answer);
    assert!(error(attacker.receive()).starts_with("answer not relayed"));
    attacker.announce(torrent, id("second"), json!({}));
    attacker.receive();
    drop(attacker);

    // Once the connection is gone, the torrent has only the newcomer.
    let mut observer = connect(v4(&tracker));
    assert!(eventually(|| {
        observer.announce(torrent, id("observer"), json!({}));
        match observer.receive() {
            ServerMessage::AnnounceResponse(reply) => reply.complete + reply.incomplete == 1,
            other => panic!("expected an announce reply, got {other:?}"),
        }
    }));
}

#[test]
fn session_descriptions_past_their_limit_are_not_relayed() {
    // Offers and answers are queued for their recipients untouched: a message may be
    // 64 KiB, a browser's description is a few, so a connection must not push the
    // difference at its peers.
    let mut config = unlimited();
    config.limits.max_description_size = 4096;
    let tracker = start(config);
    let torrent = id("torrent");
    let mut recipient = joined(v4(&tracker), torrent, "recipient");
    let mut sender = joined(v4(&tracker), torrent, "sender");
    sender.announce(
        torrent,
        id("sender"),
        json!({"offers": big_offer(8192), "numwant": 1}),
    );
    sender.receive();
    sender.announce(
        torrent,
        id("sender"),
        json!({"offers": big_offer(1024), "numwant": 1}),
    );
    sender.receive();
    // Only the small one arrives.
    let ServerMessage::Offer(offer) = recipient.receive() else {
        panic!("an offer")
    };
    assert_eq!(
        offer.offer.get().len(),
        r#"{"type":"offer","sdp":""}"#.len() + 1024
    );
    assert!(eventually(
        || tracker.stats().requests.oversized_messages == 1
    ));
    // An answer whose description is not an object is refused, not relayed.
    recipient.announce(
        torrent,
        id("recipient"),
        json!({
            "to_peer_id": chars(id("sender")),
            "offer_id": chars(offer.offer_id),
            "answer": "not a description",
        }),
    );
    assert!(error(recipient.receive()).contains("session description"));
}

#[test]
fn an_answer_goes_only_to_the_connection_that_made_the_offer() {
    // A peer id seen in an offer can be taken over once its connection closes; the
    // answers to that connection's offers must not go to whoever took it.
    let tracker = start(unlimited());
    let torrent = id("torrent");
    let mut recipient = joined(v4(&tracker), torrent, "recipient");
    let mut offerer = joined(v4(&tracker), torrent, "offerer");
    offerer.announce(
        torrent,
        id("offerer"),
        json!({"offers": offers("o", 1), "numwant": 1}),
    );
    offerer.receive();
    let ServerMessage::Offer(offer) = recipient.receive() else {
        panic!("an offer")
    };
    drop(offerer);
    // The squatter takes the peer id over once its owner left.
    let mut squatter = connect(v4(&tracker));
    assert!(eventually(|| {
        squatter.announce(torrent, id("offerer"), json!({}));
        matches!(squatter.receive(), ServerMessage::AnnounceResponse(_))
    }));
    recipient.announce(
        torrent,
        id("recipient"),
        json!({
            "to_peer_id": chars(id("offerer")),
            "offer_id": chars(offer.offer_id),
            "answer": {"type": "answer", "sdp": "meant for the offerer"},
        }),
    );
    assert!(error(recipient.receive()).starts_with("answer not relayed"));
    squatter
        .socket
        .get_ref()
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    assert!(
        squatter.socket.read().is_err(),
        "the squatter received nothing"
    );
}

#[test]
fn a_flood_of_offers_cannot_push_out_another_senders_pending_offer() {
    let mut config = unlimited();
    config.protocol.max_pending_offers = 8;
    let tracker = start(config);
    let torrent = id("torrent");
    let mut recipient = joined(v4(&tracker), torrent, "recipient");
    let mut flooder = joined(v4(&tracker), torrent, "flooder");
    let mut sender = joined(v4(&tracker), torrent, "sender");
    // The sender's offer goes to both others.
    sender.announce(
        torrent,
        id("sender"),
        json!({"offers": offers("s", 2), "numwant": 2}),
    );
    sender.receive();
    let offer = loop {
        match recipient.receive() {
            ServerMessage::Offer(offer) if offer.peer_id == id("sender") => break offer,
            _ => {}
        }
    };
    // Then the flooder sends the recipient (and the sender) 20 more.
    for round in 0..10 {
        flooder.announce(
            torrent,
            id("flooder"),
            json!({"offers": offers(&format!("f{round}-"), 2), "numwant": 2}),
        );
        flooder.receive();
    }
    recipient.announce(
        torrent,
        id("recipient"),
        json!({
            "to_peer_id": chars(id("sender")),
            "offer_id": chars(offer.offer_id),
            "answer": {"type": "answer", "sdp": "still pending"},
        }),
    );
    // Relayed: the sender gets the answer (skipping the flooder's offers to it).
    loop {
        match sender.receive() {
            ServerMessage::Answer(answer) => {
                assert_eq!(answer.offer_id, offer.offer_id);
                break;
            }
            ServerMessage::Offer(_) => {}
            other => panic!("expected the answer, got {other:?}"),
        }
    }
}

#[test]
fn answers_count_against_the_request_rate() {
    let mut config = unlimited();
    config.limits.max_requests_per_second = 1;
    config.limits.request_burst = 3;
    let tracker = start(config);
    let mut client = connect(v4(&tracker));
    let torrent = id("torrent");
    let answer = json!({
        "to_peer_id": chars(id("nobody")),
        "offer_id": chars(id("offer")),
        "answer": {"type": "answer", "sdp": "x"},
    });
    let mut limited = 0;
    for _ in 0..6 {
        client.announce(torrent, id("me"), answer.clone());
        if error(client.receive()) == "too many requests, slow down" {
            limited += 1;
        }
    }
    assert!(limited >= 2, "{limited} of 6 answers limited");
}

#[test]
fn a_connection_that_never_says_anything_gets_the_handshakes_time_not_the_idle_timeout() {
    let mut config = unlimited();
    config.network.handshake_timeout = 1;
    config.network.idle_timeout = 300;
    let tracker = start(config);
    let started = Instant::now();
    let mut silent = connect(v4(&tracker));
    let mut talker = connect(v4(&tracker));
    talker.announce(id("torrent"), id("talker"), json!({}));
    talker.receive();
    assert_eq!(
        silent.close_frame().map(|frame| frame.code),
        Some(CloseCode::Away)
    );
    assert!(started.elapsed() < Duration::from_secs(3));
    // One that announced has the idle timeout: still served.
    talker.announce(id("torrent"), id("talker"), json!({}));
    assert!(matches!(
        talker.receive(),
        ServerMessage::AnnounceResponse(_)
    ));
}

#[test]
fn pings_do_not_keep_a_connection_from_being_idle() {
    let mut config = unlimited();
    config.protocol.announce_interval = 1;
    config.network.idle_timeout = 2;
    let tracker = start(config);
    let mut client = connect(v4(&tracker));
    client
        .socket
        .get_mut()
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let started = Instant::now();
    let mut closed = None;
    while started.elapsed() < Duration::from_secs(5) && closed.is_none() {
        let _ = client.socket.send(Message::Ping(vec![1].into()));
        match client.socket.read() {
            Ok(Message::Close(frame)) => closed = frame,
            Ok(_) => {}
            Err(tungstenite::Error::Io(err))
                if matches!(
                    err.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
    }
    assert_eq!(closed.map(|frame| frame.code), Some(CloseCode::Away));
    assert!(started.elapsed() < Duration::from_secs(4));
    assert!(eventually(|| tracker.stats().requests.idle_timeouts == 1));
}

#[test]
fn a_reader_that_does_not_read_loses_offers_not_its_connection() {
    let mut config = unlimited();
    config.limits.max_outgoing_messages = 100_000;
    config.limits.max_message_size = 16 * 1024;
    config.limits.max_frame_size = 16 * 1024;
    config.limits.max_outgoing_bytes = 32 * 1024;
    let tracker = start(config);
    let torrent = id("torrent");
    let mut sleeper = joined_small(v4(&tracker), torrent, "sleeper");
    let mut sender = connect(v4(&tracker));
    // Offers for it fill its queue: the oldest give way, it stays.
    offer_until(&mut sender, torrent, &big_offer(8 * 1024), 4000, || {
        tracker.stats().requests.offers_dropped > 0
    });
    assert!(eventually(|| tracker.stats().requests.offers_dropped > 0));
    assert_eq!(tracker.stats().requests.slow_readers, 0);
    // Once it reads, it is served: it reads the offers that were kept, then its reply.
    sleeper.announce(torrent, id("sleeper"), json!({}));
    while !matches!(sleeper.receive(), ServerMessage::AnnounceResponse(_)) {}
}

/// The attack of issue 41: one address with ten connections sending announces with
/// four 15 KB offers each got an honest seeder closed as "reads too slowly" within
/// 2 s, and the flooders stayed. Now the flooders' offers past their budget are not
/// forwarded, the seeder's oldest offers give way in its full queue, and it stays.
#[test]
fn an_offer_flood_costs_the_flooder_not_the_honest_reader() {
    let mut config = unlimited();
    config.socket_workers = 1;
    config.limits.max_outgoing_bytes = 256 * 1024;
    let tracker = start(config);
    let server = v4(&tracker);
    let torrent = id("flooded");
    let mut seeder = joined_small(server, torrent, "seeder");
    let offer = big_offer(15 * 1000);
    let flooders: Vec<_> = (0..10)
        .map(|n| {
            let offers = offers_of(&offer, 4);
            std::thread::spawn(move || {
                let mut flooder = connect_from("127.0.9.1", server);
                let started = Instant::now();
                let mut sent = 0;
                while started.elapsed() < Duration::from_secs(3) {
                    let peer = id(&format!("flooder{n}"));
                    flooder.announce(torrent, peer, json!({ "offers": offers.clone() }));
                    // Reads what comes (others' offers too) up to its reply.
                    while !matches!(flooder.receive(), ServerMessage::AnnounceResponse(_)) {}
                    sent += 1;
                }
                sent
            })
        })
        .collect();
    // The seeder reads slowly meanwhile: one message every 20 ms.
    seeder
        .socket
        .get_ref()
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let started = Instant::now();
    let mut offers = 0;
    while started.elapsed() < Duration::from_secs(3) {
        match seeder.socket.read() {
            Ok(Message::Text(_)) => offers += 1,
            Ok(Message::Close(frame)) => panic!("the seeder was closed: {frame:?}"),
            Ok(_) => {}
            Err(err) if timed_out(&err) => {}
            Err(err) => panic!("the seeder was cut off after {offers} offers: {err}"),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    seeder
        .socket
        .get_ref()
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    for flooder in flooders {
        assert!(flooder.join().unwrap() > 0);
    }
    let requests = tracker.stats().requests;
    assert_eq!(requests.slow_readers, 0, "{requests:?}");
    assert!(requests.offers_over_budget > 0, "{requests:?}");
    assert!(offers > 0);
    // Still in the swarm, still served.
    seeder.announce(torrent, id("seeder"), json!({}));
    while !matches!(seeder.receive(), ServerMessage::AnnounceResponse(_)) {}
}

/// `count` copies of `offer` as an announce's offers (each its own offer id).
fn offers_of(offer: &serde_json::Value, count: usize) -> serde_json::Value {
    let one = offer.as_array().unwrap()[0].clone();
    serde_json::Value::Array(
        (0..count)
            .map(|n| {
                let mut copy = one.clone();
                copy["offer_id"] = json!(chars(id(&format!("offer{n}"))));
                copy
            })
            .collect(),
    )
}

#[test]
fn readers_that_never_read_lose_offers_to_the_worker_budget_and_a_prompt_reader_keeps_up() {
    // No connection can reach its own limits here: only the worker's budget acts.
    let mut config = unlimited();
    config.socket_workers = 1;
    config.limits.max_outgoing_messages = 1_000_000;
    config.limits.max_outgoing_bytes = 1 << 30;
    config.limits.max_message_size = 32 * 1024;
    config.limits.max_frame_size = 32 * 1024;
    config.limits.max_description_size = 32 * 1024;
    config.limits.max_outgoing_bytes_per_worker = 64 * 1024;
    let tracker = start(config);
    let torrent = id("torrent");
    let mut sleepers: Vec<_> = (0..2)
        .map(|i| joined_small(v4(&tracker), torrent, &format!("sleeper{i}")))
        .collect();
    let mut reader = joined(v4(&tracker), torrent, "reader");
    reader
        .socket
        .get_ref()
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reading = {
        let stop = std::sync::Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut offers = 0;
            loop {
                match reader.socket.read() {
                    Ok(Message::Text(_)) => offers += 1,
                    Ok(Message::Close(_)) => return (offers, false),
                    Ok(_) => {}
                    Err(err) if timed_out(&err) => {
                        if stop.load(std::sync::atomic::Ordering::Relaxed) {
                            return (offers, true);
                        }
                    }
                    Err(_) => return (offers, false),
                }
            }
        })
    };
    let mut sender = connect(v4(&tracker));
    offer_until(&mut sender, torrent, &big_offer(16 * 1024), 10_000, || {
        tracker.stats().requests.offers_dropped >= 10
    });
    assert!(eventually(|| tracker.stats().requests.offers_dropped >= 10));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (offers, open) = reading.join().unwrap();
    assert!(open, "the prompt reader was closed after {offers} offers");
    assert!(offers > 0);
    assert_eq!(tracker.stats().requests.slow_readers, 0);
    // The sleepers lost offers, not their connections: once they read, they are
    // served.
    for (n, sleeper) in sleepers.iter_mut().enumerate() {
        sleeper.announce(torrent, id(&format!("sleeper{n}")), json!({}));
        while !matches!(sleeper.receive(), ServerMessage::AnnounceResponse(_)) {}
    }
}

#[test]
fn the_outgoing_gauge_shows_what_waits_for_a_reader_that_never_reads() {
    let mut config = unlimited();
    config.socket_workers = 1;
    config.limits.max_outgoing_messages = 1_000_000;
    config.limits.max_outgoing_bytes = 1 << 30;
    let tracker = start(config);
    let torrent = id("torrent");
    let _sleeper = joined(v4(&tracker), torrent, "sleeper");
    let mut sender = connect(v4(&tracker));
    // Once the kernel's buffers are full, offers wait in the tracker; the gauge is
    // set every tick (100 ms).
    let sent = offer_until(&mut sender, torrent, &big_offer(8 * 1024), 20_000, || {
        tracker.stats().requests.outgoing_bytes > 0
    });
    assert!(eventually(|| tracker.stats().requests.outgoing_bytes > 0));
    // Nothing is read and nothing more is sent: what waits stays, and is no more
    // than what was sent.
    std::thread::sleep(Duration::from_millis(300));
    let held = tracker.stats().requests.outgoing_bytes;
    assert!(held > 0);
    assert!(
        held <= sent as u64 * (8 * 1024 + 1024),
        "{held} bytes held after {sent} offers"
    );
    assert_eq!(tracker.stats().requests.slow_readers, 0);
}

/// The start of a client's text frame of `declared` payload bytes (masked with a zero
/// key, so the payload goes as it is): its header and `payload`, the first bytes.
fn text_frame_start(declared: usize, payload: &[u8]) -> Vec<u8> {
    let mut frame = vec![0x81, 0x80 | 126];
    frame.extend_from_slice(&u16::try_from(declared).unwrap().to_be_bytes());
    frame.extend_from_slice(&[0; 4]);
    frame.extend_from_slice(payload);
    frame
}

/// An announce for `peer` in `torrent`, padded with leading spaces to `size` bytes.
fn padded_announce(torrent: Id20, peer: &str, size: usize) -> Vec<u8> {
    let announce = json!({
        "action": "announce",
        "info_hash": chars(torrent),
        "peer_id": chars(id(peer)),
        "numwant": 0,
    })
    .to_string();
    let mut padded = vec![b' '; size - announce.len()];
    padded.extend_from_slice(announce.as_bytes());
    padded
}

#[test]
fn messages_sent_in_part_are_cut_off_by_the_worker_budget_oldest_first() {
    let mut config = unlimited();
    config.socket_workers = 1;
    config.limits.max_message_size = 64 * 1024;
    config.limits.max_frame_size = 64 * 1024;
    config.limits.max_incoming_bytes_per_worker = 128 * 1024;
    let tracker = start(config);
    let torrent = id("torrent");
    // (peer, message size, bytes sent of it): each part counts whole, as its frame
    // header declares (the parser sets that much aside), not as sent.
    let parts = [
        ("first", 40_000, 20_000),
        ("second", 65_000, 50_000),
        ("late", 30_000, 10_000),
    ];
    let mut senders: Vec<_> = parts
        .into_iter()
        .map(|(peer, size, sent)| {
            let mut client = joined(v4(&tracker), torrent, peer);
            let message = padded_announce(torrent, peer, size);
            let before = tracker.stats().requests.incoming_bytes;
            (client.socket.get_mut())
                .write_all(&text_frame_start(size, &message[..sent]))
                .unwrap();
            // Each part is in before the next client sends: the gauge (set every
            // 100 ms) has seen it.
            if peer != "late" {
                let declared = 8 + size as u64;
                assert!(eventually(|| {
                    tracker.stats().requests.incoming_bytes >= before + declared
                }));
            }
            (client, message, sent)
        })
        .collect();
    // The late one took the worker past 128 KiB (40,008 + 65,008 + 30,008): the
    // oldest part went, with its connection, and only it, though another is larger.
    let (first, _, _) = &mut senders[0];
    let frame = first.close_frame().expect("a close frame");
    assert_eq!(frame.code, CloseCode::Policy);
    assert_eq!(frame.reason.as_str(), "message arriving too slowly");
    assert!(eventually(|| tracker.stats().requests.slow_senders == 1));
    for (client, message, sent) in &mut senders[1..] {
        client
            .socket
            .get_mut()
            .write_all(&message[*sent..])
            .unwrap();
        assert!(matches!(
            client.receive(),
            ServerMessage::AnnounceResponse(_)
        ));
    }
    assert!(eventually(|| tracker.stats().requests.incoming_bytes == 0));
    assert_eq!(tracker.stats().requests.slow_senders, 1);
}

#[test]
fn one_address_cannot_take_every_connection() {
    let mut config = unlimited();
    config.per_ip.max_connections = 2;
    let tracker = start(config);
    let server = v4(&tracker);
    let _first = connect_from("127.0.0.11", server);
    let _second = connect_from("127.0.0.11", server);
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket
        .bind(&"127.0.0.11:0".parse::<SocketAddr>().unwrap().into())
        .unwrap();
    socket.connect(&server.into()).unwrap();
    let mut third: TcpStream = socket.into();
    third
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut response = String::new();
    let _ = std::io::Read::read_to_string(&mut third, &mut response);
    assert!(response.starts_with("HTTP/1.1 503"), "{response:?}");
    let _other = connect_from("127.0.0.12", server);
    assert!(eventually(|| tracker
        .stats()
        .requests
        .connections
        .refused_per_ip
        == 1));
}

/// A ws:// connection from the loopback address `local`, its opening request carrying
/// `X-Forwarded-For: forwarded` when given; the refusal's status if it was refused.
fn open_with_header(
    local: &str,
    server: SocketAddr,
    forwarded: Option<&str>,
) -> Result<Client<TcpStream>, u16> {
    let header = forwarded.map(|address| ("X-Forwarded-For", address));
    upgrade_with_header(tcp_from(local, server), server, header).map_err(|(status, _)| status)
}

#[test]
fn behind_a_trusted_proxy_the_limits_apply_to_each_forwarded_client() {
    // nginx in front (127.0.0.1 here) speaks for every browser: the per-client
    // limits must see the browsers, not the proxy, or one abusive browser would get
    // the proxy's address banned and the whole tracker with it.
    let mut config = unlimited();
    config.network.reverse_proxy_ip_header = "X-Forwarded-For".into();
    config.network.reverse_proxy_trusted = vec!["127.0.0.1".parse().unwrap()];
    config.per_ip.max_connections = 1;
    let tracker = start(config);
    let server = v4(&tracker);

    let mut first = open_with_header("127.0.0.1", server, Some("192.0.2.1")).unwrap();
    assert_eq!(
        open_with_header("127.0.0.1", server, Some("192.0.2.1")).err(),
        Some(503),
        "a second connection of the same browser is over its limit"
    );
    let mut other = open_with_header("127.0.0.1", server, Some("192.0.2.2")).unwrap();
    for (client, peer) in [(&mut first, "first"), (&mut other, "other")] {
        client.announce(id("torrent"), id(peer), json!({}));
        assert!(matches!(
            client.receive(),
            ServerMessage::AnnounceResponse(_)
        ));
    }
    // Through the proxy without the header: refused, not served as the proxy.
    assert_eq!(open_with_header("127.0.0.1", server, None).err(), Some(400));
    // From anywhere else the header is not believed: the connection is its own
    // client, limited as such.
    let _direct = open_with_header("127.0.0.20", server, Some("192.0.2.3")).unwrap();
    assert_eq!(
        open_with_header("127.0.0.20", server, Some("192.0.2.4")).err(),
        Some(503)
    );
}

#[test]
fn one_address_is_limited_over_all_its_connections() {
    let mut config = loopback_config();
    config.per_ip.requests_per_second = 1;
    config.per_ip.burst = 4;
    let tracker = start(config);
    let server = v4(&tracker);
    let mut clients: Vec<_> = (0..3).map(|_| connect_from("127.0.0.13", server)).collect();
    let mut limited = 0;
    for round in 0..3 {
        for (n, client) in clients.iter_mut().enumerate() {
            client.announce(id("torrent"), id(&format!("p{round}c{n}")), json!({}));
            if let ServerMessage::Error(error) = client.receive() {
                assert_eq!(
                    error.reason,
                    "too many requests from your address, slow down"
                );
                limited += 1;
            }
        }
    }
    // A connection counts like a request: three took three of the burst of 4, so
    // one of the 9 requests was allowed (two if a second passed meanwhile).
    assert!((7..=8).contains(&limited), "{limited} limited");
    let mut other = connect_from("127.0.0.14", server);
    other.announce(id("torrent"), id("other"), json!({}));
    assert!(matches!(
        other.receive(),
        ServerMessage::AnnounceResponse(_)
    ));
}

#[test]
fn a_flood_of_fresh_info_hashes_gives_way_and_real_swarms_do_not() {
    let mut config = unlimited();
    config.capacity.max_torrents = 10;
    let tracker = start(config);
    let mut client = connect(v4(&tracker));
    for n in 0..10 {
        client.announce(id(&format!("t{n}")), id("me"), json!({}));
        assert!(matches!(
            client.receive(),
            ServerMessage::AnnounceResponse(_)
        ));
    }
    // Full of torrents with one peer each: the oldest gives way.
    client.announce(id("t99"), id("me"), json!({}));
    assert!(matches!(
        client.receive(),
        ServerMessage::AnnounceResponse(_)
    ));
    assert!(eventually(|| tracker.stats().torrents_evicted == 1));
    // Every torrent with two peers: a new one is refused.
    let mut other = connect(v4(&tracker));
    for n in (1..10).map(|n| format!("t{n}")).chain(["t99".to_string()]) {
        other.announce(id(&n), id("other"), json!({}));
        assert!(matches!(
            other.receive(),
            ServerMessage::AnnounceResponse(_)
        ));
    }
    client.announce(id("t100"), id("me"), json!({}));
    assert_eq!(
        error(client.receive()),
        "tracker full: no new torrents accepted"
    );
    assert!(eventually(|| tracker.stats().torrents_refused == 1));
}

/// The attack of issue 41: connections that each announce once and then stay quiet,
/// from many addresses, took every slot and kept it (an honest client got 503 on 30
/// of 30 tries). Now the connection quiet the longest gives way to a newcomer, and a
/// connection that keeps talking keeps its place.
#[test]
fn quiet_connections_from_many_addresses_give_way_to_newcomers() {
    let mut config = unlimited();
    config.socket_workers = 1;
    config.network.max_connections = 60;
    let tracker = start(config);
    let server = v4(&tracker);
    let mut talker = connect_from("127.0.4.99", server);
    talker.announce(id("held"), id("talker"), json!({}));
    talker.receive();
    let mut quiet: Vec<Client<TcpStream>> = (0..59)
        .map(|n| {
            let mut client = connect_from(&format!("127.0.4.{}", n % 20 + 1), server);
            client.announce(id("held"), id(&format!("quiet{n}")), json!({}));
            client.receive();
            client
        })
        .collect();
    assert!(eventually(
        || tracker.stats().requests.connections.open == 60
    ));
    // The talker speaks after them all: it is the newest now.
    talker.announce(id("held"), id("talker"), json!({}));
    talker.receive();
    let mut newcomers = Vec::new();
    for n in 0..30 {
        let mut newcomer = connect_from("127.0.5.1", server);
        newcomer.announce(id("fresh"), id(&format!("newcomer{n}")), json!({}));
        assert!(
            matches!(newcomer.receive(), ServerMessage::AnnounceResponse(_)),
            "newcomer {n}"
        );
        newcomers.push(newcomer);
    }
    // The 30 oldest quiet ones were told why they go; the talker stays.
    for (n, client) in quiet.iter_mut().enumerate().take(30) {
        let frame = client.close_frame().map(|frame| frame.code);
        assert_eq!(frame, Some(CloseCode::Again), "quiet connection {n}");
    }
    talker.announce(id("held"), id("talker"), json!({}));
    assert!(matches!(
        talker.receive(),
        ServerMessage::AnnounceResponse(_)
    ));
    let requests = tracker.stats().requests;
    assert!(
        eventually(|| tracker.stats().requests.connections.idle_evicted == 30),
        "{requests:?}"
    );
    assert_eq!(tracker.stats().requests.connections.refused, 0);
}

/// What a refused connection from `local` reads: the tracker's 503, whole.
fn refusal_from(local: &str, server: SocketAddr) -> String {
    let mut stream = tcp_from(local, server);
    let mut response = String::new();
    let _ = std::io::Read::read_to_string(&mut stream, &mut response);
    response
}

/// Holding a worker's slots takes many addresses from many networks: 32 connections
/// per address and 1,024 per network (IPv4 /24, IPv6 /48) by default, where 256 per
/// address let 196 addresses (or one IPv6 /56) hold all 50,000.
#[test]
fn holding_every_slot_takes_addresses_from_many_networks() {
    let defaults = shoal_ws::Config::default();
    assert_eq!(defaults.per_ip.max_connections, 32);
    assert_eq!(defaults.per_ip.max_connections_per_network, 1024);
    assert!(defaults.network.max_connections > 24 * defaults.per_ip.max_connections_per_network);
    let mut config = unlimited();
    config.per_ip.max_connections = 3;
    config.per_ip.max_connections_per_network = 5;
    let tracker = start(config);
    let server = v4(&tracker);
    let _held: Vec<_> = (0..3)
        .map(|_| connect_from("127.0.7.1", server))
        .chain((0..2).map(|_| connect_from("127.0.7.2", server)))
        .collect();
    let by_address = refusal_from("127.0.7.1", server);
    assert!(by_address.starts_with("HTTP/1.1 503"), "{by_address:?}");
    let by_network = refusal_from("127.0.7.3", server);
    assert!(by_network.starts_with("HTTP/1.1 503"), "{by_network:?}");
    // Another /24 is another network.
    let mut other = connect_from("127.0.8.1", server);
    other.announce(id("t"), id("other"), json!({}));
    assert!(matches!(
        other.receive(),
        ServerMessage::AnnounceResponse(_)
    ));
    assert!(eventually(|| tracker
        .stats()
        .requests
        .connections
        .refused_per_ip
        == 2));
}
