//! Any bytes, split into any reads, from a client of the HTTP session (see
//! `shoal_http`'s session rig for the format), with swarm workers that answer, refuse
//! or are busy: the session never panics or loops, and every response it writes is
//! one whole HTTP response whose Content-Length is its body's length.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| shoal_http::fuzzing::http_session(data));
