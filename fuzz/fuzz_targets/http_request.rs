//! Any bytes: parsing an HTTP tracker request never panics, and a parsed request never
//! claims more bytes than it was given.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_http_protocol::request::ProxyHeader;
use shoal_http_protocol::{ParseLimits, parse_request};

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
    };
    if let Ok(Some(parsed)) = parse_request(data, &limits) {
        assert!(parsed.len <= data.len());
    }
});
