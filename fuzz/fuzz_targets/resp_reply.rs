//! Any bytes from a Redis store: the RESP2 parser never panics, never allocates what a
//! reply only claims, and measuring a reply agrees with parsing it
//! (`shoal_cluster::fuzzing::resp_reply`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    shoal_cluster::fuzzing::resp_reply(data);
});
