//! Any bytes: parsing an HTTP tracker request never panics, and a parsed request never
//! claims more bytes than it was given; in private mode (the first byte odd) neither,
//! and a key is found only where the forms put one.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_http_protocol::request::ProxyHeader;
use shoal_http_protocol::{ParseLimits, parse_request};
use shoal_private::KeyPlaces;

fuzz_target!(|data: &[u8]| {
    let limits = ParseLimits {
        announce_path: "/announce",
        scrape_path: "/scrape",
        max_request_len: 4096,
        max_headers: 32,
        max_scrape_torrents: 100,
        proxy_header: Some(ProxyHeader {
            name: "X-Forwarded-For",
            use_last: true,
        }),
        private: data.first().is_some_and(|b| b & 1 == 1).then_some(KeyPlaces {
            paths: &["/announce", "/scrape"],
            parameter: "passkey",
            bare: false,
        }),
    };
    if let Ok(Some(parsed)) = parse_request(data, &limits) {
        assert!(parsed.len <= data.len());
    }
});
