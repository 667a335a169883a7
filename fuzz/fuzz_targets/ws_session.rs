//! Any bytes, split into any reads, from a client of an upgraded WebTorrent connection
//! (see `shoal_ws`'s session rig for the format), with swarm workers that answer at
//! once: the session never panics or loops, and every frame it writes is a whole,
//! final, unmasked server frame.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| shoal_ws::fuzzing::ws_session(data));
