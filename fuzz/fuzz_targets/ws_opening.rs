//! Any bytes: reading a WebSocket opening request never panics; a complete one never
//! claims more bytes than it was given, and every answer is a whole HTTP response.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_ws_protocol::opening::{OpeningLimits, parse_opening};

fuzz_target!(|data: &[u8]| {
    let limits = OpeningLimits {
        max_size: 4096,
        health_check_path: "/health",
    };
    match parse_opening(data, &limits) {
        Ok(Some(opened)) => {
            assert!(opened.len <= data.len());
            assert!(opened.response.starts_with(b"HTTP/1.1 "));
            assert!(opened.response.windows(4).any(|w| w == b"\r\n\r\n"));
        }
        Ok(None) => assert!(data.len() < limits.max_size),
        Err(refusal) => {
            assert!((400..600).contains(&refusal.status));
            assert!(refusal.response().starts_with(b"HTTP/1.1 "));
        }
    }
});
