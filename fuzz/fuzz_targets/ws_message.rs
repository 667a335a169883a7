//! Any bytes: reading a WebTorrent message (client or tracker side) never panics, and
//! an accepted client message written back reads the same again.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_ws_protocol::{parse_client_message, parse_server_message, write_client_message};

fuzz_target!(|data: &[u8]| {
    let _ = parse_server_message(data);
    if let Ok(message) = parse_client_message(data) {
        let mut once = Vec::new();
        write_client_message(&message, &mut once);
        let again = parse_client_message(&once).expect("our own output parses");
        let mut twice = Vec::new();
        write_client_message(&again, &mut twice);
        assert_eq!(once, twice);
    }
});
