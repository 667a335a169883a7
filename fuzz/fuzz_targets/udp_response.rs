//! Any bytes: response parsing never panics, and what parses re-encodes to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_udp_protocol::{PeerFamily, Response};

fuzz_target!(|data: &[u8]| {
    for family in [PeerFamily::V4, PeerFamily::V6] {
        if let Ok(response) = Response::parse(data, family) {
            let mut again = Vec::new();
            response.write(&mut again);
            if let Response::Connect(_) = response {
                assert_eq!(again[..], data[..16]);
            } else if let Response::Error(_) = response {
                // Messages are decoded lossily; only valid UTF-8 survives unchanged.
                if std::str::from_utf8(&data[8..]).is_ok() {
                    assert_eq!(again, data);
                }
            } else {
                assert_eq!(again, data);
            }
        }
    }
});
