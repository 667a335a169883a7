//! The WebSocket session's rules, driven without sockets.

use std::time::{Duration, Instant};

use shoal_worker::Verdict;
use shoal_ws_protocol::{
    AnnounceEvent, AnnounceRequest, AnnounceResponse, ClientMessage, Id20, ScrapeFile,
    ScrapeRequest, ServerMessage, WebRtcAnswer, write_client_message,
};

use super::rig::{TestHost, Transcript, client_frame, server_frames, step};
use super::{ANSWER_REFUSED, BUSY, NOT_ALLOWED, Next, RATE_LIMITED};
use crate::Config;
use crate::messages::{RequestKind, ToConnection};

const TEXT: u8 = 1;
const BINARY: u8 = 2;
const PING: u8 = 9;

fn announce_of(hash: u8, peer: u8) -> AnnounceRequest {
    AnnounceRequest {
        info_hash: Id20([hash; 20]),
        peer_id: Id20([peer; 20]),
        event: AnnounceEvent::Started,
        left: Some(0),
        uploaded: None,
        downloaded: None,
        numwant: Some(0),
        offers: Vec::new(),
        answer: None,
    }
}

fn text_frame(message: &ClientMessage) -> Vec<u8> {
    let mut json = Vec::new();
    write_client_message(message, &mut json);
    client_frame(TEXT, &json)
}

fn announce(hash: u8, peer: u8) -> Vec<u8> {
    text_frame(&ClientMessage::Announce(announce_of(hash, peer)))
}

fn scrape(hashes: &[u8]) -> Vec<u8> {
    text_frame(&ClientMessage::Scrape(ScrapeRequest {
        info_hashes: hashes.iter().map(|&h| Id20([h; 20])).collect(),
    }))
}

fn reply(hash: u8) -> ToConnection {
    ToConnection::Message(ServerMessage::AnnounceResponse(AnnounceResponse {
        info_hash: Id20([hash; 20]),
        complete: 1,
        incomplete: 0,
        interval: 120,
    }))
}

fn host() -> TestHost {
    TestHost::new(Config::default(), 1)
}

#[test]
fn an_announce_goes_to_its_swarm_worker_and_its_reply_is_written() {
    let host = TestHost::new(Config::default(), 3);
    let start = Instant::now();
    let mut session = host.session(Vec::new(), start);
    let mut transcript = Transcript::default();
    session.start(start);
    assert!(session.received(&mut announce(7, 1), start));
    step(&mut session, start, &mut transcript);
    assert!(
        transcript.frames.is_empty(),
        "nothing to write until the reply"
    );
    let submitted = host.submitted.borrow_mut().drain(..).collect::<Vec<_>>();
    assert_eq!(submitted.len(), 1);
    assert_eq!(submitted[0].0, shoal_worker::shard_for(&[7; 20], 3));
    assert!(matches!(submitted[0].1.kind, RequestKind::Announce(_)));

    let later = start + Duration::from_millis(30);
    session.queue().push(reply(7));
    step(&mut session, later, &mut transcript);
    assert_eq!(transcript.frames.len(), 1);
    assert_eq!(transcript.frames[0].opcode, TEXT);
    assert!(transcript.frames[0].text().contains("\"interval\":120"));
    assert_eq!(*host.latencies.borrow(), [Duration::from_millis(30)]);
    let counters = host.counters.borrow();
    assert_eq!((counters.announces, counters.announce_responses), (1, 1));
}

#[test]
fn frames_that_came_with_the_opening_request_are_served_at_start() {
    let host = host();
    let start = Instant::now();
    let mut session = host.session(announce(1, 1), start);
    assert!(session.start(start), "a tracker message was among them");
    assert_eq!(host.submitted.borrow().len(), 1);
}

#[test]
fn a_quiet_connection_gets_the_handshake_time_then_the_idle_timeout() {
    let host = host();
    let config = &host.config;
    let (handshake, idle) = (
        Duration::from_secs(config.network.handshake_timeout.into()),
        Duration::from_secs(config.network.idle_timeout.into()),
    );
    let start = Instant::now();
    let mut session = host.session(Vec::new(), start);
    let mut transcript = Transcript::default();
    session.start(start);
    step(&mut session, start, &mut transcript);
    assert_eq!(transcript.waiting_until, Some(start + handshake.min(idle)));

    // A ping is not a tracker message: the deadline stays.
    let later = start + Duration::from_secs(1);
    assert!(!session.received(&mut client_frame(PING, b"hi"), later));
    step(&mut session, later, &mut transcript);
    assert_eq!(
        transcript.frames.last().map(|f| f.opcode),
        Some(10),
        "a pong"
    );
    assert_eq!(transcript.waiting_until, Some(start + handshake.min(idle)));

    // A tracker message gives it the idle timeout from then.
    assert!(session.received(&mut announce(1, 1), later));
    step(&mut session, later, &mut transcript);
    assert_eq!(transcript.waiting_until, Some(later + idle));

    // At the deadline it closes, counted.
    step(&mut session, later + idle, &mut transcript);
    assert_eq!(
        transcript.frames.last().and_then(|f| f.close_code()),
        Some(1001)
    );
    assert!(transcript.closed);
    assert_eq!(host.counters.borrow().idle_timeouts, 1);
}

#[test]
fn binary_oversized_and_malformed_frames_close_with_their_codes() {
    let cases: [(Vec<u8>, u16); 3] = [
        (client_frame(BINARY, b"\x00\x01"), 1003),
        (client_frame(TEXT, &vec![b'x'; 70_000]), 1009),
        // An unmasked client frame breaks the protocol.
        (vec![0x81, 0x02, b'h', b'i'], 1002),
    ];
    for (mut bytes, code) in cases {
        let host = host();
        let start = Instant::now();
        let mut session = host.session(Vec::new(), start);
        let mut transcript = Transcript::default();
        session.received(&mut bytes, start);
        step(&mut session, start, &mut transcript);
        assert_eq!(
            transcript.frames.last().and_then(|f| f.close_code()),
            Some(code)
        );
        assert!(transcript.closed, "{code}");
    }
}

#[test]
fn bad_json_gets_an_error_and_the_connection_stays() {
    let host = host();
    let start = Instant::now();
    let mut session = host.session(Vec::new(), start);
    let mut transcript = Transcript::default();
    session.received(&mut client_frame(TEXT, b"{\"action\":\"nonsense\"}"), start);
    step(&mut session, start, &mut transcript);
    assert!(transcript.frames[0].text().contains("failure reason"));
    assert!(!transcript.closed);
    assert_eq!(host.counters.borrow().bad_messages, 1);
}

#[test]
fn over_the_connections_rate_its_requests_are_refused() {
    let mut config = Config::default();
    config.limits.max_requests_per_second = 1;
    config.limits.request_burst = 2;
    let host = TestHost::new(config, 1);
    let start = Instant::now();
    let mut session = host.session(Vec::new(), start);
    let mut transcript = Transcript::default();
    for hash in 1..=3 {
        session.received(&mut announce(hash, 1), start);
    }
    step(&mut session, start, &mut transcript);
    assert_eq!(host.submitted.borrow().len(), 2, "the burst");
    assert!(transcript.frames[0].text().contains(RATE_LIMITED));
    assert_eq!(host.counters.borrow().rate_limited, 1);
    // A second later there is one more.
    host.time.set(shoal_swarm::ServerTime(101));
    session.received(&mut announce(4, 1), start);
    assert_eq!(host.submitted.borrow().len(), 3);
}

#[test]
fn a_banned_client_is_closed_and_a_limited_one_refused() {
    let host = host();
    host.verdict.set(Verdict::Limited);
    let start = Instant::now();
    let mut session = host.session(Vec::new(), start);
    let mut transcript = Transcript::default();
    session.received(&mut announce(1, 1), start);
    step(&mut session, start, &mut transcript);
    assert!(transcript.frames[0].text().contains("from your address"));
    assert!(!transcript.closed);

    host.verdict.set(Verdict::Banned);
    session.received(&mut announce(1, 1), start);
    step(&mut session, start, &mut transcript);
    assert_eq!(
        transcript.frames.last().and_then(|f| f.close_code()),
        Some(1008)
    );
    assert!(transcript.closed);
    assert!(host.submitted.borrow().is_empty());
}

#[test]
fn refused_torrents_and_unasked_answers_never_reach_a_swarm_worker() {
    let host = host();
    host.denied.borrow_mut().push([9; 20]);
    let start = Instant::now();
    let mut session = host.session(Vec::new(), start);
    let mut transcript = Transcript::default();
    session.received(&mut announce(9, 1), start);
    let mut answer = announce_of(2, 1);
    answer.answer = Some(WebRtcAnswer {
        to_peer_id: Id20([3; 20]),
        offer_id: Id20([4; 20]),
        answer: serde_json::value::RawValue::from_string("{}".into()).unwrap(),
    });
    session.received(&mut text_frame(&ClientMessage::Announce(answer)), start);
    step(&mut session, start, &mut transcript);
    assert!(host.submitted.borrow().is_empty());
    assert!(transcript.frames[0].text().contains(NOT_ALLOWED));
    assert!(transcript.frames[1].text().contains(ANSWER_REFUSED));
    let counters = host.counters.borrow();
    assert_eq!((counters.access_denied, counters.answers_refused), (1, 1));
}

#[test]
fn a_scrape_over_several_workers_is_answered_once_whole() {
    let host = TestHost::new(Config::default(), 4);
    let start = Instant::now();
    let mut session = host.session(Vec::new(), start);
    let mut transcript = Transcript::default();
    let hashes: Vec<u8> = (1..=12).collect();
    session.received(&mut scrape(&hashes), start);
    let parts: Vec<_> = host.submitted.borrow_mut().drain(..).collect();
    assert!(parts.len() > 1);
    for (worker, request) in parts {
        let RequestKind::Scrape {
            scrape_id,
            info_hashes,
        } = request.kind
        else {
            panic!("a scrape part");
        };
        assert!(
            info_hashes
                .iter()
                .all(|h| shoal_worker::shard_for(&h.0, 4) == worker)
        );
        let files = info_hashes
            .into_iter()
            .map(|h| (h, ScrapeFile::default()))
            .collect();
        session
            .queue()
            .push(ToConnection::ScrapePart { scrape_id, files });
        step(&mut session, start, &mut transcript);
    }
    assert_eq!(transcript.frames.len(), 1, "one reply for all parts");
    let text = transcript.frames[0].text();
    assert_eq!(text.matches("\"complete\"").count(), 12, "{text}");
}

#[test]
fn one_shed_part_fails_the_scrape_with_one_error() {
    let host = TestHost::new(Config::default(), 4);
    let start = Instant::now();
    let mut session = host.session(Vec::new(), start);
    let mut transcript = Transcript::default();
    session.received(&mut scrape(&(1..=12).collect::<Vec<u8>>()), start);
    let parts: Vec<_> = host.submitted.borrow_mut().drain(..).collect();
    for (_, request) in parts {
        let RequestKind::Scrape { scrape_id, .. } = request.kind else {
            panic!("a scrape part");
        };
        session.queue().push(ToConnection::Shed {
            info_hash: None,
            scrape_id: Some(scrape_id),
        });
    }
    step(&mut session, start, &mut transcript);
    assert_eq!(transcript.frames.len(), 1);
    let text = transcript.frames[0].text();
    assert!(text.contains(BUSY), "{text}");
    // With the interval to come back after (the rig's backoff: twice 120 s).
    assert!(text.contains("\"interval\":240"), "{text}");
}

#[test]
fn a_shed_announce_and_a_full_tracker_say_when_to_come_back() {
    let host = TestHost::new(Config::default(), 1);
    let start = Instant::now();
    let mut session = host.session(Vec::new(), start);
    let mut transcript = Transcript::default();
    session.queue().push(ToConnection::Shed {
        info_hash: Some(Id20([1; 20])),
        scrape_id: None,
    });
    session
        .queue()
        .push(ToConnection::TrackerFull(Id20([2; 20]), 10_800));
    step(&mut session, start, &mut transcript);
    assert_eq!(transcript.frames.len(), 2);
    let (busy, full) = (transcript.frames[0].text(), transcript.frames[1].text());
    assert!(
        busy.contains(BUSY) && busy.contains("\"interval\":240"),
        "{busy}"
    );
    assert!(
        full.contains("tracker full") && full.contains("\"interval\":10800"),
        "{full}"
    );
    let counters = host.counters.borrow();
    assert_eq!(
        (counters.backoff_responses, counters.error_responses),
        (1, 1)
    );
}

#[test]
fn leaving_takes_every_announced_peer_out_of_its_swarm() {
    let host = TestHost::new(Config::default(), 2);
    let start = Instant::now();
    let mut session = host.session(Vec::new(), start);
    for hash in 1..=6 {
        session.received(&mut announce(hash, 1), start);
    }
    host.submitted.borrow_mut().clear();
    session.leave();
    let mut left: Vec<(Id20, Id20)> = Vec::new();
    for (worker, request) in host.submitted.borrow_mut().drain(..) {
        let RequestKind::Leave(peers) = request.kind else {
            panic!("leaves only");
        };
        assert!(
            peers
                .iter()
                .all(|(h, _)| shoal_worker::shard_for(&h.0, 2) == worker)
        );
        left.extend(peers);
    }
    left.sort_unstable_by_key(|(h, _)| h.0);
    let expected: Vec<_> = (1..=6).map(|h| (Id20([h; 20]), Id20([1; 20]))).collect();
    assert_eq!(left, expected);
    assert_eq!(host.unregistered.borrow().len(), 1);
}

#[test]
fn an_evicted_connection_closes_with_1013() {
    let host = host();
    let start = Instant::now();
    let mut session = host.session(Vec::new(), start);
    let mut transcript = Transcript::default();
    session.evicted();
    step(&mut session, start, &mut transcript);
    assert_eq!(
        transcript.frames.last().and_then(|f| f.close_code()),
        Some(1013)
    );
    assert!(transcript.closed);
}

#[test]
fn a_full_queue_closes_the_slow_reader() {
    let mut config = Config::default();
    config.limits.max_outgoing_messages = 2;
    let host = TestHost::new(config, 1);
    let start = Instant::now();
    let mut session = host.session(Vec::new(), start);
    let mut transcript = Transcript::default();
    for hash in 1..=3 {
        session.queue().push(reply(hash));
    }
    step(&mut session, start, &mut transcript);
    assert_eq!(
        transcript.frames.last().and_then(|f| f.close_code()),
        Some(1008)
    );
    assert!(transcript.closed);
    assert_eq!(host.counters.borrow().slow_readers, 1);
    assert_eq!(host.logged.get(), 1, "logged, within the budget");
}

#[test]
fn a_stalled_write_ends_the_connection_counted() {
    let host = host();
    let start = Instant::now();
    let mut session = host.session(Vec::new(), start);
    session.queue().push(reply(1));
    let Next::Write { deadline } = session.next(start) else {
        panic!("writes the reply");
    };
    session.write_failed(true, deadline);
    assert_eq!(session.next(deadline), Next::Close);
    assert_eq!(host.counters.borrow().slow_readers, 1);
}

#[test]
fn server_frames_round_trip_through_the_rig() {
    // The rig's framing is what the tests above rely on.
    let frame = client_frame(TEXT, b"hello");
    assert_eq!(frame[1] & 0x80, 0x80, "masked");
    let frames = server_frames(&[0x81, 0x02, b'h', b'i', 0x88, 0x02, 0x03, 0xE8]);
    assert_eq!(frames[0].text(), "hi");
    assert_eq!(frames[1].close_code(), Some(1000));
}

#[test]
fn a_private_connection_announces_registered_torrents_with_its_key_only() {
    const KEY: &str = "6f0d1b2c3d4e5f60718293a4b5c6d7e8";
    const SEEDER_ONLY: &str = "a1b2c3d4e5f60718293a4b5c6d7e8f90";
    let mut host = host();
    host.private = Some(
        shoal_private::Registry::parse(
            &format!("17 {KEY}\n18 {SEEDER_ONLY} noleech\n"),
            &format!("{} 1001\n", "01".repeat(20)),
        )
        .unwrap(),
    );
    let digest = |key: &str| shoal_private::Passkey::new(key.as_bytes()).map(|k| k.digest());
    let start = Instant::now();
    let mut transcript = Transcript::default();
    // The opener's key: a registered torrent is served, another is refused.
    let mut session = host.session(Vec::new(), start).with_key(digest(KEY));
    session.received(&mut announce(1, 1), start);
    session.received(&mut announce(2, 1), start);
    session.received(&mut scrape(&[1, 2]), start);
    step(&mut session, start, &mut transcript);
    assert_eq!(host.submitted.borrow().len(), 1);
    let unregistered = shoal_private::Refusal::Unregistered.reason();
    assert!(
        transcript.frames[0].text().contains(unregistered),
        "{:?}",
        transcript.frames
    );
    assert!(transcript.frames[1].text().contains(unregistered));
    // A seeding-only user may seed, not download.
    let mut session = host
        .session(Vec::new(), start)
        .with_key(digest(SEEDER_ONLY));
    let mut leeching = announce_of(1, 2);
    leeching.left = Some(100);
    session.received(&mut text_frame(&ClientMessage::Announce(leeching)), start);
    let mut transcript = Transcript::default();
    step(&mut session, start, &mut transcript);
    assert!(
        transcript.frames[0]
            .text()
            .contains(shoal_private::Refusal::CannotLeech.reason())
    );
    assert_eq!(host.submitted.borrow().len(), 1);
    assert_eq!(host.counters.borrow().private_refused, 3);
    // It seeds, and answers a leecher's offer (an answer says nothing of what is
    // left): both go through.
    session.received(&mut announce(1, 2), start);
    let mut answer = announce_of(1, 2);
    answer.left = None;
    answer.answer = Some(WebRtcAnswer {
        to_peer_id: Id20([3; 20]),
        offer_id: Id20([4; 20]),
        answer: serde_json::value::RawValue::from_string("{}".into()).unwrap(),
    });
    session.received(&mut text_frame(&ClientMessage::Announce(answer)), start);
    step(&mut session, start, &mut transcript);
    assert_eq!(host.submitted.borrow().len(), 3);
    assert_eq!(host.counters.borrow().private_refused, 3);
}

#[test]
fn client_rules_refuse_by_peer_id_before_a_swarm_worker() {
    let mut host = host();
    host.client_rules = shoal_common::ClientRules::from_config(&shoal_common::ClientConfig {
        allow_peer_ids: vec!["-WW".into()],
        ..Default::default()
    })
    .unwrap();
    let start = Instant::now();
    let mut session = host.session(Vec::new(), start);
    let mut transcript = Transcript::default();
    let mut webtorrent = announce_of(1, 1);
    webtorrent.peer_id.0[..8].copy_from_slice(b"-WW0208-");
    session.received(&mut text_frame(&ClientMessage::Announce(webtorrent)), start);
    session.received(&mut announce(2, 2), start);
    step(&mut session, start, &mut transcript);
    assert_eq!(
        host.submitted.borrow().len(),
        1,
        "the WebTorrent client only"
    );
    let refused = transcript.frames.iter().any(|frame| {
        frame
            .text()
            .contains(shoal_common::ClientRefusal::PeerId.reason())
    });
    assert!(refused);
    let counters = host.counters.borrow();
    assert_eq!(counters.client_refused, 1);
    let webtorrent = shoal_common::KNOWN_CLIENTS
        .iter()
        .position(|(_, name)| *name == "WebTorrent")
        .unwrap();
    assert_eq!(counters.clients.0[webtorrent], 1);
}
