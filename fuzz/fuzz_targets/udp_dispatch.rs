//! Any datagrams from a few clients (see `shoal_udp`'s dispatch rig for the record
//! format): the socket worker's dispatch, the shards and the scrape merging never
//! panic, every reply parses and goes to a client that asked.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| shoal_udp::fuzzing::dispatch(data));
