use super::*;
use crate::query::encode;

const LIMITS: ParseLimits<'static> = ParseLimits {
    announce_path: "/announce",
    scrape_path: "/scrape",
    max_request_len: 2048,
    max_headers: 16,
    max_scrape_torrents: 3,
    proxy_header: None,
    private: None,
};

fn announce_query(hash: &[u8; 20]) -> String {
    format!(
        "info_hash={}&peer_id=-XX0001-abcdefghijkl&port=6881&uploaded=1&downloaded=2&left=3",
        encode(hash)
    )
}

fn get(target: &str, headers: &str) -> Vec<u8> {
    format!("GET {target} HTTP/1.1\r\nHost: tracker\r\n{headers}\r\n").into_bytes()
}

fn parse(bytes: &[u8]) -> Result<Option<ParsedRequest>, RequestError> {
    parse_request(bytes, &LIMITS)
}

#[test]
fn announce_with_every_field() {
    let hash = [
        0u8, 1, 2, 0xfe, 0xff, b'a', b'%', b'&', b'=', b'+', 10, 11, 12, 13, 14, 15, 16, 17, 18, 19,
    ];
    let target = format!(
        "/announce?{}&event=started&numwant=-1&compact=0&no_peer_id=1&ip=1.2.3.4",
        announce_query(&hash)
    );
    let bytes = get(&target, "");
    let parsed = parse(&bytes).unwrap().unwrap();
    assert_eq!(parsed.len, bytes.len());
    assert!(parsed.keep_alive);
    assert_eq!(
        parsed.request,
        Request::Announce(AnnounceRequest {
            info_hash: hash,
            peer_id: *b"-XX0001-abcdefghijkl",
            port: 6881,
            uploaded: 1,
            downloaded: 2,
            left: Some(3),
            event: AnnounceEvent::Started,
            numwant: Some(-1),
            compact: false,
            no_peer_id: true,
        })
    );
}

#[test]
fn incomplete_input_asks_for_more() {
    let bytes = get(&format!("/announce?{}", announce_query(&[1; 20])), "");
    for cut in 0..bytes.len() {
        assert_eq!(parse(&bytes[..cut]), Ok(None), "cut at {cut}");
    }
    assert!(parse(&bytes).unwrap().is_some());
}

#[test]
fn pipelined_requests_are_taken_one_at_a_time() {
    let first = get(&format!("/announce?{}", announce_query(&[1; 20])), "");
    let second = get("/scrape?info_hash=aaaaaaaaaaaaaaaaaaaa", "");
    let both = [first.clone(), second].concat();
    let parsed = parse(&both).unwrap().unwrap();
    assert_eq!(parsed.len, first.len());
    let next = parse(&both[parsed.len..]).unwrap().unwrap();
    assert_eq!(
        next.request,
        Request::Scrape(ScrapeRequest {
            info_hashes: vec![*b"aaaaaaaaaaaaaaaaaaaa"]
        })
    );
}

#[test]
fn scrapes_with_several_or_no_hashes() {
    let target = format!(
        "/scrape?info_hash={}&info_hash={}",
        encode(&[1; 20]),
        encode(&[2; 20])
    );
    let parsed = parse(&get(&target, "")).unwrap().unwrap();
    assert_eq!(
        parsed.request,
        Request::Scrape(ScrapeRequest {
            info_hashes: vec![[1; 20], [2; 20]]
        })
    );
    let full = parse(&get("/scrape", "")).unwrap().unwrap();
    assert_eq!(
        full.request,
        Request::Scrape(ScrapeRequest {
            info_hashes: vec![]
        })
    );
    let too_many = format!(
        "/scrape?{}",
        ["info_hash=aaaaaaaaaaaaaaaaaaaa"; 4].join("&")
    );
    let err = parse(&get(&too_many, "")).unwrap_err();
    assert_eq!(err.reason, "too many info hashes in scrape (at most 3)");
}

#[test]
fn keep_alive_follows_the_http_version_and_connection_header() {
    let target = format!("/announce?{}", announce_query(&[1; 20]));
    let keep = |request: &str| parse(request.as_bytes()).unwrap().unwrap().keep_alive;
    assert!(keep(&format!("GET {target} HTTP/1.1\r\n\r\n")));
    assert!(!keep(&format!(
        "GET {target} HTTP/1.1\r\nConnection: close\r\n\r\n"
    )));
    assert!(!keep(&format!("GET {target} HTTP/1.0\r\n\r\n")));
    assert!(keep(&format!(
        "GET {target} HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"
    )));
}

#[test]
fn bad_requests_say_what_is_wrong() {
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (
            get("/announce?peer_id=-XX0001-abcdefghijkl&port=1", ""),
            400,
            "missing info_hash",
        ),
        (
            get(
                "/announce?info_hash=short&peer_id=-XX0001-abcdefghijkl&port=1",
                "",
            ),
            400,
            "invalid info_hash",
        ),
        (
            get(
                &format!("/announce?{}&port=70000", announce_query(&[1; 20])),
                "",
            ),
            400,
            "invalid port",
        ),
        (
            get(
                &format!("/announce?{}&event=exploded", announce_query(&[1; 20])),
                "",
            ),
            400,
            "invalid event",
        ),
        (
            get(
                &format!(
                    "/announce?{}&info_hash={}",
                    announce_query(&[1; 20]),
                    encode(&[2; 20])
                ),
                "",
            ),
            400,
            "more than one info_hash in an announce",
        ),
        (
            get(
                &format!("/announce?{}&numwant=lots", announce_query(&[1; 20])),
                "",
            ),
            400,
            "invalid numwant",
        ),
        (get("/elsewhere", ""), 404, "not found"),
        (
            b"POST /announce HTTP/1.1\r\n\r\n".to_vec(),
            405,
            "only GET requests are served",
        ),
        (
            b"GET /announce HTTP/1.1\r\nContent-Length: 5\r\n\r\n".to_vec(),
            400,
            "request bodies are not accepted",
        ),
        (
            b"GET /announce HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec(),
            501,
            "transfer encodings are not supported",
        ),
        (
            b"\x00\x01\x02 garbage\r\n\r\n".to_vec(),
            400,
            "malformed HTTP request",
        ),
    ];
    for (bytes, status, reason) in cases {
        let err = parse(&bytes).unwrap_err();
        assert_eq!(
            (err.status, err.reason.as_ref()),
            (status, reason),
            "{}",
            String::from_utf8_lossy(&bytes)
        );
    }
}

#[test]
fn size_and_header_limits() {
    let long = get(
        &format!(
            "/announce?{}&pad={}",
            announce_query(&[1; 20]),
            "x".repeat(3000)
        ),
        "",
    );
    assert_eq!(parse(&long).unwrap_err().status, 431);
    assert_eq!(
        parse(&long[..2100]).unwrap_err().status,
        431,
        "partial but already too long"
    );
    let headers: String = (0..20).map(|i| format!("X-{i}: y\r\n")).collect();
    let many = get(&format!("/announce?{}", announce_query(&[1; 20])), &headers);
    assert_eq!(parse(&many).unwrap_err().reason, "too many headers");
}

#[test]
fn proxy_header_gives_the_client_address() {
    let target = format!("/announce?{}", announce_query(&[1; 20]));
    let first = ParseLimits {
        proxy_header: Some(ProxyHeader {
            name: "X-Forwarded-For",
            use_last: false,
        }),
        ..LIMITS
    };
    let last = ParseLimits {
        proxy_header: Some(ProxyHeader {
            name: "X-Forwarded-For",
            use_last: true,
        }),
        ..LIMITS
    };
    let bytes = get(&target, "x-forwarded-for: 203.0.113.7, 10.0.0.1\r\n");
    assert_eq!(
        parse_request(&bytes, &first).unwrap().unwrap().forwarded_ip,
        Some("203.0.113.7".parse().unwrap())
    );
    assert_eq!(
        parse_request(&bytes, &last).unwrap().unwrap().forwarded_ip,
        Some("10.0.0.1".parse().unwrap())
    );
    let mapped = get(&target, "X-Forwarded-For: ::ffff:192.0.2.1\r\n");
    assert_eq!(
        parse_request(&mapped, &first)
            .unwrap()
            .unwrap()
            .forwarded_ip,
        Some("192.0.2.1".parse().unwrap())
    );

    for headers in [
        "",
        "X-Forwarded-For: not-an-ip\r\n",
        "X-Forwarded-For: \r\n",
    ] {
        let err = parse_request(&get(&target, headers), &first).unwrap_err();
        assert_eq!(
            (err.status, err.reason.as_ref()),
            (400, "missing or invalid X-Forwarded-For header")
        );
    }
    assert_eq!(
        parse(&bytes).unwrap().unwrap().forwarded_ip,
        None,
        "ignored unless configured"
    );
}

#[test]
fn a_forwarded_address_is_the_chosen_one_of_the_list_and_one_a_client_can_have() {
    let list = b"203.0.113.7, 10.0.0.1 ,192.0.2.9";
    assert_eq!(
        forwarded_address(list, false),
        Some("203.0.113.7".parse().unwrap())
    );
    assert_eq!(
        forwarded_address(list, true),
        Some("192.0.2.9".parse().unwrap())
    );
    assert_eq!(
        forwarded_address(b"::ffff:192.0.2.1", true),
        Some("192.0.2.1".parse().unwrap()),
        "IPv4-mapped addresses are IPv4 clients"
    );
    for bad in [
        &b"0.0.0.0"[..],
        b"255.255.255.255",
        b"224.0.0.1",
        b"::",
        b"ff02::1",
        b"not an address",
        b"",
        b"192.0.2.1:8080",
    ] {
        assert_eq!(
            forwarded_address(bad, true),
            None,
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
}
