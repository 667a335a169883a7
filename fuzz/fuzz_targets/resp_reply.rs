//! Any bytes from a Redis store: the RESP2 parser never panics, never allocates what a
//! reply only claims, and measuring a reply agrees with parsing it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_cluster::resp::{Parsed, complete_length, parse};

fuzz_target!(|data: &[u8]| {
    let measured = complete_length(data);
    match parse(data) {
        Ok(Parsed::Reply(_, used)) => {
            assert_eq!(measured, Ok(Some(used)));
            assert!(used <= data.len());
        }
        Ok(Parsed::Incomplete) => assert_eq!(measured, Ok(None)),
        Err(_) => assert!(measured.is_err()),
    }
});
