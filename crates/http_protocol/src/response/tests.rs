use super::*;

fn parsed(bytes: &[u8]) -> HttpResponse {
    let response = parse_response(bytes).unwrap().unwrap();
    assert_eq!(response.len, bytes.len());
    response
}

#[test]
fn compact_announce() {
    let mut out = Vec::new();
    let peers = [10, 0, 0, 1, 0x1a, 0xe1, 10, 0, 0, 2, 0x1a, 0xe2];
    let response = AnnounceResponse {
        interval: 1800,
        min_interval: 900,
        complete: 3,
        incomplete: 4,
        peers: PeerList::CompactV4(&peers),
        warning: None,
    };
    write_announce(&mut out, &response, true);
    let text = String::from_utf8_lossy(&out);
    assert!(
        text.starts_with("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: "),
        "{text}"
    );
    assert!(!text.contains("Connection: close"));
    let body = &out[out.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4..];
    let mut expected =
        b"d8:completei3e10:incompletei4e8:intervali1800e12:min intervali900e5:peers12:".to_vec();
    expected.extend_from_slice(&peers);
    expected.push(b'e');
    assert_eq!(body, expected);
    let response = parsed(&out);
    assert_eq!((response.status, response.close), (200, false));
}

#[test]
fn ipv6_and_dictionary_peers() {
    let mut out = Vec::new();
    let peers6 = [0u8; 18];
    write_announce(
        &mut out,
        &AnnounceResponse {
            interval: 1,
            min_interval: 1,
            complete: 0,
            incomplete: 1,
            peers: PeerList::CompactV6(&peers6),
            warning: Some("hello"),
        },
        false,
    );
    let response = parsed(&out);
    assert!(response.close);
    assert_eq!(
        response.body.get("peers").and_then(Value::as_bytes),
        Some(&b""[..])
    );
    assert_eq!(
        response
            .body
            .get("peers6")
            .and_then(Value::as_bytes)
            .map(<[u8]>::len),
        Some(18)
    );
    assert_eq!(
        response
            .body
            .get("warning message")
            .and_then(Value::as_bytes),
        Some(&b"hello"[..])
    );

    out.clear();
    let dicts = [
        (
            "10.0.0.1".parse().unwrap(),
            6881,
            Some(*b"-XX0001-abcdefghijkl"),
        ),
        ("::1".parse().unwrap(), 1, None),
    ];
    write_announce(
        &mut out,
        &AnnounceResponse {
            interval: 1,
            min_interval: 1,
            complete: 0,
            incomplete: 0,
            peers: PeerList::Dictionaries(&dicts),
            warning: None,
        },
        true,
    );
    let Some(Value::List(peers)) = parsed(&out).body.get("peers").cloned() else {
        panic!()
    };
    assert_eq!(
        peers[0].get("ip").and_then(Value::as_bytes),
        Some(&b"10.0.0.1"[..])
    );
    assert_eq!(
        peers[0].get("peer id").and_then(Value::as_bytes),
        Some(&b"-XX0001-abcdefghijkl"[..])
    );
    assert_eq!(peers[0].get("port").and_then(Value::as_int), Some(6881));
    assert_eq!(
        peers[1].get("ip").and_then(Value::as_bytes),
        Some(&b"::1"[..])
    );
    assert_eq!(peers[1].get("peer id"), None);
}

#[test]
fn scrape_files_are_sorted_and_unique() {
    let mut out = Vec::new();
    let stats = |n| ScrapeStats {
        complete: n,
        downloaded: n * 10,
        incomplete: n * 100,
    };
    let mut files = vec![
        ([9; 20], stats(1)),
        ([1; 20], stats(2)),
        ([9; 20], stats(1)),
    ];
    write_scrape(&mut out, &mut files, true);
    let Some(Value::Dict(entries)) = parsed(&out).body.get("files").cloned() else {
        panic!()
    };
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[0].0, vec![1; 20]);
    assert_eq!(
        entries[0].1.get("downloaded").and_then(Value::as_int),
        Some(20)
    );
    assert_eq!(
        entries[1].1.get("incomplete").and_then(Value::as_int),
        Some(100)
    );
}

#[test]
fn failures() {
    let mut out = Vec::new();
    write_failure(&mut out, 400, "invalid info_hash", false);
    assert!(out.starts_with(b"HTTP/1.1 400 Bad Request\r\n"));
    let response = parsed(&out);
    assert_eq!(response.status, 400);
    assert!(response.close);
    assert_eq!(
        response
            .body
            .get("failure reason")
            .and_then(Value::as_bytes),
        Some(&b"invalid info_hash"[..])
    );
}

#[test]
fn partial_responses_ask_for_more() {
    let mut out = Vec::new();
    write_failure(&mut out, 200, "nope", true);
    for cut in 0..out.len() {
        assert_eq!(parse_response(&out[..cut]), Ok(None), "cut at {cut}");
    }
}
