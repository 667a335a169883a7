//! Property tests: every request and response survives a write/parse round trip, and
//! no input of any length up to a full Ethernet frame makes the parsers panic.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use proptest::prelude::*;
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use shoal_udp_protocol::*;

fn event() -> impl Strategy<Value = AnnounceEvent> {
    prop_oneof![
        Just(AnnounceEvent::None),
        Just(AnnounceEvent::Completed),
        Just(AnnounceEvent::Started),
        Just(AnnounceEvent::Stopped),
    ]
}

/// Owned data an announce request borrows from.
#[derive(Debug, Clone)]
struct AnnounceData {
    fields: (u64, u32, [u8; 20], [u8; 20], u64, u64, u64),
    event: AnnounceEvent,
    tail: (u32, u32, i32, u16),
    options: Vec<u8>,
}

fn announce_data() -> impl Strategy<Value = AnnounceData> {
    (
        (
            any::<u64>(),
            any::<u32>(),
            any::<[u8; 20]>(),
            any::<[u8; 20]>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
        ),
        event(),
        (any::<u32>(), any::<u32>(), any::<i32>(), any::<u16>()),
        proptest::collection::vec(any::<u8>(), 0..600),
    )
        .prop_map(|(fields, event, tail, options)| AnnounceData {
            fields,
            event,
            tail,
            options,
        })
}

impl AnnounceData {
    fn request(&self) -> AnnounceRequest<'_> {
        let (cid, tx, info_hash, peer_id, downloaded, left, uploaded) = self.fields;
        let (ip_address, key, peers_wanted, port) = self.tail;
        AnnounceRequest {
            connection_id: ConnectionId(cid),
            transaction_id: TransactionId(tx),
            info_hash: InfoHash(info_hash),
            peer_id: PeerId(peer_id),
            downloaded,
            left,
            uploaded,
            event: self.event,
            ip_address,
            key,
            peers_wanted,
            port,
            options: AnnounceOptions(&self.options),
        }
    }
}

fn socket_addr(v6: bool) -> impl Strategy<Value = SocketAddr> {
    if v6 {
        (any::<[u8; 16]>(), any::<u16>())
            .prop_map(|(ip, port)| {
                SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::from(ip), port, 0, 0))
            })
            .boxed()
    } else {
        (any::<[u8; 4]>(), any::<u16>())
            .prop_map(|(ip, port)| SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::from(ip), port)))
            .boxed()
    }
}

fn scrape_stats() -> impl Strategy<Value = ScrapeStats> {
    (any::<u32>(), any::<u32>(), any::<u32>()).prop_map(|(seeders, completed, leechers)| {
        ScrapeStats {
            seeders,
            completed,
            leechers,
        }
    })
}

proptest! {
    #[test]
    fn connect_requests_round_trip(tx in any::<u32>()) {
        let request = Request::Connect(ConnectRequest { transaction_id: TransactionId(tx) });
        let mut bytes = Vec::new();
        request.write(&mut bytes);
        prop_assert_eq!(bytes.len(), HEADER_LEN);
        prop_assert_eq!(Request::parse(&bytes), Ok(request));
    }

    #[test]
    fn announce_requests_round_trip(data in announce_data()) {
        let request = Request::Announce(data.request());
        let mut bytes = Vec::new();
        request.write(&mut bytes);
        prop_assert_eq!(bytes.len(), ANNOUNCE_REQUEST_LEN + data.options.len());
        prop_assert_eq!(Request::parse(&bytes), Ok(request));
    }

    #[test]
    fn url_data_round_trips(url in proptest::collection::vec(any::<u8>(), 0..1000)) {
        let mut options = Vec::new();
        AnnounceOptions::write_url_data(&url, &mut options);
        prop_assert_eq!(AnnounceOptions(&options).url_data_joined(), url);
    }

    #[test]
    fn scrape_requests_round_trip(
        cid in any::<u64>(),
        tx in any::<u32>(),
        hashes in proptest::collection::vec(any::<[u8; 20]>(), 1..=MAX_SCRAPE_HASHES_PER_PACKET),
    ) {
        let flat: Vec<u8> = hashes.concat();
        let request = Request::Scrape(ScrapeRequest {
            connection_id: ConnectionId(cid),
            transaction_id: TransactionId(tx),
            info_hashes: InfoHashes::new(&flat),
        });
        let mut bytes = Vec::new();
        request.write(&mut bytes);
        let parsed = Request::parse(&bytes).unwrap();
        prop_assert_eq!(parsed, request);
        let Request::Scrape(scrape) = parsed else { unreachable!() };
        prop_assert_eq!(scrape.info_hashes.iter().copied().collect::<Vec<_>>(), hashes);
    }

    #[test]
    fn responses_round_trip(
        tx in any::<u32>(),
        cid in any::<u64>(),
        counts in (any::<u32>(), any::<u32>(), any::<u32>()),
        v4_peers in proptest::collection::vec(socket_addr(false), 0..100),
        v6_peers in proptest::collection::vec(socket_addr(true), 0..100),
        torrents in proptest::collection::vec(scrape_stats(), 0..80),
        message in ".{0,100}",
    ) {
        let transaction_id = TransactionId(tx);
        let (interval, leechers, seeders) = counts;
        let cases = [
            (Response::Connect(ConnectResponse { transaction_id, connection_id: ConnectionId(cid) }), PeerFamily::V4),
            (Response::Announce(AnnounceResponse { transaction_id, interval, leechers, seeders, peers: v4_peers }), PeerFamily::V4),
            (Response::Announce(AnnounceResponse { transaction_id, interval, leechers, seeders, peers: v6_peers }), PeerFamily::V6),
            (Response::Scrape(ScrapeResponse { transaction_id, torrents }), PeerFamily::V4),
            (Response::Error(ErrorResponse { transaction_id, message }), PeerFamily::V6),
        ];
        for (response, family) in cases {
            let mut bytes = Vec::new();
            response.write(&mut bytes);
            prop_assert_eq!(Response::parse(&bytes, family), Ok(response));
        }
    }
}

/// Every length from 0 to 1500 bytes, random content, and the same with a valid-looking
/// header for each action so the parsers get past their first checks.
#[test]
fn parsers_never_panic_on_any_length_up_to_1500() {
    let mut rng = SmallRng::seed_from_u64(0x5eed);
    let mut buffer = vec![0u8; 1500];
    for len in 0..=1500 {
        for round in 0..12 {
            let packet = &mut buffer[..len];
            rng.fill(&mut packet[..]);
            if len >= HEADER_LEN && round >= 2 {
                let action = (round - 2) % 5; // 0..=3 and one unknown
                if action == 0 {
                    packet[..8].copy_from_slice(&PROTOCOL_ID.to_be_bytes());
                }
                packet[8..12].copy_from_slice(&(action as u32).to_be_bytes());
                if len >= ANNOUNCE_REQUEST_LEN && round % 2 == 0 {
                    packet[80..84].copy_from_slice(&(round as u32 % 4).to_be_bytes());
                }
            }
            let packet = &buffer[..len];
            if let Ok(Request::Announce(announce)) = Request::parse(packet) {
                let _ = announce.options.url_data_joined();
            }
            if let Ok(Request::Scrape(scrape)) = Request::parse(packet) {
                assert_eq!(scrape.info_hashes.iter().count(), (len - HEADER_LEN) / 20);
            }
            let _ = Response::parse(packet, PeerFamily::V4);
            let _ = Response::parse(packet, PeerFamily::V6);
        }
    }
}

/// What the parser accepts, re-encoded, is the same bytes (for packets it accepts).
#[test]
fn accepted_packets_re_encode_identically() {
    let mut rng = SmallRng::seed_from_u64(42);
    let mut accepted = 0;
    for _ in 0..20_000 {
        let len = rng.random_range(16..200);
        let mut packet: Vec<u8> = (0..len).map(|_| rng.random()).collect();
        let action = rng.random_range(0..3u32);
        packet[8..12].copy_from_slice(&action.to_be_bytes());
        if action == 0 {
            packet[..8].copy_from_slice(&PROTOCOL_ID.to_be_bytes());
            packet.truncate(16);
        }
        if action == 1 && packet.len() >= ANNOUNCE_REQUEST_LEN {
            packet[80..84].copy_from_slice(&rng.random_range(0..4u32).to_be_bytes());
        }
        if action == 2 {
            packet.truncate(16 + (packet.len() - 16) / 20 * 20);
        }
        if let Ok(request) = Request::parse(&packet) {
            accepted += 1;
            let mut again = Vec::new();
            request.write(&mut again);
            assert_eq!(again, packet);
        }
    }
    assert!(
        accepted > 5_000,
        "only {accepted} packets accepted; the generator is off"
    );
}
