//! Requests to the admin API, up to four in a row (split at 0xff), each with the
//! right token or without it: answering never panics, every answer is whole (its
//! Content-Length is its body's, the body is JSON), and a request without the token
//! changes nothing.
#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use shoal_common::{AccessControl, AccessList, AccessListMode, ClientRules};
use shoal_private::{KeyDigest, Registry};
use shoal_process::{AdminApi, AdminTarget};

const TOKEN: &str = "0123456789abcdef0123456789abcdef";

fuzz_target!(|data: &[u8]| {
    let hash = "aa".repeat(20);
    let registry = Arc::new(
        Registry::parse(
            "17 6f0d1b2c3d4e5f60718293a4b5c6d7e8\n",
            &format!("{hash} 1001\n"),
        )
        .unwrap(),
    );
    let list = Arc::new(AccessControl::with_list(
        AccessListMode::Allow,
        AccessList::parse(&hash).unwrap(),
    ));
    let targets = vec![AdminTarget {
        protocol: "udp",
        access: list.clone(),
        clients: Arc::new(ClientRules::default()),
        registry: Some(registry.clone()),
        accounts: None,
        interval: Some(Arc::new(shoal_worker::AnnounceInterval::new(
            shoal_worker::IntervalSettings::adaptive(1800, 10_800),
        ))),
    }];
    let mut api = AdminApi::new(KeyDigest::of_secret(TOKEN.as_bytes()), targets);
    for request in data.split(|&b| b == 0xff).take(4) {
        let Some((&flags, request)) = request.split_first() else {
            continue;
        };
        // The head ends at the first blank line, or the request is all head.
        let end = request
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map_or(request.len(), |at| at + 4);
        let (head, body) = request.split_at(end);
        let mut head = head.to_vec();
        let authorized = flags & 1 == 1;
        if authorized && let Some(line_end) = head.iter().position(|&b| b == b'\n') {
            let header = format!("Authorization: Bearer {TOKEN}\r\n");
            head.splice(line_end + 1..line_end + 1, header.bytes());
        }
        let before = (registry.counts(), list.len());
        let answer = api.respond(&head, body);
        let text = String::from_utf8(answer).expect("answers are UTF-8");
        assert!(text.starts_with("HTTP/1.1 "), "{text}");
        let (head, json) = text.split_once("\r\n\r\n").expect("a whole head");
        let length: usize = head
            .lines()
            .find_map(|line| line.strip_prefix("Content-Length: "))
            .expect("a length")
            .parse()
            .unwrap();
        assert_eq!(length, json.len());
        serde_json::from_str::<serde_json::Value>(json).expect("a JSON body");
        if text.starts_with("HTTP/1.1 401") {
            assert_eq!(before, (registry.counts(), list.len()), "unchanged");
        }
        assert!(list.len() >= 1, "an allow list is never emptied");
    }
});
