//! Property tests: requests and responses survive encoding and parsing, and no input
//! makes the parsers panic.

use proptest::prelude::*;
use shoal_http_protocol::bencode::Value;
use shoal_http_protocol::query::encode;
use shoal_http_protocol::response::parse_response;
use shoal_http_protocol::*;

const LIMITS: ParseLimits<'static> = ParseLimits {
    announce_path: "/announce",
    scrape_path: "/scrape",
    max_request_len: 8192,
    max_headers: 32,
    max_scrape_torrents: 64,
    proxy_header: None,
    private: None,
};

fn event() -> impl Strategy<Value = AnnounceEvent> {
    prop_oneof![
        Just(AnnounceEvent::None),
        Just(AnnounceEvent::Started),
        Just(AnnounceEvent::Completed),
        Just(AnnounceEvent::Stopped),
    ]
}

fn announce() -> impl Strategy<Value = AnnounceRequest> {
    (
        (any::<[u8; 20]>(), any::<[u8; 20]>(), any::<u16>()),
        (
            any::<u64>(),
            any::<u64>(),
            proptest::option::of(any::<u64>()),
        ),
        (
            event(),
            proptest::option::of(any::<i64>()),
            any::<bool>(),
            any::<bool>(),
        ),
    )
        .prop_map(
            |(
                (info_hash, peer_id, port),
                (uploaded, downloaded, left),
                (event, numwant, compact, no_peer_id),
            )| {
                AnnounceRequest {
                    info_hash,
                    peer_id,
                    port,
                    uploaded,
                    downloaded,
                    left,
                    event,
                    numwant,
                    compact,
                    no_peer_id,
                }
            },
        )
}

fn announce_target(a: &AnnounceRequest) -> String {
    let mut target = format!(
        "/announce?info_hash={}&peer_id={}&port={}&uploaded={}&downloaded={}&compact={}",
        encode(&a.info_hash),
        encode(&a.peer_id),
        a.port,
        a.uploaded,
        a.downloaded,
        u8::from(a.compact)
    );
    if let Some(left) = a.left {
        target.push_str(&format!("&left={left}"));
    }
    if let Some(numwant) = a.numwant {
        target.push_str(&format!("&numwant={numwant}"));
    }
    if a.no_peer_id {
        target.push_str("&no_peer_id=1");
    }
    match a.event {
        AnnounceEvent::None => {}
        AnnounceEvent::Started => target.push_str("&event=started"),
        AnnounceEvent::Completed => target.push_str("&event=completed"),
        AnnounceEvent::Stopped => target.push_str("&event=stopped"),
    }
    target
}

proptest! {
    #[test]
    fn announces_round_trip(a in announce(), extra_headers in 0..8usize) {
        let headers: String = (0..extra_headers).map(|i| format!("X-Extra-{i}: v\r\n")).collect();
        let bytes = format!("GET {} HTTP/1.1\r\nHost: t\r\n{headers}\r\n", announce_target(&a));
        let parsed = parse_request(bytes.as_bytes(), &LIMITS).unwrap().unwrap();
        prop_assert_eq!(parsed.len, bytes.len());
        prop_assert_eq!(parsed.request, Request::Announce(a));
    }

    #[test]
    fn scrapes_round_trip(hashes in proptest::collection::vec(any::<[u8; 20]>(), 0..64)) {
        let query: Vec<String> = hashes.iter().map(|h| format!("info_hash={}", encode(h))).collect();
        let bytes = format!("GET /scrape?{} HTTP/1.0\r\n\r\n", query.join("&"));
        let parsed = parse_request(bytes.as_bytes(), &LIMITS).unwrap().unwrap();
        prop_assert!(!parsed.keep_alive);
        prop_assert_eq!(parsed.request, Request::Scrape(ScrapeRequest { info_hashes: hashes }));
    }

    #[test]
    fn request_parsing_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
        let _ = parse_request(&bytes, &LIMITS);
    }

    #[test]
    fn near_valid_requests_never_panic(a in announce(), cut in 0..400usize, noise in any::<u8>(), at in 0..400usize) {
        let mut bytes = format!("GET {} HTTP/1.1\r\n\r\n", announce_target(&a)).into_bytes();
        if at < bytes.len() {
            bytes[at] = noise;
        }
        bytes.truncate(cut.max(1).min(bytes.len()));
        let _ = parse_request(&bytes, &LIMITS);
    }

    #[test]
    fn compact_announce_responses_round_trip(
        counts in (any::<u32>(), any::<u32>(), any::<u32>()),
        peers in proptest::collection::vec(any::<[u8; 6]>(), 0..80),
        keep_alive in any::<bool>(),
    ) {
        let flat = peers.concat();
        let (interval, complete, incomplete) = counts;
        let mut out = Vec::new();
        write_announce(&mut out, &AnnounceResponse {
            interval, min_interval: interval / 2, complete, incomplete,
            peers: PeerList::CompactV4(&flat), warning: None,
        }, keep_alive);
        let response = parse_response(&out).unwrap().unwrap();
        prop_assert_eq!(response.len, out.len());
        prop_assert_eq!(response.close, !keep_alive);
        prop_assert_eq!(response.body.get("complete").and_then(Value::as_int), Some(i64::from(complete)));
        prop_assert_eq!(response.body.get("incomplete").and_then(Value::as_int), Some(i64::from(incomplete)));
        prop_assert_eq!(response.body.get("peers").and_then(Value::as_bytes), Some(&flat[..]));
    }

    #[test]
    fn bencode_and_response_parsing_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let _ = Value::parse_whole(&bytes);
        let _ = parse_response(&bytes);
    }
}
