//! Any bytes as another WebTorrent node's peer changes and as the offers and answers it
//! relayed (see `shoal_ws`'s `swarm::fuzz_cluster`): applying them never panics, keeps
//! the capacity limits and true counts, and delivers only to this node's connections.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| shoal_ws::fuzzing::ws_cluster(data));
