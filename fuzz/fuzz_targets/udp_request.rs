//! Any bytes: parsing never panics, and an accepted request re-encodes to the same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_udp_protocol::Request;

fuzz_target!(|data: &[u8]| {
    if let Ok(request) = Request::parse(data) {
        let mut again = Vec::new();
        request.write(&mut again);
        match request {
            // A connect request may carry ignored trailing bytes.
            Request::Connect(_) => assert_eq!(again[..], data[..16]),
            _ => assert_eq!(again, data),
        }
        if let Request::Announce(announce) = request {
            let _ = announce.options.url_data_joined();
        }
    }
});
