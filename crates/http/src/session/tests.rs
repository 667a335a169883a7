//! The HTTP session's rules, driven without sockets.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

use shoal_swarm::{PeerAddress, ServerTime};
use shoal_worker::Verdict;

use super::rig::{AtEnd, CLIENT, SwarmWorkers, TestHost, Transcript, check_response, drive};
use super::{AnnounceCall, BUSY, NOT_ALLOWED, NOT_STORED, RATE_LIMITED, Session};
use crate::Config;
use crate::messages::{AnnounceAnswer, AnnouncedPeers, CallError, ScrapeCounts, ScrapeWork};

/// `/announce` for the torrent whose hash is twenty `byte`s, with `extra` query
/// parameters and headers.
fn announce(byte: u8, extra: &str, headers: &str) -> Vec<u8> {
    let hash: String = (0..20).map(|_| format!("%{byte:02X}")).collect();
    format!(
        "GET /announce?info_hash={hash}&peer_id=-qB0000-000000000000&port=6881&left=0{extra} HTTP/1.1\r\nHost: t\r\n{headers}\r\n"
    )
    .into_bytes()
}

fn scrape(bytes: &[u8]) -> Vec<u8> {
    let query: Vec<String> = bytes
        .iter()
        .map(|b| {
            format!(
                "info_hash={}",
                (0..20).map(|_| format!("%{b:02X}")).collect::<String>()
            )
        })
        .collect();
    format!("GET /scrape?{} HTTP/1.1\r\n\r\n", query.join("&")).into_bytes()
}

/// Swarm workers that answer every announce with `peers` and every scrape with one
/// download per torrent.
struct Answering {
    announce: Result<AnnounceAnswer, CallError>,
    scrape_busy: bool,
}

impl Answering {
    fn peers(peers: AnnouncedPeers) -> Self {
        Self {
            announce: Ok(AnnounceAnswer::Peers {
                complete: 5,
                incomplete: 7,
                peers,
                full: false,
            }),
            scrape_busy: false,
        }
    }
}

impl SwarmWorkers for Answering {
    fn announce(&mut self, _: &AnnounceCall) -> Result<AnnounceAnswer, CallError> {
        self.announce.clone()
    }

    fn scrape(&mut self, parts: &[(usize, ScrapeWork)]) -> Result<ScrapeCounts, CallError> {
        if self.scrape_busy {
            return Err(CallError::Busy);
        }
        let stats = shoal_swarm::ScrapeStats {
            seeders: 1,
            leechers: 2,
            downloads: 3,
        };
        Ok(parts
            .iter()
            .flat_map(|(worker, work)| match work {
                ScrapeWork::Torrents(hashes) => hashes.clone(),
                // Two torrents of each worker's own.
                ScrapeWork::All => vec![[0xA0 + *worker as u8; 20], [0xB0 + *worker as u8; 20]],
            })
            .map(|hash| (hash, stats))
            .collect())
    }
}

fn compact_peer() -> Answering {
    Answering::peers(AnnouncedPeers::Compact(vec![1, 2, 3, 4, 0x1A, 0xE1]))
}

fn run(
    host: &TestHost,
    reads: &[&[u8]],
    swarms: &mut impl SwarmWorkers,
    at_end: AtEnd,
) -> Transcript {
    let start = Instant::now();
    let mut session = Session::new(CLIENT, &host.config, start);
    let transcript = drive(&mut session, host, reads, swarms, at_end, start);
    for write in &transcript.writes {
        check_response(write);
    }
    transcript
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn host() -> TestHost {
    TestHost::new(Config::default(), 1)
}

#[test]
fn pipelined_announces_are_answered_in_order_from_one_read() {
    let host = host();
    let mut both = announce(1, "", "");
    both.extend(announce(2, "&compact=1", ""));
    let transcript = run(&host, &[&both], &mut compact_peer(), AtEnd::Wait);
    assert_eq!(transcript.writes.len(), 2);
    let hashes: Vec<_> = transcript
        .announces
        .iter()
        .map(|c| c.work.info_hash)
        .collect();
    assert_eq!(hashes, [[1; 20], [2; 20]]);
    for write in &transcript.writes {
        let write = text(write);
        assert!(write.starts_with("HTTP/1.1 200 OK"), "{write}");
        assert!(write.contains("8:intervali1800e"), "{write}");
        assert!(write.contains("5:peers6:"), "{write}");
        assert!(!write.contains("Connection: close"), "{write}");
    }
    assert!(
        !transcript.closed,
        "kept alive, waiting for the next request"
    );
    let counters = host.counters.borrow();
    assert_eq!((counters.announces, counters.announce_responses), (2, 2));
    assert_eq!(host.latencies.borrow().len(), 2);
}

#[test]
fn a_request_split_over_many_reads_is_served_once_whole() {
    let host = host();
    let request = announce(3, "", "");
    let reads: Vec<&[u8]> = request.chunks(7).collect();
    let transcript = run(&host, &reads, &mut compact_peer(), AtEnd::Wait);
    assert_eq!(transcript.announces.len(), 1);
    assert_eq!(transcript.writes.len(), 1);
    assert_eq!(host.counters.borrow().bad_requests, 0);
}

#[test]
fn the_announce_carries_the_client_address_and_wanted_peers() {
    let host = host();
    let request = announce(4, "&numwant=500&event=started", "");
    let transcript = run(&host, &[&request], &mut compact_peer(), AtEnd::Wait);
    let work = transcript.announces[0].work;
    assert_eq!(work.peer, PeerAddress::new(CLIENT.ip(), 6881));
    assert_eq!(work.peers_wanted, 50, "capped at max_peers");
    assert!(work.seeder);
    assert_eq!(work.event, shoal_swarm::AnnounceEvent::Started);
}

#[test]
fn malformed_requests_get_400_and_close() {
    let host = host();
    let transcript = run(
        &host,
        &[b"GET /nothing HTTP/1.1\r\n\r\n"],
        &mut compact_peer(),
        AtEnd::Wait,
    );
    assert_eq!(transcript.writes.len(), 1);
    assert!(text(&transcript.writes[0]).starts_with("HTTP/1.1 404"));
    assert!(transcript.closed);
    let counters = host.counters.borrow();
    assert_eq!((counters.bad_requests, counters.error_responses), (1, 1));
    assert!(host.latencies.borrow().is_empty(), "no request was served");

    let host = self::host();
    let transcript = run(
        &host,
        &[b"\x00\x01garbage\r\n\r\n"],
        &mut compact_peer(),
        AtEnd::Wait,
    );
    assert!(text(&transcript.writes[0]).starts_with("HTTP/1.1 400"));
    assert!(transcript.closed);
}

#[test]
fn a_request_larger_than_the_buffer_is_refused() {
    let host = host();
    let long = announce(5, &"&x=y".repeat(2000), "");
    let transcript = run(&host, &[&long], &mut compact_peer(), AtEnd::Close);
    assert_eq!(transcript.writes.len(), 1, "{transcript:?}");
    assert!(text(&transcript.writes[0]).starts_with("HTTP/1.1 4"));
    assert!(transcript.closed);
}

#[test]
fn a_request_begun_but_not_finished_in_time_gets_408() {
    let host = host();
    let transcript = run(
        &host,
        &[b"GET /announce?info"],
        &mut compact_peer(),
        AtEnd::TimeOut,
    );
    assert_eq!(transcript.writes.len(), 1);
    assert!(text(&transcript.writes[0]).starts_with("HTTP/1.1 408"));
    assert!(transcript.closed);
    assert_eq!(host.counters.borrow().timeouts, 1);

    // An idle connection just closes.
    let host = self::host();
    let transcript = run(&host, &[], &mut compact_peer(), AtEnd::TimeOut);
    assert!(transcript.writes.is_empty() && transcript.closed);
    assert_eq!(host.counters.borrow().timeouts, 0);
}

#[test]
fn the_deadline_runs_from_when_waiting_began_not_from_the_last_byte() {
    let host = host();
    let start = Instant::now();
    let mut session = Session::new(CLIENT, &host.config, start);
    let super::Next::Read { deadline } = session.next(&host, start) else {
        panic!("reads first");
    };
    assert_eq!(deadline, start + Duration::from_secs(30));
    // A byte at a time, late: the deadline stays.
    for (i, byte) in b"GET /ann".iter().enumerate() {
        session.read_buffer()[0] = *byte;
        session.received(1);
        let now = start + Duration::from_secs(i as u64 + 1);
        let super::Next::Read { deadline: later } = session.next(&host, now) else {
            panic!("still reading");
        };
        assert_eq!(later, deadline);
    }
}

#[test]
fn a_client_closing_mid_request_ends_the_session_silently() {
    let host = host();
    let transcript = run(&host, &[b"GET /annou"], &mut compact_peer(), AtEnd::Close);
    assert!(transcript.writes.is_empty() && transcript.closed);
}

#[test]
fn over_the_rate_gets_429_and_banned_gets_nothing() {
    let host = host();
    host.verdict.set(Verdict::Limited);
    let transcript = run(
        &host,
        &[&announce(1, "", "")],
        &mut compact_peer(),
        AtEnd::Wait,
    );
    let write = text(&transcript.writes[0]);
    assert!(
        write.starts_with("HTTP/1.1 429") && write.contains(RATE_LIMITED),
        "{write}"
    );
    assert!(transcript.closed && transcript.announces.is_empty());

    for verdict in [Verdict::Banned, Verdict::NewBan] {
        let host = self::host();
        host.verdict.set(verdict);
        let transcript = run(
            &host,
            &[&announce(1, "", "")],
            &mut compact_peer(),
            AtEnd::Wait,
        );
        assert!(transcript.writes.is_empty() && transcript.closed);
    }
}

#[test]
fn a_refused_info_hash_gets_a_failure_and_the_connection_stays() {
    let host = host();
    host.denied.borrow_mut().push([9; 20]);
    let mut two = announce(9, "", "");
    two.extend(scrape(&[1, 9]));
    let transcript = run(&host, &[&two], &mut compact_peer(), AtEnd::Wait);
    assert_eq!(transcript.writes.len(), 2);
    for write in &transcript.writes {
        let write = text(write);
        assert!(
            write.starts_with("HTTP/1.1 200") && write.contains(NOT_ALLOWED),
            "{write}"
        );
    }
    assert!(transcript.announces.is_empty() && transcript.scrapes.is_empty());
    assert!(!transcript.closed);
    assert_eq!(host.counters.borrow().access_denied, 2);
}

#[test]
fn a_shed_request_is_told_when_to_come_back_and_keeps_the_connection() {
    let host = host();
    let mut busy = compact_peer();
    busy.announce = Err(CallError::Busy);
    let transcript = run(&host, &[&announce(1, "", "")], &mut busy, AtEnd::Wait);
    let write = text(&transcript.writes[0]);
    // A failure with the backoff interval (the rig's: twice the configured ones),
    // which libtorrent, Transmission and rtorrent wait for; a 503 is retried at once.
    assert!(
        write.starts_with("HTTP/1.1 200") && write.contains(BUSY),
        "{write}"
    );
    assert!(
        write.contains("8:intervali3600e12:min intervali1800e"),
        "{write}"
    );
    assert!(!transcript.closed);
    let counters = host.counters.borrow();
    assert_eq!(
        (counters.backoff_responses, counters.error_responses),
        (1, 0)
    );
    drop(counters);

    let host = self::host();
    let mut busy = compact_peer();
    busy.scrape_busy = true;
    let transcript = run(&host, &[&scrape(&[1])], &mut busy, AtEnd::Wait);
    let write = text(&transcript.writes[0]);
    assert!(
        write.starts_with("HTTP/1.1 200") && write.contains(BUSY),
        "{write}"
    );
    assert!(write.contains("8:intervali3600e"), "{write}");
}

#[test]
fn a_full_tracker_says_so_and_gives_the_longest_interval() {
    // A new torrent it may not start: the reason, and the longest interval (the
    // rig's: six times the configured ones).
    let host = host();
    let mut full = compact_peer();
    full.announce = Ok(AnnounceAnswer::Refused(
        "tracker full: no new torrents accepted",
    ));
    let transcript = run(&host, &[&announce(1, "", "")], &mut full, AtEnd::Wait);
    let write = text(&transcript.writes[0]);
    assert!(write.contains("tracker full"), "{write}");
    assert!(
        write.contains("8:intervali10800e12:min intervali5400e"),
        "{write}"
    );
    assert!(!transcript.closed);
    // A new peer of a full swarm: peers, a warning, the longest interval.
    let host = self::host();
    let mut not_stored = compact_peer();
    not_stored.announce = Ok(AnnounceAnswer::Peers {
        complete: 5,
        incomplete: 7,
        peers: AnnouncedPeers::Compact(vec![9; 6]),
        full: true,
    });
    let transcript = run(&host, &[&announce(1, "", "")], &mut not_stored, AtEnd::Wait);
    let write = text(&transcript.writes[0]);
    assert!(write.contains("8:intervali10800e"), "{write}");
    assert!(write.contains(NOT_STORED), "{write}");
    assert!(write.contains("5:peers6:"), "{write}");
}

#[test]
fn a_refused_announce_gets_its_reason_and_keeps_the_connection() {
    let host = host();
    let mut full = compact_peer();
    full.announce = Ok(AnnounceAnswer::Refused("tracker full"));
    let transcript = run(&host, &[&announce(1, "", "")], &mut full, AtEnd::Wait);
    let write = text(&transcript.writes[0]);
    assert!(write.contains("tracker full"), "{write}");
    assert!(!transcript.closed);
    assert_eq!(host.counters.borrow().announce_responses, 1);
}

#[test]
fn peer_lists_take_the_form_the_client_asked_for() {
    // compact=0&no_peer_id=1 with compact bytes from the shard: dictionaries without ids.
    let host = host();
    let request = announce(1, "&compact=0&no_peer_id=1", "");
    let transcript = run(&host, &[&request], &mut compact_peer(), AtEnd::Wait);
    assert!(!transcript.announces[0].work.with_peer_ids);
    let write = text(&transcript.writes[0]);
    assert!(write.contains("2:ip7:1.2.3.44:porti6881e"), "{write}");
    assert!(!write.contains("peer id"), "{write}");

    // compact=0: dictionaries with ids.
    let host = self::host();
    let id = *b"-XX0000-aaaaaaaaaaaa";
    let listed = SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), 7);
    let mut with_ids = Answering::peers(AnnouncedPeers::WithIds(vec![(listed, id)]));
    let request = announce(1, "&compact=0", "");
    let transcript = run(&host, &[&request], &mut with_ids, AtEnd::Wait);
    assert!(transcript.announces[0].work.with_peer_ids);
    let write = text(&transcript.writes[0]);
    assert!(
        write.contains("7:peer id20:-XX0000-aaaaaaaaaaaa"),
        "{write}"
    );
    assert!(write.contains("2:ip3:::1"), "{write}");
}

#[test]
fn a_scrape_is_split_among_swarm_workers_and_merged() {
    let host = TestHost::new(Config::default(), 4);
    let bytes: Vec<u8> = (1..=30).collect();
    let transcript = run(&host, &[&scrape(&bytes)], &mut compact_peer(), AtEnd::Wait);
    let parts = &transcript.scrapes[0];
    assert!(parts.len() > 1, "30 torrents over 4 workers touch several");
    let mut asked: Vec<[u8; 20]> = Vec::new();
    for (worker, work) in parts {
        let ScrapeWork::Torrents(hashes) = work else {
            panic!("a scrape of named torrents");
        };
        assert!(
            hashes
                .iter()
                .all(|h| shoal_worker::shard_for(h, 4) == *worker)
        );
        asked.extend(hashes);
    }
    asked.sort_unstable();
    assert_eq!(asked, bytes.iter().map(|&b| [b; 20]).collect::<Vec<_>>());
    let write = text(&transcript.writes[0]);
    assert_eq!(write.matches("8:completei1e").count(), 30, "{write}");
}

#[test]
fn full_scrapes_are_built_once_per_interval_and_shared() {
    let mut config = Config::default();
    config.protocol.full_scrape = true;
    let host = TestHost::new(config, 2);
    let transcript = run(&host, &[&scrape(&[])], &mut compact_peer(), AtEnd::Wait);
    assert_eq!(
        transcript.scrapes[0],
        [(0, ScrapeWork::All), (1, ScrapeWork::All)]
    );
    let first = text(&transcript.writes[0]);
    assert_eq!(first.matches("8:completei1e").count(), 4, "{first}");
    assert_eq!(host.counters.borrow().full_scrapes, 1);

    // Another connection within the interval gets the same body without a call.
    host.time.set(ServerTime(100 + 299));
    let transcript = run(&host, &[&scrape(&[])], &mut compact_peer(), AtEnd::Wait);
    assert!(transcript.scrapes.is_empty());
    assert_eq!(text(&transcript.writes[0]), first);

    // After it, the body is built again.
    host.time.set(ServerTime(100 + 300));
    let transcript = run(&host, &[&scrape(&[])], &mut compact_peer(), AtEnd::Wait);
    assert_eq!(transcript.scrapes.len(), 1);
    assert_eq!(host.counters.borrow().full_scrapes, 2);
}

#[test]
fn a_full_scrape_while_one_is_built_is_told_to_come_back() {
    let mut config = Config::default();
    config.protocol.full_scrape = true;
    let host = TestHost::new(config, 1);
    let start = Instant::now();
    let mut building = Session::new(CLIENT, &host.config, start);
    building.read_buffer()[..scrape(&[]).len()].copy_from_slice(&scrape(&[]));
    building.received(scrape(&[]).len());
    let super::Next::Scrape(call) = building.next(&host, start) else {
        panic!("asks the swarm workers");
    };
    let transcript = run(&host, &[&scrape(&[])], &mut compact_peer(), AtEnd::Wait);
    assert!(text(&transcript.writes[0]).contains("being prepared"));
    // A busy answer frees the cache for the next try.
    building.scraped(call, Err(CallError::Busy), &host, start);
    let transcript = run(&host, &[&scrape(&[])], &mut compact_peer(), AtEnd::Wait);
    assert_eq!(transcript.scrapes.len(), 1);
}

#[test]
fn full_scrapes_are_refused_when_off() {
    let host = host();
    let transcript = run(&host, &[&scrape(&[])], &mut compact_peer(), AtEnd::Wait);
    assert!(text(&transcript.writes[0]).contains("full scrape is disabled"));
    assert!(transcript.scrapes.is_empty() && !transcript.closed);
}

#[test]
fn connection_close_is_honoured_and_keep_alive_can_be_turned_off() {
    let host = host();
    let request = announce(1, "", "Connection: close\r\n");
    let transcript = run(&host, &[&request], &mut compact_peer(), AtEnd::Wait);
    assert!(text(&transcript.writes[0]).contains("Connection: close"));
    assert!(transcript.closed);

    let mut config = Config::default();
    config.network.keep_alive = false;
    let host = TestHost::new(config, 1);
    let transcript = run(
        &host,
        &[&announce(1, "", "")],
        &mut compact_peer(),
        AtEnd::Wait,
    );
    assert!(text(&transcript.writes[0]).contains("Connection: close"));
    assert!(transcript.closed);
}

#[test]
fn only_a_trusted_proxy_is_believed() {
    let header = "X-Forwarded-For: 192.0.2.9\r\n";
    let mut config = Config::default();
    config.network.reverse_proxy_ip_header = "X-Forwarded-For".into();
    config.network.reverse_proxy_trusted = vec!["10.0.0.0/8".parse().unwrap()];
    let host = TestHost::new(config.clone(), 1);
    let transcript = run(
        &host,
        &[&announce(1, "", header)],
        &mut compact_peer(),
        AtEnd::Wait,
    );
    let forwarded = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 9));
    assert_eq!(
        transcript.announces[0].work.peer,
        PeerAddress::new(forwarded, 6881)
    );

    config.network.reverse_proxy_trusted = vec!["172.16.0.0/12".parse().unwrap()];
    let host = TestHost::new(config, 1);
    let transcript = run(
        &host,
        &[&announce(1, "", header)],
        &mut compact_peer(),
        AtEnd::Wait,
    );
    assert_eq!(
        transcript.announces[0].work.peer,
        PeerAddress::new(CLIENT.ip(), 6881)
    );
}

#[test]
fn an_answer_for_a_session_that_asked_nothing_is_ignored() {
    let host = host();
    let start = Instant::now();
    let mut session = Session::new(CLIENT, &host.config, start);
    let request = announce(1, "", "");
    session.read_buffer()[..request.len()].copy_from_slice(&request);
    session.received(request.len());
    let super::Next::Announce(call) = session.next(&host, start) else {
        panic!("asks");
    };
    session.announced(call.clone(), Ok(AnnounceAnswer::Refused("x")), &host, start);
    let super::Next::Write { .. } = session.next(&host, start) else {
        panic!("writes");
    };
    // A second answer to the same call changes nothing.
    let before = session.output().0.to_vec();
    session.announced(call, Ok(AnnounceAnswer::Refused("y")), &host, start);
    assert_eq!(session.output().0, before);
}

#[test]
fn private_mode_takes_the_key_from_the_path_or_query_and_refuses_with_an_interval() {
    const KEY: &str = "6f0d1b2c3d4e5f60718293a4b5c6d7e8";
    let mut config = Config::default();
    config.private.enabled = true;
    let mut host = TestHost::new(config, 1);
    host.private = Some(
        shoal_private::Registry::parse(
            &format!("17 {KEY}\n"),
            &format!("{} 1001\n{} 1002\n", "01".repeat(20), "02".repeat(20)),
        )
        .unwrap(),
    );
    let keyed = |target: &str| -> Vec<u8> {
        let plain = text(&announce(1, "", ""));
        plain.replacen("GET /announce?", target, 1).into_bytes()
    };
    // Served: the key before or after the path, or as the parameter.
    for target in [
        format!("GET /{KEY}/announce?"),
        format!("GET /announce/{KEY}?"),
        format!("GET /announce?passkey={KEY}&"),
    ] {
        let transcript = run(&host, &[&keyed(&target)], &mut compact_peer(), AtEnd::Wait);
        assert_eq!(transcript.announces.len(), 1, "{target}");
    }
    // Refused with the reason and when to come back, no swarm asked.
    for (target, refusal) in [
        (
            "GET /announce?".to_owned(),
            shoal_private::Refusal::MissingKey,
        ),
        (
            "GET /00000000000000000000000000000bad/announce?".to_owned(),
            shoal_private::Refusal::UnknownKey,
        ),
    ] {
        let transcript = run(&host, &[&keyed(&target)], &mut compact_peer(), AtEnd::Wait);
        assert!(transcript.announces.is_empty(), "{target}");
        let reply = text(&transcript.writes[0]);
        let body = format!(
            "d14:failure reason{}:{}8:intervali1800e12:min intervali900ee",
            refusal.reason().len(),
            refusal.reason()
        );
        assert!(
            reply.starts_with("HTTP/1.1 200") && reply.ends_with(&body),
            "{reply}"
        );
    }
    // An unregistered torrent, and a scrape naming one.
    let unregistered =
        text(&announce(9, "", "")).replacen("/announce?", &format!("/{KEY}/announce?"), 1);
    let transcript = run(
        &host,
        &[unregistered.as_bytes()],
        &mut compact_peer(),
        AtEnd::Wait,
    );
    assert!(text(&transcript.writes[0]).contains(shoal_private::Refusal::Unregistered.reason()));
    let scrape_one = |bytes: &[u8], key: &str| {
        text(&scrape(bytes)).replacen("GET /scrape?", &format!("GET /scrape?passkey={key}&"), 1)
    };
    let transcript = run(
        &host,
        &[scrape_one(&[1, 9], KEY).as_bytes()],
        &mut compact_peer(),
        AtEnd::Wait,
    );
    assert!(transcript.scrapes.is_empty());
    let transcript = run(
        &host,
        &[scrape_one(&[1, 2], KEY).as_bytes()],
        &mut compact_peer(),
        AtEnd::Wait,
    );
    assert_eq!(transcript.scrapes.len(), 1);
    let transcript = run(
        &host,
        &[scrape_one(&[1], "nobody").as_bytes()],
        &mut compact_peer(),
        AtEnd::Wait,
    );
    assert!(transcript.scrapes.is_empty());
    assert_eq!(host.counters.borrow().private_refused, 5);
}

#[test]
fn client_rules_refuse_by_peer_id_or_user_agent_with_an_interval() {
    let mut host = TestHost::new(Config::default(), 1);
    host.client_rules = shoal_common::ClientRules::from_config(&shoal_common::ClientConfig {
        deny_user_agents: vec!["Xunlei".into()],
        deny_peer_ids: vec!["-qB3".into()],
        ..Default::default()
    })
    .unwrap();
    let served = run(
        &host,
        &[&announce(1, "", "User-Agent: qBittorrent/4.6.5\r\n")],
        &mut compact_peer(),
        AtEnd::Wait,
    );
    assert_eq!(served.announces.len(), 1);
    let by_agent = run(
        &host,
        &[&announce(1, "", "User-Agent: Xunlei 0.0.1\r\n")],
        &mut compact_peer(),
        AtEnd::Wait,
    );
    assert!(by_agent.announces.is_empty(), "no swarm asked");
    let reason = shoal_common::ClientRefusal::UserAgent.reason();
    let reply = text(&by_agent.writes[0]);
    assert!(
        reply.ends_with(&format!(
            "d14:failure reason{}:{reason}8:intervali1800e12:min intervali900ee",
            reason.len()
        )),
        "{reply}"
    );
    let old = text(&announce(1, "", "")).replacen("-qB0000-", "-qB3190-", 1);
    let by_peer_id = run(&host, &[old.as_bytes()], &mut compact_peer(), AtEnd::Wait);
    assert!(text(&by_peer_id.writes[0]).contains(shoal_common::ClientRefusal::PeerId.reason()));
    let counters = *host.counters.borrow();
    assert_eq!(counters.client_refused, 2);
    assert_eq!(
        counters.clients.0[0], 3,
        "three qBittorrent announces counted"
    );
}
